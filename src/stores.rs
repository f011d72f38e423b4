//! The narrow interfaces the controller needs from the outside world, named for what it needs:
//! where the session item lives ([`ServedSessions`]), where profile archives live
//! ([`ArchiveStore`]), and how a private address maps to a public one ([`NetworkLookup`]).
//! The implementations import these ports, never the reverse: the AWS adapters (`aws`), the
//! archive directory (`profile`), the Secrets Manager key cache (`secrets`); the session and
//! claim directories of the local platform are here.

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use backon::Retryable as _;
use tokio::io::AsyncRead;
use tracing::warn;
use wallcrawler_contract::InternalStatus;
use wallcrawler_contract::retry::{self, Transient};
use wallcrawler_contract::session_doc::SessionDoc;
pub use wallcrawler_contract::session_doc::Take;
use wallcrawler_contract::task_api::LiveViewGrant;
use wallcrawler_local::claim_queue::DirQueue;
use wallcrawler_local::session_dir::DocError;

/// A stream of archive bytes.
pub type BoxRead = Pin<Box<dyn AsyncRead + Send>>;

/// The cause of a [`StoreError`]: an SDK error, an I/O error, a worker that stopped.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Failures of an outside service, by what the caller can do about them: try again later
/// (`Unavailable`, see [`Transient`]), not again (`Refused`), or nothing (`Other`). The cause
/// is kept as the error's source; the message shows its chain and never contains secrets.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The service could not be reached or answered with a transient failure: try again later.
    #[error("{service} is unreachable: {}", Chain(source.as_ref()))]
    Unavailable {
        /// The service's name, as shown in errors.
        service: &'static str,
        /// The underlying error.
        #[source]
        source: BoxError,
    },
    /// The service refused the request: trying again will not help.
    #[error("{service} refused the request: {}", Chain(source.as_ref()))]
    Refused {
        /// The service's name, as shown in errors.
        service: &'static str,
        /// The underlying error.
        #[source]
        source: BoxError,
    },
    /// Any other failure.
    #[error("{service}: {}", Chain(source.as_ref()))]
    Other {
        /// The service's name, as shown in errors.
        service: &'static str,
        /// The underlying error.
        #[source]
        source: BoxError,
    },
}

/// What went wrong, in the words of the code that saw it, over the error that caused it.
#[derive(Debug, thiserror::Error)]
#[error("{what}")]
pub struct Context {
    /// What was being done (fixed words: nothing a client or a service sent).
    pub what: &'static str,
    /// The error that caused it.
    #[source]
    pub source: BoxError,
}

/// An error and its sources, `": "`-separated: the whole story in one log field.
pub struct Chain<'a>(pub &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut next = self.0.source();
        while let Some(e) = next {
            write!(f, ": {e}")?;
            next = e.source();
        }
        Ok(())
    }
}

impl Transient for StoreError {
    fn is_transient(&self) -> bool {
        self.is_unavailable()
    }
}

/// Runs `op` until it succeeds or fails for good, retrying transient failures with the shared
/// policy ([`wallcrawler_contract::retry::policy`]) and sleeping at most `within` in all.
pub async fn retry<T, F, Fut>(what: &str, within: Duration, op: F) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    op.retry(retry::policy(within))
        .sleep(tokio::time::sleep)
        .when(StoreError::is_transient)
        .notify(|e, wait| {
            warn!(error = %e, retry_in_ms = wait.as_millis() as u64, "{what} failed; retrying");
        })
        .await
}

impl StoreError {
    /// The service could not be reached or asked to come back later.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::Unavailable { .. })
    }

    /// A few words for a stored reason or a client: which service and how it failed, without
    /// the detail (an SDK error chain, for the log only).
    pub fn summary(&self) -> String {
        match self {
            Self::Unavailable { service, .. } => format!("the {service} is unreachable"),
            Self::Refused { service, .. } => format!("the {service} refused the request"),
            Self::Other { service, .. } => format!("the {service} failed"),
        }
    }
}

