//! Downloads: every file the session's browser downloads, stored at
//! `files/<projectId>/<sessionId>/downloads/<stem>-<unix ms>.<ext>` (S3 on AWS, the data
//! directory locally) as soon as Chrome reports it complete, with the count still in progress
//! on the session item (`downloadsInProgress`) so the API never presents an unfinished set.
//!
//! How the controller learns of them: on its own browser-level CDP connection it sets
//! `Browser.setDownloadBehavior` (`allowAndName` into the session's downloads directory,
//! `eventsEnabled`). Chromium 156 then sends `Browser.downloadWillBegin` (`guid`,
//! `suggestedFilename`) and `Browser.downloadProgress` (`state`, `receivedBytes` and, once
//! complete, `filePath`) to this connection for every download of every browser context,
//! whatever behaviour a client set for its own: checked on the real browser with Playwright
//! (its own contexts, `allowAndName` into its own path: files named by GUID) and Puppeteer
//! (`allow`: files named by the page). So the events, not the directory, are the source: the
//! directory alone cannot tell a growing file from a finished one, nor give the name of a
//! GUID-named file. Clients' paths are rewritten to the same directory by the proxy's guard
//! ([`crate::proxy::guard`]); a finished file whose `filePath` is anywhere else is not read.
//!
//! The count is written to the item as Chrome reports each download begun and each one
//! stored, by one writer task (latest value wins); a `GET …/downloads` made in the same few
//! milliseconds as a download begins can still miss it, and then answers without it.
//!
//! Caps (`DOWNLOADS_MAX_FILES`, `DOWNLOADS_MAX_BYTES`): a download past either is cancelled in
//! the browser (`Browser.cancelDownload`) as soon as it is known to pass (at its start for the
//! file cap; at its announced size, else as its bytes arrive, for the byte cap), so the client
//! sees it fail (`Browser.downloadProgress` `canceled`: Playwright's `download.failure()` says
//! `canceled`), it is logged with the cap, and nothing is stored. One that Chrome finished
//! before the cancel reached it (a fast small file) is not stored either, and removed; the
//! client then learns it only from the zip, which lacks it.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info, warn};
use wallcrawler_contract::storage::download_key;

use crate::cdp::{Cdp, CdpError, Event};
use crate::stores::{ArchiveStore, BoxRead, DownloadsUpdate, ServedSessions};

/// How much a session may store.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caps {
    /// The most bytes stored in all.
    pub max_bytes: u64,
    /// The most files stored.
    pub max_files: u64,
}

/// Where finished downloads go.
#[derive(Clone)]
pub(crate) struct Sink {
    /// The contexts bucket (a directory locally).
    pub store: Arc<dyn ArchiveStore>,
    /// The session's project.
    pub project_id: String,
    /// The session.
    pub session_id: String,
    /// The session's log, which notes each download's start and end (`None`: not logged).
    pub log: Option<crate::session_log::Recorder>,
}

/// The session item whose `downloadsInProgress` this capture keeps.
#[derive(Clone)]
pub(crate) struct Item {
    /// The sessions table (a directory locally).
    pub store: Arc<dyn ServedSessions>,
    /// The session's id.
    pub id: String,
    /// This controller, as the item's `owner` names it.
    pub owner: String,
}

/// A download Chrome has begun whose end this capture has not seen.
struct Begun {
    name: String,
    /// Refused (cancel sent): waiting for Chrome's `canceled`.
    refused: bool,
}

/// The most browser contexts remembered for cancelling.
const MAX_CONTEXTS: usize = 1024;

/// What the event loop and the uploads share.
struct Tally {
    /// Begun and not over, by guid.
    begun: HashMap<String, Begun>,
    /// Files counted against the cap: stored, being stored, or begun.
    files: u64,
    /// Bytes counted against the cap: stored or being stored.
    bytes: u64,
    /// Names stored so far (two downloads of one name in one millisecond stay two files).
    names: HashSet<String>,
}

