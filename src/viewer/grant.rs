//! Who may watch: the viewer credential read from a viewer route's query (`?t=`; an iframe's
//! `src` cannot set headers), and what it grants.
//!
//! TEMP (until the viewer credential, audience `wallcrawler-viewer`, lands in the contract):
//! `t` is the session's own CDP token, checked by the proxy's [`Authenticator`] exactly as on
//! a CDP route. Its holder already controls the whole browser over CDP, so it grants `control`;
//! `mode=view` in the query only narrows that to `view`, and `page=` to one page. The real
//! credential's claims (`mode`, `page`) replace these query parameters, and a session token is
//! then refused here. Only [`check`] changes.

use crate::auth::{AuthError, Authenticator};
use wallcrawler_contract::TokenError;

/// The query parameter that carries the viewer credential.
pub const CREDENTIAL_PARAM: &str = "t";

/// What a viewer may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Frames only: the server drops every input the viewer sends.
    View,
    /// Frames, and its mouse, wheel and keyboard reach the page.
    Control,
}

/// A checked viewer credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewerGrant {
    /// What the viewer may do.
    pub mode: Mode,
    /// The one page it may watch (`None`: any page, with tabs).
    pub page: Option<String>,
}

/// The query's parameters a viewer route reads (each at most once).
#[derive(Debug, Default, PartialEq, Eq)]
struct ViewerQuery {
    credential: Option<String>,
    mode: Option<String>,
    page: Option<String>,
}

fn read_query(query: Option<&str>) -> Result<ViewerQuery, TokenError> {
    let mut q = ViewerQuery::default();
    for (k, v) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        let slot = match k.as_ref() {
            CREDENTIAL_PARAM => &mut q.credential,
            "mode" => &mut q.mode,
            "page" => &mut q.page,
            _ => continue,
        };
        if slot.replace(v.into_owned()).is_some() {
            return Err(TokenError::Ambiguous);
        }
    }
    Ok(q)
}

/// Checks the credential in a viewer route's `query` (TEMP: see the module's notes).
pub async fn check(query: Option<&str>, auth: &Authenticator) -> Result<ViewerGrant, AuthError> {
    let q = read_query(query)?;
    let token = q.credential.ok_or(TokenError::Missing)?;
    auth.check_one(&token).await?;
    let mode = match q.mode.as_deref() {
        None | Some("control") => Mode::Control,
        Some("view") => Mode::View,
        Some(_) => return Err(TokenError::Malformed.into()),
    };
    let page = match q.page {
        Some(p) if crate::upstream::is_target_id(&p) => Some(p),
        Some(_) => return Err(TokenError::Malformed.into()),
        None => None,
    };
    Ok(ViewerGrant { mode, page })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parameter_given_twice_is_ambiguous() {
        assert_eq!(read_query(Some("t=a&t=b")), Err(TokenError::Ambiguous));
        assert_eq!(
            read_query(Some("t=a&mode=view&mode=control")),
            Err(TokenError::Ambiguous)
        );
        let q = read_query(Some("t=a%2Eb&page=P1&fullscreen=1")).unwrap();
        assert_eq!(q.credential.as_deref(), Some("a.b"));
        assert_eq!(q.page.as_deref(), Some("P1"));
    }
}
