//! From the messages the proxy saw to log entries: a client's command is held until Chrome
//! answers its id on the same connection, then logged with the answer; the events worth
//! logging (navigations, console messages, page errors, crashes, downloads, targets) are
//! logged as they come; those the session's own watch sees ([`WATCHED`]) from it alone while
//! it runs. Pure and bounded: it runs on the log's writer task, never on the
//! relay.
//!
//! Bounds, whatever a peer sends: a message is at most [`wallcrawler_contract::session_log::MAX_RAW_BODY`]
//! bytes of its start (and [`TAIL`] bytes of its end, where clients put `sessionId`); JSON
//! deeper than serde's limit (128) or malformed is not an entry (counted); an id that is not
//! a whole number within `u64` matches nothing; [`MAX_PENDING`] commands wait per connection
//! (the oldest is logged unanswered to make room); [`MAX_CONNECTIONS`] connections and
//! [`MAX_TARGETS`] targets are remembered; [`MAX_EVENTS`] events are logged per session.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::sync::LazyLock;

use aho_corasick::AhoCorasick;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use wallcrawler_contract::session_log::{
    CUT_MARK, ESCAPE_HINT, LogRequest, LogResponse, REDACTED, SECRET_HINTS, SessionLog, bounded,
    empty_object, is_sensitive, raw_json, redact, scrub,
};

/// How many bytes of a message's end are kept besides its start.
pub(crate) const TAIL: usize = 512;
/// The most commands waiting for their answer on one connection.
pub(crate) const MAX_PENDING: usize = 1024;
/// The most connections remembered at once.
pub(crate) const MAX_CONNECTIONS: usize = 256;
/// The most targets given a page number (later ones share page 0).
pub(crate) const MAX_TARGETS: usize = 4096;
/// The most events logged in one session.
pub(crate) const MAX_EVENTS: u64 = 50_000;

/// The events logged (when a client watches them and they pass the proxy).
const EVENTS: [&str; 16] = [
    "Page.frameNavigated",
    "Page.navigatedWithinDocument",
    "Page.javascriptDialogOpening",
    "Page.downloadWillBegin",
    "Page.downloadProgress",
    "Browser.downloadWillBegin",
    "Browser.downloadProgress",
    "Runtime.consoleAPICalled",
    "Runtime.exceptionThrown",
    "Log.entryAdded",
    "Inspector.targetCrashed",
    "Target.targetCrashed",
    "Target.attachedToTarget",
    "Target.detachedFromTarget",
    "Target.targetCreated",
    "Target.targetDestroyed",
];

/// The events the session's own watch of its pages logs ([`super::watch`]): while it runs,
/// these are logged from it alone, never from a client's copy.
pub(crate) const WATCHED: [&str; 8] = [
    "Page.frameNavigated",
    "Page.navigatedWithinDocument",
    "Page.javascriptDialogOpening",
    "Runtime.consoleAPICalled",
    "Runtime.exceptionThrown",
    "Log.entryAdded",
    "Inspector.targetCrashed",
    "Target.targetCrashed",
];

/// The connection id of the session's own watch (the proxy's connections count up from 1).
pub(crate) const WATCH_CONN: u64 = u64::MAX;

/// Which way a message went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    /// Client to Chrome: a command.
    Up,
    /// Chrome to client: an answer or an event.
    Down,
}

/// One message as the proxy's tap copied it.
#[derive(Debug, Clone)]
pub(crate) struct Tapped {
    /// The relayed connection.
    pub conn: u64,
    pub dir: Dir,
    /// When the proxy saw it, ms since the epoch.
    pub at: u64,
    /// Its first bytes (all of it when `len` ≤ their length).
    pub head: Vec<u8>,
    /// Its last [`TAIL`] bytes, when it is longer than `head`.
    pub tail: Vec<u8>,
    /// Its whole length.
    pub len: usize,
}

impl Tapped {
    fn is_whole(&self) -> bool {
        self.head.len() >= self.len
    }
}

/// What a message is, as far as the log cares.
#[derive(Debug, Default)]
struct Parsed<'a> {
    id: Option<u64>,
    method: Option<String>,
    session_id: Option<String>,
    /// The whole message, when it was whole and valid JSON.
    whole: Option<Whole<'a>>,
}

/// A whole message's text and its top-level bodies, borrowed from the tapped copy.
#[derive(Debug)]
struct Whole<'a> {
    text: &'a str,
    params: Option<&'a RawValue>,
    result: Option<&'a RawValue>,
    error: Option<&'a RawValue>,
}

