//! The names of the environment variables that cross from the control plane to a controller.
//!
//! The control plane writes them (into an ECS task's container overrides, or a local child
//! controller's environment) and the controller's configuration reads them: each name is said
//! once, here, so the two sides cannot drift apart. Variables only one side knows (the control
//! plane's own tables, a controller's tuning) stay with that side.

/// The session this task serves (a single-session task; a pool task takes it from its claim).
pub const SESSION_ID: &str = "SESSION_ID";
/// The session's project.
pub const PROJECT_ID: &str = "PROJECT_ID";
/// When the session ends (Unix seconds), when the session item does not say.
pub const SESSION_EXPIRES_AT: &str = "SESSION_EXPIRES_AT";

/// The DynamoDB sessions table the controller writes READY and the final status to.
pub const SESSIONS_TABLE_NAME: &str = "SESSIONS_TABLE_NAME";
/// The local platform's directory of session documents (instead of the table).
pub const SESSIONS_DIR: &str = "SESSIONS_DIR";

/// The Secrets Manager ARN of the public key secret (`{"algorithm":"EdDSA","publicKey":…}`):
/// a controller verifies tokens, it never holds the signing (private) key.
pub const PUBLIC_KEY_SECRET_ARN: &str = "WALLCRAWLER_JWT_PUBLIC_KEY_SECRET_ARN";
/// The public key itself, SPKI PEM (the local platform; no Secrets Manager).
pub const PUBLIC_KEY: &str = "WALLCRAWLER_JWT_PUBLIC_KEY";
/// Seconds of clock skew a token's times are allowed.
pub const JWT_LEEWAY_SECONDS: &str = "JWT_LEEWAY_SECONDS";

/// The context (profile) the session starts from.
pub const CONTEXT_ID: &str = "CONTEXT_ID";
/// The S3 bucket of context profiles.
pub const CONTEXTS_BUCKET_NAME: &str = "CONTEXTS_BUCKET_NAME";
/// The local platform's directory of context profiles (instead of the bucket).
pub const CONTEXTS_DIR: &str = "CONTEXTS_DIR";
/// The S3 bucket of the session's files (`files/<projectId>/<sessionId>/…`: the contexts
/// bucket): its downloads are stored there and its uploads read from there.
pub const FILES_BUCKET_NAME: &str = "FILES_BUCKET_NAME";
/// The local platform's directory of the session's files (instead of the bucket: the data
/// directory's `contexts/`).
pub const FILES_DIR: &str = "FILES_DIR";
/// The most bytes of downloads a session stores.
pub const DOWNLOADS_MAX_BYTES: &str = "DOWNLOADS_MAX_BYTES";
/// The most downloads a session stores.
pub const DOWNLOADS_MAX_FILES: &str = "DOWNLOADS_MAX_FILES";
/// The most bytes of recording (HLS segments) a session stores.
pub const RECORDING_MAX_BYTES: &str = "RECORDING_MAX_BYTES";
/// The most frames a second of a page's recording.
pub const RECORDING_FPS: &str = "RECORDING_FPS";
/// The ffmpeg binary that encodes the recording (and, in the API, builds its MP4s).
pub const FFMPEG_PATH: &str = "FFMPEG_PATH";
/// The profile archive's key, when it is not the context's default.
pub const CONTEXT_S3_KEY: &str = "CONTEXT_S3_KEY";
/// `true`: upload the profile again when the session ends.
pub const CONTEXT_PERSIST: &str = "CONTEXT_PERSIST";
/// The extension archive a single-session task loads into Chrome before READY
/// (`extensions/<projectId>/<sha256>.zip` in the contexts bucket, or under `CONTEXTS_DIR`); a
/// pool controller takes it from its claim.
pub const EXTENSION_S3_KEY: &str = "EXTENSION_S3_KEY";

/// The port the controller's authenticating proxy listens on.
pub const CDP_PROXY_PORT: &str = "CDP_PROXY_PORT";
/// The address the controller's proxy binds (a local controller: loopback).
pub const CDP_PROXY_HOST: &str = "CDP_PROXY_HOST";
/// Chrome's own DevTools port on loopback (0: any free port).
pub const CHROME_DEBUG_PORT: &str = "CHROME_DEBUG_PORT";
/// The address the controller reports as its public IP instead of asking the task metadata.
pub const PUBLIC_IP: &str = "PUBLIC_IP";
/// The networks allowed to put a PROXY protocol header before a connection's bytes.
pub const TRUSTED_PROXY_NETWORKS: &str = "TRUSTED_PROXY_NETWORKS";
/// Chrome's profile directory.
pub const USER_DATA_DIR: &str = "USER_DATA_DIR";
/// Where the controller serves its metrics (empty: nowhere).
pub const METRICS_ADDR: &str = "METRICS_ADDR";
/// `true`: the controller ends when the process that started it does.
pub const EXIT_WITH_PARENT: &str = "EXIT_WITH_PARENT";
/// The niceness of work no client waits on (a warm-up, a close).
pub const BACKGROUND_NICE: &str = "BACKGROUND_NICE";
/// `json` or `text` log lines.
pub const LOG_FORMAT: &str = "LOG_FORMAT";

