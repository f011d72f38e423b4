//! The session's log (`GET /v1/sessions/{id}/logs`): what the proxy's clients asked of Chrome
//! and what it answered, the events they watched, and the platform's own notes, stored as the
//! session runs.
//!
//! Off the relay's hot path: the proxy's tap copies a message (at most its first 64 KiB and its
//! last [`matcher::TAIL`] bytes) and hands it to a [`Recorder`], which never blocks nor wakes
//! the writer (it takes the queue on a timer): a full
//! queue (by count or by bytes) drops the message and counts it. One writer task per session
//! ([`writer`]) turns the messages into entries ([`matcher`]: commands matched to their
//! answers, events picked, secrets redacted by the contract's rules) and stores them in
//! batches as JSON-lines chunks (the files bucket on AWS, the data directory locally) at
//! `files/<projectId>/<sessionId>/logs/`, so the API answers while the session runs and after.
//! The session also watches its pages itself ([`watch`]): their console messages, errors,
//! navigations and crashes are logged whether or not a client listens.
//! A session created with `logSession: false` has no recorder: nothing is recorded.
//!
//! Who owns what: the session's run starts the writer and puts its recorder in the proxy's
//! [`Slot`]; each relayed connection takes a clone when it starts. The writer ends when the run
//! finishes it ([`Writer::finish`]): it drains what was queued, logs the commands still
//! unanswered and stores the last chunk before the session's terminal write.

pub(crate) mod matcher;
pub(crate) mod tap;
pub(crate) mod watch;
pub mod writer;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use wallcrawler_contract::session_log::MAX_RAW_BODY;

pub(crate) use matcher::{Dir, Tapped};
pub use writer::Writer;

/// The most messages waiting for the writer.
pub(crate) const QUEUE: usize = 4096;
/// The most bytes of messages waiting for the writer.
pub(crate) const QUEUE_BYTES: usize = 32 << 20;

/// What the writer is sent.
#[derive(Debug)]
pub(crate) enum Item {
    /// A message the proxy saw.
    Message(Tapped),
    /// A connection began (to a page target, for a page socket).
    Opened { conn: u64, target: Option<String> },
    /// A connection ended.
    Closed { conn: u64 },
    /// A note of the platform's own, at ms since the epoch.
    Note { at: u64, message: String },
}

impl Item {
    fn bytes(&self) -> usize {
        match self {
            Item::Message(t) => t.head.len() + t.tail.len(),
            Item::Note { message, .. } => message.len(),
            _ => 0,
        }
    }
}

/// Counters the recorder and the writer share.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Bytes queued and not yet taken by the writer.
    queued_bytes: AtomicUsize,
    /// Items dropped because the queue was full.
    pub(crate) dropped: AtomicU64,
}

/// The items waiting for the writer: a plain list the relay appends to under a lock held for a
/// push, and the writer takes whole every [`writer::DRAIN_EVERY`]. No wake-up per item: waking
/// the writer's task from the relay thread would cost a system call per message.
#[derive(Debug, Default)]
pub(crate) struct Queue(Mutex<Vec<Item>>);

impl Queue {
    fn take(&self) -> Vec<Item> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// The handle the proxy records through: cheap to clone, never blocks.
#[derive(Debug, Clone)]
pub struct Recorder {
    queue: Arc<Queue>,
    counters: Arc<Counters>,
}

/// The writer's end of the queue.
#[derive(Debug)]
pub(crate) struct Receiver {
    queue: Arc<Queue>,
    taken: VecDeque<Item>,
}

impl Receiver {
    /// Everything queued so far, in order.
    pub(crate) fn take_all(&mut self) -> Vec<Item> {
        let mut all: Vec<Item> = self.taken.drain(..).collect();
        all.extend(self.queue.take());
        all
    }

