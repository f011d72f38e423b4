//! The API function's configuration ([`Config::from_env`]: table names, bucket, ECS, the
//! signing secret) and the wiring of the AWS stores into an [`App`] ([`build_app`]).

use std::sync::Arc;
use std::time::Duration;

use aws_config::SdkConfig;
use wallcrawler_contract::claim::ClaimWait;
use wallcrawler_contract::task_env;

use super::{
    DynamoContexts, DynamoKeys, DynamoProjects, DynamoSessions, DynamoSlots, EcsLauncher,
    S3Archives, SecretsSigner, SqsPoolLauncher, TaskBroker,
};
use crate::app::{App, Settings};
use crate::stores::SystemClock;
use crate::task_api::{Identities, TaskApi, TaskRole};

/// Table names; each defaults to the schema's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tables {
    /// `SESSIONS_TABLE_NAME`, default `wallcrawler-sessions`.
    pub sessions: String,
    /// `PROJECTS_TABLE_NAME`, default `wallcrawler-projects`.
    pub projects: String,
    /// `API_KEYS_TABLE_NAME`, default `wallcrawler-api-keys`.
    pub api_keys: String,
    /// `CONTEXTS_TABLE_NAME`, default `wallcrawler-contexts`.
    pub contexts: String,
    /// `SLOTS_TABLE_NAME`, default `wallcrawler-slots`: projects' concurrency slots.
    pub slots: String,
}

impl Default for Tables {
    fn default() -> Self {
        Self {
            sessions: "wallcrawler-sessions".into(),
            projects: "wallcrawler-projects".into(),
            api_keys: "wallcrawler-api-keys".into(),
            contexts: "wallcrawler-contexts".into(),
            slots: "wallcrawler-slots".into(),
        }
    }
}

/// A variable's value; empty counts as unset.
fn var(get: &dyn Fn(&str) -> Option<String>, name: &str) -> Option<String> {
    get(name)
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

impl Tables {
    /// Reads the five `*_TABLE_NAME` variables from `get` (the environment in the binaries).
    pub fn from_source(get: &dyn Fn(&str) -> Option<String>) -> Self {
        let d = Self::default();
        Self {
            sessions: var(get, "SESSIONS_TABLE_NAME").unwrap_or(d.sessions),
            projects: var(get, "PROJECTS_TABLE_NAME").unwrap_or(d.projects),
            api_keys: var(get, "API_KEYS_TABLE_NAME").unwrap_or(d.api_keys),
            contexts: var(get, "CONTEXTS_TABLE_NAME").unwrap_or(d.contexts),
            slots: var(get, "SLOTS_TABLE_NAME").unwrap_or(d.slots),
        }
    }

    /// Reads the process environment.
    pub fn from_env() -> Self {
        Self::from_source(&|k| std::env::var(k).ok())
    }
}

/// How session tasks are started on ECS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EcsSettings {
    /// `ECS_CLUSTER` (name or ARN).
    pub cluster: String,
    /// `ECS_TASK_DEFINITION` (`family`, `family:revision` or ARN).
    pub task_definition: String,
    /// `ECS_SUBNETS`, comma-separated.
    pub subnets: Vec<String>,
    /// `ECS_SECURITY_GROUPS`, comma-separated; empty = the VPC's default group.
    pub security_groups: Vec<String>,
    /// `ECS_ASSIGN_PUBLIC_IP` (`ENABLED`, the default, or `DISABLED`). Clients connect to the
    /// task's public IP, so disable it only with a network design of your own.
    pub assign_public_ip: bool,
    /// `ECS_CONTAINER_NAME`: the controller's container in the task definition, default
    /// `controller`.
    pub container_name: String,
}

