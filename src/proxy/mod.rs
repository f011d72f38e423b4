//! The authenticating CDP proxy: listener, per-connection handshake, routing, discovery
//! rewriting, relay and health.
//!
//! Per connection: admitted as *pending* ([`admission`]: its own budget, per client address,
//! kept by evicting connections silent for a minimum age; younger ones are admitted over it up
//! to a hard ceiling) → hyper's HTTP/1.1 server reads the request head (size and header-count
//! limits, deadline) → route → authenticate → check Chrome is ready → leave the pending budget
//! → either answer a `/json/*` request from Chrome with URLs rewritten, or dial Chrome's
//! WebSocket *before* answering the client's upgrade, take the client's socket back from hyper
//! (`into_parts`, with any bytes it already read), write Chrome's 101 as Chrome sent it and
//! relay bytes on the relay thread until either side closes. Hyper writes every other answer;
//! the 101 does not go through hyper's upgrade path (`Upgraded::downcast`), which cost about
//! 2 µs more per connection setup (p50, `wsload compare` of the two builds interleaved) for no
//! gain: the bytes are Chrome's either way. Only these upgraded connections hold one of the
//! `MAX_CONNECTIONS` slots. Every refusal is a [`Refusal`]. Toward Chrome the `Host` is
//! Chrome's loopback address, `Origin` and credentials are dropped, and
//! `Sec-WebSocket-Extensions` is removed so no compression hides the client's commands from the
//! inspector ([`inspect`]: `Browser.close`, and the file rules of [`guard`]; `/json/new` with a
//! local file URL is refused the same way). A path-less request target (`GET ?q`, which some
//! clients send for a URL without `/`) is read as `/?q` before hyper parses it (`origin_form`).

pub mod discovery;
mod frontend;
pub mod guard;
pub mod inspect;
mod live;
pub mod one_page;

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::http::{HeaderValue, Request, Response, StatusCode, header};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use nix::sys::socket::SockaddrStorage;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, error, info};

use crate::auth::{AuthError, Authenticator, Presented};
use crate::edge::accept::{self, Unread, read_source};
use crate::edge::admission::{Admission, Pending, PendingSlot};
use crate::edge::exchange::{self, Driven, Exchange, Phase};
use crate::edge::http::{self, RequestHead};
use crate::edge::proxy_header::Source;
use crate::edge::refusal::{self, Refusal};
use crate::edge::route::{self, Route, RouteError};
use crate::edge::{
    Limits, MAX_HEAD_BYTES, REJECT_BACKLOG, is_valid_upgrade, linger, relay, respond_and_close,
    server_builder,
};
use crate::file_rules::FileRules;
use crate::shutdown::Shutdown;
use crate::telemetry::{ConnectionEnd, Metrics};
use crate::upstream::{self, Upstream, UpstreamError, UpstreamState};

/// What the proxy answers through hyper.
type Answer = Response<Full<Bytes>>;

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
    /// Hyper's HTTP/1.1 server, configured from `limits`.
    server: http1::Builder,
    /// The live viewer's screencasts, one per watched page.
    hubs: Arc<crate::viewer::hub::Hubs>,
    /// Cancelled by [`Proxy::close_all_relays`] (shutdown): every viewer is closed.
    viewers_stop: CancellationToken,
    /// A client's request for a person, and the viewers' "done".
    handoffs: Arc<crate::viewer::handoff::Handoffs>,
    /// The session's log, once a logged session is served: each CDP client's connection takes
    /// its recorder when it begins.
    session_log: Arc<crate::session_log::Slot>,
}

impl Proxy {
    /// The directories clients may name files in.
    pub fn files(&self) -> Arc<FileRules> {
        self.limits.files.clone()
    }

    /// A proxy checking clients with `auth`, relaying to the Chrome that `upstream` announces; the relay loop runs on `tasks`.
    pub fn new(
        auth: Authenticator,
        upstream: watch::Receiver<UpstreamState>,
        metrics: Arc<Metrics>,
        limits: Limits,
        tasks: &Shutdown,
    ) -> std::io::Result<Arc<Self>> {
        let relays = relay::RelayLoop::start(tasks)?;
        let handoffs = crate::viewer::handoff::Handoffs::new(Arc::new(relays.injector()));
        Ok(Arc::new(Self {
            auth,
            upstream,
            metrics: metrics.clone(),
            clients: watch::Sender::new(Clients::default()),
            events: Arc::new(ProxyEvents::default()),
            permits: Arc::new(Semaphore::new(limits.max_connections)),
            pending: Pending::new(limits.pending),
            reject_permits: Arc::new(Semaphore::new(REJECT_BACKLOG)),
            server: server_builder(&limits),
            hubs: Arc::new(crate::viewer::hub::Hubs::new(metrics.clone())),
            viewers_stop: CancellationToken::new(),
            limits,
            relays,
            handoffs,
            session_log: Arc::default(),
        }))
    }

