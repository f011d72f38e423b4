//! Chrome: finding the binary, launching it with the reviewed flags, draining its output into
//! the log, waiting until DevTools answers, watching for its exit, and closing it cleanly.
//!
//! Closing goes through CDP `Browser.close` first — SIGTERM loses cookies written in the last
//! second and leaves the profile's lock files — then signals, escalating within a deadline.
//! Chrome runs in its own process group so a terminal's Ctrl-C reaches only the controller, and
//! the whole group is killed at the end so no renderer outlives the session.

pub mod allowed_domains;
pub mod egress;
pub mod emulation;
pub mod env;
pub mod file_access;
pub mod flags;
pub mod sandbox;
pub mod user;

use crate::shutdown::Shutdown;
use std::net::SocketAddr;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::watch;
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::{debug, info, warn};

use crate::cdp::{self, BrowserSocket};
use crate::netns::{ChromeNetwork, NetNs};
use crate::upstream::{self, Endpoint};
use user::ChromeUser;
use wallcrawler_local::dir_watch::Change;

/// Longest a SOCKS5 handshake on Chrome's egress may take, name resolution and dial included.
const EGRESS_HANDSHAKE: Duration = Duration::from_secs(30);

/// Files in a user-data-dir that must not survive into a new launch: Chrome refuses a profile
/// whose `SingletonLock` names another host, and a stale `DevToolsActivePort` would give a wrong
/// port.
pub const STALE_FILES: [&str; 4] = [
    "SingletonLock",
    "SingletonSocket",
    "SingletonCookie",
    "DevToolsActivePort",
];

/// Longest the binary's `--version` may take.
const VERSION_TIMEOUT: Duration = Duration::from_secs(5);

/// The `User-Agent` of the Chrome at `binary` without its headless tell, from its `--version`
/// (a process of a few tens of milliseconds, asked once per controller, at its first launch
/// unless [`ask_user_agent_ahead`] started it earlier, bounded by [`VERSION_TIMEOUT`]; `None`,
/// logged, when it fails or takes longer).
async fn user_agent_of(binary: &Path) -> Option<String> {
    UA.get_or_init(|| async { read_user_agent(ask_version(binary)?).await })
        .await
        .clone()
}

/// The User-Agent, once asked.
static UA: tokio::sync::OnceCell<Option<String>> = tokio::sync::OnceCell::const_new();

/// Starts the binary's `--version` now, so that the first launch finds its answer, or nearly:
/// measured on a pool controller's warm-up, asking it at the launch put 23-126 ms between the
/// launch's start and Chrome's (Step 22), on the path of a session waiting for that warm-up.
/// Called as soon as the binary is known, before the controller's keys, proxy and profile.
/// The answer is read by a task of `tasks`: a launch meanwhile waits for it, and the run's end
/// stops it, killing what the binary started (as an interrupted launch does).
pub fn ask_user_agent_ahead(binary: &Path, tasks: &Shutdown) {
    if UA.initialized() {
        return;
    }
    let Some(child) = ask_version(binary) else {
        return;
    };
    let stop = tasks.token().clone();
    tasks.spawn(async move {
        tokio::select! {
            _ = UA.get_or_init(|| read_user_agent(child)) => {}
            () = stop.cancelled() => {}
        }
    });
}

/// `binary --version`, started (its own process group, killed when dropped).
fn ask_version(binary: &Path) -> Option<Child> {
    let child = Command::new(binary)
        .arg("--version")
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .kill_on_drop(true)
        .spawn();
    match child {
        Ok(c) => Some(c),
        Err(e) => {
            warn!(error = %e, "Chrome's --version could not start; it keeps its own User-Agent");
            None
        }
    }
}

/// The User-Agent from a started `--version`'s output, within [`VERSION_TIMEOUT`].
async fn read_user_agent(child: Child) -> Option<String> {
    // Whatever the binary started (a wrapper's helpers) ends with it, and when a signal drops
    // this future mid-way: its process group is killed.
    let _group = GroupKiller(child.id().map(|p| Pid::from_raw(p as i32)));
    let out = child.wait_with_output();
    match tokio::time::timeout(VERSION_TIMEOUT, out).await {
        Ok(Ok(o)) if o.status.success() => {
            let ua = flags::headful_user_agent(&String::from_utf8_lossy(&o.stdout));
            if ua.is_none() {
                warn!("Chrome's --version named no version; it keeps its own User-Agent");
            }
            ua
        }
        _ => {
            warn!("Chrome's --version failed; it keeps its own User-Agent");
            None
        }
    }
}

