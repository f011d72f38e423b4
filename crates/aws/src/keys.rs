//! The token keys, cached: one cache for the controller and the gateway (which check tokens
//! against the public keys) and the control plane (which signs with the current private key).
//! The cache holds whatever key type its [`KeyFetcher`] reads.
//!
//! - Requests use the last good key set held in memory, so they never wait on Secrets Manager
//!   (except a token matching no key, or a signer whose keys are older than its TTL, below).
//!   That set is kept while Secrets Manager fails.
//! - One fetch at a time: a fetch runs as its own task (on the [`TaskTracker`] handed in) and
//!   whoever needs its result while it runs shares it (a burst of requests causes one fetch).
//! - The controller fetches before it reports ready ([`KeyCache::load_initial`], bounded
//!   retries) and then in the background ([`KeyCache::spawn_refresher`]) [`REFRESH_EVERY`],
//!   before the keys are [`TTL`] old, and after a failed fetch every [`RETRY_AFTER_FAILURE`],
//!   until the cancellation token handed in fires.
//! - `AWSCURRENT` and `AWSPREVIOUS` are both fetched, so a rotation does not break tokens
//!   already handed out. A token matching neither starts one immediate fetch
//!   ([`KeyCache::refresh_after_miss`]), made once without the SDK's retries
//!   ([`FetchMode::Quick`]) and waited for at most [`MISS_WAIT`]: a just-rotated key works at
//!   once.
//! - After the first fetch, at most one fetch starts per [`MIN_FETCH_INTERVAL`], counted from
//!   the start of the last one whatever started it and however it ended. A token matching no
//!   key within that quiet period is checked against the last good keys and answered at once,
//!   so while Secrets Manager fails a burst of bad tokens costs one call per 5 s and holds no
//!   request.
//! - The control plane (on Lambda too, so no background task) signs with the first key of the
//!   set, `AWSCURRENT` ([`KeyCache::current`]): it fetches lazily when its keys are older than
//!   the TTL, under the same quiet period, and signs with the last good key when that fetch
//!   fails.
//!
//! Hand-written rather than on a cache crate such as moka: `moka`'s `try_get_with` shares one
//! in-flight load and expires entries, but drops the value on expiry and caches no failure, so
//! it cannot answer from the last good keys while a refresh fails, nor rate-limit fetches
//! started by misses (the quiet period), nor skip the SDK's retries for a waiting request.

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use backon::Retryable as _;
use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared};
use tokio::task::JoinError;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};
use wallcrawler_contract::retry::{self, Transient};

/// How long fetched keys are trusted while Secrets Manager answers.
pub const TTL: Duration = Duration::from_secs(300);
/// How often the background task refreshes (before the TTL runs out).
pub const REFRESH_EVERY: Duration = Duration::from_secs(240);
/// How soon the background task tries again after a failed fetch.
pub const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(30);
/// Least time between the starts of two fetches (after startup).
pub const MIN_FETCH_INTERVAL: Duration = Duration::from_secs(5);
/// Longest a token matching no key waits for a fetch before it is answered from the last
/// good keys.
pub const MISS_WAIT: Duration = Duration::from_secs(2);

// One failed background fetch still leaves a retry before the TTL runs out.
const _: () = assert!(REFRESH_EVERY.as_secs() + RETRY_AFTER_FAILURE.as_secs() <= TTL.as_secs());

/// The keys currently accepted, `AWSCURRENT` first.
pub type KeySet<K> = Arc<Vec<K>>;

/// How hard one fetch of a key secret tries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchMode {
    /// Startup and the background refresh: the SDK's retries.
    Patient,
    /// A request is waiting (a token matched no key): one attempt, a short timeout.
    Quick,
}

/// Where a key secret's versions come from.
pub trait KeyFetcher: Send + Sync + 'static {
    /// The key of one version (a private key to sign with, a public key to verify with).
    type Key: Clone + Send + Sync + 'static;
    /// Why a fetch failed; transient failures are retried at startup.
    type Error: std::error::Error + Transient + Send + Sync + 'static;

    /// `AWSCURRENT` first, then `AWSPREVIOUS` when there is one.
    fn fetch(&self, mode: FetchMode) -> BoxFuture<'_, Result<Vec<Self::Key>, Self::Error>>;
}

