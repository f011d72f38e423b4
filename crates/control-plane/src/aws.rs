//! The AWS implementations of the ports: DynamoDB stores for sessions, projects, API keys and
//! contexts, S3 presigned upload URLs, ECS Fargate as the task launcher and a Secrets Manager
//! backed token signer; plus the configuration that names them ([`Config::from_env`]) and the
//! wiring ([`build_app`]). SDK types stay in this module.
//!
//! Items are written with exactly the attribute names and types of the table schema
//! (`seeds/dynamodb-schema.md`), through the workspace's one mapping
//! ([`wallcrawler_aws::item`]): the records' serde names are the attribute names, strings are
//! `S` (timestamps ISO 8601), numbers `N` (`expiresAt`, `proxyBytes`, `defaultTimeout`, …),
//! booleans `BOOL`, `userMetadata` an `M` and `projectIds` an `L` of `S`. Reads are strongly
//! consistent `GetItem`s, except the two listings:
//!
//! - a project's sessions come from the `projectId-createdAt-index` GSI (projection `ALL`).
//!   GSIs cannot be read consistently, so a session created a moment ago may be missing from
//!   `GET /v1/sessions` for a short while. The concurrency cap does not use it: it is the
//!   project's slot set ([`DynamoSlots`], see [`crate::limits`]).
//! - a stopped pool task's session comes from the sparse `ecsTaskArn-index` GSI (`KEYS_ONLY`),
//!   written with READY long before the task stops.
//! - a context's sessions come from a consistent `Scan` with a filter: it reads the whole
//!   sessions table, and is used only by `DELETE /v1/contexts/{id}` (rare). Creates never scan:
//!   the one-writer rule is the context item's `writerSessionId` lease, checked by key.
//!
//! Conditional writes follow [`crate::memory::rules`] exactly; see each method.

use std::sync::Arc;
use std::time::Duration;

use aws_config::SdkConfig;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::operation::update_item::{UpdateItemError, UpdateItemOutput};
use aws_sdk_dynamodb::types::error::ConditionalCheckFailedException;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};
use futures_util::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};
use wallcrawler_aws::item::{self, Item};
use wallcrawler_aws::keys::{KeyCache, KeyError, KeyFetcher};
use wallcrawler_aws::secrets::{SecretsError, SecretsManagerKeys};
use wallcrawler_contract::retry::Transient as _;
use wallcrawler_contract::session::attr;
use wallcrawler_contract::session_doc::SessionDoc;
use wallcrawler_contract::{Claims, InternalStatus, SigningKey};

use crate::app::{App, Settings};
use crate::error::PortError;
use crate::model::{ApiKeyRecord, ContextRecord, Project};
use crate::ports::*;

/// The sessions table's GSI by project (PK `projectId`, SK `createdAt`, projection `ALL`).
pub const PROJECT_INDEX: &str = "projectId-createdAt-index";
/// Sessions by the task that served them (hash `ecsTaskArn`, projection `KEYS_ONLY`; sparse:
/// only items with a task ARN are in it).
pub const TASK_INDEX: &str = "ecsTaskArn-index";

// ---------------------------------------------------------------------------------------------
// Configuration

/// Table names; each defaults to the schema's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tables {
    /// `SESSIONS_TABLE_NAME`, default `wallcrawler-sessions`.
    pub sessions: String,
    /// `PROJECTS_TABLE_NAME`, default `wallcrawler-projects`.
    pub projects: String,
    /// `API_KEYS_TABLE_NAME`, default `wallcrawler-api-keys`.
    pub api_keys: String,
    /// `CONTEXTS_TABLE_NAME`, default `wallcrawler-contexts`.
    pub contexts: String,
}

impl Default for Tables {
    fn default() -> Self {
        Self {
            sessions: "wallcrawler-sessions".into(),
            projects: "wallcrawler-projects".into(),
            api_keys: "wallcrawler-api-keys".into(),
            contexts: "wallcrawler-contexts".into(),
        }
    }
}

/// A variable's value; empty counts as unset.
fn var(get: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    get(name)
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

impl Tables {
    /// Reads the four `*_TABLE_NAME` variables from `get` (the environment in the binaries).
    pub fn from_source(get: &dyn Fn(&str) -> Option<String>) -> Self {
        let d = Self::default();
        Self {
            sessions: var(get, "SESSIONS_TABLE_NAME").unwrap_or(d.sessions),
            projects: var(get, "PROJECTS_TABLE_NAME").unwrap_or(d.projects),
            api_keys: var(get, "API_KEYS_TABLE_NAME").unwrap_or(d.api_keys),
            contexts: var(get, "CONTEXTS_TABLE_NAME").unwrap_or(d.contexts),
        }
    }

    /// Reads the process environment.
    pub fn from_env() -> Self {
        Self::from_source(&|k| std::env::var(k).ok())
    }
}

/// How session tasks are started on ECS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EcsSettings {
    /// `ECS_CLUSTER` (name or ARN).
    pub cluster: String,
    /// `ECS_TASK_DEFINITION` (`family`, `family:revision` or ARN).
    pub task_definition: String,
    /// `ECS_SUBNETS`, comma-separated.
    pub subnets: Vec<String>,
    /// `ECS_SECURITY_GROUPS`, comma-separated; empty = the VPC's default group.
    pub security_groups: Vec<String>,
    /// `ECS_ASSIGN_PUBLIC_IP` (`ENABLED`, the default, or `DISABLED`). Clients connect to the
    /// task's public IP, so disable it only with a network design of your own.
    pub assign_public_ip: bool,
    /// `ECS_CONTAINER_NAME`: the controller's container in the task definition, default
    /// `controller`.
    pub container_name: String,
}

/// Everything the API function needs besides the SDK's own configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The four DynamoDB tables.
    pub tables: Tables,
    /// `CONTEXTS_BUCKET_NAME` (required).
    pub contexts_bucket: String,
    /// How session tasks are started on ECS.
    pub ecs: EcsSettings,
    /// `CDP_PROXY_PORT`, default 9223 (passed on to the task).
    pub cdp_proxy_port: u16,
    /// `WALLCRAWLER_JWT_SIGNING_SECRET_ARN` (required): signs tokens here, verifies them in the
    /// task.
    pub signing_secret_arn: String,
    /// `CREATE_WAIT_SECONDS`, default 25 (inside API Gateway's 29 s integration timeout).
    pub create_wait: Duration,
    /// `POOL_QUEUE_URL`: sessions are claimed by warm pool tasks through this SQS queue
    /// instead of a `RunTask` per session.
    pub pool_queue_url: Option<String>,
    /// `CONNECT_BASE_URL`: the connect gateway's base URL (`ws://` or `wss://`); when set the
    /// create answers at once with `connectUrl` formed from it.
    pub connect_base_url: Option<String>,
}

/// Every configuration problem, listed at once.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration: {}", .0.join("; "))]
pub struct ConfigError(pub Vec<String>);

