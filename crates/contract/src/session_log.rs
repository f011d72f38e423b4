//! A session's log (`GET /v1/sessions/{id}/logs`): the entries a controller records as its
//! clients' CDP commands, their answers and the events they watch pass the proxy, and the
//! platform's own notes; where they are stored; and what is never in them.
//!
//! The shape is Browserbase's `SessionLog` (`@browserbasehq/sdk` 2.21,
//! `resources/sessions/logs.d.ts`): `{method, pageId, sessionId, frameId?, loaderId?,
//! request?: {params, rawBody, timestamp?}, response?: {result, rawBody, timestamp?},
//! timestamp?}`, timestamps in milliseconds since the epoch.
//!
//! Storage: the controller appends entries as JSON lines to chunk objects under
//! [`session_log_prefix`] (the files bucket on AWS, the data directory's `contexts/` locally),
//! named so that their keys sort in writing order ([`session_log_chunk_key`]); the API reads
//! every chunk in key order. An entry's place in that order is its id in the event stream.
//!
//! Secrets are never stored: every raw body is bounded ([`MAX_RAW_BODY`], marked when cut),
//! and before it is stored it passes [`redact`]: header values of
//! `Network.setExtraHTTPHeaders` and of the `Fetch` commands that carry headers, cookie values,
//! proxy and HTTP credentials (`Fetch.continueWithAuth`), and anything shaped like a token
//! (a JWT, a `signingKey=` query value, a `Bearer` credential) are replaced by [`REDACTED`].

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::storage::session_files_prefix;

/// The most bytes of one raw body (a command's or an answer's) kept in an entry.
pub const MAX_RAW_BODY: usize = 64 * 1024;

/// What a body cut at [`MAX_RAW_BODY`] ends with.
pub const CUT_MARK: &str = "…[cut]";

/// What a secret is replaced by.
pub const REDACTED: &str = "[redacted]";

/// The method of the platform's own notes (proxy failures, unsupported settings, dropped
/// entries): `params.message` says what happened.
pub const NOTE_METHOD: &str = "Wallcrawler.note";

/// The most entries one session's log holds; past it the controller records one note saying
/// so and nothing more.
pub const MAX_ENTRIES: u64 = 200_000;

/// A command as the client sent it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogRequest {
    /// The command's `params` (redacted; `{}` when absent or when the body was cut), as JSON
    /// text: the writer copies it from the message, never builds a tree of it.
    pub params: Box<RawValue>,
    /// The command as sent (redacted, bounded).
    pub raw_body: String,
    /// When the proxy saw it, ms since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<u64>,
}

/// Chrome's answer to a command, or an event's body.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LogResponse {
    /// The answer's `result` (or `error`, or an event's `params`), redacted, as JSON text.
    pub result: Box<RawValue>,
    /// The answer as Chrome sent it (redacted, bounded).
    pub raw_body: String,
    /// When the proxy saw it, ms since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<u64>,
}

/// One entry of a session's log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionLog {
    /// The CDP method (`Page.navigate`), or [`NOTE_METHOD`].
    pub method: String,
    /// A small number per target, stable within the session (0: the browser itself).
    pub page_id: u64,
    /// The CDP session the message belongs to (empty: the connection's own target).
    pub session_id: String,
    /// The frame the message names, when it names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frame_id: Option<String>,
    /// The loader the message names, when it names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loader_id: Option<String>,
    /// The command (absent for an event).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<LogRequest>,
    /// Chrome's answer or the event (absent for a command still unanswered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<LogResponse>,
    /// When it happened, ms since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<u64>,
}

/// Two bodies are equal when their JSON texts are (what is stored and served).
impl PartialEq for LogRequest {
    fn eq(&self, o: &Self) -> bool {
        self.params.get() == o.params.get()
            && self.raw_body == o.raw_body
            && self.timestamp == o.timestamp
    }
}

impl PartialEq for LogResponse {
    fn eq(&self, o: &Self) -> bool {
        self.result.get() == o.result.get()
            && self.raw_body == o.raw_body
            && self.timestamp == o.timestamp
    }
}

/// `v` as JSON text (`{}` for a value serde_json cannot write, which a `Value` never is).
pub fn raw_json(v: &Value) -> Box<RawValue> {
    serde_json::value::to_raw_value(v).unwrap_or_else(|_| empty_object())
}

/// `{}`.
pub fn empty_object() -> Box<RawValue> {
    RawValue::from_string("{}".to_owned()).expect("{} is JSON")
}

