//! The subcommands, as `main` runs them: configuration checked first (exit 64 with every
//! problem), then the mode until it ends, mapped to an exit status.

use std::io::Write as _;

use clap::Parser as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tracing::{error, info};
use wallcrawler_aws::secrets::SecretsManagerKeys;
use wallcrawler_contract::claim::DirQueue;
use wallcrawler_contract::{Claims, SigningKey};

use crate::app::{self, SessionOptions};
use crate::auth::{Authenticator, KeySource, StaticKeys, unix_now};
use crate::aws;
use crate::chrome::{self, LaunchOptions, flags};
use crate::config::{
    self, ArchivePlace, ChromeSettings, Cli, Command, ConfigErrors, ContextSource, GatewayConfig,
    GatewayTls, KeyConfig, LocalConfig, LogFormat, PoolQueue, ProxyConfig, ProxyTuning, RunConfig,
    SessionStoreConfig, TokenConfig,
};
use crate::profile::DirectoryArchives;
use crate::proxy::Limits;
use crate::secrets::{FetchError, SecretKeyCache};
use crate::shutdown::Shutdown;
use crate::stores::{DirClaims, DirectorySessions};
use crate::task::{self, TaskDeps};
use crate::telemetry;

/// Exit status of a failed run.
pub const EXIT_FAILURE: i32 = 1;

/// Parses the command line and runs it; returns the process exit status.
pub fn main_with(cli: Cli) -> i32 {
    let command = cli.command.unwrap_or_else(|| {
        match Cli::try_parse_from(["wallcrawler-controller", "local"]) {
            Ok(Cli { command: Some(c) }) => c,
            _ => Command::Local(Default::default()),
        }
    });
    match command {
        Command::Token(a) => match TokenConfig::from_args(&a) {
            Ok(c) => token(&c),
            Err(e) => config_error(&e),
        },
        Command::Local(a) => {
            match LocalConfig::from_args(&a).and_then(|c| flags_for(&c.chrome).map(|f| (c, f))) {
                Ok((c, f)) => with_runtime(c.tuning.log_format, |tasks| local(c, f, tasks)),
                Err(e) => config_error(&e),
            }
        }
        Command::Run(a) => {
            let mut s = a.auth.settings();
            s.extend(a.run.settings());
            s.extend(a.tuning.settings());
            match RunConfig::from_settings(&s).and_then(|c| flags_for(&c.chrome).map(|f| (c, f))) {
                Ok((c, f)) => with_runtime(c.tuning.log_format, |tasks| run(c, f, tasks)),
                Err(e) => config_error(&e),
            }
        }
        Command::Proxy(a) => match ProxyConfig::from_args(&a) {
            Ok(c) => with_runtime(c.tuning.log_format, |tasks| proxy(c, tasks)),
            Err(e) => config_error(&e),
        },
        Command::Gateway(a) => match GatewayConfig::from_args(&a) {
            Ok(c) => with_runtime(c.tuning.log_format, |tasks| gateway(c, tasks)),
            Err(e) => config_error(&e),
        },
    }
}

fn config_error(e: &ConfigErrors) -> i32 {
    eprintln!("wallcrawler-controller: {e}");
    config::EXIT_CONFIG
}

fn flags_for(c: &ChromeSettings) -> Result<Vec<String>, ConfigErrors> {
    let text = match &c.flags_file {
        Some(p) => std::fs::read_to_string(p)
            .map_err(|e| ConfigErrors(vec![format!("CHROME_FLAGS_FILE {}: {e}", p.display())]))?,
        None => flags::BUILTIN_FLAGS.to_owned(),
    };
    flags::parse_flags(&text).map_err(|e| ConfigErrors(vec![format!("Chrome flags: {e}")]))
}