/// Why the cache has no fresh keys: the fetcher failed, or the fetch task did not finish.
#[derive(Debug, thiserror::Error)]
pub enum KeyError<E> {
    /// The fetcher's own error.
    #[error(transparent)]
    Fetch(E),
    /// The fetcher answered without a single version (a fetcher's bug).
    #[error("the key secret fetch returned no version")]
    Empty,
    /// The fetch task panicked or was cancelled with its runtime (our fault).
    #[error("the key fetch task ended early")]
    Ended(#[source] JoinError),
}

impl<E: Transient> Transient for KeyError<E> {
    fn is_transient(&self) -> bool {
        match self {
            Self::Fetch(e) => e.is_transient(),
            Self::Empty | Self::Ended(_) => false,
        }
    }
}

/// Why a fetch failed; shared by every caller waiting on the same fetch.
pub type FetchError<E> = Arc<KeyError<E>>;

type FetchResult<K, E> = Result<KeySet<K>, FetchError<E>>;
/// A fetch under way; every clone resolves to its one result.
type SharedFetch<K, E> = Shared<BoxFuture<'static, FetchResult<K, E>>>;

/// State shared with the fetch tasks.
struct Inner<K, E> {
    /// What requests use; replaced on every successful fetch and kept when a fetch fails.
    last_good: RwLock<Option<KeySet<K>>>,
    fetches: Mutex<Fetches<K, E>>,
}

struct Fetches<K, E> {
    /// When the last fetch after startup started, whatever started it (an unknown signature,
    /// the background refresh, a stale signer) and however it ended.
    last_started: Option<Instant>,
    /// When the last fetch succeeded.
    last_success: Option<Instant>,
    /// The fetch under way. Set by whoever starts it; cleared by its task when it ends.
    running: Option<SharedFetch<K, E>>,
}

/// Signing keys from a [`KeyFetcher`], cached (see the module documentation).
pub struct KeyCache<F: KeyFetcher + ?Sized> {
    fetcher: Arc<F>,
    inner: Arc<Inner<F::Key, F::Error>>,
    /// Where fetches and the refresher run.
    tasks: TaskTracker,
}

impl<F: KeyFetcher + ?Sized> KeyCache<F> {
    /// An empty cache fetching through `fetcher`, its tasks on `tasks`.
    pub fn new(fetcher: Arc<F>, tasks: TaskTracker) -> Arc<Self> {
        Arc::new(Self {
            fetcher,
            inner: Arc::new(Inner {
                last_good: RwLock::new(None),
                fetches: Mutex::new(Fetches {
                    last_started: None,
                    last_success: None,
                    running: None,
                }),
            }),
            tasks,
        })
    }

    /// The last good keys, `None` until the first successful fetch.
    pub fn keys(&self) -> Option<KeySet<F::Key>> {
        self.inner.last_good.read().expect("not poisoned").clone()
    }

    /// The fetch under way, or a new one, ignoring [`MIN_FETCH_INTERVAL`] and not starting
    /// it: the startup fetch leaves a just-rotated key free to be fetched at once.
    pub async fn refresh(&self) -> FetchResult<F::Key, F::Error> {
        let fetch = {
            let mut f = self.inner.fetches.lock().expect("not poisoned");
            match &f.running {
                Some(running) => running.clone(),
                None => self.start(&mut f, FetchMode::Patient),
            }
        };
        fetch.await
    }

    /// The fetch under way, or a new one unless one started less than [`MIN_FETCH_INTERVAL`]
    /// ago (`None`: nothing new to wait for).
    fn fetch_unless_recent(&self, mode: FetchMode) -> Option<SharedFetch<F::Key, F::Error>> {
        let mut f = self.inner.fetches.lock().expect("not poisoned");
        if let Some(running) = &f.running {
            return Some(running.clone());
        }
        if f.last_started
            .is_some_and(|t| t.elapsed() < MIN_FETCH_INTERVAL)
        {
            return None;
        }
        f.last_started = Some(Instant::now());
        Some(self.start(&mut f, mode))
    }

    /// Starts a fetch as its own task, so it completes (and updates the keys) even when
    /// nobody waits for it any more. Called with the `fetches` lock held, which the task needs
    /// to clear `running`: it cannot clear it before it is set.
    fn start(
        &self,
        f: &mut Fetches<F::Key, F::Error>,
        mode: FetchMode,
    ) -> SharedFetch<F::Key, F::Error> {
        let fetcher = self.fetcher.clone();
        let inner = self.inner.clone();
        let task = self.tasks.spawn(async move {
            let result = fetch_keys(&*fetcher, mode).await.map_err(Arc::new);
            if let Ok(keys) = &result {
                *inner.last_good.write().expect("not poisoned") = Some(keys.clone());
            }
            let mut f = inner.fetches.lock().expect("not poisoned");
            if result.is_ok() {
                f.last_success = Some(Instant::now());
            }
            f.running = None;
            result
        });
        let shared = async move {
            task.await
                .unwrap_or_else(|e| Err(Arc::new(KeyError::Ended(e))))
        }
        .boxed()
        .shared();
        f.running = Some(shared.clone());
        shared
    }

