//! The session's recording (`GET /v1/sessions/{id}/replays`): a video of each page, stored
//! as HLS segments while the session runs, so a crash loses at most the last segment.
//!
//! - [`encoder`]: ffmpeg's arguments and process (one per page, niced, one thread), and the
//!   segments its playlist says are complete.
//! - [`page`]: one page — its frames fed to its encoder, its segments and index stored.
//!
//! A [`Recording`] follows the browser's pages on a CDP connection of its own
//! (`Target.setDiscoverTargets`) and records each page target from the live viewer's
//! screencast of it ([`crate::viewer::hub`]): one screencast per page, shared with whoever
//! watches it live. Nothing of it is on the relay's path: the proxy's relay thread never sees
//! a frame. Bounded: at most [`MAX_PAGES`] pages, the session's bytes at most
//! [`Limits::max_bytes`] (past it every page stops, noted in the operator's log and the
//! session's log), each encoder niced and on one thread.
//!
//! Who owns what: the session's run starts it ([`Recording::start`]) and ends it
//! ([`Recording::finish`]) before the terminal write; the discovery task owns the page tasks
//! and their URL senders; a page task owns its encoder and its scratch directory.

pub(crate) mod encoder;
pub(crate) mod page;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde_json::json;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use wallcrawler_contract::recording::{MAX_PAGES, page_id};

use crate::cdp::{BrowserSocket, Cdp, Event};
use crate::stores::ArchiveStore;
use crate::viewer::hub::Hubs;
pub(crate) use encoder::EncoderSettings;

/// Where the recording goes.
#[derive(Clone)]
pub(crate) struct Sink {
    /// The files bucket (the data directory's `contexts/` locally).
    pub store: Arc<dyn ArchiveStore>,
    /// The session's project.
    pub project_id: String,
    /// The session.
    pub session_id: String,
}

/// A session's recording limits.
#[derive(Debug, Clone)]
pub(crate) struct Limits {
    /// The most bytes of segments one session stores.
    pub max_bytes: u64,
    /// How its pages are encoded.
    pub encoder: EncoderSettings,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_bytes: DEFAULT_MAX_BYTES,
            encoder: EncoderSettings {
                ffmpeg: "ffmpeg".into(),
                fps: 10,
                segment_seconds: 2,
                nice: 10,
            },
        }
    }
}

impl From<&crate::config::RecordingSettings> for Limits {
    fn from(c: &crate::config::RecordingSettings) -> Self {
        let encoder = EncoderSettings {
            ffmpeg: c.ffmpeg.clone(),
            fps: c.fps,
            ..Limits::default().encoder
        };
        Limits {
            max_bytes: c.max_bytes,
            encoder,
        }
    }
}

/// The default cap of one session's recording: hours of an ordinary page at the default
/// rate (about 1 to 5 MiB a minute, see the benchmark).
pub(crate) const DEFAULT_MAX_BYTES: u64 = 1 << 30;

/// What every page of the session's recording shares.
pub(crate) struct Shared {
    sink: Sink,
    encoder: EncoderSettings,
    max_bytes: u64,
    /// Bytes of segments stored (or being stored).
    stored: AtomicU64,
    /// Set once the cap was met: no page stores more.
    capped: AtomicBool,
    /// The session's log, for the note that the cap was met.
    notes: Option<crate::session_log::Recorder>,
}

impl Shared {
    /// Counts `n` more bytes; `false` (and the cap noted once) when they would pass the cap.
    fn take(&self, n: u64) -> bool {
        if self.capped() {
            return false;
        }
        if self.stored.fetch_add(n, Ordering::Relaxed) + n <= self.max_bytes {
            return true;
        }
        self.stored.fetch_sub(n, Ordering::Relaxed);
        if !self.capped.swap(true, Ordering::Relaxed) {
            let note = format!(
                "the session's recording reached its cap of {} bytes; it is not recorded further",
                self.max_bytes
            );
            warn!("{note}");
            if let Some(n) = &self.notes {
                n.note(note);
            }
        }
        false
    }

    /// Gives back `n` bytes counted for a segment that was not stored.
    fn give_back(&self, n: u64) {
        self.stored.fetch_sub(n, Ordering::Relaxed);
    }

    fn capped(&self) -> bool {
        self.capped.load(Ordering::Relaxed)
    }
}