/// What the controller reads from the session item at start: the attributes of
/// [`attr::TASK_READS`](wallcrawler_contract::session::attr::TASK_READS), never the token or
/// `connectUrl`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionRecord {
    /// `internalStatus`, when present and known.
    pub internal_status: Option<InternalStatus>,
    /// `keepAlive` (false when absent): the session is not ended by idleness.
    pub keep_alive: bool,
    /// `expiresAt`, in unix seconds.
    pub expires_at: Option<u64>,
    /// `projectId`, when present.
    pub project_id: Option<String>,
    /// `readyAt` is set: some controller served the session.
    pub ever_ready: bool,
    /// `endedAt` is set.
    pub ended: bool,
    /// `claimDeadline`, in unix seconds: after it no client waits for the session's browser
    /// (`None`: an item older than deadlines, or one of another shape: no deadline).
    pub claim_deadline: Option<u64>,
    /// `owner`: the controller that took the session's claim, when one did.
    pub owner: Option<String>,
    /// `ownerUntil`, in unix seconds: the owner's lease before READY (`None`: READY written,
    /// or no owner).
    pub owner_until: Option<u64>,
}

impl SessionRecord {
    /// The controller holding the session at `now`, if any (see
    /// [`wallcrawler_contract::session_doc::live_owner`]).
    pub fn live_owner(&self, now: u64) -> Option<&str> {
        wallcrawler_contract::session_doc::live_owner(self.owner.as_deref(), self.owner_until, now)
    }
}

/// The READY write, on condition that the session is pending and `owner` owns it.
#[derive(Debug, Clone)]
pub struct ReadyUpdate {
    /// The controller writing it (`owner`).
    pub owner: String,
    /// `publicIP`: the address clients connect to.
    pub public_ip: String,
    /// `ecsTaskArn`, when known.
    pub task_arn: Option<String>,
    /// `privateIP`: the task's own address, where the connect gateway dials it.
    pub private_ip: String,
    /// `proxyPort`: the proxy's port at that address.
    pub proxy_port: u16,
    /// `uploadsDir`: where the session's uploads are brought on the browser's disk, when it
    /// has such a directory (the API answers an upload with the path in it).
    pub uploads_dir: Option<String>,
    /// When the session became ready (`readyAt`), an ISO 8601 timestamp.
    pub at: String,
}

/// Outcome of the conditional READY write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadyResult {
    /// The session is READY now.
    Ready,
    /// The session was no longer CREATING/PROVISIONING/STARTING (released or ended meanwhile).
    NotPending(Option<InternalStatus>),
    /// Another controller owns the session now (this one's lease lapsed and it was taken).
    Lost,
}

/// Outcome of taking a claimed session ([`ServedSessions::take`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TakeResult {
    /// This controller owns the session now.
    Taken,
    /// Not taken: the session as it is (`None`: gone), no longer pending or held by another
    /// controller.
    Refused(Option<SessionRecord>),
}

/// `proxyBytes` and `endedAt`, on condition that `owner` owns the session or nobody holds it
/// at `now` ([`wallcrawler_contract::session_doc::SessionDoc::may_end`]).
#[derive(Debug, Clone, Copy)]
pub struct EndedUpdate<'a> {
    /// The controller writing it.
    pub owner: &'a str,
    /// Now, unix seconds (whose leases have lapsed).
    pub now: u64,
    /// Bytes relayed, both directions.
    pub proxy_bytes: u64,
    /// `endedAt` (ISO 8601).
    pub at: &'a str,
}

/// `handoff` set (or removed: `None`), on [`EndedUpdate`]'s condition.
#[derive(Debug, Clone, Copy)]
pub struct HandoffUpdate<'a> {
    /// The controller writing it.
    pub owner: &'a str,
    /// Now, unix seconds.
    pub now: u64,
    /// The pending handoff, or none.
    pub handoff: Option<&'a wallcrawler_contract::session_doc::Handoff>,
}

/// `downloadsInProgress` = `count`, on condition that `owner` owns the session or nobody holds
/// it at `now` (as [`EndedUpdate`]).
#[derive(Debug, Clone, Copy)]
pub struct DownloadsUpdate<'a> {
    /// The controller writing it.
    pub owner: &'a str,
    /// Now, unix seconds.
    pub now: u64,
    /// Downloads begun and not yet settled.
    pub count: u64,
}

/// A terminal status for the session item, written unless it is terminal already, and only by
/// its owner.
#[derive(Debug, Clone, Copy)]
pub struct TerminalUpdate<'a> {
    /// The controller writing it (`owner`).
    pub owner: &'a str,
    /// STOPPED, TIMED_OUT or FAILED.
    pub status: InternalStatus,
    /// The `terminationReason`, if any.
    pub reason: Option<&'a str>,
    /// When (ISO 8601).
    pub at: &'a str,
}