fn list(v: Option<String>) -> Vec<String> {
    v.map(|v| {
        v.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    })
    .unwrap_or_default()
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_source(&|k| std::env::var(k).ok())
    }

    /// Reads the variables from `get`; lists every missing or invalid one.
    pub fn from_source(get: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut problems = Vec::new();
        let mut required = |name: &str| {
            var(get, name).unwrap_or_else(|| {
                problems.push(format!("{name} is required"));
                String::new()
            })
        };
        let contexts_bucket = required("CONTEXTS_BUCKET_NAME");
        let cluster = required("ECS_CLUSTER");
        let task_definition = required("ECS_TASK_DEFINITION");
        let signing_secret_arn = required("WALLCRAWLER_JWT_SIGNING_SECRET_ARN");
        let subnets = list(var(get, "ECS_SUBNETS"));
        if subnets.is_empty() {
            problems.push("ECS_SUBNETS is required (comma-separated subnet ids)".into());
        }
        let assign_public_ip = match var(get, "ECS_ASSIGN_PUBLIC_IP")
            .map(|v| v.to_ascii_uppercase())
            .as_deref()
        {
            None | Some("ENABLED" | "TRUE") => true,
            Some("DISABLED" | "FALSE") => false,
            Some(other) => {
                problems.push(format!(
                    "ECS_ASSIGN_PUBLIC_IP must be ENABLED or DISABLED, got {other:?}"
                ));
                true
            }
        };
        let cdp_proxy_port = match var(get, "CDP_PROXY_PORT").map(|v| v.parse::<u16>()) {
            None => 9223,
            Some(Ok(p)) if p > 0 => p,
            Some(_) => {
                problems.push("CDP_PROXY_PORT must be a port number (1-65535)".into());
                9223
            }
        };
        let create_wait = match var(get, "CREATE_WAIT_SECONDS").map(|v| v.parse::<u64>()) {
            None => 25,
            Some(Ok(s)) => s,
            Some(Err(_)) => {
                problems.push("CREATE_WAIT_SECONDS must be a whole number of seconds".into());
                25
            }
        };
        let connect_base_url = var(get, "CONNECT_BASE_URL");
        if let Some(u) = &connect_base_url
            && !crate::handlers::is_connect_base(u)
        {
            problems.push(format!(
                "CONNECT_BASE_URL must be ws://HOST[:PORT] or wss://HOST[:PORT], got {u:?}"
            ));
        }
        if !problems.is_empty() {
            return Err(ConfigError(problems));
        }
        Ok(Self {
            connect_base_url,
            tables: Tables::from_source(get),
            contexts_bucket,
            ecs: EcsSettings {
                cluster,
                task_definition,
                subnets,
                security_groups: list(var(get, "ECS_SECURITY_GROUPS")),
                assign_public_ip,
                container_name: var(get, "ECS_CONTAINER_NAME")
                    .unwrap_or_else(|| "controller".into()),
            },
            cdp_proxy_port,
            signing_secret_arn,
            create_wait: Duration::from_secs(create_wait),
            pool_queue_url: var(get, "POOL_QUEUE_URL"),
        })
    }
}

/// The shared SDK configuration: region, credentials, retries (`AWS_MAX_ATTEMPTS`, default 3)
/// and `AWS_ENDPOINT_URL` from the standard chain; short timeouts so a dead dependency is an
/// error within seconds, well inside API Gateway's 29 s.
pub async fn sdk_config() -> SdkConfig {
    wallcrawler_aws::sdk_config(wallcrawler_aws::Limits::API).await
}

/// The API on AWS: DynamoDB, S3, ECS and Secrets Manager behind the ports.
pub fn build_app(sdk: &SdkConfig, cfg: &Config) -> App {
    let dynamo = aws_sdk_dynamodb::Client::new(sdk);
    let mut settings = Settings {
        create_wait: cfg.create_wait,
        connect_base: cfg.connect_base_url.clone(),
        ..Settings::default()
    };
    if let Some(r) = sdk.region().map(|r| r.as_ref())
        && crate::handlers::REGIONS.contains(&r)
    {
        settings.region = r.to_owned();
    }
    App {
        sessions: Arc::new(DynamoSessions::new(dynamo.clone(), &cfg.tables.sessions)),
        projects: Arc::new(DynamoProjects::new(dynamo.clone(), &cfg.tables.projects)),
        slots: Arc::new(DynamoSlots::new(dynamo.clone(), &cfg.tables.projects)),
        keys: Arc::new(DynamoKeys::new(dynamo.clone(), &cfg.tables.api_keys)),
        contexts: Arc::new(DynamoContexts::new(dynamo, &cfg.tables.contexts)),
        archives: Arc::new(S3Archives::new(sdk, &cfg.contexts_bucket)),
        launcher: match &cfg.pool_queue_url {
            Some(url) => Arc::new(SqsPoolLauncher::new(sdk, url, cfg.clone())),
            None => Arc::new(EcsLauncher::new(sdk, cfg.clone())),
        },
        signer: Arc::new(SecretsSigner::new(sdk, &cfg.signing_secret_arn)),
        clock: Arc::new(SystemClock),
        settings,
    }
}

// ---------------------------------------------------------------------------------------------
// Errors

/// A failed SDK call as a port error: unreachable or throttled = `Unavailable` (503, "try
/// again"), anything else = `Failed` (500; the detail goes to the log only).
fn sdk_error<E, R>(service: &'static str, e: SdkError<E, R>) -> PortError
where
    E: std::error::Error + ProvideErrorMetadata + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let detail = DisplayErrorContext(&e).to_string();
    if wallcrawler_aws::classify(&e) == wallcrawler_aws::Failure::Transient {
        warn!(service, error = %detail, "AWS call failed");
        PortError::Unavailable(service.to_owned())
    } else {
        PortError::Failed(format!("{service}: {detail}"))
    }
}

// ---------------------------------------------------------------------------------------------
// Items
//
// Records map to items through the workspace's one mapping, [`wallcrawler_aws::item`]
// (serde_dynamo): the records' serde names are the attribute names.

fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

/// An item that may be missing (a `GetItem`, a failed condition's ALL_OLD) as a record.
fn from_opt<T: DeserializeOwned>(what: &'static str, i: Option<&Item>) -> PortResult<Option<T>> {
    Ok(i.map(|i| item::from_item(what, i)).transpose()?)
}

// ---------------------------------------------------------------------------------------------
// Sessions

const SESSIONS: &str = "the sessions table";
const SESSION: &str = "session";

/// `wallcrawler-sessions` (key `sessionId`).
pub struct DynamoSessions(Table);

impl DynamoSessions {
    /// Sessions in `table` (`sessionId` key).
    pub fn new(client: aws_sdk_dynamodb::Client, table: &str) -> Self {
        Self(Table::new(
            client,
            table,
            attr::SESSION_ID,
            SESSIONS,
            SESSION,
        ))
    }

    /// Every item a paginated `Query`/`Scan` returns, as documents.
    fn docs(items: &[Item], out: &mut Vec<SessionDoc>) -> PortResult<()> {
        for i in items {
            out.push(item::from_item(SESSION, i)?);
        }
        Ok(())
    }

    /// An update of session `id` that answers with the new item (ALL_NEW), or with the current
    /// one (ALL_OLD) when its condition fails.
    fn update_returning(&self, id: &str) -> UpdateItemFluentBuilder {
        self.0.update_or_old(id).return_values(ReturnValue::AllNew)
    }
}

