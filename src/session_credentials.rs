//! The session's AWS credentials, as the SDK clients of a task on the task API ask for them.
//!
//! With `TASK_API_URL`, the clients that touch a session (its item, its archives and files,
//! its claim) sign with credentials the control plane scoped to that one session, never with
//! the task role's. They come with the claim (a pool task) or from the task API at start (a
//! cold task) and are [installed](SessionCredentialsProvider::install) here; the provider
//! hands them out and, within [`REFRESH_BEFORE`] of their expiry, asks its [`Source`] for
//! fresh ones. Before any are installed every call fails at once with "no session credentials
//! yet": a warm task has no business touching a session.
//!
//! The clients use no identity cache of the SDK's (`IdentityCache::no_cache`): this provider is
//! the cache, so the one rule of when to refresh is here.

use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use aws_credential_types::Credentials;
use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::{self, ProvideCredentials};
use tracing::{info, warn};
use wallcrawler_contract::task_api::SessionCredentials;

use crate::stores::BoxError;

/// How long before their expiry the credentials are refreshed: a call signed just before it
/// (an archive's upload part) still has minutes to finish.
pub(crate) const REFRESH_BEFORE: Duration = Duration::from_secs(5 * 60);

/// Where fresh credentials for a session come from (the task API's credentials path).
#[async_trait::async_trait]
pub(crate) trait Source: Send + Sync {
    /// Fresh credentials for `session_id`.
    async fn credentials(&self, session_id: &str) -> Result<SessionCredentials, BoxError>;
}

/// The session's credentials, for the SDK (see the module's documentation). Clones share them.
#[derive(Clone)]
pub(crate) struct SessionCredentialsProvider {
    inner: Arc<Inner>,
}

struct Inner {
    source: Arc<dyn Source>,
    /// The session and its credentials, once installed. Never held across an `.await`.
    held: Mutex<Option<Held>>,
}

#[derive(Clone)]
struct Held {
    session_id: String,
    credentials: SessionCredentials,
}

impl std::fmt::Debug for SessionCredentialsProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionCredentialsProvider")
    }
}

impl SessionCredentialsProvider {
    /// No credentials yet; fresh ones come from `source`.
    pub(crate) fn new(source: Arc<dyn Source>) -> Self {
        Self {
            inner: Arc::new(Inner {
                source,
                held: Mutex::new(None),
            }),
        }
    }

    /// The credentials granted for `session_id`, from now on what every call signs with.
    pub(crate) fn install(&self, session_id: &str, credentials: SessionCredentials) {
        let held = Held {
            session_id: session_id.to_owned(),
            credentials,
        };
        *self.inner.held.lock().unwrap_or_else(|p| p.into_inner()) = Some(held);
    }

