//! The control plane on moto, built exactly as its API Lambda builds it (feature `platform`):
//! for the control plane's own AWS tests and for the root package's pool and stack tests, which
//! run it beside real controllers. [`Fixture`] creates the tables, bucket, signing secret, ECS
//! cluster and task definition, one ACTIVE project with its key, and the API's router; the
//! functions around it play the API's clients, the controller and EventBridge.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use aws_config::SdkConfig;
use aws_sdk_dynamodb::config::Credentials;
use aws_sdk_dynamodb::types::AttributeValue;
use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;
use wallcrawler_control_plane::admin::{self, NewProject};
use wallcrawler_control_plane::aws::lambda::{
    Authorizer, TaskEventOutcome, TaskStateChange, authorize_request, handle_task_state_change,
};
use wallcrawler_control_plane::aws::{
    COUNTER, Config, DynamoContexts, DynamoKeys, DynamoProjects, DynamoSessions, DynamoSlots, HELD,
    build_app, build_router,
};

use crate::{Moto, moto, tables, unique};

/// Bound on the waits here (a hang guard, not a speed assertion).
pub const WAIT: Duration = Duration::from_secs(20);

/// The name of the key pair in the fixture's secrets ([`crate::keys`]): its private key in the
/// signing secret, its public key in the public key secret.
pub const SIGNING_KEY: &str = "aws-tests-signing-key";

/// The public address the played controller announces.
pub const PUBLIC_IP: &str = "203.0.113.7";

/// The SDK configuration for moto.
pub async fn sdk() -> SdkConfig {
    crate::sdk_config().await
}

/// Environment for a child process talking to moto, with one SDK attempt per call (moto's
/// internal errors are HTML 500s the SDK would otherwise retry for seconds).
pub fn aws_env() -> Vec<(&'static str, String)> {
    aws_env_as(moto(), &crate::dummy_credentials())
}

/// [`aws_env`] for the moto server `moto` with `creds`.
pub fn aws_env_as(moto: &Moto, creds: &Credentials) -> Vec<(&'static str, String)> {
    let mut env = moto.child_env_as(creds);
    env.push(("AWS_MAX_ATTEMPTS", "1".into()));
    env
}

/// The signing secret (the private key of the key pair named `key`) and the public key secret
/// (its public key), under unique names, as the operator's deploy step puts them
/// (deploy/README.md); their ARNs, in that order.
pub async fn create_key_secrets(sdk: &SdkConfig, key: &str) -> (String, String) {
    let client = aws_sdk_secretsmanager::Client::new(sdk);
    let pair = crate::keys::signing_key(key);
    let private = wallcrawler_contract::secret::private_secret_string(&pair);
    let public = wallcrawler_contract::secret::public_secret_string(pair.verifying_key());
    let mut arns = Vec::new();
    for (prefix, value) in [("jwt-signing", private.as_str()), ("jwt-public", &public)] {
        let out = client
            .create_secret()
            .name(unique(prefix))
            .secret_string(value)
            .send()
            .await
            .unwrap();
        arns.push(out.arn().unwrap().to_owned());
    }
    let public = arns.pop().unwrap();
    (arns.pop().unwrap(), public)
}

/// A string attribute.
pub fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

/// The string attribute `k` of `item`.
pub fn text(item: &HashMap<String, AttributeValue>, k: &str) -> Option<String> {
    item.get(k).and_then(|v| v.as_s().ok()).cloned()
}

/// The whole-number attribute `k` of `item` (0 when absent).
pub fn number(item: &HashMap<String, AttributeValue>, k: &str) -> u64 {
    item.get(k)
        .and_then(|v| v.as_n().ok())
        .map_or(0, |n| n.parse().expect("a whole number"))
}

/// An S3 client for moto (path-style addressing).
pub fn s3(sdk: &SdkConfig) -> aws_sdk_s3::Client {
    aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(sdk)
            .force_path_style(true)
            .build(),
    )
}