/// A running capture; [`Capture::finish`] ends it.
pub(crate) struct Capture {
    /// Cancelled by `finish` once Chrome is gone (or the deadline came): the event loop ends.
    stop: CancellationToken,
    events: JoinHandle<()>,
    uploads: TaskTracker,
    /// The count in progress; the event loop and the uploads change it, `finish` zeroes it.
    in_progress: Arc<watch::Sender<u64>>,
    writer: Option<JoinHandle<()>>,
}

/// What the event loop works with.
struct Loop {
    dir: PathBuf,
    sink: Sink,
    caps: Caps,
    tally: Arc<Mutex<Tally>>,
    uploads: TaskTracker,
    in_progress: Arc<watch::Sender<u64>>,
}

impl Capture {
    /// Sets the browser's download behaviour to `dir` on a connection of its own and follows
    /// its downloads until [`Self::finish`].
    pub(crate) async fn start(
        to: &crate::cdp::BrowserSocket,
        dir: &Path,
        sink: Sink,
        caps: Caps,
        item: Option<Item>,
    ) -> Result<Capture, CdpError> {
        let mut cdp = Cdp::connect(to).await?;
        let path = dir.to_str().unwrap_or_default();
        cdp.call(
            "Browser.setDownloadBehavior",
            json!({"behavior": "allowAndName", "downloadPath": path, "eventsEnabled": true}),
        )
        .await?;
        // A download is cancelled in its own browser context: learn them as targets appear.
        cdp.call("Target.setDiscoverTargets", json!({"discover": true}))
            .await?;
        let (tx, rx) = watch::channel(0u64);
        let in_progress = Arc::new(tx);
        let uploads = TaskTracker::new();
        let stop = CancellationToken::new();
        let state = Loop {
            dir: dir.to_owned(),
            sink,
            caps,
            tally: Arc::new(Mutex::new(Tally {
                begun: HashMap::new(),
                files: 0,
                bytes: 0,
                names: HashSet::new(),
            })),
            uploads: uploads.clone(),
            in_progress: in_progress.clone(),
        };
        let events = tokio::spawn(state.run(cdp, stop.clone()));
        let writer = item.map(|item| tokio::spawn(publish(rx, item)));
        Ok(Capture {
            stop,
            events,
            uploads,
            in_progress,
            writer,
        })
    }

    /// After Chrome has closed: the events read to the end, the uploads under way finished,
    /// and `downloadsInProgress` back to 0 (a download Chrome never finished is gone with it),
    /// all within `within`.
    pub(crate) async fn finish(self, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        let mut events = self.events;
        if tokio::time::timeout_at(deadline, &mut events)
            .await
            .is_err()
        {
            self.stop.cancel();
            let _ = events.await;
        }
        self.uploads.close();
        if tokio::time::timeout_at(deadline, self.uploads.wait())
            .await
            .is_err()
        {
            error!(
                "storing the session's downloads ran out of shutdown budget; some are not stored"
            );
        }
        self.in_progress.send_replace(0);
        drop(self.in_progress);
        if let Some(writer) = self.writer
            && tokio::time::timeout_at(deadline, writer).await.is_err()
        {
            warn!("writing downloadsInProgress ran out of shutdown budget");
        }
    }
}

impl Loop {
    async fn run(self, mut cdp: Cdp, stop: CancellationToken) {
        // The browser contexts seen (Chrome cancels a download only in its own context, and
        // its events do not name it); bounded, a context is a few per client.
        let mut contexts: HashSet<String> = HashSet::new();
        loop {
            let event = tokio::select! {
                () = stop.cancelled() => return,
                e = cdp.next_event() => e,
            };
            let e = match event {
                Ok(Some(e)) => e,
                Ok(None) => return,
                Err(e) => {
                    info!(error = %e, "the downloads connection to chrome ended");
                    return;
                }
            };
            if let Some(id) = e.params["targetInfo"]["browserContextId"].as_str()
                && contexts.len() < MAX_CONTEXTS
            {
                contexts.insert(id.to_owned());
            }
            let Some(guid) = self.on_event(&e) else {
                continue;
            };
            let every = std::iter::once(None).chain(contexts.iter().map(Some));
            for context in every {
                let mut params = json!({ "guid": guid });
                if let Some(c) = context {
                    params["browserContextId"] = json!(c);
                }
                // Answered with an error in the contexts the download is not in: ignored.
                if let Err(e) = cdp.send("Browser.cancelDownload", params).await {
                    warn!(error = %e, "cancelling a refused download failed");
                    break;
                }
            }
        }
    }

