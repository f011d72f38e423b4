//! Relaying bytes between upgraded client sockets and Chrome, on one event-loop thread.
//!
//! After an authenticated upgrade the two sockets carry WebSocket frames that the proxy does not
//! need to understand, so it copies bytes. The handshake runs on the async runtime; the sockets
//! are then handed to a [`RelayLoop`]: one thread with its own `epoll` instance (through `mio`),
//! edge-triggered, that reads each ready socket into one 256 KiB buffer and writes straight on
//! to the other socket — the shape of nginx's upgraded-connection loop. Per message that is
//! `epoll_wait`, `recv`, `send`: no task wake-up, scheduling or future polling in between, which
//! is what a 256 B round trip through the proxy costs on top of the kernel's work.
//!
//! Memory: a connection owns a buffer of its own only while its destination cannot take more
//! (the unwritten rest is kept until it can, and nothing more is read meanwhile —
//! backpressure). Idle connections cost no buffer, and a message of any size streams through
//! without ever being held whole.
//!
//! Injection: frames the proxy itself has for one client (a handoff's end, see
//! [`crate::viewer::handoff`]) come in through an [`Injector`] and go out at the next boundary
//! between Chrome's messages, as the inspector's answers do.
//!
//! Keepalive: a connection whose job asks for it ([`Job::keepalive`]) gets a WebSocket ping
//! toward the client once no byte has moved either way for that long, put in at a boundary
//! between Chrome's messages like an injected frame; the client's pongs are dropped on the way
//! to Chrome (Chrome never pinged). Any traffic resets the timer, either way: what the pings
//! are for is that the path (the load balancer's idle timeout, NATs) never goes quiet for that
//! long, and Chrome's events do that as well as the client's commands. The timers cost nothing
//! per message: a moved byte only stamps the connection with the loop's clock (read once per
//! `epoll_wait`), and a min-heap of deadlines, looked at lazily, sets `epoll_wait`'s timeout.
//!
//! Expiry: a connection whose inspector names its credential's expiry
//! ([`Watch::expires`], an inspector socket opened with a live-view credential) is
//! sent a close frame (1008, at a boundary between Chrome's messages if it is at one) and ended
//! then, by a second min-heap of deadlines; connections without one never touch it.
//!
//! Reads: a read that returns less than the buffer drained the socket (TCP hands over all it
//! has), so the socket is not read again until `epoll` reports new data — no `recv` that only
//! says "nothing more", unless the peer's FIN was reported, in which case reading goes on until
//! the end of stream is seen.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};
use slab::Slab;
use tokio::sync::oneshot;
use tracing::error;

use super::ws::{self, Downstream, Fatal, Pongs, Segment};
use crate::shutdown::Shutdown;
use crate::telemetry::Metrics;

/// Size of the loop's read buffer.
pub const READ_BUFFER: usize = 256 * 1024;

/// Reads per direction before a busy connection lets the others have a turn.
const READS_PER_TURN: usize = 16;

const WAKER: Token = Token(usize::MAX);

/// Turns bytes read from one side into what is written to the other.
pub trait Transform {
    /// Appends the segments to forward; returns true if a `Browser.close` was withheld.
    fn apply(&mut self, input: &[u8], out: &mut Vec<Segment>) -> bool;
}

/// Forwards everything as is.
pub struct Plain;

impl Transform for Plain {
    fn apply(&mut self, input: &[u8], out: &mut Vec<Segment>) -> bool {
        out.push(Segment::Input(0..input.len()));
        false
    }
}

/// What watches a client's messages on their way to Chrome (the proxy's inspector): it decides
/// what of them goes on ([`Transform::apply`]), answers what it withholds, and may end the
/// connection. The relay moves the bytes; a watcher never touches a socket.
pub trait Watch: Transform + Send {
    /// This connection's id for frames injected toward the client (`None`: nothing is).
    fn conn(&self) -> Option<u64>;
    /// When the credential that opened the socket expires: the relay ends it then.
    fn expires(&self) -> Option<Instant>;
    /// Why the connection must end now, if it must.
    fn fatal(&self) -> Option<Fatal>;
    /// Whole frames for the client (answers to withheld commands), taken.
    fn take_replies(&mut self) -> Vec<u8>;
    /// This watcher, dropping the client's pongs or not (with keepalive on they answer the
    /// relay's pings, not Chrome's).
    fn dropping_pongs(self: Box<Self>, drop: bool) -> Box<dyn Watch>;
    /// Who is shown Chrome's messages to this client as they pass, if anyone (taken once,
    /// when the relay begins).
    fn downstream_tap(&mut self) -> Option<Box<dyn ws::MessageTap>> {
        None
    }
}

impl Transform for Pongs {
    fn apply(&mut self, input: &[u8], out: &mut Vec<Segment>) -> bool {
        self.feed(input, out);
        false
    }
}

impl Transform for Downstream {
    fn apply(&mut self, input: &[u8], out: &mut Vec<Segment>) -> bool {
        self.feed(input, out);
        false
    }
}

/// How a relay ended.
#[derive(Debug)]
pub enum RelayEnd {
    /// The client closed its socket.
    ClientClosed,
    /// Chrome closed its socket.
    ChromeClosed,
    /// Reading from or writing to the client failed (reset, broken pipe).
    ClientError(io::Error),
    /// Reading from or writing to Chrome failed.
    ChromeError(io::Error),
    /// The controller is shutting down.
    Cancelled,
    /// The client sent what the inspector could not judge; it was sent a close frame.
    ClientRefused(Fatal),
    /// The credential that opened the socket expired; the client was sent a close frame.
    Expired,
}

impl std::fmt::Display for RelayEnd {
    /// How a relay ended, as the connection's log line and the session's log say it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::ClientClosed => f.write_str("client_closed"),
            Self::ChromeClosed => f.write_str("chrome_closed"),
            Self::ClientError(e) => write!(f, "client_error: {e}"),
            Self::ChromeError(e) => write!(f, "chrome_error: {e}"),
            Self::Cancelled => f.write_str("shutdown"),
            Self::ClientRefused(fatal) => write!(f, "client_refused: {}", fatal.close().1),
            Self::Expired => f.write_str("credential_expired"),
        }
    }
}

/// Bytes moved by one relay.
#[derive(Debug)]
pub struct RelayOutcome {
    /// Bytes relayed from the client to Chrome.
    pub client_to_chrome: u64,
    /// Bytes relayed from Chrome to the client.
    pub chrome_to_client: u64,
    /// Why the relay ended.
    pub end: RelayEnd,
}

impl RelayOutcome {
    /// A relay that never started: the loop was shutting down.
    fn cancelled() -> Self {
        Self {
            client_to_chrome: 0,
            chrome_to_client: 0,
            end: RelayEnd::Cancelled,
        }
    }
}

