//! The authenticating CDP proxy: listener, per-connection handshake, routing, discovery
//! rewriting, relay and health.
//!
//! Per connection: admitted as *pending* ([`admission`]: its own budget, per client address,
//! an older pending connection evicted when it is full) → read the request head (size limit,
//! deadline) → route → authenticate → check Chrome is ready → leave the pending budget →
//! either answer a `/json/*` request from Chrome with URLs rewritten,
//! or dial Chrome's WebSocket *before* answering the client's upgrade, hand Chrome's 101 back,
//! and relay bytes until either side closes; only these upgraded connections hold one of the
//! `MAX_CONNECTIONS` slots. Toward Chrome the `Host` is Chrome's loopback
//! address, `Origin` and credentials are dropped, and `Sec-WebSocket-Extensions` is removed so
//! no compression hides the client's commands from the `Browser.close` inspector.

pub mod admission;
pub mod discovery;
pub mod http;
pub mod inspect;
pub mod relay;
pub mod route;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, debug, error, info, warn};

use crate::auth::{self, AuthError, Authenticator, Presented};
use crate::config::ProxyTuning;
use crate::telemetry::{Metrics, Outcome};
use crate::upstream::{self, Upstream, UpstreamError, UpstreamState};
use admission::{Admission, Pending, PendingLimits, PendingSlot};
use http::{HeadError, RequestHead, simple_response};
use route::{Route, RouteError};

/// Largest request head accepted (431 beyond).
pub const MAX_HEAD_BYTES: usize = 16 * 1024;

/// Evicted connections answered 503 at the same time, at most; beyond it an evicted connection
/// is closed after a best-effort answer, without waiting.
pub const REJECT_BACKLOG: usize = 256;

/// Default budget of connections that have not authenticated yet.
pub const DEFAULT_MAX_PENDING: usize = 256;

/// Default share of that budget one client address may hold.
pub const DEFAULT_MAX_PENDING_PER_ADDRESS: usize = 32;

/// Default time a client has to send its request head.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(3);

/// Limits of the proxy.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Upgraded (authenticated) connections at the same time.
    pub max_connections: usize,
    /// Connections not authenticated yet, and how many of them one address may hold.
    pub pending: PendingLimits,
    pub header_timeout: Duration,
    pub max_head_bytes: usize,
    /// Connecting to Chrome and getting its answer to the upgrade or a `/json` request.
    pub upstream_timeout: Duration,
    /// Withhold a client's `Browser.close` and tell the session owner (who closes Chrome
    /// itself, cleanly). Off in `proxy` mode, where the browser is not ours to manage.
    pub intercept_browser_close: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 4096,
            pending: PendingLimits {
                max_pending: DEFAULT_MAX_PENDING,
                max_per_address: DEFAULT_MAX_PENDING_PER_ADDRESS,
            },
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            max_head_bytes: MAX_HEAD_BYTES,
            upstream_timeout: Duration::from_secs(10),
            intercept_browser_close: true,
        }
    }
}

impl Limits {
    /// The limits an operator configured; the rest default.
    pub fn from_tuning(t: &ProxyTuning) -> Self {
        Self {
            max_connections: t.max_connections,
            pending: PendingLimits {
                max_pending: t.max_pending,
                max_per_address: t.max_pending_per_address,
            },
            header_timeout: t.header_timeout,
            ..Self::default()
        }
    }
}

/// Signals from the proxy to whoever runs the session.
#[derive(Default)]
pub struct ProxyEvents {
    /// Notified when a client's `Browser.close` was withheld: end the session normally.
    pub browser_close: Notify,
}

/// Upgraded clients, as the session's idle timer follows them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Clients {
    /// Connected now.
    pub connected: usize,
    /// Whether any client has upgraded since the proxy started (a client that came and went
    /// between two looks of a watcher still counts).
    pub ever: bool,
}