    /// The next item queued, if any (the tests' view of the queue).
    #[cfg(test)]
    pub(crate) fn try_recv(&mut self) -> Result<Item, ()> {
        if self.taken.is_empty() {
            self.taken.extend(self.queue.take());
        }
        self.taken.pop_front().ok_or(())
    }
}

/// Milliseconds since the epoch, now.
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Recorder {
    /// A recorder and the receiving end the writer drains.
    pub(crate) fn channel() -> (Recorder, Receiver, Arc<Counters>) {
        let queue = Arc::new(Queue::default());
        let counters = Arc::new(Counters::default());
        (
            Recorder {
                queue: queue.clone(),
                counters: counters.clone(),
            },
            Receiver {
                queue,
                taken: VecDeque::new(),
            },
            counters,
        )
    }

    /// Queues `item`, or drops and counts it when the queue is full.
    fn send(&self, item: Item) {
        let n = item.bytes();
        let c = &self.counters;
        if c.queued_bytes.fetch_add(n, Ordering::Relaxed) + n > QUEUE_BYTES {
            c.queued_bytes.fetch_sub(n, Ordering::Relaxed);
            c.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut q = self.queue.0.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() >= QUEUE {
            drop(q);
            c.queued_bytes.fetch_sub(n, Ordering::Relaxed);
            c.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        q.push(item);
    }

    /// A copy of the message `payload` (its start and end, bounded) seen on connection `conn`
    /// going `dir`.
    pub(crate) fn message(&self, conn: u64, dir: Dir, payload: &[u8]) {
        self.send(Item::Message(tap(conn, dir, now_ms(), payload)));
    }

    /// A message already copied in part (a streamed message: its start, its end, its length).
    pub(crate) fn tapped(&self, t: Tapped) {
        self.send(Item::Message(t));
    }

    /// Connection `conn` began, to `target` when it is a page socket.
    pub(crate) fn opened(&self, conn: u64, target: Option<String>) {
        self.send(Item::Opened { conn, target });
    }

    /// Connection `conn` ended.
    pub(crate) fn closed(&self, conn: u64) {
        self.send(Item::Closed { conn });
    }

    /// Connection `conn` ended as the relay says; an end other than a close or the shutdown
    /// is noted in the log.
    pub(crate) fn connection_ended(&self, conn: u64, end: &crate::edge::relay::RelayEnd) {
        use crate::edge::relay::RelayEnd;
        if !matches!(
            end,
            RelayEnd::ClientClosed | RelayEnd::ChromeClosed | RelayEnd::Cancelled
        ) {
            self.note(format!("a client's connection ended: {end}"));
        }
        self.closed(conn);
    }

    /// A note of the platform's own (a proxy failure, a setting not applied). Never a secret.
    pub(crate) fn note(&self, message: impl Into<String>) {
        self.send(Item::Note {
            at: now_ms(),
            message: message.into(),
        });
    }
}

/// `payload`'s start (at most [`MAX_RAW_BODY`] bytes) and, when longer, its last
/// [`matcher::TAIL`] bytes.
pub(crate) fn tap(conn: u64, dir: Dir, at: u64, payload: &[u8]) -> Tapped {
    let head = payload[..payload.len().min(MAX_RAW_BODY)].to_vec();
    let tail = if payload.len() > MAX_RAW_BODY {
        payload[payload.len() - matcher::TAIL.min(payload.len() - MAX_RAW_BODY)..].to_vec()
    } else {
        Vec::new()
    };
    Tapped {
        conn,
        dir,
        at,
        head,
        tail,
        len: payload.len(),
    }
}

/// The log's whole work for one command and its answer, on the caller's thread, for the relay
/// bench (`session_log_work` in `benches/relay.rs`): the tap's copies, the matching and the
/// stored line, without the queue between them.
#[doc(hidden)]
#[derive(Default)]
pub struct RoundTripWork {
    matcher: matcher::Matcher,
    lines: Vec<u8>,
}

impl RoundTripWork {
    /// Logs `command` and its `answer`; the bytes of lines they made.
    pub fn run(&mut self, command: &[u8], answer: &[u8]) -> usize {
        self.lines.clear();
        for (dir, m) in [(Dir::Up, command), (Dir::Down, answer)] {
            for e in self.matcher.message(&tap(1, dir, 0, m)) {
                if serde_json::to_writer(&mut self.lines, &e).is_ok() {
                    self.lines.push(b'\n');
                }
            }
        }
        self.lines.len()
    }
}

/// The proxy's place for the session's recorder: empty before a session is served (a warm
/// browser waiting for its claim) and for a session that asked not to be logged.
#[derive(Debug, Default)]
pub struct Slot(RwLock<Option<Recorder>>);

impl Slot {
    /// The recorder new connections take.
    pub fn set(&self, r: Option<Recorder>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = r;
    }

    /// The session's recorder, if it is logged.
    pub(crate) fn get(&self) -> Option<Recorder> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The session's recorder, told that CDP connection `conn` began, if the session is logged.
    pub(crate) fn begin(&self, conn: u64) -> Option<Recorder> {
        let r = self.get()?;
        r.opened(conn, None);
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_drops_and_counts_never_blocks() {
        let (r, mut rx, counters) = Recorder::channel();
        for i in 0..(QUEUE + 10) {
            r.message(i as u64, Dir::Up, b"{}");
        }
        assert_eq!(counters.dropped.load(Ordering::Relaxed), 10);
        // Bytes bound too: big messages fill it before the count does.
        let (r, _rx2, counters) = Recorder::channel();
        let big = vec![b'x'; MAX_RAW_BODY * 2];
        let fit = QUEUE_BYTES / (MAX_RAW_BODY + matcher::TAIL);
        for _ in 0..(fit + 5) {
            r.message(1, Dir::Down, &big);
        }
        assert_eq!(counters.dropped.load(Ordering::Relaxed), 5);
        assert!(rx.try_recv().is_ok());
    }

    #[test]
    fn a_tap_keeps_the_start_and_the_end() {
        let mut m = vec![b'a'; MAX_RAW_BODY + 1000];
        m.extend_from_slice(b"END");
        let t = tap(1, Dir::Up, 5, &m);
        assert_eq!(t.head.len(), MAX_RAW_BODY);
        assert_eq!(t.tail.len(), matcher::TAIL);
        assert!(t.tail.ends_with(b"END"));
        assert_eq!(t.len, m.len());
        let t = tap(1, Dir::Up, 5, b"{}");
        assert_eq!((t.head.as_slice(), t.tail.len()), (b"{}".as_slice(), 0));
        // Just longer than the start: the end is what is left.
        let t = tap(1, Dir::Up, 5, &vec![b'b'; MAX_RAW_BODY + 3]);
        assert_eq!(t.tail.len(), 3);
    }
}
