//! What more than one mode reads: the token key, the proxy's tuning, egress and the errors.

use std::net::SocketAddr;
use std::time::Duration;

use wallcrawler_contract::task_env::*;
use wallcrawler_contract::{SigningKey, VerifyingKey};

use crate::edge::admission::PendingLimits;
use crate::edge::proxy_header::TrustedNetworks;
use crate::edge::{self, Limits};
pub(super) use crate::telemetry::LogFormat;

use super::*;

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

/// Token settings; in pool mode the session and project come from the claim instead.
pub(super) fn auth_config(r: &mut Reader<'_>, pool: bool) -> AuthConfig {
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
pub(super) fn key_config(r: &mut Reader<'_>) -> KeyConfig {
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
pub(super) fn refuse_old_key_settings(r: &mut Reader<'_>, instead: &str) {
    if r.s.get(OLD_SIGNING_KEY).is_some() {
        r.errors.push(format!(
            "{OLD_SIGNING_KEY} is no longer read: tokens are EdDSA (Ed25519); set {instead}"
        ));
    }
}

/// The private key of `WALLCRAWLER_JWT_PRIVATE_KEY_FILE`, when set.
pub(super) fn private_key(r: &mut Reader<'_>) -> Option<PrivateKey> {
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

pub(super) fn tuning(r: &mut Reader<'_>, mode: Mode) -> ProxyTuning {
    let max_connections = r.count(MAX_CONNECTIONS, edge::DEFAULT_MAX_CONNECTIONS);
    let PendingLimits {
        max_pending,
        max_per_address: max_pending_per_address,
        min_age: pending_min_age,
    } = pending_limits(r);
    let metrics_addr = match r.s.get(METRICS_ADDR).map(|v| v.trim()) {
        Some("") => None,
        Some(_) => r.parse::<SocketAddr>(METRICS_ADDR, "an address such as 127.0.0.1:9224"),
        None if mode == Mode::Run => Some(SocketAddr::from(([127, 0, 0, 1], 9224))),
        None => None,
    };
    let header_timeout = r.seconds(
        PROXY_HEADER_TIMEOUT_SECONDS,
        edge::DEFAULT_HEADER_TIMEOUT,
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

/// The bounds on connections not yet upgraded: `MAX_PENDING_CONNECTIONS`,
/// `MAX_PENDING_PER_ADDRESS` and `PENDING_MIN_AGE_MS`.
fn pending_limits(r: &mut Reader<'_>) -> PendingLimits {
    PendingLimits {
        max_pending: r.count(MAX_PENDING_CONNECTIONS, edge::DEFAULT_MAX_PENDING),
        max_per_address: r.count(
            MAX_PENDING_PER_ADDRESS,
            edge::DEFAULT_MAX_PENDING_PER_ADDRESS,
        ),
        min_age: r.millis(PENDING_MIN_AGE_MS, edge::DEFAULT_PENDING_MIN_AGE, 0, 60_000),
    }
}

/// `CDP_KEEPALIVE_SECONDS`: `None` at 0 (off).
pub(super) fn cdp_keepalive(r: &mut Reader<'_>) -> Option<Duration> {
    match r.number(
        CDP_KEEPALIVE_SECONDS,
        edge::DEFAULT_KEEPALIVE.as_secs(),
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
pub(super) fn egress_allow(
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
