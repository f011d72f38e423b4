//! Pool mode on AWS: the API with `POOL_QUEUE_URL` (claims sent to an SQS queue with a
//! dead-letter queue) and real `wallcrawler-controller run` processes in pool mode standing in
//! for the pool's Fargate tasks, each with a moto ECS task of its own (its ARN given by a
//! stand-in task metadata endpoint, as ECS gives it), real Chromium, and the test playing ECS
//! where ECS acts (a `StopTask` seen in moto becomes a SIGTERM to that task's controller).
//!
//! - a warm task makes create answer RUNNING with a working connectUrl; release stops that
//!   task; its pool metrics;
//! - a context: cookies set in one session (one task) are there in the next (another task);
//! - simultaneous creates with two warm tasks: one task each;
//! - a task killed between taking a claim and READY: another task serves the session;
//! - a task slow between taking a claim and READY keeps the claim from the other tasks (no
//!   second task races it), and its failure is the session's;
//! - a session released before any task took its claim: the claim is dropped, the task stays
//!   warm and serves the next session;
//! - no warm task: create answers PENDING and the next task to start serves the session;
//! - a claim past its deadline (no client waits): the task ends its session (TIMED_OUT, "no
//!   browser was available in time") instead of serving it, and serves the next claim;
//! - a task that dies after READY: the task-state handler finds its session by the task ARN
//!   (a service's task has no session in `startedBy`) and ends it;
//! - a poison claim ends in the dead-letter queue and the task still serves valid claims;
//! - a release whose StopTask never reaches the task: the task sees its item STOPPED and ends
//!   the session itself within seconds.
//! - a claim delivered twice with two warm tasks: one owner serves it, the other hands its copy
//!   back and writes nothing;
//! - a task stopped (SIGTERM) while its long poll is in flight, or during bring-up: the claim is
//!   handed back at once and another task serves the session; the stopped one never ends it.
//!
//! The controllers are this package's binary (`support::bin`, which Cargo builds for these
//! tests); the control plane's API runs in the test from its library, as its Lambda builds it
//! (`wallcrawler_testkit::platform::Fixture`).
//!
//! A failing test prints its controllers' logs; `POOL_TEST_LOGS=1` prints them always.

use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::Mutex;

use aws_sdk_sqs::types::QueueAttributeName;
use nix::sys::signal::Signal;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ::http::{Method, StatusCode};
use aws_sdk_dynamodb::types::AttributeValue;
use serde_json::{Value, json};
use std::process::Stdio;
use wallcrawler_contract::claim::{Claim, ClaimContext};
use wallcrawler_control_plane::aws::lambda::TaskEventOutcome;
use wallcrawler_testkit::platform::{
    Fixture, SIGNING_KEY, aws_env, http, sdk, stopped_event, text,
};
use wallcrawler_testkit::unique;

/// The CloudFormation stack in moto, run with these helpers.
mod stack;

/// A pool task's downloads in S3 before `endedAt`; the API's redirect to the zip.
mod downloads;

/// Bound on any single wait here (a hang guard for a loaded machine, never a speed assertion).
const POOL_WAIT: Duration = Duration::from_secs(60);

/// The dead-letter queue takes a claim after this many receives: deploy/template.yaml's, which
/// leaves room for claims handed back unserved (a task that finds its session held by a task
/// whose lease has not lapsed yet hands it back, and that receive counts).
const MAX_RECEIVE_COUNT: u32 = 10;

/// The API with a pool queue, and a directory for the pool tasks' temporary files.
struct Pool {
    f: Fixture,
    sqs: aws_sdk_sqs::Client,
    queue: String,
    dlq: String,
    /// TMPDIR of the controllers (their profiles) and the Chrome wrapper scripts. Dropped after
    /// the tasks (declared before them in each test), so a failed test leaves nothing behind.
    tmp: tempfile::TempDir,
}

/// A fresh SQS queue (a unique name from `prefix`), with `redrive` as its redrive policy.
async fn create_queue(sqs: &aws_sdk_sqs::Client, prefix: &str, redrive: Option<String>) -> String {
    let mut req = sqs.create_queue().queue_name(unique(prefix));
    if let Some(policy) = redrive {
        req = req.attributes(QueueAttributeName::RedrivePolicy, policy);
    }
    let out = req.send().await.unwrap();
    out.queue_url().unwrap().to_owned()
}

/// A TMPDIR for the controllers, like /tmp: they (root) run Chrome as a uid of its own, which
/// puts its singleton socket here and reaches its profile below.
fn controllers_tmp() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    tmp
}