/// One upgraded connection to relay.
pub struct Job {
    /// The client's socket, after the upgrade.
    pub client: std::net::TcpStream,
    /// Chrome's socket, after its 101 answer.
    pub chrome: std::net::TcpStream,
    /// Bytes the client sent after its request head (go to Chrome first, through the
    /// inspector).
    pub client_prefix: Vec<u8>,
    /// Bytes Chrome sent after its 101 answer (go to the client first).
    pub chrome_prefix: Vec<u8>,
    /// Watch the client's messages for `Browser.close` (withheld, then `on_browser_close`).
    pub inspector: Option<Box<dyn Watch>>,
    /// Called when the inspector withheld a client's `Browser.close`.
    pub on_browser_close: Box<dyn Fn() + Send>,
    /// Where the byte counts are added as they go.
    pub metrics: Arc<Metrics>,
    /// Ping the client after this long without traffic either way, and drop its pongs
    /// (`None`: bytes only — the gateway, whose tasks ping).
    pub keepalive: Option<Duration>,
}

/// A fresh connection id: an inspector's ([`Watch::conn`]) names its connection
/// for [`Injector`].
pub fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

enum Command {
    Start(Box<Job>, oneshot::Sender<RelayOutcome>),
    /// Whole frames for one connection's client, put in between Chrome's messages (a
    /// connection with an inspector only; dropped if it has ended).
    Inject(u64, Vec<u8>),
    /// End every relay, now and from now on (shutdown).
    CancelAll,
    /// The owner is gone: end every relay and stop the thread.
    Exit,
}

/// The relay thread, and how to hand it connections.
pub struct RelayLoop {
    commands: Arc<Mutex<Vec<Command>>>,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
}

impl RelayLoop {
    /// Starts the relay thread, counted among the tasks of `tasks` until it has ended.
    pub fn start(tasks: &Shutdown) -> io::Result<Self> {
        Self::with_read_buffer(READ_BUFFER, tasks)
    }

    /// Starts the relay thread reading `size` bytes at a time (small sizes make tests of the
    /// read budget deterministic).
    fn with_read_buffer(size: usize, tasks: &Shutdown) -> io::Result<Self> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let commands = Arc::new(Mutex::new(Vec::new()));
        let running = tasks.thread_token();
        let thread = std::thread::Builder::new().name("wc-relay".into()).spawn({
            let commands = commands.clone();
            move || {
                Worker::new(poll, commands, size).run();
                drop(running);
            }
        })?;
        Ok(Self {
            commands,
            waker,
            thread: Some(thread),
        })
    }

    /// A handle that puts frames into one connection's client stream from any thread.
    pub fn injector(&self) -> Injector {
        Injector {
            commands: self.commands.clone(),
            waker: self.waker.clone(),
        }
    }

    fn send(&self, c: Command) {
        if self.thread.as_ref().is_none_or(|t| t.is_finished()) {
            // Only after a panic: dropping the command resolves a relay as cancelled.
            error!("the relay thread is gone; the connection is closed");
            return;
        }
        self.commands
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(c);
        if let Err(e) = self.waker.wake() {
            error!(error = %e, "could not wake the relay thread");
        }
    }

    /// Hands `job` to the relay thread at once; the future resolves when either side closes
    /// or [`cancel_all`](Self::cancel_all) is called.
    pub fn relay(&self, job: Job) -> impl Future<Output = RelayOutcome> + Send + 'static {
        let (tx, rx) = oneshot::channel();
        self.send(Command::Start(Box::new(job), tx));
        async move { rx.await.unwrap_or_else(|_| RelayOutcome::cancelled()) }
    }

    /// Ends every relay, and any started later, with [`RelayEnd::Cancelled`].
    pub fn cancel_all(&self) {
        self.send(Command::CancelAll);
    }
}

/// Sends messages to one relayed connection's client (see [`RelayLoop::injector`]).
#[derive(Clone)]
pub struct Injector {
    commands: Arc<Mutex<Vec<Command>>>,
    waker: Arc<Waker>,
}

impl crate::viewer::handoff::Deliver for Injector {
    fn deliver(&self, conn: u64, text: String) {
        // A whole unmasked text frame, as the client takes it from a server.
        let frame = ws::frame_of(0x1, text.as_bytes(), false);
        // Once the thread is gone nothing reads the commands: one more is only dropped later.
        self.commands
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Command::Inject(conn, frame));
        if let Err(e) = self.waker.wake() {
            error!(error = %e, "could not wake the relay thread");
        }
    }
}

impl Drop for RelayLoop {
    fn drop(&mut self) {
        self.send(Command::Exit);
        if let Some(t) = self.thread.take()
            && t.join().is_err()
        {
            error!("the relay thread panicked");
        }
    }
}

/// One socket of a relay and what `epoll` last told about it. Registration reports the
/// socket's state at once (bytes that arrived before it included), so every flag starts false
/// and all I/O follows events.
struct Side {
    stream: TcpStream,
    /// May have bytes (or an end of stream) to read.
    readable: bool,
    /// The peer's FIN (or an error) was reported: read until the end is seen.
    read_closed: bool,
    /// May accept bytes.
    writable: bool,
}

impl Side {
    fn new(stream: std::net::TcpStream) -> Self {
        Self {
            stream: TcpStream::from_std(stream),
            readable: false,
            read_closed: false,
            writable: false,
        }
    }
}

/// One direction's state.
#[derive(Default)]
struct Flow {
    /// Bytes read but not yet accepted by the destination; allocated only under backpressure.
    pending: Vec<u8>,
    sent: usize,
    bytes: u64,
}

struct Conn {
    client: Side,
    chrome: Side,
    up: Flow,
    down: Flow,
    inspector: Option<Box<dyn Watch>>,
    /// Where answers to refused commands join Chrome's messages (with an inspector only).
    downstream: Option<Downstream>,
    on_browser_close: Box<dyn Fn() + Send>,
    metrics: Arc<Metrics>,
    done: oneshot::Sender<RelayOutcome>,
    /// Its inspector's connection id, if any (see [`next_id`]).
    id: Option<u64>,
    /// Drops the client's pongs on a connection with keepalive and no inspector.
    pongs: Option<Pongs>,
    /// See [`Job::keepalive`].
    keepalive: Option<Duration>,
    /// When bytes last moved either way (or the last ping went), by the loop's clock.
    last_traffic: Instant,
    /// Tells this connection from a later one in the same slab slot (for stale timers).
    serial: u64,
}

enum PumpEnd {
    SrcEof,
    SrcError(io::Error),
    DstError(io::Error),
}

/// What a turn of pumping left behind.
enum Turn {
    /// Both directions wait for `epoll`.
    Idle,
    /// The read budget ran out with more to do: come back after the other connections.
    Busy,
}