/// The session item, written only with conditional updates.
#[async_trait::async_trait]
pub trait ServedSessions: Send + Sync {
    /// The session item, `None` when there is none.
    async fn load(&self, id: &str) -> Result<Option<SessionRecord>, StoreError>;
    /// Takes the claimed session for `t.owner` (`SessionDoc::take`: only while pending and
    /// held by nobody else; sets `owner`, `ownerUntil` and `ecsTaskArn`).
    async fn take(&self, id: &str, t: &Take<'_>) -> Result<TakeResult, StoreError>;
    /// Keeps `owner`'s lease until `until` (unix seconds), only while it owns the pending
    /// session. False: it lost it (or the session is no longer pending), nothing written.
    async fn keep_owner(&self, id: &str, owner: &str, until: u64) -> Result<bool, StoreError>;
    /// Gives the pending session up (`SessionDoc::give_up`): `owner`, `ownerUntil` and
    /// `ecsTaskArn` removed, only by its owner. False: nothing written.
    async fn give_up(&self, id: &str, owner: &str) -> Result<bool, StoreError>;
    /// READY, only from a pending status and only by its owner.
    async fn mark_ready(&self, id: &str, u: &ReadyUpdate) -> Result<ReadyResult, StoreError>;
    /// A terminal status, unless the item is terminal already or another controller owns it
    /// (then false, nothing written).
    async fn mark_terminal(&self, id: &str, t: &TerminalUpdate<'_>) -> Result<bool, StoreError>;
    /// `proxyBytes` and, last of all, `endedAt` ([`EndedUpdate`]'s condition). False: the
    /// condition failed, nothing written.
    async fn mark_ended(&self, id: &str, e: &EndedUpdate<'_>) -> Result<bool, StoreError>;
    /// Ends a session no browser took in time (`SessionDoc::end_unserved`: TIMED_OUT, "no
    /// browser was available in time", `endedAt` = `at`), on condition that it is still
    /// pending and its `claimDeadline` is before `now` (unix seconds). False: the condition
    /// failed (READY meanwhile, or a poll moved the deadline), nothing written.
    async fn end_unserved(&self, id: &str, now: u64, at: &str) -> Result<bool, StoreError>;
    /// `downloadsInProgress`, on [`EndedUpdate`]'s condition ([`DownloadsUpdate`]). False: the
    /// condition failed, nothing written.
    async fn set_downloads_in_progress(
        &self,
        id: &str,
        u: &DownloadsUpdate<'_>,
    ) -> Result<bool, StoreError>;
    /// `handoff`, on [`EndedUpdate`]'s condition ([`HandoffUpdate`]). False: the condition
    /// failed, nothing written.
    async fn set_handoff(&self, id: &str, u: &HandoffUpdate<'_>) -> Result<bool, StoreError>;
}

/// Profile archives by key.
#[async_trait::async_trait]
pub trait ArchiveStore: Send + Sync {
    /// The archive's bytes, or `None` when there is none yet (a new context).
    async fn open(&self, key: &str) -> Result<Option<BoxRead>, StoreError>;
    /// Stores the archive read from `body`. The previous archive is replaced only once the new
    /// one is complete; a failed upload leaves it as it was. Returns the bytes stored.
    async fn put(&self, key: &str, body: BoxRead) -> Result<u64, StoreError>;
}

/// The task's own network interface, as the ECS task metadata describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskInterface {
    /// Its MAC address (`Containers[].Networks[].MACAddress`): unique to this interface.
    pub mac: String,
    /// Its private IPv4 address.
    pub private_ip: String,
}

/// The public address of the task's own network interface (direct mode).
#[async_trait::async_trait]
pub trait NetworkLookup: Send + Sync {
    /// The public address of `iface`, found by its MAC address together with its private
    /// address (never by the private address alone, which other VPCs may use too); `None`
    /// when the interface has none.
    async fn public_ip_of(&self, iface: &TaskInterface) -> Result<Option<String>, StoreError>;
}

/// Scale-in protection of this task through the ECS API (with the session's credentials,
/// which allow it on the task's own ARN only).
#[async_trait::async_trait]
pub trait TaskProtection: Send + Sync {
    /// Protects the task `task_arn` from the service's scale-in for `minutes`.
    async fn protect(&self, task_arn: &str, minutes: u64) -> Result<(), StoreError>;
}

/// A claim received from the pool's queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// The claim message's body.
    pub body: Vec<u8>,
    /// What settles it (an SQS receipt handle, a claim file's name).
    pub receipt: String,
}

/// The queue a pool controller takes its session from (SQS, or a directory locally). A
/// received claim is invisible to other controllers until it is settled or, for SQS, until its
/// visibility timeout passes.
#[async_trait::async_trait]
pub trait ClaimQueue: Send + Sync {
    /// Waits up to `wait` for a claim.
    async fn receive(&self, wait: Duration) -> Result<Option<Received>, StoreError>;
    /// Whether a [`ClaimQueue::receive`] may be dropped unfinished without losing a claim
    /// (false for SQS: the service may still answer a dropped long poll with a claim, which
    /// then stays hidden for its visibility timeout).
    fn receive_is_cancel_safe(&self) -> bool {
        false
    }
    /// Whether this controller, still warming up, is asked to hurry: a claim waits on it
    /// (the local platform's supervisor asks through the claims directory; never on SQS).
    fn hurried(&self) -> bool {
        false
    }
    /// Whether no claim will come any more, whatever the wait (the task API answered that
    /// this task has had its session): the controller stops waiting, as at the end of its
    /// idle lifetime.
    fn spent(&self) -> bool {
        false
    }
    /// The control-mode live view the last received claim's grant carried (the task API's
    /// only), handed out for a client's `Wallcrawler.requestHandoff`.
    fn live_view(&self) -> Option<LiveViewGrant> {
        None
    }
    /// READY is written: the claim is done (deleted).
    async fn complete(&self, receipt: &str) -> Result<(), StoreError>;
    /// The claim's session is gone or no longer pending: deleted, unserved.
    async fn discard(&self, receipt: &str) -> Result<(), StoreError>;
    /// A claim that does not parse: toward the dead-letter queue (SQS: visible again at once,
    /// and the queue's redrive policy moves it after its receive count).
    async fn poison(&self, receipt: &str) -> Result<(), StoreError>;
    /// Still bringing the claim's session up: invisible to other controllers for `more` from
    /// now (SQS: its visibility timeout restarted). A directory claim stays with its owner
    /// until it is settled or the owner exits: nothing to do.
    async fn keep(&self, receipt: &str, more: Duration) -> Result<(), StoreError>;
    /// Not this controller's to serve now: the claim is handed back, visible to every
    /// controller again `after` from now (SQS: its visibility timeout set to it; a directory:
    /// back in the queue, taken by nobody before then). Its session is pending and held by
    /// another controller whose lease ends then, or this controller is being stopped (zero).
    async fn hand_back(&self, receipt: &str, after: Duration) -> Result<(), StoreError>;
}

/// Claims in a directory shared with the local platform ([`DirQueue`]), taken under `owner`.
pub struct DirClaims {
    /// The claims directory.
    queue: DirQueue,
    /// Who takes the claims (this controller), as the queue records it.
    owner: String,
    /// The live view the last claim taken carried (the local platform's grant).
    live_view: LastLiveView,
    /// Woken when a claim moves in the directory (`None`: not watched, the wait polls).
    moves: Option<Arc<tokio::sync::Notify>>,
    /// How often a watched directory is looked at anyway ([`DIR_QUEUE_RECHECK`]).
    recheck: Duration,
}

/// The live view the last claim received carried, kept for [`ClaimQueue::live_view`].
#[derive(Debug, Default)]
pub struct LastLiveView(std::sync::Mutex<Option<LiveViewGrant>>);

impl LastLiveView {
    /// Kept in place of the one before.
    pub(crate) fn set(&self, grant: Option<LiveViewGrant>) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = grant;
    }

    /// The one kept last.
    pub(crate) fn get(&self) -> Option<LiveViewGrant> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// How often a directory queue is looked at while waiting when it cannot be watched (a
/// `readdir` of a few entries).
const DIR_QUEUE_POLL: Duration = Duration::from_millis(5);

/// How often a watched directory queue is looked at anyway while waiting: the watch wakes the
/// wait at once, this only bounds what a lost wake-up (the watch failed, logged) would cost.
const DIR_QUEUE_RECHECK: Duration = Duration::from_millis(250);

impl DirClaims {
    /// Claims taken from `queue` (its directories made, [`DirQueue::init`]) as `owner`, the
    /// wait for one woken by the directory's changes (inotify). Before the watch, a warm
    /// controller looked every 5 ms: 2 % of a core each while idle (Step 22).
    pub fn new(queue: DirQueue, owner: String) -> Self {
        let wake = Arc::new(tokio::sync::Notify::new());
        let moves = match queue.wake_on_moves(&wake, |e| {
            warn!(error = %e, "watching the claims directory stopped; a claim may wait up to 250 ms");
        }) {
            Ok(()) => Some(wake),
            Err(e) => {
                warn!(error = %e, "the claims directory is not watched; looking every 5 ms");
                None
            }
        };
        Self {
            queue,
            owner,
            live_view: LastLiveView::default(),
            moves,
            recheck: DIR_QUEUE_RECHECK,
        }
    }

    /// Looking anyway every `recheck` while watched.
    #[cfg(test)]
    fn rechecking_every(self, recheck: Duration) -> Self {
        Self { recheck, ..self }
    }

    fn io(e: std::io::Error) -> StoreError {
        StoreError::Other {
            service: "claims directory",
            source: e.into(),
        }
    }
}

#[async_trait::async_trait]
impl ClaimQueue for DirClaims {
    async fn receive(&self, wait: Duration) -> Result<Option<Received>, StoreError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let hidden_until = match self.queue.take_or_when(&self.owner).map_err(Self::io)? {
                Ok(t) => {
                    self.live_view
                        .set(wallcrawler_contract::claim::live_view_of(&t.body));
                    return Ok(Some(Received {
                        body: t.body,
                        receipt: t.name,
                    }));
                }
                Err(hidden_until) => hidden_until,
            };
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            let Some(moves) = &self.moves else {
                tokio::time::sleep(DIR_QUEUE_POLL).await;
                continue;
            };
            // A claim handed back with a wait is looked at again when it becomes visible.
            let visible_in = hidden_until.map(|at| {
                at.duration_since(std::time::SystemTime::now())
                    .unwrap_or_default()
            });
            let nap = visible_in.map_or(self.recheck, |v| v.min(self.recheck));
            // A move between the look above and this wait left its wake-up in `moves`.
            tokio::select! {
                () = moves.notified() => {}
                () = tokio::time::sleep_until(deadline.min(now + nap)) => {}
            }
        }
    }
    /// A claim is taken by one `rename`, between two waits: nothing is in flight.
    fn receive_is_cancel_safe(&self) -> bool {
        true
    }
    /// `hurry/<owner>` exists ([`DirQueue::hurry`]).
    fn hurried(&self) -> bool {
        self.queue.hurried(&self.owner)
    }
    fn live_view(&self) -> Option<LiveViewGrant> {
        self.live_view.get()
    }
    async fn complete(&self, receipt: &str) -> Result<(), StoreError> {
        self.queue.complete(receipt, &self.owner).map_err(Self::io)
    }
    async fn discard(&self, receipt: &str) -> Result<(), StoreError> {
        self.queue
            .drop_claim(receipt, &self.owner)
            .map_err(Self::io)
    }
    async fn poison(&self, receipt: &str) -> Result<(), StoreError> {
        self.queue
            .dead_letter(receipt, &self.owner)
            .map_err(Self::io)
    }
    async fn keep(&self, _: &str, _: Duration) -> Result<(), StoreError> {
        Ok(())
    }
    async fn hand_back(&self, receipt: &str, after: Duration) -> Result<(), StoreError> {
        self.queue
            .put_back(receipt, &self.owner, after)
            .map_err(Self::io)
    }
}

