//! The local platform's controllers: `wallcrawler-controller run` child processes, each with
//! its proxy on a free port of 127.0.0.1.
//!
//! - [`LocalPool`] (the default): N controllers kept warm, taking sessions through a directory
//!   queue of claims (`<data>/claims`, [`DirQueue`]) with SQS's semantics — each claim taken by
//!   exactly one controller; a claim whose controller exits before READY is put back for
//!   another. A new controller is started whenever fewer than N are idle.
//! - [`LocalLauncher`] (`--pool 0`): one controller started per session, as `RunTask` does;
//!   the pool starts one so too for a session beyond its project's share of the pool
//!   (`serve --pool-share`).
//!
//! When a controller exits, a session it served that has no terminal status is marked FAILED,
//! and every session it served gets `endedAt` and gives back its slot and context lease — as
//! the ECS task-state handler does on AWS.
//!
//! Started as root, `serve` runs each controller's Chrome as a uid:gid of its own, which no
//! account and no other process uses ([`wallcrawler_local::chrome_uids`]:
//! `LOCAL_CHROME_UIDS`), released when the controller ends; `CHROME_USER` in `serve`'s
//! environment chooses one user for all instead (not root; empty = a uid each). Chrome, and a client driving it, then cannot read the data
//! directory (0700 root: `local.json` with the API and signing keys, the session documents,
//! the context archives), the controllers' `/proc/<pid>/environ`, nor another session's
//! profile (0700, its own Chrome's), and cannot signal or ptrace the other browsers. Chrome
//! cannot reach into the data directory either, so the profiles then live in a directory of
//! their own, `<tmp>/wallcrawler-browsers-<uuid>` (0711 root: entered, not listed), removed
//! when `serve` ends. Not root, Chrome runs as the user running `serve`, who can read all of
//! it: then the proxy's file guard is the wall.

use backon::{BackoffBuilder as _, ExponentialBackoff};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wallcrawler_contract::retry;
use wallcrawler_contract::task_env;

use async_trait::async_trait;
use futures_util::future::BoxFuture;
use tokio::time::Instant;
use tracing::{debug, error, info, warn};
use wallcrawler_contract::{InternalStatus, time::now_iso8601};
use wallcrawler_local::claim_queue::DirQueue;

use super::{DirSessions, FileMap};
use crate::error::StoreError;
use crate::model::ContextRecord;
use crate::stores::*;
use wallcrawler_local::chrome_uids::{ChromeUids, LOCAL_CHROME_UIDS, LOCK_DIR, UidError};

/// Controller settings a local controller takes from `serve`'s own environment when set there.
pub const PASSED_THROUGH: [&str; 15] = [
    task_env::CHROME_PATH,
    task_env::FFMPEG_PATH,
    task_env::RECORDING_FPS,
    task_env::RECORDING_MAX_BYTES,
    task_env::CHROME_NETWORK,
    task_env::DOWNLOADS_MAX_BYTES,
    task_env::DOWNLOADS_MAX_FILES,
    task_env::CDP_DISCONNECT_TIMEOUT,
    task_env::CDP_DISCONNECT_GRACE,
    task_env::CDP_KEEPALIVE_SECONDS,
    task_env::POOL_IDLE_LIFETIME_SECONDS,
    task_env::BACKGROUND_NICE,
    task_env::EGRESS_ALLOW,
    task_env::AD_BLOCK_LISTS,
    task_env::VIEWER_FRAME_ANCESTORS,
];

/// Controllers share this machine's cores: a warm-up or a close (which no client waits on)
/// yields to the sessions being driven. Measured with scripts/bench/lifecycle.sh (pool 2, two
/// cores): see the README's figures. `BACKGROUND_NICE` in `serve`'s environment overrides it.
const BACKGROUND_NICE: &str = "19";

/// How pool controllers' names start (`pool-<serve's pid>-<n>`); a controller started for one
/// session is named by the session's id (`sess_…`).
const POOL_NAME: &str = "pool-";

/// How often the pool looks for claimed controllers to replace when the claims directory
/// cannot be watched.
const POOL_TICK: Duration = Duration::from_millis(10);

/// How often the pool looks anyway when the claims directory is watched: a claim's move or a
/// controller's exit wakes it at once; this bounds what a lost wake-up would cost. Before the
/// watch, the pool looked every 10 ms (1.4 % of a core while idle, Step 22).
const POOL_RECHECK: Duration = Duration::from_millis(250);

/// A controller that exits sooner than this without serving counts as a failed start.
const EARLY_EXIT: Duration = Duration::from_secs(10);

