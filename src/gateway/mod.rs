//! The connect gateway: one way in for every session, routed by the session the token names.
//!
//! Per connection: admitted as *pending* (the [`crate::edge::admission`] budget) → hyper's
//! HTTP/1.1 server reads the request head (the proxy's limits, the header deadline) → route
//! (the proxy's rules: unknown paths 404 before any credential is looked at) → the token is
//! verified as a task verifies it, but for whichever session it names ([`verify`]) — a refused
//! credential is answered 401 here, before any lookup or dial → the connection leaves the
//! pending budget → the session is looked up ([`lookup`]: a short cache, one read per session
//! at a time) and:
//! - READY: the task's proxy is dialled at the address READY wrote and the original request
//!   head (path, query with the token, headers, the client's `Host`) is sent to it as is, so
//!   the task checks the token again and its `/json` answers name the gateway; then the bytes
//!   are relayed both ways on the relay thread (the task's answer, a 101 or a refusal,
//!   included);
//! - starting: the client is held (bounded per session and in all), looking again as soon as
//!   the store says the item changed (the sessions directory is watched: a READY write wakes
//!   the client at once) or else after a short backoff (10 ms doubling to 500 ms: DynamoDB),
//!   until READY or the hold bound (then 503 with `Retry-After`); a starting place is cached
//!   no longer than the first backoff;
//! - ended: 410 at once; unknown: 404 at once. Neither is ever dialled.
//!
//! The live view's routes (`/viewer`, `/viewer/ws`) go the same way, routed by the session their
//! credential names: the live-view credential in `?t=` (once; never logged), checked by its
//! own rules ([`TokenVerifier::verify_viewer`]). A session token there, or a viewer credential
//! on a CDP route, is refused 401 before any lookup; the task checks the credential again
//! against its own session.
//!
//! Before any of that, at the accept: a peer in `TRUSTED_PROXY_NETWORKS` (the load balancer)
//! may put a PROXY protocol v2 header first, naming the real client, which is then the address
//! the pending budget counts and the logs name ([`crate::edge::proxy_header`]); anyone else's
//! header is just a malformed request. With a certificate (`GATEWAY_TLS_CERT`) the TLS
//! handshake follows, inside the pending budget and the header deadline ([`crate::tls`]: the
//! certificate is read again when its files change). Toward the task, each connection starts
//! with a PROXY v2 header of the gateway's own (`GATEWAY_PROXY_PROTOCOL`), naming the client
//! and whether it used TLS, which the task takes from the gateway's network only: its
//! per-address limits count real clients, and its `/json` answers name `wss://` URLs when the
//! client used TLS. Plain client connections are relayed on the relay thread as a task relays;
//! TLS ones on the runtime ([`crate::edge::tls_copy`]).

pub mod lookup;
pub mod metrics;
pub mod verify;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ::http::{HeaderValue, Request, Response, StatusCode, header};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::auth::AuthError;
use crate::edge::accept::{self, Unread};
use crate::edge::admission::{Pending, PendingSlot};
use crate::edge::exchange::{self, Driven, Exchange, Phase};
use crate::edge::http::RequestHead;
use crate::edge::proxy_header::{self, Source};
use crate::edge::refusal::{self, Refusal};
use crate::edge::route::{self, Route, RouteError};
use crate::edge::stream::{Client, ClientStream};
use crate::edge::tls_copy::copy_tls_bidirectional;
use crate::edge::{
    Limits, REJECT_BACKLOG, is_valid_upgrade, linger, relay, respond_and_close, server_builder,
};
use crate::shutdown::Shutdown;
use lookup::{Lookups, Place, SessionRoutes};
use metrics::{GatewayMetrics, Refused};

/// Why the gateway could not reach a session's task (counted and logged where it happens; the
/// client is answered 502 or, when the session has ended meanwhile, 410).
#[derive(Debug, thiserror::Error)]
enum DialError {
    #[error(transparent)]
    Failed(std::io::Error),
    #[error("no answer within the upstream timeout")]
    TimedOut,
}
use verify::{TokenVerifier, verify_presented};

type Answer = Response<Full<Bytes>>;

/// Default bound on holding a client for a session that is still starting.
pub const DEFAULT_HOLD: Duration = Duration::from_secs(90);

/// Default cap on clients held at once, in all.
pub const DEFAULT_MAX_HELD: usize = 4096;

/// Default cap on clients held at once for one session.
pub const DEFAULT_MAX_HELD_PER_SESSION: usize = 32;

/// Default time a looked-up place is reused.
pub const DEFAULT_LOOKUP_TTL: Duration = Duration::from_millis(250);

