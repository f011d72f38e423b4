//! Session events: what the sessions-stream processor publishes, one per lifecycle change, to
//! the session topic (SNS) and to EventBridge, and the pure rule that decides which change a
//! stream record (its old and new image) is.
//!
//! Three events, one EventBridge detail type each, source [`SOURCE`]:
//!
//! | kind      | detail type       | when (old image → new image)                                  |
//! |-----------|-------------------|---------------------------------------------------------------|
//! | `created` | `Session Created` | no old image (the item's INSERT)                              |
//! | `ready`   | `Session Ready`   | a pending status (or none) → `READY` / `ACTIVE`               |
//! | `ended`   | `Session Ended`   | first image that is terminal *and* has `endedAt`              |
//!
//! `ended` waits for `endedAt`: a controller writes the terminal status first and
//! `proxyBytes` with `endedAt` after it (a separate write), so the record that adds `endedAt`
//! is the first one that knows the bytes; an unserved session gets both in one write.
//!
//! The event id is `<sessionId>:<kind>`, not the stream record's `eventID`: each kind happens
//! at most once per session, so the id names the fact, and a subscriber deduplicates on it
//! whatever carried it twice — the stream redelivering a record (a retried batch), the event
//! source mapping replayed from the trim horizon, or a second record showing the same change.
//! A record's `eventID` only covers the first of these.
//!
//! No token ever reaches an event: an event is built field by field from the image, never
//! from `signingKey`, and of `connectUrl` only the host (`host[:port]`) is kept.

use serde::{Deserialize, Serialize};

use crate::session::InternalStatus;
use crate::session_doc::SessionDoc;

/// The EventBridge `source` of every session event.
pub const SOURCE: &str = "wallcrawler.sessions";

/// Which lifecycle change an event reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    /// The session item was written (`CREATING`).
    Created,
    /// The browser is reachable (`READY`).
    Ready,
    /// The session is over (terminal status and `endedAt`).
    Ended,
}

impl EventKind {
    /// The wire name (`created`, `ready`, `ended`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Ready => "ready",
            Self::Ended => "ended",
        }
    }

    /// The EventBridge detail type.
    pub fn detail_type(self) -> &'static str {
        match self {
            Self::Created => "Session Created",
            Self::Ready => "Session Ready",
            Self::Ended => "Session Ended",
        }
    }
}

/// One session event: the SNS message body and the EventBridge `detail`, as JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionEvent {
    /// `<sessionId>:<kind>`: the same for every delivery of the same change.
    pub event_id: String,
    /// `created`, `ready` or `ended`.
    pub kind: EventKind,
    /// `sessionId`.
    pub session_id: String,
    /// `projectId`.
    pub project_id: String,
    /// `region`.
    pub region: String,
    /// The SDK-visible status in the image that made the event.
    pub status: String,
    /// ISO 8601: `createdAt`, `readyAt` or `endedAt` (when the image has it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    /// `ready`: where clients connect, `host[:port]` only (never a path, query or token).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_host: Option<String>,
    /// `ended`: why a FAILED (or unserved) session ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_reason: Option<String>,
    /// `ended`: milliseconds from `createdAt` to `endedAt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// `ended`: bytes relayed, both directions together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_bytes: Option<u64>,
}

impl SessionEvent {
    /// The EventBridge detail type of this event.
    pub fn detail_type(&self) -> &'static str {
        self.kind.detail_type()
    }
}

/// The events one stream record makes, in lifecycle order: its old image (`None` for an
/// INSERT) and new image (`None` for a REMOVE, which makes none).
pub fn events_of(old: Option<&SessionDoc>, new: Option<&SessionDoc>) -> Vec<SessionEvent> {
    let Some(new) = new else { return Vec::new() };
    let mut out = Vec::new();
    if old.is_none() {
        out.push(event(new, EventKind::Created));
    }
    if !old.is_some_and(has_been_ready) && has_been_ready(new) {
        out.push(event(new, EventKind::Ready));
    }
    if !old.is_some_and(is_ended) && is_ended(new) {
        out.push(event(new, EventKind::Ended));
    }
    out
}

