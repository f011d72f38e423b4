//! The task API ([`wallcrawler_contract::task_api`]): how a task on AWS gets its claim and its
//! session's credentials, instead of reading the claims queue, the sessions table and the
//! bucket with the role every task shares. Two routes, `POST` [`CLAIMS_PATH`] and `POST`
//! [`CREDENTIALS_PATH`], outside the API-key check: the caller is a task, and proves which one
//! with its signed STS request ([`Task`], checked by STS through [`Identities`]). What they do
//! with the queue, the tables and STS is the [`Broker`]'s (on AWS, `aws::TaskBroker`).
//!
//! Refusals, each with its status and message ([`ApiError`]'s shape):
//! - 401: no identity header, one too long, unreadable or not a signature of this API's STS
//!   request, one signed more than [`FRESH_SECONDS`] ago (or dated as far ahead), one STS
//!   refuses, or one taken before (each identity is taken once: [`Broker::first_use`]);
//! - 403: a caller that is not a session of the task role named like a task id; credentials
//!   for a session whose item does not name the caller's task (a missing session answers the
//!   same, so the answer tells nothing about other sessions);
//! - 409: a claim by a task that has had its session (a pool task serves one);
//! - 400: a body that is not the route's JSON, or a wait over [`MAX_WAIT_SECONDS`]; 413: a
//!   body over [`MAX_BODY_BYTES`].
//!
//! Logs name the task id and the session id, never the identity, the caller's ARN or
//! credentials.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, FromRequestParts, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use tracing::info;
use wallcrawler_contract::claim::valid_id;
use wallcrawler_contract::task_api::{
    CLAIMS_PATH, CREDENTIALS_PATH, CallerTask, ClaimGrant, ClaimRequest, CredentialsGrant,
    CredentialsRequest, FRESH_SECONDS, IDENTITY_HEADER, MAX_WAIT_SECONDS, SignedIdentity,
};

use crate::error::{ApiError, StoreError};
use crate::stores::{Signer, StoreResult};

/// The largest request body either route takes (a real one is under 100 bytes).
pub const MAX_BODY_BYTES: usize = 1024;

/// Who signed an identity, as STS answers it.
#[async_trait]
pub trait Identities: Send + Sync {
    /// The caller ARN of whoever signed `id`.
    async fn caller(&self, id: &SignedIdentity) -> Result<String, IdentityCheck>;
}

/// Why an identity was not checked.
#[derive(Debug, thiserror::Error)]
pub enum IdentityCheck {
    /// STS refused it: the signature is wrong, expired, or of other credentials.
    #[error("STS refused the task identity")]
    Refused,
    /// STS could not be asked.
    #[error(transparent)]
    Unavailable(#[from] StoreError),
}

/// What a claim request came to.
#[derive(Debug)]
pub enum ClaimOutcome {
    /// A claim, its session taken for the caller, with credentials for it.
    Granted(Box<ClaimGrant>),
    /// No claim in the wait.
    Nothing,
    /// The caller has had its session.
    HadSession,
}

/// The claims queue, the sessions and tasks tables and STS, as the task API uses them.
#[async_trait]
pub trait Broker: Send + Sync {
    /// Waits up to `wait` for a claim to serve, and takes its session for `task`.
    async fn claim(&self, task: &CallerTask, wait: Duration) -> StoreResult<ClaimOutcome>;
    /// Credentials for `session_id` if its item names `task` as the task serving it; `None`
    /// for any other session, or none.
    async fn credentials(
        &self,
        task: &CallerTask,
        session_id: &str,
    ) -> StoreResult<Option<CredentialsGrant>>;
    /// Takes the identity whose signature hashes to `digest` once: `true` the first time,
    /// `false` ever after (until `until`, Unix seconds, after which its date refuses it
    /// anyway). A conditional write, so two requests with one identity at once get one `true`.
    async fn first_use(&self, digest: &str, until: u64) -> StoreResult<bool>;
}

/// The role tasks run with: a caller is a task when it is a session of this role, in this
/// account and partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskRole {
    /// The ARN partition.
    pub partition: String,
    /// The account.
    pub account: String,
    /// The role's name (an assumed-role ARN names the role without its path).
    pub name: String,
}

