//! The signing keys from Secrets Manager, cached.
//!
//! - Fetched before the proxy reports ready ([`SecretKeyCache::load_initial`], bounded retries).
//! - Cached in `moka` with a 5-minute TTL; a background task refreshes before it expires, so
//!   requests never wait on Secrets Manager.
//! - Concurrent fetches are coalesced: `moka`'s `try_get_with` runs one fetch and every caller
//!   awaiting the same key shares its result.
//! - The last good key set keeps working while Secrets Manager is unreachable.
//! - `AWSCURRENT` and `AWSPREVIOUS` are both accepted, so a rotation does not break tokens
//!   already handed out; a token matching neither triggers one immediate refresh (at most one
//!   per 5 s; later misses join it) and is checked again against the fresh keys.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use wallcrawler_contract::SigningKey;

use crate::auth::{KeySet, KeySource};
use crate::stores::{SecretFetcher, StoreError};

/// How long fetched keys are trusted before they are fetched again.
pub const TTL: Duration = Duration::from_secs(300);
/// How often the background task refreshes (before the TTL runs out).
pub const REFRESH_EVERY: Duration = Duration::from_secs(240);
/// Least time between two refreshes triggered by unknown signatures.
pub const MISS_REFRESH_INTERVAL: Duration = Duration::from_secs(5);

/// Signing keys from a [`SecretFetcher`], cached.
pub struct SecretKeyCache {
    fetcher: Arc<dyn SecretFetcher>,
    /// One entry (key `()`): the current key set. Its TTL bounds how stale keys can be.
    cache: moka::future::Cache<(), KeySet>,
    /// What requests are checked against; replaced on every successful fetch and kept when a
    /// fetch fails.
    last_good: RwLock<Option<KeySet>>,
    /// When the last miss-triggered refresh started.
    last_miss_refresh: Mutex<Option<Instant>>,
}

impl SecretKeyCache {
    pub fn new(fetcher: Arc<dyn SecretFetcher>) -> Arc<Self> {
        Arc::new(Self {
            fetcher,
            cache: moka::future::Cache::builder()
                .max_capacity(1)
                .time_to_live(TTL)
                .build(),
            last_good: RwLock::new(None),
            last_miss_refresh: Mutex::new(None),
        })
    }

    /// The cached key set, fetching it (once, for all concurrent callers) when absent.
    pub async fn load(&self) -> Result<KeySet, Arc<StoreError>> {
        let fetcher = self.fetcher.clone();
        let keys = self
            .cache
            .try_get_with((), async move {
                let secrets = fetcher.fetch().await?;
                let keys: Vec<SigningKey> = secrets
                    .iter()
                    .map(|s| SigningKey::new(s.signing_key.as_bytes()))
                    .collect();
                info!(
                    versions = keys.len(),
                    "signing keys fetched from Secrets Manager"
                );
                Ok::<_, StoreError>(Arc::new(keys))
            })
            .await?;
        *self.last_good.write().expect("not poisoned") = Some(keys.clone());
        Ok(keys)
    }

    /// Drops the cached set and fetches again; on failure the last good set stays in use.
    pub async fn refresh(&self) -> Result<KeySet, Arc<StoreError>> {
        self.cache.invalidate(&()).await;
        self.load().await
    }

    /// The first fetch, retried with backoff for up to `within`.
    pub async fn load_initial(&self, within: Duration) -> Result<KeySet, Arc<StoreError>> {
        let deadline = Instant::now() + within;
        let mut backoff = Duration::from_millis(200);
        loop {
            match self.load().await {
                Ok(k) => return Ok(k),
                Err(e) if Instant::now() + backoff < deadline && e.is_unavailable() => {
                    warn!(error = %e, "fetching the signing secret failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Refreshes every [`REFRESH_EVERY`] until `cancel`.
    pub fn spawn_refresher(self: &Arc<Self>, cancel: CancellationToken) {
        let this = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = tokio::time::sleep(REFRESH_EVERY) => {}
                    () = cancel.cancelled() => return,
                }
                if let Err(e) = this.refresh().await {
                    warn!(error = %e, "refreshing the signing secret failed; keeping the last good keys");
                }
            }
        });
    }
}

impl KeySource for SecretKeyCache {
    fn keys(&self) -> Option<KeySet> {
        self.last_good.read().expect("not poisoned").clone()
    }