/// Where a session that ends is recorded: its document, and the project slot and context
/// lease it gives back (the same stores the API uses: their locks are per instance).
#[derive(Clone)]
pub struct Ends {
    /// The session documents children write their status to (`SESSIONS_DIR`).
    pub sessions: DirSessions,
    /// Projects' slots.
    pub slots: Arc<dyn SlotStore>,
    /// Context records, whose writer lease a persisting session gives back at its end.
    pub contexts: Arc<dyn ContextStore>,
}

impl Ends {
    /// The slots and contexts files of `data_dir`, with `sessions`.
    pub fn in_dir(data_dir: &Path, sessions: DirSessions) -> Ends {
        let slots: FileMap<Vec<String>> = FileMap::new(data_dir.join("active-sessions.json"));
        let contexts: FileMap<ContextRecord> = FileMap::new(data_dir.join("contexts.json"));
        Ends {
            sessions,
            slots: Arc::new(slots),
            contexts: Arc::new(contexts),
        }
    }
}

/// What every local controller shares, and the running children (by session id or pool name).
#[derive(Clone)]
pub struct Controllers {
    /// The `wallcrawler-controller` binary each child runs.
    pub controller_bin: PathBuf,
    /// The local platform's data directory (`sessions/`, `contexts/`, `profiles/`, `claims/`).
    pub data_dir: PathBuf,
    /// Where controllers' profiles (and the directories beside them) go, and who Chrome runs as.
    browsers: Arc<Browsers>,
    /// The public key (SPKI PEM) children verify tokens with (`WALLCRAWLER_JWT_PUBLIC_KEY`):
    /// never the private key, which stays with the API.
    pub public_key: String,
    /// Where a controller's exit is recorded.
    pub ends: Ends,
    /// Mints each session's control-mode live view for its controller (the API's signer: the
    /// key stays in this process); `None`: controllers get none and refuse handoffs.
    live_views: Option<Arc<dyn Signer>>,
    /// Who may frame a controller's live viewer (`VIEWER_FRAME_ANCESTORS`): its own origin and
    /// the dashboard's ([`Self::framed_by_dashboard_at`]).
    viewer_frame_ancestors: String,
    children: Arc<Mutex<HashMap<String, u32>>>,
    /// Told after a child's exit is recorded and it is forgotten (the pool refills).
    exited: Arc<tokio::sync::Notify>,
    stopping: Arc<AtomicBool>,
}

impl Controllers {
    /// Shared state for controllers started from `controller_bin` under `data_dir`; none runs
    /// yet. Fails when `LOCAL_CHROME_UIDS` is not a range, or its locks cannot be kept.
    pub fn new(
        controller_bin: PathBuf,
        data_dir: PathBuf,
        public_key: String,
        ends: Ends,
    ) -> Result<Self, UidError> {
        let browsers = Arc::new(Browsers::new(
            &data_dir,
            std::env::var_os(task_env::CHROME_USER),
            std::env::var(LOCAL_CHROME_UIDS).ok().as_deref(),
        )?);
        Ok(Self {
            controller_bin,
            data_dir,
            browsers,
            public_key,
            ends,
            live_views: None,
            viewer_frame_ancestors: "'self'".to_owned(),
            children: Default::default(),
            exited: Default::default(),
            stopping: Default::default(),
        })
    }

    /// Controllers started from now on get their session's live view, minted by `signer`.
    pub fn with_live_views(mut self, signer: Arc<dyn Signer>) -> Self {
        self.live_views = Some(signer);
        self
    }

    /// Controllers' live viewers may be framed by the dashboard of the API on 127.0.0.1:`port`
    /// (reached as `127.0.0.1` or `localhost`), besides their own origin.
    /// `VIEWER_FRAME_ANCESTORS` in `serve`'s environment replaces it.
    pub fn framed_by_dashboard_at(mut self, port: u16) -> Self {
        self.viewer_frame_ancestors =
            format!("'self' http://127.0.0.1:{port} http://localhost:{port}");
        self
    }

    /// `session_id`'s control-mode live view, for its controller: `None` without a signer, or
    /// when the document is gone or expired (the controller then refuses handoffs).
    async fn live_view(
        &self,
        session_id: &str,
    ) -> Option<wallcrawler_contract::task_api::LiveViewGrant> {
        let signer = self.live_views.as_ref()?;
        let doc = match self.ends.sessions.get(session_id).await {
            Ok(d) => d?,
            Err(e) => {
                warn!(session.id = %session_id, error = %crate::error::chain(&e), "no live view for the controller: its session could not be read");
                return None;
            }
        };
        let now = wallcrawler_contract::time::unix_millis() / 1000;
        crate::task_api::live_view_grant(signer.as_ref(), &doc, now).await
    }

    /// The profile directory of controller `name`.
    fn profile(&self, name: &str) -> PathBuf {
        self.browsers.profiles.join(name)
    }

