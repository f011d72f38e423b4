//! The CloudFormation template (deploy/template.yaml) created as a stack in moto, in its default
//! connect mode (the gateway), and the platform run on what it created: the connect gateway
//! started with the gateway task definition's command and environment as the stack registered
//! them, the API built from the API function's environment as the stack set it, a pool
//! controller started with the browser task definition's environment (each plus the test's
//! loopback settings: listen addresses, moto's endpoint, and the API's CONNECT_BASE_URL pointed
//! at the local gateway instead of the NLB's wss:// name); one session created (answered at
//! once with the gateway's URL), taken from the stack's claims queue, driven by Puppeteer
//! through the gateway to the task, released, `endedAt`, and refused by the gateway afterwards.
//!
//! deploy/moto_stack.py creates the stack (boto3): it replaces, in a copy of the template, the
//! resource types moto's CloudFormation refuses (the secret, the bucket policy, the API stage,
//! the network load balancer and its TLS listener) by the same resources made through the plain
//! APIs, and says so in its answer. What moto accepts but ignores is asserted on the template
//! by deploy/check_template.py.
//!
//! The third test runs the same platform on a private moto with IAM enforced, each process with
//! its own role's credentials only (see its comment for what moto cannot enforce).

use aws_sdk_dynamodb::config::Credentials;
use wallcrawler_control_plane::aws::{CONTEXT_INDEX, PROJECT_INDEX};
use wallcrawler_testkit::moto::assume_role;
use wallcrawler_testkit::platform::{aws_env_as, enforce_iam, s3, serve, serve_on};
use wallcrawler_testkit::{Moto, dummy_credentials, moto};

use super::*;

/// The test's stand-in for the VPC: every process of the connect leg runs on loopback.
const LOOPBACK: &str = "127.0.0.1/32";

/// Bound on creating the stack (moto can leave a stack CREATE_IN_PROGRESS forever).
const STACK_WAIT: Duration = Duration::from_secs(90);

/// What deploy/moto_stack.py answers.
struct Stack {
    /// The stack's name.
    name: String,
    outputs: HashMap<String, String>,
    api_env: Vec<(String, String)>,
    task_env: Vec<(String, String)>,
    /// The gateway task definition's command and environment (empty in direct mode).
    gateway_command: Vec<String>,
    gateway_env: Vec<(String, String)>,
    /// The task API service's entry point, command and environment (empty in direct mode,
    /// where the API function serves the task API).
    task_api_entry_point: Vec<String>,
    task_api_command: Vec<String>,
    task_api_env: Vec<(String, String)>,
}

/// A JSON array of strings (none: empty).
fn string_list(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|c| c.as_str().unwrap().to_owned())
        .collect()
}

fn strings(v: &Value) -> Vec<(String, String)> {
    v.as_object()
        .unwrap_or_else(|| panic!("an object: {v}"))
        .iter()
        .map(|(k, v)| {
            let v = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (k.clone(), v)
        })
        .collect()
}

/// Creates the stack in the moto server at `endpoint` with `ConnectMode` = `mode`.
async fn create_stack(endpoint: &str, prefix: &str, mode: &str) -> Stack {
    let root = wallcrawler_testkit::repo_root();
    let python = root.join(".venv/bin/python");
    assert!(
        python.is_file(),
        "the venv is missing: run scripts/install-test-deps.sh"
    );
    let out = tokio::time::timeout(
        STACK_WAIT + Duration::from_secs(30),
        tokio::process::Command::new(python)
            .arg(root.join("deploy/moto_stack.py"))
            .args(["--endpoint", endpoint, "--prefix", prefix])
            .args(["--timeout", &STACK_WAIT.as_secs().to_string()])
            .args(["--connect-mode", mode])
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("deploy/moto_stack.py finished")
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "deploy/moto_stack.py failed:\n{stderr}"
    );
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("deploy/moto_stack.py answered no JSON ({e}):\n{stderr}"));
    eprintln!(
        "stack {} created in {} s; changed for moto: {}",
        v["stack"], v["seconds"], v["changed"]
    );
    Stack {
        name: v["stack"].as_str().unwrap().to_owned(),
        outputs: strings(&v["outputs"]).into_iter().collect(),
        api_env: strings(&v["apiEnv"]),
        task_env: strings(&v["taskEnv"]),
        gateway_command: string_list(&v["gateway"]["command"]),
        gateway_env: match &v["gateway"] {
            Value::Null => Vec::new(),
            g => strings(&g["env"]),
        },
        task_api_entry_point: string_list(&v["taskApi"]["entryPoint"]),
        task_api_command: string_list(&v["taskApi"]["command"]),
        task_api_env: match &v["taskApi"] {
            Value::Null => Vec::new(),
            t => strings(&t["env"]),
        },
    }
}

