//! The handlers' shared state: the ports and the settings.

use std::sync::Arc;
use std::time::Duration;

use crate::model::Project;
use crate::stores::{
    ArchiveUrls, Clock, ContextStore, KeyStore, Launcher, ObjectStore, RecordStore, SessionStore,
    Signer, SlotStore,
};

/// Settings of the API (from the environment in the binaries).
#[derive(Debug, Clone)]
pub struct Settings {
    /// How long `POST /v1/sessions` waits for READY before answering PENDING.
    pub create_wait: Duration,
    /// Poll interval while waiting (strongly consistent reads): every `poll_first` for the
    /// first 250 ms, then doubling up to `poll_every`, so a READY from a warm pool task is seen
    /// within milliseconds and a slow start costs few reads.
    pub poll_first: Duration,
    /// Upper bound of that poll interval.
    pub poll_every: Duration,
    /// Default region reported when the request names none.
    pub region: String,
    /// Lifetime of presigned upload URLs.
    pub upload_url_ttl: u64,
    /// The connect gateway's base URL (`CONNECT_BASE_URL`, e.g. `wss://connect.example.com`):
    /// every session's `connectUrl` is formed from it at create, and the create answers at
    /// once (RUNNING) instead of waiting for READY. `None`: direct mode, the task's own URL
    /// once READY.
    pub connect_base: Option<String>,
    /// A certificate authority `/debug` trusts, beside the system's roots, to read pages
    /// through a `wss://` gateway (the local platform's `serve --tls`).
    pub connect_ca: Option<std::path::PathBuf>,
    /// `CLAIM_WAIT_SECONDS` and `CLAIM_WAIT_MAX_SECONDS`: a new session's `claimDeadline`, and
    /// how far a client's polls move it.
    pub claim_wait: wallcrawler_contract::claim::ClaimWait,
    /// The most warm-pool browsers one project takes at once (`POOL_PROJECT_SHARE`, `serve
    /// --pool-share`): a create whose project then holds more slots than this starts a
    /// controller of its own (cold) instead of taking a warm one, so other projects keep
    /// finding warm ones. `None`: no share (one project may take every warm browser).
    pub pool_share: Option<u64>,
    /// The operator's managed proxy pools (`serve --managed-proxies`, `MANAGED_PROXIES_FILE`,
    /// `MANAGED_PROXIES_SECRET_ARN`), which `proxies: true` and `{type: "browserbase"}` map
    /// to; empty: such a create is refused.
    pub managed_proxies: crate::egress::ManagedProxies,
    /// Origins besides the API's own that sessions' files and recordings are downloaded from
    /// (on AWS the bucket's, where presigned URLs point): the dashboard's `media-src`.
    pub download_origins: Vec<String>,
    /// Where a recording's MP4s are built (`POST …/recording/downloads`).
    pub mp4: Mp4Build,
    /// Why this platform's sessions cannot have an extension (its browser is a headless shell:
    /// `serve` with such a `CHROME_PATH`), refusing a create that names one; `None`: they can.
    pub no_extensions: Option<String>,
}

/// Where a recording page's MP4 is built (`POST …/recording/downloads`,
/// the recordings module).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mp4Build {
    /// Nowhere (no ffmpeg): a request is answered `FAILED`.
    Unavailable,
    /// By a task of this process, after the answer (the local platform).
    Background(std::path::PathBuf),
    /// Before the answer (a Lambda given ffmpeg: its process freezes once it has answered).
    Inline(std::path::PathBuf),
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            create_wait: Duration::from_secs(25),
            poll_first: Duration::from_millis(5),
            poll_every: Duration::from_millis(250),
            region: "us-east-1".to_owned(),
            upload_url_ttl: 3600,
            connect_base: None,
            connect_ca: None,
            claim_wait: Default::default(),
            pool_share: None,
            managed_proxies: Default::default(),
            download_origins: Vec::new(),
            // The local platform's: ffmpeg from the PATH, in this process.
            mp4: Mp4Build::Background("ffmpeg".into()),
            no_extensions: None,
        }
    }
}

/// Everything a handler uses.
#[derive(Clone)]
pub struct App {
    /// Session items.
    pub sessions: Arc<dyn SessionStore>,
    /// Project records.
    pub projects: Arc<dyn RecordStore<Project>>,
    /// Projects' concurrency slots.
    pub slots: Arc<dyn SlotStore>,
    /// API-key records.
    pub keys: Arc<dyn KeyStore>,
    /// Context records and their writer leases.
    pub contexts: Arc<dyn ContextStore>,
    /// Presigned upload URLs and deletion of context archives.
    pub archives: Arc<dyn ArchiveUrls>,
    /// Objects in the contexts bucket: extension archives and their records.
    pub objects: Arc<dyn ObjectStore>,
    /// Starts and stops controller tasks.
    pub launcher: Arc<dyn Launcher>,
    /// Signs CDP tokens.
    pub signer: Arc<dyn Signer>,
    /// The time handlers see (fixed in tests).
    pub clock: Arc<dyn Clock>,
    /// The API's settings.
    pub settings: Settings,
}

impl App {
    /// Now as ISO 8601 with milliseconds, as the tables store timestamps.
    pub fn now_iso(&self) -> String {
        wallcrawler_contract::time::iso8601_millis(self.clock.now_millis())
    }

    /// Now in Unix seconds.
    pub fn now_secs(&self) -> u64 {
        self.clock.now_millis() / 1000
    }
}