    /// `run` with what every local controller has: the shared session documents, the key, a
    /// proxy on 127.0.0.1 only (announced as 127.0.0.1: nobody else on the network reaches a
    /// local browser), text logs on our stderr.
    fn command(&self, profile: &Path) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(&self.controller_bin);
        cmd.arg("run")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", std::env::var_os("HOME").unwrap_or_default())
            .env(task_env::SESSIONS_DIR, self.data_dir.join("sessions"))
            // Session files (downloads stored, uploads read) live beside the contexts, under
            // `contexts/files/…`, as in the bucket: where the API serves and stores them.
            .env(task_env::FILES_DIR, self.data_dir.join("contexts"))
            .env(task_env::AD_FILTER_CACHE, self.data_dir.join("ad-filter"))
            .env(task_env::PUBLIC_KEY, &self.public_key)
            .env(task_env::CDP_PROXY_PORT, "0")
            .env(task_env::CDP_PROXY_HOST, "127.0.0.1")
            .env(task_env::CHROME_DEBUG_PORT, "0")
            .env(task_env::PUBLIC_IP, "127.0.0.1")
            // The local connect gateway's PROXY headers name the real client (and whether it
            // used TLS); only connections from this machine may carry one.
            .env(task_env::TRUSTED_PROXY_NETWORKS, "127.0.0.0/8,::1/128")
            .env(task_env::USER_DATA_DIR, profile)
            .env(task_env::METRICS_ADDR, "")
            // A controller never outlives `serve`, however `serve` ends.
            .env(task_env::EXIT_WITH_PARENT, "true")
            .env(task_env::BACKGROUND_NICE, BACKGROUND_NICE)
            .env(task_env::LOG_FORMAT, "text")
            .env(
                task_env::VIEWER_FRAME_ANCESTORS,
                &self.viewer_frame_ancestors,
            )
            .env(
                "RUST_LOG",
                std::env::var("WALLCRAWLER_CONTROLLER_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        for var in PASSED_THROUGH {
            if let Some(v) = std::env::var_os(var) {
                cmd.env(var, v);
            }
        }
        cmd
    }

    /// Starts `cmd` as child `name`, its Chrome's user chosen ([`Browsers::user`]); `on_exit`
    /// runs with how it ended, then the user is released and the child forgotten (so
    /// [`Self::wait_all`] returns only once every exit is recorded).
    fn spawn(
        &self,
        name: &str,
        mut cmd: tokio::process::Command,
        on_exit: impl FnOnce(String) -> BoxFuture<'static, ()> + Send + 'static,
    ) -> StoreResult<u32> {
        let (chrome_user, own_uid) = self
            .browsers
            .user()
            .map_err(|e| StoreError::failed_by("choosing Chrome's user", e))?;
        cmd.env(task_env::CHROME_USER, chrome_user);
        let mut child = cmd.spawn().map_err(|e| {
            self.browsers.release(own_uid);
            StoreError::failed_by(format!("starting {}", self.controller_bin.display()), e)
        })?;
        let pid = child.id().unwrap_or_default();
        self.children
            .lock()
            .expect("not poisoned")
            .insert(name.to_owned(), pid);
        let (children, name) = (self.children.clone(), name.to_owned());
        let (browsers, exited) = (self.browsers.clone(), self.exited.clone());
        tokio::spawn(async move {
            let how = match child.wait().await {
                Ok(s) => s.to_string(),
                Err(e) => e.to_string(),
            };
            on_exit(how).await;
            // After `on_exit` removed the profile: the uid's next holder finds nothing of it.
            browsers.release(own_uid);
            children.lock().expect("not poisoned").remove(&name);
            exited.notify_one();
        });
        Ok(pid)
    }

