//! What the Lambda functions do besides serving the router: the API function's request path
//! without API Gateway's stage prefix, the API Gateway REQUEST authorizer (the same key check
//! as [`crate::auth`]) and the ECS task-state handler that closes sessions whose task stopped
//! behind their back. The `src/bin/*-lambda.rs` binaries only wire these to the Lambda runtime.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use aws_lambda_events::apigw::{
    ApiGatewayCustomAuthorizerPolicy, ApiGatewayCustomAuthorizerRequestTypeRequest,
    ApiGatewayCustomAuthorizerResponse,
};
use aws_lambda_events::iam::{IamPolicyEffect, IamPolicyStatement};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::json;
use tracing::{info, warn};
use wallcrawler_contract::InternalStatus;

use crate::auth::Received;
use crate::aws::config::INTEGRATION_LIMIT;
use crate::model::Project;
use crate::stores::{
    Cond, ContextStore, KeyStore, RecordStore, SessionStore, SlotStore, StoreResult, Terminal,
};

/// Logs for a Lambda function: JSON lines on stderr (CloudWatch keeps them), level from
/// `RUST_LOG` (default `info`). The runtime crates are capped at `info` whatever `RUST_LOG`
/// says: at `trace` they log whole events, headers — API keys — included.
pub fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let mut filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    for cap in [
        "lambda_runtime=info",
        "lambda_http=info",
        "lambda_runtime_api_client=info",
    ] {
        filter = filter.add_directive(cap.parse().expect("a valid directive"));
    }
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
}

/// What the table-only functions (the authorizer, the task-events handler) start with: logging
/// ([`init_tracing`]), the table names from the environment and one DynamoDB client.
pub async fn tables_from_env() -> (super::Tables, aws_sdk_dynamodb::Client) {
    init_tracing();
    let sdk = super::sdk_config().await;
    (
        super::Tables::from_env(),
        aws_sdk_dynamodb::Client::new(&sdk),
    )
}

/// The instant API Gateway received a request, from its epoch milliseconds (`requestTimeEpoch`,
/// `timeEpoch`) and ours; `None` when absent. Clamped to the integration limit: a clock skew
/// never makes a request older than API Gateway would still wait for.
fn received_at(epoch_ms: i64, now_ms: u64) -> Option<Instant> {
    let epoch_ms = u64::try_from(epoch_ms).ok().filter(|ms| *ms > 0)?;
    let spent = Duration::from_millis(now_ms.saturating_sub(epoch_ms)).min(INTEGRATION_LIMIT);
    let now = Instant::now();
    Some(now.checked_sub(spent).unwrap_or(now))
}

// ---------------------------------------------------------------------------------------------
// The API function

/// `path` without API Gateway's `/<stage>` prefix. `lambda_http` puts the stage in front of a
/// REST API's path (and an HTTP API's named stage is in its raw path), while the router's
/// routes start at `/v1`; the `$default` stage has no prefix. (So a stage must not be named
/// `v1`.)
pub fn path_without_stage<'a>(stage: Option<&str>, path: &'a str) -> &'a str {
    let Some(stage) = stage.filter(|s| !s.is_empty() && *s != "$default") else {
        return path;
    };
    match path.strip_prefix('/').and_then(|p| p.strip_prefix(stage)) {
        Some("") => "/",
        Some(rest) if rest.starts_with('/') => rest,
        _ => path,
    }
}

/// The API function's requests as the router expects them: the stage prefix removed from the
/// URI (scheme, host and query kept), and API Gateway's receive time attached ([`Received`]).
pub fn strip_stage(mut req: lambda_http::Request) -> lambda_http::Request {
    use lambda_http::RequestExt;
    use lambda_http::request::RequestContext;
    let (stage, received_ms) = match req.request_context_ref() {
        Some(RequestContext::ApiGatewayV1(c)) => (c.stage.clone(), c.request_time_epoch),
        Some(RequestContext::ApiGatewayV2(c)) => (c.stage.clone(), c.time_epoch),
        _ => (None, 0),
    };
    if let Some(at) = received_at(received_ms, wallcrawler_contract::time::unix_millis()) {
        req.extensions_mut().insert(Received(at));
    }
    let path = req.uri().path();
    let stripped = path_without_stage(stage.as_deref(), path);
    if stripped.len() != path.len() {
        let path_and_query = match req.uri().query() {
            Some(q) => format!("{stripped}?{q}"),
            None => stripped.to_owned(),
        };
        let mut parts = req.uri().clone().into_parts();
        parts.path_and_query = path_and_query.parse().ok();
        if let Ok(uri) = axum::http::Uri::from_parts(parts) {
            *req.uri_mut() = uri;
        }
    }
    req
}

