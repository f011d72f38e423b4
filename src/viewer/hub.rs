//! One screencast per watched page, shared by every viewer of it.
//!
//! A [`Hub`] owns a CDP connection of its own to the page (`/devtools/page/<id>`, dialled
//! through [`Endpoint`] so it works in Chrome's private network namespace), starts
//! `Page.startScreencast` (JPEG), acknowledges every `Page.screencastFrame` and keeps only the
//! latest frame in a `watch` channel: a slow viewer skips frames, it never queues them.
//! Viewers hold the hub in an `Arc`; the map keeps a `Weak`, so the last viewer's drop stops
//! the screencast (`Page.stopScreencast`) and closes the connection.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use super::input::Command;
use backon::BackoffBuilder as _;
use wallcrawler_contract::retry;

use crate::cdp::{BrowserSocket, Cdp, CdpError};
use crate::telemetry::Metrics;
use crate::upstream::Endpoint;

/// How long the still frame of a new hub may take.
const STILL_TIMEOUT: Duration = Duration::from_secs(2);

/// The first wait before a refused screencast start is tried again (a navigation's commit is
/// a few milliseconds), doubling up to [`START_MAX_WAIT`], for [`START_WITHIN`] in all.
const START_FIRST_WAIT: Duration = Duration::from_millis(10);
const START_MAX_WAIT: Duration = Duration::from_millis(500);
const START_WITHIN: Duration = Duration::from_secs(5);

/// Input commands waiting for the page, at most (beyond: dropped, as a busy page would).
const INPUT_QUEUE: usize = 256;

/// One frame as viewers are sent it: the `{"type":"frame",…}` text, built once.
pub type Frame = Arc<str>;

/// A watched page's screencast.
pub struct Hub {
    /// The page's target id.
    pub target: String,
    /// The latest frame (`None` before the first). The hub's task owns the sender; it is
    /// dropped when the page or the connection goes, which viewers see as the end.
    frames: watch::Receiver<Option<Frame>>,
    /// Commands for the page; the hub's task owns the receiver.
    input: mpsc::Sender<Command>,
    /// Cancelled when the last viewer drops the hub: the task stops the screencast.
    stop: CancellationToken,
}

impl Hub {
    /// The page's frames, latest only.
    pub fn frames(&self) -> watch::Receiver<Option<Frame>> {
        self.frames.clone()
    }

    /// Queues `cmd` for the page; dropped when the queue is full.
    pub fn send(&self, cmd: Command) {
        if self.input.try_send(cmd).is_err() {
            debug!("viewer input dropped: the page's queue is full or gone");
        }
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The hubs of the pages being watched, by target id.
pub struct Hubs {
    hubs: Mutex<HashMap<String, Weak<Hub>>>,
    metrics: Arc<Metrics>,
}

impl Hubs {
    /// No page watched yet; screencast starts are counted in `metrics`.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            hubs: Mutex::new(HashMap::new()),
            metrics,
        }
    }

    /// The hub of `target` on the Chrome at `endpoint`: the running one, or a new one whose
    /// task connects and starts the screencast.
    pub fn watch(&self, endpoint: &Endpoint, target: &str) -> Arc<Hub> {
        let mut hubs = self.hubs.lock().expect("not poisoned");
        hubs.retain(|_, h| h.strong_count() > 0);
        if let Some(hub) = hubs.get(target).and_then(Weak::upgrade) {
            return hub;
        }
        let (frames_tx, frames) = watch::channel(None);
        let (input, input_rx) = mpsc::channel(INPUT_QUEUE);
        let stop = CancellationToken::new();
        let socket = BrowserSocket {
            endpoint: endpoint.clone(),
            path: format!("/devtools/page/{target}"),
        };
        let task = Screencast {
            target: target.to_owned(),
            frames: frames_tx,
            metrics: self.metrics.clone(),
        };
        tokio::spawn(task.run(socket, input_rx, stop.clone()));
        let hub = Arc::new(Hub {
            target: target.to_owned(),
            frames,
            input,
            stop,
        });
        hubs.insert(target.to_owned(), Arc::downgrade(&hub));
        hub
    }
}

/// Starts the page's screencast and waits for Chrome's answer. A start that lands while the
/// page commits a navigation is refused ("Not attached to an active page") and, unanswered,
/// would leave the page without a frame for good (a recording that starts with a new page
/// meets this on every `newPage()` and `goto()` at once): a refusal is retried for
/// [`START_WITHIN`], a failed socket is not.
async fn start(cdp: &mut Cdp) -> Result<(), CdpError> {
    let params = json!({"format": "jpeg", "quality": 70, "everyNthFrame": 1});
    let mut waits = retry::restart_delays(START_FIRST_WAIT, START_MAX_WAIT)
        .with_total_delay(Some(START_WITHIN))
        .build();
    loop {
        match cdp.call("Page.startScreencast", params.clone()).await {
            Err(e @ CdpError::Command { .. }) => {
                let Some(wait) = waits.next() else {
                    return Err(e);
                };
                debug!(error = %e, retry_in_ms = wait.as_millis() as u64, "the screencast's start was refused; retrying");
                tokio::time::sleep(wait).await;
            }
            r => return r.map(drop),
        }
    }
}

/// A hub's task: the page's CDP connection.
struct Screencast {
    target: String,
    frames: watch::Sender<Option<Frame>>,
    metrics: Arc<Metrics>,
}