/// Everything the API function needs besides the SDK's own configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The DynamoDB tables.
    pub tables: Tables,
    /// `CONTEXTS_BUCKET_NAME` (required).
    pub contexts_bucket: String,
    /// How session tasks are started on ECS.
    pub ecs: EcsSettings,
    /// `CDP_PROXY_PORT`, default 9223 (passed on to the task).
    pub cdp_proxy_port: u16,
    /// `WALLCRAWLER_JWT_SIGNING_SECRET_ARN` (required): the private key that signs tokens here
    /// (and MACs cursors); only the control plane's roles read it.
    pub signing_secret_arn: String,
    /// `WALLCRAWLER_JWT_PUBLIC_KEY_SECRET_ARN` (required): the public key secret, passed on to
    /// the tasks, which verify tokens with it.
    pub public_key_secret_arn: String,
    /// How long `POST /v1/sessions` waits for READY, counted from API Gateway's receive time:
    /// [`CREATE_BUDGET`], or less with `CREATE_WAIT_SECONDS` (never more).
    pub create_wait: Duration,
    /// `POOL_QUEUE_URL`: sessions are claimed by warm pool tasks through this SQS queue
    /// instead of a `RunTask` per session.
    pub pool_queue_url: Option<String>,
    /// `CONNECT_BASE_URL`: the connect gateway's base URL (`ws://` or `wss://`); when set the
    /// create answers at once with `connectUrl` formed from it.
    pub connect_base_url: Option<String>,
    /// `CLAIM_WAIT_SECONDS` (default 60) and `CLAIM_WAIT_MAX_SECONDS` (default 600): how long
    /// a session waits for a browser after its create and after each poll, and at most.
    pub claim_wait: ClaimWait,
    /// `POOL_PROJECT_SHARE`: the most warm pool tasks one project takes at once; its sessions
    /// beyond it are started cold (`RunTask`). Unset or 0: no share.
    pub pool_share: Option<u64>,
    /// The task API ([`crate::task_api`]): on when `TASKS_TABLE_NAME`, `SESSION_ROLE_ARN` and
    /// `TASK_ROLE_ARN` are set, with `POOL_QUEUE_URL`.
    pub task_api: Option<TaskApiSettings>,
    /// `MANAGED_PROXIES_SECRET_ARN`: the secret listing the managed proxy pools
    /// ([`crate::egress::pools`]), read by [`Config::with_managed_proxies`].
    pub managed_proxies_secret_arn: Option<String>,
    /// The managed proxy pools, as read from that secret (empty until then, and without it).
    pub managed_proxies: crate::egress::ManagedProxies,
}

/// What the task API needs besides the rest of [`Config`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskApiSettings {
    /// `TASKS_TABLE_NAME`: one item per task that has taken a session (key `taskId`), so a
    /// task takes one session in its life.
    pub tasks_table: String,
    /// `SESSION_ROLE_ARN`: the role whose credentials, narrowed by a session policy, a task
    /// gets for its session.
    pub session_role_arn: String,
    /// `TASK_ROLE_ARN`: the tasks' role; only its sessions are tasks.
    pub task_role: TaskRole,
    /// `POOL_QUEUE_URL`: the claims queue.
    pub queue_url: String,
    /// The queue's account and name, from its URL (`…/<account>/<name>`): with the region,
    /// its ARN, which session policies name.
    pub queue: (String, String),
    /// `POOL_CLAIM_VISIBILITY_SECONDS` (default 60, 1 to 43200): how long a claim handed to a
    /// task stays hidden, and the lease its session's owner gets (kept alive with the claim).
    pub claim_visibility: u64,
}

/// The variables that turn the task API on, all or none.
const TASK_API_VARS: [&str; 3] = ["TASKS_TABLE_NAME", "SESSION_ROLE_ARN", "TASK_ROLE_ARN"];

/// SQS's longest visibility timeout, seconds.
const MAX_VISIBILITY: u64 = 43_200;

/// The task API's settings: `None` when none of [`TASK_API_VARS`] is set; problems (a partial
/// set, a role ARN that is not one, a queue URL of another shape, a visibility out of range)
/// are added to `problems`.
fn task_api(
    get: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<String>,
) -> Option<TaskApiSettings> {
    let [tasks, session_role, task_role] = TASK_API_VARS.map(|n| var(get, n));
    let queue = var(get, "POOL_QUEUE_URL");
    let (Some(tasks_table), Some(session_role_arn), Some(role), Some(queue_url)) = (
        tasks.clone(),
        session_role.clone(),
        task_role.clone(),
        queue.clone(),
    ) else {
        let set = [&tasks, &session_role, &task_role];
        if set.iter().any(|v| v.is_some()) {
            let missing: Vec<&str> = TASK_API_VARS
                .iter()
                .zip(set)
                .filter(|(_, v)| v.is_none())
                .map(|(n, _)| *n)
                .chain(queue.is_none().then_some("POOL_QUEUE_URL"))
                .collect();
            problems.push(format!(
                "the task API needs TASKS_TABLE_NAME, SESSION_ROLE_ARN, TASK_ROLE_ARN and \
                 POOL_QUEUE_URL together; missing: {}",
                missing.join(", ")
            ));
        }
        return None;
    };
    let task_role = TaskRole::from_arn(&role);
    if task_role.is_none() {
        problems.push(format!(
            "TASK_ROLE_ARN must be an IAM role's ARN, got {role:?}"
        ));
    }
    let queue = queue_of(&queue_url);
    if queue.is_none() {
        problems.push(format!(
            "POOL_QUEUE_URL must end in /<account>/<queue name>, got {queue_url:?}"
        ));
    }
    let claim_visibility = number(get, "POOL_CLAIM_VISIBILITY_SECONDS", 60u64)
        .filter(|v| (1..=MAX_VISIBILITY).contains(v));
    if claim_visibility.is_none() {
        problems.push(format!(
            "POOL_CLAIM_VISIBILITY_SECONDS must be a whole number of seconds from 1 to {MAX_VISIBILITY}"
        ));
    }
    Some(TaskApiSettings {
        tasks_table,
        session_role_arn,
        task_role: task_role?,
        queue_url,
        queue: queue?,
        claim_visibility: claim_visibility?,
    })
}