    /// SIGTERM to child `name`, if it runs.
    fn signal(&self, name: &str) -> bool {
        let pid = self
            .children
            .lock()
            .expect("not poisoned")
            .get(name)
            .copied();
        if let Some(pid) = pid {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        pid.is_some()
    }

    fn names(&self) -> Vec<String> {
        self.children
            .lock()
            .expect("not poisoned")
            .keys()
            .cloned()
            .collect()
    }

    /// Server shutdown: no new controllers, SIGTERM to every running one.
    pub fn stop_all(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        for name in self.names() {
            self.signal(&name);
        }
    }

    /// Waits (bounded) until every child has exited and its exit is recorded.
    pub async fn wait_all(&self, within: Duration) {
        let deadline = Instant::now() + within;
        while !self.children.lock().expect("not poisoned").is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if self.browsers.own_dir {
            let _ = tokio::fs::remove_dir_all(&self.browsers.profiles).await;
        }
    }

    /// A controller serving `id` exited: as the ECS task-state handler does, a session left
    /// without a terminal status is FAILED, and every session gets `endedAt` (so no context stays
    /// busy forever) and gives back its slot and lease.
    async fn record_exit(&self, id: &str, how: &str) {
        let reason = format!("the browser task exited ({how}) before the session ended");
        match self
            .ends
            .sessions
            .mark_terminal(
                id,
                Terminal {
                    status: InternalStatus::Failed,
                    reason: Some(&reason),
                    ended: true,
                },
                &now_iso8601(),
            )
            .await
        {
            Ok(Cond::Done(d) | Cond::Failed(Some(d))) => {
                if d.internal() == Some(InternalStatus::Failed)
                    && d.termination_reason.as_deref() == Some(reason.as_str())
                {
                    warn!(session.id = %id, "{reason}")
                } else {
                    info!(session.id = %id, exit = %how, "controller exited")
                }
                let ends = &self.ends;
                crate::limits::give_back(ends.slots.as_ref(), ends.contexts.as_ref(), &d).await;
                crate::usage::count(&ends.sessions, &d).await;
            }
            Ok(Cond::Failed(None)) => info!(session.id = %id, exit = %how, "controller exited"),
            Err(e) => {
                warn!(session.id = %id, error = %crate::error::chain(&e), "recording the controller's exit failed")
            }
        }
    }
}

/// Who local controllers' Chrome runs as.
#[derive(Debug)]
enum ChromeUsers {
    /// The controller's own user (`serve` is not root; `CHROME_USER` passed empty).
    Same,
    /// One user for every Chrome (`CHROME_USER` in `serve`'s environment).
    One(std::ffi::OsString),
    /// A uid:gid of its own for each controller's Chrome.
    Own(ChromeUids),
}

/// Who local controllers' Chrome runs as, and where their profiles go.
#[derive(Debug)]
struct Browsers {
    users: ChromeUsers,
    /// The directory holding the profiles.
    profiles: PathBuf,
    /// Whether `profiles` was made for this server (and is removed when it ends).
    own_dir: bool,
}

impl Browsers {
    /// Root: Chrome as `chosen` (`CHROME_USER` in `serve`'s environment, when not empty),
    /// else as a uid of its own from the range `uids` (`LOCAL_CHROME_UIDS`), with profiles in
    /// a new directory Chrome's users can enter (an error when it cannot be made). Otherwise
    /// as the controller's user with profiles in `<data>/profiles`.
    fn new(
        data_dir: &Path,
        chosen: Option<std::ffi::OsString>,
        uids: Option<&str>,
    ) -> Result<Self, UidError> {
        if !nix::unistd::geteuid().is_root() {
            return Ok(Self {
                users: ChromeUsers::Same,
                profiles: data_dir.join("profiles"),
                own_dir: false,
            });
        }
        // Empty names no user: Chrome never runs as root, so it gets a uid of its own.
        let users = match chosen.filter(|u| !u.is_empty()) {
            Some(u) => ChromeUsers::One(u),
            None => ChromeUsers::Own(ChromeUids::new(uids, Path::new(LOCK_DIR))?),
        };
        let profiles = browsers_dir().map_err(|source| UidError::Profiles {
            path: std::env::temp_dir(),
            source,
        })?;
        Ok(Self {
            users,
            profiles,
            own_dir: true,
        })
    }

    /// `CHROME_USER` for a new controller, and the uid it holds (released when it ends).
    fn user(&self) -> Result<(std::ffi::OsString, Option<u32>), UidError> {
        Ok(match &self.users {
            ChromeUsers::Same => (Default::default(), None),
            ChromeUsers::One(u) => (u.clone(), None),
            ChromeUsers::Own(uids) => {
                let uid = uids.take()?;
                (format!("{uid}:{uid}").into(), Some(uid))
            }
        })
    }

    /// A controller holding `uid` ended (or never started).
    fn release(&self, uid: Option<u32>) {
        if let (ChromeUsers::Own(uids), Some(uid)) = (&self.users, uid) {
            uids.release(uid);
        }
    }
}

/// A new `<tmp>/wallcrawler-browsers-<uuid>`, 0711: Chrome's user enters it to reach its own
/// profile (0700, its own) but cannot list the others. Created, never reused, so nobody can
/// have prepared it.
fn browsers_dir() -> std::io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let dir = std::env::temp_dir().join(format!("wallcrawler-browsers-{}", uuid::Uuid::new_v4()));
    std::fs::DirBuilder::new().mode(0o711).create(&dir)?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711))?;
    Ok(dir)
}