    /// Where the session's log recorder goes once the session is known (none: not logged).
    pub fn session_log(&self) -> &Arc<crate::session_log::Slot> {
        &self.session_log
    }

    /// The pages' screencasts, shared by the live viewers and the recording.
    pub fn hubs(&self) -> &Arc<crate::viewer::hub::Hubs> {
        &self.hubs
    }

    /// The session's handoffs (given the live-view URL they hand out once it is known).
    pub fn handoffs(&self) -> &Arc<crate::viewer::handoff::Handoffs> {
        &self.handoffs
    }

    /// Follows the upgraded clients.
    pub fn clients(&self) -> watch::Receiver<Clients> {
        self.clients.subscribe()
    }

    /// The events the proxy reports to the session (e.g. a withheld `Browser.close`).
    pub fn events(&self) -> Arc<ProxyEvents> {
        self.events.clone()
    }

    /// The proxy's Prometheus metrics.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Binds the authenticator to the session a pool controller was claimed for (once),
    /// and the fetcher of its uploads to it.
    pub fn bind_session(&self, session_id: String, project_id: Option<String>) -> bool {
        if let Some(p) = &project_id {
            self.limits.files.bind(p, &session_id);
        }
        self.auth.bind(session_id, project_id)
    }

    /// The session's uploads directory (canonical), if it has one.
    pub fn uploads_dir(&self) -> Option<&std::path::Path> {
        self.limits.files.uploads()
    }

    /// Ends every relay and every viewer (shutdown).
    pub fn close_all_relays(&self) {
        self.relays.cancel_all();
        self.viewers_stop.cancel();
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
        // A timer that fires every second keeps the runtime's next wake-up near. Tokio wakes
        // its I/O driver (an eventfd write and one more epoll round) whenever a timer is
        // registered that expires before the driver's next wake-up; without this, every
        // connection's Chrome deadline (10 s) would do that once.
        let mut pacer = tokio::time::interval(Duration::from_secs(1));
        pacer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Brings the pending budget back once connections admitted over it are old enough.
        tracker.spawn(self.handoffs.clone().run_timer(stop.clone()));
        let metrics = self.metrics.clone();
        let pending = self.pending.clone();
        tracker.spawn(self.pending.clone().run_trimmer(stop.clone(), move |n| {
            for _ in 0..n {
                metrics.outcome(ConnectionEnd::AtCapacity);
            }
            debug!(
                evicted = n,
                pending = pending.len(),
                "pending budget trimmed: evicted unauthenticated connections silent too long"
            );
        }));
        while let Some((stream, peer)) = accept::next(&listener, &stop, Some(&mut pacer)).await {
            let this = self.clone();
            let open = &self.metrics.connections_open;
            // `client.addr` is recorded once it is known: the peer's, or the client a trusted
            // peer's PROXY header names.
            let span = tracing::info_span!("conn", session.id = %self.auth.session_id(), client.addr = tracing::field::Empty);
            if self.limits.trusted_proxies.contains(peer.ip()) {
                // The gateway or a load balancer: the client its header names is admitted once
                // the header is read.
                accept::spawn(&tracker, open, span, move || {
                    this.from_trusted(stream, peer)
                });
                continue;
            }
            span.record("client.addr", tracing::field::display(peer));
            // Admitted here, in accept order, so the budget's eviction order is arrival order.
            let slot = self.admit_pending(peer);
            accept::spawn(&tracker, open, span, move || {
                this.handle(stream, slot, false)
            });
        }
    }

    /// A connection into the pending budget, under `client`'s address.
    fn admit_pending(&self, client: SocketAddr) -> PendingSlot {
        let (slot, admission) = self.pending.admit(client.ip());
        if admission.evicted() {
            self.metrics.outcome(ConnectionEnd::AtCapacity);
            debug!(client.addr = %client, ?admission, pending = self.pending.len(), "pending budget full: evicted an older unauthenticated connection");
        } else if admission == Admission::OverBudget {
            debug!(client.addr = %client, pending = self.pending.len(), "admitted over the pending budget: nobody silent long enough to evict");
        }
        slot
    }

