//! AWS adapters: the SDK clients behind the controller's narrow interfaces (see
//! [`crate::stores`]). SDK types stay in this module.
//!
//! Clients are built once from one shared configuration with bounded retries and timeouts, so a
//! dead dependency is a clear error within seconds, never a hang. `AWS_ENDPOINT_URL` points every
//! client at a local emulator (S3 then uses path-style addressing).

use std::time::Duration;

use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use futures_util::TryFutureExt as _;
use futures_util::future::BoxFuture;
use serde::Deserialize;
use tokio::io::AsyncReadExt;
use tracing::{debug, warn};
use wallcrawler_aws::Failure;
use wallcrawler_aws::item::{self, Item};
use wallcrawler_aws::keys::{FetchMode, KeyFetcher};
use wallcrawler_aws::secrets::{SecretsError, SecretsManagerKeys};
use wallcrawler_contract::session::attr;
use wallcrawler_contract::session_log::record_tagging;
use wallcrawler_contract::{InternalStatus, VerifyingKey};

use crate::stores::{
    ArchiveStore, BoxError, BoxRead, ClaimQueue, Context, DownloadsUpdate, EndedUpdate,
    HandoffUpdate, NetworkLookup, ReadyResult, ReadyUpdate, Received, ServedSessions,
    SessionRecord, StoreError, Take, TakeResult, TaskInterface, TerminalUpdate,
};

/// Size of one multipart upload part (S3's minimum is 5 MiB).
pub const PART_SIZE: usize = 8 * 1024 * 1024;

/// The controller's SDK configuration (the workspace's one, with the task's limits).
pub async fn sdk_config() -> aws_config::SdkConfig {
    wallcrawler_aws::sdk_config(wallcrawler_aws::CallLimits::TASK).await
}

/// A failed SDK call as a store error, classified as the control plane does
/// ([`wallcrawler_aws::classify`]): unreachable, timed out or throttled = `Unavailable`
/// (retried), any other service answer = `Refused`.
fn sdk_error<E, R>(service: &'static str, e: SdkError<E, R>) -> StoreError
where
    E: std::error::Error + ProvideErrorMetadata + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    classified(service, wallcrawler_aws::classify(&e), e.into())
}

/// A failure of `service` as a store error, by its class.
fn classified(service: &'static str, class: Failure, source: BoxError) -> StoreError {
    match class {
        Failure::Transient => StoreError::Unavailable { service, source },
        Failure::Refused => StoreError::Refused { service, source },
        Failure::Other => StoreError::Other { service, source },
    }
}

/// The sessions table.
pub struct DynamoSessions {
    /// The DynamoDB client.
    pub client: aws_sdk_dynamodb::Client,
    /// The sessions table's name.
    pub table: String,
}

impl DynamoSessions {
    /// The adapter for `table`, with a client built from `sdk`.
    pub fn new(sdk: &aws_config::SdkConfig, table: String) -> Self {
        Self {
            client: aws_sdk_dynamodb::Client::new(sdk),
            table,
        }
    }
}

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

/// What the controller reads of the session item ([`attr::TASK_READS`]), leniently where a
/// field may legitimately be absent or written by another tool: every field may be absent (or
/// `NULL`), an unknown `internalStatus` reads as none, `expiresAt` may be a whole float, and
/// `readyAt`/`endedAt` count by presence whatever their type. A field of the wrong type is a
/// malformed item.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct SessionView {
    internal_status: Option<String>,
    keep_alive: Option<bool>,
    #[serde(deserialize_with = "wallcrawler_contract::whole::optional")]
    expires_at: Option<u64>,
    project_id: Option<String>,
    #[serde(deserialize_with = "present")]
    ready_at: bool,
    #[serde(deserialize_with = "present")]
    ended_at: bool,
    #[serde(deserialize_with = "wallcrawler_contract::whole::lenient")]
    claim_deadline: Option<u64>,
    owner: Option<String>,
    #[serde(deserialize_with = "wallcrawler_contract::whole::lenient")]
    owner_until: Option<u64>,
}

/// True for any value: called only when the attribute is there.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    serde::de::IgnoredAny::deserialize(d).map(|_| true)
}

impl From<SessionView> for SessionRecord {
    fn from(v: SessionView) -> Self {
        SessionRecord {
            internal_status: v.internal_status.as_deref().and_then(InternalStatus::parse),
            keep_alive: v.keep_alive.unwrap_or(false),
            expires_at: v.expires_at,
            project_id: v.project_id,
            ever_ready: v.ready_at,
            ended: v.ended_at,
            claim_deadline: v.claim_deadline,
            owner: v.owner,
            owner_until: v.owner_until,
        }
    }
}

/// The session item as the controller's record; a malformed item is an error, never a guess.
fn to_record(i: &Item) -> Result<SessionRecord, StoreError> {
    item::from_item::<SessionView>("session", i)
        .map(SessionRecord::from)
        .map_err(|e| StoreError::Other {
            service: TABLE,
            source: e.into(),
        })
}

const TABLE: &str = "sessions table";

/// The attributes `attrs` of session item `id`, strongly consistent (READY and the end are
/// read back at once). Always projected: the task and gateway roles may read only these
/// attributes (IAM `dynamodb:Attributes`), and a read of the whole item would be refused.
async fn get_session(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    id: &str,
    attrs: &[&str],
) -> Result<Option<Item>, StoreError> {
    let (projection, names) = wallcrawler_aws::projection(attrs);
    let out = client
        .get_item()
        .table_name(table)
        .key(attr::SESSION_ID, s(id))
        .consistent_read(true)
        .projection_expression(projection)
        .set_expression_attribute_names(Some(names))
        .send()
        .await
        .map_err(|e| sdk_error(TABLE, e))?;
    Ok(out.item)
}

/// The sessions table as the connect gateway reads it: one strongly consistent `GetItem` per
/// lookup, only the attributes routing needs.
pub struct DynamoRoutes {
    client: aws_sdk_dynamodb::Client,
    table: String,
}