/// Serves `router` over HTTP on a free loopback port for as long as the test runs (as API
/// Gateway serves the API function to the tasks); its base URL, `http://127.0.0.1:<port>`.
pub async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    serve_on(listener, router)
}

/// [`serve`] on a listener bound beforehand (its URL handed out before the router exists).
pub fn serve_on(listener: tokio::net::TcpListener, router: Router) -> String {
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{addr}")
}

/// From now on every request to `moto` (a private server: this is global to it) is
/// authenticated and authorised by its IAM policies.
pub async fn enforce_iam(moto: &Moto) {
    let url = format!("{}/moto-api/reset-auth", moto.endpoint);
    let (status, body) = http("POST", &url, &[], b"0".to_vec()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// HTTP/1.1 to moto; the status and body.
pub async fn http(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> (StatusCode, String) {
    let uri: hyper::Uri = url.parse().unwrap();
    let authority = uri.authority().unwrap().as_str().to_owned();
    let stream = tokio::net::TcpStream::connect(&authority).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(uri.path_and_query().map_or("/", |p| p.as_str()))
        .header("host", &authority)
        .header("content-length", body.len());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = sender
        .send_request(
            req.body(http_body_util::Full::new(Bytes::from(body)))
                .unwrap(),
        )
        .await
        .unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// The first `<tag>` value of an EC2 Query API call to moto. (A raw call rather than the EC2
/// SDK, whose crate would cost this crate's tests minutes of compiling; moto routes on the
/// credential scope and does not check the signature.)
pub async fn ec2_first(params: &str, tag: &str) -> String {
    let (status, xml) = http(
        "POST",
        &format!("{}/", moto().endpoint),
        &[
            (
                "authorization",
                "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/ec2/aws4_request, \
                 SignedHeaders=host, Signature=0",
            ),
            ("content-type", "application/x-www-form-urlencoded"),
        ],
        format!("Version=2016-11-15&{params}").into_bytes(),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{xml}");
    let open = format!("<{tag}>");
    let start = xml
        .find(&open)
        .unwrap_or_else(|| panic!("no {tag} in {xml}"))
        + open.len();
    let end = start + xml[start..].find('<').unwrap();
    xml[start..end].to_owned()
}

/// A cluster and a FARGATE task definition (moto wants `memory` on the container), one of
/// moto's default subnets and the default security group.
pub async fn create_ecs(sdk: &SdkConfig) -> (String, String, String, String) {
    use aws_sdk_ecs::types::{Compatibility, ContainerDefinition, NetworkMode};
    let ecs = aws_sdk_ecs::Client::new(sdk);
    let cluster = unique("cluster");
    ecs.create_cluster()
        .cluster_name(&cluster)
        .send()
        .await
        .unwrap();
    let family = unique("wallcrawler-controller");
    ecs.register_task_definition()
        .family(&family)
        .network_mode(NetworkMode::Awsvpc)
        .requires_compatibilities(Compatibility::Fargate)
        .cpu("1024")
        .memory("2048")
        .container_definitions(
            ContainerDefinition::builder()
                .name("controller")
                .image("wallcrawler-controller:test")
                .memory(2048)
                .essential(true)
                .build(),
        )
        .send()
        .await
        .unwrap();
    let subnet = ec2_first(
        "Action=DescribeSubnets&Filter.1.Name=default-for-az&Filter.1.Value.1=true",
        "subnetId",
    )
    .await;
    let group = ec2_first(
        "Action=DescribeSecurityGroups&Filter.1.Name=group-name&Filter.1.Value.1=default",
        "groupId",
    )
    .await;
    (cluster, family, subnet, group)
}

/// The API on moto, as the Lambda builds it, with the resources it names.
pub struct Fixture {
    /// The SDK configuration for moto.
    pub sdk: SdkConfig,
    /// The API function's environment.
    pub vars: HashMap<&'static str, String>,
    /// The API's configuration, read from `vars`.
    pub cfg: Config,
    /// The API's router, as the Lambda builds it (with the task API's routes when `vars`
    /// configure it).
    pub router: Router,
    /// The ACTIVE project.
    pub project_id: String,
    /// Its API key.
    pub api_key: String,
}

impl Fixture {
    /// The resources under unique names; creates wait up to `create_wait_seconds` for READY.
    pub async fn new(create_wait_seconds: u64) -> Fixture {
        Fixture::with_env(create_wait_seconds, Vec::new()).await
    }

    /// [`Fixture::new`] with more of the API function's environment (e.g. `POOL_QUEUE_URL`).
    pub async fn with_env(create_wait_seconds: u64, extra: Vec<(&'static str, String)>) -> Fixture {
        let sdk = sdk().await;
        let mut vars = tables::create_all(&sdk).await;
        let bucket = unique("contexts");
        s3(&sdk)
            .create_bucket()
            .bucket(&bucket)
            .send()
            .await
            .unwrap();
        let (signing, public) = create_key_secrets(&sdk, SIGNING_KEY).await;
        let (cluster, family, subnet, group) = create_ecs(&sdk).await;
        vars.extend([
            ("CONTEXTS_BUCKET_NAME", bucket),
            ("ECS_CLUSTER", cluster),
            ("ECS_TASK_DEFINITION", family),
            ("ECS_SUBNETS", subnet),
            ("ECS_SECURITY_GROUPS", group),
            ("ECS_ASSIGN_PUBLIC_IP", "ENABLED".into()),
            ("WALLCRAWLER_JWT_SIGNING_SECRET_ARN", signing),
            ("WALLCRAWLER_JWT_PUBLIC_KEY_SECRET_ARN", public),
            ("CREATE_WAIT_SECONDS", create_wait_seconds.to_string()),
        ]);
        vars.extend(extra);
        Fixture::from_vars(sdk, vars.into_iter().collect()).await
    }

    /// The API built exactly as the Lambda builds it from the environment `vars` (whose
    /// resources exist), with one ACTIVE project and its key.
    pub async fn from_vars(sdk: SdkConfig, vars: HashMap<&'static str, String>) -> Fixture {
        let cfg = Config::from_source(&|k| vars.get(k).cloned()).expect("a complete configuration");
        let app = build_app(&sdk, &cfg);
        let now = wallcrawler_contract::time::now_iso8601();
        let project = admin::create_project(
            app.projects.as_ref(),
            NewProject {
                name: "AWS tests".into(),
                project_id: None,
                concurrency: 5,
                default_timeout: 900,
                owner_id: None,
            },
            &now,
        )
        .await
        .unwrap();
        let (api_key, _) = admin::create_key(
            app.keys.as_ref(),
            app.projects.as_ref(),
            admin::NewKey::of(&project.project_id),
            &now,
        )
        .await
        .unwrap();
        Fixture {
            router: build_router(&sdk, &cfg).expect("the task API's STS endpoint"),
            sdk,
            vars,
            cfg,
            project_id: project.project_id,
            api_key,
        }
    }

    /// The API rebuilt from `vars` (the project and its key kept) on `api`, e.g. a role's
    /// credentials; the fixture's own reads and writes go through `checks` from then on.
    pub fn reconfigured(
        self,
        api: &SdkConfig,
        checks: SdkConfig,
        vars: HashMap<&'static str, String>,
    ) -> Fixture {
        let cfg = Config::from_source(&|k| vars.get(k).cloned()).expect("a complete configuration");
        Fixture {
            router: build_router(api, &cfg).expect("the task API's STS endpoint"),
            sdk: checks,
            vars,
            cfg,
            ..self
        }
    }

    /// `method path` with `body` and the fixture's key: the status and the JSON answer.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        call_with_key(&self.router, &self.api_key, method, path, body).await
    }

    /// `POST /v1/sessions` with `body` and the fixture's key.
    pub async fn create(&self, body: Value) -> (StatusCode, Value) {
        self.create_as(&self.api_key, body).await
    }

    /// `POST /v1/sessions` with `body` and `key`.
    pub async fn create_as(&self, key: &str, body: Value) -> (StatusCode, Value) {
        call_with_key(&self.router, key, Method::POST, "/v1/sessions", Some(body)).await
    }

    /// `REQUEST_RELEASE` of session `id` with the fixture's key.
    pub async fn release(&self, id: &str) -> (StatusCode, Value) {
        self.release_as(&self.api_key, id).await
    }

    /// `REQUEST_RELEASE` of session `id` with `key`.
    pub async fn release_as(&self, key: &str, id: &str) -> (StatusCode, Value) {
        let body = json!({"status": "REQUEST_RELEASE"});
        let path = format!("/v1/sessions/{id}");
        call_with_key(&self.router, key, Method::POST, &path, Some(body)).await
    }

    /// The task-state handler's outcome for `event` handled at `at`, on the fixture's tables.
    pub async fn task_stopped(&self, event: &TaskStateChange, at: &str) -> TaskEventOutcome {
        let (sessions, slots, contexts) = self.stores();
        handle_task_state_change(&sessions, &slots, &contexts, event, at)
            .await
            .unwrap()
    }

    /// A DynamoDB client for moto.
    pub fn dynamo(&self) -> aws_sdk_dynamodb::Client {
        aws_sdk_dynamodb::Client::new(&self.sdk)
    }

    /// The stores the task-state handler uses.
    pub fn stores(&self) -> (DynamoSessions, DynamoSlots, DynamoContexts) {
        (
            DynamoSessions::new(self.dynamo(), &self.cfg.tables.sessions),
            DynamoSlots::new(self.dynamo(), &self.cfg.tables.slots),
            DynamoContexts::new(self.dynamo(), &self.cfg.tables.contexts),
        )
    }

    /// Another ACTIVE project with its own key.
    pub async fn project_with_key(&self, concurrency: u64) -> (String, String) {
        let projects = DynamoProjects::new(self.dynamo(), &self.cfg.tables.projects);
        let keys = DynamoKeys::new(self.dynamo(), &self.cfg.tables.api_keys);
        let now = wallcrawler_contract::time::now_iso8601();
        let new = NewProject {
            name: format!("concurrency {concurrency}"),
            project_id: None,
            concurrency,
            default_timeout: 900,
            owner_id: None,
        };
        let p = admin::create_project(&projects, new, &now).await.unwrap();
        let (key, _) = admin::create_key(&keys, &projects, admin::NewKey::of(&p.project_id), &now)
            .await
            .unwrap();
        (p.project_id, key)
    }

    /// The keys of the objects under `prefix` in the contexts bucket.
    pub async fn keys_under(&self, prefix: &str) -> Vec<String> {
        let out = s3(&self.sdk)
            .list_objects_v2()
            .bucket(&self.cfg.contexts_bucket)
            .prefix(prefix)
            .send()
            .await
            .unwrap();
        out.contents()
            .iter()
            .filter_map(|o| o.key().map(str::to_owned))
            .collect()
    }

    /// The item of `table` whose key `key` is `value`, read consistently (empty when none).
    pub async fn get_item(
        &self,
        table: &str,
        key: &str,
        value: &str,
    ) -> HashMap<String, AttributeValue> {
        get_item(&self.dynamo(), table, key, value)
            .await
            .unwrap_or_default()
    }

    /// The session ids holding the project's slots (its slot items), sorted; checks that the
    /// project's counter item counts them.
    pub async fn held(&self, project_id: &str) -> Vec<String> {
        let (_, slots, _) = self.stores();
        let mut held = slots.holders(project_id).await.unwrap();
        held.sort();
        let counter = self
            .dynamo()
            .get_item()
            .table_name(&self.cfg.tables.slots)
            .key("projectId", s(project_id))
            .key("sessionId", s(COUNTER))
            .consistent_read(true)
            .send()
            .await
            .unwrap();
        let counted = counter.item.as_ref().map_or(0, |i| number(i, HELD));
        assert_eq!(
            counted,
            held.len() as u64,
            "the counter counts the slot items"
        );
        held
    }

    /// The context item's `writerSessionId`.
    pub async fn writer(&self, context_id: &str) -> Option<String> {
        let item = self
            .get_item(&self.cfg.tables.contexts, "contextId", context_id)
            .await;
        text(&item, "writerSessionId")
    }

    /// An ECS client for moto.
    pub fn ecs(&self) -> aws_sdk_ecs::Client {
        aws_sdk_ecs::Client::new(&self.sdk)
    }

    /// The raw session item, read consistently.
    pub async fn item(&self, id: &str) -> HashMap<String, AttributeValue> {
        self.get_item(&self.cfg.tables.sessions, "sessionId", id)
            .await
    }

    /// The task as ECS describes it.
    pub async fn task(&self, arn: &str) -> aws_sdk_ecs::types::Task {
        let out = self
            .ecs()
            .describe_tasks()
            .cluster(&self.cfg.ecs.cluster)
            .tasks(arn)
            .send()
            .await
            .unwrap();
        out.tasks().first().cloned().expect("the task exists")
    }

    /// Plays the controller of the next session that reaches PROVISIONING (its task was
    /// started): writes READY, the public IP and the proxy's port, conditionally, as the
    /// controller does (it never sees the token). Returns the session id.
    pub fn play_controller(&self) -> tokio::task::JoinHandle<String> {
        let (dynamo, table) = (self.dynamo(), self.cfg.tables.sessions.clone());
        tokio::spawn(async move {
            let deadline = Instant::now() + WAIT;
            loop {
                assert!(Instant::now() < deadline, "no session reached PROVISIONING");
                let page = dynamo
                    .scan()
                    .table_name(&table)
                    .filter_expression("internalStatus = :p")
                    .expression_attribute_values(":p", s("PROVISIONING"))
                    .consistent_read(true)
                    .send()
                    .await
                    .unwrap();
                if let Some(item) = page.items().first() {
                    let id = text(item, "sessionId").unwrap();
                    let now = wallcrawler_contract::time::now_iso8601();
                    dynamo
                        .update_item()
                        .table_name(&table)
                        .key("sessionId", s(&id))
                        .condition_expression("internalStatus IN (:c, :p, :s)")
                        .update_expression(
                            "SET internalStatus = :ready, #st = :running, publicIP = :ip, \
                             readyAt = :now, updatedAt = :now, proxyPort = :port",
                        )
                        .expression_attribute_names("#st", "status")
                        .expression_attribute_values(":c", s("CREATING"))
                        .expression_attribute_values(":p", s("PROVISIONING"))
                        .expression_attribute_values(":s", s("STARTING"))
                        .expression_attribute_values(":ready", s("READY"))
                        .expression_attribute_values(":running", s("RUNNING"))
                        .expression_attribute_values(":ip", s(PUBLIC_IP))
                        .expression_attribute_values(":now", s(&now))
                        .expression_attribute_values(":port", AttributeValue::N("9223".into()))
                        .send()
                        .await
                        .unwrap();
                    return id;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    }

    /// A session that the test's controller made READY.
    pub async fn running_session(&self, body: Value) -> Value {
        let controller = self.play_controller();
        let (status, v) = self.create(body).await;
        assert_eq!(status, StatusCode::CREATED, "{v}");
        assert_eq!(controller.await.unwrap(), v["id"].as_str().unwrap());
        v
    }
}

/// `method path` with `body` and `key` through `router`: the status, headers and body.
pub async fn raw_call_with_key(
    router: &Router,
    key: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, axum::http::HeaderMap, Bytes) {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("x-wc-api-key", key);
    let req = match body {
        Some(b) => req
            .header("content-type", "application/json")
            .body(Body::from(b.to_string())),
        None => req.body(Body::empty()),
    };
    let resp = router.clone().oneshot(req.unwrap()).await.unwrap();
    let (status, headers) = (resp.status(), resp.headers().clone());
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (status, headers, bytes)
}

/// `method path` with `body` and `key` through `router`: the status and the JSON answer.
pub async fn call_with_key(
    router: &Router,
    key: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let (status, _, bytes) = raw_call_with_key(router, key, method, path, body).await;
    let v = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    (status, v)
}

/// The answers among `answers` that did not create a session.
pub fn refused(answers: &[(StatusCode, Value)]) -> impl Iterator<Item = &(StatusCode, Value)> {
    answers.iter().filter(|(st, _)| *st != StatusCode::CREATED)
}

/// The container override's environment of a task, as a map.
pub fn task_env(task: &aws_sdk_ecs::types::Task) -> HashMap<String, String> {
    let o = task.overrides().expect("overrides");
    let c = o
        .container_overrides()
        .first()
        .expect("a container override");
    assert_eq!(c.name(), Some("controller"));
    c.environment()
        .iter()
        .map(|kv| {
            (
                kv.name().unwrap_or_default().to_owned(),
                kv.value().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// A synthetic EventBridge "ECS Task State Change" for a stopped task.
pub fn stopped_event(
    task_arn: &str,
    started_by: Option<&str>,
    session_env: Option<&str>,
) -> TaskStateChange {
    let mut detail = json!({
        "clusterArn": "arn:aws:ecs:us-east-1:123456789012:cluster/test",
        "taskArn": task_arn,
        "lastStatus": "STOPPED",
        "desiredStatus": "STOPPED",
        "stopCode": "EssentialContainerExited",
        "stoppedReason": "Essential container in task exited",
        "containers": [{"name": "controller", "exitCode": 137, "lastStatus": "STOPPED"}],
    });
    if let Some(id) = started_by {
        detail["startedBy"] = json!(id);
    }
    if let Some(id) = session_env {
        detail["overrides"] = json!({"containerOverrides": [{"name": "controller",
            "environment": [{"name": "SESSION_ID", "value": id}]}]});
    }
    serde_json::from_value(json!({
        "version": "0",
        "id": uuid::Uuid::new_v4().to_string(),
        "detail-type": "ECS Task State Change",
        "source": "aws.ecs",
        "account": "123456789012",
        "time": "2026-11-21T12:00:00Z",
        "region": "us-east-1",
        "resources": [task_arn],
        "detail": detail,
    }))
    .unwrap()
}

/// The item whose `key` is `value` in `table` (a consistent read).
pub async fn get_item(
    dynamo: &aws_sdk_dynamodb::Client,
    table: &str,
    key: &str,
    value: &str,
) -> Option<HashMap<String, AttributeValue>> {
    let out = dynamo
        .get_item()
        .table_name(table)
        .key(key, s(value))
        .consistent_read(true)
        .send()
        .await
        .unwrap();
    out.item().cloned()
}

/// An API Gateway REQUEST authorizer event for `GET /v1/projects` with `key`.
pub fn authorizer_event(
    key: &str,
) -> aws_lambda_events::apigw::ApiGatewayCustomAuthorizerRequestTypeRequest {
    serde_json::from_value(json!({
        "type": "REQUEST",
        "methodArn": "arn:aws:execute-api:us-east-1:123456789012:abc123/prod/GET/v1/projects",
        "resource": "/v1/projects",
        "path": "/v1/projects",
        "httpMethod": "GET",
        "headers": {"X-WC-API-Key": key, "Accept": "application/json"},
        "queryStringParameters": null,
        "pathParameters": null,
        "stageVariables": null,
        "requestContext": {"path": "/prod/v1/projects", "accountId": "123456789012",
            "resourceId": "r1", "stage": "prod", "requestId": "req-1",
            "identity": {"sourceIp": "198.51.100.1"}, "resourcePath": "/v1/projects",
            "httpMethod": "GET", "apiId": "abc123"}
    }))
    .unwrap()
}

/// The authorizer's answer to `key`, as JSON, after checking its policy's effect.
pub async fn policy(auth: &Authorizer, key: &str, effect: &str) -> Value {
    let answer = authorize_request(auth, &authorizer_event(key))
        .await
        .unwrap();
    let answer = serde_json::to_value(&answer).unwrap();
    assert_eq!(
        answer["policyDocument"]["Statement"][0]["Effect"], effect,
        "{answer}"
    );
    answer
}
