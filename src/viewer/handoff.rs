//! Handoff: a CDP client asks for a person, a person at a control-mode viewer says "done".
//!
//! - The client sends `Wallcrawler.requestHandoff {reason, timeout}` on its CDP connection.
//!   The proxy's inspector withholds it (Chrome never sees it) and answers it itself from
//!   here: `{handoffId, url, expiresAt}`, `url` being the control-mode live-view URL this
//!   controller was given for its session ([`Handoffs::set_live_view`]; the controller holds
//!   no signing key, so it cannot mint one, and the client already drives the whole browser,
//!   so handing it a control URL escalates nothing). Other `Wallcrawler.*` methods are
//!   answered `-32601`; bad params `-32602` with the reason ([`read_request`]).
//! - The pending handoff is shown to every viewer (a banner with the reason and, in control
//!   mode, a Done button: [`Handoffs::watch`]).
//! - A control viewer's `done`, or the timeout, ends it: the client connection that asked is
//!   sent `{"method":"Wallcrawler.handoffCompleted","params":{handoffId,timedOut}}` (with the
//!   `sessionId` its request carried), injected between Chrome's messages by the relay
//!   ([`Deliver`]). A client that disconnects first drops its handoff.
//!
//! One handoff is pending at a time; a second request while one is pending is refused. Neither
//! the URL nor the reason (client text) is ever logged.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::info;

/// Longest `reason`, in characters.
pub const MAX_REASON_CHARS: usize = 1000;
/// Timeout bounds, in seconds.
pub const MIN_TIMEOUT: u64 = 1;
/// Upper timeout bound, in seconds (never past the live-view URL's expiry either).
pub const MAX_TIMEOUT: u64 = 3600;
/// Timeout when the request names none, in seconds.
pub const DEFAULT_TIMEOUT: u64 = 300;

/// The method a client asks with.
pub const REQUEST: &str = "Wallcrawler.requestHandoff";
/// The event the client is sent at the end.
pub const COMPLETED: &str = "Wallcrawler.handoffCompleted";

/// JSON-RPC "method not found", as Chrome answers an unknown method.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC "invalid params".
pub const INVALID_PARAMS: i64 = -32602;
/// A well-formed request this controller cannot serve now.
pub const SERVER_ERROR: i64 = -32000;

/// A read `Wallcrawler.requestHandoff`: what the answer and the event echo back, and its
/// params.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The command's `id` (echoed in the answer).
    pub id: Value,
    /// The command's `sessionId`, if any (echoed in the answer and the event, so a flattened
    /// CDP session gets them).
    pub session_id: Option<Value>,
    /// What the person is asked to do.
    pub reason: String,
    /// Seconds the person has.
    pub timeout: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Params {
    reason: Option<Value>,
    timeout: Option<Value>,
}

/// Reads the params of a `Wallcrawler.requestHandoff` (`params` may be absent); the exact
/// refusal otherwise.
pub fn read_params(params: Option<&Value>) -> Result<(String, u64), &'static str> {
    let p: Params = match params {
        None | Some(Value::Null) => Params {
            reason: None,
            timeout: None,
        },
        Some(v) => Params::deserialize(v).map_err(
            |_| "Invalid parameters: params must be an object with only reason and timeout",
        )?,
    };
    let reason = match p.reason {
        Some(Value::String(s)) if !s.trim().is_empty() => s,
        _ => return Err("Invalid parameters: reason must be a non-empty string"),
    };
    if reason.chars().count() > MAX_REASON_CHARS {
        return Err("Invalid parameters: reason must be at most 1000 characters");
    }
    let timeout = match p.timeout {
        None | Some(Value::Null) => DEFAULT_TIMEOUT,
        Some(v) => v
            .as_u64()
            .filter(|t| (MIN_TIMEOUT..=MAX_TIMEOUT).contains(t))
            .ok_or("Invalid parameters: timeout must be an integer from 1 to 3600 (seconds)")?,
    };
    Ok((reason, timeout))
}

