//! ECS Fargate as the task launcher ([`EcsLauncher`]): one `RunTask` per session, with the
//! controller's environment ([`controller_environment`]) as a container override. Anyone
//! allowed `ecs:DescribeTasks` reads those overrides, so they carry no secret: a session whose
//! proxies have credentials is refused on such a deployment ([`Launcher::carries_secrets`]).

use async_trait::async_trait;
use aws_config::SdkConfig;
use aws_sdk_ecs::operation::run_task::RunTaskOutput;
use aws_sdk_ecs::types::{
    AssignPublicIp, AwsVpcConfiguration, ContainerOverride, KeyValuePair, LaunchType,
    NetworkConfiguration, TaskOverride,
};
use tracing::{info, warn};
use wallcrawler_contract::egress::Egress;
use wallcrawler_contract::task_env;

use super::{Config, sdk_error};
use crate::error::StoreError;
use crate::stores::{LaunchSpec, Launcher, StoreResult};

/// The controller's environment for one session (the names of §2 of the spec). The session's
/// egress goes in `SESSION_EGRESS` only without credentials (its launch refuses one with); its
/// browser settings (nothing secret) in `SESSION_BROWSER`.
pub fn controller_environment(cfg: &Config, spec: &LaunchSpec) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = vec![
        (task_env::SESSION_ID.into(), spec.session_id.clone()),
        (task_env::PROJECT_ID.into(), spec.project_id.clone()),
        (
            task_env::SESSIONS_TABLE_NAME.into(),
            cfg.tables.sessions.clone(),
        ),
        (
            task_env::CDP_PROXY_PORT.into(),
            cfg.cdp_proxy_port.to_string(),
        ),
        (
            task_env::PUBLIC_KEY_SECRET_ARN.into(),
            cfg.public_key_secret_arn.clone(),
        ),
        // Every session's files (its downloads, its uploads) live in the contexts bucket, under
        // its files prefix, with or without a context.
        (
            task_env::FILES_BUCKET_NAME.into(),
            cfg.contexts_bucket.clone(),
        ),
    ];
    if let Some((context_id, key, persist)) = &spec.context {
        env.extend([
            (task_env::CONTEXT_ID.into(), context_id.clone()),
            (
                task_env::CONTEXTS_BUCKET_NAME.into(),
                cfg.contexts_bucket.clone(),
            ),
            (task_env::CONTEXT_S3_KEY.into(), key.clone()),
            (task_env::CONTEXT_PERSIST.into(), persist.to_string()),
        ]);
    }
    if let Some(key) = &spec.extension {
        if spec.context.is_none() {
            env.push((
                task_env::CONTEXTS_BUCKET_NAME.into(),
                cfg.contexts_bucket.clone(),
            ));
        }
        env.push((task_env::EXTENSION_S3_KEY.into(), key.clone()));
    }
    if let Some(e) = spec.egress.as_ref().filter(|e| !e.has_credentials()) {
        env.push((task_env::SESSION_EGRESS.into(), e.to_json()));
    }
    if let Some(b) = &spec.browser {
        env.push((task_env::SESSION_BROWSER.into(), b.to_json()));
    }
    env.extend(spec.env.iter().cloned());
    env
}

/// Starts one Fargate task per session (`RunTask`) and stops it on release (`StopTask`).
pub struct EcsLauncher {
    client: aws_sdk_ecs::Client,
    cfg: Config,
}

impl EcsLauncher {
    /// A launcher calling ECS with the SDK's configuration and `cfg`'s cluster and network.
    pub fn new(sdk: &SdkConfig, cfg: Config) -> Self {
        Self {
            client: aws_sdk_ecs::Client::new(sdk),
            cfg,
        }
    }

    /// The task's network: `cfg`'s subnets, security groups and public IP setting.
    fn network(&self) -> StoreResult<NetworkConfiguration> {
        let ecs = &self.cfg.ecs;
        let vpc = AwsVpcConfiguration::builder()
            .set_subnets(Some(ecs.subnets.clone()))
            .set_security_groups(
                (!ecs.security_groups.is_empty()).then(|| ecs.security_groups.clone()),
            )
            .assign_public_ip(if ecs.assign_public_ip {
                AssignPublicIp::Enabled
            } else {
                AssignPublicIp::Disabled
            })
            .build()
            .map_err(|e| StoreError::failed_by("ECS network configuration", e))?;
        Ok(NetworkConfiguration::builder()
            .awsvpc_configuration(vpc)
            .build())
    }