/// The queue's account and name from its URL, `https://sqs.<region>.amazonaws.com/<account>/<name>`
/// (and moto's `http://…/<account>/<name>`): its last two path segments.
fn queue_of(url: &str) -> Option<(String, String)> {
    let mut segments = url.trim_end_matches('/').rsplit('/');
    let name = segments.next()?;
    let account = segments.next()?;
    let ok = account.len() == 12
        && account.bytes().all(|b| b.is_ascii_digit())
        && !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    ok.then(|| (account.to_owned(), name.to_owned()))
}

/// `CONNECT_BASE_URL`, checked; problems are added to `problems`.
fn connect_base(
    get: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<String>,
) -> Option<String> {
    let url = var(get, "CONNECT_BASE_URL");
    if let Some(u) = &url
        && !crate::handlers::is_connect_base(u)
    {
        problems.push(format!(
            "CONNECT_BASE_URL must be ws://HOST[:PORT] or wss://HOST[:PORT], got {u:?}"
        ));
    }
    url
}

/// `POOL_PROJECT_SHARE`: a whole number; unset or 0 = no share. Problems are added to
/// `problems`.
fn pool_share(get: &dyn Fn(&str) -> Option<String>, problems: &mut Vec<String>) -> Option<u64> {
    match number(get, "POOL_PROJECT_SHARE", 0u64) {
        Some(0) => None,
        Some(n) => Some(n),
        None => {
            problems.push(
                "POOL_PROJECT_SHARE must be a whole number of warm tasks (0 = no share)".into(),
            );
            None
        }
    }
}

/// `CLAIM_WAIT_SECONDS` and `CLAIM_WAIT_MAX_SECONDS` (whole seconds, the wait at least 1 and
/// no more than the maximum); problems are added to `problems`.
pub(super) fn claim_wait(
    get: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<String>,
) -> ClaimWait {
    let d = ClaimWait::default();
    let wait = number(get, "CLAIM_WAIT_SECONDS", d.wait).filter(|w| *w > 0);
    let max = number(get, "CLAIM_WAIT_MAX_SECONDS", d.max);
    match (wait, max) {
        (Some(wait), Some(max)) if wait <= max => return ClaimWait { wait, max },
        (Some(_), Some(_)) => {
            problems.push("CLAIM_WAIT_SECONDS must not be more than CLAIM_WAIT_MAX_SECONDS".into())
        }
        (w, m) => {
            if w.is_none() {
                problems.push(
                    "CLAIM_WAIT_SECONDS must be a whole number of seconds, at least 1".into(),
                );
            }
            if m.is_none() {
                problems.push("CLAIM_WAIT_MAX_SECONDS must be a whole number of seconds".into());
            }
        }
    }
    d
}

/// API Gateway's integration timeout: it answers 504 itself after this, whatever the function
/// does (documented limit, not raisable for Lambda proxy integrations of a REST API by default).
pub(super) const INTEGRATION_LIMIT: Duration = Duration::from_secs(29);

/// Time a create keeps, after its wait for READY, to answer: stopping an unclaimed task, giving
/// its slot back, writing the item, the response itself (each call bounded by the SDK's
/// timeouts, `CallLimits::API`).
pub(super) const ANSWER_MARGIN: Duration = Duration::from_secs(3);

/// How long a create may wait for READY, from API Gateway's receive time: the integration
/// limit less the margin to answer, so the function always answers before API Gateway's 504
/// (which the SDKs would retry into duplicate sessions).
pub(super) const CREATE_BUDGET: Duration = INTEGRATION_LIMIT.saturating_sub(ANSWER_MARGIN);

