//! The ECS task (`run`): the session item, the signing secret, the profile, Chrome and the
//! proxy, from start to the terminal status.
//!
//! Start: read the session item (keepAlive, expiry, the token for connectUrl) → load the signing
//! keys → hydrate the profile → start Chrome and the proxy → restore session cookies → choose the
//! public address → conditional READY. A session released meanwhile is never brought back: the
//! task closes Chrome, writes only `proxyBytes` and `endedAt`, and exits 0. Any failure before
//! READY is written as FAILED with a reason, and the exit is non-zero.
//!
//! End (signal, a client's Browser.close, idle, expiry, crash), the steps of
//! [`crate::shutdown::Step`] each within its deadline: stop admitting → (persist: session
//! cookies exported over CDP) → Chrome closed through CDP → (persist: tar → gzip → store,
//! atomically; [`crate::profile::persist_profile`]) → terminal status → `proxyBytes` and, last,
//! `endedAt` — all within the shutdown budget.
//! Chrome closing itself cleanly after client traffic (a close the proxy could not inspect) ends
//! the same way, except that the session cookies went with it: the on-disk profile is saved.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};
use wallcrawler_contract::storage::SESSION_COOKIES_FILE;
use wallcrawler_contract::time::now_iso8601;
use wallcrawler_contract::{InternalStatus, session};

