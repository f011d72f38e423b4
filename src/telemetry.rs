//! Logs (stderr, JSON or text) and the Prometheus metrics the proxy keeps.
//!
//! Metric labels are fixed words (directions, outcomes, refusal reasons): nothing a client sends
//! ever becomes a label, so no token or address can leak through `/metrics`.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::encoding::text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::debug;
use tracing_subscriber::EnvFilter;
use wallcrawler_contract::TokenError;

/// How logs are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line (ECS, CloudWatch).
    Json,
    /// Human-readable lines (a terminal).
    Text,
}

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
pub enum ConnectionEnd {
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
    /// Chrome or the public key not ready (503).
    NotReady,
    /// Chrome could not be reached or refused the upgrade (502).
    UpstreamFailed,
    /// The client went away before anything was answered.
    ClientGone,
}

impl ConnectionEnd {
    /// Every outcome; the metrics keep one counter per entry, in this order.
    pub const ALL: [ConnectionEnd; 12] = [
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

    /// The outcome's metric label value.
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

/// One label pair; labels are fixed words chosen here, never anything a client sent.
type Label = [(&'static str, &'static str); 1];

/// The proxy's counters and gauges, registered with [`prometheus_client`] (which owns the
/// OpenMetrics text encoding). Each labelled series is created once at start and kept as a
/// handle, so counting on the connection and relay paths is one atomic add, no map lookup.
pub struct Metrics {
    /// Upgraded client connections open now.
    pub clients_active: Gauge,
    /// TCP connections being handled now (any route).
    pub connections_open: Gauge,
    /// Bytes relayed from the client to Chrome.
    pub bytes_client_to_chrome: Counter,
    /// Bytes relayed from Chrome to the client.
    pub bytes_chrome_to_client: Counter,
    /// Screencasts the viewer started (one per watched page, however many viewers watch it).
    pub viewer_screencasts_started: Counter,
    outcomes: [Counter; ConnectionEnd::ALL.len()],
    refusals: AuthRefusals,
    /// Pool mode, in seconds (0 = not reached): start → warm, warm → claimed, claimed → READY.
    pub pool_warmup: Gauge<f64, AtomicU64>,
    /// See `pool_warmup`.
    pub pool_idle: Gauge<f64, AtomicU64>,
    /// See `pool_warmup`.
    pub pool_claim_to_ready: Gauge<f64, AtomicU64>,
    registry: Registry,
    /// Encoded only once the pool gauges mean something (a warm browser in pool mode).
    pool_registry: Registry,
}

/// The `Content-Type` of [`Metrics::render`].
pub const EXPOSITION_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A counter family registered as `name` (with `help`), one series per label value, each
/// created now so it is exposed at zero.
pub fn counters<const N: usize>(
    registry: &mut Registry,
    (name, help): (&str, &str),
    key: &'static str,
    values: [&'static str; N],
) -> [Counter; N] {
    let family = Family::<Label, Counter>::default();
    let series = values.map(|v| family.get_or_create_owned(&[(key, v)]));
    registry.register(name, help, family);
    series
}

/// The OpenMetrics text of `registries`, in order, and its `# EOF`.
pub fn encode(registries: &[&Registry]) -> String {
    let mut s = String::with_capacity(4096);
    // Writing to a String cannot fail.
    for r in registries {
        let _ = text::encode_registry(&mut s, r);
    }
    let _ = text::encode_eof(&mut s);
    s
}

/// A counter registered as `name` (with `help`).
pub fn counter(registry: &mut Registry, name: &str, help: &str) -> Counter {
    let c = Counter::default();
    registry.register(name, help, c.clone());
    c
}

/// A gauge registered as `name` (with `help`).
pub fn gauge(registry: &mut Registry, name: &str, help: &str) -> Gauge {
    let g = Gauge::default();
    registry.register(name, help, g.clone());
    g
}

/// Refused credentials, one series per [`TokenError`] reason (the proxy's and the gateway's).
pub struct AuthRefusals([Counter; TokenError::ALL.len()]);

impl AuthRefusals {
    /// The family registered as `name`, every reason at zero.
    pub fn register(registry: &mut Registry, name: &str) -> Self {
        Self(counters(
            registry,
            (name, "Refused credentials by reason"),
            "reason",
            TokenError::ALL.map(TokenError::reason),
        ))
    }

    /// Counts a refused credential.
    pub fn count(&self, e: TokenError) {
        if let Some(i) = TokenError::ALL.iter().position(|x| *x == e) {
            self.0[i].inc();
        }
    }
}

/// Pool mode's gauges, in seconds, at zero in a registry of their own: warmup, idle, and
/// claim to READY.
fn pool_gauges() -> (Registry, [Gauge<f64, AtomicU64>; 3]) {
    let mut registry = Registry::default();
    let gauges: [Gauge<f64, AtomicU64>; 3] = Default::default();
    for ((name, help), gauge) in [
        (
            "wallcrawler_pool_warmup",
            "Pool mode: from the controller's start to a warm browser waiting for a claim",
        ),
        (
            "wallcrawler_pool_idle",
            "Pool mode: time warm before a claim came (0 while still waiting)",
        ),
        (
            "wallcrawler_pool_claim_to_ready",
            "Pool mode: from taking a claim to READY written (0 until then)",
        ),
    ]
    .into_iter()
    .zip(&gauges)
    {
        registry.register_with_unit(name, help, Unit::Seconds, gauge.clone());
    }
    (registry, gauges)
}

impl Metrics {
    /// Every series registered, at zero.
    pub fn new() -> Arc<Self> {
        let mut registry = Registry::default();
        let clients_active = gauge(
            &mut registry,
            "wallcrawler_proxy_clients",
            "Upgraded CDP client connections open now",
        );
        let connections_open = gauge(
            &mut registry,
            "wallcrawler_proxy_connections_open",
            "TCP connections being handled now",
        );
        let [bytes_client_to_chrome, bytes_chrome_to_client] = counters(
            &mut registry,
            ("wallcrawler_proxy_bytes", "Bytes relayed, by direction"),
            "direction",
            ["client_to_chrome", "chrome_to_client"],
        );
        let outcomes = counters(
            &mut registry,
            (
                "wallcrawler_proxy_connections",
                "Client connections by outcome",
            ),
            "outcome",
            ConnectionEnd::ALL.map(ConnectionEnd::label),
        );
        let refusals = AuthRefusals::register(&mut registry, "wallcrawler_proxy_auth_refusals");
        let viewer_screencasts_started = counter(
            &mut registry,
            "wallcrawler_viewer_screencasts_started",
            "Page screencasts started for live viewers",
        );
        let (pool_registry, [pool_warmup, pool_idle, pool_claim_to_ready]) = pool_gauges();
        Arc::new(Self {
            clients_active,
            connections_open,
            bytes_client_to_chrome,
            bytes_chrome_to_client,
            viewer_screencasts_started,
            outcomes,
            refusals,
            pool_warmup,
            pool_idle,
            pool_claim_to_ready,
            registry,
            pool_registry,
        })
    }

    /// Counts a connection's outcome.
    pub fn outcome(&self, o: ConnectionEnd) {
        self.outcomes[o as usize].inc();
    }

    /// Counts a refused credential.
    pub fn refusal(&self, e: TokenError) {
        self.refusals.count(e);
    }

    /// Connections counted with outcome `o` so far.
    pub fn outcome_count(&self, o: ConnectionEnd) -> u64 {
        self.outcomes[o as usize].get()
    }

    /// Bytes relayed in both directions so far (`proxyBytes`).
    pub fn proxy_bytes(&self) -> u64 {
        self.bytes_client_to_chrome.get() + self.bytes_chrome_to_client.get()
    }

    /// The OpenMetrics text exposition ([`EXPOSITION_CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        if self.pool_warmup.get() > 0.0 {
            encode(&[&self.registry, &self.pool_registry])
        } else {
            encode(&[&self.registry])
        }
    }
}

/// What a metrics listener serves: a registry's OpenMetrics text.
pub trait Exposition: Send + Sync + 'static {
    /// The OpenMetrics text exposition ([`EXPOSITION_CONTENT_TYPE`]).
    fn render(&self) -> String;
}

