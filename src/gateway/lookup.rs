//! Where a session is: its item read by id ([`SessionRoutes`], one implementation per store)
//! and turned into a [`Place`] by a pure rule ([`place_of`]), behind a short cache that makes
//! one lookup at a time per session however many clients wait ([`Lookups`]).
//!
//! A store that can tell when an item changes ([`SessionRoutes::subscribe`]) wakes the clients
//! held for a starting session as soon as READY is written: the sessions directory does, through
//! inotify ([`DirRoutes::watching`], a [`ChangeFeed`]). DynamoDB cannot: there a held client looks
//! again after a short backoff.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::sync::watch;
use tracing::{debug, warn};
use wallcrawler_contract::InternalStatus;
use wallcrawler_contract::session_doc::SessionDoc;
use wallcrawler_local::session_dir::DirStore;

use crate::stores::StoreError;

/// Where a session stands, as the gateway routes a client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// READY (or ACTIVE): the task's proxy answers here.
    Ready(SocketAddr),
    /// Not READY yet (CREATING, PROVISIONING, STARTING): hold the client.
    Starting,
    /// Released, ended, failed or timed out (or ending): refused at once (410).
    Ended,
    /// No such session (404).
    Unknown,
    /// READY, but without an address the gateway can dial (an item written by a controller
    /// from before the gateway, or a malformed one) (502).
    Unroutable,
}

/// The item's few attributes the gateway reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouteItem {
    /// `internalStatus` as stored.
    pub internal_status: String,
    /// `privateIP`.
    pub private_ip: Option<String>,
    /// `proxyPort`.
    pub proxy_port: Option<u16>,
    /// `endedAt` is set.
    pub ended: bool,
}

impl From<SessionDoc> for RouteItem {
    fn from(d: SessionDoc) -> Self {
        Self {
            internal_status: d.internal_status,
            private_ip: d.private_ip,
            proxy_port: d.proxy_port,
            ended: d.ended_at.is_some(),
        }
    }
}

/// The place of a session whose item is `item` (`None`: no item).
pub fn place_of(item: Option<&RouteItem>) -> Place {
    let Some(item) = item else {
        return Place::Unknown;
    };
    if item.ended {
        return Place::Ended;
    }
    match InternalStatus::parse(&item.internal_status) {
        Some(s) if s.may_become_ready() => Place::Starting,
        Some(InternalStatus::Ready | InternalStatus::Active) => {
            let ip = item
                .private_ip
                .as_deref()
                .and_then(|i| i.parse::<IpAddr>().ok());
            match (ip, item.proxy_port) {
                (Some(ip), Some(port)) if port != 0 => Place::Ready(SocketAddr::new(ip, port)),
                _ => Place::Unroutable,
            }
        }
        Some(_) => Place::Ended,
        None => Place::Unroutable,
    }
}

/// Reads a session's item by id.
pub trait SessionRoutes: Send + Sync + 'static {
    /// The item of `session_id`, `None` when there is none. Strongly consistent: a READY or a
    /// release written a moment ago is seen.
    fn item<'a>(
        &'a self,
        session_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<RouteItem>, StoreError>>;

    /// Changes of `session_id`'s item from now on: the receiver sees a new value whenever the
    /// item may have changed since this call (so a client subscribes before it reads, and a
    /// write between its read and its wait is not missed). `None`: this store cannot tell, and
    /// a held client looks again after a backoff.
    fn subscribe(&self, _session_id: &str) -> Option<watch::Receiver<u64>> {
        None
    }
}

/// Who waits on which session's item, and the wake-up of their waits: one `watch` channel per
/// session somebody is subscribed to, its value bumped on every change. Entries nobody holds a
/// receiver of any more are dropped at the next subscription.
#[derive(Default)]
pub struct ChangeFeed {
    /// Session id → the sender its subscribers' receivers watch.
    watched: Mutex<HashMap<String, watch::Sender<u64>>>,
}

