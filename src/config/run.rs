//! `run` (and a pool controller): the session, its browser, storage, the task API, the pool.

use std::path::PathBuf;
use std::time::Duration;

use wallcrawler_contract::session::MAX_SHUTDOWN_BUDGET_SECONDS;
use wallcrawler_contract::task_env::*;

use crate::chrome::user::ChromeUser;
use crate::netns::ChromeNetwork;

use super::*;

/// Which profile the task starts from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContextSource {
    /// A fresh empty profile.
    None,
    /// `s3://bucket/key`.
    Bucket {
        /// `CONTEXT_ID`.
        context_id: String,
        /// `CONTEXTS_BUCKET_NAME`.
        bucket: String,
        /// The archive's key in the bucket.
        key: String,
    },
    /// `<dir>/<key>` (local platform).
    Directory {
        /// `CONTEXT_ID`.
        context_id: String,
        /// `CONTEXTS_DIR`.
        dir: PathBuf,
        /// The archive's path under it.
        key: String,
    },
}

/// The extension a single-session task loads into Chrome before READY.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtensionSource {
    /// `EXTENSION_S3_KEY`: `extensions/<projectId>/<sha256>.zip`.
    pub key: String,
    /// Where it is: `CONTEXTS_BUCKET_NAME` or `CONTEXTS_DIR`.
    pub place: ArchivePlace,
}

/// Where the session item lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionStoreConfig {
    /// No session item (local runs without a platform).
    None,
    /// The DynamoDB sessions table of this name.
    Table(String),
    /// A directory of session documents (local platform).
    Directory(PathBuf),
}

/// Where pool claims come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolQueue {
    /// The SQS queue at this URL.
    Sqs(String),
    /// A claims directory (local platform).
    Directory(PathBuf),
}

/// Where a pool controller finds the archives of the contexts it is claimed with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArchivePlace {
    /// Nowhere: claims with a context fail.
    None,
    /// The S3 bucket of this name.
    Bucket(String),
    /// A directory of archives (local platform).
    Directory(PathBuf),
}

/// Pool mode of `run`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConfig {
    /// Where claims come from.
    pub queue: PoolQueue,
    /// Where claimed contexts' archives are.
    pub archives: ArchivePlace,
    /// `POOL_IDLE_LIFETIME_SECONDS`: how long a warm controller waits for a claim before it exits.
    pub idle_lifetime: Duration,
    /// `POOL_CLAIM_VISIBILITY_SECONDS`: how long a taken claim stays hidden from other tasks.
    pub visibility: Duration,
    /// This controller's name (its task ARN on ECS).
    pub task_name: String,
    /// The scaling metric it reports, if any (`POOL_METRIC_*`).
    pub metric: Option<PoolMetric>,
}

/// The pool's scaling metric (see `pool_metric`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolMetric {
    /// `POOL_METRIC_NAMESPACE`.
    pub namespace: String,
    /// `POOL_METRIC_POOL`: the `Pool` dimension's value.
    pub pool: String,
    /// `POOL_METRIC_PERIOD_SECONDS`.
    pub period: Duration,
}