    /// A connection from `TRUSTED_PROXY_NETWORKS`: the PROXY v2 header it may start with names
    /// the client (read within the header deadline; a broken or late one closes the
    /// connection), which is then what the pending budget counts and the log names.
    async fn from_trusted(self: Arc<Self>, mut stream: TcpStream, peer: SocketAddr) {
        // Counted under the peer's own address while its header is read: the budget bounds
        // these connections too.
        let reading = self.admit_pending(peer);
        let evicted = reading.eviction();
        let deadline = self.limits.header_timeout;
        let (client, secure) = match read_source(&mut stream, peer, deadline, &evicted).await {
            Ok(Source::Direct) => (peer, false),
            Ok(Source::Forwarded { client, tls }) => (client, tls),
            Err(Unread::Evicted) => return,
            Err(Unread::Refused) => return self.metrics.outcome(ConnectionEnd::BadRequest),
            Err(Unread::Late) => return self.metrics.outcome(ConnectionEnd::HeaderTimeout),
        };
        tracing::Span::current().record("client.addr", tracing::field::display(client));
        let slot = self.admit_pending(client);
        drop(reading);
        self.handle(stream, slot, secure).await;
    }

    /// Serves one connection through hyper. Until it is authenticated (or answered), it holds
    /// `slot` in the pending budget and is closed with a 503 as soon as it is evicted from it;
    /// a head that does not arrive within the header timeout gets a 408. Hyper answers neither
    /// (it has no request to answer), so both are written here, on the socket taken back from
    /// hyper; so is Chrome's 101 once the handler has stashed an accepted upgrade.
    async fn handle(self: Arc<Self>, stream: TcpStream, slot: PendingSlot, secure: bool) {
        let socket = Socket {
            fd: stream.as_raw_fd(),
            secure,
        };
        let exchange = Arc::new(Exchange::new(slot));
        let evicted = exchange.eviction();
        let this = self.clone();
        let respond = move |req, exchange: Arc<Exchange<Handover>>| {
            let this = this.clone();
            async move { this.respond(req, &exchange, socket).await }
        };
        let timeout = self.limits.header_timeout;
        let served = exchange::serve(&self.server, stream, &exchange, timeout, respond).await;
        // No request is being answered (or its handler is dropped) when the driver gives an
        // early socket back: hyper has written nothing, so the refusal goes straight onto it.
        let (early, stream) = match served {
            Driven::Evicted(stream) => return self.refuse_evicted(stream).await,
            Driven::HeadTimeout(stream) => (Refusal::HeaderTimeout, stream),
            Driven::Done(done, stream) => {
                return self.finish(stream, done, &exchange, &evicted).await;
            }
            Driven::HandOver(stream, read_ahead) => {
                match exchange.take() {
                    Some(Handover::Cdp(upgrade)) => self.relay(stream, read_ahead, upgrade).await,
                    Some(Handover::Viewer(v)) => self.serve_viewer(stream, read_ahead, v).await,
                    Some(Handover::File(f)) => self.send_file(stream, f).await,
                    None => {}
                }
                return;
            }
            Driven::Dropped => return,
        };
        self.metrics.outcome(early.outcome());
        early.log(None);
        tokio::select! {
            () = respond_and_close(stream, early.to_bytes()) => {}
            () = evicted.cancelled() => {}
        }
    }

    /// After hyper is done with a connection: count how it ended and let the answer linger.
    async fn finish(
        &self,
        mut stream: TcpStream,
        done: hyper::Result<()>,
        exchange: &Exchange<Handover>,
        evicted: &CancellationToken,
    ) {
        if exchange.take().is_some() {
            // The client left while Chrome accepted its upgrade.
            self.metrics.outcome(ConnectionEnd::ClientGone);
            return;
        }
        let mut unanswered = None;
        match done {
            Ok(()) => {
                if exchange.phase() == Phase::Head {
                    self.metrics.outcome(ConnectionEnd::ClientGone);
                    return;
                }
            }
            // Hyper answered these itself (400, 431) before giving up on the request.
            Err(e) if e.is_parse_too_large() => self.hyper_refused(Refusal::HeadersTooLarge, &e),
            Err(e) if e.is_parse() => self.hyper_refused(Refusal::Malformed, &e),
            // Hyper's own header timeout, behind ours: it closes without an answer.
            Err(e) if e.is_timeout() => self.hyper_refused(Refusal::HeaderTimeout, &e),
            // A head cut short by the client's close: still a malformed request.
            Err(e) if e.is_incomplete_message() && exchange.phase() == Phase::Head => {
                self.hyper_refused(Refusal::Malformed, &e);
                unanswered = Some(Refusal::Malformed);
            }
            Err(e) => {
                debug!(error = %e, "the client left");
                // Counted once: an answer that failed to go out was counted as it was made.
                if !exchange.counted() {
                    self.metrics.outcome(ConnectionEnd::ClientGone);
                }
                return;
            }
        }
        if let Some(refusal) = unanswered {
            let _ = stream.write_all(&refusal.to_bytes()).await;
        }
        tokio::select! {
            () = linger(stream) => {}
            () = evicted.cancelled() => {}
        }
    }

