//! `wallcrawler-control-plane serve`: the whole platform on one machine.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::routing::{get, put};
use tokio::net::TcpListener;
use tokio_util::task::AbortOnDropHandle;
use tracing::info;
use wallcrawler_contract::task_env;

use super::controllers::{Controllers, Ends, LocalLauncher, LocalPool};
use super::{
    DirObjects, DirSessions, FileMap, LocalArchives, LocalIdentity, download_object, load_or_init,
    upload_archive,
};
use crate::app::{App, Settings};
use crate::stores::{Launcher, StaticSigner, SystemClock};

/// Where the controller binary is: `WALLCRAWLER_CONTROLLER_BIN`, else next to this executable.
pub fn controller_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("WALLCRAWLER_CONTROLLER_BIN") {
        return PathBuf::from(p);
    }
    std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("wallcrawler-controller")))
        .unwrap_or_else(|| PathBuf::from("wallcrawler-controller"))
}

/// What the upload URLs' HMAC key is derived with from the private key (never the key itself).
const URL_KEY_INFO: &[u8] = b"wallcrawler local archive upload URLs v1";

/// A bound local platform, ready to serve.
pub struct LocalServer {
    /// The address the API listens on (port 0 asked = the one the OS chose).
    pub addr: SocketAddr,
    /// The project and API key the server created for local use, and its private key.
    pub identity: LocalIdentity,
    listener: TcpListener,
    router: axum::Router,
    controllers: Controllers,
    pool: Option<Arc<LocalPool>>,
    /// The connect gateway every session's `connectUrl` points at (`None`: direct mode).
    gateway: Option<GatewayChild>,
    /// The stores the sweeper works on (the router's own).
    app: App,
    /// How often the sweeper runs (`None`: never).
    sweep_every: Option<Duration>,
    /// The data directory's `contexts/`, where sessions' records are.
    records: PathBuf,
    /// How long a session's records are kept (`None`: for ever).
    retention: Option<Duration>,
}

/// How clients reach the local platform's sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connect {
    /// Each controller's own port, known once READY (the create waits for it).
    Direct,
    /// One connect gateway for every session, its URL handed out at create. `tls`: it serves
    /// `wss://` with a certificate from a local authority kept in `<data dir>/tls`.
    Gateway {
        /// Serve `wss://`.
        tls: bool,
    },
}

/// The API's routes, and beside them the uploads of context archives to the local store and
/// the downloads of sessions' files from it (signed URLs).
fn local_router(app: App, archives: Arc<LocalArchives>) -> axum::Router {
    let uploads = axum::Router::new()
        .route("/_local/archives/{*key}", put(upload_archive))
        .route("/_local/objects/{*key}", get(download_object))
        .with_state(archives)
        .layer(axum::extract::DefaultBodyLimit::disable());
    crate::router::router(app).merge(uploads)
}