/// Default first wait between two looks at a starting session; it doubles up to
/// [`DEFAULT_MAX_RECHECK`]. A store that tells of changes (the sessions directory) wakes a
/// held client at once instead; DynamoDB cannot, so there this is how soon a READY is seen.
pub const DEFAULT_FIRST_RECHECK: Duration = Duration::from_millis(10);

/// Default longest wait between two looks at a starting session.
pub const DEFAULT_MAX_RECHECK: Duration = Duration::from_millis(500);

/// Failed reads of the store in a row before a held client is refused (503).
const MAX_LOOKUP_FAILURES: u32 = 3;

/// What the gateway is configured with besides its key and store.
#[derive(Debug, Clone)]
pub struct GatewaySettings {
    /// The proxy's edge limits: relayed connections (`max_connections`), the pending budget,
    /// header time and size, and the dial timeout (`upstream_timeout`).
    pub limits: Limits,
    /// How long a client is held for a session that is still starting.
    pub hold: Duration,
    /// Clients held at once, in all.
    pub max_held: usize,
    /// Clients held at once for one session.
    pub max_held_per_session: usize,
    /// How long a looked-up place is reused (a starting session's: `first_recheck` at most).
    pub lookup_ttl: Duration,
    /// First wait between two looks at a starting session (doubling up to `max_recheck`),
    /// unless the store wakes the held client first.
    pub first_recheck: Duration,
    /// Longest wait between two looks at a starting session.
    pub max_recheck: Duration,
    /// TLS ended in the gateway (`GATEWAY_TLS_CERT`), or none.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Clients reach the gateway over TLS, ended here or in front of it (`GATEWAY_CLIENT_TLS`).
    pub client_tls: bool,
    /// Each connection to a task starts with a PROXY v2 header (`GATEWAY_PROXY_PROTOCOL`).
    pub proxy_protocol_to_tasks: bool,
}

impl Default for GatewaySettings {
    fn default() -> Self {
        Self {
            limits: Limits {
                intercept_browser_close: false,
                ..Limits::default()
            },
            hold: DEFAULT_HOLD,
            max_held: DEFAULT_MAX_HELD,
            max_held_per_session: DEFAULT_MAX_HELD_PER_SESSION,
            lookup_ttl: DEFAULT_LOOKUP_TTL,
            first_recheck: DEFAULT_FIRST_RECHECK,
            max_recheck: DEFAULT_MAX_RECHECK,
            tls: None,
            client_tls: false,
            proxy_protocol_to_tasks: true,
        }
    }
}

/// The gateway's shared state.
pub struct Gateway {
    verifier: Arc<dyn TokenVerifier>,
    lookups: Lookups,
    metrics: Arc<GatewayMetrics>,
    settings: GatewaySettings,
    held: Arc<Held>,
    /// One per relayed connection (`MAX_CONNECTIONS`).
    permits: Arc<Semaphore>,
    /// Connections not authenticated yet.
    pending: Arc<Pending>,
    /// Bounds the evicted connections being answered 503.
    reject_permits: Arc<Semaphore>,
    relays: relay::RelayLoop,
    /// Cancelled to end the relays of TLS connections (they run on the runtime).
    tls_relays: CancellationToken,
    tls: Option<tokio_rustls::TlsAcceptor>,
    server: http1::Builder,
}

impl Gateway {
    /// A gateway checking tokens with `verifier` and finding sessions through `routes`; the
    /// relay thread runs on `tasks`.
    pub fn new(
        verifier: Arc<dyn TokenVerifier>,
        routes: Arc<dyn SessionRoutes>,
        settings: GatewaySettings,
        tasks: &Shutdown,
    ) -> std::io::Result<Arc<Self>> {
        let metrics = GatewayMetrics::new();
        let lookups = Lookups::new(routes, settings.lookup_ttl, settings.first_recheck, {
            let metrics = metrics.clone();
            move |found| metrics.lookup(found)
        });
        Ok(Arc::new(Self {
            verifier,
            lookups,
            held: Arc::new(Held {
                total: Arc::new(Semaphore::new(settings.max_held.max(1))),
                per_session: Mutex::default(),
                max_per_session: settings.max_held_per_session.max(1),
                metrics: metrics.clone(),
            }),
            metrics,
            permits: Arc::new(Semaphore::new(settings.limits.max_connections)),
            pending: Pending::new(settings.limits.pending),
            reject_permits: Arc::new(Semaphore::new(REJECT_BACKLOG)),
            relays: relay::RelayLoop::start(tasks)?,
            tls_relays: CancellationToken::new(),
            tls: settings.tls.clone().map(tokio_rustls::TlsAcceptor::from),
            server: server_builder(&settings.limits),
            settings,
        }))
    }