/// How long the end of a run waits for tasks still running after its mode returned (connection
/// tasks winding down after their relays ended, the relay thread joining). The mode's own end
/// sequence has used `SHUTDOWN_BUDGET_SECONDS` by then; this is what ECS's stop timeout leaves
/// beyond it (30 s against the default 25 s budget).
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// Runs `mode` on a new runtime with the process's [`Shutdown`] (signals listened for), then
/// drains every task it left.
fn with_runtime<F, Fut>(format: LogFormat, mode: F) -> i32
where
    F: FnOnce(Shutdown) -> Fut,
    Fut: Future<Output = i32>,
{
    telemetry::init_logging(format);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            error!(error = %e, "could not start the async runtime");
            return EXIT_FAILURE;
        }
    };
    let code = rt.block_on(async {
        let tasks = Shutdown::new();
        tasks.listen_for_signals();
        let code = mode(tasks.clone()).await;
        tasks.drain(DRAIN_GRACE).await;
        code
    });
    // Every task has ended (or was reported by the drain); don't wait on stragglers.
    rt.shutdown_timeout(Duration::from_millis(200));
    code
}

fn token(c: &TokenConfig) -> i32 {
    let t = Claims::new(&c.session_id, &c.project_id, unix_now(), c.ttl)
        .mint(&SigningKey::new(c.key.as_bytes()));
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{t}").and_then(|_| out.flush()).is_err() {
        return EXIT_FAILURE;
    }
    0
}

fn limits(t: &ProxyTuning) -> Limits {
    Limits::from_tuning(t)
}

fn launch_options(
    c: &ChromeSettings,
    flags: Vec<String>,
    user_data_dir: PathBuf,
) -> Result<LaunchOptions, chrome::ChromeError> {
    let binary = chrome::find_chrome(c.path.as_deref(), std::env::var_os("PATH").as_deref())?;
    Ok(LaunchOptions {
        binary,
        user_data_dir,
        debug_port: c.debug_port,
        flags,
        ready_timeout: Duration::from_secs(30),
        nice: None,
    })
}

async fn local(c: LocalConfig, flags: Vec<String>, tasks: Shutdown) -> i32 {
    let session_id = format!("sess_{}", uuid::Uuid::new_v4());
    let key = c
        .key
        .clone()
        .unwrap_or_else(|| wallcrawler_contract::token::random_hex(32));
    let token = Claims::new(&session_id, "", unix_now(), c.token_ttl)
        .mint(&SigningKey::new(key.as_bytes()));
    let profile = match tempfile::Builder::new()
        .prefix("wallcrawler-profile-")
        .tempdir()
    {
        Ok(d) => d,
        Err(e) => {
            error!(error = %e, "could not create a profile directory");
            return EXIT_FAILURE;
        }
    };
    let chrome = match launch_options(&c.chrome, flags, profile.path().to_owned()) {
        Ok(o) => o,
        Err(e) => {
            error!("{e}");
            return EXIT_FAILURE;
        }
    };
    let keys: Arc<dyn KeySource> = Arc::new(StaticKeys::new(key.as_bytes()));
    let opts = SessionOptions {
        auth: Authenticator::new(keys, session_id.clone(), None, 30),
        listen: SocketAddr::from(([127, 0, 0, 1], c.port)),
        metrics_addr: c.tuning.metrics_addr,
        chrome,
        limits: limits(&c.tuning),
        idle: None,
        expires_at: None,
        shutdown_budget: Duration::from_secs(25),
        background_nice: None,
        tasks: tasks.clone(),
    };
    let result = app::run_session(opts, tasks.token().clone(), |ready| {
        info!(
            session.id = %session_id,
            proxy = %ready.proxy_addr,
            chrome.pid = ready.chrome_pid,
            "local session ready; connect with the connectUrl printed on stdout"
        );
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "connectUrl: ws://{}?signingKey={token}",
            ready.proxy_addr
        );
        let _ = out.flush();
    })
    .await;
    finish(result)
}

fn finish(result: Result<app::EndReason, app::AppError>) -> i32 {
    match result {
        Ok(reason) => {
            info!(reason = ?reason, "session ended");
            reason.exit_code()
        }
        Err(e) => {
            error!(error = %e, cause = ?std::error::Error::source(&e).map(|s| s.to_string()), "session failed");
            EXIT_FAILURE
        }
    }
}