use crate::app::{EndReason, IdlePolicy, Session, SessionOptions, Started};
use crate::auth::{Authenticator, KeySource, StaticKeys};
use crate::chrome::{Chrome, LaunchOptions, cdp};
use crate::config::{ContextSource, KeyConfig, RunConfig};
use crate::profile::{self, Limits, hydrate, persist_profile};
use crate::proxy::Limits as ProxyLimits;
use crate::public_ip;
use crate::secrets::{self, SecretFetcher, SecretKeyCache};
use crate::shutdown::{Shutdown, Step, Steps};
use crate::stores::{
    ArchiveStore, NetworkLookup, ReadyResult, ReadyUpdate, SessionRecord, SessionStore, retry,
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
    pub secrets: Option<Arc<SecretFetcher>>,
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

/// Runs the task until it ends; returns the exit status.
pub async fn run_task(
    c: RunConfig,
    launch: LaunchOptions,
    deps: TaskDeps,
    tasks: &Shutdown,
) -> i32 {
    let code = match c.pool.clone() {
        Some(pool) => crate::pool::run_pool(c, pool, launch, deps, tasks).await,
        None => run_session_task(c, launch, deps, tasks).await,
    };
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

/// One session's task, from the session item to the exit status: start, READY, serve, end.
async fn run_session_task(
    c: RunConfig,
    launch: LaunchOptions,
    deps: TaskDeps,
    tasks: &Shutdown,
) -> i32 {
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
    let keys = match load_keys(&c, &deps, &item, tasks).await {
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
    let opts = session_options(&c, auth, launch, keep_alive, expires_at, tasks);
    let session = match Session::start(opts, tasks.token()).await {
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
    serve_until_end(session, &c, &deps, &plan, &profile, &item, tasks.token()).await
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

/// The signing keys: the literal key, or the Secrets Manager cache loaded (and refreshed, on
/// `tasks`, until the run ends). `Err` is the exit status, FAILED already written.
pub(crate) async fn load_keys(
    c: &RunConfig,
    deps: &TaskDeps,
    item: &Item<'_>,
    tasks: &Shutdown,
) -> Result<Arc<dyn KeySource>, i32> {
    match &c.auth.key {
        KeyConfig::Literal(k) => Ok(Arc::new(StaticKeys::new(k.as_bytes()))),
        KeyConfig::SecretArn(_) => {
            let Some(fetcher) = deps.secrets.clone() else {
                return Err(item.fail("no Secrets Manager client", 0).await);
            };
            let cache = SecretKeyCache::new(fetcher, tasks.tracker().clone());
            if let Err(e) = cache.load_initial(STARTUP_RETRY).await {
                error!(error = %e, "loading the signing secret failed");
                let reason = format!(
                    "the signing secret is unavailable: {} (see the task log)",
                    secrets::summary(&e)
                );
                return Err(item.fail(&reason, 0).await);
            }
            cache.spawn_refresher(tasks.token().clone());
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
    tasks: &Shutdown,
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
        tasks: tasks.clone(),
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
    let announced = match public_ip::discover(
        c.public_ip,
        c.metadata_uri.as_deref(),
        deps.network.as_deref(),
        c.public_ip_required,
    )
    .await
    {
        Ok(a) => a,
        // Direct mode: clients could not reach a private address, so no READY at all.
        Err(e) => {
            error!(error = %e, cause = ?std::error::Error::source(&e).map(|s| s.to_string()), "no public IP to announce");
            session
                .close_chrome(false, Step::ChromeClosed.share(c.shutdown_budget))
                .await;
            let bytes = session.proxy_bytes();
            session.finish();
            return Err(item.fail(&e.reason(), bytes).await);
        }
    };
    if let Some(store) = &deps.sessions {
        let connect_url = record
            .and_then(|r| r.signing_key.as_deref())
            .map(|k| session::connect_url(&announced.ip, ready.proxy_addr.port(), k));
        // Where the connect gateway dials this task: its private address (task metadata),
        // else the address the proxy is bound to, else the announced one.
        let private_ip = announced.private_ip.clone().unwrap_or_else(|| {
            let bound = ready.proxy_addr.ip();
            if bound.is_unspecified() {
                announced.ip.clone()
            } else {
                bound.to_string()
            }
        });
        let update = ReadyUpdate {
            public_ip: announced.ip.clone(),
            private_ip,
            proxy_port: ready.proxy_addr.port(),
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
                .close_chrome(false, Step::ChromeClosed.share(c.shutdown_budget))
                .await;
        }
        let bytes = session.proxy_bytes();
        match outcome {
            Ok(ReadyResult::Ready) => info!(public_ip = %announced.ip, "session READY"),
            Ok(ReadyResult::NotPending(status)) => {
                info!(status = ?status.map(|s| s.as_str()), "the session was released before it was ready; shutting down");
                session.finish();
                item.ended(bytes).await;
                return Err(0);
            }
            Err(e) => {
                session.finish();
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

/// From READY to the end: waits for whatever ends the session, then runs [`end_session`].
/// Returns the exit status.
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
    end_session(session, &reason, c, deps, plan, profile, item).await;
    reason.exit_code()
}

/// The end sequence, each step of [`Step::ALL`] within its deadline of
/// `SHUTDOWN_BUDGET_SECONDS`: stop admitting → session cookies → Chrome closed (relays end
/// with it) → archive → terminal status → `proxyBytes` and `endedAt`.
async fn end_session(
    session: Session,
    reason: &EndReason,
    c: &RunConfig,
    deps: &TaskDeps,
    plan: &ContextPlan,
    profile: &Path,
    item: &Item<'_>,
) {
    let steps = Steps::start(c.shutdown_budget);
    session.stop_admitting();
    let crashed = matches!(reason, EndReason::ChromeCrashed(_));
    let chrome_gone = matches!(reason, EndReason::ChromeExitedCleanly);
    let target = match (&plan.key, &deps.archives) {
        (Some(key), Some(archives)) if plan.persist && !crashed => Some((key, archives)),
        _ => None,
    };
    let mut extra = Vec::new();
    if target.is_some() {
        extra.extend(export_session_cookies(&session, chrome_gone, &steps).await);
    }
    let closed = session
        .close_chrome(crashed, steps.left(Step::ChromeClosed))
        .await;
    let bytes = session.proxy_bytes();
    session.finish();
    if crashed {
        info!("the browser crashed; the previous archive is kept");
    } else if let Some((key, archives)) = target {
        if !chrome_gone && closed.as_ref().is_some_and(|o| !o.is_clean()) {
            warn!("chrome did not close cleanly; persisting what it left on disk");
        }
        save_profile(archives.clone(), key, profile, extra, &steps).await;
    }
    steps
        .run(Step::TerminalStatus, write_terminal_status(item, reason))
        .await;
    steps.run(Step::EndedAt, item.ended(bytes)).await;
}

/// The session cookies as the archive's extra root file (Chrome never writes them to disk);
/// none when Chrome is gone already or the export fails (the profile is saved without them).
async fn export_session_cookies(
    session: &Session,
    chrome_gone: bool,
    steps: &Steps,
) -> Option<(String, Vec<u8>)> {
    if chrome_gone {
        warn!(
            "the browser closed itself; its profile on disk is saved, but its session cookies \
             cannot be exported any more"
        );
        return None;
    }
    let url = session.chrome.browser_ws_url();
    match cdp::all_cookies(&url, steps.left(Step::Cookies)).await {
        Ok(all) => {
            let params = cdp::session_cookie_params(&all);
            info!(session_cookies = params.len(), "session cookies exported");
            let json = serde_json::to_vec(&params).unwrap_or_default();
            Some((SESSION_COOKIES_FILE.to_owned(), json))
        }
        Err(e) => {
            warn!(error = %e, "exporting session cookies failed; persisting without them");
            None
        }
    }
}

/// Packs and uploads the profile within the archive step; on any failure the previous
/// archive stays the context's.
async fn save_profile(
    archives: Arc<dyn ArchiveStore>,
    key: &str,
    profile: &Path,
    extra: Vec<(String, Vec<u8>)>,
    steps: &Steps,
) {
    let started = Instant::now();
    let saved = steps
        .run(
            Step::Archive,
            persist_profile(archives, key, profile, extra),
        )
        .await;
    match saved {
        Some(Ok(bytes)) => info!(
            bytes,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "profile saved"
        ),
        Some(Err(e)) => {
            error!(error = %e, "saving the profile failed; the previous archive is kept")
        }
        None => {
            error!("saving the profile ran out of shutdown budget; the previous archive is kept")
        }
    }
}

/// The terminal status for how the session ended (an item already terminal keeps its own).
async fn write_terminal_status(item: &Item<'_>, reason: &EndReason) {
    match reason {
        EndReason::Expired => {
            item.terminal(InternalStatus::TimedOut, Some("the session expired"))
                .await
        }
        EndReason::ChromeCrashed(how) => {
            let why = format!("the browser exited unexpectedly ({how})");
            item.terminal(InternalStatus::Failed, Some(&why)).await
        }
        _ => item.terminal(InternalStatus::Stopped, None).await,
    }
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