/// `wallcrawler-controller run`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunConfig {
    /// How tokens are checked.
    pub auth: AuthConfig,
    /// Limits and telemetry of the proxy.
    pub tuning: ProxyTuning,
    /// `CDP_PROXY_PORT`.
    pub proxy_port: u16,
    /// `CDP_PROXY_HOST`: the proxy's listen address (all interfaces by default).
    pub proxy_host: std::net::IpAddr,
    /// `CDP_DISCONNECT_TIMEOUT`: how long a session nobody has connected to yet waits.
    pub disconnect_timeout: Duration,
    /// `CDP_DISCONNECT_GRACE`: how long a session waits once its last client has left.
    pub disconnect_grace: Duration,
    /// How Chrome is launched.
    pub chrome: ChromeSettings,
    /// Where the session item lives.
    pub store: SessionStoreConfig,
    /// Which profile the task starts from.
    pub context: ContextSource,
    /// `CONTEXT_PERSIST`: upload the profile at the end.
    pub context_persist: bool,
    /// `EXTENSION_S3_KEY` (a single-session task; a pool controller's comes with its claim).
    pub extension: Option<ExtensionSource>,
    /// `SESSION_EGRESS` (a single-session task; a pool controller's comes with its claim).
    pub egress: Option<wallcrawler_contract::egress::Egress>,
    /// `SESSION_BROWSER` (a single-session task; a pool controller's comes with its claim).
    pub browser: Option<wallcrawler_contract::browser::BrowserSettings>,
    /// `FILES_BUCKET_NAME` or `FILES_DIR`: where the session's files live (downloads stored,
    /// uploads read); unset, the pool's or the context's archive place.
    pub files: ArchivePlace,
    /// `PUBLIC_IP`: the address to announce instead of discovering one.
    pub public_ip: Option<std::net::IpAddr>,
    /// `PUBLIC_IP_REQUIRED`: announce the task interface's public address (EC2) or fail.
    pub public_ip_required: bool,
    /// `KEEP_ALIVE`, when the session item does not say.
    pub keep_alive: bool,
    /// `SESSION_EXPIRES_AT` (Unix seconds), when the session item does not say.
    pub expires_at: Option<u64>,
    /// `PROFILE_MAX_BYTES`: the most an unpacked profile may hold.
    pub profile_max_bytes: u64,
    /// `PROFILE_MAX_ENTRIES`: the most entries a profile archive may have.
    pub profile_max_entries: u64,
    /// The session's downloads' caps.
    pub downloads: DownloadSettings,
    /// The session's recording's cap, rate and encoder.
    pub recording: RecordingSettings,
    /// `SHUTDOWN_BUDGET_SECONDS`: the whole end sequence, upload included.
    pub shutdown_budget: Duration,
    /// `ITEM_WATCH_SECONDS`: how often a serving controller reads its own session item.
    pub item_watch: Duration,
    /// `ECS_CONTAINER_METADATA_URI_V4`: the task metadata endpoint.
    pub metadata_uri: Option<String>,
    /// `ECS_AGENT_URI`: where a claimed pool task asks for scale-in protection.
    pub agent_uri: Option<String>,
    /// `TASK_API_URL` (no trailing `/`): where the task takes its claim and its session's
    /// credentials (`None`: from the queue, with the task role's own).
    pub task_api: Option<String>,
    /// `TASK_API_ADDRESS`: the host connected to for [`RunConfig::task_api`] instead of its
    /// own (`None`: its own).
    pub task_api_address: Option<String>,
    /// `LIVE_VIEW_GRANT`: a single session's live view given by the local platform.
    pub live_view: Option<wallcrawler_contract::task_api::LiveViewGrant>,
    /// Pool mode: the session comes from a claim.
    pub pool: Option<PoolConfig>,
    /// `EXIT_WITH_PARENT`.
    pub exit_with_parent: bool,
    /// `BACKGROUND_NICE`: Chrome's nice value while nobody waits on it (`None`: off).
    pub background_nice: Option<i32>,
}

/// How much of a session's downloads is stored (where: [`RunConfig::files`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DownloadSettings {
    /// `DOWNLOADS_MAX_BYTES`: the most bytes stored per session.
    pub max_bytes: u64,
    /// `DOWNLOADS_MAX_FILES`: the most files stored per session.
    pub max_files: u64,
}

/// `BACKGROUND_NICE` (0: off).
pub(super) fn background_nice(r: &mut Reader<'_>) -> Option<i32> {
    match r.number(BACKGROUND_NICE, 0, 0, 19) {
        0 => None,
        n => Some(n as i32),
    }
}

/// How a session's recording is made (where: [`RunConfig::files`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordingSettings {
    /// `RECORDING_MAX_BYTES`: the most bytes of segments stored per session.
    pub max_bytes: u64,
    /// `RECORDING_FPS`: the most frames a second of a page's video.
    pub fps: u32,
    /// `FFMPEG_PATH`: the encoder.
    pub ffmpeg: PathBuf,
}