    /// Tells the session's log `message`, if it is logged.
    fn note(&self, message: impl FnOnce() -> String) {
        if let Some(log) = &self.sink.log {
            log.note(message());
        }
    }

    /// Handles one event; the guid of a download to cancel, if any.
    fn on_event(&self, e: &Event) -> Option<String> {
        let guid = e.params["guid"].as_str()?.to_owned();
        match e.method.as_str() {
            "Browser.downloadWillBegin" => {
                let name = e.params["suggestedFilename"].as_str().unwrap_or_default();
                self.note(|| format!("a download began: {name:?}"));
                let refused = self.begin(guid, name);
                if refused.is_some() {
                    self.note(|| {
                        format!("the download {name:?} was refused: the session's download limits")
                    });
                }
                refused
            }
            "Browser.downloadProgress" => match e.params["state"].as_str() {
                Some("inProgress") => {
                    // The announced size (Content-Length) refuses a download at once, before
                    // Chrome has it all; the bytes received catch one without.
                    let received = e.params["receivedBytes"].as_u64().unwrap_or(0);
                    let total = e.params["totalBytes"].as_u64().unwrap_or(0);
                    self.check_bytes(guid, received.max(total))
                }
                Some("completed") => {
                    let bytes = e.params["receivedBytes"].as_u64().unwrap_or(0);
                    self.note(|| format!("a download completed ({bytes} bytes)"));
                    self.complete(&guid, &e.params);
                    None
                }
                Some("canceled") => {
                    self.note(|| "a download was canceled".to_owned());
                    self.forget(&guid, 0);
                    None
                }
                _ => None,
            },
            _ => None,
        }
    }

    fn begin(&self, guid: String, name: &str) -> Option<String> {
        let mut t = lock(&self.tally);
        if t.files >= self.caps.max_files {
            warn!(
                max_files = self.caps.max_files,
                "download refused: the session stored DOWNLOADS_MAX_FILES already; cancelled in the browser, not stored"
            );
            return Some(guid);
        }
        t.files += 1;
        t.begun.insert(
            guid,
            Begun {
                name: name.to_owned(),
                refused: false,
            },
        );
        self.in_progress.send_modify(|n| *n += 1);
        None
    }

    fn check_bytes(&self, guid: String, received: u64) -> Option<String> {
        let mut t = lock(&self.tally);
        let over = t.bytes.saturating_add(received) > self.caps.max_bytes;
        let begun = t.begun.get_mut(&guid).filter(|b| over && !b.refused)?;
        begun.refused = true;
        warn!(
            max_bytes = self.caps.max_bytes,
            "download refused: it would pass the session's DOWNLOADS_MAX_BYTES; cancelled in the browser, not stored"
        );
        Some(guid)
    }

    /// A download over for good (cancelled, refused, or not storable): no longer in
    /// progress, and no longer counted unless `kept_bytes` were stored.
    fn forget(&self, guid: &str, kept_bytes: u64) {
        let mut t = lock(&self.tally);
        if t.begun.remove(guid).is_some() {
            if kept_bytes == 0 {
                t.files -= 1;
            }
            self.in_progress.send_modify(|n| *n = n.saturating_sub(1));
        }
    }

