//! The command line: subcommands and their flags, each setting a flag and an environment
//! variable (read as text into [`Settings`]).

use clap::{Args, Parser, Subcommand};
use wallcrawler_contract::task_env::*;

use super::*;

/// Declares a clap argument group whose fields are all optional strings backed by environment
/// variables, and its conversion into [`Settings`].
macro_rules! settings_group {
    ($(#[$meta:meta])* $name:ident { $( $(#[$fmeta:meta])* $field:ident = $env:tt ),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Args, Debug, Default, Clone)]
        pub struct $name {
            $(
                $(#[$fmeta])*
                #[arg(long, env = $env, hide_env_values = true, value_name = "VALUE")]
                pub $field: Option<String>,
            )*
        }

        impl $name {
            /// The settings given, keyed by environment-variable name.
            pub fn settings(&self) -> Settings {
                let mut m = Settings::new();
                $( if let Some(v) = &self.$field { m.insert($env, v.clone()); } )*
                m
            }
        }
    };
}

settings_group! {
    /// Token checking, shared by `run` and `proxy`.
    AuthArgs {
        /// Session this task serves (sess_…); tokens for any other session are refused. Required.
        session_id = SESSION_ID,
        /// Owning project; when set, tokens for another project are refused.
        project_id = PROJECT_ID,
        /// The control plane's Ed25519 public key, SPKI PEM (-----BEGIN PUBLIC KEY-----), literal (development, the local platform); overrides the Secrets Manager secret.
        jwt_public_key = PUBLIC_KEY,
        /// Secrets Manager secret holding {"algorithm":"EdDSA","publicKey":"<SPKI PEM>"} (AWSCURRENT and AWSPREVIOUS are both accepted).
        jwt_public_key_secret_arn = PUBLIC_KEY_SECRET_ARN,
        /// No longer read: refused (tokens are EdDSA; set WALLCRAWLER_JWT_PUBLIC_KEY).
        jwt_signing_key = OLD_SIGNING_KEY,
        /// No longer read: refused (set WALLCRAWLER_JWT_PUBLIC_KEY_SECRET_ARN).
        jwt_signing_secret_arn = OLD_SIGNING_SECRET_ARN,
        /// Clock-skew leeway in seconds for exp/nbf/iat [default: 30].
        jwt_leeway_seconds = JWT_LEEWAY_SECONDS,
    }
}

settings_group! {
    /// Limits and telemetry of the proxy, shared by every serving mode.
    ProxyTuningArgs {
        /// Concurrent upgraded (authenticated) client connections; beyond it new upgrades get 503 [default: 4096].
        max_connections = MAX_CONNECTIONS,
        /// Connections not authenticated yet (sending their request); beyond it, one silent for PENDING_MIN_AGE_MS from the address holding the most is closed with 503; younger ones are admitted over it up to 4x [default: 256].
        max_pending_connections = MAX_PENDING_CONNECTIONS,
        /// Of those, from one client address (IPv6: one /64); beyond it that address's oldest is closed with 503 once silent for PENDING_MIN_AGE_MS [default: 32].
        max_pending_per_address = MAX_PENDING_PER_ADDRESS,
        /// Milliseconds a pending connection must have been silent before it can be evicted, so bursts from one address get through (0 = evict by count alone) [default: 500].
        pending_min_age_ms = PENDING_MIN_AGE_MS,
        /// Prometheus metrics listener, empty = off [default: 127.0.0.1:9224 in run, off otherwise].
        metrics_addr = METRICS_ADDR,
        /// Seconds a client has to send complete request headers before 408 [default: 3].
        header_timeout_seconds = PROXY_HEADER_TIMEOUT_SECONDS,
        /// Seconds without traffic either way on an upgraded CDP connection after which the proxy sends the client a WebSocket ping (its pong is dropped, never reaches Chrome), so load balancers and NATs keep an idle client's connection; 0 = off. The gateway passes its tasks' pings through [default: 60].
        cdp_keepalive_seconds = CDP_KEEPALIVE_SECONDS,
        /// Log format on stderr: json or text [default: json in run, text otherwise].
        log_format = LOG_FORMAT,
        /// Comma-separated networks (CIDR) or addresses whose connections may start with a PROXY protocol v2 header naming the real client and whether it used TLS: a load balancer's, the connect gateway's. Anyone else's header is refused (400) [default: none].
        trusted_proxy_networks = TRUSTED_PROXY_NETWORKS,
        /// Who may embed the live viewer's page (/viewer) in a frame: the sources of its Content-Security-Policy's frame-ancestors, space-separated (e.g. 'self' https://app.example.com) [default: 'self'].
        viewer_frame_ancestors = VIEWER_FRAME_ANCESTORS,
    }
}

settings_group! {
    /// Everything `run` reads besides auth and tuning.
    RunSettingsArgs {
        /// DynamoDB sessions table (unset = no table writes).
        sessions_table_name = SESSIONS_TABLE_NAME,
        /// Directory of local session documents, instead of the table (local platform).
        sessions_dir = SESSIONS_DIR,
        /// Context to hydrate (with CONTEXTS_BUCKET_NAME and CONTEXT_S3_KEY).
        context_id = CONTEXT_ID,
        /// S3 bucket of context archives.
        contexts_bucket_name = CONTEXTS_BUCKET_NAME,
        /// Key of the profile archive: <projectId>/<contextId>/profile.tar.gz.
        context_s3_key = CONTEXT_S3_KEY,
        /// Directory holding archives at <dir>/<CONTEXT_S3_KEY>, instead of the bucket.
        contexts_dir = CONTEXTS_DIR,
        /// true = upload the profile on shutdown [default: false].
        context_persist = CONTEXT_PERSIST,
        /// Extension to load into Chrome before READY: extensions/<PROJECT_ID>/<sha256>.zip in CONTEXTS_BUCKET_NAME (or under CONTEXTS_DIR). Pool mode: from each claim.
        extension_s3_key = EXTENSION_S3_KEY,
        /// Proxy listen port [default: 9223].
        cdp_proxy_port = CDP_PROXY_PORT,
        /// Proxy listen address; 127.0.0.1 keeps it on this machine (local platform) [default: 0.0.0.0].
        cdp_proxy_host = CDP_PROXY_HOST,
        /// Seconds with no client connected before the task ends itself, while no client has connected yet; not applied while keepAlive [default: 120].
        cdp_disconnect_timeout = CDP_DISCONNECT_TIMEOUT,
        /// Seconds the task waits after its last client disconnected before it ends itself; not applied while keepAlive [default: 10].
        cdp_disconnect_grace = CDP_DISCONNECT_GRACE,
        /// Chrome binary [default: chromium/chrome found on the PATH].
        chrome_path = CHROME_PATH,
        /// Chrome's DevTools port on 127.0.0.1; 0 = any free port [default: 9222].
        chrome_debug_port = CHROME_DEBUG_PORT,
        /// The user Chrome runs as, uid:gid or a user name, so that Chrome (and a client driving it) cannot read the controller's files or process information; the controller must then be root (or hold CAP_SETUID, CAP_SETGID, CAP_CHOWN and CAP_DAC_OVERRIDE) and hands Chrome its profile and session directories. Never root. Empty = the controller's own user, or, running as root, a uid:gid of Chrome's own held while the controller runs [default: empty].
        chrome_user = CHROME_USER,
        /// Where Chrome's DevTools port listens: private = 127.0.0.1 in a network namespace of Chrome's own, which no other process of the machine reaches (Chrome's traffic leaves through the controller's SOCKS5 egress; TCP only: no QUIC/UDP/WebRTC); needs CAP_SYS_ADMIN. shared = the machine's loopback, which every local user reaches (fine where the machine is the browser's alone: a Fargate task) [default: private; without CAP_SYS_ADMIN the controller refuses to start unless shared is set].
        chrome_network = CHROME_NETWORK,
        /// Destinations a page may reach although they are loopback, private or otherwise not public (the machine's own services, the task's network): comma-separated addresses, addr:port and CIDRs, e.g. 127.0.0.1:8080,10.1.0.0/16. Link-local and instance-metadata addresses are never reachable [default: none].
        egress_allow = EGRESS_ALLOW,
        /// The filter lists a session's blockAds loads into the egress hop, once per process, at the first session that asks: comma-separated files in Adblock Plus syntax; only their host rules (||host^) apply. A list that cannot be read is logged and left out; none readable refuses a session that asks for blockAds [default: Debian's EasyList and EasyPrivacy, /usr/share/chromium/extensions/ublock-origin/assets/thirdparties/easylist/{easylist,easyprivacy}.txt, from webext-ublock-origin-chromium].
        ad_block_lists = AD_BLOCK_LISTS,
        /// A directory (made 0700 if missing) where the ad filter, once built from AD_BLOCK_LISTS, is kept so that the machine's next controller loads it in milliseconds instead of building it again (0.1-0.3 s of CPU); read only when it and the file belong to this user and nobody else may write them. `wallcrawler-control-plane serve` names one in its data directory [default: empty, each controller builds its own].
        ad_filter_cache = AD_FILTER_CACHE,
        /// A single session's egress as the control plane hands it to a cold-started controller (JSON: proxy routes with their credentials, allowed domains); a pool controller's comes with each claim. Secret: never logged.
        session_egress = SESSION_EGRESS,
        /// A single session's browser settings as the control plane hands them to a cold-started controller (JSON: viewport, locales, ignoreCertificateErrors, blockAds); a pool controller's come with each claim.
        session_browser = SESSION_BROWSER,
        /// Chrome user-data-dir [default: a fresh temporary directory].
        user_data_dir = USER_DATA_DIR,
        /// Address to announce instead of discovering it.
        public_ip = PUBLIC_IP,
        /// Direct mode: true = announce the public IP of the task's own network interface (found in EC2 by the MAC address in the ECS task metadata), and fail the session rather than announce a private address when there is none; false = announce the private address and ask EC2 nothing (behind the connect gateway) [default: false].
        public_ip_required = PUBLIC_IP_REQUIRED,
        /// true = survive client disconnects until release or expiry (when no table is configured) [default: false].
        keep_alive = KEEP_ALIVE,
        /// Session expiry, unix seconds (when no table is configured).
        session_expires_at = SESSION_EXPIRES_AT,
        /// Largest total unpacked size of a profile archive, bytes [default: 2147483648].
        profile_max_bytes = PROFILE_MAX_BYTES,
        /// Most entries in a profile archive [default: 100000].
        profile_max_entries = PROFILE_MAX_ENTRIES,
        /// S3 bucket of the session's files: its downloads are stored and its uploads read under files/<projectId>/<sessionId>/ (the contexts bucket) [default: the pool's or the context's bucket or directory, when set; else downloads are not stored and uploads not found].
        files_bucket_name = FILES_BUCKET_NAME,
        /// Directory of the session's files at <dir>/files/… (local platform), instead of FILES_BUCKET_NAME.
        files_dir = FILES_DIR,
        /// Most bytes of downloads stored per session; a download that would pass it is cancelled in the browser and not stored [default: 524288000].
        downloads_max_bytes = DOWNLOADS_MAX_BYTES,
        /// Most downloads stored per session; past it a new download is cancelled in the browser and not stored [default: 100].
        downloads_max_files = DOWNLOADS_MAX_FILES,
        /// Most bytes of recording (HLS segments) stored per session; past it no page is recorded further, with a note in the session's log [default: 1073741824].
        recording_max_bytes = RECORDING_MAX_BYTES,
        /// Most frames a second of a page's recording (a faster page's frames are dropped), 1-30 [default: 10].
        recording_fps = RECORDING_FPS,
        /// The ffmpeg binary that encodes the session's recording [default: ffmpeg on the PATH].
        ffmpeg_path = FFMPEG_PATH,
        /// Seconds for the whole shutdown sequence, upload included [default: 25].
        shutdown_budget_seconds = SHUTDOWN_BUDGET_SECONDS,
        /// Seconds between the strongly consistent reads of its own session item a serving controller makes from READY on; when the item turns terminal (a release, the sweeper, the task-state handler) or disappears, the controller ends the session as on SIGTERM, keeping the terminal status. Costs one small consistent GetItem per interval per session [default: 5].
        item_watch_seconds = ITEM_WATCH_SECONDS,
        /// Chrome flags file replacing the built-in chrome/flags.conf.
        chrome_flags_file = CHROME_FLAGS_FILE,
        /// ECS task metadata v4 endpoint (set by ECS): task ARN and network interface.
        ecs_container_metadata_uri_v4 = ECS_CONTAINER_METADATA_URI_V4,
        /// ECS agent endpoint (set by ECS): in pool mode a claimed task turns its scale-in protection on there until its session's expiry.
        ecs_agent_uri = ECS_AGENT_URI,
        /// Nice value (1-19) for Chrome while no client waits on it: a pool controller's warm-up (raised back to the controller's own when claimed, which needs CAP_SYS_NICE) and every session's close; 0 = off. For hosts running many controllers (the local platform sets 19); pointless on Fargate, one browser per task [default: 0].
        background_nice = BACKGROUND_NICE,
        /// true = end (as on SIGTERM) when the process that started this one exits; the local platform sets it so no controller outlives it [default: false].
        exit_with_parent = EXIT_WITH_PARENT,
        /// The control plane's task API (https://…, http:// only to a loopback address): on AWS a pool task waits there for its claim instead of on POOL_QUEUE_URL, and every task gets its session's credentials there (scoped to that session; refreshed before they expire) for the sessions table, the bucket and the claim, proving which task it is with a signed STS GetCallerIdentity request. Only with POOL_QUEUE_URL or SESSIONS_TABLE_NAME, and with ECS_CONTAINER_METADATA_URI_V4. Unset: the task role's own credentials, as before [default: unset].
        task_api_url = TASK_API_URL,
        /// Where to connect for TASK_API_URL instead of its host: a DNS name or IP address, no port (the URL's); TLS still checks, and Host still names, the URL's host. On AWS (gateway mode) the task API's internal load balancer, whose certificate names the connect host. Only with TASK_API_URL; with an http:// one only a loopback address [default: unset].
        task_api_address = TASK_API_ADDRESS,
        /// The session's control-mode live view as JSON {"credential","expiresAt","base"?}, what a client's Wallcrawler.requestHandoff is answered with; set by the local platform for a controller it starts for one session (a task on AWS gets it from TASK_API_URL). Not with TASK_API_URL or a pool [default: unset].
        live_view_grant = LIVE_VIEW_GRANT,
        /// Pool mode: the SQS queue of claims. The controller warms up (Chrome running, the proxy answering 503), serves the first session claimed through the queue, then exits; SESSION_ID, PROJECT_ID and the context come from the claim.
        pool_queue_url = POOL_QUEUE_URL,
        /// Pool mode with a directory queue of claims (the local platform), instead of POOL_QUEUE_URL.
        pool_queue_dir = POOL_QUEUE_DIR,
        /// Pool mode: seconds an unclaimed controller waits before ending itself, so new images roll through [default: 3600].
        pool_idle_lifetime_seconds = POOL_IDLE_LIFETIME_SECONDS,
        /// Pool mode: seconds a taken claim stays invisible to other controllers (SQS visibility timeout); a controller that dies before READY lets another take it after this [default: 60].
        pool_claim_visibility_seconds = POOL_CLAIM_VISIBILITY_SECONDS,
        /// Pool mode: this controller's name in a POOL_QUEUE_DIR and, off ECS, the owner it writes on the session it takes and the task its READY names. On ECS (task metadata given) the owner is the task ARN from the metadata, which the controller must read at warm-up or it exits non-zero [default: pool-<uuid>, unique per controller].
        pool_task_name = POOL_TASK_NAME,
        /// Pool mode: CloudWatch namespace of the pool's scaling metric. When set (with POOL_METRIC_POOL), the controller writes one embedded-metric-format line on stderr per period: IdleWarmTasks (1 while warm and unclaimed, else 0) and WarmTasks (1), dimension Pool.
        pool_metric_namespace = POOL_METRIC_NAMESPACE,
        /// Pool mode: the metric's `Pool` dimension (the stack's name prefix on AWS).
        pool_metric_pool = POOL_METRIC_POOL,
        /// Pool mode: seconds between metric lines, one of 1, 5, 10, 30, 60; each line is written mid-period so a period holds one sample per task [default: 10].
        pool_metric_period_seconds = POOL_METRIC_PERIOD_SECONDS,
    }
}

settings_group! {
    /// Everything `gateway` reads besides the edge's limits and telemetry.
    GatewaySettingsArgs {
        /// Address to listen on; port 0 = any free port (the one bound is printed as `listen: ADDR` on stdout) [default: 0.0.0.0:9223].
        listen = GATEWAY_LISTEN,
        /// DynamoDB sessions table where sessions are looked up (consistent reads).
        sessions_table_name = SESSIONS_TABLE_NAME,
        /// Directory of local session documents, instead of the table (local platform).
        sessions_dir = SESSIONS_DIR,
        /// The control plane's Ed25519 public key, SPKI PEM (-----BEGIN PUBLIC KEY-----), literal (development, the local platform); overrides the Secrets Manager secret.
        jwt_public_key = PUBLIC_KEY,
        /// Secrets Manager secret holding {"algorithm":"EdDSA","publicKey":"<SPKI PEM>"} (AWSCURRENT and AWSPREVIOUS are both accepted).
        jwt_public_key_secret_arn = PUBLIC_KEY_SECRET_ARN,
        /// No longer read: refused (tokens are EdDSA; set WALLCRAWLER_JWT_PUBLIC_KEY).
        jwt_signing_key = OLD_SIGNING_KEY,
        /// No longer read: refused (set WALLCRAWLER_JWT_PUBLIC_KEY_SECRET_ARN).
        jwt_signing_secret_arn = OLD_SIGNING_SECRET_ARN,
        /// Clock-skew leeway in seconds for exp/nbf/iat [default: 30].
        jwt_leeway_seconds = JWT_LEEWAY_SECONDS,
        /// Seconds a client is held for a session that is still starting before 503 with Retry-After [default: 90].
        gateway_hold_seconds = GATEWAY_HOLD_SECONDS,
        /// Clients held at once for starting sessions, in all; beyond it 503 [default: 4096].
        gateway_max_held = GATEWAY_MAX_HELD,
        /// Clients held at once for one starting session; beyond it 503 [default: 32].
        gateway_max_held_per_session = GATEWAY_MAX_HELD_PER_SESSION,
        /// Milliseconds a session lookup is reused (lookups of one session are shared meanwhile) [default: 250].
        gateway_lookup_ttl_ms = GATEWAY_LOOKUP_TTL_MS,
        /// true = end (as on SIGTERM) when the process that started this one exits (the local platform sets it) [default: false].
        exit_with_parent = EXIT_WITH_PARENT,
        /// PEM certificate chain (leaf first): the gateway ends TLS itself and serves wss://; read again when it changes. With GATEWAY_TLS_KEY.
        gateway_tls_cert = GATEWAY_TLS_CERT,
        /// PEM private key of GATEWAY_TLS_CERT.
        gateway_tls_key = GATEWAY_TLS_KEY,
        /// Instead of GATEWAY_TLS_CERT/KEY: a directory holding a local certificate authority and a certificate it signed for 127.0.0.1, ::1 and localhost (made on first use, files 0600, reused after); the CA's certificate is printed as `caCert: PATH` on stdout (the local platform's `serve --tls`).
        gateway_local_ca_dir = GATEWAY_LOCAL_CA_DIR,
        /// true = clients reach the gateway over TLS ended in front of it (a load balancer's TLS listener): discovery answers name wss:// and https://. Implied by GATEWAY_TLS_CERT [default: false].
        gateway_client_tls = GATEWAY_CLIENT_TLS,
        /// true = each connection to a task starts with a PROXY protocol v2 header naming the client and whether it used TLS; the tasks must list the gateway's network in TRUSTED_PROXY_NETWORKS [default: true].
        gateway_proxy_protocol = GATEWAY_PROXY_PROTOCOL,
    }
}

/// Browserbase-compatible remote browser: one supervised Chrome behind an authenticating CDP proxy.
///
/// Without a subcommand, runs `local`.
#[derive(Parser, Debug)]
#[command(name = "wallcrawler-controller", version, about, long_about = None)]
pub struct Cli {
    /// The mode; `local` when none is given.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The modes.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Local mode (the default): launch Chromium, serve the proxy on 127.0.0.1, print a connectUrl.
    ///
    /// No AWS, fresh profile, keepAlive: runs until Ctrl-C/SIGTERM or a client's Browser.close.
    /// The key pair: the private key from WALLCRAWLER_JWT_PRIVATE_KEY_FILE, or generated.
    Local(LocalArgs),
    /// ECS mode: the per-task controller, configured by the task's environment variables.
    Run(Box<RunArgs>),
    /// Only the authenticating proxy, in front of an already running CDP endpoint.
    Proxy(ProxyArgs),
    /// The connect gateway: one listener for every session, routed by the session the token
    /// names.
    ///
    /// Verifies the token as a task does (401 before any lookup), looks the session up (the
    /// sessions table or SESSIONS_DIR), holds a client while its session starts (503 after
    /// GATEWAY_HOLD_SECONDS), refuses ended (410) and unknown (404) sessions at once, and
    /// relays READY sessions' clients to their task's proxy, the request forwarded as sent.
    /// Plain TCP (TLS ends in front of it for now).
    Gateway(Box<GatewayArgs>),
    /// Print a signed token for a session (bare token and a newline on stdout).
    Token(TokenArgs),
}

/// `--jwt-private-key-file`, of `local` and `token`: the only modes that sign (for local and
/// test use; a task or gateway never holds a private key).
#[derive(Args, Debug, Default, Clone)]
pub struct SigningKeyArg {
    /// Ed25519 private key file, PKCS#8 PEM (-----BEGIN PRIVATE KEY-----, e.g. from `openssl genpkey -algorithm ed25519`); `local` generates a pair when unset, `token` needs it.
    #[arg(long, env = PRIVATE_KEY_FILE, value_name = "PATH")]
    pub jwt_private_key_file: Option<String>,
    /// No longer read: refused (tokens are EdDSA; set WALLCRAWLER_JWT_PRIVATE_KEY_FILE).
    #[arg(long, env = OLD_SIGNING_KEY, hide_env_values = true, value_name = "KEY")]
    pub jwt_signing_key: Option<String>,
}

/// Flags of `local`.
#[derive(Args, Debug, Default, Clone)]
pub struct LocalArgs {
    /// Proxy port on 127.0.0.1; 0 = any free port (the real one is printed) [default: 9223].
    #[arg(long, value_name = "N")]
    pub port: Option<String>,
    /// Chrome binary [default: found on the PATH].
    #[arg(long, env = CHROME_PATH, value_name = "PATH")]
    pub chrome_path: Option<String>,
    /// Lifetime of the printed token in seconds, at most 21600 [default: 3600].
    #[arg(long, value_name = "SECONDS")]
    pub token_ttl: Option<String>,
    /// The private key file.
    #[command(flatten)]
    pub key: SigningKeyArg,
    /// Chrome's DevTools port on 127.0.0.1; 0 = any free port [default: 0].
    #[arg(long, env = CHROME_DEBUG_PORT, value_name = "N")]
    pub chrome_debug_port: Option<String>,
    /// Chrome flags file replacing the built-in chrome/flags.conf.
    #[arg(long, env = CHROME_FLAGS_FILE, value_name = "PATH")]
    pub chrome_flags_file: Option<String>,
    /// Where Chrome's DevTools port listens: private = 127.0.0.1 in a network namespace of Chrome's own, which no other process of the machine reaches (Chrome's traffic leaves through the controller's SOCKS5 egress; TCP only: no QUIC/UDP/WebRTC); needs CAP_SYS_ADMIN. shared = the machine's loopback, which every local user reaches (fine where the machine is the browser's alone: a Fargate task) [default: private; without CAP_SYS_ADMIN the controller refuses to start unless shared is set].
    #[arg(long, env = CHROME_NETWORK, value_name = "private|shared")]
    pub chrome_network: Option<String>,
    /// Destinations a page may reach although they are not public addresses: comma-separated addresses, addr:port and CIDRs. Link-local and instance-metadata addresses are never reachable [default in local: 127.0.0.0/8,::1 — your own machine's loopback, so a page can open your localhost apps].
    #[arg(long, env = EGRESS_ALLOW, hide_env_values = true, value_name = "LIST")]
    pub egress_allow: Option<String>,
    /// The filter lists blockAds loads: comma-separated files in Adblock Plus syntax [default: Debian's EasyList and EasyPrivacy, from webext-ublock-origin-chromium].
    #[arg(long, env = AD_BLOCK_LISTS, value_name = "FILES")]
    pub ad_block_lists: Option<String>,
    /// The proxy's limits and telemetry.
    #[command(flatten)]
    pub tuning: ProxyTuningArgs,
}

/// Flags (and environment variables) of `run`.
#[derive(Args, Debug, Default, Clone)]
pub struct RunArgs {
    /// Token checking.
    #[command(flatten)]
    pub auth: AuthArgs,
    /// The task's settings.
    #[command(flatten)]
    pub run: RunSettingsArgs,
    /// The proxy's limits and telemetry.
    #[command(flatten)]
    pub tuning: ProxyTuningArgs,
}

/// Flags of `proxy`.
#[derive(Args, Debug, Default, Clone)]
pub struct ProxyArgs {
    /// Address to listen on, e.g. 0.0.0.0:9223.
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<String>,
    /// The CDP endpoint to protect, HOST:PORT (its /json/version must answer).
    #[arg(long, value_name = "HOST:PORT")]
    pub upstream: Option<String>,
    /// Token checking.
    #[command(flatten)]
    pub auth: AuthArgs,
    /// The proxy's limits and telemetry.
    #[command(flatten)]
    pub tuning: ProxyTuningArgs,
}

/// Flags (and environment variables) of `gateway`.
#[derive(Args, Debug, Default, Clone)]
pub struct GatewayArgs {
    /// The gateway's settings.
    #[command(flatten)]
    pub gateway: GatewaySettingsArgs,
    /// The edge's limits and telemetry (MAX_CONNECTIONS counts relayed connections).
    #[command(flatten)]
    pub tuning: ProxyTuningArgs,
}

/// Flags of `token`.
#[derive(Args, Debug, Default, Clone)]
pub struct TokenArgs {
    /// Session the token is for.
    #[arg(long, value_name = "SESSION_ID")]
    pub session_id: Option<String>,
    /// Project the token is for [default: none, an empty projectId].
    #[arg(long, value_name = "PROJECT_ID")]
    pub project_id: Option<String>,
    /// Lifetime in seconds, at most 21600 [default: 3600].
    #[arg(long, value_name = "SECONDS")]
    pub ttl: Option<String>,
    /// Print a live-view credential (audience wallcrawler-viewer, for `/viewer?t=`) in this
    /// mode instead of a session token: `view` (input dropped) or `control`.
    #[arg(long, value_name = "MODE")]
    pub viewer: Option<String>,
    /// With --viewer: the one page (CDP target id, 32 hex digits) the credential shows.
    #[arg(long, value_name = "TARGET_ID", requires = "viewer")]
    pub page: Option<String>,
    /// The private key file.
    #[command(flatten)]
    pub key: SigningKeyArg,
}