    /// The controller's container with the session's environment.
    fn overrides(&self, spec: &LaunchSpec) -> TaskOverride {
        let environment = controller_environment(&self.cfg, spec)
            .into_iter()
            .map(|(k, v)| KeyValuePair::builder().name(k).value(v).build())
            .collect();
        TaskOverride::builder()
            .container_overrides(
                ContainerOverride::builder()
                    .name(&self.cfg.ecs.container_name)
                    .set_environment(Some(environment))
                    .build(),
            )
            .build()
    }
}

const ECS: &str = "ECS";

/// The started task's ARN, or why `RunTask` started none.
fn started(spec: &LaunchSpec, out: &RunTaskOutput) -> StoreResult<String> {
    if let Some(f) = out.failures().first() {
        let reason = f.reason().unwrap_or("unknown");
        let detail = format!(
            "RunTask failed: {reason} {} {}",
            f.arn().unwrap_or_default(),
            f.detail().unwrap_or_default()
        );
        warn!(session.id = %spec.session_id, error = %detail, "the task was not started");
        // Capacity shortages pass; anything else is a configuration problem.
        return Err(if reason.starts_with("RESOURCE") {
            StoreError::unavailable_by("Fargate capacity", detail)
        } else {
            StoreError::failed_by(ECS, detail)
        });
    }
    out.tasks()
        .first()
        .and_then(|t| t.task_arn())
        .map(str::to_owned)
        .ok_or_else(|| StoreError::failed(format!("{ECS}: RunTask returned no task")))
}

#[async_trait]
impl Launcher for EcsLauncher {
    /// `RunTask`: FARGATE, one task, `startedBy` = the session id (which the task-state handler
    /// reads back), the session id as idempotency token (an SDK retry never starts a second
    /// task), the controller's environment as a container override.
    async fn launch(&self, spec: LaunchSpec) -> StoreResult<Option<String>> {
        if spec.egress.as_ref().is_some_and(Egress::has_credentials) {
            // The create refuses these first (`carries_secrets`); never into an override.
            return Err(StoreError::failed(
                "proxy credentials cannot go in a task's overrides",
            ));
        }
        let out = self
            .client
            .run_task()
            .cluster(&self.cfg.ecs.cluster)
            .task_definition(&self.cfg.ecs.task_definition)
            .launch_type(LaunchType::Fargate)
            .count(1)
            .started_by(&spec.session_id)
            .client_token(&spec.session_id)
            .network_configuration(self.network()?)
            .overrides(self.overrides(&spec))
            .send()
            .await
            .map_err(|e| sdk_error(ECS, e))?;
        let arn = started(&spec, &out)?;
        info!(session.id = %spec.session_id, task.arn = %arn, "task started");
        Ok(Some(arn))
    }

    /// Never: a task's overrides are readable by anyone allowed to describe it.
    fn carries_secrets(&self, _cold: bool) -> bool {
        false
    }

    /// `StopTask` with reason "released by API"; without a known ARN, every task `startedBy`
    /// the session is stopped.
    async fn stop(&self, session_id: &str, task_arn: Option<&str>) -> StoreResult<()> {
        let cluster = &self.cfg.ecs.cluster;
        let arns = match task_arn {
            Some(a) => vec![a.to_owned()],
            None => self
                .client
                .list_tasks()
                .cluster(cluster)
                .started_by(session_id)
                .send()
                .await
                .map_err(|e| sdk_error(ECS, e))?
                .task_arns()
                .to_vec(),
        };
        for arn in arns {
            self.client
                .stop_task()
                .cluster(cluster)
                .task(&arn)
                .reason("released by API")
                .send()
                .await
                .map_err(|e| sdk_error(ECS, e))?;
            info!(session.id = %session_id, task.arn = %arn, "task stopped");
        }
        Ok(())
    }
}

#[cfg(test)]
pub(super) mod tests {
    use wallcrawler_contract::egress::{Egress, ProxyServer, Route};

    use super::*;

