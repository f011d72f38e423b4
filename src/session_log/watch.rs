//! The session's own watch of its pages, so a log holds what happened in them whether or not a
//! client asked to see it: console messages, page errors, navigations, dialogs, crashes.
//!
//! A browser-level CDP connection of the controller's own discovers the page targets, attaches
//! to each (flattened sessions) and enables `Runtime`, `Page`, `Log` and `Inspector` there; the
//! events of [`matcher::WATCHED`] it is sent are handed to the session's [`Recorder`] as the
//! messages of connection [`matcher::WATCH_CONN`], which the matcher logs as it logs a client's.
//! While this watch runs, the matcher logs those events from it alone (a client watching them
//! too adds no second entry); if its connection ends, clients' copies are logged again.
//! Nothing a client sends or receives passes here: its sessions are its own, and its pages
//! behave the same (a page's `Runtime` may be enabled by any number of sessions).

use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use super::Recorder;
use super::matcher::{Dir, WATCH_CONN, WATCHED};
use crate::cdp::{BrowserSocket, Cdp, CdpError};

/// The domains enabled on each page: their events are what [`WATCHED`] picks from.
const ENABLE: [&str; 4] = [
    "Runtime.enable",
    "Page.enable",
    "Log.enable",
    "Inspector.enable",
];

/// What the watch reads of a message before handing it on.
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(borrow)]
    method: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    params: Params<'a>,
}

#[derive(Deserialize, Default)]
struct Params<'a> {
    #[serde(rename = "sessionId", borrow)]
    session_id: Option<std::borrow::Cow<'a, str>>,
    #[serde(rename = "targetInfo", default)]
    target_info: TargetInfo<'a>,
}

#[derive(Deserialize, Default)]
struct TargetInfo<'a> {
    #[serde(rename = "targetId", borrow)]
    target_id: Option<std::borrow::Cow<'a, str>>,
    #[serde(rename = "type", borrow)]
    kind: Option<std::borrow::Cow<'a, str>>,
}

/// Watches the pages of the browser at `browser` for the log of `recorder` until `stop` or
/// the browser's end.
pub(crate) async fn watch(browser: BrowserSocket, recorder: Recorder, stop: CancellationToken) {
    let mut cdp = match Cdp::connect(&browser).await {
        Ok(c) => c,
        Err(e) => return info!(error = %e, "the session log could not watch the pages"),
    };
    recorder.opened(WATCH_CONN, None);
    if let Err(e) = cdp
        .send("Target.setDiscoverTargets", json!({"discover": true}))
        .await
    {
        info!(error = %e, "the session log could not watch the pages");
    } else {
        tokio::select! {
            () = stop.cancelled() => {}
            e = follow(&mut cdp, &recorder) => debug!(error = ?e.err(), "the session log's watch ended"),
        }
    }
    recorder.closed(WATCH_CONN);
}

/// Attaches to each page as it appears and hands on its events, until the connection ends.
async fn follow(cdp: &mut Cdp, recorder: &Recorder) -> Result<(), CdpError> {
    while let Some(text) = cdp.next_text().await? {
        let Ok(head) = serde_json::from_str::<Head<'_>>(text.as_str()) else {
            continue;
        };
        let Some(method) = head.method.as_deref() else {
            // An answer to one of ours.
            continue;
        };
        match method {
            "Target.targetCreated" if head.params.target_info.kind.as_deref() == Some("page") => {
                if let Some(id) = &head.params.target_info.target_id {
                    let params = json!({"targetId": id, "flatten": true});
                    cdp.send("Target.attachToTarget", params).await?;
                }
            }
            "Target.attachedToTarget" => {
                // Handed on too: it ties the session to its page for the matcher.
                recorder.message(WATCH_CONN, Dir::Down, text.as_bytes());
                if let Some(sid) = &head.params.session_id {
                    for m in ENABLE {
                        cdp.send_to(sid, m, json!({})).await?;
                    }
                }
            }
            m if WATCHED.contains(&m) => recorder.message(WATCH_CONN, Dir::Down, text.as_bytes()),
            _ => {}
        }
    }
    Ok(())
}
