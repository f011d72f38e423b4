//! ECS task scale-in protection for a pool task serving a session.
//!
//! The pool's ECS service scales out on the claims queue's depth and back in when it is empty;
//! on a scale-in ECS stops tasks of its choosing, and without protection that can be a task
//! whose browser a client is driving. A claimed task therefore asks the ECS agent
//! (`$ECS_AGENT_URI/task-protection/v1/state`, which ECS sets in every Fargate task) to protect
//! it until its session can last no longer; idle warm tasks stay unprotected, so a scale-in
//! takes them. The task exits after its session, so the protection never outlives its use.
//!
//! With the task API (`TASK_API_URL`) the task asks the ECS API itself
//! (`UpdateTaskProtection`), signed with its session's credentials, whose policy allows it on
//! the task's own ARN only; the agent's endpoint would act with the task role.

use std::sync::Arc;
use std::time::Duration;

use http::{Method, StatusCode};
use serde_json::json;
use thiserror::Error;

use crate::public_ip::split_http_url;
use crate::stores::{StoreError, TaskProtection};
use crate::upstream;

/// The agent's longest protection: 48 hours.
pub(crate) const MAX_MINUTES: u64 = 2_880;

#[derive(Debug, Error)]
pub(crate) enum ProtectionError {
    #[error("ECS_AGENT_URI is not an http URL")]
    BadUri,
    #[error("the ECS agent could not be reached: {0}")]
    Unreachable(#[from] upstream::UpstreamError),
    #[error("the ECS agent refused (HTTP {status}): {detail}")]
    Refused { status: u16, detail: String },
    #[error("the ECS API: {0}")]
    Ecs(#[from] StoreError),
}

/// Who protects the task.
pub(crate) enum Protection {
    /// The ECS API, for the task of this ARN.
    Ecs(Arc<dyn TaskProtection>, String),
    /// The ECS agent at this URI (`ECS_AGENT_URI`).
    Agent(String),
}

impl Protection {
    /// Turns the task's scale-in protection on for `minutes`.
    pub(crate) async fn protect(self, minutes: u64) -> Result<(), ProtectionError> {
        match self {
            Self::Ecs(ecs, task_arn) => Ok(ecs.protect(&task_arn, minutes).await?),
            Self::Agent(uri) => protect(&uri, minutes).await,
        }
    }
}

/// Minutes of protection for a session expiring at `expires_at` (unix seconds) seen at `now`,
/// with `margin` for the shutdown after it: rounded up, at least 1, at most [`MAX_MINUTES`].
/// No expiry: the most the agent gives.
pub(crate) fn minutes_until(expires_at: Option<u64>, now: u64, margin: Duration) -> u64 {
    match expires_at {
        None => MAX_MINUTES,
        Some(at) => at
            .saturating_sub(now)
            .saturating_add(margin.as_secs())
            .div_ceil(60)
            .clamp(1, MAX_MINUTES),
    }
}

/// Turns the task's scale-in protection on for `minutes`.
pub(crate) async fn protect(agent_uri: &str, minutes: u64) -> Result<(), ProtectionError> {
    let (authority, path) = split_http_url(agent_uri).ok_or(ProtectionError::BadUri)?;
    let addr = tokio::net::lookup_host(&authority)
        .await
        .ok()
        .and_then(|mut a| a.next())
        .ok_or(ProtectionError::BadUri)?;
    let body = json!({"ProtectionEnabled": true, "ExpiresInMinutes": minutes}).to_string();
    let answer = upstream::http_request_json(
        &upstream::Endpoint::host(addr),
        Method::PUT,
        &format!("{path}/task-protection/v1/state"),
        body.into(),
        Duration::from_secs(5),
    )
    .await?;
    // 200 with `protection`, or an answer with `failure`/`error` (whose reason we pass on;
    // it names the task and the cause, nothing secret).
    let v: serde_json::Value = serde_json::from_slice(&answer.body).unwrap_or_default();
    if answer.status == StatusCode::OK && v.get("protection").is_some() {
        return Ok(());
    }
    let detail = v
        .get("failure")
        .or_else(|| v.get("error"))
        .map(|f| f.to_string())
        .unwrap_or_else(|| "no reason given".to_owned());
    Err(ProtectionError::Refused {
        status: answer.status.as_u16(),
        detail: detail.chars().take(300).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protection_lasts_until_the_session_cannot_and_within_the_agents_limits() {
        let margin = Duration::from_secs(30);
        assert_eq!(minutes_until(Some(1_000 + 3_600), 1_000, margin), 61);
        assert_eq!(minutes_until(Some(1_000 + 60), 1_000, Duration::ZERO), 1);
        assert_eq!(
            minutes_until(Some(500), 1_000, Duration::ZERO),
            1,
            "expired"
        );
        assert_eq!(minutes_until(Some(u64::MAX), 0, margin), MAX_MINUTES);
        assert_eq!(minutes_until(None, 1_000, margin), MAX_MINUTES);
    }
}