    /// A configuration for launchers in tests.
    pub(in crate::aws) fn config() -> Config {
        let vars = [
            ("CONTEXTS_BUCKET_NAME", "wc-contexts"),
            ("ECS_CLUSTER", "wallcrawler"),
            ("ECS_TASK_DEFINITION", "wallcrawler-controller"),
            ("ECS_SUBNETS", "subnet-a"),
            ("WALLCRAWLER_JWT_SIGNING_SECRET_ARN", "arn:secret"),
            ("WALLCRAWLER_JWT_PUBLIC_KEY_SECRET_ARN", "arn:public"),
        ];
        Config::from_source(&|k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| (*v).to_owned())
        })
        .unwrap()
    }

    /// An SDK configuration whose every call fails at once (nothing listens on port 1): a
    /// launch's error names the service it called.
    pub(in crate::aws) async fn unreachable() -> SdkConfig {
        aws_config::defaults(aws_config::BehaviorVersion::latest())
            .endpoint_url("http://127.0.0.1:1")
            .region(aws_config::Region::new("us-east-1"))
            .credentials_provider(aws_sdk_ecs::config::Credentials::new(
                "testing", "testing", None, None, "test",
            ))
            .retry_config(aws_config::retry::RetryConfig::disabled())
            .load()
            .await
    }

    /// A session through one external proxy, with or without credentials.
    pub(in crate::aws) fn proxied(cold: bool, password: Option<&str>) -> LaunchSpec {
        let proxy =
            ProxyServer::parse("http://proxy.example:3128", password.map(|_| "u"), password)
                .unwrap();
        LaunchSpec {
            session_id: "sess_1".into(),
            project_id: "proj_1".into(),
            context: None,
            env: vec![],
            cold,
            extension: None,
            egress: Some(Egress {
                routes: vec![Route {
                    domain_pattern: None,
                    proxy: Some(proxy),
                }],
                allowed_domains: vec!["example.com".into()],
            }),
            browser: None,
        }
    }

    #[tokio::test]
    async fn a_task_per_session_never_carries_proxy_credentials() {
        let ecs = EcsLauncher::new(&unreachable().await, config());
        assert!(!ecs.carries_secrets(false) && !ecs.carries_secrets(true));
        // Refused before any call (the create refuses it first): never in an override.
        let e = ecs
            .launch(proxied(false, Some("pw-7f3e")))
            .await
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "proxy credentials cannot go in a task's overrides"
        );
        // Without credentials it goes as SESSION_EGRESS, and RunTask is called.
        let e = ecs.launch(proxied(false, None)).await.unwrap_err();
        assert_eq!(e.to_string(), "ECS is unavailable");
    }

    #[test]
    fn the_egress_goes_in_the_environment_only_without_credentials() {
        let cfg = config();
        let egress = |spec: &LaunchSpec| {
            controller_environment(&cfg, spec)
                .into_iter()
                .find(|(k, _)| k == task_env::SESSION_EGRESS)
                .map(|(_, v)| v)
        };
        let without = proxied(false, None);
        let json = egress(&without).expect("SESSION_EGRESS");
        assert_eq!(Egress::from_json(&json).unwrap(), without.egress.unwrap());
        let with = proxied(false, Some("pw-7f3e"));
        assert_eq!(egress(&with), None);
        assert!(
            !controller_environment(&cfg, &with)
                .iter()
                .any(|(_, v)| v.contains("pw-7f3e"))
        );
    }

    #[test]
    fn the_browser_settings_go_in_the_environment() {
        use wallcrawler_contract::browser::{BrowserSettings, Viewport};
        let cfg = config();
        let browser = |spec: &LaunchSpec| {
            controller_environment(&cfg, spec)
                .into_iter()
                .find(|(k, _)| k == task_env::SESSION_BROWSER)
                .map(|(_, v)| v)
        };
        let mut spec = proxied(true, None);
        assert_eq!(browser(&spec), None);
        let asked = BrowserSettings {
            viewport: Some(Viewport {
                width: 1288,
                height: 711,
            }),
            locales: vec!["de-DE".into()],
            ..Default::default()
        };
        spec.browser = Some(asked.clone());
        let json = browser(&spec).expect("SESSION_BROWSER");
        assert_eq!(BrowserSettings::from_json(&json).unwrap(), asked);
    }
}