struct Worker {
    poll: Poll,
    commands: Arc<Mutex<Vec<Command>>>,
    conns: Slab<Conn>,
    /// Each connection's slab key by its [`Job::id`].
    ids: std::collections::HashMap<u64, usize>,
    /// Connections with work left after their turn.
    busy: VecDeque<usize>,
    scratch: Scratch,
    cancelled: bool,
    /// Keepalive deadlines: (when, slab key, serial). At most one live entry per connection
    /// with keepalive; an entry whose connection has moved bytes since is pushed back to its
    /// new deadline when it comes up, one whose connection is gone is dropped.
    timers: BinaryHeap<Reverse<(Instant, usize, u64)>>,
    /// Credential expiries: (when, slab key, serial), one per connection that has one.
    expiries: BinaryHeap<Reverse<(Instant, usize, u64)>>,
    /// The loop's clock: read once per `epoll_wait` while any connection has keepalive or an
    /// expiry.
    now: Instant,
    next_serial: u64,
}

/// The worker's reusable space for one read and what the transform makes of it.
struct Scratch {
    buf: Box<[u8]>,
    segs: Vec<Segment>,
}

/// One direction of a connection for one turn: where bytes come from and go to, its state,
/// and the metric counting them.
struct Lane<'a> {
    src: &'a mut Side,
    dst: &'a mut Side,
    flow: &'a mut Flow,
    shared: &'a AtomicU64,
}

impl Worker {
    fn new(poll: Poll, commands: Arc<Mutex<Vec<Command>>>, read_buffer: usize) -> Self {
        Self {
            poll,
            commands,
            conns: Slab::new(),
            ids: std::collections::HashMap::new(),
            busy: VecDeque::new(),
            scratch: Scratch {
                buf: vec![0u8; read_buffer].into_boxed_slice(),
                segs: Vec::new(),
            },
            cancelled: false,
            timers: BinaryHeap::new(),
            expiries: BinaryHeap::new(),
            now: Instant::now(),
            next_serial: 0,
        }
    }

    fn run(mut self) {
        let mut events = Events::with_capacity(256);
        loop {
            let timeout = if self.busy.is_empty() {
                let next = |h: &BinaryHeap<Reverse<(Instant, usize, u64)>>| {
                    h.peek().map(|Reverse((at, ..))| *at)
                };
                next(&self.timers)
                    .into_iter()
                    .chain(next(&self.expiries))
                    .min()
                    .map(|at| at.saturating_duration_since(self.now))
            } else {
                Some(Duration::ZERO)
            };
            let polled = self.poll.poll(&mut events, timeout);
            if !self.timers.is_empty() || !self.expiries.is_empty() {
                self.now = Instant::now();
            }
            if let Err(e) = polled {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                error!(error = %e, "relay loop: epoll failed; ending every relay");
                self.end_all();
                return;
            }
            for ev in &events {
                if ev.token() == WAKER {
                    if !self.take_commands() {
                        return;
                    }
                    continue;
                }
                let key = ev.token().0 >> 1;
                let Some(conn) = self.conns.get_mut(key) else {
                    continue;
                };
                let side = if ev.token().0 & 1 == 0 {
                    &mut conn.client
                } else {
                    &mut conn.chrome
                };
                if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
                    side.readable = true;
                }
                if ev.is_read_closed() || ev.is_error() {
                    side.read_closed = true;
                }
                if ev.is_writable() || ev.is_write_closed() || ev.is_error() {
                    side.writable = true;
                }
                self.drive(key);
            }
            for _ in 0..self.busy.len() {
                if let Some(key) = self.busy.pop_front() {
                    self.drive(key);
                }
            }
            self.fire_timers();
            self.expire();
        }
    }

    /// Ends every connection whose credential has expired, with a close frame toward its
    /// client if Chrome's stream is between messages.
    fn expire(&mut self) {
        while let Some(&Reverse((at, key, serial))) = self.expiries.peek() {
            if at > self.now {
                return;
            }
            self.expiries.pop();
            if self.conns.get(key).is_none_or(|c| c.serial != serial) {
                continue;
            }
            let mut conn = self.conns.remove(key);
            if let Some(id) = conn.id {
                self.ids.remove(&id);
            }
            if let Some(d) = conn.downstream.as_mut()
                && !d.closing()
            {
                d.queue(ws::close_frame(Fatal::Expired));
                let _ = flush_answers(&mut conn.client, &mut conn.down, d)
                    .and_then(|()| write_backlog(&mut conn.client, &mut conn.down).map(drop));
            }
            finish(conn, RelayEnd::Expired);
        }
    }

    /// Pings the client of every connection whose keepalive deadline has passed with no
    /// traffic since; pushes the others' deadlines on.
    fn fire_timers(&mut self) {
        while let Some(&Reverse((at, key, serial))) = self.timers.peek() {
            if at > self.now {
                return;
            }
            self.timers.pop();
            let Some(conn) = self.conns.get_mut(key).filter(|c| c.serial == serial) else {
                continue;
            };
            let Some(every) = conn.keepalive else {
                continue;
            };
            let due = conn.last_traffic + every;
            if due > self.now {
                self.timers.push(Reverse((due, key, serial)));
                continue;
            }
            conn.last_traffic = self.now;
            self.timers.push(Reverse((self.now + every, key, serial)));
            // A frame already waiting for Chrome's message to end will do as well.
            if let Some(d) = conn.downstream.as_mut()
                && !d.has_queued()
                && !d.closing()
            {
                d.queue(ws::ping_frame());
                self.drive(key);
            }
        }
    }

    /// Handles queued commands; false when the loop must stop.
    fn take_commands(&mut self) -> bool {
        let commands =
            std::mem::take(&mut *self.commands.lock().unwrap_or_else(|p| p.into_inner()));
        for c in commands {
            match c {
                Command::Start(job, done) => self.start(*job, done),
                Command::Inject(id, frames) => self.inject(id, frames),
                Command::CancelAll => {
                    self.cancelled = true;
                    self.end_all();
                }
                Command::Exit => {
                    self.end_all();
                    return false;
                }
            }
        }
        true
    }

    fn start(&mut self, job: Job, done: oneshot::Sender<RelayOutcome>) {
        if self.cancelled {
            let _ = done.send(RelayOutcome::cancelled());
            return;
        }
        let Job {
            client,
            chrome,
            client_prefix,
            chrome_prefix,
            inspector,
            on_browser_close,
            metrics,
            keepalive,
        } = job;
        let mut inspector = inspector.map(|i| i.dropping_pongs(keepalive.is_some()));
        let mut pongs = (keepalive.is_some() && inspector.is_none()).then(Pongs::default);
        let up = client_prefix_flow(
            &client_prefix,
            (&mut inspector, &mut pongs),
            &*on_browser_close,
            &metrics,
        );
        // Chrome's message boundaries are tracked where frames go in between them: answers
        // (with an inspector) and pings.
        let mut downstream = downstream_of(&mut inspector, keepalive.is_some());
        let inspector_id = inspector.as_ref().and_then(|i| i.conn());
        let expires = inspector.as_ref().and_then(|i| i.expires());
        let down = chrome_prefix_flow(chrome_prefix, &mut downstream, &mut inspector);
        let serial = self.next_serial;
        self.next_serial += 1;
        if keepalive.is_some() || expires.is_some() {
            self.now = Instant::now();
        }
        metrics.bytes_chrome_to_client.inc_by(down.bytes);
        let entry = self.conns.vacant_entry();
        let key = entry.key();
        let mut conn = Conn {
            client: Side::new(client),
            chrome: Side::new(chrome),
            up,
            down,
            inspector,
            downstream,
            on_browser_close,
            metrics,
            done,
            id: inspector_id,
            pongs,
            keepalive,
            last_traffic: self.now,
            serial,
        };
        let both = Interest::READABLE | Interest::WRITABLE;
        let registry = self.poll.registry();
        if let Err(e) = registry.register(&mut conn.client.stream, Token(key << 1), both) {
            return finish(conn, RelayEnd::ClientError(e));
        }
        if let Err(e) = registry.register(&mut conn.chrome.stream, Token(key << 1 | 1), both) {
            return finish(conn, RelayEnd::ChromeError(e));
        }
        entry.insert(conn);
        if let Some(id) = inspector_id {
            self.ids.insert(id, key);
        }
        self.arm(key, serial, keepalive, expires);
    }

    /// Sets connection `key`'s first keepalive deadline and its expiry, as it has them.
    fn arm(
        &mut self,
        key: usize,
        serial: u64,
        keepalive: Option<Duration>,
        expires: Option<Instant>,
    ) {
        if let Some(every) = keepalive {
            self.timers.push(Reverse((self.now + every, key, serial)));
        }
        if let Some(at) = expires {
            self.expiries.push(Reverse((at, key, serial)));
        }
    }

    /// Queues `frames` for connection `id`'s client (at the next boundary between Chrome's
    /// messages) and drives it.
    fn inject(&mut self, id: u64, frames: Vec<u8>) {
        let Some(&key) = self.ids.get(&id) else {
            return;
        };
        let Some(d) = self.conns.get_mut(key).and_then(|c| c.downstream.as_mut()) else {
            return;
        };
        d.queue(frames);
        self.drive(key);
    }

    /// Moves what can be moved on connection `key`; ends it when a side is done.
    fn drive(&mut self, key: usize) {
        let Some(conn) = self.conns.get_mut(key) else {
            return;
        };
        let moved = conn.up.bytes + conn.down.bytes;
        let result = turn(conn, &mut self.scratch);
        if conn.keepalive.is_some() && conn.up.bytes + conn.down.bytes != moved {
            conn.last_traffic = self.now;
        }
        match result {
            Ok(Turn::Busy) => self.busy.push_back(key),
            Ok(Turn::Idle) => {}
            Err(end) => {
                // Not deregistered: closing the sockets (their only descriptors) takes them
                // out of the epoll set, two system calls fewer per connection.
                let conn = self.conns.remove(key);
                if let Some(id) = conn.id {
                    self.ids.remove(&id);
                }
                // A key may be queued as busy; it is skipped once its slot is empty or reused
                // (a spurious turn on a reused slot only finds nothing to do).
                finish(conn, end);
            }
        }
    }

    fn end_all(&mut self) {
        for conn in self.conns.drain() {
            finish(conn, RelayEnd::Cancelled);
        }
        self.ids.clear();
        self.busy.clear();
        self.timers.clear();
        self.expiries.clear();
    }
}