/// The recording's cap, rate and encoder.
pub(super) fn recording_settings(r: &mut Reader<'_>) -> RecordingSettings {
    RecordingSettings {
        max_bytes: r.number(RECORDING_MAX_BYTES, 1 << 30, 1, u64::MAX),
        fps: r.number(RECORDING_FPS, 10, 1, 30) as u32,
        ffmpeg: r
            .text(FFMPEG_PATH)
            .unwrap_or_else(|| "ffmpeg".into())
            .into(),
    }
}

/// The downloads' caps.
pub(super) fn download_settings(r: &mut Reader<'_>) -> DownloadSettings {
    DownloadSettings {
        max_bytes: r.number(DOWNLOADS_MAX_BYTES, 500 << 20, 1, u64::MAX),
        max_files: r.number(DOWNLOADS_MAX_FILES, 100, 1, 100_000),
    }
}

/// Chrome launch settings common to `run` and `local`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChromeSettings {
    /// `CHROME_PATH` (`None`: found on the `PATH`).
    pub path: Option<PathBuf>,
    /// `CHROME_DEBUG_PORT` on 127.0.0.1 (0: any free port).
    pub debug_port: u16,
    /// `USER_DATA_DIR` (`None`: a fresh temporary directory).
    pub user_data_dir: Option<PathBuf>,
    /// `CHROME_FLAGS_FILE`, replacing the built-in flags.
    pub flags_file: Option<PathBuf>,
    /// `CHROME_USER` (`None`: the controller's own user, or a uid of its own when root).
    pub user: Option<ChromeUser>,
    /// `CHROME_NETWORK` (`None`: decided at start, on the controller's capabilities).
    pub network: Option<ChromeNetwork>,
    /// `EGRESS_ALLOW`: what a page may reach beyond public addresses.
    pub egress_allow: crate::chrome::egress::EgressAllow,
    /// `AD_BLOCK_LISTS`: the filter lists of a session's `blockAds`.
    pub ad_block_lists: crate::chrome::egress::AdLists,
    /// `AD_FILTER_CACHE`: where the built ad filter is kept for the machine's next controller.
    pub ad_filter_cache: Option<PathBuf>,
}

/// `SESSION_EGRESS`: a cold-started session's egress (a pool controller's comes with each
/// claim). Its value holds proxy passwords: no error quotes it.
pub(super) fn session_egress(
    r: &mut Reader<'_>,
    pool: bool,
) -> Option<wallcrawler_contract::egress::Egress> {
    let text = r.text(SESSION_EGRESS)?;
    if pool {
        r.errors.push(format!(
            "{SESSION_EGRESS} comes from each claim in pool mode; unset it"
        ));
        return None;
    }
    wallcrawler_contract::egress::Egress::from_json(&text)
        .map_err(|e| r.errors.push(format!("{SESSION_EGRESS}: {e}")))
        .ok()
}

/// `SHUTDOWN_BUDGET_SECONDS`.
pub(super) fn shutdown_budget(r: &mut Reader<'_>) -> Duration {
    let max = MAX_SHUTDOWN_BUDGET_SECONDS;
    Duration::from_secs(r.number(SHUTDOWN_BUDGET_SECONDS, 25, 1, max))
}

/// `ITEM_WATCH_SECONDS`: how often a serving controller reads its own session item.
pub(super) fn item_watch(r: &mut Reader<'_>) -> Duration {
    Duration::from_secs(r.number(ITEM_WATCH_SECONDS, 5, 1, 300))
}

/// What a cold-started session asked for: `SESSION_EGRESS` and `SESSION_BROWSER`.
pub(super) fn session_asked(
    r: &mut Reader<'_>,
    pool: bool,
) -> (
    Option<wallcrawler_contract::egress::Egress>,
    Option<wallcrawler_contract::browser::BrowserSettings>,
) {
    (session_egress(r, pool), session_browser(r, pool))
}