impl Exposition for Metrics {
    fn render(&self) -> String {
        Metrics::render(self)
    }
}

/// Metrics scrapes answered at the same time, at most; a connection beyond it waits for a slot.
const MAX_SCRAPES: usize = 8;

/// Time a scraper has to send its request head.
const SCRAPE_HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// Largest request head a scraper may send (hyper's read buffer; beyond it the connection
/// is refused with 431).
const SCRAPE_MAX_HEAD: usize = 8 * 1024;

/// Serves `GET /metrics` on `listener` until `cancel` fires; any other request gets 404.
/// Connections are served one request each, at most [`MAX_SCRAPES`] at once, as tasks of
/// `tracker` (so shutdown waits for them).
pub async fn serve_metrics(
    listener: TcpListener,
    metrics: Arc<dyn Exposition>,
    cancel: CancellationToken,
    tracker: TaskTracker,
) {
    let slots = Arc::new(Semaphore::new(MAX_SCRAPES));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // EMFILE and friends: back off briefly instead of spinning.
                    debug!(error = %e, "metrics accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = cancel.cancelled() => return,
        };
        let metrics = metrics.clone();
        let cancel = cancel.clone();
        tracker.spawn(async move {
            let service = service_fn(move |req| {
                std::future::ready(Ok::<_, Infallible>(scrape(&req, metrics.as_ref())))
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(SCRAPE_HEADER_TIMEOUT)
                .max_buf_size(SCRAPE_MAX_HEAD)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            tokio::select! {
                r = conn => if let Err(e) = r { debug!(error = %e, "metrics connection ended") },
                () = cancel.cancelled() => {}
            }
            drop(slot);
        });
    }
}

/// The answer to one metrics request.
fn scrape<B>(req: &Request<B>, metrics: &dyn Exposition) -> Response<Full<Bytes>> {
    let (status, content_type, body) =
        if req.method() == Method::GET && req.uri().path() == "/metrics" {
            (StatusCode::OK, EXPOSITION_CONTENT_TYPE, metrics.render())
        } else {
            (
                StatusCode::NOT_FOUND,
                "text/plain",
                "not found\n".to_owned(),
            )
        };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_has_every_series() {
        let m = Metrics::new();
        m.outcome(ConnectionEnd::Relayed);
        m.refusal(TokenError::Expired);
        m.bytes_client_to_chrome.inc_by(5);
        let text = m.render();
        assert!(text.contains("wallcrawler_proxy_connections_total{outcome=\"relayed\"} 1"));
        assert!(text.contains("wallcrawler_proxy_auth_refusals_total{reason=\"expired\"} 1"));
        assert!(text.contains("wallcrawler_proxy_bytes_total{direction=\"client_to_chrome\"} 5"));
        assert_eq!(m.proxy_bytes(), 5);
        assert!(text.ends_with("# EOF\n"), "{text}");
        // The pool gauges appear once a warm-up was measured.
        assert!(!text.contains("wallcrawler_pool_warmup_seconds"), "{text}");
        m.pool_warmup.set(1.5);
        assert!(m.render().contains("wallcrawler_pool_warmup_seconds 1.5"));
    }

    #[test]
    fn outcomes_are_indexed_by_their_discriminant() {
        for (i, o) in ConnectionEnd::ALL.iter().enumerate() {
            assert_eq!(*o as usize, i, "{o:?}");
        }
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