/// An AWS Query API call to the moto server at `endpoint` (`service` as in the credential
/// scope), unsigned (so only while moto enforces no IAM): the XML answer. (Raw, as
/// [`ec2_first`] does, rather than one more SDK crate to compile.)
async fn query(endpoint: &str, service: &str, version: &str, params: &str) -> String {
    let (status, xml) = http(
        "POST",
        &format!("{endpoint}/"),
        &[
            (
                "authorization",
                &format!(
                    "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/{service}/aws4_request, \
                     SignedHeaders=host, Signature=0"
                ),
            ),
            ("content-type", "application/x-www-form-urlencoded"),
        ],
        format!("Version={version}&{params}").into_bytes(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{xml}");
    xml
}

/// The connect gateway as the stack's gateway service runs it: the task definition's command
/// and environment, on a free loopback port, talking to moto (`aws`: its endpoint and
/// credentials). Killed when dropped.
struct Gateway {
    child: tokio::process::Child,
    /// Where it listens (`listen: ADDR` on its stdout).
    addr: std::net::SocketAddr,
    /// Its Prometheus listener.
    metrics: String,
    log: Arc<Log>,
}

impl Gateway {
    async fn start(stack: &Stack, aws: Vec<(&'static str, String)>) -> Gateway {
        let mut cmd = tokio::process::Command::new(crate::support::bin());
        cmd.args(&stack.gateway_command)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", std::env::var_os("HOME").unwrap_or("/root".into()))
            .env("RUST_LOG", "info")
            .envs(stack.gateway_env.iter().cloned())
            .envs(aws)
            .env("GATEWAY_LISTEN", "127.0.0.1:0")
            // The stack trusts PROXY headers from the VPC (the NLB); here the "NLB" is loopback.
            .env("TRUSTED_PROXY_NETWORKS", LOOPBACK)
            .env("METRICS_ADDR", "127.0.0.1:0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("start wallcrawler-controller gateway");
        let (log, mut seen) = watch_stderr(&mut child);
        let mut out = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(POOL_WAIT, out.next_line())
            .await
            .expect("the gateway listened in time")
            .unwrap()
            .unwrap_or_else(|| {
                panic!(
                    "the gateway ended:\n{}",
                    log.lines.lock().unwrap().join("\n")
                )
            });
        let addr = line
            .strip_prefix("listen: ")
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("the gateway said {line:?}"));
        tokio::spawn(async move { while let Ok(Some(_)) = out.next_line().await {} });
        let deadline = tokio::time::Instant::now() + POOL_WAIT;
        let metrics = loop {
            let found = log
                .lines
                .lock()
                .unwrap()
                .iter()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .find(|e| e["message"] == "metrics listening")
                .map(|e| e["addr"].as_str().unwrap().to_owned());
            if let Some(m) = found {
                break m;
            }
            seen.borrow_and_update();
            if tokio::time::timeout_at(deadline, seen.changed())
                .await
                .is_err()
            {
                panic!("the gateway's metrics listener never came up");
            }
        };
        Gateway {
            child,
            addr,
            metrics,
            log,
        }
    }

    /// A counter or gauge of its Prometheus page.
    async fn metric(&self, name: &str) -> f64 {
        let (_, page) = http(
            "GET",
            &format!("http://{}/metrics", self.metrics),
            &[],
            vec![],
        )
        .await;
        gauge(&page, name)
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        if std::thread::panicking() || std::env::var_os("POOL_TEST_LOGS").is_some() {
            eprintln!(
                "--- gateway ---\n{}",
                self.log.lines.lock().unwrap().join("\n")
            );
        }
    }
}

/// The API function's configuration as the stack set it. Every name is one the control plane
/// reads (a misspelt variable fails here rather than being silently ignored).
fn api_vars(stack: &Stack) -> HashMap<&'static str, String> {
    control_plane_vars(&stack.api_env, "the API function")
}

/// The task API service's configuration as the stack set it (gateway mode): the control
/// plane's variables, each one it reads, and the container's own (its listen address and log
/// format, asserted here).
fn task_api_vars(stack: &Stack) -> HashMap<&'static str, String> {
    let (own, vars): (Vec<_>, Vec<_>) =
        stack.task_api_env.iter().cloned().partition(|(k, _)| {
            ["TASK_API_LISTEN", "LOG_FORMAT", "AWS_REGION"].contains(&k.as_str())
        });
    let own: HashMap<_, _> = own.into_iter().collect();
    assert_eq!(own["TASK_API_LISTEN"], "0.0.0.0:8080", "{own:?}");
    assert_eq!(own["LOG_FORMAT"], "json", "{own:?}");
    control_plane_vars(&vars, "the task API service")
}

/// `env`'s variables (of `who`), each one the control plane reads.
fn control_plane_vars(env: &[(String, String)], who: &str) -> HashMap<&'static str, String> {
    const READ: &[&str] = &[
        "SESSIONS_TABLE_NAME",
        "PROJECTS_TABLE_NAME",
        "API_KEYS_TABLE_NAME",
        "CONTEXTS_TABLE_NAME",
        "SLOTS_TABLE_NAME",
        "CONTEXTS_BUCKET_NAME",
        "ECS_CLUSTER",
        "ECS_TASK_DEFINITION",
        "ECS_SUBNETS",
        "ECS_SECURITY_GROUPS",
        "ECS_ASSIGN_PUBLIC_IP",
        "ECS_CONTAINER_NAME",
        "CDP_PROXY_PORT",
        "WALLCRAWLER_JWT_SIGNING_SECRET_ARN",
        "WALLCRAWLER_JWT_PUBLIC_KEY_SECRET_ARN",
        "CREATE_WAIT_SECONDS",
        "POOL_QUEUE_URL",
        "CONNECT_BASE_URL",
        // The claim deadlines (Step 10; the control plane's code for them is merged separately).
        "CLAIM_WAIT_SECONDS",
        "CLAIM_WAIT_MAX_SECONDS",
        // A project's share of the warm pool (Step 11).
        "POOL_PROJECT_SHARE",
        // The task API (Step 13; the control plane's code for it is merged separately).
        "TASK_ROLE_ARN",
        "TASKS_TABLE_NAME",
        "SESSION_ROLE_ARN",
    ];
    env.iter()
        .map(|(k, v)| {
            let name = READ
                .iter()
                .find(|n| **n == k)
                .unwrap_or_else(|| panic!("{who}'s {k} is not read by the code"));
            (*name, v.clone())
        })
        .collect()
}

/// The task API service as the stack runs it in gateway mode (its configuration from its task
/// definition, the router `wallcrawler-control-plane task-api` serves), with `sdk`'s
/// credentials, served on loopback (the test's stand-in for the internal load balancer, whose
/// TLS the image smoke test and the template checks cover); its base URL.
async fn serve_task_api(sdk: &aws_config::SdkConfig, stack: &Stack) -> String {
    use wallcrawler_control_plane::aws::{Config, StsIdentities, build_task_api, task_service};
    assert_eq!(stack.task_api_command, ["task-api"]);
    assert_eq!(
        stack.task_api_entry_point.last().map(String::as_str),
        Some("/usr/local/bin/wallcrawler-control-plane"),
        "{:?}",
        stack.task_api_entry_point
    );
    let vars = task_api_vars(stack);
    let cfg = Config::from_source(&|k| vars.get(k).cloned()).expect("a complete configuration");
    let identities = std::sync::Arc::new(StsIdentities::new(sdk).unwrap());
    let api = build_task_api(sdk, &cfg, identities).expect("the service's task API is on");
    serve(task_service::router(api)).await
}

/// The customer API (the API function's router) serves no task route: the task API is not on
/// the customer edge.
async fn no_task_route(f: &Fixture) {
    let claims = wallcrawler_contract::task_api::CLAIMS_PATH;
    let (status, _, _) = wallcrawler_testkit::platform::raw_call_with_key(
        &f.router,
        &f.api_key,
        Method::POST,
        claims,
        Some(json!({"waitSeconds": 0})),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "POST {claims} on the API");
}

