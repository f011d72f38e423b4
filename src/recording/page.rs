//! One page's recording: its hub's frames fed to its encoder ([`feed`]), and the segments the
//! encoder completes stored with the page's index ([`Store`]) while the page lives; when its
//! recording ends, the MP4 joined from them.
//!
//! The feed takes a frame only when the screencast sent a new one, at most `fps` a second
//! (a faster page skips frames: the hub keeps the latest only), and repeats the last one every
//! [`HEARTBEAT`] while the page is idle, so ffmpeg closes segments on time. It never waits on
//! the proxy: it reads the hub's latest frame, and a stalled encoder only stalls this page's
//! own feed (each write is bounded by [`WRITE_TIMEOUT`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use tokio::io::AsyncWriteExt;
use tokio::process::ChildStdin;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use wallcrawler_contract::recording::{
    MAX_SEGMENTS, MP4_NAME, PageIndex, Segment, index_key, page_prefix,
};

use super::Shared;
use super::encoder::{self, LOCAL_PLAYLIST};
use crate::session_log::now_ms;
use crate::viewer::hub::{Frame, Hub};

/// How often an idle page's last frame is sent again.
pub(crate) const HEARTBEAT: Duration = Duration::from_secs(1);
/// How often completed segments are looked for and stored.
pub(crate) const STORE_EVERY: Duration = Duration::from_secs(1);
/// The longest one frame's write to the encoder may take before the page's recording ends.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the encoder has to finish its last segment once its input ended.
const ENCODER_END: Duration = Duration::from_secs(10);

/// A page to record.
pub(crate) struct PageJob {
    /// The page's screencast, held for as long as it is recorded.
    pub hub: Arc<Hub>,
    /// The page's id in the session ([`wallcrawler_contract::recording::page_id`]).
    pub page_id: String,
    /// The page's URL as it changes (the discovery loop owns the sender).
    pub url: watch::Receiver<String>,
    /// The session's recording.
    pub shared: Arc<Shared>,
    /// Cancelled when the session's recording ends.
    pub stop: CancellationToken,
}

/// A screencast frame as the encoder takes it.
struct Jpeg {
    data: Vec<u8>,
    w: u32,
    h: u32,
}

/// The JPEG of a hub's frame message (`{"type":"frame",data,w,h,…}`).
fn jpeg(frame: &Frame) -> Option<Jpeg> {
    #[derive(serde::Deserialize)]
    struct Msg<'a> {
        #[serde(borrow)]
        data: &'a str,
        w: Option<f64>,
        h: Option<f64>,
    }
    let m: Msg<'_> = serde_json::from_str(frame).ok()?;
    let data = base64::engine::general_purpose::STANDARD
        .decode(m.data)
        .ok()?;
    // The picture's own size; the page's (CSS pixels) when it cannot be read.
    let (w, h) = jpeg_size(&data).unwrap_or((m.w.unwrap_or(0.0) as u32, m.h.unwrap_or(0.0) as u32));
    Some(Jpeg { data, w, h })
}

/// A JPEG's width and height, from its first start-of-frame segment.
fn jpeg_size(data: &[u8]) -> Option<(u32, u32)> {
    let mut i = 2;
    while i + 9 < data.len() {
        if data[i] != 0xFF {
            return None;
        }
        let marker = data[i + 1];
        let len = usize::from(u16::from_be_bytes([data[i + 2], data[i + 3]]));
        // SOF0..SOF15, not DHT (C4), JPG (C8) or DAC (CC).
        if (0xC0..=0xCF).contains(&marker) && ![0xC4, 0xC8, 0xCC].contains(&marker) {
            let h = u16::from_be_bytes([data[i + 5], data[i + 6]]);
            let w = u16::from_be_bytes([data[i + 7], data[i + 8]]);
            return Some((u32::from(w), u32::from(h)));
        }
        i += 2 + len;
    }
    None
}

/// How long the first frame may be the hub's still (a screenshot, sized as the screencast's
/// frames may not be) before the video is sized from it: a page in front sends a screencast
/// frame sooner; a background tab never does.
const STILL_WAIT: Duration = Duration::from_secs(5);