/// A CDP answer for `id` (and `sessionId`) carrying `body` (`result` or `error`).
fn answer(id: &Value, session_id: Option<&Value>, key: &str, body: Value) -> String {
    let mut m = serde_json::Map::new();
    m.insert("id".into(), id.clone());
    if let Some(s) = session_id {
        m.insert("sessionId".into(), s.clone());
    }
    m.insert(key.into(), body);
    Value::Object(m).to_string()
}

/// A CDP error answer.
pub fn error_answer(id: &Value, session_id: Option<&Value>, code: i64, message: &str) -> String {
    answer(
        id,
        session_id,
        "error",
        json!({"code": code, "message": message}),
    )
}

/// Hands a CDP message to one client connection (the relay frames it and sends it between
/// Chrome's messages).
pub trait Deliver: Send + Sync {
    /// Queues the text message `text` for the client of relayed connection `conn` (dropped if
    /// it has ended).
    fn deliver(&self, conn: u64, text: String);
}

/// What a viewer is shown of the pending handoff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    /// `handoffId`.
    pub id: String,
    /// The client's reason.
    pub reason: String,
    /// When it was asked for (ISO 8601).
    pub requested_at: String,
    /// When it times out (ISO 8601).
    pub expires_at: String,
}

struct Pending {
    shown: Shown,
    conn: u64,
    session_id: Option<Value>,
    deadline: Instant,
}

/// The live-view URL given to this controller, and when its credential expires.
struct LiveView {
    url: String,
    expires_at: u64,
}

/// A session's handoffs (one pending at a time).
pub struct Handoffs {
    live_view: Mutex<Option<LiveView>>,
    pending: Mutex<Option<Pending>>,
    /// Owned here; every viewer subscribes.
    shown: watch::Sender<Option<Shown>>,
    /// Wakes the timer when a handoff starts or ends.
    changed: Notify,
    deliver: Arc<dyn Deliver>,
}