// ---------------------------------------------------------------------------------------------
// Authorizer

/// What the authorizer reads: API keys and projects, and nothing else (its role may read
/// nothing else).
#[derive(Clone)]
pub struct Authorizer {
    /// API-key records.
    pub keys: Arc<dyn KeyStore>,
    /// Project records.
    pub projects: Arc<dyn RecordStore<Project>>,
}

/// Why the authorizer did not answer with a policy. API Gateway turns an error whose message is
/// exactly `Unauthorized` into a 401; any other error into a 500.
#[derive(Debug, thiserror::Error)]
pub enum AuthorizerError {
    /// No API key, or an unknown one (API Gateway answers 401; a forbidden key gets a Deny policy).
    #[error("Unauthorized")]
    Unauthorized,
    /// The key tables could not be read (API Gateway answers 500).
    #[error("the key could not be checked")]
    Backend,
}

impl From<AuthorizerError> for lambda_runtime::Diagnostic {
    fn from(e: AuthorizerError) -> Self {
        lambda_runtime::Diagnostic {
            error_type: match e {
                AuthorizerError::Unauthorized => "Unauthorized",
                AuthorizerError::Backend => "AuthorizerBackendError",
            }
            .into(),
            error_message: e.to_string(),
        }
    }
}

/// The policy's resource: every method and path of the stage the request was for
/// (`arn:aws:execute-api:<region>:<account>:<api>/<stage>/*`), so a cached decision covers the
/// caller's other requests too.
pub fn stage_resource(method_arn: &str) -> String {
    let mut parts = method_arn.splitn(3, '/');
    match (parts.next(), parts.next()) {
        (Some(api), Some(stage)) if api.starts_with("arn:") && !stage.is_empty() => {
            format!("{api}/{stage}/*")
        }
        _ => method_arn.to_owned(),
    }
}

fn policy(effect: IamPolicyEffect, resource: String) -> ApiGatewayCustomAuthorizerPolicy {
    let mut statement = IamPolicyStatement::default();
    statement.action = vec!["execute-api:Invoke".into()];
    statement.effect = effect;
    statement.resource = vec![resource];
    let mut p = ApiGatewayCustomAuthorizerPolicy::default();
    p.version = Some("2012-10-17".into());
    p.statement = vec![statement];
    p
}