/// `<profile><suffix>`: what a controller keeps beside its profile (`-files`: its uploads and
/// downloads; `-extension`: its session's unpacked extension).
fn beside(profile: &Path, suffix: &str) -> std::path::PathBuf {
    let mut path = profile.as_os_str().to_owned();
    path.push(suffix);
    path.into()
}

/// Removes what a controller keeps beside `profile` (removed by the controller itself unless
/// it was killed).
async fn remove_beside(profile: &Path) {
    for suffix in ["-files", "-extension"] {
        let _ = tokio::fs::remove_dir_all(beside(profile, suffix)).await;
    }
}

/// Removes a dead controller's profile, and the uploads and downloads directories it keeps
/// beside it (`<profile>-files`, removed by the controller itself unless it was killed). A
/// Chrome killed while it started (the controller was stopped during its warm-up) can leave
/// helper processes writing there for a moment after the controller exited: removal is
/// repeated until the directory stays gone a moment later (at most ~2 s).
async fn remove_profile(dir: &Path) {
    remove_beside(dir).await;
    for _ in 0..8 {
        let _ = tokio::fs::remove_dir_all(dir).await;
        tokio::time::sleep(Duration::from_millis(250)).await;
        if !tokio::fs::try_exists(dir).await.unwrap_or(false) {
            return;
        }
    }
    warn!(dir = %dir.display(), "a controller's profile could not be removed");
}

impl Controllers {
    /// Starts a controller for `spec`'s session alone (`--pool 0`, or a session beyond its
    /// project's share of the pool), named by the session id; its handle `local:<pid>`.
    async fn run_session(&self, spec: LaunchSpec) -> StoreResult<Option<String>> {
        let profile = self.profile(&spec.session_id);
        let mut cmd = self.command(&profile);
        cmd.env(task_env::SESSION_ID, &spec.session_id)
            .env(task_env::PROJECT_ID, &spec.project_id);
        if let Some((context_id, key, persist)) = &spec.context {
            cmd.env(task_env::CONTEXT_ID, context_id)
                .env(task_env::CONTEXTS_DIR, self.data_dir.join("contexts"))
                .env(task_env::CONTEXT_S3_KEY, key)
                .env(task_env::CONTEXT_PERSIST, persist.to_string());
        }
        if let Some(key) = &spec.extension {
            cmd.env(task_env::CONTEXTS_DIR, self.data_dir.join("contexts"))
                .env(task_env::EXTENSION_S3_KEY, key);
        }
        for (k, v) in &spec.env {
            cmd.env(k, v);
        }
        // The credential goes in the child's environment: private to it and its uid on this
        // machine (Chrome's own is cleared), unlike an ECS override, which DescribeTasks shows
        // to anyone allowed to describe the task (a task on AWS gets it from the task API).
        if let Some(grant) = self.live_view(&spec.session_id).await {
            let json = serde_json::to_string(&grant).expect("grants serialize");
            cmd.env(task_env::LIVE_VIEW_GRANT, json);
        }
        // Proxy credentials too (a pool controller gets them with its claim instead).
        if let Some(egress) = &spec.egress {
            cmd.env(task_env::SESSION_EGRESS, egress.to_json());
        }
        // The browser asked for (a pool controller gets it with its claim instead).
        if let Some(browser) = &spec.browser {
            cmd.env(task_env::SESSION_BROWSER, browser.to_json());
        }
        let (exit_ctl, id) = (self.clone(), spec.session_id.clone());
        let pid = self.spawn(&spec.session_id, cmd, move |how| {
            Box::pin(async move {
                let _ = tokio::fs::remove_dir_all(&profile).await;
                remove_beside(&profile).await;
                exit_ctl.record_exit(&id, &how).await;
            })
        })?;
        info!(session.id = %spec.session_id, pid, "controller started");
        Ok(Some(format!("local:{pid}")))
    }
}

/// How many of the running controllers `names` are the pool's and idle (not `busy`): a
/// controller started for one session (beyond its project's share) is never idle for the pool.
fn idle_pool_controllers(names: &[String], busy: impl Fn(&str) -> bool) -> usize {
    names
        .iter()
        .filter(|n| n.starts_with(POOL_NAME) && !busy(n))
        .count()
}

/// The `n` idle (not `busy`) pool controllers among `names` started first (by the number their
/// name ends with: `pool-<pid>-<n>`).
fn oldest_idle(names: &[String], busy: impl Fn(&str) -> bool, n: usize) -> Vec<&str> {
    let mut idle: Vec<(u64, &str)> = names
        .iter()
        .filter(|name| name.starts_with(POOL_NAME) && !busy(name))
        .filter_map(|name| Some((name.rsplit('-').next()?.parse().ok()?, name.as_str())))
        .collect();
    idle.sort_unstable();
    idle.into_iter().take(n).map(|(_, name)| name).collect()
}