impl Screencast {
    async fn run(
        self,
        socket: BrowserSocket,
        mut input: mpsc::Receiver<Command>,
        stop: CancellationToken,
    ) {
        let mut cdp = match Cdp::connect(&socket).await {
            Ok(c) => c,
            Err(e) => return info!(error = %e, "the viewer could not reach the page"),
        };
        self.still(&mut cdp).await;
        if let Err(e) = start(&mut cdp).await {
            return info!(error = %e, "the screencast could not start");
        }
        self.metrics.viewer_screencasts_started.inc();
        info!(target_id = %self.target, "screencast started");
        loop {
            // The hub's drop both cancels `stop` and closes `input`: either ends the screencast.
            tokio::select! {
                biased;
                () = stop.cancelled() => return self.stop(&mut cdp).await,
                cmd = input.recv() => {
                    let Some(cmd) = cmd else {
                        return self.stop(&mut cdp).await;
                    };
                    if cdp.send(cmd.method, cmd.params).await.is_err() {
                        return;
                    }
                }
                e = cdp.next_event() => match e {
                    Ok(Some(e)) if e.method == "Page.screencastFrame" => {
                        if !self.on_frame(&mut cdp, &e.params).await {
                            return;
                        }
                    }
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => return debug!("the page's connection ended"),
                },
            }
        }
    }

    /// Publishes a screenshot as the first frame: a page in a background tab paints nothing,
    /// so its screencast sends no frame until it is brought to the front. Bounded: a page that
    /// cannot answer is watched without it.
    async fn still(&self, cdp: &mut Cdp) {
        let shot = async {
            let metrics = cdp.call("Page.getLayoutMetrics", json!({})).await?;
            let params = json!({"format": "jpeg", "quality": 70});
            let shot = cdp.call("Page.captureScreenshot", params).await?;
            Ok::<_, crate::cdp::CdpError>((metrics, shot))
        };
        let Ok(Ok((metrics, shot))) = tokio::time::timeout(STILL_TIMEOUT, shot).await else {
            return debug!("no still frame of the page");
        };
        let viewport = &metrics["cssLayoutViewport"];
        let params = json!({
            "data": shot["data"],
            "metadata": {"deviceWidth": viewport["clientWidth"], "deviceHeight": viewport["clientHeight"]},
            "still": true,
        });
        self.publish(&params);
    }

    async fn stop(&self, cdp: &mut Cdp) {
        let _ = cdp.send("Page.stopScreencast", json!({})).await;
        info!(target_id = %self.target, "screencast stopped: no viewer left");
    }

    /// Acknowledges a frame (Chrome sends the next only then) and publishes it; `false` when
    /// the connection failed.
    async fn on_frame(&self, cdp: &mut Cdp, params: &Value) -> bool {
        let ack = json!({"sessionId": params["sessionId"]});
        if cdp.send("Page.screencastFrameAck", ack).await.is_err() {
            return false;
        }
        self.publish(params);
        true
    }

    /// Publishes a frame (`Page.screencastFrame`'s params) as the latest.
    fn publish(&self, params: &Value) {
        let Some(data) = params["data"].as_str() else {
            return;
        };
        let meta = &params["metadata"];
        let mut frame = json!({
            "type": "frame",
            "page": self.target,
            "data": data,
            "w": meta["deviceWidth"],
            "h": meta["deviceHeight"],
        });
        // A screenshot, not the screencast's (its size may differ from the frames to come):
        // the recording sizes its video from a screencast frame when one comes soon.
        if params["still"] == true {
            frame["still"] = json!(true);
        }
        self.frames.send_replace(Some(Arc::from(frame.to_string())));
    }
}

#[cfg(test)]
mod tests {
    use futures_util::{SinkExt as _, StreamExt as _};
    use tokio::net::TcpListener;
    use tokio_tungstenite::tungstenite::Message;

    use super::*;
    use crate::telemetry::Metrics;

    /// Chrome refuses a screencast start that lands while the page commits a navigation (real
    /// Chromium: a start 5-10 ms into `goto()` of a new page, see the e2e live-view tests); a
    /// page standing in for it refuses the first two starts, then starts and sends a frame.
    /// The hub publishes that frame: without the retry it would wait for one forever.
    #[tokio::test]
    async fn a_start_refused_while_the_page_commits_a_navigation_is_tried_again() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let page = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
            let mut refused = 0;
            while let Some(Ok(Message::Text(t))) = ws.next().await {
                let v: Value = serde_json::from_str(t.as_str()).unwrap();
                let (id, method) = (&v["id"], v["method"].as_str().unwrap_or_default());
                let answer = match method {
                    "Page.screencastFrameAck" => return refused,
                    "Page.startScreencast" if refused < 2 => {
                        refused += 1;
                        let message = "Not attached to an active page";
                        json!({"id": id, "error": {"code": -32000, "message": message}})
                    }
                    "Page.startScreencast" => json!({"id": id, "result": {}}),
                    // No still: the screenshot is refused too.
                    _ => json!({"id": id, "error": {"code": -32000, "message": "no"}}),
                };
                ws.send(Message::text(answer.to_string())).await.unwrap();
                if method == "Page.startScreencast" && answer.get("result").is_some() {
                    let params = json!({"data": "AAAA", "sessionId": 1,
                        "metadata": {"deviceWidth": 8, "deviceHeight": 6}});
                    let frame = json!({"method": "Page.screencastFrame", "params": params});
                    ws.send(Message::text(frame.to_string())).await.unwrap();
                }
            }
            panic!("the hub closed before acknowledging a frame");
        });
        let hubs = Hubs::new(Metrics::new());
        let hub = hubs.watch(&Endpoint::host(addr), "T1");
        let mut frames = hub.frames();
        let frame = tokio::time::timeout(Duration::from_secs(20), frames.wait_for(Option::is_some))
            .await
            .expect("a frame within 20 s (a hang guard)")
            .expect("the hub is running")
            .clone()
            .unwrap();
        assert!(frame.contains(r#""data":"AAAA""#), "{frame}");
        assert_eq!(
            page.await.unwrap(),
            2,
            "both refused starts were tried again"
        );
    }
}