    fn complete(&self, guid: &str, params: &Value) {
        let received = params["receivedBytes"].as_u64().unwrap_or(0);
        let Some(file) = params["filePath"].as_str().and_then(|p| self.inside(p)) else {
            warn!("a finished download is not in the session's downloads directory; not stored");
            self.forget(guid, 0);
            return;
        };
        let name = {
            let mut t = lock(&self.tally);
            let Some(begun) = t.begun.get(guid) else {
                return;
            };
            if t.bytes.saturating_add(received) > self.caps.max_bytes {
                drop(t);
                // Finished before the cancel reached Chrome: not stored, and not kept either.
                warn!(
                    max_bytes = self.caps.max_bytes,
                    "download refused: it passes the session's DOWNLOADS_MAX_BYTES; not stored, removed"
                );
                let _ = std::fs::remove_file(&file);
                self.forget(guid, 0);
                return;
            }
            let name = unique_name(&begun.name, &t.names);
            t.names.insert(name.clone());
            t.bytes += received;
            name
        };
        let key = download_key(&self.sink.project_id, &self.sink.session_id, &name);
        let (store, tally, in_progress, guid) = (
            self.sink.store.clone(),
            self.tally.clone(),
            self.in_progress.clone(),
            guid.to_owned(),
        );
        self.uploads.spawn(async move {
            let stored = upload(store.as_ref(), &key, &file).await;
            let mut t = lock(&tally);
            t.begun.remove(&guid);
            if let Some(n) = stored {
                info!(bytes = n, name = %name, "download stored");
            } else {
                t.files -= 1;
                t.bytes = t.bytes.saturating_sub(received);
            }
            in_progress.send_modify(|n| *n = n.saturating_sub(1));
        });
    }

    /// `p`, when it names a file directly in the downloads directory (where Chrome writes
    /// them; a file in a folder Chrome's user made there is not read: the folder could be
    /// swapped for a link between this check and the read).
    fn inside(&self, p: &str) -> Option<PathBuf> {
        let real = std::fs::canonicalize(p).ok()?;
        (real.parent() == Some(self.dir.as_path()) && real.is_file()).then_some(real)
    }
}

fn lock(t: &Mutex<Tally>) -> std::sync::MutexGuard<'_, Tally> {
    t.lock().unwrap_or_else(|p| p.into_inner())
}

/// Streams `file` to `key`; the bytes stored, `None` (logged) on failure.
async fn upload(store: &dyn ArchiveStore, key: &str, file: &Path) -> Option<u64> {
    let f = match open_regular(file).await {
        Ok(f) => f,
        Err(e) => {
            error!(error = %e, "a finished download cannot be read; not stored");
            return None;
        }
    };
    let body: BoxRead = Box::pin(tokio::io::BufReader::with_capacity(256 * 1024, f));
    match store.put(key, body).await {
        Ok(n) => Some(n),
        Err(e) => {
            error!(error = %e, "storing a download failed");
            None
        }
    }
}

/// Opens `file` for reading without following a link in its last component, and only if it
/// is a regular file: Chrome's user owns the downloads directory (`CHROME_USER`) and could put
/// a link to the controller's files where a finished download was, after it was checked.
async fn open_regular(file: &Path) -> std::io::Result<tokio::fs::File> {
    let f = tokio::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits() | nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(file)
        .await?;
    if !f.metadata().await?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(f)
}

/// Keeps the item's `downloadsInProgress` equal to the latest count, until the count's sender
/// is dropped (then the last value is written).
async fn publish(mut rx: watch::Receiver<u64>, item: Item) {
    let mut written = 0u64;
    loop {
        let n = *rx.borrow_and_update();
        if n != written {
            match write(&item, n).await {
                Ok(true) => written = n,
                Ok(false) => {
                    info!("the session is another controller's; downloadsInProgress is not written")
                }
                Err(e) => warn!(error = %e, "writing downloadsInProgress failed"),
            }
        }
        if rx.changed().await.is_err() {
            let last = *rx.borrow();
            if last != written {
                let _ = write(&item, last).await;
            }
            return;
        }
    }
}