impl DynamoRoutes {
    /// The adapter for `table`, with a client built from `sdk`.
    pub fn new(sdk: &aws_config::SdkConfig, table: String) -> Self {
        Self {
            client: aws_sdk_dynamodb::Client::new(sdk),
            table,
        }
    }
}

/// The item's routing attributes (any may be absent; `proxyPort` a number).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RouteView {
    #[serde(rename = "internalStatus")]
    internal_status: Option<String>,
    #[serde(rename = "privateIP")]
    private_ip: Option<String>,
    #[serde(
        rename = "proxyPort",
        deserialize_with = "wallcrawler_contract::whole::optional"
    )]
    proxy_port: Option<u64>,
    #[serde(rename = "endedAt", deserialize_with = "present")]
    ended_at: bool,
}

impl crate::gateway::lookup::SessionRoutes for DynamoRoutes {
    fn item<'a>(
        &'a self,
        session_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<crate::gateway::lookup::RouteItem>, StoreError>> {
        Box::pin(async move {
            let got =
                get_session(&self.client, &self.table, session_id, &attr::GATEWAY_READS).await?;
            let Some(i) = got else {
                return Ok(None);
            };
            let v: RouteView = item::from_item("session", &i).map_err(|e| StoreError::Other {
                service: TABLE,
                source: e.into(),
            })?;
            Ok(Some(crate::gateway::lookup::RouteItem {
                internal_status: v.internal_status.unwrap_or_default(),
                private_ip: v.private_ip,
                proxy_port: v.proxy_port.and_then(|p| u16::try_from(p).ok()),
                ended: v.ended_at,
            }))
        })
    }
}

#[async_trait::async_trait]
impl ServedSessions for DynamoSessions {
    async fn load(&self, id: &str) -> Result<Option<SessionRecord>, StoreError> {
        let got = get_session(&self.client, &self.table, id, &attr::TASK_READS).await?;
        got.as_ref().map(to_record).transpose()
    }

    async fn take(&self, id: &str, t: &Take<'_>) -> Result<TakeResult, StoreError> {
        let mut set = String::from("SET #owner = :me, ownerUntil = :until");
        let mut req = self
            .update(id)
            .condition_expression(format!("{PENDING} AND ({FREE})"))
            .expression_attribute_names("#owner", attr::OWNER)
            .expression_attribute_values(":me", s(t.owner))
            .expression_attribute_values(":until", n(t.until))
            .expression_attribute_values(":now", n(t.now));
        req = pending_values(req);
        if let Some(task) = t.task {
            set.push_str(", ecsTaskArn = :task");
            req = req.expression_attribute_values(":task", s(task));
        }
        if written(req.update_expression(set).send().await)? {
            return Ok(TakeResult::Taken);
        }
        // Why not, read again (projected): never `ReturnValuesOnConditionCheckFailure`, whose
        // ALL_OLD hands back the whole item, token included.
        Ok(TakeResult::Refused(self.load(id).await?))
    }

    async fn keep_owner(&self, id: &str, owner: &str, until: u64) -> Result<bool, StoreError> {
        let req = self
            .update(id)
            .condition_expression(format!("{PENDING} AND {OWNED}"))
            .update_expression("SET ownerUntil = :until")
            .expression_attribute_names("#owner", attr::OWNER)
            .expression_attribute_values(":me", s(owner))
            .expression_attribute_values(":until", n(until));
        written(pending_values(req).send().await)
    }

    async fn give_up(&self, id: &str, owner: &str) -> Result<bool, StoreError> {
        let req = self
            .update(id)
            .condition_expression(format!("{PENDING} AND {OWNED}"))
            .update_expression("REMOVE #owner, ownerUntil, ecsTaskArn")
            .expression_attribute_names("#owner", attr::OWNER)
            .expression_attribute_values(":me", s(owner));
        written(pending_values(req).send().await)
    }

    async fn mark_ready(&self, id: &str, u: &ReadyUpdate) -> Result<ReadyResult, StoreError> {
        let mut set = vec![
            "internalStatus = :ready",
            "#st = :running",
            "publicIP = :ip",
            "privateIP = :pip",
            "proxyPort = :port",
            "readyAt = :now",
            "updatedAt = :now",
        ];
        let mut req = self
            .update(id)
            .condition_expression(format!("{PENDING} AND {OWNED}"))
            .expression_attribute_names("#st", attr::STATUS)
            .expression_attribute_names("#owner", attr::OWNER)
            .expression_attribute_values(":me", s(&u.owner))
            .expression_attribute_values(":ready", s(InternalStatus::Ready.as_str()))
            .expression_attribute_values(":running", s(InternalStatus::Ready.sdk_status().as_str()))
            .expression_attribute_values(":ip", s(&u.public_ip))
            .expression_attribute_values(":pip", s(&u.private_ip))
            .expression_attribute_values(":port", AttributeValue::N(u.proxy_port.to_string()))
            .expression_attribute_values(":now", s(&u.at));
        req = pending_values(req);
        if let Some(arn) = &u.task_arn {
            set.push("ecsTaskArn = :arn");
            req = req.expression_attribute_values(":arn", s(arn));
        }
        if let Some(dir) = &u.uploads_dir {
            set.push("uploadsDir = :up");
            req = req.expression_attribute_values(":up", s(dir));
        }
        // The owner of a READY session is its owner for good: no lease any more.
        let expr = format!("SET {} REMOVE ownerUntil", set.join(", "));
        if written(req.update_expression(expr).send().await)? {
            return Ok(ReadyResult::Ready);
        }
        // As in `take`: why not, read again.
        let status = self.load(id).await?.and_then(|r| r.internal_status);
        Ok(match status {
            Some(s) if s.may_become_ready() => ReadyResult::Lost,
            s => ReadyResult::NotPending(s),
        })
    }