impl SessionLog {
    /// A platform note saying `message` at `at` (ms since the epoch).
    pub fn note(message: &str, at: u64) -> SessionLog {
        let params = serde_json::json!({ "message": message });
        SessionLog {
            method: NOTE_METHOD.to_owned(),
            page_id: 0,
            session_id: String::new(),
            frame_id: None,
            loader_id: None,
            request: None,
            response: Some(LogResponse {
                raw_body: params.to_string(),
                result: raw_json(&params),
                timestamp: Some(at),
            }),
            timestamp: Some(at),
        }
    }
}

/// `files/<projectId>/<sessionId>/logs/`: every chunk of one session's log.
pub fn session_log_prefix(project_id: &str, session_id: &str) -> String {
    format!("{}logs/", session_files_prefix(project_id, session_id))
}

/// `files/<projectId>/<sessionId>/logs/<writer start ms, 13 digits>-<chunk, 6 digits>.jsonl`:
/// chunk `chunk` of the writer started at `writer_ms`. Keys sort in writing order (a later
/// writer of the same session, e.g. after a handoff, sorts after an earlier one).
pub fn session_log_chunk_key(
    project_id: &str,
    session_id: &str,
    writer_ms: u64,
    chunk: u32,
) -> String {
    format!(
        "{}{writer_ms:013}-{chunk:06}.jsonl",
        session_log_prefix(project_id, session_id)
    )
}

/// The tag (`key=value`, S3's `x-amz-tagging`) a session's records (its log and its
/// recording) carry in the contexts bucket: its lifecycle rule expires what has it after
/// `SessionRecordRetentionDays` (`deploy/template.yaml`; a rule cannot match `files/*/*/logs/`
/// by prefix).
pub const RECORD_TAGGING: &str = "wallcrawler-record=session";

/// [`RECORD_TAGGING`] when `key` is a session's record — a log chunk, or an object of its
/// recording (`files/<p>/<s>/recordings/…`: indexes, segments, MP4s) — else `None`.
pub fn record_tagging(key: &str) -> Option<&'static str> {
    let mut parts = key.strip_prefix("files/")?.splitn(4, '/');
    let (_project, _session) = (parts.next()?, parts.next()?);
    let (dir, rest) = (parts.next()?, parts.next()?);
    let record = match dir {
        "logs" => is_chunk_name(rest),
        "recordings" => !rest.is_empty() && rest.split('/').all(|p| !p.is_empty() && p != ".."),
        _ => false,
    };
    record.then_some(RECORD_TAGGING)
}

/// Whether `name` (a key below [`session_log_prefix`]) is a chunk's: what the API reads.
pub fn is_chunk_name(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() == 13 + 1 + 6 + 6
        && b[..13].iter().all(u8::is_ascii_digit)
        && b[13] == b'-'
        && b[14..20].iter().all(u8::is_ascii_digit)
        && name.ends_with(".jsonl")
}

/// `text` cut to at most [`MAX_RAW_BODY`] bytes (at a character boundary), with [`CUT_MARK`]
/// when it was cut; whether it was.
pub fn bounded(text: &str) -> (String, bool) {
    if text.len() <= MAX_RAW_BODY {
        return (text.to_owned(), false);
    }
    let mut end = MAX_RAW_BODY - CUT_MARK.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (format!("{}{CUT_MARK}", &text[..end]), true)
}

/// Commands whose `params.headers` (an object or an array of `{name, value}`) carry header
/// values a client may have put a credential in.
const HEADER_COMMANDS: [&str; 4] = [
    "Network.setExtraHTTPHeaders",
    "Fetch.continueRequest",
    "Fetch.fulfillRequest",
    "Fetch.continueResponse",
];

/// Whether `method`'s bodies carry secrets by their nature (headers, cookies, credentials): a
/// cut body of one, which cannot be redacted field by field, is stored as [`REDACTED`].
pub fn is_sensitive(method: &str) -> bool {
    HEADER_COMMANDS.contains(&method)
        || carries_cookies(method)
        || method == "Fetch.continueWithAuth"
}

/// Keys whose values are secret wherever they appear (cookies, credentials), lower case.
const SECRET_KEYS: [&str; 11] = [
    "cookie",
    "set-cookie",
    "authorization",
    "proxy-authorization",
    "password",
    "username",
    "signingkey",
    "token",
    "apikey",
    "x-bb-api-key",
    "x-wc-api-key",
];

/// The prefixes [`scrub`] looks for (a parameter's name, or `Bearer `), besides `eyJ`.
const SECRET_PREFIXES: [&str; 4] = ["signingKey=", "token=", "apiKey=", "Bearer "];

