//! The names of the variables only the controller reads (those the control plane hands it are
//! in [`wallcrawler_contract::task_env`]); each the flag's variable and the parser's key.

pub(super) const CHROME_FLAGS_FILE: &str = "CHROME_FLAGS_FILE";
pub(super) const ECS_AGENT_URI: &str = "ECS_AGENT_URI";
pub(super) const ECS_CONTAINER_METADATA_URI_V4: &str = "ECS_CONTAINER_METADATA_URI_V4";
pub(super) const GATEWAY_CLIENT_TLS: &str = "GATEWAY_CLIENT_TLS";
pub(super) const GATEWAY_PROXY_PROTOCOL: &str = "GATEWAY_PROXY_PROTOCOL";
pub(super) const GATEWAY_TLS_CERT: &str = "GATEWAY_TLS_CERT";
pub(super) const GATEWAY_TLS_KEY: &str = "GATEWAY_TLS_KEY";
pub(super) const ITEM_WATCH_SECONDS: &str = "ITEM_WATCH_SECONDS";
pub(super) const KEEP_ALIVE: &str = "KEEP_ALIVE";
pub(super) const MAX_CONNECTIONS: &str = "MAX_CONNECTIONS";
pub(super) const MAX_PENDING_CONNECTIONS: &str = "MAX_PENDING_CONNECTIONS";
pub(super) const MAX_PENDING_PER_ADDRESS: &str = "MAX_PENDING_PER_ADDRESS";
pub(super) const PENDING_MIN_AGE_MS: &str = "PENDING_MIN_AGE_MS";
pub(super) const POOL_CLAIM_VISIBILITY_SECONDS: &str = "POOL_CLAIM_VISIBILITY_SECONDS";
pub(super) const POOL_METRIC_NAMESPACE: &str = "POOL_METRIC_NAMESPACE";
pub(super) const POOL_METRIC_PERIOD_SECONDS: &str = "POOL_METRIC_PERIOD_SECONDS";
pub(super) const POOL_METRIC_POOL: &str = "POOL_METRIC_POOL";
pub(super) const PROFILE_MAX_BYTES: &str = "PROFILE_MAX_BYTES";
pub(super) const PROFILE_MAX_ENTRIES: &str = "PROFILE_MAX_ENTRIES";
pub(super) const PROXY_HEADER_TIMEOUT_SECONDS: &str = "PROXY_HEADER_TIMEOUT_SECONDS";
pub(super) const PUBLIC_IP_REQUIRED: &str = "PUBLIC_IP_REQUIRED";
pub(super) const SHUTDOWN_BUDGET_SECONDS: &str = "SHUTDOWN_BUDGET_SECONDS";
/// The PKCS#8 PEM file `local` and `token` sign with (never a task's or gateway's).
pub(super) const PRIVATE_KEY_FILE: &str = "WALLCRAWLER_JWT_PRIVATE_KEY_FILE";
/// Before EdDSA tokens: the HS256 key (refused, naming its replacement).
pub(super) const OLD_SIGNING_KEY: &str = "WALLCRAWLER_JWT_SIGNING_KEY";
/// Before EdDSA tokens: the HS256 secret (refused, naming its replacement).
pub(super) const OLD_SIGNING_SECRET_ARN: &str = "WALLCRAWLER_JWT_SIGNING_SECRET_ARN";