    async fn mark_terminal(&self, id: &str, t: &TerminalUpdate<'_>) -> Result<bool, StoreError> {
        let (req, expr) =
            wallcrawler_aws::terminal_update(self.update(id), t.status, t.reason, t.at);
        // The shared write's condition, and only by the session's owner.
        let shared = req.get_condition_expression().clone().unwrap_or_default();
        let req = req
            .condition_expression(format!("({shared}) AND {OWNED}"))
            .expression_attribute_names("#owner", attr::OWNER)
            .expression_attribute_values(":me", s(t.owner));
        written(req.update_expression(expr).send().await)
    }

    async fn end_unserved(&self, id: &str, now: u64, at: &str) -> Result<bool, StoreError> {
        written(
            wallcrawler_aws::unserved_update(self.update(id), now, at)
                .send()
                .await,
        )
    }

    async fn mark_ended(&self, id: &str, e: &EndedUpdate<'_>) -> Result<bool, StoreError> {
        let req = self
            .update(id)
            .condition_expression(format!(
                "attribute_exists(sessionId) AND ({OWNED} OR {FREE})"
            ))
            .update_expression("SET proxyBytes = :b, endedAt = :at, updatedAt = :at")
            .expression_attribute_names("#owner", attr::OWNER)
            .expression_attribute_values(":me", s(e.owner))
            .expression_attribute_values(":now", n(e.now))
            .expression_attribute_values(":b", n(e.proxy_bytes))
            .expression_attribute_values(":at", s(e.at));
        written(req.send().await)
    }

    async fn set_downloads_in_progress(
        &self,
        id: &str,
        u: &DownloadsUpdate<'_>,
    ) -> Result<bool, StoreError> {
        let req = self
            .update(id)
            .condition_expression(format!(
                "attribute_exists(sessionId) AND ({OWNED} OR {FREE})"
            ))
            .update_expression("SET #dl = :n")
            .expression_attribute_names("#owner", attr::OWNER)
            .expression_attribute_names("#dl", attr::DOWNLOADS_IN_PROGRESS)
            .expression_attribute_values(":me", s(u.owner))
            .expression_attribute_values(":now", n(u.now))
            .expression_attribute_values(":n", n(u.count));
        written(req.send().await)
    }

    async fn set_handoff(&self, id: &str, u: &HandoffUpdate<'_>) -> Result<bool, StoreError> {
        let req = self
            .update(id)
            .condition_expression(format!(
                "attribute_exists(sessionId) AND ({OWNED} OR {FREE})"
            ))
            .expression_attribute_names("#owner", attr::OWNER)
            .expression_attribute_names("#h", attr::HANDOFF)
            .expression_attribute_values(":me", s(u.owner))
            .expression_attribute_values(":now", n(u.now));
        let req = match u.handoff {
            Some(h) => {
                let m = std::collections::HashMap::from([
                    ("id".to_owned(), s(&h.id)),
                    ("reason".to_owned(), s(&h.reason)),
                    ("requestedAt".to_owned(), s(&h.requested_at)),
                    ("expiresAt".to_owned(), s(&h.expires_at)),
                ]);
                req.update_expression("SET #h = :h")
                    .expression_attribute_values(":h", AttributeValue::M(m))
            }
            None => req.update_expression("REMOVE #h"),
        };
        written(req.send().await)
    }
}

/// The session is pending (the values from [`pending_values`]).
const PENDING: &str = "internalStatus IN (:c, :p, :s)";
/// `:me` owns the session (`#owner` = `owner`).
const OWNED: &str = "#owner = :me";
/// Nobody else holds the session at `:now`: no owner, `:me`, or a lapsed lease (an owner
/// without a lease wrote READY and holds it for good) — `SessionDoc::live_owner`.
const FREE: &str = "attribute_not_exists(#owner) OR #owner = :me OR ownerUntil < :now";

/// The values of [`PENDING`].
fn pending_values(req: UpdateItemFluentBuilder) -> UpdateItemFluentBuilder {
    req.expression_attribute_values(":c", s(InternalStatus::Creating.as_str()))
        .expression_attribute_values(":p", s(InternalStatus::Provisioning.as_str()))
        .expression_attribute_values(":s", s(InternalStatus::Starting.as_str()))
}

fn n(v: u64) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

type UpdateResult<R> = Result<
    R,
    SdkError<
        aws_sdk_dynamodb::operation::update_item::UpdateItemError,
        aws_sdk_dynamodb::config::http::HttpResponse,
    >,
>;

impl DynamoSessions {
    /// An `UpdateItem` of session `id`.
    fn update(&self, id: &str) -> UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.table)
            .key(attr::SESSION_ID, s(id))
    }
}

/// A conditional `UpdateItem`'s outcome: whether it wrote (`false`: its condition failed).
fn written<R>(r: UpdateResult<R>) -> Result<bool, StoreError> {
    match r {
        Ok(_) => Ok(true),
        Err(e)
            if e.as_service_error()
                .is_some_and(|se| se.is_conditional_check_failed_exception()) =>
        {
            Ok(false)
        }
        Err(e) => Err(sdk_error(TABLE, e)),
    }
}

/// The contexts bucket.
pub struct S3Archives {
    /// The S3 client.
    pub client: aws_sdk_s3::Client,
    /// The contexts bucket's name.
    pub bucket: String,
}

impl S3Archives {
    /// The adapter for `bucket`, with a client built from `sdk`.
    pub fn new(sdk: &aws_config::SdkConfig, bucket: String) -> Self {
        Self {
            client: wallcrawler_aws::s3_client(sdk),
            bucket,
        }
    }
}

const BUCKET: &str = "contexts bucket";

/// Reads until `buf` holds `limit` bytes or the stream ends.
async fn fill(body: &mut BoxRead, limit: usize) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(limit);
    while buf.len() < limit {
        let n = (&mut *body)
            .take((limit - buf.len()) as u64)
            .read_to_end(&mut buf)
            .await?;
        if n == 0 {
            break;
        }
    }
    Ok(buf)
}