    /// Time since the last successful fetch.
    fn since_success(&self) -> Option<Duration> {
        let f = self.inner.fetches.lock().expect("not poisoned");
        f.last_success.map(|t| t.elapsed())
    }

    /// The first fetch, its transient failures retried with the shared policy, sleeping at
    /// most `within` in all.
    pub async fn load_initial(&self, within: Duration) -> FetchResult<F::Key, F::Error> {
        (|| self.refresh())
            .retry(retry::policy(within))
            .sleep(tokio::time::sleep)
            .when(|e: &FetchError<F::Error>| e.is_transient())
            .notify(|e, wait| {
                warn!(error = %e, retry_in_ms = wait.as_millis() as u64, "fetching the key secret failed; retrying");
            })
            .await
    }

    /// Refreshes [`REFRESH_EVERY`] after the last success (every [`RETRY_AFTER_FAILURE`]
    /// while fetches fail) until `cancel` fires.
    pub fn spawn_refresher(self: &Arc<Self>, cancel: CancellationToken) {
        let this = self.clone();
        self.tasks.spawn(async move {
            loop {
                let wait = match this.since_success() {
                    Some(age) if age < REFRESH_EVERY => REFRESH_EVERY - age,
                    _ => RETRY_AFTER_FAILURE,
                };
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    () = cancel.cancelled() => return,
                }
                if this.since_success().is_some_and(|age| age < REFRESH_EVERY) {
                    continue; // refreshed meanwhile, after an unknown signature
                }
                if let Some(fetch) = this.fetch_unless_recent(FetchMode::Patient)
                    && let Err(e) = fetch.await
                {
                    warn!(error = %e, "refreshing the key secret failed; keeping the last good keys");
                }
            }
        });
    }

    /// After a token's signature matched no key: one quick fetch (rate-limited), waited for
    /// at most [`MISS_WAIT`]; the fresh keys to check again, or `None`: nothing new.
    pub async fn refresh_after_miss(&self) -> Option<KeySet<F::Key>> {
        let Some(fetch) = self.fetch_unless_recent(FetchMode::Quick) else {
            // A fetch started moments ago: check against what it left, without waiting.
            return self.keys();
        };
        info!("a token matched no cached key; refreshing the key secret");
        match tokio::time::timeout(MISS_WAIT, fetch).await {
            Ok(Ok(keys)) => Some(keys),
            Ok(Err(e)) => {
                warn!(error = %e, "refresh after an unknown signature failed");
                None
            }
            Err(_) => {
                warn!(
                    "the refresh after an unknown signature is slow; answering from the last good keys"
                );
                None
            }
        }
    }

    /// The key to sign with (`AWSCURRENT`, the first of the set): the cached one while its
    /// last fetch is younger than `ttl`, else fetched again (one fetch for every caller, at
    /// most one per [`MIN_FETCH_INTERVAL`]); the last good one, with a warning, when that
    /// fetch fails. An error only when no fetch ever succeeded.
    pub async fn current(&self, ttl: Duration) -> Result<F::Key, FetchError<F::Error>> {
        let keys = match self.keys() {
            Some(keys) if self.since_success().is_some_and(|age| age < ttl) => keys,
            Some(last_good) => match self.fetch_unless_recent(FetchMode::Patient) {
                // A fetch failed moments ago: the last good key, at once.
                None => last_good,
                Some(fetch) => fetch.await.unwrap_or_else(|e| {
                    warn!(error = %e, "refreshing the signing key failed; signing with the last good key");
                    last_good
                }),
            },
            // Never fetched: always try (there is nothing to sign with otherwise).
            None => self.refresh().await?,
        };
        Ok(keys[0].clone()) // never empty: see `fetch_keys`
    }
}

