//! The live viewer: a page (`GET /viewer`) that draws a session's pages from their
//! screencasts, and its WebSocket (`GET /viewer/ws`), both on the proxy.
//!
//! - [`handoff`]: a CDP client's request for a person (`Wallcrawler.requestHandoff`), shown to
//!   the viewers and ended by a control viewer's `done` or its timeout.
//! - [`grant`]: the viewer credential (`?t=`) and what it grants (`view` or `control`, a page).
//! - [`hub`]: one screencast per watched page, shared by its viewers.
//! - [`input`]: the viewer's messages, read strictly into the CDP commands they stand for.
//! - [`page`]: the static page and its Content-Security-Policy.
//!
//! A viewer's socket: the server sends `{"type":"frame",page,data,w,h}` (the latest frame
//! only) and `{"type":"tabs",tabs:[{id,title,url}],active}`; the viewer sends
//! `mouse`/`wheel`/`key`/`text` (dropped by the server unless the grant is `control`),
//! `select` (another tab), `done` (`{"type":"done","handoff"?:id}`: ends the pending handoff;
//! dropped unless the grant is `control`), and `ping` (answered `pong` once everything before it was
//! handled); the server also sends `{"type":"handoff",handoff:{id,reason,expiresAt}|null,
//! canComplete}` at the start and whenever a handoff starts or ends; a message of no such shape is answered `{"type":"error",error}`. The tabs come from `Target.setDiscoverTargets` on a
//! browser-level connection of the viewer's own.

pub mod grant;
pub mod handoff;
pub mod hub;
pub mod input;
pub mod page;

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use crate::cdp::{BrowserSocket, Cdp, Event};
use crate::upstream::Upstream;
use grant::{Mode, ViewerGrant};
use handoff::{Handoffs, Shown};
use hub::{Frame, Hub, Hubs};
use input::ClientMsg;

/// Largest message a viewer may send.
pub const MAX_VIEWER_MESSAGE: usize = 64 * 1024;

/// A page of the browser, as the tab strip shows it.
#[derive(Debug, Clone, PartialEq)]
struct Tab {
    id: String,
    title: String,
    url: String,
}

/// What every viewer of the proxy shares.
pub struct Shared<'a> {
    /// The screencasts.
    pub hubs: &'a Hubs,
    /// The session's handoffs.
    pub handoffs: &'a Arc<Handoffs>,
    /// Fires at shutdown: every viewer is closed (1001).
    pub stop: &'a CancellationToken,
}

/// One viewer's connection.
struct Viewer<'a, S> {
    ws: WebSocketStream<S>,
    grant: ViewerGrant,
    hubs: &'a Hubs,
    handoffs: &'a Handoffs,
    /// The pending handoff, as the banner shows it.
    handoff: watch::Receiver<Option<Shown>>,
    up: Arc<Upstream>,
    /// The watched page's hub, held for as long as this viewer watches it.
    hub: Option<Arc<Hub>>,
    frames: Option<watch::Receiver<Option<Frame>>>,
    tabs: Vec<Tab>,
}

/// Serves a viewer on its upgraded socket until it leaves, the browser goes or `shared.stop`
/// fires (then with a close frame, 1001 "going away"), or its credential expires (then 1008).
pub async fn serve<S>(
    ws: WebSocketStream<S>,
    grant: ViewerGrant,
    shared: Shared<'_>,
    up: Arc<Upstream>,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let path = match up.browser_path(Duration::from_secs(10)).await {
        Ok(p) => p,
        Err(e) => return info!(error = %e, "the viewer could not reach the browser"),
    };
    let socket = BrowserSocket {
        endpoint: up.endpoint.clone(),
        path,
    };
    let mut browser = match Cdp::connect(&socket).await {
        Ok(c) => c,
        Err(e) => return info!(error = %e, "the viewer could not reach the browser"),
    };
    if let Err(e) = browser
        .send("Target.setDiscoverTargets", json!({"discover": true}))
        .await
    {
        return info!(error = %e, "the viewer could not follow the browser's pages");
    }
    let mut handoff = shared.handoffs.watch();
    handoff.mark_changed();
    let expires = grant.expires_at();
    let mut viewer = Viewer {
        ws,
        grant,
        hubs: shared.hubs,
        handoffs: shared.handoffs,
        handoff,
        up,
        hub: None,
        frames: None,
        tabs: Vec::new(),
    };
    let end = tokio::select! {
        end = viewer.run(&mut browser) => end,
        () = shared.stop.cancelled() => "shutdown",
        () = tokio::time::sleep_until(expires) => "expired",
    };
    let close = match end {
        "shutdown" | "browser_gone" => Some(CloseFrame {
            code: CloseCode::Away,
            reason: "the session is ending".into(),
        }),
        "expired" => Some(CloseFrame {
            code: CloseCode::Policy,
            reason: "the credential has expired".into(),
        }),
        _ => None,
    };
    if let Some(close) = close {
        let _ = viewer.ws.close(Some(close)).await;
    }
    debug!(end, "viewer closed");
}

