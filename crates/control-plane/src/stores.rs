//! What the handlers need from the outside world, as narrow async traits: stores for sessions,
//! projects, API keys and contexts, presigned URLs for archives, objects in the contexts bucket
//! (extensions), a task launcher, the token signer and a clock. DynamoDB/S3/ECS implementations are in `aws`, local ones in `local`,
//! in-memory ones for tests in `memory`.

use async_trait::async_trait;
use wallcrawler_contract::SdkStatus;
use wallcrawler_contract::session_doc::SessionDoc;

use crate::error::StoreError;
use crate::model::{ApiKeyRecord, ContextRecord, Record};

/// What every port answers: a value, or an outside service's failure.
pub type StoreResult<T> = Result<T, StoreError>;

/// Session ids (the signatures of the index queries fit on one line with it).
pub type Ids = StoreResult<Vec<String>>;

/// What a conditional write of a session document answers (the signatures of the session
/// stores' writes fit on one line with it).
pub type DocWrite = StoreResult<Cond<SessionDoc>>;

/// Outcome of a conditional write.
#[derive(Debug, Clone, PartialEq)]
pub enum Cond<T> {
    /// The write happened; the record as written.
    Done(T),
    /// The condition did not hold; the current record, when there is one.
    Failed(Option<T>),
}

/// A terminal write: the status, why, and whether the session has ended (`endedAt`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Terminal<'a> {
    /// The terminal status to set (kept when the session is terminal already).
    pub status: wallcrawler_contract::InternalStatus,
    /// `terminationReason`, set with the status.
    pub reason: Option<&'a str>,
    /// Also set a missing `endedAt`.
    pub ended: bool,
}

impl Terminal<'_> {
    /// `status`, with no reason, the session not (yet) ended.
    pub fn status(status: wallcrawler_contract::InternalStatus) -> Self {
        Self {
            status,
            reason: None,
            ended: false,
        }
    }
}

/// A place in a project's listing: a session's `createdAt` and id (the listing's order).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ListPos {
    /// `createdAt`, ISO 8601 (sorts as time).
    pub created_at: String,
    /// `sessionId`: orders sessions created in the same millisecond.
    pub session_id: String,
}

impl ListPos {
    /// Where `d` is in its project's listing.
    pub fn of(d: &SessionDoc) -> Self {
        Self {
            created_at: d.created_at.clone(),
            session_id: d.session_id.clone(),
        }
    }
}

/// Which page of a project's listing: the sessions after `after` (from the first when
/// `None`), `limit` at most.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PageAt {
    /// The last session of the previous page.
    pub after: Option<ListPos>,
    /// The most sessions to answer.
    pub limit: usize,
}

/// What a listing answers (the stores' signatures fit on one line with it).
pub type Listing = StoreResult<SessionPage>;

/// One page of a project's sessions.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionPage {
    /// The sessions, oldest first, as listed ([`listed`]).
    pub sessions: Vec<SessionDoc>,
    /// Where the next page starts; `None` when there is no more.
    pub next: Option<ListPos>,
}

/// What the listing index projects besides the keys (see [`listed`]).
pub use wallcrawler_contract::session::attr::LISTED;

/// A session as the listing index holds it: [`LISTED`] and the keys, nothing else (the
/// in-memory and local stores list through it, as DynamoDB's index does).
pub fn listed(d: SessionDoc) -> SessionDoc {
    SessionDoc {
        session_id: d.session_id,
        project_id: d.project_id,
        created_at: d.created_at,
        status: d.status,
        internal_status: d.internal_status,
        updated_at: d.updated_at,
        started_at: d.started_at,
        ended_at: d.ended_at,
        expires_at: d.expires_at,
        keep_alive: d.keep_alive,
        region: d.region,
        public_ip: d.public_ip,
        proxy_bytes: d.proxy_bytes,
        context_id: d.context_id,
        user_metadata: d.user_metadata,
        ..Default::default()
    }
}

/// Page `at` of `docs` (one project's sessions, in any order): how the stores without an
/// index page.
pub fn page_of(docs: Vec<SessionDoc>, at: PageAt) -> SessionPage {
    let mut docs: Vec<_> = docs
        .into_iter()
        .filter(|d| at.after.as_ref().is_none_or(|a| ListPos::of(d) > *a))
        .collect();
    docs.sort_by_key(ListPos::of);
    let more = docs.len() > at.limit;
    docs.truncate(at.limit);
    SessionPage {
        next: more.then(|| docs.last().map(ListPos::of)).flatten(),
        sessions: docs.into_iter().map(listed).collect(),
    }
}