/// One controller per session (`--pool 0`).
pub struct LocalLauncher(pub Controllers);

#[async_trait]
impl Launcher for LocalLauncher {
    async fn launch(&self, spec: LaunchSpec) -> StoreResult<Option<String>> {
        self.0.run_session(spec).await
    }

    async fn stop(&self, session_id: &str, _task_arn: Option<&str>) -> StoreResult<()> {
        self.0.signal(session_id);
        Ok(())
    }
}

/// When the pool looks again after [`LocalPool::fill`].
enum Refill {
    /// At once: it started a controller (or failed to), and may need another.
    Again,
    /// When the backoff after failed starts ends (or something changes before).
    After(Instant),
    /// When something changes: a claim moves, a controller exits.
    OnChange,
}

/// The waits after failed starts in a row, and when the pool may start a controller again.
struct Backoff {
    delays: ExponentialBackoff,
    not_before: Instant,
}

/// Waits after failed starts: 200 ms doubling to 30 s (the shared policy's shape, no end).
fn restart_delays() -> ExponentialBackoff {
    retry::restart_delays(Duration::from_millis(200), Duration::from_secs(30)).build()
}

/// N warm controllers taking sessions from the claims directory.
pub struct LocalPool {
    ctl: Controllers,
    queue: DirQueue,
    size: usize,
    /// Names are `pool-<serve's pid>-<n>`: unique per run of `serve`.
    next: AtomicU64,
    backoff: Mutex<Backoff>,
}

impl LocalPool {
    /// A pool of `size` over `<data>/claims`. Claims a previous run of `serve` left taken are
    /// visible again (their controllers are gone).
    pub fn new(ctl: Controllers, size: usize) -> std::io::Result<Arc<Self>> {
        let queue = DirQueue::new(ctl.data_dir.join("claims"));
        queue.init()?;
        let back = queue.requeue_all();
        if back > 0 {
            info!(claims = back, "claims of a previous run are visible again");
        }
        Ok(Arc::new(Self {
            ctl,
            queue,
            size,
            next: AtomicU64::new(1),
            backoff: Mutex::new(Backoff {
                delays: restart_delays(),
                not_before: Instant::now(),
            }),
        }))
    }

    /// The claims directory the pool's controllers take sessions from.
    pub fn queue(&self) -> &DirQueue {
        &self.queue
    }

    /// Keeps `size` controllers idle until [`Controllers::stop_all`]: the pool looks again
    /// when a claim moves in the claims directory (sent, taken, served, handed back: inotify)
    /// or a controller exits, and when a backoff ends.
    pub fn start(self: &Arc<Self>) {
        self.start_with(POOL_RECHECK);
    }

    /// [`Self::start`], looking anyway every `recheck` while the claims directory is watched.
    fn start_with(self: &Arc<Self>, recheck: Duration) {
        let pool = self.clone();
        let moved = Arc::new(tokio::sync::Notify::new());
        let recheck = match self.queue.wake_on_moves(&moved, |e| {
            warn!(error = %e, "watching the claims directory stopped; the pool looks every 250 ms");
        }) {
            Ok(()) => recheck,
            Err(e) => {
                warn!(error = %e, "the claims directory is not watched; the pool looks every 10 ms");
                POOL_TICK
            }
        };
        tokio::spawn(async move {
            while !pool.ctl.stopping.load(Ordering::SeqCst) {
                let now = Instant::now();
                let until = match pool.fill() {
                    Refill::Again => continue,
                    Refill::After(at) => at.min(now + recheck),
                    Refill::OnChange => now + recheck,
                };
                // A move or an exit since the look above left its wake-up in the `Notify`.
                tokio::select! {
                    () = moved.notified() => {}
                    () = pool.ctl.exited.notified() => {}
                    () = tokio::time::sleep_until(until) => {}
                }
            }
        });
    }

    /// Starts one controller when fewer than `size` are idle (not backing off), counting each
    /// claim nobody took yet as one idle controller gone already: a claim starts its
    /// replacement at once, not when a controller takes it; and a claim that waits because
    /// the pool ran dry starts a controller of its own beside the `size` that will refill it.
    fn fill(self: &Arc<Self>) -> Refill {
        let names = self.ctl.names();
        let waiting = self.queue.visible();
        self.hurry_warm_ups(&names, waiting);
        let idle = idle_pool_controllers(&names, |n| self.queue.busy(n)).saturating_sub(waiting);
        if idle >= self.size {
            return Refill::OnChange;
        }
        let not_before = self.backoff.lock().expect("not poisoned").not_before;
        if Instant::now() < not_before {
            return Refill::After(not_before);
        }
        let name = format!(
            "{POOL_NAME}{}-{}",
            std::process::id(),
            self.next.fetch_add(1, Ordering::Relaxed)
        );
        if let Err(e) = self.spawn(&name) {
            error!(error = %crate::error::chain(&e), "starting a pool controller failed");
            self.failed_start();
        }
        Refill::Again
    }

