//! Who may connect: token extraction from a request and validation against the public keys.
//!
//! Tokens come from the `signingKey` query parameter and from `Authorization: Bearer`; when both
//! are present both must be valid. The keys come from a [`KeySource`], which may be a literal
//! public key or the Secrets Manager cache of the public key secret: the controller can check
//! tokens, never mint one. A token presented again skips the signature check
//! ([`token_cache`]); every other rule is judged at every check.

pub mod token_cache;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use wallcrawler_contract::token::{self, Signed, Validation, Verified};
use wallcrawler_contract::viewer::{self, ViewerVerified};
use wallcrawler_contract::{TokenError, VerifyingKey};

use http::HeaderMap;

use token_cache::{Expires, TokenCache};

/// The public keys currently accepted (the shared key cache's set).
pub type KeySet = wallcrawler_aws::keys::KeySet<VerifyingKey>;

/// Where the public keys come from.
pub trait KeySource: Send + Sync + 'static {
    /// The keys accepted now, or `None` while none has been loaded.
    fn keys(&self) -> Option<KeySet>;

    /// Called when a token's signature matched no key: may refresh (rate-limited) and return
    /// the new set to check again; `None` means "nothing new".
    fn refresh_after_miss(&self) -> Pin<Box<dyn Future<Output = Option<KeySet>> + Send + '_>> {
        Box::pin(async { None })
    }
}

/// A fixed key (development, tests, local mode).
pub struct StaticKeys(KeySet);

impl StaticKeys {
    /// A source that always answers with the one key `key`.
    pub fn new(key: VerifyingKey) -> Self {
        Self(Arc::new(vec![key]))
    }
}

impl KeySource for StaticKeys {
    fn keys(&self) -> Option<KeySet> {
        Some(self.0.clone())
    }
}

/// Why a request was not authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("{0}")]
    /// The token was refused by the contract's rules (see [`TokenError`]).
    Token(#[from] TokenError),
    #[error("no public key is loaded yet")]
    /// The key source has no public key loaded yet ([`KeySource::keys`] answered `None`).
    KeysUnavailable,
    /// A pool controller not claimed by a session yet: no token can be for it.
    #[error("this browser serves no session yet")]
    Unclaimed,
}

/// The credentials a request presented.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Presented {
    /// From `?signingKey=`.
    pub query: Option<String>,
    /// From `Authorization: Bearer`.
    pub bearer: Option<String>,
}

/// The query parameter that carries a token.
pub const TOKEN_PARAM: &str = "signingKey";

/// Every value of the `signingKey` query parameter, percent-decoded.
pub fn token_params(query: &str) -> Vec<String> {
    form_urlencoded::parse(query.as_bytes())
        .filter(|(k, _)| k == TOKEN_PARAM)
        .map(|(_, v)| v.into_owned())
        .collect()
}

/// Extracts credentials from a request's query (`None` for routes whose query is not ours,
/// such as `/json/new`) and headers.
pub fn extract(query: Option<&str>, headers: &HeaderMap) -> Result<Presented, TokenError> {
    let query = match query.map(token_params) {
        None => None,
        Some(mut values) => match values.len() {
            0 => None,
            1 => values.pop(),
            _ => return Err(TokenError::Ambiguous),
        },
    };
    let mut auth = headers.get_all(::http::header::AUTHORIZATION).into_iter();
    let bearer = match (auth.next(), auth.next()) {
        (None, _) => None,
        (Some(_), Some(_)) => return Err(TokenError::Ambiguous),
        (Some(v), None) => {
            let v = std::str::from_utf8(v.as_bytes())
                .map_err(|_| TokenError::Malformed)?
                .trim();
            let (scheme, rest) = v.split_once(' ').ok_or(TokenError::Malformed)?;
            if !scheme.eq_ignore_ascii_case("bearer") {
                return Err(TokenError::Malformed);
            }
            Some(rest.trim().to_owned())
        }
    };
    if query.is_none() && bearer.is_none() {
        return Err(TokenError::Missing);
    }
    Ok(Presented { query, bearer })
}

