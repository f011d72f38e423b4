//! A browser behind the proxy ([`Browser`]: a supervised Chrome and the listener in front of
//! it; a pool's warm one exists before any session has it), or the proxy alone (`proxy`
//! mode), each run until a signal or the session's own end.
//!
//! Ownership of the shutdown: [`crate::shutdown::Shutdown`] (made by `cli`) owns the root token
//! and the tracker every task here runs on; a [`Browser`] owns its listener's stop token and
//! Chrome, and its owner runs the steps of [`crate::shutdown::Step`] in order — stop admitting
//! → (cookies) → Chrome closed, relays ended → (archive, statuses) — each within its deadline.

use std::net::SocketAddr;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::auth::Authenticator;
use crate::chrome::{self, Chrome, ChromeError, CloseOutcome, LaunchOptions, describe_exit};
use crate::edge::Limits;
use crate::proxy::{Clients, Proxy};
use crate::shutdown::{Shutdown, Step, Steps};
use crate::telemetry::{self, Metrics};
use crate::upstream::{self, Endpoint, Upstream, UpstreamState};

/// Why a session ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EndReason {
    /// SIGTERM/SIGINT (a release in ECS).
    Signal,
    /// A client sent `Browser.close`.
    ClientClosedBrowser,
    /// No client for the disconnect timeout, or for the grace after the last one left.
    IdleTimeout,
    /// The session's `expiresAt` passed.
    Expired,
    /// Chrome exited by itself with status 0 after a client had talked to it (the proxy
    /// withholds every client `Browser.close`, so not on a client's command). A normal end,
    /// except that the session cookies can no longer be exported.
    ChromeExitedCleanly,
    /// Chrome exited without being asked to, by a signal or with a non-zero status.
    ChromeCrashed(String),
    /// The session item turned terminal (a release, the sweeper, the task-state handler) or
    /// disappeared while the session was served: someone else ended it, and the stop meant
    /// for this task did not reach it. Ended as on a signal; the item keeps its status.
    EndedElsewhere,
}

/// How an exit of Chrome that the controller did not ask for ends the session.
///
/// Chrome exits with status 0 only when it closed itself cleanly (CDP `Browser.close`, or a
/// SIGTERM/SIGINT it handled) — its profile flushed to disk. A death by a signal it did not
/// handle (SIGKILL from the OOM killer, SIGSEGV, SIGABRT) or a non-zero status is a crash.
/// A clean exit before any client traffic reached Chrome cannot be a client's close, so it
/// stays a crash.
pub(crate) fn classify_exit(status: &ExitStatus, client_traffic: bool) -> EndReason {
    if status.success() && client_traffic {
        EndReason::ChromeExitedCleanly
    } else {
        EndReason::ChromeCrashed(describe_exit(status))
    }
}

/// Failures that stop a session from starting.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AppError {
    #[error("could not listen on {addr}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("could not start the relay thread")]
    Relay(#[source] std::io::Error),
    #[error(transparent)]
    Chrome(#[from] ChromeError),
}

/// When a session without keepAlive ends for want of clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IdlePolicy {
    /// While no client has connected yet (`CDP_DISCONNECT_TIMEOUT`): time for the session's
    /// creator to connect.
    pub before_first_client: Duration,
    /// Once the last client has disconnected (`CDP_DISCONNECT_GRACE`): time to reconnect, short
    /// because clients that never release their session (Stagehand with `disableAPI`) would
    /// otherwise hold a browser for the whole timeout.
    pub after_last_client: Duration,
}

/// What the proxy serves with: who may connect, where it and its metrics listen, its limits.
pub(crate) struct ProxyOptions {
    pub auth: Authenticator,
    pub listen: SocketAddr,
    pub metrics_addr: Option<SocketAddr>,
    pub limits: Limits,
}

/// Everything a Chrome-backed session needs.
pub(crate) struct BrowserOptions {
    pub proxy: ProxyOptions,
    pub chrome: LaunchOptions,
    /// `None` = keepAlive (never idle).
    pub idle: Option<IdlePolicy>,
    /// Unix seconds.
    pub expires_at: Option<u64>,
    pub shutdown_budget: Duration,
    /// Chrome's nice value while it closes (`BACKGROUND_NICE`; `None`: unchanged).
    pub background_nice: Option<i32>,
    /// Where every task of the session runs, and the relay thread's lifetime is counted.
    pub tasks: Shutdown,
}

