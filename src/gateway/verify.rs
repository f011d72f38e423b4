//! Verifying a token at the gateway: every rule of the task's check but the session binding
//! (the token's own `sessionId` is what the gateway routes by), behind one small interface.
//! The gateway holds public keys only: it checks tokens, it cannot mint one. The live view's
//! credential (`/viewer`, `/viewer/ws`) is checked the same way by its own rules
//! ([`wallcrawler_contract::viewer`]): a session token is refused there, and a viewer
//! credential on the CDP routes. A credential presented again skips the signature check
//! ([`crate::auth::token_cache`]); every other rule is judged at every check.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use wallcrawler_contract::token::{self, Signed, Verified};
use wallcrawler_contract::viewer::{self, ViewerVerified};
use wallcrawler_contract::{TokenError, VerifyingKey};

use crate::auth::token_cache::{Expires, TokenCache};
use crate::auth::{AuthError, KeySource, Presented, unix_now};

/// Checks one token for whichever session it names.
pub trait TokenVerifier: Send + Sync + 'static {
    /// Whether the verifier can check tokens now (its key is loaded): `/health`.
    fn ready(&self) -> bool;

    /// Every rule but the session binding; the token's session in the result.
    fn verify<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Verified, AuthError>>;

    /// A live-view credential, by every rule but the session binding; its session in the
    /// result.
    fn verify_viewer<'a>(
        &'a self,
        credential: &'a str,
    ) -> BoxFuture<'a, Result<ViewerVerified, AuthError>>;
}

/// A contract check of a credential whose signature was verified, for whichever session it
/// names: (signed, keys, project, leeway seconds, now).
type AnySession<T> = fn(&Signed, &[VerifyingKey], Option<&str>, u64, u64) -> Result<T, TokenError>;

/// EdDSA with the control plane's public keys (literal, or the Secrets Manager cache with its
/// refresh-on-miss), as the task checks it.
pub struct SharedKeyVerifier {
    keys: Arc<dyn KeySource>,
    leeway_seconds: u64,
    /// Tokens and viewer credentials whose signature was verified.
    verified: Arc<TokenCache>,
}

impl SharedKeyVerifier {
    /// Checks tokens against `keys`, allowing `leeway_seconds` of clock skew.
    pub fn new(keys: Arc<dyn KeySource>, leeway_seconds: u64) -> Self {
        Self {
            keys,
            leeway_seconds,
            verified: Arc::default(),
        }
    }

    /// Remembers verified tokens in `cache` instead of a cache of its own.
    pub fn with_token_cache(mut self, cache: Arc<TokenCache>) -> Self {
        self.verified = cache;
        self
    }

    /// `rules` as of `now`, after the signature check with the loaded keys (skipped for a
    /// credential the cache remembers); on a signature miss (a key rotated a moment ago) the
    /// keys are refreshed (rate-limited by the source) and it is tried once more.
    async fn check_by<T: Expires>(
        &self,
        token: &str,
        rules: AnySession<T>,
        now: u64,
    ) -> Result<T, AuthError> {
        let leeway = self.leeway_seconds;
        self.verified
            .check(token, &*self.keys, |signed, keys| {
                rules(signed, keys, None, leeway, now)
            })
            .await
    }
}

impl TokenVerifier for SharedKeyVerifier {
    fn ready(&self) -> bool {
        self.keys.keys().is_some()
    }

    fn verify<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Verified, AuthError>> {
        Box::pin(self.check_by(token, token::check_signed_any_session, unix_now()))
    }