/// The REQUEST authorizer: the key in `x-wc-api-key`/`x-bb-api-key` (and `x-wc-project-id`)
/// checked by [`crate::auth::authorize`]. Allowed: an Allow policy whose context carries
/// `projectId` and `projectIds` (comma-joined). Missing or unknown key: `Unauthorized` (401).
/// Inactive key or project, foreign project: a Deny policy (403). The raw key is not logged
/// and goes nowhere; the principal is a prefix of its hash.
pub async fn authorize_request(
    auth: &Authorizer,
    req: &ApiGatewayCustomAuthorizerRequestTypeRequest,
) -> Result<ApiGatewayCustomAuthorizerResponse, AuthorizerError> {
    let resource = stage_resource(req.method_arn.as_deref().unwrap_or("*"));
    let mut out = ApiGatewayCustomAuthorizerResponse::default();
    match crate::auth::authorize(auth.keys.as_ref(), auth.projects.as_ref(), &req.headers).await {
        Ok(p) => {
            info!(project.id = %p.project_id(), "authorized");
            out.principal_id = Some(format!("key:{}", &p.key_hash[..16]));
            out.policy_document = policy(IamPolicyEffect::Allow, resource);
            out.context = json!({
                "projectId": p.project_id(),
                "projectIds": p.project_ids.join(","),
            });
            Ok(out)
        }
        Err(e) if e.status == StatusCode::UNAUTHORIZED => {
            info!(reason = %e.message, "refused: 401");
            Err(AuthorizerError::Unauthorized)
        }
        Err(e) if e.status == StatusCode::FORBIDDEN => {
            info!(reason = %e.message, "refused: 403");
            out.principal_id = Some("denied".into());
            out.policy_document = policy(IamPolicyEffect::Deny, resource);
            Ok(out)
        }
        Err(e) => {
            warn!(status = %e.status, reason = %e.message, "the key could not be checked");
            e.log_cause();
            Err(AuthorizerError::Backend)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// ECS task state changes

/// An EventBridge "ECS Task State Change" event (the fields this handler reads).
#[derive(Debug, Clone, Deserialize)]
pub struct TaskStateChange {
    /// `detail-type`: `ECS Task State Change` for the events this handler acts on.
    #[serde(rename = "detail-type", default)]
    pub detail_type: String,
    /// `detail`: the task as ECS describes it.
    #[serde(default)]
    pub detail: TaskDetail,
}

/// The `detail` of a task state change: the task as ECS describes it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskDetail {
    /// `taskArn`: the task.
    #[serde(default)]
    pub task_arn: Option<String>,
    /// `lastStatus`: e.g. `RUNNING`, `STOPPED`; only `STOPPED` tasks are acted on.
    #[serde(default)]
    pub last_status: Option<String>,
    /// `startedBy`: the session id for a task started for one session (pool tasks carry none).
    #[serde(default)]
    pub started_by: Option<String>,
    /// `stoppedReason`: ECS's words for why the task stopped.
    #[serde(default)]
    pub stopped_reason: Option<String>,
    /// `stopCode`: e.g. `EssentialContainerExited`, `TaskFailedToStart`.
    #[serde(default)]
    pub stop_code: Option<String>,
    /// `overrides`: what `RunTask` overrode, including the container's environment.
    #[serde(default)]
    pub overrides: Option<TaskOverrides>,
}

/// `overrides` of a task: per-container overrides.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskOverrides {
    /// `containerOverrides`: one entry per overridden container.
    #[serde(default)]
    pub container_overrides: Vec<ContainerOverride>,
}

/// One container's overrides.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ContainerOverride {
    /// `name`: the container's name.
    #[serde(default)]
    pub name: Option<String>,
    /// `environment`: the variables set for it (the launcher sets `SESSION_ID` here).
    #[serde(default)]
    pub environment: Vec<EnvVar>,
}

/// One `{name, value}` environment variable.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct EnvVar {
    /// `name`: the variable's name.
    pub name: String,
    /// `value`: its value (empty when absent).
    #[serde(default)]
    pub value: String,
}

impl TaskStateChange {
    /// The session the task served: `startedBy` (the launcher sets it to the session id), else
    /// the `SESSION_ID` container override.
    pub fn session_id(&self) -> Option<&str> {
        if let Some(s) = self.detail.started_by.as_deref()
            && s.starts_with("sess_")
        {
            return Some(s);
        }
        self.detail
            .overrides
            .iter()
            .flat_map(|o| &o.container_overrides)
            .flat_map(|c| &c.environment)
            .find(|e| e.name == wallcrawler_contract::task_env::SESSION_ID && !e.value.is_empty())
            .map(|e| e.value.as_str())
    }
}

/// What the handler did with one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskEventOutcome {
    /// Not a stopped task, or not one of ours.
    Ignored(&'static str),
    /// The task named a session the table does not hold.
    UnknownSession(String),
    /// The session was live: now FAILED/ERROR with `endedAt`.
    Failed(String),
    /// The session was terminal already: only `endedAt` was added.
    Ended(String),
    /// Terminal with `endedAt` already: nothing to do.
    AlreadyEnded(String),
}

/// The session a stopped pool task served, found by its task ARN (`Err`: the outcome when there
/// is none to close). The index is eventually consistent and a session a pool task took but
/// never made READY is not over: the item is read by key, and only a session that still names
/// this task and got past READY is closed. One still pending is left alone: its claim comes
/// back to the pool when the dead task's lease and the claim's visibility lapse, and another
/// task serves it (failing it here would end a session a live controller is about to take).
async fn pool_session(
    sessions: &dyn SessionStore,
    arn: &str,
) -> StoreResult<Result<String, TaskEventOutcome>> {
    let Some(id) = sessions.find_by_task(arn).await? else {
        return Ok(Err(TaskEventOutcome::Ignored("the task serves no session")));
    };
    Ok(match sessions.get(&id).await? {
        None => Err(TaskEventOutcome::UnknownSession(id)),
        Some(d) if d.ecs_task_arn.as_deref() != Some(arn) => Err(TaskEventOutcome::Ignored(
            "the session the index named is another task's now",
        )),
        Some(d) if d.pending() => Err(TaskEventOutcome::Ignored(
            "the pool task stopped before READY: its claim comes back to the pool",
        )),
        Some(_) => Ok(id),
    })
}

