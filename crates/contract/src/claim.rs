//! Claims: how a session reaches a warm pool controller.
//!
//! The control plane sends one claim per session to a queue (Amazon SQS on AWS, a [`DirQueue`]
//! on the local platform); idle pool controllers wait on the queue and exactly one takes each
//! claim. A claim carries what the controller cannot learn from the session item before it
//! serves it (which session, whose, and which context); keepAlive and expiry still come from the
//! session item.
//!
//! A claim is untrusted input to the controller: [`Claim::parse`] bounds its size and checks
//! every field (ids of the usual alphabet, the archive key exactly the context's own key), so a
//! claim cannot point a controller at another project's archive or at a path.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

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

/// The member of a claim file in a [`DirQueue`] holding the session's live view (the local
/// platform's pool); [`Claim::parse`] ignores it.
pub const LIVE_VIEW_MEMBER: &str = "liveView";

/// The live view in a claim file's [`LIVE_VIEW_MEMBER`], if it has a valid one (the claim
/// parses the same with or without the member).
pub fn live_view_of(body: &[u8]) -> Option<crate::task_api::LiveViewGrant> {
    let mut v: serde_json::Value = serde_json::from_slice(body).ok()?;
    serde_json::from_value(v.get_mut(LIVE_VIEW_MEMBER)?.take()).ok()
}

/// A controller name that can be a file name of its own: 1-128 ASCII letters, digits, `-`, `_`
/// or `.`, not starting with `.` (the supervisor's `pool-<pid>-<n>`, a `pool-<uuid>`).
fn valid_owner(owner: &str) -> bool {
    !owner.is_empty()
        && owner.len() <= 128
        && !owner.starts_with('.')
        && owner
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// A claim taken from a [`DirQueue`]: its body and the handle to settle it with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    /// The claim's bytes as the control plane wrote them.
    pub body: Vec<u8>,
    /// The claim's file name in `taken/` (without the owner suffix).
    pub name: String,
}

/// The local platform's stand-in for the SQS queue, with the same semantics, in a directory
/// shared by the control plane and its controllers:
///
/// - `new/<seq>-<sessionId>.json` — visible claims, oldest first;
/// - `taken/<name>@<owner>` — taken by controller `owner` (a `rename`, so exactly one
///   controller takes each claim, like SQS's visibility timeout);
/// - `served/<name>@<owner>` — READY was written (SQS: the message is deleted); the supervisor
///   reads it to know which session a controller serves;
/// - `dead/<name>` — poison claims (SQS: the dead-letter queue);
/// - `hurry/<owner>` — the supervisor asks controller `owner`, still warming up, to hurry: a
///   claim waits with no warm controller to take it ([`DirQueue::hurry`]).
///
/// A controller that dies holding a claim in `taken/` has it put back in `new/` by its
/// supervisor ([`DirQueue::return_taken`]) — what the visibility timeout does on SQS.
#[derive(Debug, Clone)]
pub struct DirQueue {
    dir: PathBuf,
}

const NEW: &str = "new";
const TAKEN: &str = "taken";
const SERVED: &str = "served";
const DEAD: &str = "dead";
const HURRY: &str = "hurry";

impl DirQueue {
    /// A queue rooted at `dir` (nothing is created until [`DirQueue::init`]).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The queue's root directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Creates the directories (owner-only: claims name sessions).
    pub fn init(&self) -> io::Result<()> {
        for sub in ["", NEW, TAKEN, SERVED, DEAD, HURRY, "tmp"] {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(self.dir.join(sub))?;
        }
        Ok(())
    }

    /// Enqueues a claim (written aside, then renamed in: a reader never sees half a claim).
    pub fn send(&self, claim: &Claim) -> io::Result<String> {
        self.send_with(claim, None)
    }

    /// [`DirQueue::send`] with the session's control-mode live view in the claim file's
    /// [`LIVE_VIEW_MEMBER`] (a credential: the directory is owner-only, unlike an SQS message,
    /// which carries none; only a directory queue's reader takes it, see [`live_view_of`]).
    pub fn send_with(
        &self,
        claim: &Claim,
        live_view: Option<&crate::task_api::LiveViewGrant>,
    ) -> io::Result<String> {
        self.init()?;
        let body = match live_view {
            None => claim.to_json(),
            Some(lv) => {
                let mut v = serde_json::to_value(claim).expect("claims serialize");
                v[LIVE_VIEW_MEMBER] = serde_json::to_value(lv).expect("grants serialize");
                v.to_string()
            }
        };
        let seq = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let name = format!("{seq:039}-{}.json", claim.session_id);
        let (tmp, mut f) = crate::private_fs::create_temp(&self.dir.join("tmp"), &name)?;
        let sent = f
            .write_all(body.as_bytes())
            .and_then(|()| f.sync_all())
            .and_then(|()| fs::rename(&tmp, self.dir.join(NEW).join(&name)));
        if sent.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        sent.map(|()| name)
    }

