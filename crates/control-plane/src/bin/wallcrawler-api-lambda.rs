//! `wallcrawler-api-lambda`: the API — the same router as `wallcrawler-control-plane serve` —
//! as an AWS Lambda function behind API Gateway (REST or HTTP API, Lambda proxy integration),
//! on DynamoDB, S3, ECS and Secrets Manager, with API Gateway's stage prefix taken off the
//! path. Configured by the environment (see `aws::Config`); a configuration error is logged
//! with every problem listed, exit status 64.

use wallcrawler_control_plane::aws::{self, lambda};
use wallcrawler_control_plane::router;

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    lambda::init_tracing();
    let cfg = lambda::config_or_exit();
    let sdk = aws::sdk_config().await;
    let api = router::router(aws::build_app(&sdk, &cfg));
    lambda_http::run(lambda_http::tower::ServiceExt::map_request(
        api,
        lambda::strip_stage,
    ))
    .await
}