    fn refresh_after_miss(&self) -> Pin<Box<dyn Future<Output = Option<KeySet>> + Send + '_>> {
        Box::pin(async move {
            let start_refresh = {
                let mut last = self.last_miss_refresh.lock().expect("not poisoned");
                let due = last.is_none_or(|t| t.elapsed() >= MISS_REFRESH_INTERVAL);
                if due {
                    *last = Some(Instant::now());
                }
                due
            };
            let result = if start_refresh {
                info!("a token matched no cached key; refreshing the signing secret");
                self.refresh().await
            } else {
                // A refresh happened moments ago (or is running): join or reuse it.
                self.load().await
            };
            match result {
                Ok(keys) => Some(keys),
                Err(e) => {
                    warn!(error = %e, "refresh after an unknown signature failed");
                    None
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::future::BoxFuture;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use wallcrawler_contract::SigningSecret;

    struct Fake {
        calls: AtomicUsize,
        key: Mutex<Option<String>>,
        gate: tokio::sync::Semaphore,
    }

    impl SecretFetcher for Fake {
        fn fetch(&self) -> BoxFuture<'_, Result<Vec<SigningSecret>, StoreError>> {
            Box::pin(async move {
                self.calls.fetch_add(1, Ordering::SeqCst);
                let _permit = self.gate.acquire().await.unwrap();
                match self.key.lock().unwrap().clone() {
                    Some(k) => Ok(vec![SigningSecret {
                        algorithm: "HS256".into(),
                        signing_key: k,
                    }]),
                    None => Err(StoreError::Unavailable {
                        service: "fake",
                        detail: "down".into(),
                    }),
                }
            })
        }
    }

    fn fake(key: Option<&str>) -> Arc<Fake> {
        Arc::new(Fake {
            calls: AtomicUsize::new(0),
            key: Mutex::new(key.map(str::to_owned)),
            gate: tokio::sync::Semaphore::new(1000),
        })
    }

    #[tokio::test]
    async fn concurrent_misses_share_one_fetch() {
        let f = fake(Some("k"));
        let gate_permits = f.gate.available_permits();
        let _held = f.gate.acquire_many(gate_permits as u32).await.unwrap();
        let cache = SecretKeyCache::new(f.clone());
        let tasks: Vec<_> = (0..20)
            .map(|_| {
                let c = cache.clone();
                tokio::spawn(async move { c.load().await.map(|k| k.len()) })
            })
            .collect();
        // Let every task reach the cache before the fetch may finish.
        tokio::task::yield_now().await;
        drop(_held);
        for t in tasks {
            assert_eq!(t.await.unwrap().unwrap(), 1);
        }
        assert_eq!(f.calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn last_good_keys_survive_an_outage() {
        let f = fake(Some("k"));
        let cache = SecretKeyCache::new(f.clone());
        cache.load().await.unwrap();
        *f.key.lock().unwrap() = None;
        assert!(cache.refresh().await.is_err());
        assert!(cache.keys().is_some(), "the last good key is still served");
    }

    #[tokio::test]
    async fn miss_refreshes_are_rate_limited() {
        let f = fake(Some("k"));
        let cache = SecretKeyCache::new(f.clone());
        cache.load().await.unwrap();
        assert_eq!(f.calls.load(Ordering::SeqCst), 1);
        assert!(cache.refresh_after_miss().await.is_some());
        assert_eq!(f.calls.load(Ordering::SeqCst), 2);
        // Within 5 s another miss reuses the fresh keys instead of fetching again.
        assert!(cache.refresh_after_miss().await.is_some());
        assert_eq!(f.calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn no_keys_until_the_first_fetch() {
        let cache = SecretKeyCache::new(fake(None));
        assert!(cache.keys().is_none());
        assert!(
            cache
                .load_initial(Duration::from_millis(300))
                .await
                .is_err()
        );
    }
}