impl SessionRepo for DynamoSessions {
    /// `PutItem` on condition `attribute_not_exists(sessionId)`.
    fn create(&self, doc: SessionDoc) -> BoxFuture<'_, PortResult<Cond<SessionDoc>>> {
        Box::pin(async move {
            let r = self
                .0
                .client
                .put_item()
                .table_name(&self.0.name)
                .set_item(Some(item::to_item(SESSION, &doc)?))
                .condition_expression("attribute_not_exists(sessionId)")
                .return_values_on_condition_check_failure(
                    ReturnValuesOnConditionCheckFailure::AllOld,
                )
                .send()
                .await;
            match condition(r, SESSIONS)? {
                Ok(_) => Ok(Cond::Done(doc)),
                Err(old) => Ok(Cond::Failed(from_opt(SESSION, old.as_ref())?)),
            }
        })
    }

    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, PortResult<Option<SessionDoc>>> {
        Box::pin(self.0.get(id))
    }

    /// `Query` on [`PROJECT_INDEX`] (eventually consistent: GSIs cannot be read otherwise).
    fn list_project<'a>(
        &'a self,
        project_id: &'a str,
    ) -> BoxFuture<'a, PortResult<Vec<SessionDoc>>> {
        Box::pin(async move {
            let mut out = Vec::new();
            let mut start = None;
            loop {
                let page = self
                    .0
                    .client
                    .query()
                    .table_name(&self.0.name)
                    .index_name(PROJECT_INDEX)
                    .key_condition_expression("projectId = :p")
                    .expression_attribute_values(":p", s(project_id))
                    .scan_index_forward(true)
                    .set_exclusive_start_key(start)
                    .send()
                    .await
                    .map_err(|e| sdk_error(SESSIONS, e))?;
                Self::docs(page.items(), &mut out)?;
                start = page.last_evaluated_key;
                if start.is_none() {
                    break;
                }
            }
            // The index orders by createdAt; ties (same millisecond) by id, as the other stores.
            out.sort_by(|a, b| {
                a.created_at
                    .cmp(&b.created_at)
                    .then(a.session_id.cmp(&b.session_id))
            });
            Ok(out)
        })
    }

    /// `Query` on [`TASK_INDEX`]; a task serves one session, so the first key is the answer.
    fn find_by_task<'a>(&'a self, task_arn: &'a str) -> BoxFuture<'a, PortResult<Option<String>>> {
        Box::pin(async move {
            let page = self
                .0
                .client
                .query()
                .table_name(&self.0.name)
                .index_name(TASK_INDEX)
                .key_condition_expression("ecsTaskArn = :t")
                .expression_attribute_values(":t", s(task_arn))
                .limit(1)
                .send()
                .await
                .map_err(|e| sdk_error(SESSIONS, e))?;
            Ok(page
                .items()
                .first()
                .and_then(|i| i.get("sessionId"))
                .and_then(|v| v.as_s().ok())
                .cloned())
        })
    }

    /// A consistent `Scan` filtered on `contextId`: reads the whole table (see the module doc).
    fn list_context<'a>(
        &'a self,
        context_id: &'a str,
    ) -> BoxFuture<'a, PortResult<Vec<SessionDoc>>> {
        Box::pin(async move {
            let mut out = Vec::new();
            let mut start = None;
            loop {
                let page = self
                    .0
                    .client
                    .scan()
                    .table_name(&self.0.name)
                    .filter_expression("contextId = :c")
                    .expression_attribute_values(":c", s(context_id))
                    .consistent_read(true)
                    .set_exclusive_start_key(start)
                    .send()
                    .await
                    .map_err(|e| sdk_error(SESSIONS, e))?;
                Self::docs(page.items(), &mut out)?;
                start = page.last_evaluated_key;
                if start.is_none() {
                    break;
                }
            }
            Ok(out)
        })
    }

    /// `UpdateItem` on condition `internalStatus = CREATING`.
    fn mark_provisioning<'a>(
        &'a self,
        id: &'a str,
        task_arn: Option<&'a str>,
        at: &'a str,
    ) -> BoxFuture<'a, PortResult<Cond<SessionDoc>>> {
        Box::pin(async move {
            let mut expr = String::from("SET internalStatus = :prov, #st = :sdk, updatedAt = :at");
            let mut req = self
                .update_returning(id)
                .condition_expression("internalStatus = :creating")
                .expression_attribute_names("#st", attr::STATUS)
                .expression_attribute_values(":creating", s(InternalStatus::Creating.as_str()))
                .expression_attribute_values(":prov", s(InternalStatus::Provisioning.as_str()))
                .expression_attribute_values(
                    ":sdk",
                    s(InternalStatus::Provisioning.sdk_status().as_str()),
                )
                .expression_attribute_values(":at", s(at));
            if let Some(arn) = task_arn {
                expr.push_str(", ecsTaskArn = :arn");
                req = req.expression_attribute_values(":arn", s(arn));
            }
            updated(req.update_expression(expr).send().await)
        })
    }

    /// Two conditional `UpdateItem`s, race-free because a terminal status never changes:
    /// 1. on condition "exists and not terminal": the status (and reason), `updatedAt`, and
    ///    with `ended` `endedAt = if_not_exists(endedAt, :at)`;
    /// 2. only if (1) failed on a terminal item without `endedAt` and `ended` is asked for: on
    ///    condition "exists and no `endedAt`", `endedAt` and `updatedAt`.
    fn mark_terminal<'a>(
        &'a self,
        id: &'a str,
        status: InternalStatus,
        reason: Option<&'a str>,
        at: &'a str,
        ended: bool,
    ) -> BoxFuture<'a, PortResult<Cond<SessionDoc>>> {
        Box::pin(async move {
            let req = self.update_returning(id);
            let (req, mut expr) = wallcrawler_aws::terminal_update(req, status, reason, at);
            if ended {
                expr.push_str(", endedAt = if_not_exists(endedAt, :at)");
            }
            let current = match updated(req.update_expression(expr).send().await)? {
                Cond::Done(d) => return Ok(Cond::Done(d)),
                Cond::Failed(None) => return Ok(Cond::Failed(None)),
                Cond::Failed(Some(d)) => d,
            };
            if !ended || current.ended_at.is_some() {
                return Ok(Cond::Failed(Some(current)));
            }
            let r = self
                .update_returning(id)
                .condition_expression(ENDED_MISSING)
                .update_expression("SET endedAt = :at, updatedAt = :at")
                .expression_attribute_values(":at", s(at))
                .send()
                .await;
            updated(r)
        })
    }

    /// `UpdateItem` on condition "exists and no `endedAt`"; a failed condition is fine.
    fn mark_ended_if_missing<'a>(
        &'a self,
        id: &'a str,
        at: &'a str,
    ) -> BoxFuture<'a, PortResult<()>> {
        Box::pin(async move {
            let req = self
                .0
                .update(id)
                .condition_expression(ENDED_MISSING)
                .update_expression("SET endedAt = :at")
                .expression_attribute_values(":at", s(at));
            self.0.unless_condition_fails(req).await
        })
    }
}

/// The condition of the writes of `endedAt`: the session exists and has none yet.
const ENDED_MISSING: &str = "attribute_exists(sessionId) AND attribute_not_exists(endedAt)";

/// A conditional session update's outcome: the new item, or the current one (ALL_OLD) when
/// the condition failed.
fn updated(r: SdkResult<UpdateItemOutput, UpdateItemError>) -> PortResult<Cond<SessionDoc>> {
    match condition(r, SESSIONS)? {
        Ok(out) => match out.attributes() {
            Some(i) => Ok(Cond::Done(item::from_item(SESSION, i)?)),
            None => Err(PortError::Failed(format!(
                "{SESSIONS}: an update returned no item"
            ))),
        },
        Err(old) => Ok(Cond::Failed(from_opt(SESSION, old.as_ref())?)),
    }
}

// ---------------------------------------------------------------------------------------------
// Conditional writes

/// An SDK call's result.
type SdkResult<O, E> = Result<O, SdkError<E, aws_sdk_dynamodb::config::http::HttpResponse>>;

/// The error of a write that can carry a condition.
trait ConditionalWriteError {
    /// The failed condition's exception, when that is what this error is.
    fn failed_condition(&self) -> Option<&ConditionalCheckFailedException>;
}

impl ConditionalWriteError for PutItemError {
    fn failed_condition(&self) -> Option<&ConditionalCheckFailedException> {
        match self {
            Self::ConditionalCheckFailedException(c) => Some(c),
            _ => None,
        }
    }
}