/// `downloadsInProgress` = `count` on the item.
async fn write(item: &Item, count: u64) -> Result<bool, crate::stores::StoreError> {
    let u = DownloadsUpdate {
        owner: &item.owner,
        now: wallcrawler_contract::time::unix_millis() / 1000,
        count,
    };
    item.store.set_downloads_in_progress(&item.id, &u).await
}

/// The most bytes of a stored name's stem (S3 keys and file names stay well within limits).
const MAX_STEM_BYTES: usize = 120;

/// Browserbase's name for a download, `<stem>-<unix ms>.<ext>`, made one safe path component:
/// only ASCII letters, digits, `.`, `-`, `_` (anything else becomes `_`), no leading dot.
pub(crate) fn stored_name(suggested: &str, unix_ms: u64) -> String {
    let base = suggested.rsplit(['/', '\\']).next().unwrap_or_default();
    let clean: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let clean = clean.trim_start_matches('.');
    let (stem, ext) = match clean.rsplit_once('.') {
        Some((s, e)) if !s.is_empty() && !e.is_empty() => (s, Some(e)),
        _ => (clean, None),
    };
    let stem = if stem.is_empty() { "download" } else { stem };
    let stem = &stem[..stem.len().min(MAX_STEM_BYTES)];
    let ext = ext.map(|e| &e[..e.len().min(16)]);
    match ext {
        Some(e) => format!("{stem}-{unix_ms}.{e}"),
        None => format!("{stem}-{unix_ms}"),
    }
}

/// [`stored_name`] now, made unique among `taken` (a counter after the time).
fn unique_name(suggested: &str, taken: &HashSet<String>) -> String {
    let ms = wallcrawler_contract::time::unix_millis();
    let first = stored_name(suggested, ms);
    if !taken.contains(&first) {
        return first;
    }
    (1..)
        .map(|i| stored_name(suggested, ms + i))
        .find(|n| !taken.contains(n))
        .unwrap_or(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A link or a FIFO where a finished download was is not read; a regular file is.
    #[tokio::test]
    async fn only_a_regular_file_is_read_never_through_a_link() {
        let d = tempfile::tempdir().unwrap();
        let secret = d.path().join("secret");
        std::fs::write(&secret, b"controller's").unwrap();
        let link = d.path().join("report.csv");
        std::os::unix::fs::symlink(&secret, &link).unwrap();
        let e = open_regular(&link).await.unwrap_err();
        assert_eq!(e.raw_os_error(), Some(nix::libc::ELOOP), "{e}");
        let fifo = d.path().join("fifo.csv");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let e = open_regular(&fifo).await.unwrap_err();
        assert_eq!(e.to_string(), "not a regular file");
        assert!(open_regular(&secret).await.is_ok());
    }

    #[test]
    fn names_are_browserbase_shaped_and_one_safe_component() {
        assert_eq!(stored_name("report.csv", 17), "report-17.csv");
        assert_eq!(stored_name("archive.tar.gz", 1), "archive.tar-1.gz");
        assert_eq!(stored_name("README", 5), "README-5");
        assert_eq!(stored_name("../../etc/passwd", 5), "passwd-5");
        assert_eq!(stored_name("..\\x.txt", 5), "x-5.txt");
        assert_eq!(stored_name(".hidden", 5), "hidden-5");
        assert_eq!(stored_name("", 5), "download-5");
        assert_eq!(stored_name("..", 5), "download-5");
        assert_eq!(stored_name("a b/ü?.pdf", 5), "__-5.pdf");
        let long = "x".repeat(500) + ".bin";
        assert!(stored_name(&long, 5).len() < 150);
        for n in ["a/b", "..", "/x", "a\0b"] {
            let s = stored_name(n, 9);
            assert!(
                !s.contains('/') && !s.starts_with('.') && !s.contains('\0'),
                "{s}"
            );
        }
    }

    #[test]
    fn same_names_in_one_millisecond_stay_apart() {
        let mut taken = HashSet::new();
        let a = unique_name("a.txt", &taken);
        taken.insert(a.clone());
        let b = unique_name("a.txt", &taken);
        assert_ne!(a, b);
    }
}