    fn hyper_refused(&self, refusal: Refusal, cause: &hyper::Error) {
        self.metrics.outcome(refusal.outcome());
        refusal.log(Some(cause));
    }

    /// An evicted connection: a 503 and a close. Only [`REJECT_BACKLOG`] of them linger to
    /// drain the client; the others get a best-effort answer and are closed at once.
    async fn refuse_evicted(&self, stream: TcpStream) {
        exchange::answer_evicted(stream, &self.reject_permits, |s, b| {
            let _ = s.try_write(b);
        })
        .await;
    }

    /// Counts and logs `refusal`, and answers it.
    fn refuse(
        &self,
        refusal: Refusal,
        cause: Option<&(dyn std::error::Error + 'static)>,
    ) -> Answer {
        self.metrics.outcome(refusal.outcome());
        refusal.log(cause);
        refusal.response()
    }

    /// Hyper's request handler: admission (route, credential, Chrome's readiness), then either
    /// a `/json/*` answer or, for an upgrade Chrome accepted, no answer at all: the handler
    /// stays pending with the upgrade stashed in `exchange`, and [`Proxy::handle`] takes the
    /// socket back from hyper, writes Chrome's 101 and relays.
    async fn respond(
        &self,
        req: Request<Incoming>,
        exchange: &Exchange<Handover>,
        socket: Socket,
    ) -> Answer {
        exchange.heard();
        let admitted = match self.admit(req).await {
            Ok(a) => a,
            Err(answer) => {
                exchange.set_phase(Phase::Answered);
                exchange.answered();
                return answer;
            }
        };
        exchange.admitted();
        let answer = if admitted.route == Route::Viewer {
            self.viewer_page()
        } else if admitted.route == Route::ViewerSocket {
            match self.viewer_upgrade(admitted, exchange) {
                None => return std::future::pending().await,
                Some(refused) => refused,
            }
        } else if let Route::InspectorFile { file, .. } = &admitted.route {
            match self.frontend_file(file, &admitted.up, exchange).await {
                None => return std::future::pending().await,
                Some(refused) => refused,
            }
        } else if admitted.route.is_websocket() {
            match self.upgrade(admitted, exchange).await {
                Ok(()) => return std::future::pending().await,
                Err(refused) => refused,
            }
        } else {
            self.json(admitted, socket).await
        };
        exchange.answered();
        answer
    }

    /// The unauthenticated part of a request: its head, route, credential and Chrome's
    /// readiness. `Err` is the answer, already counted.
    async fn admit(&self, req: Request<Incoming>) -> Result<Admitted, Answer> {
        let (parts, _body) = req.into_parts();
        let Some(head) = RequestHead::from_parts(parts) else {
            return Err(self.refuse(Refusal::Malformed, None));
        };
        let wants_upgrade = head.header_values(header::UPGRADE).next().is_some();
        let route = match route::route(head.method.as_str(), head.path(), wants_upgrade) {
            Ok(r) => r,
            Err(RouteError::NotFound) => return Err(self.refuse(Refusal::NotFound, None)),
            Err(RouteError::MethodNotAllowed) => {
                return Err(self.refuse(Refusal::MethodNotAllowed, None));
            }
        };
        if route == Route::Health {
            return Err(self.health());
        }
        if route.is_websocket() && !is_valid_upgrade(&head) {
            return Err(self.refuse(Refusal::BadUpgrade, None));
        }
        let checked = if let Some(credential) = route.path_credential() {
            self.auth.check_viewer(credential).await.map(|v| {
                let grant = crate::viewer::grant::ViewerGrant::of(v);
                (Presented::default(), Some(grant))
            })
        } else if route.is_viewer() {
            crate::viewer::grant::check(head.query(), &self.auth)
                .await
                .map(|g| (Presented::default(), Some(g)))
        } else {
            self.authenticate(&head, route != Route::JsonNew)
                .await
                .map(|p| (p, None))
        };
        let (presented, grant) = match checked {
            Ok(p) => p,
            Err(AuthError::Token(e)) => {
                self.metrics.refusal(e);
                info!(reason = e.reason(), "credential refused: {e}");
                return Err(self.refuse(Refusal::Unauthorized, None));
            }
            Err(AuthError::KeysUnavailable | AuthError::Unclaimed) => {
                return Err(self.refuse(Refusal::NotReady, None));
            }
        };
        if !inspector_granted(&route, grant.as_ref()) {
            return Err(self.refuse(Refusal::Forbidden, None));
        }
        let up = match &*self.upstream.borrow() {
            UpstreamState::Ready(u) => Some(u.clone()),
            _ => None,
        };
        let Some(up) = up else {
            return Err(self.refuse(Refusal::BrowserNotReady, None));
        };
        Ok(Admitted {
            head,
            route,
            presented,
            grant,
            up,
        })
    }

    /// `/health`: 200 when serving (or warm in a pool), 503 otherwise.
    fn health(&self) -> Answer {
        let warm =
            matches!(*self.upstream.borrow(), UpstreamState::Warm) && self.auth.keys_loaded();
        let (status, body) = if self.ready() {
            (StatusCode::OK, "{\"status\":\"ok\"}\n")
        } else if warm {
            (StatusCode::OK, "{\"status\":\"warm\"}\n")
        } else {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "{\"status\":\"unavailable\"}\n",
            )
        };
        self.metrics.outcome(ConnectionEnd::Health);
        refusal::plain(
            status,
            HeaderValue::from_static("application/json"),
            Bytes::from_static(body.as_bytes()),
        )
    }