impl ConditionalWriteError for UpdateItemError {
    fn failed_condition(&self) -> Option<&ConditionalCheckFailedException> {
        match self {
            Self::ConditionalCheckFailedException(c) => Some(c),
            _ => None,
        }
    }
}

/// A conditional write's outcome: `Ok(output)`, or `Err(item)` when its condition failed,
/// with the item as it was (when the write asked for ALL_OLD and there was one). Any other
/// failure is a port error about `service`.
fn condition<O, E>(r: SdkResult<O, E>, service: &'static str) -> PortResult<Result<O, Option<Item>>>
where
    E: ConditionalWriteError + std::error::Error + ProvideErrorMetadata + Send + Sync + 'static,
{
    match r {
        Ok(out) => Ok(Ok(out)),
        Err(e) => match e.as_service_error().and_then(E::failed_condition) {
            Some(c) => Ok(Err(c.item().cloned())),
            None => Err(sdk_error(service, e)),
        },
    }
}

// ---------------------------------------------------------------------------------------------
// Projects, API keys, contexts

/// A table addressed by one string key, and the calls the repositories below share.
struct Table {
    client: aws_sdk_dynamodb::Client,
    name: String,
    /// The key attribute.
    key: &'static str,
    /// For errors: "the projects table".
    service: &'static str,
    /// For errors about one item: "project".
    what: &'static str,
}

impl Table {
    /// Table `name`, its key attribute, and the names its errors use.
    fn new(
        client: aws_sdk_dynamodb::Client,
        name: &str,
        key: &'static str,
        service: &'static str,
        what: &'static str,
    ) -> Self {
        Self {
            client,
            name: name.to_owned(),
            key,
            service,
            what,
        }
    }

    /// Consistent `GetItem`.
    async fn get<T: DeserializeOwned>(&self, id: &str) -> PortResult<Option<T>> {
        let out = self
            .client
            .get_item()
            .table_name(&self.name)
            .key(self.key, s(id))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| sdk_error(self.service, e))?;
        from_opt(self.what, out.item())
    }

    /// `PutItem`; with `create_only`, on condition that no item has the key.
    async fn put<T: Serialize>(&self, record: &T, create_only: bool) -> PortResult<()> {
        let mut req = self
            .client
            .put_item()
            .table_name(&self.name)
            .set_item(Some(item::to_item(self.what, record)?));
        if create_only {
            req = req.condition_expression(format!("attribute_not_exists({})", self.key));
        }
        req.send().await.map_err(|e| sdk_error(self.service, e))?;
        Ok(())
    }

    /// An `UpdateItem` of the item with key `id`, for the caller to give its expressions.
    fn update(&self, id: &str) -> UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.name)
            .key(self.key, s(id))
    }

    /// [`Table::update`] that answers a failed condition with the item as it was (ALL_OLD).
    fn update_or_old(&self, id: &str) -> UpdateItemFluentBuilder {
        self.update(id)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
    }

    /// Sends a conditional update: [`condition`]'s outcome.
    async fn conditional(
        &self,
        req: UpdateItemFluentBuilder,
    ) -> PortResult<Result<UpdateItemOutput, Option<Item>>> {
        condition(req.send().await, self.service)
    }

    /// Sends a conditional update whose failed condition means "nothing to do".
    async fn unless_condition_fails(&self, req: UpdateItemFluentBuilder) -> PortResult<()> {
        self.conditional(req).await.map(drop)
    }

    /// `UpdateItem` `SET attr = :v` on condition that the item exists; false when it does not.
    async fn set_if_exists(&self, id: &str, attr: &str, value: &str) -> PortResult<bool> {
        let req = self
            .update(id)
            .condition_expression(format!("attribute_exists({})", self.key))
            .update_expression("SET #a = :v")
            .expression_attribute_names("#a", attr)
            .expression_attribute_values(":v", s(value));
        Ok(self.conditional(req).await?.is_ok())
    }

    async fn delete(&self, id: &str) -> PortResult<()> {
        self.client
            .delete_item()
            .table_name(&self.name)
            .key(self.key, s(id))
            .send()
            .await
            .map_err(|e| sdk_error(self.service, e))?;
        Ok(())
    }
}

/// `wallcrawler-projects` (key `projectId`).
pub struct DynamoProjects(Table);

impl DynamoProjects {
    /// Projects in `table` (`projectId` key).
    pub fn new(client: aws_sdk_dynamodb::Client, table: &str) -> Self {
        Self(Table::new(
            client,
            table,
            "projectId",
            "the projects table",
            "project",
        ))
    }
}

impl ProjectRepo for DynamoProjects {
    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, PortResult<Option<Project>>> {
        Box::pin(self.0.get(id))
    }

    /// Creates or replaces the project.
    fn put(&self, p: Project) -> BoxFuture<'_, PortResult<()>> {
        Box::pin(async move { self.0.put(&p, false).await })
    }
}

/// `wallcrawler-api-keys` (key `apiKeyHash`; only hashes are stored).
pub struct DynamoKeys(Table);

impl DynamoKeys {
    /// API keys in `table` (`apiKeyHash` key).
    pub fn new(client: aws_sdk_dynamodb::Client, table: &str) -> Self {
        Self(Table::new(
            client,
            table,
            "apiKeyHash",
            "the API keys table",
            "API key",
        ))
    }
}

impl KeyRepo for DynamoKeys {
    fn get<'a>(&'a self, hash: &'a str) -> BoxFuture<'a, PortResult<Option<ApiKeyRecord>>> {
        Box::pin(self.0.get(hash))
    }

    fn put(&self, k: ApiKeyRecord) -> BoxFuture<'_, PortResult<()>> {
        Box::pin(async move { self.0.put(&k, false).await })
    }

    /// `UpdateItem` on condition `attribute_exists(apiKeyHash)`; false when there is no key.
    fn set_status<'a>(&'a self, hash: &'a str, status: &'a str) -> BoxFuture<'a, PortResult<bool>> {
        Box::pin(self.0.set_if_exists(hash, "status", status))
    }
}

/// `wallcrawler-contexts` (key `contextId`).
pub struct DynamoContexts(Table);

impl DynamoContexts {
    /// Contexts in `table` (`contextId` key).
    pub fn new(client: aws_sdk_dynamodb::Client, table: &str) -> Self {
        Self(Table::new(
            client,
            table,
            "contextId",
            "the contexts table",
            "context",
        ))
    }
}

