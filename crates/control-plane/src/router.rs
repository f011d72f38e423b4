//! The one router behind both the local server and the Lambda function.

use axum::Router;
use axum::routing::{get, post};

use crate::app::App;
use crate::handlers as h;

pub fn router(app: App) -> Router {
    Router::new()
        .route(
            "/v1/sessions",
            post(h::create_session).get(h::list_sessions),
        )
        .route(
            "/v1/sessions/{id}",
            get(h::get_session).post(h::update_session),
        )
        .route("/v1/sessions/{id}/debug", get(h::debug_session))
        .route("/v1/sessions/{id}/downloads", get(h::not_implemented))
        .route("/v1/sessions/{id}/uploads", post(h::not_implemented))
        .route("/v1/sessions/{id}/logs", get(h::not_implemented))
        .route("/v1/sessions/{id}/recording", get(h::not_implemented))
        .route("/v1/extensions", post(h::not_implemented))
        .route(
            "/v1/extensions/{id}",
            get(h::not_implemented).delete(h::not_implemented),
        )
        .route("/v1/contexts", post(h::create_context))
        .route(
            "/v1/contexts/{id}",
            get(h::get_context)
                .put(h::update_context)
                .delete(h::delete_context),
        )
        .route("/v1/projects", get(h::list_projects))
        .route("/v1/projects/{id}", get(h::get_project))
        .route("/v1/projects/{id}/usage", get(h::project_usage))
        .fallback(|| async { crate::error::ApiError::not_found("no such endpoint") })
        .method_not_allowed_fallback(|| async {
            crate::error::ApiError::new(
                axum::http::StatusCode::METHOD_NOT_ALLOWED,
                "method not allowed on this endpoint",
            )
        })
        .with_state(app)
}
