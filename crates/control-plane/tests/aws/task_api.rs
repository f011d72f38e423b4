//! The task API against moto through the real SDK: tasks are sessions of the task role named by
//! their task ids (as ECS makes them), their identities signed by `sign()` and sent by the API
//! to moto's STS; claims come from a real queue, sessions from the API's own creates.

use std::sync::Arc;
use std::time::Duration;

use aws_config::SdkConfig;
use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;
use wallcrawler_aws::task_identity::{sign, sign_at};
use wallcrawler_contract::claim::NO_BROWSER_IN_TIME;
use wallcrawler_contract::task_api::{
    CLAIMS_PATH, CREDENTIALS_PATH, CallerTask, IDENTITY_HEADER, MAX_IDENTITY_BYTES, SignedIdentity,
};
use wallcrawler_contract::time::unix_millis;
use wallcrawler_control_plane::aws::StsIdentities;
use wallcrawler_control_plane::task_api::{self, Broker, ClaimOutcome, TaskApi, TaskRole};
use wallcrawler_testkit::moto::assume_role;
use wallcrawler_testkit::platform::{Fixture, enforce_iam, get_item, number, s, text};
use wallcrawler_testkit::{Moto, dummy_credentials, moto, tables, unique};

const ACCOUNT: &str = "123456789012";
/// How long a claim handed to a task stays hidden, in these tests.
const VISIBILITY: u64 = 30;

/// The API with the task API on, a queue, the tasks table and the two roles' ARNs.
struct World {
    f: Fixture,
    api: Router,
    sqs: aws_sdk_sqs::Client,
    queue: String,
    tasks_table: String,
    task_role: String,
    /// The dead-letter queue, with a redrive policy.
    dlq: Option<String>,
}

/// A task: its id and its task role session's SDK configuration.
struct Task {
    id: String,
    sdk: SdkConfig,
}

impl World {
    /// With `redrive`, the queue dead-letters a claim received that many times.
    async fn new(redrive: Option<u32>) -> World {
        World::with(redrive, Vec::new()).await
    }