    /// The gateway's metrics.
    pub fn metrics(&self) -> &Arc<GatewayMetrics> {
        &self.metrics
    }

    /// Ends every relay (shutdown).
    pub fn close_all_relays(&self) {
        self.relays.cancel_all();
        self.tls_relays.cancel();
    }

    /// Accepts connections until `stop` fires; connection tasks run on `tracker`.
    pub async fn serve(
        self: Arc<Self>,
        listener: TcpListener,
        stop: CancellationToken,
        tracker: TaskTracker,
    ) {
        // Brings the pending budget back once connections admitted over it are old enough
        // (each evicted connection counts itself as `evicted`).
        tracker.spawn(self.pending.clone().run_trimmer(stop.clone(), |n| {
            debug!(evicted = n, "pending budget trimmed");
        }));
        while let Some((stream, peer)) = accept::next(&listener, &stop, None).await {
            let this = self.clone();
            let open = &self.metrics.connections_open;
            // `client.addr` is recorded once it is known: the peer's, or the client a trusted
            // peer's PROXY header names.
            let span = tracing::info_span!(
                "gw",
                client.addr = tracing::field::Empty,
                session.id = tracing::field::Empty
            );
            let client = Client {
                addr: peer,
                tls: self.settings.client_tls,
            };
            if self.settings.limits.trusted_proxies.contains(peer.ip()) {
                // The load balancer: the client it names is admitted once its header is read.
                accept::spawn(&tracker, open, span, move || {
                    this.from_trusted(stream, client)
                });
            } else {
                span.record("client.addr", tracing::field::display(peer));
                // Admitted here, in accept order, so the budget's eviction order is the
                // arrival order.
                let (slot, _) = self.pending.admit(peer.ip());
                accept::spawn(&tracker, open, span, move || {
                    this.accepted(stream, client, slot)
                });
            }
        }
    }

    /// A connection from a trusted network: its PROXY header, if any, names the client (read
    /// within the header deadline; a broken one closes the connection), then it is admitted
    /// under that client's address.
    async fn from_trusted(self: Arc<Self>, mut stream: TcpStream, mut client: Client) {
        // Counted under the peer's own address while its header is read: the budget bounds
        // these connections too.
        let (reading, _) = self.pending.admit(client.addr.ip());
        let evicted = reading.eviction();
        let deadline = self.settings.limits.header_timeout;
        match accept::read_source(&mut stream, client.addr, deadline, &evicted).await {
            Ok(Source::Direct) => {}
            Ok(Source::Forwarded { client: addr, tls }) => {
                client.addr = addr;
                client.tls |= tls;
            }
            Err(Unread::Evicted) => return,
            Err(Unread::Refused) => return self.metrics.refused(Refused::ProxyHeader),
            Err(Unread::Late) => return self.metrics.refused(Refused::HeaderTimeout),
        }
        tracing::Span::current().record("client.addr", tracing::field::display(client.addr));
        let (slot, _) = self.pending.admit(client.addr.ip());
        drop(reading);
        self.accepted(stream, client, slot).await;
    }

    /// An admitted connection: its TLS handshake when the gateway ends TLS (within the header
    /// deadline, and given up when evicted), then [`Gateway::handle`].
    async fn accepted(self: Arc<Self>, stream: TcpStream, client: Client, slot: PendingSlot) {
        let stream = match &self.tls {
            None => ClientStream::Plain(stream),
            Some(acceptor) => {
                let evicted = slot.eviction();
                let handshake = tokio::select! {
                    r = tokio::time::timeout(
                        self.settings.limits.header_timeout,
                        acceptor.accept(stream),
                    ) => r,
                    () = evicted.cancelled() => {
                        self.metrics.refused(Refused::Evicted);
                        return;
                    }
                };
                match handshake {
                    Ok(Ok(tls)) => ClientStream::Tls(Box::new(tls)),
                    Ok(Err(e)) => {
                        debug!(error = %e, "TLS handshake failed");
                        self.metrics.refused(Refused::TlsHandshake);
                        return;
                    }
                    Err(_) => {
                        self.metrics.refused(Refused::HeaderTimeout);
                        return;
                    }
                }
            }
        };
        self.handle(stream, client, slot).await;
    }