/// What a project has used: browser minutes and proxy bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// `browserMinutes`: per session, `endedAt` − `startedAt`, rounded up.
    pub browser_minutes: u64,
    /// `proxyBytes`: bytes the sessions' proxies relayed.
    pub proxy_bytes: u64,
}

/// The `wallcrawler-sessions` table.
#[async_trait]
pub trait SessionStore: Send + Sync {
    /// Creates the item; fails the condition if the id exists.
    async fn create(&self, doc: SessionDoc) -> DocWrite;
    /// Strongly consistent read.
    async fn get(&self, id: &str) -> StoreResult<Option<SessionDoc>>;
    /// Up to `limit` of a project's sessions after `after`, oldest first, as the listing index
    /// holds them ([`listed`]: no token, no `connectUrl`), and where the next page starts.
    async fn list_project(&self, project_id: &str, at: PageAt) -> Listing;
    /// Ids of the sessions on context `context_id` that its index does not show ended (no
    /// `endedAt`): DynamoDB's sparse `contextId-index` (`INCLUDE` of `endedAt` only), which is
    /// eventually consistent, so the caller reads each session by key to decide whether it
    /// is still live (and a session created a moment ago may be missing: see
    /// [`ContextStore::delete`]). No scan of the table.
    async fn on_context(&self, context_id: &str) -> Ids;
    /// The session whose READY named `task_arn` (`ecsTaskArn`), if any: how a stopped pool
    /// task, which carries no session in `startedBy`, is traced back to its session.
    async fn find_by_task(&self, task_arn: &str) -> StoreResult<Option<String>>;
    /// CREATING → PROVISIONING with the task's ARN (only from CREATING).
    async fn mark_provisioning(&self, id: &str, task_arn: Option<&str>, at: &str) -> DocWrite;
    /// `to`'s terminal status unless already terminal (then the status is kept); `to.ended`
    /// also sets a missing `endedAt`. `Done` when anything was written.
    async fn mark_terminal(&self, id: &str, to: Terminal<'_>, at: &str) -> DocWrite;
    /// Sets `endedAt` if missing (orphaned tasks).
    async fn mark_ended_if_missing(&self, id: &str, at: &str) -> StoreResult<()>;
    /// Moves `claimDeadline` to `to` (its client polled), on condition that the session is
    /// pending and its deadline earlier ([`SessionDoc::extend_claim`]).
    async fn extend_claim(&self, id: &str, to: u64) -> DocWrite;
    /// Ends a session no browser took in time ([`SessionDoc::end_unserved`]: TIMED_OUT, the
    /// reason, `endedAt`), on condition that it is pending and its deadline before `now`.
    async fn end_unserved(&self, id: &str, now: u64, at: &str) -> DocWrite;
    /// Up to `limit` ids of the sessions whose SDK-visible `status` is `status` and whose
    /// `expiresAt` is before `before` (Unix seconds), earliest expiry first: DynamoDB's
    /// `status-expiresAt-index` (`KEYS_ONLY`, so the caller reads each session by key). How
    /// the sweeper finds sessions to end without a scan.
    async fn expiring(&self, status: SdkStatus, before: u64, limit: usize) -> Ids;
    /// Adds `used` to the project's usage total and marks session `id` counted, both or
    /// neither, on condition that it exists and was not counted yet: `true` when this call
    /// counted it (so a session is counted once however many paths learn that it ended).
    async fn count_usage(&self, id: &str, project_id: &str, used: Usage) -> StoreResult<bool>;
    /// The project's usage total (one read).
    async fn usage(&self, project_id: &str) -> StoreResult<Usage>;
}

/// A table of records addressed by one string key: projects (`wallcrawler-projects`) and API
/// keys (`wallcrawler-api-keys`, keyed by the key's SHA-256 hex) are the same code.
#[async_trait]
pub trait RecordStore<R: Record>: Send + Sync {
    /// The record with this key, if any.
    async fn get(&self, key: &str) -> StoreResult<Option<R>>;
    /// Writes the record, replacing any with the same key.
    async fn put(&self, record: R) -> StoreResult<()>;
}

/// The `wallcrawler-api-keys` table: records, and revocation.
#[async_trait]
pub trait KeyStore: RecordStore<ApiKeyRecord> {
    /// Sets ACTIVE/INACTIVE; false when there is no such key.
    async fn set_status(&self, hash: &str, status: &str) -> StoreResult<bool>;
}

/// Outcome of [`SlotStore::take`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Slot {
    /// The session holds one of the project's slots (also when it already did).
    Taken,
    /// Every slot is held; by these sessions.
    Full(Vec<String>),
}

