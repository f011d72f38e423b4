//! `gateway`: the connect gateway, one listener for every session: the key loaded, the
//! listener bound (its address printed as `listen: ADDR` on stdout, which the local platform
//! reads back), then connections served until a signal.

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;

use tracing::{error, info};

use super::{exit_with_parent, proxy_keys};
use crate::aws;
use crate::config::{GatewayConfig, GatewayTls, SessionStoreConfig};
use crate::edge::Limits;
use crate::gateway::lookup::{DirRoutes, SessionRoutes};
use crate::gateway::verify::SharedKeyVerifier;
use crate::gateway::{Gateway, GatewaySettings};
use crate::session::Ending;
use crate::shutdown::Shutdown;
use crate::telemetry;

/// Runs the gateway until a signal.
pub(crate) async fn run(c: GatewayConfig, tasks: Shutdown) -> Ending {
    if c.exit_with_parent && !exit_with_parent() {
        info!("the process that started this one has exited already");
        return Ending::NoSession;
    }
    let gateway = match start(&c, &tasks).await {
        Ok(g) => g,
        Err(ending) => return ending,
    };
    let listener = match tokio::net::TcpListener::bind(c.listen).await {
        Ok(l) => l,
        Err(e) => {
            error!(addr = %c.listen, error = %e, "could not listen");
            return Ending::Aborted;
        }
    };
    let addr = listener.local_addr().unwrap_or(c.listen);
    if let Some(maddr) = c.tuning.metrics_addr
        && !serve_metrics(maddr, &gateway, &tasks).await
    {
        return Ending::Aborted;
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
    Ending::Completed
}

/// The gateway built: its key, its session lookup, its TLS and its relay thread. `Err`: how
/// the run ends (the failure logged).
async fn start(c: &GatewayConfig, tasks: &Shutdown) -> Result<Arc<Gateway>, Ending> {
    let keys = match proxy_keys(&c.key, tasks).await {
        Ok(k) => k,
        Err(e) => {
            error!(error = %e, "the public key secret is unavailable");
            return Err(Ending::Aborted);
        }
    };
    let routes = routes(&c.store).await;
    let mut limits = Limits::from_tuning(&c.tuning);
    limits.intercept_browser_close = false;
    let tls = match &c.tls {
        None => None,
        Some(source) => match tls(source, tasks) {
            Ok(config) => Some(config),
            Err(e) => {
                error!(error = %e, "the gateway's TLS certificate is unusable");
                return Err(Ending::Aborted);
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
        ..GatewaySettings::default()
    };
    let verifier = Arc::new(SharedKeyVerifier::new(keys, c.leeway_seconds));
    Gateway::new(verifier, routes, settings, tasks).map_err(|e| {
        error!(error = %e, "could not start the relay thread");
        Ending::Aborted
    })
}

/// Where the gateway looks sessions up: the sessions directory, or the table.
async fn routes(store: &SessionStoreConfig) -> Arc<dyn SessionRoutes> {
    match store {
        SessionStoreConfig::Directory(dir) => Arc::new(DirRoutes::watching(
            wallcrawler_local::session_dir::DirStore::new(dir.clone()),
        )),
        SessionStoreConfig::Table(table) => {
            let sdk = aws::sdk_config().await;
            Arc::new(aws::DynamoRoutes::new(&sdk, table.clone()))
        }
        SessionStoreConfig::None => unreachable!("the configuration requires a store"),
    }
}

/// The gateway's metrics served on `maddr` until shutdown; false when it could not listen
/// (logged).
async fn serve_metrics(maddr: SocketAddr, gateway: &Gateway, tasks: &Shutdown) -> bool {
    match tokio::net::TcpListener::bind(maddr).await {
        Ok(ml) => {
            info!(addr = %ml.local_addr().unwrap_or(maddr), "metrics listening");
            tasks.spawn(telemetry::serve_metrics(
                ml,
                gateway.metrics().clone(),
                tasks.token().clone(),
                tasks.tracker().clone(),
            ));
            true
        }
        Err(e) => {
            error!(addr = %maddr, error = %e, "could not listen for metrics");
            false
        }
    }
}

/// The gateway's TLS configuration: the certificate loaded (an unusable one is an error at
/// start) and looked at again every [`crate::tls::RELOAD_EVERY`] until shutdown. A local
/// authority's certificate is printed as `caCert: PATH` on stdout.
fn tls(
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