impl LocalServer {
    /// Binds 127.0.0.1:`port` and prepares the data directory (creating the local project and
    /// API key on first start). `pool`: controllers kept warm (0 = one started per session).
    pub async fn bind(
        port: u16,
        data_dir: &Path,
        mut settings: Settings,
        pool: usize,
        connect: Connect,
    ) -> anyhow::Result<LocalServer> {
        let identity = load_or_init(data_dir)?;
        let key = identity.signing_key()?;
        // What controllers and the gateway get: they verify tokens, they cannot mint one.
        let public_key = key.verifying_key().to_pem();
        let gateway =
            GatewayChild::for_connect(connect, data_dir, &public_key, &mut settings).await?;
        let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port))).await?;
        let addr = listener.local_addr()?;
        let sessions = DirSessions::in_dir(data_dir);
        let archives = Arc::new(LocalArchives {
            dir: data_dir.join("contexts"),
            base_url: format!("http://{addr}"),
            url_key: key.mac(URL_KEY_INFO).into_bytes(),
        });
        // One instance of each file store: their locks are per instance.
        let ends = Ends::in_dir(data_dir, sessions.clone());
        let (slots, contexts) = (ends.slots.clone(), ends.contexts.clone());
        let signer: Arc<dyn crate::stores::Signer> = Arc::new(StaticSigner(key));
        // Controllers get their session's live view (for handoffs) minted here, and let the
        // dashboard on this address frame their viewers.
        let controllers =
            Controllers::new(controller_bin(), data_dir.to_owned(), public_key, ends)?
                .with_live_views(signer.clone())
                .framed_by_dashboard_at(addr.port());
        let pool = match pool {
            0 => None,
            n => Some(LocalPool::new(controllers.clone(), n)?),
        };
        let launcher = launcher(&controllers, pool.as_ref());
        let app = App {
            sessions: Arc::new(sessions),
            projects: Arc::new(FileMap::new(data_dir.join("projects.json"))),
            slots,
            keys: Arc::new(FileMap::new(data_dir.join("api-keys.json"))),
            contexts,
            archives: archives.clone(),
            objects: Arc::new(DirObjects {
                dir: data_dir.join("contexts"),
            }),
            launcher,
            signer,
            clock: Arc::new(SystemClock),
            settings,
        };
        Ok(LocalServer {
            addr,
            identity,
            listener,
            router: local_router(app.clone(), archives),
            controllers,
            pool,
            gateway,
            app,
            sweep_every: Some(DEFAULT_SWEEP_EVERY),
            records: data_dir.join("contexts"),
            retention: Some(super::retention::DEFAULT_RETENTION),
        })
    }

    /// Keeps sessions' records (their logs) `days` days after they were last written (0: for
    /// ever); see [`super::retention`].
    pub fn retention_days(mut self, days: u64) -> Self {
        self.retention = (days > 0).then(|| Duration::from_secs(days.saturating_mul(86_400)));
        self
    }

    /// Runs the sweeper ([`crate::sweep`]) every `every` while serving (zero: never).
    pub fn sweep_every(mut self, every: Duration) -> Self {
        self.sweep_every = (!every.is_zero()).then_some(every);
        self
    }

    /// The connect gateway's address, when it runs.
    pub fn gateway_addr(&self) -> Option<SocketAddr> {
        self.gateway.as_ref().map(|g| g.addr)
    }

    /// The connect gateway's base URL (`ws://` or `wss://`), when it runs.
    pub fn gateway_url(&self) -> Option<String> {
        self.gateway.as_ref().map(GatewayChild::url)
    }

    /// The local certificate authority a client trusts to reach a `wss://` gateway
    /// (`NODE_EXTRA_CA_CERTS`), when the gateway serves TLS.
    pub fn ca_cert(&self) -> Option<&Path> {
        self.gateway.as_ref().and_then(|g| g.ca_cert.as_deref())
    }

    /// Serves until `shutdown` completes, then stops every controller it started.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        info!(addr = %self.addr, "control plane listening");
        if let Some(pool) = &self.pool {
            pool.start();
        }
        // Aborted when dropped, at the end of `run`.
        let _sweeper = self.sweep_every.map(|every| {
            AbortOnDropHandle::new(tokio::spawn(sweep_periodically(self.app.clone(), every)))
        });
        let _expiry = self.retention.map(|keep| {
            AbortOnDropHandle::new(tokio::spawn(super::retention::expire_periodically(
                self.records.clone(),
                keep,
            )))
        });
        axum::serve(self.listener, self.router)
            .with_graceful_shutdown(shutdown)
            .await?;
        info!("stopping local sessions");
        self.controllers.stop_all();
        self.controllers.wait_all(Duration::from_secs(30)).await;
        if let Some(g) = self.gateway {
            g.stop().await;
        }
        Ok(())
    }
}

/// How often the local platform's sweeper runs unless told otherwise.
pub const DEFAULT_SWEEP_EVERY: Duration = Duration::from_secs(30);

/// The sweeper every `every`, the first run one interval after the start.
async fn sweep_periodically(app: App, every: Duration) {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if let Err(e) = crate::sweep::sweep(&app, crate::sweep::PAGE_LIMIT).await {
            tracing::warn!(error = %crate::error::chain(&e), "the sweep failed; it runs again later");
        }
    }
}

/// Gateway settings `serve` passes on from its own environment when set there.
pub const GATEWAY_PASSED_THROUGH: [&str; 5] = [
    task_env::GATEWAY_HOLD_SECONDS,
    task_env::GATEWAY_MAX_HELD,
    task_env::GATEWAY_MAX_HELD_PER_SESSION,
    task_env::GATEWAY_LOOKUP_TTL_MS,
    task_env::JWT_LEEWAY_SECONDS,
];

/// How long the gateway has to bind and say where.
const GATEWAY_START: Duration = Duration::from_secs(10);

/// The local platform's connect gateway: one `wallcrawler-controller gateway` child on a free
/// port of 127.0.0.1, reading the session documents the controllers write.
struct GatewayChild {
    child: tokio::process::Child,
    addr: SocketAddr,
    /// The local authority's certificate, when the gateway serves TLS.
    ca_cert: Option<PathBuf>,
}