/// Asks the kernel for SIGTERM when our parent exits (handled as any SIGTERM). False when the
/// parent is gone already (we were re-parented to init).
fn exit_with_parent() -> bool {
    if let Err(e) = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM) {
        error!(error = %e, "EXIT_WITH_PARENT: the parent-death signal could not be set");
    }
    nix::unistd::getppid() != nix::unistd::Pid::from_raw(1)
}

/// Why the outside services of `run` could not be set up.
#[derive(Debug, thiserror::Error)]
enum DepsError {
    #[error("the claims directory {} cannot be used", dir.display())]
    ClaimsDir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The outside services `run` needs, built once from one SDK configuration.
async fn task_deps(c: &RunConfig) -> Result<TaskDeps, DepsError> {
    let pool = c.pool.as_ref();
    let needs_aws = matches!(c.store, SessionStoreConfig::Table(_))
        || matches!(c.context, ContextSource::Bucket { .. })
        || pool.is_some_and(|p| {
            matches!(p.queue, PoolQueue::Sqs(_)) || matches!(p.archives, ArchivePlace::Bucket(_))
        })
        || matches!(c.auth.key, KeyConfig::SecretArn(_))
        || needs_ec2(c);
    let sdk = if needs_aws {
        Some(aws::sdk_config().await)
    } else {
        None
    };
    let mut deps = TaskDeps::default();
    match (&c.store, &sdk) {
        (SessionStoreConfig::Table(t), Some(sdk)) => {
            deps.sessions = Some(Arc::new(aws::DynamoSessions::new(sdk, t.clone())))
        }
        (SessionStoreConfig::Directory(dir), _) => {
            deps.sessions = Some(Arc::new(DirectorySessions::new(dir.clone())));
        }
        _ => {}
    }
    match (&c.context, &sdk) {
        (ContextSource::Bucket { bucket, .. }, Some(sdk)) => {
            deps.archives = Some(Arc::new(aws::S3Archives::new(sdk, bucket.clone())))
        }
        (ContextSource::Directory { dir, .. }, _) => {
            deps.archives = Some(Arc::new(DirectoryArchives { dir: dir.clone() }))
        }
        _ => {}
    }
    if let Some(p) = pool {
        match (&p.archives, &sdk) {
            (ArchivePlace::Bucket(bucket), Some(sdk)) => {
                deps.archives = Some(Arc::new(aws::S3Archives::new(sdk, bucket.clone())))
            }
            (ArchivePlace::Directory(dir), _) => {
                deps.archives = Some(Arc::new(DirectoryArchives { dir: dir.clone() }))
            }
            _ => {}
        }
        match (&p.queue, &sdk) {
            (PoolQueue::Sqs(url), Some(sdk)) => {
                deps.claims = Some(Arc::new(aws::SqsClaims {
                    client: aws_sdk_sqs::Client::new(sdk),
                    queue_url: url.clone(),
                    visibility: p.visibility,
                }))
            }
            (PoolQueue::Directory(dir), _) => {
                let queue = DirQueue::new(dir.clone());
                queue.init().map_err(|source| DepsError::ClaimsDir {
                    dir: dir.clone(),
                    source,
                })?;
                deps.claims = Some(Arc::new(DirClaims {
                    queue,
                    owner: p.task_name.clone(),
                }))
            }
            _ => {}
        }
    }
    if let (KeyConfig::SecretArn(arn), Some(sdk)) = (&c.auth.key, &sdk) {
        deps.secrets = Some(Arc::new(aws::SecretsManagerSecret(
            SecretsManagerKeys::new(sdk, arn),
        )));
    }
    if let (true, Some(sdk)) = (needs_ec2(c), &sdk) {
        deps.network = Some(Arc::new(aws::Ec2Network {
            client: aws_sdk_ec2::Client::new(sdk),
        }));
    }
    Ok(deps)
}

/// Only direct mode (`PUBLIC_IP_REQUIRED`) looks its public address up in EC2; behind the
/// connect gateway a task announces its private address and asks EC2 nothing.
fn needs_ec2(c: &RunConfig) -> bool {
    c.public_ip_required && c.public_ip.is_none() && c.metadata_uri.is_some()
}

async fn run(c: RunConfig, flags: Vec<String>, tasks: Shutdown) -> i32 {
    if c.exit_with_parent && !exit_with_parent() {
        info!("the process that started this one has exited already");
        return 0;
    }
    let deps = match task_deps(&c).await {
        Ok(d) => d,
        Err(e) => {
            error!(error = %e, cause = ?std::error::Error::source(&e).map(|s| s.to_string()), "setting up the task failed");
            return EXIT_FAILURE;
        }
    };
    let (profile, _tmp) = match &c.chrome.user_data_dir {
        Some(d) => (d.clone(), None),
        None => match tempfile::Builder::new()
            .prefix("wallcrawler-profile-")
            .tempdir()
        {
            Ok(t) => (t.path().to_owned(), Some(t)),
            Err(e) => {
                error!(error = %e, "could not create a profile directory");
                return EXIT_FAILURE;
            }
        },
    };
    let launch = match launch_options(&c.chrome, flags, profile) {
        Ok(o) => o,
        Err(e) => {
            error!("{e}");
            return EXIT_FAILURE;
        }
    };
    task::run_task(c, launch, deps, &tasks).await
}

/// The key source of `proxy`: a literal key, or the Secrets Manager cache loaded before serving
/// (and refreshed until the run ends).
async fn proxy_keys(k: &KeyConfig, tasks: &Shutdown) -> Result<Arc<dyn KeySource>, FetchError> {
    match k {
        KeyConfig::Literal(key) => Ok(Arc::new(StaticKeys::new(key.as_bytes()))),
        KeyConfig::SecretArn(arn) => {
            let sdk = aws::sdk_config().await;
            let fetcher = Arc::new(aws::SecretsManagerSecret(SecretsManagerKeys::new(
                &sdk, arn,
            )));
            let cache = SecretKeyCache::new(fetcher, tasks.tracker().clone());
            cache.load_initial(Duration::from_secs(10)).await?;
            cache.spawn_refresher(tasks.token().clone());
            Ok(cache)
        }
    }
}

async fn proxy(c: ProxyConfig, tasks: Shutdown) -> i32 {
    let keys = match proxy_keys(&c.auth.key, &tasks).await {
        Ok(k) => k,
        Err(e) => {
            error!(error = %e, "the signing secret is unavailable");
            return EXIT_FAILURE;
        }
    };
    let upstream = match tokio::net::lookup_host(&c.upstream)
        .await
        .map(|mut a| a.next())
    {
        Ok(Some(a)) => a,
        _ => {
            error!(upstream = %c.upstream, "cannot resolve the upstream address");
            return EXIT_FAILURE;
        }
    };
    let auth = Authenticator::new(
        keys,
        c.auth.session_id.clone(),
        c.auth.project_id.clone(),
        c.auth.leeway_seconds,
    );
    let result = app::run_proxy(
        auth,
        c.listen,
        c.tuning.metrics_addr,
        upstream,
        limits(&c.tuning),
        &tasks,
        |addr| {
            info!(listen = %addr, upstream = %upstream, "proxy ready");
        },
    )
    .await;
    finish(result)
}

/// The gateway's TLS configuration: the certificate loaded (an unusable one is an error at
/// start) and looked at again every [`crate::tls::RELOAD_EVERY`] until shutdown. A local
/// authority's certificate is printed as `caCert: PATH` on stdout.
fn gateway_tls(
    source: &GatewayTls,
    tasks: &Shutdown,
) -> Result<Arc<rustls::ServerConfig>, crate::tls::TlsError> {
    let files = match source {
        GatewayTls::Files(files) => files.clone(),
        GatewayTls::LocalCa(dir) => {
            let ca = crate::tls::LocalCa::ensure(dir)?;
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "caCert: {}", ca.ca_cert.display());
            let _ = out.flush();
            ca.server
        }
    };
    let cert = Arc::new(crate::tls::ReloadingCert::load(files)?);
    tasks.spawn(
        cert.clone()
            .watch(crate::tls::RELOAD_EVERY, tasks.token().clone()),
    );
    crate::tls::server_config(cert)
}

