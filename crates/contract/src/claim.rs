//! Claims: how a session reaches a warm pool controller.
//!
//! The control plane sends one claim per session to a queue (Amazon SQS on AWS, the local
//! crate's `DirQueue` on the local platform); idle pool controllers wait on the queue and
//! exactly one takes each claim. A claim carries what the controller cannot learn from the session item before it
//! serves it (which session, whose, and which context); keepAlive and expiry still come from the
//! session item.
//!
//! A claim is untrusted input to the controller: [`Claim::parse`] bounds its size and checks
//! every field (ids of the usual alphabet, the archive key exactly the context's own key), so a
//! claim cannot point a controller at another project's archive or at a path.

use serde::{Deserialize, Serialize};

use crate::session::InternalStatus;
use crate::storage::profile_key;

/// The largest claim accepted, in bytes (a real one is ~200 B; with the most proxy routes of
/// the longest servers, credentials and patterns, and the most allowed domains, under 48 KiB).
pub const MAX_CLAIM_BYTES: usize = 64 << 10;

/// The `terminationReason` of a session no browser took before its claim's deadline.
pub const NO_BROWSER_IN_TIME: &str = "no browser was available in time";

/// The status such a session ends with. TIMED_OUT rather than FAILED/ERROR: no browser failed;
/// what ran out is the time a client waits for one, and Browserbase's TIMED_OUT is a session
/// that is over without anything having gone wrong on the client's side.
pub const UNSERVED_STATUS: InternalStatus = InternalStatus::TimedOut;

/// How long a claim waits for a browser (the session item's `claimDeadline`). Past its
/// deadline no client is waiting any more (Stagehand and the SDK never poll for long), so a
/// pool controller that takes the claim ends the session instead of serving it to nobody.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimWait {
    /// `CLAIM_WAIT_SECONDS`: the deadline is this long after the create, and after each of the
    /// client's polls (`GET /v1/sessions/{id}`) while the session is not READY.
    pub wait: u64,
    /// `CLAIM_WAIT_MAX_SECONDS`: however often the client polls, the deadline stays within
    /// this long of the create.
    pub max: u64,
}

impl Default for ClaimWait {
    fn default() -> Self {
        Self { wait: 60, max: 600 }
    }
}

impl ClaimWait {
    /// The deadline of a session created at `created` (Unix seconds).
    pub fn at_create(self, created: u64) -> u64 {
        created.saturating_add(self.wait.min(self.max))
    }

    /// The deadline a poll at `now` moves `current` to, capped at `created` + `max`; `None`
    /// when that is no later than `current`.
    pub fn on_poll(self, created: u64, current: u64, now: u64) -> Option<u64> {
        let to = now
            .saturating_add(self.wait)
            .min(created.saturating_add(self.max));
        (to > current).then_some(to)
    }
}

/// Whether a claim's deadline has passed at `now` (Unix seconds); `None` (an item older than
/// deadlines) never has.
pub fn lapsed(deadline: Option<u64>, now: u64) -> bool {
    deadline.is_some_and(|d| d < now)
}

/// The context a claimed session uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimContext {
    /// The context's id (`ctx_…`).
    pub id: String,
    /// The archive key, `<projectId>/<contextId>/profile.tar.gz`.
    pub key: String,
    /// `true` when the controller uploads the profile archive again at the session's end.
    pub persist: bool,
}

/// One session for one pool controller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Claim {
    /// The session to serve (`sess_…`).
    pub session_id: String,
    /// The project that owns the session; the claim's archive key must be under it.
    pub project_id: String,
    /// The context whose profile the session hydrates; absent for a fresh, empty profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<ClaimContext>,
    /// The extension archive to load into Chrome before READY
    /// (`extensions/<projectId>/<sha256>.zip` in the contexts bucket); absent for none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extension_key: Option<String>,
    /// The session's egress (proxy routes with their credentials, allowed domains); absent for
    /// none. Only here and in a cold child's private environment: never in the session item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<crate::egress::Egress>,
    /// The browser the session asked for (viewport, locales, certificates, ad blocking);
    /// absent for the defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub browser: Option<crate::browser::BrowserSettings>,
}

/// Why a claim was refused (a poison message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClaimError {
    /// Over [`MAX_CLAIM_BYTES`].
    #[error("the claim is larger than {MAX_CLAIM_BYTES} bytes")]
    TooLarge,
    /// Not JSON of the [`Claim`] shape; the parser's message (a position, never the input).
    #[error("the claim is not valid JSON of the claim shape: {0}")]
    Shape(String),
    /// The named id is not of the platform's id alphabet.
    #[error("the claim's {0} is not a valid id")]
    BadId(&'static str),
    /// The context's key is not `<projectId>/<contextId>/profile.tar.gz` of this claim.
    #[error("the claim's context key is not the context's own archive key")]
    BadKey,
    /// The extension's key is not `extensions/<projectId>/<sha256>.zip` of this claim's project.
    #[error("the claim's extension key is not one of its project's extension archives")]
    BadExtensionKey,
    /// The browser settings break a rule; which.
    #[error("the claim's browser settings are refused: {0}")]
    BadBrowser(String),
    /// The egress settings break a rule; which part (never a credential).
    #[error("the claim's egress is refused: {0}")]
    BadEgress(String),
}