impl std::fmt::Debug for Handoffs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the URL.
        f.debug_struct("Handoffs")
            .field("pending", &self.shown.borrow().as_ref().map(|s| &s.id))
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Handoffs {
    /// No live-view URL yet; events go out through `deliver`.
    pub fn new(deliver: Arc<dyn Deliver>) -> Arc<Self> {
        Arc::new(Self {
            live_view: Mutex::new(None),
            pending: Mutex::new(None),
            shown: watch::Sender::new(None),
            changed: Notify::new(),
            deliver,
        })
    }

    /// The control-mode live-view URL handed out for this session, valid until `expires_at`
    /// (Unix seconds). Without one, requests are refused.
    pub fn set_live_view(&self, url: String, expires_at: u64) {
        *lock(&self.live_view) = Some(LiveView { url, expires_at });
    }

    /// Follows the pending handoff (for the viewers).
    pub fn watch(&self) -> watch::Receiver<Option<Shown>> {
        self.shown.subscribe()
    }

    /// Answers a request from relayed connection `conn` (a complete CDP answer: the result, or
    /// an error).
    pub fn request(&self, conn: u64, r: &Request) -> String {
        let err = |msg: &str| error_answer(&r.id, r.session_id.as_ref(), SERVER_ERROR, msg);
        let now_ms = wallcrawler_contract::time::unix_millis();
        let (url, until) = match &*lock(&self.live_view) {
            Some(l) if l.expires_at * 1000 > now_ms + 1000 => (l.url.clone(), l.expires_at),
            Some(_) => return err("Wallcrawler.requestHandoff: the live view URL has expired"),
            None => {
                return err("Wallcrawler.requestHandoff: this controller has no live view URL");
            }
        };
        let mut pending = lock(&self.pending);
        if pending.is_some() {
            return err("Wallcrawler.requestHandoff: a handoff is already pending");
        }
        // Never past the URL's (the session's) end.
        let ms = (r.timeout * 1000).min(until * 1000 - now_ms);
        let expires_at = wallcrawler_contract::time::iso8601_millis(now_ms + ms);
        let shown = Shown {
            id: format!("ho_{}", uuid::Uuid::new_v4().simple()),
            reason: r.reason.clone(),
            requested_at: wallcrawler_contract::time::iso8601_millis(now_ms),
            expires_at: expires_at.clone(),
        };
        let result = json!({"handoffId": shown.id, "url": url, "expiresAt": expires_at});
        info!(handoff.id = %shown.id, timeout_ms = ms, "handoff requested");
        *pending = Some(Pending {
            shown: shown.clone(),
            conn,
            session_id: r.session_id.clone(),
            deadline: Instant::now() + Duration::from_millis(ms),
        });
        drop(pending);
        self.shown.send_replace(Some(shown));
        self.changed.notify_one();
        answer(&r.id, r.session_id.as_ref(), "result", result)
    }

    /// A person says done (`id`: the handoff they saw, if they name one). Whether a pending
    /// handoff was completed.
    pub fn complete(&self, id: Option<&str>) -> bool {
        self.finish(|p| id.is_none_or(|id| id == p.shown.id), false)
    }

    /// The relayed connection `conn` ended: its handoff, if any, is dropped (nobody to tell).
    pub fn connection_closed(&self, conn: u64) {
        let mut pending = lock(&self.pending);
        if pending.as_ref().is_some_and(|p| p.conn == conn) {
            let p = pending.take();
            drop(pending);
            if let Some(p) = p {
                info!(handoff.id = %p.shown.id, "handoff dropped: its client disconnected");
            }
            self.shown.send_replace(None);
            self.changed.notify_one();
        }
    }

    /// Ends the pending handoff if `which` accepts it, telling its client.
    fn finish(&self, which: impl FnOnce(&Pending) -> bool, timed_out: bool) -> bool {
        let p = {
            let mut pending = lock(&self.pending);
            match pending.as_ref() {
                Some(p) if which(p) => pending.take(),
                _ => None,
            }
        };
        let Some(p) = p else {
            return false;
        };
        info!(handoff.id = %p.shown.id, timed_out, "handoff completed");
        let mut event = serde_json::Map::new();
        event.insert("method".into(), COMPLETED.into());
        event.insert(
            "params".into(),
            json!({"handoffId": p.shown.id, "timedOut": timed_out}),
        );
        if let Some(s) = p.session_id {
            event.insert("sessionId".into(), s);
        }
        let text = Value::Object(event).to_string();
        self.deliver.deliver(p.conn, text);
        self.shown.send_replace(None);
        self.changed.notify_one();
        true
    }

    /// Times handoffs out until `stop` fires (one task per proxy).
    pub async fn run_timer(self: Arc<Self>, stop: CancellationToken) {
        loop {
            let deadline = lock(&self.pending).as_ref().map(|p| p.deadline);
            let expired = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = stop.cancelled() => return,
                () = self.changed.notified() => {}
                () = expired => {
                    let now = Instant::now();
                    self.finish(|p| p.deadline <= now, true);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Sent(Mutex<Vec<(u64, Value)>>);

    impl Deliver for Sent {
        fn deliver(&self, conn: u64, text: String) {
            let v = serde_json::from_str(&text).unwrap();
            lock(&self.0).push((conn, v));
        }
    }

    fn req(reason: &str, timeout: u64) -> Request {
        Request {
            id: json!(7),
            session_id: Some(json!("S1")),
            reason: reason.into(),
            timeout,
        }
    }

    fn setup() -> (Arc<Sent>, Arc<Handoffs>) {
        let sent = Arc::new(Sent::default());
        let h = Handoffs::new(sent.clone());
        (sent, h)
    }

    #[test]
    fn params_are_read_strictly() {
        let ok = |v: Value| read_params(Some(&v));
        assert_eq!(
            ok(json!({"reason": "log in", "timeout": 60})),
            Ok(("log in".into(), 60))
        );
        assert_eq!(
            ok(json!({"reason": "x"})),
            Ok(("x".into(), DEFAULT_TIMEOUT))
        );
        let reason = "Invalid parameters: reason must be a non-empty string";
        assert_eq!(read_params(None), Err(reason));
        assert_eq!(ok(json!({"reason": " "})), Err(reason));
        assert_eq!(ok(json!({"reason": 5})), Err(reason));
        assert_eq!(
            ok(json!({"reason": "a".repeat(1001)})),
            Err("Invalid parameters: reason must be at most 1000 characters")
        );
        assert!(ok(json!({"reason": "é".repeat(1000)})).is_ok());
        let timeout = "Invalid parameters: timeout must be an integer from 1 to 3600 (seconds)";
        for t in [json!(0), json!(3601), json!(-1), json!(1.5), json!("60")] {
            assert_eq!(ok(json!({"reason": "x", "timeout": t})), Err(timeout));
        }
        assert!(ok(json!({"reason": "x", "extra": 1})).is_err());
        assert!(ok(json!([1])).is_err());
    }

    #[test]
    fn without_a_live_view_url_a_request_is_refused() {
        let (_, h) = setup();
        let a: Value = serde_json::from_str(&h.request(1, &req("x", 60))).unwrap();
        assert_eq!(a["error"]["code"], SERVER_ERROR);
        assert_eq!(
            a["error"]["message"],
            "Wallcrawler.requestHandoff: this controller has no live view URL"
        );
        assert_eq!(
            (a["id"].clone(), a["sessionId"].clone()),
            (json!(7), json!("S1"))
        );
    }

    #[test]
    fn a_request_is_answered_shown_and_completed_once() {
        let (sent, h) = setup();
        let far = wallcrawler_contract::time::unix_millis() / 1000 + 7200;
        h.set_live_view("http://x/viewer?t=c".into(), far);
        let shown = h.watch();
        let a: Value = serde_json::from_str(&h.request(3, &req("solve it", 60))).unwrap();
        let id = a["result"]["handoffId"].as_str().unwrap().to_owned();
        assert_eq!(a["result"]["url"], "http://x/viewer?t=c");
        assert_eq!(a["sessionId"], "S1");
        assert_eq!(shown.borrow().as_ref().unwrap().reason, "solve it");
        // One at a time.
        let b: Value = serde_json::from_str(&h.request(4, &req("again", 60))).unwrap();
        assert_eq!(
            b["error"]["message"],
            "Wallcrawler.requestHandoff: a handoff is already pending"
        );
        assert!(!h.complete(Some("ho_other")));
        assert!(h.complete(Some(&id)));
        assert!(!h.complete(None));
        assert!(shown.borrow().is_none());
        let got = lock(&sent.0).clone();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, 3);
        assert_eq!(
            got[0].1,
            json!({"method": COMPLETED, "params": {"handoffId": id, "timedOut": false}, "sessionId": "S1"})
        );
    }

    #[test]
    fn the_timeout_never_passes_the_urls_expiry() {
        let (_, h) = setup();
        let now = wallcrawler_contract::time::unix_millis();
        h.set_live_view("u".into(), now / 1000 + 30);
        let a: Value = serde_json::from_str(&h.request(1, &req("x", 3600))).unwrap();
        let exp =
            wallcrawler_contract::time::parse_iso8601(a["result"]["expiresAt"].as_str().unwrap())
                .unwrap();
        assert!(exp <= (now / 1000 + 30) * 1000, "{a}");
        let (_, h) = setup();
        h.set_live_view("u".into(), now / 1000);
        let a: Value = serde_json::from_str(&h.request(1, &req("x", 60))).unwrap();
        assert_eq!(
            a["error"]["message"],
            "Wallcrawler.requestHandoff: the live view URL has expired"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_handoff_times_out_and_a_closed_client_drops_its_own() {
        let (sent, h) = setup();
        let far = wallcrawler_contract::time::unix_millis() / 1000 + 7200;
        h.set_live_view("u".into(), far);
        let stop = CancellationToken::new();
        let timer = tokio::spawn(h.clone().run_timer(stop.clone()));
        let mut shown = h.watch();
        h.request(5, &req("x", 2));
        shown.wait_for(Option::is_none).await.unwrap();
        let got = lock(&sent.0).clone();
        assert_eq!(got[0].0, 5);
        assert_eq!(got[0].1["params"]["timedOut"], true);
        // Another client's close leaves a handoff alone; its own close drops it, untold.
        h.request(6, &req("y", 60));
        h.connection_closed(5);
        assert!(shown.borrow().is_some());
        h.connection_closed(6);
        assert!(shown.borrow().is_none());
        assert_eq!(lock(&sent.0).len(), 1);
        stop.cancel();
        timer.await.unwrap();
    }
}
