//! API errors in Browserbase's shape: `{"statusCode": N, "error": "<reason phrase>",
//! "message": "<what was wrong>"}`. Messages name what was wrong and never carry a key or token.

use std::sync::Arc;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// An error answer.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{status}: {message}")]
pub struct ApiError {
    /// The HTTP status; also `statusCode` and, as its reason phrase, `error` in the body.
    pub status: StatusCode,
    /// `message`: what was wrong, for the client (never a key or token).
    pub message: String,
    /// Our failure behind a 5xx (a store's), for the log only.
    #[source]
    pub cause: Option<Arc<StoreError>>,
}

/// Two answers are the same when the client sees the same (the cause is for the log).
impl PartialEq for ApiError {
    fn eq(&self, other: &Self) -> bool {
        self.status == other.status && self.message == other.message
    }
}

impl Eq for ApiError {}

impl ApiError {
    /// An answer with this status and message.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            cause: None,
        }
    }

    /// This answer, with `cause` kept for the log.
    pub fn caused_by(mut self, cause: StoreError) -> Self {
        self.cause = Some(Arc::new(cause));
        self
    }

    /// Logs the cause of a failure of ours, once: where the answer is made.
    pub fn log_cause(&self) {
        if let Some(cause) = &self.cause {
            tracing::error!(status = %self.status, error = %chain(cause.as_ref()), "backend failure");
        }
    }
    /// 400: the request is malformed or out of range.
    pub fn bad_request(m: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, m)
    }
    /// 401: no API key, or an unknown one.
    pub fn unauthorized(m: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, m)
    }
    /// 403: the key, project or ownership does not allow this.
    pub fn forbidden(m: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, m)
    }
    /// 404: no such resource in the selected project.
    pub fn not_found(m: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, m)
    }
    /// 409: conflicts with the current state (e.g. a context with a live writer).
    pub fn conflict(m: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, m)
    }
    /// 429: the project's concurrency limit is reached.
    pub fn too_many(m: impl Into<String>) -> Self {
        Self::new(StatusCode::TOO_MANY_REQUESTS, m)
    }
    /// 501: an endpoint Browserbase has that is not implemented yet.
    pub fn not_implemented(m: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_IMPLEMENTED, m)
    }
    /// 500: our failure.
    pub fn internal(m: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, m)
    }
    /// 503: a service we depend on is unreachable for now.
    pub fn unavailable(m: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, m)
    }

    /// The JSON body: `{"statusCode", "error", "message"}`.
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({
            "statusCode": self.status.as_u16(),
            "error": self.status.canonical_reason().unwrap_or("Error"),
            "message": self.message,
        })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.log_cause();
        (self.status, Json(self.body())).into_response()
    }
}

/// What a store error carries as its cause.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A failure of a store, launcher or other outside service; becomes a 503 or a 500 whose
/// detail (the source chain) goes to the log only, once, where the response is made.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The named service could not be reached or is throttling (503, may succeed on retry).
    #[error("{service} is unavailable")]
    Unavailable {
        /// "the sessions table", "ECS", …
        service: &'static str,
        /// Why, when known.
        #[source]
        source: Option<BoxError>,
    },
    /// The call failed for another reason (500).
    #[error("{context}")]
    Failed {
        /// What was being done.
        context: String,
        /// Why, when known.
        #[source]
        source: Option<BoxError>,
    },
}

impl StoreError {
    /// `service` is unavailable, for no reason known beyond that.
    pub fn unavailable(service: &'static str) -> Self {
        Self::Unavailable {
            service,
            source: None,
        }
    }
    /// `service` is unavailable because of `source`.
    pub fn unavailable_by(service: &'static str, source: impl Into<BoxError>) -> Self {
        Self::Unavailable {
            service,
            source: Some(source.into()),
        }
    }
    /// `context` failed, for a reason it says itself.
    pub fn failed(context: impl Into<String>) -> Self {
        Self::Failed {
            context: context.into(),
            source: None,
        }
    }
    /// `context` failed because of `source`.
    pub fn failed_by(context: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Failed {
            context: context.into(),
            source: Some(source.into()),
        }
    }
}

impl From<wallcrawler_aws::item::ItemError> for StoreError {
    /// An item that does not map is a failure on our side (500; the detail goes to the log).
    fn from(e: wallcrawler_aws::item::ItemError) -> Self {
        StoreError::failed_by("a stored item", e)
    }
}

/// An error and its sources, `: `-joined, for one log line.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        out.push_str(": ");
        out.push_str(&s.to_string());
        next = s.source();
    }
    out
}

impl From<StoreError> for ApiError {
    /// The answer for a failed store; the error rides along as the cause, logged when the
    /// response is made ([`ApiError::into_response`]).
    fn from(e: StoreError) -> Self {
        let answer = match &e {
            StoreError::Unavailable { service, .. } => {
                ApiError::unavailable(format!("{service} is unavailable; try again"))
            }
            StoreError::Failed { .. } => ApiError::internal("the request could not be completed"),
        };
        answer.caused_by(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_shape() {
        let b = ApiError::forbidden("project proj_x is not one of this key's projects").body();
        assert_eq!(b["statusCode"], 403);
        assert_eq!(b["error"], "Forbidden");
        assert_eq!(
            b["message"],
            "project proj_x is not one of this key's projects"
        );
    }
}