impl ChangeFeed {
    /// A receiver that sees every change of `session_id` from now on.
    pub fn subscribe(&self, session_id: &str) -> watch::Receiver<u64> {
        let mut watched = self.watched.lock().unwrap_or_else(|p| p.into_inner());
        watched.retain(|_, tx| tx.receiver_count() > 0);
        watched
            .entry(session_id.to_owned())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe()
    }

    /// `session_id`'s item may have changed: its subscribers wake.
    pub fn changed(&self, session_id: &str) {
        let watched = self.watched.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = watched.get(session_id) {
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Any item may have changed (the change events overflowed): every subscriber wakes.
    pub fn changed_all(&self) {
        let watched = self.watched.lock().unwrap_or_else(|p| p.into_inner());
        for tx in watched.values() {
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

/// The local platform's session documents (`SESSIONS_DIR`), with their changes when watched.
pub struct DirRoutes {
    store: DirStore,
    changes: Option<Arc<ChangeFeed>>,
}

impl DirRoutes {
    /// Documents read on demand; nobody is told of changes (held clients poll).
    pub fn new(store: DirStore) -> Self {
        Self {
            store,
            changes: None,
        }
    }

    /// Documents whose changes wake the clients waiting on them: the directory watched with
    /// inotify (a document is written by a rename onto `<id>.json`); when the watch cannot be
    /// set up (logged) it is [`DirRoutes::new`].
    pub fn watching(store: DirStore) -> Self {
        let changes = match watch_dir(store.dir()) {
            Ok(feed) => Some(feed),
            Err(e) => {
                warn!(dir = %store.dir().display(), error = %e, "the sessions directory is not watched; held clients look again after a backoff");
                None
            }
        };
        Self { store, changes }
    }
}

/// Watches `dir` (created owner-only if missing, as [`DirStore`] creates it): every document
/// moved or written into it is a change of its session in the returned feed. A thread of its
/// own waits on the inotify descriptor (blocking reads, so no runtime is needed); it ends at
/// the first event after the feed is dropped, or when a read fails (logged: held clients then
/// fall back to their backoff).
fn watch_dir(dir: &Path) -> std::io::Result<Arc<ChangeFeed>> {
    use std::os::unix::fs::DirBuilderExt;
    use wallcrawler_local::dir_watch::{self, Change};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let feed = Arc::new(ChangeFeed::default());
    let weak = Arc::downgrade(&feed);
    dir_watch::watch(&[dir], "sessions-watch", move |change| {
        let Some(feed) = weak.upgrade() else {
            return false;
        };
        match change {
            Change::File(name) => {
                if let Some(id) = name.strip_suffix(".json") {
                    feed.changed(id);
                }
            }
            Change::Overflow => {
                debug!("the sessions directory's change events overflowed");
                feed.changed_all();
            }
            Change::Failed(e) => warn!(error = %e, "watching the sessions directory stopped"),
        }
        true
    })?;
    Ok(feed)
}

impl SessionRoutes for DirRoutes {
    fn subscribe(&self, session_id: &str) -> Option<watch::Receiver<u64>> {
        self.changes.as_ref().map(|c| c.subscribe(session_id))
    }

    fn item<'a>(
        &'a self,
        session_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<RouteItem>, StoreError>> {
        let (store, id) = (self.store.clone(), session_id.to_owned());
        Box::pin(async move {
            let other = |e: Box<dyn std::error::Error + Send + Sync>| StoreError::Other {
                service: "sessions directory",
                source: e,
            };
            tokio::task::spawn_blocking(move || store.get(&id))
                .await
                .map_err(|e| other(e.into()))?
                .map(|d| d.map(RouteItem::from))
                .map_err(|e| other(e.into()))
        })
    }
}

/// A lookup that failed, shared by every client that waited on it.
pub type LookupError = Arc<StoreError>;

/// What one read of the store found.
pub type Read = Result<Place, StoreError>;

/// Session lookups behind a short cache: concurrent lookups of one session share one read of
/// the store (moka's `try_get_with` runs one initialiser per key and hands its result to every
/// waiter); a result is reused for `ttl`, a starting session's for `starting_ttl` at most (a
/// READY written meanwhile is not hidden behind it); a failure is not kept.
pub struct Lookups {
    routes: Arc<dyn SessionRoutes>,
    cache: moka::future::Cache<String, Place>,
    /// Called once per read of the store, with its result.
    on_read: Box<dyn Fn(&Read) + Send + Sync>,
}

/// Sessions whose place is cached at most at once.
const CACHE_CAPACITY: u64 = 100_000;

/// How long a cached place lives past the cache's time to live: a starting session's no longer
/// than `starting`.
struct StartingExpiry {
    starting: Duration,
}

impl moka::Expiry<String, Place> for StartingExpiry {
    fn expire_after_create(
        &self,
        _: &String,
        place: &Place,
        _: std::time::Instant,
    ) -> Option<Duration> {
        (*place == Place::Starting).then_some(self.starting)
    }
}

impl Lookups {
    /// Lookups through `routes`, results kept for `ttl` (a starting session's for
    /// `starting_ttl` at most); `on_read` sees every read of the store (metrics).
    pub fn new(
        routes: Arc<dyn SessionRoutes>,
        ttl: Duration,
        starting_ttl: Duration,
        on_read: impl Fn(&Read) + Send + Sync + 'static,
    ) -> Self {
        let ttl = ttl.max(Duration::from_millis(1));
        Self {
            routes,
            cache: moka::future::Cache::builder()
                .max_capacity(CACHE_CAPACITY)
                .time_to_live(ttl)
                .expire_after(StartingExpiry {
                    starting: starting_ttl.clamp(Duration::from_millis(1), ttl),
                })
                .build(),
            on_read: Box::new(on_read),
        }
    }

    /// Changes of `session_id`'s item from now on, when the store can tell
    /// ([`SessionRoutes::subscribe`]).
    pub fn subscribe(&self, session_id: &str) -> Option<watch::Receiver<u64>> {
        self.routes.subscribe(session_id)
    }

    /// Drops what is cached for `session_id` (its task could not be dialled), so the next
    /// lookup reads the store.
    pub async fn forget(&self, session_id: &str) {
        self.cache.invalidate(session_id).await;
    }

    /// The place of `session_id`, from the cache or one (shared) read of the store.
    pub async fn place(&self, session_id: &str) -> Result<Place, LookupError> {
        self.cache
            .try_get_with_by_ref(session_id, async {
                let found = self
                    .routes
                    .item(session_id)
                    .await
                    .map(|i| place_of(i.as_ref()));
                (self.on_read)(&found);
                found
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn item(status: &str) -> RouteItem {
        RouteItem {
            internal_status: status.into(),
            private_ip: Some("10.0.0.7".into()),
            proxy_port: Some(9223),
            ended: false,
        }
    }

    #[test]
    fn places_by_status() {
        let ready = Place::Ready("10.0.0.7:9223".parse().unwrap());
        for (status, want) in [
            ("CREATING", Place::Starting),
            ("PROVISIONING", Place::Starting),
            ("STARTING", Place::Starting),
            ("READY", ready),
            ("ACTIVE", ready),
            ("TERMINATING", Place::Ended),
            ("STOPPED", Place::Ended),
            ("FAILED", Place::Ended),
            ("TIMED_OUT", Place::Ended),
            ("running", Place::Unroutable),
        ] {
            assert_eq!(place_of(Some(&item(status))), want, "{status}");
        }
        assert_eq!(place_of(None), Place::Unknown);
        let mut ended = item("READY");
        ended.ended = true;
        assert_eq!(place_of(Some(&ended)), Place::Ended);
        for (ip, port) in [
            (None, Some(9223)),
            (Some("nope"), Some(9223)),
            (Some("10.0.0.7"), None),
            (Some("10.0.0.7"), Some(0)),
        ] {
            let i = RouteItem {
                private_ip: ip.map(str::to_owned),
                proxy_port: port,
                ..item("READY")
            };
            assert_eq!(place_of(Some(&i)), Place::Unroutable, "{ip:?} {port:?}");
        }
    }

    /// A store that answers after `gate` opens, counting reads.
    struct Slow {
        reads: AtomicUsize,
        gate: tokio::sync::Semaphore,
    }

    impl SessionRoutes for Slow {
        fn item<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<Option<RouteItem>, StoreError>> {
            Box::pin(async move {
                self.reads.fetch_add(1, Ordering::SeqCst);
                let _ = self.gate.acquire().await;
                Ok(Some(item("STARTING")))
            })
        }
    }

    #[tokio::test]
    async fn concurrent_lookups_of_one_session_share_one_read() {
        let store = Arc::new(Slow {
            reads: AtomicUsize::new(0),
            gate: tokio::sync::Semaphore::new(0),
        });
        let counted = Arc::new(AtomicUsize::new(0));
        let ttl = Duration::from_secs(60);
        let lookups = Arc::new(Lookups::new(store.clone(), ttl, ttl, {
            let counted = counted.clone();
            move |_| {
                counted.fetch_add(1, Ordering::SeqCst);
            }
        }));
        let waiters: Vec<_> = (0..100)
            .map(|_| {
                let l = lookups.clone();
                tokio::spawn(async move { l.place("sess_a").await })
            })
            .collect();
        // Every waiter is parked on the one read in flight before the store answers.
        while store.reads.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        store.gate.add_permits(1000);
        for w in waiters {
            assert_eq!(w.await.unwrap().unwrap(), Place::Starting);
        }
        assert_eq!(store.reads.load(Ordering::SeqCst), 1);
        assert_eq!(counted.load(Ordering::SeqCst), 1);
        // Another session is its own read.
        lookups.place("sess_b").await.unwrap();
        assert_eq!(store.reads.load(Ordering::SeqCst), 2);
    }

    /// A document written into a watched directory wakes the subscribers of its session (and
    /// only theirs).
    #[tokio::test]
    async fn a_written_document_wakes_its_sessions_subscribers() {
        let dir = tempfile::tempdir().unwrap();
        let store = DirStore::new(dir.path().join("sessions"));
        let routes = DirRoutes::watching(store.clone());
        let mut a = routes.subscribe("sess_a").expect("watched");
        let b = routes.subscribe("sess_b").expect("watched");
        let doc = SessionDoc {
            session_id: "sess_a".into(),
            project_id: "p".into(),
            created_at: "2026-01-01T00:00:00.000Z".into(),
            expires_at: 5,
            ..Default::default()
        };
        tokio::task::spawn_blocking(move || store.create(&doc))
            .await
            .unwrap()
            .unwrap();
        // A guard against a hang only.
        tokio::time::timeout(Duration::from_secs(60), a.changed())
            .await
            .expect("the write wakes sess_a's subscriber")
            .unwrap();
        assert!(!b.has_changed().unwrap(), "sess_b's was not woken");
    }

    #[tokio::test]
    async fn documents_are_read_from_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let store = DirStore::new(dir.path());
        let mut d = SessionDoc {
            session_id: "sess_1".into(),
            project_id: "p".into(),
            created_at: "2026-01-01T00:00:00.000Z".into(),
            expires_at: 5,
            private_ip: Some("127.0.0.1".into()),
            proxy_port: Some(4000),
            ..Default::default()
        };
        d.set_status(InternalStatus::Ready);
        store.create(&d).unwrap();
        let routes = DirRoutes::new(store);
        let got = routes.item("sess_1").await.unwrap();
        assert_eq!(
            place_of(got.as_ref()),
            Place::Ready("127.0.0.1:4000".parse().unwrap())
        );
        assert_eq!(routes.item("sess_2").await.unwrap(), None);
        assert!(routes.item("../x").await.is_err());
    }
}