/// Session documents in a directory (`SESSIONS_DIR`, the local platform's table), with the same
/// conditional semantics as the DynamoDB adapter.
pub struct DirectorySessions {
    store: wallcrawler_local::session_dir::DirStore,
}

impl DirectorySessions {
    /// Session items stored as files in `dir`.
    pub fn new(dir: PathBuf) -> Self {
        Self {
            store: wallcrawler_local::session_dir::DirStore::new(dir),
        }
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(
            &wallcrawler_local::session_dir::DirStore,
        ) -> Result<T, wallcrawler_local::session_dir::DocError>
        + Send
        + 'static,
    ) -> Result<T, StoreError> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || f(&store))
            .await
            .map_err(|e| StoreError::Other {
                service: "sessions directory",
                source: e.into(),
            })?
            .map_err(|e| StoreError::Other {
                service: "sessions directory",
                source: e.into(),
            })
    }
}

/// The controller's record of a session document (the document is a local file, read whole:
/// its token goes no further than here).
fn record(d: SessionDoc) -> SessionRecord {
    SessionRecord {
        internal_status: d.internal(),
        keep_alive: d.keep_alive,
        expires_at: Some(d.expires_at).filter(|e| *e > 0),
        project_id: Some(d.project_id),
        ever_ready: d.ready_at.is_some(),
        ended: d.ended_at.is_some(),
        claim_deadline: d.claim_deadline,
        owner: d.owner,
        owner_until: d.owner_until,
    }
}

