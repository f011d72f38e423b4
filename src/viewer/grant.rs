//! Who may watch: the viewer credential read from a viewer route's query (`?t=`; an iframe's
//! `src` cannot set headers), and what it grants.
//!
//! The credential is the contract's live-view credential ([`wallcrawler_contract::viewer`]:
//! audience `wallcrawler-viewer`, minted by the control plane's `/debug` or printed by `local`),
//! checked against the session this controller serves by the proxy's [`Authenticator`]. Its
//! claims alone say what it grants (`mode`, `page`): nothing in the query can widen them, and a
//! session token is refused here as a viewer credential is on the CDP routes.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::auth::{AuthError, Authenticator};
use wallcrawler_contract::TokenError;
pub use wallcrawler_contract::viewer::Mode;
use wallcrawler_contract::viewer::ViewerVerified;

/// The query parameter that carries the viewer credential.
pub const CREDENTIAL_PARAM: &str = "t";

/// A checked viewer credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewerGrant {
    /// What the viewer may do.
    pub mode: Mode,
    /// The one page it may watch (`None`: any page, with tabs).
    pub page: Option<String>,
    /// When the credential expires (its `exp`): a socket it opened is closed then.
    pub expires: SystemTime,
}

impl ViewerGrant {
    /// What a verified credential grants.
    pub fn of(v: ViewerVerified) -> Self {
        // `exp` is finite and within the longest session of now (checked): never out of range.
        let expires = Duration::try_from_secs_f64(v.exp.max(0.0))
            .ok()
            .and_then(|d| UNIX_EPOCH.checked_add(d))
            .unwrap_or(UNIX_EPOCH);
        Self {
            mode: v.mode,
            page: v.page,
            expires,
        }
    }

    /// When the credential expires, on the monotonic clock (now if it has).
    pub fn expires_at(&self) -> tokio::time::Instant {
        let left = self
            .expires
            .duration_since(SystemTime::now())
            .unwrap_or_default();
        tokio::time::Instant::now() + left
    }
}

/// The credential in a viewer route's query: `t`, given exactly once.
pub fn credential(query: Option<&str>) -> Result<String, TokenError> {
    let mut found = None;
    for (k, v) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        if k == CREDENTIAL_PARAM && found.replace(v.into_owned()).is_some() {
            return Err(TokenError::Ambiguous);
        }
    }
    found.ok_or(TokenError::Missing)
}

/// Checks the credential in a viewer route's `query` for the bound session.
pub async fn check(query: Option<&str>, auth: &Authenticator) -> Result<ViewerGrant, AuthError> {
    let verified = auth.check_viewer(&credential(query)?).await?;
    Ok(ViewerGrant::of(verified))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_credential_is_given_exactly_once() {
        assert_eq!(credential(Some("t=a&t=b")), Err(TokenError::Ambiguous));
        assert_eq!(credential(Some("mode=view")), Err(TokenError::Missing));
        assert_eq!(credential(None), Err(TokenError::Missing));
        assert_eq!(
            credential(Some("t=a%2Eb&page=P1&fullscreen=1")).as_deref(),
            Ok("a.b")
        );
    }
}