impl ContextRepo for DynamoContexts {
    /// `PutItem` on condition `attribute_not_exists(contextId)` (ids are random; a collision is
    /// an error, never an overwrite).
    fn create(&self, c: ContextRecord) -> BoxFuture<'_, PortResult<()>> {
        Box::pin(async move { self.0.put(&c, true).await })
    }

    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, PortResult<Option<ContextRecord>>> {
        Box::pin(self.0.get(id))
    }

    /// Sets `updatedAt` of an existing context (a missing one is left missing).
    fn touch<'a>(&'a self, id: &'a str, at: &'a str) -> BoxFuture<'a, PortResult<()>> {
        Box::pin(async move { self.0.set_if_exists(id, "updatedAt", at).await.map(|_| ()) })
    }

    fn delete<'a>(&'a self, id: &'a str) -> BoxFuture<'a, PortResult<()>> {
        Box::pin(self.0.delete(id))
    }

    /// `UpdateItem SET writerSessionId = :sid` on condition that the context exists and has no
    /// writer, or has this one, or has `replacing`; ALL_OLD on failure names the holder.
    fn take_writer<'a>(
        &'a self,
        id: &'a str,
        session_id: &'a str,
        replacing: Option<&'a str>,
    ) -> BoxFuture<'a, PortResult<Lease>> {
        Box::pin(async move {
            let mut cond = String::from(
                "attribute_exists(contextId) AND (attribute_not_exists(writerSessionId) \
                 OR writerSessionId = :sid",
            );
            let mut req = self
                .0
                .update_or_old(id)
                .update_expression("SET writerSessionId = :sid")
                .expression_attribute_values(":sid", s(session_id));
            if let Some(old) = replacing {
                cond.push_str(" OR writerSessionId = :old");
                req = req.expression_attribute_values(":old", s(old));
            }
            cond.push(')');
            let old = match self.0.conditional(req.condition_expression(cond)).await? {
                Ok(_) => return Ok(Lease::Taken),
                Err(old) => old,
            };
            Ok(match old.as_ref().and_then(|i| i.get("writerSessionId")) {
                Some(AttributeValue::S(holder)) => Lease::Held(holder.clone()),
                // No item (or, oddly, no writer after all): no such context.
                _ => Lease::NoContext,
            })
        })
    }

    /// `UpdateItem REMOVE writerSessionId` on condition `writerSessionId = :sid`.
    fn release_writer<'a>(
        &'a self,
        id: &'a str,
        session_id: &'a str,
    ) -> BoxFuture<'a, PortResult<()>> {
        Box::pin(async move {
            let req = self
                .0
                .update(id)
                .condition_expression("writerSessionId = :sid")
                .update_expression("REMOVE writerSessionId")
                .expression_attribute_values(":sid", s(session_id));
            self.0.unless_condition_fails(req).await
        })
    }
}

/// Projects' concurrency slots: in the projects table, one item per project with key
/// `projectId` = `<projectId>#active` (project ids hold no `#`) and a string set
/// `activeSessions` (DynamoDB drops an emptied set, so "no attribute" = no slot taken). Kept
/// apart from the project item so that replacing a project (admin) never resets it.
pub struct DynamoSlots(Table);

/// The attribute holding a project's active session ids.
pub const ACTIVE_SESSIONS: &str = "activeSessions";

impl DynamoSlots {
    /// Slots kept in `projects_table`, on the `<projectId>#active` items.
    pub fn new(client: aws_sdk_dynamodb::Client, projects_table: &str) -> Self {
        Self(Table::new(
            client,
            projects_table,
            "projectId",
            "the projects table",
            "project slots",
        ))
    }

    /// The slot item's key for a project.
    pub fn key(project_id: &str) -> String {
        format!("{project_id}#active")
    }
}

impl SlotRepo for DynamoSlots {
    /// `UpdateItem ADD activeSessions :sid` on condition `attribute_not_exists(activeSessions)
    /// OR size(activeSessions) < :limit OR contains(activeSessions, :sid)`; ALL_OLD on failure
    /// lists the holders.
    fn take<'a>(
        &'a self,
        project_id: &'a str,
        session_id: &'a str,
        limit: u64,
    ) -> BoxFuture<'a, PortResult<Slot>> {
        Box::pin(async move {
            let req = self
                .0
                .update_or_old(&Self::key(project_id))
                .update_expression("ADD #a :sids")
                .condition_expression(
                    "attribute_not_exists(#a) OR size(#a) < :limit OR contains(#a, :sid)",
                )
                .expression_attribute_names("#a", ACTIVE_SESSIONS)
                .expression_attribute_values(":sids", AttributeValue::Ss(vec![session_id.into()]))
                .expression_attribute_values(":sid", s(session_id))
                .expression_attribute_values(":limit", AttributeValue::N(limit.to_string()));
            let old = match self.0.conditional(req).await? {
                Ok(_) => return Ok(Slot::Taken),
                Err(old) => old,
            };
            Ok(Slot::Full(
                match old.as_ref().and_then(|i| i.get(ACTIVE_SESSIONS)) {
                    Some(AttributeValue::Ss(v)) => v.clone(),
                    _ => Vec::new(),
                },
            ))
        })
    }

    /// `UpdateItem DELETE activeSessions :sid` on condition that the item exists (so no empty
    /// item is created).
    fn give_back<'a>(
        &'a self,
        project_id: &'a str,
        session_id: &'a str,
    ) -> BoxFuture<'a, PortResult<()>> {
        Box::pin(async move {
            let req = self
                .0
                .update(&Self::key(project_id))
                .condition_expression("attribute_exists(projectId)")
                .update_expression("DELETE #a :sids")
                .expression_attribute_names("#a", ACTIVE_SESSIONS)
                .expression_attribute_values(":sids", AttributeValue::Ss(vec![session_id.into()]));
            self.0.unless_condition_fails(req).await
        })
    }
}
// ---------------------------------------------------------------------------------------------
// S3

/// The contexts bucket: presigned `PUT` URLs for archives, and deletion.
///
/// A presigned URL is only as long-lived as the credentials that signed it: signed with a
/// Lambda role's temporary credentials it stops working when they expire, which can be before
/// the requested lifetime.
pub struct S3Archives {
    client: aws_sdk_s3::Client,
    bucket: String,
}

impl S3Archives {
    /// Path-style addressing when `AWS_ENDPOINT_URL` points at an emulator.
    pub fn new(sdk: &SdkConfig, bucket: &str) -> Self {
        Self {
            client: wallcrawler_aws::s3_client(sdk),
            bucket: bucket.to_owned(),
        }
    }
}

const BUCKET: &str = "the contexts bucket";

impl ArchiveUrls for S3Archives {
    /// A SigV4 presigned `PutObject` (at most 7 days, S3's limit).
    fn presign_put<'a>(
        &'a self,
        key: &'a str,
        ttl_seconds: u64,
    ) -> BoxFuture<'a, PortResult<String>> {
        Box::pin(async move {
            let cfg = aws_sdk_s3::presigning::PresigningConfig::expires_in(Duration::from_secs(
                ttl_seconds.min(7 * 24 * 3600),
            ))
            .map_err(|e| PortError::Failed(format!("presigning: {e}")))?;
            let req = self
                .client
                .put_object()
                .bucket(&self.bucket)
                .key(key)
                .presigned(cfg)
                .await
                .map_err(|e| sdk_error(BUCKET, e))?;
            Ok(req.uri().to_owned())
        })
    }

    /// `DeleteObject` (succeeds when the object is already gone).
    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, PortResult<()>> {
        Box::pin(async move {
            self.client
                .delete_object()
                .bucket(&self.bucket)
                .key(key)
                .send()
                .await
                .map_err(|e| sdk_error(BUCKET, e))?;
            Ok(())
        })
    }
}

// ---------------------------------------------------------------------------------------------
// ECS

/// The controller's environment for one session (the names of §2 of the spec).
pub fn controller_environment(cfg: &Config, spec: &LaunchSpec) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = vec![
        ("SESSION_ID".into(), spec.session_id.clone()),
        ("PROJECT_ID".into(), spec.project_id.clone()),
        ("SESSIONS_TABLE_NAME".into(), cfg.tables.sessions.clone()),
        ("CDP_PROXY_PORT".into(), cfg.cdp_proxy_port.to_string()),
        (
            "WALLCRAWLER_JWT_SIGNING_SECRET_ARN".into(),
            cfg.signing_secret_arn.clone(),
        ),
    ];
    if let Some((context_id, key, persist)) = &spec.context {
        env.extend([
            ("CONTEXT_ID".into(), context_id.clone()),
            ("CONTEXTS_BUCKET_NAME".into(), cfg.contexts_bucket.clone()),
            ("CONTEXT_S3_KEY".into(), key.clone()),
            ("CONTEXT_PERSIST".into(), persist.to_string()),
        ]);
    }
    env.extend(spec.env.iter().cloned());
    env
}