/// The client-to-Chrome flow of a new relay: the bytes the client sent with its upgrade,
/// through the inspector (if any), waiting for Chrome.
fn client_prefix_flow(
    prefix: &[u8],
    (inspector, pongs): (&mut Option<Box<dyn Watch>>, &mut Option<Pongs>),
    on_browser_close: &dyn Fn(),
    metrics: &Metrics,
) -> Flow {
    let mut up = Flow::default();
    if prefix.is_empty() {
        return up;
    }
    let mut segs = Vec::new();
    let close = match (inspector, pongs) {
        (Some(i), _) => i.apply(prefix, &mut segs),
        (None, Some(p)) => p.apply(prefix, &mut segs),
        (None, None) => Plain.apply(prefix, &mut segs),
    };
    if close {
        on_browser_close();
    }
    collect(prefix, &segs, &mut up.pending);
    up.bytes = prefix.len() as u64;
    metrics.bytes_client_to_chrome.inc_by(up.bytes);
    up
}

/// The frame tracker of Chrome's stream, where the relay needs one (with an inspector, whose
/// tap it shows Chrome's messages, or keepalive).
fn downstream_of(inspector: &mut Option<Box<dyn Watch>>, keepalive: bool) -> Option<Downstream> {
    let tap = inspector.as_mut().and_then(|i| i.downstream_tap());
    (inspector.is_some() || keepalive).then(|| Downstream::default().tapped(tap))
}

/// The Chrome-to-client flow of a new relay: the bytes Chrome sent after its 101, through the
/// frame tracker (if any), with the inspector's first answers queued there.
fn chrome_prefix_flow(
    prefix: Vec<u8>,
    downstream: &mut Option<Downstream>,
    inspector: &mut Option<Box<dyn Watch>>,
) -> Flow {
    let mut down = Flow {
        bytes: prefix.len() as u64,
        ..Flow::default()
    };
    match downstream {
        Some(d) => {
            if let Some(i) = inspector {
                d.queue(i.take_replies());
            }
            // Chrome's first bytes pass the frame tracker too, so it knows where they end.
            let mut segs = Vec::new();
            d.feed(&prefix, &mut segs);
            collect(&prefix, &segs, &mut down.pending);
        }
        None => down.pending = prefix,
    }
    down
}

/// Appends the bytes `segs` name (ranges of `input`, or their own) to `to`.
fn collect(input: &[u8], segs: &[Segment], to: &mut Vec<u8>) {
    for s in segs {
        to.extend_from_slice(match s {
            Segment::Input(r) => &input[r.clone()],
            Segment::Owned(v) => v,
        });
    }
}

fn finish(conn: Conn, end: RelayEnd) {
    let _ = conn.done.send(RelayOutcome {
        client_to_chrome: conn.up.bytes,
        chrome_to_client: conn.down.bytes,
        end,
    });
    // Dropping `conn` closes both sockets.
}

/// One turn of a connection: client to Chrome (through the inspector, if any), then, unless
/// that ended it, Chrome to client. `Busy` when either direction has more to do.
fn turn(conn: &mut Conn, scratch: &mut Scratch) -> Result<Turn, RelayEnd> {
    let up_turn = client_to_chrome(conn, scratch)?;
    end_if_refused(conn)?;
    let down_turn = chrome_to_client(conn, scratch)?;
    Ok(match (up_turn, down_turn) {
        (Turn::Idle, Turn::Idle) => Turn::Idle,
        _ => Turn::Busy,
    })
}