/// Closes the session of a stopped task: FAILED/ERROR (reason from `stoppedReason`) if it was
/// not terminal yet, and a missing `endedAt` in every case, so no context stays busy forever;
/// then gives back its project slot and context lease ([`crate::limits::give_back`]) and counts
/// its usage ([`crate::usage::count`]).
/// Events for running tasks and for tasks that are not sessions' are ignored.
pub async fn handle_task_state_change(
    sessions: &dyn SessionStore,
    slots: &dyn SlotStore,
    contexts: &dyn ContextStore,
    event: &TaskStateChange,
    at: &str,
) -> StoreResult<TaskEventOutcome> {
    if event.detail_type != "ECS Task State Change" {
        return Ok(TaskEventOutcome::Ignored("not an ECS task state change"));
    }
    if event.detail.last_status.as_deref() != Some("STOPPED") {
        return Ok(TaskEventOutcome::Ignored("the task has not stopped"));
    }
    // A task started for its session names it; a pool task (started by its ECS service) is
    // found by the task ARN it wrote when it took its claim.
    let found = match (event.session_id(), event.detail.task_arn.as_deref()) {
        (Some(id), _) => id.to_owned(),
        (None, Some(arn)) => match pool_session(sessions, arn).await? {
            Ok(id) => id,
            Err(outcome) => return Ok(outcome),
        },
        (None, None) => return Ok(TaskEventOutcome::Ignored("the task serves no session")),
    };
    let id = found.as_str();
    let reason = format!(
        "the browser task stopped before the session ended ({}): {}",
        event
            .detail
            .stop_code
            .as_deref()
            .unwrap_or("unknown stop code"),
        event
            .detail
            .stopped_reason
            .as_deref()
            .unwrap_or("no reason given")
    );
    let to = Terminal {
        status: InternalStatus::Failed,
        reason: Some(&reason),
        ended: true,
    };
    let written = sessions.mark_terminal(id, to, at).await?;
    // Every delivery gives back (idempotent), so a retried event finishes a partial one.
    if let Cond::Done(d) | Cond::Failed(Some(d)) = &written {
        crate::limits::give_back(slots, contexts, d).await;
        crate::usage::count(sessions, d).await;
    }
    let outcome = match written {
        Cond::Failed(None) => TaskEventOutcome::UnknownSession(id.to_owned()),
        Cond::Failed(Some(_)) => TaskEventOutcome::AlreadyEnded(id.to_owned()),
        // Our reason on the item means this write set the status (a terminal item keeps its own).
        Cond::Done(d) if d.termination_reason.as_deref() == Some(reason.as_str()) => {
            TaskEventOutcome::Failed(id.to_owned())
        }
        Cond::Done(_) => TaskEventOutcome::Ended(id.to_owned()),
    };
    let task = event.detail.task_arn.as_deref().unwrap_or("");
    match &outcome {
        TaskEventOutcome::Failed(_) => {
            warn!(session.id = %id, task.arn = %task, %reason, "task stopped under a live session: marked FAILED")
        }
        other => info!(session.id = %id, task.arn = %task, outcome = ?other, "task stopped"),
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wallcrawler_contract::session_doc::SessionDoc;

    use crate::memory::{MemContexts, MemSessions, MemSlots};

    #[test]
    fn the_stage_prefix_is_removed() {
        assert_eq!(
            path_without_stage(Some("prod"), "/prod/v1/sessions"),
            "/v1/sessions"
        );
        assert_eq!(path_without_stage(Some("prod"), "/prod"), "/");
        assert_eq!(
            path_without_stage(Some("prod"), "/v1/sessions"),
            "/v1/sessions"
        );
        assert_eq!(
            path_without_stage(Some("prod"), "/production/v1"),
            "/production/v1"
        );
        assert_eq!(path_without_stage(Some("$default"), "/v1/x"), "/v1/x");
        assert_eq!(path_without_stage(None, "/prod/v1/x"), "/prod/v1/x");
    }

    #[test]
    fn the_wait_counts_from_api_gateways_receive_time() {
        let now = wallcrawler_contract::time::unix_millis();
        let at = received_at(i64::try_from(now - 4_000).unwrap(), now).unwrap();
        let spent = at.elapsed();
        assert!(
            spent >= Duration::from_secs(4) && spent < Duration::from_secs(10),
            "{spent:?}"
        );
        // A clock ahead of ours counts as just received; one far behind as the whole limit.
        assert!(
            received_at(i64::try_from(now + 5_000).unwrap(), now)
                .unwrap()
                .elapsed()
                < Duration::from_secs(5)
        );
        let old = received_at(1, now).unwrap().elapsed();
        assert!(
            old >= INTEGRATION_LIMIT && old < INTEGRATION_LIMIT + Duration::from_secs(5),
            "{old:?}"
        );
        assert!(received_at(0, now).is_none());
        assert!(received_at(-1, now).is_none());
    }

    #[test]
    fn policies_cover_the_whole_stage() {
        assert_eq!(
            stage_resource(
                "arn:aws:execute-api:us-east-1:123456789012:abc123/prod/GET/v1/sessions"
            ),
            "arn:aws:execute-api:us-east-1:123456789012:abc123/prod/*"
        );
        assert_eq!(stage_resource("odd"), "odd");
    }

    fn event(v: serde_json::Value) -> TaskStateChange {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_session_comes_from_started_by_or_the_override() {
        let e = event(
            json!({"detail-type": "ECS Task State Change", "detail": {"startedBy": "sess_a"}}),
        );
        assert_eq!(e.session_id(), Some("sess_a"));
        let e = event(json!({"detail-type": "ECS Task State Change", "detail": {
            "startedBy": "ecs-svc/123",
            "overrides": {"containerOverrides": [{"name": "controller", "environment": [
                {"name": "PROJECT_ID", "value": "p"}, {"name": wallcrawler_contract::task_env::SESSION_ID, "value": "sess_b"}]}]}
        }}));
        assert_eq!(e.session_id(), Some("sess_b"));
        let e =
            event(json!({"detail-type": "ECS Task State Change", "detail": {"startedBy": "x"}}));
        assert_eq!(e.session_id(), None);
    }

    #[tokio::test]
    async fn a_stopped_pool_task_is_traced_to_its_session_by_its_arn() {
        let sessions = MemSessions::default();
        let mut d = SessionDoc {
            session_id: "sess_pooled".into(),
            project_id: "p".into(),
            created_at: "2026-01-01T00:00:00.000Z".into(),
            ecs_task_arn: Some("arn:aws:ecs:us-east-1:1:task/c/served".into()),
            ..Default::default()
        };
        d.set_status(InternalStatus::Ready);
        sessions.create(d).await.unwrap();
        let stopped = |arn: &str| {
            event(json!({"detail-type": "ECS Task State Change", "detail": {
                "lastStatus": "STOPPED", "startedBy": "ecs-svc/1234", "taskArn": arn,
                "stopCode": "EssentialContainerExited", "stoppedReason": "exited"}}))
        };
        let (slots, contexts) = (MemSlots::default(), MemContexts::default());
        let at = "2026-01-01T00:05:00.000Z";
        let r = handle_task_state_change(
            &sessions,
            &slots,
            &contexts,
            &stopped("arn:aws:ecs:us-east-1:1:task/c/idle"),
            at,
        )
        .await;
        assert_eq!(
            r.unwrap(),
            TaskEventOutcome::Ignored("the task serves no session")
        );
        let r = handle_task_state_change(
            &sessions,
            &slots,
            &contexts,
            &stopped("arn:aws:ecs:us-east-1:1:task/c/served"),
            at,
        )
        .await;
        assert_eq!(r.unwrap(), TaskEventOutcome::Failed("sess_pooled".into()));
        let d = sessions.get("sess_pooled").await.unwrap().unwrap();
        assert_eq!(d.status, "ERROR");
        assert_eq!(d.ended_at.as_deref(), Some(at));
    }

    /// A pool task that took a claim (its ARN written) and stopped before READY: the session is
    /// not failed, its claim comes back to the pool (a session READY under another task is
    /// untouched too).
    #[tokio::test]
    async fn a_pool_task_stopped_before_ready_leaves_its_session_to_the_pool() {
        let sessions = MemSessions::default();
        let dead = "arn:aws:ecs:us-east-1:1:task/c/dead";
        for (id, status, arn) in [
            ("sess_taken", InternalStatus::Provisioning, dead),
            (
                "sess_moved",
                InternalStatus::Ready,
                "arn:aws:ecs:us-east-1:1:task/c/other",
            ),
        ] {
            let mut d = SessionDoc {
                session_id: id.into(),
                project_id: "p".into(),
                created_at: "2026-01-01T00:00:00.000Z".into(),
                ecs_task_arn: Some(arn.into()),
                owner: Some(arn.into()),
                ..Default::default()
            };
            d.set_status(status);
            sessions.create(d).await.unwrap();
        }
        let (slots, contexts) = (MemSlots::default(), MemContexts::default());
        let stopped = event(json!({"detail-type": "ECS Task State Change", "detail": {
            "lastStatus": "STOPPED", "startedBy": "ecs-svc/1234", "taskArn": dead,
            "stopCode": "SpotInterruption", "stoppedReason": "stopped"}}));
        let at = "2026-01-01T00:05:00.000Z";
        let r = handle_task_state_change(&sessions, &slots, &contexts, &stopped, at).await;
        assert_eq!(
            r.unwrap(),
            TaskEventOutcome::Ignored(
                "the pool task stopped before READY: its claim comes back to the pool"
            )
        );
        let d = sessions.get("sess_taken").await.unwrap().unwrap();
        assert_eq!(d.internal(), Some(InternalStatus::Provisioning));
        assert_eq!(d.ended_at, None);
        let other = sessions.get("sess_moved").await.unwrap().unwrap();
        assert_eq!(other.internal(), Some(InternalStatus::Ready));
    }

    #[tokio::test]
    async fn stopped_tasks_close_their_sessions_once() {
        let sessions = MemSessions::default();
        for (id, st) in [
            ("sess_live", InternalStatus::Ready),
            ("sess_released", InternalStatus::Stopped),
        ] {
            let mut d = SessionDoc {
                session_id: id.into(),
                project_id: "p".into(),
                created_at: "2026-01-01T00:00:00.000Z".into(),
                ..Default::default()
            };
            d.set_status(st);
            sessions.create(d).await.unwrap();
        }
        let stopped = |id: &str| {
            event(json!({"detail-type": "ECS Task State Change", "detail": {
                "lastStatus": "STOPPED", "startedBy": id, "stopCode": "EssentialContainerExited",
                "stoppedReason": "Essential container in task exited"}}))
        };
        let at = "2026-01-01T00:05:00.000Z";
        let (slots, contexts) = (MemSlots::default(), MemContexts::default());
        let handle = async |e: &TaskStateChange, at: &str| {
            handle_task_state_change(&sessions, &slots, &contexts, e, at).await
        };
        let r = handle(&stopped("sess_live"), at).await;
        assert_eq!(r.unwrap(), TaskEventOutcome::Failed("sess_live".into()));
        let d = sessions.get("sess_live").await.unwrap().unwrap();
        assert_eq!(
            (d.internal_status.as_str(), d.status.as_str()),
            ("FAILED", "ERROR")
        );
        assert_eq!(d.ended_at.as_deref(), Some(at));
        assert!(
            d.termination_reason
                .unwrap()
                .contains("Essential container in task exited")
        );

        let r = handle(&stopped("sess_released"), at).await;
        assert_eq!(r.unwrap(), TaskEventOutcome::Ended("sess_released".into()));
        let d = sessions.get("sess_released").await.unwrap().unwrap();
        assert_eq!(
            (d.internal_status.as_str(), d.status.as_str()),
            ("STOPPED", "COMPLETED")
        );
        assert_eq!(d.ended_at.as_deref(), Some(at));

        let r = handle(&stopped("sess_released"), "later").await;
        assert_eq!(
            r.unwrap(),
            TaskEventOutcome::AlreadyEnded("sess_released".into())
        );
        let r = handle(&stopped("sess_gone"), at).await;
        assert_eq!(
            r.unwrap(),
            TaskEventOutcome::UnknownSession("sess_gone".into())
        );
        let running = event(json!({"detail-type": "ECS Task State Change", "detail": {
            "lastStatus": "RUNNING", "startedBy": "sess_live"}}));
        assert!(matches!(
            handle(&running, at).await.unwrap(),
            TaskEventOutcome::Ignored(_)
        ));
    }
}
