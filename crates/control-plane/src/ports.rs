//! What the handlers need from the outside world, as narrow traits: stores for sessions,
//! projects, API keys and contexts, presigned URLs for archives, a task launcher, the token
//! signer and a clock. DynamoDB/S3/ECS implementations are in `aws`, local ones in `local`,
//! in-memory ones for tests in `memory`.

use futures_util::future::BoxFuture;
use wallcrawler_contract::session_doc::SessionDoc;

use crate::error::PortError;
use crate::model::{ApiKeyRecord, ContextRecord, Project};

/// What every port answers: a value, or an outside service's failure.
pub type PortResult<T> = Result<T, PortError>;

/// Outcome of a conditional write.
#[derive(Debug, Clone, PartialEq)]
pub enum Cond<T> {
    /// The write happened; the record as written.
    Done(T),
    /// The condition did not hold; the current record, when there is one.
    Failed(Option<T>),
}

/// The `wallcrawler-sessions` table.
pub trait SessionRepo: Send + Sync {
    /// Creates the item; fails the condition if the id exists.
    fn create(&self, doc: SessionDoc) -> BoxFuture<'_, PortResult<Cond<SessionDoc>>>;
    /// Strongly consistent read.
    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, PortResult<Option<SessionDoc>>>;
    /// Every session of a project, oldest first.
    fn list_project<'a>(
        &'a self,
        project_id: &'a str,
    ) -> BoxFuture<'a, PortResult<Vec<SessionDoc>>>;
    /// Sessions that use a context.
    fn list_context<'a>(
        &'a self,
        context_id: &'a str,
    ) -> BoxFuture<'a, PortResult<Vec<SessionDoc>>>;
    /// The session whose READY named `task_arn` (`ecsTaskArn`), if any: how a stopped pool
    /// task, which carries no session in `startedBy`, is traced back to its session.
    fn find_by_task<'a>(&'a self, task_arn: &'a str) -> BoxFuture<'a, PortResult<Option<String>>>;
    /// CREATING → PROVISIONING with the task's ARN (only from CREATING).
    fn mark_provisioning<'a>(
        &'a self,
        id: &'a str,
        task_arn: Option<&'a str>,
        at: &'a str,
    ) -> BoxFuture<'a, PortResult<Cond<SessionDoc>>>;
    /// A terminal status unless already terminal (then the status is kept); `ended` also sets a
    /// missing `endedAt`. `Done` when anything was written.
    fn mark_terminal<'a>(
        &'a self,
        id: &'a str,
        status: wallcrawler_contract::InternalStatus,
        reason: Option<&'a str>,
        at: &'a str,
        ended: bool,
    ) -> BoxFuture<'a, PortResult<Cond<SessionDoc>>>;
    /// Sets `endedAt` if missing (orphaned tasks).
    fn mark_ended_if_missing<'a>(
        &'a self,
        id: &'a str,
        at: &'a str,
    ) -> BoxFuture<'a, PortResult<()>>;
}

/// The `wallcrawler-projects` table.
pub trait ProjectRepo: Send + Sync {
    /// The project with this id, if any.
    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, PortResult<Option<Project>>>;
    /// Writes the project, replacing any with the same id.
    fn put(&self, p: Project) -> BoxFuture<'_, PortResult<()>>;
}

/// The `wallcrawler-api-keys` table, keyed by the key's SHA-256 hex.
pub trait KeyRepo: Send + Sync {
    /// The key record with this hash, if any.
    fn get<'a>(&'a self, hash: &'a str) -> BoxFuture<'a, PortResult<Option<ApiKeyRecord>>>;
    /// Writes the key record, replacing any with the same hash.
    fn put(&self, k: ApiKeyRecord) -> BoxFuture<'_, PortResult<()>>;
    /// Sets ACTIVE/INACTIVE; false when there is no such key.
    fn set_status<'a>(&'a self, hash: &'a str, status: &'a str) -> BoxFuture<'a, PortResult<bool>>;
}

/// Outcome of [`SlotRepo::take`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Slot {
    /// The session holds one of the project's slots (also when it already did).
    Taken,
    /// Every slot is held; by these sessions.
    Full(Vec<String>),
}