    async fn authenticate(
        &self,
        head: &RequestHead,
        use_query: bool,
    ) -> Result<Presented, AuthError> {
        let presented = head.credentials(use_query)?;
        self.auth.check(&presented).await?;
        Ok(presented)
    }

    /// A `/json/*` request answered from Chrome, discovery URLs rewritten to the client's `Host`.
    async fn json(&self, admitted: Admitted, socket: Socket) -> Answer {
        let Admitted {
            head,
            route,
            presented,
            up,
            ..
        } = admitted;
        let authority = match head.header(header::HOST) {
            Some(h) if discovery::is_valid_authority(h) => h.to_owned(),
            Some(_) => return self.refuse(Refusal::BadHost, None),
            None => socket
                .local_addr()
                .map(|a| a.to_string())
                .unwrap_or_else(|| "127.0.0.1".to_owned()),
        };
        let (target, rewrite, token) = match &route {
            Route::JsonVersion => ("/json/version".to_owned(), true, presented.query.as_deref()),
            Route::JsonList => ("/json/list".to_owned(), true, presented.query.as_deref()),
            Route::JsonNew
                if self.limits.intercept_browser_close
                    && head.query().is_some_and(guard::query_reaches_files) =>
            {
                return self.refuse(Refusal::LocalFile, None);
            }
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
            _ => unreachable!("websocket and viewer routes are not json"),
        };
        let method = head.method.clone();
        let timeout = self.limits.upstream_timeout;
        let answer = match upstream::http_request(&up.endpoint, method, &target, timeout).await {
            Ok(a) => a,
            Err(e) => return self.refuse(Refusal::BadGateway, Some(&e)),
        };
        let json_type = HeaderValue::from_static("application/json; charset=UTF-8");
        if !(rewrite && answer.status == StatusCode::OK) {
            self.metrics.outcome(ConnectionEnd::Http);
            let content_type = answer.content_type.unwrap_or(json_type);
            return refusal::plain(answer.status, content_type, answer.body);
        }
        match discovery::rewrite_discovery(&answer.body, &authority, token, socket.secure) {
            Ok(body) => {
                self.metrics.outcome(ConnectionEnd::Http);
                refusal::plain(StatusCode::OK, json_type, body.into())
            }
            Err(e) => self.refuse(Refusal::BadGateway, Some(&e)),
        }
    }

    /// Asks Chrome for a DevTools frontend file (`/devtools/<file>`, no query: nothing the
    /// client adds reaches Chrome) and stashes its answer for [`Proxy::handle`] to stream;
    /// `Some` is the refusal to answer.
    async fn frontend_file(
        &self,
        file: &str,
        up: &Upstream,
        exchange: &Exchange<Handover>,
    ) -> Option<Answer> {
        match frontend::request(&up.endpoint, file, self.limits.upstream_timeout).await {
            Ok(answer) => {
                exchange.stash(Handover::File(answer));
                None
            }
            Err(e) => Some(self.refuse(Refusal::BadGateway, Some(&e))),
        }
    }