/// What a running session tells its owner once it is ready.
#[derive(Debug, Clone)]
pub(crate) struct Ready {
    pub proxy_addr: SocketAddr,
    pub chrome_pid: u32,
    /// The session's handoffs: given the live-view URL they hand out.
    pub handoffs: Arc<crate::viewer::handoff::Handoffs>,
}

/// Shared plumbing of the serving modes: the listener and metrics, their tasks on `tasks`.
struct Serving {
    proxy: Arc<Proxy>,
    addr: SocketAddr,
    /// Owned here, cancelled when the session stops admitting (or with the root): the proxy's
    /// listener stops accepting.
    stop_accepting: CancellationToken,
    /// Owned here, cancelled by [`Self::stop`]: metrics stay scrapable through the end.
    stop_metrics: CancellationToken,
}

/// Connections the kernel holds for a listener until it accepts them. Tokio's default (std's,
/// 128) is smaller than a burst of simultaneous connects the pending budget admits: beyond it
/// the kernel drops the SYNs, and each such client only retries a second later. The kernel caps
/// it at `net.core.somaxconn` (4,096 on current kernels).
pub(crate) const LISTEN_BACKLOG: u32 = 1024;

/// Binds `addr` with [`LISTEN_BACKLOG`]: the listener and the address it got (`addr` may ask
/// for port 0).
async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), AppError> {
    let bound = async {
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        // As tokio's own bind does: a restarted task rebinds its port at once.
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        let listener = socket.listen(LISTEN_BACKLOG)?;
        let local = listener.local_addr()?;
        Ok::<_, std::io::Error>((listener, local))
    };
    bound
        .await
        .map_err(|source| AppError::Bind { addr, source })
}

impl Serving {
    async fn start(
        opts: ProxyOptions,
        upstream: watch::Receiver<UpstreamState>,
        tasks: &Shutdown,
    ) -> Result<Self, AppError> {
        let ProxyOptions {
            auth,
            listen,
            metrics_addr,
            limits,
        } = opts;
        let (listener, addr) = bind(listen).await?;
        let metrics = Metrics::new();
        let stop_accepting = tasks.child();
        let stop_metrics = tasks.child();
        if let Some(maddr) = metrics_addr {
            let (ml, bound) = bind(maddr).await?;
            info!(addr = %bound, "metrics listening");
            tasks.spawn(telemetry::serve_metrics(
                ml,
                metrics.clone(),
                stop_metrics.clone(),
                tasks.tracker().clone(),
            ));
        }
        let proxy = Proxy::new(auth, upstream, metrics, limits, tasks).map_err(AppError::Relay)?;
        tasks.spawn(
            proxy
                .clone()
                .serve(listener, stop_accepting.clone(), tasks.tracker().clone()),
        );
        info!(%addr, "proxy listening");
        Ok(Self {
            proxy,
            addr,
            stop_accepting,
            stop_metrics,
        })
    }

    /// Stops both listeners and ends every relay; the connection tasks then end on their own,
    /// and [`Shutdown::drain`] waits for them.
    fn stop(&self) {
        self.stop_accepting.cancel();
        self.stop_metrics.cancel();
        self.proxy.close_all_relays();
    }
}

/// A running Chrome behind the proxy. The steps are separate so the ECS task can put its own
/// work between them (READY write, cookie export, profile upload).
pub(crate) struct Browser {
    serving: Serving,
    pub chrome: Chrome,
    /// Chrome's egress hop (shared by its relaunches): the session's routes, `proxyBytes`.
    hop: chrome::egress::Hop,
    /// Stops the session's own CDP connections (the `allowedDomains` guard, the page
    /// settings): before Chrome is closed, so their ends are not taken for a lost guard.
    agents: CancellationToken,
    upstream_tx: watch::Sender<UpstreamState>,
    idle: Option<IdlePolicy>,
    expires_at: Option<u64>,
    background_nice: Option<i32>,
    tasks: Shutdown,
}

/// Result of [`Browser::start`].
pub(crate) enum Started {
    Running(Box<Browser>),
    /// A signal arrived while Chrome was starting; everything is stopped again.
    Interrupted,
}

impl Browser {
    /// Binds the proxy (answering 503 until Chrome is ready), launches Chrome and waits for it.
    pub(crate) async fn start(
        opts: BrowserOptions,
        signal: &CancellationToken,
    ) -> Result<Started, AppError> {
        let started = Self::warm(opts, signal).await?;
        if let Started::Running(s) = &started {
            s.publish();
        }
        Ok(started)
    }