    /// Serves one connection through hyper: until it is authenticated it holds `slot` in the
    /// pending budget (503 when evicted, 408 when its head is late); once a task's proxy is
    /// dialled, the socket is taken back from hyper and relayed.
    async fn handle(self: Arc<Self>, stream: ClientStream, client: Client, slot: PendingSlot) {
        let exchange = Arc::new(Exchange::new(slot));
        let evicted = exchange.eviction();
        let this = self.clone();
        let respond = move |req, exchange: Arc<Exchange<Task>>| {
            let this = this.clone();
            async move { this.respond(req, &exchange, client).await }
        };
        let timeout = self.settings.limits.header_timeout;
        let served = exchange::serve(&self.server, stream, &exchange, timeout, respond).await;
        let stream = match served {
            Driven::Evicted(stream) => {
                self.metrics.refused(Refused::Evicted);
                let try_write = |s: &ClientStream, b: &[u8]| {
                    let _ = s.try_write(b);
                };
                return exchange::answer_evicted(stream, &self.reject_permits, try_write).await;
            }
            Driven::HeadTimeout(stream) => stream,
            Driven::Done(done, stream) => {
                if let Err(e) = &done {
                    debug!(error = %e, "connection ended");
                    if e.is_parse() || e.is_parse_too_large() {
                        self.metrics.refused(Refused::BadRequest);
                    }
                }
                tokio::select! {
                    () = linger(stream) => {}
                    () = evicted.cancelled() => {}
                }
                return;
            }
            Driven::HandOver(stream, read_ahead) => {
                // Hyper has written nothing; what it read past the head comes back too.
                if let Some(task) = exchange.take() {
                    self.relay(stream, read_ahead, task).await;
                }
                return;
            }
            Driven::Dropped => return,
        };
        self.metrics.refused(Refused::HeaderTimeout);
        tokio::select! {
            () = respond_and_close(stream, Refusal::HeaderTimeout.to_bytes()) => {}
            () = evicted.cancelled() => {}
        }
    }

    /// Hyper's request handler: an answer, or (a task dialled) none at all: the handler stays
    /// pending with the task's socket stashed, and [`Gateway::handle`] takes over.
    async fn respond(
        &self,
        req: Request<Incoming>,
        exchange: &Exchange<Task>,
        client: Client,
    ) -> Answer {
        exchange.set_phase(Phase::Admitting);
        match self.route_request(req, exchange, client).await {
            Ok(()) => std::future::pending().await,
            Err(answer) => {
                if exchange.phase() != Phase::Admitted {
                    exchange.set_phase(Phase::Answered);
                }
                answer
            }
        }
    }

    /// Counts, logs and answers a refusal.
    fn refuse(&self, refusal: Refusal, why: Refused) -> Answer {
        self.metrics.refused(why);
        refusal.log(None);
        refusal.response()
    }

    /// Route, credential, lookup (holding while the session starts), dial. `Ok` once the
    /// task's socket is stashed in `exchange`.
    async fn route_request(
        &self,
        req: Request<Incoming>,
        exchange: &Exchange<Task>,
        client: Client,
    ) -> Result<(), Answer> {
        let (parts, _body) = req.into_parts();
        let Some(head) = RequestHead::from_parts(parts) else {
            return Err(self.refuse(Refusal::Malformed, Refused::BadRequest));
        };
        let wants_upgrade = head.header_values(header::UPGRADE).next().is_some();
        let route = match route::route(head.method.as_str(), head.path(), wants_upgrade) {
            Ok(r) => r,
            Err(RouteError::NotFound) => {
                return Err(self.refuse(Refusal::NotFound, Refused::BadRequest));
            }
            Err(RouteError::MethodNotAllowed) => {
                return Err(self.refuse(Refusal::MethodNotAllowed, Refused::BadRequest));
            }
        };
        if route == Route::Health {
            return Err(self.health());
        }
        if route.is_websocket() && !is_valid_upgrade(&head) {
            return Err(self.refuse(Refusal::BadUpgrade, Refused::BadRequest));
        }
        // The credential, before anything is looked up or dialled.
        let session = self.session_of(&head, &route).await?;
        exchange.admitted();
        tracing::Span::current().record("session.id", session.as_str());
        if !wallcrawler_contract::claim::valid_id(&session) {
            return Err(self.refuse(Refusal::NoSuchSession, Refused::UnknownSession));
        }
        let addr = self.locate(&session).await?;
        let Ok(permit) = self.permits.clone().try_acquire_owned() else {
            return Err(self.refuse(Refusal::AtCapacity, Refused::AtCapacity));
        };
        let task = self.connect(&session, addr, &head, client).await?;
        debug!(task.addr = %addr, "task dialled; its answer is relayed");
        exchange.stash(Task {
            stream: task,
            permit,
            session,
            started: Instant::now(),
        });
        Ok(())
    }

