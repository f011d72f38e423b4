//! The CloudFormation template (deploy/template.yaml) created as a stack in moto, and the
//! platform run on what it created: the API built from the API function's environment as the
//! stack set it, a pool controller started with the task definition's environment as the stack
//! registered it (plus the test's loopback settings), one session created, taken from the
//! stack's claims queue, READY, driven by Puppeteer, released, `endedAt`.
//!
//! deploy/moto_stack.py creates the stack (boto3): it replaces, in a copy of the template, the
//! resource types moto's CloudFormation refuses (the secret, the bucket policy, the API stage)
//! by the same resources made through the plain APIs, and says so in its answer. What moto
//! accepts but ignores is asserted on the template by deploy/check_template.py.

use super::*;

/// Bound on creating the stack (moto can leave a stack CREATE_IN_PROGRESS forever).
const STACK_WAIT: Duration = Duration::from_secs(90);

/// What deploy/moto_stack.py answers.
struct Stack {
    outputs: HashMap<String, String>,
    api_env: Vec<(String, String)>,
    task_env: Vec<(String, String)>,
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

async fn create_stack(prefix: &str) -> Stack {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python = root.join(".venv/bin/python");
    assert!(
        python.is_file(),
        "the venv is missing: run scripts/install-test-deps.sh"
    );
    let out = tokio::time::timeout(
        STACK_WAIT + Duration::from_secs(30),
        tokio::process::Command::new(python)
            .arg(root.join("deploy/moto_stack.py"))
            .args(["--endpoint", &moto().endpoint, "--prefix", prefix])
            .args(["--timeout", &STACK_WAIT.as_secs().to_string()])
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
        outputs: strings(&v["outputs"]).into_iter().collect(),
        api_env: strings(&v["apiEnv"]),
        task_env: strings(&v["taskEnv"]),
    }
}

/// The API function's configuration as the stack set it. Every name is one the control plane
/// reads (a misspelt variable fails here rather than being silently ignored).
fn api_vars(stack: &Stack) -> HashMap<&'static str, String> {
    const READ: &[&str] = &[
        "SESSIONS_TABLE_NAME",
        "PROJECTS_TABLE_NAME",
        "API_KEYS_TABLE_NAME",
        "CONTEXTS_TABLE_NAME",
        "CONTEXTS_BUCKET_NAME",
        "ECS_CLUSTER",
        "ECS_TASK_DEFINITION",
        "ECS_SUBNETS",
        "ECS_SECURITY_GROUPS",
        "ECS_ASSIGN_PUBLIC_IP",
        "ECS_CONTAINER_NAME",
        "CDP_PROXY_PORT",
        "WALLCRAWLER_JWT_SIGNING_SECRET_ARN",
        "CREATE_WAIT_SECONDS",
        "POOL_QUEUE_URL",
    ];
    stack
        .api_env
        .iter()
        .map(|(k, v)| {
            let name = READ
                .iter()
                .find(|n| **n == k)
                .unwrap_or_else(|| panic!("the API function's {k} is not read by the code"));
            (*name, v.clone())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stack_created_in_moto_serves_a_session_through_its_pool() {
    let prefix = format!("wcs-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let stack = create_stack(&prefix).await;
    let out = |k: &str| {
        stack
            .outputs
            .get(k)
            .unwrap_or_else(|| panic!("no output {k}: {:?}", stack.outputs))
            .clone()
    };

    // The API as the API function would run, configured only by the stack.
    let vars = api_vars(&stack);
    let f = Fixture::from_vars(sdk().await, vars).await;
    assert_eq!(f.cfg.tables.sessions, out("SessionsTableName"));
    assert_eq!(f.cfg.tables.projects, out("ProjectsTableName"));
    assert_eq!(f.cfg.tables.api_keys, out("ApiKeysTableName"));
    assert_eq!(f.cfg.tables.contexts, out("ContextsTableName"));
    assert_eq!(f.cfg.contexts_bucket, out("ContextsBucketName"));
    assert_eq!(f.cfg.signing_secret_arn, out("SigningSecretArn"));
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
    assert_eq!(
        table
            .stream_specification()
            .and_then(|s| s.stream_view_type())
            .map(|v| v.as_str()),
        Some("NEW_AND_OLD_IMAGES")
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

    // A pool task as the service would start it: the task definition's environment.
    let pool = Pool {
        f,
        sqs,
        queue,
        dlq,
        tmp: tempfile::tempdir().unwrap(),
    };
    let mut task = PoolTask::start(
        &pool,
        TaskOptions {
            task_env: Some(stack.task_env.clone()),
            ..Default::default()
        },
    )
    .await
    .warm()
    .await;

    let (id, url) = pool.served_at_once(&mut task).await;
    drive(&url).await;
    pool.released_and_ended(&mut task, &id).await;
    assert_eq!(
        pool.messages(&pool.dlq).await,
        (0, 0),
        "nothing dead-lettered"
    );
}