    /// Streams a frontend file's answer to the client and closes.
    async fn send_file(&self, mut client: TcpStream, answer: frontend::FileAnswer) {
        match answer.send(&mut client).await {
            Ok(()) => self.metrics.outcome(ConnectionEnd::Http),
            Err(e) => {
                debug!(error = %e, "a frontend file's answer stopped short");
                self.metrics.outcome(match e {
                    frontend::SendError::Client(_) => ConnectionEnd::ClientGone,
                    _ => ConnectionEnd::UpstreamFailed,
                });
            }
        }
        let _ = client.shutdown().await;
    }

    /// Dials Chrome's WebSocket for an authenticated upgrade and stashes the connection and
    /// Chrome's 101 in `exchange` for [`Proxy::handle`]; `Err` is the refusal to answer.
    async fn upgrade(
        &self,
        admitted: Admitted,
        exchange: &Exchange<Handover>,
    ) -> Result<(), Answer> {
        let started = Instant::now();
        let Ok(permit) = self.permits.clone().try_acquire_owned() else {
            debug!("connection cap reached");
            return Err(self.refuse(Refusal::AtCapacity, None));
        };
        let Admitted {
            head,
            route,
            up,
            grant,
            ..
        } = admitted;
        let path = match &route {
            Route::BrowserRoot => match up.browser_path(self.limits.upstream_timeout).await {
                Ok(p) => p,
                Err(e) => return Err(self.refuse(Refusal::BadGateway, Some(&e))),
            },
            Route::Devtools(p) => p.clone(),
            Route::InspectorPage { page, .. } => format!("/devtools/page/{page}"),
            _ => unreachable!("only websocket routes are upgraded"),
        };
        let dialled = tokio::time::timeout(
            self.limits.upstream_timeout,
            dial_upgrade(&up, &path, &head),
        )
        .await;
        let (chrome, answer, chrome_prefix) = match dialled {
            Ok(Ok(dialled)) => dialled,
            Ok(Err(DialError::Refused(status))) => {
                if route == Route::BrowserRoot {
                    up.forget_browser_path();
                }
                info!(
                    chrome.status = status.as_u16(),
                    "chrome refused the upgrade"
                );
                let refusal = if status == StatusCode::NOT_FOUND {
                    Refusal::NoSuchTarget
                } else {
                    Refusal::BadGateway
                };
                return Err(self.refuse(refusal, None));
            }
            Ok(Err(DialError::Upstream(e))) => {
                return Err(self.refuse(Refusal::BadGateway, Some(&e)));
            }
            Err(e) => return Err(self.refuse(Refusal::BadGateway, Some(&e))),
        };
        exchange.stash(Handover::Cdp(Upgrade {
            chrome,
            answer,
            chrome_prefix,
            permit,
            started,
            grant,
        }));
        Ok(())
    }

    /// Answers the client with Chrome's 101 and relays the connection on the relay thread
    /// until either side closes. `client_prefix` is what hyper read past the client's head:
    /// early WebSocket frames.
    async fn relay(&self, mut client: TcpStream, client_prefix: Bytes, upgrade: Upgrade) {
        if let Err(e) = client.write_all(&upgrade.answer).await {
            debug!(error = %e, "client left during the upgrade");
            self.metrics.outcome(ConnectionEnd::ClientGone);
            return;
        }
        let _guard = ClientGuard::new(&self.clients, &self.metrics);
        let events = self.events.clone();
        let span = tracing::Span::current();
        let on_close = move || {
            span.in_scope(|| info!("client sent Browser.close; ending the session normally"));
            events.browser_close.notify_one();
        };
        // The relay thread drives the sockets from here on, outside the runtime; tokio hands
        // them over in the non-blocking mode mio needs.
        let (client_socket, chrome) = match (client.into_std(), upgrade.chrome.into_std()) {
            (Ok(c), Ok(u)) => (c, u),
            (Err(e), _) | (_, Err(e)) => {
                error!(error = %e, "could not hand the connection to the relay thread");
                self.metrics.outcome(ConnectionEnd::ClientGone);
                return;
            }
        };
        let id = relay::next_id();
        // A CDP client's traffic is logged (a live viewer's inspector socket is not).
        let log = upgrade.grant.is_none().then(|| self.session_log.begin(id));
        let log = log.flatten();
        let job = relay::Job {
            client: client_socket,
            chrome,
            client_prefix: Vec::from(client_prefix),
            chrome_prefix: upgrade.chrome_prefix,
            inspector: self
                .inspector(upgrade.grant, id)
                .map(|i| i.logging(log.clone(), id))
                .map(|i| Box::new(i) as Box<dyn relay::Watch>),
            on_browser_close: Box::new(on_close),
            metrics: self.metrics.clone(),
            keepalive: self.limits.keepalive,
        };
        let outcome = self.relays.relay(job).await;
        if let Some(r) = &log {
            r.connection_ended(id, &outcome.end);
        }
        self.handoffs.connection_closed(id);
        drop(upgrade.permit);
        self.metrics.outcome(ConnectionEnd::Relayed);
        log_relay_end(&outcome, upgrade.started);
    }
}

