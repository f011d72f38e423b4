//! The ECS task (`run`): the session item, the signing secret, the profile, Chrome and the
//! proxy, from start to the terminal status.
//!
//! Start: read the session item (keepAlive, expiry, the token for connectUrl) → load the signing
//! keys → hydrate the profile → start Chrome and the proxy → restore session cookies → choose the
//! public address → conditional READY. A session released meanwhile is never brought back: the
//! task closes Chrome, writes only `proxyBytes` and `endedAt`, and exits 0. Any failure before
//! READY is written as FAILED with a reason, and the exit is non-zero.
//!
//! End (signal, a client's Browser.close, idle, expiry, crash): terminal status → (persist:
//! session cookies exported over CDP) → Chrome closed through CDP → (persist: tar → gzip →
//! store, atomically) → `proxyBytes` and, last, `endedAt` — all within the shutdown budget.
//! Chrome closing itself cleanly after client traffic (a close the proxy could not inspect) ends
//! the same way, except that the session cookies went with it: the on-disk profile is saved.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};
use wallcrawler_contract::storage::SESSION_COOKIES_FILE;
use wallcrawler_contract::time::now_iso8601;
use wallcrawler_contract::{InternalStatus, session};

use crate::app::{EndReason, IdlePolicy, Session, SessionOptions, Started};
use crate::auth::{Authenticator, KeySource, StaticKeys};
use crate::chrome::{Chrome, LaunchOptions, cdp};
use crate::config::{ContextSource, KeyConfig, RunConfig};
use crate::profile::{self, ArchiveError, Limits, UnpackStats};
use crate::proxy::Limits as ProxyLimits;
use crate::public_ip;
use crate::secrets::SecretKeyCache;
use crate::stores::{
    ArchiveStore, BoxRead, NetworkLookup, ReadyResult, ReadyUpdate, SecretFetcher, SessionRecord,
    SessionStore, StoreError,
};
use crate::telemetry::clip;

/// Exit status of a failed task.
pub const EXIT_FAILURE: i32 = 1;

/// The most a `terminationReason` holds, in bytes.
pub const MAX_REASON_BYTES: usize = 1024;

/// The most the saved session cookies file may hold. Chrome keeps at most 3,300 cookies of
/// at most 4 KiB of name and value each (about 13 MiB); as JSON with their attributes they fit
/// in 16 MiB, so a larger file was not written by us.
pub const MAX_SESSION_COOKIES_BYTES: u64 = 16 << 20;

/// The outside services the task uses, each optional.
#[derive(Default, Clone)]
pub struct TaskDeps {
    pub sessions: Option<Arc<dyn SessionStore>>,
    pub archives: Option<Arc<dyn ArchiveStore>>,
    pub secrets: Option<Arc<dyn SecretFetcher>>,
    pub network: Option<Arc<dyn NetworkLookup>>,
    /// Pool mode: where claims come from.
    pub claims: Option<Arc<dyn crate::stores::ClaimQueue>>,
}

/// Writes to the session item, tolerant of its absence (no table configured).
pub(crate) struct Item<'a> {
    pub store: Option<&'a dyn SessionStore>,
    pub id: &'a str,
}

impl Item<'_> {
    pub(crate) async fn terminal(&self, status: InternalStatus, reason: Option<&str>) {
        let Some(store) = self.store else { return };
        // Whatever the source, the stored reason stays small (DynamoDB refuses items over 400 KB:
        // a huge reason would mean the terminal status is never written).
        let reason = reason.map(|r| clip(r, MAX_REASON_BYTES));
        match store
            .mark_terminal(self.id, status, reason.as_deref(), &now_iso8601())
            .await
        {
            Ok(true) => info!(status = status.as_str(), "terminal status written"),
            Ok(false) => info!("the session was already terminal; its status is kept"),
            Err(e) => error!(error = %e, "writing the terminal status failed"),
        }
    }

    pub(crate) async fn ended(&self, proxy_bytes: u64) {
        let Some(store) = self.store else { return };
        match store.mark_ended(self.id, proxy_bytes, &now_iso8601()).await {
            Ok(()) => info!(proxy_bytes, "endedAt written"),
            Err(e) => error!(error = %e, "writing endedAt failed"),
        }
    }

    /// FAILED with `reason`, then `endedAt`; the task's exit status.
    pub(crate) async fn fail(&self, reason: &str, proxy_bytes: u64) -> i32 {
        error!(reason, "session failed");
        self.terminal(InternalStatus::Failed, Some(reason)).await;
        self.ended(proxy_bytes).await;
        EXIT_FAILURE
    }
}