/// The proxy's shared state.
pub struct Proxy {
    auth: Authenticator,
    upstream: watch::Receiver<UpstreamState>,
    metrics: Arc<Metrics>,
    /// Upgraded clients connected now. The proxy owns the sender; the lifecycle (idle timer)
    /// subscribes.
    clients: watch::Sender<Clients>,
    events: Arc<ProxyEvents>,
    limits: Limits,
    /// One per upgraded connection (`MAX_CONNECTIONS`).
    permits: Arc<Semaphore>,
    /// Connections not authenticated yet.
    pending: Arc<Pending>,
    /// Bounds the evicted connections being answered 503 (each lingers up to a second);
    /// beyond it an evicted connection is closed after a best-effort answer.
    reject_permits: Arc<Semaphore>,
    /// The thread that relays upgraded connections.
    relays: relay::RelayLoop,
}

impl Proxy {
    pub fn new(
        auth: Authenticator,
        upstream: watch::Receiver<UpstreamState>,
        metrics: Arc<Metrics>,
        limits: Limits,
    ) -> std::io::Result<Arc<Self>> {
        Ok(Arc::new(Self {
            auth,
            upstream,
            metrics,
            clients: watch::Sender::new(Clients::default()),
            events: Arc::new(ProxyEvents::default()),
            permits: Arc::new(Semaphore::new(limits.max_connections)),
            pending: Pending::new(limits.pending),
            reject_permits: Arc::new(Semaphore::new(REJECT_BACKLOG)),
            limits,
            relays: relay::RelayLoop::start()?,
        }))
    }

    /// Follows the upgraded clients.
    pub fn clients(&self) -> watch::Receiver<Clients> {
        self.clients.subscribe()
    }

