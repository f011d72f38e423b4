//! One client connection served through hyper until it is answered or handed over: what its
//! driver and its request handler share ([`Exchange`]) and the driver itself ([`drive`]). The
//! proxy and the gateway serve their connections with both; what is handed over differs (an
//! upgrade Chrome accepted, a task's socket).

use std::convert::Infallible;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::{HttpService, service_fn};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Semaphore;
use tokio::time::Sleep;
use tokio_util::sync::CancellationToken;

use super::admission::PendingSlot;
use super::origin_form::OriginForm;
use super::refusal::Refusal;
use super::respond_and_close;

/// Where a connection's request stands, as its driver needs to know when the header deadline
/// passes or the connection is evicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// No request head yet.
    Head,
    /// A head arrived and is being admitted (not authenticated yet).
    Admitting,
    /// Answered without being authenticated (a refusal, `/health`): still pending.
    Answered,
    /// Authenticated: out of the pending budget.
    Admitted,
    /// The handler stashed where the connection goes: the driver takes the socket back from
    /// hyper.
    HandingOver,
}

/// What a connection's driver and its request handler share (one task: never contended).
/// `T` is what the handler hands over.
pub(crate) struct Exchange<T>(Mutex<State<T>>);

struct State<T> {
    /// Fires when the pending budget evicts the connection (a clone of its slot's).
    eviction: CancellationToken,
    phase: Phase,
    /// The handler returned an answer whose outcome it counted (any answer but a hand-over).
    counted: bool,
    /// The connection's place in the pending budget, left once it is authenticated.
    slot: Option<PendingSlot>,
    /// What the handler hands over, for the driver once hyper gives the socket back.
    stash: Option<T>,
}

impl<T> Exchange<T> {
    /// A connection holding `slot` in the pending budget, its head not read yet.
    pub(crate) fn new(slot: PendingSlot) -> Self {
        Self(Mutex::new(State {
            eviction: slot.eviction(),
            phase: Phase::Head,
            counted: false,
            slot: Some(slot),
            stash: None,
        }))
    }

    fn state(&self) -> MutexGuard<'_, State<T>> {
        // Consistent after every statement: a panic elsewhere cannot break it.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Fires when the pending budget evicts the connection.
    pub(crate) fn eviction(&self) -> CancellationToken {
        self.state().eviction.clone()
    }

    pub(crate) fn phase(&self) -> Phase {
        self.state().phase
    }

    pub(crate) fn set_phase(&self, phase: Phase) {
        self.state().phase = phase;
    }

    /// The request head arrived: it is being admitted, and is no longer silent.
    pub(crate) fn heard(&self) {
        let mut st = self.state();
        st.phase = Phase::Admitting;
        if let Some(slot) = st.slot.as_mut() {
            slot.heard();
        }
    }

    /// Authenticated: the connection leaves the pending budget.
    pub(crate) fn admitted(&self) {
        let slot = {
            let mut st = self.state();
            st.phase = Phase::Admitted;
            st.slot.take()
        };
        drop(slot);
    }

    /// The handler answered; its outcome is counted unless it stashed a hand-over.
    pub(crate) fn answered(&self) {
        let mut st = self.state();
        st.counted = st.stash.is_none();
    }

    /// Whether the handler's answer counted the connection's outcome already.
    pub(crate) fn counted(&self) -> bool {
        self.state().counted
    }

    /// Where the connection goes: the driver takes it back from hyper next.
    pub(crate) fn stash(&self, value: T) {
        let mut st = self.state();
        st.phase = Phase::HandingOver;
        st.stash = Some(value);
    }

    pub(crate) fn take(&self) -> Option<T> {
        self.state().stash.take()
    }
}

/// How driving a connection ended.
pub(crate) enum Driven<I> {
    /// Evicted from the pending budget before any answer: nothing written yet.
    Evicted(I),
    /// The head did not arrive within the header deadline: nothing written yet.
    HeadTimeout(I),
    /// Hyper is done with the connection.
    Done(hyper::Result<()>, I),
    /// The handler stashed a hand-over: the socket and what hyper read past the head.
    HandOver(I, Bytes),
    /// Evicted after its answer: dropped at once, the slot is needed.
    Dropped,
}

/// What woke a connection's driver.
enum Wake {
    Evicted,
    HeadTimeout,
    Done(hyper::Result<()>),
    HandOver,
}