/// Every configuration problem, listed at once.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration: {}", .0.join("; "))]
pub struct ConfigError(pub Vec<String>);

fn list(v: Option<String>) -> Vec<String> {
    v.map(|v| {
        v.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    })
    .unwrap_or_default()
}

/// `ECS_ASSIGN_PUBLIC_IP`: `ENABLED` (the default) or `DISABLED`.
fn public_ip(get: &dyn Fn(&str) -> Option<String>, problems: &mut Vec<String>) -> bool {
    match var(get, "ECS_ASSIGN_PUBLIC_IP")
        .map(|v| v.to_ascii_uppercase())
        .as_deref()
    {
        None | Some("ENABLED" | "TRUE") => true,
        Some("DISABLED" | "FALSE") => false,
        Some(other) => {
            problems.push(format!(
                "ECS_ASSIGN_PUBLIC_IP must be ENABLED or DISABLED, got {other:?}"
            ));
            true
        }
    }
}

/// Variable `name` as a number: `default` when unset, `None` when it does not parse (the
/// caller says what it must be).
fn number<T: std::str::FromStr>(
    get: &dyn Fn(&str) -> Option<String>,
    name: &str,
    default: T,
) -> Option<T> {
    match var(get, name) {
        None => Some(default),
        Some(v) => v.parse().ok(),
    }
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_source(&|k| std::env::var(k).ok())
    }

    /// Reads the variables from `get`; lists every missing or invalid one.
    pub fn from_source(get: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let mut problems = Vec::new();
        let mut required = |name: &str| {
            var(get, name).unwrap_or_else(|| {
                problems.push(format!("{name} is required"));
                String::new()
            })
        };
        let contexts_bucket = required("CONTEXTS_BUCKET_NAME");
        let cluster = required("ECS_CLUSTER");
        let task_definition = required("ECS_TASK_DEFINITION");
        let signing_secret_arn = required("WALLCRAWLER_JWT_SIGNING_SECRET_ARN");
        let public_key_secret_arn = required(task_env::PUBLIC_KEY_SECRET_ARN);
        let subnets = list(var(get, "ECS_SUBNETS"));
        if subnets.is_empty() {
            problems.push("ECS_SUBNETS is required (comma-separated subnet ids)".into());
        }
        let assign_public_ip = public_ip(get, &mut problems);
        let cdp_proxy_port = number(get, "CDP_PROXY_PORT", 9223)
            .filter(|p| *p > 0)
            .unwrap_or_else(|| {
                problems.push("CDP_PROXY_PORT must be a port number (1-65535)".into());
                9223
            });
        let budget = CREATE_BUDGET.as_secs();
        let create_wait = number(get, "CREATE_WAIT_SECONDS", budget)
            .filter(|s| *s <= budget)
            .unwrap_or_else(|| {
                problems.push(format!(
                    "CREATE_WAIT_SECONDS must be a whole number of seconds up to {budget} \
                     (API Gateway's {}s integration limit less {}s to answer)",
                    INTEGRATION_LIMIT.as_secs(),
                    ANSWER_MARGIN.as_secs()
                ));
                budget
            });
        let claim_wait = claim_wait(get, &mut problems);
        let pool_share = pool_share(get, &mut problems);
        let task_api = task_api(get, &mut problems);
        let connect_base_url = connect_base(get, &mut problems);
        if !problems.is_empty() {
            return Err(ConfigError(problems));
        }
        Ok(Self {
            claim_wait,
            pool_share,
            task_api,
            connect_base_url,
            tables: Tables::from_source(get),
            contexts_bucket,
            ecs: EcsSettings {
                cluster,
                task_definition,
                subnets,
                security_groups: list(var(get, "ECS_SECURITY_GROUPS")),
                assign_public_ip,
                container_name: var(get, "ECS_CONTAINER_NAME")
                    .unwrap_or_else(|| "controller".into()),
            },
            cdp_proxy_port,
            signing_secret_arn,
            public_key_secret_arn,
            create_wait: Duration::from_secs(create_wait),
            pool_queue_url: var(get, "POOL_QUEUE_URL"),
            managed_proxies_secret_arn: var(get, super::MANAGED_PROXIES_SECRET_ARN),
            managed_proxies: Default::default(),
        })
    }

    /// This configuration with the managed proxy pools of `MANAGED_PROXIES_SECRET_ARN` read
    /// (once: the API function reads them when it starts); unchanged without the variable.
    pub async fn with_managed_proxies(
        mut self,
        sdk: &SdkConfig,
    ) -> Result<Self, crate::egress::PoolsError> {
        if let Some(arn) = &self.managed_proxies_secret_arn {
            self.managed_proxies = super::managed_proxies::read(sdk, arn).await?;
        }
        Ok(self)
    }
}