impl TaskRole {
    /// Reads `arn:<partition>:iam::<account>:role/[<path>/]<name>`.
    pub fn from_arn(arn: &str) -> Option<Self> {
        let rest = arn.strip_prefix("arn:")?;
        let (partition, rest) = rest.split_once(":iam::")?;
        let (account, path) = rest.split_once(":role/")?;
        let name = path.rsplit('/').next()?;
        let ok = !partition.is_empty()
            && account.len() == 12
            && account.bytes().all(|b| b.is_ascii_digit())
            && !name.is_empty();
        ok.then(|| Self {
            partition: partition.to_owned(),
            account: account.to_owned(),
            name: name.to_owned(),
        })
    }

    /// Whether `caller` is a session of this role.
    pub fn has(&self, caller: &CallerTask) -> bool {
        caller.partition == self.partition
            && caller.account == self.account
            && caller.role == self.name
    }
}

/// The task API's state.
#[derive(Clone)]
pub struct TaskApi {
    /// Checks identities with STS.
    pub identities: Arc<dyn Identities>,
    /// Claims and credentials.
    pub broker: Arc<dyn Broker>,
    /// The tasks' role.
    pub task_role: TaskRole,
}

/// The two routes over `api`, for merging into the API's router. No API key: the caller is a
/// task, and [`Task`] says which.
pub fn router(api: TaskApi) -> Router {
    Router::new()
        .route(CLAIMS_PATH, post(claims))
        .route(CREDENTIALS_PATH, post(credentials))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(api)
}

/// The calling task, as STS vouches for it: the first extractor of each route, so nothing is
/// read before the caller is known.
pub struct Task(pub CallerTask);

impl FromRequestParts<TaskApi> for Task {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, api: &TaskApi) -> Result<Self, ApiError> {
        let header = parts
            .headers
            .get(IDENTITY_HEADER)
            .ok_or_else(|| ApiError::unauthorized(format!("{IDENTITY_HEADER} is required")))?;
        let text = header.to_str().map_err(|_| {
            ApiError::unauthorized(
                wallcrawler_contract::task_api::IdentityError::Malformed.to_string(),
            )
        })?;
        let id = SignedIdentity::decode(text).map_err(|e| ApiError::unauthorized(e.to_string()))?;
        let now = wallcrawler_contract::time::unix_millis() / 1000;
        if let Err(e) = id.fresh_at(now) {
            info!(reason = %e, "a task identity was refused for its date");
            return Err(ApiError::unauthorized(e.to_string()));
        }
        let arn = match api.identities.caller(&id).await {
            Ok(arn) => arn,
            Err(IdentityCheck::Refused) => {
                info!("STS refused a task identity");
                return Err(ApiError::unauthorized(IdentityCheck::Refused.to_string()));
            }
            Err(IdentityCheck::Unavailable(e)) => return Err(e.into()),
        };
        let Some(task) = CallerTask::from_arn(&arn).filter(|t| api.task_role.has(t)) else {
            info!("a caller that is not a task asked the task API");
            return Err(ApiError::forbidden(
                "the caller is not a task of this platform",
            ));
        };
        // After STS: only a task's own signature is written down, never a stranger's junk.
        let until = id.signed_at().unwrap_or(now) + FRESH_SECONDS + 1;
        if !api.broker.first_use(&digest(&id), until).await? {
            info!(task.id = %task.task_id, "a task identity was offered a second time");
            return Err(ApiError::unauthorized(
                "the task identity was used before: each is taken once",
            ));
        }
        Ok(Task(task))
    }
}

/// The SHA-256 of an identity's signature (its `authorization`, which signs its date and
/// nonce), as hex: what [`Broker::first_use`] remembers, never the signature itself.
fn digest(id: &SignedIdentity) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(id.authorization.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The body as `T`, or the route's 400 (`shape` says what it must be) or 413.
fn body<T: serde::de::DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
    shape: &str,
) -> Result<T, ApiError> {
    let bytes = body.map_err(|_| {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is larger than {MAX_BODY_BYTES} bytes"),
        )
    })?;
    serde_json::from_slice(&bytes)
        .map_err(|_| ApiError::bad_request(format!("the body must be JSON {shape}")))
}