/// `gateway`: the key loaded, the listener bound (its address printed as `listen: ADDR` on
/// stdout, which the local platform reads back), then connections served until a signal.
async fn gateway(c: GatewayConfig, tasks: Shutdown) -> i32 {
    use crate::gateway::lookup::{DirRoutes, SessionRoutes};
    use crate::gateway::verify::SharedKeyVerifier;
    use crate::gateway::{Gateway, GatewaySettings};

    if c.exit_with_parent && !exit_with_parent() {
        info!("the process that started this one has exited already");
        return 0;
    }
    let keys = match proxy_keys(&c.key, &tasks).await {
        Ok(k) => k,
        Err(e) => {
            error!(error = %e, "the signing secret is unavailable");
            return EXIT_FAILURE;
        }
    };
    let routes: Arc<dyn SessionRoutes> = match &c.store {
        SessionStoreConfig::Directory(dir) => Arc::new(DirRoutes(
            wallcrawler_contract::session_doc::DirStore::new(dir.clone()),
        )),
        SessionStoreConfig::Table(table) => {
            let sdk = aws::sdk_config().await;
            Arc::new(aws::DynamoRoutes::new(&sdk, table.clone()))
        }
        SessionStoreConfig::None => unreachable!("the configuration requires a store"),
    };
    let mut limits = limits(&c.tuning);
    limits.intercept_browser_close = false;
    let tls = match &c.tls {
        None => None,
        Some(source) => match gateway_tls(source, &tasks) {
            Ok(config) => Some(config),
            Err(e) => {
                error!(error = %e, "the gateway's TLS certificate is unusable");
                return EXIT_FAILURE;
            }
        },
    };
    let settings = GatewaySettings {
        limits,
        hold: c.hold,
        max_held: c.max_held,
        max_held_per_session: c.max_held_per_session,
        lookup_ttl: c.lookup_ttl,
        tls,
        client_tls: c.client_tls,
        proxy_protocol_to_tasks: c.proxy_protocol_to_tasks,
    };
    let verifier = Arc::new(SharedKeyVerifier::new(keys, c.leeway_seconds));
    let gateway = match Gateway::new(verifier, routes, settings, &tasks) {
        Ok(g) => g,
        Err(e) => {
            error!(error = %e, "could not start the relay thread");
            return EXIT_FAILURE;
        }
    };
    let listener = match tokio::net::TcpListener::bind(c.listen).await {
        Ok(l) => l,
        Err(e) => {
            error!(addr = %c.listen, error = %e, "could not listen");
            return EXIT_FAILURE;
        }
    };
    let addr = listener.local_addr().unwrap_or(c.listen);
    if let Some(maddr) = c.tuning.metrics_addr {
        match tokio::net::TcpListener::bind(maddr).await {
            Ok(ml) => {
                info!(addr = %ml.local_addr().unwrap_or(maddr), "metrics listening");
                tasks.spawn(telemetry::serve_metrics(
                    ml,
                    gateway.metrics().clone(),
                    tasks.token().clone(),
                    tasks.tracker().clone(),
                ));
            }
            Err(e) => {
                error!(addr = %maddr, error = %e, "could not listen for metrics");
                return EXIT_FAILURE;
            }
        }
    }
    tasks.spawn(
        gateway
            .clone()
            .serve(listener, tasks.token().clone(), tasks.tracker().clone()),
    );
    info!(listen = %addr, "gateway listening");
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listen: {addr}");
        let _ = out.flush();
    }
    tasks.token().cancelled().await;
    gateway.close_all_relays();
    0
}
