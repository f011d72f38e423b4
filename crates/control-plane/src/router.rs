//! The one router behind both the local server and the Lambda function.
//!
//! Retry advice: the stock Browserbase SDKs retry 408, 409, 429 and every 5xx twice (with
//! back-off, ~1.5 s in all, and no idempotency key) unless the answer's `x-should-retry`
//! says otherwise, which they obey before their own rule. Every 4xx and 5xx of every route
//! says `x-should-retry: false` — a refusal, a conflict with the session's state, the
//! concurrency limit (held by live sessions for minutes, not seconds) and our own failures
//! answer the same again — except a 503, which means a service we depend on was unreachable
//! or throttling for now and is worth the SDK's retries. `POST /v1/sessions` says `false` on
//! a 503 too: a retried create can start a second browser.

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::middleware::map_response;
use axum::response::Response;
use axum::routing::{get, post};

use crate::app::App;
use crate::extensions as x;
use crate::handlers as h;
use crate::uploads as u;

/// Browserbase's SDKs obey it before their own rule (retry 408, 409, 429 and every 5xx).
const X_SHOULD_RETRY: HeaderName = HeaderName::from_static("x-should-retry");

/// Every `/v1/…` route over `app`, with the retry advice of the module doc, and the
/// dashboard's page (`/dashboard`).
pub fn router(app: App) -> Router {
    Router::new()
        .route("/dashboard", get(crate::dashboard::dashboard))
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
            get(crate::files::session_downloads),
        )
        .route(
            "/v1/sessions/{id}/uploads",
            post(u::create_upload).layer(DefaultBodyLimit::max(u::MAX_BODY_BYTES)),
        )
        .merge(session_records())
        .route(
            "/v1/extensions",
            post(x::create_extension).layer(DefaultBodyLimit::max(x::MAX_BODY_BYTES)),
        )
        .route("/v1/sessions/{id}/uploads/url", post(u::create_upload_url))
        .route("/v1/extensions/uploads", post(x::start_upload))
        .route("/v1/extensions/uploads/{id}", post(x::finish_upload))
        .route(
            "/v1/extensions/{id}",
            get(x::get_extension).delete(x::delete_extension),
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
                StatusCode::METHOD_NOT_ALLOWED,
                "method not allowed on this endpoint",
            )
        })
        .layer(map_response(advise_retry))
        .with_state(app)
}

/// What a session keeps of itself: its log and its recording.
fn session_records() -> Router<App> {
    Router::new()
        .route(
            "/v1/sessions/{id}/logs",
            get(crate::session_logs::session_logs),
        )
        .route(
            "/v1/sessions/{id}/logs/stream",
            get(crate::session_logs::session_logs_stream),
        )
        .route(
            "/v1/sessions/{id}/recording",
            get(crate::recordings::recording_gone),
        )
        .route("/v1/sessions/{id}/replays", get(crate::recordings::replays))
        .route(
            "/v1/sessions/{id}/replays/{page_id}",
            get(crate::recordings::replay_page),
        )
        .route(
            "/v1/sessions/{id}/recording/downloads",
            post(crate::recordings::downloads::create_downloads)
                .get(crate::recordings::downloads::list_downloads),
        )
}

/// `x-should-retry: false` on every failure of the route it wraps, 503 included (the create).
async fn no_retry_on_failure(res: Response) -> Response {
    if res.status().is_success() {
        res
    } else {
        no_retry(res)
    }
}

/// Every route: `x-should-retry: false` on every 4xx and 5xx but a 503 (see the module doc);
/// advice a route gave itself stands.
async fn advise_retry(res: Response) -> Response {
    let status = res.status();
    let failed = status.is_client_error() || status.is_server_error();
    if failed && status != StatusCode::SERVICE_UNAVAILABLE {
        no_retry(res)
    } else {
        res
    }
}

/// `res`, saying `x-should-retry: false` unless it gives advice already.
fn no_retry(mut res: Response) -> Response {
    res.headers_mut()
        .entry(X_SHOULD_RETRY)
        .or_insert(HeaderValue::from_static("false"));
    res
}