impl Pool {
    /// The API `f` on the stack's claims queue and dead-letter queue.
    fn on_stack(f: Fixture, stack: &Stack) -> Pool {
        Pool {
            sqs: aws_sdk_sqs::Client::new(&f.sdk),
            f,
            queue: stack.outputs["ClaimsQueueUrl"].clone(),
            dlq: stack.outputs["ClaimsDeadLetterQueueUrl"].clone(),
            tmp: super::controllers_tmp(),
        }
    }
}

/// The browser task definition's environment, trusting PROXY v2 headers from loopback (the
/// test's stand-in for the VPC the gateway runs in) instead of the VPC.
fn behind_loopback(stack: &Stack) -> Vec<(String, String)> {
    let mut env = stack.task_env.clone();
    for (k, v) in &mut env {
        if k == "TRUSTED_PROXY_NETWORKS" {
            *v = LOOPBACK.to_owned();
        }
    }
    env
}

/// A pool task of the stack as ECS would start it, made while moto checks nothing (with
/// `f`'s credentials): a moto ECS task of the stack's task definition (in `moto`, of `stack`), and its task role's
/// credentials in a role session named by the task's id, as ECS names it (what the task API
/// reads as "which task"). With `env` (the task definition's) and the task API's URL
/// replaced by `api` (the API function's router served on loopback: the test's stand-in for
/// API Gateway's public name, which a test never contacts), the options to start it with.
async fn as_ecs_starts_it(
    f: &Fixture,
    at: (&Moto, &str),
    env: Vec<(String, String)>,
    api: &str,
) -> (TaskOptions, Credentials) {
    as_ecs_starts_it_named(f, at, env, api, None).await
}

