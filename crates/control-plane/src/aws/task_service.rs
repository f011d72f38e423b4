//! `wallcrawler-control-plane task-api`: the task API ([`crate::task_api`]) as an always-on
//! service of its own, off the customer edge. In gateway mode the stack runs it as an ECS
//! service in the private subnets behind an internal load balancer (TLS ends there, with the
//! connect host's certificate); the browser tasks reach it without NAT, API Gateway, WAF or
//! Lambda, so a long poll is bounded by its own wait (SQS's 20 s) and nothing cuts it at 29 s.
//!
//! The same routes, identity check, claim transaction and session policy as ever (the
//! router is [`crate::task_api::router`] over [`super::build_task_api`]), plus `GET /health`
//! for the load balancer; every other path is the API's JSON 404. At most [`MAX_IN_FLIGHT`]
//! requests are served at once (each long poll holds one), the next get a 503 the tasks retry.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::sync::Semaphore;

use crate::error::ApiError;
use crate::task_api::TaskApi;

/// Where the service listens by default (`TASK_API_LISTEN`): the container port the stack's
/// target group forwards to.
pub const DEFAULT_LISTEN: &str = "0.0.0.0:8080";
/// Requests served at once by one service task: a warm browser task holds one long poll, so
/// this is the warm tasks one service task carries (the stack runs two or more).
pub const MAX_IN_FLIGHT: usize = 4096;

/// The service's router: the task API's two routes, `GET /health`, a JSON 404 for the rest,
/// and the in-flight bound.
pub fn router(api: TaskApi) -> Router {
    let routes = crate::task_api::router(api)
        .route("/health", get(|| async { "ok" }))
        .fallback(|| async { ApiError::not_found("no such endpoint") });
    bound(routes, MAX_IN_FLIGHT)
}

/// `routes` serving at most `in_flight` requests at once.
fn bound(routes: Router, in_flight: usize) -> Router {
    let permits = Arc::new(Semaphore::new(in_flight));
    routes.layer(middleware::from_fn_with_state(permits, bounded))
}

/// Serves `req` while a permit is free, else 503 (the tasks' client retries a 5xx soon).
async fn bounded(State(permits): State<Arc<Semaphore>>, req: Request, next: Next) -> Response {
    let Ok(_permit) = permits.try_acquire_owned() else {
        return ApiError::unavailable("the task API is serving as many requests as it takes")
            .into_response();
    };
    next.run(req).await
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use async_trait::async_trait;
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use tokio::sync::Notify;
    use wallcrawler_contract::task_api::{CallerTask, CredentialsGrant, SignedIdentity};

    use super::*;
    use crate::stores::StoreResult;
    use crate::task_api::{Broker, ClaimOutcome, Identities, IdentityCheck, TaskRole};

    /// STS that is never reached: the requests here carry no identity, or none is needed.
    struct NoSts;

    #[async_trait]
    impl Identities for NoSts {
        async fn caller(&self, _: &SignedIdentity) -> Result<String, IdentityCheck> {
            Err(IdentityCheck::Refused)
        }
    }

    /// A broker whose claims wait until released.
    struct Held(Arc<Notify>);

    #[async_trait]
    impl Broker for Held {
        async fn claim(&self, _: &CallerTask, _: Duration) -> StoreResult<ClaimOutcome> {
            self.0.notified().await;
            Ok(ClaimOutcome::Nothing)
        }
        async fn credentials(
            &self,
            _: &CallerTask,
            _: &str,
        ) -> StoreResult<Option<CredentialsGrant>> {
            Ok(None)
        }
        async fn first_use(&self, _: &str, _: u64) -> StoreResult<bool> {
            Ok(true)
        }
    }

    fn api() -> TaskApi {
        TaskApi {
            identities: Arc::new(NoSts),
            broker: Arc::new(Held(Arc::new(Notify::new()))),
            task_role: TaskRole::from_arn("arn:aws:iam::123456789012:role/wc-task").unwrap(),
        }
    }

    async fn status(app: &Router, method: &str, path: &str) -> (StatusCode, String) {
        use tower::ServiceExt as _;
        let req = Request::builder()
            .method(method)
            .uri(path)
            .body(Body::empty())
            .unwrap();
        let res = app.clone().oneshot(req).await.unwrap();
        let status = res.status();
        let body = axum::body::to_bytes(res.into_body(), 64 * 1024)
            .await
            .unwrap();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn the_service_answers_health_the_task_routes_and_nothing_of_the_api() {
        let app = router(api());
        assert_eq!(
            status(&app, "GET", "/health").await,
            (StatusCode::OK, "ok".into())
        );
        // The task routes are there: without an identity, the task API's own 401.
        let (s, body) = status(&app, "POST", "/v1/internal/claims").await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{body}");
        assert!(
            body.contains("x-wallcrawler-task-identity is required"),
            "{body}"
        );
        // The customer API is not: no session can be created or listed here.
        for (method, path) in [
            ("POST", "/v1/sessions"),
            ("GET", "/v1/sessions"),
            ("GET", "/"),
        ] {
            let (s, body) = status(&app, method, path).await;
            assert_eq!(s, StatusCode::NOT_FOUND, "{method} {path}: {body}");
            assert!(body.contains("no such endpoint"), "{body}");
        }
    }

    #[tokio::test]
    async fn requests_past_the_in_flight_bound_get_a_503_and_the_held_one_finishes() {
        let release = Arc::new(Notify::new());
        let entered = Arc::new(Notify::new());
        let (r, e) = (release.clone(), entered.clone());
        let routes = Router::new()
            .route(
                "/hold",
                get(move || async move {
                    e.notify_one();
                    r.notified().await;
                    "held"
                }),
            )
            .route("/health", get(|| async { "ok" }));
        let app = bound(routes, 1);
        let held = tokio::spawn({
            let app = app.clone();
            async move { status(&app, "GET", "/hold").await }
        });
        entered.notified().await;
        let (s, body) = status(&app, "GET", "/health").await;
        assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        assert!(body.contains("as many requests"), "{body}");
        release.notify_one();
        let done = tokio::time::timeout(Duration::from_secs(30), held).await;
        assert_eq!(
            done.expect("bounded").unwrap(),
            (StatusCode::OK, "held".into())
        );
        assert_eq!(status(&app, "GET", "/health").await.0, StatusCode::OK);
    }
}