/// A project's concurrency slots: the set of its active sessions' ids, changed only by
/// conditional writes (see [`crate::limits`]).
pub trait SlotRepo: Send + Sync {
    /// Adds `session_id` to the project's set if it holds fewer than `limit` ids (or holds this
    /// one already: a retry is idempotent).
    fn take<'a>(
        &'a self,
        project_id: &'a str,
        session_id: &'a str,
        limit: u64,
    ) -> BoxFuture<'a, PortResult<Slot>>;
    /// Removes `session_id` from the project's set (idempotent).
    fn give_back<'a>(
        &'a self,
        project_id: &'a str,
        session_id: &'a str,
    ) -> BoxFuture<'a, PortResult<()>>;
}

/// Outcome of [`ContextRepo::take_writer`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lease {
    /// The session is the context's writer (also when it already was).
    Taken,
    /// Another session holds the lease.
    Held(String),
    /// There is no such context.
    NoContext,
}

/// The `wallcrawler-contexts` table.
pub trait ContextRepo: Send + Sync {
    /// Writes a new context record.
    fn create(&self, c: ContextRecord) -> BoxFuture<'_, PortResult<()>>;
    /// The context with this id, if any.
    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, PortResult<Option<ContextRecord>>>;
    /// Sets the context's `updatedAt` to `at` (nothing when there is no such context).
    fn touch<'a>(&'a self, id: &'a str, at: &'a str) -> BoxFuture<'a, PortResult<()>>;
    /// Removes the context record (idempotent).
    fn delete<'a>(&'a self, id: &'a str) -> BoxFuture<'a, PortResult<()>>;
    /// Makes `session_id` the context's writer (`writerSessionId`), on condition that there is
    /// none, that it is this session already, or that it is `replacing` (a writer seen to have
    /// ended).
    fn take_writer<'a>(
        &'a self,
        id: &'a str,
        session_id: &'a str,
        replacing: Option<&'a str>,
    ) -> BoxFuture<'a, PortResult<Lease>>;
    /// Clears the writer on condition that it is `session_id` (idempotent).
    fn release_writer<'a>(
        &'a self,
        id: &'a str,
        session_id: &'a str,
    ) -> BoxFuture<'a, PortResult<()>>;
}

/// Where context archives live.
pub trait ArchiveUrls: Send + Sync {
    /// A URL accepting one `PUT` of the archive at `key`, valid for `ttl_seconds`.
    fn presign_put<'a>(
        &'a self,
        key: &'a str,
        ttl_seconds: u64,
    ) -> BoxFuture<'a, PortResult<String>>;
    /// Removes the archive at `key`; a missing archive is not an error.
    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, PortResult<()>>;
}

/// What a task needs to know (becomes the controller's environment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchSpec {
    /// The session the task serves (`SESSION_ID`).
    pub session_id: String,
    /// The session's project (`PROJECT_ID`).
    pub project_id: String,
    /// The context: its id, its archive key and whether to persist it at the end.
    pub context: Option<(String, String, bool)>,
    /// Extra variables (keep-alive/expiry are in the session item).
    pub env: Vec<(String, String)>,
}

impl LaunchSpec {
    /// The claim a pool controller takes for this session.
    pub fn claim(&self) -> wallcrawler_contract::claim::Claim {
        use wallcrawler_contract::claim::{Claim, ClaimContext};
        Claim {
            session_id: self.session_id.clone(),
            project_id: self.project_id.clone(),
            context: self
                .context
                .as_ref()
                .map(|(id, key, persist)| ClaimContext {
                    id: id.clone(),
                    key: key.clone(),
                    persist: *persist,
                }),
        }
    }
}

/// Starts and stops controller tasks.
pub trait Launcher: Send + Sync {
    /// Returns the task's ARN (or local handle).
    fn launch(&self, spec: LaunchSpec) -> BoxFuture<'_, PortResult<Option<String>>>;
    /// Stops the session's task (by ARN when known, else by the session it was started for).
    fn stop<'a>(
        &'a self,
        session_id: &'a str,
        task_arn: Option<&'a str>,
    ) -> BoxFuture<'a, PortResult<()>>;
}

/// Signs CDP tokens.
pub trait Signer: Send + Sync {
    /// A token over `claims` (HS256, with the current signing key).
    fn sign(&self, claims: wallcrawler_contract::Claims) -> BoxFuture<'_, PortResult<String>>;
}

/// Time, injectable for tests.
pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch.
    fn now_millis(&self) -> u64;
}

/// The system clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_millis(&self) -> u64 {
        wallcrawler_contract::time::unix_millis()
    }
}