impl Proxy {
    /// The inspector of relayed connection `id`: a CDP client's with the session's rules and
    /// handoffs (when the proxy manages the browser); an inspector socket's, whatever the mode,
    /// held to its credential (no handoff, one page if it names one) and ended when it
    /// expires.
    fn inspector(
        &self,
        grant: Option<crate::viewer::grant::ViewerGrant>,
        id: u64,
    ) -> Option<inspect::Inspector> {
        let files = self.limits.files.clone();
        match grant {
            None => self
                .limits
                .intercept_browser_close
                .then(|| inspect::Inspector::new(files).with_handoffs(self.handoffs.clone(), id)),
            Some(g) => {
                let expires = g.expires_at().into_std();
                let scope = guard::Scope::Viewer { page: g.page };
                Some(
                    inspect::Inspector::new(files)
                        .scoped(scope)
                        .expiring_at(expires),
                )
            }
        }
    }
}

/// Whether the checked viewer `grant` allows an inspector `route`: control mode only, and on
/// the socket the credential's own page when it names one. Every other route: yes.
fn inspector_granted(route: &Route, grant: Option<&crate::viewer::grant::ViewerGrant>) -> bool {
    use crate::viewer::grant::Mode;
    let Some(grant) = grant.filter(|_| route.path_credential().is_some()) else {
        return true;
    };
    if grant.mode != Mode::Control {
        return false;
    }
    match (route, &grant.page) {
        (Route::InspectorPage { page, .. }, Some(own)) => page == own,
        _ => true,
    }
}

/// The one log line of a relayed connection.
fn log_relay_end(outcome: &relay::RelayOutcome, started: Instant) {
    let duration_ms = started.elapsed().as_millis() as u64;
    let end = &outcome.end;
    info!(
        bytes.client_to_chrome = outcome.client_to_chrome,
        bytes.chrome_to_client = outcome.chrome_to_client,
        duration_ms,
        end = %end,
        "cdp connection closed"
    );
}

/// A client connection's socket, by descriptor, for the one question asked of it while hyper
/// owns it: which local address the client reached, asked only when a `/json` request has no
/// `Host` (not a system call per connection). The descriptor stays the connection's while its
/// handler runs: hyper's connection owns the socket and polls the handler. `secure`: a trusted
/// PROXY header said the client's connection was TLS (ended in front of the proxy).
#[derive(Debug, Clone, Copy)]
struct Socket {
    fd: RawFd,
    secure: bool,
}

impl Socket {
    fn local_addr(self) -> Option<SocketAddr> {
        let addr: SockaddrStorage = nix::sys::socket::getsockname(self.fd).ok()?;
        if let Some(v4) = addr.as_sockaddr_in() {
            Some(SocketAddr::V4((*v4).into()))
        } else {
            addr.as_sockaddr_in6()
                .map(|v6| SocketAddr::V6((*v6).into()))
        }
    }
}

/// An upgrade Chrome accepted: its socket, and what the relay needs once hyper hands over
/// the client's.
struct Upgrade {
    chrome: TcpStream,
    /// Chrome's 101 as Chrome wrote it: the client's answer.
    answer: Vec<u8>,
    /// Bytes Chrome sent after its 101.
    chrome_prefix: Vec<u8>,
    /// One of the `MAX_CONNECTIONS` slots, held until the relay ends.
    permit: OwnedSemaphorePermit,
    started: Instant,
    /// The live-view credential's grant on an inspector socket (`None`: a CDP client's).
    grant: Option<crate::viewer::grant::ViewerGrant>,
}

/// Where an accepted upgrade's connection goes once hyper hands it back.
enum Handover {
    /// Relayed to Chrome.
    Cdp(Upgrade),
    /// Served by the live viewer.
    Viewer(live::ViewerUpgrade),
    /// A DevTools frontend file, its body streamed from Chrome.
    File(frontend::FileAnswer),
}

/// An authenticated request and the Chrome it goes to.
struct Admitted {
    head: RequestHead,
    route: Route,
    presented: Presented,
    /// What a viewer route's credential grants (`None` on the CDP routes).
    grant: Option<crate::viewer::grant::ViewerGrant>,
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
        metrics.clients_active.inc();
        Self { clients, metrics }
    }
}

