//! `wallcrawler-control-plane serve`: the whole platform on one machine.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::routing::put;
use tokio::net::TcpListener;
use tracing::info;
use wallcrawler_contract::SigningKey;
use wallcrawler_contract::session_doc::DirStore;

use crate::app::{App, Settings};
use crate::controllers::{Controllers, LocalLauncher, LocalPool};
use crate::local::{
    DirSessions, FileMap, LocalArchives, LocalIdentity, load_or_init, upload_archive,
};
use crate::memory::StaticSigner;
use crate::model::ContextRecord;
use crate::ports::Launcher;
use crate::ports::SystemClock;

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

/// A bound local platform, ready to serve.
pub struct LocalServer {
    /// The address the API listens on (port 0 asked = the one the OS chose).
    pub addr: SocketAddr,
    /// The project and API key the server created for local use, and its signing key.
    pub identity: LocalIdentity,
    listener: TcpListener,
    router: axum::Router,
    controllers: Controllers,
    pool: Option<Arc<LocalPool>>,
}

impl LocalServer {
    /// Binds 127.0.0.1:`port` and prepares the data directory (creating the local project and
    /// API key on first start). `pool`: controllers kept warm (0 = one started per session).
    pub async fn bind(
        port: u16,
        data_dir: &Path,
        settings: Settings,
        pool: usize,
    ) -> anyhow::Result<LocalServer> {
        let identity = load_or_init(data_dir)?;
        let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port))).await?;
        let addr = listener.local_addr()?;
        let sessions = DirSessions(DirStore::new(data_dir.join("sessions")));
        let archives = Arc::new(LocalArchives {
            dir: data_dir.join("contexts"),
            base_url: format!("http://{addr}"),
            url_key: identity.signing_key.as_bytes().to_vec(),
        });
        // One instance of each file store: their locks are per instance.
        let slots: Arc<FileMap<Vec<String>>> =
            Arc::new(FileMap::new(data_dir.join("active-sessions.json")));
        let contexts: Arc<FileMap<ContextRecord>> =
            Arc::new(FileMap::new(data_dir.join("contexts.json")));
        let controllers = Controllers::new(
            controller_bin(),
            data_dir.to_owned(),
            identity.signing_key.clone(),
            sessions.clone(),
            slots.clone(),
            contexts.clone(),
        );
        let pool = match pool {
            0 => None,
            n => Some(LocalPool::new(controllers.clone(), n)?),
        };
        let launcher: Arc<dyn Launcher> = match &pool {
            Some(p) => p.clone(),
            None => Arc::new(LocalLauncher(controllers.clone())),
        };
        let app = App {
            sessions: Arc::new(sessions),
            projects: Arc::new(FileMap::new(data_dir.join("projects.json"))),
            slots,
            keys: Arc::new(FileMap::new(data_dir.join("api-keys.json"))),
            contexts,
            archives: archives.clone(),
            launcher,
            signer: Arc::new(StaticSigner(SigningKey::new(
                identity.signing_key.as_bytes(),
            ))),
            clock: Arc::new(SystemClock),
            settings,
        };
        let uploads = axum::Router::new()
            .route("/_local/archives/{*key}", put(upload_archive))
            .with_state(archives)
            .layer(axum::extract::DefaultBodyLimit::disable());
        let router = crate::router::router(app).merge(uploads);
        Ok(LocalServer {
            addr,
            identity,
            listener,
            router,
            controllers,
            pool,
        })
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
        axum::serve(self.listener, self.router)
            .with_graceful_shutdown(shutdown)
            .await?;
        info!("stopping local sessions");
        self.controllers.stop_all();
        self.controllers.wait_all(Duration::from_secs(30)).await;
        Ok(())
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