/// `SESSION_BROWSER`: a cold-started session's browser settings (a pool controller's come
/// with each claim).
pub(super) fn session_browser(
    r: &mut Reader<'_>,
    pool: bool,
) -> Option<wallcrawler_contract::browser::BrowserSettings> {
    let text = r.text(SESSION_BROWSER)?;
    if pool {
        r.errors.push(format!(
            "{SESSION_BROWSER} comes from each claim in pool mode; unset it"
        ));
        return None;
    }
    wallcrawler_contract::browser::BrowserSettings::from_json(&text)
        .map_err(|e| r.errors.push(format!("{SESSION_BROWSER}: {e}")))
        .ok()
}

pub(super) fn chrome_settings(
    r: &mut Reader<'_>,
    default_port: u16,
    allow: crate::chrome::egress::EgressAllow,
) -> ChromeSettings {
    let egress_allow = egress_allow(r, allow);
    let user = r.text(CHROME_USER).and_then(|u| {
        ChromeUser::parse(&u)
            .map_err(|e| r.errors.push(e.to_string()))
            .ok()
    });
    ChromeSettings {
        path: r.text(CHROME_PATH).map(PathBuf::from),
        debug_port: r.number(CHROME_DEBUG_PORT, default_port as u64, 0, 65535) as u16,
        user_data_dir: r.text(USER_DATA_DIR).map(PathBuf::from),
        flags_file: r.text(CHROME_FLAGS_FILE).map(PathBuf::from),
        user,
        network: r.parse(CHROME_NETWORK, "private or shared"),
        egress_allow,
        ad_block_lists: r
            .text(AD_BLOCK_LISTS)
            .and_then(|v| {
                v.parse()
                    .map_err(|e| r.errors.push(format!("{AD_BLOCK_LISTS}: {e}")))
                    .ok()
            })
            .unwrap_or_default(),
        ad_filter_cache: r.text(AD_FILTER_CACHE).map(PathBuf::from),
    }
}

impl RunConfig {
    /// Checks every setting of `s`, collecting every problem.
    pub fn from_settings(s: &Settings) -> Result<Self, ConfigErrors> {
        let mut r = Reader::new(s);
        let pool_queue = pool_queue(&mut r);
        let auth = auth_config(&mut r, pool_queue.is_some());
        let tuning = tuning(&mut r, Mode::Run);
        let proxy_port = r.number(CDP_PROXY_PORT, 9223, 0, 65535) as u16;
        let proxy_host = r
            .parse(CDP_PROXY_HOST, "an IP address such as 127.0.0.1")
            .unwrap_or(std::net::IpAddr::from([0, 0, 0, 0]));
        let disconnect_timeout =
            Duration::from_secs(r.number(CDP_DISCONNECT_TIMEOUT, 120, 1, 86_400));
        let disconnect_grace = Duration::from_secs(r.number(CDP_DISCONNECT_GRACE, 10, 1, 3_600));
        let chrome = chrome_settings(&mut r, 9222, Default::default());
        let store = session_store(&mut r);
        let pool = pool_queue.map(|queue| pool_config(&mut r, queue));
        pool_needs_the_item(&mut r, pool.as_ref(), &store);
        let (context, context_persist, extension) = context_of_run(&mut r, pool.is_some(), &auth);
        let files = files_place(&mut r, pool.as_ref(), &context);
        let (egress, browser) = session_asked(&mut r, pool.is_some());
        let public_ip = r.parse(PUBLIC_IP, "an IP address");
        let keep_alive = r.boolean(KEEP_ALIVE, false);
        let expires_at = r.parse::<u64>(SESSION_EXPIRES_AT, "unix seconds");
        let profile_max_bytes = r.number(PROFILE_MAX_BYTES, 2_147_483_648, 1, u64::MAX);
        let profile_max_entries = r.number(PROFILE_MAX_ENTRIES, 100_000, 1, u64::MAX);
        let (downloads, recording) = (download_settings(&mut r), recording_settings(&mut r));
        let (shutdown_budget, item_watch) = (shutdown_budget(&mut r), item_watch(&mut r));
        let metadata_uri = r.text(ECS_CONTAINER_METADATA_URI_V4);
        let public_ip_required =
            public_ip_required(&mut r, public_ip.is_some() || metadata_uri.is_some());
        let agent_uri = r.text(ECS_AGENT_URI);
        let task_api = task_api(&mut r, pool.as_ref(), &store, metadata_uri.is_some());
        let task_api_address = task_api_address(&mut r, task_api.as_deref());
        let live_view = live_view_grant(&mut r, pool.is_some() || task_api.is_some());
        let exit_with_parent = r.boolean(EXIT_WITH_PARENT, false);
        let background_nice = background_nice(&mut r);
        r.finish(RunConfig {
            auth,
            tuning,
            proxy_port,
            proxy_host,
            disconnect_timeout,
            disconnect_grace,
            chrome,
            store,
            context,
            context_persist,
            extension,
            egress,
            browser,
            files,
            public_ip,
            public_ip_required,
            keep_alive,
            expires_at,
            profile_max_bytes,
            profile_max_entries,
            downloads,
            recording,
            shutdown_budget,
            item_watch,
            metadata_uri,
            agent_uri,
            task_api,
            task_api_address,
            live_view,
            pool,
            exit_with_parent,
            background_nice,
        })
    }
}

