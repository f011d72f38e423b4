//! The local platform's claims queue: the stand-in for SQS, with its semantics, in a directory
//! shared by the control plane and its controllers ([`DirQueue`]). The claims it carries and
//! their rules are the contract's ([`wallcrawler_contract::claim`]).

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use wallcrawler_contract::claim::{Claim, LIVE_VIEW_MEMBER, MAX_CLAIM_BYTES};

use crate::dir_watch::Change;
use crate::private_fs;

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
        live_view: Option<&wallcrawler_contract::task_api::LiveViewGrant>,
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
        let (tmp, mut f) = private_fs::create_temp(&self.dir.join("tmp"), &name)?;
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
        self.take_or_when(owner).map(Result::ok)
    }

    /// Takes the oldest visible claim for `owner` (`Ok`), or says when the first claim handed
    /// back with a wait becomes visible (`Err(Some(at))`; `Err(None)`: no claim waits at all).
    /// Never blocks.
    pub fn take_or_when(
        &self,
        owner: &str,
    ) -> io::Result<Result<Taken, Option<std::time::SystemTime>>> {
        let mut names: Vec<String> = match fs::read_dir(self.dir.join(NEW)) {
            Ok(entries) => entries
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.ends_with(".json"))
                .collect(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Err(None)),
            Err(e) => return Err(e),
        };
        names.sort();
        let now = std::time::SystemTime::now();
        let mut next = None;
        for name in names {
            if let Some(at) = hidden_until(&self.dir.join(NEW).join(&name)).filter(|t| *t > now) {
                next = Some(next.map_or(at, |n: std::time::SystemTime| n.min(at)));
                continue;
            }
            let to = self.dir.join(TAKEN).join(Self::owned(&name, owner));
            match fs::rename(self.dir.join(NEW).join(&name), &to) {
                Ok(()) => {
                    let body = read_bounded(&to)?;
                    return Ok(Ok(Taken { body, name }));
                }
                // Another controller took it first.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            }
        }
        Ok(Err(next))
    }

    /// Wakes `wake` (`notify_one`: a wake with nobody waiting is kept for the next wait)
    /// whenever a claim moves: sent or handed back into `new/`, taken, served (every claim
    /// moves by a rename). Until `wake` is dropped, or the watch fails (`failed` is told why;
    /// whoever waits then only has its own timeout). The directories must exist
    /// ([`DirQueue::init`]).
    pub fn wake_on_moves(
        &self,
        wake: &std::sync::Arc<tokio::sync::Notify>,
        failed: impl FnOnce(io::Error) + Send + 'static,
    ) -> io::Result<()> {
        let weak = std::sync::Arc::downgrade(wake);
        let mut failed = Some(failed);
        let dirs = [NEW, TAKEN, SERVED].map(|d| self.dir.join(d));
        let dirs: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
        crate::dir_watch::watch(&dirs, "claims-watch", move |change| {
            let Some(wake) = weak.upgrade() else {
                return false;
            };
            if let Change::Failed(e) = change
                && let Some(failed) = failed.take()
            {
                failed(e);
            }
            wake.notify_one();
            true
        })
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
                private_fs::write_atomic(&dead, body.as_bytes())?;
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
    private_fs::open_ours(path)?
        .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?
        .take(MAX_CLAIM_BYTES as u64 + 1)
        .read_to_end(&mut out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use wallcrawler_contract::claim::live_view_of;

    use super::*;

    fn claim(id: &str) -> Claim {
        Claim::new(id, "proj_1")
    }

    #[test]
    fn a_claim_files_live_view_is_read_by_its_taker_and_the_claim_parses_as_without() {
        let d = tempfile::tempdir().unwrap();
        let q = DirQueue::new(d.path());
        let lv = wallcrawler_contract::task_api::LiveViewGrant {
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
    fn a_look_says_when_a_claim_handed_back_with_a_wait_becomes_visible() {
        let d = tempfile::tempdir().unwrap();
        let q = DirQueue::new(d.path());
        q.init().unwrap();
        assert_eq!(q.take_or_when("one").unwrap(), Err(None));
        let name = q.send(&claim("sess_a")).unwrap();
        assert!(q.take("one").unwrap().is_some());
        let before = std::time::SystemTime::now();
        q.put_back(&name, "one", std::time::Duration::from_secs(60))
            .unwrap();
        match q.take_or_when("two").unwrap() {
            Err(Some(at)) => assert!(at >= before + std::time::Duration::from_secs(59)),
            other => panic!("expected the time it becomes visible, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn every_move_of_a_claim_wakes_the_watcher() {
        use std::time::Duration;
        let d = tempfile::tempdir().unwrap();
        let q = DirQueue::new(d.path());
        q.init().unwrap();
        let wake = std::sync::Arc::new(tokio::sync::Notify::new());
        q.wake_on_moves(&wake, |e| panic!("the watch failed: {e}"))
            .unwrap();
        let woken = || tokio::time::timeout(Duration::from_secs(30), wake.notified());
        let name = q.send(&claim("sess_a")).unwrap();
        woken().await.expect("sent: no wake-up");
        assert!(q.take("one").unwrap().is_some());
        woken().await.expect("taken: no wake-up");
        q.put_back(&name, "one", Duration::ZERO).unwrap();
        woken().await.expect("handed back: no wake-up");
        assert!(q.take("two").unwrap().is_some());
        woken().await.expect("taken again: no wake-up");
        q.complete(&name, "two").unwrap();
        woken().await.expect("served: no wake-up");
    }

    #[test]
    fn a_dead_letter_keeps_no_secret() {
        let dir = tempfile::tempdir().unwrap();
        let q = DirQueue::new(dir.path().join("claims"));
        let egress: wallcrawler_contract::egress::Egress =
            serde_json::from_value(serde_json::json!({
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