/// Serves `stream` through hyper with `respond` as the request handler (sharing `exchange`),
/// and [`drive`]s it: `header_timeout` from now for the head. Hyper reads the first request
/// line with a path-less target in origin form ([`OriginForm`]).
pub(crate) async fn serve<I, T, F, Fut>(
    server: &http1::Builder,
    stream: I,
    exchange: &Arc<Exchange<T>>,
    header_timeout: Duration,
    respond: F,
) -> Driven<I>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    T: Send + 'static,
    F: Fn(Request<Incoming>, Arc<Exchange<T>>) -> Fut + Send + Unpin + 'static,
    Fut: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    // Counts from here (see below for when its timer is registered).
    let deadline = tokio::time::sleep(header_timeout);
    let evicted = exchange.eviction();
    let service = {
        let exchange = exchange.clone();
        service_fn(move |req| {
            let answer = respond(req, exchange.clone());
            async move { Ok::<_, Infallible>(answer.await) }
        })
    };
    let conn = server.serve_connection(TokioIo::new(OriginForm::new(stream)), service);
    drive(conn, exchange, deadline, &evicted).await
}

/// Drives hyper's connection until it is done, handed over, evicted (`evicted` cancelled) or
/// late with its head (`deadline`). Hyper answers neither of the last two (it has no request
/// to answer), so the socket comes back for the caller to answer.
pub(crate) async fn drive<I, S, T>(
    mut conn: http1::Connection<TokioIo<OriginForm<I>>, S>,
    exchange: &Exchange<T>,
    deadline: Sleep,
    evicted: &CancellationToken,
) -> Driven<I>
where
    I: AsyncRead + AsyncWrite + Unpin,
    S: HttpService<Incoming, ResBody = Full<Bytes>>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    http1::Connection<TokioIo<OriginForm<I>>, S>: Unpin,
{
    let eviction = evicted.cancelled();
    tokio::pin!(deadline, eviction);
    let mut watch_eviction = true;
    loop {
        let wake = poll_fn(|cx| {
            // Eviction first, then hyper, then (while the head is awaited) the deadline: its
            // timer is registered only if hyper still waits for the head (registering one
            // wakes the I/O driver: an eventfd write, one more epoll round).
            if watch_eviction && eviction.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Wake::Evicted);
            }
            if let Poll::Ready(done) = Pin::new(&mut conn).poll(cx) {
                return Poll::Ready(Wake::Done(done));
            }
            // The handler stashed a hand-over and waits for nothing more.
            if exchange.phase() == Phase::HandingOver {
                return Poll::Ready(Wake::HandOver);
            }
            if exchange.phase() == Phase::Head && deadline.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Wake::HeadTimeout);
            }
            Poll::Pending
        })
        .await;
        match wake {
            Wake::Evicted => match exchange.phase() {
                Phase::Head | Phase::Admitting => return Driven::Evicted(stream_of(conn).0),
                // The answer lingers (draining the client) only while nobody needs the slot.
                Phase::Answered => return Driven::Dropped,
                Phase::Admitted | Phase::HandingOver => watch_eviction = false,
            },
            Wake::HeadTimeout => return Driven::HeadTimeout(stream_of(conn).0),
            Wake::Done(done) => return Driven::Done(done, stream_of(conn).0),
            Wake::HandOver => {
                // Hyper has written nothing; what it read past the head (early WebSocket
                // frames) comes back with the socket.
                let (stream, read_ahead) = stream_of(conn);
                return Driven::HandOver(stream, read_ahead);
            }
        }
    }
}

/// The client's stream taken back from hyper, with every byte read from it that hyper has
/// not parsed: its read buffer, after a byte [`OriginForm`] still held, if any.
fn stream_of<I, S>(conn: http1::Connection<TokioIo<OriginForm<I>>, S>) -> (I, Bytes)
where
    I: AsyncRead + AsyncWrite + Unpin,
    S: HttpService<Incoming, ResBody = Full<Bytes>>,
{
    let parts = conn.into_parts();
    let (stream, held) = parts.io.into_inner().into_inner();
    let read_ahead = match held {
        None => parts.read_buf,
        Some(b) => {
            let mut all = Vec::with_capacity(parts.read_buf.len() + 1);
            all.extend_from_slice(&parts.read_buf);
            all.push(b);
            Bytes::from(all)
        }
    };
    (stream, read_ahead)
}

/// Answers a connection evicted before any answer with a 503: written and lingered over while
/// the backlog (`permits`) has room, else written once without waiting (`try_write`), so
/// evicted connections cannot pile up.
pub(crate) async fn answer_evicted<I: AsyncRead + AsyncWrite + Unpin>(
    stream: I,
    permits: &Arc<Semaphore>,
    try_write: impl FnOnce(&I, &[u8]),
) {
    let response = Refusal::AtCapacity.to_bytes();
    match permits.clone().try_acquire_owned() {
        Ok(permit) => {
            respond_and_close(stream, response).await;
            drop(permit);
        }
        Err(_) => try_write(&stream, &response),
    }
}