/// A running recording; [`Recording::finish`] ends it.
pub(crate) struct Recording {
    /// Cancelled by `finish`: every page's encoder ends and its last segment is stored.
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Recording {
    /// Starts recording the pages of the browser at `browser`, from the screencasts of `hubs`.
    pub(crate) fn start(
        browser: BrowserSocket,
        hubs: Arc<Hubs>,
        sink: Sink,
        limits: Limits,
        notes: Option<crate::session_log::Recorder>,
    ) -> Recording {
        let shared = Arc::new(Shared {
            sink,
            encoder: limits.encoder,
            max_bytes: limits.max_bytes,
            stored: AtomicU64::new(0),
            capped: AtomicBool::new(false),
            notes,
        });
        let stop = CancellationToken::new();
        let task = tokio::spawn(follow_pages(browser, hubs, shared, stop.clone()));
        Recording { stop, task }
    }

    /// Ends the recording: each page's last segment and its index stored, within `within`
    /// (past it, what is left is lost and logged).
    pub(crate) async fn finish(self, within: Duration) {
        self.stop.cancel();
        let mut task = self.task;
        if tokio::time::timeout(within, &mut task).await.is_err() {
            task.abort();
            warn!("the recording's last segments could not be stored in time");
        }
    }
}

/// The pages being recorded, by target id: each one's URL; and what a new page's recording
/// takes.
struct Pages {
    browser: BrowserSocket,
    hubs: Arc<Hubs>,
    shared: Arc<Shared>,
    stop: CancellationToken,
    urls: HashMap<String, watch::Sender<String>>,
    /// Pages seen so far (the next page's id).
    count: usize,
    tasks: JoinSet<()>,
}

/// Follows the browser's pages until `stop` or the browser's end, recording each; then waits
/// for every page's recording to be stored.
async fn follow_pages(
    browser: BrowserSocket,
    hubs: Arc<Hubs>,
    shared: Arc<Shared>,
    stop: CancellationToken,
) {
    let mut cdp = match Cdp::connect(&browser).await {
        Ok(c) => c,
        Err(e) => return warn!(error = %e, "the recording could not reach the browser"),
    };
    let discover = json!({"discover": true});
    if let Err(e) = cdp.send("Target.setDiscoverTargets", discover).await {
        return warn!(error = %e, "the recording could not follow the browser's pages");
    }
    let mut pages = Pages {
        browser,
        hubs,
        shared,
        stop: stop.clone(),
        urls: HashMap::new(),
        count: 0,
        tasks: JoinSet::new(),
    };
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            e = cdp.next_event() => match e {
                Ok(Some(e)) => pages.on_target(&e),
                Ok(None) | Err(_) => break,
            },
            Some(_) = pages.tasks.join_next(), if !pages.tasks.is_empty() => {}
        }
    }
    stop.cancel();
    while pages.tasks.join_next().await.is_some() {}
    info!(pages = pages.count, "the session's recording is stored");
}

impl Pages {
    /// A page target created: recorded (a new id); its URL changed: told; destroyed:
    /// forgotten (its screencast ends, and with it the page's recording).
    fn on_target(&mut self, e: &Event) {
        let info = &e.params["targetInfo"];
        let id = info["targetId"].as_str().unwrap_or_default();
        let url = info["url"].as_str().unwrap_or_default().to_owned();
        match e.method.as_str() {
            "Target.targetCreated" | "Target.targetInfoChanged" => {
                if let Some(tx) = self.urls.get(id) {
                    tx.send_replace(url);
                    return;
                }
                if info["type"] != "page" || !crate::upstream::is_target_id(id) {
                    return;
                }
                if self.count >= MAX_PAGES || self.shared.capped() {
                    return;
                }
                let (tx, rx) = watch::channel(url);
                let job = page::PageJob {
                    hub: self.hubs.watch(&self.browser.endpoint, id),
                    page_id: page_id(self.count),
                    url: rx,
                    shared: self.shared.clone(),
                    stop: self.stop.clone(),
                };
                self.count += 1;
                self.urls.insert(id.to_owned(), tx);
                self.tasks.spawn(page::record(job));
            }
            "Target.targetDestroyed" => {
                let id = e.params["targetId"].as_str().unwrap_or_default();
                self.urls.remove(id);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stores::{BoxRead, StoreError};

    struct Nowhere;

    #[async_trait::async_trait]
    impl ArchiveStore for Nowhere {
        async fn open(&self, _: &str) -> Result<Option<BoxRead>, StoreError> {
            Ok(None)
        }
        async fn put(&self, _: &str, _: BoxRead) -> Result<u64, StoreError> {
            Ok(0)
        }
    }

    #[test]
    fn the_cap_stops_every_page_once_met() {
        let shared = Shared {
            sink: Sink {
                store: Arc::new(Nowhere),
                project_id: "p".into(),
                session_id: "s".into(),
            },
            encoder: Limits::default().encoder,
            max_bytes: 100,
            stored: AtomicU64::new(0),
            capped: AtomicBool::new(false),
            notes: None,
        };
        assert!(shared.take(60));
        shared.give_back(60);
        assert!(shared.take(100));
        assert!(!shared.capped());
        assert!(!shared.take(1), "one byte over");
        assert!(shared.capped());
        shared.give_back(100);
        assert!(!shared.take(1), "capped for good");
    }
}
