//! Pool mode on AWS ([`SqsPoolLauncher`]): sessions as claims on the pool's SQS queue.

use async_trait::async_trait;
use aws_config::SdkConfig;
use tracing::info;

use super::{Config, EcsLauncher, sdk_error};
use crate::stores::{LaunchSpec, Launcher, StoreResult};

/// Pool mode: each session is a claim sent to the pool's SQS queue, which a warm pool task
/// takes (see the controller's pool mode); a release stops the task that wrote READY.
pub struct SqsPoolLauncher {
    sqs: aws_sdk_sqs::Client,
    queue_url: String,
    ecs: EcsLauncher,
}

impl SqsPoolLauncher {
    /// A launcher sending claims to `queue_url`; stops go to ECS as `cfg` says.
    pub fn new(sdk: &SdkConfig, queue_url: &str, cfg: Config) -> Self {
        Self {
            sqs: aws_sdk_sqs::Client::new(sdk),
            queue_url: queue_url.to_owned(),
            ecs: EcsLauncher::new(sdk, cfg),
        }
    }
}

const SQS: &str = "SQS";

#[async_trait]
impl Launcher for SqsPoolLauncher {
    /// `SendMessage` of the session's claim; no task ARN yet (the task that takes the claim
    /// writes its own with READY).
    async fn launch(&self, spec: LaunchSpec) -> StoreResult<Option<String>> {
        self.sqs
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(spec.claim().to_json())
            .send()
            .await
            .map_err(|e| sdk_error(SQS, e))?;
        info!(session.id = %spec.session_id, "claim sent to the pool");
        Ok(None)
    }

    /// `StopTask` of the task that wrote READY. Before READY there is none to stop: the task
    /// that takes the claim finds the session released and drops it; a task this misses (READY
    /// written after the release looked, a failed `StopTask`) sees its item terminal at its
    /// next `ITEM_WATCH_SECONDS` read and ends itself.
    async fn stop(&self, session_id: &str, task_arn: Option<&str>) -> StoreResult<()> {
        match task_arn {
            Some(_) => self.ecs.stop(session_id, task_arn).await,
            None => Ok(()),
        }
    }
}
