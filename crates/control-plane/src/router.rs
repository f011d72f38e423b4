//! The one router behind both the local server and the Lambda function.

use axum::Router;
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::map_response;
use axum::response::Response;
use axum::routing::{MethodFilter, MethodRouter, get, on, post};

use crate::app::App;
use crate::handlers as h;

/// Browserbase's SDKs obey it before their own rule (retry 408, 409, 429 and every 5xx).
const X_SHOULD_RETRY: HeaderName = HeaderName::from_static("x-should-retry");

/// Every `/v1/…` route over `app`; failures of `POST /v1/sessions` and of the unimplemented
/// routes carry `x-should-retry: false`.
pub fn router(app: App) -> Router {
    Router::new()
        .route(
            "/v1/sessions",
            post(h::create_session)
                .route_layer(map_response(no_retry_on_failure))
                .get(h::list_sessions),
        )
        .route(
            "/v1/sessions/{id}",
            get(h::get_session).post(h::update_session),
        )
        .route("/v1/sessions/{id}/debug", get(h::debug_session))
        .route(
            "/v1/sessions/{id}/downloads",
            unimplemented(MethodFilter::GET),
        )
        .route(
            "/v1/sessions/{id}/uploads",
            unimplemented(MethodFilter::POST),
        )
        .route("/v1/sessions/{id}/logs", unimplemented(MethodFilter::GET))
        .route(
            "/v1/sessions/{id}/recording",
            unimplemented(MethodFilter::GET),
        )
        .route("/v1/extensions", unimplemented(MethodFilter::POST))
        .route(
            "/v1/extensions/{id}",
            unimplemented(MethodFilter::GET.or(MethodFilter::DELETE)),
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

/// A Browserbase endpoint Wallcrawler does not implement yet: 501, never worth a retry.
fn unimplemented(methods: MethodFilter) -> MethodRouter<App> {
    on(methods, h::not_implemented).route_layer(map_response(no_retry_on_failure))
}

/// `x-should-retry: false` on every failure of the routes it wraps. The stock Browserbase
/// SDKs retry 408, 409, 429 and every 5xx twice, with no idempotency key, unless this header
/// says otherwise: a retried `POST /v1/sessions` can start a second browser, and a 501 only
/// answers 501 again after ~1.5 s of back-off.
async fn no_retry_on_failure(mut res: Response) -> Response {
    if !res.status().is_success() {
        res.headers_mut()
            .insert(X_SHOULD_RETRY, HeaderValue::from_static("false"));
    }
    res
}
