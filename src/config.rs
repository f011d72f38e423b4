//! Command line and environment: what the operator can set, and the checked configuration built
//! from it.
//!
//! Every setting is read as text (from a flag or its environment variable, the names of the
//! existing ECS task definition) into a [`Settings`] map keyed by the variable name; the typed
//! configs are built from that map by pure functions that list **every** problem at once, so
//! tests pass a map and `main` exits 64 with the full list.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use names::*;
use wallcrawler_contract::session::MAX_SHUTDOWN_BUDGET_SECONDS;
use wallcrawler_contract::task_env::*;
use wallcrawler_contract::token::MAX_SESSION_SECONDS;
use wallcrawler_contract::{SigningKey, VerifyingKey};

use crate::chrome::user::ChromeUser;
use crate::gateway;
use crate::netns::ChromeNetwork;
use crate::proxy::admission::PendingLimits;
use crate::proxy::proxy_header::TrustedNetworks;
use crate::proxy::{self, Limits};
pub use crate::telemetry::LogFormat;
use crate::tls::CertFiles;

/// The names of the variables only the controller reads (those the control plane hands it are
/// in [`wallcrawler_contract::task_env`]); each the flag's variable and the parser's key.
mod names {
    pub const CHROME_FLAGS_FILE: &str = "CHROME_FLAGS_FILE";
    pub const ECS_AGENT_URI: &str = "ECS_AGENT_URI";
    pub const ECS_CONTAINER_METADATA_URI_V4: &str = "ECS_CONTAINER_METADATA_URI_V4";
    pub const GATEWAY_CLIENT_TLS: &str = "GATEWAY_CLIENT_TLS";
    pub const GATEWAY_PROXY_PROTOCOL: &str = "GATEWAY_PROXY_PROTOCOL";
    pub const GATEWAY_TLS_CERT: &str = "GATEWAY_TLS_CERT";
    pub const GATEWAY_TLS_KEY: &str = "GATEWAY_TLS_KEY";
    pub const ITEM_WATCH_SECONDS: &str = "ITEM_WATCH_SECONDS";
    pub const KEEP_ALIVE: &str = "KEEP_ALIVE";
    pub const MAX_CONNECTIONS: &str = "MAX_CONNECTIONS";
    pub const MAX_PENDING_CONNECTIONS: &str = "MAX_PENDING_CONNECTIONS";
    pub const MAX_PENDING_PER_ADDRESS: &str = "MAX_PENDING_PER_ADDRESS";
    pub const PENDING_MIN_AGE_MS: &str = "PENDING_MIN_AGE_MS";
    pub const POOL_CLAIM_VISIBILITY_SECONDS: &str = "POOL_CLAIM_VISIBILITY_SECONDS";
    pub const POOL_METRIC_NAMESPACE: &str = "POOL_METRIC_NAMESPACE";
    pub const POOL_METRIC_PERIOD_SECONDS: &str = "POOL_METRIC_PERIOD_SECONDS";
    pub const POOL_METRIC_POOL: &str = "POOL_METRIC_POOL";
    pub const PROFILE_MAX_BYTES: &str = "PROFILE_MAX_BYTES";
    pub const PROFILE_MAX_ENTRIES: &str = "PROFILE_MAX_ENTRIES";
    pub const PROXY_HEADER_TIMEOUT_SECONDS: &str = "PROXY_HEADER_TIMEOUT_SECONDS";
    pub const PUBLIC_IP_REQUIRED: &str = "PUBLIC_IP_REQUIRED";
    pub const SHUTDOWN_BUDGET_SECONDS: &str = "SHUTDOWN_BUDGET_SECONDS";
    pub const VIEWER_FRAME_ANCESTORS: &str = "VIEWER_FRAME_ANCESTORS";
    /// The PKCS#8 PEM file `local` and `token` sign with (never a task's or gateway's).
    pub const PRIVATE_KEY_FILE: &str = "WALLCRAWLER_JWT_PRIVATE_KEY_FILE";
    /// Before EdDSA tokens: the HS256 key (refused, naming its replacement).
    pub const OLD_SIGNING_KEY: &str = "WALLCRAWLER_JWT_SIGNING_KEY";
    /// Before EdDSA tokens: the HS256 secret (refused, naming its replacement).
    pub const OLD_SIGNING_SECRET_ARN: &str = "WALLCRAWLER_JWT_SIGNING_SECRET_ARN";
}

/// Raw settings keyed by environment-variable name.
pub type Settings = BTreeMap<&'static str, String>;

/// Exit status for configuration errors (EX_USAGE).
pub const EXIT_CONFIG: i32 = 64;

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

/// Every problem found in the configuration, one line each.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration:\n  - {}", .0.join("\n  - "))]
pub struct ConfigErrors(pub Vec<String>);

/// Where the public key comes from (the controller and the gateway verify tokens; they hold
/// no key that signs one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyConfig {
    /// A literal public key (development, tests, the local platform).
    Literal(VerifyingKey),
    /// The public key secret's id or ARN in Secrets Manager.
    SecretArn(String),
}

/// A private key read from a file (`local` and `token`), compared by its public half.
#[derive(Clone)]
pub struct PrivateKey(pub SigningKey);

impl PartialEq for PrivateKey {
    fn eq(&self, other: &Self) -> bool {
        self.0.verifying_key() == other.0.verifying_key()
    }
}

impl Eq for PrivateKey {}

impl std::fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PrivateKey(<redacted>)")
    }
}

/// How tokens are checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthConfig {
    /// `SESSION_ID`: tokens for any other session are refused (empty in pool mode until a claim).
    pub session_id: String,
    /// `PROJECT_ID`: when set, tokens for another project are refused.
    pub project_id: Option<String>,
    /// Where the public key comes from.
    pub key: KeyConfig,
    /// `JWT_LEEWAY_SECONDS`: clock-skew leeway for `exp`, `nbf` and `iat`.
    pub leeway_seconds: u64,
}

/// Limits and telemetry of the proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyTuning {
    /// Upgraded connections.
    pub max_connections: usize,
    /// Connections not authenticated yet, and of those from one address.
    pub max_pending: usize,
    /// The share of `max_pending` one client address may hold.
    pub max_pending_per_address: usize,
    /// `PENDING_MIN_AGE_MS`: how long a pending connection must have been silent before it
    /// can be evicted.
    pub pending_min_age: Duration,
    /// `METRICS_ADDR`: the metrics listener (`None`: off).
    pub metrics_addr: Option<SocketAddr>,
    /// `PROXY_HEADER_TIMEOUT_SECONDS`: time to send a complete request head.
    pub header_timeout: Duration,
    /// `CDP_KEEPALIVE_SECONDS`: silence before an upgraded client is pinged (`None`: off).
    pub keepalive: Option<Duration>,
    /// `LOG_FORMAT`.
    pub log_format: LogFormat,
    /// `TRUSTED_PROXY_NETWORKS`: who may send a PROXY protocol v2 header.
    pub trusted_proxies: TrustedNetworks,
    /// `VIEWER_FRAME_ANCESTORS`: who may embed the viewer's page.
    pub viewer_frame_ancestors: String,
}

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
fn background_nice(r: &mut Reader<'_>) -> Option<i32> {
    match r.number(BACKGROUND_NICE, 0, 0, 19) {
        0 => None,
        n => Some(n as i32),
    }
}

/// The downloads' caps.
fn download_settings(r: &mut Reader<'_>) -> DownloadSettings {
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
}

/// `wallcrawler-controller local`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalConfig {
    /// The proxy's port on 127.0.0.1 (0: any free port).
    pub port: u16,
    /// Lifetime of the printed token, in seconds.
    pub token_ttl: u64,
    /// The private key to sign the printed token with (`None`: a pair is generated).
    pub key: Option<PrivateKey>,
    /// How Chrome is launched.
    pub chrome: ChromeSettings,
    /// Limits and telemetry of the proxy.
    pub tuning: ProxyTuning,
}

/// `wallcrawler-controller proxy`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyConfig {
    /// Where the proxy listens.
    pub listen: SocketAddr,
    /// The CDP endpoint behind it, `HOST:PORT`.
    pub upstream: String,
    /// How tokens are checked.
    pub auth: AuthConfig,
    /// Limits and telemetry of the proxy.
    pub tuning: ProxyTuning,
}

