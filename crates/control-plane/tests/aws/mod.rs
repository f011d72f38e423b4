//! The control plane on AWS, against moto — a local AWS speaking the real wire protocol to the
//! real SDK: the API through the one router over DynamoDB, ECS, S3 and Secrets Manager, with
//! the test playing the controller (it writes READY as a task would); the DynamoDB stores'
//! conditional writes against the in-memory reference; the ECS task-state handler; presigned
//! uploads; and the `admin` commands and Lambda binaries of the real binaries. The fixture is
//! `wallcrawler_testkit::platform` (the root package's pool and stack tests use it too).
//!
//! One moto server per test binary (started on first use, on a free port, ended with the test
//! binary); every test uses its own tables, bucket, secret and cluster, so they run in parallel.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use axum::body::Bytes;
use axum::http::{Method, StatusCode};
use serde_json::{Value, json};
use wallcrawler_contract::session_doc::SessionDoc;
use wallcrawler_contract::token::{self, Validation};
use wallcrawler_contract::{InternalStatus, SdkStatus};
use wallcrawler_control_plane::aws::lambda::{Authorizer, TaskEventOutcome, authorize_request};
use wallcrawler_control_plane::aws::{
    Config, DynamoKeys, DynamoProjects, DynamoSessions, build_app,
};
use wallcrawler_control_plane::memory::MemSessions;
use wallcrawler_control_plane::model::hash_api_key;
use wallcrawler_control_plane::router::router;
use wallcrawler_control_plane::rules;
use wallcrawler_control_plane::stores::{
    Cond, ContextStore, Lease, PageAt, SessionStore, Terminal,
};
use wallcrawler_testkit::platform::{
    Fixture, PUBLIC_IP, SIGNING_KEY, WAIT, authorizer_event, aws_env, call_with_key, get_item,
    http, policy, refused, s, s3, sdk, stopped_event, task_env, text,
};
use wallcrawler_testkit::tables;

