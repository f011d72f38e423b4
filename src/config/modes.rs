//! The other modes' configurations: `local`, `proxy`, `gateway`, `token`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use wallcrawler_contract::SigningKey;
use wallcrawler_contract::task_env::*;
use wallcrawler_contract::token::MAX_SESSION_SECONDS;

use crate::gateway;
use crate::tls::CertFiles;

use super::*;

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
pub(super) fn gateway_tls(r: &mut Reader<'_>) -> Option<GatewayTls> {
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
pub(super) fn viewer_grant(
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