/// What every secret [`redact`] replaces contains, ASCII case aside: each of
/// [`SECRET_KEYS`], each of [`SECRET_PREFIXES`] and a JWT's `eyJ` holds one of these, and
/// `\u` is how JSON could spell any of them in other letters. A text holding none of them
/// (and not of a method [`is_sensitive`]) has nothing to redact, so a log's writer may store
/// it as it came without parsing it (the tests below keep the lists in step).
pub const SECRET_HINTS: [&str; 10] = [
    "cookie",
    "authorization",
    "password",
    "username",
    "signingkey",
    "token",
    "apikey",
    "api-key",
    "eyj",
    "bearer ",
];

/// JSON's escape for any character, which could spell a secret's name in other letters.
pub const ESCAPE_HINT: &str = "\\u";

fn secret_key(key: &str) -> bool {
    SECRET_KEYS.contains(&key.to_ascii_lowercase().as_str())
}

/// Methods whose params or result carry cookies (`cookies: [{name, value, …}]`).
fn carries_cookies(method: &str) -> bool {
    method.ends_with("Cookies") || method.ends_with("Cookie")
}

/// `v` (a command's params, an answer's result or an event's params for `method`) with its
/// secrets replaced by [`REDACTED`] (see the module doc). Depth is bounded by the JSON parser
/// that made `v` (serde_json: 128).
pub fn redact(method: &str, v: &mut Value) {
    if HEADER_COMMANDS.contains(&method)
        && let Some(h) = v.get_mut("headers")
    {
        redact_header_values(h);
    }
    if method == "Fetch.continueWithAuth"
        && let Some(a) = v.get_mut("authChallengeResponse")
    {
        for k in ["username", "password"] {
            if let Some(x) = a.get_mut(k) {
                *x = Value::String(REDACTED.to_owned());
            }
        }
    }
    let cookies = carries_cookies(method);
    walk(v, cookies);
}

/// Header values of an object (`{"X": "v"}`) or a list (`[{name, value}]`).
fn redact_header_values(h: &mut Value) {
    match h {
        Value::Object(m) => m
            .values_mut()
            .for_each(|x| *x = Value::String(REDACTED.to_owned())),
        Value::Array(a) => a.iter_mut().for_each(|e| {
            if let Some(x) = e.get_mut("value") {
                *x = Value::String(REDACTED.to_owned());
            }
        }),
        _ => {}
    }
}

/// Every secret-named key's value, every cookie's `value` (when `cookies`) and every
/// token-shaped string.
fn walk(v: &mut Value, cookies: bool) {
    match v {
        Value::String(s) => {
            if let Some(clean) = scrub(s) {
                *s = clean;
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| walk(x, cookies)),
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if secret_key(k) || (cookies && k == "value") {
                    if !x.is_null() {
                        *x = Value::String(REDACTED.to_owned());
                    }
                } else if (k == "headers" || k == "requestHeaders") && x.is_object() {
                    redact_named_headers(x);
                    walk(x, cookies);
                } else {
                    walk(x, cookies);
                }
            }
        }
        _ => {}
    }
}

/// In a header object, the values of the secret headers (`Cookie`, `Authorization`, …).
fn redact_named_headers(h: &mut Value) {
    if let Value::Object(m) = h {
        for (k, x) in m.iter_mut() {
            if secret_key(k) {
                *x = Value::String(REDACTED.to_owned());
            }
        }
    }
}