/// Starts one Fargate task per session (`RunTask`) and stops it on release (`StopTask`).
pub struct EcsLauncher {
    client: aws_sdk_ecs::Client,
    cfg: Config,
}

impl EcsLauncher {
    /// A launcher calling ECS with the SDK's configuration and `cfg`'s cluster and network.
    pub fn new(sdk: &SdkConfig, cfg: Config) -> Self {
        Self {
            client: aws_sdk_ecs::Client::new(sdk),
            cfg,
        }
    }
}

const ECS: &str = "ECS";

impl Launcher for EcsLauncher {
    /// `RunTask`: FARGATE, one task, `startedBy` = the session id (which the task-state handler
    /// reads back), the session id as idempotency token (an SDK retry never starts a second
    /// task), the controller's environment as a container override.
    fn launch(&self, spec: LaunchSpec) -> BoxFuture<'_, PortResult<Option<String>>> {
        use aws_sdk_ecs::types::{
            AssignPublicIp, AwsVpcConfiguration, ContainerOverride, KeyValuePair, LaunchType,
            NetworkConfiguration, TaskOverride,
        };
        Box::pin(async move {
            let ecs = &self.cfg.ecs;
            let environment = controller_environment(&self.cfg, &spec)
                .into_iter()
                .map(|(k, v)| KeyValuePair::builder().name(k).value(v).build())
                .collect();
            let vpc = AwsVpcConfiguration::builder()
                .set_subnets(Some(ecs.subnets.clone()))
                .set_security_groups(
                    (!ecs.security_groups.is_empty()).then(|| ecs.security_groups.clone()),
                )
                .assign_public_ip(if ecs.assign_public_ip {
                    AssignPublicIp::Enabled
                } else {
                    AssignPublicIp::Disabled
                })
                .build()
                .map_err(|e| PortError::Failed(format!("ECS network configuration: {e}")))?;
            let out = self
                .client
                .run_task()
                .cluster(&ecs.cluster)
                .task_definition(&ecs.task_definition)
                .launch_type(LaunchType::Fargate)
                .count(1)
                .started_by(&spec.session_id)
                .client_token(&spec.session_id)
                .network_configuration(
                    NetworkConfiguration::builder()
                        .awsvpc_configuration(vpc)
                        .build(),
                )
                .overrides(
                    TaskOverride::builder()
                        .container_overrides(
                            ContainerOverride::builder()
                                .name(&ecs.container_name)
                                .set_environment(Some(environment))
                                .build(),
                        )
                        .build(),
                )
                .send()
                .await
                .map_err(|e| sdk_error(ECS, e))?;
            if let Some(f) = out.failures().first() {
                let reason = f.reason().unwrap_or("unknown");
                let detail = format!(
                    "RunTask failed: {reason} {} {}",
                    f.arn().unwrap_or_default(),
                    f.detail().unwrap_or_default()
                );
                warn!(session.id = %spec.session_id, error = %detail, "the task was not started");
                // Capacity shortages pass; anything else is a configuration problem.
                return Err(if reason.starts_with("RESOURCE") {
                    PortError::Unavailable("Fargate capacity".into())
                } else {
                    PortError::Failed(format!("{ECS}: {detail}"))
                });
            }
            let arn = out
                .tasks()
                .first()
                .and_then(|t| t.task_arn())
                .map(str::to_owned)
                .ok_or_else(|| PortError::Failed(format!("{ECS}: RunTask returned no task")))?;
            info!(session.id = %spec.session_id, task.arn = %arn, "task started");
            Ok(Some(arn))
        })
    }

    /// `StopTask` with reason "released by API"; without a known ARN, every task `startedBy`
    /// the session is stopped.
    fn stop<'a>(
        &'a self,
        session_id: &'a str,
        task_arn: Option<&'a str>,
    ) -> BoxFuture<'a, PortResult<()>> {
        Box::pin(async move {
            let cluster = &self.cfg.ecs.cluster;
            let arns = match task_arn {
                Some(a) => vec![a.to_owned()],
                None => self
                    .client
                    .list_tasks()
                    .cluster(cluster)
                    .started_by(session_id)
                    .send()
                    .await
                    .map_err(|e| sdk_error(ECS, e))?
                    .task_arns()
                    .to_vec(),
            };
            for arn in arns {
                self.client
                    .stop_task()
                    .cluster(cluster)
                    .task(&arn)
                    .reason("released by API")
                    .send()
                    .await
                    .map_err(|e| sdk_error(ECS, e))?;
                info!(session.id = %session_id, task.arn = %arn, "task stopped");
            }
            Ok(())
        })
    }
}

/// Pool mode: each session is a claim sent to the pool's SQS queue, which a warm pool task
/// takes (see the controller's pool mode); a release stops the task that wrote READY.
pub struct SqsPoolLauncher {
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
    ecs: EcsLauncher,
}

impl SqsPoolLauncher {
    /// A launcher sending claims to `queue_url`; stops go to ECS as `cfg` says.
    pub fn new(sdk: &SdkConfig, queue_url: &str, cfg: Config) -> Self {
        Self {
            sqs: aws_sdk_sqs::Client::new(sdk),
            queue_url: queue_url.to_owned(),
            ecs: EcsLauncher::new(sdk, cfg),
        }
    }
}

const SQS: &str = "SQS";

impl Launcher for SqsPoolLauncher {
    /// `SendMessage` of the session's claim; no task ARN yet (the task that takes the claim
    /// writes its own with READY).
    fn launch(&self, spec: LaunchSpec) -> BoxFuture<'_, PortResult<Option<String>>> {
        Box::pin(async move {
            self.sqs
                .send_message()
                .queue_url(&self.queue_url)
                .message_body(spec.claim().to_json())
                .send()
                .await
                .map_err(|e| sdk_error(SQS, e))?;
            info!(session.id = %spec.session_id, "claim sent to the pool");
            Ok(None)
        })
    }

    /// `StopTask` of the task that wrote READY. Before READY there is none to stop: the task
    /// that takes the claim finds the session released and drops it.
    fn stop<'a>(
        &'a self,
        session_id: &'a str,
        task_arn: Option<&'a str>,
    ) -> BoxFuture<'a, PortResult<()>> {
        match task_arn {
            Some(_) => self.ecs.stop(session_id, task_arn),
            None => Box::pin(async { Ok(()) }),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Secrets Manager

/// How long a fetched signing key is used before it is fetched again.
pub const KEY_TTL: Duration = Duration::from_secs(300);

/// Where the signer's keys come from: Secrets Manager ([`SecretsManagerKeys`]), or a test's
/// fake.
type SignerFetcher = dyn KeyFetcher<Error = SecretsError>;

/// Signs tokens with the `AWSCURRENT` version of the signing secret
/// (`{"algorithm":"HS256","signingKey":…}`), over the workspace's one key cache
/// ([`wallcrawler_aws::keys`]). The key is fetched lazily, once it is older than [`KEY_TTL`]
/// (no background task: this runs on Lambda); simultaneous signs share one fetch. When
/// Secrets Manager fails the last good key keeps signing (the task accepts `AWSPREVIOUS` too,
/// so a key that was just rotated out still verifies).
pub struct SecretsSigner {
    keys: Arc<KeyCache<SignerFetcher>>,
}

impl SecretsSigner {
    /// A signer over the `SecretString` of `secret_id` (a name or ARN).
    pub fn new(sdk: &SdkConfig, secret_id: &str) -> Self {
        Self::with_fetcher(Arc::new(SecretsManagerKeys::new(sdk, secret_id)))
    }

    /// A signer over `fetcher`. Its fetch tasks are awaited by the signs that start them, so
    /// nothing waits on their tracker.
    fn with_fetcher(fetcher: Arc<SignerFetcher>) -> Self {
        Self {
            keys: KeyCache::new(fetcher, TaskTracker::new()),
        }
    }

    /// The signing key: cached, else fetched (once for every caller waiting); the last good
    /// one if the fetch fails.
    pub async fn key(&self) -> PortResult<SigningKey> {
        self.keys.current(KEY_TTL).await.map_err(|e| key_error(&e))
    }
}

/// A failed key fetch as a port error, as [`sdk_error`] classifies a failed call.
fn key_error(e: &KeyError<SecretsError>) -> PortError {
    const SERVICE: &str = "Secrets Manager";
    let detail = DisplayErrorContext(e).to_string();
    if e.is_transient() {
        warn!(service = SERVICE, error = %detail, "AWS call failed");
        PortError::Unavailable(SERVICE.to_owned())
    } else {
        PortError::Failed(format!("{SERVICE}: {detail}"))
    }
}

impl Signer for SecretsSigner {
    fn sign(&self, claims: Claims) -> BoxFuture<'_, PortResult<String>> {
        Box::pin(async move { Ok(claims.mint(&self.key().await?)) })
    }
}