    /// The session the request's credential is for, or the refusal (401 for a bad token, 503
    /// while the keys cannot be checked). The viewer routes take the live-view credential in
    /// `?t=` alone (as the task does: headers are not looked at), the inspector's in its path,
    /// the others a session token.
    async fn session_of(&self, head: &RequestHead, route: &Route) -> Result<String, Answer> {
        let verified = if let Some(credential) = route.path_credential() {
            // The inspector's: in its path. Its mode and page are the task's to check.
            self.verifier
                .verify_viewer(credential)
                .await
                .map(|v| v.session_id)
        } else if route.is_viewer() {
            match crate::viewer::grant::credential(head.query()) {
                Ok(t) => self.verifier.verify_viewer(&t).await.map(|v| v.session_id),
                Err(e) => Err(AuthError::Token(e)),
            }
        } else {
            match head.credentials(*route != Route::JsonNew) {
                Ok(presented) => verify_presented(self.verifier.as_ref(), &presented)
                    .await
                    .map(|v| v.session_id),
                Err(e) => Err(AuthError::Token(e)),
            }
        };
        match verified {
            Ok(session) => Ok(session),
            Err(AuthError::Token(e)) => {
                self.metrics.auth_refused(e);
                info!(reason = e.reason(), "credential refused: {e}");
                Err(self.refuse(Refusal::Unauthorized, Refused::Unauthorized))
            }
            Err(AuthError::KeysUnavailable | AuthError::Unclaimed) => {
                Err(self.refuse(Refusal::NotReady, Refused::NotReady))
            }
        }
    }

    /// Dials the session's task at `addr`. A cached READY may be a moment old: the task may
    /// have ended since, so a failed dial looks again, once, past the cache.
    async fn connect(
        &self,
        session: &str,
        addr: SocketAddr,
        head: &RequestHead,
        client: Client,
    ) -> Result<TcpStream, Answer> {
        if let Ok(task) = self.dial(addr, head, client).await {
            return Ok(task);
        }
        self.lookups.forget(session).await;
        match self.lookups.place(session).await {
            Ok(Place::Ended) => Err(self.refuse(Refusal::SessionEnded, Refused::SessionEnded)),
            Ok(Place::Ready(moved)) if moved != addr => self
                .dial(moved, head, client)
                .await
                .map_err(|_| self.refuse(Refusal::BadGateway, Refused::BadGateway)),
            _ => Err(self.refuse(Refusal::BadGateway, Refused::BadGateway)),
        }
    }

