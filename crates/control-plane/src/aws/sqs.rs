//! Pool mode on AWS ([`SqsPoolLauncher`]): sessions as claims on the pool's SQS queue, and a
//! project's sessions beyond its share of the pool as tasks of their own (`RunTask`).

use async_trait::async_trait;
use aws_config::SdkConfig;
use tracing::info;
use wallcrawler_contract::egress::Egress;
use wallcrawler_contract::task_env;

use super::{Config, EcsLauncher, sdk_error};
use crate::stores::{LaunchSpec, Launcher, StoreResult};

/// Pool mode: each session is a claim sent to the pool's SQS queue, which a warm pool task
/// takes (see the controller's pool mode); a release stops the task that wrote READY. A
/// session marked [`LaunchSpec::cold`] gets a task of its own instead: `RunTask` of the pool's
/// task definition with `POOL_QUEUE_URL` overridden empty, so the controller runs in
/// single-session mode for that session (the `SESSION_ID` the override sets). A cold session
/// whose proxies have credentials is sent to the pool all the same: only a claim passes them
/// on privately (a task's overrides do not).
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
    /// writes its own with READY). A cold session: `RunTask`, its ARN, unless its proxies have
    /// credentials (then a claim all the same).
    async fn launch(&self, mut spec: LaunchSpec) -> StoreResult<Option<String>> {
        let secrets = spec.egress.as_ref().is_some_and(Egress::has_credentials);
        if spec.cold && secrets {
            info!(session.id = %spec.session_id, "beyond its project's share of the pool, but its proxies have credentials, which only a claim passes on privately: sent to the pool");
        }
        if spec.cold && !secrets {
            // The task definition is the pool's: its POOL_QUEUE_URL would make the task a
            // pool task, and its CONTEXTS_BUCKET_NAME without a context is refused in
            // single-session mode (empty counts as unset).
            spec.env
                .push((task_env::POOL_QUEUE_URL.into(), String::new()));
            if spec.context.is_none() {
                spec.env
                    .push((task_env::CONTEXTS_BUCKET_NAME.into(), String::new()));
            }
            return self.ecs.launch(spec).await;
        }
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

    /// `StopTask` of the task named: a pool task's (written when it took the claim, and with
    /// READY), or a cold task's, written with PROVISIONING by its create. Before that there is
    /// none to stop: the task that takes the claim finds the session released and drops it; a
    /// task this misses (a failed `StopTask`) sees its item terminal at its next
    /// `ITEM_WATCH_SECONDS` read and ends itself.
    async fn stop(&self, session_id: &str, task_arn: Option<&str>) -> StoreResult<()> {
        match task_arn {
            Some(_) => self.ecs.stop(session_id, task_arn).await,
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::ecs::tests::{config, proxied, unreachable};
    use super::*;

    #[tokio::test]
    async fn a_cold_session_with_proxy_credentials_goes_to_the_pool() {
        let sdk = unreachable().await;
        let pool = SqsPoolLauncher::new(&sdk, "http://127.0.0.1:1/123456789012/q", config());
        assert!(pool.carries_secrets(true) && pool.carries_secrets(false));
        // Which service each launch called: the claims queue, or RunTask.
        let e = pool
            .launch(proxied(true, Some("pw-7f3e")))
            .await
            .unwrap_err();
        assert_eq!(e.to_string(), "SQS is unavailable");
        let e = pool.launch(proxied(true, None)).await.unwrap_err();
        assert_eq!(e.to_string(), "ECS is unavailable");
        let e = pool.launch(proxied(false, None)).await.unwrap_err();
        assert_eq!(e.to_string(), "SQS is unavailable");
    }
}