/// Ids as the platform makes them: 1–128 of `[A-Za-z0-9_-]`.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl Claim {
    /// The claim of `session_id` of `project_id` on a fresh, empty profile, with no extension,
    /// egress or browser settings.
    pub fn new(session_id: &str, project_id: &str) -> Self {
        Self {
            session_id: session_id.to_owned(),
            project_id: project_id.to_owned(),
            context: None,
            extension_key: None,
            egress: None,
            browser: None,
        }
    }

    /// Parses and checks a claim from the queue.
    pub fn parse(body: &[u8]) -> Result<Claim, ClaimError> {
        if body.len() > MAX_CLAIM_BYTES {
            return Err(ClaimError::TooLarge);
        }
        let c: Claim = serde_json::from_slice(body).map_err(|e| {
            // serde_json's message names a line and column, never the input itself.
            ClaimError::Shape(e.to_string())
        })?;
        if !valid_id(&c.session_id) {
            return Err(ClaimError::BadId("sessionId"));
        }
        if !valid_id(&c.project_id) {
            return Err(ClaimError::BadId("projectId"));
        }
        if let Some(ctx) = &c.context {
            if !valid_id(&ctx.id) {
                return Err(ClaimError::BadId("context id"));
            }
            if ctx.key != profile_key(&c.project_id, &ctx.id) {
                return Err(ClaimError::BadKey);
            }
        }
        if let Some(key) = &c.extension_key
            && !crate::storage::is_extension_key(&c.project_id, key)
        {
            return Err(ClaimError::BadExtensionKey);
        }
        if let Some(e) = &c.egress {
            e.check().map_err(ClaimError::BadEgress)?;
        }
        if let Some(b) = &c.browser {
            b.check().map_err(ClaimError::BadBrowser)?;
        }
        Ok(c)
    }

    /// The claim as the queue carries it (JSON, camelCase fields).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("claims serialize")
    }
}

/// The member of a claim file in the local `DirQueue` holding the session's live view (the local
/// platform's pool); [`Claim::parse`] ignores it.
pub const LIVE_VIEW_MEMBER: &str = "liveView";

/// The live view in a claim file's [`LIVE_VIEW_MEMBER`], if it has a valid one (the claim
/// parses the same with or without the member).
pub fn live_view_of(body: &[u8]) -> Option<crate::task_api::LiveViewGrant> {
    let mut v: serde_json::Value = serde_json::from_slice(body).ok()?;
    serde_json::from_value(v.get_mut(LIVE_VIEW_MEMBER)?.take()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(id: &str) -> Claim {
        Claim::new(id, "proj_1")
    }

    #[test]
    fn the_deadline_moves_with_polls_up_to_its_cap() {
        let w = ClaimWait { wait: 60, max: 600 };
        assert_eq!(w.at_create(1_000), 1_060);
        // A poll 30 s in moves it to 30 s + 60 s after the create.
        assert_eq!(w.on_poll(1_000, 1_060, 1_030), Some(1_090));
        // Never backwards, never past createdAt + max.
        assert_eq!(w.on_poll(1_000, 1_090, 1_010), None);
        assert_eq!(w.on_poll(1_000, 1_590, 1_560), Some(1_600));
        assert_eq!(w.on_poll(1_000, 1_600, 1_590), None);
        assert_eq!(w.on_poll(1_000, 1_600, 9_999), None);
        // A max below the wait caps the first deadline too.
        assert_eq!(ClaimWait { wait: 60, max: 10 }.at_create(1_000), 1_010);
        assert_eq!(w.at_create(u64::MAX), u64::MAX, "saturates");
        assert!(!lapsed(None, u64::MAX), "no deadline: an older item");
        assert!(!lapsed(Some(1_060), 1_060));
        assert!(lapsed(Some(1_060), 1_061));
    }

    #[test]
    fn claims_round_trip_and_hostile_ones_are_refused() {
        let c = Claim {
            context: Some(ClaimContext {
                id: "ctx_1".into(),
                key: "proj_1/ctx_1/profile.tar.gz".into(),
                persist: true,
            }),
            ..claim("sess_1")
        };
        assert_eq!(Claim::parse(c.to_json().as_bytes()).unwrap(), c);
        let other_project = r#"{"sessionId":"s","projectId":"proj_1","context":{"id":"ctx_1","key":"proj_2/ctx_1/profile.tar.gz","persist":true}}"#;
        assert_eq!(
            Claim::parse(other_project.as_bytes()),
            Err(ClaimError::BadKey)
        );
        let ext = Claim {
            extension_key: Some(crate::storage::extension_key("proj_1", &"0f".repeat(32))),
            egress: None,
            browser: None,
            ..claim("sess_1")
        };
        assert_eq!(Claim::parse(ext.to_json().as_bytes()).unwrap(), ext);
        let foreign =
            r#"{"sessionId":"s","projectId":"proj_1","extensionKey":"extensions/proj_2/0f.zip"}"#;
        assert_eq!(
            Claim::parse(foreign.as_bytes()),
            Err(ClaimError::BadExtensionKey)
        );
        let traversal = r#"{"sessionId":"../../etc","projectId":"p"}"#;
        assert_eq!(
            Claim::parse(traversal.as_bytes()),
            Err(ClaimError::BadId("sessionId"))
        );
        assert_eq!(
            Claim::parse(&vec![b' '; MAX_CLAIM_BYTES + 1]),
            Err(ClaimError::TooLarge)
        );
        assert!(matches!(
            Claim::parse(b"not json"),
            Err(ClaimError::Shape(_))
        ));
        assert!(matches!(
            Claim::parse(br#"{"sessionId":"s"}"#),
            Err(ClaimError::Shape(_))
        ));
    }
}