/// The shared SDK configuration: region, credentials, retries (`AWS_MAX_ATTEMPTS`, default 3)
/// and `AWS_ENDPOINT_URL` from the standard chain; short timeouts so a dead dependency is an
/// error within seconds, well inside API Gateway's 29 s.
pub async fn sdk_config() -> SdkConfig {
    wallcrawler_aws::sdk_config(wallcrawler_aws::CallLimits::API).await
}

/// Where the SDK's presigned URLs of `bucket` point: the endpoint's origin when one is set
/// (`AWS_ENDPOINT_URL`), else S3's virtual-hosted name in `region`.
pub(crate) fn bucket_origin(bucket: &str, region: &str, endpoint: Option<&str>) -> String {
    match endpoint {
        Some(e) => {
            let after_scheme = e.find("://").map_or(0, |i| i + 3);
            let end = e[after_scheme..]
                .find('/')
                .map_or(e.len(), |i| after_scheme + i);
            e[..end].to_owned()
        }
        None => format!("https://{bucket}.s3.{region}.amazonaws.com"),
    }
}

/// The API on AWS: DynamoDB, S3, ECS and Secrets Manager behind the ports.
pub fn build_app(sdk: &SdkConfig, cfg: &Config) -> App {
    let dynamo = aws_sdk_dynamodb::Client::new(sdk);
    let mut settings = Settings {
        create_wait: cfg.create_wait,
        connect_base: cfg.connect_base_url.clone(),
        claim_wait: cfg.claim_wait,
        pool_share: cfg.pool_share,
        managed_proxies: cfg.managed_proxies.clone(),
        // The API's Lambda has no ffmpeg unless a layer brings one (`FFMPEG_PATH`); with one,
        // a build runs before the answer (the process freezes after it).
        mp4: match std::env::var_os("FFMPEG_PATH") {
            Some(p) => crate::app::Mp4Build::Inline(p.into()),
            None => crate::app::Mp4Build::Unavailable,
        },
        ..Settings::default()
    };
    if let Some(r) = sdk.region().map(|r| r.as_ref())
        && crate::handlers::REGIONS.contains(&r)
    {
        settings.region = r.to_owned();
    }
    settings.download_origins = vec![bucket_origin(
        &cfg.contexts_bucket,
        sdk.region().map_or("us-east-1", |r| r.as_ref()),
        sdk.endpoint_url(),
    )];
    App {
        sessions: Arc::new(DynamoSessions::new(dynamo.clone(), &cfg.tables.sessions)),
        projects: Arc::new(DynamoProjects::new(dynamo.clone(), &cfg.tables.projects)),
        slots: Arc::new(DynamoSlots::new(dynamo.clone(), &cfg.tables.slots)),
        keys: Arc::new(DynamoKeys::new(dynamo.clone(), &cfg.tables.api_keys)),
        contexts: Arc::new(DynamoContexts::new(dynamo, &cfg.tables.contexts)),
        archives: Arc::new(S3Archives::new(sdk, &cfg.contexts_bucket)),
        objects: Arc::new(S3Archives::new(sdk, &cfg.contexts_bucket)),
        launcher: match &cfg.pool_queue_url {
            Some(url) => Arc::new(SqsPoolLauncher::new(sdk, url, cfg.clone())),
            None => Arc::new(EcsLauncher::new(sdk, cfg.clone())),
        },
        signer: Arc::new(SecretsSigner::new(sdk, &cfg.signing_secret_arn)),
        clock: Arc::new(SystemClock),
        settings,
    }
}

/// The API function's router: the API over [`build_app`], and with the task API on, its
/// routes ([`crate::task_api::router`]) with identities checked by `sdk`'s STS endpoint.
pub fn build_router(
    sdk: &SdkConfig,
    cfg: &Config,
) -> Result<axum::Router, wallcrawler_aws::task_identity::IdentityError> {
    let api = crate::router::router(build_app(sdk, cfg));
    if cfg.task_api.is_none() {
        return Ok(api);
    }
    let identities = Arc::new(super::StsIdentities::new(sdk)?);
    Ok(match build_task_api(sdk, cfg, identities) {
        Some(t) => api.merge(crate::task_api::router(t)),
        None => api,
    })
}