/// Binary names searched on the PATH, in order.
const CANDIDATES: [&str; 5] = [
    "chromium",
    "chromium-browser",
    "google-chrome",
    "google-chrome-stable",
    "chrome",
];

/// What can go wrong with Chrome.
#[derive(Debug, thiserror::Error)]
pub enum ChromeError {
    /// No binary was given and none of the candidates is on the PATH.
    #[error("no Chrome binary found: set CHROME_PATH or --chrome-path, or install chromium (searched PATH for {})", CANDIDATES.join(", "))]
    NotFound,
    /// The explicitly given binary does not exist or is not a file.
    #[error("the Chrome binary {0} does not exist or is not a file")]
    BadPath(PathBuf),
    /// `CHROME_USER` cannot be used: unknown, root, or this process may not switch to it.
    #[error(transparent)]
    User(#[from] user::UserError),
    /// Running as root with no `CHROME_USER`, no uid of Chrome's own could be taken.
    #[error("running as root with no CHROME_USER, Chrome needs a uid of its own: {0}")]
    OwnUid(#[from] wallcrawler_local::chrome_uids::UidError),
    /// The binary is a headless shell, which reads no managed policy (so `file://` URLs are not
    /// blocked), and it would run as the controller's own user, who can read the controller's
    /// files and `/proc/<pid>/environ`.
    #[error(
        "{0} is a headless shell, which applies no managed policy (file:// URLs are not blocked): it runs only as a user other than the controller's (set CHROME_USER, or start the controller as root for a uid of its own)"
    )]
    ShellAsControllersUser(PathBuf),
    /// The profile (user data) directory could not be created, cleaned or handed to Chrome's
    /// user.
    #[error("could not prepare the profile directory {path}")]
    Profile {
        /// The profile directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Chrome's private network (`CHROME_NETWORK=private`) could not be made.
    #[error(transparent)]
    Network(#[from] crate::netns::NetnsError),
    /// The egress hop's listener in Chrome's network could not be made.
    #[error("listening for Chrome's egress in its network failed")]
    Egress(#[source] std::io::Error),
    /// Spawning the Chrome process failed.
    #[error("starting Chrome failed")]
    Spawn(#[source] std::io::Error),
    /// Chrome exited (or had no pid) during startup; the text says how.
    #[error("Chrome exited during startup ({0})")]
    ExitedEarly(String),
    /// Chrome's DevTools did not answer within this time.
    #[error("Chrome's DevTools did not answer within {0:?}")]
    NotReady(Duration),
}

/// Finds the Chrome binary: the explicit path, else the first candidate on the PATH. Debian's
/// `/usr/bin/chromium` is a wrapper script that adds its own flags; the real binary beside it is
/// preferred so Chrome runs with exactly our flags.
pub fn find_chrome(
    explicit: Option<&Path>,
    path_var: Option<&std::ffi::OsStr>,
) -> Result<PathBuf, ChromeError> {
    if let Some(p) = explicit {
        return if p.is_file() {
            Ok(p.to_owned())
        } else {
            Err(ChromeError::BadPath(p.to_owned()))
        };
    }
    let dirs: Vec<PathBuf> = path_var
        .map(|v| std::env::split_paths(v).collect())
        .unwrap_or_default();
    for name in CANDIDATES {
        for d in &dirs {
            let p = d.join(name);
            if p.is_file() {
                let real = Path::new("/usr/lib/chromium/chromium");
                if p == Path::new("/usr/bin/chromium") && real.is_file() {
                    return Ok(real.to_owned());
                }
                return Ok(p);
            }
        }
    }
    Err(ChromeError::NotFound)
}

tokio::task_local! {
    /// The first and the longest pause between two looks for DevTools while Chrome starts
    /// (5 and 100 ms unless a test sets them, to show that the port file's watch is what wakes
    /// the wait).
    static READY_POLL: (Duration, Duration);
}

/// Wakes `written` when Chrome writes `DevToolsActivePort` into `profile` (inotify, on a
/// thread that ends at the first event after the wait is over), so a launch is ready the moment
/// DevTools listens rather than at the next look: up to 100 ms later once the looks have backed
/// off, which a session waiting for a warm-up waited too (Step 22). Without a watch (inotify
/// refused) the looks alone find it, as before.
fn wake_on_port_file(profile: &Path, written: &Arc<tokio::sync::Notify>) {
    let weak = Arc::downgrade(written);
    let watched = wallcrawler_local::dir_watch::watch(&[profile], "chrome-port", move |change| {
        let Some(written) = weak.upgrade() else {
            return false;
        };
        match change {
            Change::File("DevToolsActivePort") | Change::Overflow => written.notify_one(),
            Change::File(_) => {}
            Change::Failed(_) => return false,
        }
        true
    });
    if let Err(e) = watched {
        debug!(error = %e, "no watch on the profile; DevTools is looked for every 100 ms at most");
    }
}

/// Refuses a headless shell ([`flags::is_headless_shell`]) that would run as the controller's
/// own user (`user` `None`): the shell reads no managed policy, so `chrome/policies`'
/// `file://` block does not hold, and only another user keeps a page from reading the
/// controller's files (the egress hop still refuses the metadata addresses and loopback).
pub fn check_shell_user(binary: &Path, user: Option<ChromeUser>) -> Result<(), ChromeError> {
    if user.is_none() && flags::is_headless_shell(binary) {
        return Err(ChromeError::ShellAsControllersUser(binary.to_owned()));
    }
    Ok(())
}

/// Makes the kernel kill Chrome when the controller dies, however it dies. Without it a
/// SIGKILLed controller (OOM killer, `kill -9`, a test harness) leaves Chrome running with
/// nobody to close it: our own test runs leaked 29 browsers this way before this was added.
///
/// Also drops `CAP_SYS_NICE` from Chrome's bounding set, so Chrome started by root (the local
/// platform, tests) cannot raise its own threads' priority (it sets its UI threads to nice -8
/// when it can): it schedules as it does unprivileged in the image, and a warm-up at
/// `BACKGROUND_NICE` stays there. Unprivileged, the drop fails (`EPERM`) and changes nothing:
/// Chrome has no such capability then.
///
/// With a [`ChromeUser`], the child then becomes that user: its only group, its gid, its uid
/// (supplementary groups dropped first, whoever the controller is). The parent-death signal is
/// set last, because the kernel clears it when the credentials change.
///
/// With a private network ([`NetNs`]), the child joins it first, while it still holds the
/// capability `setns` needs.
#[allow(unsafe_code)]
fn child_setup(command: &mut Command, user: Option<ChromeUser>, netns: Option<Arc<NetNs>>) {
    // SAFETY: the closure runs in the forked child before exec and only makes system calls
    // (setns, prctl, and the kernel's setgroups, setgid, setuid), which are async-signal-safe;
    // it allocates nothing and touches no locks.
    unsafe {
        command.pre_exec(move || {
            if let Some(ns) = &netns {
                ns.join()?;
            }
            let _ = rustix::thread::remove_capability_from_bounding_set(
                rustix::thread::CapabilitySet::SYS_NICE,
            );
            if let Some(u) = user {
                u.become_user()?;
            }
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
        });
    }
}

/// The command that starts Chrome with `args`: its own process group, its environment the
/// allow-list's (and `home`), its output piped, set up by [`child_setup`] in the child.
fn chrome_command(
    opts: &LaunchOptions,
    args: &[String],
    home: Option<&Path>,
    netns: Option<Arc<NetNs>>,
) -> Command {
    let mut command = Command::new(&opts.binary);
    command
        .args(args)
        // Nothing of the controller's environment (signing key, AWS credentials URI) but the
        // allow-list in env.rs.
        .env_clear()
        .envs(env::chrome_env(std::env::vars_os()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(home) = home {
        command.env("HOME", home);
    }
    child_setup(&mut command, opts.user, netns);
    command
}

/// How to launch Chrome.
#[derive(Debug, Clone)]
pub struct LaunchOptions {
    /// The Chrome binary to run.
    pub binary: PathBuf,
    /// The profile (user data) directory, created if missing.
    pub user_data_dir: PathBuf,
    /// 0 = any free port, read back from `DevToolsActivePort`.
    pub debug_port: u16,
    /// The flags from the flags file (checked), before the sandbox decision is applied.
    pub flags: Vec<String>,
    /// How long to wait for DevTools to answer after the start.
    pub ready_timeout: Duration,
    /// Nice value for Chrome's whole process group from its start (`None`: the controller's).
    pub nice: Option<i32>,
    /// Fired when somebody waits on this launch (a pool's warm-up that a session's claim
    /// waits for): Chrome started at `nice` goes back to the controller's own priority at once.
    pub hurry: Option<CancellationToken>,
    /// The user Chrome runs as (`None`: the controller's), `CHROME_USER`.
    pub user: Option<ChromeUser>,
    /// Where Chrome's DevTools port listens, `CHROME_NETWORK`.
    pub network: ChromeNetwork,
    /// The egress hop's rules, shared by every launch of this controller's Chrome.
    pub hop: egress::Hop,
    /// WebRTC sends no UDP but through the proxy (`--webrtc-ip-handling-policy=
    /// disable_non_proxied_udp`): a session with a proxy, whose UDP would otherwise leave
    /// from the task's own address on the shared network.
    pub proxied_udp_only: bool,
    /// Whether Chrome sends a `User-Agent` naming `Chrome`, not `HeadlessChrome`
    /// (`--user-agent`, [`flags::headful_user_agent`] of the binary's version).
    pub headful_user_agent: bool,
}

/// A running, ready Chrome.
pub struct Chrome {
    pid: Pid,
    /// DevTools HTTP/WebSocket address on loopback, and its network.
    endpoint: Endpoint,
    /// `/devtools/browser/<id>`.
    pub browser_path: String,
    exit: watch::Receiver<Option<ExitStatus>>,
    /// The binary is a headless shell ([`flags::is_headless_shell`]): it loads no extension.
    headless_shell: bool,
    /// Stops the egress hop and its connections when dropped.
    _egress: DropGuard,
}

/// Chrome's network once made: its namespace (private network only) and its running egress
/// hop, whose port Chrome is pointed at in every mode.
struct Network {
    netns: Option<Arc<NetNs>>,
    egress_port: u16,
    /// Cancels the egress (its listener and every connection through it) when dropped: with
    /// the [`Chrome`] it serves, or at the controller's shutdown (a child of the root token).
    egress: DropGuard,
}

impl Network {
    /// A namespace (private network) and the hop's SOCKS5 server on 127.0.0.1:0 in Chrome's
    /// network: inside the namespace, or on the machine's loopback.
    async fn make(opts: &LaunchOptions, tasks: &Shutdown) -> Result<Network, ChromeError> {
        let any_port = SocketAddr::from(([127, 0, 0, 1], 0));
        let (netns, listener) = match opts.network {
            ChromeNetwork::Private => {
                let netns = Arc::new(NetNs::new().await?);
                let listener = netns.listen(any_port).await.map_err(ChromeError::Egress)?;
                (Some(netns), listener)
            }
            ChromeNetwork::Shared => (
                None,
                tokio::net::TcpListener::bind(any_port)
                    .await
                    .map_err(ChromeError::Egress)?,
            ),
        };
        let egress_port = listener.local_addr().map_err(ChromeError::Egress)?.port();
        let stop = tasks.child();
        tasks.spawn(egress::serve(
            listener,
            opts.hop.clone(),
            tasks.tracker().clone(),
            stop.clone(),
            EGRESS_HANDSHAKE,
        ));
        Ok(Network {
            netns,
            egress_port,
            egress: stop.drop_guard(),
        })
    }
}

/// Chrome's whole command line: the flags file's (with the sandbox decision), the
/// controller's own around the hop at `egress_port`, and the session's launch flags.
async fn launch_args(
    opts: &LaunchOptions,
    sandbox: &sandbox::Decision,
    egress_port: u16,
) -> Vec<String> {
    let file_flags = sandbox::apply(opts.flags.clone(), sandbox);
    let mut args = flags::chrome_args(
        &file_flags,
        &opts.user_data_dir,
        opts.debug_port,
        egress_port,
    );
    if opts.proxied_udp_only {
        flags::proxied_udp_only(&mut args);
    }
    if opts.headful_user_agent
        && let Some(ua) = user_agent_of(&opts.binary).await
    {
        flags::user_agent(&mut args, &ua);
    }
    args
}

/// Human-readable exit description.
pub fn describe_exit(status: &ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(s)) => match Signal::try_from(s) {
            Ok(sig) => format!("killed by {sig}"),
            Err(_) => format!("killed by signal {s}"),
        },
        _ => "unknown exit".to_owned(),
    }
}

/// Removes the lock files and `DevToolsActivePort` of a previous run.
pub fn remove_stale_files(user_data_dir: &Path) -> std::io::Result<()> {
    for f in STALE_FILES {
        let p = user_data_dir.join(f);
        match std::fs::remove_file(&p) {
            Ok(()) => debug!(file = f, "removed stale profile file"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `wait` (Chrome's start), with Chrome's process group `pgid` raised from its background
/// nice value to the controller's own once `hurry` fires (somebody waits on this start).
async fn hurried<T>(
    wait: impl Future<Output = T>,
    pgid: Pid,
    hurry: Option<CancellationToken>,
) -> T {
    tokio::pin!(wait);
    let Some(hurry) = hurry else {
        return wait.await;
    };
    tokio::select! {
        r = &mut wait => return r,
        () = hurry.cancelled() => {}
    }
    let nice = own_nice();
    match set_group_nice(pgid, nice) {
        Ok(()) => debug!(
            nice,
            "a session waits on this start: Chrome's priority raised"
        ),
        Err(e) => debug!(error = %e, nice, "raising Chrome's priority failed"),
    }
    wait.await
}

/// The profile directory made ready for Chrome (created, stale locks removed, file access
/// denied, handed to Chrome's user), and Chrome's own HOME when it runs as another user: the
/// controller's is not its to write.
fn prepare_profile(opts: &LaunchOptions) -> Result<Option<PathBuf>, ChromeError> {
    let profile_err = |source| ChromeError::Profile {
        path: opts.user_data_dir.clone(),
        source,
    };
    std::fs::create_dir_all(&opts.user_data_dir).map_err(profile_err)?;
    remove_stale_files(&opts.user_data_dir).map_err(profile_err)?;
    // Before Chrome reads the profile, and before it is handed to Chrome's user.
    file_access::deny_file_access(&opts.user_data_dir).map_err(profile_err)?;
    match &opts.user {
        Some(u) => Ok(Some(u.prepare(&opts.user_data_dir).map_err(profile_err)?)),
        None => Ok(None),
    }
}

impl Chrome {
    /// Launches Chrome and waits (bounded, with backoff) until `/json/version` answers.
    pub async fn launch(opts: &LaunchOptions, tasks: &Shutdown) -> Result<Chrome, ChromeError> {
        let started = Instant::now();
        let home = prepare_profile(opts)?;
        let sandbox = sandbox::decide(&opts.flags, opts.user.as_ref());
        let network = Network::make(opts, tasks).await?;
        let args = launch_args(opts, &sandbox, network.egress_port).await;
        let netns = network.netns.clone();
        let mut command = chrome_command(opts, &args, home.as_deref(), netns);
        let child = command.spawn().map_err(ChromeError::Spawn)?;
        let pid = Pid::from_raw(
            child
                .id()
                .map(|p| p as i32)
                .ok_or(ChromeError::ExitedEarly("no pid".into()))?,
        );
        let uid = opts.user.map_or_else(nix::unistd::geteuid, |u| u.uid);
        info!(pid = pid.as_raw(), binary = %opts.binary.display(), sandbox = %sandbox, uid = uid.as_raw(), network = %opts.network, elapsed_ms = started.elapsed().as_millis() as u64, "chrome started");
        if let Some(nice) = opts.nice {
            // Set before Chrome has forked its helpers (it is still loading), and inherited by
            // every process it starts later; a miss only costs speed, never correctness.
            if let Err(e) = set_group_nice(pid, nice) {
                warn!(error = %e, nice, "setting Chrome's priority failed");
            }
        }
        let exit_rx = Self::watch_child(child, tasks);
        let addr = SocketAddr::from(([127, 0, 0, 1], opts.debug_port));
        let (endpoint, egress) = match network.netns {
            Some(ns) => (Endpoint::in_netns(addr, ns), network.egress),
            None => (Endpoint::host(addr), network.egress),
        };
        let mut chrome = Chrome {
            pid,
            endpoint,
            browser_path: String::new(),
            exit: exit_rx,
            headless_shell: flags::is_headless_shell(&opts.binary),
            _egress: egress,
        };
        // Until Chrome is handed over, a launch that ends any other way — an error, the
        // timeout, or this future dropped by a signal mid-start — kills its whole process
        // group: its helpers would otherwise live on, writing into (and re-creating) a profile
        // directory its owner is removing.
        let unready = GroupKiller(Some(pid));
        let hurry = opts.hurry.clone().filter(|_| opts.nice.is_some());
        let ready = tokio::time::timeout(
            opts.ready_timeout,
            hurried(chrome.wait_ready(opts), pid, hurry),
        )
        .await;
        match ready {
            Ok(Ok(())) => {
                unready.disarm();
                info!(
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "chrome devtools ready"
                );
                Ok(chrome)
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(ChromeError::NotReady(opts.ready_timeout)),
        }
    }

    /// Spawns the tasks that own a started Chrome: its output drained into the log, and its
    /// exit published once on the returned channel. Dropping the child there (kill_on_drop)
    /// only happens after it has exited.
    fn watch_child(mut child: Child, tasks: &Shutdown) -> watch::Receiver<Option<ExitStatus>> {
        if let Some(out) = child.stdout.take() {
            tasks.spawn(drain(BufReader::new(out), "stdout"));
        }
        if let Some(err) = child.stderr.take() {
            tasks.spawn(drain(BufReader::new(err), "stderr"));
        }
        let (exit_tx, exit_rx) = watch::channel(None);
        tasks.spawn(async move {
            let status = match child.wait().await {
                Ok(s) => s,
                Err(e) => {
                    warn!(error = %e, "waiting for chrome failed");
                    ExitStatus::from_raw(1 << 8)
                }
            };
            let _ = exit_tx.send(Some(status));
        });
        exit_rx
    }

    async fn wait_ready(&mut self, opts: &LaunchOptions) -> Result<(), ChromeError> {
        let (mut backoff, cap) = READY_POLL
            .try_with(|p| *p)
            .unwrap_or((Duration::from_millis(5), Duration::from_millis(100)));
        let port_file = opts.user_data_dir.join("DevToolsActivePort");
        let written = Arc::new(tokio::sync::Notify::new());
        if self.endpoint.addr.port() == 0 {
            wake_on_port_file(&opts.user_data_dir, &written);
        }
        loop {
            if let Some(status) = *self.exit.borrow() {
                return Err(ChromeError::ExitedEarly(describe_exit(&status)));
            }
            if self.endpoint.addr.port() == 0 {
                if let Ok(text) = std::fs::read_to_string(&port_file)
                    && let Some(port) = text
                        .lines()
                        .next()
                        .and_then(|l| l.trim().parse::<u16>().ok())
                {
                    self.endpoint.addr.set_port(port);
                    continue;
                }
            } else if let Ok(path) =
                upstream::fetch_browser_path(&self.endpoint, Duration::from_secs(2)).await
            {
                self.browser_path = path;
                return Ok(());
            }
            let mut exit = self.exit.clone();
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                _ = exit.changed() => {}
                () = written.notified() => {}
            }
            backoff = (backoff * 2).min(cap);
        }
    }

    /// The Chrome process's id (also its process group's id).
    pub fn pid(&self) -> u32 {
        self.pid.as_raw() as u32
    }

    /// Chrome's DevTools address and the network it is in: every dial to Chrome goes
    /// through it.
    pub fn endpoint(&self) -> Endpoint {
        self.endpoint.clone()
    }

    /// Whether this is a headless shell, which loads no extension
    /// ([`flags::is_headless_shell`]).
    pub fn is_headless_shell(&self) -> bool {
        self.headless_shell
    }

    /// The browser-level DevTools WebSocket.
    pub fn browser(&self) -> BrowserSocket {
        BrowserSocket {
            endpoint: self.endpoint.clone(),
            path: self.browser_path.clone(),
        }
    }

    /// A receiver that sees Chrome's exit status once it has exited.
    pub fn exit_watch(&self) -> watch::Receiver<Option<ExitStatus>> {
        self.exit.clone()
    }

    /// Waits until Chrome has exited.
    pub async fn exited(&self) -> ExitStatus {
        let mut rx = self.exit.clone();
        loop {
            if let Some(s) = *rx.borrow_and_update() {
                return s;
            }
            if rx.changed().await.is_err() {
                return ExitStatus::from_raw(1 << 8);
            }
        }
    }

    async fn exited_within(&self, d: Duration) -> Option<ExitStatus> {
        tokio::time::timeout(d, self.exited()).await.ok()
    }

    /// Closes Chrome within `budget`: CDP `Browser.close`, then SIGTERM, then SIGKILL to the
    /// whole process group. Returns how it ended.
    pub async fn close(&self, budget: Duration) -> CloseOutcome {
        let deadline = Instant::now() + budget;
        let left = || deadline.saturating_duration_since(Instant::now());
        if let Some(s) = *self.exit.borrow() {
            self.kill_group();
            return CloseOutcome::AlreadyExited(s);
        }
        let cdp_budget = left().mul_f32(0.6);
        match cdp::browser_close(&self.browser(), cdp_budget).await {
            Ok(()) => debug!("Browser.close acknowledged"),
            Err(e) => warn!(error = %e, "Browser.close over CDP failed; falling back to signals"),
        }
        if let Some(s) = self.exited_within(left().mul_f32(0.7)).await {
            self.kill_group();
            return CloseOutcome::Clean(s);
        }
        warn!("chrome did not exit after Browser.close; sending SIGTERM");
        let _ = kill(self.pid, Signal::SIGTERM);
        if let Some(s) = self.exited_within(left().mul_f32(0.5)).await {
            self.kill_group();
            return CloseOutcome::Terminated(s);
        }
        warn!("chrome ignored SIGTERM; killing its process group");
        self.kill_group();
        match self
            .exited_within(left().max(Duration::from_millis(500)))
            .await
        {
            Some(s) => CloseOutcome::Killed(s),
            None => CloseOutcome::Stuck,
        }
    }

    /// SIGKILL to Chrome's process group (renderers included). Harmless when already gone.
    pub fn kill_group(&self) {
        let _ = killpg(self.pid, Signal::SIGKILL);
    }

    /// Sets the nice value of every process and thread in Chrome's process group. Raising it is
    /// always allowed; lowering it below where it started needs `CAP_SYS_NICE` (or a raised
    /// `RLIMIT_NICE`), and fails with `EACCES`/`EPERM` otherwise.
    pub fn set_nice(&self, nice: i32) -> std::io::Result<()> {
        set_group_nice(self.pid, nice)
    }
}

/// SIGKILLs a process group when dropped, unless disarmed.
struct GroupKiller(Option<Pid>);

impl GroupKiller {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for GroupKiller {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

/// The controller's own nice value, the one a claimed Chrome goes back to.
pub fn own_nice() -> i32 {
    rustix::process::getpriority_process(None).unwrap_or(0)
}

fn set_group_nice(pgid: Pid, nice: i32) -> std::io::Result<()> {
    let pgid = rustix::process::Pid::from_raw(pgid.as_raw())
        .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    rustix::process::setpriority_pgrp(Some(pgid), nice).map_err(std::io::Error::from)
}

/// How [`Chrome::close`] ended.
#[derive(Debug)]
pub enum CloseOutcome {
    /// Chrome had already exited before closing began.
    AlreadyExited(ExitStatus),
    /// Exited after `Browser.close`: profile flushed.
    Clean(ExitStatus),
    /// Exited after SIGTERM (`Browser.close` did not end it in time).
    Terminated(ExitStatus),
    /// Exited only after SIGKILL to its process group.
    Killed(ExitStatus),
    /// Not seen exiting even after SIGKILL (waited the rest of the budget, at least 500 ms).
    Stuck,
}

impl CloseOutcome {
    /// Whether Chrome exited cleanly after `Browser.close` (its profile is flushed).
    pub fn is_clean(&self) -> bool {
        matches!(self, Self::Clean(_))
    }
}

async fn drain<R: tokio::io::AsyncBufRead + Unpin>(reader: R, stream: &'static str) {
    let mut lines = reader.lines();
    while let Ok(Some(line)) = lines.next_line().await {
        debug!(target: "chrome", stream, "{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Real Chromium, its looks for DevTools an hour apart: only the watch of the profile can
    /// find DevTools within the test's bound.
    #[tokio::test]
    async fn a_launch_is_ready_when_chrome_writes_its_port_file_not_at_the_next_look() {
        let dir = tempfile::tempdir().unwrap();
        let opts = LaunchOptions {
            binary: wallcrawler_testkit::chromium(),
            user_data_dir: dir.path().join("profile"),
            debug_port: 0,
            flags: flags::parse_flags(flags::BUILTIN_FLAGS).unwrap(),
            ready_timeout: Duration::from_secs(60),
            nice: None,
            hurry: None,
            user: None,
            network: ChromeNetwork::Shared,
            hop: egress::Hop::new(egress::EgressAllow::loopback()),
            proxied_udp_only: false,
            headful_user_agent: false,
        };
        let tasks = Shutdown::new();
        let hour = Duration::from_secs(3600);
        let launch = READY_POLL.scope((hour, hour), Chrome::launch(&opts, &tasks));
        let chrome = tokio::time::timeout(Duration::from_secs(60), launch)
            .await
            .expect("ready within 60 s: woken by the port file")
            .unwrap();
        assert!(chrome.browser_path.starts_with("/devtools/browser/"));
        chrome.close(Duration::from_secs(10)).await;
    }

    /// A `--version` asked ahead and read later gives the headful User-Agent (a stand-in binary
    /// printing Chromium's line; the statics are not touched).
    #[tokio::test]
    async fn a_version_asked_ahead_is_read_into_the_user_agent() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("chromium");
        std::fs::write(
            &bin,
            "#!/bin/sh\necho 'Chromium 156.0.8078.129 built on Debian'\n",
        )
        .unwrap();
        std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let asked = ask_version(&bin).unwrap();
        assert_eq!(
            read_user_agent(asked).await.as_deref(),
            Some(
                "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/156.0.0.0 Safari/537.36"
            )
        );
        assert!(ask_version(&dir.path().join("missing")).is_none());
    }

    #[test]
    fn a_headless_shell_never_runs_as_the_controller_s_user() {
        let shell = Path::new("/usr/lib/chromium/chromium-headless-shell");
        let err = check_shell_user(shell, None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "/usr/lib/chromium/chromium-headless-shell is a headless shell, which applies no managed policy (file:// URLs are not blocked): it runs only as a user other than the controller's (set CHROME_USER, or start the controller as root for a uid of its own)"
        );
        let other = ChromeUser::parse("65534:65534").unwrap();
        assert!(check_shell_user(shell, Some(other)).is_ok());
        // The full browser applies the policy: its own user is its operator's choice.
        assert!(check_shell_user(Path::new("/usr/lib/chromium/chromium"), None).is_ok());
    }

    #[test]
    fn find_chrome_prefers_explicit_then_path() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("chromium");
        std::fs::write(&bin, "").unwrap();
        assert_eq!(find_chrome(Some(&bin), None).unwrap(), bin);
        assert!(matches!(
            find_chrome(Some(&dir.path().join("nope")), None),
            Err(ChromeError::BadPath(_))
        ));
        assert_eq!(
            find_chrome(None, Some(dir.path().as_os_str())).unwrap(),
            bin
        );
        let empty = tempfile::tempdir().unwrap();
        assert!(matches!(
            find_chrome(None, Some(empty.path().as_os_str())),
            Err(ChromeError::NotFound)
        ));
    }

    #[test]
    fn stale_files_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        for f in STALE_FILES {
            std::fs::write(dir.path().join(f), "x").unwrap();
        }
        std::fs::write(dir.path().join("Local State"), "{}").unwrap();
        remove_stale_files(dir.path()).unwrap();
        for f in STALE_FILES {
            assert!(!dir.path().join(f).exists());
        }
        assert!(dir.path().join("Local State").exists());
    }

    #[test]
    fn exits_are_described() {
        assert_eq!(
            describe_exit(&ExitStatus::from_raw(21 << 8)),
            "exit code 21"
        );
        assert_eq!(describe_exit(&ExitStatus::from_raw(9)), "killed by SIGKILL");
    }
}