    /// Claims nobody took yet wait on warm-ups when no warm controller is there to take them:
    /// the oldest idle pool controllers, one per waiting claim, are asked to hurry (their
    /// Chrome leaves `BACKGROUND_NICE`: a session waits on it). A warm one asked too is about
    /// to take a claim (within milliseconds): for it, the ask changes nothing.
    fn hurry_warm_ups(&self, names: &[String], waiting: usize) {
        if waiting == 0 {
            return;
        }
        for name in oldest_idle(names, |n| self.queue.busy(n), waiting) {
            if self.queue.hurried(name) {
                continue;
            }
            match self.queue.hurry(name) {
                Ok(()) => debug!(controller = name, "a claim waits on this warm-up: hurried"),
                Err(e) => debug!(controller = name, error = %e, "asking a warm-up to hurry failed"),
            }
        }
    }

    fn spawn(self: &Arc<Self>, name: &str) -> StoreResult<()> {
        let profile = self.ctl.profile(name);
        let mut cmd = self.ctl.command(&profile);
        cmd.env(task_env::POOL_QUEUE_DIR, self.queue.dir())
            .env(task_env::POOL_TASK_NAME, name)
            .env(task_env::CONTEXTS_DIR, self.ctl.data_dir.join("contexts"));
        let (pool, owner, started) = (self.clone(), name.to_owned(), Instant::now());
        let pid = self.ctl.spawn(name, cmd, move |how| {
            Box::pin(async move { pool.exited(&owner, &how, &profile, started).await })
        })?;
        info!(controller = name, pid, "pool controller started");
        Ok(())
    }

    /// The sessions `owner` took but did not serve are given up (as a controller stopped
    /// before READY does itself), so the controller that takes their returned claims serves
    /// them at once instead of waiting out the dead one's lease.
    async fn give_up_held(&self, owner: &str, served: &[wallcrawler_contract::claim::Claim]) {
        let held: Vec<String> = self
            .queue
            .claims_of(owner)
            .into_iter()
            .filter(|c| !served.contains(c))
            .map(|c| c.session_id)
            .collect();
        if held.is_empty() {
            return;
        }
        let store =
            wallcrawler_local::session_dir::DirStore::new(self.ctl.data_dir.join("sessions"));
        let owner = owner.to_owned();
        let given = tokio::task::spawn_blocking(move || {
            for id in held {
                if let Err(e) = store.update::<std::convert::Infallible>(&id, |d| Ok(d.give_up(&owner))) {
                    warn!(session.id = %id, error = %e, "giving up a dead controller's session failed");
                }
            }
        })
        .await;
        if let Err(e) = given {
            warn!(error = %e, "giving up a dead controller's sessions stopped");
        }
    }

    /// A pool controller exited: a claim it held unserved is visible again; a session it served
    /// is ended as the task-state handler would.
    async fn exited(&self, owner: &str, how: &str, profile: &Path, started: Instant) {
        let served = self.queue.served_by(owner);
        self.queue.forget_hurry(owner);
        self.give_up_held(owner, &served).await;
        let back = self.queue.return_taken(owner);
        if back > 0 {
            warn!(
                controller = owner,
                claims = back,
                exit = how,
                "a pool controller exited holding a claim; it is visible again"
            );
        }
        for claim in &served {
            self.ctl.record_exit(&claim.session_id, how).await;
        }
        let mut claimed = profile.as_os_str().to_owned();
        claimed.push(".claimed");
        remove_profile(profile).await;
        remove_profile(Path::new(&claimed)).await;
        if served.is_empty()
            && back == 0
            && started.elapsed() < EARLY_EXIT
            && !self.ctl.stopping.load(Ordering::SeqCst)
        {
            warn!(
                controller = owner,
                exit = how,
                "a pool controller exited early"
            );
            self.failed_start();
        } else {
            self.backoff.lock().expect("not poisoned").delays = restart_delays();
            info!(controller = owner, exit = how, "pool controller exited");
        }
    }

    /// Backs off exponentially (200 ms … 30 s) after failed starts, so a broken controller
    /// binary or Chrome does not make the pool spin.
    fn failed_start(&self) {
        let mut b = self.backoff.lock().expect("not poisoned");
        let wait = b.delays.next().unwrap_or(Duration::from_secs(30));
        b.not_before = Instant::now() + wait;
    }