impl GatewayChild {
    /// The gateway `connect` asks for, started, and `settings` pointed at it; none in direct
    /// mode.
    async fn for_connect(
        connect: Connect,
        data_dir: &Path,
        public_key: &str,
        settings: &mut Settings,
    ) -> anyhow::Result<Option<Self>> {
        let Connect::Gateway { tls } = connect else {
            return Ok(None);
        };
        let g = GatewayChild::start(
            &controller_bin(),
            &data_dir.join("sessions"),
            public_key,
            tls.then(|| data_dir.join("tls")).as_deref(),
        )
        .await?;
        settings.connect_base = Some(g.url());
        settings.connect_ca = g.ca_cert.clone();
        Ok(Some(g))
    }

    /// Starts the gateway and reads back the address it bound (`listen: ADDR` on its stdout)
    /// and, with `tls_dir` (a local certificate authority, made there on first use), the
    /// authority's certificate (`caCert: PATH`, printed before it).
    async fn start(
        bin: &Path,
        sessions_dir: &Path,
        public_key: &str,
        tls_dir: Option<&Path>,
    ) -> anyhow::Result<Self> {
        use tokio::io::AsyncBufReadExt;
        let mut cmd = gateway_command(bin, sessions_dir, public_key, tls_dir);
        let mut child = cmd
            .spawn()
            .map_err(|e| anyhow::anyhow!("starting {} gateway failed: {e}", bin.display()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow::anyhow!("the gateway's stdout"))?;
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let mut ca_cert = None;
        let addr = tokio::time::timeout(GATEWAY_START, async {
            loop {
                let line = lines
                    .next_line()
                    .await?
                    .ok_or_else(|| anyhow::anyhow!("the gateway exited before it listened"))?;
                if let Some(path) = line.strip_prefix("caCert: ") {
                    ca_cert = Some(PathBuf::from(path));
                    continue;
                }
                break line
                    .strip_prefix("listen: ")
                    .and_then(|a| a.parse::<SocketAddr>().ok())
                    .ok_or_else(|| anyhow::anyhow!("the gateway said {line:?}, not its address"));
            }
        })
        .await
        .map_err(|_| anyhow::anyhow!("the gateway did not start within {GATEWAY_START:?}"))??;
        if tls_dir.is_some() && ca_cert.is_none() {
            anyhow::bail!("the gateway serves TLS but named no certificate authority");
        }
        // Nothing more is expected on its stdout; read it to the end all the same.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        info!(%addr, "connect gateway listening");
        Ok(Self {
            child,
            addr,
            ca_cert,
        })
    }

    /// `ws://ADDR`, or `wss://ADDR` when it serves TLS.
    fn url(&self) -> String {
        let scheme = if self.ca_cert.is_some() { "wss" } else { "ws" };
        format!("{scheme}://{}", self.addr)
    }

    /// SIGTERM, then a bounded wait (killed when it does not end).
    async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// Completes on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// What starts sessions: the warm pool, or (none) one controller started per session.
fn launcher(controllers: &Controllers, pool: Option<&Arc<LocalPool>>) -> Arc<dyn Launcher> {
    match pool {
        Some(p) => p.clone(),
        None => Arc::new(LocalLauncher(controllers.clone())),
    }
}

/// The gateway's command: the local platform's sessions and key, a loopback listener, only the
/// environment it needs (plus `GATEWAY_PASSED_THROUGH` from `serve`'s own).
fn gateway_command(
    bin: &Path,
    sessions_dir: &Path,
    public_key: &str,
    tls_dir: Option<&Path>,
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(bin);
    cmd.arg("gateway")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env(task_env::SESSIONS_DIR, sessions_dir)
        .env(task_env::PUBLIC_KEY, public_key)
        .env(task_env::GATEWAY_LISTEN, "127.0.0.1:0")
        // Off unless asked for (tests read the gateway's counters there).
        .env(
            task_env::METRICS_ADDR,
            std::env::var("WALLCRAWLER_GATEWAY_METRICS_ADDR").unwrap_or_default(),
        )
        // The gateway never outlives `serve`, however `serve` ends.
        .env(task_env::EXIT_WITH_PARENT, "true")
        .env(task_env::LOG_FORMAT, "text")
        .env(
            "RUST_LOG",
            std::env::var("WALLCRAWLER_CONTROLLER_LOG").unwrap_or_else(|_| "info".into()),
        )
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true);
    for var in GATEWAY_PASSED_THROUGH {
        if let Some(v) = std::env::var_os(var) {
            cmd.env(var, v);
        }
    }
    if let Some(dir) = tls_dir {
        cmd.env(task_env::GATEWAY_LOCAL_CA_DIR, dir);
    }
    cmd
}