/// `POST /v1/internal/claims`: a claim and credentials (200), none in the wait (204), or 409
/// for a task that has had its session.
async fn claims(
    State(api): State<TaskApi>,
    Task(task): Task,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: ClaimRequest = body(raw, r#"{"waitSeconds": <0 to 20>}"#)?;
    if req.wait_seconds > MAX_WAIT_SECONDS {
        return Err(ApiError::bad_request(format!(
            "waitSeconds must be at most {MAX_WAIT_SECONDS}"
        )));
    }
    let wait = Duration::from_secs(req.wait_seconds);
    match api.broker.claim(&task, wait).await? {
        ClaimOutcome::Granted(grant) => Ok(Json(*grant).into_response()),
        ClaimOutcome::Nothing => Ok(StatusCode::NO_CONTENT.into_response()),
        ClaimOutcome::HadSession => {
            info!(task.id = %task.task_id, "a task that has had its session asked for a claim");
            Err(ApiError::conflict(
                "this task has had its session: a pool task serves one",
            ))
        }
    }
}

/// `POST /v1/internal/credentials`: fresh credentials for the caller's own session, else 403.
async fn credentials(
    State(api): State<TaskApi>,
    Task(task): Task,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: CredentialsRequest = body(raw, r#"{"sessionId": "<id>"}"#)?;
    let forbidden = || ApiError::forbidden("this task does not serve that session");
    if !valid_id(&req.session_id) {
        return Err(forbidden());
    }
    match api.broker.credentials(&task, &req.session_id).await? {
        Some(grant) => {
            info!(task.id = %task.task_id, session.id = %req.session_id, "session credentials granted");
            Ok(Json(grant).into_response())
        }
        None => {
            info!(task.id = %task.task_id, session.id = %req.session_id, "credentials refused: not the task's session");
            Err(forbidden())
        }
    }
}

/// `doc`'s control-mode live view for the controller serving it (what it answers a
/// `Wallcrawler.requestHandoff` with): a viewer credential until the session's expiry, on the
/// gateway's origin when the session was created behind it (`connectBase`; an older item's
/// `connectUrl`), else the controller's own address (`base` absent). `None` for an expired session or a signing failure (then handoffs
/// are refused; logged without the credential).
pub async fn live_view_grant(
    signer: &dyn Signer,
    doc: &wallcrawler_contract::session_doc::SessionDoc,
    now: u64,
) -> Option<wallcrawler_contract::task_api::LiveViewGrant> {
    use wallcrawler_contract::viewer::{Mode, ViewerClaims};
    let ttl = doc.expires_at.checked_sub(now).filter(|t| *t > 0)?;
    let claims = ViewerClaims::new(&doc.session_id, &doc.project_id, Mode::Control, now, ttl);
    match signer.sign_viewer(claims).await {
        Ok(credential) => Some(wallcrawler_contract::task_api::LiveViewGrant {
            credential,
            expires_at: doc.expires_at,
            base: doc
                .connect_base
                .as_deref()
                .or(doc.connect_url.as_deref())
                .and_then(crate::debug::viewer_base),
        }),
        Err(e) => {
            tracing::warn!(session.id = %doc.session_id, error = %crate::error::chain(&e), "no live view for the controller: handoffs will be refused");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_task_role_is_read_from_its_arn_path_and_all() {
        let r = TaskRole::from_arn("arn:aws:iam::123456789012:role/tasks/wc-task").unwrap();
        assert_eq!(r.name, "wc-task");
        let caller = |arn: &str| CallerTask::from_arn(arn).unwrap();
        assert!(r.has(&caller(
            "arn:aws:sts::123456789012:assumed-role/wc-task/0123abcd"
        )));
        for other in [
            "arn:aws:sts::123456789012:assumed-role/wc-api/0123abcd",
            "arn:aws:sts::210987654321:assumed-role/wc-task/0123abcd",
            "arn:aws-cn:sts::123456789012:assumed-role/wc-task/0123abcd",
        ] {
            assert!(!r.has(&caller(other)), "{other}");
        }
        for bad in [
            "arn:aws:iam::123456789012:user/wc-task",
            "arn:aws:iam::1234:role/wc-task",
            "arn:aws:iam::123456789012:role/",
        ] {
            assert_eq!(TaskRole::from_arn(bad), None, "{bad}");
        }
    }
}
