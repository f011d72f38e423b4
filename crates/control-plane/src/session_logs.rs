//! A session's log: `GET /v1/sessions/{id}/logs` (every entry, Browserbase's `SessionLog[]`)
//! and `GET /v1/sessions/{id}/logs/stream` (the entries as Server-Sent Events while the
//! session runs, resumable with `Last-Event-ID`).
//!
//! The session's controller appends the entries as JSON lines to chunk objects under
//! `files/<projectId>/<sessionId>/logs/` during the session
//! ([`wallcrawler_contract::session_log`]); both routes read those chunks in key order, so
//! they answer while the session runs and after it ended. An entry's id in the stream is its
//! place in that order (0 first): a client that reconnects with `Last-Event-ID: n` gets the
//! entries after `n`. The stream ends (`event: end`) once the session has ended and every
//! entry has been sent.
//!
//! Chunks are read with bounds (their count, each one's size, the answer's size); a line that
//! is not an entry (a chunk written in part, a foreign file) is passed over and counted in the
//! operator's log.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::http::HeaderMap;
use axum::response::IntoResponse;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{self, Stream};
use tracing::warn;
use wallcrawler_contract::session_log::{SessionLog, is_chunk_name, session_log_prefix};

use crate::app::App;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::handlers::{ApiResult, PathId, own_session};
use crate::stores::Bounded;

/// The most chunks of one session read.
pub const MAX_CHUNKS: usize = 10_000;
/// The largest chunk read (a controller writes chunks of at most 1 MiB).
pub const MAX_CHUNK_BYTES: u64 = 4 << 20;
/// The most bytes of entries one `GET …/logs` answers (within a Lambda answer's 6 MB); past
/// it the answer holds the first entries and says so in [`TRUNCATED_HEADER`].
pub const MAX_ANSWER_BYTES: usize = 5 << 20;
/// Said (`true`) when the answer holds only the first entries.
pub const TRUNCATED_HEADER: &str = "x-wallcrawler-logs-truncated";
/// How often a stream looks for new entries.
pub const STREAM_POLL: Duration = Duration::from_secs(1);

/// `GET /v1/sessions/{id}/logs`: the session's entries in order (`[]` when none). Another
/// project's session is a 404.
pub async fn session_logs(caller: Caller, PathId(id): PathId) -> ApiResult {
    let (app, p) = caller.into_parts();
    let s = own_session(&app, &p, &id).await?;
    let prefix = session_log_prefix(&s.project_id, &s.session_id);
    let mut out = Vec::new();
    let mut size = 0;
    let mut truncated = false;
    'chunks: for name in chunk_names(&app, &prefix).await? {
        for e in read_chunk(&app, &prefix, &name).await? {
            let json = serde_json::to_value(&e).unwrap_or_default();
            size += json.to_string().len() + 1;
            if size > MAX_ANSWER_BYTES {
                truncated = true;
                break 'chunks;
            }
            out.push(json);
        }
    }
    let mut res = axum::Json(out).into_response();
    if truncated {
        res.headers_mut().insert(
            axum::http::HeaderName::from_static(TRUNCATED_HEADER),
            axum::http::HeaderValue::from_static("true"),
        );
    }
    Ok(res)
}

/// `GET /v1/sessions/{id}/logs/stream`: Server-Sent Events, one per entry (`id` its place,
/// `data` the entry's JSON), from after `Last-Event-ID` when given (a number, else 400);
/// `event: end` once the session has ended and everything was sent.
pub async fn session_logs_stream(
    caller: Caller,
    PathId(id): PathId,
    headers: HeaderMap,
) -> ApiResult {
    let (app, p) = caller.into_parts();
    let s = own_session(&app, &p, &id).await?;
    let next = match headers.get("last-event-id") {
        None => 0,
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
            .and_then(|n| n.checked_add(1))
            .ok_or_else(|| {
                ApiError::bad_request("Last-Event-ID must be the number of an entry sent before")
            })?,
    };
    let tail = Tail {
        app,
        session_id: s.session_id.clone(),
        prefix: session_log_prefix(&s.project_id, &s.session_id),
        done: Vec::new(),
        done_entries: 0,
        next,
        pending: VecDeque::new(),
        polled: false,
        finished: false,
        end_due: false,
    };
    Ok(Sse::new(events(tail))
        .keep_alive(KeepAlive::default())
        .into_response())
}