/// Retries `op` on unavailability with backoff, for up to `within`.
pub(crate) async fn retry<T, F, Fut>(
    what: &str,
    within: Duration,
    mut op: F,
) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    let deadline = Instant::now() + within;
    let mut backoff = Duration::from_millis(200);
    loop {
        match op().await {
            Err(e) if e.is_unavailable() && Instant::now() + backoff < deadline => {
                warn!(error = %e, "{what} failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
            other => return other,
        }
    }
}

/// Runs the task until it ends; returns the exit status.
pub async fn run_task(
    c: RunConfig,
    launch: LaunchOptions,
    deps: TaskDeps,
    signal: CancellationToken,
) -> i32 {
    let code = run_task_inner(c, launch, deps, signal).await;
    // The controller's own peak memory (not Chrome's): hostile archives are meant to leave
    // it small, and an operator sizing the task wants the figure.
    info!(
        exit_code = code,
        peak_rss_kib = peak_rss_kib(),
        "task finished"
    );
    code
}

/// This process's peak resident set (`VmHWM`), in KiB, when the kernel reports it.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

async fn run_task_inner(
    c: RunConfig,
    launch: LaunchOptions,
    deps: TaskDeps,
    signal: CancellationToken,
) -> i32 {
    if let Some(pool) = c.pool.clone() {
        return crate::pool::run_pool(c, pool, launch, deps, signal).await;
    }
    let sid = c.auth.session_id.clone();
    let item = Item {
        store: deps.sessions.as_deref(),
        id: &sid,
    };

    // The session item: lifecycle settings and the token for connectUrl.
    let record = match load_record(&deps, &sid).await {
        Ok(r) => r,
        Err(code) => return code,
    };
    if ended_before_start(record.as_ref(), &item).await {
        return 0;
    }
    let keep_alive = record.as_ref().map_or(c.keep_alive, |r| r.keep_alive);
    let expires_at = record.as_ref().and_then(|r| r.expires_at).or(c.expires_at);

    // The signing keys.
    let keys_cancel = CancellationToken::new();
    let _stop_refresher = keys_cancel.clone().drop_guard();
    let keys = match load_keys(&c, &deps, &item, &keys_cancel).await {
        Ok(k) => k,
        Err(code) => return code,
    };

    // The profile.
    let profile = launch.user_data_dir.clone();
    let plan = ContextPlan::from_config(&c);
    if let Err(code) = restore_profile(&c, &deps, &plan, &profile, &item).await {
        return code;
    }

    // Chrome and the proxy.
    let auth = Authenticator::new(
        keys,
        sid.clone(),
        c.auth.project_id.clone(),
        c.auth.leeway_seconds,
    );
    let opts = session_options(&c, auth, launch, keep_alive, expires_at);
    let session = match Session::start(opts, &signal).await {
        Ok(Started::Running(s)) => *s,
        Ok(Started::Interrupted) => {
            item.terminal(InternalStatus::Stopped, None).await;
            item.ended(0).await;
            return 0;
        }
        Err(e) => {
            return item
                .fail(&format!("the browser could not be started: {e}"), 0)
                .await;
        }
    };
    restore_session_cookies(&session.chrome, &profile).await;

    // READY, only from a pending status.
    let session = match announce_ready(session, &c, &deps, record.as_ref(), &item, None).await {
        Ok(s) => s,
        Err(code) => return code,
    };
    serve_until_end(session, &c, &deps, &plan, &profile, &item, &signal).await
}

/// The session item, retried while the table is unavailable; `Err` is the exit status. `None`
/// when no table is configured.
pub(crate) async fn load_record(deps: &TaskDeps, sid: &str) -> Result<Option<SessionRecord>, i32> {
    let Some(store) = &deps.sessions else {
        return Ok(None);
    };
    match retry("reading the session item", STARTUP_RETRY, || {
        store.load(sid)
    })
    .await
    {
        Ok(Some(r)) => Ok(Some(r)),
        Ok(None) => {
            error!("the session item does not exist");
            Err(EXIT_FAILURE)
        }
        Err(e) => {
            error!(error = %e, "the sessions table cannot be read");
            Err(EXIT_FAILURE)
        }
    }
}

/// A session released before its task started is not brought up: only `endedAt` is written.
async fn ended_before_start(record: Option<&SessionRecord>, item: &Item<'_>) -> bool {
    let Some(status) = record.and_then(|r| r.internal_status) else {
        return false;
    };
    if !status.is_terminal() {
        return false;
    }
    info!(
        status = status.as_str(),
        "the session ended before the task started"
    );
    item.ended(0).await;
    true
}

/// How long startup reads retry an unavailable service.
pub(crate) const STARTUP_RETRY: Duration = Duration::from_secs(10);

/// The signing keys: the literal key, or the Secrets Manager cache loaded (and refreshed until
/// `cancel`). `Err` is the exit status, FAILED already written.
pub(crate) async fn load_keys(
    c: &RunConfig,
    deps: &TaskDeps,
    item: &Item<'_>,
    cancel: &CancellationToken,
) -> Result<Arc<dyn KeySource>, i32> {
    match &c.auth.key {
        KeyConfig::Literal(k) => Ok(Arc::new(StaticKeys::new(k.as_bytes()))),
        KeyConfig::SecretArn(_) => {
            let Some(fetcher) = deps.secrets.clone() else {
                return Err(item.fail("no Secrets Manager client", 0).await);
            };
            let cache = SecretKeyCache::new(fetcher);
            if let Err(e) = cache.load_initial(STARTUP_RETRY).await {
                error!(error = %e, "loading the signing secret failed");
                let reason = format!(
                    "the signing secret is unavailable: {} (see the task log)",
                    e.summary()
                );
                return Err(item.fail(&reason, 0).await);
            }
            cache.spawn_refresher(cancel.clone());
            Ok(cache)
        }
    }
}

/// The profile a session starts from and whether it is saved at the end.
#[derive(Debug, Clone, Default)]
pub(crate) struct ContextPlan {
    /// The archive key, when the session has a context.
    pub key: Option<String>,
    pub persist: bool,
}

impl ContextPlan {
    fn from_config(c: &RunConfig) -> Self {
        let key = match &c.context {
            ContextSource::None => None,
            ContextSource::Bucket { key, .. } | ContextSource::Directory { key, .. } => {
                Some(key.clone())
            }
        };
        Self {
            key,
            persist: c.context_persist,
        }
    }
}

/// Unpacks the context's archive into `profile`. `Err` is the exit status, FAILED written.
pub(crate) async fn restore_profile(
    c: &RunConfig,
    deps: &TaskDeps,
    plan: &ContextPlan,
    profile: &Path,
    item: &Item<'_>,
) -> Result<(), i32> {
    let (Some(key), Some(archives)) = (&plan.key, &deps.archives) else {
        return Ok(());
    };
    let limits = Limits {
        max_bytes: c.profile_max_bytes,
        max_entries: c.profile_max_entries,
    };
    match hydrate(archives.as_ref(), key, profile, limits, STARTUP_RETRY).await {
        Ok(Some(stats)) => {
            info!(
                entries = stats.entries,
                bytes = stats.bytes,
                "profile restored"
            );
            Ok(())
        }
        Ok(None) => {
            info!("no archive for this context yet; starting with an empty profile");
            Ok(())
        }
        Err(e) => {
            error!(error = %e, "restoring the profile failed");
            let reason = format!("the profile could not be restored: {}", e.reason());
            Err(item.fail(&reason, 0).await)
        }
    }
}

/// The browser session's options from the configuration and the session item.
pub(crate) fn session_options(
    c: &RunConfig,
    auth: Authenticator,
    launch: LaunchOptions,
    keep_alive: bool,
    expires_at: Option<u64>,
) -> SessionOptions {
    SessionOptions {
        auth,
        listen: std::net::SocketAddr::new(c.proxy_host, c.proxy_port),
        metrics_addr: c.tuning.metrics_addr,
        chrome: launch,
        limits: ProxyLimits::from_tuning(&c.tuning),
        idle: idle_policy(c, keep_alive),
        expires_at,
        shutdown_budget: c.shutdown_budget,
        background_nice: c.background_nice,
    }
}

/// When a session without keepAlive ends for want of clients (`None`: keepAlive, never).
pub(crate) fn idle_policy(c: &RunConfig, keep_alive: bool) -> Option<IdlePolicy> {
    (!keep_alive).then_some(IdlePolicy {
        before_first_client: c.disconnect_timeout,
        after_last_client: c.disconnect_grace,
    })
}

/// Writes READY (only from a pending status) with the announced address and connectUrl.
/// `Err` is the exit status once the browser is closed: 0 when the session was released
/// meanwhile, a failure (written) when the write failed.
pub(crate) async fn announce_ready(
    session: Session,
    c: &RunConfig,
    deps: &TaskDeps,
    record: Option<&SessionRecord>,
    item: &Item<'_>,
    fallback_task_arn: Option<&str>,
) -> Result<Session, i32> {
    let ready = session.ready();
    let announced = public_ip::discover(
        c.public_ip,
        c.metadata_uri.as_deref(),
        deps.network.as_deref(),
    )
    .await;
    if let Some(store) = &deps.sessions {
        let connect_url = record
            .and_then(|r| r.signing_key.as_deref())
            .map(|k| session::connect_url(&announced.ip, ready.proxy_addr.port(), k));
        let update = ReadyUpdate {
            public_ip: announced.ip.clone(),
            task_arn: announced
                .task_arn
                .clone()
                .or_else(|| fallback_task_arn.map(str::to_owned)),
            connect_url,
            at: now_iso8601(),
        };
        let outcome = store.mark_ready(item.id, &update).await;
        if !matches!(outcome, Ok(ReadyResult::Ready)) {
            session
                .close_chrome(false, c.shutdown_budget.mul_f32(0.5))
                .await;
        }
        let bytes = session.proxy_bytes();
        match outcome {
            Ok(ReadyResult::Ready) => info!(public_ip = %announced.ip, "session READY"),
            Ok(ReadyResult::NotPending(status)) => {
                info!(status = ?status.map(|s| s.as_str()), "the session was released before it was ready; shutting down");
                session.finish().await;
                item.ended(bytes).await;
                return Err(0);
            }
            Err(e) => {
                session.finish().await;
                error!(error = %e, "writing READY failed");
                let reason = format!(
                    "announcing READY failed: {} (see the task log)",
                    e.summary()
                );
                return Err(item.fail(&reason, bytes).await);
            }
        }
    }
    info!(session.id = %item.id, proxy = %ready.proxy_addr, chrome.pid = ready.chrome_pid, "session ready");
    Ok(session)
}

/// From READY to the end: waits for whatever ends the session, writes the terminal status,
/// closes Chrome, saves the profile, writes `endedAt`. Returns the exit status.
pub(crate) async fn serve_until_end(
    session: Session,
    c: &RunConfig,
    deps: &TaskDeps,
    plan: &ContextPlan,
    profile: &Path,
    item: &Item<'_>,
    signal: &CancellationToken,
) -> i32 {
    let reason = session.wait_end(signal).await;
    let deadline = Instant::now() + c.shutdown_budget;
    let left = || deadline.saturating_duration_since(Instant::now());
    let crashed = matches!(reason, EndReason::ChromeCrashed(_));
    match &reason {
        EndReason::Expired => {
            item.terminal(InternalStatus::TimedOut, Some("the session expired"))
                .await
        }
        EndReason::ChromeCrashed(how) => {
            item.terminal(
                InternalStatus::Failed,
                Some(&format!("the browser exited unexpectedly ({how})")),
            )
            .await
        }
        _ => item.terminal(InternalStatus::Stopped, None).await,
    }

    let persist = plan.persist && !crashed && plan.key.is_some() && deps.archives.is_some();
    let mut extra: Vec<(String, Vec<u8>)> = Vec::new();
    let chrome_gone = matches!(reason, EndReason::ChromeExitedCleanly);
    if persist && chrome_gone {
        warn!(
            "the browser closed itself; its profile on disk is saved, but its session cookies \
             cannot be exported any more"
        );
    } else if persist {
        match cdp::all_cookies(&session.chrome.browser_ws_url(), left().mul_f32(0.2)).await {
            Ok(all) => {
                let params = cdp::session_cookie_params(&all);
                info!(session_cookies = params.len(), "session cookies exported");
                extra.push((
                    SESSION_COOKIES_FILE.to_owned(),
                    serde_json::to_vec(&params).unwrap_or_default(),
                ));
            }
            Err(e) => {
                warn!(error = %e, "exporting session cookies failed; persisting without them")
            }
        }
    }
    let closed = session.close_chrome(crashed, left().mul_f32(0.4)).await;
    if crashed {
        info!("the browser crashed; the previous archive is kept");
    } else if let (true, Some(key), Some(archives)) = (persist, &plan.key, &deps.archives) {
        if !chrome_gone && closed.as_ref().is_some_and(|o| !o.is_clean()) {
            warn!("chrome did not close cleanly; persisting what it left on disk");
        }
        let started = Instant::now();
        match tokio::time::timeout(
            left().saturating_sub(Duration::from_secs(2)),
            persist_profile(archives.clone(), key, profile, extra),
        )
        .await
        {
            Ok(Ok(bytes)) => info!(
                bytes,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "profile saved"
            ),
            Ok(Err(e)) => {
                error!(error = %e, "saving the profile failed; the previous archive is kept")
            }
            Err(_) => error!(
                "saving the profile ran out of shutdown budget; the previous archive is kept"
            ),
        }
    }
    let bytes = session.proxy_bytes();
    session.finish().await;
    item.ended(bytes).await;
    reason.exit_code()
}

/// Why the profile could not be restored or saved.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    #[error("the archive worker stopped: {0}")]
    Worker(String),
}