/// The task API on AWS when `cfg` turns it on: its broker on `sdk`, identities checked by
/// `identities` (STS).
pub fn build_task_api(
    sdk: &SdkConfig,
    cfg: &Config,
    identities: Arc<dyn Identities>,
) -> Option<TaskApi> {
    let t = cfg.task_api.as_ref()?;
    Some(TaskApi {
        identities,
        broker: Arc::new(TaskBroker::new(sdk, cfg, t)),
        task_role: t.task_role.clone(),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::aws::controller_environment;
    use crate::stores::LaunchSpec;

    fn source(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    const FULL: [(&str, &str); 6] = [
        ("CONTEXTS_BUCKET_NAME", "wc-contexts"),
        ("ECS_CLUSTER", "wallcrawler"),
        ("ECS_TASK_DEFINITION", "wallcrawler-controller"),
        ("ECS_SUBNETS", "subnet-a, subnet-b,"),
        ("WALLCRAWLER_JWT_SIGNING_SECRET_ARN", "arn:secret"),
        ("WALLCRAWLER_JWT_PUBLIC_KEY_SECRET_ARN", "arn:public"),
    ];

    #[test]
    fn config_lists_every_missing_variable_at_once() {
        let e = Config::from_source(&source(&[("ECS_ASSIGN_PUBLIC_IP", "maybe")])).unwrap_err();
        let all = e.to_string();
        for name in [
            "CONTEXTS_BUCKET_NAME",
            "ECS_CLUSTER",
            "ECS_TASK_DEFINITION",
            "ECS_SUBNETS",
            "WALLCRAWLER_JWT_SIGNING_SECRET_ARN",
            "WALLCRAWLER_JWT_PUBLIC_KEY_SECRET_ARN",
            "ECS_ASSIGN_PUBLIC_IP",
        ] {
            assert!(all.contains(name), "{name} missing from {all}");
        }
        assert_eq!(e.0.len(), 7);
    }

    #[test]
    fn config_defaults_follow_the_schema() {
        let c = Config::from_source(&source(&FULL)).unwrap();
        assert_eq!(c.tables, Tables::default());
        assert_eq!(c.tables.sessions, "wallcrawler-sessions");
        assert_eq!(c.tables.api_keys, "wallcrawler-api-keys");
        assert_eq!(c.ecs.subnets, ["subnet-a", "subnet-b"]);
        assert!(c.ecs.security_groups.is_empty());
        assert!(c.ecs.assign_public_ip);
        assert_eq!(c.ecs.container_name, "controller");
        assert_eq!(c.cdp_proxy_port, 9223);
        assert_eq!(c.create_wait, CREATE_BUDGET);
        assert_eq!(c.claim_wait, ClaimWait { wait: 60, max: 600 });
        let mut pairs = FULL.to_vec();
        pairs.extend([
            ("SESSIONS_TABLE_NAME", "s"),
            ("ECS_SECURITY_GROUPS", "sg-1,sg-2"),
            ("ECS_ASSIGN_PUBLIC_IP", "disabled"),
            ("CREATE_WAIT_SECONDS", "2"),
            ("CDP_PROXY_PORT", "0"),
        ]);
        let e = Config::from_source(&source(&pairs)).unwrap_err();
        assert_eq!(e.0, ["CDP_PROXY_PORT must be a port number (1-65535)"]);
        pairs.pop();
        let c = Config::from_source(&source(&pairs)).unwrap();
        assert_eq!(c.tables.sessions, "s");
        assert_eq!(c.ecs.security_groups, ["sg-1", "sg-2"]);
        assert!(!c.ecs.assign_public_ip);
        assert_eq!(c.create_wait, Duration::from_secs(2));
        assert_eq!(c.connect_base_url, None);
        pairs.push(("CONNECT_BASE_URL", "wss://connect.example.test"));
        let c = Config::from_source(&source(&pairs)).unwrap();
        assert_eq!(
            c.connect_base_url.as_deref(),
            Some("wss://connect.example.test")
        );
        pairs.pop();
        pairs.push(("CONNECT_BASE_URL", "https://connect.example.test/x?y"));
        let e = Config::from_source(&source(&pairs)).unwrap_err();
        assert!(e.0[0].starts_with("CONNECT_BASE_URL must be"), "{e}");
    }

    #[test]
    fn the_create_waits_within_api_gateways_limit_and_no_longer() {
        assert_eq!(CREATE_BUDGET, Duration::from_secs(26));
        let mut pairs = FULL.to_vec();
        pairs.push(("CREATE_WAIT_SECONDS", "26"));
        assert_eq!(
            Config::from_source(&source(&pairs)).unwrap().create_wait,
            CREATE_BUDGET
        );
        pairs.pop();
        pairs.push(("CREATE_WAIT_SECONDS", "27"));
        let e = Config::from_source(&source(&pairs)).unwrap_err();
        assert_eq!(
            e.0,
            [
                "CREATE_WAIT_SECONDS must be a whole number of seconds up to 26 \
              (API Gateway's 29s integration limit less 3s to answer)"
            ]
        );
    }

    #[test]
    fn claim_waits_are_whole_seconds_and_the_wait_within_the_maximum() {
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut pairs = FULL.to_vec();
            pairs.extend_from_slice(extra);
            Config::from_source(&source(&pairs))
        };
        let c = with(&[
            ("CLAIM_WAIT_SECONDS", "5"),
            ("CLAIM_WAIT_MAX_SECONDS", "30"),
        ])
        .unwrap();
        assert_eq!(c.claim_wait, ClaimWait { wait: 5, max: 30 });
        let e = with(&[
            ("CLAIM_WAIT_SECONDS", "31"),
            ("CLAIM_WAIT_MAX_SECONDS", "30"),
        ]);
        assert_eq!(
            e.unwrap_err().0,
            ["CLAIM_WAIT_SECONDS must not be more than CLAIM_WAIT_MAX_SECONDS"]
        );
        let e = with(&[
            ("CLAIM_WAIT_SECONDS", "0"),
            ("CLAIM_WAIT_MAX_SECONDS", "-1"),
        ]);
        assert_eq!(e.unwrap_err().0.len(), 2);
    }

    #[test]
    fn a_projects_share_of_the_pool_is_a_whole_number_and_0_or_unset_is_none() {
        let share = |v: Option<&'static str>| {
            let mut pairs = FULL.to_vec();
            pairs.extend(v.map(|v| ("POOL_PROJECT_SHARE", v)));
            Config::from_source(&source(&pairs))
        };
        assert_eq!(share(None).unwrap().pool_share, None);
        assert_eq!(share(Some("0")).unwrap().pool_share, None);
        assert_eq!(share(Some("3")).unwrap().pool_share, Some(3));
        let e = share(Some("-1")).unwrap_err();
        assert_eq!(
            e.0,
            ["POOL_PROJECT_SHARE must be a whole number of warm tasks (0 = no share)"]
        );
        let sdk = aws_config::SdkConfig::builder().build();
        let app = build_app(&sdk, &share(Some("3")).unwrap());
        assert_eq!(app.settings.pool_share, Some(3));
    }

    #[tokio::test]
    async fn managed_proxies_come_from_their_secret_once_and_reach_the_app() {
        let sdk = crate::aws::ecs::tests::unreachable().await;
        let c = Config::from_source(&source(&FULL)).unwrap();
        assert_eq!(c.managed_proxies_secret_arn, None);
        let c = c.with_managed_proxies(&sdk).await.unwrap();
        assert!(c.managed_proxies.is_empty(), "no secret: no call, no pools");
        let mut pairs = FULL.to_vec();
        pairs.push(("MANAGED_PROXIES_SECRET_ARN", "arn:aws:secretsmanager:pools"));
        let c = Config::from_source(&source(&pairs)).unwrap();
        assert_eq!(
            c.managed_proxies_secret_arn.as_deref(),
            Some("arn:aws:secretsmanager:pools")
        );
        let e = c.clone().with_managed_proxies(&sdk).await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "reading the managed proxies (the secret MANAGED_PROXIES_SECRET_ARN names) failed"
        );
        let pools = crate::egress::ManagedProxies::parse(
            r#"{"default": [{"server": "http://pool.example:3128"}]}"#,
        )
        .unwrap();
        let app = build_app(
            &sdk,
            &Config {
                managed_proxies: pools.clone(),
                ..c
            },
        );
        assert_eq!(app.settings.managed_proxies, pools);
    }

    #[test]
    fn the_controller_gets_its_context_only_with_one() {
        let c = Config::from_source(&source(&FULL)).unwrap();
        let mut spec = LaunchSpec {
            session_id: "sess_1".into(),
            project_id: "proj_1".into(),
            context: None,
            env: vec![],
            cold: false,
            extension: None,
            egress: None,
            browser: None,
        };
        let names = |e: Vec<(String, String)>| e.into_iter().map(|(k, _)| k).collect::<Vec<_>>();
        assert_eq!(
            names(controller_environment(&c, &spec)),
            [
                "SESSION_ID",
                "PROJECT_ID",
                "SESSIONS_TABLE_NAME",
                "CDP_PROXY_PORT",
                "WALLCRAWLER_JWT_PUBLIC_KEY_SECRET_ARN",
                "FILES_BUCKET_NAME"
            ]
        );
        spec.context = Some(("ctx_1".into(), "proj_1/ctx_1/profile.tar.gz".into(), true));
        let env = controller_environment(&c, &spec);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("CONTEXT_ID"), Some("ctx_1"));
        assert_eq!(get("CONTEXTS_BUCKET_NAME"), Some("wc-contexts"));
        assert_eq!(get("CONTEXT_S3_KEY"), Some("proj_1/ctx_1/profile.tar.gz"));
        assert_eq!(get("CONTEXT_PERSIST"), Some("true"));
        // An extension alone still names the bucket it is in.
        let key = format!("extensions/proj_1/{}.zip", "a".repeat(64));
        spec.context = None;
        spec.extension = Some(key.clone());
        let env = controller_environment(&c, &spec);
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("EXTENSION_S3_KEY"), Some(key.as_str()));
        assert_eq!(get("CONTEXTS_BUCKET_NAME"), Some("wc-contexts"));
        assert_eq!(get("CONTEXT_ID"), None);
    }

    #[test]
    fn the_task_api_is_on_with_all_its_variables_and_a_partial_set_is_refused() {
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut pairs = FULL.to_vec();
            pairs.extend_from_slice(extra);
            Config::from_source(&source(&pairs))
        };
        let queue = (
            "POOL_QUEUE_URL",
            "http://127.0.0.1:5000/123456789012/wc-claims",
        );
        let all = [
            ("TASKS_TABLE_NAME", "wc-tasks"),
            (
                "SESSION_ROLE_ARN",
                "arn:aws:iam::123456789012:role/wc-session",
            ),
            ("TASK_ROLE_ARN", "arn:aws:iam::123456789012:role/wc-task"),
            queue,
        ];
        assert_eq!(with(&[]).unwrap().task_api, None);
        assert_eq!(with(&[queue]).unwrap().task_api, None);
        let t = with(&all).unwrap().task_api.unwrap();
        assert_eq!(t.tasks_table, "wc-tasks");
        assert_eq!(t.task_role.name, "wc-task");
        assert_eq!(t.queue, ("123456789012".into(), "wc-claims".into()));
        assert_eq!(t.claim_visibility, 60);

        let e = with(&all[1..2]).unwrap_err();
        assert_eq!(
            e.0,
            [
                "the task API needs TASKS_TABLE_NAME, SESSION_ROLE_ARN, TASK_ROLE_ARN and \
                 POOL_QUEUE_URL together; missing: TASKS_TABLE_NAME, TASK_ROLE_ARN, POOL_QUEUE_URL"
            ]
        );
        let mut bad = all.to_vec();
        bad[2].1 = "arn:aws:iam::123456789012:user/wc-task";
        bad[3].1 = "https://sqs.eu-west-1.amazonaws.com/wc-claims";
        bad.push(("POOL_CLAIM_VISIBILITY_SECONDS", "43201"));
        let e = with(&bad).unwrap_err();
        assert_eq!(
            e.0,
            [
                "TASK_ROLE_ARN must be an IAM role's ARN, got \"arn:aws:iam::123456789012:user/wc-task\"",
                "POOL_QUEUE_URL must end in /<account>/<queue name>, got \
                 \"https://sqs.eu-west-1.amazonaws.com/wc-claims\"",
                "POOL_CLAIM_VISIBILITY_SECONDS must be a whole number of seconds from 1 to 43200",
            ]
        );
        let mut slow = all.to_vec();
        slow.push(("POOL_CLAIM_VISIBILITY_SECONDS", "43200"));
        assert_eq!(
            with(&slow).unwrap().task_api.unwrap().claim_visibility,
            43_200
        );
    }

    #[test]
    fn the_download_origin_is_where_presigned_urls_point() {
        assert_eq!(
            bucket_origin("wc-contexts", "eu-west-1", None),
            "https://wc-contexts.s3.eu-west-1.amazonaws.com"
        );
        assert_eq!(
            bucket_origin("b", "us-east-1", Some("http://127.0.0.1:5000/")),
            "http://127.0.0.1:5000"
        );
        assert_eq!(
            bucket_origin("b", "us-east-1", Some("http://127.0.0.1:5000")),
            "http://127.0.0.1:5000"
        );
    }
}
