//! Who may connect: token extraction from a request and validation against the public keys.
//!
//! Tokens come from the `signingKey` query parameter and from `Authorization: Bearer`; when both
//! are present both must be valid. The keys come from a [`KeySource`], which may be a literal
//! public key or the Secrets Manager cache of the public key secret: the controller can check
//! tokens, never mint one.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use wallcrawler_contract::token::{self, Validation, Verified};
use wallcrawler_contract::viewer::{self, ViewerVerified};
use wallcrawler_contract::{TokenError, VerifyingKey};

use http::HeaderMap;

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
}

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
        }
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
        self.check_by(token, token::validate).await
    }

    /// Validates one live-view credential (audience `wallcrawler-viewer`) for the bound
    /// session, with the same key refresh: a session token is refused here, as a viewer
    /// credential is by [`Self::check_one`].
    pub async fn check_viewer(&self, credential: &str) -> Result<ViewerVerified, AuthError> {
        self.check_by(credential, viewer::validate).await
    }

    async fn check_by<T>(
        &self,
        token: &str,
        validate: fn(&str, &[VerifyingKey], &Validation<'_>) -> Result<T, TokenError>,
    ) -> Result<T, AuthError> {
        let binding = self.binding.get().ok_or(AuthError::Unclaimed)?;
        let keys = self.keys.keys().ok_or(AuthError::KeysUnavailable)?;
        let v = Validation {
            session_id: &binding.session_id,
            project_id: binding.project_id.as_deref(),
            leeway_seconds: self.leeway_seconds,
            now: unix_now(),
        };
        match validate(token, &keys, &v) {
            Err(TokenError::Signature) => match self.keys.refresh_after_miss().await {
                Some(fresh) => Ok(validate(token, &fresh, &v)?),
                None => Err(AuthError::Token(TokenError::Signature)),
            },
            other => Ok(other?),
        }
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
    use crate::proxy::http::{RequestHead, parse_request_head};
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
}