/// `wallcrawler-controller gateway`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayConfig {
    /// `GATEWAY_LISTEN`.
    pub listen: SocketAddr,
    /// Where sessions are looked up (a table or a directory).
    pub store: SessionStoreConfig,
    /// Where the public key comes from.
    pub key: KeyConfig,
    /// `JWT_LEEWAY_SECONDS`.
    pub leeway_seconds: u64,
    /// `GATEWAY_HOLD_SECONDS`.
    pub hold: Duration,
    /// `GATEWAY_MAX_HELD`.
    pub max_held: usize,
    /// `GATEWAY_MAX_HELD_PER_SESSION`.
    pub max_held_per_session: usize,
    /// `GATEWAY_LOOKUP_TTL_MS`.
    pub lookup_ttl: Duration,
    /// `EXIT_WITH_PARENT`.
    pub exit_with_parent: bool,
    /// TLS ended in the gateway, and where its certificate comes from.
    pub tls: Option<GatewayTls>,
    /// Clients use TLS (`GATEWAY_CLIENT_TLS`, or TLS ended here).
    pub client_tls: bool,
    /// `GATEWAY_PROXY_PROTOCOL`: a PROXY v2 header before each connection to a task.
    pub proxy_protocol_to_tasks: bool,
    /// The edge's limits and telemetry.
    pub tuning: ProxyTuning,
}

/// Where the gateway's TLS certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GatewayTls {
    /// `GATEWAY_TLS_CERT` and `GATEWAY_TLS_KEY`, read again when they change.
    Files(CertFiles),
    /// `GATEWAY_LOCAL_CA_DIR`: a local authority's certificate, made on first use.
    LocalCa(PathBuf),
}

/// `wallcrawler-controller token`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenConfig {
    /// The session the token is for.
    pub session_id: String,
    /// The project the token is for (may be empty).
    pub project_id: String,
    /// Lifetime in seconds.
    pub ttl: u64,
    /// A live-view credential's mode and page instead of a session token.
    pub viewer: Option<(wallcrawler_contract::viewer::Mode, Option<String>)>,
    /// The private key.
    pub key: PrivateKey,
}

/// Which mode a setting default is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `run`.
    Run,
    /// `local`.
    Local,
    /// `proxy`.
    Proxy,
}

/// Collects typed values and problems from a [`Settings`] map.
struct Reader<'a> {
    s: &'a Settings,
    errors: Vec<String>,
}

impl<'a> Reader<'a> {
    fn new(s: &'a Settings) -> Self {
        Self {
            s,
            errors: Vec::new(),
        }
    }