    /// `/health`: 200 once tokens can be checked.
    fn health(&self) -> Answer {
        let (status, body) = if self.verifier.ready() {
            (StatusCode::OK, "{\"status\":\"ok\"}\n")
        } else {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "{\"status\":\"unavailable\"}\n",
            )
        };
        refusal::plain(
            status,
            HeaderValue::from_static("application/json"),
            Bytes::from_static(body.as_bytes()),
        )
    }

    /// Where the session's task answers, holding the client while the session starts: it looks
    /// again when the store says the item changed (READY written), or after a backoff.
    async fn locate(&self, session: &str) -> Result<SocketAddr, Answer> {
        let started = Instant::now();
        let deadline = started + self.settings.hold;
        let mut held: Option<HeldGuard> = None;
        let mut wait = self.settings.first_recheck;
        // Before the first look: a READY written after it wakes this client.
        let mut changes = self.lookups.subscribe(session);
        let mut failures = 0;
        let mut looks = 0u32;
        let outcome = loop {
            looks += 1;
            if let Some(found) = read_place(self.lookups.place(session).await, &mut failures) {
                break found;
            }
            if held.is_none() {
                match self.held.try_hold(session) {
                    Some(g) => held = Some(g),
                    None => break Err((Refusal::SessionNotReady, Refused::HeldAtCapacity)),
                }
            }
            let now = Instant::now();
            if now >= deadline {
                break Err((Refusal::SessionNotReady, Refused::HoldTimeout));
            }
            self.wait_for_change(session, &mut changes, wait.min(deadline - now))
                .await;
            wait = (wait * 2).min(self.settings.max_recheck);
        };
        if held.is_some() {
            self.metrics
                .hold_seconds
                .observe(started.elapsed().as_secs_f64());
        }
        debug!(
            held_ms = started.elapsed().as_millis(),
            looks,
            found = outcome.is_ok(),
            "session looked up"
        );
        outcome.map_err(|(refusal, why)| self.refuse(refusal, why))
    }

    /// Waits `backoff`, or less when the store tells that the session's item changed; then
    /// what is cached may be the starting place the change replaced, so it is forgotten.
    async fn wait_for_change(
        &self,
        session: &str,
        changes: &mut Option<tokio::sync::watch::Receiver<u64>>,
        backoff: Duration,
    ) {
        let backoff = tokio::time::sleep(backoff);
        let woken = match changes {
            None => {
                backoff.await;
                false
            }
            Some(rx) => tokio::select! {
                changed = rx.changed() => changed.is_ok(),
                () = backoff => false,
            },
        };
        if woken {
            self.lookups.forget(session).await;
        } else if changes.as_ref().is_some_and(|rx| rx.has_changed().is_err()) {
            // The store stopped telling: the backoff alone from now on.
            *changes = None;
        }
    }

    /// Connects to the task's proxy and sends it the client's request head (after a PROXY v2
    /// header naming the client, when configured); a failure is counted and logged here.
    async fn dial(
        &self,
        addr: SocketAddr,
        head: &RequestHead,
        client: Client,
    ) -> Result<TcpStream, DialError> {
        self.metrics.dials.inc();
        let dialled = tokio::time::timeout(self.settings.limits.upstream_timeout, async {
            let mut s = TcpStream::connect(addr).await?;
            let _ = s.set_nodelay(true);
            accept::set_keepalive(&s);
            let mut first = if self.settings.proxy_protocol_to_tasks {
                proxy_header::encode(client.addr, s.local_addr()?, client.tls)?
            } else {
                Vec::new()
            };
            first.extend_from_slice(&forwarded_head(head));
            s.write_all(&first).await?;
            Ok::<_, std::io::Error>(s)
        })
        .await;
        let failed = match dialled {
            Ok(Ok(s)) => return Ok(s),
            Ok(Err(e)) => DialError::Failed(e),
            Err(_) => DialError::TimedOut,
        };
        self.metrics.dial_failures.inc();
        warn!(task.addr = %addr, error = %failed, "dialling the task failed");
        Err(failed)
    }

    /// Relays the client and the task's proxy until either closes.
    async fn relay(&self, client: ClientStream, client_prefix: Bytes, task: Task) {
        let client = match client {
            ClientStream::Plain(tcp) => tcp,
            ClientStream::Tls(tls) => return self.relay_tls(*tls, client_prefix, task).await,
        };
        let Task {
            stream,
            permit,
            session,
            started,
        } = task;
        let (client, upstream) = match (client.into_std(), stream.into_std()) {
            (Ok(c), Ok(u)) => (c, u),
            (Err(e), _) | (_, Err(e)) => {
                warn!(error = %e, "could not hand the connection to the relay thread");
                return;
            }
        };
        self.metrics.relayed.inc();
        let outcome = self
            .relays
            .relay(relay::Job {
                client,
                chrome: upstream,
                client_prefix: Vec::from(client_prefix),
                chrome_prefix: Vec::new(),
                inspector: None,
                on_browser_close: Box::new(|| {}),
                metrics: self.metrics.relay.clone(),
                // The task's proxy pings its clients; its pings and their pongs pass as bytes.
                keepalive: None,
            })
            .await;
        self.metrics.relayed.dec();
        drop(permit);
        let end = match &outcome.end {
            relay::RelayEnd::ClientClosed => "client_closed".to_owned(),
            relay::RelayEnd::ChromeClosed => "task_closed".to_owned(),
            relay::RelayEnd::ClientError(e) => format!("client_error: {e}"),
            relay::RelayEnd::ChromeError(e) => format!("task_error: {e}"),
            relay::RelayEnd::Cancelled => "shutdown".to_owned(),
            // The gateway relays without an inspector; its tasks inspect.
            relay::RelayEnd::ClientRefused(f) => format!("client_refused: {}", f.close().1),
            relay::RelayEnd::Expired => "credential_expired".to_owned(),
        };
        info!(
            session.id = %session,
            bytes.client_to_task = outcome.client_to_chrome,
            bytes.task_to_client = outcome.chrome_to_client,
            duration_ms = started.elapsed().as_millis() as u64,
            end = %end,
            "gateway connection closed"
        );
    }
}

impl Gateway {
    /// Relays a TLS client and the task's proxy on the runtime until either closes, or
    /// shutdown; the bytes hyper read past the head go to the task first.
    async fn relay_tls(
        &self,
        mut client: tokio_rustls::server::TlsStream<TcpStream>,
        client_prefix: Bytes,
        task: Task,
    ) {
        let Task {
            stream: mut upstream,
            permit,
            session,
            started,
        } = task;
        self.metrics.relayed.inc();
        let copied = async {
            upstream.write_all(&client_prefix).await?;
            copy_tls_bidirectional(&mut client, &mut upstream).await
        };
        let (up, down, end) = tokio::select! {
            r = copied => match r {
                Ok((up, down)) => (up + client_prefix.len() as u64, down, "closed".to_owned()),
                Err(e) => (0, 0, format!("error: {e}")),
            },
            () = self.tls_relays.cancelled() => (0, 0, "shutdown".to_owned()),
        };
        self.metrics.relay.bytes_client_to_chrome.inc_by(up);
        self.metrics.relay.bytes_chrome_to_client.inc_by(down);
        self.metrics.relayed.dec();
        drop(permit);
        info!(
            session.id = %session,
            bytes.client_to_task = up,
            bytes.task_to_client = down,
            duration_ms = started.elapsed().as_millis() as u64,
            end = %end,
            tls = true,
            "gateway connection closed"
        );
    }
}