/// `PUBLIC_IP_REQUIRED`, checked: only where the address can be found (`findable`: set in
/// `PUBLIC_IP`, or ECS's task metadata to read it from).
fn public_ip_required(r: &mut Reader<'_>, findable: bool) -> bool {
    let required = r.boolean(PUBLIC_IP_REQUIRED, false);
    if required && !findable {
        r.errors.push(
            "PUBLIC_IP_REQUIRED=true needs ECS_CONTAINER_METADATA_URI_V4 (set by ECS) or PUBLIC_IP"
                .to_owned(),
        );
    }
    required
}

/// `LIVE_VIEW_GRANT`, checked: JSON of a grant, only for one session's controller off the task
/// API (`elsewhere`: a pool or the task API, which give their own). Its value is a credential:
/// no error quotes it.
pub(super) fn live_view_grant(
    r: &mut Reader<'_>,
    elsewhere: bool,
) -> Option<wallcrawler_contract::task_api::LiveViewGrant> {
    let text = r.text(LIVE_VIEW_GRANT)?;
    if elsewhere {
        r.errors.push(format!(
            "{LIVE_VIEW_GRANT} is for one session's controller off the task API: a pool \
             controller's comes with its claim, a task's from {TASK_API_URL}"
        ));
        return None;
    }
    match serde_json::from_str(&text) {
        Ok(g) => Some(g),
        Err(_) => {
            r.errors.push(format!(
                "{LIVE_VIEW_GRANT} must be JSON {{\"credential\",\"expiresAt\",\"base\"?}}"
            ));
            None
        }
    }
}

/// Pool mode reads and writes the session item: one must be configured.
pub(super) fn pool_needs_the_item(
    r: &mut Reader<'_>,
    pool: Option<&PoolConfig>,
    store: &SessionStoreConfig,
) {
    if pool.is_some() && *store == SessionStoreConfig::None {
        r.errors.push(
            "pool mode needs the session item: set SESSIONS_TABLE_NAME (or SESSIONS_DIR)"
                .to_owned(),
        );
    }
}