    fn held(&self) -> Option<Held> {
        self.inner
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The credentials to sign with now: the held ones, or fresh ones once they are within
    /// [`REFRESH_BEFORE`] of their expiry. A failed refresh keeps the held ones while they
    /// last (the next call tries again).
    async fn current(&self, now: u64) -> provider::Result {
        let Some(held) = self.held() else {
            return Err(CredentialsError::not_loaded(
                "no session credentials yet: this task has not been granted a session",
            ));
        };
        if !needs_refresh(held.credentials.expiration, now) {
            return Ok(sdk_credentials(&held.credentials));
        }
        match self.inner.source.credentials(&held.session_id).await {
            Ok(fresh) => {
                info!(
                    expires_in_s = fresh.expiration.saturating_sub(now),
                    "session credentials refreshed"
                );
                let out = sdk_credentials(&fresh);
                self.install(&held.session_id, fresh);
                Ok(out)
            }
            Err(e) if held.credentials.expiration > now => {
                warn!(error = %crate::stores::Chain(e.as_ref()), "refreshing the session credentials failed; the current ones are used while they last");
                Ok(sdk_credentials(&held.credentials))
            }
            Err(e) => Err(CredentialsError::provider_error(e)),
        }
    }
}

/// Whether credentials expiring at `expiration` are due for a refresh at `now` (Unix seconds).
fn needs_refresh(expiration: u64, now: u64) -> bool {
    expiration <= now.saturating_add(REFRESH_BEFORE.as_secs())
}

fn sdk_credentials(c: &SessionCredentials) -> Credentials {
    Credentials::new(
        &c.access_key_id,
        &c.secret_access_key,
        Some(c.session_token.clone()),
        Some(UNIX_EPOCH + Duration::from_secs(c.expiration)),
        "wallcrawler-task-api",
    )
}

impl ProvideCredentials for SessionCredentialsProvider {
    fn provide_credentials<'a>(&'a self) -> provider::future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        provider::future::ProvideCredentials::new(
            self.current(wallcrawler_contract::time::unix_millis() / 1000),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    /// Hands out credentials numbered by call, expiring two hours after `now`; or fails.
    struct Counter {
        calls: AtomicU64,
        now: u64,
        fail: bool,
    }

    #[async_trait::async_trait]
    impl Source for Counter {
        async fn credentials(&self, session_id: &str) -> Result<SessionCredentials, BoxError> {
            assert_eq!(session_id, "sess_1");
            let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
            if self.fail {
                return Err("the task API answered HTTP 503".into());
            }
            Ok(creds(&format!("fresh-{n}"), self.now + 7200))
        }
    }

    fn creds(key: &str, expiration: u64) -> SessionCredentials {
        SessionCredentials {
            access_key_id: key.into(),
            secret_access_key: "secret".into(),
            session_token: "token".into(),
            expiration,
        }
    }

    fn provider(fail: bool, now: u64) -> (SessionCredentialsProvider, Arc<Counter>) {
        let source = Arc::new(Counter {
            calls: AtomicU64::new(0),
            now,
            fail,
        });
        (SessionCredentialsProvider::new(source.clone()), source)
    }

    #[tokio::test]
    async fn before_a_grant_every_call_fails_and_nothing_is_asked() {
        let (p, source) = provider(false, 1_000);
        let e = p.provide_credentials().await.unwrap_err();
        assert!(matches!(e, CredentialsError::CredentialsNotLoaded(_)));
        let text = crate::stores::Chain(&e).to_string();
        assert!(text.contains("no session credentials yet"), "{text}");
        assert_eq!(source.calls.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn granted_credentials_are_used_until_a_few_minutes_before_they_expire() {
        let now = 1_000_000;
        let (p, source) = provider(false, now);
        p.install("sess_1", creds("granted", now + 3600));
        let c = p.current(now).await.unwrap();
        assert_eq!(c.access_key_id(), "granted");
        assert_eq!(c.session_token(), Some("token"));
        assert_eq!(
            c.expiry(),
            Some(UNIX_EPOCH + Duration::from_secs(now + 3600))
        );
        let still = now + 3600 - REFRESH_BEFORE.as_secs() - 1;
        assert_eq!(p.current(still).await.unwrap().access_key_id(), "granted");
        assert_eq!(source.calls.load(Ordering::SeqCst), 0);

        // Within REFRESH_BEFORE of the expiry: fresh ones, kept from then on.
        let due = now + 3600 - REFRESH_BEFORE.as_secs();
        assert_eq!(p.current(due).await.unwrap().access_key_id(), "fresh-1");
        assert_eq!(p.current(due).await.unwrap().access_key_id(), "fresh-1");
        assert_eq!(source.calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_failed_refresh_keeps_the_credentials_while_they_last() {
        let now = 1_000_000;
        let (p, source) = provider(true, now);
        p.install("sess_1", creds("granted", now + 60));
        assert_eq!(p.current(now).await.unwrap().access_key_id(), "granted");
        assert_eq!(source.calls.load(Ordering::SeqCst), 1);
        let e = p.current(now + 60).await.unwrap_err();
        assert!(matches!(e, CredentialsError::ProviderError(_)), "{e:?}");
        assert_eq!(source.calls.load(Ordering::SeqCst), 2);
    }
}
