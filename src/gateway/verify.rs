//! Verifying a token at the gateway: every rule of the task's check but the session binding
//! (the token's own `sessionId` is what the gateway routes by), behind one small interface.
//! The gateway holds public keys only: it checks tokens, it cannot mint one.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use wallcrawler_contract::token::{self, Verified};
use wallcrawler_contract::{TokenError, VerifyingKey};

use crate::auth::{AuthError, KeySource, Presented, unix_now};

/// Checks one token for whichever session it names.
pub trait TokenVerifier: Send + Sync + 'static {
    /// Whether the verifier can check tokens now (its key is loaded): `/health`.
    fn ready(&self) -> bool;

    /// Every rule but the session binding; the token's session in the result.
    fn verify<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Verified, AuthError>>;
}

/// EdDSA with the control plane's public keys (literal, or the Secrets Manager cache with its
/// refresh-on-miss), as the task checks it.
pub struct SharedKeyVerifier {
    keys: Arc<dyn KeySource>,
    leeway_seconds: u64,
}

impl SharedKeyVerifier {
    /// Checks tokens against `keys`, allowing `leeway_seconds` of clock skew.
    pub fn new(keys: Arc<dyn KeySource>, leeway_seconds: u64) -> Self {
        Self {
            keys,
            leeway_seconds,
        }
    }

    fn check(&self, token: &str, keys: &[VerifyingKey]) -> Result<Verified, TokenError> {
        token::validate_any_session(token, keys, None, self.leeway_seconds, unix_now())
    }
}

impl TokenVerifier for SharedKeyVerifier {
    fn ready(&self) -> bool {
        self.keys.keys().is_some()
    }

    fn verify<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Verified, AuthError>> {
        Box::pin(async move {
            let keys = self.keys.keys().ok_or(AuthError::KeysUnavailable)?;
            match self.check(token, &keys) {
                // A key rotated a moment ago: refresh (rate-limited by the source), check again.
                Err(TokenError::Signature) => match self.keys.refresh_after_miss().await {
                    Some(fresh) => Ok(self.check(token, &fresh)?),
                    None => Err(AuthError::Token(TokenError::Signature)),
                },
                other => Ok(other?),
            }
        })
    }
}

/// Checks every presented token (query and header: both must pass, as on a task) and that
/// they name one session; the verified claims of the last.
pub async fn verify_presented(
    v: &dyn TokenVerifier,
    presented: &Presented,
) -> Result<Verified, AuthError> {
    let mut verified: Option<Verified> = None;
    for t in [&presented.query, &presented.bearer].into_iter().flatten() {
        let this = v.verify(t).await?;
        if verified
            .as_ref()
            .is_some_and(|prev| prev.session_id != this.session_id)
        {
            return Err(AuthError::Token(TokenError::Session));
        }
        verified = Some(this);
    }
    verified.ok_or(AuthError::Token(TokenError::Missing))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::StaticKeys;
    use wallcrawler_contract::Claims;
    use wallcrawler_testkit::keys::{public_key, signing_key};

    fn verifier() -> SharedKeyVerifier {
        SharedKeyVerifier::new(Arc::new(StaticKeys::new(public_key("k"))), 30)
    }

    fn token(session: &str, key: &str) -> String {
        Claims::new(session, "p", unix_now(), 600).mint(&signing_key(key))
    }

    #[tokio::test]
    async fn any_session_is_verified_and_named() {
        let v = verifier();
        let ok = v.verify(&token("sess_a", "k")).await.unwrap();
        assert_eq!(ok.session_id, "sess_a");
        assert_eq!(
            v.verify(&token("sess_a", "other")).await,
            Err(AuthError::Token(TokenError::Signature))
        );
        let expired = Claims::new("sess_a", "p", unix_now() - 7200, 60).mint(&signing_key("k"));
        assert_eq!(
            v.verify(&expired).await,
            Err(AuthError::Token(TokenError::Expired))
        );
    }

    #[tokio::test]
    async fn both_sources_must_pass_and_name_one_session() {
        let v = verifier();
        let a = token("sess_a", "k");
        let both = Presented {
            query: Some(a.clone()),
            bearer: Some(a.clone()),
        };
        assert_eq!(
            verify_presented(&v, &both).await.unwrap().session_id,
            "sess_a"
        );
        let two_sessions = Presented {
            query: Some(a.clone()),
            bearer: Some(token("sess_b", "k")),
        };
        assert_eq!(
            verify_presented(&v, &two_sessions).await,
            Err(AuthError::Token(TokenError::Session))
        );
        let one_bad = Presented {
            query: Some(a),
            bearer: Some(token("sess_a", "wrong")),
        };
        assert_eq!(
            verify_presented(&v, &one_bad).await,
            Err(AuthError::Token(TokenError::Signature))
        );
    }
}