impl Drop for ClientGuard<'_> {
    fn drop(&mut self) {
        self.metrics.clients_active.dec();
        self.clients
            .send_modify(|c| c.connected = c.connected.saturating_sub(1));
    }
}

/// The client's upgrade request as sent to Chrome: an allow-list of exactly what the WebSocket
/// handshake needs (RFC 6455 §4.1), nothing else the client sent. `Host` is Chrome's own
/// loopback address; `Upgrade`, `Connection` and `Sec-WebSocket-Version` are written in their
/// canonical form ([`is_valid_upgrade`] checked the client's); `Sec-WebSocket-Key` is the
/// client's, since its `Sec-WebSocket-Accept` comes back in Chrome's answer. So no credential,
/// `Origin`, extension offer (the inspector reads uncompressed frames), subprotocol, body
/// framing (`Content-Length`, `Transfer-Encoding`) or forwarding header reaches Chrome.
///
/// Written by hand, not with hyper's client: these exact bytes are the contract (hyper would
/// re-case `Sec-WebSocket-Key`), and the socket goes to the relay thread right after.
pub fn upstream_request(host: &str, path: &str, head: &RequestHead) -> Vec<u8> {
    let key = head.header(header::SEC_WEBSOCKET_KEY).unwrap_or_default();
    let parts = [
        "GET ",
        path,
        " HTTP/1.1\r\nHost: ",
        host,
        "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: ",
        key,
        "\r\nSec-WebSocket-Version: 13\r\n\r\n",
    ];
    parts.concat().into_bytes()
}

/// Why Chrome's WebSocket could not be dialled.
#[derive(Debug, thiserror::Error)]
enum DialError {
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    #[error("chrome answered the upgrade with {0}")]
    Refused(StatusCode),
}

/// Connects to Chrome and performs the upgrade. Returns the socket, Chrome's 101 as the
/// response to give the client, and any bytes Chrome sent after it.
async fn dial_upgrade(
    up: &Upstream,
    path: &str,
    head: &RequestHead,
) -> Result<(TcpStream, Vec<u8>, Vec<u8>), DialError> {
    let mut chrome = up
        .endpoint
        .connect()
        .await
        .map_err(UpstreamError::Connect)?;
    let _ = chrome.set_nodelay(true);
    chrome
        .write_all(&upstream_request(&up.host, path, head))
        .await
        .map_err(UpstreamError::Io)?;
    let mut buf = Vec::with_capacity(2048);
    loop {
        if buf.capacity() - buf.len() < 1024 {
            buf.reserve(2048);
        }
        // Into the spare capacity: nothing zeroed or copied per read.
        let n = chrome.read_buf(&mut buf).await.map_err(UpstreamError::Io)?;
        if n == 0 {
            return Err(UpstreamError::Malformed.into());
        }
        if let Some(len) = parse_switching(&buf)? {
            let after = buf.split_off(len);
            return Ok((chrome, buf, after));
        }
        if buf.len() >= MAX_HEAD_BYTES {
            return Err(UpstreamError::Malformed.into());
        }
    }
}

/// Most header fields Chrome's answer to an upgrade may have.
const MAX_UPSTREAM_FIELDS: usize = 32;

/// The length of Chrome's answer to the upgrade, once its head is complete: a 101, which goes
/// to the client as Chrome wrote it (its `Sec-WebSocket-Accept` among its headers); anything
/// else is a refusal.
fn parse_switching(buf: &[u8]) -> Result<Option<usize>, DialError> {
    let Some(head) =
        http::RawHead::read(buf, MAX_UPSTREAM_FIELDS).map_err(|_| UpstreamError::Malformed)?
    else {
        return Ok(None);
    };
    let status = head.status().map_err(|_| UpstreamError::Malformed)?;
    if status != StatusCode::SWITCHING_PROTOCOLS {
        return Err(DialError::Refused(status));
    }
    Ok(Some(head.len))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The upgrade request sent to Chrome for the client's `raw` head (a valid upgrade).
    fn forwarded(raw: &[u8], path: &str) -> String {
        let (head, _) = http::parse_request_head(raw, 65536).unwrap().unwrap();
        assert!(is_valid_upgrade(&head));
        let out = upstream_request("127.0.0.1:9222", path, &head);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn upstream_request_rewrites_host_and_drops_credentials() {
        let raw = b"GET /?signingKey=secret HTTP/1.1\r\nHost: browser.example.test:9223\r\nOrigin: https://evil\r\nAuthorization: Bearer x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: k==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Extensions: permessage-deflate\r\n\r\n";
        let out = forwarded(raw, "/devtools/browser/x");
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
        let out = forwarded(raw, "/devtools/page/P");
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