/// Served: `READY` or `ACTIVE` now, or past pending with a `readyAt` (it was ready, then
/// went on to end). `TERMINATING` without `readyAt` is not: a release of a pending session
/// passes through it without ever being ready.
fn has_been_ready(d: &SessionDoc) -> bool {
    match d.internal() {
        Some(InternalStatus::Ready | InternalStatus::Active) => true,
        Some(s) => !s.may_become_ready() && d.ready_at.is_some(),
        None => false,
    }
}

fn is_ended(d: &SessionDoc) -> bool {
    d.internal().is_some_and(InternalStatus::is_terminal) && d.ended_at.is_some()
}

fn event(d: &SessionDoc, kind: EventKind) -> SessionEvent {
    let mut e = SessionEvent::empty(d, kind);
    let at = match kind {
        EventKind::Created => Some(d.created_at.clone()),
        EventKind::Ready => {
            e.connect_host = connect_host(d);
            d.ready_at.clone()
        }
        EventKind::Ended => {
            e.termination_reason = d.termination_reason.clone();
            e.proxy_bytes = d.proxy_bytes;
            e.duration_ms = duration_ms(&d.created_at, d.ended_at.as_deref());
            d.ended_at.clone()
        }
    };
    e.at = at.filter(|s| !s.is_empty());
    e
}

impl SessionEvent {
    fn empty(d: &SessionDoc, kind: EventKind) -> Self {
        Self {
            event_id: format!("{}:{}", d.session_id, kind.as_str()),
            kind,
            session_id: d.session_id.clone(),
            project_id: d.project_id.clone(),
            region: d.region.clone(),
            status: d.status.clone(),
            at: None,
            connect_host: None,
            termination_reason: None,
            duration_ms: None,
            proxy_bytes: None,
        }
    }
}

fn duration_ms(created: &str, ended: Option<&str>) -> Option<u64> {
    let (from, to) = (
        crate::time::parse_iso8601(created)?,
        crate::time::parse_iso8601(ended?)?,
    );
    to.checked_sub(from)
}

/// The host clients connect to: the authority of `connectBase` (the connect gateway's; an
/// older item's `connectUrl`), else `publicIP:proxyPort` (a task's own address). Scheme, user
/// info, path, query (where an older item's token is) and fragment are dropped.
pub fn connect_host(d: &SessionDoc) -> Option<String> {
    if let Some(url) = d.connect_base.as_deref().or(d.connect_url.as_deref()) {
        return authority(url);
    }
    let ip = d.public_ip.as_deref()?;
    let port = d.proxy_port?;
    Some(if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    })
}