/// A message's top level as serde reads it: its bodies are checked as JSON and kept as text,
/// every other member is skipped unread. (A member given twice makes the message unreadable.)
#[derive(Deserialize)]
struct Top<'a> {
    #[serde(default, borrow)]
    id: Option<&'a RawValue>,
    #[serde(default, borrow)]
    method: Option<Cow<'a, str>>,
    #[serde(default, borrow, rename = "sessionId")]
    session_id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    params: Option<&'a RawValue>,
    #[serde(default, borrow)]
    result: Option<&'a RawValue>,
    #[serde(default, borrow)]
    error: Option<&'a RawValue>,
}

/// Which member of a message is the body an entry keeps.
#[derive(Debug, Clone, Copy)]
enum Part {
    Params,
    Result,
    Error,
}

impl Part {
    fn key(self) -> &'static str {
        match self {
            Part::Params => "params",
            Part::Result => "result",
            Part::Error => "error",
        }
    }
}

/// The names in a body that an entry or the matcher uses (read from the body as stored;
/// a body where one of them is not what CDP says, e.g. not a string, gives none).
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct Names {
    frame_id: Option<String>,
    loader_id: Option<String>,
    target_id: Option<String>,
    session_id: Option<String>,
    frame: Option<FrameNames>,
    target_info: Option<TargetNames>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct FrameNames {
    id: Option<String>,
    loader_id: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct TargetNames {
    target_id: Option<String>,
}

impl Names {
    fn of(body: &RawValue) -> Names {
        serde_json::from_str(body.get()).unwrap_or_default()
    }
}

/// A command waiting for its answer.
struct Pending {
    entry: SessionLog,
    /// `Target.attachToTarget`'s target: its answer's `sessionId` is that target's.
    attach_target: Option<String>,
}

#[derive(Default)]
struct Conn {
    pending: HashMap<u64, Pending>,
    order: VecDeque<u64>,
    /// The target of a page connection (`/devtools/page/<id>`), for messages without a session.
    target: Option<String>,
}

/// The log entries of a session's messages.
#[derive(Default)]
pub(crate) struct Matcher {
    conns: HashMap<u64, Conn>,
    /// Target (or session, while its target is unknown) → page number.
    pages: HashMap<String, u64>,
    /// CDP session → its target.
    sessions: HashMap<String, String>,
    events: u64,
    /// Messages that were not entries (malformed, too deep, no method).
    pub(crate) unreadable: u64,
    /// Notes still to log about the matcher's own bounds.
    notes: Vec<String>,
}

impl Matcher {
    /// The entries `t` completes (none, one, or a command pushed out unanswered and more).
    pub(crate) fn message(&mut self, t: &Tapped) -> Vec<SessionLog> {
        let p = parse(t);
        let mut out = Vec::new();
        match t.dir {
            Dir::Up => self.command(t, p, &mut out),
            Dir::Down => match p.id {
                Some(id) => self.answer(t, id, &p, &mut out),
                None => self.event(t, p, &mut out),
            },
        }
        out
    }

    /// Connection `conn` is to target `target` (a page socket).
    pub(crate) fn opened(&mut self, conn: u64, target: Option<String>) {
        if self.conns.len() < MAX_CONNECTIONS || self.conns.contains_key(&conn) {
            self.conns.entry(conn).or_default().target = target;
        }
    }

    /// Connection `conn` closed: its unanswered commands, logged without an answer.
    pub(crate) fn closed(&mut self, conn: u64) -> Vec<SessionLog> {
        let Some(mut c) = self.conns.remove(&conn) else {
            return Vec::new();
        };
        c.order
            .into_iter()
            .filter_map(|id| c.pending.remove(&id))
            .map(|p| p.entry)
            .collect()
    }

    /// Every connection closed (the session ends).
    pub(crate) fn close_all(&mut self) -> Vec<SessionLog> {
        let mut ids: Vec<u64> = self.conns.keys().copied().collect();
        ids.sort_unstable();
        ids.into_iter().flat_map(|c| self.closed(c)).collect()
    }

    /// Notes about the matcher's bounds since the last call.
    pub(crate) fn take_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }

    fn command(&mut self, t: &Tapped, p: Parsed, out: &mut Vec<SessionLog>) {
        let Some(method) = p.method.clone() else {
            self.unreadable += 1;
            return;
        };
        let (params, raw) = body(t, &p, Part::Params, &method);
        let names = Names::of(&params);
        let session_id = p.session_id.clone().unwrap_or_default();
        let target = self.target_of(t.conn, &session_id);
        let page_id = self.page_of(&target);
        let attach_target = (method == "Target.attachToTarget")
            .then_some(names.target_id)
            .flatten();
        let entry = SessionLog {
            frame_id: names.frame_id,
            loader_id: names.loader_id,
            method,
            page_id,
            session_id,
            request: Some(LogRequest {
                params,
                raw_body: raw,
                timestamp: Some(t.at),
            }),
            response: None,
            timestamp: Some(t.at),
        };
        let Some(id) = p.id else {
            // Nothing can answer it: logged as it is.
            out.push(entry);
            return;
        };
        if self.conns.len() >= MAX_CONNECTIONS && !self.conns.contains_key(&t.conn) {
            out.push(entry);
            return;
        }
        let c = self.conns.entry(t.conn).or_default();
        if c.order.len() >= MAX_PENDING
            && let Some(old) = c.order.pop_front()
            && let Some(p) = c.pending.remove(&old)
        {
            out.push(p.entry);
        }
        if let Some(dup) = c.pending.insert(
            id,
            Pending {
                entry,
                attach_target,
            },
        ) {
            // The same id again before an answer: the first is logged unanswered.
            c.order.retain(|x| *x != id);
            out.push(dup.entry);
        }
        c.order.push_back(id);
    }

    /// Chrome's answer `id` on `t`'s connection: the command it answers, logged.
    fn answer(&mut self, t: &Tapped, id: u64, p: &Parsed, out: &mut Vec<SessionLog>) {
        {
            let Some(c) = self.conns.get_mut(&t.conn) else {
                return;
            };
            let Some(pending) = c.pending.remove(&id) else {
                return;
            };
            c.order.retain(|x| *x != id);
            let mut entry = pending.entry;
            let part = if p.whole.as_ref().is_some_and(|w| w.error.is_some()) {
                Part::Error
            } else {
                Part::Result
            };
            let (result, raw) = body(t, p, part, &entry.method);
            let names = Names::of(&result);
            if let (Some(target), Some(sid)) = (pending.attach_target, &names.session_id) {
                self.learn_session(sid, &target);
            }
            entry.frame_id = entry.frame_id.or(names.frame_id);
            entry.loader_id = entry.loader_id.or(names.loader_id);
            entry.response = Some(LogResponse {
                result,
                raw_body: raw,
                timestamp: Some(t.at),
            });
            out.push(entry);
        }
    }

    /// An event of Chrome's: logged if it is one worth logging, within [`MAX_EVENTS`].
    fn event(&mut self, t: &Tapped, p: Parsed, out: &mut Vec<SessionLog>) {
        let Some(method) = p.method.clone() else {
            self.unreadable += 1;
            return;
        };
        if !EVENTS.contains(&method.as_str()) {
            return;
        }
        let (params, raw) = body(t, &p, Part::Params, &method);
        let names = Names::of(&params);
        if method == "Target.attachedToTarget"
            && let (Some(sid), Some(target)) = (
                &names.session_id,
                names
                    .target_info
                    .as_ref()
                    .and_then(|i| i.target_id.as_ref()),
            )
        {
            self.learn_session(sid, target);
        }
        // While the watch runs, it alone logs what it watches (its own attachments are not
        // entries), and clients log the rest.
        let from_watch = t.conn == WATCH_CONN;
        if self.conns.contains_key(&WATCH_CONN) && WATCHED.contains(&method.as_str()) != from_watch
        {
            return;
        }
        if self.events >= MAX_EVENTS {
            if self.events == MAX_EVENTS {
                self.notes.push(format!(
                    "the session logged {MAX_EVENTS} events; later events are not logged"
                ));
                self.events += 1;
            }
            return;
        }
        self.events += 1;
        let session_id = p.session_id.clone().unwrap_or_default();
        let target = self.target_of(t.conn, &session_id);
        let page_id = self.page_of(&target);
        let frame = names.frame.unwrap_or_default();
        out.push(SessionLog {
            frame_id: names.frame_id.or(frame.id),
            loader_id: names.loader_id.or(frame.loader_id),
            method,
            page_id,
            session_id,
            request: None,
            response: Some(LogResponse {
                result: params,
                raw_body: raw,
                timestamp: Some(t.at),
            }),
            timestamp: Some(t.at),
        });
    }

    /// Session `sid` is attached to `target`.
    fn learn_session(&mut self, sid: &str, target: &str) {
        if self.sessions.len() < MAX_TARGETS {
            self.sessions.insert(sid.to_owned(), target.to_owned());
        }
    }

    /// What a message of connection `conn` in session `sid` is about: the session's target,
    /// else the connection's own target, else the session itself, else the browser ("").
    fn target_of(&self, conn: u64, sid: &str) -> String {
        if let Some(t) = self.sessions.get(sid) {
            return t.clone();
        }
        if !sid.is_empty() {
            return sid.to_owned();
        }
        self.conns
            .get(&conn)
            .and_then(|c| c.target.clone())
            .unwrap_or_default()
    }

    /// The page number of `target` (0: the browser, or past [`MAX_TARGETS`]).
    fn page_of(&mut self, target: &str) -> u64 {
        if target.is_empty() {
            return 0;
        }
        if let Some(n) = self.pages.get(target) {
            return *n;
        }
        if self.pages.len() >= MAX_TARGETS {
            return 0;
        }
        let n = self.pages.len() as u64 + 1;
        self.pages.insert(target.to_owned(), n);
        n
    }
}

/// Whether a whole message may hold something [`redact`] would change (see
/// [`SECRET_HINTS`]): one that cannot is stored as it came, its body copied, not parsed.
fn may_hold_secrets(method: &str, text: &str) -> bool {
    static HINTS: LazyLock<Option<AhoCorasick>> = LazyLock::new(|| {
        AhoCorasick::builder()
            .ascii_case_insensitive(true)
            // A full DFA: one table step per byte (about 4,000 instructions fewer per
            // 256-byte round trip than the default NFA, counted by scripts/bench/log-cost.sh).
            .kind(Some(aho_corasick::AhoCorasickKind::DFA))
            .build(SECRET_HINTS.iter().chain(&[ESCAPE_HINT]))
            .ok()
    });
    // Without the automaton (it builds from constants), every message takes the long way.
    is_sensitive(method) || HINTS.as_ref().is_none_or(|h| h.is_match(text))
}

/// A message's `part` (redacted; `{}` when absent or cut) and its raw body (redacted,
/// bounded, marked when cut).
fn body(t: &Tapped, p: &Parsed, part: Part, method: &str) -> (Box<RawValue>, String) {
    match &p.whole {
        Some(w) if !may_hold_secrets(method, w.text) => {
            let member = match part {
                Part::Params => w.params,
                Part::Result => w.result,
                Part::Error => w.error,
            };
            // Whole, so within the tap's head: no longer than a raw body may be.
            (
                member.map_or_else(empty_object, ToOwned::to_owned),
                w.text.to_owned(),
            )
        }
        Some(w) => redacted_body(w.text, part.key(), method),
        None if is_sensitive(method) => (empty_object(), REDACTED.to_owned()),
        None => {
            let text = String::from_utf8_lossy(&t.head);
            let cut = t.head.len() < t.len;
            let text = scrub(&text).unwrap_or_else(|| text.into_owned());
            let raw = if cut {
                let (mut s, _) = bounded(&text);
                if !s.ends_with(CUT_MARK) {
                    s.push_str(CUT_MARK);
                }
                s
            } else {
                bounded(&text).0
            };
            (empty_object(), raw)
        }
    }
}

/// [`body`] of a message that may hold secrets: parsed whole, redacted, written again.
fn redacted_body(text: &str, key: &str, method: &str) -> (Box<RawValue>, String) {
    let Ok(Value::Object(mut rest)) = serde_json::from_str::<Value>(text) else {
        return (empty_object(), REDACTED.to_owned());
    };
    let mut part = rest
        .remove(key)
        .unwrap_or_else(|| Value::Object(Map::new()));
    redact(method, &mut part);
    let mut all = Value::Object(rest);
    redact(method, &mut all);
    let body = raw_json(&part);
    if let Value::Object(m) = &mut all {
        m.insert(key.to_owned(), part);
    }
    (body, bounded(&all.to_string()).0)
}

/// What `t` is: read whole when it is whole, else its top-level `id`, `method` and
/// `sessionId` found by a bounded scan of its start (and `sessionId` in its end).
fn parse(t: &Tapped) -> Parsed<'_> {
    if t.is_whole() {
        return whole(&t.head).unwrap_or_default();
    }
    let mut p = scan_top_level(&t.head);
    if p.session_id.is_none() {
        p.session_id = session_in_tail(&t.tail);
    }
    p
}