/// The client's bytes to Chrome, through the inspector or the pong filter, if any.
fn client_to_chrome(conn: &mut Conn, scratch: &mut Scratch) -> Result<Turn, RelayEnd> {
    let lane = Lane {
        src: &mut conn.client,
        dst: &mut conn.chrome,
        flow: &mut conn.up,
        shared: conn.metrics.bytes_client_to_chrome.inner(),
    };
    let on_browser_close = &*conn.on_browser_close;
    match (conn.inspector.as_mut(), conn.pongs.as_mut()) {
        (Some(i), _) => pump(lane, &mut **i, scratch, on_browser_close),
        (None, Some(p)) => pump(lane, p, scratch, on_browser_close),
        (None, None) => pump(lane, &mut Plain, scratch, on_browser_close),
    }
    .map_err(|e| match e {
        PumpEnd::SrcEof => RelayEnd::ClientClosed,
        PumpEnd::SrcError(e) => RelayEnd::ClientError(e),
        PumpEnd::DstError(e) => RelayEnd::ChromeError(e),
    })
}

/// Queues the inspector's answers for the client, and ends a connection the inspector
/// cannot go on with (or whose answers pile up unread) with a close frame, best effort.
fn end_if_refused(conn: &mut Conn) -> Result<(), RelayEnd> {
    let (Some(i), Some(d)) = (conn.inspector.as_mut(), conn.downstream.as_mut()) else {
        return Ok(());
    };
    let replies = i.take_replies();
    if !replies.is_empty() {
        d.queue(replies);
    }
    // A client that sends refused commands and does not read the answers gets no unbounded
    // backlog: beyond one read of Chrome's bytes and the answers' cap, it is closed.
    let (client, down) = (&mut conn.client, &mut conn.down);
    let backlog = d.queued_len() + (down.pending.len() - down.sent);
    let flooded = backlog > READ_BUFFER + ws::MAX_QUEUED_REPLIES;
    let Some(fatal) = i.fatal().or(flooded.then_some(Fatal::TooManyRefusals)) else {
        return Ok(());
    };
    // Best effort: the close frame goes if the client's side is between messages and takes
    // it now; the connection ends either way.
    d.queue(ws::close_frame(fatal));
    let _ = flush_answers(client, down, d).and_then(|()| {
        write_backlog(client, down)?;
        Ok(())
    });
    Err(RelayEnd::ClientRefused(fatal))
}

/// Chrome's bytes to the client, through the frame tracker (if any), with the queued answers
/// put in at the first boundary.
fn chrome_to_client(conn: &mut Conn, scratch: &mut Scratch) -> Result<Turn, RelayEnd> {
    let lane = Lane {
        src: &mut conn.chrome,
        dst: &mut conn.client,
        flow: &mut conn.down,
        shared: conn.metrics.bytes_chrome_to_client.inner(),
    };
    let turn = match conn.downstream.as_mut() {
        Some(d) => pump(lane, d, scratch, &|| {}),
        None => pump(lane, &mut Plain, scratch, &|| {}),
    }
    .map_err(down_end)?;
    if let Some(d) = conn.downstream.as_mut() {
        flush_answers(&mut conn.client, &mut conn.down, d).map_err(down_end)?;
    }
    Ok(turn)
}

/// How a Chrome-to-client pump's end ends the relay.
fn down_end(e: PumpEnd) -> RelayEnd {
    match e {
        PumpEnd::SrcEof => RelayEnd::ChromeClosed,
        PumpEnd::SrcError(e) => RelayEnd::ChromeError(e),
        PumpEnd::DstError(e) => RelayEnd::ClientError(e),
    }
}

/// Sends the queued answers to the client now if Chrome's stream is between messages.
fn flush_answers(client: &mut Side, down: &mut Flow, d: &mut Downstream) -> Result<(), PumpEnd> {
    if !d.has_queued() {
        return Ok(());
    }
    let mut segs = Vec::new();
    d.feed(&[], &mut segs);
    for seg in segs {
        if let Segment::Owned(v) = seg {
            forward(client, down, &v)?;
        }
    }
    Ok(())
}

/// Moves bytes along `lane` until its source or destination would block or the read budget
/// is spent.
fn pump<T: Transform + ?Sized>(
    lane: Lane<'_>,
    transform: &mut T,
    scratch: &mut Scratch,
    on_browser_close: &dyn Fn(),
) -> Result<Turn, PumpEnd> {
    let Lane {
        src,
        dst,
        flow,
        shared,
    } = lane;
    let Scratch { buf, segs } = scratch;
    let mut reads = 0;
    loop {
        if flow.sent < flow.pending.len() {
            if !write_backlog(dst, flow)? {
                return Ok(Turn::Idle);
            }
            continue;
        }
        if !src.readable {
            return Ok(Turn::Idle);
        }
        if reads == READS_PER_TURN {
            return Ok(Turn::Busy);
        }
        let n = match (&src.stream).read(buf) {
            Ok(0) => return Err(PumpEnd::SrcEof),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                src.readable = false;
                return Ok(Turn::Idle);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(PumpEnd::SrcError(e)),
        };
        reads += 1;
        if n < buf.len() && !src.read_closed {
            // Drained: epoll reports the next bytes.
            src.readable = false;
        }
        flow.bytes += n as u64;
        shared.fetch_add(n as u64, Ordering::Relaxed);
        let input = &buf[..n];
        segs.clear();
        if transform.apply(input, segs) {
            on_browser_close();
        }
        for seg in segs.drain(..) {
            let data: &[u8] = match &seg {
                Segment::Input(r) => &input[r.clone()],
                Segment::Owned(v) => v,
            };
            forward(dst, flow, data)?;
        }
    }
}

/// One write of the backlog toward `dst`; `false` when `dst` cannot take more now.
#[inline]
fn write_backlog(dst: &mut Side, flow: &mut Flow) -> Result<bool, PumpEnd> {
    if !dst.writable {
        return Ok(false);
    }
    match (&dst.stream).write(&flow.pending[flow.sent..]) {
        Ok(0) => return Err(PumpEnd::DstError(io::ErrorKind::WriteZero.into())),
        Ok(n) => flow.sent += n,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            dst.writable = false;
            return Ok(false);
        }
        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
        Err(e) => return Err(PumpEnd::DstError(e)),
    }
    if flow.sent == flow.pending.len() {
        flow.pending = Vec::new();
        flow.sent = 0;
    }
    Ok(true)
}