    /// [`World::new`] with more of the API function's environment.
    async fn with(redrive: Option<u32>, extra: Vec<(&'static str, String)>) -> World {
        let sdk = wallcrawler_testkit::sdk_config().await;
        let sqs = aws_sdk_sqs::Client::new(&sdk);
        let mut create = sqs.create_queue().queue_name(unique("claims"));
        let mut dead = None;
        if let Some(n) = redrive {
            let dlq = new_queue(&sqs, "claims-dlq").await;
            let dlq_arn = queue_arn(&sqs, &dlq).await;
            dead = Some(dlq);
            let policy = json!({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": n});
            create = create.attributes(
                aws_sdk_sqs::types::QueueAttributeName::RedrivePolicy,
                policy.to_string(),
            );
        }
        let queue = create.send().await.unwrap().queue_url().unwrap().to_owned();
        let tasks_table = tables::create(&sdk, &tables::TASKS).await;
        let task_role = format!("arn:aws:iam::{ACCOUNT}:role/{}", unique("wc-task"));
        let session_role = format!("arn:aws:iam::{ACCOUNT}:role/{}", unique("wc-session"));
        let mut env = vec![
            ("POOL_QUEUE_URL", queue.clone()),
            ("TASKS_TABLE_NAME", tasks_table.clone()),
            ("SESSION_ROLE_ARN", session_role),
            ("TASK_ROLE_ARN", task_role.clone()),
            ("POOL_CLAIM_VISIBILITY_SECONDS", VISIBILITY.to_string()),
        ];
        env.extend(extra);
        let f = Fixture::with_env(1, env).await;
        // The fixture's router is the API function's: the task API's routes are in it.
        let api = f.router.clone();
        World {
            f,
            api,
            sqs,
            queue,
            tasks_table,
            task_role,
            dlq: dead,
        }
    }

    /// A task of the task role, with an id of its own.
    async fn task(&self) -> Task {
        self.task_of(&self.task_role, &uuid::Uuid::new_v4().simple().to_string())
            .await
    }

    /// A session of `role` named `session`.
    async fn task_of(&self, role: &str, session: &str) -> Task {
        let creds = assume_role(moto(), dummy_credentials(), role, session).await;
        Task {
            id: session.to_owned(),
            sdk: moto().sdk_config_as(creds).await,
        }
    }

    /// `task`'s ARN, as the API writes it.
    fn arn(&self, task: &Task) -> String {
        format!(
            "arn:aws:ecs:us-east-1:{ACCOUNT}:task/{}/{}",
            self.f.cfg.ecs.cluster, task.id
        )
    }

    /// A session created through the API (its claim on the queue); its id.
    async fn session(&self) -> String {
        let (status, v) = self.f.create(json!({})).await;
        assert_eq!(status, StatusCode::CREATED, "{v}");
        v["id"].as_str().unwrap().to_owned()
    }

    async fn claim(&self, task: &Task, wait: u64) -> (StatusCode, Value) {
        let body = json!({ "waitSeconds": wait }).to_string();
        call(&self.api, CLAIMS_PATH, Some(&identity(task).await), &body).await
    }

    async fn credentials(&self, task: &Task, session: &str) -> (StatusCode, Value) {
        let body = json!({ "sessionId": session }).to_string();
        call(
            &self.api,
            CREDENTIALS_PATH,
            Some(&identity(task).await),
            &body,
        )
        .await
    }

    /// The session item's attributes (a consistent read).
    async fn item(
        &self,
        id: &str,
    ) -> std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue> {
        self.f.item(id).await
    }

    /// The tasks table's item of `task`, if any.
    async fn marker(&self, task: &Task) -> Option<String> {
        let item = get_item(&self.f.dynamo(), &self.tasks_table, "taskId", &task.id).await?;
        text(&item, "sessionId")
    }

    /// How many messages the queue holds, visible or not.
    async fn queued(&self) -> u64 {
        self.held_by(&self.queue).await
    }

    /// How many messages `queue` holds, visible or not.
    async fn held_by(&self, queue: &str) -> u64 {
        let out = self
            .sqs
            .get_queue_attributes()
            .queue_url(queue)
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::All)
            .send()
            .await
            .unwrap();
        let attrs = out.attributes().unwrap();
        let n = |a: aws_sdk_sqs::types::QueueAttributeName| -> u64 {
            attrs.get(&a).map_or(0, |v| v.parse().unwrap())
        };
        n(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
            + n(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
    }

    /// Sets attributes of session `id` as another writer would.
    async fn set(
        &self,
        id: &str,
        expr: &str,
        values: &[(&str, aws_sdk_dynamodb::types::AttributeValue)],
    ) {
        let mut req = self
            .f
            .dynamo()
            .update_item()
            .table_name(&self.f.cfg.tables.sessions)
            .key("sessionId", s(id))
            .update_expression(expr);
        if expr.contains("#o") {
            // `owner` is a reserved word.
            req = req.expression_attribute_names("#o", "owner");
        }
        for (k, v) in values {
            req = req.expression_attribute_values(*k, v.clone());
        }
        req.send().await.unwrap();
    }
}

async fn new_queue(sqs: &aws_sdk_sqs::Client, prefix: &str) -> String {
    let out = sqs
        .create_queue()
        .queue_name(unique(prefix))
        .send()
        .await
        .unwrap();
    out.queue_url().unwrap().to_owned()
}

async fn queue_arn(sqs: &aws_sdk_sqs::Client, url: &str) -> String {
    let a = aws_sdk_sqs::types::QueueAttributeName::QueueArn;
    let out = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(a.clone())
        .send()
        .await
        .unwrap();
    out.attributes().unwrap()[&a].clone()
}

/// `task`'s identity header value, signed now.
async fn identity(task: &Task) -> String {
    sign(&task.sdk).await.unwrap().encode()
}

/// `POST path` with `body` and, if given, the identity header: the status and the JSON answer
/// (`null` for none).
async fn call(api: &Router, path: &str, identity: Option<&str>, body: &str) -> (StatusCode, Value) {
    let mut req = Request::post(path).header("content-type", "application/json");
    if let Some(id) = identity {
        req = req.header(IDENTITY_HEADER, id);
    }
    let resp = api
        .clone()
        .oneshot(req.body(Body::from(body.to_owned())).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let v = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    (status, v)
}

fn now() -> u64 {
    unix_millis() / 1000
}

/// The credentials of a grant are whole and expire within the hour.
fn assert_credentials(v: &Value) {
    let c = &v["credentials"];
    for k in ["accessKeyId", "secretAccessKey", "sessionToken"] {
        assert!(c[k].as_str().is_some_and(|s| !s.is_empty()), "{k} in {v}");
    }
    let exp = c["expiration"].as_u64().unwrap();
    assert!(exp > now() && exp <= now() + 3600 + 60, "{exp}");
}

/// The grant's live view: a control-mode viewer credential for `session`, until its item's
/// `expiresAt`; no gateway here, so no base (the task's own address is used).
fn assert_live_view(v: &Value, session: &str, expires_at: u64) {
    use base64::Engine as _;
    let lv = &v["liveView"];
    assert_eq!(lv["expiresAt"], expires_at, "{v}");
    assert!(lv.get("base").is_none(), "{v}");
    let payload = lv["credential"]
        .as_str()
        .unwrap()
        .split('.')
        .nth(1)
        .unwrap();
    let claims: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(claims["aud"], json!(["wallcrawler-viewer"]), "{claims}");
    assert_eq!(claims["mode"], "control", "{claims}");
    assert_eq!(claims["sessionId"], session, "{claims}");
    assert_eq!(claims["exp"], expires_at, "{claims}");
}

/// The claim of a new session goes to the one task that asks, with credentials for that session;
/// the task's item names it, the session's item names the task (owner, ecsTaskArn) with a lease
/// of the claim's visibility. That task asking again is refused (409); another task gets
/// nothing (the claim is hidden) and no credentials for that session (nor for a missing one: the
/// same 403); the serving task gets fresh ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_goes_to_one_task_with_credentials_for_its_session_alone() {
    let w = World::new(None).await;
    let (a, b) = (w.task().await, w.task().await);
    let id = w.session().await;

    let (status, grant) = w.claim(&a, 5).await;
    assert_eq!(status, StatusCode::OK, "{grant}");
    let claim: Value = serde_json::from_str(grant["claim"].as_str().unwrap()).unwrap();
    assert_eq!(claim["sessionId"], id.as_str());
    assert!(grant["receipt"].as_str().is_some_and(|r| !r.is_empty()));
    assert_credentials(&grant);
    let item = w.item(&id).await;
    assert_live_view(&grant, &id, number(&item, "expiresAt"));
    assert_eq!(text(&item, "owner"), Some(w.arn(&a)));
    assert_eq!(text(&item, "ecsTaskArn"), Some(w.arn(&a)));
    let until = number(&item, "ownerUntil");
    assert!(
        until >= now() + VISIBILITY - 5 && until <= now() + VISIBILITY,
        "{until}"
    );
    assert_eq!(w.marker(&a).await.as_deref(), Some(id.as_str()));

    let (status, v) = w.claim(&a, 1).await;
    assert_eq!(status, StatusCode::CONFLICT, "{v}");
    assert_eq!(
        v["message"],
        "this task has had its session: a pool task serves one"
    );

    let (status, v) = w.claim(&b, 1).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{v}");
    assert_eq!(w.marker(&b).await, None);
    for other in [id.as_str(), "sess_missing"] {
        let (status, v) = w.credentials(&b, other).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{v}");
        assert_eq!(v["message"], "this task does not serve that session");
    }

    let (status, fresh) = w.credentials(&a, &id).await;
    assert_eq!(status, StatusCode::OK, "{fresh}");
    assert_credentials(&fresh);
    assert_ne!(
        fresh["credentials"]["accessKeyId"], grant["credentials"]["accessKeyId"],
        "fresh credentials"
    );
}

/// A task started for one session (cold: beyond its project's share of the pool) gets
/// credentials for that session at its start — the item names it from its `RunTask` — and for
/// no other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_task_gets_credentials_for_its_own_session() {
    let w = World::with(None, vec![("POOL_PROJECT_SHARE", "1".to_owned())]).await;
    let warm = w.session().await;
    let cold = w.session().await;
    let arn = text(&w.item(&cold).await, "ecsTaskArn").expect("its own task's ARN");
    let task = w
        .task_of(&w.task_role, arn.rsplit('/').next().unwrap())
        .await;
    assert_eq!(w.arn(&task), arn);
    let (status, v) = w.credentials(&task, &cold).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_credentials(&v);
    assert_live_view(&v, &cold, number(&w.item(&cold).await, "expiresAt"));
    let (status, v) = w.credentials(&task, &warm).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{v}");
}

/// Claims are judged as a pool controller judges them: a session released before anyone served
/// it is dropped with its `endedAt` written; one past its claim's deadline is ended unserved
/// (TIMED_OUT, "no browser was available in time"); one another live task holds is handed back
/// until that task's lease ends, and then served. None of these gives the asking task a session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_lapsed_and_held_sessions_are_not_handed_to_a_task() {
    let w = World::new(None).await;
    let a = w.task().await;

    let released = w.session().await;
    let (status, v) = w.f.release(&released).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(text(&w.item(&released).await, "endedAt"), None);
    let (status, v) = w.claim(&a, 1).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{v}");
    let item = w.item(&released).await;
    assert!(text(&item, "endedAt").is_some(), "{item:?}");
    assert_eq!(text(&item, "owner"), None);
    assert_eq!(w.queued().await, 0, "the claim is deleted");

    let lapsed = w.session().await;
    let past = aws_sdk_dynamodb::types::AttributeValue::N((now() - 10).to_string());
    w.set(&lapsed, "SET claimDeadline = :d", &[(":d", past)])
        .await;
    let (status, v) = w.claim(&a, 1).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{v}");
    let item = w.item(&lapsed).await;
    assert_eq!(text(&item, "internalStatus").as_deref(), Some("TIMED_OUT"));
    assert_eq!(
        text(&item, "terminationReason").as_deref(),
        Some(NO_BROWSER_IN_TIME)
    );
    assert!(text(&item, "endedAt").is_some());
    assert_eq!(w.queued().await, 0, "the claim is deleted");

    let held = w.session().await;
    let lease = now() + 3;
    let other = format!("arn:aws:ecs:us-east-1:{ACCOUNT}:task/other/0123");
    w.set(
        &held,
        "SET #o = :o, ownerUntil = :u",
        &[
            (":o", s(&other)),
            (
                ":u",
                aws_sdk_dynamodb::types::AttributeValue::N(lease.to_string()),
            ),
        ],
    )
    .await;
    let (status, v) = w.claim(&a, 1).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{v}");
    assert_eq!(text(&w.item(&held).await, "owner"), Some(other));
    assert_eq!(w.queued().await, 1, "handed back, not deleted");
    assert_eq!(w.marker(&a).await, None);
    // Visible again once the lease has ended: served then.
    let (status, v) = w.claim(&a, 10).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert!(now() > lease, "not before the lease ended");
    assert_eq!(text(&w.item(&held).await, "owner"), Some(w.arn(&a)));
}

/// A claim that does not parse is never granted: it goes back at once, and the queue's redrive
/// policy moves it to the dead-letter queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_claim_is_not_granted() {
    let w = World::new(Some(2)).await;
    let a = w.task().await;
    w.sqs
        .send_message()
        .queue_url(&w.queue)
        .message_body(r#"{"sessionId":"../../etc","projectId":"p"}"#)
        .send()
        .await
        .unwrap();
    let (status, v) = w.claim(&a, 2).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{v}");
    assert_eq!(w.marker(&a).await, None);
    assert_eq!(w.queued().await, 0);
    assert_eq!(w.held_by(w.dlq.as_ref().unwrap()).await, 1, "dead-lettered");
}

/// Two claims of one task at once get one session: the take and the task's item are one
/// transaction, so the second is refused (409) and its claim handed back, for another task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_claims_of_one_task_at_once_get_one_session() {
    let w = World::new(None).await;
    let (a, b) = (w.task().await, w.task().await);
    let ids = [w.session().await, w.session().await];
    let (first, second) = tokio::join!(w.claim(&a, 5), w.claim(&a, 5));
    let mut statuses = [first.0, second.0];
    statuses.sort();
    assert_eq!(
        statuses,
        [StatusCode::OK, StatusCode::CONFLICT],
        "{first:?} {second:?}"
    );
    let granted = w.marker(&a).await.expect("one session");
    assert!(ids.contains(&granted));
    let owned: Vec<_> = futures_util::future::join_all(ids.iter().map(|id| w.item(id)))
        .await
        .iter()
        .map(|i| text(i, "owner"))
        .collect();
    assert_eq!(
        owned
            .iter()
            .filter(|o| o.as_deref() == Some(w.arn(&a).as_str()))
            .count(),
        1,
        "{owned:?}"
    );

    // The other claim is there for another task.
    let (status, v) = w.claim(&b, 5).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    let other = w.marker(&b).await.unwrap();
    assert_ne!(other, granted);
}

/// Every refusal, with its status and message, and nothing taken: no identity, one too long,
/// unreadable, or signed for another service (401); a caller of another role, or of the task
/// role but not named like a task (403); a body that is not the route's JSON or a wait over 20
/// seconds (400); a body over the bound (413). The identity is checked before the body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_has_its_status_and_message() {
    let w = World::new(None).await;
    let a = w.task().await;
    let id = w.session().await;
    let good = identity(&a).await;
    // An identity is taken once: each case that passes the identity check has its own.
    let mut goods = Vec::new();
    for _ in 0..7 {
        goods.push(identity(&a).await);
    }
    let claim = r#"{"waitSeconds": 0}"#;
    let mut for_s3 = SignedIdentity::decode(&good).unwrap();
    for_s3.authorization = for_s3.authorization.replace("/sts/", "/s3/");
    let for_s3 = for_s3.encode();
    let api_role = format!("arn:aws:iam::{ACCOUNT}:role/{}", unique("wc-api"));
    let other_role = identity(&w.task_of(&api_role, &a.id).await).await;
    let not_a_task = identity(&w.task_of(&w.task_role, "not.a.task").await).await;
    let long = "A".repeat(MAX_IDENTITY_BYTES + 1);
    let cases: Vec<(Option<&str>, &str, &str, StatusCode, &str)> = vec![
        (
            None,
            CLAIMS_PATH,
            claim,
            StatusCode::UNAUTHORIZED,
            "x-wallcrawler-task-identity is required",
        ),
        (
            None,
            CREDENTIALS_PATH,
            "nope",
            StatusCode::UNAUTHORIZED,
            "x-wallcrawler-task-identity is required",
        ),
        (
            Some(&long),
            CLAIMS_PATH,
            claim,
            StatusCode::UNAUTHORIZED,
            "the task identity is longer than 8192 bytes",
        ),
        (
            Some("not base64!"),
            CLAIMS_PATH,
            claim,
            StatusCode::UNAUTHORIZED,
            "the task identity is not readable",
        ),
        (
            Some(&for_s3),
            CLAIMS_PATH,
            claim,
            StatusCode::UNAUTHORIZED,
            "the task identity is not a signature of this API's STS request",
        ),
        (
            Some(&other_role),
            CLAIMS_PATH,
            claim,
            StatusCode::FORBIDDEN,
            "the caller is not a task of this platform",
        ),
        (
            Some(&not_a_task),
            CREDENTIALS_PATH,
            "{}",
            StatusCode::FORBIDDEN,
            "the caller is not a task of this platform",
        ),
        (
            Some(&goods[0]),
            CLAIMS_PATH,
            r#"{"waitSeconds": 21}"#,
            StatusCode::BAD_REQUEST,
            "waitSeconds must be at most 20",
        ),
        (
            Some(&goods[1]),
            CLAIMS_PATH,
            "nope",
            StatusCode::BAD_REQUEST,
            r#"the body must be JSON {"waitSeconds": <0 to 20>}"#,
        ),
        (
            Some(&goods[2]),
            CLAIMS_PATH,
            r#"{"waitSeconds": 1, "sessionId": "x"}"#,
            StatusCode::BAD_REQUEST,
            r#"the body must be JSON {"waitSeconds": <0 to 20>}"#,
        ),
        (
            Some(&goods[3]),
            CREDENTIALS_PATH,
            "{}",
            StatusCode::BAD_REQUEST,
            r#"the body must be JSON {"sessionId": "<id>"}"#,
        ),
        (
            Some(&goods[4]),
            CREDENTIALS_PATH,
            r#"{"sessionId": "../x"}"#,
            StatusCode::FORBIDDEN,
            "this task does not serve that session",
        ),
    ];
    for (header, path, body, status, message) in cases {
        let (got, v) = call(&w.api, path, header, body).await;
        assert_eq!(
            (got, v["message"].as_str()),
            (status, Some(message)),
            "{path} {body} {v}"
        );
        assert!(
            !v.to_string().contains(&good[..40]),
            "no identity echoed: {v}"
        );
    }
    let big = format!(r#"{{"waitSeconds": 0, "x": "{}"}}"#, "x".repeat(2048));
    let (got, v) = call(&w.api, CLAIMS_PATH, Some(&goods[6]), &big).await;
    assert_eq!(got, StatusCode::PAYLOAD_TOO_LARGE, "{v}");
    assert_eq!(v["message"], "the body is larger than 1024 bytes");

    // Nothing was taken by any of them.
    assert_eq!(w.marker(&a).await, None);
    assert_eq!(text(&w.item(&id).await, "owner"), None);
    assert_eq!(w.queued().await, 1);
}

/// Each identity is taken once: the same one twice at once is one answer and one 401, and
/// a third time again 401; one signed over a minute ago (or dated as far ahead) is refused
/// before STS is asked. The remembered item is the signature's hash, kept in the tasks table
/// for its TTL, never the signature.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_is_taken_once_and_only_while_fresh() {
    use std::time::SystemTime;
    let w = World::new(None).await;
    let a = w.task().await;
    let once = identity(&a).await;
    let claim = r#"{"waitSeconds": 0}"#;
    let (first, second) = tokio::join!(
        call(&w.api, CLAIMS_PATH, Some(&once), claim),
        call(&w.api, CLAIMS_PATH, Some(&once), claim)
    );
    let mut statuses = [first.0, second.0];
    statuses.sort();
    assert_eq!(
        statuses,
        [StatusCode::NO_CONTENT, StatusCode::UNAUTHORIZED],
        "{first:?} {second:?}"
    );
    let refused = if first.0 == StatusCode::UNAUTHORIZED {
        first.1
    } else {
        second.1
    };
    let replayed = "the task identity was used before: each is taken once";
    assert_eq!(refused["message"], replayed);
    let (status, v) = call(
        &w.api,
        CREDENTIALS_PATH,
        Some(&once),
        r#"{"sessionId": "sess_x"}"#,
    )
    .await;
    assert_eq!(
        (status, v["message"].as_str()),
        (StatusCode::UNAUTHORIZED, Some(replayed))
    );