/// A whole message read, if it is a JSON object (serde's depth limit, 128, holds).
fn whole(bytes: &[u8]) -> Option<Parsed<'_>> {
    let text = std::str::from_utf8(bytes).ok()?;
    if !text.trim_start().starts_with('{') {
        return None;
    }
    let top: Top = serde_json::from_str(text).ok()?;
    // An id serde cannot hold (1e400) makes the message unreadable, as Chrome finds it.
    let id = match top.id {
        Some(id) => serde_json::from_str::<Value>(id.get()).ok()?.as_u64(),
        None => None,
    };
    Some(Parsed {
        id,
        method: top.method.map(Cow::into_owned),
        session_id: top.session_id.map(Cow::into_owned),
        whole: Some(Whole {
            text,
            params: top.params,
            result: top.result,
            error: top.error,
        }),
    })
}

/// The top-level `id`, `method` and `sessionId` of a JSON object's first bytes (a cut
/// message): a single pass that tracks strings and depth, nothing allocated but the values.
fn scan_top_level(b: &[u8]) -> Parsed<'static> {
    let mut p = Parsed::default();
    let mut depth = 0usize;
    let mut i = 0;
    // The key just read at depth 1, while its value is awaited.
    let mut key: Option<&[u8]> = None;
    while i < b.len() {
        match b[i] {
            b'"' => {
                let start = i + 1;
                let Some(end) = string_end(b, start) else {
                    break;
                };
                let s = &b[start..end];
                i = end + 1;
                if depth == 1 {
                    match key.take() {
                        None => {
                            // A key if a ':' follows.
                            let mut j = i;
                            while j < b.len() && b[j].is_ascii_whitespace() {
                                j += 1;
                            }
                            if j < b.len() && b[j] == b':' {
                                key = Some(s);
                                i = j + 1;
                            }
                        }
                        Some(k) => {
                            let v = std::str::from_utf8(s).ok().map(str::to_owned);
                            match k {
                                b"method" => p.method = v,
                                b"sessionId" => p.session_id = v,
                                _ => {}
                            }
                        }
                    }
                }
                continue;
            }
            b'{' | b'[' => {
                depth += 1;
                key = None;
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                key = None;
            }
            b'0'..=b'9' if depth == 1 && key == Some(b"id".as_slice()) => {
                let end = b[i..]
                    .iter()
                    .position(|c| !c.is_ascii_digit())
                    .map_or(b.len(), |n| i + n);
                p.id = std::str::from_utf8(&b[i..end])
                    .ok()
                    .and_then(|s| s.parse().ok());
                key = None;
                i = end;
                continue;
            }
            b',' => key = None,
            _ => {}
        }
        i += 1;
    }
    p
}