/// `host[:port]` of an absolute URL; `None` when there is none.
fn authority(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let auth = &rest[..end];
    let host = auth.rsplit_once('@').map_or(auth, |(_, h)| h);
    (!host.is_empty()).then(|| host.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "eyJhbGciOiJFZERTQSJ9.eyJzZXNzaW9uSWQiOiJzZXNzXzEifQ.c2ln";

    fn doc(status: InternalStatus) -> SessionDoc {
        let mut d = SessionDoc {
            session_id: "sess_1".into(),
            project_id: "proj_1".into(),
            region: "us-east-1".into(),
            created_at: "2026-11-26T10:00:00.000Z".into(),
            expires_at: 1_900_000_000,
            signing_key: Some(TOKEN.into()),
            connect_url: Some(format!("wss://connect.example:443/?signingKey={TOKEN}")),
            ..SessionDoc::default()
        };
        d.set_status(status);
        d
    }

    fn ready() -> SessionDoc {
        let mut d = doc(InternalStatus::Ready);
        d.ready_at = Some("2026-11-26T10:00:05.000Z".into());
        d.public_ip = Some("203.0.113.7".into());
        d.proxy_port = Some(9223);
        d
    }

    fn ended(status: InternalStatus) -> SessionDoc {
        let mut d = ready();
        d.set_status(status);
        d.proxy_bytes = Some(4096);
        d.ended_at = Some("2026-11-26T10:01:40.500Z".into());
        d
    }

    fn kinds(events: &[SessionEvent]) -> Vec<EventKind> {
        events.iter().map(|e| e.kind).collect()
    }

    #[test]
    fn an_insert_is_created() {
        let e = events_of(None, Some(&doc(InternalStatus::Creating)));
        assert_eq!(kinds(&e), [EventKind::Created]);
        let e = &e[0];
        assert_eq!(e.event_id, "sess_1:created");
        assert_eq!(e.detail_type(), "Session Created");
        assert_eq!(
            (
                e.session_id.as_str(),
                e.project_id.as_str(),
                e.region.as_str()
            ),
            ("sess_1", "proj_1", "us-east-1")
        );
        assert_eq!(e.status, "PENDING");
        assert_eq!(e.at.as_deref(), Some("2026-11-26T10:00:00.000Z"));
        assert_eq!(e.connect_host, None, "only ready names the host");
    }

    #[test]
    fn becoming_ready_is_ready_with_the_host_only() {
        for from in [
            InternalStatus::Creating,
            InternalStatus::Provisioning,
            InternalStatus::Starting,
        ] {
            let e = events_of(Some(&doc(from)), Some(&ready()));
            assert_eq!(kinds(&e), [EventKind::Ready], "from {from:?}");
            assert_eq!(e[0].event_id, "sess_1:ready");
            assert_eq!(e[0].detail_type(), "Session Ready");
            assert_eq!(e[0].status, "RUNNING");
            assert_eq!(e[0].connect_host.as_deref(), Some("connect.example:443"));
            assert_eq!(e[0].at.as_deref(), Some("2026-11-26T10:00:05.000Z"));
        }
        // A client connected before the record was read: still the one ready.
        let mut active = ready();
        active.set_status(InternalStatus::Active);
        let e = events_of(Some(&doc(InternalStatus::Starting)), Some(&active));
        assert_eq!(kinds(&e), [EventKind::Ready]);
    }

    #[test]
    fn a_gateway_session_s_host_is_its_connect_base() {
        let mut d = ready();
        (d.connect_url, d.signing_key) = (None, None);
        d.connect_base = Some("wss://gw.example:8443".into());
        assert_eq!(connect_host(&d).as_deref(), Some("gw.example:8443"));
    }

    #[test]
    fn a_direct_session_s_host_is_its_address_and_port() {
        let mut d = ready();
        d.connect_url = None;
        assert_eq!(connect_host(&d).as_deref(), Some("203.0.113.7:9223"));
        d.public_ip = Some("2001:db8::7".into());
        assert_eq!(connect_host(&d).as_deref(), Some("[2001:db8::7]:9223"));
        d.public_ip = None;
        assert_eq!(connect_host(&d), None);
    }

    #[test]
    fn the_host_drops_user_info_path_query_and_fragment() {
        for (url, host) in [
            ("wss://gw.example/?signingKey=t", Some("gw.example")),
            ("wss://gw.example?signingKey=t", Some("gw.example")),
            ("ws://u:p@gw.example:8443/x#f", Some("gw.example:8443")),
            ("ws://[::1]:9/?signingKey=t", Some("[::1]:9")),
            ("no scheme?signingKey=t", None),
            ("ws://?signingKey=t", None),
        ] {
            assert_eq!(authority(url).as_deref(), host, "{url}");
        }
    }

    #[test]
    fn ending_is_ended_once_ended_at_is_written() {
        for (status, sdk) in [
            (InternalStatus::Stopped, "COMPLETED"),
            (InternalStatus::Failed, "ERROR"),
            (InternalStatus::TimedOut, "TIMED_OUT"),
        ] {
            // The controller's first write: the terminal status, no endedAt yet.
            let mut terminal = ready();
            terminal.set_status(status);
            terminal.termination_reason = Some("chrome exited".into());
            assert!(events_of(Some(&ready()), Some(&terminal)).is_empty());
            // Its second: proxyBytes and endedAt.
            let mut end = ended(status);
            end.termination_reason = Some("chrome exited".into());
            let e = events_of(Some(&terminal), Some(&end));
            assert_eq!(kinds(&e), [EventKind::Ended], "{status:?}");
            let e = &e[0];
            assert_eq!(e.event_id, "sess_1:ended");
            assert_eq!(e.detail_type(), "Session Ended");
            assert_eq!(e.status, sdk);
            assert_eq!(e.proxy_bytes, Some(4096));
            assert_eq!(e.duration_ms, Some(100_500));
            assert_eq!(e.termination_reason.as_deref(), Some("chrome exited"));
            assert_eq!(e.at.as_deref(), Some("2026-11-26T10:01:40.500Z"));
            assert_eq!(e.connect_host, None);
        }
    }

    #[test]
    fn an_unserved_session_ends_in_one_write_without_ready() {
        let mut end = doc(InternalStatus::Failed);
        end.termination_reason = Some("no browser in time".into());
        end.ended_at = Some("2026-11-26T10:02:00.000Z".into());
        let e = events_of(Some(&doc(InternalStatus::Creating)), Some(&end));
        assert_eq!(kinds(&e), [EventKind::Ended]);
        assert_eq!(e[0].proxy_bytes, None);
    }

    #[test]
    fn a_record_that_skipped_ready_makes_both_in_order() {
        // READY and the end were coalesced (a stream shows each write, but a test or another
        // writer may not): ready, then ended.
        let e = events_of(
            Some(&doc(InternalStatus::Starting)),
            Some(&ended(InternalStatus::Stopped)),
        );
        assert_eq!(kinds(&e), [EventKind::Ready, EventKind::Ended]);
    }

    #[test]
    fn other_changes_make_nothing() {
        let mut active = ready();
        active.set_status(InternalStatus::Active);
        let mut terminating = ready();
        terminating.set_status(InternalStatus::Terminating);
        let mut later = ended(InternalStatus::Stopped);
        later.usage_counted = Some(true);
        let mut pending_release = doc(InternalStatus::Creating);
        pending_release.set_status(InternalStatus::Terminating);
        for (old, new) in [
            (
                doc(InternalStatus::Creating),
                doc(InternalStatus::Provisioning),
            ),
            (
                doc(InternalStatus::Provisioning),
                doc(InternalStatus::Starting),
            ),
            (ready(), active.clone()),
            (active.clone(), ready()),
            (active, terminating.clone()),
            (doc(InternalStatus::Creating), pending_release),
            (ended(InternalStatus::Stopped), later),
            (ready(), ready()),
        ] {
            assert!(
                events_of(Some(&old), Some(&new)).is_empty(),
                "{} -> {}",
                old.internal_status,
                new.internal_status
            );
        }
        assert!(events_of(Some(&ready()), None).is_empty(), "REMOVE");
        assert!(events_of(None, None).is_empty());
    }

    #[test]
    fn the_same_record_twice_makes_the_same_events() {
        let (old, new) = (doc(InternalStatus::Starting), ready());
        let first = events_of(Some(&old), Some(&new));
        let again = events_of(Some(&old), Some(&new));
        assert_eq!(first, again);
        assert_eq!(first[0].event_id, again[0].event_id);
    }

    #[test]
    fn no_token_survives_into_any_event() {
        let mut direct = ready();
        direct.connect_url = None;
        let mut events = events_of(None, Some(&doc(InternalStatus::Creating)));
        events.extend(events_of(
            Some(&doc(InternalStatus::Starting)),
            Some(&ready()),
        ));
        events.extend(events_of(
            Some(&doc(InternalStatus::Starting)),
            Some(&direct),
        ));
        events.extend(events_of(
            Some(&ready()),
            Some(&ended(InternalStatus::Stopped)),
        ));
        assert_eq!(events.len(), 4);
        for e in events {
            let json = serde_json::to_string(&e).unwrap();
            for secret in [TOKEN, "signingKey", "?", "eyJ"] {
                assert!(!json.contains(secret), "{secret} in {json}");
            }
        }
    }

    #[test]
    fn the_wire_shape_is_camel_case_without_absent_fields() {
        let e = &events_of(Some(&ready()), Some(&ended(InternalStatus::Stopped)))[0];
        let v = serde_json::to_value(e).unwrap();
        assert_eq!(v["eventId"], "sess_1:ended");
        assert_eq!(v["kind"], "ended");
        assert_eq!(v["sessionId"], "sess_1");
        assert_eq!(v["proxyBytes"], 4096);
        assert_eq!(v["durationMs"], 100_500);
        assert!(v.get("connectHost").is_none());
        let back: SessionEvent = serde_json::from_value(v).unwrap();
        assert_eq!(&back, e);
    }
}