impl DirectorySessions {
    /// A conditional update: `f` changes the document and says whether to write it. Whether
    /// it was written, and the document as it is afterwards; `None`: there is no document
    /// (a condition that fails, as in DynamoDB).
    async fn conditional(
        &self,
        id: &str,
        f: impl FnOnce(&mut SessionDoc) -> bool + Send + 'static,
    ) -> Result<Option<(bool, SessionDoc)>, StoreError> {
        let id = id.to_owned();
        self.blocking(
            move |s| match s.update::<std::convert::Infallible>(&id, |d| Ok(f(d))) {
                Ok(r) => Ok(Some(r.unwrap_or_else(|never| match never {}))),
                Err(DocError::Missing(_)) => Ok(None),
                Err(e) => Err(e),
            },
        )
        .await
    }

    /// Whether a [`Self::conditional`] update wrote.
    async fn written(
        &self,
        id: &str,
        f: impl FnOnce(&mut SessionDoc) -> bool + Send + 'static,
    ) -> Result<bool, StoreError> {
        Ok(self.conditional(id, f).await?.is_some_and(|(w, _)| w))
    }
}

#[async_trait::async_trait]
impl ServedSessions for DirectorySessions {
    async fn load(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        let id = id.to_owned();
        let doc = self.blocking(move |s| s.get(&id)).await?;
        Ok(doc.map(record))
    }