impl ProfileError {
    /// What the session item says: the archive's own fault in full (names already shortened),
    /// a service's failure in a few words (the detail is for the task log).
    pub fn reason(&self) -> String {
        match self {
            Self::Archive(e) => e.to_string(),
            Self::Store(e) => format!("{} (see the task log)", e.summary()),
            Self::Worker(_) => "an internal error (see the task log)".to_owned(),
        }
    }
}

/// Streams the archive from the store through gunzip and untar into `dest`. `None` when the
/// store has no archive (a new context).
pub async fn hydrate(
    store: &dyn ArchiveStore,
    key: &str,
    dest: &Path,
    limits: Limits,
    retry_for: Duration,
) -> Result<Option<UnpackStats>, ProfileError> {
    let Some(reader) = retry("fetching the profile archive", retry_for, || {
        store.open(key)
    })
    .await?
    else {
        return Ok(None);
    };
    let dest = dest.to_owned();
    let stats = tokio::task::spawn_blocking(move || {
        let sync = tokio_util::io::SyncIoBridge::new(reader);
        profile::unpack_gz(
            std::io::BufReader::with_capacity(256 * 1024, sync),
            &dest,
            limits,
        )
    })
    .await
    .map_err(|e| ProfileError::Worker(e.to_string()))??;
    Ok(Some(stats))
}