    pub fn events(&self) -> Arc<ProxyEvents> {
        self.events.clone()
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Binds the authenticator to the session a pool controller was claimed for (once).
    pub fn bind_session(&self, session_id: String, project_id: Option<String>) -> bool {
        self.auth.bind(session_id, project_id)
    }

    /// Ends every relay (shutdown).
    pub fn close_all_relays(&self) {
        self.relays.cancel_all();
    }

    fn ready(&self) -> bool {
        matches!(*self.upstream.borrow(), UpstreamState::Ready(_)) && self.auth.keys_loaded()
    }

    /// Accepts connections until `stop` fires. Connection tasks are spawned on `tracker`.
    pub async fn serve(
        self: Arc<Self>,
        listener: TcpListener,
        stop: CancellationToken,
        tracker: TaskTracker,
    ) {
        loop {
            let (stream, peer) = tokio::select! {
                r = listener.accept() => match r {
                    Ok(c) => c,
                    Err(e) => {
                        // EMFILE and friends: back off briefly instead of spinning.
                        warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                () = stop.cancelled() => return,
            };
            let _ = stream.set_nodelay(true);
            let (slot, admission) = self.pending.admit(peer.ip());
            if admission != Admission::Free {
                self.metrics.outcome(Outcome::AtCapacity);
                debug!(client.addr = %peer, ?admission, "pending budget full: evicted an older unauthenticated connection");
            }
            let this = self.clone();
            let span = tracing::info_span!("conn", session.id = %self.auth.session_id(), client.addr = %peer);
            tracker.spawn(
                async move {
                    this.metrics
                        .connections_open
                        .fetch_add(1, Ordering::Relaxed);
                    this.handle(stream, slot).await;
                    this.metrics
                        .connections_open
                        .fetch_sub(1, Ordering::Relaxed);
                }
                .instrument(span),
            );
        }
    }

    /// Serves one connection. Until it is authenticated (or answered), it holds `slot` in the
    /// pending budget and is closed with a 503 as soon as it is evicted from it.
    async fn handle(&self, mut stream: TcpStream, slot: PendingSlot) {
        let local = stream.local_addr().ok();
        let step = tokio::select! {
            step = self.admit_request(&mut stream) => step,
            () = slot.evicted() => Step::Evicted,
        };
        let admitted = match step {
            Step::Proceed(a) => a,
            Step::Answer(outcome, response) => {
                self.metrics.outcome(outcome);
                // The answer lingers (draining the client) only while nobody needs the slot.
                tokio::select! {
                    () = respond_and_close(stream, response) => {}
                    () = slot.evicted() => {}
                }
                return;
            }
            Step::Gone => return,
            Step::Evicted => {
                drop(slot);
                return self.refuse_evicted(stream).await;
            }
        };
        drop(slot);
        let Admitted {
            head,
            route,
            presented,
            early,
            up,
        } = admitted;
        if matches!(route, Route::BrowserRoot | Route::Devtools(_)) {
            let Ok(permit) = self.permits.clone().try_acquire_owned() else {
                debug!("connection cap reached");
                return self
                    .finish(
                        stream,
                        Outcome::AtCapacity,
                        simple_response(503, &[("Retry-After", "1")], "too many connections\n"),
                    )
                    .await;
            };
            self.upgrade(stream, &head, &route, &early, &up).await;
            drop(permit);
        } else {
            let resp = self.json(&head, &route, &presented, &up, local).await;
            let outcome = if resp.starts_with(b"HTTP/1.1 502") {
                Outcome::UpstreamFailed
            } else {
                Outcome::Http
            };
            self.finish(stream, outcome, resp).await;
        }
    }

    /// An evicted connection: a 503 and a close. Only [`REJECT_BACKLOG`] of them linger to
    /// drain the client; the others get a best-effort answer and are closed at once.
    async fn refuse_evicted(&self, stream: TcpStream) {
        let response = simple_response(503, &[("Retry-After", "1")], "too many connections\n");
        match self.reject_permits.clone().try_acquire_owned() {
            Ok(permit) => {
                respond_and_close(stream, response).await;
                drop(permit);
            }
            Err(_) => {
                let _ = stream.try_write(&response);
            }
        }
    }

    /// The unauthenticated part of a connection: its head, route, credential and Chrome's
    /// readiness.
    async fn admit_request(&self, stream: &mut TcpStream) -> Step {
        let mut buf = Vec::with_capacity(2048);
        let read = http::read_request_head(
            stream,
            &mut buf,
            self.limits.max_head_bytes,
            self.limits.header_timeout,
        )
        .await;
        let (head, used) = match read {
            Ok(h) => h,
            Err(e) => {
                let (status, outcome, body) = match e {
                    HeadError::Timeout => (408, Outcome::HeaderTimeout, "request timeout\n"),
                    HeadError::TooLarge => {
                        (431, Outcome::HeadersTooLarge, "request headers too large\n")
                    }
                    HeadError::Malformed => (400, Outcome::BadRequest, "bad request\n"),
                    HeadError::Closed | HeadError::Io(_) => {
                        self.metrics.outcome(Outcome::ClientGone);
                        return Step::Gone;
                    }
                };
                debug!(status, "refused before routing: {e}");
                return Step::Answer(outcome, simple_response(status, &[], body));
            }
        };
        let early = buf.split_off(used);
        drop(buf);
        let wants_upgrade = head.header_values("upgrade").next().is_some();
        let route = match route::route(&head.method, head.path(), wants_upgrade) {
            Ok(r) => r,
            Err(RouteError::NotFound) => {
                return Step::Answer(Outcome::NotFound, simple_response(404, &[], "not found\n"));
            }
            Err(RouteError::MethodNotAllowed) => {
                return Step::Answer(
                    Outcome::NotFound,
                    simple_response(405, &[], "method not allowed\n"),
                );
            }
        };
        if route == Route::Health {
            let warm =
                matches!(*self.upstream.borrow(), UpstreamState::Warm) && self.auth.keys_loaded();
            let (status, body) = if self.ready() {
                (200, "{\"status\":\"ok\"}\n")
            } else if warm {
                (200, "{\"status\":\"warm\"}\n")
            } else {
                (503, "{\"status\":\"unavailable\"}\n")
            };
            let resp = http::body_response(status, "application/json", body.as_bytes());
            return Step::Answer(Outcome::Health, resp);
        }
        let is_ws = matches!(route, Route::BrowserRoot | Route::Devtools(_));
        if is_ws && !is_valid_upgrade(&head) {
            return Step::Answer(
                Outcome::BadRequest,
                simple_response(400, &[], "bad websocket upgrade\n"),
            );
        }
        let presented = match self.authenticate(&head, route != Route::JsonNew).await {
            Ok(p) => p,
            Err(AuthError::Token(e)) => {
                self.metrics.refusal(e);
                info!(reason = e.reason(), "credential refused: {e}");
                return Step::Answer(
                    Outcome::Unauthorized,
                    simple_response(401, &[], "unauthorized\n"),
                );
            }
            Err(AuthError::KeysUnavailable | AuthError::Unclaimed) => {
                return Step::Answer(
                    Outcome::NotReady,
                    simple_response(503, &[("Retry-After", "1")], "not ready\n"),
                );
            }
        };
        let up = match &*self.upstream.borrow() {
            UpstreamState::Ready(u) => Some(u.clone()),
            _ => None,
        };
        let Some(up) = up else {
            return Step::Answer(
                Outcome::NotReady,
                simple_response(503, &[("Retry-After", "1")], "browser not ready\n"),
            );
        };
        Step::Proceed(Admitted {
            head,
            route,
            presented,
            early,
            up,
        })
    }

    async fn authenticate(
        &self,
        head: &RequestHead,
        use_query: bool,
    ) -> Result<Presented, AuthError> {
        let presented = auth::extract(head, use_query)?;
        self.auth.check(&presented).await?;
        Ok(presented)
    }

    async fn finish(&self, stream: TcpStream, outcome: Outcome, response: Vec<u8>) {
        self.metrics.outcome(outcome);
        respond_and_close(stream, response).await;
    }

    async fn json(
        &self,
        head: &RequestHead,
        route: &Route,
        presented: &Presented,
        up: &Upstream,
        local: Option<SocketAddr>,
    ) -> Vec<u8> {
        let authority = match head.header("host") {
            Some(h) if discovery::is_valid_authority(h) => h.to_owned(),
            Some(_) => return simple_response(400, &[], "bad host header\n"),
            None => local
                .map(|a| a.to_string())
                .unwrap_or_else(|| "127.0.0.1".to_owned()),
        };
        let (target, rewrite, token) = match route {
            Route::JsonVersion => ("/json/version".to_owned(), true, presented.query.as_deref()),
            Route::JsonList => ("/json/list".to_owned(), true, presented.query.as_deref()),
            Route::JsonNew => (
                match head.query() {
                    Some(q) => format!("/json/new?{q}"),
                    None => "/json/new".to_owned(),
                },
                true,
                None,
            ),
            Route::JsonPassthrough(path) => (
                match head.query().and_then(discovery::strip_token_param) {
                    Some(q) => format!("{path}?{q}"),
                    None => path.clone(),
                },
                false,
                None,
            ),
            _ => unreachable!("websocket routes are upgraded"),
        };
        // The route allows only GET and PUT.
        let method = ::http::Method::from_bytes(head.method.as_bytes()).unwrap_or_default();
        let answer =
            match upstream::http_request(up.addr, method, &target, self.limits.upstream_timeout)
                .await
            {
                Ok(a) => a,
                Err(e) => {
                    warn!(error = %e, "discovery request to chrome failed");
                    return simple_response(502, &[], "bad gateway\n");
                }
            };
        let content_type = answer
            .content_type
            .as_ref()
            .and_then(|v| v.to_str().ok())
            .unwrap_or("application/json; charset=UTF-8");
        if rewrite && answer.status == 200 {
            match discovery::rewrite_discovery(&answer.body, &authority, token) {
                Ok(body) => http::body_response(200, "application/json; charset=UTF-8", &body),
                Err(_) => {
                    warn!("chrome sent a discovery answer that is not JSON");
                    simple_response(502, &[], "bad gateway\n")
                }
            }
        } else {
            http::body_response(answer.status.as_u16(), content_type, &answer.body)
        }
    }

    async fn upgrade(
        &self,
        mut client: TcpStream,
        head: &RequestHead,
        route: &Route,
        early: &[u8],
        up: &Upstream,
    ) {
        let started = Instant::now();
        let path = match route {
            Route::BrowserRoot => match up.browser_path(self.limits.upstream_timeout).await {
                Ok(p) => p,
                Err(e) => {
                    warn!(error = %e, "could not learn the browser target");
                    return self
                        .finish(
                            client,
                            Outcome::UpstreamFailed,
                            simple_response(502, &[], "bad gateway\n"),
                        )
                        .await;
                }
            },
            Route::Devtools(p) => p.clone(),
            _ => unreachable!("only websocket routes are upgraded"),
        };
        let dialled = tokio::time::timeout(
            self.limits.upstream_timeout,
            dial_upgrade(up.addr, &path, head),
        )
        .await;
        let (chrome, response_head, chrome_extra) = match dialled {
            Ok(Ok(x)) => x,
            Ok(Err(DialError::Refused(status))) => {
                if *route == Route::BrowserRoot {
                    up.forget_browser_path();
                }
                info!(chrome.status = status, "chrome refused the upgrade");
                let (code, body) = if status == 404 {
                    (404, "no such target\n")
                } else {
                    (502, "bad gateway\n")
                };
                return self
                    .finish(
                        client,
                        Outcome::UpstreamFailed,
                        simple_response(code, &[], body),
                    )
                    .await;
            }
            Ok(Err(DialError::Upstream(e))) => {
                error!(error = %e, "dialling chrome failed");
                return self
                    .finish(
                        client,
                        Outcome::UpstreamFailed,
                        simple_response(502, &[], "bad gateway\n"),
                    )
                    .await;
            }
            Err(_) => {
                error!("dialling chrome timed out");
                return self
                    .finish(
                        client,
                        Outcome::UpstreamFailed,
                        simple_response(502, &[], "bad gateway\n"),
                    )
                    .await;
            }
        };
        if let Err(e) = client.write_all(&response_head).await {
            debug!(error = %e, "client left during the upgrade");
            self.metrics.outcome(Outcome::ClientGone);
            return;
        }
        let _guard = ClientGuard::new(&self.clients, &self.metrics);
        let events = self.events.clone();
        let span = tracing::Span::current();
        let on_close = move || {
            span.in_scope(|| info!("client sent Browser.close; ending the session normally"));
            events.browser_close.notify_one();
        };
        // The relay thread drives the sockets from here on, outside the runtime.
        let (client, chrome) = match (client.into_std(), chrome.into_std()) {
            (Ok(c), Ok(u)) => (c, u),
            (Err(e), _) | (_, Err(e)) => {
                error!(error = %e, "could not hand the connection to the relay thread");
                self.metrics.outcome(Outcome::ClientGone);
                return;
            }
        };
        let job = relay::Job {
            client,
            chrome,
            client_prefix: early.to_vec(),
            chrome_prefix: chrome_extra,
            inspector: self
                .limits
                .intercept_browser_close
                .then(inspect::Inspector::default),
            on_browser_close: Box::new(on_close),
            metrics: self.metrics.clone(),
        };
        let outcome = self.relays.relay(job).await;
        self.metrics.outcome(Outcome::Relayed);
        let duration_ms = started.elapsed().as_millis() as u64;
        let end = match &outcome.end {
            relay::RelayEnd::ClientClosed => "client_closed".to_owned(),
            relay::RelayEnd::ChromeClosed => "chrome_closed".to_owned(),
            relay::RelayEnd::ClientError(e) => format!("client_error: {e}"),
            relay::RelayEnd::ChromeError(e) => format!("chrome_error: {e}"),
            relay::RelayEnd::Cancelled => "shutdown".to_owned(),
        };
        info!(
            bytes.client_to_chrome = outcome.client_to_chrome,
            bytes.chrome_to_client = outcome.chrome_to_client,
            duration_ms,
            end = %end,
            "cdp connection closed"
        );
    }
}

/// Where the unauthenticated part of a connection ended.
enum Step {
    /// Authenticated, Chrome ready: serve it.
    Proceed(Admitted),
    /// Answer this and close.
    Answer(Outcome, Vec<u8>),
    /// The client left.
    Gone,
    /// Evicted from the pending budget.
    Evicted,
}

/// An authenticated request and the Chrome it goes to.
struct Admitted {
    head: RequestHead,
    route: Route,
    presented: Presented,
    /// Bytes the client sent after its head.
    early: Vec<u8>,
    up: Arc<Upstream>,
}

/// Counts an upgraded client for as long as it lives.
struct ClientGuard<'a> {
    clients: &'a watch::Sender<Clients>,
    metrics: &'a Metrics,
}

impl<'a> ClientGuard<'a> {
    fn new(clients: &'a watch::Sender<Clients>, metrics: &'a Metrics) -> Self {
        clients.send_modify(|c| {
            c.connected += 1;
            c.ever = true;
        });
        metrics.clients_active.fetch_add(1, Ordering::Relaxed);
        Self { clients, metrics }
    }
}

impl Drop for ClientGuard<'_> {
    fn drop(&mut self) {
        self.metrics.clients_active.fetch_sub(1, Ordering::Relaxed);
        self.clients
            .send_modify(|c| c.connected = c.connected.saturating_sub(1));
    }
}

/// A WebSocket upgrade request as RFC 6455 §4.2.1 requires.
fn is_valid_upgrade(head: &RequestHead) -> bool {
    head.method == "GET"
        && head.version == 1
        && head.header_has_token("upgrade", "websocket")
        && head.header_has_token("connection", "upgrade")
        && head
            .header("sec-websocket-key")
            .is_some_and(|k| !k.is_empty())
        && head.header("sec-websocket-version") == Some("13")
}

/// The client's upgrade request as sent to Chrome: an allow-list of exactly what the WebSocket
/// handshake needs (RFC 6455 §4.1), nothing else the client sent. `Host` is Chrome's own
/// loopback address; `Upgrade`, `Connection` and `Sec-WebSocket-Version` are written in their
/// canonical form ([`is_valid_upgrade`] checked the client's); `Sec-WebSocket-Key` is the
/// client's, since its `Sec-WebSocket-Accept` comes back in Chrome's answer. So no credential,
/// `Origin`, extension offer (the inspector reads uncompressed frames), subprotocol, body
/// framing (`Content-Length`, `Transfer-Encoding`) or forwarding header reaches Chrome.
pub fn upstream_request(addr: SocketAddr, path: &str, head: &RequestHead) -> Vec<u8> {
    let key = head.header("sec-websocket-key").unwrap_or_default();
    format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    .into_bytes()
}

enum DialError {
    Upstream(UpstreamError),
    Refused(u16),
}

/// Connects to Chrome and performs the upgrade. Returns the socket, Chrome's 101 head, and any
/// bytes Chrome sent after it.
async fn dial_upgrade(
    addr: SocketAddr,
    path: &str,
    head: &RequestHead,
) -> Result<(TcpStream, Vec<u8>, Vec<u8>), DialError> {
    let mut chrome = TcpStream::connect(addr)
        .await
        .map_err(|e| DialError::Upstream(UpstreamError::Connect(e)))?;
    let _ = chrome.set_nodelay(true);
    chrome
        .write_all(&upstream_request(addr, path, head))
        .await
        .map_err(|e| DialError::Upstream(UpstreamError::Io(e)))?;
    let mut buf = Vec::with_capacity(1024);
    loop {
        let mut chunk = [0u8; 2048];
        let n = chrome
            .read(&mut chunk)
            .await
            .map_err(|e| DialError::Upstream(UpstreamError::Io(e)))?;
        if n == 0 {
            return Err(DialError::Upstream(UpstreamError::Malformed));
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut resp = httparse::Response::new(&mut headers);
        match resp.parse(&buf) {
            Ok(httparse::Status::Complete(len)) => {
                let code = resp.code.unwrap_or(0);
                if code != 101 {
                    return Err(DialError::Refused(code));
                }
                let extra = buf.split_off(len);
                return Ok((chrome, buf, extra));
            }
            Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD_BYTES => {}
            _ => return Err(DialError::Upstream(UpstreamError::Malformed)),
        }
    }
}

/// Writes `response`, half-closes, and drains what the client still sends for a moment so the
/// answer is not lost to a reset.
pub async fn respond_and_close(mut stream: TcpStream, response: Vec<u8>) {
    if stream.write_all(&response).await.is_err() {
        return;
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_request_rewrites_host_and_drops_credentials() {
        let raw = b"GET /?signingKey=secret HTTP/1.1\r\nHost: browser.example.test:9223\r\nOrigin: https://evil\r\nAuthorization: Bearer x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: k==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Extensions: permessage-deflate\r\n\r\n";
        let (head, _) = http::parse_request_head(raw, 65536).unwrap().unwrap();
        assert!(is_valid_upgrade(&head));
        let out = String::from_utf8(upstream_request(
            "127.0.0.1:9222".parse().unwrap(),
            "/devtools/browser/x",
            &head,
        ))
        .unwrap();
        assert!(out.starts_with("GET /devtools/browser/x HTTP/1.1\r\nHost: 127.0.0.1:9222\r\n"));
        for gone in [
            "secret",
            "Origin",
            "Authorization",
            "permessage-deflate",
            "example.test",
        ] {
            assert!(!out.contains(gone), "{gone} leaked into {out}");
        }
        assert!(out.contains("Sec-WebSocket-Key: k==\r\n"));
        assert!(out.ends_with("\r\n\r\n"));
    }

    #[test]
    fn upstream_request_forwards_only_the_handshake() {
        let raw = b"GET /devtools/page/P HTTP/1.1\r\nHost: h:1\r\nupgrade: WebSocket\r\nConnection: keep-alive, Upgrade\r\nSec-WebSocket-Key: k==\r\nSec-WebSocket-Version: 13\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\nX-Forwarded-For: 10.9.9.9\r\nSec-WebSocket-Protocol: evil\r\nUser-Agent: ua\r\n\r\n";
        let (head, _) = http::parse_request_head(raw, 65536).unwrap().unwrap();
        assert!(is_valid_upgrade(&head));
        let out = String::from_utf8(upstream_request(
            "127.0.0.1:9222".parse().unwrap(),
            "/devtools/page/P",
            &head,
        ))
        .unwrap();
        assert_eq!(
            out,
            "GET /devtools/page/P HTTP/1.1\r\nHost: 127.0.0.1:9222\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: k==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        );
    }

    #[test]
    fn upgrade_validation() {
        let ok = "GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\nSec-WebSocket-Key: a\r\nSec-WebSocket-Version: 13\r\n\r\n";
        let (h, _) = http::parse_request_head(ok.as_bytes(), 65536)
            .unwrap()
            .unwrap();
        assert!(is_valid_upgrade(&h));
        for bad in [
            ok.replace("Sec-WebSocket-Key: a\r\n", ""),
            ok.replace("13", "8"),
            ok.replace("HTTP/1.1", "HTTP/1.0"),
        ] {
            let (h, _) = http::parse_request_head(bad.as_bytes(), 65536)
                .unwrap()
                .unwrap();
            assert!(!is_valid_upgrade(&h), "{bad}");
        }
    }
}