/// [`as_ecs_starts_it`], its task role session named `session` instead of the task's id when
/// given (what the controller's startup self-check refuses).
async fn as_ecs_starts_it_named(
    f: &Fixture,
    (moto, stack): (&Moto, &str),
    env: Vec<(String, String)>,
    api: &str,
    session: Option<&str>,
) -> (TaskOptions, Credentials) {
    let arn = super::ecs_task(f).await;
    // The task role as the stack made it (moto's task definition does not name it back).
    let resource = query(
        &moto.endpoint,
        "cloudformation",
        "2010-05-15",
        &format!("Action=DescribeStackResource&StackName={stack}&LogicalResourceId=TaskRole"),
    )
    .await;
    let name = resource
        .split("<PhysicalResourceId>")
        .nth(1)
        .and_then(|r| r.split("</PhysicalResourceId>").next())
        .unwrap_or_else(|| panic!("the stack's TaskRole: {resource}"));
    let role = format!("arn:aws:iam::123456789012:role/{name}");
    let task_id = session.unwrap_or_else(|| arn.rsplit('/').next().unwrap());
    let creds = assume_role(moto, dummy_credentials(), &role, task_id).await;
    let mut env = env;
    for (k, v) in &mut env {
        if k == wallcrawler_contract::task_env::TASK_API_URL {
            *v = api.to_owned();
        }
        // The internal load balancer's name: here the service on loopback.
        if k == wallcrawler_contract::task_env::TASK_API_ADDRESS {
            *v = "127.0.0.1".to_owned();
        }
    }
    let options = TaskOptions {
        task_env: Some(env),
        aws_env: Some(aws_env_as(moto, &creds)),
        task_arn: Some(arn),
        ..Default::default()
    };
    (options, creds)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stack_created_in_moto_serves_a_session_through_its_gateway() {
    let prefix = format!("wcs-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let stack = create_stack(&moto().endpoint, &prefix, "gateway").await;
    let out = |k: &str| {
        stack
            .outputs
            .get(k)
            .unwrap_or_else(|| panic!("no output {k}: {:?}", stack.outputs))
            .clone()
    };

    // The connect leg as the stack made it: the NLB's TLS listener forwards to the gateway's
    // target group, which sends PROXY protocol v2.
    let listener = query(
        &moto().endpoint,
        "elasticloadbalancing",
        "2015-12-01",
        &format!(
            "Action=DescribeListeners&ListenerArns.member.1={}",
            out("moto:ConnectListenerArn")
        ),
    )
    .await;
    for part in [
        "<Protocol>TLS</Protocol>",
        "<Port>443</Port>",
        &format!(
            "<TargetGroupArn>{}</TargetGroupArn>",
            out("moto:GatewayTargetGroupArn")
        ),
    ] {
        assert!(listener.contains(part), "{part} in {listener}");
    }
    let attrs = query(
        &moto().endpoint,
        "elasticloadbalancing",
        "2015-12-01",
        &format!(
            "Action=DescribeTargetGroupAttributes&TargetGroupArn={}",
            out("moto:GatewayTargetGroupArn")
        ),
    )
    .await;
    let compact: String = attrs.split_whitespace().collect();
    assert!(
        compact.contains("<Key>proxy_protocol_v2.enabled</Key><Value>true</Value>"),
        "{attrs}"
    );

    // The gateway as the gateway service runs it. Both it and the browser tasks trust PROXY v2
    // headers from the VPC (moto's default VPC here); the test runs them on loopback.
    assert_eq!(stack.gateway_command, ["gateway"]);
    let vpc = |env: &[(String, String)]| {
        env.iter()
            .find(|(k, _)| k == "TRUSTED_PROXY_NETWORKS")
            .map(|(_, v)| v.clone())
    };
    assert_eq!(vpc(&stack.gateway_env).as_deref(), Some("172.31.0.0/16"));
    assert_eq!(vpc(&stack.task_env).as_deref(), Some("172.31.0.0/16"));
    let gateway = Gateway::start(&stack, aws_env()).await;

    // The API as the API function would run, configured by the stack; its connect base URL is
    // the NLB's wss:// name, which the test replaces by the local gateway's address.
    let mut vars = api_vars(&stack);
    let base = vars.insert("CONNECT_BASE_URL", format!("ws://{}", gateway.addr));
    assert_eq!(base.as_deref(), Some(out("ConnectUrl").as_str()));
    assert!(
        out("ConnectUrl").starts_with("wss://"),
        "{}",
        out("ConnectUrl")
    );
    assert_eq!(vars["ECS_ASSIGN_PUBLIC_IP"], "DISABLED");
    let f = Fixture::from_vars(sdk().await, vars).await;
    assert_eq!(f.cfg.tables.sessions, out("SessionsTableName"));
    assert_eq!(f.cfg.tables.projects, out("ProjectsTableName"));
    assert_eq!(f.cfg.tables.api_keys, out("ApiKeysTableName"));
    assert_eq!(f.cfg.tables.contexts, out("ContextsTableName"));
    assert_eq!(f.cfg.contexts_bucket, out("ContextsBucketName"));
    assert_eq!(f.cfg.signing_secret_arn, out("SigningSecretArn"));
    assert_eq!(f.cfg.public_key_secret_arn, out("PublicKeySecretArn"));
    assert_eq!(
        f.cfg.pool_queue_url.as_deref(),
        Some(out("ClaimsQueueUrl").as_str())
    );
    assert_eq!(f.cfg.ecs.cluster, out("ClusterName"));
    assert_eq!(f.cfg.ecs.task_definition, out("TaskDefinitionArn"));
    assert!(
        out("ApiBaseUrl").starts_with("https://") && out("ApiBaseUrl").ends_with("/api"),
        "{}",
        out("ApiBaseUrl")
    );

    // What moto keeps of the tables and the queue is what the code relies on.
    let table = f
        .dynamo()
        .describe_table()
        .table_name(&f.cfg.tables.sessions)
        .send()
        .await
        .unwrap();
    let table = table.table().unwrap();
    let indexes: Vec<&str> = table
        .global_secondary_indexes()
        .iter()
        .filter_map(|g| g.index_name())
        .collect();
    assert!(indexes.contains(&PROJECT_INDEX), "{indexes:?}");
    assert!(indexes.contains(&"status-expiresAt-index"), "{indexes:?}");
    assert!(indexes.contains(&CONTEXT_INDEX), "{indexes:?}");
    // The session events' source (Step 15): old and new images, read by the session-events
    // function's role alone (deploy/check_template.py).
    assert!(
        table
            .stream_specification()
            .is_some_and(|s| s.stream_enabled()
                && s.stream_view_type()
                    == Some(&aws_sdk_dynamodb::types::StreamViewType::NewAndOldImages)),
        "{:?}",
        table.stream_specification()
    );
    let sqs = aws_sdk_sqs::Client::new(&f.sdk);
    let queue = out("ClaimsQueueUrl");
    let dlq = out("ClaimsDeadLetterQueueUrl");
    let attrs = sqs
        .get_queue_attributes()
        .queue_url(&queue)
        .attribute_names(QueueAttributeName::RedrivePolicy)
        .send()
        .await
        .unwrap();
    let redrive: Value =
        serde_json::from_str(&attrs.attributes().unwrap()[&QueueAttributeName::RedrivePolicy])
            .unwrap();
    assert!(
        redrive["deadLetterTargetArn"]
            .as_str()
            .is_some_and(|arn| dlq.ends_with(arn.rsplit(':').next().unwrap())),
        "{redrive} / {dlq}"
    );

    // The task API off the customer edge: the browser tasks reach its internal load balancer
    // (TASK_API_ADDRESS) with TLS for the connect host's name (TASK_API_URL), and the API
    // serves no task route.
    let task_env: HashMap<_, _> = stack.task_env.iter().cloned().collect();
    let connect_host = out("ConnectUrl")
        .strip_prefix("wss://")
        .map(|h| h.trim_end_matches('/').to_owned())
        .unwrap();
    assert_eq!(task_env["TASK_API_URL"], format!("https://{connect_host}"));
    assert_eq!(task_env["TASK_API_URL"], out("TaskApiUrl"));
    assert_eq!(task_env["TASK_API_ADDRESS"], out("TaskApiAddress"));
    assert!(!api_vars(&stack).contains_key("TASKS_TABLE_NAME"));
    no_task_route(&f).await;

    // A pool task as the service would start it: the task definition's environment, its task
    // API the service's.
    let pool = Pool::on_stack(f, &stack);
    let api = serve_task_api(&pool.f.sdk, &stack).await;
    let (options, _) = as_ecs_starts_it(
        &pool.f,
        (moto(), &stack.name),
        behind_loopback(&stack),
        &api,
    )
    .await;
    let mut task = PoolTask::start(&pool, options).await.warm().await;

    // The create answers at once with the gateway's URL; the task takes the claim.
    let v = pool.create(json!({"keepAlive": true})).await;
    assert_eq!(v["status"], "RUNNING", "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    let url = connect_url(&v);
    assert_eq!(
        url,
        format!(
            "ws://{}/?signingKey={}",
            gateway.addr,
            v["signingKey"].as_str().unwrap()
        )
    );
    let taken = task.wait_event("claim taken").await;
    assert_eq!(taken["span"]["session.id"], id.as_str(), "{taken}");

    // Puppeteer through the gateway, which dials the task where READY said it listens.
    drive(&url).await;
    let item = pool.f.item(&id).await;
    assert_eq!(text(&item, "internalStatus").as_deref(), Some("READY"));
    assert_eq!(
        text(&item, "ecsTaskArn").as_deref(),
        Some(task.arn.as_str())
    );
    assert_eq!(text(&item, "privateIP").as_deref(), Some("127.0.0.1"));
    let proxy = task.wait_event("proxy listening").await["addr"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        item.get("proxyPort")
            .and_then(|p| p.as_n().ok())
            .map(String::as_str),
        proxy.rsplit(':').next(),
        "{item:?}"
    );
    let base = text(&item, "connectBase").expect("the gateway's base in the item");
    assert!(url.starts_with(&base), "{url} is formed on {base}");
    for never in ["signingKey", "connectUrl"] {
        assert!(!item.contains_key(never), "{never} in the item");
    }
    assert!(
        !format!("{item:?}").contains(v["signingKey"].as_str().unwrap()),
        "the item holds no token"
    );
    assert!(gateway.metric("wallcrawler_gateway_dials_total").await >= 1.0);
    assert!(
        gateway
            .metric("wallcrawler_gateway_bytes_client_to_task_total")
            .await
            > 0.0
    );
    pool.claims_deleted().await;

    pool.released_and_ended(&mut task, &id).await;
    // Ended: the gateway refuses the session's token at once, with no dial.
    let dials = gateway.metric("wallcrawler_gateway_dials_total").await;
    let token = v["signingKey"].as_str().unwrap();
    let (status, _) = http(
        "GET",
        &format!("http://{}/json/version?signingKey={token}", gateway.addr),
        &[],
        vec![],
    )
    .await;
    assert_eq!(status, StatusCode::GONE);
    assert_eq!(
        gateway.metric("wallcrawler_gateway_dials_total").await,
        dials
    );
    assert_eq!(
        pool.messages(&pool.dlq).await,
        (0, 0),
        "nothing dead-lettered"
    );

    // A task whose role session is not named by its task id (the assumption the task API
    // rests on) stops at its start and says why, before any claim.
    let (options, _) = as_ecs_starts_it_named(
        &pool.f,
        (moto(), &stack.name),
        behind_loopback(&stack),
        &api,
        Some("not-this-task"),
    )
    .await;
    let mut odd = PoolTask::start(&pool, options).await;
    let failed = odd.wait_event("setting up the task failed").await;
    assert!(!odd.exit().await.success());
    let error = failed["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with(
            "startup self-check failed: the task role's session is named \"not-this-task\", not this task's id"
        ),
        "{failed}"
    );
}

/// Direct mode (`ConnectMode=direct`): no load balancer, no gateway; the pool task's own address
/// is the `connectUrl`, READY written before the create answers, as before Step 8.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stack_in_direct_mode_serves_a_session_at_the_tasks_address() {
    let prefix = format!("wcd-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let stack = create_stack(&moto().endpoint, &prefix, "direct").await;
    assert!(
        stack.gateway_command.is_empty(),
        "no gateway in direct mode"
    );
    for k in [
        "ConnectUrl",
        "GatewayServiceName",
        "moto:ConnectListenerArn",
    ] {
        assert!(!stack.outputs.contains_key(k), "{k}: {:?}", stack.outputs);
    }
    let vars = api_vars(&stack);
    assert!(!vars.contains_key("CONNECT_BASE_URL"), "{vars:?}");
    assert_eq!(vars["ECS_ASSIGN_PUBLIC_IP"], "ENABLED");
    let task_env: HashMap<_, _> = stack.task_env.iter().cloned().collect();
    assert_eq!(
        task_env.get("PUBLIC_IP_REQUIRED").map(String::as_str),
        Some("true")
    );
    assert!(!task_env.contains_key("TRUSTED_PROXY_NETWORKS"));

    let pool = Pool::on_stack(Fixture::from_vars(sdk().await, vars).await, &stack);
    // The test's PUBLIC_IP (loopback) stands for the address EC2 would give.
    let api = serve(pool.f.router.clone()).await;
    let (options, _) =
        as_ecs_starts_it(&pool.f, (moto(), &stack.name), stack.task_env.clone(), &api).await;
    let mut task = PoolTask::start(&pool, options).await.warm().await;
    let (id, url) = pool.served_at_once(&mut task).await;
    let proxy = task.wait_event("proxy listening").await["addr"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        url.starts_with(&format!("ws://{proxy}")),
        "{url} is the task's own address"
    );
    drive(&url).await;
    // A client's handoff request is answered with the control-mode live view the task API's
    // grant carried, on the task's own address; the proxy takes its credential.
    let asked = node("handoff.mjs", &["--url", &url, "--scenario", "ask"]).await;
    let live = asked["answer"]["result"]["url"]
        .as_str()
        .unwrap_or_else(|| panic!("a live view URL: {asked}"));
    let path = live
        .strip_prefix(&format!("http://{proxy}"))
        .unwrap_or_else(|| panic!("{live} is on the task's own address"));
    assert!(path.starts_with("/viewer?t="), "{live}");
    let page = crate::support::raw_http(
        proxy.parse().unwrap(),
        format!("GET {path} HTTP/1.1\r\nHost: {proxy}\r\n\r\n").as_bytes(),
    );
    assert_eq!(crate::support::status_of(&page), 200, "{page}");
    // That client closed its socket, which drops its handoff: the controller removes it from
    // the item (asynchronously). Until it is gone, a poll of the item could see this first
    // handoff, not the one asked for next.
    let first = asked["answer"]["result"]["handoffId"]
        .as_str()
        .unwrap_or_else(|| panic!("a handoff id: {asked}"))
        .to_owned();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while pool.f.item(&id).await.contains_key("handoff") {
        assert!(
            std::time::Instant::now() < deadline,
            "a disconnected client's handoff stays in the item"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A pending handoff is in the session item (written with the session's own credentials)
    // and in /debug until it ends (here: its timeout, 10 s: long enough that a loaded machine's
    // item poll and /debug call both fall inside it), then gone from both.
    let waiting = tokio::spawn({
        let url = url.clone();
        async move {
            let args = [
                "--url",
                &url,
                "--scenario",
                "ask",
                "--handoff-timeout",
                "10",
                "--wait",
            ];
            node("handoff.mjs", &args).await
        }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let pending = loop {
        let item = pool.f.item(&id).await;
        if let Some(h) = item.get("handoff") {
            break h.as_m().unwrap().clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no handoff in the item (attributes {:?})",
            item.keys().collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(pending["reason"].as_s().unwrap(), "ask");
    assert_ne!(
        pending["id"].as_s().unwrap(),
        &first,
        "the second request's handoff"
    );
    let (status, debug) = pool
        .f
        .call(Method::GET, &format!("/v1/sessions/{id}/debug"), None)
        .await;
    // Only the handoff member in a failure's message: the rest carries credentials.
    assert_eq!(status, StatusCode::OK, "{}", debug["error"]);
    assert_eq!(
        debug["handoff"]["id"].as_str(),
        pending["id"].as_s().ok().map(String::as_str),
        "{}",
        debug["handoff"]
    );
    let done = waiting.await.unwrap();
    assert_eq!(
        done["events"][0]["params"]["timedOut"], true,
        "{}",
        done["events"]
    );
    while pool.f.item(&id).await.contains_key("handoff") {
        assert!(
            std::time::Instant::now() < deadline,
            "the ended handoff stays in the item"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    pool.released_and_ended(&mut task, &id).await;
}

/// What tests/py/moto_iam.py answers: credentials of the stack's roles, limited to the role's
/// own policies, and of an IAM user allowed everything (for the test's own checks).
struct Limited {
    roles: HashMap<String, Credentials>,
    /// Each principal's role (its physical name).
    role_names: HashMap<String, String>,
    admin: Credentials,
    /// What was changed for moto, to be said in the test's output.
    widened: Vec<String>,
}

/// Limits `principals` (label, stack resource: a function name or task definition ARN) to
/// their roles' policies in the private moto `moto` (tests/py/moto_iam.py says how and why),
/// and lets `bucket`'s objects be reached over moto's plain HTTP.
async fn limited_to_roles(
    moto: &Moto,
    stack: &Stack,
    principals: &[(&str, String)],
    bucket: &str,
) -> Limited {
    let root = wallcrawler_testkit::repo_root();
    let mut cmd = tokio::process::Command::new(root.join(".venv/bin/python"));
    cmd.arg(root.join("tests/py/moto_iam.py"))
        .args(["--endpoint", &moto.endpoint, "--stack", &stack.name])
        .args(["--bucket", bucket]);
    for (label, id) in principals {
        cmd.args(["--principal", &format!("{label}={id}")]);
    }
    // The role the API assumes for a task's session (no resource runs with it).
    cmd.args(["--role", "session=SessionRole"]);
    let out = tokio::time::timeout(POOL_WAIT, cmd.kill_on_drop(true).output())
        .await
        .expect("tests/py/moto_iam.py finished")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "tests/py/moto_iam.py failed:\n{stderr}"
    );
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("tests/py/moto_iam.py answered no JSON ({e}):\n{stderr}"));
    let creds = |c: &Value| {
        let s = |k: &str| c[k].as_str().map(str::to_owned);
        Credentials::new(
            s("accessKeyId").unwrap(),
            s("secretAccessKey").unwrap(),
            s("sessionToken"),
            None,
            "moto-iam",
        )
    };
    Limited {
        roles: v["principals"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(label, c)| (label.clone(), creds(c)))
            .collect(),
        role_names: v["principals"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(label, c)| (label.clone(), c["role"].as_str().unwrap().to_owned()))
            .collect(),
        admin: creds(&v["admin"]),
        widened: serde_json::from_value(v["widened"].clone()).unwrap(),
    }
}

/// `role`'s inline policies as moto holds them (while it enforces nothing: the query is
/// unsigned): the `GetRolePolicy` answers, whose documents IAM may URL-encode.
async fn role_policies(moto: &Moto, role: &str) -> String {
    let list = query(
        &moto.endpoint,
        "iam",
        "2010-05-08",
        &format!("Action=ListRolePolicies&RoleName={role}"),
    )
    .await;
    let mut out = String::new();
    for name in list.split("<member>").skip(1) {
        let name = name.split("</member>").next().unwrap();
        let doc = query(
            &moto.endpoint,
            "iam",
            "2010-05-08",
            &format!("Action=GetRolePolicy&RoleName={role}&PolicyName={name}"),
        )
        .await;
        out.push_str(&doc);
    }
    out
}

/// Item 1 of Step 10 and item 2 of Step 13 as far as moto's IAM mode goes: the API, the
/// gateway and a pool task each run with credentials limited to its own role's policies as the
/// stack made them (the task: its task role in a session named by its task id, as ECS gives
/// it), and serve a session on a context created just before (no archive yet), persisted at
/// the end. The task takes its claim from the task API (served on loopback) and does
/// everything for its session with the credentials the API granted (the SessionRole narrowed
/// by a session policy). A call the code makes and the role does not grant fails the test
/// (moto answers AccessDenied); while it serves, the task reaches nothing of another session
/// ([`another_session_is_out_of_reach`]).
///
/// moto authorises most actions against the resource "*", so the roles' statements are widened
/// to it for every service but S3, SQS and STS's AssumeRole (tests/py/moto_iam.py): this proves
/// the ACTIONS, deploy/check_template.py the resources. The bucket's TLS-only Deny is lifted
/// (moto cannot see TLS and applies it to every request). Conditions are not evaluated by moto
/// (so the session item's attribute lists and `dynamodb:LeadingKeys` are asserted by
/// deploy/check_template.py and the session policy's unit tests, and what the controller asks
/// for by `aws::tests::no_read_of_a_session_item_asks_for_or_receives_its_token`); S3's
/// resources are, and a session policy's (tests/py/moto_server.py applies it to S3, SQS and
/// STS).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stack_serves_a_fresh_context_with_only_its_roles_permissions() {
    // IAM enforcement is global to a moto server: this test has one of its own.
    let moto = tokio::task::spawn_blocking(Moto::start).await.unwrap();
    let prefix = format!("wci-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let stack = create_stack(&moto.endpoint, &prefix, "gateway").await;
    let out = |k: &str| stack.outputs[k].clone();

    // Set up while moto checks nothing: the project and its key (the admin's work, not the
    // API's), then the roles' credentials.
    let setup = moto.sdk_config_as(dummy_credentials()).await;
    let f = Fixture::from_vars(setup.clone(), api_vars(&stack)).await;
    let limited = limited_to_roles(
        &moto,
        &stack,
        &[
            ("api", out("ApiFunctionName")),
            ("task", out("TaskDefinitionArn")),
            ("gateway", out("GatewayTaskDefinitionArn")),
            ("taskApi", out("TaskApiTaskDefinitionArn")),
        ],
        &out("ContextsBucketName"),
    )
    .await;
    eprintln!("changed for moto's IAM: {:#?}", limited.widened);
    // The pool task as ECS starts it (its credentials made while moto checks nothing), with
    // the task API on a port taken now and served once the API's router exists.
    let api_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api_url = format!("http://{}", api_listener.local_addr().unwrap());
    let (task_options, task_role) =
        as_ecs_starts_it(&f, (&moto, &stack.name), behind_loopback(&stack), &api_url).await;
    // The API's role reads sessions by key and through indexes only: no Scan (a tenant's
    // DELETE /v1/contexts/{id} once scanned the whole table). Deleting a context below works
    // with this role.
    let api_policies = role_policies(&moto, &limited.role_names["api"]).await;
    let names = |action: &str| {
        api_policies.contains(&format!("dynamodb:{action}"))
            || api_policies.contains(&format!("dynamodb%3A{action}"))
    };
    assert!(names("Query"), "the API role's policies: {api_policies}");
    assert!(
        !names("Scan"),
        "the API role grants no Scan: {api_policies}"
    );
    enforce_iam(&moto).await;
    let refused = aws_sdk_dynamodb::Client::new(&setup)
        .get_item()
        .table_name(out("SessionsTableName"))
        .key("sessionId", AttributeValue::S("any".into()))
        .send()
        .await;
    assert!(
        refused.is_err(),
        "moto enforces IAM: dummy keys are refused"
    );

    let role = |label: &str| limited.roles[label].clone();
    let gateway = Gateway::start(&stack, aws_env_as(&moto, &role("gateway"))).await;
    let mut vars = api_vars(&stack);
    vars.insert("CONNECT_BASE_URL", format!("ws://{}", gateway.addr));
    let api = moto.sdk_config_as(role("api")).await;
    let admin = moto.sdk_config_as(limited.admin.clone()).await;
    let pool = Pool::on_stack(f.reconfigured(&api, admin, vars), &stack);
    no_task_route(&pool.f).await;
    // The task API service with its own role's credentials.
    let task_api = moto.sdk_config_as(role("taskApi")).await;
    let vars = task_api_vars(&stack);
    let cfg = wallcrawler_control_plane::aws::Config::from_source(&|k| vars.get(k).cloned())
        .expect("a complete configuration");
    let identities =
        std::sync::Arc::new(wallcrawler_control_plane::aws::StsIdentities::new(&task_api).unwrap());
    let service = wallcrawler_control_plane::aws::build_task_api(&task_api, &cfg, identities)
        .expect("the service's task API is on");
    serve_on(
        api_listener,
        wallcrawler_control_plane::aws::task_service::router(service),
    );
    let mut task = pool.warm_task(task_options).await;

    let ctx = pool.new_context().await;
    let v = pool
        .create(json!({"keepAlive": true,
            "browserSettings": {"context": {"id": ctx, "persist": true}}}))
        .await;
    assert_eq!(v["status"], "RUNNING", "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    task.wait_event("no archive for this context yet; starting with an empty profile")
        .await;
    // READY or the session's failure (a refused call), whichever the task says first.
    let ready = task
        .wait_lines("READY or a failure", 1, |e| {
            e["message"] == "claimed session READY" || e["level"] == "ERROR"
        })
        .await;
    assert_eq!(ready["message"], "claimed session READY", "{}", task.text());
    drive(&connect_url(&v)).await;
    another_session_is_out_of_reach(&pool, &moto, &task_role, &api_url, &id).await;
    // A download, stored with the task role's permissions.
    let files = tempfile::tempdir().unwrap();
    let (o, e) = (files.path().join("out"), files.path().join("elsewhere"));
    std::fs::create_dir(&o).unwrap();
    let (o, e) = (o.to_str().unwrap(), e.to_str().unwrap());
    let url = connect_url(&v);
    let args = [
        "--scenario",
        "click",
        "--url",
        &url,
        "--out",
        o,
        "--elsewhere",
        e,
    ];
    assert_eq!(node("downloads.mjs", &args).await["state"], "completed");
    // The context is in use: its live session is found through the contextId index, with the
    // API role's own permissions.
    let context_path = format!("/v1/contexts/{ctx}");
    let (status, busy) = pool.f.call(Method::DELETE, &context_path, None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{busy}");
    assert!(busy["message"].as_str().unwrap().contains(&id), "{busy}");
    pool.released_and_ended(&mut task, &id).await;
    assert_eq!(task.events("profile saved").len(), 1, "{}", task.text());
    let archive = s3(&pool.f.sdk)
        .head_object()
        .bucket(out("ContextsBucketName"))
        .key(wallcrawler_contract::storage::profile_key(
            &pool.f.project_id,
            &ctx,
        ))
        .send()
        .await
        .unwrap();
    assert!(archive.content_length().unwrap_or(0) > 0, "{archive:?}");
    assert_eq!(task.events("download stored").len(), 1, "{}", task.text());
    // Its downloads with the API role's permissions: listed, read and zipped into the bucket,
    // answered with a presigned GET. (moto with IAM enforced answers a presigned GET made with
    // role credentials with its own 500, so the zip is read back here with the SDK; the GET
    // itself is shown in `pool::downloads`.)
    let (status, headers, _) = wallcrawler_testkit::platform::raw_call_with_key(
        &pool.f.router,
        &pool.f.api_key,
        Method::GET,
        &format!("/v1/sessions/{id}/downloads"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::FOUND, "{headers:?}");
    assert!(
        headers["location"]
            .to_str()
            .unwrap()
            .contains("X-Amz-Signature=")
    );
    let zip = s3(&pool.f.sdk)
        .get_object()
        .bucket(out("ContextsBucketName"))
        .key(format!("files/{}/{id}/downloads.zip", pool.f.project_id))
        .send()
        .await
        .unwrap()
        .body
        .collect()
        .await
        .unwrap()
        .into_bytes();
    let served = std::fs::read(files.path().join("out/export.csv")).unwrap();
    assert!(
        memchr::memmem::find(&zip, &served).is_some(),
        "the download in the zip"
    );
    // The task role itself reaches none of the session's objects (moto enforces S3's
    // resources): not the zip the API made beside the session's downloads, not a download
    // stored, not even its context's archive — the controller did all of that with the
    // credentials the task API granted for this session.
    let bucket = out("ContextsBucketName");
    let downloads = format!("files/{}/{id}/downloads/", pool.f.project_id);
    let stored = s3(&pool.f.sdk)
        .list_objects_v2()
        .bucket(&bucket)
        .prefix(&downloads)
        .send()
        .await
        .unwrap();
    let stored = stored.contents()[0].key().unwrap().to_owned();
    let as_task = s3(&moto.sdk_config_as(task_role.clone()).await);
    for key in [
        format!("files/{}/{id}/downloads.zip", pool.f.project_id),
        stored,
        wallcrawler_contract::storage::profile_key(&pool.f.project_id, &ctx),
    ] {
        let e = as_task
            .get_object()
            .bucket(&bucket)
            .key(&key)
            .send()
            .await
            .expect_err("refused to the task role");
        assert_eq!(
            e.as_service_error().and_then(|e| e.meta().code()),
            Some("AccessDenied"),
            "{key}: {e:?}"
        );
    }
    assert_eq!(
        pool.messages(&pool.dlq).await,
        (0, 0),
        "nothing dead-lettered"
    );
    // Its session ended: the context and its archive go.
    let (status, gone) = pool.f.call(Method::DELETE, &context_path, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{gone}");
    let (status, _) = pool.f.call(Method::GET, &context_path, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// Asserts that `what` was refused as AccessDenied.
fn denied<T: std::fmt::Debug, E: std::fmt::Debug>(what: &str, r: Result<T, E>) {
    let e = format!("{:?}", r.expect_err(what));
    assert!(
        e.contains("AccessDenied"),
        "{what}: refused as AccessDenied, got {e}"
    );
}

/// A claim received from `queue` and the object at `key` of `bucket`, both with `sdk`'s
/// credentials: each refused as AccessDenied.
async fn no_claim_nor_object(
    sdk: &aws_config::SdkConfig,
    queue: &str,
    (bucket, key): (&str, &str),
) {
    let received = aws_sdk_sqs::Client::new(sdk)
        .receive_message()
        .queue_url(queue)
        .send()
        .await;
    denied("receiving a claim", received);
    let object = s3(sdk).get_object().bucket(bucket).key(key).send().await;
    denied("reading another session's archive", object);
}

/// Step 13, item 2, as far as moto enforces it: while a task serves session `id`, with only
/// what it holds — its task role's credentials (`task_role`), its identity at the task API
/// (`api`), and the credentials that API grants it for its own session — it cannot receive
/// another session's claim, read or write another session's item, nor read another tenant's
/// context archive. (Protecting another task: moto has no UpdateTaskProtection; the session
/// policy's unit tests and deploy/check_template.py assert that only the task's own ARN is
/// named.)
async fn another_session_is_out_of_reach(
    pool: &Pool,
    moto: &Moto,
    task_role: &Credentials,
    api: &str,
    id: &str,
) {
    // Another session, on a context with an archive, waiting for a browser.
    let bucket = pool.f.cfg.contexts_bucket.clone();
    let other_ctx = pool.new_context().await;
    let other_archive = wallcrawler_contract::storage::profile_key(&pool.f.project_id, &other_ctx);
    s3(&pool.f.sdk)
        .put_object()
        .bucket(&bucket)
        .key(&other_archive)
        .body(b"another session's cookies".to_vec().into())
        .send()
        .await
        .unwrap();
    let other = pool
        .create(json!({"keepAlive": true,
            "browserSettings": {"context": {"id": other_ctx, "persist": true}}}))
        .await;
    let other_id = other["id"].as_str().unwrap().to_owned();

    // The task role: no claim, no item, no archive — not even its own session's.
    let role = moto.sdk_config_as(task_role.clone()).await;
    no_claim_nor_object(&role, &pool.queue, (&bucket, &other_archive)).await;
    let table = pool.f.cfg.tables.sessions.clone();
    let dynamo = aws_sdk_dynamodb::Client::new(&role);
    for session in [id, other_id.as_str()] {
        let read = dynamo
            .get_item()
            .table_name(&table)
            .key("sessionId", AttributeValue::S(session.into()))
            .projection_expression("internalStatus")
            .send()
            .await;
        denied("reading an item", read);
    }
    let route = dynamo
        .update_item()
        .table_name(&table)
        .key("sessionId", AttributeValue::S(other_id.clone()))
        .update_expression("SET publicIP = :ip")
        .expression_attribute_values(":ip", AttributeValue::S("203.0.113.9".into()))
        .send()
        .await;
    denied("writing a route", route);

    // Its identity at the task API (each call signs a fresh one, as the controller does): no
    // second claim, no other session's credentials.
    let post = |path: &str, identity: String, body: Value| {
        let url = format!("{api}{path}");
        async move {
            let headers = [
                (
                    wallcrawler_contract::task_api::IDENTITY_HEADER,
                    identity.as_str(),
                ),
                ("content-type", "application/json"),
            ];
            http("POST", &url, &headers, body.to_string().into_bytes()).await
        }
    };
    let sign_at = |at: std::time::SystemTime| {
        let role = role.clone();
        async move {
            wallcrawler_aws::task_identity::sign_at(&role, at)
                .await
                .unwrap()
                .encode()
        }
    };
    let call = |path: &str, body: Value| {
        let path = path.to_owned();
        async move {
            let identity = sign_at(std::time::SystemTime::now()).await;
            post(&path, identity, body).await
        }
    };
    let (status, body) = call(
        wallcrawler_contract::task_api::CLAIMS_PATH,
        json!({"waitSeconds": 0}),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "a second claim: {body}");
    let credentials = wallcrawler_contract::task_api::CREDENTIALS_PATH;
    // An identity is taken once, and only within a minute of its signing.
    let once = sign_at(std::time::SystemTime::now()).await;
    let own = json!({"sessionId": id});
    let (status, _) = post(credentials, once.clone(), own.clone()).await;
    assert_eq!(status, StatusCode::OK, "its own session's credentials");
    let (status, body) = post(credentials, once, own.clone()).await;
    let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    assert_eq!(
        (status, v["message"].as_str()),
        (
            StatusCode::UNAUTHORIZED,
            Some("the task identity was used before: each is taken once")
        ),
        "a replayed identity: {body}"
    );
    let old = sign_at(std::time::SystemTime::now() - Duration::from_secs(61 + 1)).await;
    let (status, body) = post(credentials, old, own).await;
    let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    assert_eq!(
        (status, v["message"].as_str()),
        (
            StatusCode::UNAUTHORIZED,
            Some("the task identity was signed more than 60 s ago")
        ),
        "an old identity: {body}"
    );
    let (status, body) = call(credentials, json!({"sessionId": other_id})).await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "another session's credentials: {body}"
    );

    // Its own session's credentials reach no other session's archive, and no claim.
    let (status, body) = call(credentials, json!({"sessionId": id})).await;
    assert_eq!(status, StatusCode::OK, "its own session's credentials");
    let grant: wallcrawler_contract::task_api::CredentialsGrant =
        serde_json::from_str(&body).unwrap();
    let c = grant.credentials;
    let session = moto
        .sdk_config_as(Credentials::new(
            c.access_key_id,
            c.secret_access_key,
            Some(c.session_token),
            None,
            "session",
        ))
        .await;
    no_claim_nor_object(&session, &pool.queue, (&bucket, &other_archive)).await;

    // Nobody took the other session: it still waits for a browser, held by no task.
    let item = pool.f.item(&other_id).await;
    let status =
        text(&item, "internalStatus").and_then(|s| wallcrawler_contract::InternalStatus::parse(&s));
    assert!(
        status.is_some_and(wallcrawler_contract::InternalStatus::may_become_ready),
        "{item:?}"
    );
    assert!(!item.contains_key("owner"), "{item:?}");
    pool.release(&other_id).await;
}