/// `POST /v1/contexts` with `key`; asserts 201; the context's id.
async fn new_context(f: &Fixture, key: &str) -> String {
    let (status, c) = call_with_key(
        &f.router,
        key,
        Method::POST,
        "/v1/contexts",
        Some(json!({})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{c}");
    c["id"].as_str().unwrap().to_owned()
}

/// The bytes of the object at `key` in the fixture's contexts bucket, if there is one.
async fn object(f: &Fixture, key: &str) -> Option<Vec<u8>> {
    let out = s3(&f.sdk)
        .get_object()
        .bucket(&f.cfg.contexts_bucket)
        .key(key)
        .send()
        .await
        .ok()?;
    Some(out.body.collect().await.unwrap().into_bytes().to_vec())
}

/// Limits that scale: slot writes of a constant size, the limit exact at the boundary.
mod scale;

/// Extension archives in the contexts bucket: under the project's prefix, removed by a delete.
mod extensions;

/// A task's identity for the task API, against moto's STS with IAM enforced.
mod identity;

/// The task API: claims handed to one task with credentials for its session, judged as a pool
/// controller judges them; every refusal.
mod task_api;

/// A session's recording in the contexts bucket: presigned segment URLs, no MP4 built by the
/// API's Lambda.
mod recordings;
/// Session uploads in the contexts bucket: under the session's prefix, the answer's path in
/// `uploadsDir`.
mod uploads;

/// A create body asking for context `id`, persisting or not (`None`: no `persist` field).
fn with_context(id: &str, persist: Option<bool>) -> Value {
    let mut context = json!({ "id": id });
    if let Some(p) = persist {
        context["persist"] = json!(p);
    }
    json!({ "browserSettings": { "context": context } })
}

// ---------------------------------------------------------------------------------------------
// (a) create → RunTask → the controller's READY → 201 RUNNING

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_starts_an_ecs_task_and_answers_running_once_the_controller_is_ready() {
    let f = Fixture::new(20).await;
    let v = f
        .running_session(json!({"keepAlive": true, "userMetadata": {"run": "a", "n": 1}}))
        .await;
    let id = v["id"].as_str().unwrap();
    assert!(id.starts_with("sess_"));
    assert_eq!(v["status"], "RUNNING", "{v}");
    assert_eq!(v["projectId"], f.project_id.as_str());
    assert_eq!(v["keepAlive"], true);
    assert_eq!(v["publicIp"], PUBLIC_IP);
    let token = v["signingKey"].as_str().unwrap();
    assert_eq!(
        v["connectUrl"],
        format!("ws://{PUBLIC_IP}:9223/?signingKey={token}")
    );
    // Signed with the signing secret's private key, verified with only the public key (all a
    // task holds), for this session and project.
    let verified = token::validate(
        token,
        &[wallcrawler_testkit::keys::public_key(SIGNING_KEY)],
        &Validation {
            session_id: id,
            project_id: Some(&f.project_id),
            leeway_seconds: 30,
            now: wallcrawler_contract::time::unix_millis() / 1000,
        },
    )
    .expect("the token verifies with the secret's key");
    assert_eq!(verified.session_id, id);

    // The item: the schema's names and types.
    let item = f.item(id).await;
    assert_eq!(text(&item, "internalStatus").as_deref(), Some("READY"));
    assert!(item["createdAt"].is_s() && item["startedAt"].is_s() && item["updatedAt"].is_s());
    assert!(item["expiresAt"].is_n(), "expiresAt is a number");
    assert_eq!(item["keepAlive"], AttributeValue::Bool(true));
    let meta = item["userMetadata"].as_m().expect("userMetadata is a map");
    assert_eq!(meta["run"], s("a"));
    assert_eq!(meta["n"], AttributeValue::N("1".into()));
    let arn = text(&item, "ecsTaskArn").expect("the task ARN is recorded");

    // The task: FARGATE, startedBy the session, the controller's environment.
    let task = f.task(&arn).await;
    assert_eq!(task.started_by(), Some(id));
    assert_eq!(
        task.launch_type(),
        Some(&aws_sdk_ecs::types::LaunchType::Fargate)
    );
    let env = task_env(&task);
    assert_eq!(env["SESSION_ID"], id);
    assert_eq!(env["PROJECT_ID"], f.project_id);
    assert_eq!(env["SESSIONS_TABLE_NAME"], f.cfg.tables.sessions);
    assert_eq!(env["CDP_PROXY_PORT"], "9223");
    // The task is handed the public key secret, never the signing (private) one.
    assert_eq!(
        env["WALLCRAWLER_JWT_PUBLIC_KEY_SECRET_ARN"],
        f.cfg.public_key_secret_arn
    );
    assert!(
        !env.values().any(|v| v == &f.cfg.signing_secret_arn),
        "the signing secret reaches no task"
    );
    assert!(
        !env.contains_key("CONTEXT_ID"),
        "no context, no context variables"
    );

    // Listed through the project GSI, readable by id.
    let (status, list) = f.call(Method::GET, "/v1/sessions", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["id"], id);
    let (status, got) = f
        .call(Method::GET, &format!("/v1/sessions/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(got["connectUrl"], v["connectUrl"]);
}

// ---------------------------------------------------------------------------------------------
// (b) no READY within CREATE_WAIT_SECONDS → PENDING, task left starting

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_answers_pending_when_ready_does_not_come_in_time() {
    let f = Fixture::new(2).await;
    let started = Instant::now();
    let (status, v) = f.create(json!({})).await;
    let took = started.elapsed();
    assert_eq!(status, StatusCode::CREATED, "{v}");
    assert_eq!(v["status"], "PENDING");
    assert!(
        v.get("connectUrl").is_none() && v.get("signingKey").is_none(),
        "{v}"
    );
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(8),
        "waited {took:?}"
    );
    let id = v["id"].as_str().unwrap();
    let item = f.item(id).await;
    assert_eq!(
        text(&item, "internalStatus").as_deref(),
        Some("PROVISIONING")
    );
    assert_eq!(text(&item, "status").as_deref(), Some("PENDING"));
    let arn = text(&item, "ecsTaskArn").expect("the task ARN is recorded");
    assert_eq!(task_env(&f.task(&arn).await)["SESSION_ID"], id);
    let (_, got) = f
        .call(Method::GET, &format!("/v1/sessions/{id}"), None)
        .await;
    assert_eq!(got["status"], "PENDING");
}

// ---------------------------------------------------------------------------------------------
// /debug: the live view's URLs, their credentials signed with the signing secret's key

/// `/debug` of a running session: the page list read (from a loopback stand-in for its proxy,
/// with the session's token), and viewer URLs on the connect host whose credentials the
/// signing secret's key signed (the public key verifies them), for the viewer's audience only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_answers_viewer_urls_signed_with_the_signing_secret() {
    let f = Fixture::new(20).await;
    let v = f.running_session(json!({})).await;
    let id = v["id"].as_str().unwrap();
    let token = v["signingKey"].as_str().unwrap();
    let (port, seen) = crate::support::stand_in_proxy(token).await;
    let connect = format!("ws://127.0.0.1:{port}/?signingKey={token}");
    f.dynamo()
        .update_item()
        .table_name(&f.cfg.tables.sessions)
        .key("sessionId", s(id))
        .update_expression("SET connectUrl = :u")
        .expression_attribute_values(":u", s(&connect))
        .send()
        .await
        .unwrap();
    let (status, body) = f
        .call(
            Method::GET,
            &format!("/v1/sessions/{id}/debug?mode=view&expiresIn=120"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(seen.lock().unwrap().len(), 1);
    assert_eq!(body["wsUrl"], connect.as_str());
    let url = body["debuggerFullscreenUrl"].as_str().unwrap();
    let prefix = format!("http://127.0.0.1:{port}/viewer?t=");
    let credential = url
        .strip_prefix(&prefix)
        .and_then(|t| t.strip_suffix("&fullscreen=1"))
        .unwrap_or_else(|| panic!("{url}"));
    let now = wallcrawler_contract::time::unix_millis() / 1000;
    let keys = [wallcrawler_testkit::keys::public_key(SIGNING_KEY)];
    let check = Validation {
        session_id: id,
        project_id: Some(&f.project_id),
        leeway_seconds: 30,
        now,
    };
    let verified = wallcrawler_contract::viewer::validate(credential, &keys, &check)
        .expect("the viewer credential verifies with the secret's public key");
    assert_eq!(verified.mode, wallcrawler_contract::viewer::Mode::View);
    assert!(verified.exp <= (now + 120) as f64 && verified.exp + 30.0 > (now + 120) as f64);
    assert_eq!(
        token::validate(credential, &keys, &check),
        Err(wallcrawler_contract::TokenError::Audience),
        "a viewer credential opens no CDP connection"
    );
    let page = &body["pages"][0];
    assert_eq!(page["id"], crate::support::PAGE_ID);
    assert!(
        page["debuggerUrl"]
            .as_str()
            .unwrap()
            .ends_with(&format!("&page={}", crate::support::PAGE_ID)),
        "{page}"
    );
}

// ---------------------------------------------------------------------------------------------
// (c) release → StopTask and STOPPED/COMPLETED

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_stops_the_task_and_marks_the_session_completed() {
    let f = Fixture::new(20).await;
    let v = f.running_session(json!({})).await;
    let id = v["id"].as_str().unwrap();
    let arn = text(&f.item(id).await, "ecsTaskArn").unwrap();

    let (status, r) = f.release(id).await;
    assert_eq!(status, StatusCode::OK, "{r}");
    assert_eq!(r["status"], "COMPLETED");

    let item = f.item(id).await;
    assert_eq!(text(&item, "internalStatus").as_deref(), Some("STOPPED"));
    assert_eq!(text(&item, "status").as_deref(), Some("COMPLETED"));
    assert!(
        !item.contains_key("endedAt"),
        "endedAt is the controller's to write, after its upload"
    );
    let task = f.task(&arn).await;
    assert_eq!(task.desired_status(), Some("STOPPED"));
    assert_eq!(task.last_status(), Some("STOPPED"));
    assert_eq!(task.stopped_reason(), Some("released by API"));

    // Releasing again keeps the status and still answers.
    let (status, again) = f.release(id).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["status"], "COMPLETED");
}

// ---------------------------------------------------------------------------------------------
// (d) the ECS task-state handler

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_task_fails_its_live_session_and_ends_a_released_one() {
    let f = Fixture::new(1).await;
    // A session whose task died while starting (PENDING answer, task PROVISIONING).
    let (_, live) = f.create(json!({})).await;
    let live = live["id"].as_str().unwrap().to_owned();
    let live_arn = text(&f.item(&live).await, "ecsTaskArn").unwrap();
    // A released session whose controller never wrote endedAt.
    let (_, released) = f.create(json!({})).await;
    let released = released["id"].as_str().unwrap().to_owned();
    let (status, _) = f.release(&released).await;
    assert_eq!(status, StatusCode::OK);

    let at = wallcrawler_contract::time::now_iso8601();
    let outcome = f
        .task_stopped(&stopped_event(&live_arn, Some(&live), None), &at)
        .await;
    assert_eq!(outcome, TaskEventOutcome::Failed(live.clone()));
    let item = f.item(&live).await;
    assert_eq!(text(&item, "internalStatus").as_deref(), Some("FAILED"));
    assert_eq!(text(&item, "status").as_deref(), Some("ERROR"));
    assert_eq!(text(&item, "endedAt").as_deref(), Some(at.as_str()));
    assert!(
        text(&item, "terminationReason")
            .unwrap()
            .contains("Essential container in task exited")
    );

    // Found through the SESSION_ID override when startedBy is not a session id.
    let outcome = f
        .task_stopped(
            &stopped_event("arn:task/x", Some("ecs-svc/1"), Some(&released)),
            &at,
        )
        .await;
    assert_eq!(outcome, TaskEventOutcome::Ended(released.clone()));
    let item = f.item(&released).await;
    assert_eq!(text(&item, "internalStatus").as_deref(), Some("STOPPED"));
    assert_eq!(text(&item, "status").as_deref(), Some("COMPLETED"));
    assert_eq!(text(&item, "endedAt").as_deref(), Some(at.as_str()));
    assert!(!item.contains_key("terminationReason"));

    // A second delivery of the same event changes nothing.
    let later = "2099-01-01T00:00:00.000Z";
    let outcome = f
        .task_stopped(&stopped_event(&live_arn, Some(&live), None), later)
        .await;
    assert_eq!(outcome, TaskEventOutcome::AlreadyEnded(live.clone()));
    assert_eq!(
        text(&f.item(&live).await, "endedAt").as_deref(),
        Some(at.as_str())
    );
    let outcome = f
        .task_stopped(
            &stopped_event("arn:task/y", Some("sess_unknown"), None),
            later,
        )
        .await;
    assert_eq!(
        outcome,
        TaskEventOutcome::UnknownSession("sess_unknown".into())
    );
}

// ---------------------------------------------------------------------------------------------
// (e) contexts: presigned upload into the bucket; the context's sessions

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_upload_url_takes_a_put_into_the_bucket_and_sessions_get_the_context() {
    let f = Fixture::new(1).await;
    let (status, c) = f.call(Method::POST, "/v1/contexts", Some(json!({}))).await;
    assert_eq!(status, StatusCode::CREATED, "{c}");
    let ctx = c["id"].as_str().unwrap().to_owned();
    let url = c["uploadUrl"].as_str().unwrap();
    assert!(url.contains("X-Amz-Signature="), "a presigned URL: {url}");
    let archive = b"\x1f\x8b not really a tarball, but bytes all the same".to_vec();
    let (status, answer) = http("PUT", url, &[], archive.clone()).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let key = format!("{}/{ctx}/profile.tar.gz", f.project_id);
    assert_eq!(
        object(&f, &key).await.as_deref(),
        Some(&archive[..]),
        "the archive is in the bucket at <projectId>/<contextId>/profile.tar.gz"
    );
    // A fresh URL for the same key.
    let (status, again) = f
        .call(Method::PUT, &format!("/v1/contexts/{ctx}"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert!(again["uploadUrl"].as_str().unwrap().contains(&key));

    // A session on the context: the task gets the context's variables; the context cannot be
    // deleted while the session has no endedAt (found through the contextId index), and can
    // once it has.
    let (status, v) = f.create(with_context(&ctx, Some(true))).await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    let item = f.item(&id).await;
    assert_eq!(text(&item, "contextId").as_deref(), Some(ctx.as_str()));
    assert_eq!(item["contextPersist"], AttributeValue::Bool(true));
    assert_eq!(
        text(&item, "contextStorageKey").as_deref(),
        Some(key.as_str())
    );
    let arn = text(&item, "ecsTaskArn").unwrap();
    let env = task_env(&f.task(&arn).await);
    assert_eq!(env["CONTEXT_ID"], ctx);
    assert_eq!(env["CONTEXT_S3_KEY"], key);
    assert_eq!(env["CONTEXTS_BUCKET_NAME"], f.cfg.contexts_bucket);
    assert_eq!(env["CONTEXT_PERSIST"], "true");

    let (status, busy) = f
        .call(Method::DELETE, &format!("/v1/contexts/{ctx}"), None)
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{busy}");
    let (sessions, _, _) = f.stores();
    assert_eq!(
        sessions.on_context(&ctx).await.unwrap(),
        std::slice::from_ref(&id)
    );
    let at = wallcrawler_contract::time::now_iso8601();
    f.task_stopped(&stopped_event(&arn, Some(&id), None), &at)
        .await;
    let (status, _) = f
        .call(Method::DELETE, &format!("/v1/contexts/{ctx}"), None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert!(
        s3(&f.sdk)
            .get_object()
            .bucket(&f.cfg.contexts_bucket)
            .key(&key)
            .send()
            .await
            .is_err(),
        "the archive is deleted with the context"
    );
    let (status, _) = f
        .call(Method::GET, &format!("/v1/contexts/{ctx}"), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// `DELETE /v1/contexts/{id}` finds the context's sessions through the sparse `contextId-index`
/// (no Scan): the index leaves out ended sessions, a live one refuses 409; and a persisting
/// create that has taken the writer lease but not written its item yet (so no listing can show
/// it) keeps its context, because the record's deletion is conditional on the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_context_finds_live_sessions_by_its_index_and_spares_a_writer_in_flight() {
    let f = Fixture::new(1).await;
    let (sessions, _, contexts) = f.stores();
    let ctx = new_context(&f, &f.api_key).await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let (status, v) = f.create(with_context(&ctx, Some(false))).await;
        assert_eq!(status, StatusCode::CREATED, "{v}");
        ids.push(v["id"].as_str().unwrap().to_owned());
    }
    let (ended, live) = (&ids[0], &ids[1]);
    let at = wallcrawler_contract::time::now_iso8601();
    let stop = Terminal {
        status: InternalStatus::Stopped,
        reason: None,
        ended: true,
    };
    sessions.mark_terminal(ended, stop, &at).await.unwrap();
    assert_eq!(
        sessions.on_context(&ctx).await.unwrap(),
        std::slice::from_ref(live)
    );
    let path = format!("/v1/contexts/{ctx}");
    let (status, busy) = f.call(Method::DELETE, &path, None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{busy}");
    assert!(busy["message"].as_str().unwrap().contains(live), "{busy}");
    sessions.mark_terminal(live, stop, &at).await.unwrap();
    assert!(sessions.on_context(&ctx).await.unwrap().is_empty());

    // A persisting create between its lease and its item.
    let writer = wallcrawler_control_plane::limits::new_session_id();
    let lease = contexts.take_writer(&ctx, &writer, None).await.unwrap();
    assert_eq!(lease, Lease::Taken);
    let (status, busy) = f.call(Method::DELETE, &path, None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{busy}");
    assert!(
        busy["message"].as_str().unwrap().contains(&writer),
        "{busy}"
    );
    assert_eq!(f.writer(&ctx).await.as_deref(), Some(writer.as_str()));
    // Its session ends (endedAt): the lease no longer holds the context.
    let mut doc = SessionDoc {
        session_id: writer.clone(),
        project_id: f.project_id.clone(),
        created_at: at.clone(),
        context_id: Some(ctx.clone()),
        context_persist: Some(true),
        ended_at: Some(at.clone()),
        ..Default::default()
    };
    doc.set_status(InternalStatus::Stopped);
    sessions.create(doc).await.unwrap();
    let (status, gone) = f.call(Method::DELETE, &path, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{gone}");
    let (status, _) = f.call(Method::GET, &path, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// Pool mode with a project share of 1: the project's first session is a claim on the pool's
/// queue (no task started for it); its second, beyond the share, is a task of its own —
/// `RunTask` of the pool's task definition in single-session mode (`SESSION_ID` set,
/// `POOL_QUEUE_URL` and, without a context, `CONTEXTS_BUCKET_NAME` overridden empty), its ARN on
/// the item, stopped by its release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_pool_mode_a_session_beyond_its_projects_share_gets_a_task_of_its_own() {
    let sqs = aws_sdk_sqs::Client::new(&sdk().await);
    let queue = sqs
        .create_queue()
        .queue_name(wallcrawler_testkit::unique("pool"))
        .send()
        .await
        .unwrap()
        .queue_url()
        .unwrap()
        .to_owned();
    let env = vec![
        ("POOL_QUEUE_URL", queue.clone()),
        ("POOL_PROJECT_SHARE", "1".to_owned()),
    ];
    let f = Fixture::with_env(1, env).await;
    let (status, warm) = f.create(json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{warm}");
    let warm_id = warm["id"].as_str().unwrap();
    assert_eq!(text(&f.item(warm_id).await, "ecsTaskArn"), None, "a claim");
    let claims = || async {
        let out = sqs
            .receive_message()
            .queue_url(&queue)
            .max_number_of_messages(10)
            .visibility_timeout(0)
            .send()
            .await
            .unwrap();
        out.messages()
            .iter()
            .map(|m| m.body().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    let sent = claims().await;
    assert!(sent.len() == 1 && sent[0].contains(warm_id), "{sent:?}");

    let (status, cold) = f.create(json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{cold}");
    let cold_id = cold["id"].as_str().unwrap();
    let arn = text(&f.item(cold_id).await, "ecsTaskArn").expect("its own task's ARN");
    let task = f.task(&arn).await;
    assert_eq!(task.started_by(), Some(cold_id));
    let env = task_env(&task);
    assert_eq!(env["SESSION_ID"], cold_id);
    assert_eq!(env["POOL_QUEUE_URL"], "", "single-session mode");
    assert_eq!(env["CONTEXTS_BUCKET_NAME"], "", "no context");
    let sent = claims().await;
    assert!(sent.iter().all(|c| !c.contains(cold_id)), "{sent:?}");
    let (status, v) = f.release(cold_id).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(f.task(&arn).await.desired_status(), Some("STOPPED"));
}

// ---------------------------------------------------------------------------------------------
// (f) limits under simultaneous creates: the concurrency cap and one writer per context

/// The statuses of simultaneous creates, and the ids of the created sessions (sorted).
async fn simultaneous_creates(
    f: &Fixture,
    key: &str,
    n: usize,
    body: Value,
) -> (Vec<(StatusCode, Value)>, Vec<String>) {
    let answers =
        futures_util::future::join_all((0..n).map(|_| f.create_as(key, body.clone()))).await;
    let mut ids: Vec<String> = answers
        .iter()
        .filter(|(st, _)| *st == StatusCode::CREATED)
        .map(|(_, v)| v["id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    (answers, ids)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simultaneous_creates_never_exceed_the_projects_concurrency() {
    let f = Fixture::new(1).await;
    let (project, key) = f.project_with_key(2).await;
    let (answers, ids) = simultaneous_creates(&f, &key, 12, json!({})).await;
    assert_eq!(ids.len(), 2, "{answers:?}");
    for (status, v) in refused(&answers) {
        assert_eq!(*status, StatusCode::TOO_MANY_REQUESTS, "{v}");
        let message = v["message"].as_str().unwrap();
        assert!(
            message.contains(&project) && message.contains("concurrency"),
            "{message}"
        );
    }
    assert_eq!(f.held(&project).await, ids);
    // Exactly two items, two tasks.
    let listed = DynamoSessions::new(f.dynamo(), &f.cfg.tables.sessions)
        .list_project(
            &project,
            PageAt {
                after: None,
                limit: 10,
            },
        )
        .await
        .unwrap();
    assert_eq!(listed.sessions.len(), 2);

    // Release gives a slot back; a session that ended by itself (the controller writes the
    // sessions table only) is reclaimed by the next create that finds the project full.
    let (status, _) = f.release_as(&key, &ids[0]).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(f.held(&project).await, [ids[1].clone()]);
    let (status, third) = f.create_as(&key, json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{third}");
    f.dynamo()
        .update_item()
        .table_name(&f.cfg.tables.sessions)
        .key("sessionId", s(&ids[1]))
        .update_expression("SET internalStatus = :st, #st = :sdk, endedAt = :at")
        .expression_attribute_names("#st", "status")
        .expression_attribute_values(":st", s("STOPPED"))
        .expression_attribute_values(":sdk", s("COMPLETED"))
        .expression_attribute_values(":at", s(&wallcrawler_contract::time::now_iso8601()))
        .send()
        .await
        .unwrap();
    let (status, fourth) = f.create_as(&key, json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{fourth}");
    let mut want = vec![
        third["id"].as_str().unwrap().to_owned(),
        fourth["id"].as_str().unwrap().to_owned(),
    ];
    want.sort();
    assert_eq!(f.held(&project).await, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simultaneous_persisting_creates_on_one_context_get_one_writer() {
    let f = Fixture::new(1).await;
    let (project, key) = f.project_with_key(10).await;
    let ctx = new_context(&f, &key).await;
    let persist = with_context(&ctx, Some(true));
    let (answers, ids) = simultaneous_creates(&f, &key, 6, persist.clone()).await;
    assert_eq!(ids.len(), 1, "{answers:?}");
    let writer = ids[0].clone();
    for (status, v) in refused(&answers) {
        assert_eq!(*status, StatusCode::CONFLICT, "{v}");
        assert!(
            v["message"]
                .as_str()
                .unwrap()
                .contains(&format!("context {ctx} is in use by session {writer}")),
            "{v}"
        );
    }
    assert_eq!(f.writer(&ctx).await.as_deref(), Some(writer.as_str()));
    assert_eq!(
        f.held(&project).await,
        std::slice::from_ref(&writer),
        "the losers gave their slots back"
    );
    // A reader waits for the writer too.
    let (status, v) = f.create_as(&key, with_context(&ctx, None)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{v}");

    // The writer's task stops behind its back: the task-state handler gives back its slot and
    // its lease, and the next persisting create becomes the writer.
    let (sessions, _, _) = f.stores();
    let arn = text(&f.item(&writer).await, "ecsTaskArn").unwrap();
    let at = wallcrawler_contract::time::now_iso8601();
    let outcome = f
        .task_stopped(&stopped_event(&arn, Some(&writer), None), &at)
        .await;
    assert_eq!(outcome, TaskEventOutcome::Failed(writer.clone()));
    assert_eq!(f.held(&project).await, Vec::<String>::new());
    assert_eq!(f.writer(&ctx).await, None);
    let (status, next) = f.create_as(&key, persist.clone()).await;
    assert_eq!(status, StatusCode::CREATED, "{next}");
    let next = next["id"].as_str().unwrap().to_owned();
    assert_eq!(f.writer(&ctx).await.as_deref(), Some(next.as_str()));

    // Released, it keeps the lease until its controller has written endedAt (after saving);
    // then the next writer takes it over.
    let (status, _) = f.release_as(&key, &next).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(f.held(&project).await, Vec::<String>::new());
    assert_eq!(f.writer(&ctx).await.as_deref(), Some(next.as_str()));
    sessions
        .mark_ended_if_missing(&next, &wallcrawler_contract::time::now_iso8601())
        .await
        .unwrap();
    let (status, last) = f.create_as(&key, persist).await;
    assert_eq!(status, StatusCode::CREATED, "{last}");
    assert_eq!(f.writer(&ctx).await.as_deref(), last["id"].as_str());
}

// ---------------------------------------------------------------------------------------------
// (g) claims with a deadline, and the sweeper

/// Sets number attribute `name` of session `id` (the test moves time along for one session).
async fn set_number(f: &Fixture, id: &str, name: &str, v: u64) {
    f.dynamo()
        .update_item()
        .table_name(&f.cfg.tables.sessions)
        .key("sessionId", s(id))
        .update_expression("SET #n = :v")
        .expression_attribute_names("#n", name)
        .expression_attribute_values(":v", AttributeValue::N(v.to_string()))
        .send()
        .await
        .unwrap();
}

/// A number attribute of session `id`.
async fn number(f: &Fixture, id: &str, name: &str) -> Option<u64> {
    f.item(id)
        .await
        .get(name)
        .map(|v| v.as_n().unwrap().parse().unwrap())
}

fn now_secs() -> u64 {
    wallcrawler_contract::time::unix_millis() / 1000
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_polls_move_its_claims_deadline_until_ready_and_never_past_the_cap() {
    let f = Fixture::with_env(1, vec![("CLAIM_WAIT_SECONDS", "30".into())]).await;
    let (status, v) = f.create(json!({})).await;
    assert_eq!(
        (status, v["status"].as_str()),
        (StatusCode::CREATED, Some("PENDING"))
    );
    let id = v["id"].as_str().unwrap().to_owned();
    let created =
        wallcrawler_contract::time::parse_iso8601(&text(&f.item(&id).await, "createdAt").unwrap())
            .unwrap()
            / 1000;
    assert_eq!(number(&f, &id, "claimDeadline").await, Some(created + 30));
    let get = format!("/v1/sessions/{id}");
    // An earlier deadline (the poll comes later than the create): moved to now + 30 s.
    set_number(&f, &id, "claimDeadline", created + 1).await;
    let before = now_secs();
    let (status, _) = f.call(Method::GET, &get, None).await;
    assert_eq!(status, StatusCode::OK);
    let moved = number(&f, &id, "claimDeadline").await.unwrap();
    assert!((before + 30..=now_secs() + 30).contains(&moved), "{moved}");
    // Never past createdAt + CLAIM_WAIT_MAX_SECONDS (600).
    set_number(&f, &id, "claimDeadline", created + 600).await;
    f.call(Method::GET, &get, None).await;
    assert_eq!(number(&f, &id, "claimDeadline").await, Some(created + 600));
    // Once READY, never.
    set_number(&f, &id, "claimDeadline", created + 1).await;
    let (sessions, _, _) = f.stores();
    let ready = f.play_controller();
    assert_eq!(ready.await.unwrap(), id);
    f.call(Method::GET, &get, None).await;
    assert_eq!(number(&f, &id, "claimDeadline").await, Some(created + 1));
    // And a READY session is never ended as unserved, deadline or not.
    let r = sessions
        .end_unserved(&id, now_secs(), "2026-01-01T00:00:00.000Z")
        .await;
    assert!(matches!(r.unwrap(), Cond::Failed(Some(_))));
    assert_eq!(
        text(&f.item(&id).await, "internalStatus").as_deref(),
        Some("READY")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweeper_ends_stranded_sessions_and_frees_their_slot_and_lease() {
    use wallcrawler_control_plane::sweep::{EXPIRED_REASON, PAGE_LIMIT, sweep};
    let f = Fixture::new(1).await;
    let app = build_app(&f.sdk, &f.cfg);
    // A READY session, and one whose task vanished long past its expiry (made READY by the
    // test's controller first: it takes any PROVISIONING session).
    let live = f.running_session(json!({})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let gone = f.running_session(json!({})).await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let gone_arn = text(&f.item(&gone).await, "ecsTaskArn").unwrap();
    set_number(&f, &gone, "expiresAt", now_secs() - 3600).await;

    // A project limited to one session, whose one session persists a context and is stranded:
    // its task never comes up (PENDING), and its claim's deadline passes.
    let (project, key) = f.project_with_key(1).await;
    let ctx = new_context(&f, &key).await;
    let (status, v) = f.create_as(&key, with_context(&ctx, Some(true))).await;
    assert_eq!(
        (status, v["status"].as_str()),
        (StatusCode::CREATED, Some("PENDING")),
        "{v}"
    );
    let stranded = v["id"].as_str().unwrap().to_owned();
    let stranded_arn = text(&f.item(&stranded).await, "ecsTaskArn").unwrap();
    let (status, full) = f.create_as(&key, json!({})).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{full}");
    assert_eq!(f.writer(&ctx).await.as_deref(), Some(stranded.as_str()));
    // Before the deadline: nothing to do.
    assert_eq!(
        sweep(&app, PAGE_LIMIT).await.unwrap().ended,
        1,
        "only the expired one"
    );
    assert_eq!(
        text(&f.item(&stranded).await, "status").as_deref(),
        Some("PENDING")
    );
    set_number(&f, &stranded, "claimDeadline", now_secs() - 1).await;
    let swept = sweep(&app, PAGE_LIMIT).await.unwrap();
    assert_eq!(
        (swept.ended, swept.unserved, swept.failed),
        (1, 1, 0),
        "{swept:?}"
    );

    let item = f.item(&stranded).await;
    assert_eq!(text(&item, "internalStatus").as_deref(), Some("TIMED_OUT"));
    assert_eq!(text(&item, "status").as_deref(), Some("TIMED_OUT"));
    assert_eq!(
        text(&item, "terminationReason").as_deref(),
        Some("no browser was available in time")
    );
    assert!(item.contains_key("endedAt"));
    assert_eq!(
        f.task(&stranded_arn).await.desired_status(),
        Some("STOPPED")
    );
    // Its slot and its lease are free: a new persisting create on the context succeeds.
    assert_eq!(f.held(&project).await, Vec::<String>::new());
    assert_eq!(f.writer(&ctx).await, None);
    let (status, next) = f.create_as(&key, with_context(&ctx, Some(true))).await;
    assert_eq!(status, StatusCode::CREATED, "{next}");
    assert_eq!(f.writer(&ctx).await.as_deref(), next["id"].as_str());

    // The expired one: TIMED_OUT, ended, its task stopped; the READY one untouched.
    let item = f.item(&gone).await;
    assert_eq!(text(&item, "internalStatus").as_deref(), Some("TIMED_OUT"));
    assert_eq!(
        text(&item, "terminationReason").as_deref(),
        Some(EXPIRED_REASON)
    );
    assert!(item.contains_key("endedAt"));
    assert_eq!(f.task(&gone_arn).await.desired_status(), Some("STOPPED"));
    // Both are in their project's usage total (counted once, by the sweeper).
    for id in [&gone, &stranded] {
        assert_eq!(
            f.item(id).await.get("usageCounted"),
            Some(&AttributeValue::Bool(true)),
            "{id}"
        );
    }
    let item = f.item(&live).await;
    assert_eq!(text(&item, "internalStatus").as_deref(), Some("READY"));
    assert!(!item.contains_key("endedAt"));
    assert!(f.held(&f.project_id).await.contains(&live));
    // Idempotent: a second run ends nothing more.
    let again = sweep(&app, PAGE_LIMIT).await.unwrap();
    assert_eq!((again.ended, again.failed), (0, 0), "{again:?}");
}

// ---------------------------------------------------------------------------------------------
// The DynamoDB store's conditional writes agree with the in-memory reference

fn doc(id: &str, status: InternalStatus, ended: bool) -> SessionDoc {
    let mut d = SessionDoc {
        session_id: id.into(),
        project_id: "proj_rules".into(),
        created_at: format!("2026-01-01T00:00:00.{:03}Z", id.len()),
        expires_at: 1_900_000_000,
        region: "us-east-1".into(),
        ended_at: ended.then(|| "2026-01-01T00:01:00.000Z".into()),
        claim_deadline: Some(CLAIM_DEADLINE),
        ..Default::default()
    };
    d.set_status(status);
    d
}

/// The claim deadline of [`doc`]'s sessions.
const CLAIM_DEADLINE: u64 = 1_800_000_000;

/// One of the store's conditional operations, as the handlers use them.
async fn apply(r: &dyn SessionStore, op: &str, id: &str, at: &str) -> Cond<SessionDoc> {
    match op {
        "provisioning" => r.mark_provisioning(id, Some("arn:task/1"), at).await,
        "release" => {
            r.mark_terminal(id, Terminal::status(InternalStatus::Stopped), at)
                .await
        }
        "task stopped" => {
            let to = Terminal {
                status: InternalStatus::Failed,
                reason: Some("gone"),
                ended: true,
            };
            r.mark_terminal(id, to, at).await
        }
        "extend claim" => r.extend_claim(id, CLAIM_DEADLINE + 60).await,
        "unserved" => r.end_unserved(id, CLAIM_DEADLINE + 1, at).await,
        "unserved too early" => r.end_unserved(id, CLAIM_DEADLINE, at).await,
        _ => {
            r.mark_ended_if_missing(id, at).await.unwrap();
            Ok(Cond::Done(r.get(id).await.unwrap().unwrap()))
        }
    }
    .unwrap()
}

#[tokio::test]
async fn conditional_writes_follow_the_memory_rules() {
    let sdk = sdk().await;
    let table = tables::create(&sdk, &tables::SESSIONS).await;
    let dynamo = DynamoSessions::new(aws_sdk_dynamodb::Client::new(&sdk), &table);
    let at = "2026-01-01T00:02:00.000Z";
    let starts = [
        (InternalStatus::Creating, false),
        (InternalStatus::Provisioning, false),
        (InternalStatus::Ready, false),
        (InternalStatus::Stopped, false),
        (InternalStatus::Stopped, true),
        (InternalStatus::Failed, false),
        (InternalStatus::TimedOut, true),
    ];
    let ops = [
        "provisioning",
        "release",
        "task stopped",
        "extend claim",
        "unserved",
        "unserved too early",
        "ended",
    ];
    for op_name in ops {
        for (i, (st, ended)) in starts.iter().enumerate() {
            let id = format!("sess_{op_name}_{i}").replace(' ', "_");
            let memory = MemSessions::default();
            let d = doc(&id, *st, *ended);
            assert_eq!(
                memory.create(d.clone()).await.unwrap(),
                Cond::Done(d.clone())
            );
            assert_eq!(
                dynamo.create(d.clone()).await.unwrap(),
                Cond::Done(d.clone())
            );
            let want = apply(&memory, op_name, &id, at).await;
            let got = apply(&dynamo, op_name, &id, at).await;
            assert_eq!(got, want, "{op_name} from {st:?} (endedAt: {ended})");
            assert_eq!(
                dynamo.get(&id).await.unwrap(),
                memory.get(&id).await.unwrap(),
                "{op_name} from {st:?}: stored items differ"
            );
        }
        // No such session.
        let missing = format!("sess_missing_{}", op_name.replace(' ', "_"));
        if op_name != "ended" {
            let got = apply(&dynamo, op_name, &missing, at).await;
            assert_eq!(got, Cond::Failed(None), "{op_name}");
        } else {
            dynamo.mark_ended_if_missing(&missing, at).await.unwrap();
            assert_eq!(dynamo.get(&missing).await.unwrap(), None, "nothing created");
        }
    }
    // create is conditional: a second create fails and shows the current item.
    let d = doc("sess_twice", InternalStatus::Creating, false);
    dynamo.create(d.clone()).await.unwrap();
    let mut other = d.clone();
    other.project_id = "proj_other".into();
    assert_eq!(dynamo.create(other).await.unwrap(), Cond::Failed(Some(d)));
    // The project listing (the GSI), oldest first.
    let all = dynamo
        .list_project(
            "proj_rules",
            PageAt {
                after: None,
                limit: 100,
            },
        )
        .await
        .unwrap()
        .sessions;
    let listed: Vec<String> = all.iter().map(|d| d.session_id.clone()).collect();
    assert_eq!(listed.len(), 50);
    let mut sorted = listed.clone();
    sorted.sort_by_key(|id| (id.len(), id.clone()));
    assert_eq!(listed, sorted, "ordered by createdAt, then id");
    // The sweeper's index query (status-expiresAt-index) finds what the reference finds.
    for status in [SdkStatus::Pending, SdkStatus::Running, SdkStatus::TimedOut] {
        for before in [1_900_000_000, 1_900_000_001, u64::MAX] {
            let mut got = dynamo.expiring(status, before, 1000).await.unwrap();
            let mut want = rules::expiring(all.clone(), status, before, 1000);
            got.sort();
            want.sort();
            assert_eq!(got, want, "{status:?} before {before}");
        }
        let bounded = dynamo.expiring(status, u64::MAX, 3).await.unwrap();
        let all_of = rules::expiring(all.clone(), status, u64::MAX, 1000).len();
        assert_eq!(
            bounded.len(),
            all_of.min(3),
            "{status:?}: at most the limit"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// (f) admin commands of the real binary; the key then works through the router and the
// authorizer until revoked

fn admin_cmd(
    tables: &[(&'static str, String)],
    args: &[&str],
    stdin: Option<&str>,
) -> (i32, String, String) {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_wallcrawler-control-plane"));
    cmd.arg("admin")
        .args(args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("RUST_LOG", "info")
        .envs(aws_env())
        .envs(tables.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("run wallcrawler-control-plane admin");
    {
        use std::io::Write;
        let mut input = child.stdin.take().unwrap();
        if let Some(s) = stdin {
            input.write_all(s.as_bytes()).unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// What an admin command printed: one line, an id starting with `prefix`.
fn printed_id(out: &str, prefix: &str) -> String {
    let id = out.trim().to_owned();
    assert!(
        id.starts_with(prefix) && out.lines().count() == 1,
        "{out:?}"
    );
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_creates_projects_and_keys_and_revokes_keys() {
    let sdk = sdk().await;
    let tables = tables::create_all(&sdk).await;
    let run = |args: &[&str], stdin: Option<String>| {
        let (tables, args) = (
            tables.clone(),
            args.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
        );
        async move {
            tokio::task::spawn_blocking(move || {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                admin_cmd(&tables, &args, stdin.as_deref())
            })
            .await
            .unwrap()
        }
    };

    let (code, help, _) = run(&["--help"], None).await;
    assert_eq!(code, 0);
    for sub in ["create-project", "create-key", "revoke-key"] {
        assert!(help.contains(sub), "{sub} in:\n{help}");
    }

    let (code, out, err) = run(
        &["create-project", "--name", "Acme", "--concurrency", "3"],
        None,
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let project_id = printed_id(&out, "proj_");
    let dynamo = aws_sdk_dynamodb::Client::new(&sdk);
    let p = get_item(&dynamo, &tables[1].1, "projectId", &project_id)
        .await
        .expect("the project is in the table");
    assert_eq!(text(&p, "name").as_deref(), Some("Acme"));
    assert_eq!(text(&p, "status").as_deref(), Some("ACTIVE"));
    assert_eq!(p["concurrency"], AttributeValue::N("3".into()));
    assert_eq!(p["defaultTimeout"], AttributeValue::N("3600".into()));
    let (code, _, err) = run(
        &[
            "create-project",
            "--name",
            "Again",
            "--project-id",
            &project_id,
        ],
        None,
    )
    .await;
    assert_eq!(code, 1, "an existing id is refused");
    assert!(err.contains("already exists"), "{err}");

    let (code, out, err) = run(
        &["create-key", "--project-id", &project_id, "--name", "ci"],
        None,
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let key = printed_id(&out, "wc_");
    assert!(
        !err.contains(&key),
        "the key is printed once, on stdout only"
    );
    let (code, _, _) = run(&["create-key", "--project-id", "proj_nope"], None).await;
    assert_eq!(code, 1, "a key for a missing project is refused");

    // The table holds the hash, never the key.
    let items = dynamo.scan().table_name(&tables[2].1).send().await.unwrap();
    assert_eq!(items.items().len(), 1);
    let item = &items.items()[0];
    assert_eq!(text(item, "apiKeyHash"), Some(hash_api_key(&key)));
    assert_eq!(text(item, "status").as_deref(), Some("ACTIVE"));
    assert_eq!(item["projectIds"], AttributeValue::L(vec![s(&project_id)]));
    assert!(!format!("{item:?}").contains(&key));

    // The key authorises through the router (the API function's own check) and the authorizer.
    let vars: HashMap<&str, String> = tables.iter().cloned().collect();
    let mut all = vars.clone();
    for (k, v) in [
        ("CONTEXTS_BUCKET_NAME", "unused"),
        ("ECS_CLUSTER", "unused"),
        ("ECS_TASK_DEFINITION", "unused"),
        ("ECS_SUBNETS", "subnet-unused"),
        ("WALLCRAWLER_JWT_SIGNING_SECRET_ARN", "unused"),
        ("WALLCRAWLER_JWT_PUBLIC_KEY_SECRET_ARN", "unused"),
    ] {
        all.insert(k, v.into());
    }
    let cfg = Config::from_source(&|k| all.get(k).cloned()).unwrap();
    let api = router(build_app(&sdk, &cfg));
    let (status, projects) = call_with_key(&api, &key, Method::GET, "/v1/projects", None).await;
    assert_eq!(status, StatusCode::OK, "{projects}");
    assert_eq!(projects[0]["id"], project_id.as_str());
    assert_eq!(projects[0]["concurrency"], 3);
    let auth = Authorizer {
        keys: Arc::new(DynamoKeys::new(dynamo.clone(), &cfg.tables.api_keys)),
        projects: Arc::new(DynamoProjects::new(dynamo.clone(), &cfg.tables.projects)),
    };
    let allow = policy(&auth, &key, "Allow").await;
    assert_eq!(
        allow["policyDocument"]["Statement"][0]["Resource"][0],
        "arn:aws:execute-api:us-east-1:123456789012:abc123/prod/*"
    );
    assert_eq!(allow["context"]["projectId"], project_id.as_str());
    assert_eq!(allow["context"]["projectIds"], project_id.as_str());
    assert!(!allow.to_string().contains(&key), "the key goes nowhere");
    let unknown = authorize_request(&auth, &authorizer_event("wc_unknown")).await;
    assert_eq!(unknown.unwrap_err().to_string(), "Unauthorized");

    // Revoked (the key read from stdin): 403 from both.
    let (code, out, err) = run(&["revoke-key", "--key", "-"], Some(format!("{key}\n"))).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.is_empty(), "{out:?}");
    let (status, body) = call_with_key(&api, &key, Method::GET, "/v1/projects", None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    policy(&auth, &key, "Deny").await;

    // By hash; an unknown hash is an error.
    let (_, out, _) = run(&["create-key", "--project-id", &project_id], None).await;
    let second = out.trim().to_owned();
    let (code, _, err) = run(&["revoke-key", "--hash", &hash_api_key(&second)], None).await;
    assert_eq!(code, 0, "{err}");
    let (status, _) = call_with_key(&api, &second, Method::GET, "/v1/projects", None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (code, _, err) = run(&["revoke-key", "--hash", &"0".repeat(64)], None).await;
    assert_eq!(code, 1, "{err}");
    let (code, _, _) = run(&["revoke-key"], None).await;
    assert_eq!(code, 64, "--key or --hash is required");
}

// ---------------------------------------------------------------------------------------------
// The Lambda binaries themselves, against a stand-in for the Lambda Runtime API (the protocol
// `lambda_runtime` speaks in a real function: `GET …/invocation/next`, then `POST
// …/invocation/<id>/response` or `…/error`)

/// What a function posted back: (request id, `response` or `error`, body).
type Posted = (String, String, Value);

/// Serves `events` to one function process, then holds its next poll open; reports every
/// answer on the returned channel.
async fn fake_runtime(
    events: Vec<Value>,
) -> (std::net::SocketAddr, tokio::sync::mpsc::Receiver<Posted>) {
    use axum::extract::{Path, State};
    use axum::response::IntoResponse;
    use axum::routing::{get, post};
    type Queue = Arc<std::sync::Mutex<std::collections::VecDeque<(String, Value)>>>;
    let queue: Queue = Arc::new(std::sync::Mutex::new(
        events
            .into_iter()
            .enumerate()
            .map(|(i, e)| (format!("req-{i}"), e))
            .collect(),
    ));
    let (tx, rx) = tokio::sync::mpsc::channel::<Posted>(16);
    let next = |State((queue, _)): State<(Queue, tokio::sync::mpsc::Sender<Posted>)>| async move {
        let next = queue.lock().unwrap().pop_front();
        let Some((id, event)) = next else {
            return std::future::pending::<axum::response::Response>().await;
        };
        let deadline = (wallcrawler_contract::time::unix_millis() + 30_000).to_string();
        (
            [
                ("lambda-runtime-aws-request-id", id),
                ("lambda-runtime-deadline-ms", deadline),
                (
                    "lambda-runtime-invoked-function-arn",
                    "arn:aws:lambda:us-east-1:123456789012:function:test".into(),
                ),
            ],
            axum::Json(event),
        )
            .into_response()
    };
    let posted = |State((_, tx)): State<(Queue, tokio::sync::mpsc::Sender<Posted>)>,
                  Path((id, kind)): Path<(String, String)>,
                  body: Bytes| async move {
        let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let _ = tx.send((id, kind, body)).await;
        StatusCode::ACCEPTED
    };
    let init_error = |State((_, tx)): State<(Queue, tokio::sync::mpsc::Sender<Posted>)>,
                      body: Bytes| async move {
        let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let _ = tx.send(("init".into(), "error".into(), body)).await;
        StatusCode::ACCEPTED
    };
    let app = axum::Router::new()
        .route("/2018-06-01/runtime/invocation/next", get(next))
        .route("/2018-06-01/runtime/invocation/{id}/{kind}", post(posted))
        .route("/2018-06-01/runtime/init/error", post(init_error))
        .with_state((queue, tx));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, rx)
}

/// Runs a Lambda binary on `events`; its answers in order, and its log (at `RUST_LOG=trace`).
async fn run_lambda(
    bin: &str,
    vars: &HashMap<&'static str, String>,
    events: Vec<Value>,
) -> (Vec<Posted>, String) {
    let n = events.len();
    let (addr, mut rx) = fake_runtime(events).await;
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut child = tokio::process::Command::new(bin)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(aws_env())
        .envs(vars.iter().map(|(k, v)| (*k, v.as_str())))
        .env("RUST_LOG", "trace")
        .env("AWS_LAMBDA_RUNTIME_API", addr.to_string())
        .env("AWS_LAMBDA_FUNCTION_NAME", "test")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "512")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log.reopen().unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut posted = Vec::new();
    while posted.len() < n {
        let p = tokio::time::timeout(WAIT, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("{bin} answered {} of {n} events", posted.len()))
            .expect("the runtime stand-in runs");
        let init_failed = p.0 == "init";
        posted.push(p);
        assert!(!init_failed, "{bin} failed to start: {posted:?}");
    }
    child.kill().await.unwrap();
    (posted, std::fs::read_to_string(log.path()).unwrap())
}

fn rest_event(method: &str, path: &str, key: &str, body: Option<Value>) -> Value {
    json!({
        "resource": "/{proxy+}",
        "path": path,
        "httpMethod": method,
        "headers": {"x-wc-api-key": key, "content-type": "application/json",
            "Host": "abc123.execute-api.us-east-1.amazonaws.com"},
        "multiValueHeaders": {"x-wc-api-key": [key], "content-type": ["application/json"],
            "Host": ["abc123.execute-api.us-east-1.amazonaws.com"]},
        "queryStringParameters": null,
        "multiValueQueryStringParameters": null,
        "pathParameters": {"proxy": path.trim_start_matches('/')},
        "stageVariables": null,
        "requestContext": {"resourceId": "r1", "resourcePath": "/{proxy+}", "httpMethod": method,
            "path": format!("/prod{path}"), "accountId": "123456789012", "stage": "prod",
            "requestId": "req", "identity": {"sourceIp": "198.51.100.1"}, "apiId": "abc123"},
        "body": body.map(|b| b.to_string()),
        "isBase64Encoded": false
    })
}

fn http_api_event(method: &str, raw_path: &str, stage: &str, key: &str) -> Value {
    json!({
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": raw_path,
        "rawQueryString": "",
        "headers": {"x-wc-api-key": key, "host": "abc123.execute-api.us-east-1.amazonaws.com"},
        "requestContext": {"accountId": "123456789012", "apiId": "abc123",
            "domainName": "abc123.execute-api.us-east-1.amazonaws.com", "domainPrefix": "abc123",
            "http": {"method": method, "path": raw_path, "protocol": "HTTP/1.1",
                "sourceIp": "198.51.100.1", "userAgent": "test"},
            "requestId": "req", "routeKey": "$default", "stage": stage,
            "time": "21/Nov/2026:12:00:00 +0000", "timeEpoch": 1_795_262_400_000u64},
        "isBase64Encoded": false
    })
}

/// The status and JSON body of an API Gateway proxy answer.
fn proxy_answer(p: &Posted) -> (u64, Value) {
    assert_eq!(p.1, "response", "{p:?}");
    let body = p.2["body"].as_str().unwrap_or("");
    let body = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(body).unwrap()
    };
    (p.2["statusCode"].as_u64().unwrap(), body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lambda_binaries_answer_through_the_runtime_api() {
    let f = Fixture::new(1).await;
    let key = f.api_key.clone();

    // The API function: REST (named stage) and HTTP API (named and $default stages) payloads.
    let (posted, log) = run_lambda(
        env!("CARGO_BIN_EXE_wallcrawler-api-lambda"),
        &f.vars,
        vec![
            rest_event("GET", "/v1/projects", &key, None),
            rest_event("POST", "/v1/sessions", &key, Some(json!({"timeout": 120}))),
            http_api_event("GET", "/prod/v1/sessions", "prod", &key),
            http_api_event(
                "GET",
                &format!("/v1/projects/{}", f.project_id),
                "$default",
                &key,
            ),
            rest_event("GET", "/v1/projects", "wc_wrong", None),
        ],
    )
    .await;
    let (status, projects) = proxy_answer(&posted[0]);
    assert_eq!(status, 200, "{projects}");
    assert_eq!(projects[0]["id"], f.project_id.as_str());
    let (status, session) = proxy_answer(&posted[1]);
    assert_eq!(status, 201, "{session}");
    assert_eq!(
        session["status"], "PENDING",
        "no controller: PENDING after 1 s"
    );
    let id = session["id"].as_str().unwrap().to_owned();
    let (status, list) = proxy_answer(&posted[2]);
    assert_eq!(status, 200, "{list}");
    assert_eq!(list[0]["id"], id.as_str());
    let (status, project) = proxy_answer(&posted[3]);
    assert_eq!(status, 200, "{project}");
    assert_eq!(project["id"], f.project_id.as_str());
    let (status, refused) = proxy_answer(&posted[4]);
    assert_eq!(status, 401, "{refused}");
    assert_eq!(refused["statusCode"], 401);
    assert!(
        !log.contains(&key),
        "the API key is not in the API function's log"
    );

    // The authorizer: Allow, Unauthorized.
    let (posted, log) = run_lambda(
        env!("CARGO_BIN_EXE_wallcrawler-authorizer-lambda"),
        &f.vars,
        vec![
            serde_json::to_value(authorizer_event(&key)).unwrap(),
            serde_json::to_value(authorizer_event("wc_unknown_key")).unwrap(),
        ],
    )
    .await;
    assert_eq!(posted[0].1, "response", "{posted:?}");
    assert_eq!(
        posted[0].2["policyDocument"]["Statement"][0]["Effect"],
        "Allow"
    );
    assert_eq!(posted[0].2["context"]["projectId"], f.project_id.as_str());
    assert_eq!(posted[1].1, "error", "{posted:?}");
    assert_eq!(posted[1].2["errorMessage"], "Unauthorized");
    assert!(
        !log.contains(&key),
        "the API key is not in the authorizer's log"
    );
    assert!(!log.contains("wc_unknown_key"), "nor a refused one");

    // The task-state function: the PENDING session's task stopped.
    let arn = text(&f.item(&id).await, "ecsTaskArn").unwrap();
    let event = json!({
        "version": "0", "id": "e1", "detail-type": "ECS Task State Change", "source": "aws.ecs",
        "account": "123456789012", "time": "2026-11-21T12:00:00Z", "region": "us-east-1",
        "resources": [arn],
        "detail": {"taskArn": arn, "lastStatus": "STOPPED", "desiredStatus": "STOPPED",
            "startedBy": id, "stopCode": "TaskFailedToStart",
            "stoppedReason": "CannotPullContainerError: pull access denied"}
    });
    let (posted, _) = run_lambda(
        env!("CARGO_BIN_EXE_wallcrawler-task-events-lambda"),
        &f.vars,
        vec![event],
    )
    .await;
    assert_eq!(posted[0].1, "response", "{posted:?}");
    assert_eq!(posted[0].2["outcome"], format!("Failed({id:?})"));
    let item = f.item(&id).await;
    assert_eq!(text(&item, "internalStatus").as_deref(), Some("FAILED"));
    assert!(item.contains_key("endedAt"));
    assert!(
        text(&item, "terminationReason")
            .unwrap()
            .contains("CannotPullContainerError")
    );

    // The sweeper function: a scheduled event (its body ignored) ends a session whose claim's
    // deadline passed, and answers the run's summary.
    let (status, v) = f.create(json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
    let stranded = v["id"].as_str().unwrap().to_owned();
    set_number(&f, &stranded, "claimDeadline", now_secs() - 1).await;
    let scheduled = json!({
        "version": "0", "id": "e2", "detail-type": "Scheduled Event", "source": "aws.events",
        "account": "123456789012", "time": "2026-11-21T12:00:00Z", "region": "us-east-1",
        "resources": ["arn:aws:events:us-east-1:123456789012:rule/sweeper"], "detail": {}
    });
    let (posted, _) = run_lambda(
        env!("CARGO_BIN_EXE_wallcrawler-sweeper-lambda"),
        &f.vars,
        vec![scheduled],
    )
    .await;
    assert_eq!(posted[0].1, "response", "{posted:?}");
    assert_eq!(posted[0].2["ended"], 1, "{posted:?}");
    assert_eq!(posted[0].2["unserved"], 1, "{posted:?}");
    let item = f.item(&stranded).await;
    assert_eq!(text(&item, "internalStatus").as_deref(), Some("TIMED_OUT"));
}

// ---------------------------------------------------------------------------------------------
// Malformed ids never reach DynamoDB.

/// Every id outside the platform's alphabet is a 400 on every route that takes an id, before
/// any table is read, its message clipped. DynamoDB refuses a key over 2 KB with a
/// ValidationException (the store's failure: a 500, which the SDKs retried twice); moto answers
/// such a read with no item (it checks key sizes on writes only), so against moto the old
/// answer was a 404 echoing all 3,000 characters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_id_is_a_400_before_dynamodb_sees_it() {
    let f = Fixture::new(5).await;
    let huge = "s".repeat(3000);
    let release = json!({"status": "REQUEST_RELEASE"});
    for id in [huge.as_str(), "sess.1", "%2E%2E%2Fx", "s%C3%A9ss"] {
        for (method, path, body) in [
            (Method::GET, format!("/v1/sessions/{id}"), None),
            (
                Method::POST,
                format!("/v1/sessions/{id}"),
                Some(release.clone()),
            ),
            (Method::GET, format!("/v1/sessions/{id}/debug"), None),
            (Method::GET, format!("/v1/contexts/{id}"), None),
            (Method::PUT, format!("/v1/contexts/{id}"), Some(json!({}))),
            (Method::DELETE, format!("/v1/contexts/{id}"), None),
            (Method::GET, format!("/v1/projects/{id}"), None),
            (Method::GET, format!("/v1/projects/{id}/usage"), None),
        ] {
            let what = format!("{method} {}", &path[..path.len().min(60)]);
            let (status, v) = f.call(method, &path, body).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{what}: {v}");
            let message = v["message"].as_str().unwrap();
            assert!(
                message.contains("id must be 1 to 128 of the characters") && message.len() < 200,
                "{what}: {v}"
            );
        }
    }
}

/// Session events: a session's lifecycle on moto's sessions stream, through the processor, to
/// an SQS queue on the topic and an EventBridge rule's queue; redelivery keeps the event id.
mod session_events;