    // The remembered item: the hash of the signature, expiring with the identity's window.
    let items =
        w.f.dynamo()
            .scan()
            .table_name(&w.tasks_table)
            .send()
            .await
            .unwrap();
    let keys: Vec<_> = items
        .items()
        .iter()
        .filter_map(|i| i.get("taskId")?.as_s().ok().cloned())
        .collect();
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert!(
        keys[0].starts_with("identity#") && keys[0].len() == "identity#".len() + 64,
        "{keys:?}"
    );
    let signature = SignedIdentity::decode(&once).unwrap().authorization;
    let signature = signature.rsplit('=').next().unwrap();
    assert!(!keys[0].contains(signature));

    for (at, message) in [
        (
            SystemTime::now() - Duration::from_secs(62),
            "the task identity was signed more than 60 s ago",
        ),
        (
            SystemTime::now() + Duration::from_secs(62),
            "the task identity is dated more than 60 s ahead",
        ),
    ] {
        let id = sign_at(&a.sdk, at).await.unwrap().encode();
        let (status, v) = call(&w.api, CLAIMS_PATH, Some(&id), claim).await;
        assert_eq!(
            (status, v["message"].as_str()),
            (StatusCode::UNAUTHORIZED, Some(message))
        );
    }
    // A fresh one still passes: nothing above spent the task's standing.
    let (status, v) = call(&w.api, CLAIMS_PATH, Some(&identity(&a).await), claim).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{v}");
}

