//! `wallcrawler-sweeper-lambda`: the target of a schedule (an EventBridge rule, e.g. every
//! minute). Ends the sessions stranded past their claim's deadline or their expiry, stops
//! their tasks and gives back their slots and leases ([`sweep`]). The scheduled event's body
//! is ignored; the answer is the run's summary (`examined`, `ended`, `unserved`, `expired`,
//! `failed`). Reads the API function's environment (see `aws::Config`; a configuration error
//! is logged with every problem listed, exit status 64) (the same tables and task launcher:
//! `POOL_QUEUE_URL` set = pool tasks, stopped by the ARN their READY wrote). A failed index
//! query fails the invocation; the next scheduled run tries again.

use lambda_runtime::{LambdaEvent, service_fn};
use wallcrawler_control_plane::aws::{self, lambda};
use wallcrawler_control_plane::sweep::{PAGE_LIMIT, sweep};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    lambda::init_tracing();
    // A configuration error is logged with every problem listed; exit status 64.
    let cfg = aws::Config::from_env().unwrap_or_else(|e| {
        tracing::error!("{e}");
        std::process::exit(64);
    });
    let app = aws::build_app(&aws::sdk_config().await, &cfg);
    let app = &app;
    lambda_runtime::run(service_fn(|_: LambdaEvent<serde_json::Value>| async move {
        sweep(app, PAGE_LIMIT)
            .await
            .map_err(|e| wallcrawler_control_plane::error::chain(&e))
    }))
    .await
}