/// `TASK_API_URL`, checked: only for a task on AWS (a pool on `POOL_QUEUE_URL`, or one
/// session's task with `SESSIONS_TABLE_NAME`), which knows its task ARN (the API hands the
/// session to that task), and over TLS unless to loopback: the header proving which task
/// calls must not cross a network in clear.
pub(super) fn task_api(
    r: &mut Reader<'_>,
    pool: Option<&PoolConfig>,
    store: &SessionStoreConfig,
    metadata: bool,
) -> Option<String> {
    let url = r.text(TASK_API_URL)?;
    let on_aws = match pool {
        Some(p) => matches!(p.queue, PoolQueue::Sqs(_)),
        None => matches!(store, SessionStoreConfig::Table(_)),
    };
    if !on_aws {
        r.errors.push(format!(
            "{TASK_API_URL} is for a task on AWS: a pool with {POOL_QUEUE_URL}, or one \
             session's task with {SESSIONS_TABLE_NAME}"
        ));
    }
    if !metadata {
        r.errors.push(format!(
            "{TASK_API_URL} needs {ECS_CONTAINER_METADATA_URI_V4} (set by ECS): the task API \
             hands a session to the task its ARN names"
        ));
    }
    if !private_url(&url) {
        r.errors.push(format!(
            "{TASK_API_URL} must be an https:// URL (http:// only to a loopback address such \
             as 127.0.0.1): the task's identity must not cross a network in clear"
        ));
    }
    Some(url.trim_end_matches('/').to_owned())
}

/// `TASK_API_ADDRESS`, checked: a bare DNS name or IP address, only with `TASK_API_URL` (`url`),
/// and a loopback address when that URL is `http://` (the identity stays off the network).
pub(super) fn task_api_address(r: &mut Reader<'_>, url: Option<&str>) -> Option<String> {
    let address = r.text(TASK_API_ADDRESS)?;
    let Some(url) = url else {
        r.errors
            .push(format!("{TASK_API_ADDRESS} is only for {TASK_API_URL}"));
        return None;
    };
    let ip = address.parse::<std::net::IpAddr>().ok();
    let name = address.len() <= 253
        && !address.starts_with(['.', '-'])
        && address
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
    if ip.is_none() && !name {
        r.errors.push(format!(
            "{TASK_API_ADDRESS} must be a DNS name or an IP address, without scheme, port or \
             path (the port is {TASK_API_URL}'s)"
        ));
    } else if url.starts_with("http://") && !ip.is_some_and(|ip| ip.is_loopback()) {
        r.errors.push(format!(
            "{TASK_API_ADDRESS} must be a loopback address with an http:// {TASK_API_URL}: the \
             task's identity must not cross a network in clear"
        ));
    }
    Some(address)
}

/// `https://host[/path]`, or `http://` to a loopback IP address; no query or fragment.
pub(super) fn private_url(url: &str) -> bool {
    let Ok(uri) = url.parse::<http::Uri>() else {
        return false;
    };
    let Some(host) = uri.host() else {
        return false;
    };
    let loopback = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback());
    let plain = uri.query().is_none() && !url.contains('#') && !url.contains('@');
    plain
        && match uri.scheme_str() {
            Some("https") => true,
            Some("http") => loopback,
            _ => false,
        }
}

/// Where the session item lives: `SESSIONS_TABLE_NAME` or `SESSIONS_DIR` (or nowhere).
pub(super) fn session_store(r: &mut Reader<'_>) -> SessionStoreConfig {
    match r.exclusive(SESSIONS_TABLE_NAME, SESSIONS_DIR) {
        (Some(t), _) => SessionStoreConfig::Table(t),
        (_, Some(d)) => SessionStoreConfig::Directory(PathBuf::from(d)),
        (None, None) => SessionStoreConfig::None,
    }
}

/// Where the session's files live: `FILES_BUCKET_NAME` or `FILES_DIR`, else where the pool's
/// or the context's archives are (the same bucket on AWS, the data directory locally).
pub(super) fn files_place(
    r: &mut Reader<'_>,
    pool: Option<&PoolConfig>,
    context: &ContextSource,
) -> ArchivePlace {
    match r.exclusive(FILES_BUCKET_NAME, FILES_DIR) {
        (Some(b), _) => ArchivePlace::Bucket(b),
        (_, Some(d)) => ArchivePlace::Directory(PathBuf::from(d)),
        (None, None) => match (pool, context) {
            (Some(p), _) => p.archives.clone(),
            (None, ContextSource::Bucket { bucket, .. }) => ArchivePlace::Bucket(bucket.clone()),
            (None, ContextSource::Directory { dir, .. }) => ArchivePlace::Directory(dir.clone()),
            (None, ContextSource::None) => ArchivePlace::None,
        },
    }
}