    async fn take(&self, id: &str, t: &Take<'_>) -> Result<TakeResult, StoreError> {
        let (owner, task) = (t.owner.to_owned(), t.task.map(str::to_owned));
        let (until, now) = (t.until, t.now);
        let taken = self
            .conditional(id, move |d| {
                d.take(&Take {
                    owner: &owner,
                    until,
                    task: task.as_deref(),
                    now,
                })
            })
            .await;
        Ok(match taken? {
            Some((true, _)) => TakeResult::Taken,
            Some((false, d)) => TakeResult::Refused(Some(record(d))),
            None => TakeResult::Refused(None),
        })
    }

    async fn keep_owner(&self, id: &str, owner: &str, until: u64) -> Result<bool, StoreError> {
        let owner = owner.to_owned();
        self.written(id, move |d| d.keep_owner(&owner, until)).await
    }

    async fn give_up(&self, id: &str, owner: &str) -> Result<bool, StoreError> {
        let owner = owner.to_owned();
        self.written(id, move |d| d.give_up(&owner)).await
    }

    async fn mark_ready(&self, id: &str, u: &ReadyUpdate) -> Result<ReadyResult, StoreError> {
        let u = u.clone();
        let done = self
            .conditional(id, move |d| {
                if !d.pending() || !d.owned_by(&u.owner) {
                    return false;
                }
                d.set_status(InternalStatus::Ready);
                d.owner_until = None;
                d.public_ip = Some(u.public_ip.clone());
                d.private_ip = Some(u.private_ip.clone());
                d.proxy_port = Some(u.proxy_port);
                d.uploads_dir = u.uploads_dir.clone();
                d.ready_at = Some(u.at.clone());
                d.updated_at = Some(u.at.clone());
                if u.task_arn.is_some() {
                    d.ecs_task_arn = u.task_arn.clone();
                }
                true
            })
            .await?;
        Ok(match done {
            Some((true, _)) => ReadyResult::Ready,
            Some((false, d)) if d.pending() => ReadyResult::Lost,
            Some((false, d)) => ReadyResult::NotPending(d.internal()),
            None => ReadyResult::NotPending(None),
        })
    }

    async fn mark_terminal(&self, id: &str, t: &TerminalUpdate<'_>) -> Result<bool, StoreError> {
        let (owner, status, reason, at) = (
            t.owner.to_owned(),
            t.status,
            t.reason.map(str::to_owned),
            t.at.to_owned(),
        );
        self.written(id, move |d| {
            if d.internal().is_some_and(InternalStatus::is_terminal) || !d.owned_by(&owner) {
                return false;
            }
            d.set_status(status);
            d.updated_at = Some(at.clone());
            if reason.is_some() {
                d.termination_reason = reason;
            }
            true
        })
        .await
    }