/// The next frame on `frames`: `Some(None)` when its hub has gone; pending without one.
async fn next_frame(frames: &mut Option<watch::Receiver<Option<Frame>>>) -> Option<Frame> {
    let Some(rx) = frames else {
        return std::future::pending().await;
    };
    match rx.changed().await {
        Ok(()) => Some(
            rx.borrow_and_update()
                .clone()
                .unwrap_or_else(|| Arc::from("")),
        ),
        Err(_) => None,
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Viewer<'_, S> {
    async fn run(&mut self, browser: &mut Cdp) -> &'static str {
        loop {
            tokio::select! {
                frame = next_frame(&mut self.frames) => match frame {
                    Some(f) if f.is_empty() => {}
                    Some(f) => {
                        if self.ws.send(Message::text(f.to_string())).await.is_err() {
                            return "viewer_gone";
                        }
                    }
                    None => {
                        self.hub = None;
                        self.frames = None;
                    }
                },
                msg = self.ws.next() => match msg {
                    Some(Ok(Message::Text(t))) => {
                        if let Some(reply) = self.on_message(t.as_str())
                            && self.send_json(reply).await.is_err()
                        {
                            return "viewer_gone";
                        }
                    }
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return "viewer_closed",
                    Some(Ok(_)) => {}
                },
                Ok(()) = self.handoff.changed() => {
                    let m = self.handoff_message();
                    if self.send_json(m).await.is_err() {
                        return "viewer_gone";
                    }
                }
                e = browser.next_event() => match e {
                    Ok(Some(e)) => {
                        if self.on_target(&e) && self.send_json(self.tabs_message()).await.is_err() {
                            return "viewer_gone";
                        }
                    }
                    Ok(None) | Err(_) => return "browser_gone",
                },
            }
        }
    }

    /// Handles a viewer's message; the answer to send it, if any (`pong`; the tabs after a
    /// `select`; the refusal of a message it cannot send).
    fn on_message(&mut self, text: &str) -> Option<Value> {
        match input::parse(text) {
            Ok(ClientMsg::Input(cmd)) => match (&self.hub, self.grant.mode) {
                (Some(hub), Mode::Control) => hub.send(cmd),
                // View-only: input never reaches the page.
                _ => debug!("viewer input dropped"),
            },
            Ok(ClientMsg::Select(id)) => {
                if self.tabs.iter().any(|t| t.id == id) {
                    self.watch(&id);
                    // A person switching tabs brings that tab to the front (a background tab
                    // paints nothing); a view-only viewer changes nothing in the browser.
                    if let (Some(hub), Mode::Control) = (&self.hub, self.grant.mode) {
                        hub.send(input::Command {
                            method: "Page.bringToFront",
                            params: json!({}),
                        });
                    }
                    return Some(self.tabs_message());
                }
            }
            Ok(ClientMsg::Done(id)) => match self.grant.mode {
                Mode::Control => {
                    if !self.handoffs.complete(id.as_deref()) {
                        return Some(
                            json!({"type": "error", "error": "no such handoff is pending"}),
                        );
                    }
                }
                // View-only: watching ends nothing.
                Mode::View => debug!("viewer done dropped"),
            },
            Ok(ClientMsg::Ping) => return Some(json!({"type": "pong"})),
            Err(e) => {
                debug!(error = %e, "viewer message refused");
                return Some(json!({"type": "error", "error": e.to_string()}));
            }
        }
        None
    }

    /// Watches `target` (its hub's latest frame is sent at once).
    fn watch(&mut self, target: &str) {
        if self.hub.as_ref().is_some_and(|h| h.target == target) {
            return;
        }
        let hub = self.hubs.watch(&self.up.endpoint, target);
        let mut frames = hub.frames();
        frames.mark_changed();
        self.frames = Some(frames);
        self.hub = Some(hub);
    }

    /// Follows the browser's pages; `true` when the tabs changed.
    fn on_target(&mut self, e: &Event) -> bool {
        let info = &e.params["targetInfo"];
        let changed = match e.method.as_str() {
            "Target.targetCreated" | "Target.targetInfoChanged" => self.upsert(info),
            "Target.targetDestroyed" => {
                let id = e.params["targetId"].as_str().unwrap_or_default();
                let before = self.tabs.len();
                self.tabs.retain(|t| t.id != id);
                before != self.tabs.len()
            }
            _ => false,
        };
        if self.hub.is_none()
            && let Some(first) = self.tabs.first().map(|t| t.id.clone())
        {
            self.watch(&first);
        }
        changed
    }

    fn upsert(&mut self, info: &Value) -> bool {
        let id = info["targetId"].as_str().unwrap_or_default();
        let allowed = self.grant.page.as_deref().is_none_or(|p| p == id);
        if info["type"] != "page" || !allowed || !crate::upstream::is_target_id(id) {
            return false;
        }
        let tab = Tab {
            id: id.to_owned(),
            title: info["title"].as_str().unwrap_or_default().to_owned(),
            url: info["url"].as_str().unwrap_or_default().to_owned(),
        };
        match self.tabs.iter_mut().find(|t| t.id == id) {
            Some(t) if *t == tab => false,
            Some(t) => {
                *t = tab;
                true
            }
            None => {
                self.tabs.push(tab);
                true
            }
        }
    }

    fn handoff_message(&mut self) -> Value {
        let handoff = self
            .handoff
            .borrow_and_update()
            .as_ref()
            .map(|h| json!({"id": h.id, "reason": h.reason, "expiresAt": h.expires_at}));
        let can = self.grant.mode == Mode::Control;
        json!({"type": "handoff", "handoff": handoff, "canComplete": can})
    }

    fn tabs_message(&self) -> Value {
        let tabs: Vec<Value> = self
            .tabs
            .iter()
            .map(|t| json!({"id": t.id, "title": t.title, "url": t.url}))
            .collect();
        let active = self.hub.as_ref().map(|h| h.target.clone());
        json!({"type": "tabs", "tabs": tabs, "active": active})
    }

    async fn send_json(&mut self, msg: Value) -> Result<(), tokio_tungstenite::tungstenite::Error> {
        self.ws.send(Message::text(msg.to_string())).await
    }
}
