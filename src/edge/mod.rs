//! What every listener shares: the proxy (a task's CDP door, `proxy/`) and the connect
//! gateway (`gateway/`) are siblings on top of this.
//!
//! Per connection, on either listener: [`accept`] (the PROXY v2 header of a trusted peer,
//! [`proxy_header`]) → [`admission`] (the pending budget) → the connection driver
//! ([`exchange`]: the request head read by hyper's HTTP/1.1 server as [`server_builder`]
//! configures it, within the header deadline; a path-less target mended by [`origin_form`])
//! → the head ([`http`]) and the upgrade check ([`is_valid_upgrade`]) → [`route`] → a
//! [`refusal`] or an upgrade → the bytes relayed: plain sockets on the relay thread
//! ([`relay`]), a TLS client on the runtime ([`tls_copy`]; [`stream`] names either).
//!
//! Two relay paths, not one: the relay thread moves bytes between plain sockets with its own
//! `epoll` loop (per message `epoll_wait`, `recv`, `send`, no task wake-up: see [`relay`]) and
//! watches the client's CDP messages through a [`relay::Watch`]; a TLS client's bytes must be
//! decrypted and encrypted with its session's keys, which `rustls` does on the runtime's
//! streams, so they are copied there ([`tls_copy`]). One path would put the plain relay on the
//! runtime (the cost the relay thread was built to remove) or TLS on the relay thread (a second
//! TLS stack driven by hand).

pub mod accept;
pub mod admission;
pub mod exchange;
pub mod http;
pub(crate) mod origin_form;
pub mod proxy_header;
pub mod refusal;
pub mod relay;
pub mod route;
pub mod stream;
pub(crate) mod tls_copy;
pub mod ws;

use std::sync::Arc;
use std::time::Duration;

use ::http::{Method, header};
use hyper::server::conn::http1;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::file_rules::FileRules;
use admission::PendingLimits;
use http::RequestHead;
use proxy_header::TrustedNetworks;

/// Largest request head accepted (431 beyond).
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

/// Evicted connections answered 503 at the same time, at most; beyond it an evicted connection
/// is closed after a best-effort answer, without waiting.
pub const REJECT_BACKLOG: usize = 256;

/// Default cap on upgraded (authenticated) connections (`MAX_CONNECTIONS`).
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;

/// Default budget of connections that have not authenticated yet.
pub const DEFAULT_MAX_PENDING: usize = 256;

/// Default share of that budget one client address may hold.
pub const DEFAULT_MAX_PENDING_PER_ADDRESS: usize = 32;

/// Default time a pending connection must have been silent before it can be evicted.
pub const DEFAULT_PENDING_MIN_AGE: Duration = admission::DEFAULT_MIN_AGE;

/// Default silence on an upgraded connection after which the client is pinged: well under the
/// 350 s after which an AWS Network Load Balancer drops an idle connection without a word.
pub const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(60);

/// Default time a client has to send its request head.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(3);

/// Limits of the proxy.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Upgraded (authenticated) connections at the same time.
    pub max_connections: usize,
    /// Connections not authenticated yet, and how many of them one address may hold.
    pub pending: PendingLimits,
    /// How long a client has to send its request head before it is answered 408.
    pub header_timeout: Duration,
    /// Cap on a request head's size in bytes (hyper's header size limit).
    pub max_head_bytes: usize,
    /// Connecting to Chrome and getting its answer to the upgrade or a `/json` request.
    pub upstream_timeout: Duration,
    /// Withhold a client's `Browser.close` and tell the session owner (who closes Chrome
    /// itself, cleanly). Off in `proxy` mode, where the browser is not ours to manage.
    pub intercept_browser_close: bool,
    /// The only directories a client's commands may name files in (with the inspector on:
    /// see the proxy's guard). Default: none, so every path is refused.
    pub files: Arc<FileRules>,
    /// Peers whose connections may start with a PROXY protocol v2 header
    /// (`TRUSTED_PROXY_NETWORKS`).
    pub trusted_proxies: TrustedNetworks,
    /// Who may embed the viewer's page: its CSP's `frame-ancestors` (`VIEWER_FRAME_ANCESTORS`).
    pub viewer_frame_ancestors: String,
    /// Ping an upgraded client after this long without traffic either way
    /// (`CDP_KEEPALIVE_SECONDS`; `None`: off). See [`relay`].
    pub keepalive: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            pending: PendingLimits {
                max_pending: DEFAULT_MAX_PENDING,
                max_per_address: DEFAULT_MAX_PENDING_PER_ADDRESS,
                min_age: DEFAULT_PENDING_MIN_AGE,
            },
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            max_head_bytes: MAX_HEAD_BYTES,
            upstream_timeout: Duration::from_secs(10),
            intercept_browser_close: true,
            files: Arc::default(),
            trusted_proxies: TrustedNetworks::default(),
            viewer_frame_ancestors: crate::viewer::page::DEFAULT_FRAME_ANCESTORS.to_owned(),
            keepalive: Some(DEFAULT_KEEPALIVE),
        }
    }
}

/// Hyper's HTTP/1.1 server as the proxy configures it: the request head bounded in size and
/// header count (hyper answers 431 beyond them, 400 to what it cannot parse) and upgrades. The
/// head's deadline is the connection driver's own (it answers 408, which hyper's timer would
/// not): a second, hyper-side timer per connection cost connection setup about 10 % in
/// `scripts/bench/compare.sh` (p50 227 µs against 204 µs before hyper), so there is none.
/// One request per connection: every answer but a 101 says `Connection: close` (keep-alive is
/// not disabled in the builder, since hyper would then add `close` to the 101's `Connection:
/// Upgrade`, which WebSocket clients refuse).
pub(crate) fn server_builder(limits: &Limits) -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder
        // Hyper's read buffer cannot be smaller than 8 KiB.
        .max_buf_size(limits.max_head_bytes.max(8192))
        .max_header_size(limits.max_head_bytes)
        .max_headers(http::MAX_HEADERS)
        .auto_date_header(false);
    builder
}

/// A WebSocket upgrade request as RFC 6455 §4.2.1 requires.
pub(crate) fn is_valid_upgrade(head: &RequestHead) -> bool {
    head.method == Method::GET
        && head.version == 1
        && head.header_has_token(header::UPGRADE, "websocket")
        && head.header_has_token(header::CONNECTION, "upgrade")
        && head
            .header(header::SEC_WEBSOCKET_KEY)
            .is_some_and(|k| !k.is_empty())
        && head.header(header::SEC_WEBSOCKET_VERSION) == Some("13")
}

/// Writes `response`, half-closes, and drains what the client still sends for a moment so the
/// answer is not lost to a reset.
pub(crate) async fn respond_and_close<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    response: Vec<u8>,
) {
    if stream.write_all(&response).await.is_err() {
        return;
    }
    linger(stream).await;
}

/// Half-closes an answered connection and drains what the client still sends, for a moment
/// (1 s, 256 KiB), so the answer is not lost to a reset.
pub(crate) async fn linger<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S) {
    let _ = stream.shutdown().await;
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let mut sink = [0u8; 4096];
        let mut total = 0usize;
        while total < 256 * 1024 {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n,
            }
        }
    })
    .await;
}