/// A chunk of archive bytes from the packer, or how the packing ended.
enum Chunk {
    Data(Bytes),
    End,
    Failed(String),
}

/// `std::io::Write` for the blocking packer, sending chunks to the async uploader.
struct ChunkWriter {
    tx: mpsc::Sender<Chunk>,
    buf: Vec<u8>,
}

impl std::io::Write for ChunkWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= 1 << 20 {
            self.flush()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(
            &mut self.buf,
            Vec::with_capacity(1 << 20),
        ));
        self.tx
            .blocking_send(Chunk::Data(chunk))
            .map_err(|_| std::io::Error::other("the uploader stopped"))
    }
}

/// An `AsyncRead` over the packer's chunks that ends only after an explicit end marker, so a
/// packer that fails or dies can never look like a complete (truncated) archive.
fn chunk_reader(rx: mpsc::Receiver<Chunk>) -> BoxRead {
    let stream = futures_util::stream::unfold((rx, false), |(mut rx, done)| async move {
        if done {
            return None;
        }
        match rx.recv().await {
            Some(Chunk::Data(b)) => Some((Ok(b), (rx, false))),
            Some(Chunk::End) => None,
            Some(Chunk::Failed(e)) => Some((Err(std::io::Error::other(e)), (rx, true))),
            None => Some((
                Err(std::io::Error::other("the archive writer stopped early")),
                (rx, true),
            )),
        }
    });
    Box::pin(tokio_util::io::StreamReader::new(stream))
}