/// The chunk names under `prefix`, in order.
async fn chunk_names(app: &App, prefix: &str) -> Result<Vec<String>, ApiError> {
    let mut names = app
        .objects
        .names_under(prefix, MAX_CHUNKS)
        .await
        .map_err(|e| ApiError::internal("the session's logs could not be listed").caused_by(e))?;
    names.retain(|n| is_chunk_name(n));
    names.sort();
    Ok(names)
}

/// The entries of chunk `name` (a missing or too large chunk has none, logged).
async fn read_chunk(app: &App, prefix: &str, name: &str) -> Result<Vec<SessionLog>, ApiError> {
    let key = format!("{prefix}{name}");
    let body = match app.objects.get_at_most(&key, MAX_CHUNK_BYTES).await {
        Ok(Some(Bounded::Whole(b))) => b,
        Ok(None) => return Ok(Vec::new()),
        Ok(Some(Bounded::TooLarge)) => {
            warn!(chunk = %name, "a session log chunk is too large; passed over");
            return Ok(Vec::new());
        }
        Err(e) => {
            return Err(ApiError::internal("the session's logs could not be read").caused_by(e));
        }
    };
    Ok(parse_lines(&body, name))
}

/// The entries of a chunk's JSON lines; a line that is not an entry is passed over (counted).
pub fn parse_lines(body: &[u8], name: &str) -> Vec<SessionLog> {
    let mut bad = 0usize;
    let out = body
        .split(|b| *b == b'\n')
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
        .filter_map(|l| {
            serde_json::from_slice::<SessionLog>(l)
                .map_err(|_| bad += 1)
                .ok()
        })
        .collect();
    if bad > 0 {
        warn!(chunk = %name, lines = bad, "session log lines that are not entries passed over");
    }
    out
}

/// A stream's place in the session's log.
struct Tail {
    app: App,
    session_id: String,
    prefix: String,
    /// Chunks read whole and final (a later chunk exists), in order.
    done: Vec<String>,
    /// How many entries they hold.
    done_entries: u64,
    /// The id of the next entry to send.
    next: u64,
    pending: VecDeque<(u64, SessionLog)>,
    /// A read was made (the next one waits [`STREAM_POLL`]).
    polled: bool,
    /// The session ended and its last entries were read: nothing more is read.
    finished: bool,
    /// `event: end` is still to be sent.
    end_due: bool,
}

impl Tail {
    /// Reads what is new; true when the session has ended (nothing more will come once this
    /// read is sent).
    async fn poll(&mut self) -> Result<bool, ApiError> {
        // The session's state first: entries stored before it ended are all read below.
        let ended = match self.app.sessions.get(&self.session_id).await? {
            Some(s) => s.ended_at.is_some(),
            None => true,
        };
        let names = chunk_names(&self.app, &self.prefix).await?;
        let fresh: Vec<&String> = names
            .iter()
            .filter(|n| self.done.last().is_none_or(|d| *n > d))
            .collect();
        let last = fresh.len().saturating_sub(1);
        for (i, name) in fresh.iter().enumerate() {
            let entries = read_chunk(&self.app, &self.prefix, name).await?;
            let first = self.done_entries;
            for (j, e) in entries.iter().enumerate() {
                let id = first + j as u64;
                if id >= self.next {
                    self.pending.push_back((id, e.clone()));
                    self.next = id + 1;
                }
            }
            if i < last {
                self.done.push((*name).clone());
                self.done_entries += entries.len() as u64;
            }
        }
        Ok(ended)
    }
}

/// The events of `tail`: its entries as they come, then `end`.
fn events(tail: Tail) -> impl Stream<Item = Result<Event, Infallible>> {
    stream::unfold(tail, |mut t| async move {
        loop {
            if let Some((id, e)) = t.pending.pop_front() {
                let data = serde_json::to_string(&e).unwrap_or_default();
                return Some((Ok(Event::default().id(id.to_string()).data(data)), t));
            }
            if t.finished {
                return t.end_due.then(|| {
                    t.end_due = false;
                    (Ok(Event::default().event("end").data("{}")), t)
                });
            }
            if t.polled {
                tokio::time::sleep(STREAM_POLL).await;
            }
            t.polled = true;
            match t.poll().await {
                Ok(true) => {
                    t.finished = true;
                    t.end_due = true;
                }
                Ok(false) => {}
                Err(e) => {
                    e.log_cause();
                    t.finished = true;
                    let data =
                        serde_json::json!({"message": "the session's logs could not be read"});
                    return Some((
                        Ok(Event::default().event("error").data(data.to_string())),
                        t,
                    ));
                }
            }
        }
    })
}