    fn owned(name: &str, owner: &str) -> String {
        format!("{name}@{owner}")
    }

    /// Takes the oldest visible claim for `owner`, if there is one. Never blocks.
    pub fn take(&self, owner: &str) -> io::Result<Option<Taken>> {
        let mut names: Vec<String> = match fs::read_dir(self.dir.join(NEW)) {
            Ok(entries) => entries
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.ends_with(".json"))
                .collect(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        names.sort();
        let now = std::time::SystemTime::now();
        for name in names {
            if hidden_until(&self.dir.join(NEW).join(&name)).is_some_and(|t| t > now) {
                continue;
            }
            let to = self.dir.join(TAKEN).join(Self::owned(&name, owner));
            match fs::rename(self.dir.join(NEW).join(&name), &to) {
                Ok(()) => {
                    let body = read_bounded(&to)?;
                    return Ok(Some(Taken { body, name }));
                }
                // Another controller took it first.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }

    /// READY was written: the claim is done (kept in `served/` until its controller exits).
    pub fn complete(&self, name: &str, owner: &str) -> io::Result<()> {
        let n = Self::owned(name, owner);
        fs::rename(
            self.dir.join(TAKEN).join(&n),
            self.dir.join(SERVED).join(&n),
        )
    }

    /// The claim's session is gone or ended: the claim is deleted.
    pub fn drop_claim(&self, name: &str, owner: &str) -> io::Result<()> {
        fs::remove_file(self.dir.join(TAKEN).join(Self::owned(name, owner)))
    }

    /// Handed back by `owner`: visible again in `new/`, taken by nobody for `after` (SQS:
    /// `ChangeMessageVisibility`). The wait is the file's modification time, set into the
    /// future before the rename (a rename keeps it).
    pub fn put_back(&self, name: &str, owner: &str, after: std::time::Duration) -> io::Result<()> {
        let from = self.dir.join(TAKEN).join(Self::owned(name, owner));
        let at = std::time::SystemTime::now() + after;
        fs::File::options()
            .write(true)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(&from)?
            .set_modified(at)?;
        fs::rename(from, self.dir.join(NEW).join(name))
    }

    /// A poison claim: moved to `dead/`, for the operator to look at — without its secrets (a
    /// session's proxy credentials, its live view), which would otherwise outlive the session
    /// there. A body that is no JSON object is kept as it is (the platform wrote none such).
    pub fn dead_letter(&self, name: &str, owner: &str) -> io::Result<()> {
        let taken = self.dir.join(TAKEN).join(Self::owned(name, owner));
        let dead = self.dir.join(DEAD).join(name);
        let stripped = read_bounded(&taken)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|mut v| {
                let o = v.as_object_mut()?;
                let had = o.remove("egress").is_some() | o.remove(LIVE_VIEW_MEMBER).is_some();
                had.then(|| v.to_string())
            });
        match stripped {
            Some(body) => {
                crate::private_fs::write_atomic(&dead, body.as_bytes())?;
                fs::remove_file(taken)
            }
            None => fs::rename(taken, dead),
        }
    }

    fn owned_in(&self, sub: &str, owner: &str) -> Vec<(String, PathBuf)> {
        let suffix = format!("@{owner}");
        fs::read_dir(self.dir.join(sub))
            .map(|entries| {
                entries
                    .flatten()
                    .filter_map(|e| {
                        let n = e.file_name().into_string().ok()?;
                        let name = n.strip_suffix(&suffix)?.to_owned();
                        Some((name, e.path()))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether `owner` has taken a claim (and so is no longer idle).
    pub fn busy(&self, owner: &str) -> bool {
        !self.owned_in(TAKEN, owner).is_empty() || !self.owned_in(SERVED, owner).is_empty()
    }

    /// The claims `owner` took, in `taken/` and `served/`, parsed where they parse.
    pub fn claims_of(&self, owner: &str) -> Vec<Claim> {
        [TAKEN, SERVED]
            .into_iter()
            .flat_map(|sub| self.owned_in(sub, owner))
            .filter_map(|(_, p)| Claim::parse(&read_bounded(&p).ok()?).ok())
            .collect()
    }

    /// The claims `owner` served (READY written).
    pub fn served_by(&self, owner: &str) -> Vec<Claim> {
        self.owned_in(SERVED, owner)
            .into_iter()
            .filter_map(|(_, p)| Claim::parse(&read_bounded(&p).ok()?).ok())
            .collect()
    }

    /// At the supervisor's start, when no controller of a previous run is left: every taken
    /// claim is visible again and served markers are removed. Returns the claims put back.
    pub fn requeue_all(&self) -> usize {
        let mut back = 0;
        for e in fs::read_dir(self.dir.join(TAKEN))
            .into_iter()
            .flatten()
            .flatten()
        {
            let n = e.file_name().to_string_lossy().into_owned();
            if let Some((name, _)) = n.rsplit_once('@')
                && fs::rename(e.path(), self.dir.join(NEW).join(name)).is_ok()
            {
                back += 1;
            }
        }
        for e in fs::read_dir(self.dir.join(SERVED))
            .into_iter()
            .flatten()
            .flatten()
        {
            let _ = fs::remove_file(e.path());
        }
        back
    }

    /// `owner` has exited: claims it took without serving become visible again (another
    /// controller takes them); its served claims are removed. Returns the claims put back.
    pub fn return_taken(&self, owner: &str) -> usize {
        let mut back = 0;
        for (name, path) in self.owned_in(TAKEN, owner) {
            if fs::rename(&path, self.dir.join(NEW).join(&name)).is_ok() {
                back += 1;
            }
        }
        for (_, path) in self.owned_in(SERVED, owner) {
            let _ = fs::remove_file(path);
        }
        back
    }

    /// Claims waiting in `new/`.
    pub fn visible(&self) -> usize {
        fs::read_dir(self.dir.join(NEW))
            .map(|e| e.count())
            .unwrap_or(0)
    }

    /// Asks controller `owner` to hurry its warm-up (a claim waits on it). A valid owner only
    /// (the names the supervisor gives its controllers); idempotent.
    pub fn hurry(&self, owner: &str) -> io::Result<()> {
        if !valid_owner(owner) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not an owner name",
            ));
        }
        fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(self.dir.join(HURRY).join(owner))
            .map(drop)
    }

    /// Whether controller `owner` was asked to hurry.
    pub fn hurried(&self, owner: &str) -> bool {
        valid_owner(owner) && self.dir.join(HURRY).join(owner).exists()
    }

    /// Forgets that `owner` was asked to hurry (it ended).
    pub fn forget_hurry(&self, owner: &str) {
        if valid_owner(owner) {
            let _ = fs::remove_file(self.dir.join(HURRY).join(owner));
        }
    }

    /// Claims in `dead/`.
    pub fn dead(&self) -> usize {
        fs::read_dir(self.dir.join(DEAD))
            .map(|e| e.count())
            .unwrap_or(0)
    }
}

/// When a claim handed back with a wait becomes visible: its modification time, if later than
/// now (`None` when it cannot be read: visible).
fn hidden_until(path: &Path) -> Option<std::time::SystemTime> {
    fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Reads at most [`MAX_CLAIM_BYTES`] + 1 bytes (a larger file is refused by [`Claim::parse`]).
fn read_bounded(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    crate::private_fs::open_ours(path)?
        .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?
        .take(MAX_CLAIM_BYTES as u64 + 1)
        .read_to_end(&mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(id: &str) -> Claim {
        Claim {
            session_id: id.into(),
            project_id: "proj_1".into(),
            context: None,
            extension_key: None,
            egress: None,
            browser: None,
        }
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

    #[test]
    fn a_claim_files_live_view_is_read_by_its_taker_and_the_claim_parses_as_without() {
        let d = tempfile::tempdir().unwrap();
        let q = DirQueue::new(d.path());
        let lv = crate::task_api::LiveViewGrant {
            credential: "a.b.c".into(),
            expires_at: 9,
            base: Some("http://127.0.0.1:1".into()),
        };
        q.send_with(&claim("sess_a"), Some(&lv)).unwrap();
        q.send(&claim("sess_b")).unwrap();
        let a = q.take("one").unwrap().unwrap();
        assert_eq!(Claim::parse(&a.body).unwrap(), claim("sess_a"));
        assert_eq!(live_view_of(&a.body), Some(lv));
        assert_eq!(q.claims_of("one"), vec![claim("sess_a")]);
        let b = q.take("two").unwrap().unwrap();
        assert_eq!(live_view_of(&b.body), None);
        assert_eq!(live_view_of(br#"{"liveView":{"credential":1}}"#), None);
        assert_eq!(live_view_of(b"not json"), None);
    }

    #[test]
    fn a_dead_letter_keeps_no_secret() {
        let dir = tempfile::tempdir().unwrap();
        let q = DirQueue::new(dir.path().join("claims"));
        let egress: crate::egress::Egress = serde_json::from_value(serde_json::json!({
            "routes": [{"proxy": {"scheme": "http", "host": "p.test", "port": 1,
                "username": "u", "password": "pw-dead-letter"}}]
        }))
        .unwrap();
        let mut c = claim("sess_dead");
        c.egress = Some(egress);
        q.send(&c).unwrap();
        let t = q.take("me").unwrap().unwrap();
        q.dead_letter(&t.name, "me").unwrap();
        assert_eq!(q.dead(), 1);
        let body = std::fs::read_to_string(q.dir().join("dead").join(&t.name)).unwrap();
        assert!(
            !body.contains("pw-dead-letter") && !body.contains("egress"),
            "{body}"
        );
        assert!(body.contains("sess_dead"), "{body}");
        assert!(
            !q.dir()
                .join("taken")
                .join(format!("{}@me", t.name))
                .exists()
        );
    }

    #[test]
    fn each_claim_is_taken_once_and_a_dead_owners_claims_come_back() {
        let d = tempfile::tempdir().unwrap();
        let q = DirQueue::new(d.path());
        q.send(&claim("sess_a")).unwrap();
        q.send(&claim("sess_b")).unwrap();
        let a = q.take("one").unwrap().unwrap();
        assert_eq!(Claim::parse(&a.body).unwrap().session_id, "sess_a");
        let b = q.take("two").unwrap().unwrap();
        assert_eq!(Claim::parse(&b.body).unwrap().session_id, "sess_b");
        assert!(q.take("three").unwrap().is_none());
        assert!(q.busy("one") && q.busy("two") && !q.busy("three"));

        q.complete(&a.name, "one").unwrap();
        assert_eq!(q.claims_of("one"), vec![claim("sess_a")]);
        // "two" dies before READY: its claim is visible again and "three" takes it.
        assert_eq!(q.return_taken("two"), 1);
        assert!(!q.busy("two"));
        let again = q.take("three").unwrap().unwrap();
        assert_eq!(again.name, b.name);
        // "one" exits after serving: nothing comes back.
        assert_eq!(q.return_taken("one"), 0);
        assert!(!q.busy("one"));
        q.dead_letter(&again.name, "three").unwrap();
        assert_eq!((q.visible(), q.dead()), (0, 1));
    }

    #[test]
    fn a_claim_handed_back_is_taken_by_nobody_until_its_wait_is_over() {
        let d = tempfile::tempdir().unwrap();
        let q = DirQueue::new(d.path());
        q.send(&claim("sess_a")).unwrap();
        let a = q.take("one").unwrap().unwrap();
        q.put_back(&a.name, "one", std::time::Duration::from_secs(3600))
            .unwrap();
        assert!(!q.busy("one"));
        assert_eq!(q.visible(), 1);
        assert!(q.take("two").unwrap().is_none(), "hidden for its wait");
        // Handed back at once (a controller being stopped): the next controller takes it.
        q.send(&claim("sess_b")).unwrap();
        let b = q.take("two").unwrap().unwrap();
        q.put_back(&b.name, "two", std::time::Duration::ZERO)
            .unwrap();
        let again = q.take("three").unwrap().unwrap();
        assert_eq!(again.name, b.name);
    }

    #[test]
    fn a_controller_is_asked_to_hurry_by_its_name_only() {
        let d = tempfile::tempdir().unwrap();
        let q = DirQueue::new(d.path());
        q.init().unwrap();
        assert!(!q.hurried("pool-1-2"));
        q.hurry("pool-1-2").unwrap();
        q.hurry("pool-1-2").unwrap();
        assert!(q.hurried("pool-1-2"));
        assert!(!q.hurried("pool-1-3"));
        for bad in ["", "../x", "a/b", ".hidden", "arn:aws:ecs:task/x"] {
            assert!(q.hurry(bad).is_err(), "{bad}");
            assert!(!q.hurried(bad), "{bad}");
        }
        q.forget_hurry("pool-1-2");
        assert!(!q.hurried("pool-1-2"));
    }

    #[test]
    fn simultaneous_takers_never_share_a_claim() {
        let d = tempfile::tempdir().unwrap();
        let q = DirQueue::new(d.path());
        for i in 0..50 {
            q.send(&claim(&format!("sess_{i}"))).unwrap();
        }
        let takers: Vec<_> = (0..4)
            .map(|t| {
                let q = q.clone();
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    while let Some(c) = q.take(&format!("t{t}")).unwrap() {
                        got.push(c.name);
                    }
                    got
                })
            })
            .collect();
        let mut all: Vec<String> = takers.into_iter().flat_map(|t| t.join().unwrap()).collect();
        all.sort();
        let n = all.len();
        all.dedup();
        assert_eq!((n, all.len()), (50, 50));
    }
}