/// Packs `src` (plus `extra` root files) and stores it under `key`, streaming.
pub async fn persist_profile(
    store: Arc<dyn ArchiveStore>,
    key: &str,
    src: &Path,
    extra: Vec<(String, Vec<u8>)>,
) -> Result<u64, ProfileError> {
    let (tx, rx) = mpsc::channel::<Chunk>(8);
    let src: PathBuf = src.to_owned();
    let packer = tokio::task::spawn_blocking(move || {
        let refs: Vec<(&str, &[u8])> = extra
            .iter()
            .map(|(n, d)| (n.as_str(), d.as_slice()))
            .collect();
        let mut writer = ChunkWriter {
            tx: tx.clone(),
            buf: Vec::with_capacity(1 << 20),
        };
        let packed = profile::pack_gz(&src, &mut writer, &refs).and_then(|(stats, w)| {
            std::io::Write::flush(w).map_err(|source| ArchiveError::Write {
                path: "<archive>".into(),
                source,
            })?;
            Ok(stats)
        });
        match &packed {
            Ok(_) => {
                let _ = tx.blocking_send(Chunk::End);
            }
            Err(e) => {
                let _ = tx.blocking_send(Chunk::Failed(e.to_string()));
            }
        }
        packed
    });
    let uploaded = store.put(key, chunk_reader(rx)).await;
    let packed = packer
        .await
        .map_err(|e| ProfileError::Worker(e.to_string()))?;
    packed?;
    Ok(uploaded?)
}