/// What one look at a session says: its address, a refusal, or `None` while it is starting
/// (a failed look counts toward [`MAX_LOOKUP_FAILURES`]; a look that worked resets the count).
fn read_place(
    place: Result<Place, lookup::LookupError>,
    failures: &mut u32,
) -> Option<Result<SocketAddr, (Refusal, Refused)>> {
    match place {
        Ok(Place::Ready(addr)) => Some(Ok(addr)),
        Ok(Place::Ended) => Some(Err((Refusal::SessionEnded, Refused::SessionEnded))),
        Ok(Place::Unknown) => Some(Err((Refusal::NoSuchSession, Refused::UnknownSession))),
        Ok(Place::Unroutable) => {
            warn!("the session is READY but its item names no address to dial");
            Some(Err((Refusal::BadGateway, Refused::BadGateway)))
        }
        Ok(Place::Starting) => {
            *failures = 0;
            None
        }
        Err(e) => {
            warn!(error = %e, "looking the session up failed");
            *failures += 1;
            (*failures >= MAX_LOOKUP_FAILURES)
                .then_some(Err((Refusal::SessionNotReady, Refused::LookupFailed)))
        }
    }
}

/// The client's request head as the task receives it: method, target (path and query, the
/// token included) and every header as sent, `Host` included, so the task checks the same
/// credential and names the gateway in its discovery answers.
pub fn forwarded_head(head: &RequestHead) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(head.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(head.target.as_str().as_bytes());
    out.extend_from_slice(if head.version == 0 {
        b" HTTP/1.0\r\n"
    } else {
        b" HTTP/1.1\r\n"
    });
    for (name, value) in &head.headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// Clients held for starting sessions: a share of a global budget and of a per-session one.
struct Held {
    total: Arc<Semaphore>,
    per_session: Mutex<HashMap<String, usize>>,
    max_per_session: usize,
    metrics: Arc<GatewayMetrics>,
}

impl Held {
    fn try_hold(self: &Arc<Self>, session: &str) -> Option<HeldGuard> {
        let permit = self.total.clone().try_acquire_owned().ok()?;
        let mut map = self.per_session.lock().unwrap_or_else(|e| e.into_inner());
        let n = map.entry(session.to_owned()).or_default();
        if *n >= self.max_per_session {
            return None;
        }
        *n += 1;
        drop(map);
        self.metrics.held.inc();
        Some(HeldGuard {
            held: self.clone(),
            session: session.to_owned(),
            _permit: permit,
        })
    }
}

/// One held client; its place is given back when dropped.
struct HeldGuard {
    held: Arc<Held>,
    session: String,
    _permit: OwnedSemaphorePermit,
}

impl Drop for HeldGuard {
    fn drop(&mut self) {
        self.held.metrics.held.dec();
        let mut map = self
            .held
            .per_session
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(n) = map.get_mut(&self.session) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.session);
            }
        }
    }
}

/// The task connection a request was routed to.
struct Task {
    stream: TcpStream,
    /// One of the `MAX_CONNECTIONS` slots, held until the relay ends.
    permit: OwnedSemaphorePermit,
    session: String,
    started: Instant,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edge::http::parse_request_head;

    #[test]
    fn the_head_goes_to_the_task_as_the_client_sent_it() {
        let raw = b"GET /devtools/browser/x?signingKey=t.k.n HTTP/1.1\r\nHost: gw.example:443\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: k==\r\nSec-WebSocket-Version: 13\r\nAuthorization: Bearer t.k.n\r\n\r\n";
        let (head, _) = parse_request_head(raw, 65536).unwrap().unwrap();
        let out = String::from_utf8(forwarded_head(&head)).unwrap();
        assert!(
            out.starts_with("GET /devtools/browser/x?signingKey=t.k.n HTTP/1.1\r\n"),
            "{out}"
        );
        for h in [
            "host: gw.example:443\r\n",
            "upgrade: websocket\r\n",
            "sec-websocket-key: k==\r\n",
            "authorization: Bearer t.k.n\r\n",
        ] {
            assert!(out.contains(h), "{h} in {out}");
        }
        assert!(out.ends_with("\r\n\r\n"));
        let (again, len) = parse_request_head(out.as_bytes(), 65536).unwrap().unwrap();
        assert_eq!(len, out.len());
        assert_eq!(again.target, head.target);
    }

