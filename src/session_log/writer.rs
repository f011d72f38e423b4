//! The session log's writer task: drains the recorder's queue, turns messages into entries
//! ([`super::matcher`]) and stores them as JSON lines. The current chunk is written again
//! (whole) every [`FLUSH_EVERY`] while it has new entries, and a new chunk is begun once it
//! holds [`CHUNK_BYTES`]: few objects, and what was stored is never older than a flush.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use wallcrawler_contract::session_log::{MAX_ENTRIES, SessionLog, session_log_chunk_key};

use super::matcher::Matcher;
use super::{Counters, Item, Receiver, Recorder, now_ms};
use crate::stores::ArchiveStore;

/// How often new entries are stored.
pub(crate) const FLUSH_EVERY: Duration = Duration::from_millis(500);
/// How often the queue is taken (the relay never wakes the writer).
pub(crate) const DRAIN_EVERY: Duration = Duration::from_millis(50);
/// A chunk this large is complete: the next entries begin another.
pub(crate) const CHUNK_BYTES: usize = 1 << 20;

/// Where the entries go.
#[derive(Clone)]
pub struct Sink {
    /// The files bucket (the data directory's `contexts/` locally).
    pub store: Arc<dyn ArchiveStore>,
    /// The session's project.
    pub project_id: String,
    /// The session.
    pub session_id: String,
}

/// A running writer; [`Writer::finish`] ends it.
pub struct Writer {
    /// Cancelled by `finish`: the task drains the queue, stores the rest and ends.
    stop: CancellationToken,
    task: JoinHandle<()>,
}

/// The task's state.
struct State {
    sink: Sink,
    matcher: Matcher,
    counters: Arc<Counters>,
    /// When this writer began (its chunks' keys sort after an earlier writer's).
    started: u64,
    chunk: u32,
    /// The current chunk's lines.
    current: Vec<u8>,
    /// Entries added since the last store.
    dirty: bool,
    entries: u64,
    dropped_noted: u64,
}

impl Writer {
    /// Starts the writer of `sink`'s session; the recorder is what the proxy records through.
    pub fn start(sink: Sink) -> (Writer, Recorder) {
        let (recorder, rx, counters) = Recorder::channel();
        let stop = CancellationToken::new();
        let state = State {
            sink,
            matcher: Matcher::default(),
            counters,
            started: now_ms(),
            chunk: 0,
            current: Vec::new(),
            dirty: false,
            entries: 0,
            dropped_noted: 0,
        };
        let task = tokio::spawn(run(state, rx, stop.clone()));
        (Writer { stop, task }, recorder)
    }

    /// Starts the session's own watch of the pages of the browser at `browser`
    /// ([`super::watch`]), recording through `recorder`; it ends with the writer or the
    /// browser.
    pub(crate) fn watch_pages(&self, browser: crate::cdp::BrowserSocket, recorder: Recorder) {
        tokio::spawn(super::watch::watch(browser, recorder, self.stop.clone()));
    }

    /// Ends the writer: what was queued is logged, unanswered commands too, and the last
    /// chunk stored, within `within` (past it, what is left is lost and logged).
    pub async fn finish(self, within: Duration) {
        self.stop.cancel();
        let mut task = self.task;
        if tokio::time::timeout(within, &mut task).await.is_err() {
            task.abort();
            warn!("the session log's last entries could not be stored in time");
        }
    }
}

async fn run(mut s: State, mut rx: Receiver, stop: CancellationToken) {
    let mut tick = tokio::time::interval(FLUSH_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut drain = tokio::time::interval(DRAIN_EVERY);
    drain.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = drain.tick() => s.take_all(&mut rx),
            _ = tick.tick() => {
                s.take_all(&mut rx);
                s.flush().await;
            }
            () = stop.cancelled() => break,
        }
    }
    s.take_all(&mut rx);
    let rest = s.matcher.close_all();
    s.add(rest);
    s.flush().await;
    info!(entries = s.entries, "the session log is stored");
}

impl State {
    fn take_all(&mut self, rx: &mut Receiver) {
        for i in rx.take_all() {
            self.take(i);
        }
    }

    fn take(&mut self, item: Item) {
        self.counters
            .queued_bytes
            .fetch_sub(item.bytes(), Ordering::Relaxed);
        let entries = match item {
            Item::Message(t) => self.matcher.message(&t),
            Item::Opened { conn, target } => {
                self.matcher.opened(conn, target);
                Vec::new()
            }
            Item::Closed { conn } => self.matcher.closed(conn),
            Item::Note { at, message } => vec![SessionLog::note(&message, at)],
        };
        self.add(entries);
        for n in self.matcher.take_notes() {
            self.add(vec![SessionLog::note(&n, now_ms())]);
        }
    }

    fn add(&mut self, entries: Vec<SessionLog>) {
        for e in entries {
            if self.entries >= MAX_ENTRIES {
                if self.entries == MAX_ENTRIES {
                    let note = SessionLog::note(
                        &format!(
                            "the session logged {MAX_ENTRIES} entries; later ones are not logged"
                        ),
                        now_ms(),
                    );
                    self.line(&note);
                    self.entries += 1;
                }
                return;
            }
            self.entries += 1;
            self.line(&e);
        }
    }

