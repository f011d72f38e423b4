//! Logs (stderr, JSON or text) and the Prometheus metrics the proxy keeps.
//!
//! Metric labels are fixed words (directions, outcomes, refusal reasons): nothing a client sends
//! ever becomes a label, so no token or address can leak through `/metrics`.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;
use wallcrawler_contract::TokenError;

use crate::config::LogFormat;

/// Installs the global subscriber: stderr only, level from `RUST_LOG` (default `info`).
pub fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let _ = match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .try_init(),
        LogFormat::Text => builder.with_target(false).try_init(),
    };
}

/// `text` cut to at most `max_bytes` bytes on a character boundary: for customer-supplied or
/// third-party text (entry names, error chains) that goes into a log line or a stored item.
pub fn clip(text: &str, max_bytes: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max_bytes {
        return text.into();
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].into()
}

/// How a client connection ended, as counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Upgraded and relayed until one side closed.
    Relayed,
    /// A discovery or pass-through HTTP request answered.
    Http,
    /// `/health` answered.
    Health,
    /// Credential refused (401).
    Unauthorized,
    /// Malformed request (400).
    BadRequest,
    /// Headers not complete in time (408).
    HeaderTimeout,
    /// Headers too large (431).
    HeadersTooLarge,
    /// No such route (404/405).
    NotFound,
    /// Connection cap reached (503).
    AtCapacity,
    /// Chrome or the signing key not ready (503).
    NotReady,
    /// Chrome could not be reached or refused the upgrade (502).
    UpstreamFailed,
    /// The client went away before anything was answered.
    ClientGone,
}

impl Outcome {
    pub const ALL: [Outcome; 12] = [
        Self::Relayed,
        Self::Http,
        Self::Health,
        Self::Unauthorized,
        Self::BadRequest,
        Self::HeaderTimeout,
        Self::HeadersTooLarge,
        Self::NotFound,
        Self::AtCapacity,
        Self::NotReady,
        Self::UpstreamFailed,
        Self::ClientGone,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Self::Relayed => "relayed",
            Self::Http => "http",
            Self::Health => "health",
            Self::Unauthorized => "unauthorized",
            Self::BadRequest => "bad_request",
            Self::HeaderTimeout => "header_timeout",
            Self::HeadersTooLarge => "headers_too_large",
            Self::NotFound => "not_found",
            Self::AtCapacity => "at_capacity",
            Self::NotReady => "not_ready",
            Self::UpstreamFailed => "upstream_failed",
            Self::ClientGone => "client_gone",
        }
    }
}

/// Counters and gauges of the proxy.
#[derive(Default)]
pub struct Metrics {
    /// Upgraded client connections open now.
    pub clients_active: AtomicI64,
    /// TCP connections being handled now (any route).
    pub connections_open: AtomicI64,
    pub bytes_client_to_chrome: AtomicU64,
    pub bytes_chrome_to_client: AtomicU64,
    outcomes: [AtomicU64; Outcome::ALL.len()],
    refusals: [AtomicU64; TokenError::ALL.len()],
    /// Pool mode, in milliseconds (0 = not reached): start → warm, warm → claimed, claimed →
    /// READY written.
    pub pool_warmup_ms: AtomicU64,
    pub pool_idle_ms: AtomicU64,
    pub pool_claim_to_ready_ms: AtomicU64,
}

impl Metrics {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    pub fn outcome(&self, o: Outcome) {
        let i = Outcome::ALL.iter().position(|x| *x == o).expect("listed");
        self.outcomes[i].fetch_add(1, Ordering::Relaxed);
    }

    pub fn refusal(&self, e: TokenError) {
        let i = TokenError::ALL
            .iter()
            .position(|x| *x == e)
            .expect("listed");
        self.refusals[i].fetch_add(1, Ordering::Relaxed);
    }

    pub fn outcome_count(&self, o: Outcome) -> u64 {
        let i = Outcome::ALL.iter().position(|x| *x == o).expect("listed");
        self.outcomes[i].load(Ordering::Relaxed)
    }

    /// Bytes relayed in both directions so far (`proxyBytes`).
    pub fn proxy_bytes(&self) -> u64 {
        self.bytes_client_to_chrome.load(Ordering::Relaxed)
            + self.bytes_chrome_to_client.load(Ordering::Relaxed)
    }