    /// Like [`Self::start`], but the proxy keeps answering 503 until [`Self::publish`]: a pool
    /// controller's warm browser, serving no session yet.
    pub(crate) async fn warm(
        opts: BrowserOptions,
        signal: &CancellationToken,
    ) -> Result<Started, AppError> {
        let (upstream_tx, upstream_rx) = upstream::upstream_channel();
        let serving = Serving::start(opts.proxy, upstream_rx, &opts.tasks).await?;
        let chrome = match launch_or_signal(&opts.chrome, signal, &opts.tasks).await {
            Ok(Some(c)) => c,
            Ok(None) => {
                serving.stop();
                return Ok(Started::Interrupted);
            }
            Err(e) => {
                serving.stop();
                return Err(e.into());
            }
        };
        let _ = upstream_tx.send(UpstreamState::Warm);
        Ok(Started::Running(Box::new(Browser {
            serving,
            chrome,
            hop: opts.chrome.hop.clone(),
            agents: opts.tasks.child(),
            upstream_tx,
            idle: opts.idle,
            expires_at: opts.expires_at,
            background_nice: opts.background_nice,
            tasks: opts.tasks,
        })))
    }

    /// Lets clients through to the current Chrome.
    pub(crate) fn publish(&self) {
        let _ = self
            .upstream_tx
            .send(UpstreamState::Ready(Arc::new(Upstream::new(
                self.chrome.endpoint(),
                Some(self.chrome.browser_path.clone()),
            ))));
    }

    /// The directories the session's clients may name files in (its downloads directory
    /// among them).
    pub(crate) fn files(&self) -> Arc<crate::file_rules::FileRules> {
        self.serving.proxy.files()
    }

    /// Where the proxy's CDP clients find the session's log recorder.
    pub(crate) fn session_log(&self) -> &Arc<crate::session_log::Slot> {
        self.serving.proxy.session_log()
    }

    /// The pages' screencasts (the live viewers' and the recording's).
    pub(crate) fn hubs(&self) -> &Arc<crate::viewer::hub::Hubs> {
        self.serving.proxy.hubs()
    }

    /// Binds the proxy's authenticator to the claimed session (once).
    pub(crate) fn bind(&self, session_id: String, project_id: Option<String>) -> bool {
        self.serving.proxy.bind_session(session_id, project_id)
    }

    /// Where the session's uploads are brought for the browser (canonical), if anywhere.
    pub(crate) fn uploads_dir(&self) -> Option<&std::path::Path> {
        self.serving.proxy.uploads_dir()
    }

    /// The claimed session's idle timeout and expiry.
    pub(crate) fn set_lifecycle(&mut self, idle: Option<IdlePolicy>, expires_at: Option<u64>) {
        self.idle = idle;
        self.expires_at = expires_at;
    }