/// A broker no refused request may reach.
struct Unreachable;

#[async_trait::async_trait]
impl Broker for Unreachable {
    async fn claim(
        &self,
        _: &CallerTask,
        _: Duration,
    ) -> wallcrawler_control_plane::stores::StoreResult<ClaimOutcome> {
        panic!("a refused caller reached the broker")
    }
    async fn credentials(
        &self,
        _: &CallerTask,
        _: &str,
    ) -> wallcrawler_control_plane::stores::StoreResult<
        Option<wallcrawler_contract::task_api::CredentialsGrant>,
    > {
        panic!("a refused caller reached the broker")
    }
    async fn first_use(
        &self,
        _: &str,
        _: u64,
    ) -> wallcrawler_control_plane::stores::StoreResult<bool> {
        panic!("a refused caller reached the broker")
    }
}

/// With IAM enforced (only then does moto check signatures, as STS always does), an identity
/// whose signature STS refuses is answered 401, and a good one passes to the broker's side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_sts_refuses_is_answered_401() {
    let moto = tokio::task::spawn_blocking(Moto::start).await.unwrap();
    let role = format!("arn:aws:iam::{ACCOUNT}:role/wc-task");
    let task_id = "0123456789abcdef0123456789abcdef";
    let creds = assume_role(&moto, dummy_credentials(), &role, task_id).await;
    enforce_iam(&moto).await;
    let sdk = moto.sdk_config_as(dummy_credentials()).await;
    let api = task_api::router(TaskApi {
        identities: Arc::new(StsIdentities::new(&sdk).unwrap()),
        broker: Arc::new(Unreachable),
        task_role: TaskRole::from_arn(&role).unwrap(),
    });
    let mut id = sign(&moto.sdk_config_as(creds).await).await.unwrap();
    let last = id.authorization.pop().unwrap();
    id.authorization.push(if last == '0' { '1' } else { '0' });
    let (status, v) = call(
        &api,
        CLAIMS_PATH,
        Some(&id.encode()),
        r#"{"waitSeconds": 0}"#,
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{v}");
    assert_eq!(v["message"], "STS refused the task identity");
}