    async fn end_unserved(&self, id: &str, now: u64, at: &str) -> Result<bool, StoreError> {
        let at = at.to_owned();
        self.written(id, move |d| d.end_unserved(now, &at)).await
    }

    async fn mark_ended(&self, id: &str, e: &EndedUpdate<'_>) -> Result<bool, StoreError> {
        let (owner, now, bytes, at) = (e.owner.to_owned(), e.now, e.proxy_bytes, e.at.to_owned());
        self.written(id, move |d| {
            if !d.may_end(&owner, now) {
                return false;
            }
            d.proxy_bytes = Some(bytes);
            d.ended_at = Some(at.clone());
            d.updated_at = Some(at);
            true
        })
        .await
    }

    async fn set_downloads_in_progress(
        &self,
        id: &str,
        u: &DownloadsUpdate<'_>,
    ) -> Result<bool, StoreError> {
        let (owner, now, count) = (u.owner.to_owned(), u.now, u.count);
        self.written(id, move |d| d.set_downloads_in_progress(&owner, now, count))
            .await
    }

    async fn set_handoff(&self, id: &str, u: &HandoffUpdate<'_>) -> Result<bool, StoreError> {
        let (owner, now, handoff) = (u.owner.to_owned(), u.now, u.handoff.cloned());
        self.written(id, move |d| d.set_handoff(&owner, now, handoff.clone()))
            .await
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use wallcrawler_contract::claim::Claim;

    /// A claims directory, made, and a waiter on it that looks only when woken (or hourly).
    fn dir_claims(dir: &std::path::Path) -> (DirQueue, DirClaims) {
        let queue = DirQueue::new(dir);
        queue.init().unwrap();
        let claims =
            DirClaims::new(queue.clone(), "one".into()).rechecking_every(Duration::from_secs(3600));
        (queue, claims)
    }

    #[tokio::test]
    async fn a_claim_sent_while_a_controller_waits_is_taken_on_the_directory_s_change() {
        let d = tempfile::tempdir().unwrap();
        let (queue, claims) = dir_claims(d.path());
        let (received, ()) = tokio::join!(within_30_s(&claims), async {
            // The receive above has looked once and waits.
            tokio::task::yield_now().await;
            queue.send(&Claim::new("sess_1", "proj_1")).unwrap();
        });
        let received = received.expect("the claim");
        assert_eq!(Claim::parse(&received.body).unwrap().session_id, "sess_1");
    }

    #[tokio::test]
    async fn a_claim_handed_back_with_a_wait_is_taken_when_it_becomes_visible() {
        let d = tempfile::tempdir().unwrap();
        let (queue, claims) = dir_claims(d.path());
        let name = queue.send(&Claim::new("sess_1", "proj_1")).unwrap();
        assert!(queue.take("other").unwrap().is_some());
        queue
            .put_back(&name, "other", Duration::from_millis(300))
            .unwrap();
        let received = within_30_s(&claims).await;
        assert_eq!(received.expect("the claim, once visible").receipt, name);
    }

    /// A receive of an hour, given 30 s: `None` unless something wakes it sooner.
    async fn within_30_s(claims: &DirClaims) -> Option<Received> {
        let hour = claims.receive(Duration::from_secs(3600));
        tokio::time::timeout(Duration::from_secs(30), hour)
            .await
            .ok()
            .map(|r| r.unwrap().expect("a claim, not the hour's end"))
    }

    /// `store` created in the session directory `dir`.
    pub(crate) fn pending(store: &SessionDoc, dir: &std::path::Path) {
        wallcrawler_local::session_dir::DirStore::new(dir)
            .create(store)
            .unwrap();
    }

    /// A PROVISIONING session of `proj_1`.
    pub(crate) fn doc(id: &str) -> SessionDoc {
        let mut d = SessionDoc {
            session_id: id.into(),
            project_id: "proj_1".into(),
            created_at: "2026-01-01T00:00:00.000Z".into(),
            expires_at: 5_000,
            ..Default::default()
        };
        d.set_status(InternalStatus::Provisioning);
        d
    }

    fn take<'a>(owner: &'a str, now: u64) -> Take<'a> {
        Take {
            owner,
            until: now + 60,
            task: Some(owner),
            now,
        }
    }

    fn ready(owner: &str) -> ReadyUpdate {
        ReadyUpdate {
            owner: owner.into(),
            public_ip: "127.0.0.1".into(),
            task_arn: Some(owner.into()),
            private_ip: "127.0.0.1".into(),
            proxy_port: 9,
            uploads_dir: None,
            at: "2026-01-01T00:00:01.000Z".into(),
        }
    }

    /// The directory store's writes, each conditional on the owner: me, another (live), or
    /// another whose lease lapsed.
    #[tokio::test]
    async fn the_directory_store_writes_only_as_the_sessions_owner() {
        let dir = tempfile::tempdir().unwrap();
        pending(&doc("sess_1"), dir.path());
        let s = DirectorySessions::new(dir.path().to_owned());
        assert_eq!(
            s.take("sess_1", &take("a", 100)).await.unwrap(),
            TakeResult::Taken
        );
        // Another controller, while a's lease runs: refused, with the session as it is.
        let TakeResult::Refused(Some(r)) = s.take("sess_1", &take("b", 130)).await.unwrap() else {
            panic!("b took a session a holds");
        };
        assert_eq!((r.owner.as_deref(), r.owner_until), (Some("a"), Some(160)));
        assert_eq!(r.live_owner(130), Some("a"));
        assert_eq!(
            s.mark_ready("sess_1", &ready("b")).await.unwrap(),
            ReadyResult::Lost
        );
        let stop = |owner| TerminalUpdate {
            owner,
            status: InternalStatus::Failed,
            reason: Some("b failed"),
            at: "t",
        };
        assert!(!s.mark_terminal("sess_1", &stop("b")).await.unwrap());
        let end = |owner, now| EndedUpdate {
            owner,
            now,
            proxy_bytes: 7,
            at: "t",
        };
        assert!(!s.mark_ended("sess_1", &end("b", 130)).await.unwrap());
        assert!(!s.keep_owner("sess_1", "b", 999).await.unwrap());
        assert!(!s.give_up("sess_1", "b").await.unwrap());
        let doc = s.store.get("sess_1").unwrap().unwrap();
        assert_eq!(
            doc.internal(),
            Some(InternalStatus::Provisioning),
            "b wrote nothing"
        );
        assert!(doc.ended_at.is_none() && doc.termination_reason.is_none());

        // a's lease lapses (it died): b takes the session over, and a may write nothing.
        assert_eq!(
            s.take("sess_1", &take("b", 161)).await.unwrap(),
            TakeResult::Taken
        );
        assert!(!s.keep_owner("sess_1", "a", 999).await.unwrap());
        assert_eq!(
            s.mark_ready("sess_1", &ready("a")).await.unwrap(),
            ReadyResult::Lost
        );
        assert_eq!(
            s.mark_ready("sess_1", &ready("b")).await.unwrap(),
            ReadyResult::Ready
        );
        let r = s.load("sess_1").await.unwrap().unwrap();
        assert_eq!(
            (r.owner.as_deref(), r.owner_until),
            (Some("b"), None),
            "held for good"
        );
        assert!(!s.mark_terminal("sess_1", &stop("a")).await.unwrap());
        assert!(!s.mark_ended("sess_1", &end("a", u64::MAX)).await.unwrap());
        assert!(s.mark_terminal("sess_1", &stop("b")).await.unwrap());
        assert!(s.mark_ended("sess_1", &end("b", 200)).await.unwrap());
        // Released meanwhile: READY by its owner says so (not lost).
        pending(&self::doc("sess_2"), dir.path());
        assert_eq!(
            s.take("sess_2", &take("c", 100)).await.unwrap(),
            TakeResult::Taken
        );
        s.store
            .update::<()>("sess_2", |d| {
                d.set_status(InternalStatus::Stopped);
                Ok(true)
            })
            .unwrap()
            .unwrap();
        assert_eq!(
            s.mark_ready("sess_2", &ready("c")).await.unwrap(),
            ReadyResult::NotPending(Some(InternalStatus::Stopped))
        );
        assert!(
            !s.give_up("sess_2", "c").await.unwrap(),
            "never given up once over"
        );
        assert!(s.mark_ended("sess_2", &end("c", 100)).await.unwrap());
        assert_eq!(
            s.take("sess_9", &take("c", 100)).await.unwrap(),
            TakeResult::Refused(None),
            "gone"
        );
    }
}