/// A project's concurrency slots: the set of its active sessions' ids, changed only by
/// conditional writes (see the `limits` module).
#[async_trait]
pub trait SlotStore: Send + Sync {
    /// Adds `session_id` to the project's set if it holds fewer than `limit` ids (or holds this
    /// one already: a retry is idempotent).
    async fn take(&self, project_id: &str, session_id: &str, limit: u64) -> StoreResult<Slot>;
    /// Removes `session_id` from the project's set (idempotent).
    async fn give_back(&self, project_id: &str, session_id: &str) -> StoreResult<()>;
    /// How many slots the project holds (a strongly consistent read): of simultaneous takes,
    /// the k-th reads at least k afterwards.
    async fn held(&self, project_id: &str) -> StoreResult<u64>;
}

/// Outcome of [`ContextStore::take_writer`].
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
#[async_trait]
pub trait ContextStore: Send + Sync {
    /// Writes a new context record.
    async fn create(&self, c: ContextRecord) -> StoreResult<()>;
    /// The context with this id, if any.
    async fn get(&self, id: &str) -> StoreResult<Option<ContextRecord>>;
    /// Sets the context's `updatedAt` to `at` (nothing when there is no such context).
    async fn touch(&self, id: &str, at: &str) -> StoreResult<()>;
    /// Removes the context record on condition that it has no writer, or that its writer is
    /// `writer` (one seen to have ended). `false`, and nothing removed, when the condition
    /// fails (a session took the lease meanwhile); `true` also when there was no record.
    async fn delete(&self, id: &str, writer: Option<&str>) -> StoreResult<bool>;
    /// Makes `session_id` the context's writer (`writerSessionId`), on condition that there is
    /// none, that it is this session already, or that it is `replacing` (a writer seen to have
    /// ended).
    async fn take_writer(&self, id: &str, sid: &str, replacing: Option<&str>)
    -> StoreResult<Lease>;
    /// Clears the writer on condition that it is `session_id` (idempotent).
    async fn release_writer(&self, id: &str, session_id: &str) -> StoreResult<()>;
}

/// Where context archives live.
#[async_trait]
pub trait ArchiveUrls: Send + Sync {
    /// A URL accepting one `PUT` of the archive at `key`, valid for `ttl_seconds`.
    async fn presign_put(&self, key: &str, ttl_seconds: u64) -> StoreResult<String>;
    /// A URL answering a `GET` of the object at `key` (a session's file: a recording's
    /// segment, its MP4), valid for `ttl_seconds`.
    async fn presign_get(&self, key: &str, ttl_seconds: u64) -> StoreResult<String>;
    /// Removes the archive at `key`; a missing archive is not an error.
    async fn delete(&self, key: &str) -> StoreResult<()>;
}

pub use crate::zips::Zip;

/// Objects by key in the contexts bucket (a directory locally): extension archives and their
/// records, sessions' files. Keys are made by the platform (never taken from a request as
/// they are).
#[async_trait]
pub trait ObjectStore: Send + Sync {
    /// Writes `body` at `key`, replacing what was there.
    async fn put(&self, key: &str, body: axum::body::Bytes) -> StoreResult<()>;
    /// The object at `key`, if any.
    async fn get(&self, key: &str) -> StoreResult<Option<axum::body::Bytes>>;
    /// The object at `key` if it is at most `max` bytes; a larger one is not read
    /// ([`Bounded::TooLarge`]). For objects a client wrote itself (a presigned upload).
    async fn get_at_most(&self, key: &str, max: u64) -> StoreResult<Option<Bounded>>;
    /// Removes the object at `key`; a missing one is not an error.
    async fn delete(&self, key: &str) -> StoreResult<()>;
    /// Whether any object's key starts with `prefix` (a `/`-terminated folder).
    async fn any_under(&self, prefix: &str) -> StoreResult<bool>;
    /// A zip of the objects directly under the folder `prefix` (entries named by the rest of
    /// their key, [`crate::zips::is_entry_name`]), at most `max` bytes of content: its bytes,
    /// or, where large bodies cannot be answered (S3 behind Lambda), written at `zip_key` and
    /// a presigned GET of it.
    async fn zip_under(&self, prefix: &str, zip_key: &str, max: u64) -> StoreResult<Zip>;
    /// The names (the rest of their keys) of at most `max` objects directly under the folder
    /// `prefix`, sorted: a session's log chunks.
    async fn names_under(&self, prefix: &str, max: usize) -> StoreResult<Vec<String>>;
}