/// What the code under test logs, kept (a `tracing` writer).
#[derive(Clone, Default)]
struct Logs(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;
    fn make_writer(&'a self) -> Logs {
        self.clone()
    }
}

/// The task API's logs name the task and the session, never the identity (its signature or
/// token), the caller's ARN or the credentials it grants, at any level of ours.
#[tokio::test]
async fn the_logs_hold_task_and_session_ids_and_no_secret() {
    let logs = Logs::default();
    // A current-thread runtime: every task of this test logs through this default.
    let _guard = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(
                "wallcrawler_control_plane=trace,wallcrawler_aws=trace,info",
            ))
            .with_writer(logs.clone())
            .with_ansi(false)
            .finish(),
    );
    let w = World::new(None).await;
    let (a, b) = (w.task().await, w.task().await);
    let id = w.session().await;
    let header = identity(&a).await;
    let a_identity = SignedIdentity::decode(&header).unwrap();
    let body = json!({ "waitSeconds": 5 }).to_string();
    let (status, grant) = call(&w.api, CLAIMS_PATH, Some(&header), &body).await;
    assert_eq!(status, StatusCode::OK, "{grant}");
    let body = json!({ "sessionId": id }).to_string();
    // The same identity again (refused, and logged without it), then a fresh one.
    let (status, _) = call(&w.api, CREDENTIALS_PATH, Some(&header), &body).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let old = sign_at(
        &a.sdk,
        std::time::SystemTime::now() - Duration::from_secs(120),
    )
    .await
    .unwrap()
    .encode();
    let (status, _) = call(&w.api, CREDENTIALS_PATH, Some(&old), &body).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, fresh) = call(&w.api, CREDENTIALS_PATH, Some(&identity(&a).await), &body).await;
    assert_eq!(status, StatusCode::OK, "{fresh}");
    let (status, _) = w.credentials(&b, &id).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let api_role = format!("arn:aws:iam::{ACCOUNT}:role/{}", unique("wc-api"));
    let other = w.task_of(&api_role, &a.id).await;
    let (status, _) = w.claim(&other, 0).await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    for needle in [
        format!("task.id={}", a.id),
        format!("session.id={id}"),
        "claim granted".to_owned(),
        "session credentials granted".to_owned(),
        "credentials refused: not the task's session".to_owned(),
        "a caller that is not a task asked the task API".to_owned(),
        "a task identity was offered a second time".to_owned(),
        "a task identity was refused for its date".to_owned(),
    ] {
        assert!(text.contains(&needle), "no {needle:?} in the logs:\n{text}");
    }
    let signature = a_identity
        .authorization
        .rsplit('=')
        .next()
        .unwrap()
        .to_owned();
    let mut secrets = vec![
        header[..32].to_owned(),
        old[..32].to_owned(),
        signature,
        a_identity.security_token.clone(),
        "assumed-role".to_owned(),
    ];
    for g in [&grant, &fresh] {
        for k in ["accessKeyId", "secretAccessKey", "sessionToken"] {
            secrets.push(g["credentials"][k].as_str().unwrap().to_owned());
        }
    }
    for secret in secrets {
        assert!(!text.contains(&secret), "a secret in the logs:\n{text}");
    }
}

