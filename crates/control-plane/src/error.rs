//! API errors in Browserbase's shape: `{"statusCode": N, "error": "<reason phrase>",
//! "message": "<what was wrong>"}`. Messages name what was wrong and never carry a key or token.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// An error answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status}: {message}")]
pub struct ApiError {
    /// The HTTP status; also `statusCode` and, as its reason phrase, `error` in the body.
    pub status: StatusCode,
    /// `message`: what was wrong, for the client (never a key or token).
    pub message: String,
}

impl ApiError {
    /// An answer with this status and message.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
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
        (self.status, Json(self.body())).into_response()
    }
}

/// A failure of a store, launcher or other outside service; becomes a 500/503 without detail
/// leaking beyond the message.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PortError {
    /// The named service could not be reached (503, may succeed on retry).
    #[error("{0} is unavailable")]
    Unavailable(String),
    /// The call failed for another reason (500); the message says what.
    #[error("{0}")]
    Failed(String),
}

impl From<wallcrawler_aws::item::ItemError> for PortError {
    /// An item that does not map is a failure on our side (500; the detail goes to the log).
    fn from(e: wallcrawler_aws::item::ItemError) -> Self {
        PortError::Failed(e.to_string())
    }
}

impl From<PortError> for ApiError {
    fn from(e: PortError) -> Self {
        tracing::error!(error = %e, "backend failure");
        match e {
            PortError::Unavailable(what) => {
                ApiError::unavailable(format!("{what} is unavailable; try again"))
            }
            PortError::Failed(_) => ApiError::internal("the request could not be completed"),
        }
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