/// `s` with every token-shaped part replaced, if it had any: a JWT (three base64url parts, the
/// first starting `eyJ`), the value of a `signingKey=` (or `token=`, `apiKey=`) query
/// parameter, a `Bearer` credential.
pub fn scrub(s: &str) -> Option<String> {
    if !(s.contains("eyJ") || s.contains('=') || s.contains("Bearer ")) {
        return None;
    }
    let mut out = String::with_capacity(s.len());
    let mut changed = false;
    let mut rest = s;
    while !rest.is_empty() {
        if let Some((keep, n)) = secret_at(rest) {
            out.push_str(&rest[..keep]);
            out.push_str(REDACTED);
            rest = &rest[n..];
            changed = true;
            continue;
        }
        let c = rest.chars().next().unwrap_or(' ');
        out.push(c);
        rest = &rest[c.len_utf8()..];
        // A secret is only looked for at a word's start.
        if is_token_char(c) {
            let skip = rest.bytes().take_while(|b| is_token_byte(*b)).count();
            out.push_str(&rest[..skip]);
            rest = &rest[skip..];
        }
    }
    changed.then_some(out)
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

fn is_token_char(c: char) -> bool {
    c.is_ascii() && is_token_byte(c as u8)
}

/// The secret starting `s`, if one does: how much of it stays (a parameter's name) and its
/// whole length.
fn secret_at(s: &str) -> Option<(usize, usize)> {
    if s.starts_with("eyJ") {
        let b = s.as_bytes();
        let mut dots = 0;
        let mut n = 0;
        while n < b.len() && (is_token_byte(b[n]) || (b[n] == b'.' && dots < 2)) {
            dots += usize::from(b[n] == b'.');
            n += 1;
        }
        if dots == 2 && n > 20 {
            return Some((0, n));
        }
        return None;
    }
    for name in SECRET_PREFIXES {
        if s.len() >= name.len() && s[..name.len()].eq_ignore_ascii_case(name) {
            let v = s[name.len()..]
                .bytes()
                .take_while(|b| !matches!(b, b'&' | b'#' | b'"' | b'\'' | b' ' | b'\\'))
                .count();
            if v > 0 {
                // The name stays; the value goes.
                return Some((name.len(), name.len() + v));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_a_log_chunk_is_tagged_to_expire() {
        let chunk = session_log_chunk_key("proj_a", "sess_1", 1_765_100_000_000, 3);
        assert_eq!(record_tagging(&chunk), Some(RECORD_TAGGING));
        for recording in [
            "files/proj_a/sess_1/recordings/0.json",
            "files/proj_a/sess_1/recordings/0/seg-00001.ts",
            "files/proj_a/sess_1/recordings/0/recording.mp4",
        ] {
            assert_eq!(
                record_tagging(recording),
                Some(RECORD_TAGGING),
                "{recording}"
            );
        }
        for other in [
            "files/proj_a/sess_1/downloads/a.pdf",
            "files/proj_a/sess_1/logs/notes.txt",
            "files/proj_a/sess_1/logs/x/1765100000000-000003.jsonl",
            "files/proj_a/sess_1/recordings/",
            "files/proj_a/sess_1/recordings/0//x",
            "proj_a/ctx_1/profile.tar.gz",
            "logs/1765100000000-000003.jsonl",
        ] {
            assert_eq!(record_tagging(other), None, "{other}");
        }
    }

    #[test]
    fn every_secret_holds_a_hint() {
        let hinted = |s: &str| {
            let s = s.to_ascii_lowercase();
            SECRET_HINTS.iter().any(|h| s.contains(h))
        };
        for k in SECRET_KEYS.iter().chain(&SECRET_PREFIXES).chain(&["eyJ"]) {
            assert!(hinted(k), "{k} holds no hint");
        }
        // And so does what the hints are for: a text redact would change.
        let mut v = json!({"a": {"Proxy-Authorization": "x"}, "b": "see eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJzIn0.c2lnbmF0dXJlc2ln"});
        let before = v.to_string();
        redact("Runtime.evaluate", &mut v);
        assert_ne!(v.to_string(), before);
        assert!(hinted(&before));
    }

    #[test]
    fn an_entry_has_browserbases_shape() {
        let e = SessionLog {
            method: "Page.navigate".into(),
            page_id: 1,
            session_id: "S".into(),
            frame_id: Some("F".into()),
            loader_id: None,
            request: Some(LogRequest {
                params: raw_json(&json!({"url": "http://127.0.0.1/"})),
                raw_body: "{}".into(),
                timestamp: Some(1),
            }),
            response: Some(LogResponse {
                result: empty_object(),
                raw_body: "{}".into(),
                timestamp: Some(2),
            }),
            timestamp: Some(1),
        };
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(
            v,
            json!({"method": "Page.navigate", "pageId": 1, "sessionId": "S", "frameId": "F",
                "request": {"params": {"url": "http://127.0.0.1/"}, "rawBody": "{}", "timestamp": 1},
                "response": {"result": {}, "rawBody": "{}", "timestamp": 2}, "timestamp": 1})
        );
        assert_eq!(serde_json::from_value::<SessionLog>(v).unwrap(), e);
        let note = serde_json::to_value(SessionLog::note("proxy failed", 5)).unwrap();
        assert_eq!(note["method"], NOTE_METHOD);
        assert_eq!(note["response"]["result"]["message"], "proxy failed");
    }

    #[test]
    fn chunk_keys_sort_in_writing_order_and_are_recognised() {
        let a = session_log_chunk_key("proj_a", "sess_b", 1_700_000_000_000, 9);
        let b = session_log_chunk_key("proj_a", "sess_b", 1_700_000_000_000, 10);
        let c = session_log_chunk_key("proj_a", "sess_b", 1_700_000_000_001, 0);
        assert_eq!(a, "files/proj_a/sess_b/logs/1700000000000-000009.jsonl");
        assert!(a < b && b < c);
        let prefix = session_log_prefix("proj_a", "sess_b");
        assert!(is_chunk_name(a.strip_prefix(&prefix).unwrap()));
        for bad in [
            "x.jsonl",
            "1700000000000-000009.json",
            "../1700000000-000009.jsonl",
            "",
        ] {
            assert!(!is_chunk_name(bad), "{bad}");
        }
    }

    #[test]
    fn bodies_are_bounded_and_marked() {
        let (s, cut) = bounded("short");
        assert_eq!((s.as_str(), cut), ("short", false));
        let long = "é".repeat(MAX_RAW_BODY);
        let (s, cut) = bounded(&long);
        assert!(cut && s.len() <= MAX_RAW_BODY && s.ends_with(CUT_MARK));
    }

    #[test]
    fn extra_headers_cookies_and_credentials_are_redacted() {
        let mut p = json!({"headers": {"X-Api": "s3cret", "Authorization": "Basic abc"}});
        redact("Network.setExtraHTTPHeaders", &mut p);
        assert_eq!(
            p,
            json!({"headers": {"X-Api": REDACTED, "Authorization": REDACTED}})
        );

        let mut p = json!({"cookies": [{"name": "sid", "value": "s3cret", "domain": "a"}]});
        redact("Network.setCookies", &mut p);
        assert_eq!(p["cookies"][0]["value"], REDACTED);
        assert_eq!(p["cookies"][0]["name"], "sid");
        let mut r = json!({"cookies": [{"name": "sid", "value": "s3cret"}]});
        redact("Storage.getCookies", &mut r);
        assert_eq!(r["cookies"][0]["value"], REDACTED);

        let mut p = json!({"requestId": "1", "headers": [{"name": "Cookie", "value": "a=b"}]});
        redact("Fetch.continueRequest", &mut p);
        assert_eq!(p["headers"][0]["value"], REDACTED);

        let mut p = json!({"authChallengeResponse": {"response": "ProvideCredentials",
            "username": "u", "password": "p"}});
        redact("Fetch.continueWithAuth", &mut p);
        assert_eq!(p["authChallengeResponse"]["password"], REDACTED);
        assert_eq!(p["authChallengeResponse"]["username"], REDACTED);

        // An event's request headers keep their names, lose their credentials.
        let mut e = json!({"request": {"headers": {"Cookie": "a=b", "Accept": "*/*"}}});
        redact("Network.requestWillBeSent", &mut e);
        assert_eq!(e["request"]["headers"]["Cookie"], REDACTED);
        assert_eq!(e["request"]["headers"]["Accept"], "*/*");

        // A value named `value` outside a cookie command stays (Runtime results have it).
        let mut r = json!({"result": {"type": "number", "value": 2}});
        redact("Runtime.evaluate", &mut r);
        assert_eq!(r["result"]["value"], 2);

        for m in [
            "Network.setExtraHTTPHeaders",
            "Network.getAllCookies",
            "Fetch.continueWithAuth",
        ] {
            assert!(is_sensitive(m), "{m}");
        }
        assert!(!is_sensitive("Page.navigate"));
    }

    #[test]
    fn token_shaped_strings_are_scrubbed_anywhere() {
        let jwt = "eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJzZXNzXzEifQ.c2lnbmF0dXJlLWJ5dGVz";
        let mut p = json!({"url": format!("ws://127.0.0.1:1/?signingKey={jwt}&x=1"),
            "expression": format!("fetch('/', {{headers: {{a: 'Bearer {jwt}'}}}})"),
            "deep": [[{"t": jwt}]]});
        redact("Runtime.evaluate", &mut p);
        let text = p.to_string();
        assert!(!text.contains("eyJzdWIi"), "{text}");
        assert_eq!(
            p["url"],
            format!("ws://127.0.0.1:1/?signingKey={REDACTED}&x=1")
        );
        assert_eq!(p["deep"][0][0]["t"], REDACTED);
        assert_eq!(scrub("http://127.0.0.1/?a=b"), None);
        assert_eq!(scrub("plain text"), None);
        // Not a JWT: two parts, or a word that only contains eyJ.
        assert_eq!(scrub("eyJhbGciOi.abc"), None);
        assert_eq!(scrub("heyJude.a.b"), None);
    }
}