/// `wallcrawler-control-plane task-api` with `vars` (and moto's AWS environment), on a free
/// loopback port: the child and its base URL (from its `taskApi:` line), or its exit status
/// and log when it ends first.
async fn task_api_service(
    vars: &std::collections::HashMap<&'static str, String>,
) -> Result<(tokio::process::Child, String), (Option<i32>, String)> {
    use tokio::io::AsyncBufReadExt as _;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_wallcrawler-control-plane"))
        .arg("task-api")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("RUST_LOG", "info")
        .env("LOG_FORMAT", "json")
        .envs(wallcrawler_testkit::platform::aws_env())
        .envs(vars.iter().map(|(k, v)| (*k, v.as_str())))
        .env("TASK_API_LISTEN", "127.0.0.1:0")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start wallcrawler-control-plane task-api");
    let mut out = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(60), out.next_line())
        .await
        .expect("the task API answered in time")
        .unwrap();
    match line.as_deref().and_then(|l| l.strip_prefix("taskApi: ")) {
        Some(base) => Ok((child, base.to_owned())),
        None => {
            let done = child.wait_with_output().await.unwrap();
            let log = String::from_utf8_lossy(&done.stderr).into_owned();
            Err((done.status.code(), log))
        }
    }
}

/// The task API service as the stack runs it in gateway mode (the binary, configured by the
/// API function's environment with the task API's variables): its health, a claim served to
/// a task through SQS, DynamoDB and STS (moto) with the identity checked, nothing of the
/// customer API, and a clean end on SIGTERM. Without the task API's variables it refuses to
/// start, naming them.
#[tokio::test]
async fn the_task_api_service_serves_a_tasks_claim_and_nothing_else() {
    use wallcrawler_testkit::platform::http;
    let w = World::new(None).await;
    let (mut child, base) = task_api_service(&w.f.vars).await.expect("it starts");
    assert_eq!(
        http("GET", &format!("{base}/health"), &[], vec![]).await,
        (StatusCode::OK, "ok".to_owned())
    );
    let id = w.session().await;
    let task = w.task().await;
    let identity = identity(&task).await;
    let headers = [
        (IDENTITY_HEADER, identity.as_str()),
        ("content-type", "application/json"),
    ];
    let body = json!({"waitSeconds": 10}).to_string().into_bytes();
    let (status, grant) = http("POST", &format!("{base}{CLAIMS_PATH}"), &headers, body).await;
    assert_eq!(status, StatusCode::OK, "{grant}");
    let grant: Value = serde_json::from_str(&grant).unwrap();
    let claim: Value = serde_json::from_str(grant["claim"].as_str().unwrap()).unwrap();
    assert_eq!(claim["sessionId"], id.as_str(), "{grant}");
    assert_eq!(w.marker(&task).await.as_deref(), Some(id.as_str()));
    // No identity: the task API's own refusal; the customer API is not here.
    let (status, body) = http("POST", &format!("{base}{CLAIMS_PATH}"), &[], vec![]).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    let (status, body) = http("POST", &format!("{base}/v1/sessions"), &[], vec![]).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    // SIGTERM: it ends, with status 0.
    let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("it ends on SIGTERM")
        .unwrap();
    assert!(status.success(), "{status:?}");

    let mut without = w.f.vars.clone();
    for name in ["TASKS_TABLE_NAME", "SESSION_ROLE_ARN", "TASK_ROLE_ARN"] {
        without.remove(name);
    }
    let Err((code, log)) = task_api_service(&without).await else {
        panic!("started without the task API's variables");
    };
    assert_eq!(code, Some(64), "{log}");
    assert!(
        log.contains(
            "the task API needs TASKS_TABLE_NAME, SESSION_ROLE_ARN, TASK_ROLE_ARN and POOL_QUEUE_URL"
        ),
        "{log}"
    );
}
