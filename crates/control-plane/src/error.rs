//! API errors in Browserbase's shape: `{"statusCode": N, "error": "<reason phrase>",
//! "message": "<what was wrong>"}`. Messages name what was wrong and never carry a key or token.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// An error answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status}: {message}")]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
    pub fn bad_request(m: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, m)
    }
    pub fn unauthorized(m: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, m)
    }
    pub fn forbidden(m: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, m)
    }
    pub fn not_found(m: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, m)
    }
    pub fn conflict(m: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, m)
    }
    pub fn too_many(m: impl Into<String>) -> Self {
        Self::new(StatusCode::TOO_MANY_REQUESTS, m)
    }
    pub fn not_implemented(m: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_IMPLEMENTED, m)
    }
    pub fn internal(m: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, m)
    }
    pub fn unavailable(m: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, m)
    }

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
    #[error("{0} is unavailable")]
    Unavailable(String),
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