    /// Appends `e` as a line of the current chunk, written in place (no line of its own to
    /// allocate and copy; the profile of scripts/bench/log-cost.sh showed the growing of that
    /// line among the writer's costs).
    fn line(&mut self, e: &SessionLog) {
        let start = self.current.len();
        if serde_json::to_writer(&mut self.current, e).is_ok() {
            self.current.push(b'\n');
            self.dirty = true;
        } else {
            self.current.truncate(start);
        }
    }

    /// Stores the current chunk when it has new entries (and notes what was dropped first).
    async fn flush(&mut self) {
        let dropped = self.counters.dropped.load(Ordering::Relaxed);
        if dropped > self.dropped_noted {
            let n = dropped - self.dropped_noted;
            self.dropped_noted = dropped;
            self.add(vec![SessionLog::note(
                &format!("{n} messages were not logged: the log could not keep up"),
                now_ms(),
            )]);
        }
        if !self.dirty {
            return;
        }
        let key = session_log_chunk_key(
            &self.sink.project_id,
            &self.sink.session_id,
            self.started,
            self.chunk,
        );
        let body: crate::stores::BoxRead = Box::pin(std::io::Cursor::new(self.current.clone()));
        match self.sink.store.put(&key, body).await {
            Ok(_) => {
                self.dirty = false;
                if self.current.len() >= CHUNK_BYTES {
                    self.chunk += 1;
                    self.current.clear();
                }
            }
            // Tried again at the next flush, with whatever came meanwhile.
            Err(e) => warn!(error = %e, "a session log chunk could not be stored; trying again"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use serde_json::{Value, json};
    use tokio::io::AsyncReadExt;

    use super::*;
    use crate::session_log::Dir;
    use crate::stores::{BoxRead, StoreError};

    /// Objects in memory.
    #[derive(Default)]
    struct Mem(Mutex<BTreeMap<String, Vec<u8>>>);

    #[async_trait::async_trait]
    impl ArchiveStore for Mem {
        async fn open(&self, _: &str) -> Result<Option<BoxRead>, StoreError> {
            Ok(None)
        }
        async fn put(&self, key: &str, mut body: BoxRead) -> Result<u64, StoreError> {
            let mut b = Vec::new();
            body.read_to_end(&mut b).await.unwrap();
            let n = b.len() as u64;
            self.0.lock().unwrap().insert(key.to_owned(), b);
            Ok(n)
        }
    }

    fn entries(mem: &Mem) -> Vec<Value> {
        mem.0
            .lock()
            .unwrap()
            .values()
            .flat_map(|b| {
                b.split(|c| *c == b'\n')
                    .filter(|l| !l.is_empty())
                    .map(|l| serde_json::from_slice(l).unwrap())
                    .collect::<Vec<Value>>()
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn entries_are_stored_during_the_session_and_the_rest_at_its_end() {
        let mem = Arc::new(Mem::default());
        let (w, r) = Writer::start(Sink {
            store: mem.clone(),
            project_id: "proj_a".into(),
            session_id: "sess_b".into(),
        });
        r.opened(1, None);
        r.message(
            1,
            Dir::Up,
            json!({"id": 1, "method": "Page.navigate", "params": {"url": "http://127.0.0.1/"}})
                .to_string()
                .as_bytes(),
        );
        r.message(1, Dir::Down, br#"{"id":1,"result":{"frameId":"F"}}"#);
        r.message(
            1,
            Dir::Up,
            br#"{"id":2,"method":"Runtime.evaluate","params":{"expression":"1"}}"#,
        );
        r.note("a proxy route failed");
        // Stored at a flush, while the session runs (paused time moves on when all wait).
        while entries(&mem).len() < 2 {
            tokio::time::sleep(FLUSH_EVERY).await;
        }
        let got = entries(&mem);
        assert_eq!(got[0]["method"], "Page.navigate");
        assert_eq!(got[0]["response"]["result"]["frameId"], "F");
        assert_eq!(
            got[1]["method"],
            wallcrawler_contract::session_log::NOTE_METHOD
        );
        let keys: Vec<String> = mem.0.lock().unwrap().keys().cloned().collect();
        assert_eq!(keys.len(), 1);
        assert!(keys[0].starts_with("files/proj_a/sess_b/logs/"), "{keys:?}");
        // At the end: the unanswered evaluate too.
        w.finish(Duration::from_secs(5)).await;
        let got = entries(&mem);
        assert_eq!(got.len(), 3);
        assert_eq!(got[2]["method"], "Runtime.evaluate");
        assert!(got[2].get("response").is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn chunks_roll_over_and_keep_their_order() {
        let mem = Arc::new(Mem::default());
        let (w, r) = Writer::start(Sink {
            store: mem.clone(),
            project_id: "p".into(),
            session_id: "s".into(),
        });
        let big = "x".repeat(60_000);
        let n = 2 * CHUNK_BYTES / 60_000 + 5;
        for i in 0..n {
            r.note(format!("{i} {big}"));
            if i % 4 == 0 {
                tokio::time::sleep(FLUSH_EVERY * 2).await;
            }
        }
        w.finish(Duration::from_secs(5)).await;
        let keys = mem.0.lock().unwrap().len();
        assert!(keys >= 2, "{keys} chunks");
        let got = entries(&mem);
        assert_eq!(got.len(), n);
        for (i, e) in got.iter().enumerate() {
            let m = e["response"]["result"]["message"].as_str().unwrap();
            assert!(m.starts_with(&format!("{i} ")), "entry {i} in order");
        }
    }
}