impl Pool {
    async fn new(create_wait_seconds: u64) -> Pool {
        let sdk = sdk().await;
        let sqs = aws_sdk_sqs::Client::new(&sdk);
        let dlq = create_queue(&sqs, "pool-dlq", None).await;
        let dlq_arn = sqs
            .get_queue_attributes()
            .queue_url(&dlq)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await
            .unwrap()
            .attributes()
            .unwrap()[&QueueAttributeName::QueueArn]
            .clone();
        let redrive = json!({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": MAX_RECEIVE_COUNT});
        let queue = create_queue(&sqs, "pool", Some(redrive.to_string())).await;
        let f =
            Fixture::with_env(create_wait_seconds, vec![("POOL_QUEUE_URL", queue.clone())]).await;
        Pool {
            f,
            sqs,
            queue,
            dlq,
            tmp: controllers_tmp(),
        }
    }

    /// A warm-able pool task with the defaults.
    async fn task(&self) -> PoolTask {
        PoolTask::start(self, TaskOptions::default()).await
    }

    /// Messages in `queue`, visible and in flight.
    async fn messages(&self, queue: &str) -> (u64, u64) {
        let attrs = self
            .sqs
            .get_queue_attributes()
            .queue_url(queue)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .send()
            .await
            .unwrap();
        let attrs = attrs.attributes().unwrap();
        let n = |k: QueueAttributeName| attrs[&k].parse::<u64>().unwrap();
        (
            n(QueueAttributeName::ApproximateNumberOfMessages),
            n(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        )
    }

    /// Waits until the pool queue holds no message, visible or in flight: the claims are
    /// deleted. (Bounded below the default visibility timeout, so a claim taken and never
    /// deleted cannot pass for a deleted one by coming back.)
    async fn claims_deleted(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let n = self.messages(&self.queue).await;
            if n == (0, 0) {
                return;
            }
            assert!(Instant::now() < deadline, "claims left in the queue: {n:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `POST /v1/sessions`; asserts 201.
    async fn create(&self, body: Value) -> Value {
        let (status, v) = self.f.call(Method::POST, "/v1/sessions", Some(body)).await;
        assert_eq!(status, StatusCode::CREATED, "{v}");
        v
    }

    /// A pool task started with `o`, once it is warm.
    async fn warm_task(&self, o: TaskOptions) -> PoolTask {
        PoolTask::start(self, o).await.warm().await
    }

    /// `POST /v1/contexts`; asserts 201; the context's id.
    async fn new_context(&self) -> String {
        let (status, c) = self
            .f
            .call(Method::POST, "/v1/contexts", Some(json!({})))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{c}");
        c["id"].as_str().unwrap().to_owned()
    }

    /// Asserts the session's item names `task` as the one serving it.
    async fn assert_served_by(&self, id: &str, task: &PoolTask) {
        assert_eq!(
            text(&self.f.item(id).await, "ecsTaskArn").as_deref(),
            Some(task.arn.as_str())
        );
    }

    /// `REQUEST_RELEASE`; asserts 200 COMPLETED.
    async fn release(&self, id: &str) {
        let (status, v) = self.f.release(id).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        assert_eq!(v["status"], "COMPLETED", "{v}");
    }

    /// Polls `GET /v1/sessions/{id}` until it is RUNNING; the session.
    async fn running(&self, id: &str) -> Value {
        let deadline = Instant::now() + POOL_WAIT;
        loop {
            let (status, v) = self
                .f
                .call(Method::GET, &format!("/v1/sessions/{id}"), None)
                .await;
            assert_eq!(status, StatusCode::OK, "{v}");
            if v["status"] == "RUNNING" {
                return v;
            }
            assert_eq!(v["status"], "PENDING", "{v}");
            assert!(Instant::now() < deadline, "{id} never became RUNNING: {v}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Polls the item until it has `endedAt`; the item.
    async fn ended(&self, id: &str) -> HashMap<String, AttributeValue> {
        let deadline = Instant::now() + POOL_WAIT;
        loop {
            let item = self.f.item(id).await;
            if item.contains_key("endedAt") {
                return item;
            }
            assert!(Instant::now() < deadline, "{id} has no endedAt: {item:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A keepAlive session created while `task` is warm: create answers RUNNING, `task` took
    /// the claim and wrote READY with its own ARN, the claim is deleted. Its id and connectUrl.
    async fn served_at_once(&self, task: &mut PoolTask) -> (String, String) {
        let v = self.create(json!({"keepAlive": true})).await;
        assert_eq!(v["status"], "RUNNING", "{v}");
        let id = v["id"].as_str().unwrap().to_owned();
        let taken = task.wait_event("claim taken").await;
        assert_eq!(taken["span"]["session.id"], id.as_str(), "{taken}");
        let item = self.f.item(&id).await;
        assert_eq!(text(&item, "internalStatus").as_deref(), Some("READY"));
        assert_eq!(
            text(&item, "ecsTaskArn").as_deref(),
            Some(task.arn.as_str()),
            "the task that took the claim wrote its own ARN"
        );
        self.claims_deleted().await;
        (id, connect_url(&v))
    }

    /// Releases `id` and plays ECS stopping `task`: it exits 0.
    /// The running session `v` is `task`'s: driven through its `connectUrl`, then released,
    /// which stops the task.
    async fn drive_and_release(&self, v: &Value, task: &mut PoolTask) {
        let id = v["id"].as_str().unwrap();
        self.assert_served_by(id, task).await;
        drive(&connect_url(v)).await;
        self.released_and_stopped(task, id).await;
    }

    async fn released_and_stopped(&self, task: &mut PoolTask, id: &str) {
        self.release(id).await;
        let status = task.stopped_by_ecs(&self.f).await;
        assert_eq!(status.code(), Some(0), "{}", task.text());
    }

    /// Releases `id`, plays ECS stopping `task`: it exits 0 and the session is STOPPED /
    /// COMPLETED with `endedAt`.
    async fn released_and_ended(&self, task: &mut PoolTask, id: &str) {
        self.released_and_stopped(task, id).await;
        let item = self.ended(id).await;
        assert_eq!(text(&item, "internalStatus").as_deref(), Some("STOPPED"));
        assert_eq!(text(&item, "status").as_deref(), Some("COMPLETED"));
    }

    /// A Chrome that starts normally for the warm profile but, on a claimed context's profile,
    /// waits until [`Pool::open_gate`] and then fails (exit 1): a slow bring-up that fails.
    fn chrome_failing_on_claimed_profiles_at_the_gate(&self) -> PathBuf {
        self.chrome_at_the_gate("chrome-gated.sh", "exit 1")
    }

    /// A Chrome that starts normally for the warm profile but, on a claimed context's profile,
    /// starts only once [`Pool::open_gate`] is called: a bring-up held where the test wants.
    fn chrome_held_on_claimed_profiles_at_the_gate(&self) -> PathBuf {
        let chrome = wallcrawler_testkit::chromium();
        let then = format!("exec '{}' \"$@\"", chrome.display());
        self.chrome_at_the_gate("chrome-held.sh", &then)
    }

    /// A Chrome wrapper `name` that on a claimed profile waits for the gate, then runs `then`.
    fn chrome_at_the_gate(&self, name: &str, then: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = self.tmp.path().join(name);
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\ncase \"$*\" in\n  *.claimed*)\n    \
                 while [ ! -e '{gate}' ]; do sleep 0.05; done\n    {then} ;;\nesac\n\
                 exec '{chrome}' \"$@\"\n",
                gate = self.tmp.path().join("gate").display(),
                chrome = wallcrawler_testkit::chromium().display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    fn open_gate(&self) {
        std::fs::write(self.tmp.path().join("gate"), b"").unwrap();
    }

    /// A Chrome that starts normally for the warm profile but never comes up on a claimed
    /// context's profile (`<warm profile>.claimed`): it blocks, as a task that dies there would.
    fn chrome_stuck_on_claimed_profiles(&self) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = self.tmp.path().join("chrome-stuck-on-claims.sh");
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\ncase \"$*\" in\n  *.claimed*) exec sleep 600 ;;\nesac\nexec '{}' \"$@\"\n",
                wallcrawler_testkit::chromium().display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }
}

/// A moto ECS task for a pool controller to be: its ARN.
async fn ecs_task(f: &Fixture) -> String {
    use aws_sdk_ecs::types::{AwsVpcConfiguration, LaunchType, NetworkConfiguration};
    let vpc = AwsVpcConfiguration::builder()
        .set_subnets(Some(f.cfg.ecs.subnets.clone()))
        .set_security_groups(Some(f.cfg.ecs.security_groups.clone()))
        .build()
        .unwrap();
    let out = f
        .ecs()
        .run_task()
        .cluster(&f.cfg.ecs.cluster)
        .task_definition(&f.cfg.ecs.task_definition)
        .launch_type(LaunchType::Fargate)
        .count(1)
        .started_by("ecs-svc/wallcrawler-pool")
        .network_configuration(
            NetworkConfiguration::builder()
                .awsvpc_configuration(vpc)
                .build(),
        )
        .send()
        .await
        .unwrap();
    out.tasks()[0].task_arn().unwrap().to_owned()
}

/// What the stand-in ECS agent was asked: `PUT <target> <body>` per request.
type AgentCalls = Arc<Mutex<Vec<String>>>;

/// A stand-in for the ECS task metadata v4 endpoint naming `task_arn` (no network: the
/// controllers are given PUBLIC_IP) and for the ECS agent's task protection endpoint, which
/// records what it is asked. Returns `ECS_CONTAINER_METADATA_URI_V4`, `ECS_AGENT_URI` and the
/// agent's calls.
async fn metadata_server(task_arn: &str) -> (String, String, AgentCalls) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let metadata =
        json!({"Cluster": "wallcrawler", "TaskARN": task_arn, "Containers": []}).to_string();
    let protection = json!({"protection": {"ProtectionEnabled": true, "TaskArn": task_arn,
        "ExpirationDate": "2026-11-23T20:00:00Z"}})
    .to_string();
    let calls = AgentCalls::default();
    let recorded = calls.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let (metadata, protection, recorded) =
                (metadata.clone(), protection.clone(), recorded.clone());
            tokio::spawn(async move {
                let mut req = Vec::new();
                let mut buf = [0u8; 1024];
                let complete = |r: &[u8]| {
                    let end = r.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
                    let head = String::from_utf8_lossy(&r[..end]).to_ascii_lowercase();
                    let len: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .map_or(0, |v| v.trim().parse().unwrap_or(0));
                    (r.len() >= end + len).then_some(end)
                };
                let end = loop {
                    if let Some(end) = complete(&req) {
                        break end;
                    }
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) if req.len() < 16 * 1024 => req.extend_from_slice(&buf[..n]),
                        Ok(_) => return,
                    }
                };
                let head = String::from_utf8_lossy(&req[..end]).into_owned();
                let mut first = head.split_whitespace();
                let (method, target) = (first.next().unwrap_or(""), first.next().unwrap_or(""));
                let body = if method == "PUT" {
                    recorded.lock().unwrap().push(format!(
                        "PUT {target} {}",
                        String::from_utf8_lossy(&req[end..])
                    ));
                    protection
                } else {
                    metadata
                };
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
                     Connection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(answer.as_bytes()).await;
                let _ = s.shutdown().await;
            });
        }
    });
    (
        format!("http://{addr}/v4/pool-task"),
        format!("http://{addr}/api/pool-task"),
        calls,
    )
}

#[derive(Default)]
struct TaskOptions {
    /// Instead of Chromium.
    chrome: Option<PathBuf>,
    /// POOL_CLAIM_VISIBILITY_SECONDS.
    visibility_seconds: Option<u64>,
    /// METRICS_ADDR=127.0.0.1:0 instead of no metrics, and the pool's scaling metric on stderr
    /// every second.
    metrics: bool,
    /// RUST_LOG instead of `info`.
    rust_log: Option<&'static str>,
    /// The task definition's environment, instead of the pool's queue, table, secret and
    /// bucket (the test's loopback settings still apply on top).
    task_env: Option<Vec<(String, String)>>,
    /// The AWS endpoint and credentials, instead of the shared moto's with dummy credentials.
    aws_env: Option<Vec<(&'static str, String)>>,
    /// ECS_CONTAINER_METADATA_URI_V4 instead of the stand-in naming the task.
    metadata_uri: Option<String>,
    /// The moto ECS task this controller is, made beforehand (its credentials name it),
    /// instead of one made at its start.
    task_arn: Option<String>,
}

/// What a controller wrote on stderr (JSON lines), shared with the task reading it.
#[derive(Default)]
struct Log {
    lines: Mutex<Vec<String>>,
    /// Whether stderr has closed (the process is gone).
    closed: Mutex<bool>,
}

/// Reads `child`'s stderr into a [`Log`] as it comes; the counter moves with every line and
/// once more when stderr closes (what waiters watch).
fn watch_stderr(child: &mut tokio::process::Child) -> (Arc<Log>, watch::Receiver<u64>) {
    let log = Arc::new(Log::default());
    let (tx, seen) = watch::channel(0u64);
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let reader_log = log.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            reader_log.lines.lock().unwrap().push(line);
            tx.send_modify(|n| *n += 1);
        }
        *reader_log.closed.lock().unwrap() = true;
        tx.send_modify(|n| *n += 1);
    });
    (log, seen)
}

/// A pool controller: `wallcrawler-controller run` in pool mode, as one Fargate task of the
/// pool. Killed (SIGKILL, Chrome with it) if the test ends without stopping it.
struct PoolTask {
    child: tokio::process::Child,
    /// The moto task it stands for (what its metadata endpoint says).
    arn: String,
    log: Arc<Log>,
    /// Bumped on every stderr line (and at its end); owned by the reader task.
    seen: watch::Receiver<u64>,
    /// What it asked its ECS agent (scale-in protection).
    agent: AgentCalls,
}

impl PoolTask {
    async fn start(pool: &Pool, o: TaskOptions) -> PoolTask {
        let arn = match o.task_arn {
            Some(arn) => arn,
            None => ecs_task(&pool.f).await,
        };
        let (metadata, agent_uri, agent) = metadata_server(&arn).await;
        let chrome = o.chrome.unwrap_or_else(wallcrawler_testkit::chromium);
        let mut cmd = tokio::process::Command::new(crate::support::bin());
        cmd.arg("run")
            // Nothing of the test's environment but what a task has.
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", std::env::var_os("HOME").unwrap_or("/root".into()))
            .env("TMPDIR", pool.tmp.path())
            .env("LOG_FORMAT", "json")
            // Pages served on this machine's loopback are what these tests browse.
            .env("EGRESS_ALLOW", "127.0.0.0/8,::1")
            .env("RUST_LOG", o.rust_log.unwrap_or("info"));
        match o.task_env {
            Some(env) => {
                cmd.envs(env);
            }
            None => {
                cmd.env("POOL_QUEUE_URL", &pool.queue)
                    .env("SESSIONS_TABLE_NAME", &pool.f.cfg.tables.sessions)
                    .env(
                        "WALLCRAWLER_JWT_PUBLIC_KEY_SECRET_ARN",
                        &pool.f.cfg.public_key_secret_arn,
                    )
                    .env("CONTEXTS_BUCKET_NAME", &pool.f.cfg.contexts_bucket)
                    .env("FILES_BUCKET_NAME", &pool.f.cfg.contexts_bucket);
            }
        }
        cmd.env("POOL_TASK_NAME", unique("pool-task"))
            .envs(o.aws_env.unwrap_or_else(aws_env))
            .env(
                "ECS_CONTAINER_METADATA_URI_V4",
                o.metadata_uri.unwrap_or(metadata),
            )
            .env("ECS_AGENT_URI", agent_uri)
            .env("PUBLIC_IP", "127.0.0.1")
            .env("CDP_PROXY_HOST", "127.0.0.1")
            .env("CDP_PROXY_PORT", "0")
            .env("CHROME_DEBUG_PORT", "0")
            .env("CHROME_PATH", chrome)
            .env("METRICS_ADDR", if o.metrics { "127.0.0.1:0" } else { "" })
            .envs(
                [
                    ("POOL_METRIC_NAMESPACE", "Wallcrawler"),
                    ("POOL_METRIC_POOL", "test-pool"),
                    ("POOL_METRIC_PERIOD_SECONDS", "1"),
                ]
                .into_iter()
                .filter(|_| o.metrics),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(v) = o.visibility_seconds {
            cmd.env("POOL_CLAIM_VISIBILITY_SECONDS", v.to_string());
        }
        let mut child = cmd.spawn().expect("start wallcrawler-controller");
        let (log, seen) = watch_stderr(&mut child);
        PoolTask {
            child,
            arn,
            log,
            seen,
            agent,
        }
    }

    fn text(&self) -> String {
        self.log.lines.lock().unwrap().join("\n")
    }

    /// The JSON lines `matches` accepts.
    fn lines_where(&self, matches: impl Fn(&Value) -> bool) -> Vec<Value> {
        self.log
            .lines
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| matches(e))
            .collect()
    }

    /// The JSON log events whose message is `message`.
    fn events(&self, message: &str) -> Vec<Value> {
        self.lines_where(|e| e["message"] == message)
    }

    /// Waits until `n` events say `message`; the last of them.
    async fn wait_events(&mut self, message: &str, n: usize) -> Value {
        self.wait_lines(&format!("{message:?} ×{n}"), n, |e| {
            e["message"] == message
        })
        .await
    }

    /// Waits until `n` JSON lines match; the last of them.
    async fn wait_lines(
        &mut self,
        what: &str,
        n: usize,
        matches: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = tokio::time::Instant::now() + POOL_WAIT;
        loop {
            self.seen.borrow_and_update();
            let found = self.lines_where(&matches);
            if found.len() >= n {
                return found[n - 1].clone();
            }
            let closed = *self.log.closed.lock().unwrap();
            assert!(
                !closed,
                "the controller ended before logging {what}:\n{}",
                self.text()
            );
            if tokio::time::timeout_at(deadline, self.seen.changed())
                .await
                .is_err()
            {
                panic!("no {what} in time:\n{}", self.text());
            }
        }
    }

    /// Waits for a scaling-metric line (embedded metric format) saying `idle` (1 or 0).
    async fn wait_pool_metric(&mut self, idle: u64) -> Value {
        self.wait_lines(&format!("IdleWarmTasks={idle}"), 1, |e| {
            e["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "Wallcrawler"
                && e["Pool"] == "test-pool"
                && e["IdleWarmTasks"] == idle
                && e["WarmTasks"] == 1
        })
        .await
    }

    async fn wait_event(&mut self, message: &str) -> Value {
        self.wait_events(message, 1).await
    }

    /// Warm: Chrome up, waiting on the queue.
    async fn warm(mut self) -> PoolTask {
        self.wait_event("warm; waiting for a claim").await;
        self
    }

    fn signal(&self, sig: Signal) {
        let pid = self.child.id().expect("the controller is running");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig).unwrap();
    }

    async fn exit(&mut self) -> ExitStatus {
        match tokio::time::timeout(POOL_WAIT, self.child.wait()).await {
            Ok(status) => status.unwrap(),
            Err(_) => panic!("the controller did not exit in time:\n{}", self.text()),
        }
    }

    fn is_running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// Plays ECS after a release: once moto has the task's `StopTask` (desired status
    /// STOPPED, the API's reason), the controller gets SIGTERM, as ECS sends it. Its exit.
    async fn stopped_by_ecs(&mut self, f: &Fixture) -> ExitStatus {
        let deadline = Instant::now() + POOL_WAIT;
        loop {
            let task = f.task(&self.arn).await;
            if task.desired_status() == Some("STOPPED") {
                assert_eq!(task.stopped_reason(), Some("released by API"));
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the release never stopped the task {}",
                self.arn
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.signal(Signal::SIGTERM);
        self.exit().await
    }
}

impl PoolTask {
    /// Waits until the SDK logs "transmitting request" after "warm": the first long poll is on
    /// the wire (needs `aws_smithy_runtime::client::orchestrator=trace`).
    async fn receive_in_flight(&mut self) {
        let deadline = Instant::now() + POOL_WAIT;
        loop {
            let sent = {
                let lines = self.log.lines.lock().unwrap();
                let warm = lines
                    .iter()
                    .position(|l| l.contains("warm; waiting for a claim"));
                warm.is_some_and(|w| {
                    lines[w..]
                        .iter()
                        .any(|l| l.contains("transmitting request"))
                })
            };
            if sent {
                return;
            }
            assert!(Instant::now() < deadline, "no receive:\n{}", self.text());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for PoolTask {
    fn drop(&mut self) {
        if std::thread::panicking() || std::env::var_os("POOL_TEST_LOGS").is_some() {
            eprintln!("--- pool task {} ---\n{}", self.arn, self.text());
        }
    }
}

/// `node tests/node/<script> <args>`: the last JSON line it printed, asserted ok.
async fn node(script: &str, args: &[&str]) -> Value {
    let mut cmd = tokio::process::Command::from(wallcrawler_testkit::node::command(script));
    // The script's own deadline first (it then says where it was), ours as a backstop.
    let out = tokio::time::timeout(
        POOL_WAIT * 2,
        cmd.args(args)
            .args(["--timeout-ms", "90000"])
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the node client finished")
    .unwrap();
    let v = wallcrawler_testkit::node::last_json(
        script,
        &String::from_utf8_lossy(&out.stdout),
        &String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(v["ok"], true, "{script}: {v}");
    v
}

/// Puppeteer through `url`: a page, `1+1`, a screenshot.
async fn drive(url: &str) {
    let v = node("drive.mjs", &["--client", "puppeteer", "--url", url]).await;
    assert_eq!(v["eval"], 2, "{v}");
}

/// The session's connectUrl, checked to be this proxy's address with the session's token.
fn connect_url(v: &Value) -> String {
    let url = v["connectUrl"].as_str().unwrap_or_else(|| panic!("{v}"));
    let token = v["signingKey"].as_str().unwrap();
    assert!(
        url.starts_with("ws://127.0.0.1:") && url.ends_with(&format!("?signingKey={token}")),
        "{url}"
    );
    url.to_owned()
}

/// One `name value` line of a Prometheus text page.
fn gauge(page: &str, name: &str) -> f64 {
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in:\n{page}"))
}

// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_a_warm_task_serves_create_at_once_and_release_stops_it() {
    let pool = Pool::new(20).await;
    let mut task = pool
        .warm_task(TaskOptions {
            metrics: true,
            ..Default::default()
        })
        .await;
    let metrics_addr = task.wait_event("metrics listening").await["addr"]
        .as_str()
        .unwrap()
        .to_owned();
    // Warm, the proxy serves nobody yet: even a well-signed token is told "not ready".
    let proxy = task.wait_event("proxy listening").await["addr"]
        .as_str()
        .unwrap()
        .to_owned();
    let token = wallcrawler_contract::Claims::new(
        "sess_not_claimed_yet",
        &pool.f.project_id,
        wallcrawler_contract::time::unix_millis() / 1000,
        600,
    )
    .mint(&wallcrawler_testkit::keys::signing_key(SIGNING_KEY));
    let (status, _) = http(
        "GET",
        &format!("http://{proxy}/json/version?signingKey={token}"),
        &[],
        vec![],
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    // …while its health check passes (ECS keeps the warm task).
    let (status, health) = http("GET", &format!("http://{proxy}/health"), &[], vec![]).await;
    assert_eq!(
        (status, health.as_str()),
        (StatusCode::OK, "{\"status\":\"warm\"}\n")
    );
    let metrics_url = format!("http://{metrics_addr}/metrics");
    let (_, page) = http("GET", &metrics_url, &[], vec![]).await;
    assert!(
        gauge(&page, "wallcrawler_pool_warmup_seconds") > 0.0,
        "{page}"
    );
    assert_eq!(gauge(&page, "wallcrawler_pool_idle_seconds"), 0.0);
    assert_eq!(gauge(&page, "wallcrawler_pool_claim_to_ready_seconds"), 0.0);
    // A warm task is not protected from scale-in: the service's scale-in takes idle tasks.
    assert!(task.agent.lock().unwrap().is_empty());
    // It counts itself idle in the pool's scaling metric…
    task.wait_pool_metric(1).await;

    let (id, url) = pool.served_at_once(&mut task).await;
    // …and busy once claimed.
    task.wait_pool_metric(0).await;
    assert_eq!(
        text(&pool.f.item(&id).await, "publicIP").as_deref(),
        Some("127.0.0.1")
    );
    // Claimed, it is protected until its session cannot last longer (expiry + shutdown).
    let protected = task.wait_event("task protected from scale-in").await;
    let minutes = protected["minutes"].as_u64().unwrap();
    assert!((1..=2880).contains(&minutes), "{protected}");
    assert_eq!(
        *task.agent.lock().unwrap(),
        vec![format!(
            "PUT /api/pool-task/task-protection/v1/state {}",
            json!({"ExpiresInMinutes": minutes, "ProtectionEnabled": true})
        )]
    );

    drive(&url).await;
    let (_, page) = http("GET", &metrics_url, &[], vec![]).await;
    assert!(
        gauge(&page, "wallcrawler_pool_idle_seconds") > 0.0,
        "{page}"
    );
    assert!(gauge(&page, "wallcrawler_pool_claim_to_ready_seconds") > 0.0);

    pool.released_and_ended(&mut task, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_a_context_is_restored_and_saved_across_tasks() {
    let pool = Pool::new(20).await;
    let (a, b) = tokio::join!(pool.task(), pool.task());
    let (a, b) = tokio::join!(a.warm(), b.warm());
    let mut tasks = [a, b];
    let ctx = pool.new_context().await;
    let body =
        json!({"keepAlive": true, "browserSettings": {"context": {"id": ctx, "persist": true}}});

    let first = pool.create(body.clone()).await;
    assert_eq!(first["status"], "RUNNING", "{first}");
    let first_id = first["id"].as_str().unwrap().to_owned();
    let wrote = node(
        "context.mjs",
        &["--url", &connect_url(&first), "--mode", "write"],
    )
    .await;
    assert_eq!(wrote["cookies"]["persistent"], "p-value", "{wrote}");
    let arn1 = text(&pool.f.item(&first_id).await, "ecsTaskArn").unwrap();
    let i = tasks
        .iter()
        .position(|t| t.arn == arn1)
        .expect("one of ours");
    pool.released_and_stopped(&mut tasks[i], &first_id).await;
    assert_eq!(tasks[i].events("profile saved").len(), 1);
    pool.ended(&first_id).await;

    let second = pool.create(body).await;
    assert_eq!(second["status"], "RUNNING", "{second}");
    let second_id = second["id"].as_str().unwrap().to_owned();
    let arn2 = text(&pool.f.item(&second_id).await, "ecsTaskArn").unwrap();
    let j = 1 - i;
    assert_eq!(
        arn2, tasks[j].arn,
        "the other task serves the second session"
    );
    assert_eq!(tasks[j].events("profile restored").len(), 1);
    let back = node(
        "context.mjs",
        &["--url", &connect_url(&second), "--mode", "read"],
    )
    .await;
    assert_eq!(back["cookies"]["persistent"], "p-value", "{back}");
    assert_eq!(back["cookies"]["session"], "s-value", "{back}");
    assert_eq!(back["localStorage"], "ls-value", "{back}");
    pool.released_and_stopped(&mut tasks[j], &second_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_simultaneous_creates_get_a_task_each() {
    let pool = Pool::new(20).await;
    let (a, b) = tokio::join!(pool.task(), pool.task());
    let (a, b) = tokio::join!(a.warm(), b.warm());
    let mut tasks = [a, b];
    let (one, two) = tokio::join!(
        pool.create(json!({"keepAlive": true})),
        pool.create(json!({"keepAlive": true}))
    );
    let mut arns = Vec::new();
    for v in [&one, &two] {
        assert_eq!(v["status"], "RUNNING", "{v}");
        connect_url(v);
        let item = pool.f.item(v["id"].as_str().unwrap()).await;
        arns.push(text(&item, "ecsTaskArn").unwrap());
    }
    arns.sort();
    let mut ours = vec![tasks[0].arn.clone(), tasks[1].arn.clone()];
    ours.sort();
    assert_eq!(arns, ours, "one session on each task");
    drive(&connect_url(&two)).await;
    // Each task's proxy is bound to its own session: the other session's token is refused.
    let version = |proxy: &Value, token: &Value| {
        let port = proxy["connectUrl"]
            .as_str()
            .unwrap()
            .split(['?', ':'])
            .nth(2)
            .unwrap()
            // ws://127.0.0.1:<port>/?signingKey=…
            .trim_end_matches('/');
        format!(
            "http://127.0.0.1:{port}/json/version?signingKey={}",
            token["signingKey"].as_str().unwrap()
        )
    };
    let (own, _) = http("GET", &version(&one, &one), &[], vec![]).await;
    assert_eq!(own, StatusCode::OK);
    let (other, _) = http("GET", &version(&one, &two), &[], vec![]).await;
    assert_eq!(other, StatusCode::UNAUTHORIZED);
    for v in [&one, &two] {
        pool.release(v["id"].as_str().unwrap()).await;
    }
    for t in &mut tasks {
        let status = t.stopped_by_ecs(&pool.f).await;
        assert_eq!(status.code(), Some(0), "{}", t.text());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_a_task_killed_before_ready_leaves_its_claim_to_another() {
    let pool = Pool::new(1).await;
    // A task whose Chrome never comes up on the claimed context's profile, with a short
    // visibility timeout for the claim it takes.
    let chrome = pool.chrome_stuck_on_claimed_profiles();
    let (mut doomed, id) = pool.in_bring_up(chrome, 2).await;
    doomed.child.start_kill().unwrap();
    assert!(!doomed.exit().await.success());
    assert!(doomed.events("claimed session READY").is_empty());
    let item = pool.f.item(&id).await;
    assert_eq!(
        text(&item, "internalStatus").as_deref(),
        Some("PROVISIONING"),
        "{item:?}"
    );

    let mut rescuer = pool.task().await;
    let v = pool.running(&id).await;
    rescuer.wait_event("claimed session READY").await;
    let item = pool.f.item(&id).await;
    assert_eq!(
        text(&item, "ecsTaskArn").as_deref(),
        Some(rescuer.arn.as_str())
    );
    drive(&connect_url(&v)).await;
    pool.claims_deleted().await;
    pool.released_and_stopped(&mut rescuer, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_a_slow_task_keeps_its_claim_from_the_others() {
    const VISIBILITY: u64 = 4;
    let pool = Pool::new(1).await;
    let ctx = pool.new_context().await;
    let mut slow = pool
        .warm_task(TaskOptions {
            chrome: Some(pool.chrome_failing_on_claimed_profiles_at_the_gate()),
            visibility_seconds: Some(VISIBILITY),
            rust_log: Some("info,wallcrawler_controller::modes::pool=debug"),
            ..Default::default()
        })
        .await;
    let v = pool
        .create(json!({"browserSettings": {"context": {"id": ctx}}}))
        .await;
    assert_eq!(v["status"], "PENDING", "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    slow.wait_event("claim taken").await;
    let mut other = pool.task().await.warm().await;
    // From the moment the other task waits on the queue, more than a visibility timeout
    // passes (three keeps, one every half of it) while the slow task is still bringing up.
    let kept = slow.events("claim kept").len();
    slow.wait_events("claim kept", kept + 3).await;
    assert!(
        other.events("claim taken").is_empty(),
        "a second task took the claim of a task still at work:\n{}",
        other.text()
    );

    // The slow task fails: the session is its own to fail, and no one else ever served it.
    pool.open_gate();
    assert_eq!(slow.exit().await.code(), Some(1), "{}", slow.text());
    let item = pool.ended(&id).await;
    assert_eq!(text(&item, "internalStatus").as_deref(), Some("FAILED"));
    assert!(
        text(&item, "terminationReason")
            .is_some_and(|r| r.contains("browser could not be started")),
        "{item:?}"
    );
    pool.claims_deleted().await;
    assert!(other.events("claim taken").is_empty(), "{}", other.text());

    // The other task, still warm, serves the next session.
    let next = pool.create(json!({"keepAlive": true})).await;
    let next = match next["status"].as_str() {
        Some("RUNNING") => next,
        _ => pool.running(next["id"].as_str().unwrap()).await,
    };
    let next_id = next["id"].as_str().unwrap();
    pool.assert_served_by(next_id, &other).await;
    pool.released_and_stopped(&mut other, next_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_a_session_released_before_its_claim_is_taken_is_never_served() {
    let pool = Pool::new(1).await;
    let v = pool.create(json!({})).await;
    assert_eq!(v["status"], "PENDING", "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    pool.release(&id).await;

    let mut task = pool.task().await;
    let dropped = task.wait_event("claim dropped").await;
    assert_eq!(dropped["session.id"], id.as_str(), "{dropped}");
    assert!(task.is_running(), "a dropped claim leaves the task warm");
    assert!(task.events("claim taken").is_empty(), "{}", task.text());
    pool.claims_deleted().await;
    let item = pool.ended(&id).await;
    assert_eq!(text(&item, "internalStatus").as_deref(), Some("STOPPED"));
    assert_eq!(text(&item, "status").as_deref(), Some("COMPLETED"));
    assert!(
        !item.contains_key("readyAt") && !item.contains_key("connectUrl"),
        "{item:?}"
    );

    // The same task, still warm, serves the next session.
    let next = pool.create(json!({"keepAlive": true})).await;
    let next = match next["status"].as_str() {
        Some("RUNNING") => next,
        _ => pool.running(next["id"].as_str().unwrap()).await,
    };
    pool.drive_and_release(&next, &mut task).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_a_claim_past_its_deadline_is_never_served_and_the_task_takes_the_next() {
    let pool = Pool::new(1).await;
    // Two sessions wait with no warm task; the first one's client has gone: its claim's
    // deadline has passed (the test moves it into the past rather than waiting a minute).
    let gone = pool.create(json!({})).await;
    assert_eq!(gone["status"], "PENDING", "{gone}");
    let gone = gone["id"].as_str().unwrap().to_owned();
    let past = wallcrawler_contract::time::unix_millis() / 1000 - 1;
    pool.f
        .dynamo()
        .update_item()
        .table_name(&pool.f.cfg.tables.sessions)
        .key("sessionId", AttributeValue::S(gone.clone()))
        .update_expression("SET claimDeadline = :d")
        .expression_attribute_values(":d", AttributeValue::N(past.to_string()))
        .send()
        .await
        .unwrap();
    let waiting = pool.create(json!({"keepAlive": true})).await;
    assert_eq!(waiting["status"], "PENDING", "{waiting}");
    let waiting = waiting["id"].as_str().unwrap().to_owned();

    // The task takes the lapsed claim first, ends its session and takes the next at once.
    let mut task = pool.task().await;
    let dropped = task.wait_event("claim dropped").await;
    assert_eq!(dropped["session.id"], gone.as_str(), "{dropped}");
    let v = pool.running(&waiting).await;
    pool.assert_served_by(&waiting, &task).await;
    let taken: Vec<String> = task
        .events("claim taken")
        .iter()
        .map(|e| e["span"]["session.id"].as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(
        taken,
        std::slice::from_ref(&waiting),
        "only the live claim is served"
    );
    let item = pool.f.item(&gone).await;
    assert_eq!(text(&item, "internalStatus").as_deref(), Some("TIMED_OUT"));
    assert_eq!(text(&item, "status").as_deref(), Some("TIMED_OUT"));
    assert_eq!(
        text(&item, "terminationReason").as_deref(),
        Some("no browser was available in time")
    );
    assert!(item.contains_key("endedAt"), "{item:?}");
    assert!(
        !item.contains_key("readyAt") && !item.contains_key("connectUrl"),
        "never served: {item:?}"
    );
    let (status, answer) = pool
        .f
        .call(Method::GET, &format!("/v1/sessions/{gone}"), None)
        .await;
    assert_eq!(
        (status, answer["status"].as_str()),
        (StatusCode::OK, Some("TIMED_OUT"))
    );
    drive(&connect_url(&v)).await;
    pool.released_and_stopped(&mut task, &waiting).await;
    pool.claims_deleted().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_with_no_warm_task_create_is_pending_and_the_next_task_serves_it() {
    let pool = Pool::new(1).await;
    let v = pool.create(json!({"keepAlive": true})).await;
    assert_eq!(v["status"], "PENDING", "{v}");
    assert!(v.get("connectUrl").is_none(), "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    assert_eq!(pool.messages(&pool.queue).await, (1, 0), "the claim waits");

    let mut task = pool.task().await;
    let v = pool.running(&id).await;
    drive(&connect_url(&v)).await;
    pool.assert_served_by(&id, &task).await;
    pool.released_and_stopped(&mut task, &id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_a_poison_claim_goes_to_the_dead_letter_queue() {
    let pool = Pool::new(20).await;
    let garbage = "{\"sessionId\": \"../../poison-marker\", this is not a claim";
    pool.sqs
        .send_message()
        .queue_url(&pool.queue)
        .message_body(garbage)
        .send()
        .await
        .unwrap();
    let mut task = pool.task().await.warm().await;
    let refused = task
        .wait_event("a claim was refused; it goes toward the dead-letter queue")
        .await;
    assert!(
        !task.text().contains("poison-marker"),
        "the claim's content is not logged: {refused}"
    );
    let deadline = Instant::now() + POOL_WAIT;
    let dead = loop {
        let got = pool
            .sqs
            .receive_message()
            .queue_url(&pool.dlq)
            .wait_time_seconds(1)
            .send()
            .await
            .unwrap();
        if let Some(m) = got.messages().first() {
            break m.body().unwrap().to_owned();
        }
        assert!(
            Instant::now() < deadline,
            "nothing reached the DLQ:\n{}",
            task.text()
        );
    };
    assert_eq!(dead, garbage);
    pool.claims_deleted().await;
    assert!(task.is_running());

    let v = pool.create(json!({"keepAlive": true})).await;
    assert_eq!(v["status"], "RUNNING", "{v}");
    pool.drive_and_release(&v, &mut task).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_a_task_dying_after_ready_has_its_session_ended_by_the_task_state_handler() {
    let pool = Pool::new(20).await;
    let mut task = pool.task().await;
    let v = pool.create(json!({"keepAlive": true})).await;
    assert_eq!(v["status"], "RUNNING", "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    drive(&connect_url(&v)).await;
    // The task dies as an OOM kill does: no terminal status, no endedAt of its own.
    task.signal(Signal::SIGKILL);
    task.exit().await;
    let item = pool.f.item(&id).await;
    assert_eq!(text(&item, "internalStatus").as_deref(), Some("READY"));
    assert!(!item.contains_key("endedAt"), "{item:?}");

    // ECS reports the stop of a service task: startedBy names the service, not the session.
    let at = wallcrawler_contract::time::now_iso8601();
    let handle = async |arn: &str| {
        let event = stopped_event(arn, Some("ecs-svc/1234567890"), None);
        pool.f.task_stopped(&event, &at).await
    };
    // A pool task that never served (idle lifetime over) is none of the handler's business.
    let idle = ecs_task(&pool.f).await;
    assert_eq!(
        handle(&idle).await,
        TaskEventOutcome::Ignored("the task serves no session")
    );
    // The GSI is eventually consistent; moto's is immediate, and READY is long written anyway.
    assert_eq!(
        handle(&task.arn).await,
        TaskEventOutcome::Failed(id.clone())
    );
    let item = pool.f.item(&id).await;
    assert_eq!(text(&item, "internalStatus").as_deref(), Some("FAILED"));
    assert_eq!(text(&item, "endedAt").as_deref(), Some(at.as_str()));
}

/// A release whose StopTask never reaches the controller (ECS failed it; or the release read
/// the item before READY and named no task): nobody signals the task, yet it sees its item
/// STOPPED at its next read (`ITEM_WATCH_SECONDS`, 5 s by default) and ends the session
/// itself — its proxy refuses connections within seconds, it exits 0, the item keeps the
/// release's STOPPED and gets `endedAt`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_a_release_whose_stop_never_reaches_the_task_still_ends_it() {
    let pool = Pool::new(20).await;
    let mut task = pool.warm_task(TaskOptions::default()).await;
    let (id, url) = pool.served_at_once(&mut task).await;
    drive(&url).await;
    let proxy = url
        .trim_start_matches("ws://")
        .split(['?', '/'])
        .next()
        .unwrap()
        .to_owned();
    // The API writes STOPPED and asks moto to stop the task; nothing plays ECS's SIGTERM.
    pool.release(&id).await;
    let status = tokio::time::timeout(Duration::from_secs(30), task.child.wait())
        .await
        .unwrap_or_else(|_| panic!("still serving 30 s after the release:\n{}", task.text()))
        .unwrap();
    assert_eq!(status.code(), Some(0), "{}", task.text());
    assert!(
        tokio::net::TcpStream::connect(&proxy).await.is_err(),
        "the proxy at {proxy} still accepts connections"
    );
    let seen = task.events("the session item turned terminal elsewhere; ending the session");
    assert_eq!(seen.len(), 1, "{}", task.text());
    assert_eq!(seen[0]["status"], "STOPPED");
    let item = pool.ended(&id).await;
    assert_eq!(text(&item, "internalStatus").as_deref(), Some("STOPPED"));
    assert_eq!(text(&item, "status").as_deref(), Some("COMPLETED"));
    assert!(!item.contains_key("terminationReason"), "{item:?}");
}

impl Pool {
    /// A warm task with `chrome` and a claim visibility of `visibility` seconds, which takes
    /// the claim of a new keepAlive session with a context and is starting Chrome on the
    /// claimed profile (its second "chrome started"). The task and the session's id.
    async fn in_bring_up(&self, chrome: PathBuf, visibility: u64) -> (PoolTask, String) {
        let ctx = self.new_context().await;
        let mut task = self
            .warm_task(TaskOptions {
                chrome: Some(chrome),
                visibility_seconds: Some(visibility),
                ..Default::default()
            })
            .await;
        let v = self
            .create(json!({"keepAlive": true, "browserSettings": {"context": {"id": ctx}}}))
            .await;
        let id = v["id"].as_str().unwrap().to_owned();
        task.wait_event("claim taken").await;
        task.wait_events("chrome started", 2).await;
        (task, id)
    }

    /// A new task serves session `id` within `within` (well under the claim's visibility: its
    /// claim was handed back, not left hidden); its browser is driven, then it is released
    /// and ended.
    async fn served_by_another_task(&self, id: &str, within: Duration) {
        let handed = Instant::now();
        let mut rescuer = self.task().await;
        rescuer.wait_event("claimed session READY").await;
        assert!(
            handed.elapsed() < within,
            "served only after {:?}",
            handed.elapsed()
        );
        let v = self.running(id).await;
        self.assert_served_by(id, &rescuer).await;
        drive(&connect_url(&v)).await;
        self.claims_deleted().await;
        self.released_and_ended(&mut rescuer, id).await;
    }

    /// Sends `claim` to the pool's queue, as the API does (a second copy: SQS delivers at
    /// least once, and the SDK retries a `SendMessage` that timed out).
    async fn send_claim(&self, claim: &Claim) {
        self.sqs
            .send_message()
            .queue_url(&self.queue)
            .message_body(claim.to_json())
            .send()
            .await
            .unwrap();
    }

    /// Waits until each of `tasks` has either taken a claim or handed one back; asserts exactly
    /// one took it. The index of the one that did.
    async fn one_took(&self, tasks: &[PoolTask]) -> usize {
        let deadline = Instant::now() + POOL_WAIT;
        let logs = || {
            tasks
                .iter()
                .map(PoolTask::text)
                .collect::<Vec<_>>()
                .join("\n---\n")
        };
        loop {
            let took: Vec<bool> = tasks
                .iter()
                .map(|t| !t.events("claim taken").is_empty())
                .collect();
            let back = |i: usize| !tasks[i].events("claim handed back").is_empty();
            if (0..tasks.len()).all(|i| took[i] || back(i)) {
                let owners: Vec<usize> = (0..tasks.len()).filter(|&i| took[i]).collect();
                assert_eq!(owners.len(), 1, "one owner per session:\n{}", logs());
                return owners[0];
            }
            assert!(
                Instant::now() < deadline,
                "the claims were not both taken:\n{}",
                logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A claim delivered twice with two warm tasks: exactly one task takes the session (its
/// `owner`, its `ecsTaskArn`) and serves it; the other hands its copy back (never deleting
/// it: were the owner to die before READY, it is how the session would be served) and writes
/// nothing — the session is never ended under the task serving it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_a_claim_delivered_twice_has_one_owner_and_the_other_task_writes_nothing() {
    let pool = Pool::new(1).await;
    let ctx = pool.new_context().await;
    // Both bring-ups (if there were two) are held before READY until the test opens the gate.
    let chrome = pool.chrome_held_on_claimed_profiles_at_the_gate();
    let held = || TaskOptions {
        chrome: Some(chrome.clone()),
        ..Default::default()
    };
    let (a, b) = tokio::join!(pool.warm_task(held()), pool.warm_task(held()));
    let mut tasks = [a, b];
    let v = pool
        .create(json!({"keepAlive": true, "browserSettings": {"context": {"id": ctx}}}))
        .await;
    let id = v["id"].as_str().unwrap().to_owned();
    let project = pool.f.project_id.clone();
    pool.send_claim(&Claim {
        session_id: id.clone(),
        context: Some(ClaimContext {
            key: wallcrawler_contract::storage::profile_key(&project, &ctx),
            id: ctx,
            persist: false,
        }),
        project_id: project,
        extension_key: None,
        egress: None,
        browser: None,
    })
    .await;
    let w = pool.one_took(&tasks).await;
    let item = pool.f.item(&id).await;
    assert_eq!(text(&item, "owner").as_deref(), Some(tasks[w].arn.as_str()));
    assert_eq!(
        text(&item, "ecsTaskArn").as_deref(),
        Some(tasks[w].arn.as_str()),
        "a release stops the owner even before READY"
    );

    pool.open_gate();
    tasks[w].wait_event("claimed session READY").await;
    let v = pool.running(&id).await;
    drive(&connect_url(&v)).await;
    let item = pool.f.item(&id).await;
    assert_eq!(
        text(&item, "internalStatus").as_deref(),
        Some("READY"),
        "{item:?}"
    );
    assert_eq!(text(&item, "owner").as_deref(), Some(tasks[w].arn.as_str()));
    assert!(
        !item.contains_key("endedAt")
            && !item.contains_key("terminationReason")
            && !item.contains_key("ownerUntil"),
        "{item:?}"
    );
    let other = &mut tasks[1 - w];
    assert!(
        other.is_running(),
        "the other task stays warm:\n{}",
        other.text()
    );
    assert!(other.events("claimed session READY").is_empty());
    pool.released_and_ended(&mut tasks[w], &id).await;
}

/// A task stopped (SIGTERM) while its long poll is in flight: the poll is finished, not
/// dropped (SQS may still answer it with a claim, which would then stay hidden for the
/// visibility timeout), and a claim it brings is handed back at once: another task serves the
/// session within seconds, and the stopped one never touched it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_a_task_stopped_while_polling_hands_its_claim_back() {
    const VISIBILITY: u64 = 300;
    let pool = Pool::new(1).await;
    let mut stopped = pool
        .warm_task(TaskOptions {
            visibility_seconds: Some(VISIBILITY),
            // The SDK's "transmitting request" (trace): its receive is on the wire.
            rust_log: Some("info,aws_smithy_runtime::client::orchestrator=trace"),
            ..Default::default()
        })
        .await;
    stopped.receive_in_flight().await;
    // Not what the outcome waits on (with the receive finished, any order passes): the only
    // way to know the poll has reached the queue, which the old code's dropped poll needs to
    // swallow the claim.
    tokio::time::sleep(Duration::from_secs(1)).await;
    stopped.signal(Signal::SIGTERM);
    let v = pool.create(json!({"keepAlive": true})).await;
    let id = v["id"].as_str().unwrap().to_owned();
    assert_eq!(stopped.exit().await.code(), Some(0), "{}", stopped.text());
    assert!(
        stopped.events("claim taken").is_empty(),
        "{}",
        stopped.text()
    );
    let item = pool.f.item(&id).await;
    assert!(
        !item.contains_key("owner") && !item.contains_key("endedAt"),
        "{item:?}"
    );

    pool.served_by_another_task(&id, Duration::from_secs(VISIBILITY / 5))
        .await;
    // Its poll brought the claim, which it handed back rather than keep hidden.
    assert_eq!(
        stopped.events("claim handed back").len(),
        1,
        "{}",
        stopped.text()
    );
}

/// A task stopped (SIGTERM) while it brings a claimed session up (before READY): its Chrome
/// closed, the session given up and the claim handed back at once; another task serves it, and
/// the session never went terminal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_a_task_stopped_during_bring_up_hands_its_claim_back() {
    const VISIBILITY: u64 = 300;
    let pool = Pool::new(1).await;
    // Held at the gate: the Chrome on the claimed profile is being started.
    let chrome = pool.chrome_held_on_claimed_profiles_at_the_gate();
    let (mut stopped, id) = pool.in_bring_up(chrome, VISIBILITY).await;
    stopped.signal(Signal::SIGTERM);
    assert_eq!(stopped.exit().await.code(), Some(0), "{}", stopped.text());
    let item = pool.f.item(&id).await;
    assert_eq!(
        text(&item, "internalStatus").as_deref(),
        Some("PROVISIONING"),
        "{item:?}"
    );
    assert!(
        stopped
            .events("the session is given up for another controller")
            .len()
            == 1,
        "{}",
        stopped.text()
    );
    assert!(
        !item.contains_key("endedAt")
            && !item.contains_key("owner")
            && !item.contains_key("ecsTaskArn"),
        "given up, neither served nor ended: {item:?}"
    );

    pool.served_by_another_task(&id, Duration::from_secs(VISIBILITY / 5))
        .await;
}

/// On ECS (task metadata given) a pool task that cannot read its task ARN never goes warm: it
/// would announce READY without the ARN a release stops it by.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_a_task_without_its_task_arn_never_goes_warm() {
    let pool = Pool::new(1).await;
    // A loopback port nothing listens on: the metadata endpoint does not answer.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let uri = format!("http://{}/v4/gone", closed.local_addr().unwrap());
    drop(closed);
    let o = TaskOptions {
        metadata_uri: Some(uri),
        ..Default::default()
    };
    let mut task = PoolTask::start(&pool, o).await;
    assert_eq!(task.exit().await.code(), Some(1), "{}", task.text());
    assert!(task.events("warm; waiting for a claim").is_empty());
    assert!(
        task.text()
            .contains("the ECS task metadata gave no task ARN"),
        "{}",
        task.text()
    );
}