    /// The pool controller serving (or holding the claim of) `session_id`.
    fn serving(&self, session_id: &str) -> Option<String> {
        self.ctl.names().into_iter().find(|n| {
            self.queue
                .claims_of(n)
                .iter()
                .any(|c| c.session_id == session_id)
        })
    }
}

#[async_trait]
impl Launcher for LocalPool {
    /// Sends the claim; an idle controller takes it (no task name until READY). A cold
    /// session (beyond its project's share) gets a controller of its own instead.
    async fn launch(&self, spec: LaunchSpec) -> StoreResult<Option<String>> {
        if spec.cold {
            return self.ctl.run_session(spec).await;
        }
        let queue = self.queue.clone();
        let claim = spec.claim();
        // In the claim file (the claims directory is private to this user), read only by the
        // pool controller that takes it: its answer to a client's handoff request. (The claim's
        // egress, with its proxy credentials, is private there too.)
        let live_view = self.ctl.live_view(&spec.session_id).await;
        tokio::task::spawn_blocking(move || queue.send_with(&claim, live_view.as_ref()))
            .await
            .map_err(|e| StoreError::failed_by("sending the claim", e))?
            .map_err(|e| StoreError::failed_by("sending the claim", e))?;
        Ok(None)
    }

    /// SIGTERM to the controller that wrote READY (its name is the task ARN), or that holds the
    /// claim, or that runs for this session alone (a cold one); a claim nobody took yet is
    /// dropped by the controller that takes it.
    async fn stop(&self, session_id: &str, task_arn: Option<&str>) -> StoreResult<()> {
        let owner = task_arn
            .filter(|n| {
                self.queue
                    .claims_of(n)
                    .iter()
                    .any(|c| c.session_id == session_id)
            })
            .map(str::to_owned)
            .or_else(|| self.serving(session_id));
        match owner {
            Some(owner) => self.ctl.signal(&owner),
            None => self.ctl.signal(session_id),
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sessions_own_controller_is_never_idle_for_the_pool() {
        let names: Vec<String> = ["pool-7-1", "pool-7-2", "sess_0193"]
            .map(String::from)
            .into();
        assert_eq!(idle_pool_controllers(&names, |_| false), 2);
        assert_eq!(idle_pool_controllers(&names, |n| n == "pool-7-1"), 1);
    }

    /// A pool of one whose controllers are shell loops: when its controller takes a claim (moved
    /// into `taken/` as a controller does), the replacement starts on the directory's change,
    /// not on the pool's periodic look (an hour here). Before the watch, the pool found it
    /// by looking every 10 ms.
    #[tokio::test]
    async fn a_taken_claim_starts_the_replacement_on_the_directory_s_change() {
        use std::os::unix::fs::PermissionsExt;
        let data = tempfile::tempdir().unwrap();
        let bin = data.path().join("controller");
        // Gone with the test's process, and holding none of its pipes (cargo waits on them).
        let script =
            "#!/bin/sh\nexec >/dev/null 2>&1 </dev/null\nwhile kill -0 $PPID; do sleep 1; done\n";
        std::fs::write(&bin, script).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        let ends = Ends::in_dir(data.path(), DirSessions::in_dir(data.path()));
        let ctl = Controllers::new(bin, data.path().to_owned(), "key".into(), ends).unwrap();
        let pool = LocalPool::new(ctl.clone(), 1).unwrap();
        pool.start_with(Duration::from_secs(3600));
        let running = |n: usize| {
            let ctl = ctl.clone();
            async move {
                tokio::time::timeout(Duration::from_secs(30), async {
                    while ctl.names().len() < n {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                })
                .await
                .is_ok()
            }
        };
        assert!(running(1).await, "the pool started no controller");
        let first = ctl.names().remove(0);
        let claim = wallcrawler_contract::claim::Claim::new("sess_1", "proj_1");
        pool.queue().send(&claim).unwrap();
        assert!(pool.queue().take(&first).unwrap().is_some());
        assert!(
            running(2).await,
            "no replacement for the controller that took a claim"
        );
        ctl.stop_all();
        ctl.wait_all(Duration::from_secs(30)).await;
    }

    #[test]
    fn the_oldest_idle_pool_controllers_are_hurried_first() {
        let names: Vec<String> = [
            "pool-7-10",
            "pool-7-9",
            "sess_0193",
            "pool-7-11",
            "pool-7-2",
        ]
        .map(String::from)
        .into();
        let busy = |n: &str| n == "pool-7-2";
        assert_eq!(oldest_idle(&names, busy, 1), ["pool-7-9"]);
        assert_eq!(oldest_idle(&names, busy, 2), ["pool-7-9", "pool-7-10"]);
        assert_eq!(oldest_idle(&names, busy, 9).len(), 3);
        assert!(oldest_idle(&names, busy, 0).is_empty());
    }
}