    /// Starts another Chrome with `launch` (a claimed context's profile) in place of the
    /// current one, which the caller has closed. `Ok(false)`: a signal came first.
    pub(crate) async fn relaunch(
        &mut self,
        launch: &LaunchOptions,
        signal: &CancellationToken,
    ) -> Result<bool, AppError> {
        match launch_or_signal(launch, signal, &self.tasks).await? {
            Some(c) => {
                self.chrome = c;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    pub(crate) fn ready(&self) -> Ready {
        Ready {
            proxy_addr: self.serving.addr,
            chrome_pid: self.chrome.pid(),
            handoffs: self.serving.proxy.handoffs().clone(),
        }
    }

    /// The proxy's metrics.
    pub(crate) fn metrics(&self) -> &Arc<Metrics> {
        self.serving.proxy.metrics()
    }

    /// Bytes carried through the session's upstream proxies so far, both directions
    /// (`proxyBytes`; the CDP bytes relayed are the proxy's metrics).
    pub(crate) fn proxy_bytes(&self) -> u64 {
        self.hop.proxied_bytes()
    }

    /// Where what the egress hop has to tell the session (its proxy's failures) goes from now
    /// on: the session's log, or nowhere.
    pub(crate) fn set_egress_notes(&self, recorder: Option<crate::session_log::Recorder>) {
        self.hop.set_notes(
            recorder.map(|r| Arc::new(move |m: String| r.note(m)) as crate::chrome::egress::Notes),
        );
    }

    /// Applies the session's egress: its proxy routes to every connection from now on (the
    /// connections made before end), and its `allowedDomains` to the running Chrome's
    /// top-level navigations. An error says what could not be applied; the session must then
    /// not be served.
    pub(crate) async fn apply_egress(
        &mut self,
        egress: &wallcrawler_contract::egress::Egress,
    ) -> Result<(), String> {
        self.hop.configure(egress)?;
        if !egress.proxied() && egress.routes.is_empty() {
            debug!("no proxy routes: every host goes direct");
        } else {
            info!(
                routes = egress.routes.len(),
                proxied = egress.proxied(),
                "the session's proxy routes are in force"
            );
        }
        if egress.allowed_domains.is_empty() {
            return Ok(());
        }
        let pid = nix::unistd::Pid::from_raw(self.chrome.pid() as i32);
        chrome::allowed_domains::guard(
            &self.chrome.browser(),
            egress.allowed_domains.clone(),
            self.agents.clone(),
            move || {
                let _ = nix::sys::signal::killpg(pid, nix::sys::signal::Signal::SIGKILL);
            },
        )
        .await
        .map_err(|e| format!("the allowedDomains guard could not start: {e}"))?;
        Ok(())
    }

    /// Applies what the session asked for — its egress, then its browser settings — to the
    /// running Chrome, before any client. An error says what could not be applied.
    pub(crate) async fn apply_asked(
        &mut self,
        egress: Option<&wallcrawler_contract::egress::Egress>,
        browser: Option<&wallcrawler_contract::browser::BrowserSettings>,
    ) -> Result<(), String> {
        if let Some(e) = egress {
            self.apply_egress(e).await?;
        }
        match browser {
            Some(b) => self.apply_browser(b).await,
            None => Ok(()),
        }
    }

    /// Applies the browser the session asked for to the running Chrome: its viewport and
    /// locales in every page, certificate errors ignored, ads blocked in the egress hop. An
    /// error says what could not be applied; the session must then not be served.
    pub(crate) async fn apply_browser(
        &mut self,
        settings: &wallcrawler_contract::browser::BrowserSettings,
    ) -> Result<(), String> {
        if settings.is_empty() {
            return Ok(());
        }
        if settings.block_ads {
            // In the egress hop: connections to ad and tracking hosts refused (and the
            // connections made before, cut). Refused when no list loads: never unblocked.
            self.hop
                .set_block_ads(true)
                .await
                .map_err(|e| format!("blockAds could not be applied: {e}"))?;
            info!("ads and trackers are blocked for this session (blockAds)");
        }
        chrome::emulation::apply(&self.chrome.browser(), settings, self.agents.clone())
            .await
            .map_err(|e| format!("the session's browser settings could not be applied: {e}"))
    }

    /// Whether any client bytes have reached Chrome through the proxy.
    fn client_traffic(&self) -> bool {
        self.serving.proxy.metrics().bytes_client_to_chrome.get() > 0
    }

    /// Waits for whatever ends the session first.
    pub(crate) async fn wait_end(&self, signal: &CancellationToken) -> EndReason {
        let events = self.serving.proxy.events();
        let clients = self.serving.proxy.clients();
        let reason = tokio::select! {
            biased;
            () = signal.cancelled() => EndReason::Signal,
            () = events.browser_close.notified() => EndReason::ClientClosedBrowser,
            status = self.chrome.exited() => classify_exit(&status, self.client_traffic()),
            () = idle(clients, self.idle) => EndReason::IdleTimeout,
            () = until_unix(self.expires_at) => EndReason::Expired,
        };
        match &reason {
            EndReason::ChromeCrashed(how) => {
                error!(chrome.exit = %how, "chrome exited unexpectedly")
            }
            EndReason::ChromeExitedCleanly => warn!(
                "chrome exited by itself with status 0 after client traffic (a Browser.close \
                 the proxy could not inspect); ending the session normally"
            ),
            r => info!(reason = ?r, "session ending"),
        }
        reason
    }

    /// Stops admitting new connections: `/health` and every route answer no more.
    pub(crate) fn stop_admitting(&self) {
        self.agents.cancel();
        self.serving.stop_accepting.cancel();
        let _ = self.upstream_tx.send(UpstreamState::Gone);
    }

    /// Closes Chrome: cleanly through CDP within `budget`, or kills it after a crash. No client
    /// waits on a closing Chrome: with `BACKGROUND_NICE` it yields the CPU to live sessions.
    pub(crate) async fn close_chrome(
        &self,
        crashed: bool,
        budget: Duration,
    ) -> Option<CloseOutcome> {
        self.stop_admitting();
        if crashed {
            self.chrome.kill_group();
            return None;
        }
        self.to_background();
        let outcome = self.chrome.close(budget).await;
        info!(outcome = ?outcome, clean = outcome.is_clean(), "chrome closed");
        Some(outcome)
    }

    /// Chrome at `BACKGROUND_NICE` (always allowed: it only lowers the priority).
    pub(crate) fn to_background(&self) {
        if let Some(nice) = self.background_nice
            && let Err(e) = self.chrome.set_nice(nice)
        {
            debug!(error = %e, nice, "lowering Chrome's priority failed");
        }
    }

    /// Chrome back at the controller's own priority, for the session a client now waits on.
    /// Needs `CAP_SYS_NICE` when Chrome was started at a higher nice value; without it Chrome
    /// keeps that value (slower under contention, nothing else).
    pub(crate) fn to_foreground(&self) {
        let nice = chrome::own_nice();
        if let Err(e) = self.chrome.set_nice(nice) {
            warn!(error = %e, nice, "raising the claimed Chrome's priority back failed (needs CAP_SYS_NICE); it keeps BACKGROUND_NICE");
        }
    }

    /// Ends every connection and the listeners.
    pub(crate) fn finish(self) {
        self.serving.stop();
    }
}

/// Launches Chrome; `None` when a signal came first.
async fn launch_or_signal(
    launch: &LaunchOptions,
    signal: &CancellationToken,
    tasks: &Shutdown,
) -> Result<Option<Chrome>, ChromeError> {
    tokio::select! {
        c = Chrome::launch(launch, tasks) => c.map(Some),
        () = signal.cancelled() => {
            info!("signal received while Chrome was starting");
            Ok(None)
        }
    }
}

/// Runs a Chrome-backed session until it ends (local mode). `on_ready` is called once Chrome
/// and the proxy both answer.
pub(crate) async fn run_browser(
    opts: BrowserOptions,
    signal: CancellationToken,
    on_ready: impl FnOnce(&Ready),
) -> Result<EndReason, AppError> {
    let budget = opts.shutdown_budget;
    let session = match Browser::start(opts, &signal).await? {
        Started::Running(s) => *s,
        Started::Interrupted => return Ok(EndReason::Signal),
    };
    on_ready(&session.ready());
    let reason = session.wait_end(&signal).await;
    let steps = Steps::start(budget);
    session.stop_admitting();
    let crashed = matches!(reason, EndReason::ChromeCrashed(_));
    session
        .close_chrome(crashed, steps.left(Step::ChromeClosed))
        .await;
    session.finish();
    Ok(reason)
}

/// Runs the proxy alone in front of `upstream` until the root token of `tasks` is cancelled.
pub(crate) async fn run_proxy(
    mut opts: ProxyOptions,
    upstream_addr: SocketAddr,
    tasks: &Shutdown,
    on_ready: impl FnOnce(SocketAddr),
) -> Result<EndReason, AppError> {
    opts.limits.intercept_browser_close = false;
    let up = Arc::new(Upstream::new(Endpoint::host(upstream_addr), None));
    match up.browser_path(Duration::from_secs(2)).await {
        Ok(_) => info!(upstream = %upstream_addr, "upstream answers /json/version"),
        Err(e) => {
            warn!(upstream = %upstream_addr, error = %e, "upstream does not answer /json/version yet; will retry per connection")
        }
    }
    let (_upstream_tx, upstream_rx) = watch::channel(UpstreamState::Ready(up));
    let serving = Serving::start(opts, upstream_rx, tasks).await?;
    on_ready(serving.addr);
    tasks.token().cancelled().await;
    serving.stop();
    Ok(EndReason::Signal)
}

/// Completes when no upgraded client has been connected for the policy's wait: the timeout
/// while nobody has connected yet, the grace once the last client has left (never when `None`).
pub(crate) async fn idle(mut clients: watch::Receiver<Clients>, policy: Option<IdlePolicy>) {
    let Some(policy) = policy else {
        return std::future::pending().await;
    };
    loop {
        let now = *clients.borrow_and_update();
        if now.connected > 0 {
            if clients.changed().await.is_err() {
                return std::future::pending().await;
            }
            continue;
        }
        let wait = if now.ever {
            policy.after_last_client
        } else {
            policy.before_first_client
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => return,
            r = clients.changed() => if r.is_err() { return std::future::pending().await },
        }
    }
}

/// Completes at the given unix time (never when `None`).
pub(crate) async fn until_unix(at: Option<u64>) {
    let Some(at) = at else {
        return std::future::pending().await;
    };
    let now = crate::auth::unix_now();
    tokio::time::sleep(Duration::from_secs(at.saturating_sub(now))).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 120 s for the first client, 10 s after the last one.
    const POLICY: IdlePolicy = IdlePolicy {
        before_first_client: Duration::from_secs(120),
        after_last_client: Duration::from_secs(10),
    };

    fn connect(tx: &watch::Sender<Clients>) {
        tx.send_modify(|c| {
            c.connected += 1;
            c.ever = true;
        });
    }

    fn disconnect(tx: &watch::Sender<Clients>) {
        tx.send_modify(|c| c.connected -= 1);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_fires_a_grace_after_the_last_client_left() {
        let (tx, rx) = watch::channel(Clients::default());
        let timer = tokio::spawn(idle(rx, Some(POLICY)));
        tokio::time::sleep(Duration::from_secs(5)).await;
        connect(&tx);
        connect(&tx);
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert!(!timer.is_finished(), "connected clients keep the session");
        disconnect(&tx);
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!timer.is_finished(), "one client is still connected");
        disconnect(&tx);
        tokio::time::sleep(Duration::from_secs(9)).await;
        assert!(!timer.is_finished(), "the grace is not over yet");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(timer.is_finished(), "the grace, not the timeout, applies");
    }

    #[tokio::test(start_paused = true)]
    async fn idle_waits_the_timeout_while_nobody_has_connected() {
        let (_tx, rx) = watch::channel(Clients::default());
        let timer = tokio::spawn(idle(rx, Some(POLICY)));
        tokio::time::sleep(Duration::from_secs(119)).await;
        assert!(!timer.is_finished(), "the creator has the whole timeout");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(timer.is_finished());
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_reconnecting_within_the_grace_keeps_the_session() {
        let (tx, rx) = watch::channel(Clients::default());
        let timer = tokio::spawn(idle(rx, Some(POLICY)));
        connect(&tx);
        tokio::time::sleep(Duration::from_secs(1)).await;
        disconnect(&tx);
        tokio::time::sleep(Duration::from_secs(8)).await;
        connect(&tx);
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!timer.is_finished(), "the reconnected client keeps it");
        disconnect(&tx);
        tokio::time::sleep(Duration::from_secs(9)).await;
        assert!(
            !timer.is_finished(),
            "the grace restarts at each last leave"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(timer.is_finished());
    }

    /// A client that came and went before the timer looked still counts as the first client.
    #[tokio::test(start_paused = true)]
    async fn a_client_the_timer_never_saw_connected_still_counts() {
        let (tx, rx) = watch::channel(Clients::default());
        connect(&tx);
        disconnect(&tx);
        let timer = tokio::spawn(idle(rx, Some(POLICY)));
        tokio::time::sleep(Duration::from_secs(11)).await;
        assert!(timer.is_finished());
    }

    #[tokio::test(start_paused = true)]
    async fn keep_alive_never_idles() {
        let (_tx, rx) = watch::channel(Clients::default());
        let timer = tokio::spawn(idle(rx, None));
        tokio::time::sleep(Duration::from_secs(86_400)).await;
        assert!(!timer.is_finished());
    }

    /// What Debian Chromium really gives (checked by hand): status 0 after `Browser.close`
    /// and after a SIGTERM/SIGINT it handles; killed by the signal for SIGKILL and SIGSEGV.
    #[test]
    fn only_a_clean_exit_after_client_traffic_is_a_normal_end() {
        use std::os::unix::process::ExitStatusExt;
        let clean = ExitStatus::from_raw(0);
        assert_eq!(classify_exit(&clean, true), EndReason::ChromeExitedCleanly);
        assert_eq!(
            classify_exit(&clean, false),
            EndReason::ChromeCrashed("exit code 0".into())
        );
        for (raw, how) in [
            (9, "killed by SIGKILL"),
            (11, "killed by SIGSEGV"),
            (6, "killed by SIGABRT"),
            (1 << 8, "exit code 1"),
            (21 << 8, "exit code 21"),
        ] {
            assert_eq!(
                classify_exit(&ExitStatus::from_raw(raw), true),
                EndReason::ChromeCrashed(how.into())
            );
        }
    }
}