/// The keys of one fetch; never an empty set.
async fn fetch_keys<F: KeyFetcher + ?Sized>(
    fetcher: &F,
    mode: FetchMode,
) -> Result<KeySet<F::Key>, KeyError<F::Error>> {
    let keys = fetcher.fetch(mode).await.map_err(KeyError::Fetch)?;
    if keys.is_empty() {
        return Err(KeyError::Empty);
    }
    info!(
        versions = keys.len(),
        "token keys fetched from Secrets Manager"
    );
    Ok(Arc::new(keys))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// The fake's refusal (not transient: startup does not retry it).
    #[derive(Debug, thiserror::Error)]
    #[error("AccessDeniedException")]
    struct Denied;

    impl Transient for Denied {
        fn is_transient(&self) -> bool {
            false
        }
    }

    /// A Secrets Manager that counts its calls; `key: None` fails, `gate` holds fetches.
    struct Fake {
        calls: AtomicUsize,
        modes: Mutex<Vec<FetchMode>>,
        key: Mutex<Option<String>>,
        gate: tokio::sync::Semaphore,
    }

    impl KeyFetcher for Fake {
        type Key = String;
        type Error = Denied;

        fn fetch(&self, mode: FetchMode) -> BoxFuture<'_, Result<Vec<String>, Denied>> {
            Box::pin(async move {
                self.calls.fetch_add(1, Ordering::SeqCst);
                self.modes.lock().unwrap().push(mode);
                let _permit = self.gate.acquire().await.unwrap();
                match self.key.lock().unwrap().clone() {
                    Some(k) => Ok(vec![k]),
                    None => Err(Denied),
                }
            })
        }
    }

    impl Fake {
        fn calls(&self) -> usize {
            self.calls.load(Ordering::SeqCst)
        }
        fn set_key(&self, key: Option<&str>) {
            *self.key.lock().unwrap() = key.map(str::to_owned);
        }
    }

    fn fake(key: Option<&str>) -> Arc<Fake> {
        Arc::new(Fake {
            calls: AtomicUsize::new(0),
            modes: Mutex::new(Vec::new()),
            key: Mutex::new(key.map(str::to_owned)),
            gate: tokio::sync::Semaphore::new(1000),
        })
    }

    /// A cache over a fake serving `key`, after its startup fetch.
    async fn loaded(key: &str) -> (Arc<Fake>, Arc<KeyCache<Fake>>) {
        let f = fake(Some(key));
        let cache = KeyCache::new(f.clone(), TaskTracker::new());
        cache.load_initial(Duration::from_secs(1)).await.unwrap();
        (f, cache)
    }

    /// `n` misses at once, each in its own task.
    fn concurrent_misses(
        cache: &Arc<KeyCache<Fake>>,
        n: usize,
    ) -> Vec<tokio::task::JoinHandle<Option<KeySet<String>>>> {
        (0..n)
            .map(|_| {
                let c = cache.clone();
                tokio::spawn(async move { c.refresh_after_miss().await })
            })
            .collect()
    }

    /// The key set holds exactly `key`.
    fn holds(keys: &KeySet<String>, key: &str) -> bool {
        keys.as_slice() == [key]
    }

    #[tokio::test]
    async fn concurrent_refreshes_share_one_fetch() {
        let f = fake(Some("k"));
        let gate_permits = f.gate.available_permits();
        let held = f.gate.acquire_many(gate_permits as u32).await.unwrap();
        let cache = KeyCache::new(f.clone(), TaskTracker::new());
        let tasks: Vec<_> = (0..20)
            .map(|_| {
                let c = cache.clone();
                tokio::spawn(async move { c.refresh().await.map(|k| k.len()) })
            })
            .collect();
        // Let every task reach the cache before the fetch may finish.
        tokio::task::yield_now().await;
        drop(held);
        for t in tasks {
            assert_eq!(t.await.unwrap().unwrap(), 1);
        }
        assert_eq!(f.calls(), 1);
    }

    #[tokio::test]
    async fn last_good_keys_survive_an_outage() {
        let f = fake(Some("k"));
        let cache = KeyCache::new(f.clone(), TaskTracker::new());
        cache.refresh().await.unwrap();
        f.set_key(None);
        assert!(cache.refresh().await.is_err());
        assert!(
            holds(&cache.keys().unwrap(), "k"),
            "the last good key is still served"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_just_rotated_key_is_fetched_at_once_then_misses_rest_5_s() {
        let (f, cache) = loaded("old").await;
        // Straight after startup: the startup fetch does not delay it.
        f.set_key(Some("new"));
        let fresh = cache.refresh_after_miss().await.unwrap();
        assert!(holds(&fresh, "new"));
        assert_eq!(f.calls(), 2);
        // Within 5 s another miss is checked against the fresh keys without a fetch.
        tokio::time::advance(MIN_FETCH_INTERVAL - Duration::from_millis(1)).await;
        assert!(holds(&cache.refresh_after_miss().await.unwrap(), "new"));
        assert_eq!(f.calls(), 2);
        tokio::time::advance(Duration::from_millis(1)).await;
        cache.refresh_after_miss().await.unwrap();
        assert_eq!(f.calls(), 3);
        assert_eq!(
            *f.modes.lock().unwrap(),
            [FetchMode::Patient, FetchMode::Quick, FetchMode::Quick],
            "only misses skip the SDK's retries"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn misses_while_secrets_manager_fails_fetch_once_per_5_s_and_never_wait() {
        let (f, cache) = loaded("k").await;
        tokio::time::advance(MIN_FETCH_INTERVAL).await;
        f.set_key(None);
        let start = Instant::now();
        // A burst of 40 concurrent misses, then 40 more one after another, all within 5 s.
        let burst = concurrent_misses(&cache, 40);
        for t in burst {
            t.await.unwrap();
        }
        assert_eq!(f.calls(), 2, "one fetch for the whole burst");
        for _ in 0..40 {
            let answer = cache.refresh_after_miss().await;
            assert!(
                holds(&answer.unwrap(), "k"),
                "answered from the last good keys"
            );
        }
        assert_eq!(f.calls(), 2, "a failed fetch starts the quiet period too");
        assert_eq!(start.elapsed(), Duration::ZERO, "no miss waited");
        assert!(holds(&cache.keys().unwrap(), "k"));
        // The next window allows one more fetch, and only one.
        tokio::time::advance(MIN_FETCH_INTERVAL).await;
        for _ in 0..10 {
            cache.refresh_after_miss().await;
        }
        assert_eq!(f.calls(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_miss_waits_at_most_miss_wait_for_a_hanging_fetch() {
        let (f, cache) = loaded("k").await;
        tokio::time::advance(MIN_FETCH_INTERVAL).await;
        let permits = f.gate.available_permits();
        let held = f.gate.acquire_many(permits as u32).await.unwrap();
        let start = Instant::now();
        let waiting = concurrent_misses(&cache, 10);
        for t in waiting {
            assert!(t.await.unwrap().is_none(), "nothing new yet");
        }
        assert_eq!(start.elapsed(), MISS_WAIT);
        assert_eq!(f.calls(), 2, "the misses shared one fetch");
        // The fetch still hangs: a later miss joins it rather than starting another.
        assert!(cache.refresh_after_miss().await.is_none());
        assert_eq!(f.calls(), 2);
        // When it ends, its keys are used.
        f.set_key(Some("late"));
        drop(held);
        assert!(
            holds(&cache.refresh().await.unwrap(), "late"),
            "joined, not restarted"
        );
        assert_eq!(f.calls(), 2);
        assert!(holds(&cache.keys().unwrap(), "late"));
    }

    #[tokio::test(start_paused = true)]
    async fn the_background_refresh_retries_sooner_after_a_failure() {
        let (f, cache) = loaded("k").await;
        let cancel = CancellationToken::new();
        cache.spawn_refresher(cancel.clone());
        f.set_key(None);
        tokio::time::sleep(REFRESH_EVERY + Duration::from_millis(1)).await;
        assert_eq!(f.calls(), 2);
        tokio::time::sleep(RETRY_AFTER_FAILURE).await;
        assert_eq!(f.calls(), 3);
        f.set_key(Some("k2"));
        tokio::time::sleep(RETRY_AFTER_FAILURE).await;
        assert_eq!(f.calls(), 4);
        assert!(holds(&cache.keys().unwrap(), "k2"));
        // Healthy again: the next one is REFRESH_EVERY later.
        tokio::time::sleep(REFRESH_EVERY - Duration::from_secs(1)).await;
        assert_eq!(f.calls(), 4);
        cancel.cancel();
    }

    #[tokio::test]
    async fn no_keys_until_the_first_fetch() {
        let f = fake(None);
        let cache = KeyCache::new(f.clone(), TaskTracker::new());
        assert!(cache.keys().is_none());
        assert!(
            cache
                .load_initial(Duration::from_millis(300))
                .await
                .is_err()
        );
    }
}