/// The profile a `run` starts from (none in pool mode: each claim names it), whether it is
/// uploaded at the end, and the extension a single-session task loads.
pub(super) fn context_of_run(
    r: &mut Reader<'_>,
    pool: bool,
    auth: &AuthConfig,
) -> (ContextSource, bool, Option<ExtensionSource>) {
    let project = auth.project_id.as_deref().unwrap_or_default();
    let extension = extension_of_run(r, pool, project);
    let context = if pool {
        ContextSource::None
    } else {
        context_source(r, extension.is_some())
    };
    let persist = r.boolean(CONTEXT_PERSIST, false);
    if persist && context == ContextSource::None {
        r.errors.push("CONTEXT_PERSIST=true needs a context (CONTEXT_ID, CONTEXTS_BUCKET_NAME or CONTEXTS_DIR, CONTEXT_S3_KEY)".to_owned());
    }
    (context, persist, extension)
}

/// The extension a single-session task loads (`EXTENSION_S3_KEY`, one of `project`'s
/// archives), and where it is: the contexts bucket or directory.
pub(super) fn extension_of_run(
    r: &mut Reader<'_>,
    pool: bool,
    project: &str,
) -> Option<ExtensionSource> {
    let key = r.text(EXTENSION_S3_KEY)?;
    if pool {
        r.errors.push(format!(
            "{EXTENSION_S3_KEY} comes from each claim in pool mode; unset it"
        ));
        return None;
    }
    if !wallcrawler_contract::storage::is_extension_key(project, &key) {
        r.errors.push(format!(
            "{EXTENSION_S3_KEY} must be extensions/<PROJECT_ID>/<sha256 hex>.zip of this PROJECT_ID"
        ));
    }
    // Both set is refused with the context's settings.
    let place = match (r.text(CONTEXTS_BUCKET_NAME), r.text(CONTEXTS_DIR)) {
        (Some(b), None) => ArchivePlace::Bucket(b),
        (None, Some(d)) => ArchivePlace::Directory(PathBuf::from(d)),
        (None, None) => {
            r.errors.push(format!(
                "{EXTENSION_S3_KEY} needs CONTEXTS_BUCKET_NAME (or CONTEXTS_DIR): where the archive is"
            ));
            ArchivePlace::None
        }
        (Some(_), Some(_)) => ArchivePlace::None,
    };
    Some(ExtensionSource { key, place })
}

pub(super) fn pool_queue(r: &mut Reader<'_>) -> Option<PoolQueue> {
    match r.exclusive(POOL_QUEUE_URL, POOL_QUEUE_DIR) {
        (Some(url), _) => Some(PoolQueue::Sqs(url)),
        (_, Some(dir)) => Some(PoolQueue::Directory(PathBuf::from(dir))),
        (None, None) => None,
    }
}

/// The rest of pool mode: the context comes from each claim, so only its archives' place is
/// configured.
pub(super) fn pool_config(r: &mut Reader<'_>, queue: PoolQueue) -> PoolConfig {
    for name in [CONTEXT_ID, CONTEXT_S3_KEY, CONTEXT_PERSIST] {
        if r.text(name).is_some() {
            r.errors.push(format!(
                "{name} comes from each claim in pool mode; unset it (CONTEXTS_BUCKET_NAME or CONTEXTS_DIR says where archives are)"
            ));
        }
    }
    let archives = match r.exclusive(CONTEXTS_BUCKET_NAME, CONTEXTS_DIR) {
        (Some(b), _) => ArchivePlace::Bucket(b),
        (_, Some(d)) => ArchivePlace::Directory(PathBuf::from(d)),
        (None, None) => ArchivePlace::None,
    };
    let idle_lifetime =
        Duration::from_secs(r.number(POOL_IDLE_LIFETIME_SECONDS, 3600, 1, 7 * 86_400));
    let visibility = Duration::from_secs(r.number(POOL_CLAIM_VISIBILITY_SECONDS, 60, 1, 43_200));
    let task_name = r
        .text(POOL_TASK_NAME)
        // Unique: a pid is 1 in every Fargate task, and two controllers with one name would
        // both pass as the owner of the same session.
        .unwrap_or_else(|| format!("pool-{}", uuid::Uuid::new_v4()));
    if !wallcrawler_contract::claim::valid_id(&task_name) {
        r.errors
            .push("POOL_TASK_NAME must be 1-128 of A-Z a-z 0-9 _ -".to_owned());
    }
    PoolConfig {
        queue,
        archives,
        idle_lifetime,
        visibility,
        task_name,
        metric: pool_metric(r),
    }
}