/// The session (and project) tokens must name.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Binding {
    session_id: String,
    project_id: Option<String>,
}

/// Checks tokens for one session. A pool controller's authenticator starts unbound (every
/// request is refused as not ready) and is bound once, when a claim names its session.
pub struct Authenticator {
    keys: Arc<dyn KeySource>,
    binding: OnceLock<Binding>,
    leeway_seconds: u64,
    /// Tokens (and viewer credentials) whose signature was verified.
    verified: Arc<TokenCache>,
}

/// A claim check of a credential whose signature was verified: (signed, keys, validation).
type Rules<T> = fn(&Signed, &[VerifyingKey], &Validation<'_>) -> Result<T, TokenError>;

impl Authenticator {
    /// An authenticator already bound to `session_id` (and `project_id` when given): tokens are
    /// checked against `keys` with `leeway_seconds` of allowed clock skew.
    pub fn new(
        keys: Arc<dyn KeySource>,
        session_id: String,
        project_id: Option<String>,
        leeway_seconds: u64,
    ) -> Self {
        let a = Self::unbound(keys, leeway_seconds);
        a.bind(session_id, project_id);
        a
    }

    /// An authenticator that refuses everything until [`Self::bind`].
    pub fn unbound(keys: Arc<dyn KeySource>, leeway_seconds: u64) -> Self {
        Self {
            keys,
            binding: OnceLock::new(),
            leeway_seconds,
            verified: Arc::default(),
        }
    }

    /// Remembers verified tokens in `cache` (shared with other checkers) instead of a cache
    /// of its own.
    pub fn with_token_cache(mut self, cache: Arc<TokenCache>) -> Self {
        self.verified = cache;
        self
    }

    /// Binds to a session, once; false (and nothing changed) when already bound.
    pub fn bind(&self, session_id: String, project_id: Option<String>) -> bool {
        self.binding
            .set(Binding {
                session_id,
                project_id,
            })
            .is_ok()
    }

    /// The bound session's id ("" while unbound).
    pub fn session_id(&self) -> &str {
        self.binding.get().map_or("", |b| b.session_id.as_str())
    }

    /// Whether a key is loaded (part of readiness).
    pub fn keys_loaded(&self) -> bool {
        self.keys.keys().is_some()
    }

    /// Validates every presented token; all must pass.
    pub async fn check(&self, presented: &Presented) -> Result<Verified, AuthError> {
        let mut verified = None;
        for t in [&presented.query, &presented.bearer].into_iter().flatten() {
            verified = Some(self.check_one(t).await?);
        }
        verified.ok_or(AuthError::Token(TokenError::Missing))
    }

    /// Validates one session token, refreshing the keys once if its signature matched none.
    pub async fn check_one(&self, token: &str) -> Result<Verified, AuthError> {
        self.check_by(token, token::check_signed, unix_now()).await
    }

    /// Validates one live-view credential (audience `wallcrawler-viewer`) for the bound
    /// session, with the same key refresh: a session token is refused here, as a viewer
    /// credential is by [`Self::check_one`].
    pub async fn check_viewer(&self, credential: &str) -> Result<ViewerVerified, AuthError> {
        self.check_by(credential, viewer::check_signed, unix_now())
            .await
    }

    /// `rules` as of `now` for the bound session, after the signature check (skipped for a
    /// credential the cache remembers).
    async fn check_by<T: Expires>(
        &self,
        token: &str,
        rules: Rules<T>,
        now: u64,
    ) -> Result<T, AuthError> {
        let binding = self.binding.get().ok_or(AuthError::Unclaimed)?;
        let v = Validation {
            session_id: &binding.session_id,
            project_id: binding.project_id.as_deref(),
            leeway_seconds: self.leeway_seconds,
            now,
        };
        self.verified
            .check(token, &*self.keys, |signed, keys| rules(signed, keys, &v))
            .await
    }
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edge::http::{RequestHead, parse_request_head};
    use wallcrawler_contract::Claims;
    use wallcrawler_testkit::keys::{public_key, signing_key};

    fn head(raw: &str) -> RequestHead {
        parse_request_head(raw.as_bytes(), 65536)
            .unwrap()
            .unwrap()
            .0
    }

    /// The credentials of a raw request, as the proxy extracts them.
    fn extract_from(head: &RequestHead, use_query: bool) -> Result<Presented, TokenError> {
        extract(head.query().filter(|_| use_query), &head.headers)
    }

    fn auth() -> Authenticator {
        Authenticator::new(
            Arc::new(StaticKeys::new(public_key("k"))),
            "sess_1".into(),
            None,
            30,
        )
    }

    fn token(session: &str) -> String {
        Claims::new(session, "p", unix_now(), 600).mint(&signing_key("k"))
    }

    #[test]
    fn extraction_rules() {
        assert_eq!(
            extract_from(&head("GET / HTTP/1.1\r\n\r\n"), true),
            Err(TokenError::Missing)
        );
        assert_eq!(
            extract_from(&head("GET /?signingKey=a HTTP/1.1\r\n\r\n"), true).unwrap(),
            Presented {
                query: Some("a".into()),
                bearer: None
            }
        );
        assert_eq!(
            extract_from(&head("GET /?signingKey=a HTTP/1.1\r\n\r\n"), false),
            Err(TokenError::Missing)
        );
        assert_eq!(
            extract_from(
                &head("GET /?signingKey=a&signingKey=b HTTP/1.1\r\n\r\n"),
                true
            ),
            Err(TokenError::Ambiguous)
        );
        assert_eq!(
            extract_from(
                &head("GET / HTTP/1.1\r\nAuthorization: bearer xyz\r\n\r\n"),
                true
            )
            .unwrap(),
            Presented {
                query: None,
                bearer: Some("xyz".into())
            }
        );
        assert_eq!(
            extract_from(
                &head("GET / HTTP/1.1\r\nAuthorization: Basic xyz\r\n\r\n"),
                true
            ),
            Err(TokenError::Malformed)
        );
        assert_eq!(
            extract_from(
                &head(
                    "GET / HTTP/1.1\r\nAuthorization: Bearer a\r\nAuthorization: Bearer b\r\n\r\n"
                ),
                true
            ),
            Err(TokenError::Ambiguous)
        );
    }

    #[tokio::test]
    async fn both_sources_must_be_valid() {
        let a = auth();
        let good = token("sess_1");
        let bad = token("sess_2");
        let both_good = Presented {
            query: Some(good.clone()),
            bearer: Some(good.clone()),
        };
        assert!(a.check(&both_good).await.is_ok());
        let one_bad = Presented {
            query: Some(good.clone()),
            bearer: Some(bad.clone()),
        };
        assert_eq!(
            a.check(&one_bad).await,
            Err(AuthError::Token(TokenError::Session))
        );
        let other_bad = Presented {
            query: Some(bad),
            bearer: Some(good),
        };
        assert_eq!(
            a.check(&other_bad).await,
            Err(AuthError::Token(TokenError::Session))
        );
    }

    struct Rotating {
        fresh: KeySet,
        refreshed: std::sync::atomic::AtomicUsize,
    }

    impl KeySource for Rotating {
        fn keys(&self) -> Option<KeySet> {
            Some(Arc::new(vec![public_key("old")]))
        }
        fn refresh_after_miss(&self) -> Pin<Box<dyn Future<Output = Option<KeySet>> + Send + '_>> {
            self.refreshed
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let fresh = self.fresh.clone();
            Box::pin(async move { Some(fresh) })
        }
    }

    #[tokio::test]
    async fn signature_miss_refreshes_once_and_rechecks() {
        let src = Arc::new(Rotating {
            fresh: Arc::new(vec![public_key("k")]),
            refreshed: Default::default(),
        });
        let a = Authenticator::new(src.clone(), "sess_1".into(), None, 30);
        assert!(a.check_one(&token("sess_1")).await.is_ok());
        assert_eq!(src.refreshed.load(std::sync::atomic::Ordering::SeqCst), 1);
        // An expired token with a good signature does not trigger a refresh.
        let expired = Claims::new("sess_1", "p", unix_now() - 7200, 60).mint(&signing_key("old"));
        assert_eq!(
            a.check_one(&expired).await,
            Err(AuthError::Token(TokenError::Expired))
        );
        assert_eq!(src.refreshed.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    /// An authenticator for `session` over `keys`, remembering verified tokens in `cache`.
    fn cached(keys: Arc<dyn KeySource>, session: &str, cache: &Arc<TokenCache>) -> Authenticator {
        Authenticator::new(keys, session.into(), None, 30).with_token_cache(cache.clone())
    }

    fn viewer_credential(session: &str) -> String {
        use wallcrawler_contract::viewer::{Mode, ViewerClaims};
        ViewerClaims::new(session, "p", Mode::View, unix_now(), 600).mint(&signing_key("k"))
    }

    #[tokio::test]
    async fn a_token_presented_again_skips_the_signature_check() {
        let cache = Arc::new(TokenCache::default());
        let keys = Arc::new(StaticKeys::new(public_key("k")));
        let a = cached(keys, "sess_1", &cache);
        let t = token("sess_1");
        let first = a.check_one(&t).await.unwrap();
        assert_eq!(cache.full_checks(), 1);
        assert!(cache.contains(&t));
        for _ in 0..3 {
            assert_eq!(a.check_one(&t).await.as_ref(), Ok(&first));
        }
        assert_eq!(cache.full_checks(), 1, "answered from the cache");
        // Another token for the same session is its own entry.
        a.check_one(&token("sess_1")).await.unwrap();
        assert_eq!(cache.full_checks(), 2);
        // A viewer credential the same way, and judged by its own rules on a hit: not a
        // session token, however it was remembered.
        let c = viewer_credential("sess_1");
        a.check_viewer(&c).await.unwrap();
        a.check_viewer(&c).await.unwrap();
        assert_eq!(cache.full_checks(), 3);
        assert_eq!(
            a.check_one(&c).await,
            Err(AuthError::Token(TokenError::Audience))
        );
        assert_eq!(
            a.check_viewer(&t).await,
            Err(AuthError::Token(TokenError::Audience))
        );
        assert_eq!(
            cache.full_checks(),
            3,
            "refused on a hit, by the claim rules"
        );
    }

    #[tokio::test]
    async fn a_cached_token_for_one_session_is_refused_for_another() {
        let cache = Arc::new(TokenCache::default());
        let keys: Arc<dyn KeySource> = Arc::new(StaticKeys::new(public_key("k")));
        let a = cached(keys.clone(), "sess_a", &cache);
        let b = cached(keys, "sess_b", &cache);
        let t = token("sess_a");
        a.check_one(&t).await.unwrap();
        assert_eq!(
            b.check_one(&t).await,
            Err(AuthError::Token(TokenError::Session))
        );
        assert_eq!(cache.full_checks(), 1, "a hit, refused by the binding");
        let c = viewer_credential("sess_a");
        a.check_viewer(&c).await.unwrap();
        assert_eq!(
            b.check_viewer(&c).await,
            Err(AuthError::Token(TokenError::Session))
        );
        assert_eq!(cache.full_checks(), 2);
        // And the project binding, on a hit too.
        let bound = Authenticator::new(
            Arc::new(StaticKeys::new(public_key("k"))),
            "sess_a".into(),
            Some("other".into()),
            30,
        )
        .with_token_cache(cache.clone());
        assert_eq!(
            bound.check_one(&t).await,
            Err(AuthError::Token(TokenError::Project))
        );
        assert_eq!(cache.full_checks(), 2);
    }

    #[tokio::test]
    async fn a_cached_token_past_its_exp_is_refused() {
        let cache = Arc::new(TokenCache::default());
        let a = cached(Arc::new(StaticKeys::new(public_key("k"))), "sess_1", &cache);
        let now = unix_now();
        let t = Claims::new("sess_1", "p", now, 60).mint(&signing_key("k"));
        let at = |when| a.check_by(&t, token::check_signed, when);
        assert!(at(now).await.is_ok());
        // Within the leeway (30 s) past exp: still good; past it: expired, though remembered.
        assert!(at(now + 60 + 29).await.is_ok());
        assert_eq!(
            at(now + 60 + 30).await,
            Err(AuthError::Token(TokenError::Expired))
        );
        assert!(cache.contains(&t));
        assert_eq!(
            cache.full_checks(),
            1,
            "refused on a hit, by the expiry rule"
        );
        // The other time rules too: a clock before the token's nbf (beyond the leeway).
        assert_eq!(
            at(now - 31).await,
            Err(AuthError::Token(TokenError::NotYetValid))
        );
        assert_eq!(cache.full_checks(), 1);
    }

    #[tokio::test]
    async fn a_tampered_token_is_refused_and_never_remembered() {
        let cache = Arc::new(TokenCache::default());
        let a = cached(Arc::new(StaticKeys::new(public_key("k"))), "sess_1", &cache);
        let t = token("sess_1");
        a.check_one(&t).await.unwrap();
        // The same claims under a signature changed in one byte: another key of the cache,
        // checked in full, refused, and not remembered (each attempt is checked in full).
        let forged = crate::auth::token_cache::tampered(&t);
        for n in 2..=3 {
            assert_eq!(
                a.check_one(&forged).await,
                Err(AuthError::Token(TokenError::Signature))
            );
            assert_eq!(cache.full_checks(), n);
        }
        assert!(!cache.contains(&forged));
        assert_eq!(cache.len().await, 1, "only the good token");
        // Nor is a well-signed token refused by another rule.
        let other = token("sess_2");
        assert_eq!(
            a.check_one(&other).await,
            Err(AuthError::Token(TokenError::Session))
        );
        assert!(!cache.contains(&other));
    }

    #[tokio::test]
    async fn a_token_whose_key_was_rotated_out_is_refused() {
        use crate::auth::token_cache::SwappableKeys;
        let cache = Arc::new(TokenCache::default());
        let keys = Arc::new(SwappableKeys::new(&["old"]));
        let a = cached(keys.clone(), "sess_1", &cache);
        let t = Claims::new("sess_1", "p", unix_now(), 600).mint(&signing_key("old"));
        assert_eq!(a.check_one(&t).await.map(|v| v.key_index), Ok(0));
        // Rotated, the old key kept as AWSPREVIOUS: still trusted, still a hit (its index now).
        keys.rotate(&["new", "old"]);
        assert_eq!(a.check_one(&t).await.map(|v| v.key_index), Ok(1));
        assert_eq!(cache.full_checks(), 1);
        // The old key dropped: refused, and forgotten.
        keys.rotate(&["new"]);
        assert_eq!(
            a.check_one(&t).await,
            Err(AuthError::Token(TokenError::Signature))
        );
        assert_eq!(cache.full_checks(), 2);
        assert!(!cache.contains(&t));
        assert_eq!(
            a.check_one(&t).await,
            Err(AuthError::Token(TokenError::Signature))
        );
        assert_eq!(cache.full_checks(), 3);
        // A token under the new key passes.
        let fresh = Claims::new("sess_1", "p", unix_now(), 600).mint(&signing_key("new"));
        assert!(a.check_one(&fresh).await.is_ok());
    }
}