/// The page's first frame (a screencast frame if one comes within [`STILL_WAIT`] of the
/// still); `None` when the page or the recording ended first.
async fn first_frame(
    frames: &mut watch::Receiver<Option<Frame>>,
    stop: &CancellationToken,
) -> Option<Jpeg> {
    frames.mark_changed();
    let mut still: Option<Jpeg> = None;
    let mut until = Instant::now() + Duration::from_secs(3600);
    loop {
        tokio::select! {
            () = stop.cancelled() => return None,
            () = tokio::time::sleep_until(until), if still.is_some() => return still,
            r = frames.changed() => {
                if r.is_err() {
                    return still;
                }
                let latest = frames.borrow_and_update().clone();
                let Some(frame) = latest else { continue };
                match jpeg(&frame) {
                    Some(j) if !is_still(&frame) => return Some(j),
                    Some(j) if still.is_none() => {
                        still = Some(j);
                        until = Instant::now() + STILL_WAIT;
                    }
                    _ => {}
                }
            }
        }
    }
}

/// Whether a hub's frame message is its still (`"still":true`, set by the hub alone; no
/// other field of the message can hold a quote).
fn is_still(frame: &Frame) -> bool {
    frame.contains(r#""still":true"#)
}

/// Records `job`'s page until it closes, the session's recording ends or the size cap is met.
pub(crate) async fn record(job: PageJob) {
    let mut frames = job.hub.frames();
    let Some(first) = first_frame(&mut frames, &job.stop).await else {
        return;
    };
    let scratch = match tempfile::Builder::new()
        .prefix("wallcrawler-recording-")
        .tempdir()
    {
        Ok(d) => d,
        Err(e) => return warn!(error = %e, "no scratch directory for the page's recording"),
    };
    let settings = &job.shared.encoder;
    let size = encoder::video_size(first.w, first.h);
    let mut child = match encoder::spawn(settings, &encoder::args(settings, size, scratch.path())) {
        Ok(c) => c,
        Err(e) => {
            if let Some(n) = &job.shared.notes {
                n.note(format!(
                    "page {} is not recorded: the video encoder (ffmpeg) could not start",
                    job.page_id
                ));
            }
            return warn!(error = %e, ffmpeg = %settings.ffmpeg.display(),
                "the encoder could not start; the page is not recorded");
        }
    };
    let Some(stdin) = child.stdin.take() else {
        return;
    };
    info!(page_id = %job.page_id, "recording the page");
    let mut store = Store::new(&job, scratch.path().to_owned());
    // Cancelled with the session's recording, or here once the page may record no more.
    let feeding = job.stop.child_token();
    let fps = settings.fps;
    let feed = tokio::spawn(feed(stdin, first.data, frames, feeding.clone(), fps));
    let mut tick = tokio::time::interval(STORE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(feed);
    loop {
        tokio::select! {
            _ = &mut feed => break,
            _ = tick.tick() => {
                if !store.store_new(false).await {
                    feeding.cancel();
                }
            }
        }
    }
    if tokio::time::timeout(ENCODER_END, child.wait())
        .await
        .is_err()
    {
        warn!("the encoder did not finish its last segment in time");
        let _ = child.kill().await;
    }
    store.store_new(true).await;
    store.store_mp4(settings).await;
    info!(page_id = %job.page_id, segments = store.index.segments.len(), mp4 = store.index.mp4,
        "the page's recording is stored");
}

/// Writes the page's frames to the encoder until `stop`, the page's end (its hub's frames
/// end) or a failed write; then the last frame once more (the video lasts until now) and
/// closes the encoder's input.
async fn feed(
    mut stdin: ChildStdin,
    mut last: Vec<u8>,
    mut frames: watch::Receiver<Option<Frame>>,
    stop: CancellationToken,
    fps: u32,
) {
    let mut latest: Option<Frame> = None;
    let mut tick = tokio::time::interval(Duration::from_secs(1) / fps.max(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut written = Instant::now();
    if !write(&mut stdin, &last).await {
        return;
    }
    loop {
        tokio::select! {
            biased;
            () = stop.cancelled() => break,
            r = frames.changed() => match r {
                Ok(()) => latest = frames.borrow_and_update().clone(),
                Err(_) => break,
            },
            _ = tick.tick(), if latest.is_some() => {
                if let Some(j) = latest.take().as_ref().and_then(jpeg) {
                    last = j.data;
                }
                if !write(&mut stdin, &last).await {
                    return;
                }
                written = Instant::now();
            }
            () = tokio::time::sleep_until(written + HEARTBEAT) => {
                if !write(&mut stdin, &last).await {
                    return;
                }
                written = Instant::now();
            }
        }
    }
    write(&mut stdin, &last).await;
}

/// Writes one frame; `false` when the encoder is gone or stalled.
async fn write(stdin: &mut ChildStdin, jpeg: &[u8]) -> bool {
    match tokio::time::timeout(WRITE_TIMEOUT, stdin.write_all(jpeg)).await {
        Ok(Ok(())) => true,
        Ok(Err(e)) => {
            warn!(error = %e, "the encoder stopped taking frames");
            false
        }
        Err(_) => {
            warn!("the encoder took no frame for {WRITE_TIMEOUT:?}; the page's recording ends");
            false
        }
    }
}

/// The page's stored recording: its index and the segments stored so far.
struct Store {
    shared: Arc<Shared>,
    dir: PathBuf,
    prefix: String,
    index_key: String,
    url: watch::Receiver<String>,
    index: PageIndex,
}

impl Store {
    fn new(job: &PageJob, dir: PathBuf) -> Self {
        let sink = &job.shared.sink;
        let start = now_ms();
        Self {
            shared: job.shared.clone(),
            dir,
            prefix: page_prefix(&sink.project_id, &sink.session_id, &job.page_id),
            index_key: index_key(&sink.project_id, &sink.session_id, &job.page_id),
            url: job.url.clone(),
            index: PageIndex {
                page_id: job.page_id.clone(),
                url: job.url.borrow().clone(),
                start_time_ms: start,
                end_time_ms: start,
                segments: Vec::new(),
                ended: false,
                mp4: false,
            },
        }
    }

    /// Stores the segments the encoder completed since the last call, then the index when it
    /// changed (`ended`: the page's recording is over). `false` once the page may record no
    /// more (the session's cap, the page's most segments).
    async fn store_new(&mut self, ended: bool) -> bool {
        let text = tokio::fs::read_to_string(self.dir.join(LOCAL_PLAYLIST))
            .await
            .unwrap_or_default();
        let before = self.index.segments.len();
        let mut more = true;
        for (name, duration) in encoder::listed_segments(&text).into_iter().skip(before) {
            if self.index.segments.len() >= MAX_SEGMENTS || self.shared.capped() {
                more = false;
                break;
            }
            if !self.store_file(&name).await {
                more = !self.shared.capped();
                break;
            }
            self.index.segments.push(Segment { name, duration });
        }
        let url = self.url.borrow().clone();
        let changed = self.index.segments.len() != before || url != self.index.url;
        self.index.url = url;
        let seconds: f64 = self.index.segments.iter().map(|s| s.duration).sum();
        self.index.end_time_ms = self.index.start_time_ms + (seconds * 1000.0) as u64;
        let ended = ended || !more;
        if changed || ended != self.index.ended {
            self.index.ended = ended;
            self.store_index().await;
        }
        more
    }

    /// Joins the stored segments into the page's MP4 (`recording.mp4`), stores it within the
    /// session's cap and marks the index, so an API without ffmpeg (AWS's Lambda) answers the
    /// page's download. One not built is logged (and noted in the session's log): where the
    /// API has ffmpeg it builds it on request.
    async fn store_mp4(&mut self, settings: &encoder::EncoderSettings) {
        if self.index.segments.is_empty() {
            return;
        }
        let why = match encoder::join_mp4(settings, &self.dir, &self.index).await {
            Err(e) => {
                warn!(error = %e, "the page's MP4 could not be built");
                "could not be built"
            }
            Ok(()) if self.store_file(MP4_NAME).await => {
                self.index.mp4 = true;
                return self.store_index().await;
            }
            Ok(()) => "could not be stored (the session's recording cap, or the store)",
        };
        if let Some(n) = &self.shared.notes {
            n.note(format!("page {}: its MP4 {why}", self.index.page_id));
        }
    }

    /// Stores file `name` of the scratch directory (within the session's cap) below the page's
    /// prefix, keeping the local file (the MP4 is joined from the segments at the end); `false`
    /// when it was not stored (the cap met, the store failing: tried again next time).
    async fn store_file(&mut self, name: &str) -> bool {
        let path = self.dir.join(name);
        let Ok(body) = tokio::fs::read(&path).await else {
            return false;
        };
        let n = body.len() as u64;
        if !self.shared.take(n) {
            return false;
        }
        let key = format!("{}{name}", self.prefix);
        let body: crate::stores::BoxRead = Box::pin(std::io::Cursor::new(body));
        if let Err(e) = self.shared.sink.store.put(&key, body).await {
            self.shared.give_back(n);
            warn!(error = %e, file = name, "a recording's file could not be stored");
            return false;
        }
        true
    }

    async fn store_index(&self) {
        let Ok(body) = serde_json::to_vec(&self.index) else {
            return;
        };
        let body: crate::stores::BoxRead = Box::pin(std::io::Cursor::new(body));
        if let Err(e) = self.shared.sink.store.put(&self.index_key, body).await {
            warn!(error = %e, "a recording's index could not be stored");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A JPEG's start as encoders write it: SOI, an APP0 segment, then SOF0 (`h`, `w`).
    fn jpeg_head(w: u16, h: u16) -> Vec<u8> {
        let mut b = vec![0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x10];
        b.extend_from_slice(b"JFIF\0\x01\x01\0\0\x01\0\x01\0\0");
        b.extend_from_slice(&[0xFF, 0xC4, 0x00, 0x04, 0x00, 0x00]);
        b.extend_from_slice(&[0xFF, 0xC0, 0x00, 0x11, 0x08]);
        b.extend_from_slice(&h.to_be_bytes());
        b.extend_from_slice(&w.to_be_bytes());
        b.extend_from_slice(&[0x03; 12]);
        b
    }

    #[test]
    fn a_frame_is_sized_by_its_picture() {
        assert_eq!(jpeg_size(&jpeg_head(800, 600)), Some((800, 600)));
        assert_eq!(jpeg_size(b"not a jpeg at all"), None);
        assert_eq!(jpeg_size(&jpeg_head(800, 600)[..12]), None);
        let data = base64::engine::general_purpose::STANDARD.encode(jpeg_head(1280, 657));
        let frame: Frame = Arc::from(
            format!(r#"{{"type":"frame","page":"P","data":"{data}","w":800,"h":600}}"#).as_str(),
        );
        let j = jpeg(&frame).unwrap();
        assert_eq!((j.w, j.h), (1280, 657));
        assert!(!is_still(&frame));
        let still: Frame = Arc::from(
            format!(r#"{{"type":"frame","page":"P","data":"{data}","w":1,"h":1,"still":true}}"#)
                .as_str(),
        );
        assert!(is_still(&still));
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_frame_is_the_screencast_s_when_one_comes_soon() {
        let data = base64::engine::general_purpose::STANDARD.encode(jpeg_head(10, 10));
        let msg = |still: bool| -> Option<Frame> {
            let s = if still { r#","still":true"# } else { "" };
            Some(Arc::from(
                format!(r#"{{"type":"frame","data":"{data}","w":1,"h":1{s}}}"#).as_str(),
            ))
        };
        let stop = CancellationToken::new();
        // A still, then a screencast frame within the wait: the screencast's.
        let (tx, mut rx) = watch::channel(msg(true));
        let got =
            tokio::spawn(async move { first_frame(&mut rx, &CancellationToken::new()).await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        tx.send_replace(msg(false));
        assert!(got.await.unwrap().is_some());
        // Only a still (a background tab): the still, once the wait is over.
        let (_tx, mut rx) = watch::channel(msg(true));
        let started = Instant::now();
        assert!(first_frame(&mut rx, &stop).await.is_some());
        assert!(started.elapsed() >= STILL_WAIT);
        // Nothing and the page gone: none.
        let (tx, mut rx) = watch::channel(None);
        drop(tx);
        assert!(first_frame(&mut rx, &stop).await.is_none());
    }
}