/// The index of the quote ending the string whose content starts at `start`.
fn string_end(b: &[u8], start: usize) -> Option<usize> {
    let mut i = start;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return Some(i),
            _ => i += 1,
        }
    }
    None
}

/// `"sessionId":"…"` as a message's last member, from its last bytes.
fn session_in_tail(tail: &[u8]) -> Option<String> {
    const KEY: &[u8] = b"\"sessionId\":\"";
    let at = tail.windows(KEY.len()).rposition(|w| w == KEY)? + KEY.len();
    let end = string_end(tail, at)?;
    let rest = &tail[end + 1..];
    if rest.iter().all(|c| c.is_ascii_whitespace() || *c == b'}') {
        std::str::from_utf8(&tail[at..end]).ok().map(str::to_owned)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use serde_json::json;
    use wallcrawler_contract::session_log::MAX_RAW_BODY;

    use super::*;

    /// `text` as the tap copies it.
    fn tap(conn: u64, dir: Dir, at: u64, text: &str) -> Tapped {
        crate::session_log::tap(conn, dir, at, text.as_bytes())
    }

    /// A stored body, read.
    fn v(body: &RawValue) -> Value {
        serde_json::from_str(body.get()).expect("a body is JSON")
    }

    fn up(m: &mut Matcher, conn: u64, at: u64, v: Value) -> Vec<SessionLog> {
        m.message(&tap(conn, Dir::Up, at, &v.to_string()))
    }

    fn down(m: &mut Matcher, conn: u64, at: u64, v: Value) -> Vec<SessionLog> {
        m.message(&tap(conn, Dir::Down, at, &v.to_string()))
    }

    #[test]
    fn a_command_is_logged_with_its_answer_by_id_and_connection() {
        let mut m = Matcher::default();
        let nav = json!({"id": 7, "method": "Page.navigate", "params": {"url": "http://127.0.0.1/a"}, "sessionId": "S1"});
        assert!(up(&mut m, 1, 100, nav).is_empty());
        // The same id on another connection answers nothing here.
        assert!(down(&mut m, 2, 101, json!({"id": 7, "result": {}})).is_empty());
        let got = down(
            &mut m,
            1,
            150,
            json!({"id": 7, "result": {"frameId": "F1", "loaderId": "L1"}, "sessionId": "S1"}),
        );
        assert_eq!(got.len(), 1);
        let e = &got[0];
        assert_eq!(e.method, "Page.navigate");
        assert_eq!(e.session_id, "S1");
        assert_eq!(e.page_id, 1);
        assert_eq!(e.frame_id.as_deref(), Some("F1"));
        assert_eq!(e.loader_id.as_deref(), Some("L1"));
        let req = e.request.as_ref().unwrap();
        assert_eq!(v(&req.params), json!({"url": "http://127.0.0.1/a"}));
        assert_eq!(req.timestamp, Some(100));
        let raw: Value = serde_json::from_str(&req.raw_body).unwrap();
        assert_eq!(raw["method"], "Page.navigate");
        let res = e.response.as_ref().unwrap();
        assert_eq!(res.timestamp, Some(150));
        assert_eq!(v(&res.result)["frameId"], "F1");
        assert_eq!(e.timestamp, Some(100));
        // Answered once: a second answer is nothing.
        assert!(down(&mut m, 1, 151, json!({"id": 7, "result": {}})).is_empty());
    }

    #[test]
    fn errors_are_answers_and_unanswered_commands_are_logged_at_close() {
        let mut m = Matcher::default();
        up(&mut m, 1, 1, json!({"id": 1, "method": "Bogus.x"}));
        let got = down(
            &mut m,
            1,
            2,
            json!({"id": 1, "error": {"code": -32601, "message": "'Bogus.x' wasn't found"}}),
        );
        assert_eq!(v(&got[0].response.as_ref().unwrap().result)["code"], -32601);
        up(
            &mut m,
            1,
            3,
            json!({"id": 2, "method": "Runtime.evaluate", "params": {"expression": "1"}}),
        );
        let got = m.closed(1);
        assert_eq!(got.len(), 1);
        assert!(got[0].response.is_none());
        assert!(m.closed(1).is_empty());
    }

    #[test]
    fn pages_are_small_stable_numbers_per_target() {
        let mut m = Matcher::default();
        m.opened(9, Some("PAGE-T".into()));
        // Browser-level: page 0.
        up(
            &mut m,
            1,
            1,
            json!({"id": 1, "method": "Target.setDiscoverTargets"}),
        );
        let got = down(&mut m, 1, 2, json!({"id": 1, "result": {}}));
        assert_eq!(got[0].page_id, 0);
        // A session learnt from attachedToTarget is its target's page.
        let ev = down(
            &mut m,
            1,
            3,
            json!({"method": "Target.attachedToTarget", "params": {"sessionId": "S1", "targetInfo": {"targetId": "T1", "type": "page"}}}),
        );
        assert_eq!(ev.len(), 1);
        up(
            &mut m,
            1,
            4,
            json!({"id": 2, "method": "Page.enable", "sessionId": "S1"}),
        );
        let a = down(
            &mut m,
            1,
            5,
            json!({"id": 2, "result": {}, "sessionId": "S1"}),
        );
        // From attachToTarget's answer too.
        up(
            &mut m,
            1,
            6,
            json!({"id": 3, "method": "Target.attachToTarget", "params": {"targetId": "T2", "flatten": true}}),
        );
        down(
            &mut m,
            1,
            7,
            json!({"id": 3, "result": {"sessionId": "S2"}}),
        );
        up(
            &mut m,
            1,
            8,
            json!({"id": 4, "method": "Page.enable", "sessionId": "S2"}),
        );
        let b = down(
            &mut m,
            1,
            9,
            json!({"id": 4, "result": {}, "sessionId": "S2"}),
        );
        // A page socket's own target.
        up(&mut m, 9, 10, json!({"id": 1, "method": "Page.enable"}));
        let c = down(&mut m, 9, 11, json!({"id": 1, "result": {}}));
        up(
            &mut m,
            1,
            12,
            json!({"id": 5, "method": "Runtime.enable", "sessionId": "S1"}),
        );
        let a2 = down(
            &mut m,
            1,
            13,
            json!({"id": 5, "result": {}, "sessionId": "S1"}),
        );
        let pages = [a[0].page_id, b[0].page_id, c[0].page_id, a2[0].page_id];
        assert_eq!(pages, [1, 2, 3, 1]);
    }

    #[test]
    fn only_the_events_worth_logging_are_and_they_are_bounded() {
        let mut m = Matcher::default();
        assert!(
            down(
                &mut m,
                1,
                1,
                json!({"method": "Network.dataReceived", "params": {}})
            )
            .is_empty()
        );
        let nav = down(
            &mut m,
            1,
            2,
            json!({"method": "Page.frameNavigated", "params": {"frame": {"id": "F", "loaderId": "L", "url": "http://127.0.0.1/"}}, "sessionId": "S"}),
        );
        assert_eq!(nav[0].frame_id.as_deref(), Some("F"));
        assert_eq!(nav[0].loader_id.as_deref(), Some("L"));
        assert!(nav[0].request.is_none());
        let console =
            json!({"method": "Runtime.consoleAPICalled", "params": {"type": "log", "args": []}});
        for _ in 1..MAX_EVENTS {
            assert_eq!(down(&mut m, 1, 3, console.clone()).len(), 1);
        }
        assert!(down(&mut m, 1, 3, console.clone()).is_empty());
        assert!(down(&mut m, 1, 3, console).is_empty());
        assert_eq!(m.take_notes().len(), 1, "one note when the cap is reached");
    }

    /// While the session's own watch runs, what it watches is logged from it once (a client
    /// watching the same console adds no second entry), its attachment maps its session to the
    /// page without being an entry, and clients' other events are logged; once it ends,
    /// clients' copies are logged again.
    #[test]
    fn the_watch_logs_what_it_watches_once() {
        let mut m = Matcher::default();
        m.opened(1, None);
        m.opened(WATCH_CONN, None);
        let attached = json!({"method": "Target.attachedToTarget", "params": {"sessionId": "W",
            "targetInfo": {"targetId": "PAGE-A", "type": "page"}, "waitingForDebugger": false}});
        assert!(down(&mut m, WATCH_CONN, 1, attached).is_empty());
        let console = |sid: &str| {
            json!({"method": "Runtime.consoleAPICalled", "params": {"type": "log", "args": []},
                "sessionId": sid})
        };
        assert!(
            down(&mut m, 1, 2, console("C")).is_empty(),
            "a client's copy"
        );
        let own = down(&mut m, WATCH_CONN, 2, console("W"));
        assert_eq!(own.len(), 1);
        assert_eq!(own[0].page_id, 1, "the watched page's number");
        let created = json!({"method": "Target.targetCreated", "params": {"targetInfo": {}}});
        assert_eq!(
            down(&mut m, 1, 3, created).len(),
            1,
            "not watched: the client's"
        );
        assert!(m.closed(WATCH_CONN).is_empty());
        assert_eq!(down(&mut m, 1, 4, console("C")).len(), 1, "the watch ended");
    }

    #[test]
    fn a_message_with_nothing_to_redact_is_stored_as_it_came() {
        let mut m = Matcher::default();
        // Members in the client's order and spacing, kept (a tree would sort and respace).
        let cmd = r#"{"method": "Runtime.evaluate", "id": 3, "params": {"z": 1, "a": "x"}}"#;
        assert!(m.message(&tap(1, Dir::Up, 1, cmd)).is_empty());
        let got = m.message(&tap(1, Dir::Down, 2, r#"{"id":3,"result":{"b":2}}"#));
        let req = got[0].request.as_ref().unwrap();
        assert_eq!(req.raw_body, cmd);
        assert_eq!(req.params.get(), r#"{"z": 1, "a": "x"}"#);
        assert_eq!(got[0].response.as_ref().unwrap().result.get(), r#"{"b":2}"#);
        // A secret's name spelled with JSON escapes takes the long way, and is redacted.
        let sneaky = r#"{"id":4,"method":"Runtime.evaluate","params":{"\u0074oken":"s3cret"}}"#;
        m.message(&tap(1, Dir::Up, 3, sneaky));
        let got = m.message(&tap(1, Dir::Down, 4, r#"{"id":4,"result":{}}"#));
        let req = got[0].request.as_ref().unwrap();
        assert!(!req.raw_body.contains("s3cret"), "{}", req.raw_body);
        assert_eq!(v(&req.params), json!({"token": REDACTED}));
    }

    #[test]
    fn secrets_never_reach_an_entry() {
        let mut m = Matcher::default();
        let jwt = "eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJzZXNzXzEifQ.c2lnbmF0dXJlLWJ5dGVz";
        up(
            &mut m,
            1,
            1,
            json!({"id": 1, "method": "Network.setExtraHTTPHeaders", "params": {"headers": {"Authorization": format!("Bearer {jwt}"), "X-Key": "s3cret"}}}),
        );
        let e = down(&mut m, 1, 2, json!({"id": 1, "result": {}}));
        up(
            &mut m,
            1,
            3,
            json!({"id": 2, "method": "Network.getAllCookies"}),
        );
        let c = down(
            &mut m,
            1,
            4,
            json!({"id": 2, "result": {"cookies": [{"name": "sid", "value": "c00kie"}]}}),
        );
        up(
            &mut m,
            1,
            5,
            json!({"id": 3, "method": "Page.navigate", "params": {"url": format!("http://127.0.0.1/?signingKey={jwt}")}}),
        );
        let n = down(&mut m, 1, 6, json!({"id": 3, "result": {}}));
        let text = serde_json::to_string(&[&e[0], &c[0], &n[0]]).unwrap();
        for secret in ["s3cret", "c00kie", "eyJzdWIi", "Bearer e"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert!(text.contains("sid"), "names stay");
    }

    #[test]
    fn a_long_message_is_cut_marked_and_still_matched() {
        let mut m = Matcher::default();
        let big = "x".repeat(3 * MAX_RAW_BODY);
        let cmd = json!({"id": 11, "method": "Runtime.evaluate", "params": {"expression": big}, "sessionId": "S9"});
        assert!(up(&mut m, 1, 1, cmd).is_empty());
        let answer = json!({"id": 11, "result": {"result": {"type": "string", "value": big}}, "sessionId": "S9"});
        let got = down(&mut m, 1, 2, answer);
        assert_eq!(got.len(), 1);
        let e = &got[0];
        assert_eq!(
            (e.method.as_str(), e.session_id.as_str()),
            ("Runtime.evaluate", "S9")
        );
        let req = e.request.as_ref().unwrap();
        assert!(
            req.raw_body.ends_with(CUT_MARK) && req.raw_body.len() <= MAX_RAW_BODY + CUT_MARK.len()
        );
        assert_eq!(v(&req.params), json!({}));
        assert!(e.response.as_ref().unwrap().raw_body.ends_with(CUT_MARK));
        // A sensitive command cut: nothing of its body.
        let headers = json!({"id": 12, "method": "Network.setExtraHTTPHeaders", "params": {"headers": {"X": big}}});
        up(&mut m, 1, 3, headers);
        let got = down(&mut m, 1, 4, json!({"id": 12, "result": {}}));
        assert_eq!(got[0].request.as_ref().unwrap().raw_body, REDACTED);
    }

    #[test]
    fn hostile_messages_are_refused_within_bounds() {
        let mut m = Matcher::default();
        let started = Instant::now();
        // Malformed, not an object, no method.
        for bad in ["{", "[1,2]", "nul", "{\"id\":1}", "\u{0}\u{1}", ""] {
            assert!(m.message(&tap(1, Dir::Up, 1, bad)).is_empty(), "{bad:?}");
        }
        // Nested far deeper than serde's limit: refused, no stack overflow.
        let deep = format!(
            "{{\"id\":1,\"method\":\"A.b\",\"params\":{}{}}}",
            "[".repeat(30_000),
            "]".repeat(30_000)
        );
        assert!(m.message(&tap(1, Dir::Up, 1, &deep)).is_empty());
        // A number serde cannot hold (1e400): not an entry, as Chrome would refuse it too.
        assert!(
            m.message(&tap(1, Dir::Up, 1, "{\"id\":1e400,\"method\":\"A.b\"}"))
                .is_empty()
        );
        // Ids beyond u64, negative or fractional: logged as commands nothing can answer.
        for id in ["18446744073709551616", "-1", "1.5"] {
            let got = m.message(&tap(
                1,
                Dir::Up,
                1,
                &format!("{{\"id\":{id},\"method\":\"A.b\"}}"),
            ));
            assert_eq!(got.len(), 1, "{id}");
        }
        // A cut message whose id is huge: no match, no panic.
        let cut = format!(
            "{{\"id\":{},\"method\":\"A.b\",\"params\":\"{}\"}}",
            "9".repeat(40),
            "y".repeat(2 * MAX_RAW_BODY)
        );
        let got = m.message(&tap(1, Dir::Up, 1, &cut));
        assert_eq!(got.len(), 1);
        // Many commands never answered: at most MAX_PENDING wait.
        let mut pushed = 0;
        for id in 0..(MAX_PENDING as u64 + 10) {
            pushed += up(&mut m, 2, 1, json!({"id": id, "method": "A.b"})).len();
        }
        assert_eq!(pushed, 10);
        assert_eq!(m.conns[&2].pending.len(), MAX_PENDING);
        assert_eq!(m.conns[&2].order.len(), MAX_PENDING);
        // Many connections: at most MAX_CONNECTIONS remembered.
        for conn in 0..(MAX_CONNECTIONS as u64 * 2) {
            up(&mut m, 1000 + conn, 1, json!({"id": 1, "method": "A.b"}));
        }
        assert!(m.conns.len() <= MAX_CONNECTIONS);
        // Many sessions: at most MAX_TARGETS numbered.
        for s in 0..(MAX_TARGETS * 2) {
            up(
                &mut m,
                3,
                1,
                json!({"method": "A.b", "sessionId": format!("S{s}")}),
            );
        }
        assert!(m.pages.len() <= MAX_TARGETS);
        assert!(m.unreadable >= 5);
        assert!(started.elapsed() < Duration::from_secs(10), "bounded time");
    }

    #[test]
    fn the_scan_of_a_cut_message_reads_only_the_top_level() {
        let p = scan_top_level(br#"{"params":{"id":5,"method":"No.pe","x":"\"id\":6"},"id":42,"method":"Yes.ok","sessionId":"S"#);
        assert_eq!(p.id, Some(42));
        assert_eq!(p.method.as_deref(), Some("Yes.ok"));
        assert_eq!(p.session_id, None, "cut inside the string");
        assert_eq!(
            session_in_tail(br#"xx","sessionId":"S7"}"#).as_deref(),
            Some("S7")
        );
        assert_eq!(session_in_tail(br#""sessionId":"S7","more":1}"#), None);
    }
}