    /// Credentials are never looked at by these tests (they call `locate` directly).
    struct NoCredentials;

    impl TokenVerifier for NoCredentials {
        fn ready(&self) -> bool {
            true
        }
        fn verify<'a>(
            &'a self,
            _: &'a str,
        ) -> futures_util::future::BoxFuture<
            'a,
            Result<wallcrawler_contract::token::Verified, AuthError>,
        > {
            unreachable!("no credential is checked here")
        }
        fn verify_viewer<'a>(
            &'a self,
            _: &'a str,
        ) -> futures_util::future::BoxFuture<
            'a,
            Result<wallcrawler_contract::viewer::ViewerVerified, AuthError>,
        > {
            unreachable!("no credential is checked here")
        }
    }

    /// A session that is STARTING until `ready` is set, whose changes `feed` tells of; every
    /// read is counted and announced on `read`.
    struct Flip {
        ready: std::sync::atomic::AtomicBool,
        reads: std::sync::atomic::AtomicUsize,
        read: tokio::sync::Notify,
        feed: lookup::ChangeFeed,
    }

    impl SessionRoutes for Flip {
        fn item<'a>(
            &'a self,
            _: &'a str,
        ) -> futures_util::future::BoxFuture<
            'a,
            Result<Option<lookup::RouteItem>, crate::stores::StoreError>,
        > {
            use std::sync::atomic::Ordering::SeqCst;
            Box::pin(async move {
                let ready = self.ready.load(SeqCst);
                self.reads.fetch_add(1, SeqCst);
                self.read.notify_one();
                Ok(Some(lookup::RouteItem {
                    internal_status: if ready { "READY" } else { "STARTING" }.into(),
                    private_ip: Some("127.0.0.1".into()),
                    proxy_port: Some(9),
                    ended: false,
                }))
            })
        }
        fn subscribe(&self, session_id: &str) -> Option<tokio::sync::watch::Receiver<u64>> {
            Some(self.feed.subscribe(session_id))
        }
    }

    /// A held client looks again as soon as the store says the item changed, not when its
    /// backoff or the cached place runs out: with both an hour long, the READY written while it
    /// waits is what it is routed by, after exactly one more read.
    #[tokio::test]
    async fn a_held_client_is_woken_by_the_ready_write_not_by_its_backoff() {
        use std::sync::atomic::Ordering::SeqCst;
        let hour = Duration::from_secs(3600);
        let store = Arc::new(Flip {
            ready: false.into(),
            reads: 0.into(),
            read: tokio::sync::Notify::new(),
            feed: lookup::ChangeFeed::default(),
        });
        let settings = GatewaySettings {
            hold: hour,
            lookup_ttl: hour,
            first_recheck: hour,
            max_recheck: hour,
            ..GatewaySettings::default()
        };
        let tasks = Shutdown::new();
        let gw = Gateway::new(Arc::new(NoCredentials), store.clone(), settings, &tasks).unwrap();
        let held = tokio::spawn({
            let gw = gw.clone();
            async move { gw.locate("sess_a").await.map_err(|a| a.status()) }
        });
        // The first look found it starting; the client is held.
        store.read.notified().await;
        assert_eq!(store.reads.load(SeqCst), 1);
        store.ready.store(true, SeqCst);
        store.feed.changed("sess_b");
        store.feed.changed("sess_a");
        // A guard against a hang only: without the wake the client would wait an hour.
        let located = tokio::time::timeout(Duration::from_secs(60), held)
            .await
            .expect("the READY write wakes the held client")
            .unwrap();
        assert_eq!(located, Ok("127.0.0.1:9".parse().unwrap()));
        assert_eq!(store.reads.load(SeqCst), 2, "one look after the wake");
        tasks.token().cancel();
    }

    #[test]
    fn held_places_are_bounded_per_session_and_in_all() {
        let held = Arc::new(Held {
            total: Arc::new(Semaphore::new(3)),
            per_session: Mutex::default(),
            max_per_session: 2,
            metrics: GatewayMetrics::new(),
        });
        let a1 = held.try_hold("a").unwrap();
        let _a2 = held.try_hold("a").unwrap();
        assert!(held.try_hold("a").is_none(), "per session");
        let _b1 = held.try_hold("b").unwrap();
        assert!(held.try_hold("c").is_none(), "in all");
        assert_eq!(held.metrics.held.get(), 3);
        drop(a1);
        assert_eq!(held.metrics.held.get(), 2);
        let _a3 = held.try_hold("a").unwrap();
        assert_eq!(held.metrics.held.get(), 3);
    }
}
