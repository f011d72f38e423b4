//! `wallcrawler-api-lambda`: the API — the same router as `wallcrawler-control-plane serve` —
//! as an AWS Lambda function behind API Gateway (REST or HTTP API, Lambda proxy integration),
//! on DynamoDB, S3, ECS and Secrets Manager, with API Gateway's stage prefix taken off the
//! path; with the task API configured, its routes too (`task_api`, outside the API-key check).
//! Configured by the environment (see `aws::Config`); a configuration error is logged with
//! every problem listed, exit status 64. The managed proxy pools (`MANAGED_PROXIES_SECRET_ARN`)
//! are read once here; a secret that cannot be read or is invalid exits 64 too.

use wallcrawler_control_plane::aws::{self, lambda};

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    lambda::init_tracing();
    // A configuration error is logged with every problem listed; exit status 64.
    let cfg = aws::Config::from_env().unwrap_or_else(|e| {
        tracing::error!("{e}");
        std::process::exit(64);
    });
    let sdk = aws::sdk_config().await;
    let cfg = match cfg.with_managed_proxies(&sdk).await {
        Ok(c) => c,
        Err(e) => {
            let e = wallcrawler_control_plane::error::chain(&e);
            tracing::error!("the managed proxy pools: {e}");
            std::process::exit(64);
        }
    };
    if !cfg.managed_proxies.is_empty() {
        tracing::info!(pools = %cfg.managed_proxies.summary(), "managed proxy pools");
    }
    let api = match aws::build_router(&sdk, &cfg) {
        Ok(api) => api,
        Err(e) => {
            tracing::error!("the task API cannot check identities: {e}");
            std::process::exit(64);
        }
    };
    lambda_http::run(lambda_http::tower::ServiceExt::map_request(
        api,
        lambda::strip_stage,
    ))
    .await
}