#[async_trait::async_trait]
impl ArchiveStore for S3Archives {
    async fn open(&self, key: &str) -> Result<Option<BoxRead>, StoreError> {
        match wallcrawler_aws::get_object(&self.client, &self.bucket, key).await {
            Ok(Some(out)) => Ok(Some(Box::pin(out.body.into_async_read()) as BoxRead)),
            Ok(None) => Ok(None),
            // S3 answers a missing key so to a role that may not list the bucket.
            Err(e) if e.as_service_error().and_then(|se| se.code()) == Some("AccessDenied") => {
                Err(StoreError::Refused {
                    service: BUCKET,
                    source: Box::new(Context {
                        what: "reading the context's archive was denied (AccessDenied; for a \
                               missing archive too unless the task role may s3:ListBucket the \
                               bucket)",
                        source: e.into(),
                    }),
                })
            }
            Err(e) => Err(sdk_error(BUCKET, e)),
        }
    }

    async fn put(&self, key: &str, mut body: BoxRead) -> Result<u64, StoreError> {
        let first = fill(&mut body, PART_SIZE).await.map_err(read_error)?;
        if first.len() < PART_SIZE {
            let n = first.len() as u64;
            self.client
                .put_object()
                .bucket(&self.bucket)
                .key(key)
                .set_tagging(record_tagging(key).map(str::to_owned))
                .body(ByteStream::from(first))
                .send()
                .await
                .map_err(|e| sdk_error(BUCKET, e))?;
            return Ok(n);
        }
        let created = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .set_tagging(record_tagging(key).map(str::to_owned))
            .send()
            .await
            .map_err(|e| sdk_error(BUCKET, e))?;
        let upload_id = created.upload_id().unwrap_or_default();
        let result = self.upload_parts(key, upload_id, first, body).await;
        if result.is_err() {
            self.abort(key, upload_id).await;
        }
        result
    }
}

impl S3Archives {
    /// The parts of a multipart upload, `first` and then the rest of `body`, completed.
    async fn upload_parts(
        &self,
        key: &str,
        upload_id: &str,
        first: Vec<u8>,
        mut body: BoxRead,
    ) -> Result<u64, StoreError> {
        let mut parts = Vec::new();
        let mut total = 0u64;
        let mut chunk = first;
        let mut number = 1;
        loop {
            total += chunk.len() as u64;
            let out = self
                .client
                .upload_part()
                .bucket(&self.bucket)
                .key(key)
                .upload_id(upload_id)
                .part_number(number)
                .body(ByteStream::from(chunk))
                .send()
                .await
                .map_err(|e| sdk_error(BUCKET, e))?;
            parts.push(
                CompletedPart::builder()
                    .set_e_tag(out.e_tag().map(str::to_owned))
                    .part_number(number)
                    .build(),
            );
            debug!(part = number, total, "uploaded profile part");
            chunk = fill(&mut body, PART_SIZE).await.map_err(read_error)?;
            if chunk.is_empty() {
                break;
            }
            number += 1;
        }
        let completed = CompletedMultipartUpload::builder()
            .set_parts(Some(parts))
            .build();
        self.client
            .complete_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(upload_id)
            .multipart_upload(completed)
            .send()
            .await
            .map_err(|e| sdk_error(BUCKET, e))?;
        Ok(total)
    }

    /// Drops an incomplete multipart upload: the previous archive stays, never replaced by a
    /// part of a new one.
    async fn abort(&self, key: &str, upload_id: &str) {
        let aborted = self
            .client
            .abort_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(upload_id)
            .send()
            .await;
        if let Err(e) = aborted {
            warn!(error = %DisplayErrorContext(&e), "aborting the incomplete upload failed");
        }
    }
}

/// A failure reading the archive stream being uploaded (the packer's side).
fn read_error(e: std::io::Error) -> StoreError {
    StoreError::Other {
        service: BUCKET,
        source: Context {
            what: "reading the archive",
            source: e.into(),
        }
        .into(),
    }
}

/// The public key secret in Secrets Manager: the workspace's one fetcher
/// ([`SecretsManagerKeys`]), its failures as [`StoreError`]s.
pub struct SecretsManagerSecret(pub SecretsManagerKeys<VerifyingKey>);

const SECRETS: &str = "Secrets Manager";

impl KeyFetcher for SecretsManagerSecret {
    type Key = VerifyingKey;
    type Error = StoreError;

    fn fetch(&self, mode: FetchMode) -> BoxFuture<'_, Result<Vec<VerifyingKey>, StoreError>> {
        Box::pin(self.0.fetch(mode).map_err(|e| {
            match e {
                SecretsError::Call { failure, source } => classified(SECRETS, failure, source),
                SecretsError::Unusable(e) => StoreError::Other {
                    service: SECRETS,
                    source: Context {
                        what: "the AWSCURRENT secret is unusable",
                        source: e.into(),
                    }
                    .into(),
                },
            }
        }))
    }
}

/// The pool's claims in an SQS queue.
pub struct SqsClaims {
    /// The SQS client.
    pub client: aws_sdk_sqs::Client,
    /// The claims queue's URL.
    pub queue_url: String,
    /// How long a received claim stays invisible to other controllers.
    pub visibility: Duration,
}

const SQS: &str = "SQS queue";
/// SQS's longest long poll.
const SQS_MAX_WAIT: Duration = Duration::from_secs(20);

impl SqsClaims {
    /// `ChangeMessageVisibility`: the claim is visible again `after` from now.
    async fn visible_in(&self, receipt: &str, after: Duration) -> Result<(), StoreError> {
        self.client
            .change_message_visibility()
            .queue_url(&self.queue_url)
            .receipt_handle(receipt)
            .visibility_timeout(after.as_secs().min(43_200) as i32)
            .send()
            .await
            .map_err(|e| sdk_error(SQS, e))?;
        Ok(())
    }

    async fn delete(&self, receipt: &str) -> Result<(), StoreError> {
        self.client
            .delete_message()
            .queue_url(&self.queue_url)
            .receipt_handle(receipt)
            .send()
            .await
            .map_err(|e| sdk_error(SQS, e))?;
        Ok(())
    }
}