    fn verify_viewer<'a>(
        &'a self,
        credential: &'a str,
    ) -> BoxFuture<'a, Result<ViewerVerified, AuthError>> {
        Box::pin(self.check_by(credential, viewer::check_signed_any_session, unix_now()))
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

    fn viewer_credential(session: &str, key: &str) -> String {
        use wallcrawler_contract::viewer::{Mode, ViewerClaims};
        ViewerClaims::new(session, "p", Mode::View, unix_now(), 600).mint(&signing_key(key))
    }

    #[tokio::test]
    async fn a_viewer_credential_is_verified_for_its_session_and_only_on_viewer_routes() {
        let v = verifier();
        let ok = v
            .verify_viewer(&viewer_credential("sess_b", "k"))
            .await
            .unwrap();
        assert_eq!(ok.session_id, "sess_b");
        // Each credential on the other's routes: refused by its audience.
        assert_eq!(
            v.verify_viewer(&token("sess_b", "k")).await,
            Err(AuthError::Token(TokenError::Audience))
        );
        assert_eq!(
            v.verify(&viewer_credential("sess_b", "k")).await,
            Err(AuthError::Token(TokenError::Audience))
        );
        assert_eq!(
            v.verify_viewer(&viewer_credential("sess_b", "other")).await,
            Err(AuthError::Token(TokenError::Signature))
        );
    }

    /// Starts with key `old` loaded; a miss brings `k`.
    struct Rotating(std::sync::atomic::AtomicUsize);

    impl KeySource for Rotating {
        fn keys(&self) -> Option<crate::auth::KeySet> {
            Some(Arc::new(vec![public_key("old")]))
        }
        fn refresh_after_miss(
            &self,
        ) -> std::pin::Pin<Box<dyn Future<Output = Option<crate::auth::KeySet>> + Send + '_>>
        {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Box::pin(async { Some(Arc::new(vec![public_key("k")])) })
        }
    }

    #[tokio::test]
    async fn a_viewer_credential_under_a_new_key_refreshes_the_keys_once() {
        let src = Arc::new(Rotating(Default::default()));
        let v = SharedKeyVerifier::new(src.clone(), 30);
        let got = v.verify_viewer(&viewer_credential("sess_a", "k")).await;
        assert_eq!(got.unwrap().session_id, "sess_a");
        assert_eq!(src.0.load(std::sync::atomic::Ordering::SeqCst), 1);
        // A refusal by another rule than the signature asks for no refresh.
        assert_eq!(
            v.verify_viewer(&token("sess_a", "old")).await,
            Err(AuthError::Token(TokenError::Audience))
        );
        assert_eq!(src.0.load(std::sync::atomic::Ordering::SeqCst), 1);
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

    #[tokio::test]
    async fn a_credential_presented_again_skips_the_signature_check_but_no_rule() {
        let cache = Arc::new(TokenCache::default());
        let v = verifier().with_token_cache(cache.clone());
        let t = token("sess_a", "k");
        assert_eq!(v.verify(&t).await.unwrap().session_id, "sess_a");
        assert_eq!(v.verify(&t).await.unwrap().session_id, "sess_a");
        assert_eq!(cache.full_checks(), 1, "answered from the cache");
        let c = viewer_credential("sess_b", "k");
        assert_eq!(v.verify_viewer(&c).await.unwrap().session_id, "sess_b");
        assert_eq!(v.verify_viewer(&c).await.unwrap().session_id, "sess_b");
        assert_eq!(cache.full_checks(), 2);
        // Each on the other's routes: refused by its audience, on a hit.
        assert_eq!(
            v.verify(&c).await,
            Err(AuthError::Token(TokenError::Audience))
        );
        assert_eq!(
            v.verify_viewer(&t).await,
            Err(AuthError::Token(TokenError::Audience))
        );
        assert_eq!(cache.full_checks(), 2);
        // Past exp and the leeway: refused though remembered.
        let now = unix_now();
        assert_eq!(
            v.check_by(&t, token::check_signed_any_session, now + 600 + 30)
                .await,
            Err(AuthError::Token(TokenError::Expired))
        );
        assert!(cache.contains(&t));
        assert_eq!(cache.full_checks(), 2);
    }

    #[tokio::test]
    async fn a_forged_or_rotated_out_credential_is_refused_and_not_remembered() {
        use crate::auth::token_cache::{SwappableKeys, tampered};
        let cache = Arc::new(TokenCache::default());
        let keys = Arc::new(SwappableKeys::new(&["k"]));
        let v = SharedKeyVerifier::new(keys.clone(), 30).with_token_cache(cache.clone());
        let t = token("sess_a", "k");
        v.verify(&t).await.unwrap();
        let forged = tampered(&t);
        assert_eq!(
            v.verify(&forged).await,
            Err(AuthError::Token(TokenError::Signature))
        );
        assert!(!cache.contains(&forged));
        assert_eq!(cache.full_checks(), 2);
        keys.rotate(&["next"]);
        assert_eq!(
            v.verify(&t).await,
            Err(AuthError::Token(TokenError::Signature))
        );
        assert!(!cache.contains(&t));
        assert!(v.verify(&token("sess_a", "next")).await.is_ok());
    }
}