/// Puts back the session cookies a previous session saved (Chrome never writes them to disk).
pub(crate) async fn restore_session_cookies(chrome: &Chrome, profile: &Path) {
    let file = profile.join(SESSION_COOKIES_FILE);
    let read = {
        let file = file.clone();
        tokio::task::spawn_blocking(move || {
            profile::read_own_file(&file, MAX_SESSION_COOKIES_BYTES)
        })
        .await
    };
    // Removing a link removes the link, never what it points at.
    let _ = tokio::fs::remove_file(&file).await;
    let data = match read {
        Ok(Ok(Some(data))) => data,
        Ok(Ok(None)) => return,
        Ok(Err(e)) => {
            warn!(error = %e, "the saved session cookies were not read");
            return;
        }
        Err(e) => {
            warn!(error = %e, "reading the saved session cookies stopped");
            return;
        }
    };
    let cookies: Vec<serde_json::Value> = match serde_json::from_slice(&data) {
        Ok(v) => v,
        Err(_) => {
            warn!("the saved session cookies are not a JSON array; ignoring them");
            return;
        }
    };
    let n = cookies.len();
    match cdp::set_cookies(&chrome.browser_ws_url(), cookies, Duration::from_secs(5)).await {
        Ok(()) => info!(session_cookies = n, "session cookies restored"),
        Err(e) => warn!(error = %e, "restoring session cookies failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stores::DirectoryArchives;

    #[tokio::test]
    async fn persist_then_hydrate_through_a_directory_store() {
        let store: Arc<dyn ArchiveStore> = Arc::new(DirectoryArchives {
            dir: tempfile::tempdir().unwrap().keep(),
        });
        let src = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(src.path().join("Default")).unwrap();
        std::fs::write(src.path().join("Default/Cookies"), vec![42u8; 3 << 20]).unwrap();
        let n = persist_profile(
            store.clone(),
            "p/c/profile.tar.gz",
            src.path(),
            vec![(SESSION_COOKIES_FILE.into(), b"[]".to_vec())],
        )
        .await
        .unwrap();
        assert!(n > 0);
        let dest = tempfile::tempdir().unwrap();
        let limits = Limits {
            max_bytes: 1 << 30,
            max_entries: 1000,
        };
        let stats = hydrate(
            store.as_ref(),
            "p/c/profile.tar.gz",
            dest.path(),
            limits,
            Duration::from_secs(1),
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(stats.bytes, (3 << 20) + 2);
        assert_eq!(
            std::fs::read(dest.path().join("Default/Cookies")).unwrap(),
            vec![42u8; 3 << 20]
        );
        assert!(
            hydrate(
                store.as_ref(),
                "p/none/profile.tar.gz",
                dest.path(),
                limits,
                Duration::from_secs(1)
            )
            .await
            .unwrap()
            .is_none()
        );
    }

    #[tokio::test]
    async fn a_failing_packer_never_completes_an_upload() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn ArchiveStore> = Arc::new(DirectoryArchives {
            dir: dir.path().to_owned(),
        });
        store.put("k", Box::pin(&b"previous"[..])).await.unwrap();
        let missing = dir.path().join("no-such-profile");
        assert!(
            persist_profile(store.clone(), "k", &missing, vec![])
                .await
                .is_err()
        );
        assert_eq!(std::fs::read(dir.path().join("k")).unwrap(), b"previous");
    }
}