#[async_trait::async_trait]
impl ClaimQueue for SqsClaims {
    async fn receive(&self, wait: Duration) -> Result<Option<Received>, StoreError> {
        let answer = self
            .client
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(1)
            .wait_time_seconds(wait.min(SQS_MAX_WAIT).as_secs() as i32)
            .visibility_timeout(self.visibility.as_secs().min(43_200) as i32)
            .send()
            .await
            .map_err(|e| sdk_error(SQS, e))?;
        Ok(answer.messages().first().and_then(|m| {
            Some(Received {
                body: m.body()?.as_bytes().to_vec(),
                receipt: m.receipt_handle()?.to_owned(),
            })
        }))
    }
    async fn complete(&self, receipt: &str) -> Result<(), StoreError> {
        self.delete(receipt).await
    }
    async fn discard(&self, receipt: &str) -> Result<(), StoreError> {
        self.delete(receipt).await
    }
    async fn poison(&self, receipt: &str) -> Result<(), StoreError> {
        self.visible_in(receipt, Duration::ZERO).await
    }
    async fn keep(&self, receipt: &str, more: Duration) -> Result<(), StoreError> {
        self.visible_in(receipt, more).await
    }
    async fn hand_back(&self, receipt: &str, after: Duration) -> Result<(), StoreError> {
        self.visible_in(receipt, after).await
    }
}

/// Scale-in protection through the ECS API (`UpdateTaskProtection`), for a task on the task
/// API: its client signs with the session's credentials.
pub struct EcsProtection {
    /// The ECS client.
    pub client: aws_sdk_ecs::Client,
}

const ECS: &str = "ECS API";

#[async_trait::async_trait]
impl crate::stores::TaskProtection for EcsProtection {
    async fn protect(&self, task_arn: &str, minutes: u64) -> Result<(), StoreError> {
        let out = self
            .client
            .update_task_protection()
            .cluster(cluster_of(task_arn).unwrap_or_default())
            .tasks(task_arn)
            .protection_enabled(true)
            .expires_in_minutes(minutes.min(i32::MAX as u64) as i32)
            .send()
            .await
            .map_err(|e| sdk_error(ECS, e))?;
        // A refusal per task comes as a failure in a 200 (its reason names the cause).
        match out.failures().first() {
            None => Ok(()),
            Some(f) => Err(StoreError::Refused {
                service: ECS,
                source: format!(
                    "{}: {}",
                    f.reason().unwrap_or("no reason given"),
                    f.detail().unwrap_or_default()
                )
                .into(),
            }),
        }
    }
}

/// The cluster a task ARN names: `arn:…:ecs:<region>:<account>:task/<cluster>/<task id>` (the
/// form every Fargate task has).
fn cluster_of(task_arn: &str) -> Option<&str> {
    let (_, resource) = task_arn.split_once(":task/")?;
    let (cluster, id) = resource.split_once('/')?;
    (!cluster.is_empty() && !id.is_empty() && !id.contains('/')).then_some(cluster)
}

/// EC2's view of the task's network interface.
pub struct Ec2Network {
    /// The EC2 client.
    pub client: aws_sdk_ec2::Client,
}

#[async_trait::async_trait]
impl NetworkLookup for Ec2Network {
    async fn public_ip_of(&self, iface: &TaskInterface) -> Result<Option<String>, StoreError> {
        let filter = |name: &str, value: &str| {
            aws_sdk_ec2::types::Filter::builder()
                .name(name)
                .values(value)
                .build()
        };
        // The MAC address names this task's interface; the private address with it keeps
        // a stale or reused MAC from matching anything else.
        let out = self
            .client
            .describe_network_interfaces()
            .filters(filter("mac-address", &iface.mac))
            .filters(filter("addresses.private-ip-address", &iface.private_ip))
            .send()
            .await
            .map_err(|e| sdk_error("EC2", e))?;
        Ok(public_ip_of(out.network_interfaces(), iface))
    }
}