/// An object read with a size bound ([`ObjectStore::get_at_most`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bounded {
    /// The whole object, within the bound.
    Whole(axum::body::Bytes),
    /// Larger than the bound; not read.
    TooLarge,
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
    /// Start a controller of its own for this session (a cold start) even where the launcher
    /// keeps a warm pool: its project is beyond its share of the pool (`pool_share`).
    /// Launchers without a pool start one per session anyway.
    pub cold: bool,
    /// The extension archive's key (`extensions/<projectId>/<sha256>.zip`), when the session
    /// was created with one.
    pub extension: Option<String>,
    /// The session's egress (proxy routes, allowed domains), when it has any: sent with the
    /// claim, or in a local cold child's private environment (`SESSION_EGRESS`). Never in the
    /// session item.
    pub egress: Option<wallcrawler_contract::egress::Egress>,
    /// The browser the session asked for (viewport, locales, certificates, ad blocking): with
    /// the claim, or in a cold controller's `SESSION_BROWSER`.
    pub browser: Option<wallcrawler_contract::browser::BrowserSettings>,
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
            extension_key: self.extension.clone(),
            egress: self.egress.clone(),
            browser: self.browser.clone(),
        }
    }
}

/// Starts and stops controller tasks.
#[async_trait]
pub trait Launcher: Send + Sync {
    /// Returns the task's ARN (or local handle).
    async fn launch(&self, spec: LaunchSpec) -> StoreResult<Option<String>>;
    /// Stops the session's task (by ARN when known, else by the session it was started for).
    async fn stop(&self, session_id: &str, task_arn: Option<&str>) -> StoreResult<()>;
    /// Whether a launch (a `cold` one: a controller of its own) may carry secrets, proxy
    /// credentials: whether they reach the controller by a channel only it reads (a claim, a
    /// local child's environment), not one others may read (an ECS task's overrides, which
    /// anyone allowed `ecs:DescribeTasks` sees). A create whose egress has credentials is
    /// refused where this is false.
    fn carries_secrets(&self, cold: bool) -> bool {
        let _ = cold;
        true
    }
}

/// Signs CDP tokens, and other things the API hands out and must recognise (listing cursors).
#[async_trait]
pub trait Signer: Send + Sync {
    /// A token over `claims` (EdDSA, with the current private key).
    async fn sign(&self, claims: wallcrawler_contract::Claims) -> StoreResult<String>;
    /// A live view credential over `claims` (EdDSA, with the same key as session tokens).
    async fn sign_viewer(
        &self,
        claims: wallcrawler_contract::viewer::ViewerClaims,
    ) -> StoreResult<String>;
    /// An HMAC-SHA256 of `msg` with a key derived from the current private key, base64url.
    async fn mac(&self, msg: &[u8]) -> StoreResult<String>;
}

/// Signs with a fixed key (the local platform, tests).
pub struct StaticSigner(pub wallcrawler_contract::SigningKey);

#[async_trait]
impl Signer for StaticSigner {
    async fn sign(&self, claims: wallcrawler_contract::Claims) -> StoreResult<String> {
        Ok(claims.mint(&self.0))
    }
    async fn sign_viewer(
        &self,
        claims: wallcrawler_contract::viewer::ViewerClaims,
    ) -> StoreResult<String> {
        Ok(claims.mint(&self.0))
    }
    async fn mac(&self, msg: &[u8]) -> StoreResult<String> {
        Ok(self.0.mac(msg))
    }
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