/// Writes `data` to `dst` as far as it takes it, and queues the rest (all of it behind an
/// existing backlog, so bytes never overtake each other).
#[inline]
fn forward(dst: &mut Side, flow: &mut Flow, data: &[u8]) -> Result<(), PumpEnd> {
    if !flow.pending.is_empty() || !dst.writable {
        flow.pending.extend_from_slice(data);
        return Ok(());
    }
    let mut off = 0;
    while off < data.len() {
        match (&dst.stream).write(&data[off..]) {
            Ok(0) => return Err(PumpEnd::DstError(io::ErrorKind::WriteZero.into())),
            Ok(w) => off += w,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                dst.writable = false;
                break;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(PumpEnd::DstError(e)),
        }
    }
    if off < data.len() {
        flow.pending.extend_from_slice(&data[off..]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpListener, TcpStream as StdStream};
    use std::sync::atomic::AtomicBool;
    use std::time::Duration;

    use super::*;
    use crate::proxy::inspect::Inspector;
    use crate::proxy::inspect::tests::frame;

    /// Generous bound on every blocking read, to turn a hang into a failure.
    const PATIENCE: Duration = Duration::from_secs(20);

    /// A connected pair: (the end the test holds, the end the relay gets).
    fn pair() -> (StdStream, StdStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let outer = StdStream::connect(l.local_addr().unwrap()).unwrap();
        let (inner, _) = l.accept().unwrap();
        inner.set_nonblocking(true).unwrap();
        outer.set_read_timeout(Some(PATIENCE)).unwrap();
        (outer, inner)
    }

    struct Ends {
        client: StdStream,
        chrome: StdStream,
        closed: Arc<AtomicBool>,
        outcome: tokio::task::JoinHandle<RelayOutcome>,
        metrics: Arc<Metrics>,
    }

    fn start(relays: &RelayLoop, client_prefix: &[u8], inspect: bool) -> Ends {
        start_with(relays, client_prefix, inspect, None)
    }

    fn start_with(
        relays: &RelayLoop,
        client_prefix: &[u8],
        inspect: bool,
        keepalive: Option<Duration>,
    ) -> Ends {
        let (client, client_inner) = pair();
        let (chrome, chrome_inner) = pair();
        let closed = Arc::new(AtomicBool::new(false));
        let metrics = Metrics::new();
        let job = Job {
            client: client_inner,
            chrome: chrome_inner,
            client_prefix: client_prefix.to_vec(),
            chrome_prefix: Vec::new(),
            inspector: inspect.then(|| Box::new(Inspector::default()) as Box<dyn Watch>),
            on_browser_close: Box::new({
                let closed = closed.clone();
                move || closed.store(true, Ordering::SeqCst)
            }),
            metrics: metrics.clone(),
            keepalive,
        };
        let outcome = tokio::spawn(relays.relay(job));
        Ends {
            client,
            chrome,
            closed,
            outcome,
            metrics,
        }
    }

    fn read_n(s: &mut StdStream, n: usize) -> Vec<u8> {
        let mut v = vec![0; n];
        s.read_exact(&mut v).unwrap();
        v
    }

    fn assert_eof(s: &mut StdStream) {
        let mut b = [0u8; 1];
        assert_eq!(s.read(&mut b).unwrap(), 0, "expected the end of the stream");
    }

    #[tokio::test]
    async fn bytes_flow_both_ways_and_a_client_close_ends_the_relay() {
        let relays = RelayLoop::start(&crate::shutdown::Shutdown::new()).unwrap();
        let mut e = start(&relays, b"early", false);
        assert_eq!(read_n(&mut e.chrome, 5), b"early");
        e.client.write_all(b"ping").unwrap();
        assert_eq!(read_n(&mut e.chrome, 4), b"ping");
        e.chrome.write_all(b"pong!").unwrap();
        assert_eq!(read_n(&mut e.client, 5), b"pong!");
        // Data and FIN in quick succession: the data must still arrive, then the close.
        e.client.write_all(b"bye").unwrap();
        e.client.shutdown(Shutdown::Write).unwrap();
        assert_eq!(read_n(&mut e.chrome, 3), b"bye");
        assert_eof(&mut e.chrome);
        let out = e.outcome.await.unwrap();
        assert!(matches!(out.end, RelayEnd::ClientClosed), "{:?}", out.end);
        assert_eq!((out.client_to_chrome, out.chrome_to_client), (12, 5));
        assert_eq!(e.metrics.bytes_client_to_chrome.get(), 12);
        assert_eq!(e.metrics.bytes_chrome_to_client.get(), 5);
    }

    /// An idle client is pinged (an unmasked empty ping frame) again and again; its pongs,
    /// sent between the fragments of a message too, never reach Chrome, and the messages do,
    /// in order. With and without an inspector (which run different frame trackers).
    #[tokio::test]
    async fn an_idle_client_is_pinged_and_its_pongs_stop_at_the_proxy() {
        let relays = RelayLoop::start(&crate::shutdown::Shutdown::new()).unwrap();
        for inspect in [false, true] {
            let pong = frame(10, true, b"");
            let early = frame(1, true, br#"{"id":1,"method":"Page.enable"}"#);
            let mut e = start_with(
                &relays,
                &[pong.clone(), early.clone()].concat(),
                inspect,
                Some(Duration::from_millis(50)),
            );
            assert_eq!(read_n(&mut e.chrome, early.len()), early);
            for _ in 0..3 {
                assert_eq!(read_n(&mut e.client, 2), ws::ping_frame());
                e.client.write_all(&pong).unwrap();
            }
            let first = frame(1, false, br#"{"id":2,"method":"Target.get"#);
            let last = frame(0, true, br#"Targets"}"#);
            let whole = [first.clone(), pong.clone(), last.clone()].concat();
            // Split inside the pong's header: the two reads are apart in time.
            e.client.write_all(&whole[..first.len() + 1]).unwrap();
            assert_eq!(read_n(&mut e.client, 2), ws::ping_frame());
            e.client.write_all(&whole[first.len() + 1..]).unwrap();
            let want = [first, last].concat();
            assert_eq!(read_n(&mut e.chrome, want.len()), want, "inspect {inspect}");
            // Chrome's messages still reach the client whole.
            e.chrome.write_all(b"\x81\x02{}").unwrap();
            let mut got = read_n(&mut e.client, 2);
            while got == ws::ping_frame() {
                got = read_n(&mut e.client, 2);
            }
            assert_eq!([got, read_n(&mut e.client, 2)].concat(), b"\x81\x02{}");
            drop(e.client);
            assert_eof(&mut e.chrome);
            assert!(matches!(
                e.outcome.await.unwrap().end,
                RelayEnd::ClientClosed
            ));
        }
    }

    /// A connection without keepalive passes the client's pongs on (it is the client's and
    /// Chrome's business) and is never pinged: the next bytes the client reads are Chrome's.
    #[tokio::test]
    async fn without_keepalive_pongs_pass_and_nothing_is_sent() {
        let relays = RelayLoop::start(&crate::shutdown::Shutdown::new()).unwrap();
        let mut e = start(&relays, b"", false);
        let pong = frame(10, true, b"");
        e.client.write_all(&pong).unwrap();
        assert_eq!(read_n(&mut e.chrome, pong.len()), pong);
        e.chrome.write_all(b"\x81\x02{}").unwrap();
        assert_eq!(read_n(&mut e.client, 4), b"\x81\x02{}");
    }

    #[tokio::test]
    async fn chrome_closing_closes_the_client() {
        let relays = RelayLoop::start(&crate::shutdown::Shutdown::new()).unwrap();
        let mut e = start(&relays, b"", false);
        e.chrome.write_all(b"last words").unwrap();
        drop(e.chrome);
        assert_eq!(read_n(&mut e.client, 10), b"last words");
        assert_eof(&mut e.client);
        let out = e.outcome.await.unwrap();
        assert!(matches!(out.end, RelayEnd::ChromeClosed), "{:?}", out.end);
    }

    #[tokio::test]
    async fn a_browser_close_sent_with_the_upgrade_is_withheld() {
        let relays = RelayLoop::start(&crate::shutdown::Shutdown::new()).unwrap();
        let close = frame(1, true, br#"{"id":1,"method":"Browser.close"}"#);
        let other = frame(1, true, br#"{"id":2,"method":"Browser.getVersion"}"#);
        let mut e = start(&relays, &[close, other.clone()].concat(), true);
        assert_eq!(read_n(&mut e.chrome, other.len()), other);
        assert!(e.closed.load(Ordering::SeqCst));
        // Later commands are inspected too.
        let close_again = frame(1, true, br#"{"id":3,"method":"Browser.close"}"#);
        let ping = frame(1, true, br#"{"id":4,"method":"Target.getTargets"}"#);
        e.closed.store(false, Ordering::SeqCst);
        e.client
            .write_all(&[close_again, ping.clone()].concat())
            .unwrap();
        assert_eq!(read_n(&mut e.chrome, ping.len()), ping);
        assert!(e.closed.load(Ordering::SeqCst));
    }

    /// A refused command never reaches Chrome; its answer reaches the client after the Chrome
    /// message in flight, and the connection goes on.
    #[tokio::test]
    async fn a_refused_command_is_answered_between_chromes_messages() {
        let relays = RelayLoop::start(&crate::shutdown::Shutdown::new()).unwrap();
        let mut e = start(&relays, b"", true);
        // Chrome has sent the first half of a message when the refused command comes.
        let event = ws::frame_of(1, br#"{"method":"Page.loadEventFired","params":{}}"#, false);
        e.chrome.write_all(&event[..10]).unwrap();
        assert_eq!(read_n(&mut e.client, 10), event[..10]);
        let refused = frame(
            1,
            true,
            br#"{"id":7,"sessionId":"S","method":"Extensions.loadUnpacked","params":{"path":"/"}}"#,
        );
        let next = frame(1, true, br#"{"id":8,"method":"Browser.getVersion"}"#);
        e.client
            .write_all(&[refused, next.clone()].concat())
            .unwrap();
        assert_eq!(
            read_n(&mut e.chrome, next.len()),
            next,
            "only the next command"
        );
        e.chrome.write_all(&event[10..]).unwrap();
        assert_eq!(read_n(&mut e.client, event.len() - 10), event[10..]);
        let reply = ws::frame_of(
            1,
            br#"{"error":{"code":-32000,"message":"Extensions.loadUnpacked is not allowed through this proxy"},"id":7,"sessionId":"S"}"#,
            false,
        );
        let got = read_n(&mut e.client, reply.len());
        assert_eq!(got[0], 0x81, "one unmasked text frame");
        let at = got.iter().position(|b| *b == b'{').unwrap();
        let got: serde_json::Value = serde_json::from_slice(&got[at..]).unwrap();
        let want: serde_json::Value = serde_json::from_slice(&reply[at..]).unwrap();
        assert_eq!(got, want);
        e.chrome.write_all(b"\x81\x02{}").unwrap();
        assert_eq!(read_n(&mut e.client, 4), b"\x81\x02{}");
        assert!(!e.closed.load(Ordering::SeqCst));
    }

    /// A frame injected for one connection (a handoff's end) reaches its client after the
    /// Chrome message in flight, and no other connection's.
    #[tokio::test]
    async fn an_injected_frame_goes_to_its_client_between_chromes_messages() {
        use crate::viewer::handoff::Deliver;
        let relays = RelayLoop::start(&crate::shutdown::Shutdown::new()).unwrap();
        let handoffs = crate::viewer::handoff::Handoffs::new(Arc::new(relays.injector()));
        let mut ends = Vec::new();
        for _ in 0..2 {
            let (client, client_inner) = pair();
            let (chrome, chrome_inner) = pair();
            let id = next_id();
            let outcome = tokio::spawn(relays.relay(Job {
                client: client_inner,
                chrome: chrome_inner,
                client_prefix: Vec::new(),
                chrome_prefix: Vec::new(),
                inspector: Some(Box::new(
                    Inspector::default().with_handoffs(handoffs.clone(), id),
                )),
                on_browser_close: Box::new(|| {}),
                metrics: Metrics::new(),
                keepalive: None,
            }));
            ends.push((client, chrome, id, outcome));
        }
        let event = ws::frame_of(1, br#"{"method":"Page.loadEventFired","params":{}}"#, false);
        let (a, b) = ends.split_at_mut(1);
        let (ca, ha, ida, _) = &mut a[0];
        let (cb, hb, _, _) = &mut b[0];
        ha.write_all(&event[..10]).unwrap();
        assert_eq!(read_n(ca, 10), event[..10]);
        let text = r#"{"method":"Wallcrawler.handoffCompleted"}"#;
        let injected = ws::frame_of(1, text.as_bytes(), false);
        relays.injector().deliver(*ida, text.to_owned());
        ha.write_all(&event[10..]).unwrap();
        assert_eq!(read_n(ca, event.len() - 10), event[10..]);
        assert_eq!(read_n(ca, injected.len()), injected);
        // The other client got nothing: the next bytes it reads are Chrome's.
        hb.write_all(b"\x81\x02{}").unwrap();
        assert_eq!(read_n(cb, 4), b"\x81\x02{}");
        // An ended connection's id is forgotten: delivering to it is dropped.
        drop(ends.remove(0));
        relays.injector().deliver(u64::MAX, text.to_owned());
    }

    /// What the inspector cannot judge ends the connection with a close frame to the client;
    /// none of it reaches Chrome.
    #[tokio::test]
    async fn a_binary_message_ends_the_connection_with_1003() {
        let relays = RelayLoop::start(&crate::shutdown::Shutdown::new()).unwrap();
        let mut e = start(&relays, b"", true);
        e.client
            .write_all(&frame(
                2,
                true,
                br#"{"id":1,"method":"Extensions.loadUnpacked"}"#,
            ))
            .unwrap();
        let close = ws::close_frame(Fatal::Binary);
        assert_eq!(read_n(&mut e.client, close.len()), close);
        assert_eq!(&close[2..4], &1003u16.to_be_bytes());
        assert_eof(&mut e.client);
        assert_eof(&mut e.chrome);
        let out = e.outcome.await.unwrap();
        assert!(
            matches!(out.end, RelayEnd::ClientRefused(Fatal::Binary)),
            "{:?}",
            out.end
        );
    }

    /// Refused commands from a client that never reads the answers: the backlog is capped and
    /// the connection closed; nothing reached Chrome.
    #[tokio::test]
    async fn a_flood_of_refused_commands_is_closed() {
        let relays = RelayLoop::start(&crate::shutdown::Shutdown::new()).unwrap();
        let e = start(&relays, b"", true);
        let one = frame(1, true, br#"{"id":1,"method":"Extensions.uninstall"}"#);
        let burst: Vec<u8> = one.repeat(200_000 / one.len() * 10);
        let mut client = e.client;
        let writer = std::thread::spawn(move || {
            // Ends with an error once the relay closes the socket.
            while client.write_all(&burst).is_ok() {}
        });
        let out = e.outcome.await.unwrap();
        assert!(
            matches!(out.end, RelayEnd::ClientRefused(Fatal::TooManyRefusals)),
            "{:?}",
            out.end
        );
        writer.join().unwrap();
        let mut chrome = e.chrome;
        assert_eof(&mut chrome);
    }

    /// A destination that reads slowly: what the relay holds stays bounded by its buffer and
    /// every byte arrives in order.
    #[tokio::test]
    async fn backpressure_keeps_order_and_bounds_what_is_held() {
        let relays = RelayLoop::start(&crate::shutdown::Shutdown::new()).unwrap();
        let e = start(&relays, b"", false);
        const TOTAL: usize = 32 << 20;
        let pattern = |i: usize| (i % 251) as u8;
        let mut client = e.client;
        let writer = std::thread::spawn(move || {
            let data: Vec<u8> = (0..TOTAL).map(pattern).collect();
            client.write_all(&data).unwrap();
            client
        });
        let mut chrome = e.chrome;
        let reader = std::thread::spawn(move || {
            let mut got = 0;
            let mut buf = [0u8; 997];
            while got < TOTAL {
                let n = chrome.read(&mut buf).unwrap();
                assert!(n > 0, "early end after {got} bytes");
                for (k, b) in buf[..n].iter().enumerate() {
                    assert_eq!(*b, pattern(got + k), "byte {}", got + k);
                }
                got += n;
                if got % (1 << 20) < n {
                    // Let the relay's destination fill up now and then.
                    std::thread::yield_now();
                }
            }
        });
        reader.join().unwrap();
        drop(writer.join().unwrap());
        let out = e.outcome.await.unwrap();
        assert_eq!(out.client_to_chrome, TOTAL as u64);
    }

    /// Waits until `n` bytes are queued on `s` (a socket the relay is about to get).
    fn wait_queued(s: &StdStream, n: usize) {
        s.set_nonblocking(false).unwrap();
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        let mut buf = vec![0u8; n];
        while s.peek(&mut buf).unwrap() < n {}
        s.set_nonblocking(true).unwrap();
    }

    /// A turn reads at most READS_PER_TURN times, leaving the rest for after the others.
    #[test]
    fn a_turn_has_a_read_budget() {
        let (mut src_outer, src_inner) = pair();
        let (mut dst_outer, dst_inner) = pair();
        src_outer.write_all(&[1u8; 1000]).unwrap();
        wait_queued(&src_inner, 1000);
        let mut src = Side::new(src_inner);
        let mut dst = Side::new(dst_inner);
        (src.readable, dst.writable) = (true, true);
        let mut flow = Flow::default();
        let counter = AtomicU64::new(0);
        let mut scratch = Scratch {
            buf: vec![0u8; 16].into_boxed_slice(),
            segs: Vec::new(),
        };
        let lane = Lane {
            src: &mut src,
            dst: &mut dst,
            flow: &mut flow,
            shared: &counter,
        };
        let turn = pump(lane, &mut Plain, &mut scratch, &|| {});
        assert!(matches!(turn, Ok(Turn::Busy)));
        assert_eq!(flow.bytes, (16 * READS_PER_TURN) as u64);
        assert_eq!(
            read_n(&mut dst_outer, 16 * READS_PER_TURN),
            vec![1u8; 16 * READS_PER_TURN]
        );
        drop(src_outer);
    }

    /// Queues `data` and a FIN on a client socket before the relay gets it, then checks that
    /// Chrome's side receives all of it and the close.
    async fn relays_what_was_queued_before_the_start(relays: &RelayLoop, data: &[u8]) {
        let (mut client, client_inner) = pair();
        let (mut chrome, chrome_inner) = pair();
        client.write_all(data).unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        wait_queued(&client_inner, data.len());
        let outcome = tokio::spawn(relays.relay(Job {
            client: client_inner,
            chrome: chrome_inner,
            client_prefix: Vec::new(),
            chrome_prefix: Vec::new(),
            inspector: None,
            on_browser_close: Box::new(|| {}),
            metrics: Metrics::new(),
            keepalive: None,
        }));
        assert_eq!(read_n(&mut chrome, data.len()), data);
        assert_eof(&mut chrome);
        assert!(matches!(outcome.await.unwrap().end, RelayEnd::ClientClosed));
    }

    /// A connection that used up its budget gets another turn without a new event: here all
    /// the data and the FIN were queued before the relay started, so no further event comes.
    #[tokio::test]
    async fn a_busy_connection_is_driven_again_until_done() {
        let relays = RelayLoop::with_read_buffer(16, &crate::shutdown::Shutdown::new()).unwrap();
        let data: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        relays_what_was_queued_before_the_start(&relays, &data).await;
    }

    /// Data and FIN queued before the relay saw either: the data is delivered, then the close.
    #[tokio::test]
    async fn data_then_fin_arriving_together_are_both_relayed() {
        let relays = RelayLoop::start(&crate::shutdown::Shutdown::new()).unwrap();
        relays_what_was_queued_before_the_start(&relays, b"bye").await;
    }

    #[tokio::test]
    async fn cancel_all_ends_every_relay_and_refuses_new_ones() {
        let relays = RelayLoop::start(&crate::shutdown::Shutdown::new()).unwrap();
        let mut a = start(&relays, b"", false);
        let mut b = start(&relays, b"", false);
        a.client.write_all(b"x").unwrap();
        assert_eq!(read_n(&mut a.chrome, 1), b"x");
        b.client.write_all(b"y").unwrap();
        assert_eq!(read_n(&mut b.chrome, 1), b"y");
        relays.cancel_all();
        for e in [&mut a, &mut b] {
            assert_eof(&mut e.client);
            assert_eof(&mut e.chrome);
        }
        for e in [a, b] {
            assert!(matches!(e.outcome.await.unwrap().end, RelayEnd::Cancelled));
        }
        let mut late = start(&relays, b"", false);
        assert!(matches!(
            late.outcome.await.unwrap().end,
            RelayEnd::Cancelled
        ));
        assert_eof(&mut late.client);
    }

    #[tokio::test]
    async fn dropping_the_loop_ends_its_relays_and_its_thread() {
        let relays = RelayLoop::start(&crate::shutdown::Shutdown::new()).unwrap();
        let mut e = start(&relays, b"", false);
        e.client.write_all(b"x").unwrap();
        assert_eq!(read_n(&mut e.chrome, 1), b"x");
        // Drop joins the thread, so returning at all shows it ended.
        drop(relays);
        assert!(matches!(e.outcome.await.unwrap().end, RelayEnd::Cancelled));
        assert_eof(&mut e.client);
        assert_eof(&mut e.chrome);
    }
}