/// The public address of the interface that is `iface` among `found` (matched again here, in
/// case a filter was ignored).
fn public_ip_of(
    found: &[aws_sdk_ec2::types::NetworkInterface],
    iface: &TaskInterface,
) -> Option<String> {
    found
        .iter()
        .filter(|ni| {
            ni.mac_address()
                .is_some_and(|m| m.eq_ignore_ascii_case(&iface.mac))
                && ni
                    .private_ip_addresses()
                    .iter()
                    .any(|a| a.private_ip_address() == Some(iface.private_ip.as_str()))
        })
        .find_map(|ni| {
            ni.association()
                .and_then(|a| a.public_ip())
                .map(str::to_owned)
        })
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::primitives::Blob;
    use tokio::io::AsyncWriteExt;

    use super::*;

    #[test]
    fn a_tasks_cluster_is_read_from_its_arn() {
        assert_eq!(
            cluster_of("arn:aws:ecs:eu-west-1:123456789012:task/wc-pool/0123abcd"),
            Some("wc-pool")
        );
        for arn in [
            "arn:aws:ecs:eu-west-1:123456789012:task/0123abcd",
            "arn:aws:ecs:eu-west-1:123456789012:task//0123abcd",
            "arn:aws:ecs:eu-west-1:123456789012:task/wc/a/b",
            "pool-1",
        ] {
            assert_eq!(cluster_of(arn), None, "{arn}");
        }
    }

    /// An S3 endpoint on loopback answering every request 403 AccessDenied, as S3 answers a
    /// `GetObject` of a missing key to a role without `s3:ListBucket`.
    async fn denying_s3() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>AccessDenied</Code>\
                        <Message>Access Denied</Message><RequestId>r</RequestId></Error>";
            while let Ok((mut conn, _)) = listener.accept().await {
                let mut head = vec![0u8; 8192];
                let _ = conn.read(&mut head).await;
                let answer = format!(
                    "HTTP/1.1 403 Forbidden\r\ncontent-type: application/xml\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(answer.as_bytes()).await;
            }
        });
        format!("http://{addr}")
    }

    /// `UpdateTaskProtection` for exactly the task's own ARN in its own cluster; a refusal of
    /// ECS's (a failure in a 200) is an error naming its reason.
    #[tokio::test]
    async fn scale_in_protection_names_the_tasks_own_arn_and_a_refusal_says_why() {
        use crate::stores::TaskProtection as _;
        use crate::task_api::tests::{answer, stub_api};
        const ARN: &str = "arn:aws:ecs:us-east-1:123456789012:task/wc-pool/0123abcd";
        let protected = serde_json::json!({
            "protectedTasks": [{"taskArn": ARN, "protectionEnabled": true}],
            "failures": [],
        });
        let refused = serde_json::json!({
            "protectedTasks": [],
            "failures": [{"arn": ARN, "reason": "TASK_NOT_VALID", "detail": "not in a service"}],
        });
        let (base, asked) = stub_api(vec![
            answer("200 OK", &protected.to_string()),
            answer("200 OK", &refused.to_string()),
        ])
        .await;
        let sdk = aws_config::SdkConfig::builder()
            .endpoint_url(base)
            .region(aws_config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_s3::config::SharedCredentialsProvider::new(
                aws_sdk_s3::config::Credentials::for_tests(),
            ))
            .behavior_version(aws_config::BehaviorVersion::latest())
            .build();
        let ecs = EcsProtection {
            client: aws_sdk_ecs::Client::new(&sdk),
        };
        ecs.protect(ARN, 61).await.unwrap();
        let e = ecs.protect(ARN, 61).await.unwrap_err();
        assert!(matches!(e, StoreError::Refused { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "ECS API refused the request: TASK_NOT_VALID: not in a service"
        );
        let asked = asked.lock().unwrap();
        let body = asked[0]
            .split_once('{')
            .map(|(_, b)| format!("{{{b}"))
            .unwrap();
        let sent: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            sent,
            serde_json::json!({
                "cluster": "wc-pool",
                "tasks": [ARN],
                "protectionEnabled": true,
                "expiresInMinutes": 61,
            })
        );
    }

    #[tokio::test]
    async fn a_denied_archive_read_names_the_missing_list_permission() {
        let sdk = aws_config::SdkConfig::builder()
            .endpoint_url(denying_s3().await)
            .region(aws_config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_s3::config::SharedCredentialsProvider::new(
                aws_sdk_s3::config::Credentials::for_tests(),
            ))
            .behavior_version(aws_config::BehaviorVersion::latest())
            .build();
        let archives = S3Archives::new(&sdk, "contexts".into());
        let e = match archives.open("proj_1/ctx_1/profile.tar.gz").await {
            Err(e) => e,
            Ok(_) => panic!("a denied read is not a missing archive"),
        };
        assert!(matches!(e, StoreError::Refused { .. }), "{e:?}");
        let text = crate::stores::Chain(&e).to_string();
        assert!(
            text.starts_with(
                "contexts bucket refused the request: reading the context's archive \
                              was denied (AccessDenied; for a missing archive too unless the task \
                              role may s3:ListBucket the bucket)"
            ),
            "{text}"
        );
    }

    /// What a DynamoDB client sent and was answered, as text: an interceptor on the client.
    #[derive(Debug, Clone, Default)]
    struct Wire {
        sent: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
        answered: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    }

    fn text(b: Option<&[u8]>) -> String {
        String::from_utf8_lossy(b.unwrap_or_default()).into_owned()
    }

    impl aws_sdk_dynamodb::config::Intercept for Wire {
        fn name(&self) -> &'static str {
            "wire"
        }

        fn read_before_transmit(
            &self,
            ctx: &aws_sdk_dynamodb::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
            _: &aws_sdk_dynamodb::config::RuntimeComponents,
            _: &mut aws_sdk_dynamodb::config::ConfigBag,
        ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
            let target = ctx.request().headers().get("x-amz-target").unwrap_or("");
            let body = text(ctx.request().body().bytes());
            self.sent.lock().unwrap().push(format!("{target} {body}"));
            Ok(())
        }

        fn read_after_deserialization(
            &self,
            ctx: &aws_sdk_dynamodb::config::interceptors::AfterDeserializationInterceptorContextRef<
                '_,
            >,
            _: &aws_sdk_dynamodb::config::RuntimeComponents,
            _: &mut aws_sdk_dynamodb::config::ConfigBag,
        ) -> Result<(), aws_sdk_dynamodb::error::BoxError> {
            self.answered
                .lock()
                .unwrap()
                .push(text(ctx.response().body().bytes()));
            Ok(())
        }
    }

    /// A pending session item in moto as the API writes it, token and `connectUrl` included,
    /// held by `owner` until far in the future.
    async fn pending_item(admin: &aws_sdk_dynamodb::Client, table: &str, id: &str, owner: &str) {
        admin
            .put_item()
            .table_name(table)
            .set_item(Some(item(vec![
                (attr::SESSION_ID, s(id)),
                (attr::INTERNAL_STATUS, s("PROVISIONING")),
                (attr::STATUS, s("PENDING")),
                (attr::PROJECT_ID, s("proj_1")),
                (attr::EXPIRES_AT, n("4000000000")),
                (attr::SIGNING_KEY, s("SECRET-TOKEN-of-the-victim")),
                (
                    attr::CONNECT_URL,
                    s("ws://gw.example/?signingKey=SECRET-TOKEN-of-the-victim"),
                ),
                (attr::OWNER, s(owner)),
                (attr::OWNER_UNTIL, n("4000000000")),
            ])))
            .send()
            .await
            .unwrap();
    }

    /// The controller's reads of a session item (at start, after a refused take, after a
    /// refused READY) and the gateway's, against moto through the real SDK: nothing sent asks
    /// for the token or `connectUrl` or for the old item on a failed condition, every read is
    /// projected, nothing answered carries the token, and READY writes no `connectUrl`.
    #[tokio::test]
    async fn no_read_of_a_session_item_asks_for_or_receives_its_token() {
        let sdk = wallcrawler_testkit::moto::sdk_config().await;
        let admin = aws_sdk_dynamodb::Client::new(&sdk);
        let table =
            wallcrawler_testkit::tables::create(&sdk, &wallcrawler_testkit::tables::SESSIONS).await;
        pending_item(&admin, &table, "sess_held", "arn:other").await;
        pending_item(&admin, &table, "sess_free", "arn:me").await;

        let wire = Wire::default();
        let client = aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::config::Builder::from(&sdk)
                .interceptor(wire.clone())
                .build(),
        );
        let store = DynamoSessions {
            client: client.clone(),
            table: table.clone(),
        };
        let r = store.load("sess_held").await.unwrap().expect("the item");
        assert_eq!(r.owner.as_deref(), Some("arn:other"));
        assert_eq!(r.project_id.as_deref(), Some("proj_1"));
        let take = Take {
            owner: "arn:me",
            until: 4_000_000_100,
            task: Some("arn:me"),
            now: 1_700_000_000,
        };
        let TakeResult::Refused(Some(r)) = store.take("sess_held", &take).await.unwrap() else {
            panic!("another owner holds it");
        };
        assert_eq!(r.internal_status, Some(InternalStatus::Provisioning));
        let ready = ReadyUpdate {
            owner: "arn:me".into(),
            public_ip: "203.0.113.9".into(),
            task_arn: Some("arn:me".into()),
            private_ip: "10.0.0.9".into(),
            proxy_port: 9223,
            uploads_dir: None,
            at: "2026-01-01T00:00:01.000Z".into(),
        };
        let lost = store.mark_ready("sess_held", &ready).await.unwrap();
        assert!(matches!(lost, ReadyResult::Lost), "{lost:?}");
        let done = store.mark_ready("sess_free", &ready).await.unwrap();
        assert!(matches!(done, ReadyResult::Ready), "{done:?}");
        let routes = DynamoRoutes {
            client,
            table: table.clone(),
        };
        let route = crate::gateway::lookup::SessionRoutes::item(&routes, "sess_free")
            .await
            .unwrap()
            .expect("routed");
        assert_eq!(route.private_ip.as_deref(), Some("10.0.0.9"));

        let sent = wire.sent.lock().unwrap().clone();
        let reads: Vec<_> = sent.iter().filter(|r| r.contains(".GetItem ")).collect();
        assert_eq!(
            reads.len(),
            4,
            "load, after the take, after READY, the gateway: {sent:?}"
        );
        for r in &reads {
            assert!(r.contains("\"ProjectionExpression\""), "projected: {r}");
        }
        for r in &sent {
            for never in [attr::SIGNING_KEY, attr::CONNECT_URL, "ReturnValues"] {
                assert!(!r.contains(never), "{never} in {r}");
            }
        }
        let answered = wire.answered.lock().unwrap().clone();
        assert!(answered.len() >= sent.len(), "{answered:?}");
        assert!(
            answered.iter().all(|a| !a.contains("SECRET-TOKEN")),
            "an answer carried the token: {answered:?}"
        );
        // READY wrote the route, and no connectUrl (the API's, on this item, stays as it was).
        let after = admin
            .get_item()
            .table_name(&table)
            .key(attr::SESSION_ID, s("sess_free"))
            .send()
            .await
            .unwrap()
            .item
            .unwrap();
        assert_eq!(after[attr::INTERNAL_STATUS], s("READY"));
        assert_eq!(
            after[attr::CONNECT_URL],
            s("ws://gw.example/?signingKey=SECRET-TOKEN-of-the-victim")
        );
    }

    /// The pending handoff (`handoff`): written and removed by the session's owner only, and
    /// every attribute the write names is one the task role may write (attr::TASK_WRITES, the
    /// SessionRole's `dynamodb:Attributes`).
    #[tokio::test]
    async fn the_handoff_is_written_by_the_owner_alone_naming_task_writes_only() {
        let sdk = wallcrawler_testkit::moto::sdk_config().await;
        let admin = aws_sdk_dynamodb::Client::new(&sdk);
        let table =
            wallcrawler_testkit::tables::create(&sdk, &wallcrawler_testkit::tables::SESSIONS).await;
        pending_item(&admin, &table, "sess_held", "arn:other").await;
        pending_item(&admin, &table, "sess_mine", "arn:me").await;
        let wire = Wire::default();
        let store = DynamoSessions {
            client: aws_sdk_dynamodb::Client::from_conf(
                aws_sdk_dynamodb::config::Builder::from(&sdk)
                    .interceptor(wire.clone())
                    .build(),
            ),
            table: table.clone(),
        };
        let h = wallcrawler_contract::session_doc::Handoff {
            id: "ho_1".into(),
            reason: "Please log in".into(),
            requested_at: "2026-01-01T00:00:00.000Z".into(),
            expires_at: "2026-01-01T00:10:00.000Z".into(),
        };
        let set = |handoff| HandoffUpdate {
            owner: "arn:me",
            now: 1_700_000_000,
            handoff,
        };
        let get = |id: &'static str| {
            let admin = admin.clone();
            let table = table.clone();
            async move {
                let out = admin
                    .get_item()
                    .table_name(&table)
                    .key(attr::SESSION_ID, s(id));
                out.send().await.unwrap().item.unwrap()
            }
        };
        assert!(
            !store
                .set_handoff("sess_held", &set(Some(&h)))
                .await
                .unwrap()
        );
        assert!(!get("sess_held").await.contains_key(attr::HANDOFF));
        assert!(
            store
                .set_handoff("sess_mine", &set(Some(&h)))
                .await
                .unwrap()
        );
        let written = get("sess_mine").await[attr::HANDOFF]
            .as_m()
            .unwrap()
            .clone();
        assert_eq!(written["id"], s("ho_1"));
        assert_eq!(written["reason"], s("Please log in"));
        assert_eq!(written["requestedAt"], s("2026-01-01T00:00:00.000Z"));
        assert_eq!(written["expiresAt"], s("2026-01-01T00:10:00.000Z"));
        assert!(store.set_handoff("sess_mine", &set(None)).await.unwrap());
        assert!(!get("sess_mine").await.contains_key(attr::HANDOFF));
        let sent = wire.sent.lock().unwrap().clone();
        assert_eq!(sent.len(), 3, "{sent:?}");
        for r in &sent {
            let body: serde_json::Value =
                serde_json::from_str(r.split_once(' ').unwrap().1).unwrap();
            for (_, name) in body["ExpressionAttributeNames"].as_object().unwrap() {
                let name = name.as_str().unwrap();
                assert!(attr::TASK_WRITES.contains(&name), "{name} in {r}");
            }
            assert!(body.get("ReturnValues").is_none(), "{r}");
        }
    }

    fn item(pairs: Vec<(&str, AttributeValue)>) -> Item {
        pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
    }

    fn n(v: &str) -> AttributeValue {
        AttributeValue::N(v.to_owned())
    }

    #[test]
    fn the_session_item_reads_as_the_record() {
        let r = to_record(&item(vec![
            (attr::INTERNAL_STATUS, s("PROVISIONING")),
            (attr::SIGNING_KEY, s("tok")),
            (attr::KEEP_ALIVE, AttributeValue::Bool(true)),
            (attr::EXPIRES_AT, n("1700000000")),
            (attr::PROJECT_ID, s("proj_1")),
            (attr::READY_AT, s("2026-01-01T00:00:00.000Z")),
            (attr::CLAIM_DEADLINE, n("1699990060")),
            (attr::OWNER, s("arn:aws:ecs:task/1")),
            (attr::OWNER_UNTIL, n("1699990090")),
            ("someOtherAttribute", AttributeValue::L(vec![n("1")])),
        ]))
        .unwrap();
        assert_eq!(
            r,
            SessionRecord {
                internal_status: Some(InternalStatus::Provisioning),
                keep_alive: true,
                expires_at: Some(1_700_000_000),
                project_id: Some("proj_1".into()),
                ever_ready: true,
                ended: false,
                claim_deadline: Some(1_699_990_060),
                owner: Some("arn:aws:ecs:task/1".into()),
                owner_until: Some(1_699_990_090),
            }
        );
        // A deadline of another shape is no deadline, not a malformed item.
        let r = to_record(&item(vec![(attr::CLAIM_DEADLINE, s("soon"))])).unwrap();
        assert_eq!(r.claim_deadline, None);
    }

    #[test]
    fn absent_null_unknown_and_whole_float_fields_read_leniently_as_before() {
        assert_eq!(to_record(&item(vec![])).unwrap(), SessionRecord::default());
        let r = to_record(&item(vec![
            (attr::INTERNAL_STATUS, s("SOMETHING_NEWER")),
            (attr::KEEP_ALIVE, AttributeValue::Null(true)),
            (attr::EXPIRES_AT, n("1700000000.0")),
            (attr::ENDED_AT, AttributeValue::Null(true)),
        ]))
        .unwrap();
        assert_eq!(r.internal_status, None, "an unknown status is none");
        assert!(!r.keep_alive);
        assert_eq!(
            r.expires_at,
            Some(1_700_000_000),
            "a whole float reads back"
        );
        assert!(r.ended, "endedAt counts by presence");
        assert!(!r.ever_ready);
    }

    #[test]
    fn a_field_of_the_wrong_type_is_a_malformed_item_error() {
        for (name, v) in [
            (attr::INTERNAL_STATUS, n("3")),
            (
                attr::PROJECT_ID,
                AttributeValue::B(Blob::new(b"proj".to_vec())),
            ),
            (attr::KEEP_ALIVE, s("yes")),
            (attr::EXPIRES_AT, n("1.5")),
            (attr::EXPIRES_AT, n("-2")),
            (attr::EXPIRES_AT, s("1700000000")),
        ] {
            let e = to_record(&item(vec![(name, v.clone())])).unwrap_err();
            assert!(
                matches!(e, StoreError::Other { service: TABLE, .. }),
                "{name} = {v:?}: {e}"
            );
            assert!(e.to_string().contains("malformed session item"), "{e}");
        }
    }

    #[test]
    fn the_public_ip_is_the_one_of_the_interface_with_our_mac_and_private_address() {
        use aws_sdk_ec2::types::{
            NetworkInterface, NetworkInterfaceAssociation, NetworkInterfacePrivateIpAddress,
        };
        let ni = |mac: &str, private: &str, public: Option<&str>| {
            let mut b = NetworkInterface::builder()
                .mac_address(mac)
                .private_ip_addresses(
                    NetworkInterfacePrivateIpAddress::builder()
                        .private_ip_address(private)
                        .build(),
                );
            if let Some(p) = public {
                b = b.association(NetworkInterfaceAssociation::builder().public_ip(p).build());
            }
            b.build()
        };
        let ours = TaskInterface {
            mac: "0e:9e:32:c7:48:85".into(),
            private_ip: "10.0.2.106".into(),
        };
        // Another VPC's interface with the same private address, and ours (MAC in capitals).
        let found = [
            ni("0a:00:00:00:00:01", "10.0.2.106", Some("198.51.100.9")),
            ni("0E:9E:32:C7:48:85", "10.0.2.106", Some("203.0.113.7")),
        ];
        assert_eq!(public_ip_of(&found, &ours).as_deref(), Some("203.0.113.7"));
        assert_eq!(
            public_ip_of(&found[..1], &ours),
            None,
            "never another interface's"
        );
        let no_public = [ni("0e:9e:32:c7:48:85", "10.0.2.106", None)];
        assert_eq!(public_ip_of(&no_public, &ours), None);
        let other_private = [ni("0e:9e:32:c7:48:85", "10.0.9.9", Some("203.0.113.7"))];
        assert_eq!(public_ip_of(&other_private, &ours), None);
    }
}