    /// Prometheus text exposition format.
    pub fn render(&self) -> String {
        let mut s = String::with_capacity(2048);
        let _ = writeln!(
            s,
            "# HELP wallcrawler_proxy_clients Upgraded CDP client connections open now."
        );
        let _ = writeln!(s, "# TYPE wallcrawler_proxy_clients gauge");
        let _ = writeln!(
            s,
            "wallcrawler_proxy_clients {}",
            self.clients_active.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            s,
            "# HELP wallcrawler_proxy_connections_open TCP connections being handled now."
        );
        let _ = writeln!(s, "# TYPE wallcrawler_proxy_connections_open gauge");
        let _ = writeln!(
            s,
            "wallcrawler_proxy_connections_open {}",
            self.connections_open.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            s,
            "# HELP wallcrawler_proxy_bytes_total Bytes relayed, by direction."
        );
        let _ = writeln!(s, "# TYPE wallcrawler_proxy_bytes_total counter");
        let _ = writeln!(
            s,
            "wallcrawler_proxy_bytes_total{{direction=\"client_to_chrome\"}} {}",
            self.bytes_client_to_chrome.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            s,
            "wallcrawler_proxy_bytes_total{{direction=\"chrome_to_client\"}} {}",
            self.bytes_chrome_to_client.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            s,
            "# HELP wallcrawler_proxy_connections_total Client connections by outcome."
        );
        let _ = writeln!(s, "# TYPE wallcrawler_proxy_connections_total counter");
        for (o, c) in Outcome::ALL.iter().zip(&self.outcomes) {
            let _ = writeln!(
                s,
                "wallcrawler_proxy_connections_total{{outcome=\"{}\"}} {}",
                o.label(),
                c.load(Ordering::Relaxed)
            );
        }
        let _ = writeln!(
            s,
            "# HELP wallcrawler_proxy_auth_refusals_total Refused credentials by reason."
        );
        let _ = writeln!(s, "# TYPE wallcrawler_proxy_auth_refusals_total counter");
        for (e, c) in TokenError::ALL.iter().zip(&self.refusals) {
            let _ = writeln!(
                s,
                "wallcrawler_proxy_auth_refusals_total{{reason=\"{}\"}} {}",
                e.reason(),
                c.load(Ordering::Relaxed)
            );
        }
        self.render_pool(&mut s);
        s
    }

    /// The pool gauges, once this controller has warmed up in pool mode.
    fn render_pool(&self, s: &mut String) {
        if self.pool_warmup_ms.load(Ordering::Relaxed) == 0 {
            return;
        }
        for (name, help, v) in [
            (
                "wallcrawler_pool_warmup_seconds",
                "Pool mode: from the controller's start to a warm browser waiting for a claim.",
                &self.pool_warmup_ms,
            ),
            (
                "wallcrawler_pool_idle_seconds",
                "Pool mode: time warm before a claim came (0 while still waiting).",
                &self.pool_idle_ms,
            ),
            (
                "wallcrawler_pool_claim_to_ready_seconds",
                "Pool mode: from taking a claim to READY written (0 until then).",
                &self.pool_claim_to_ready_ms,
            ),
        ] {
            let _ = writeln!(s, "# HELP {name} {help}");
            let _ = writeln!(s, "# TYPE {name} gauge");
            let _ = writeln!(s, "{name} {:.3}", v.load(Ordering::Relaxed) as f64 / 1000.0);
        }
    }
}

/// Serves `GET /metrics` on `listener` until `cancel` fires. Any other path gets 404.
pub async fn serve_metrics(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    cancel: CancellationToken,
) {
    loop {
        let (mut stream, _) = tokio::select! {
            r = listener.accept() => match r { Ok(c) => c, Err(_) => continue },
            () = cancel.cancelled() => return,
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let mut buf = Vec::with_capacity(1024);
            let head = crate::proxy::http::read_request_head(
                &mut stream,
                &mut buf,
                8192,
                std::time::Duration::from_secs(5),
            )
            .await;
            let response = match head {
                Ok((h, _)) if h.method == "GET" && h.path() == "/metrics" => {
                    crate::proxy::http::body_response(
                        200,
                        "text/plain; version=0.0.4",
                        metrics.render().as_bytes(),
                    )
                }
                Ok(_) => crate::proxy::http::simple_response(404, &[], "not found\n"),
                Err(_) => crate::proxy::http::simple_response(400, &[], "bad request\n"),
            };
            let _ = stream.write_all(&response).await;
            let _ = stream.shutdown().await;
        });
    }
}

/// Binds the metrics listener.
pub async fn bind_metrics(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_has_every_series() {
        let m = Metrics::new();
        m.outcome(Outcome::Relayed);
        m.refusal(TokenError::Expired);
        m.bytes_client_to_chrome.fetch_add(5, Ordering::Relaxed);
        let text = m.render();
        assert!(text.contains("wallcrawler_proxy_connections_total{outcome=\"relayed\"} 1"));
        assert!(text.contains("wallcrawler_proxy_auth_refusals_total{reason=\"expired\"} 1"));
        assert!(text.contains("wallcrawler_proxy_bytes_total{direction=\"client_to_chrome\"} 5"));
        assert_eq!(m.proxy_bytes(), 5);
    }

    #[test]
    fn clip_cuts_on_a_character_boundary() {
        assert_eq!(clip("short", 10), "short");
        assert_eq!(clip("abcdef", 3), "abc");
        // "é" is two bytes: a cut in its middle backs off before it.
        assert_eq!(clip("aé", 2), "a");
        assert_eq!(clip("ééé", 5), "éé");
    }
}