    /// A non-empty value, trimmed.
    fn text(&self, name: &str) -> Option<String> {
        self.s
            .get(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    }

    fn required(&mut self, name: &str) -> String {
        self.text(name).unwrap_or_else(|| {
            self.errors.push(format!("{name} is required"));
            String::new()
        })
    }

    fn parse<T: std::str::FromStr>(&mut self, name: &str, what: &str) -> Option<T> {
        let raw = self.text(name)?;
        match raw.parse::<T>() {
            Ok(v) => Some(v),
            Err(_) => {
                self.errors
                    .push(format!("{name} must be {what}, got {raw:?}"));
                None
            }
        }
    }

    fn number(&mut self, name: &str, default: u64, min: u64, max: u64) -> u64 {
        match self.parse::<u64>(name, "a whole number") {
            Some(v) if v < min || v > max => {
                self.errors
                    .push(format!("{name} must be between {min} and {max}, got {v}"));
                default
            }
            Some(v) => v,
            None => default,
        }
    }

    /// A count of connections or clients, 1 to a million.
    fn count(&mut self, name: &str, default: usize) -> usize {
        self.number(name, default as u64, 1, 1_000_000) as usize
    }

    /// A duration given in whole seconds, `min..=max` of them.
    fn seconds(&mut self, name: &str, default: Duration, min: u64, max: u64) -> Duration {
        Duration::from_secs(self.number(name, default.as_secs(), min, max))
    }

    /// A duration given in whole milliseconds, `min..=max` of them.
    fn millis(&mut self, name: &str, default: Duration, min: u64, max: u64) -> Duration {
        Duration::from_millis(self.number(name, default.as_millis() as u64, min, max))
    }

    fn boolean(&mut self, name: &str, default: bool) -> bool {
        match self.text(name).map(|v| v.to_ascii_lowercase()) {
            None => default,
            Some(v) if v == "true" || v == "1" || v == "yes" => true,
            Some(v) if v == "false" || v == "0" || v == "no" => false,
            Some(v) => {
                self.errors
                    .push(format!("{name} must be true or false, got {v:?}"));
                default
            }
        }
    }

    /// Two settings of which at most one may be given: both given is a problem (and neither
    /// is returned).
    fn exclusive(&mut self, a: &str, b: &str) -> (Option<String>, Option<String>) {
        match (self.text(a), self.text(b)) {
            (Some(_), Some(_)) => {
                self.errors.push(format!("set {a} or {b}, not both"));
                (None, None)
            }
            pair => pair,
        }
    }

    fn finish<T>(self, value: T) -> Result<T, ConfigErrors> {
        if self.errors.is_empty() {
            Ok(value)
        } else {
            Err(ConfigErrors(self.errors))
        }
    }
}

/// Token settings; in pool mode the session and project come from the claim instead.
fn auth_config(r: &mut Reader<'_>, pool: bool) -> AuthConfig {
    let (session_id, project_id) = if pool {
        for name in [SESSION_ID, PROJECT_ID] {
            if r.text(name).is_some() {
                r.errors.push(format!(
                    "{name} comes from each claim in pool mode (POOL_QUEUE_URL or POOL_QUEUE_DIR); unset it"
                ));
            }
        }
        (String::new(), None)
    } else {
        (r.required(SESSION_ID), r.text(PROJECT_ID))
    };
    let key = key_config(r);
    let leeway_seconds = r.number(JWT_LEEWAY_SECONDS, 30, 0, 3600);
    AuthConfig {
        session_id,
        project_id,
        key,
        leeway_seconds,
    }
}

/// The public key: the literal one, else the Secrets Manager secret. The settings of the HS256
/// shared key of before are refused, naming what replaces them. On a problem (listed) the
/// value returned is a placeholder: `finish` refuses the whole configuration.
fn key_config(r: &mut Reader<'_>) -> KeyConfig {
    refuse_old_key_settings(r, PUBLIC_KEY);
    if r.text(OLD_SIGNING_SECRET_ARN).is_some() {
        r.errors.push(format!(
            "{OLD_SIGNING_SECRET_ARN} is no longer read: tokens are EdDSA and this process only \
             verifies them; set {PUBLIC_KEY_SECRET_ARN} (the public key secret)"
        ));
    }
    match (r.text(PUBLIC_KEY), r.text(PUBLIC_KEY_SECRET_ARN)) {
        (Some(pem), _) => match VerifyingKey::from_pem(&pem) {
            Ok(k) => KeyConfig::Literal(k),
            Err(e) => {
                r.errors.push(format!("{PUBLIC_KEY}: {e}"));
                KeyConfig::SecretArn(String::new())
            }
        },
        (None, Some(arn)) => KeyConfig::SecretArn(arn),
        (None, None) => {
            r.errors.push(format!(
                "a public key is required: set {PUBLIC_KEY_SECRET_ARN} or {PUBLIC_KEY}"
            ));
            KeyConfig::SecretArn(String::new())
        }
    }
}

/// `WALLCRAWLER_JWT_SIGNING_KEY` (an HS256 key) refused, naming `instead`.
fn refuse_old_key_settings(r: &mut Reader<'_>, instead: &str) {
    if r.s.get(OLD_SIGNING_KEY).is_some() {
        r.errors.push(format!(
            "{OLD_SIGNING_KEY} is no longer read: tokens are EdDSA (Ed25519); set {instead}"
        ));
    }
}

/// The private key of `WALLCRAWLER_JWT_PRIVATE_KEY_FILE`, when set.
fn private_key(r: &mut Reader<'_>) -> Option<PrivateKey> {
    refuse_old_key_settings(r, PRIVATE_KEY_FILE);
    let path = r.text(PRIVATE_KEY_FILE)?;
    let read = std::fs::read_to_string(&path).map(zeroize::Zeroizing::new);
    match read.map(|pem| SigningKey::from_pem(&pem)) {
        Ok(Ok(k)) => Some(PrivateKey(k)),
        Ok(Err(e)) => {
            r.errors.push(format!("{PRIVATE_KEY_FILE} ({path}): {e}"));
            None
        }
        Err(e) => {
            r.errors
                .push(format!("{PRIVATE_KEY_FILE}: {path} cannot be read: {e}"));
            None
        }
    }
}

fn tuning(r: &mut Reader<'_>, mode: Mode) -> ProxyTuning {
    let max_connections = r.count(MAX_CONNECTIONS, proxy::DEFAULT_MAX_CONNECTIONS);
    let max_pending = r.count(MAX_PENDING_CONNECTIONS, proxy::DEFAULT_MAX_PENDING);
    let max_pending_per_address = r.count(
        MAX_PENDING_PER_ADDRESS,
        proxy::DEFAULT_MAX_PENDING_PER_ADDRESS,
    );
    let pending_min_age = r.millis(
        PENDING_MIN_AGE_MS,
        proxy::DEFAULT_PENDING_MIN_AGE,
        0,
        60_000,
    );
    let metrics_addr = match r.s.get(METRICS_ADDR).map(|v| v.trim()) {
        Some("") => None,
        Some(_) => r.parse::<SocketAddr>(METRICS_ADDR, "an address such as 127.0.0.1:9224"),
        None if mode == Mode::Run => Some(SocketAddr::from(([127, 0, 0, 1], 9224))),
        None => None,
    };
    let header_timeout = r.seconds(
        PROXY_HEADER_TIMEOUT_SECONDS,
        proxy::DEFAULT_HEADER_TIMEOUT,
        1,
        600,
    );
    let keepalive = cdp_keepalive(r);
    let log_format = match r.text(LOG_FORMAT).as_deref() {
        None if mode == Mode::Run => LogFormat::Json,
        None => LogFormat::Text,
        Some("json") => LogFormat::Json,
        Some("text") => LogFormat::Text,
        Some(other) => {
            r.errors
                .push(format!("LOG_FORMAT must be json or text, got {other:?}"));
            LogFormat::Text
        }
    };
    let trusted_proxies = match r.text(TRUSTED_PROXY_NETWORKS) {
        None => TrustedNetworks::default(),
        Some(list) => list.parse().unwrap_or_else(|e| {
            r.errors.push(format!("TRUSTED_PROXY_NETWORKS: {e}"));
            TrustedNetworks::default()
        }),
    };
    let viewer_frame_ancestors = match r.text(VIEWER_FRAME_ANCESTORS) {
        None => crate::viewer::page::DEFAULT_FRAME_ANCESTORS.to_owned(),
        Some(v) if crate::viewer::page::valid_frame_ancestors(&v) => v,
        Some(_) => {
            r.errors.push(
                "VIEWER_FRAME_ANCESTORS must be CSP source expressions separated by spaces \
                 (no ';' or ',')"
                    .to_owned(),
            );
            crate::viewer::page::DEFAULT_FRAME_ANCESTORS.to_owned()
        }
    };
    ProxyTuning {
        trusted_proxies,
        viewer_frame_ancestors,
        max_connections,
        max_pending,
        max_pending_per_address,
        pending_min_age,
        metrics_addr,
        header_timeout,
        keepalive,
        log_format,
    }
}

/// `CDP_KEEPALIVE_SECONDS`: `None` at 0 (off).
fn cdp_keepalive(r: &mut Reader<'_>) -> Option<Duration> {
    match r.number(
        CDP_KEEPALIVE_SECONDS,
        proxy::DEFAULT_KEEPALIVE.as_secs(),
        0,
        3600,
    ) {
        0 => None,
        n => Some(Duration::from_secs(n)),
    }
}

// The proxy's limits are built here, from the operator's settings, so the proxy never reads the
// configuration (config sits on top of the modules it configures).
impl Limits {
    /// The limits an operator configured; the rest default.
    pub fn from_tuning(t: &ProxyTuning) -> Self {
        Self {
            max_connections: t.max_connections,
            pending: PendingLimits {
                max_pending: t.max_pending,
                max_per_address: t.max_pending_per_address,
                min_age: t.pending_min_age,
            },
            header_timeout: t.header_timeout,
            keepalive: t.keepalive,
            trusted_proxies: t.trusted_proxies.clone(),
            viewer_frame_ancestors: t.viewer_frame_ancestors.clone(),
            ..Self::default()
        }
    }
}

/// `EGRESS_ALLOW`, or `default` when unset.
fn egress_allow(
    r: &mut Reader<'_>,
    default: crate::chrome::egress::EgressAllow,
) -> crate::chrome::egress::EgressAllow {
    match r.s.get(EGRESS_ALLOW) {
        None => default,
        Some(v) => v.parse().unwrap_or_else(|e| {
            r.errors.push(format!("{EGRESS_ALLOW}: {e}"));
            default
        }),
    }
}

/// `SESSION_EGRESS`: a cold-started session's egress (a pool controller's comes with each
/// claim). Its value holds proxy passwords: no error quotes it.
fn session_egress(r: &mut Reader<'_>, pool: bool) -> Option<wallcrawler_contract::egress::Egress> {
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
fn shutdown_budget(r: &mut Reader<'_>) -> Duration {
    let max = MAX_SHUTDOWN_BUDGET_SECONDS;
    Duration::from_secs(r.number(SHUTDOWN_BUDGET_SECONDS, 25, 1, max))
}

/// What a cold-started session asked for: `SESSION_EGRESS` and `SESSION_BROWSER`.
fn session_asked(
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
fn session_browser(
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

fn chrome_settings(
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
        let downloads = download_settings(&mut r);
        let shutdown_budget = shutdown_budget(&mut r);
        let item_watch = Duration::from_secs(r.number(ITEM_WATCH_SECONDS, 5, 1, 300));
        let metadata_uri = r.text(ECS_CONTAINER_METADATA_URI_V4);
        let public_ip_required = r.boolean(PUBLIC_IP_REQUIRED, false);
        if public_ip_required && public_ip.is_none() && metadata_uri.is_none() {
            r.errors.push("PUBLIC_IP_REQUIRED=true needs ECS_CONTAINER_METADATA_URI_V4 (set by ECS) or PUBLIC_IP".to_owned());
        }
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

/// `LIVE_VIEW_GRANT`, checked: JSON of a grant, only for one session's controller off the task
/// API (`elsewhere`: a pool or the task API, which give their own). Its value is a credential:
/// no error quotes it.
fn live_view_grant(
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
fn pool_needs_the_item(r: &mut Reader<'_>, pool: Option<&PoolConfig>, store: &SessionStoreConfig) {
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
fn task_api(
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
fn task_api_address(r: &mut Reader<'_>, url: Option<&str>) -> Option<String> {
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
fn private_url(url: &str) -> bool {
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
fn session_store(r: &mut Reader<'_>) -> SessionStoreConfig {
    match r.exclusive(SESSIONS_TABLE_NAME, SESSIONS_DIR) {
        (Some(t), _) => SessionStoreConfig::Table(t),
        (_, Some(d)) => SessionStoreConfig::Directory(PathBuf::from(d)),
        (None, None) => SessionStoreConfig::None,
    }
}

/// Where the session's files live: `FILES_BUCKET_NAME` or `FILES_DIR`, else where the pool's
/// or the context's archives are (the same bucket on AWS, the data directory locally).
fn files_place(
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
fn context_of_run(
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
fn extension_of_run(r: &mut Reader<'_>, pool: bool, project: &str) -> Option<ExtensionSource> {
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

fn pool_queue(r: &mut Reader<'_>) -> Option<PoolQueue> {
    match r.exclusive(POOL_QUEUE_URL, POOL_QUEUE_DIR) {
        (Some(url), _) => Some(PoolQueue::Sqs(url)),
        (_, Some(dir)) => Some(PoolQueue::Directory(PathBuf::from(dir))),
        (None, None) => None,
    }
}

/// The rest of pool mode: the context comes from each claim, so only its archives' place is
/// configured.
fn pool_config(r: &mut Reader<'_>, queue: PoolQueue) -> PoolConfig {
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
fn pool_metric(r: &mut Reader<'_>) -> Option<PoolMetric> {
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
fn context_source(r: &mut Reader<'_>, place_alone: bool) -> ContextSource {
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

impl LocalConfig {
    /// Checks the command line's arguments, collecting every problem.
    pub fn from_args(a: &LocalArgs) -> Result<Self, ConfigErrors> {
        let mut s = a.tuning.settings();
        let mut put = |k: &'static str, v: &Option<String>| {
            if let Some(v) = v {
                s.insert(k, v.clone());
            }
        };
        put(CDP_PROXY_PORT, &a.port);
        put(CHROME_PATH, &a.chrome_path);
        put("TOKEN_TTL", &a.token_ttl);
        put(PRIVATE_KEY_FILE, &a.key.jwt_private_key_file);
        put(OLD_SIGNING_KEY, &a.key.jwt_signing_key);
        put(CHROME_DEBUG_PORT, &a.chrome_debug_port);
        put(CHROME_FLAGS_FILE, &a.chrome_flags_file);
        put(CHROME_NETWORK, &a.chrome_network);
        put(EGRESS_ALLOW, &a.egress_allow);
        put(AD_BLOCK_LISTS, &a.ad_block_lists);
        Self::from_settings(&s)
    }

    /// Checks every setting of `s`, collecting every problem.
    pub fn from_settings(s: &Settings) -> Result<Self, ConfigErrors> {
        let mut r = Reader::new(s);
        let port = r.number(CDP_PROXY_PORT, 9223, 0, 65535) as u16;
        // The proxy refuses tokens that outlive the longest session.
        let token_ttl = r.number("TOKEN_TTL", 3600, 1, MAX_SESSION_SECONDS);
        let key = private_key(&mut r);
        let chrome = chrome_settings(&mut r, 0, crate::chrome::egress::EgressAllow::loopback());
        let tuning = tuning(&mut r, Mode::Local);
        r.finish(LocalConfig {
            port,
            token_ttl,
            key,
            chrome,
            tuning,
        })
    }
}

impl ProxyConfig {
    /// Checks the command line's arguments, collecting every problem.
    pub fn from_args(a: &ProxyArgs) -> Result<Self, ConfigErrors> {
        let mut s = a.auth.settings();
        s.extend(a.tuning.settings());
        if let Some(l) = &a.listen {
            s.insert("LISTEN", l.clone());
        }
        if let Some(u) = &a.upstream {
            s.insert("UPSTREAM", u.clone());
        }
        Self::from_settings(&s)
    }

    /// Checks every setting of `s`, collecting every problem.
    pub fn from_settings(s: &Settings) -> Result<Self, ConfigErrors> {
        let mut r = Reader::new(s);
        let listen = match r.text("LISTEN") {
            None => {
                r.errors.push("--listen ADDR is required".to_owned());
                None
            }
            Some(_) => r.parse::<SocketAddr>("LISTEN", "an address such as 0.0.0.0:9223"),
        };
        let upstream = match r.text("UPSTREAM") {
            Some(u)
                if u.rsplit_once(':')
                    .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok()) =>
            {
                u
            }
            Some(u) => {
                r.errors
                    .push(format!("--upstream must be HOST:PORT, got {u:?}"));
                String::new()
            }
            None => {
                r.errors.push("--upstream HOST:PORT is required".to_owned());
                String::new()
            }
        };
        let auth = auth_config(&mut r, false);
        let tuning = tuning(&mut r, Mode::Proxy);
        r.finish(ProxyConfig {
            listen: listen.unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0))),
            upstream,
            auth,
            tuning,
        })
    }
}

impl GatewayConfig {
    /// Checks the command line's arguments, collecting every problem.
    pub fn from_args(a: &GatewayArgs) -> Result<Self, ConfigErrors> {
        let mut s = a.gateway.settings();
        s.extend(a.tuning.settings());
        Self::from_settings(&s)
    }

    /// Checks every setting of `s`, collecting every problem.
    pub fn from_settings(s: &Settings) -> Result<Self, ConfigErrors> {
        let mut r = Reader::new(s);
        let listen = r
            .parse::<SocketAddr>(GATEWAY_LISTEN, "an address such as 0.0.0.0:9223")
            .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 9223)));
        let store = session_store(&mut r);
        if r.text(SESSIONS_TABLE_NAME).is_none() && r.text(SESSIONS_DIR).is_none() {
            r.errors.push(
                "the gateway looks sessions up: set SESSIONS_TABLE_NAME (or SESSIONS_DIR)"
                    .to_owned(),
            );
        }
        let key = key_config(&mut r);
        let leeway_seconds = r.number(JWT_LEEWAY_SECONDS, 30, 0, 3600);
        let hold = r.seconds(GATEWAY_HOLD_SECONDS, gateway::DEFAULT_HOLD, 1, 3600);
        let max_held = r.count(GATEWAY_MAX_HELD, gateway::DEFAULT_MAX_HELD);
        let max_held_per_session = r.count(
            GATEWAY_MAX_HELD_PER_SESSION,
            gateway::DEFAULT_MAX_HELD_PER_SESSION,
        );
        let lookup_ttl = r.millis(
            GATEWAY_LOOKUP_TTL_MS,
            gateway::DEFAULT_LOOKUP_TTL,
            1,
            60_000,
        );
        let exit_with_parent = r.boolean(EXIT_WITH_PARENT, false);
        let tls = gateway_tls(&mut r);
        let client_tls = r.boolean(GATEWAY_CLIENT_TLS, false) || tls.is_some();
        let proxy_protocol_to_tasks = r.boolean(GATEWAY_PROXY_PROTOCOL, true);
        let tuning = tuning(&mut r, Mode::Proxy);
        r.finish(GatewayConfig {
            tls,
            client_tls,
            proxy_protocol_to_tasks,
            listen,
            store,
            key,
            leeway_seconds,
            hold,
            max_held,
            max_held_per_session,
            lookup_ttl,
            exit_with_parent,
            tuning,
        })
    }
}

/// TLS ended in the gateway: certificate files, or a local authority's directory.
fn gateway_tls(r: &mut Reader<'_>) -> Option<GatewayTls> {
    let files = match (r.text(GATEWAY_TLS_CERT), r.text(GATEWAY_TLS_KEY)) {
        (Some(cert), Some(key)) => Some(CertFiles {
            cert: PathBuf::from(cert),
            key: PathBuf::from(key),
        }),
        (None, None) => None,
        _ => {
            r.errors
                .push("set GATEWAY_TLS_CERT and GATEWAY_TLS_KEY together (or neither)".to_owned());
            None
        }
    };
    match (files, r.text(GATEWAY_LOCAL_CA_DIR)) {
        (Some(_), Some(_)) => {
            r.errors.push(
                "set GATEWAY_TLS_CERT/GATEWAY_TLS_KEY or GATEWAY_LOCAL_CA_DIR, not both".to_owned(),
            );
            None
        }
        (Some(f), None) => Some(GatewayTls::Files(f)),
        (None, Some(dir)) => Some(GatewayTls::LocalCa(PathBuf::from(dir))),
        (None, None) => None,
    }
}

impl TokenConfig {
    /// Checks the command line's arguments, collecting every problem.
    pub fn from_args(a: &TokenArgs) -> Result<Self, ConfigErrors> {
        let mut s = Settings::new();
        for (k, v) in [
            (SESSION_ID, &a.session_id),
            (PROJECT_ID, &a.project_id),
            ("TOKEN_TTL", &a.ttl),
            (PRIVATE_KEY_FILE, &a.key.jwt_private_key_file),
            (OLD_SIGNING_KEY, &a.key.jwt_signing_key),
            ("VIEWER", &a.viewer),
            ("PAGE", &a.page),
        ] {
            if let Some(v) = v {
                s.insert(k, v.clone());
            }
        }
        Self::from_settings(&s)
    }

    /// Checks every setting of `s`, collecting every problem.
    pub fn from_settings(s: &Settings) -> Result<Self, ConfigErrors> {
        let mut r = Reader::new(s);
        let session_id = r.required(SESSION_ID);
        let project_id = r.text(PROJECT_ID).unwrap_or_default();
        let ttl = r.number("TOKEN_TTL", 3600, 1, MAX_SESSION_SECONDS);
        let key = private_key(&mut r);
        if key.is_none() && r.text(PRIVATE_KEY_FILE).is_none() {
            r.errors
                .push(format!("{PRIVATE_KEY_FILE} is required to sign a token"));
        }
        let viewer = viewer_grant(&mut r);
        r.finish(TokenConfig {
            session_id,
            project_id,
            ttl,
            viewer,
            // A placeholder when missing: `finish` then refuses the configuration.
            key: key.unwrap_or_else(|| PrivateKey(SigningKey::generate())),
        })
    }
}

/// `--viewer MODE [--page ID]` of `token`.
fn viewer_grant(
    r: &mut Reader<'_>,
) -> Option<(wallcrawler_contract::viewer::Mode, Option<String>)> {
    use wallcrawler_contract::viewer::{Mode, is_target_id};
    let mode = r.text("VIEWER")?;
    let Some(mode) = Mode::from_name(&mode) else {
        r.errors
            .push(format!("--viewer: {mode:?} is neither view nor control"));
        return None;
    };
    let page = r.text("PAGE");
    if page.as_deref().is_some_and(|p| !is_target_id(p)) {
        r.errors
            .push("--page: not a CDP target id (32 hex digits)".to_owned());
        return None;
    }
    Some((mode, page))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An Ed25519 public key, SPKI PEM (`openssl pkey -pubout`).
    const PUBLIC: &str = "-----BEGIN PUBLIC KEY-----
MCowBQYDK2VwAyEA9wFNLln1FAfDioMFnpReLaKEhyk0em6z3gbXQRbFQkQ=
-----END PUBLIC KEY-----
";

    /// Asserts that `e` lists every one of `needles` (each a part of one problem's line).
    fn assert_lists(e: &ConfigErrors, needles: &[&str]) {
        let text = e.to_string();
        for needle in needles {
            assert!(text.contains(needle), "{needle:?} not in {text}");
        }
    }

    fn map(pairs: &[(&'static str, &str)]) -> Settings {
        pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
    }

    #[test]
    fn the_proxy_listen_address_is_configurable() {
        let base = [
            ("SESSION_ID", "sess_1"),
            ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
        ];
        let mut pairs = base.to_vec();
        pairs.push(("CDP_PROXY_HOST", "127.0.0.1"));
        let c = RunConfig::from_settings(&map(&pairs)).unwrap();
        assert_eq!(c.proxy_host, std::net::IpAddr::from([127, 0, 0, 1]));
        let mut pairs = base.to_vec();
        pairs.push(("CDP_PROXY_HOST", "localhost"));
        let e = RunConfig::from_settings(&map(&pairs))
            .unwrap_err()
            .to_string();
        assert!(e.contains("CDP_PROXY_HOST must be an IP address"), "{e}");
    }

    #[test]
    fn run_defaults() {
        let c = RunConfig::from_settings(&map(&[
            ("SESSION_ID", "sess_1"),
            ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
        ]))
        .unwrap();
        assert_eq!(c.proxy_port, 9223);
        assert_eq!(c.proxy_host, std::net::IpAddr::from([0, 0, 0, 0]));
        assert_eq!(c.chrome.debug_port, 9222);
        assert_eq!(c.disconnect_timeout, Duration::from_secs(120));
        assert_eq!(c.disconnect_grace, Duration::from_secs(10));
        assert_eq!(c.auth.leeway_seconds, 30);
        assert_eq!(c.tuning.max_connections, proxy::DEFAULT_MAX_CONNECTIONS);
        assert_eq!(c.tuning.max_pending, 256);
        assert_eq!(c.tuning.max_pending_per_address, 32);
        assert_eq!(c.tuning.pending_min_age, Duration::from_millis(500));
        assert_eq!(c.tuning.header_timeout, Duration::from_secs(3));
        assert_eq!(c.tuning.keepalive, Some(Duration::from_secs(60)));
        assert_eq!(
            c.tuning.metrics_addr,
            Some("127.0.0.1:9224".parse().unwrap())
        );
        assert_eq!(c.tuning.log_format, LogFormat::Json);
        assert_eq!(c.shutdown_budget, Duration::from_secs(25));
        assert_eq!(c.item_watch, Duration::from_secs(5));
        assert_eq!(c.profile_max_bytes, 2_147_483_648);
        assert_eq!(c.profile_max_entries, 100_000);
        assert_eq!(c.context, ContextSource::None);
        assert!(!c.keep_alive && !c.context_persist);
    }

    #[test]
    fn disconnect_grace_is_between_one_second_and_an_hour() {
        let with = |grace: &str| {
            RunConfig::from_settings(&map(&[
                ("SESSION_ID", "sess_1"),
                ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
                ("CDP_DISCONNECT_GRACE", grace),
            ]))
        };
        assert_eq!(with("1").unwrap().disconnect_grace, Duration::from_secs(1));
        assert_eq!(
            with("3600").unwrap().disconnect_grace,
            Duration::from_secs(3600)
        );
        for bad in ["0", "3601"] {
            assert_eq!(
                with(bad).unwrap_err().0,
                vec![format!(
                    "CDP_DISCONNECT_GRACE must be between 1 and 3600, got {bad}"
                )]
            );
        }
    }

    #[test]
    fn chrome_user_is_off_by_default_and_checked() {
        fn with(user: &'static str) -> Result<RunConfig, ConfigErrors> {
            RunConfig::from_settings(&map(&[
                ("SESSION_ID", "sess_1"),
                ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
                ("CHROME_USER", user),
            ]))
        }
        assert_eq!(with("").unwrap().chrome.user, None);
        let u = with("10001:10002").unwrap().chrome.user.unwrap();
        assert_eq!((u.uid.as_raw(), u.gid.as_raw()), (10001, 10002));
        assert_eq!(
            with("0:0").unwrap_err().0,
            vec!["CHROME_USER must not be root (uid 0)".to_owned()]
        );
        assert_eq!(
            with("nosuchuser-x").unwrap_err().0,
            vec![
                "CHROME_USER must be uid:gid or a user name known to this system, got \"nosuchuser-x\""
                    .to_owned()
            ]
        );
    }

    #[test]
    fn ad_block_lists_default_to_debians_and_name_at_least_one_file() {
        use crate::chrome::egress::AdLists;
        fn with(lists: &'static str) -> Result<RunConfig, ConfigErrors> {
            RunConfig::from_settings(&map(&[
                ("SESSION_ID", "sess_1"),
                ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
                ("AD_BLOCK_LISTS", lists),
            ]))
        }
        assert_eq!(with("").unwrap().chrome.ad_block_lists, AdLists::default());
        assert_eq!(
            with("/a.txt,/b.txt").unwrap().chrome.ad_block_lists,
            "/a.txt,/b.txt".parse::<AdLists>().unwrap()
        );
        assert_eq!(
            with(",").unwrap_err().0,
            vec![
                "AD_BLOCK_LISTS: name at least one filter list file (comma-separated paths)"
                    .to_owned()
            ]
        );
        let local = LocalConfig::from_args(&LocalArgs {
            ad_block_lists: Some("/a.txt".into()),
            ..LocalArgs::default()
        })
        .unwrap();
        assert_eq!(
            local.chrome.ad_block_lists.paths(),
            [PathBuf::from("/a.txt")]
        );
    }

    #[test]
    fn chrome_network_is_decided_at_start_unless_set_and_checked() {
        fn with(network: &'static str) -> Result<RunConfig, ConfigErrors> {
            RunConfig::from_settings(&map(&[
                ("SESSION_ID", "sess_1"),
                ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
                ("CHROME_NETWORK", network),
            ]))
        }
        assert_eq!(with("").unwrap().chrome.network, None);
        assert_eq!(
            with("private").unwrap().chrome.network,
            Some(ChromeNetwork::Private)
        );
        assert_eq!(
            with("shared").unwrap().chrome.network,
            Some(ChromeNetwork::Shared)
        );
        assert_eq!(
            with("host").unwrap_err().0,
            vec!["CHROME_NETWORK must be private or shared, got \"host\"".to_owned()]
        );
        let local = LocalConfig::from_args(&LocalArgs {
            chrome_network: Some("shared".into()),
            ..LocalArgs::default()
        })
        .unwrap();
        assert_eq!(local.chrome.network, Some(ChromeNetwork::Shared));
        use clap::CommandFactory;
        let cli = Cli::command();
        for mode in ["run", "local"] {
            let sub = cli.find_subcommand(mode).unwrap();
            let a = sub
                .get_arguments()
                .find(|a| a.get_id() == "chrome_network")
                .unwrap();
            assert_eq!(a.get_long(), Some("chrome-network"), "{mode}");
            assert!(a.get_help().unwrap().to_string().contains("CAP_SYS_ADMIN"));
        }
    }

    #[test]
    fn background_nice_is_off_by_default_and_at_most_19() {
        fn with(nice: &[(&'static str, &'static str)]) -> Result<RunConfig, ConfigErrors> {
            let mut v = vec![
                ("SESSION_ID", "sess_1"),
                ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
            ];
            v.extend_from_slice(nice);
            RunConfig::from_settings(&map(&v))
        }
        assert_eq!(with(&[]).unwrap().background_nice, None);
        assert_eq!(
            with(&[("BACKGROUND_NICE", "0")]).unwrap().background_nice,
            None
        );
        assert_eq!(
            with(&[("BACKGROUND_NICE", "19")]).unwrap().background_nice,
            Some(19)
        );
        assert_eq!(
            with(&[("BACKGROUND_NICE", "20")]).unwrap_err().0,
            vec!["BACKGROUND_NICE must be between 0 and 19, got 20".to_owned()]
        );
        assert_eq!(
            with(&[("BACKGROUND_NICE", "-5")]).unwrap_err().0,
            vec![r#"BACKGROUND_NICE must be a whole number, got "-5""#.to_owned()]
        );
    }

    #[test]
    fn the_pool_metric_is_both_names_or_neither() {
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut v = vec![
                ("POOL_QUEUE_DIR", "/q"),
                ("SESSIONS_DIR", "/s"),
                ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
            ];
            v.extend_from_slice(extra);
            RunConfig::from_settings(&map(&v)).map(|c| c.pool.unwrap().metric)
        };
        assert_eq!(with(&[]).unwrap(), None);
        assert_eq!(
            with(&[
                ("POOL_METRIC_NAMESPACE", "Wallcrawler"),
                ("POOL_METRIC_POOL", "wc")
            ])
            .unwrap(),
            Some(PoolMetric {
                namespace: "Wallcrawler".into(),
                pool: "wc".into(),
                period: Duration::from_secs(10),
            })
        );
        assert_lists(
            &with(&[("POOL_METRIC_NAMESPACE", "Wallcrawler")]).unwrap_err(),
            &["POOL_METRIC_NAMESPACE and POOL_METRIC_POOL go together"],
        );
        assert_lists(
            &with(&[
                ("POOL_METRIC_NAMESPACE", "AWS/ECS"),
                ("POOL_METRIC_POOL", "w\u{7}c"),
                ("POOL_METRIC_PERIOD_SECONDS", "7"),
            ])
            .unwrap_err(),
            &[
                "POOL_METRIC_PERIOD_SECONDS must be one of 1, 5, 10, 30, 60",
                "POOL_METRIC_NAMESPACE must be 1-255 printable ASCII characters, not under AWS/",
                "POOL_METRIC_POOL must be 1-255 printable ASCII characters",
            ],
        );
    }

    #[test]
    fn pool_mode_takes_the_session_from_claims() {
        let c = RunConfig::from_settings(&map(&[
            ("POOL_QUEUE_URL", "http://127.0.0.1:1/queue/claims"),
            ("SESSIONS_TABLE_NAME", "sessions"),
            ("CONTEXTS_BUCKET_NAME", "contexts"),
            ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
            ("POOL_TASK_NAME", "pool-1"),
        ]))
        .unwrap();
        let pool = c.pool.unwrap();
        assert_eq!(
            pool.queue,
            PoolQueue::Sqs("http://127.0.0.1:1/queue/claims".into())
        );
        assert_eq!(pool.archives, ArchivePlace::Bucket("contexts".into()));
        assert_eq!(pool.idle_lifetime, Duration::from_secs(3600));
        assert_eq!(pool.visibility, Duration::from_secs(60));
        assert_eq!(pool.task_name, "pool-1");
        assert_eq!(c.context, ContextSource::None);
        // Without a name, a unique one: never one every Fargate task shares (pid 1).
        let unnamed = || {
            let c = RunConfig::from_settings(&map(&[
                ("POOL_QUEUE_URL", "http://127.0.0.1:1/queue/claims"),
                ("SESSIONS_TABLE_NAME", "sessions"),
                ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
            ]))
            .unwrap();
            c.pool.unwrap().task_name
        };
        let (a, b) = (unnamed(), unnamed());
        assert!(a.starts_with("pool-") && a.len() > 20, "{a}");
        assert_ne!(a, b);
        assert_eq!(c.auth.session_id, "");

        let e = RunConfig::from_settings(&map(&[
            ("POOL_QUEUE_DIR", "/q"),
            ("SESSION_ID", "sess_1"),
            ("CONTEXT_ID", "ctx_1"),
            ("CONTEXT_S3_KEY", "p/c/profile.tar.gz"),
            ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
            ("POOL_TASK_NAME", "../x"),
        ]))
        .unwrap_err();
        assert_lists(
            &e,
            &[
                "SESSION_ID comes from each claim",
                "CONTEXT_ID comes from each claim",
                "CONTEXT_S3_KEY comes from each claim",
                "POOL_TASK_NAME must be",
                "pool mode needs the session item",
            ],
        );
        let both = RunConfig::from_settings(&map(&[
            ("POOL_QUEUE_DIR", "/q"),
            ("POOL_QUEUE_URL", "http://127.0.0.1:1/q"),
            ("SESSIONS_DIR", "/s"),
            ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
        ]))
        .unwrap_err();
        assert!(both.0.iter().any(|m| m.contains("not both")), "{both:?}");
    }

    #[test]
    fn the_task_api_address_is_a_bare_host_for_the_task_api_only() {
        let pool = [
            ("POOL_QUEUE_URL", "http://127.0.0.1:1/queue/claims"),
            ("SESSIONS_TABLE_NAME", "sessions"),
            ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
            ("ECS_CONTAINER_METADATA_URI_V4", "http://127.0.0.1:2/v4/x"),
        ];
        let with = |url: Option<&'static str>, address: &'static str| {
            let mut pairs = pool.to_vec();
            pairs.extend(url.map(|u| ("TASK_API_URL", u)));
            pairs.push(("TASK_API_ADDRESS", address));
            RunConfig::from_settings(&map(&pairs))
        };
        let lb = "internal-wc-tasks-1234.us-east-1.elb.amazonaws.com";
        for (url, address) in [
            ("https://connect.example.com", lb),
            ("https://connect.example.com", "10.0.3.7"),
            ("http://127.0.0.1:8080", "127.0.0.1"),
            ("http://127.0.0.1:8080", "::1"),
        ] {
            let c = with(Some(url), address).unwrap();
            assert_eq!(c.task_api_address.as_deref(), Some(address), "{address}");
        }
        let e = with(None, lb).unwrap_err();
        assert_eq!(
            e.0,
            vec!["TASK_API_ADDRESS is only for TASK_API_URL".to_owned()]
        );
        let bare = "TASK_API_ADDRESS must be a DNS name or an IP address, without scheme, port \
                    or path (the port is TASK_API_URL's)";
        for address in [
            "https://lb.example.com",
            "lb.example.com:443",
            "lb.example.com/v1",
            "[::1]",
            "-lb.example.com",
            "user@lb",
        ] {
            let e = with(Some("https://connect.example.com"), address).unwrap_err();
            assert_eq!(e.0, vec![bare.to_owned()], "{address}");
        }
        let clear = "TASK_API_ADDRESS must be a loopback address with an http:// TASK_API_URL: \
                     the task's identity must not cross a network in clear";
        for address in ["10.0.3.7", "localhost", lb] {
            let e = with(Some("http://127.0.0.1:8080"), address).unwrap_err();
            assert_eq!(e.0, vec![clear.to_owned()], "{address}");
        }
    }

    #[test]
    fn the_task_api_is_for_a_task_on_aws_and_never_in_clear() {
        let pool = [
            ("POOL_QUEUE_URL", "http://127.0.0.1:1/queue/claims"),
            ("SESSIONS_TABLE_NAME", "sessions"),
            ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
            ("ECS_CONTAINER_METADATA_URI_V4", "http://127.0.0.1:2/v4/x"),
        ];
        let cold = [
            ("SESSION_ID", "sess_1"),
            ("SESSIONS_TABLE_NAME", "sessions"),
            ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
            ("ECS_CONTAINER_METADATA_URI_V4", "http://127.0.0.1:2/v4/x"),
        ];
        let with = |base: &[(&'static str, &'static str)], url: &'static str| {
            let mut pairs = base.to_vec();
            pairs.push(("TASK_API_URL", url));
            RunConfig::from_settings(&map(&pairs))
        };
        for (base, url, want) in [
            (
                &pool,
                "https://api.example.com/v1/",
                "https://api.example.com/v1",
            ),
            (&cold, "https://api.example.com", "https://api.example.com"),
            (
                &pool,
                "http://127.0.0.1:8080/prod",
                "http://127.0.0.1:8080/prod",
            ),
            (&cold, "http://[::1]:8080", "http://[::1]:8080"),
        ] {
            let c = with(base, url).unwrap();
            assert_eq!(c.task_api.as_deref(), Some(want), "{url}");
        }
        assert_eq!(
            RunConfig::from_settings(&map(&pool)).unwrap().task_api,
            None
        );

        let clear = "TASK_API_URL must be an https:// URL (http:// only to a loopback address \
                     such as 127.0.0.1): the task's identity must not cross a network in clear";
        for url in [
            "http://api.example.com",
            "http://10.0.0.1:8080",
            "http://localhost:8080",
            "ftp://127.0.0.1",
            "https://api.example.com/?x=1",
            "https://user@api.example.com",
            "api.example.com",
        ] {
            let e = with(&pool, url).unwrap_err();
            assert_eq!(e.0, vec![clear.to_owned()], "{url}");
        }

        let not_aws = "TASK_API_URL is for a task on AWS: a pool with POOL_QUEUE_URL, or one \
                       session's task with SESSIONS_TABLE_NAME";
        let dir_pool = [
            ("POOL_QUEUE_DIR", "/q"),
            ("SESSIONS_DIR", "/s"),
            ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
            ("ECS_CONTAINER_METADATA_URI_V4", "http://127.0.0.1:2/v4/x"),
        ];
        let no_table = [
            ("SESSION_ID", "sess_1"),
            ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
            ("ECS_CONTAINER_METADATA_URI_V4", "http://127.0.0.1:2/v4/x"),
        ];
        for base in [&dir_pool[..], &no_table[..]] {
            let e = with(base, "https://api.example.com").unwrap_err();
            assert_eq!(e.0, vec![not_aws.to_owned()]);
        }
        let e = with(&pool[..3], "https://api.example.com").unwrap_err();
        assert_eq!(
            e.0,
            vec![
                "TASK_API_URL needs ECS_CONTAINER_METADATA_URI_V4 (set by ECS): the task API \
                 hands a session to the task its ARN names"
                    .to_owned()
            ]
        );
    }

    #[test]
    fn a_live_view_grant_is_read_for_one_sessions_controller_only_and_never_quoted() {
        let one = [
            ("SESSION_ID", "sess_1"),
            ("SESSIONS_DIR", "/s"),
            ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
        ];
        let with = |base: &[(&'static str, &str)], grant: &str| {
            let mut pairs = base.to_vec();
            pairs.push(("LIVE_VIEW_GRANT", grant));
            RunConfig::from_settings(&map(&pairs))
        };
        let c = with(
            &one,
            r#"{"credential":"c.r.e","expiresAt":9,"base":"http://g:1"}"#,
        )
        .unwrap();
        let lv = c.live_view.expect("the grant");
        assert_eq!(lv.url("http://own:2"), "http://g:1/viewer?t=c.r.e");
        assert_eq!(lv.expires_at, 9);
        let e = with(&one, "secret-not-json").unwrap_err();
        assert_eq!(
            e.0,
            vec![r#"LIVE_VIEW_GRANT must be JSON {"credential","expiresAt","base"?}"#.to_owned()]
        );
        let pool = [
            ("POOL_QUEUE_DIR", "/q"),
            ("SESSIONS_DIR", "/s"),
            ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
        ];
        let e = with(&pool, r#"{"credential":"c","expiresAt":9}"#).unwrap_err();
        assert_eq!(
            e.0,
            vec![
                "LIVE_VIEW_GRANT is for one session's controller off the task API: a pool \
                 controller's comes with its claim, a task's from TASK_API_URL"
                    .to_owned()
            ]
        );
    }

    #[test]
    fn every_problem_is_listed() {
        let e = RunConfig::from_settings(&map(&[
            ("CDP_PROXY_PORT", "99999"),
            ("JWT_LEEWAY_SECONDS", "soon"),
            ("CONTEXT_ID", "ctx_1"),
            ("LOG_FORMAT", "xml"),
            ("KEEP_ALIVE", "maybe"),
        ]))
        .unwrap_err();
        assert_lists(
            &e,
            &[
                "SESSION_ID is required",
                "a public key is required",
                "CDP_PROXY_PORT must be between",
                "JWT_LEEWAY_SECONDS must be a whole number",
                "missing CONTEXTS_BUCKET_NAME (or CONTEXTS_DIR), CONTEXT_S3_KEY",
                "LOG_FORMAT must be json or text",
                "KEEP_ALIVE must be true or false",
            ],
        );
        assert_eq!(e.0.len(), 7);
    }

    #[test]
    fn a_task_extension_needs_its_projects_key_and_a_place() {
        let key = format!("extensions/proj_1/{}.zip", "a".repeat(64));
        let base = [
            ("SESSION_ID", "s"),
            ("PROJECT_ID", "proj_1"),
            ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
        ];
        let mut m = map(&base);
        m.insert("EXTENSION_S3_KEY", key.clone());
        m.insert("CONTEXTS_BUCKET_NAME", "b".into());
        let c = RunConfig::from_settings(&m).unwrap();
        assert_eq!(
            c.context,
            ContextSource::None,
            "the bucket alone is no context"
        );
        assert_eq!(
            c.extension,
            Some(ExtensionSource {
                key: key.clone(),
                place: ArchivePlace::Bucket("b".into())
            })
        );
        m.remove("CONTEXTS_BUCKET_NAME");
        let e = RunConfig::from_settings(&m).unwrap_err();
        assert_lists(&e, &["EXTENSION_S3_KEY needs CONTEXTS_BUCKET_NAME"]);
        m.insert("CONTEXTS_DIR", "/d".into());
        m.insert("PROJECT_ID", "proj_2".into());
        let e = RunConfig::from_settings(&m).unwrap_err();
        assert_lists(&e, &["EXTENSION_S3_KEY must be extensions/<PROJECT_ID>"]);
    }

    #[test]
    fn session_files_live_where_named_else_with_the_archives() {
        let base = [("SESSION_ID", "s"), ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC)];
        let files = |more: &[(&'static str, &'static str)]| {
            let mut m = map(&base);
            m.extend(map(more));
            RunConfig::from_settings(&m).map(|c| c.files)
        };
        assert_eq!(files(&[]).unwrap(), ArchivePlace::None);
        assert_eq!(
            files(&[("FILES_DIR", "/d")]).unwrap(),
            ArchivePlace::Directory("/d".into())
        );
        assert_eq!(
            files(&[("FILES_BUCKET_NAME", "b")]).unwrap(),
            ArchivePlace::Bucket("b".into())
        );
        let context = [
            ("CONTEXT_ID", "c"),
            ("CONTEXTS_BUCKET_NAME", "ctx"),
            ("CONTEXT_S3_KEY", "p/c/profile.tar.gz"),
        ];
        assert_eq!(files(&context).unwrap(), ArchivePlace::Bucket("ctx".into()));
        assert!(
            files(&[("FILES_DIR", "/d"), ("FILES_BUCKET_NAME", "b")])
                .unwrap_err()
                .to_string()
                .contains("not both")
        );
    }

    #[test]
    fn context_modes() {
        let base = [
            ("SESSION_ID", "s"),
            ("WALLCRAWLER_JWT_PUBLIC_KEY_SECRET_ARN", "arn:x"),
        ];
        let mut m = map(&base);
        m.extend(map(&[
            ("CONTEXT_ID", "c"),
            ("CONTEXTS_BUCKET_NAME", "b"),
            ("CONTEXT_S3_KEY", "p/c/profile.tar.gz"),
        ]));
        let c = RunConfig::from_settings(&m).unwrap();
        assert_eq!(c.auth.key, KeyConfig::SecretArn("arn:x".into()));
        assert!(matches!(c.context, ContextSource::Bucket { .. }));
        m.insert("CONTEXTS_DIR", "/tmp".into());
        assert!(
            RunConfig::from_settings(&m)
                .unwrap_err()
                .to_string()
                .contains("not both")
        );
        let mut persist_alone = map(&base);
        persist_alone.insert("CONTEXT_PERSIST", "true".into());
        assert!(RunConfig::from_settings(&persist_alone).is_err());
    }

    #[test]
    fn literal_public_key_wins() {
        let c = RunConfig::from_settings(&map(&[
            ("SESSION_ID", "s"),
            ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
            ("WALLCRAWLER_JWT_PUBLIC_KEY_SECRET_ARN", "arn:x"),
        ]))
        .unwrap();
        assert_eq!(
            c.auth.key,
            KeyConfig::Literal(VerifyingKey::from_pem(PUBLIC).unwrap())
        );
    }

    #[test]
    fn the_hs256_settings_and_private_keys_are_refused_naming_the_public_key() {
        // A task definition of before EdDSA tokens: each old setting refused with its successor.
        let e = RunConfig::from_settings(&map(&[
            ("SESSION_ID", "s"),
            ("WALLCRAWLER_JWT_SIGNING_KEY", "hunter2"),
            ("WALLCRAWLER_JWT_SIGNING_SECRET_ARN", "arn:x"),
        ]))
        .unwrap_err();
        assert_lists(
            &e,
            &[
                "WALLCRAWLER_JWT_SIGNING_KEY is no longer read: tokens are EdDSA (Ed25519); set WALLCRAWLER_JWT_PUBLIC_KEY",
                "WALLCRAWLER_JWT_SIGNING_SECRET_ARN is no longer read",
                "set WALLCRAWLER_JWT_PUBLIC_KEY_SECRET_ARN",
            ],
        );
        assert!(!e.to_string().contains("hunter2"));
        // The old setting is refused even beside a good public key.
        let with_both = map(&[
            ("SESSIONS_DIR", "/d"),
            ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
            ("WALLCRAWLER_JWT_SIGNING_KEY", "k"),
        ]);
        assert!(GatewayConfig::from_settings(&with_both).is_err());
        // A private key where the public one goes is not a public key (and is not echoed).
        let private = wallcrawler_testkit::keys::signing_key("k").to_pem();
        let e = GatewayConfig::from_settings(&map(&[
            ("SESSIONS_DIR", "/d"),
            ("WALLCRAWLER_JWT_PUBLIC_KEY", private.as_str()),
        ]))
        .unwrap_err();
        assert_lists(
            &e,
            &["WALLCRAWLER_JWT_PUBLIC_KEY: the public key is not an Ed25519 key in SPKI PEM"],
        );
        assert!(!e.to_string().contains(&private[40..80]));
        let e =
            LocalConfig::from_settings(&map(&[("WALLCRAWLER_JWT_SIGNING_KEY", "k")])).unwrap_err();
        assert_lists(&e, &["set WALLCRAWLER_JWT_PRIVATE_KEY_FILE"]);
    }

    #[test]
    fn cdp_keepalive_is_configurable_off_at_zero_and_checked() {
        let proxy_with = |v: &str| {
            ProxyConfig::from_settings(&map(&[
                ("LISTEN", "127.0.0.1:0"),
                ("UPSTREAM", "127.0.0.1:9222"),
                ("SESSION_ID", "s"),
                ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
                ("CDP_KEEPALIVE_SECONDS", v),
            ]))
        };
        let c = proxy_with("4").unwrap();
        assert_eq!(c.tuning.keepalive, Some(Duration::from_secs(4)));
        assert_eq!(
            Limits::from_tuning(&c.tuning).keepalive,
            Some(Duration::from_secs(4))
        );
        assert_eq!(proxy_with("0").unwrap().tuning.keepalive, None);
        for (bad, says) in [
            ("soon", "CDP_KEEPALIVE_SECONDS must be a whole number"),
            ("-1", "CDP_KEEPALIVE_SECONDS must be a whole number"),
            ("3601", "CDP_KEEPALIVE_SECONDS must be between 0 and 3600"),
        ] {
            let e = proxy_with(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn pending_limits_are_configurable_and_checked() {
        let c = ProxyConfig::from_settings(&map(&[
            ("LISTEN", "127.0.0.1:0"),
            ("UPSTREAM", "127.0.0.1:9222"),
            ("SESSION_ID", "s"),
            ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
            ("MAX_PENDING_CONNECTIONS", "16"),
            ("MAX_PENDING_PER_ADDRESS", "4"),
            ("PENDING_MIN_AGE_MS", "250"),
            ("PROXY_HEADER_TIMEOUT_SECONDS", "2"),
        ]))
        .unwrap();
        assert_eq!(
            (
                c.tuning.max_pending,
                c.tuning.max_pending_per_address,
                c.tuning.pending_min_age,
                c.tuning.header_timeout
            ),
            (16, 4, Duration::from_millis(250), Duration::from_secs(2))
        );
        let e = RunConfig::from_settings(&map(&[
            ("SESSION_ID", "s"),
            ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
            ("MAX_PENDING_CONNECTIONS", "0"),
            ("MAX_PENDING_PER_ADDRESS", "many"),
            ("PENDING_MIN_AGE_MS", "60001"),
        ]))
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("MAX_PENDING_CONNECTIONS must be between 1 and"),
            "{e}"
        );
        assert!(
            e.contains("MAX_PENDING_PER_ADDRESS must be a whole number"),
            "{e}"
        );
        assert!(
            e.contains("PENDING_MIN_AGE_MS must be between 0 and 60000"),
            "{e}"
        );
    }

    #[test]
    fn metrics_can_be_turned_off() {
        let c = RunConfig::from_settings(&map(&[
            ("SESSION_ID", "s"),
            ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
            ("METRICS_ADDR", ""),
        ]))
        .unwrap();
        assert_eq!(c.tuning.metrics_addr, None);
    }

    #[test]
    fn viewer_frame_ancestors_default_and_refusal() {
        let c = LocalConfig::from_settings(&Settings::new()).unwrap();
        assert_eq!(c.tuning.viewer_frame_ancestors, "'self'");
        let c = LocalConfig::from_settings(&map(&[(
            "VIEWER_FRAME_ANCESTORS",
            "'self' https://app.example.test",
        )]))
        .unwrap();
        let limits = Limits::from_tuning(&c.tuning);
        assert_eq!(
            limits.viewer_frame_ancestors,
            "'self' https://app.example.test"
        );
        let e =
            LocalConfig::from_settings(&map(&[("VIEWER_FRAME_ANCESTORS", "'self'; script-src *")]))
                .unwrap_err()
                .to_string();
        assert!(
            e.contains("VIEWER_FRAME_ANCESTORS must be CSP source expressions separated by spaces (no ';' or ',')"),
            "{e}"
        );
    }

    #[test]
    fn local_defaults() {
        let c = LocalConfig::from_settings(&Settings::new()).unwrap();
        assert_eq!((c.port, c.token_ttl, c.chrome.debug_port), (9223, 3600, 0));
        assert_eq!(c.tuning.metrics_addr, None);
        assert_eq!(c.tuning.log_format, LogFormat::Text);
    }

    #[test]
    fn proxy_requires_listen_upstream_and_session() {
        let e = ProxyConfig::from_settings(&map(&[("UPSTREAM", "nohost")]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--listen ADDR is required"));
        assert!(e.contains("--upstream must be HOST:PORT"));
        assert!(e.contains("SESSION_ID is required"));
    }

    #[test]
    fn token_needs_a_key() {
        let e = TokenConfig::from_settings(&map(&[("SESSION_ID", "s")])).unwrap_err();
        assert_eq!(
            e.0,
            vec!["WALLCRAWLER_JWT_PRIVATE_KEY_FILE is required to sign a token".to_owned()]
        );
    }

    #[test]
    fn token_lifetimes_stop_at_the_longest_session() {
        // The proxy refuses a token whose exp is further ahead than the longest session.
        let file = wallcrawler_testkit::keys::private_key_file("k");
        let file = file.to_str().unwrap();
        let ok = TokenConfig::from_settings(&map(&[
            ("SESSION_ID", "s"),
            ("WALLCRAWLER_JWT_PRIVATE_KEY_FILE", file),
            ("TOKEN_TTL", "21600"),
        ]))
        .unwrap();
        assert_eq!(ok.ttl, 21_600);
        let e = TokenConfig::from_settings(&map(&[
            ("SESSION_ID", "s"),
            ("WALLCRAWLER_JWT_PRIVATE_KEY_FILE", file),
            ("TOKEN_TTL", "21601"),
        ]))
        .unwrap_err();
        assert_eq!(
            e.0,
            vec!["TOKEN_TTL must be between 1 and 21600, got 21601".to_owned()]
        );
        let e = LocalConfig::from_settings(&map(&[("TOKEN_TTL", "86400")])).unwrap_err();
        assert_eq!(
            e.0,
            vec!["TOKEN_TTL must be between 1 and 21600, got 86400".to_owned()]
        );
    }

    #[test]
    fn gateway_defaults_and_every_problem() {
        let c = GatewayConfig::from_settings(&map(&[
            ("SESSIONS_DIR", "/s"),
            ("WALLCRAWLER_JWT_PUBLIC_KEY", PUBLIC),
        ]))
        .unwrap();
        assert_eq!(c.listen, "0.0.0.0:9223".parse().unwrap());
        assert_eq!(c.store, SessionStoreConfig::Directory("/s".into()));
        assert_eq!(c.hold, Duration::from_secs(90));
        assert_eq!(
            (c.max_held, c.max_held_per_session),
            (
                gateway::DEFAULT_MAX_HELD,
                gateway::DEFAULT_MAX_HELD_PER_SESSION
            )
        );
        assert_eq!(c.lookup_ttl, Duration::from_millis(250));
        assert_eq!(c.tuning.metrics_addr, None);
        let e = GatewayConfig::from_settings(&map(&[
            ("GATEWAY_LISTEN", "nowhere"),
            ("GATEWAY_HOLD_SECONDS", "0"),
            ("GATEWAY_MAX_HELD_PER_SESSION", "x"),
        ]))
        .unwrap_err();
        assert_lists(
            &e,
            &[
                "GATEWAY_LISTEN must be an address",
                "set SESSIONS_TABLE_NAME (or SESSIONS_DIR)",
                "a public key is required",
                "GATEWAY_HOLD_SECONDS must be between 1 and 3600",
                "GATEWAY_MAX_HELD_PER_SESSION must be a whole number",
            ],
        );
        assert_eq!(e.0.len(), 5);
    }

    #[test]
    fn cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    /// The help states each default the parser applies (the constants, said once).
    #[test]
    fn help_states_the_defaults_the_parser_uses() {
        use crate::{gateway, proxy};
        use clap::CommandFactory;
        let cli = Cli::command();
        let help = |mode: &str, arg: &str| {
            let sub = cli.find_subcommand(mode).unwrap();
            let a = sub.get_arguments().find(|a| a.get_id() == arg).unwrap();
            a.get_help().unwrap().to_string()
        };
        for (mode, arg, default) in [
            (
                "run",
                "max_connections",
                proxy::DEFAULT_MAX_CONNECTIONS as u128,
            ),
            (
                "run",
                "max_pending_connections",
                proxy::DEFAULT_MAX_PENDING as u128,
            ),
            (
                "run",
                "max_pending_per_address",
                proxy::DEFAULT_MAX_PENDING_PER_ADDRESS as u128,
            ),
            (
                "run",
                "pending_min_age_ms",
                proxy::DEFAULT_PENDING_MIN_AGE.as_millis(),
            ),
            (
                "run",
                "header_timeout_seconds",
                proxy::DEFAULT_HEADER_TIMEOUT.as_secs().into(),
            ),
            (
                "run",
                "cdp_keepalive_seconds",
                proxy::DEFAULT_KEEPALIVE.as_secs().into(),
            ),
            (
                "gateway",
                "gateway_hold_seconds",
                gateway::DEFAULT_HOLD.as_secs().into(),
            ),
            (
                "gateway",
                "gateway_max_held",
                gateway::DEFAULT_MAX_HELD as u128,
            ),
            (
                "gateway",
                "gateway_max_held_per_session",
                gateway::DEFAULT_MAX_HELD_PER_SESSION as u128,
            ),
            (
                "gateway",
                "gateway_lookup_ttl_ms",
                gateway::DEFAULT_LOOKUP_TTL.as_millis(),
            ),
        ] {
            let text = help(mode, arg);
            assert!(
                text.contains(&format!("[default: {default}]")),
                "{mode} {arg}: {text}"
            );
        }
    }
}