/// The control plane's task API base URL (`https://…/<stage>`): on AWS a task takes its claim
/// and its session's credentials there ([`crate::task_api`]), never from the queue, table or
/// bucket with its own role.
pub const TASK_API_URL: &str = "TASK_API_URL";
/// Where a task connects for [`TASK_API_URL`] instead of its host (the internal load balancer).
pub const TASK_API_ADDRESS: &str = "TASK_API_ADDRESS";
/// The local platform's single-session controller: the session's control-mode live view
/// ([`crate::task_api::LiveViewGrant`] as JSON), minted by the local control plane, which holds
/// the signing key. A secret: set only where a process's environment is private to it (a child
/// process on one machine), never in an ECS override (DescribeTasks shows those); a task on AWS
/// gets its grant from the task API instead.
pub const LIVE_VIEW_GRANT: &str = "LIVE_VIEW_GRANT";

/// Pool mode: the SQS queue of claims.
pub const POOL_QUEUE_URL: &str = "POOL_QUEUE_URL";
/// Pool mode on the local platform: the directory queue of claims.
pub const POOL_QUEUE_DIR: &str = "POOL_QUEUE_DIR";
/// Pool mode on the local platform: this controller's name in the pool.
pub const POOL_TASK_NAME: &str = "POOL_TASK_NAME";
/// Pool mode: how long a warm controller waits for a claim before it retires.
pub const POOL_IDLE_LIFETIME_SECONDS: &str = "POOL_IDLE_LIFETIME_SECONDS";

/// The Chrome binary.
pub const CHROME_PATH: &str = "CHROME_PATH";
/// The user Chrome runs as (`uid:gid` or a name; empty: the controller's own).
pub const CHROME_USER: &str = "CHROME_USER";
/// Where Chrome's DevTools port listens: `private` (a network namespace of its own) or
/// `shared` (the machine's loopback); unset: `private` when the controller may make one.
pub const CHROME_NETWORK: &str = "CHROME_NETWORK";
/// A cold-started session's egress (`egress::Egress` as JSON: proxy routes, allowed domains).
/// With proxy credentials only in a local child's environment, which no other user reads; on
/// ECS the task's overrides are readable, so there only an egress without credentials comes
/// this way (one with credentials travels with a claim, or is refused).
pub const SESSION_EGRESS: &str = "SESSION_EGRESS";
/// A cold-started session's browser settings (`browser::BrowserSettings` as JSON: viewport,
/// locales, certificate errors, ad blocking; nothing secret).
pub const SESSION_BROWSER: &str = "SESSION_BROWSER";
/// Destinations the egress hop lets Chrome reach although they are loopback, link-local or
/// private: a comma-separated list of addresses, `addr:port`s and CIDRs.
pub const EGRESS_ALLOW: &str = "EGRESS_ALLOW";
/// The filter lists (Adblock Plus syntax, comma-separated file paths) a session's `blockAds`
/// loads in the egress hop; default: Debian's EasyList and EasyPrivacy.
pub const AD_BLOCK_LISTS: &str = "AD_BLOCK_LISTS";
/// A directory where a controller keeps the ad filter it built (the engine of
/// `AD_BLOCK_LISTS`), so that the machine's next controller loads it instead of building it
/// again; the local platform names one in its data directory. Unset: each controller builds
/// its own.
pub const AD_FILTER_CACHE: &str = "AD_FILTER_CACHE";
/// How long a session nobody has connected to yet waits.
pub const CDP_DISCONNECT_TIMEOUT: &str = "CDP_DISCONNECT_TIMEOUT";
/// How long a session waits once its last client has left.
pub const CDP_DISCONNECT_GRACE: &str = "CDP_DISCONNECT_GRACE";
/// Seconds of silence before the proxy pings an upgraded client (0: never).
pub const CDP_KEEPALIVE_SECONDS: &str = "CDP_KEEPALIVE_SECONDS";
/// Who may embed the live viewer's page in a frame: its CSP's `frame-ancestors` sources (the
/// local platform names its API's origin, where the dashboard is, beside `'self'`).
pub const VIEWER_FRAME_ANCESTORS: &str = "VIEWER_FRAME_ANCESTORS";

/// The connect gateway's listening address.
pub const GATEWAY_LISTEN: &str = "GATEWAY_LISTEN";
/// The local platform's certificate authority directory for the gateway's TLS.
pub const GATEWAY_LOCAL_CA_DIR: &str = "GATEWAY_LOCAL_CA_DIR";
/// How long the gateway holds a client whose session is not READY yet.
pub const GATEWAY_HOLD_SECONDS: &str = "GATEWAY_HOLD_SECONDS";
/// How many clients the gateway holds at once.
pub const GATEWAY_MAX_HELD: &str = "GATEWAY_MAX_HELD";
/// How many clients the gateway holds for one session.
pub const GATEWAY_MAX_HELD_PER_SESSION: &str = "GATEWAY_MAX_HELD_PER_SESSION";
/// How long the gateway keeps a session lookup.
pub const GATEWAY_LOOKUP_TTL_MS: &str = "GATEWAY_LOOKUP_TTL_MS";