#[cfg(test)]
mod signer_tests {
    use std::sync::Mutex;

    use wallcrawler_aws::Failure;
    use wallcrawler_aws::keys::FetchMode;
    use wallcrawler_contract::SigningSecret;
    use wallcrawler_contract::token::{Validation, validate};

    use super::*;

    /// How long each fetch of the fake takes (paused time): long enough for every
    /// concurrent sign to join it.
    const FETCH_TIME: Duration = Duration::from_secs(1);

    /// A Secrets Manager holding (calls so far, the current key; `None` refuses).
    struct Fake(Mutex<(usize, Option<&'static str>)>);

    impl KeyFetcher for Fake {
        type Error = SecretsError;

        fn fetch(&self, _: FetchMode) -> BoxFuture<'_, Result<Vec<SigningSecret>, SecretsError>> {
            let current = {
                let mut state = self.0.lock().unwrap();
                state.0 += 1;
                state.1
            };
            Box::pin(async move {
                tokio::time::sleep(FETCH_TIME).await;
                let current = current.ok_or_else(|| SecretsError::Call {
                    failure: Failure::Refused,
                    source: "AccessDeniedException".into(),
                })?;
                // AWSCURRENT, then AWSPREVIOUS: only the first signs.
                Ok([current, "previous"]
                    .map(|k| SigningSecret {
                        algorithm: "HS256".into(),
                        signing_key: k.into(),
                    })
                    .into())
            })
        }
    }

    impl Fake {
        fn calls(&self) -> usize {
            self.0.lock().unwrap().0
        }
        fn set_key(&self, key: Option<&'static str>) {
            self.0.lock().unwrap().1 = key;
        }
    }

    fn signer(key: Option<&'static str>) -> (Arc<Fake>, Arc<SecretsSigner>) {
        let f = Arc::new(Fake(Mutex::new((0, key))));
        (f.clone(), Arc::new(SecretsSigner::with_fetcher(f)))
    }

    /// A token to sign, and whether `token` was signed with exactly `key`.
    fn claims() -> Claims {
        Claims::new("s", "p", 1, 60)
    }
    fn signed_with(token: &str, key: &str) -> bool {
        let v = Validation {
            session_id: "s",
            project_id: None,
            leeway_seconds: 0,
            now: 2,
        };
        validate(token, &[SigningKey::new(key.as_bytes())], &v).is_ok()
    }

    #[tokio::test(start_paused = true)]
    async fn the_signer_fetches_once_per_ttl_and_signs_with_the_last_good_key_on_failure() {
        let (f, signer) = signer(Some("k1"));
        assert!(signed_with(&signer.sign(claims()).await.unwrap(), "k1"));
        assert_eq!(f.calls(), 1);
        // A fresh key within the TTL: no fetch.
        tokio::time::advance(KEY_TTL - Duration::from_millis(1)).await;
        assert!(signed_with(&signer.sign(claims()).await.unwrap(), "k1"));
        assert_eq!(f.calls(), 1);
        // After the TTL: one fetch shared by 20 concurrent signs.
        tokio::time::advance(Duration::from_millis(1)).await;
        f.set_key(Some("k2"));
        let signs: Vec<_> = (0..20)
            .map(|_| {
                let s = signer.clone();
                tokio::spawn(async move { s.sign(claims()).await })
            })
            .collect();
        for t in signs {
            assert!(signed_with(&t.await.unwrap().unwrap(), "k2"));
        }
        assert_eq!(f.calls(), 2, "one fetch for all 20");
        // The refresh fails: the last good key signs.
        tokio::time::advance(KEY_TTL).await;
        f.set_key(None);
        assert!(signed_with(&signer.sign(claims()).await.unwrap(), "k2"));
        assert_eq!(f.calls(), 3);
        // Just after a failed fetch: the last good key at once, no new fetch.
        assert!(signed_with(&signer.sign(claims()).await.unwrap(), "k2"));
        assert_eq!(f.calls(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_signer_that_never_had_a_key_fails_and_tries_again_next_time() {
        let (f, signer) = signer(None);
        let e = signer.sign(claims()).await.unwrap_err();
        assert!(
            matches!(&e, PortError::Failed(m) if m.contains("AccessDeniedException")),
            "{e}"
        );
        assert!(signer.sign(claims()).await.is_err());
        assert_eq!(f.calls(), 2, "no quiet period without a key to sign with");
        f.set_key(Some("k"));
        assert!(signed_with(&signer.sign(claims()).await.unwrap(), "k"));
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn source(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    const FULL: [(&str, &str); 5] = [
        ("CONTEXTS_BUCKET_NAME", "wc-contexts"),
        ("ECS_CLUSTER", "wallcrawler"),
        ("ECS_TASK_DEFINITION", "wallcrawler-controller"),
        ("ECS_SUBNETS", "subnet-a, subnet-b,"),
        ("WALLCRAWLER_JWT_SIGNING_SECRET_ARN", "arn:secret"),
    ];

    #[test]
    fn config_lists_every_missing_variable_at_once() {
        let e = Config::from_source(&source(&[("ECS_ASSIGN_PUBLIC_IP", "maybe")])).unwrap_err();
        let all = e.to_string();
        for name in [
            "CONTEXTS_BUCKET_NAME",
            "ECS_CLUSTER",
            "ECS_TASK_DEFINITION",
            "ECS_SUBNETS",
            "WALLCRAWLER_JWT_SIGNING_SECRET_ARN",
            "ECS_ASSIGN_PUBLIC_IP",
        ] {
            assert!(all.contains(name), "{name} missing from {all}");
        }
        assert_eq!(e.0.len(), 6);
    }

    #[test]
    fn config_defaults_follow_the_schema() {
        let c = Config::from_source(&source(&FULL)).unwrap();
        assert_eq!(c.tables, Tables::default());
        assert_eq!(c.tables.sessions, "wallcrawler-sessions");
        assert_eq!(c.tables.api_keys, "wallcrawler-api-keys");
        assert_eq!(c.ecs.subnets, ["subnet-a", "subnet-b"]);
        assert!(c.ecs.security_groups.is_empty());
        assert!(c.ecs.assign_public_ip);
        assert_eq!(c.ecs.container_name, "controller");
        assert_eq!(c.cdp_proxy_port, 9223);
        assert_eq!(c.create_wait, Duration::from_secs(25));
        let mut pairs = FULL.to_vec();
        pairs.extend([
            ("SESSIONS_TABLE_NAME", "s"),
            ("ECS_SECURITY_GROUPS", "sg-1,sg-2"),
            ("ECS_ASSIGN_PUBLIC_IP", "disabled"),
            ("CREATE_WAIT_SECONDS", "2"),
            ("CDP_PROXY_PORT", "0"),
        ]);
        let e = Config::from_source(&source(&pairs)).unwrap_err();
        assert_eq!(e.0, ["CDP_PROXY_PORT must be a port number (1-65535)"]);
        pairs.pop();
        let c = Config::from_source(&source(&pairs)).unwrap();
        assert_eq!(c.tables.sessions, "s");
        assert_eq!(c.ecs.security_groups, ["sg-1", "sg-2"]);
        assert!(!c.ecs.assign_public_ip);
        assert_eq!(c.create_wait, Duration::from_secs(2));
        assert_eq!(c.connect_base_url, None);
        pairs.push(("CONNECT_BASE_URL", "wss://connect.example.test"));
        let c = Config::from_source(&source(&pairs)).unwrap();
        assert_eq!(
            c.connect_base_url.as_deref(),
            Some("wss://connect.example.test")
        );
        pairs.pop();
        pairs.push(("CONNECT_BASE_URL", "https://connect.example.test/x?y"));
        let e = Config::from_source(&source(&pairs)).unwrap_err();
        assert!(e.0[0].starts_with("CONNECT_BASE_URL must be"), "{e}");
    }

    #[test]
    fn the_controller_gets_its_context_only_with_one() {
        let c = Config::from_source(&source(&FULL)).unwrap();
        let mut spec = LaunchSpec {
            session_id: "sess_1".into(),
            project_id: "proj_1".into(),
            context: None,
            env: vec![],
        };
        let names = |e: Vec<(String, String)>| e.into_iter().map(|(k, _)| k).collect::<Vec<_>>();
        assert_eq!(
            names(controller_environment(&c, &spec)),
            [
                "SESSION_ID",
                "PROJECT_ID",
                "SESSIONS_TABLE_NAME",
                "CDP_PROXY_PORT",
                "WALLCRAWLER_JWT_SIGNING_SECRET_ARN"
            ]
        );
        spec.context = Some(("ctx_1".into(), "proj_1/ctx_1/profile.tar.gz".into(), true));
        let env = controller_environment(&c, &spec);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("CONTEXT_ID"), Some("ctx_1"));
        assert_eq!(get("CONTEXTS_BUCKET_NAME"), Some("wc-contexts"));
        assert_eq!(get("CONTEXT_S3_KEY"), Some("proj_1/ctx_1/profile.tar.gz"));
        assert_eq!(get("CONTEXT_PERSIST"), Some("true"));
    }

    #[test]
    fn session_items_use_the_schema_names_and_types() {
        let mut d = SessionDoc {
            session_id: "sess_1".into(),
            project_id: "proj_1".into(),
            created_at: "2026-01-01T00:00:00.000Z".into(),
            expires_at: 1_800_000_000,
            keep_alive: true,
            region: "us-east-1".into(),
            proxy_bytes: Some(42),
            context_persist: Some(false),
            public_ip: Some("203.0.113.1".into()),
            user_metadata: Some(serde_json::json!({"a": [1, "x", null], "b": {"c": true}})),
            ..Default::default()
        };
        d.set_status(InternalStatus::Creating);
        let item = item::to_item(SESSION, &d).unwrap();
        assert_eq!(item[attr::SESSION_ID], s("sess_1"));
        assert_eq!(item[attr::STATUS], s("PENDING"));
        assert_eq!(item[attr::INTERNAL_STATUS], s("CREATING"));
        assert_eq!(item[attr::CREATED_AT], s("2026-01-01T00:00:00.000Z"));
        assert_eq!(
            item[attr::EXPIRES_AT],
            AttributeValue::N("1800000000".into())
        );
        assert_eq!(item[attr::KEEP_ALIVE], AttributeValue::Bool(true));
        assert_eq!(item[attr::PROXY_BYTES], AttributeValue::N("42".into()));
        assert_eq!(item[attr::CONTEXT_PERSIST], AttributeValue::Bool(false));
        assert_eq!(item[attr::PUBLIC_IP], s("203.0.113.1"));
        assert!(matches!(item[attr::USER_METADATA], AttributeValue::M(_)));
        assert!(!item.contains_key(attr::ENDED_AT), "absent stays absent");
        assert_eq!(item::from_item::<SessionDoc>(SESSION, &item).unwrap(), d);
    }

    #[test]
    fn key_items_hold_project_ids_as_a_list_of_strings() {
        let k = ApiKeyRecord {
            api_key_hash: "ab".into(),
            key_id: None,
            project_id: "p1".into(),
            project_ids: vec!["p1".into(), "p2".into()],
            name: None,
            status: "ACTIVE".into(),
            created_at: "2026-01-01T00:00:00.000Z".into(),
        };
        let item = item::to_item("API key", &k).unwrap();
        assert_eq!(item["apiKeyHash"], s("ab"));
        assert_eq!(
            item["projectIds"],
            AttributeValue::L(vec![s("p1"), s("p2")])
        );
        assert_eq!(item::from_item::<ApiKeyRecord>("key", &item).unwrap(), k);
    }

    #[test]
    fn whole_numbers_another_tool_wrote_read_back_and_sets_read_as_lists() {
        // (`numbers_read_back_as_integers_when_whole` itself is in `wallcrawler_aws::item`.)
        let mut d = SessionDoc {
            session_id: "sess_1".into(),
            expires_at: 1_700_000_000,
            proxy_bytes: Some(7),
            ..Default::default()
        };
        d.set_status(InternalStatus::Ready);
        let mut i = item::to_item(SESSION, &d).unwrap();
        i.insert(
            attr::EXPIRES_AT.into(),
            AttributeValue::N("1700000000.0".into()),
        );
        i.insert(attr::PROXY_BYTES.into(), AttributeValue::N("7.0".into()));
        assert_eq!(item::from_item::<SessionDoc>(SESSION, &i).unwrap(), d);
        i.insert(attr::EXPIRES_AT.into(), AttributeValue::N("1.5".into()));
        let e = item::from_item::<SessionDoc>(SESSION, &i).unwrap_err();
        assert!(e.to_string().contains("malformed session item"), "{e}");

        let mut k = item::to_item(
            "API key",
            &ApiKeyRecord {
                api_key_hash: "ab".into(),
                key_id: None,
                project_id: "p1".into(),
                project_ids: vec![],
                name: None,
                status: "ACTIVE".into(),
                created_at: "2026-01-01T00:00:00.000Z".into(),
            },
        )
        .unwrap();
        k.insert("projectIds".into(), AttributeValue::Ss(vec!["p1".into()]));
        let r: ApiKeyRecord = item::from_item("API key", &k).unwrap();
        assert_eq!(r.project_ids, ["p1"]);
    }

    #[test]
    fn a_malformed_item_is_a_failure_not_a_panic() {
        let i: Item = [
            (attr::SESSION_ID.to_owned(), s("sess_1")),
            (
                attr::SIGNING_KEY.to_owned(),
                AttributeValue::B(aws_sdk_dynamodb::primitives::Blob::new(b"x".to_vec())),
            ),
        ]
        .into();
        assert!(matches!(
            from_opt::<SessionDoc>(SESSION, Some(&i)),
            Err(PortError::Failed(_))
        ));
    }
}