/// `POOL_METRIC_*`: both names or neither; CloudWatch's own limits on them.
pub(super) fn pool_metric(r: &mut Reader<'_>) -> Option<PoolMetric> {
    let period = r.number(POOL_METRIC_PERIOD_SECONDS, 10, 1, 60);
    if ![1, 5, 10, 30, 60].contains(&period) {
        r.errors
            .push("POOL_METRIC_PERIOD_SECONDS must be one of 1, 5, 10, 30, 60".to_owned());
    }
    let cloudwatch_name = |v: &str| {
        (1..=255).contains(&v.len()) && v.bytes().all(|b| b.is_ascii_graphic() || b == b' ')
    };
    match (r.text(POOL_METRIC_NAMESPACE), r.text(POOL_METRIC_POOL)) {
        (Some(namespace), Some(pool)) => {
            if !cloudwatch_name(&namespace) || namespace.starts_with("AWS/") {
                r.errors.push(
                    "POOL_METRIC_NAMESPACE must be 1-255 printable ASCII characters, not under AWS/"
                        .to_owned(),
                );
            }
            if !cloudwatch_name(&pool) {
                r.errors
                    .push("POOL_METRIC_POOL must be 1-255 printable ASCII characters".to_owned());
            }
            Some(PoolMetric {
                namespace,
                pool,
                period: Duration::from_secs(period),
            })
        }
        (None, None) => None,
        _ => {
            r.errors.push(
                "POOL_METRIC_NAMESPACE and POOL_METRIC_POOL go together: set both or neither"
                    .to_owned(),
            );
            None
        }
    }
}

/// The context of a single-session task; `place_alone`: the archives' place may be set
/// without a context (it is the extension's).
pub(super) fn context_source(r: &mut Reader<'_>, place_alone: bool) -> ContextSource {
    let id = r.text(CONTEXT_ID);
    let bucket = r.text(CONTEXTS_BUCKET_NAME);
    let key = r.text(CONTEXT_S3_KEY);
    let dir = r.text(CONTEXTS_DIR);
    if bucket.is_some() && dir.is_some() {
        r.errors
            .push("set CONTEXTS_BUCKET_NAME or CONTEXTS_DIR, not both".to_owned());
        return ContextSource::None;
    }
    let place = bucket.clone().or(dir.clone());
    match (id, place, key) {
        (None, None, None) => ContextSource::None,
        (None, Some(_), None) if place_alone => ContextSource::None,
        (Some(context_id), Some(_), Some(key)) => match (bucket, dir) {
            (Some(bucket), _) => ContextSource::Bucket {
                context_id,
                bucket,
                key,
            },
            (_, Some(dir)) => ContextSource::Directory {
                context_id,
                dir: PathBuf::from(dir),
                key,
            },
            _ => unreachable!("place is one of them"),
        },
        (id, place, key) => {
            let missing: Vec<&str> = [
                (CONTEXT_ID, id.is_none()),
                ("CONTEXTS_BUCKET_NAME (or CONTEXTS_DIR)", place.is_none()),
                (CONTEXT_S3_KEY, key.is_none()),
            ]
            .into_iter()
            .filter_map(|(n, m)| m.then_some(n))
            .collect();
            r.errors.push(format!(
                "context mode needs CONTEXT_ID, CONTEXTS_BUCKET_NAME (or CONTEXTS_DIR) and CONTEXT_S3_KEY together; missing {}",
                missing.join(", ")
            ));
            ContextSource::None
        }
    }
}
