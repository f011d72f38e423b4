//! The control plane's HTTP contract (SPEC §8), driven through the one router over the
//! in-memory ports: every endpoint, every refusal with its exact status and a Browserbase-shaped
//! error body (`{"statusCode","error","message"}`) whose message names what was wrong.
//!
//! `GET /v1/sessions/{id}/debug` for a *running* session reads the page list from the session's
//! proxy: here a loopback stand-in answering `/json/list` as the proxy does (the shape, the
//! session token it must be asked with), for the live view's URLs and credentials; the
//! platform tests (`local_e2e`) run it against a real controller and Chromium.
//!
//! The tests that wait out a create's budget run on paused time (`start_paused`): the handlers'
//! deadlines are on tokio's clock, which then moves on at once whenever every task waits.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tokio::time::Instant;
use tower::ServiceExt;
use wallcrawler_contract::session::MAX_SHUTDOWN_BUDGET_SECONDS;
use wallcrawler_contract::session_doc::SessionDoc;
use wallcrawler_contract::time::{iso8601_millis, parse_iso8601};
use wallcrawler_contract::token::{self, Validation};
use wallcrawler_contract::viewer;
use wallcrawler_contract::{InternalStatus, SdkStatus, TokenError, VerifyingKey};
use wallcrawler_control_plane::app::{App, Settings};
use wallcrawler_control_plane::error::StoreError;
use wallcrawler_control_plane::handlers::NEXT_CURSOR;
use wallcrawler_control_plane::memory::{
    LaunchBehaviour, MemArchives, MemContexts, MemKeys, MemLauncher, MemObjects, MemProjects,
    MemSessions, MemSlots,
};
use wallcrawler_control_plane::model::{ApiKeyRecord, ContextRecord, Project, hash_api_key};
use wallcrawler_control_plane::router::router;
use wallcrawler_control_plane::stores::{
    Clock, DocWrite, Ids, LaunchSpec, Launcher, Listing, PageAt, SessionStore, StaticSigner,
    StoreResult, Terminal, Usage,
};
use wallcrawler_testkit::keys::{public_key, signing_key};

// ---------------------------------------------------------------------------------------------
// Fixture: projects, keys, a clock that only moves when told, and the router over it all.

/// 2027-01-15T08:00:00.000Z: whole seconds, so second and millisecond arithmetic agree.
const T0: u64 = 1_800_000_000_000;
/// The name of the signer's key pair ([`wallcrawler_testkit::keys`]).
const SIGNING_KEY: &str = "handler-tests-signing-key";

/// Key of proj_a that may also select proj_b.
const KEY_A: &str = "wc_key_a";
/// Key of proj_other, a stranger to KEY_A.
const KEY_OTHER: &str = "wc_key_other";
/// An INACTIVE key of proj_a.
const KEY_REVOKED: &str = "wc_key_revoked";
/// An ACTIVE key whose project is INACTIVE.
const KEY_OFF: &str = "wc_key_off";
/// An ACTIVE key of proj_a that also lists proj_off (INACTIVE).
const KEY_MIXED: &str = "wc_key_mixed";

const PROJ_A: &str = "proj_a";
const PROJ_B: &str = "proj_b";
const PROJ_OTHER: &str = "proj_other";
const PROJ_OFF: &str = "proj_off";

/// proj_a's defaultTimeout and concurrency.
const DEFAULT_TIMEOUT: u64 = 900;
const CONCURRENCY: u64 = 3;

/// Counts of the sessions store's listings.
#[derive(Default)]
struct Listings {
    by_project: AtomicU64,
    by_context: AtomicU64,
}

/// A write to the sessions made by someone else (a controller) at a chosen moment.
type Interleaved = std::sync::Mutex<Option<Box<dyn FnOnce(&MemSessions) + Send>>>;

/// Writes that land around a terminal write, once each: just before it (after the caller's
/// read) and just after it — a controller writing READY with its task ARN at that moment.
#[derive(Default)]
struct Interleaving {
    before_terminal: Interleaved,
    after_terminal: Interleaved,
}

impl Interleaving {
    fn run(slot: &Interleaved, sessions: &MemSessions) {
        let write = slot.lock().unwrap().take();
        if let Some(write) = write {
            write(sessions);
        }
    }
}

/// The in-memory sessions store, yielding to the runtime before every call — as a real store
/// does while its request is in flight — so simultaneous requests interleave; and counting
/// listings (a create must look sessions up by key only).
struct Yielding {
    inner: MemSessions,
    listings: Arc<Listings>,
    interleaving: Arc<Interleaving>,
    /// Set: `get` answers that the table is unreachable (a 503 worth the client's retry).
    down: Arc<AtomicBool>,
}

#[async_trait::async_trait]
impl SessionStore for Yielding {
    async fn create(&self, doc: SessionDoc) -> DocWrite {
        tokio::task::yield_now().await;
        self.inner.create(doc).await
    }
    async fn get(&self, id: &str) -> StoreResult<Option<SessionDoc>> {
        tokio::task::yield_now().await;
        if self.down.load(Ordering::SeqCst) {
            return Err(StoreError::unavailable("the sessions table"));
        }
        self.inner.get(id).await
    }
    async fn list_project(&self, p: &str, at: PageAt) -> Listing {
        self.listings.by_project.fetch_add(1, Ordering::SeqCst);
        tokio::task::yield_now().await;
        self.inner.list_project(p, at).await
    }
    async fn on_context(&self, c: &str) -> Ids {
        self.listings.by_context.fetch_add(1, Ordering::SeqCst);
        tokio::task::yield_now().await;
        self.inner.on_context(c).await
    }
    async fn find_by_task(&self, t: &str) -> StoreResult<Option<String>> {
        self.inner.find_by_task(t).await
    }
    async fn mark_provisioning(&self, id: &str, arn: Option<&str>, at: &str) -> DocWrite {
        tokio::task::yield_now().await;
        self.inner.mark_provisioning(id, arn, at).await
    }
    async fn mark_terminal(&self, id: &str, to: Terminal<'_>, at: &str) -> DocWrite {
        tokio::task::yield_now().await;
        Interleaving::run(&self.interleaving.before_terminal, &self.inner);
        let written = self.inner.mark_terminal(id, to, at).await;
        Interleaving::run(&self.interleaving.after_terminal, &self.inner);
        written
    }
    async fn mark_ended_if_missing(&self, id: &str, at: &str) -> StoreResult<()> {
        tokio::task::yield_now().await;
        self.inner.mark_ended_if_missing(id, at).await
    }
    async fn extend_claim(&self, id: &str, to: u64) -> DocWrite {
        tokio::task::yield_now().await;
        self.inner.extend_claim(id, to).await
    }
    async fn end_unserved(&self, id: &str, now: u64, at: &str) -> DocWrite {
        tokio::task::yield_now().await;
        self.inner.end_unserved(id, now, at).await
    }
    async fn expiring(&self, status: SdkStatus, before: u64, limit: usize) -> Ids {
        tokio::task::yield_now().await;
        self.inner.expiring(status, before, limit).await
    }
    async fn count_usage(&self, id: &str, project_id: &str, used: Usage) -> StoreResult<bool> {
        tokio::task::yield_now().await;
        self.inner.count_usage(id, project_id, used).await
    }
    async fn usage(&self, project_id: &str) -> StoreResult<Usage> {
        self.inner.usage(project_id).await
    }
}

/// A clock the test sets.
struct TestClock(AtomicU64);

impl TestClock {
    fn set(&self, ms: u64) {
        self.0.store(ms, Ordering::SeqCst);
    }
}

impl Clock for TestClock {
    fn now_millis(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

struct Harness {
    router: Router,
    sessions: MemSessions,
    /// How often the handlers listed sessions (project GSI query, context GSI query).
    listings: Arc<Listings>,
    /// Writes a test interleaves with the handlers' own.
    interleaving: Arc<Interleaving>,
    /// Set: the sessions table's reads by key fail as unreachable.
    sessions_down: Arc<AtomicBool>,
    slots: MemSlots,
    contexts: MemContexts,
    archives: MemArchives,
    /// The contexts bucket's objects (extension archives and records).
    objects: MemObjects,
    launcher: MemLauncher,
    clock: Arc<TestClock>,
    settings: Settings,
}

fn project(id: &str, status: &str) -> Project {
    Project {
        project_id: id.to_owned(),
        name: format!("Project {id}"),
        owner_id: Some("owner_1".to_owned()),
        default_timeout: DEFAULT_TIMEOUT,
        concurrency: CONCURRENCY,
        status: status.to_owned(),
        created_at: iso8601_millis(T0 - 86_400_000),
        updated_at: iso8601_millis(T0 - 86_400_000),
    }
}

fn key(raw: &str, project_id: &str, project_ids: &[&str], status: &str) -> ApiKeyRecord {
    ApiKeyRecord {
        api_key_hash: hash_api_key(raw),
        key_id: Some(format!("key_{raw}")),
        project_id: project_id.to_owned(),
        project_ids: project_ids.iter().map(|s| (*s).to_owned()).collect(),
        name: None,
        status: status.to_owned(),
        created_at: iso8601_millis(T0 - 86_400_000),
    }
}

/// The test settings: creates wait up to `create_wait` for READY, polling every 10 ms.
fn waiting(create_wait: Duration) -> Settings {
    Settings {
        create_wait,
        poll_every: Duration::from_millis(10),
        ..Settings::default()
    }
}

impl Harness {
    /// A harness whose tasks end FAILED while starting (`FailingTask`); creates wait up to 1 s.
    fn with_failing_task() -> Self {
        let sessions = MemSessions::default();
        Self::with_launcher(
            sessions.clone(),
            MemLauncher::new(sessions.clone(), LaunchBehaviour::StayPending),
            Arc::new(FailingTask(sessions)),
            waiting(Duration::from_secs(1)),
        )
    }

    fn new(behaviour: LaunchBehaviour) -> Self {
        Self::with_settings(behaviour, waiting(Duration::from_millis(400)))
    }

    fn with_settings(behaviour: LaunchBehaviour, settings: Settings) -> Self {
        let sessions = MemSessions::default();
        let launcher = MemLauncher::new(sessions.clone(), behaviour);
        Self::with_launcher(sessions, launcher.clone(), Arc::new(launcher), settings)
    }

    fn with_launcher(
        sessions: MemSessions,
        launcher: MemLauncher,
        launch_port: Arc<dyn Launcher>,
        settings: Settings,
    ) -> Self {
        let projects = MemProjects::default();
        {
            let mut p = projects.0.lock().unwrap();
            for (id, status) in [
                (PROJ_A, "ACTIVE"),
                (PROJ_B, "ACTIVE"),
                (PROJ_OTHER, "ACTIVE"),
                (PROJ_OFF, "INACTIVE"),
            ] {
                p.insert(id.to_owned(), project(id, status));
            }
            p.get_mut(PROJ_B).unwrap().default_timeout = 120;
        }
        let keys = MemKeys::default();
        {
            let mut k = keys.0.lock().unwrap();
            for rec in [
                key(KEY_A, PROJ_A, &[PROJ_A, PROJ_B], "ACTIVE"),
                key(KEY_OTHER, PROJ_OTHER, &[], "ACTIVE"),
                key(KEY_REVOKED, PROJ_A, &[PROJ_A], "INACTIVE"),
                key(KEY_OFF, PROJ_OFF, &[PROJ_OFF], "ACTIVE"),
                key(KEY_MIXED, PROJ_A, &[PROJ_A, PROJ_OFF], "ACTIVE"),
            ] {
                k.insert(rec.api_key_hash.clone(), rec);
            }
        }
        let contexts = MemContexts::default();
        let slots = MemSlots::default();
        let listings = Arc::new(Listings::default());
        let interleaving = Arc::new(Interleaving::default());
        let sessions_down = Arc::new(AtomicBool::new(false));
        let archives = MemArchives::default();
        let objects = MemObjects::default();
        let clock = Arc::new(TestClock(AtomicU64::new(T0)));
        let app = App {
            sessions: Arc::new(Yielding {
                inner: sessions.clone(),
                listings: listings.clone(),
                interleaving: interleaving.clone(),
                down: sessions_down.clone(),
            }),
            projects: Arc::new(projects),
            slots: Arc::new(slots.clone()),
            keys: Arc::new(keys),
            contexts: Arc::new(contexts.clone()),
            archives: Arc::new(archives.clone()),
            objects: Arc::new(objects.clone()),
            launcher: launch_port,
            signer: Arc::new(StaticSigner(signing_key(SIGNING_KEY))),
            clock: clock.clone(),
            settings: settings.clone(),
        };
        Self {
            router: router(app),
            sessions,
            listings,
            interleaving,
            sessions_down,
            slots,
            contexts,
            archives,
            objects,
            launcher,
            clock,
            settings,
        }
    }

    /// One request; `key` goes in `x-wc-api-key`. Returns the status and the JSON body (Null
    /// when empty).
    async fn call(
        &self,
        method: Method,
        uri: &str,
        key: Option<&str>,
        body: Option<&str>,
    ) -> (StatusCode, Value) {
        let mut headers = Vec::new();
        if let Some(k) = key {
            headers.push(("x-wc-api-key", k));
        }
        self.call_with(method, uri, &headers, body).await
    }

    async fn call_with(
        &self,
        method: Method,
        uri: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> (StatusCode, Value) {
        let (status, _, value) = self.exchange(method, uri, headers, body).await;
        (status, value)
    }

    /// One request with `key`; the status and the `x-should-retry` header, if any.
    async fn retry_advice(
        &self,
        method: Method,
        uri: &str,
        key: Option<&str>,
        body: Option<&str>,
    ) -> (StatusCode, Option<String>) {
        let headers: Vec<_> = key.map(|k| ("x-wc-api-key", k)).into_iter().collect();
        let (status, h, _) = self.exchange(method, uri, &headers, body).await;
        let advice = h
            .get("x-should-retry")
            .map(|v| v.to_str().unwrap().to_owned());
        (status, advice)
    }

    async fn exchange(
        &self,
        method: Method,
        uri: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> (StatusCode, HeaderMap, Value) {
        let mut req = Request::builder().method(method).uri(uri);
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        let req = req.body(Body::from(body.unwrap_or("").to_owned())).unwrap();
        let resp = self.router.clone().oneshot(req).await.unwrap();
        let status = resp.status();
        let headers = resp.headers().clone();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                panic!(
                    "body of {status} is not JSON ({e}): {:?}",
                    String::from_utf8_lossy(&bytes)
                )
            })
        };
        (status, headers, value)
    }

    async fn get(&self, uri: &str) -> (StatusCode, Value) {
        self.call(Method::GET, uri, Some(KEY_A), None).await
    }

    async fn post(&self, uri: &str, body: &str) -> (StatusCode, Value) {
        self.call(Method::POST, uri, Some(KEY_A), Some(body)).await
    }

    /// `POST /v1/sessions` with `body` and `KEY_A`.
    async fn create(&self, body: &str) -> (StatusCode, Value) {
        self.post("/v1/sessions", body).await
    }

    /// `POST /v1/sessions` with `body` and `KEY_A`, for its project `project`
    /// (`x-wc-project-id`).
    async fn create_in(&self, project: &str, body: &str) -> (StatusCode, Value) {
        let headers = [("x-wc-api-key", KEY_A), ("x-wc-project-id", project)];
        self.call_with(Method::POST, "/v1/sessions", &headers, Some(body))
            .await
    }

    /// `n` creates with `body` sent at once; their answers in order.
    async fn create_at_once(&self, n: usize, body: &str) -> Vec<(StatusCode, Value)> {
        futures_util::future::join_all(
            (0..n).map(|_| self.call(Method::POST, "/v1/sessions", Some(KEY_A), Some(body))),
        )
        .await
    }

    /// `POST /v1/sessions/{id}` asking for its release, with `KEY_A`.
    async fn release(&self, id: &str) -> (StatusCode, Value) {
        self.post(
            &format!("/v1/sessions/{id}"),
            r#"{"status": "REQUEST_RELEASE"}"#,
        )
        .await
    }

    fn session(&self, id: &str) -> SessionDoc {
        self.sessions.0.lock().unwrap()[id].clone()
    }

    fn insert_session(&self, doc: SessionDoc) {
        self.sessions
            .0
            .lock()
            .unwrap()
            .insert(doc.session_id.clone(), doc);
    }

    fn insert_context(&self, id: &str, project_id: &str) -> ContextRecord {
        let c = ContextRecord {
            context_id: id.to_owned(),
            project_id: project_id.to_owned(),
            storage_key: wallcrawler_contract::storage::profile_key(project_id, id),
            status: "CREATED".to_owned(),
            created_at: iso8601_millis(T0 - 60_000),
            updated_at: iso8601_millis(T0 - 60_000),
            writer_session_id: None,
        };
        self.contexts
            .0
            .lock()
            .unwrap()
            .insert(id.to_owned(), c.clone());
        c
    }

    fn hold_slots(&self, project_id: &str, ids: &[&str]) {
        self.slots.0.lock().unwrap().insert(
            project_id.to_owned(),
            ids.iter().map(|s| (*s).to_owned()).collect(),
        );
    }

    /// The sessions holding the project's slots.
    fn held(&self, project_id: &str) -> Vec<String> {
        self.slots
            .0
            .lock()
            .unwrap()
            .get(project_id)
            .cloned()
            .unwrap_or_default()
    }

    /// The context's writer lease holder.
    fn writer(&self, context_id: &str) -> Option<String> {
        self.contexts.0.lock().unwrap()[context_id]
            .writer_session_id
            .clone()
    }

    fn launched(&self) -> Vec<LaunchSpec> {
        self.launcher.launched.lock().unwrap().clone()
    }

    fn stopped(&self) -> Vec<String> {
        self.launcher.stopped.lock().unwrap().clone()
    }

    /// The task ARN each stop named.
    fn stopped_tasks(&self) -> Vec<Option<String>> {
        self.launcher.stopped_tasks.lock().unwrap().clone()
    }
}

/// A hand-made session of `project_id` in `status`, created at `T0`.
fn doc(id: &str, project_id: &str, status: InternalStatus) -> SessionDoc {
    let mut d = SessionDoc {
        session_id: id.to_owned(),
        project_id: project_id.to_owned(),
        created_at: iso8601_millis(T0),
        started_at: Some(iso8601_millis(T0)),
        expires_at: T0 / 1000 + 3600,
        region: "us-east-1".to_owned(),
        ..Default::default()
    };
    d.set_status(status);
    if matches!(status, InternalStatus::Ready | InternalStatus::Active) {
        d.public_ip = Some("198.51.100.7".to_owned());
        d.signing_key = Some("token".to_owned());
        d.connect_url = Some("ws://198.51.100.7:9223?signingKey=token".to_owned());
    }
    d
}

/// A session of `PROJ_A` in `status` started with context `ctx`, persisting it or not.
fn using_context(id: &str, status: InternalStatus, ctx: &str, persist: bool) -> SessionDoc {
    let mut d = doc(id, PROJ_A, status);
    d.context_id = Some(ctx.to_owned());
    d.context_persist = Some(persist);
    d
}

/// A create body asking for context `id`, persisting or not (`None`: no `persist` field).
fn with_context(id: &str, persist: Option<bool>) -> String {
    let mut context = json!({ "id": id });
    if let Some(p) = persist {
        context["persist"] = json!(p);
    }
    json!({ "browserSettings": { "context": context } }).to_string()
}

/// The bodies of the created sessions among `answers`, and the other answers.
fn created_and_refused(
    answers: &[(StatusCode, Value)],
) -> (Vec<&Value>, Vec<&(StatusCode, Value)>) {
    let (created, refused): (Vec<_>, Vec<_>) =
        answers.iter().partition(|(s, _)| *s == StatusCode::CREATED);
    (created.into_iter().map(|(_, b)| b).collect(), refused)
}

/// Sets session `id`'s endedAt to `at`, as its controller does last, once its upload is done.
fn end_session(sessions: &MemSessions, id: &str, at: u64) {
    sessions.0.lock().unwrap().get_mut(id).unwrap().ended_at = Some(iso8601_millis(at));
}

/// A Browserbase error body with `status`, whose message contains every one of `needles`.
#[track_caller]
fn assert_error(got: &(StatusCode, Value), status: StatusCode, needles: &[&str]) {
    let (s, body) = got;
    assert_eq!(*s, status, "status; body: {body}");
    assert_eq!(body["statusCode"], status.as_u16(), "statusCode in {body}");
    assert_eq!(
        body["error"],
        status.canonical_reason().unwrap(),
        "error in {body}"
    );
    let message = body["message"]
        .as_str()
        .unwrap_or_else(|| panic!("no message in {body}"));
    for n in needles {
        assert!(
            message.contains(n),
            "message {message:?} does not mention {n:?}"
        );
    }
    assert_eq!(
        body.as_object().unwrap().len(),
        3,
        "only statusCode, error and message: {body}"
    );
}

fn millis(v: &Value) -> u64 {
    let s = v
        .as_str()
        .unwrap_or_else(|| panic!("{v} is not a timestamp string"));
    parse_iso8601(s).unwrap_or_else(|| panic!("{s:?} is not ISO 8601"))
}

fn validate<'a>(token: &'a str, session_id: &'a str, project_id: &'a str) -> token::Verified {
    token::validate(
        token,
        &[public_key(SIGNING_KEY)],
        &Validation {
            session_id,
            project_id: Some(project_id),
            leeway_seconds: 0,
            now: T0 / 1000,
        },
    )
    .expect("the minted token validates")
}

/// The token's payload as JSON (base64url without padding, decoded by hand to keep the
/// dependency list as it is).
fn token_payload(token: &str) -> Value {
    let payload = token.split('.').nth(1).expect("three parts");
    let mut bits = 0u32;
    let mut n = 0;
    let mut out = Vec::new();
    for c in payload.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            _ => panic!("not base64url: {c}"),
        };
        bits = (bits << 6) | u32::from(v);
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n) as u8);
        }
    }
    serde_json::from_slice(&out).expect("payload is JSON")
}

// ---------------------------------------------------------------------------------------------
// Authorisation.

#[tokio::test]
async fn no_key_is_401() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let r = h.call(Method::GET, "/v1/sessions", None, None).await;
    assert_error(
        &r,
        StatusCode::UNAUTHORIZED,
        &["missing API key", "x-wc-api-key"],
    );
}

#[tokio::test]
async fn unknown_key_is_401() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let r = h
        .call(Method::GET, "/v1/sessions", Some("wc_nobody"), None)
        .await;
    assert_error(&r, StatusCode::UNAUTHORIZED, &["unknown API key"]);
    assert!(
        !r.1["message"].as_str().unwrap().contains("wc_nobody"),
        "the raw key is never echoed"
    );
}

#[tokio::test]
async fn bb_api_key_header_is_accepted() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let (status, body) = h
        .call_with(
            Method::GET,
            "/v1/projects",
            &[("x-bb-api-key", KEY_A)],
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body[0]["id"], PROJ_A);
    // And it is checked like the other one.
    let r = h
        .call_with(
            Method::GET,
            "/v1/projects",
            &[("x-bb-api-key", "wc_nobody")],
            None,
        )
        .await;
    assert_error(&r, StatusCode::UNAUTHORIZED, &["unknown API key"]);
}

#[tokio::test]
async fn inactive_key_is_403() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let r = h
        .call(Method::GET, "/v1/sessions", Some(KEY_REVOKED), None)
        .await;
    assert_error(&r, StatusCode::FORBIDDEN, &["API key is not active"]);
}

#[tokio::test]
async fn inactive_project_is_403() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let r = h
        .call(Method::GET, "/v1/sessions", Some(KEY_OFF), None)
        .await;
    assert_error(&r, StatusCode::FORBIDDEN, &[PROJ_OFF, "not active"]);
}

#[tokio::test]
async fn project_header_selects_one_of_the_keys_projects() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let (status, body) = h.create_in(PROJ_B, "{}").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["projectId"], PROJ_B);
    // proj_b's own defaultTimeout applies.
    assert_eq!(
        millis(&body["expiresAt"]) - millis(&body["createdAt"]),
        120_000
    );
    assert_eq!(h.launched()[0].project_id, PROJ_B);
    // Listing with the header shows proj_b's sessions, without it proj_a's (none).
    let id = body["id"].as_str().unwrap();
    let (_, listed) = h
        .call_with(
            Method::GET,
            "/v1/sessions",
            &[("x-wc-api-key", KEY_A), ("x-wc-project-id", PROJ_B)],
            None,
        )
        .await;
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["id"], id);
    assert_eq!(h.get("/v1/sessions").await.1, json!([]));
}

#[tokio::test]
async fn project_header_of_a_project_the_key_does_not_list_is_403() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let r = h
        .call_with(
            Method::GET,
            "/v1/sessions",
            &[("x-wc-api-key", KEY_A), ("x-wc-project-id", PROJ_OTHER)],
            None,
        )
        .await;
    assert_error(
        &r,
        StatusCode::FORBIDDEN,
        &[PROJ_OTHER, "not one of this API key's projects"],
    );
}

#[tokio::test]
async fn body_project_id_differing_from_the_selected_one_is_403_on_session_create() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let r = h.create(&json!({ "projectId": PROJ_B }).to_string()).await;
    assert_error(
        &r,
        StatusCode::FORBIDDEN,
        &[PROJ_B, "not the selected project", PROJ_A],
    );
    assert!(h.launched().is_empty() && h.sessions.0.lock().unwrap().is_empty());
    // The selected project itself is fine.
    let (status, body) = h.create(&json!({ "projectId": PROJ_A }).to_string()).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

#[tokio::test]
async fn body_project_id_differing_from_the_selected_one_is_403_on_context_create() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let r = h
        .post(
            "/v1/contexts",
            &json!({ "projectId": PROJ_OTHER }).to_string(),
        )
        .await;
    assert_error(
        &r,
        StatusCode::FORBIDDEN,
        &[PROJ_OTHER, "not the selected project"],
    );
    assert!(h.contexts.0.lock().unwrap().is_empty());
}

#[tokio::test]
async fn body_project_id_differing_from_the_selected_one_is_403_on_session_update() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    h.insert_session(doc("sess_1", PROJ_A, InternalStatus::Ready));
    let r = h
        .post(
            "/v1/sessions/sess_1",
            &json!({ "status": "REQUEST_RELEASE", "projectId": PROJ_B }).to_string(),
        )
        .await;
    assert_error(
        &r,
        StatusCode::FORBIDDEN,
        &[PROJ_B, "not the selected project"],
    );
    assert_eq!(h.session("sess_1").status, "RUNNING");
    assert!(h.stopped().is_empty());
}

// ---------------------------------------------------------------------------------------------
// POST /v1/sessions.

#[tokio::test]
async fn create_answers_running_with_connect_url_when_ready() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let (status, body) = h
        .create(
            &json!({ "keepAlive": true, "region": "eu-central-1", "userMetadata": { "run": 7 } })
                .to_string(),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["status"], "RUNNING");
    let id = body["id"].as_str().unwrap();
    let uuid = id.strip_prefix("sess_").expect("id is sess_<uuid>");
    uuid::Uuid::parse_str(uuid).expect("a UUID after sess_");
    assert_eq!(body["projectId"], PROJ_A);
    assert_eq!(body["keepAlive"], true);
    assert_eq!(body["region"], "eu-central-1");
    assert_eq!(body["userMetadata"], json!({ "run": 7 }));
    assert_eq!(body["publicIp"], "203.0.113.10");
    assert_eq!(millis(&body["createdAt"]), T0);
    assert!(body["createdAt"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        millis(&body["expiresAt"]),
        T0 + DEFAULT_TIMEOUT * 1000,
        "expiresAt is an ISO string createdAt + the project's defaultTimeout"
    );
    let token = body["signingKey"].as_str().expect("signingKey");
    let connect = body["connectUrl"].as_str().expect("connectUrl");
    assert!(connect.starts_with("ws://203.0.113.10:9223"), "{connect}");
    assert!(connect.ends_with(token), "{connect}");
    validate(token, id, PROJ_A);

    let stored = h.session(id);
    assert_eq!(stored.internal_status, "READY");
    // The item holds no token (nor, so, does the table's stream): a read mints the same again.
    assert_eq!((stored.signing_key, stored.connect_url), (None, None));
    assert!(!format!("{:?}", h.session(id)).contains(token));
    let (status, again) = h.get(&format!("/v1/sessions/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        again["signingKey"], token,
        "the create's token, byte for byte"
    );
    assert_eq!(again["connectUrl"], connect);
    let launched = h.launched();
    assert_eq!(launched.len(), 1);
    assert_eq!(launched[0].session_id, id);
    assert_eq!(launched[0].project_id, PROJ_A);
    assert_eq!(launched[0].context, None);
}

#[tokio::test]
async fn behind_a_connect_gateway_create_answers_at_once_with_the_gateways_url() {
    let h = Harness::with_settings(
        LaunchBehaviour::StayPending,
        Settings {
            connect_base: Some("wss://connect.example.test".into()),
            ..waiting(Duration::from_secs(5))
        },
    );
    let started = Instant::now();
    let (status, body) = h.create("{}").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "no wait for READY: {:?}",
        started.elapsed()
    );
    assert_eq!(body["status"], "RUNNING", "{body}");
    let id = body["id"].as_str().unwrap().to_owned();
    let token = body["signingKey"].as_str().expect("signingKey");
    assert_eq!(
        body["connectUrl"],
        format!("wss://connect.example.test/?signingKey={token}")
    );
    validate(token, &id, PROJ_A);
    // Stored as it is: the task is still starting, with the gateway's base from the create on,
    // and no token.
    let stored = h.session(&id);
    assert_eq!(stored.internal_status, "PROVISIONING");
    assert_eq!(
        stored.connect_base.as_deref(),
        Some("wss://connect.example.test")
    );
    assert_eq!((stored.signing_key, stored.connect_url), (None, None));
    let (status, polled) = h.get(&format!("/v1/sessions/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(polled["status"], "RUNNING");
    assert_eq!(polled["connectUrl"], body["connectUrl"]);
}

#[tokio::test(start_paused = true)]
async fn create_answers_pending_without_connect_url_and_the_session_can_be_polled() {
    let h = Harness::new(LaunchBehaviour::StayPending);
    let started = Instant::now();
    let (status, body) = h.create("{}").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert!(
        started.elapsed() >= h.settings.create_wait - h.settings.poll_every,
        "waited its budget for READY"
    );
    assert_eq!(body["status"], "PENDING");
    assert!(body.get("connectUrl").is_none(), "{body}");
    assert!(body.get("signingKey").is_none(), "{body}");
    let id = body["id"].as_str().unwrap().to_owned();
    let stored = h.session(&id);
    assert_eq!(stored.internal_status, "PROVISIONING", "task left starting");
    assert_eq!(
        stored.ecs_task_arn.as_deref(),
        Some(format!("arn:test:task/{id}").as_str())
    );

    let (status, polled) = h.get(&format!("/v1/sessions/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(polled["status"], "PENDING");
    assert!(polled.get("connectUrl").is_none());

    // The controller announces READY; the next poll carries how to connect.
    {
        let mut m = h.sessions.0.lock().unwrap();
        let d = m.get_mut(&id).unwrap();
        d.set_status(InternalStatus::Ready);
        (d.public_ip, d.proxy_port) = (Some("192.0.2.1".to_owned()), Some(9223));
    }
    let (status, polled) = h.get(&format!("/v1/sessions/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(polled["status"], "RUNNING");
    let token = polled["signingKey"].as_str().unwrap();
    assert_eq!(
        polled["connectUrl"],
        format!("ws://192.0.2.1:9223/?signingKey={token}")
    );
    validate(token, &id, PROJ_A);
}

#[tokio::test(start_paused = true)]
async fn polls_move_a_pending_sessions_claim_deadline_within_its_cap_and_never_once_ready() {
    let h = Harness::with_settings(
        LaunchBehaviour::StayPending,
        Settings {
            claim_wait: wallcrawler_contract::claim::ClaimWait { wait: 60, max: 100 },
            ..waiting(Duration::from_millis(400))
        },
    );
    let t0 = T0 / 1000;
    let (status, body) = h.create("{}").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = body["id"].as_str().unwrap().to_owned();
    assert_eq!(h.session(&id).claim_deadline, Some(t0 + 60));
    let path = format!("/v1/sessions/{id}");
    for (at, want) in [(t0 + 10, t0 + 70), (t0 + 5, t0 + 70), (t0 + 90, t0 + 100)] {
        h.clock.set(at * 1000);
        let (status, _) = h.get(&path).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            h.session(&id).claim_deadline,
            Some(want),
            "a poll at +{}",
            at - t0
        );
    }
    h.sessions
        .0
        .lock()
        .unwrap()
        .get_mut(&id)
        .unwrap()
        .claim_deadline = Some(t0 + 1);
    h.sessions
        .0
        .lock()
        .unwrap()
        .get_mut(&id)
        .unwrap()
        .set_status(InternalStatus::Ready);
    h.get(&path).await;
    assert_eq!(
        h.session(&id).claim_deadline,
        Some(t0 + 1),
        "READY: unmoved"
    );
    // The first deadline never comes before the create's own wait for READY is over.
    let h = Harness::with_settings(
        LaunchBehaviour::StayPending,
        Settings {
            claim_wait: wallcrawler_contract::claim::ClaimWait { wait: 1, max: 100 },
            ..waiting(Duration::from_secs(20))
        },
    );
    let (_, body) = h.create("{}").await;
    let id = body["id"].as_str().unwrap();
    assert_eq!(h.session(id).claim_deadline, Some(T0 / 1000 + 20));
}

#[tokio::test]
async fn launcher_failure_is_503_and_the_session_failed() {
    let h = Harness::new(LaunchBehaviour::Fail);
    let r = h.create("{}").await;
    assert_error(
        &r,
        StatusCode::SERVICE_UNAVAILABLE,
        &["task launcher is unavailable"],
    );
    let all: Vec<SessionDoc> = h.sessions.0.lock().unwrap().values().cloned().collect();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].internal_status, "FAILED");
    assert_eq!(all[0].status, "ERROR");
    assert!(all[0].ended_at.is_some(), "no context stays busy");
    assert!(
        all[0]
            .termination_reason
            .as_deref()
            .unwrap()
            .contains("could not be started")
    );
}

/// Plays a controller whose browser never comes up: it ends its own session FAILED.
#[derive(Clone)]
struct FailingTask(MemSessions);

#[async_trait::async_trait]
impl Launcher for FailingTask {
    async fn launch(&self, spec: LaunchSpec) -> StoreResult<Option<String>> {
        let sessions = self.0.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            let mut m = sessions.0.lock().unwrap();
            let d = m.get_mut(&spec.session_id).unwrap();
            d.set_status(InternalStatus::Failed);
            d.termination_reason = Some("Chrome did not start".to_owned());
            d.ended_at = Some(iso8601_millis(T0));
        });
        Ok(Some("arn:test:task/failing".to_owned()))
    }
    async fn stop(&self, _: &str, _: Option<&str>) -> StoreResult<()> {
        Err(StoreError::failed("unused"))
    }
}

#[tokio::test]
async fn a_task_that_fails_while_starting_is_500_naming_its_reason() {
    let h = Harness::with_failing_task();
    let r = h.create("{}").await;
    assert_error(
        &r,
        StatusCode::INTERNAL_SERVER_ERROR,
        &["browser failed to start", "Chrome did not start"],
    );
}

#[tokio::test]
async fn create_accepts_browserbase_fields_and_names_those_it_does_not_implement() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    // What the Browserbase SDK and Stagehand send, with fields Wallcrawler does not implement
    // (an `extensionId` is checked: see the extensions module; the rest: the browser module).
    let body = json!({
        "projectId": PROJ_A,
        "browserSettings": {
            "viewport": { "width": 1280, "height": 720 },
            "fingerprint": {
                "browsers": ["chrome"], "devices": ["desktop"], "locales": ["en-US"],
                "operatingSystems": ["linux"], "screen": { "maxWidth": 1920 }
            },
            "blockAds": true,
            "solveCaptchas": false,
            "recordSession": true,
            "logSession": true,
            "advancedStealth": false
        },
        "apiTimeout": 30
    });
    let headers = [("x-wc-api-key", KEY_A)];
    let (status, named, resp) = h
        .exchange(
            Method::POST,
            "/v1/sessions",
            &headers,
            Some(&body.to_string()),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{resp}");
    assert_eq!(resp["status"], "RUNNING");
    // Accepted, never dropped without a word: what is not done is named (the viewport, the
    // locales, blockAds, logSession and recordSession are done; solveCaptchas false and
    // advancedStealth false ask for nothing; the fingerprint's lists name what the browser is).
    assert_eq!(
        named["x-wallcrawler-unsupported"],
        "apiTimeout,browserSettings.fingerprint.screen"
    );
    // `proxies` is honoured, never ignored (see the egress module): managed proxies without an
    // operator's pool are refused, not a session that egresses directly.
    let (status, resp) = h.create(r#"{"proxies": true, "keepAlive": false}"#).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{resp}");
}

#[tokio::test]
async fn create_accepts_an_empty_body() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let (status, body) = h
        .call(Method::POST, "/v1/sessions", Some(KEY_A), None)
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["status"], "RUNNING");
    assert_eq!(body["keepAlive"], false);
    assert_eq!(body["region"], "us-east-1", "the configured default region");
    assert_eq!(body["userMetadata"], json!({}));
}

#[tokio::test]
async fn create_with_malformed_json_is_400() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let r = h.create(r#"{"timeout": 60"#).await;
    assert_error(&r, StatusCode::BAD_REQUEST, &["invalid JSON body"]);
    let r = h.create("not json").await;
    assert_error(&r, StatusCode::BAD_REQUEST, &["invalid JSON body"]);
    assert!(h.launched().is_empty());
}

#[tokio::test]
async fn timeout_below_60_is_400() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let r = h.create(r#"{"timeout": 59}"#).await;
    assert_error(
        &r,
        StatusCode::BAD_REQUEST,
        &["timeout", "between 60 and 21600", "59"],
    );
    assert!(h.launched().is_empty());
}

#[tokio::test]
async fn timeout_above_21600_is_400() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let r = h.create(r#"{"timeout": 21601}"#).await;
    assert_error(
        &r,
        StatusCode::BAD_REQUEST,
        &["timeout", "between 60 and 21600", "21601"],
    );
}

#[tokio::test]
async fn timeout_bounds_60_and_21600_are_accepted() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    for t in [60u64, 21_600] {
        let (status, body) = h.create(&json!({ "timeout": t }).to_string()).await;
        assert_eq!(status, StatusCode::CREATED, "timeout {t}: {body}");
        assert_eq!(
            millis(&body["expiresAt"]) - millis(&body["createdAt"]),
            t * 1000
        );
        let v = validate(
            body["signingKey"].as_str().unwrap(),
            body["id"].as_str().unwrap(),
            PROJ_A,
        );
        assert_eq!(v.exp, (T0 / 1000 + t) as f64, "token exp for timeout {t}");
    }
}

#[tokio::test]
async fn non_integer_timeout_is_400() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    for t in [r#""300""#, "300.5", "-60", "true", "{}"] {
        let body = format!(r#"{{"timeout": {t}}}"#);
        let r = h.create(&body).await;
        assert_error(
            &r,
            StatusCode::BAD_REQUEST,
            &["timeout must be a whole number of seconds", t],
        );
    }
    assert!(h.launched().is_empty());
}

#[tokio::test]
async fn default_timeout_is_the_projects() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let (status, body) = h.create("{}").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let created = millis(&body["createdAt"]);
    let expires = millis(&body["expiresAt"]);
    assert_eq!(expires - created, DEFAULT_TIMEOUT * 1000);
    let id = body["id"].as_str().unwrap();
    assert_eq!(h.session(id).expires_at, T0 / 1000 + DEFAULT_TIMEOUT);
    let v = validate(body["signingKey"].as_str().unwrap(), id, PROJ_A);
    assert_eq!(v.exp, (T0 / 1000 + DEFAULT_TIMEOUT) as f64);
}

#[tokio::test]
async fn bad_region_is_400() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let r = h.create(r#"{"region": "mars-north-1"}"#).await;
    assert_error(
        &r,
        StatusCode::BAD_REQUEST,
        &["region must be one of", "us-west-2", "mars-north-1"],
    );
    assert!(h.launched().is_empty());
}

#[tokio::test]
async fn user_metadata_not_an_object_is_400() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    for m in [r#"[1, 2]"#, r#""tag""#, "42"] {
        let r = h.create(&format!(r#"{{"userMetadata": {m}}}"#)).await;
        assert_error(
            &r,
            StatusCode::BAD_REQUEST,
            &["userMetadata must be a JSON object"],
        );
    }
    assert!(h.launched().is_empty());
}

#[tokio::test]
async fn concurrency_reached_is_429() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    h.insert_session(doc("sess_1", PROJ_A, InternalStatus::Ready));
    h.insert_session(doc("sess_2", PROJ_A, InternalStatus::Provisioning));
    // Slot holders that are stale give their slot back when the project is full: an ended
    // session, an expired orphan whose task died without writing its end, one gone (TTL).
    h.insert_session(doc("sess_3", PROJ_A, InternalStatus::Stopped));
    h.insert_session(doc("sess_4", PROJ_OTHER, InternalStatus::Ready));
    let mut orphan = doc("sess_5", PROJ_A, InternalStatus::Ready);
    orphan.expires_at = T0 / 1000 - 1;
    h.insert_session(orphan);
    h.hold_slots(
        PROJ_A,
        &["sess_1", "sess_2", "sess_3", "sess_5", "sess_gone"],
    );
    h.hold_slots(PROJ_OTHER, &["sess_4"]);
    let (status, body) = h.create("{}").await;
    assert_eq!(status, StatusCode::CREATED, "the third of three: {body}");
    assert_eq!(
        h.held(PROJ_A),
        ["sess_1", "sess_2", body["id"].as_str().unwrap()]
    );
    let r = h.create("{}").await;
    assert_error(
        &r,
        StatusCode::TOO_MANY_REQUESTS,
        &[PROJ_A, "3 active sessions", "concurrency"],
    );
    assert_eq!(h.launched().len(), 1);
    assert_eq!(h.held(PROJ_OTHER), ["sess_4"], "another project's slots");
}

#[tokio::test(start_paused = true)]
async fn simultaneous_creates_never_exceed_the_concurrency_limit() {
    let h = Harness::new(LaunchBehaviour::StayPending);
    let answers = h.create_at_once(12, "{}").await;
    let (created, refused) = created_and_refused(&answers);
    assert_eq!(created.len(), CONCURRENCY as usize, "{answers:?}");
    for r in refused {
        assert_error(r, StatusCode::TOO_MANY_REQUESTS, &[PROJ_A, "concurrency"]);
    }
    assert_eq!(h.launched().len(), CONCURRENCY as usize);
    assert_eq!(h.sessions.0.lock().unwrap().len(), CONCURRENCY as usize);
    let mut held = h.held(PROJ_A);
    let mut ids: Vec<String> = created
        .iter()
        .map(|b| b["id"].as_str().unwrap().to_owned())
        .collect();
    held.sort();
    ids.sort();
    assert_eq!(held, ids);
    // Releasing one gives its slot back at once.
    let r = h.release(&ids[0]).await;
    assert_eq!(r.0, StatusCode::OK, "{}", r.1);
    assert!(!h.held(PROJ_A).contains(&ids[0]));
    let (status, body) = h.create("{}").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

#[tokio::test]
async fn a_create_that_fails_gives_its_slot_and_lease_back() {
    let h = Harness::new(LaunchBehaviour::Fail);
    h.insert_context("ctx_mine", PROJ_A);
    let r = h.create(&with_context("ctx_mine", Some(true))).await;
    assert_error(&r, StatusCode::SERVICE_UNAVAILABLE, &["task launcher"]);
    assert!(h.held(PROJ_A).is_empty());
    assert_eq!(h.writer("ctx_mine"), None);
}

#[tokio::test]
async fn context_of_another_project_is_404() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    h.insert_context("ctx_theirs", PROJ_OTHER);
    let r = h.create(&with_context("ctx_theirs", Some(true))).await;
    assert_error(&r, StatusCode::NOT_FOUND, &["context ctx_theirs not found"]);
    let r = h.create(&with_context("ctx_nowhere", None)).await;
    assert_error(
        &r,
        StatusCode::NOT_FOUND,
        &["context ctx_nowhere not found"],
    );
    assert!(h.launched().is_empty());
}

#[tokio::test]
async fn context_without_id_is_400() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let r = h
        .create(r#"{"browserSettings": {"context": {"persist": true}}}"#)
        .await;
    assert_error(
        &r,
        StatusCode::BAD_REQUEST,
        &["browserSettings.context.id is required"],
    );
}

#[tokio::test]
async fn create_with_a_context_hands_it_to_the_task() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let c = h.insert_context("ctx_mine", PROJ_A);
    // A session that used the context without persisting does not hold it.
    h.insert_session(using_context(
        "sess_reader",
        InternalStatus::Ready,
        &c.context_id,
        false,
    ));
    let (status, body) = h.create(&with_context("ctx_mine", Some(true))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["contextId"], "ctx_mine");
    let launched = h.launched();
    assert_eq!(
        launched[0].context,
        Some(("ctx_mine".to_owned(), c.storage_key.clone(), true))
    );
    let stored = h.session(body["id"].as_str().unwrap());
    assert_eq!(stored.context_persist, Some(true));
    assert_eq!(stored.context_storage_key, Some(c.storage_key));
}

/// A released session of `ctx` still saving it (persisting, no endedAt yet), holding the
/// context's writer lease as its create made it.
fn saving_session(h: &Harness, id: &str, ctx: &str) {
    h.insert_session(using_context(id, InternalStatus::Stopped, ctx, true));
    h.contexts
        .0
        .lock()
        .unwrap()
        .get_mut(ctx)
        .unwrap()
        .writer_session_id = Some(id.to_owned());
}

#[tokio::test(start_paused = true)]
async fn simultaneous_persisting_creates_on_one_context_get_one_writer() {
    let h = Harness::with_settings(
        LaunchBehaviour::BecomeReady,
        waiting(Duration::from_millis(300)),
    );
    h.insert_context("ctx_one", PROJ_A);
    let body = &with_context("ctx_one", Some(true));
    let answers = h.create_at_once(6, body).await;
    let (created, refused) = created_and_refused(&answers);
    assert_eq!(created.len(), 1, "{answers:?}");
    let writer = created[0]["id"].as_str().unwrap().to_owned();
    for r in refused {
        assert_error(
            r,
            StatusCode::CONFLICT,
            &[&format!("context ctx_one is in use by session {writer}")],
        );
    }
    assert_eq!(h.launched().len(), 1);
    assert_eq!(
        h.sessions.0.lock().unwrap().len(),
        1,
        "no loser left an item"
    );
    assert_eq!(
        h.held(PROJ_A),
        std::slice::from_ref(&writer),
        "losers gave their slots back"
    );
    assert_eq!(h.writer("ctx_one").as_deref(), Some(writer.as_str()));
    // A reader waits for the writer too.
    let r = h.create(&with_context("ctx_one", Some(false))).await;
    assert_error(&r, StatusCode::CONFLICT, &[&writer]);
    // Once the writer has ended (the controller writes endedAt after its upload), the next
    // persisting create takes the lease over.
    end_session(&h.sessions, &writer, T0);
    let (status, next) = h.create(body).await;
    assert_eq!(status, StatusCode::CREATED, "{next}");
    assert_eq!(h.writer("ctx_one").as_deref(), next["id"].as_str());
    // No create listed sessions: key lookups only.
    assert_eq!(h.listings.by_context.load(Ordering::SeqCst), 0);
    assert_eq!(h.listings.by_project.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_stopped_task_gives_back_its_slot_and_context_lease() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    h.insert_context("ctx_mine", PROJ_A);
    let (status, body) = h.create(&with_context("ctx_mine", Some(true))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = body["id"].as_str().unwrap();
    assert_eq!(h.held(PROJ_A), [id]);
    assert_eq!(h.writer("ctx_mine").as_deref(), Some(id));
    let event: wallcrawler_control_plane::aws::lambda::TaskStateChange =
        serde_json::from_value(json!({"detail-type": "ECS Task State Change", "detail": {
            "lastStatus": "STOPPED", "startedBy": id, "stoppedReason": "Task failed"}}))
        .unwrap();
    let outcome = wallcrawler_control_plane::aws::lambda::handle_task_state_change(
        &h.sessions,
        &h.slots,
        &h.contexts,
        &event,
        &iso8601_millis(T0 + 1000),
    )
    .await
    .unwrap();
    assert_eq!(
        outcome,
        wallcrawler_control_plane::aws::lambda::TaskEventOutcome::Failed(id.to_owned())
    );
    assert!(h.held(PROJ_A).is_empty());
    assert_eq!(h.writer("ctx_mine"), None);
}

#[tokio::test(start_paused = true)]
async fn context_held_by_a_persisting_session_that_never_ends_is_409() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    h.insert_context("ctx_busy", PROJ_A);
    saving_session(&h, "sess_saving", "ctx_busy");
    let started = Instant::now();
    let r = h.create(&with_context("ctx_busy", Some(true))).await;
    assert_error(
        &r,
        StatusCode::CONFLICT,
        &["context ctx_busy is in use by session sess_saving"],
    );
    assert!(
        started.elapsed() >= h.settings.create_wait - 2 * h.settings.poll_every,
        "waited within the create budget first ({:?})",
        started.elapsed()
    );
    assert!(
        started.elapsed() < h.settings.create_wait + Duration::from_millis(200),
        "and no longer"
    );
    assert!(h.launched().is_empty());
    assert_eq!(h.sessions.0.lock().unwrap().len(), 1, "nothing created");
}

/// A persisting writer whose controller died without writing `endedAt` holds the lease only
/// until its `expiresAt` plus the longest shutdown budget: a create then takes it over at once.
#[tokio::test(start_paused = true)]
async fn context_held_by_a_writer_past_its_expiry_and_budget_is_taken_over() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    h.insert_context("ctx_busy", PROJ_A);
    let mut dead = using_context("sess_dead", InternalStatus::Ready, "ctx_busy", true);
    dead.expires_at = T0 / 1000 - MAX_SHUTDOWN_BUDGET_SECONDS - 1;
    h.insert_session(dead);
    h.contexts
        .0
        .lock()
        .unwrap()
        .get_mut("ctx_busy")
        .unwrap()
        .writer_session_id = Some("sess_dead".to_owned());
    let started = Instant::now();
    let (status, body) = h.create(&with_context("ctx_busy", Some(true))).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert!(started.elapsed() < h.settings.poll_every, "no wait");
    assert_eq!(
        h.contexts.0.lock().unwrap()["ctx_busy"]
            .writer_session_id
            .as_deref(),
        body["id"].as_str(),
        "the new session holds the lease"
    );
}

#[tokio::test(start_paused = true)]
async fn context_held_by_a_persisting_session_that_ends_during_the_wait_is_granted() {
    let h = Harness::with_settings(
        LaunchBehaviour::BecomeReady,
        waiting(Duration::from_secs(1)),
    );
    h.insert_context("ctx_busy", PROJ_A);
    saving_session(&h, "sess_saving", "ctx_busy");
    let sessions = h.sessions.clone();
    let ender = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        // The controller writes endedAt last, once its upload is done.
        end_session(&sessions, "sess_saving", T0 + 100);
    });
    let started = Instant::now();
    let (status, body) = h.create(&with_context("ctx_busy", Some(true))).await;
    ender.await.unwrap();
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["status"], "RUNNING");
    assert!(
        started.elapsed() >= Duration::from_millis(100),
        "waited for the writer"
    );
    assert_eq!(h.launched().len(), 1);
}

#[tokio::test]
async fn signed_token_carries_the_sessions_claims() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let (status, body) = h.create(&json!({ "timeout": 600 }).to_string()).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = body["id"].as_str().unwrap();
    let token = body["signingKey"].as_str().unwrap();
    let claims = token_payload(token);
    assert_eq!(claims["sessionId"], id);
    assert_eq!(claims["sub"], id);
    assert_eq!(claims["projectId"], PROJ_A);
    assert_eq!(claims["iss"], token::ISSUER);
    assert_eq!(claims["aud"], json!([token::AUDIENCE]));
    assert_eq!(claims["iat"], T0 / 1000);
    assert_eq!(claims["nbf"], T0 / 1000);
    assert_eq!(claims["exp"], T0 / 1000 + 600);
    assert_eq!(claims["nonce"].as_str().unwrap().len(), 32);
    // Signed with the signer's key and bound to this session and project.
    let v = validate(token, id, PROJ_A);
    assert_eq!(v.session_id, id);
    assert_eq!(v.project_id.as_deref(), Some(PROJ_A));
    let keys = [public_key(SIGNING_KEY)];
    let check = |session_id, project_id, key: &[VerifyingKey]| {
        token::validate(
            token,
            key,
            &Validation {
                session_id,
                project_id: Some(project_id),
                leeway_seconds: 0,
                now: T0 / 1000,
            },
        )
        .map(|_| ())
    };
    assert_eq!(check("sess_other", PROJ_A, &keys), Err(TokenError::Session));
    assert_eq!(check(id, PROJ_B, &keys), Err(TokenError::Project));
    assert_eq!(
        check(id, PROJ_A, &[public_key("another key")]),
        Err(TokenError::Signature)
    );
}

// ---------------------------------------------------------------------------------------------
// GET /v1/sessions, GET /v1/sessions/{id}.

fn seed_list(h: &Harness) {
    h.insert_session(doc("sess_run", PROJ_A, InternalStatus::Ready));
    h.insert_session(doc("sess_pend", PROJ_A, InternalStatus::Provisioning));
    h.insert_session(doc("sess_done", PROJ_A, InternalStatus::Stopped));
    h.insert_session(doc("sess_err", PROJ_A, InternalStatus::Failed));
    h.insert_session(doc("sess_theirs", PROJ_OTHER, InternalStatus::Ready));
    h.insert_session(doc("sess_b", PROJ_B, InternalStatus::Ready));
}

fn ids(v: &Value) -> Vec<String> {
    let mut ids: Vec<String> = v
        .as_array()
        .unwrap_or_else(|| panic!("{v} is not a list"))
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn list_sessions_answers_the_projects_sessions_only() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    seed_list(&h);
    let (status, body) = h.get("/v1/sessions").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        ids(&body),
        ["sess_done", "sess_err", "sess_pend", "sess_run"]
    );
    // Browserbase's session objects, without connection secrets in lists.
    for s in body.as_array().unwrap() {
        assert_eq!(s["projectId"], PROJ_A);
        assert!(s.get("signingKey").is_none() && s.get("connectUrl").is_none());
        millis(&s["createdAt"]);
        millis(&s["expiresAt"]);
    }
    let (_, theirs) = h
        .call(Method::GET, "/v1/sessions", Some(KEY_OTHER), None)
        .await;
    assert_eq!(ids(&theirs), ["sess_theirs"]);
}

#[tokio::test]
async fn list_sessions_filters_by_status() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    seed_list(&h);
    for (status, want) in [
        ("RUNNING", vec!["sess_run"]),
        ("PENDING", vec!["sess_pend"]),
        ("COMPLETED", vec!["sess_done"]),
        ("ERROR", vec!["sess_err"]),
        ("TIMED_OUT", vec![]),
    ] {
        let (code, body) = h.get(&format!("/v1/sessions?status={status}")).await;
        assert_eq!(code, StatusCode::OK);
        assert_eq!(ids(&body), want, "status={status}");
    }
}

#[tokio::test]
async fn list_sessions_with_a_bad_status_is_400() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let r = h.get("/v1/sessions?status=READY").await;
    assert_error(
        &r,
        StatusCode::BAD_REQUEST,
        &["status must be one of", "RUNNING", "\"READY\""],
    );
}

#[tokio::test]
async fn list_sessions_with_an_unreadable_query_is_400_json() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let r = h.get("/v1/sessions?status=RUNNING&status=ERROR").await;
    assert_error(
        &r,
        StatusCode::BAD_REQUEST,
        &["invalid query string", "duplicate field `status`"],
    );
    // Without a key it is still the key that is refused first.
    let r = h
        .call(Method::GET, "/v1/sessions?status=A&status=B", None, None)
        .await;
    assert_error(&r, StatusCode::UNAUTHORIZED, &["missing API key"]);
}

/// `n` sessions of `PROJ_A`, one a millisecond apart, every third PENDING; their ids in order.
fn seed_many(h: &Harness, n: u64) -> Vec<String> {
    (0..n)
        .map(|i| {
            let id = format!("sess_{i:04}");
            let st = if i % 3 == 0 {
                InternalStatus::Provisioning
            } else {
                InternalStatus::Stopped
            };
            let mut d = doc(&id, PROJ_A, st);
            d.created_at = iso8601_millis(T0 + i);
            h.insert_session(d);
            id
        })
        .collect()
}

/// Every page of `GET /v1/sessions?<query>`, following the next-page header; the ids in the
/// order listed, and the number of pages.
async fn all_pages(h: &Harness, query: &str) -> (Vec<String>, usize) {
    let (mut listed, mut pages, mut cursor) = (Vec::new(), 0, None::<String>);
    loop {
        let mut path = format!("/v1/sessions?{query}");
        if let Some(c) = &cursor {
            path.push_str(&format!("&cursor={c}"));
        }
        let r = h
            .exchange(Method::GET, &path, &[("x-wc-api-key", KEY_A)], None)
            .await;
        assert_eq!(r.0, StatusCode::OK, "{}", r.2);
        pages += 1;
        listed.extend(
            r.2.as_array()
                .unwrap()
                .iter()
                .map(|s| s["id"].as_str().unwrap().to_owned()),
        );
        match r.1.get(NEXT_CURSOR) {
            Some(c) => cursor = Some(c.to_str().unwrap().to_owned()),
            None => return (listed, pages),
        }
    }
}

#[tokio::test]
async fn list_sessions_pages_with_a_cursor_and_a_bounded_size() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let ids = seed_many(&h, 250);
    // No limit: pages of the default size, oldest first.
    let (listed, pages) = all_pages(&h, "").await;
    assert_eq!((listed.as_slice(), pages), (ids.as_slice(), 3));
    let (listed, pages) = all_pages(&h, "limit=7").await;
    assert_eq!((listed.as_slice(), pages), (ids.as_slice(), 36));
    // The status filter fills pages across index reads; the cursor goes on after them.
    let pending: Vec<String> = ids.iter().step_by(3).cloned().collect();
    let (listed, _) = all_pages(&h, "status=PENDING&limit=10").await;
    assert_eq!(listed, pending);
    for bad in ["0", "1001", "ten", "-1"] {
        let r = h.get(&format!("/v1/sessions?limit={bad}")).await;
        assert_error(
            &r,
            StatusCode::BAD_REQUEST,
            &["limit must be a whole number from 1 to 1000"],
        );
    }
}

/// `s` with its last character changed.
fn last_changed(s: &str) -> String {
    let mut s = s.to_owned();
    let last = s.pop().unwrap();
    s.push(if last == 'A' { 'B' } else { 'A' });
    s
}

#[tokio::test]
async fn a_tampered_or_foreign_cursor_is_refused() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    seed_many(&h, 5);
    let mut d = doc("sess_theirs", PROJ_OTHER, InternalStatus::Ready);
    d.created_at = iso8601_millis(T0 - 1);
    h.insert_session(d);
    let r = h
        .exchange(
            Method::GET,
            "/v1/sessions?limit=2",
            &[("x-wc-api-key", KEY_OTHER)],
            None,
        )
        .await;
    assert_eq!(r.1.get(NEXT_CURSOR), None, "one session, one page");
    let r = h
        .exchange(
            Method::GET,
            "/v1/sessions?limit=2",
            &[("x-wc-api-key", KEY_A)],
            None,
        )
        .await;
    let mine = r.1.get(NEXT_CURSOR).unwrap().to_str().unwrap().to_owned();
    // Another project's key with this project's cursor: refused, nothing read.
    let r = h
        .call(
            Method::GET,
            &format!("/v1/sessions?cursor={mine}"),
            Some(KEY_OTHER),
            None,
        )
        .await;
    assert_error(
        &r,
        StatusCode::BAD_REQUEST,
        &["cursor belongs to another project"],
    );
    // Any change to a cursor.
    let (payload, mac) = mine.split_once('.').unwrap();
    let mut flipped = payload.as_bytes().to_vec();
    flipped[3] ^= 1;
    for bad in [
        format!("{}.{mac}", String::from_utf8(flipped).unwrap()),
        format!("{payload}.{}", last_changed(mac)),
        payload.to_owned(),
        "garbage".to_owned(),
    ] {
        let r = h.get(&format!("/v1/sessions?cursor={bad}")).await;
        assert_error(&r, StatusCode::BAD_REQUEST, &["cursor is not valid"]);
    }
}

#[tokio::test]
async fn get_session_answers_the_session() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    seed_list(&h);
    let (status, body) = h.get("/v1/sessions/sess_run").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["id"], "sess_run");
    assert_eq!(body["status"], "RUNNING");
    assert_eq!(
        body["connectUrl"],
        "ws://198.51.100.7:9223?signingKey=token"
    );
    assert_eq!(body["publicIp"], "198.51.100.7");
    assert_eq!(millis(&body["expiresAt"]), T0 + 3_600_000);
}

#[tokio::test]
async fn get_session_of_another_project_is_404() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    seed_list(&h);
    let r = h.get("/v1/sessions/sess_theirs").await;
    assert_error(
        &r,
        StatusCode::NOT_FOUND,
        &["session sess_theirs not found"],
    );
}

#[tokio::test]
async fn get_unknown_session_is_404() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let r = h.get("/v1/sessions/sess_nope").await;
    assert_error(&r, StatusCode::NOT_FOUND, &["session sess_nope not found"]);
}

// ---------------------------------------------------------------------------------------------
// POST /v1/sessions/{id}.

#[tokio::test]
async fn request_release_stops_the_session_and_its_task() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let mut d = doc("sess_1", PROJ_A, InternalStatus::Ready);
    d.ecs_task_arn = Some("arn:test:task/sess_1".to_owned());
    h.insert_session(d);
    h.clock.set(T0 + 5_000);
    let (status, body) = h.release("sess_1").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["id"], "sess_1");
    assert_eq!(body["status"], "COMPLETED");
    assert!(body.get("connectUrl").is_none());
    let stored = h.session("sess_1");
    assert_eq!(stored.internal_status, "STOPPED");
    assert_eq!(stored.updated_at, Some(iso8601_millis(T0 + 5_000)));
    assert_eq!(
        stored.ended_at, None,
        "endedAt is the controller's, after its upload"
    );
    assert_eq!(h.stopped(), ["sess_1"]);
}

/// What a controller's READY writes, as [`doc`] does for a READY session, with its task ARN.
fn write_ready(sessions: &MemSessions, id: &str, task_arn: &str) {
    let mut m = sessions.0.lock().unwrap();
    let d = m.get_mut(id).unwrap();
    let ready = doc(id, &d.project_id, InternalStatus::Ready);
    d.set_status(InternalStatus::Ready);
    d.public_ip = ready.public_ip;
    d.connect_url = ready.connect_url;
    d.ecs_task_arn = Some(task_arn.to_owned());
}

/// A release that read the item while it was still starting (no task ARN yet) and a
/// controller's READY with its ARN landing before the release's write: the stop names the
/// task the item names after the write, not the none read before it.
#[tokio::test]
async fn a_release_racing_ready_stops_the_task_ready_named() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    h.insert_session(doc("sess_1", PROJ_A, InternalStatus::Starting));
    *h.interleaving.before_terminal.lock().unwrap() = Some(Box::new(|s: &MemSessions| {
        write_ready(s, "sess_1", "arn:test:task/pool-7")
    }));
    let (status, body) = h.release("sess_1").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(h.session("sess_1").internal_status, "STOPPED");
    assert_eq!(h.stopped_tasks(), [Some("arn:test:task/pool-7".to_owned())]);
}

/// A release whose own write leaves an item naming no task reads it again (consistently) and
/// stops the task named by then.
#[tokio::test]
async fn a_release_that_finds_no_task_reads_the_item_again() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    h.insert_session(doc("sess_1", PROJ_A, InternalStatus::Starting));
    *h.interleaving.after_terminal.lock().unwrap() = Some(Box::new(|s: &MemSessions| {
        s.0.lock().unwrap().get_mut("sess_1").unwrap().ecs_task_arn =
            Some("arn:test:task/pool-8".to_owned());
    }));
    let (status, body) = h.release("sess_1").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(h.stopped_tasks(), [Some("arn:test:task/pool-8".to_owned())]);
}

#[tokio::test]
async fn request_release_of_an_ended_session_keeps_its_status() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let mut d = doc("sess_1", PROJ_A, InternalStatus::TimedOut);
    d.ended_at = Some(iso8601_millis(T0 + 1_000));
    h.insert_session(d.clone());
    let (status, body) = h.release("sess_1").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["status"], "TIMED_OUT");
    assert_eq!(h.session("sess_1"), d, "nothing rewritten");
}

#[tokio::test]
async fn update_with_another_status_is_400() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    h.insert_session(doc("sess_1", PROJ_A, InternalStatus::Ready));
    let r = h
        .post("/v1/sessions/sess_1", r#"{"status": "COMPLETED"}"#)
        .await;
    assert_error(
        &r,
        StatusCode::BAD_REQUEST,
        &["status must be REQUEST_RELEASE", "\"COMPLETED\""],
    );
    assert_eq!(h.session("sess_1").status, "RUNNING");
    assert!(h.stopped().is_empty());
}

#[tokio::test]
async fn update_without_status_is_400() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    h.insert_session(doc("sess_1", PROJ_A, InternalStatus::Ready));
    for body in ["{}", ""] {
        let r = h.post("/v1/sessions/sess_1", body).await;
        assert_error(
            &r,
            StatusCode::BAD_REQUEST,
            &["status is required", "REQUEST_RELEASE"],
        );
    }
    let r = h.post("/v1/sessions/sess_1", "{status").await;
    assert_error(&r, StatusCode::BAD_REQUEST, &["invalid JSON body"]);
    assert_eq!(h.session("sess_1").status, "RUNNING");
}

#[tokio::test]
async fn update_of_another_projects_session_is_404() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    h.insert_session(doc("sess_theirs", PROJ_OTHER, InternalStatus::Ready));
    let r = h.release("sess_theirs").await;
    assert_error(
        &r,
        StatusCode::NOT_FOUND,
        &["session sess_theirs not found"],
    );
    assert_eq!(h.session("sess_theirs").status, "RUNNING");
    assert!(h.stopped().is_empty());
}

// ---------------------------------------------------------------------------------------------
// GET /v1/sessions/{id}/debug (the running case reads a stand-in proxy's page list: see the top).

#[tokio::test]
async fn debug_of_a_session_that_is_not_running_is_409() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    h.insert_session(doc("sess_pend", PROJ_A, InternalStatus::Provisioning));
    h.insert_session(doc("sess_done", PROJ_A, InternalStatus::Stopped));
    for id in ["sess_pend", "sess_done"] {
        let r = h.get(&format!("/v1/sessions/{id}/debug")).await;
        assert_error(
            &r,
            StatusCode::CONFLICT,
            &[&format!("session {id} is not running")],
        );
    }
    h.insert_session(doc("sess_theirs", PROJ_OTHER, InternalStatus::Ready));
    let r = h.get("/v1/sessions/sess_theirs/debug").await;
    assert_error(
        &r,
        StatusCode::NOT_FOUND,
        &["session sess_theirs not found"],
    );
}

use crate::support::{PAGE_ID, stand_in_proxy};

/// A RUNNING session of `PROJ_A` whose proxy is the stand-in on `port`.
fn running_at(id: &str, port: u16) -> SessionDoc {
    let mut d = doc(id, PROJ_A, InternalStatus::Ready);
    d.connect_url = Some(format!("ws://127.0.0.1:{port}/?signingKey=token"));
    d
}

/// The `t` parameter of a viewer URL, after checking the URL's shape: `base/viewer?t=…`, then
/// `&page=<page>` when given, then `&fullscreen=1` when `fullscreen`.
fn credential_of(url: &Value, base: &str, page: Option<&str>, fullscreen: bool) -> String {
    let url = url.as_str().unwrap_or_else(|| panic!("{url} is not a URL"));
    let rest = url
        .strip_prefix(&format!("{base}/viewer?t="))
        .unwrap_or_else(|| panic!("{url} is not the viewer on {base}"));
    let mut tail = String::new();
    if let Some(page) = page {
        tail.push_str(&format!("&page={page}"));
    }
    if fullscreen {
        tail.push_str("&fullscreen=1");
    }
    let t = rest
        .strip_suffix(&tail)
        .unwrap_or_else(|| panic!("{url} does not end with {tail:?}"));
    assert!(!t.contains('&'), "{url}");
    t.to_owned()
}

/// The credential of a page's DevTools inspector URL, after checking its shape:
/// `base/inspector/<t>/inspector.html?ws=<host>/inspector/<t>/page/<page>` (`wss` for https).
fn inspector_credential_of(url: &Value, base: &str, page: &str) -> String {
    let url = url.as_str().unwrap_or_else(|| panic!("{url} is not a URL"));
    let (scheme, host) = match base.strip_prefix("https://") {
        Some(h) => ("wss", h),
        None => ("ws", base.strip_prefix("http://").unwrap()),
    };
    let rest = url
        .strip_prefix(&format!("{base}/inspector/"))
        .unwrap_or_else(|| panic!("{url} is not the inspector on {base}"));
    let (t, tail) = rest.split_once('/').unwrap();
    assert_eq!(
        tail,
        format!("inspector.html?{scheme}={host}/inspector/{t}/page/{page}"),
        "{url}"
    );
    t.to_owned()
}

fn validate_viewer(t: &str, session_id: &str) -> Result<viewer::ViewerVerified, TokenError> {
    viewer::validate(
        t,
        &[public_key(SIGNING_KEY)],
        &Validation {
            session_id,
            project_id: Some(PROJ_A),
            leeway_seconds: 0,
            now: T0 / 1000,
        },
    )
}

/// A pending handoff (the controller's `handoff` attribute) is shown as `handoff`; none, no
/// member (the SDK's four).
#[tokio::test]
async fn debug_shows_a_pending_handoff() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let (port, _) = stand_in_proxy("token").await;
    let mut d = running_at("sess_live", port);
    d.handoff = Some(wallcrawler_contract::session_doc::Handoff {
        id: "ho_1".into(),
        reason: "Please log in".into(),
        requested_at: "2026-11-26T12:00:00.000Z".into(),
        expires_at: "2026-11-26T12:10:00.000Z".into(),
    });
    h.insert_session(d);
    let (status, body) = h.get("/v1/sessions/sess_live/debug").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["handoff"],
        serde_json::json!({"id": "ho_1", "reason": "Please log in",
            "requestedAt": "2026-11-26T12:00:00.000Z", "expiresAt": "2026-11-26T12:10:00.000Z"})
    );
}

#[tokio::test]
async fn debug_of_a_running_session_answers_the_live_view_urls_with_viewer_credentials() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let (port, seen) = stand_in_proxy("token").await;
    h.insert_session(running_at("sess_live", port));
    let (status, body) = h.get("/v1/sessions/sess_live/debug").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        seen.lock().unwrap().as_slice(),
        ["GET /json/list?signingKey=token HTTP/1.1"],
        "the page list is read with the session token"
    );
    let base = format!("http://127.0.0.1:{port}");
    assert_eq!(
        body["wsUrl"],
        format!("ws://127.0.0.1:{port}/?signingKey=token")
    );
    // The Browserbase SDK's SessionLiveURLs: four members, each page with its six (and wsUrl).
    let mut keys: Vec<_> = body.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    assert_eq!(
        keys,
        ["debuggerFullscreenUrl", "debuggerUrl", "pages", "wsUrl"]
    );
    let full = credential_of(&body["debuggerFullscreenUrl"], &base, None, true);
    let windowed = credential_of(&body["debuggerUrl"], &base, None, false);
    assert_eq!(full, windowed, "one credential for the session's two URLs");
    let v = validate_viewer(&full, "sess_live").expect("a viewer credential of the session");
    assert_eq!(v.mode, viewer::Mode::Control, "control by default");
    assert_eq!(v.page, None);
    assert_eq!(
        v.exp,
        (T0 / 1000 + 3600) as f64,
        "it expires with the session"
    );
    assert_ne!(full, "token");

    let pages = body["pages"].as_array().unwrap();
    assert_eq!(pages.len(), 1, "pages only: {body}");
    let page = &pages[0];
    assert_eq!(page["id"], PAGE_ID);
    assert_eq!(page["url"], "http://127.0.0.1:1/a");
    assert_eq!(page["title"], "A");
    assert_eq!(page["faviconUrl"], "http://127.0.0.1:1/favicon.ico");
    let one = credential_of(&page["debuggerFullscreenUrl"], &base, Some(PAGE_ID), true);
    // In control mode, the page's debuggerUrl is the DevTools inspector on it, as Browserbase's.
    assert_eq!(
        one,
        inspector_credential_of(&page["debuggerUrl"], &base, PAGE_ID)
    );
    let v = validate_viewer(&one, "sess_live").unwrap();
    assert_eq!(v.page.as_deref(), Some(PAGE_ID), "bound to its page");
    assert_eq!(v.mode, viewer::Mode::Control);

    // The credential is no session token, and the session's token no viewer credential.
    let session_token = validate(
        &wallcrawler_contract::Claims::new("sess_live", PROJ_A, T0 / 1000, 3600)
            .mint(&signing_key(SIGNING_KEY)),
        "sess_live",
        PROJ_A,
    );
    assert_eq!(session_token.session_id, "sess_live");
    for t in [&full, &one] {
        assert_eq!(
            token::validate(
                t,
                &[public_key(SIGNING_KEY)],
                &Validation {
                    session_id: "sess_live",
                    project_id: Some(PROJ_A),
                    leeway_seconds: 0,
                    now: T0 / 1000,
                },
            ),
            Err(TokenError::Audience)
        );
    }
    let minted = wallcrawler_contract::Claims::new("sess_live", PROJ_A, T0 / 1000, 3600)
        .mint(&signing_key(SIGNING_KEY));
    assert_eq!(
        validate_viewer(&minted, "sess_live"),
        Err(TokenError::Audience)
    );
    // Another session's viewer does not take it.
    assert_eq!(
        validate_viewer(&full, "sess_other"),
        Err(TokenError::Session)
    );
}

#[tokio::test]
async fn debug_mode_view_and_expires_in_bound_the_credentials() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let (port, _) = stand_in_proxy("token").await;
    h.insert_session(running_at("sess_live", port));
    let base = format!("http://127.0.0.1:{port}");
    let now = T0 / 1000;
    for (query, mode, exp) in [
        ("?mode=view", viewer::Mode::View, now + 3600),
        (
            "?mode=control&expiresIn=60",
            viewer::Mode::Control,
            now + 60,
        ),
        ("?expiresIn=60&mode=view", viewer::Mode::View, now + 60),
        // Never beyond the session's own expiry.
        ("?expiresIn=7200", viewer::Mode::Control, now + 3600),
        ("?expiresIn=21600", viewer::Mode::Control, now + 3600),
    ] {
        let (status, body) = h.get(&format!("/v1/sessions/sess_live/debug{query}")).await;
        assert_eq!(status, StatusCode::OK, "{query}: {body}");
        let t = credential_of(&body["debuggerFullscreenUrl"], &base, None, true);
        let v = validate_viewer(&t, "sess_live").unwrap();
        assert_eq!((v.mode, v.exp), (mode, exp as f64), "{query}");
        // The inspector in control mode; nothing points at it in view mode.
        let url = &body["pages"][0]["debuggerUrl"];
        let p = if mode == viewer::Mode::Control {
            inspector_credential_of(url, &base, PAGE_ID)
        } else {
            credential_of(url, &base, Some(PAGE_ID), false)
        };
        assert!(
            mode == viewer::Mode::Control || !body.to_string().contains("/inspector/"),
            "{body}"
        );
        let v = validate_viewer(&p, "sess_live").unwrap();
        assert_eq!((v.mode, v.exp), (mode, exp as f64), "{query} (page)");
    }
}

#[tokio::test]
async fn debug_refuses_a_bad_mode_or_expires_in_before_reading_the_browser() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let (port, seen) = stand_in_proxy("token").await;
    h.insert_session(running_at("sess_live", port));
    for (query, message) in [
        ("?mode=admin", "mode must be view or control, got \"admin\""),
        ("?mode=VIEW", "mode must be view or control, got \"VIEW\""),
        (
            "?expiresIn=0",
            "expiresIn must be a whole number of seconds from 1 to 21600, got \"0\"",
        ),
        (
            "?expiresIn=21601",
            "expiresIn must be a whole number of seconds from 1 to 21600, got \"21601\"",
        ),
        (
            "?expiresIn=-5",
            "expiresIn must be a whole number of seconds from 1 to 21600, got \"-5\"",
        ),
        (
            "?expiresIn=1.5",
            "expiresIn must be a whole number of seconds from 1 to 21600, got \"1.5\"",
        ),
    ] {
        let r = h.get(&format!("/v1/sessions/sess_live/debug{query}")).await;
        assert_error(&r, StatusCode::BAD_REQUEST, &[message]);
    }
    assert!(seen.lock().unwrap().is_empty(), "the browser was not read");
}

#[tokio::test]
async fn debug_of_a_session_past_its_expiry_is_409() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let (port, seen) = stand_in_proxy("token").await;
    let mut d = running_at("sess_late", port);
    d.expires_at = T0 / 1000;
    h.insert_session(d);
    let r = h.get("/v1/sessions/sess_late/debug").await;
    assert_error(
        &r,
        StatusCode::CONFLICT,
        &["session sess_late is not running"],
    );
    assert!(seen.lock().unwrap().is_empty());
}

// ---------------------------------------------------------------------------------------------
// The rrweb recording endpoint (deprecated in the SDK; a 410 pointing at /replays for a
// session, see handlers/recordings.rs): like every route, nothing without a key.

#[tokio::test]
async fn the_recording_endpoint_still_needs_a_key() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let r = h
        .call(Method::GET, "/v1/sessions/sess_1/recording", None, None)
        .await;
    assert_eq!(r.0, StatusCode::UNAUTHORIZED);
    assert_error(&r, StatusCode::UNAUTHORIZED, &["missing API key"]);
}

// ---------------------------------------------------------------------------------------------
// Contexts.

#[tokio::test]
async fn create_context_answers_its_id_and_an_upload_url() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let (status, body) = h.post("/v1/contexts", "{}").await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = body["id"].as_str().unwrap();
    assert!(id.starts_with("ctx_") && id.len() > 4, "{id}");
    let url = body["uploadUrl"].as_str().unwrap();
    assert!(
        url.contains(&format!("{PROJ_A}/{id}/profile.tar.gz")),
        "{url}"
    );
    assert!(url.contains("expires=3600"), "{url}");
    let stored = h.contexts.0.lock().unwrap()[id].clone();
    assert_eq!(stored.project_id, PROJ_A);
    assert_eq!(stored.storage_key, format!("{PROJ_A}/{id}/profile.tar.gz"));
    assert_eq!(stored.created_at, iso8601_millis(T0));
    // An empty body and a body naming the selected project are both fine.
    let (status, _) = h
        .call(Method::POST, "/v1/contexts", Some(KEY_A), None)
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) = h
        .post("/v1/contexts", &json!({ "projectId": PROJ_A }).to_string())
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let r = h.post("/v1/contexts", "{").await;
    assert_error(&r, StatusCode::BAD_REQUEST, &["invalid JSON body"]);
}

#[tokio::test]
async fn get_context_answers_the_context() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let c = h.insert_context("ctx_mine", PROJ_A);
    let (status, body) = h.get("/v1/contexts/ctx_mine").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body,
        json!({
            "id": "ctx_mine",
            "projectId": PROJ_A,
            "createdAt": c.created_at,
            "updatedAt": c.updated_at,
        })
    );
}

#[tokio::test]
async fn contexts_of_another_project_are_404() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    h.insert_context("ctx_theirs", PROJ_OTHER);
    for method in [Method::GET, Method::PUT, Method::DELETE] {
        let r = h
            .call(method.clone(), "/v1/contexts/ctx_theirs", Some(KEY_A), None)
            .await;
        assert_error(&r, StatusCode::NOT_FOUND, &["context ctx_theirs not found"]);
    }
    let r = h.get("/v1/contexts/ctx_nowhere").await;
    assert_error(
        &r,
        StatusCode::NOT_FOUND,
        &["context ctx_nowhere not found"],
    );
    assert!(h.contexts.0.lock().unwrap().contains_key("ctx_theirs"));
    assert!(h.archives.0.lock().unwrap().is_empty());
}

#[tokio::test]
async fn update_context_answers_a_fresh_upload_url() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let c = h.insert_context("ctx_mine", PROJ_A);
    h.clock.set(T0 + 30_000);
    let (status, body) = h
        .call(Method::PUT, "/v1/contexts/ctx_mine", Some(KEY_A), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["id"], "ctx_mine");
    let url = body["uploadUrl"].as_str().unwrap();
    assert!(url.contains(&c.storage_key), "{url}");
    assert_eq!(
        h.contexts.0.lock().unwrap()["ctx_mine"].updated_at,
        iso8601_millis(T0 + 30_000)
    );
}

#[tokio::test]
async fn delete_context_deletes_the_record_and_its_archive() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let c = h.insert_context("ctx_mine", PROJ_A);
    // Sessions that used it and have ended do not hold it.
    saving_session(&h, "sess_old", "ctx_mine");
    end_session(&h.sessions, "sess_old", T0);
    let (status, body) = h
        .call(Method::DELETE, "/v1/contexts/ctx_mine", Some(KEY_A), None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    assert_eq!(body, Value::Null, "no body");
    assert_eq!(*h.archives.0.lock().unwrap(), [c.storage_key]);
    assert!(!h.contexts.0.lock().unwrap().contains_key("ctx_mine"));
    let r = h.get("/v1/contexts/ctx_mine").await;
    assert_error(&r, StatusCode::NOT_FOUND, &["context ctx_mine not found"]);
}

#[tokio::test]
async fn delete_context_in_use_is_409() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    h.insert_context("ctx_mine", PROJ_A);
    // Even a read-only session holds it until it has ended.
    h.insert_session(using_context(
        "sess_user",
        InternalStatus::Ready,
        "ctx_mine",
        false,
    ));
    deleting_ctx_mine_is_refused_for(&h, "sess_user").await;
}

/// `DELETE /v1/contexts/ctx_mine` answers 409 naming session `user`; record and archive stay.
async fn deleting_ctx_mine_is_refused_for(h: &Harness, user: &str) {
    let r = h
        .call(Method::DELETE, "/v1/contexts/ctx_mine", Some(KEY_A), None)
        .await;
    assert_error(
        &r,
        StatusCode::CONFLICT,
        &[&format!("context ctx_mine is in use by session {user}")],
    );
    assert!(h.contexts.0.lock().unwrap().contains_key("ctx_mine"));
    assert!(h.archives.0.lock().unwrap().is_empty());
}

#[tokio::test]
async fn delete_context_spares_a_persisting_create_between_its_lease_and_its_item() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    h.insert_context("ctx_mine", PROJ_A);
    // The create took the lease a moment ago; its session item is not written yet, so no
    // listing shows it.
    let writer = wallcrawler_control_plane::limits::new_session_id();
    h.contexts
        .0
        .lock()
        .unwrap()
        .get_mut("ctx_mine")
        .unwrap()
        .writer_session_id = Some(writer.clone());
    deleting_ctx_mine_is_refused_for(&h, &writer).await;
}

/// The launch choice under a share of the warm pool: of two simultaneous creates of a project
/// with a share of 1, one takes a warm browser and the other gets a controller of its own
/// (`cold`); another project's create still goes warm; once the first project's sessions are
/// released, its next create goes warm again.
#[tokio::test]
async fn sessions_beyond_a_projects_share_of_the_warm_pool_start_cold() {
    let settings = Settings {
        pool_share: Some(1),
        ..waiting(Duration::from_millis(400))
    };
    let h = Harness::with_settings(LaunchBehaviour::BecomeReady, settings);
    let cold = |project: &str| -> Vec<bool> {
        let launched = h.launcher.launched.lock().unwrap();
        launched
            .iter()
            .filter(|s| s.project_id == project)
            .map(|s| s.cold)
            .collect()
    };
    let answers = h.create_at_once(2, "{}").await;
    for (status, v) in &answers {
        assert_eq!(*status, StatusCode::CREATED, "{v}");
    }
    let mut got = cold(PROJ_A);
    got.sort();
    assert_eq!(got, [false, true], "one warm, one cold");
    let (status, v) = h.create_in(PROJ_B, "{}").await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
    assert_eq!(cold(PROJ_B), [false], "another project still goes warm");
    for (_, v) in &answers {
        let (status, r) = h.release(v["id"].as_str().unwrap()).await;
        assert_eq!(status, StatusCode::OK, "{r}");
    }
    let (status, v) = h.create("{}").await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
    assert_eq!(cold(PROJ_A).last(), Some(&false), "within its share again");
}

// ---------------------------------------------------------------------------------------------
// Projects.

#[tokio::test]
async fn list_projects_answers_the_keys_projects() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let (status, body) = h.get("/v1/projects").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ids(&body), [PROJ_A, PROJ_B]);
    let (_, theirs) = h
        .call(Method::GET, "/v1/projects", Some(KEY_OTHER), None)
        .await;
    assert_eq!(ids(&theirs), [PROJ_OTHER]);
}

#[tokio::test]
async fn get_project_answers_the_project() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let (status, body) = h.get(&format!("/v1/projects/{PROJ_A}")).await;
    assert_eq!(status, StatusCode::OK);
    let p = project(PROJ_A, "ACTIVE");
    assert_eq!(
        body,
        json!({
            "id": PROJ_A,
            "name": p.name,
            "ownerId": "owner_1",
            "defaultTimeout": DEFAULT_TIMEOUT,
            "concurrency": CONCURRENCY,
            "createdAt": p.created_at,
            "updatedAt": p.updated_at,
        })
    );
}

#[tokio::test]
async fn an_inactive_project_is_403_on_every_handler_even_read_by_id() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let c = h.insert_context("ctx_off", PROJ_OFF);
    h.insert_session(doc("sess_off", PROJ_OFF, InternalStatus::Ready));
    let routes: [(Method, String); 18] = [
        (Method::POST, "/v1/sessions".into()),
        (Method::GET, "/v1/sessions".into()),
        (Method::GET, "/v1/sessions/sess_off".into()),
        (Method::POST, "/v1/sessions/sess_off".into()),
        (Method::GET, "/v1/sessions/sess_off/debug".into()),
        (Method::GET, "/v1/sessions/sess_off/downloads".into()),
        (Method::POST, "/v1/sessions/sess_off/uploads".into()),
        (Method::GET, "/v1/sessions/sess_off/logs".into()),
        (Method::GET, "/v1/sessions/sess_off/recording".into()),
        (Method::POST, "/v1/extensions".into()),
        (Method::GET, "/v1/extensions/ext_1".into()),
        (Method::POST, "/v1/contexts".into()),
        (Method::GET, format!("/v1/contexts/{}", c.context_id)),
        (Method::PUT, format!("/v1/contexts/{}", c.context_id)),
        (Method::DELETE, format!("/v1/contexts/{}", c.context_id)),
        (Method::GET, "/v1/projects".into()),
        (Method::GET, format!("/v1/projects/{PROJ_OFF}")),
        (Method::GET, format!("/v1/projects/{PROJ_OFF}/usage")),
    ];
    for (method, uri) in routes {
        let body = (method != Method::GET).then_some(r#"{"status": "REQUEST_RELEASE"}"#);
        let r = h.call(method.clone(), &uri, Some(KEY_OFF), body).await;
        assert_eq!(r.0, StatusCode::FORBIDDEN, "{method} {uri}: {}", r.1);
        assert_error(&r, StatusCode::FORBIDDEN, &[PROJ_OFF, "not active"]);
    }
    // A key whose own project is active may not read its inactive one by id either…
    for uri in [
        format!("/v1/projects/{PROJ_OFF}"),
        format!("/v1/projects/{PROJ_OFF}/usage"),
    ] {
        let r = h.call(Method::GET, &uri, Some(KEY_MIXED), None).await;
        assert_error(
            &r,
            StatusCode::FORBIDDEN,
            &[&format!("project {PROJ_OFF} is not active")],
        );
    }
    // …nor select it, and the listing shows only the active one.
    let r = h
        .call_with(
            Method::GET,
            &format!("/v1/projects/{PROJ_A}"),
            &[("x-wc-api-key", KEY_MIXED), ("x-wc-project-id", PROJ_OFF)],
            None,
        )
        .await;
    assert_error(&r, StatusCode::FORBIDDEN, &[PROJ_OFF, "not active"]);
    let (status, body) = h
        .call(Method::GET, "/v1/projects", Some(KEY_MIXED), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ids(&body), [PROJ_A]);
    // Nothing was harmed: the session and context are as they were, nothing launched or stopped.
    assert_eq!(h.session("sess_off").status, "RUNNING");
    assert!(h.contexts.0.lock().unwrap().contains_key("ctx_off"));
    assert!(h.launched().is_empty() && h.stopped().is_empty());
    assert!(h.archives.0.lock().unwrap().is_empty());
}

#[tokio::test]
async fn projects_of_others_are_404() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    for uri in [
        format!("/v1/projects/{PROJ_OTHER}"),
        format!("/v1/projects/{PROJ_OTHER}/usage"),
        "/v1/projects/proj_nowhere".to_owned(),
    ] {
        let r = h.get(&uri).await;
        assert_eq!(r.0, StatusCode::NOT_FOUND, "{uri}");
        let named = uri.split('/').nth(3).unwrap();
        assert_error(
            &r,
            StatusCode::NOT_FOUND,
            &[&format!("project {named} not found")],
        );
    }
}

#[tokio::test]
async fn usage_is_a_running_total_of_ended_sessions_counted_once() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let ended = |id: &str, start: u64, end: u64, bytes: Option<u64>| {
        let mut d = doc(id, PROJ_A, InternalStatus::Stopped);
        d.started_at = Some(iso8601_millis(start));
        d.ended_at = Some(iso8601_millis(end));
        d.proxy_bytes = bytes;
        d
    };
    // 61 s → 2 min; exactly 60 s → 1 min; 1 ms → 1 min; no startedAt: from createdAt, 30 s → 1.
    let mut no_start = ended("sess_4", 0, T0 + 30_000, Some(500));
    no_start.started_at = None;
    let mut theirs = ended("sess_6", T0, T0 + 600_000, Some(1 << 30));
    theirs.project_id = PROJ_OTHER.to_owned();
    let mut running = doc("sess_5", PROJ_A, InternalStatus::Ready);
    running.proxy_bytes = Some(4);
    let docs = [
        ended("sess_1", T0, T0 + 61_000, Some(1_000)),
        ended("sess_2", T0, T0 + 60_000, Some(2_500)),
        ended("sess_3", T0, T0 + 1, None),
        no_start,
        running,
        theirs,
    ];
    for d in &docs {
        h.insert_session(d.clone());
    }
    h.clock.set(T0 + 150_000);
    // Every path that learns of an end counts; twice, or at once, is still once. A running
    // session is not in the total yet.
    for _ in 0..2 {
        futures_util::future::join_all(
            docs.iter()
                .map(|d| wallcrawler_control_plane::usage::count(&h.sessions, d)),
        )
        .await;
    }
    let (status, body) = h.get(&format!("/v1/projects/{PROJ_A}/usage")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body,
        json!({ "browserMinutes": 2 + 1 + 1 + 1, "proxyBytes": 1_000 + 2_500 + 500 })
    );
    assert_eq!(h.session("sess_1").usage_counted, Some(true));
    assert_eq!(h.session("sess_5").usage_counted, None);
    assert_eq!(
        h.listings.by_project.load(Ordering::SeqCst),
        0,
        "the total is read, not summed over the project's sessions"
    );
    // proj_b, the key's other project, has none.
    let (status, body) = h.get(&format!("/v1/projects/{PROJ_B}/usage")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, json!({ "browserMinutes": 0, "proxyBytes": 0 }));
}

// ---------------------------------------------------------------------------------------------
// Routing.

/// `GET /v1/sessions/{id}/downloads` with `key`: status, headers and the raw body.
async fn downloads_of(h: &Harness, id: &str, key: &str) -> (StatusCode, HeaderMap, Vec<u8>) {
    let req = Request::builder()
        .uri(format!("/v1/sessions/{id}/downloads"))
        .header("x-wc-api-key", key)
        .body(Body::empty())
        .unwrap();
    let resp = h.router.clone().oneshot(req).await.unwrap();
    let (status, headers) = (resp.status(), resp.headers().clone());
    let body = resp
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes()
        .to_vec();
    (status, headers, body)
}

#[tokio::test]
async fn downloads_answer_202_while_in_progress_then_the_zip_and_404_to_strangers() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let mut d = doc("sess_dl", PROJ_A, InternalStatus::Ready);
    d.downloads_in_progress = Some(1);
    h.insert_session(d);
    let prefix = "files/proj_a/sess_dl/downloads/";
    h.objects.0.lock().unwrap().extend([
        (
            format!("{prefix}a-1.csv"),
            axum::body::Bytes::from_static(b"x,y\n"),
        ),
        // A write in progress (a leading dot) is no entry.
        (
            format!("{prefix}.b-2.bin.partial"),
            axum::body::Bytes::from_static(b"part"),
        ),
    ]);

    let (status, headers, body) = downloads_of(&h, "sess_dl", KEY_A).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(headers["retry-after"], "2");
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["downloadsInProgress"], 1, "{v}");

    // Another project's key: 404, nothing of the files.
    let (status, _, _) = downloads_of(&h, "sess_dl", KEY_OTHER).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Ended: whatever the counter says, what is stored is the answer.
    h.sessions
        .0
        .lock()
        .unwrap()
        .get_mut("sess_dl")
        .unwrap()
        .ended_at = Some(iso8601_millis(T0));
    let (status, headers, body) = downloads_of(&h, "sess_dl", KEY_A).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["content-type"], "application/zip");
    let mut z = zip::ZipArchive::new(std::io::Cursor::new(body)).unwrap();
    assert_eq!(z.len(), 1);
    let mut got = String::new();
    std::io::Read::read_to_string(&mut z.by_name("a-1.csv").unwrap(), &mut got).unwrap();
    assert_eq!(got, "x,y\n");

    // No downloads, none in progress: Browserbase's empty zip.
    h.insert_session(doc("sess_none", PROJ_A, InternalStatus::Ready));
    let (status, _, body) = downloads_of(&h, "sess_none", KEY_A).await;
    assert_eq!((status, body.len()), (StatusCode::OK, 22));
}

#[tokio::test]
async fn unknown_route_is_404_json() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    for uri in ["/v1/nothing", "/", "/v2/sessions"] {
        let r = h.get(uri).await;
        assert_error(&r, StatusCode::NOT_FOUND, &["no such endpoint"]);
    }
    let r = h.call(Method::GET, "/v1/nothing", None, None).await;
    assert_error(&r, StatusCode::NOT_FOUND, &["no such endpoint"]);
}

// ---------------------------------------------------------------------------------------------
// Retry advice: the stock SDKs retry 408, 409, 429 and 5xx twice with no idempotency key unless
// `x-should-retry: false` says otherwise.

fn assert_no_retry(got: (StatusCode, Option<String>), status: StatusCode, what: &str) {
    assert_eq!(got, (status, Some("false".to_owned())), "{what}");
}

#[tokio::test(start_paused = true)]
async fn every_refused_create_tells_clients_not_to_retry() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let create = |key, body| h.retry_advice(Method::POST, "/v1/sessions", key, body);
    assert_no_retry(create(None, None).await, StatusCode::UNAUTHORIZED, "no key");
    assert_no_retry(
        create(Some(KEY_A), Some("{")).await,
        StatusCode::BAD_REQUEST,
        "malformed JSON",
    );
    assert_no_retry(
        create(Some(KEY_A), Some(r#"{"projectId": "proj_other"}"#)).await,
        StatusCode::FORBIDDEN,
        "another project",
    );
    let unknown = with_context("ctx_none", None);
    let busy = with_context("ctx_busy", Some(true));
    assert_no_retry(
        create(Some(KEY_A), Some(&unknown)).await,
        StatusCode::NOT_FOUND,
        "unknown context",
    );
    h.insert_context("ctx_busy", PROJ_A);
    saving_session(&h, "sess_saving", "ctx_busy");
    assert_no_retry(
        create(Some(KEY_A), Some(&busy)).await,
        StatusCode::CONFLICT,
        "busy context",
    );
    for id in ["sess_1", "sess_2", "sess_3"] {
        h.insert_session(doc(id, PROJ_A, InternalStatus::Ready));
    }
    h.hold_slots(PROJ_A, &["sess_1", "sess_2", "sess_3"]);
    assert_no_retry(
        create(Some(KEY_A), Some("{}")).await,
        StatusCode::TOO_MANY_REQUESTS,
        "concurrency reached",
    );
    assert!(h.launched().is_empty());
}

#[tokio::test]
async fn a_create_the_launcher_refuses_tells_clients_not_to_retry() {
    let h = Harness::new(LaunchBehaviour::Fail);
    let got = h
        .retry_advice(Method::POST, "/v1/sessions", Some(KEY_A), Some("{}"))
        .await;
    assert_no_retry(got, StatusCode::SERVICE_UNAVAILABLE, "launcher failure");
}

#[tokio::test]
async fn a_create_whose_task_fails_tells_clients_not_to_retry() {
    let h = Harness::with_failing_task();
    let got = h
        .retry_advice(Method::POST, "/v1/sessions", Some(KEY_A), Some("{}"))
        .await;
    assert_no_retry(got, StatusCode::INTERNAL_SERVER_ERROR, "the task failed");
}

#[tokio::test]
async fn successes_carry_no_advice_and_every_other_failure_says_not_to_retry() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let advice =
        |method: Method, uri: &'static str, body| h.retry_advice(method, uri, Some(KEY_A), body);
    assert_eq!(
        advice(Method::POST, "/v1/sessions", Some("{}")).await,
        (StatusCode::CREATED, None),
        "a created session"
    );
    assert_eq!(
        advice(Method::GET, "/v1/sessions", None).await,
        (StatusCode::OK, None)
    );
    assert_no_retry(
        advice(Method::GET, "/v1/sessions/sess_unknown", None).await,
        StatusCode::NOT_FOUND,
        "an unknown session",
    );
    assert_no_retry(
        advice(Method::GET, "/v1/nothing", None).await,
        StatusCode::NOT_FOUND,
        "no such endpoint",
    );
    assert_no_retry(
        advice(Method::PATCH, "/v1/sessions", None).await,
        StatusCode::METHOD_NOT_ALLOWED,
        "method not allowed",
    );
    assert_no_retry(
        advice(
            Method::POST,
            "/v1/sessions/sess_unknown",
            Some(r#"{"status": "REQUEST_RELEASE"}"#),
        )
        .await,
        StatusCode::NOT_FOUND,
        "releasing an unknown session",
    );
    assert_no_retry(
        h.retry_advice(Method::GET, "/v1/sessions", None, None)
            .await,
        StatusCode::UNAUTHORIZED,
        "no key on the listing",
    );
}

/// The Python SDK retried `/debug`'s 409 on a released session twice (~1.3 s) and the
/// concurrency 429 does not clear within the SDK's ~1.5 s of retries: both say `false`.
#[tokio::test]
async fn a_409_from_debug_of_a_released_session_and_the_concurrency_429_say_not_to_retry() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    h.insert_session(doc("sess_run", PROJ_A, InternalStatus::Ready));
    assert_eq!(h.release("sess_run").await.0, StatusCode::OK);
    let got = h
        .retry_advice(
            Method::GET,
            "/v1/sessions/sess_run/debug",
            Some(KEY_A),
            None,
        )
        .await;
    assert_no_retry(got, StatusCode::CONFLICT, "debug of a released session");
    for id in ["sess_1", "sess_2", "sess_3"] {
        h.insert_session(doc(id, PROJ_A, InternalStatus::Ready));
    }
    h.hold_slots(PROJ_A, &["sess_1", "sess_2", "sess_3"]);
    let got = h
        .retry_advice(Method::POST, "/v1/sessions", Some(KEY_A), Some("{}"))
        .await;
    assert_no_retry(got, StatusCode::TOO_MANY_REQUESTS, "concurrency reached");
}

/// An unreachable store is transient: its 503 leaves the SDK's retries on (no advice), except
/// on the create, which a retry could run twice.
#[tokio::test]
async fn a_503_from_an_unreachable_store_leaves_retrying_to_the_client() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    h.insert_session(doc("sess_run", PROJ_A, InternalStatus::Ready));
    h.sessions_down.store(true, Ordering::SeqCst);
    for uri in ["/v1/sessions/sess_run", "/v1/sessions/sess_run/debug"] {
        let r = h
            .exchange(Method::GET, uri, &[("x-wc-api-key", KEY_A)], None)
            .await;
        assert_eq!(r.0, StatusCode::SERVICE_UNAVAILABLE, "{uri}: {}", r.2);
        assert_eq!(r.1.get("x-should-retry"), None, "{uri}");
        assert!(
            r.2["message"].as_str().unwrap().contains("try again"),
            "{}",
            r.2
        );
    }
    let got = h
        .retry_advice(Method::POST, "/v1/sessions", Some(KEY_A), Some("{}"))
        .await;
    assert_no_retry(got, StatusCode::SERVICE_UNAVAILABLE, "a create");
}

// ---------------------------------------------------------------------------------------------
// Malformed ids: a 400 before any store sees them, never a 500 (which the SDKs retry).

/// Every route that takes an id, with `{id}` where it goes.
const ID_ROUTES: [(&str, &str, Option<&str>); 12] = [
    ("GET", "/v1/sessions/{id}", None),
    ("GET", "/v1/extensions/{id}", None),
    ("DELETE", "/v1/extensions/{id}", None),
    (
        "POST",
        "/v1/sessions/{id}",
        Some(r#"{"status": "REQUEST_RELEASE"}"#),
    ),
    ("GET", "/v1/sessions/{id}/debug", None),
    ("GET", "/v1/contexts/{id}", None),
    ("PUT", "/v1/contexts/{id}", Some("{}")),
    ("DELETE", "/v1/contexts/{id}", None),
    ("GET", "/v1/projects/{id}", None),
    ("GET", "/v1/projects/{id}/usage", None),
    ("GET", "/v1/sessions/{id}/logs", None),
    ("GET", "/v1/sessions/{id}/logs/stream", None),
];

#[tokio::test]
async fn a_malformed_id_is_a_400_on_every_route_and_never_echoed_whole() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let huge = "a".repeat(3000);
    let secretish = format!("sess_{}.{}", "x".repeat(40), "SECRETTAIL");
    let malformed = [
        huge.as_str(),
        "sess.1",
        "..%2F..%2Fetc%2Fpasswd",
        "%2E%2E",
        "sess%00x",
        "s%C3%A9ss",
        "sess%20x",
        "%E2%80%AEsess",
        secretish.as_str(),
    ];
    for (method, route, body) in ID_ROUTES {
        for id in malformed {
            let uri = route.replace("{id}", id);
            let (status, headers, value) = h
                .exchange(
                    method.parse().unwrap(),
                    &uri,
                    &[("x-wc-api-key", KEY_A)],
                    body,
                )
                .await;
            let what = format!("{method} {}", &uri[..uri.len().min(80)]);
            assert_error(
                &(status, value.clone()),
                StatusCode::BAD_REQUEST,
                &["id must be 1 to 128 of the characters A-Z a-z 0-9 _ -"],
            );
            assert_eq!(
                headers.get("x-should-retry").map(|v| v.to_str().unwrap()),
                Some("false"),
                "{what}"
            );
            let message = value["message"].as_str().unwrap();
            assert!(message.len() < 200, "{what}: {message}");
            assert!(!message.contains("SECRETTAIL"), "{what}: {message}");
            assert!(
                message.chars().all(|c| !c.is_control() && c != '\u{202e}'),
                "{what}: {message:?}"
            );
        }
        // Not percent-decodable to UTF-8: Browserbase's error shape too.
        let uri = route.replace("{id}", "%FF%FE");
        let r = h
            .call(method.parse().unwrap(), &uri, Some(KEY_A), body)
            .await;
        if !route.ends_with("/logs") {
            assert_error(&r, StatusCode::BAD_REQUEST, &["id in the path"]);
        }
    }
    assert!(h.archives.0.lock().unwrap().is_empty(), "nothing deleted");
    // Without a key it is still the key that is refused first.
    let r = h.call(Method::GET, "/v1/sessions/sess.1", None, None).await;
    assert_error(&r, StatusCode::UNAUTHORIZED, &["missing API key"]);
}

// ---------------------------------------------------------------------------------------------
// userMetadata's bounds and the metadata query `q` of GET /v1/sessions.

#[tokio::test]
async fn user_metadata_of_512_characters_is_accepted_and_513_refused() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    // {"k":"…"} is 8 characters besides the value: JSON.stringify's length is 512.
    let at = json!({ "userMetadata": { "k": "v".repeat(504) } });
    let (status, v) = h.create(&at.to_string()).await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
    assert_eq!(v["userMetadata"]["k"].as_str().unwrap().len(), 504);
    let over = json!({ "userMetadata": { "k": "v".repeat(505) } });
    let r = h.create(&over.to_string()).await;
    assert_error(
        &r,
        StatusCode::BAD_REQUEST,
        &["userMetadata must be at most 512 characters"],
    );
    let mut deep = json!({ "k": "v" });
    for _ in 0..20 {
        deep = json!({ "k": deep });
    }
    let r = h.create(&json!({ "userMetadata": deep }).to_string()).await;
    assert_error(
        &r,
        StatusCode::BAD_REQUEST,
        &["userMetadata must be nested at most 16 levels"],
    );
    let r = h.create(r#"{"userMetadata": ["k"]}"#).await;
    assert_error(
        &r,
        StatusCode::BAD_REQUEST,
        &["userMetadata must be a JSON object"],
    );
    assert_eq!(
        h.launched().len(),
        1,
        "only the session within the bounds started"
    );
}

/// `q` URL-encoded as the SDKs send it (`encodeURIComponent`).
fn q(query: &str) -> String {
    query
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'!' | b'~' | b'*' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn with_metadata(id: &str, project_id: &str, status: InternalStatus, m: Value) -> SessionDoc {
    let mut d = doc(id, project_id, status);
    d.user_metadata = Some(m);
    d
}

#[tokio::test]
async fn list_sessions_filters_by_the_metadata_query_and_status() {
    let h = &Harness::new(LaunchBehaviour::BecomeReady);
    let list = |query: String| async move {
        let (code, body) = h.get(&format!("/v1/sessions?{query}")).await;
        assert_eq!(code, StatusCode::OK, "{query}: {body}");
        ids(&body)
    };
    let shipped = json!({"order": {"status": "shipped"}, "env": "staging"});
    for (id, project, status, m) in [
        (
            "sess_ship_run",
            PROJ_A,
            InternalStatus::Ready,
            shipped.clone(),
        ),
        (
            "sess_ship_done",
            PROJ_A,
            InternalStatus::Stopped,
            shipped.clone(),
        ),
        (
            "sess_pending",
            PROJ_A,
            InternalStatus::Ready,
            json!({"order": {"status": "pending"}}),
        ),
        (
            "sess_number",
            PROJ_A,
            InternalStatus::Ready,
            json!({"order": {"status": 1}}),
        ),
        (
            "sess_flat",
            PROJ_A,
            InternalStatus::Ready,
            json!({"order": "shipped"}),
        ),
        (
            "sess_theirs",
            PROJ_OTHER,
            InternalStatus::Ready,
            shipped.clone(),
        ),
    ] {
        h.insert_session(with_metadata(id, project, status, m));
    }
    h.insert_session(doc("sess_none", PROJ_A, InternalStatus::Ready));
    let shipped_q = q("user_metadata['order']['status']:'shipped'");
    assert_eq!(
        list(format!("q={shipped_q}")).await,
        ["sess_ship_done", "sess_ship_run"]
    );
    assert_eq!(
        list(format!("q={shipped_q}&status=RUNNING")).await,
        ["sess_ship_run"]
    );
    assert_eq!(
        list(format!("q={}", q("user_metadata['env']:'staging'"))).await,
        ["sess_ship_done", "sess_ship_run"]
    );
    assert_eq!(
        list(format!("q={}", q("user_metadata['order']:'shipped'"))).await,
        ["sess_flat"]
    );
    assert!(
        list(format!("q={}", q("user_metadata['order']['status']:'1'")))
            .await
            .is_empty()
    );
    assert!(
        list(format!("q={}", q("user_metadata['nope']:'shipped'")))
            .await
            .is_empty()
    );
    // An empty q filters nothing, as an empty status does.
    assert_eq!(list("q=".to_owned()).await.len(), 6);
}

#[tokio::test]
async fn a_malformed_metadata_query_is_400_naming_the_form() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    h.insert_session(with_metadata(
        "sess_1",
        PROJ_A,
        InternalStatus::Ready,
        json!({"env": "staging"}),
    ));
    for bad in [
        "env:staging",
        "user_metadata.env:'staging'",
        "user_metadata['env']",
        "user_metadata['env']:staging",
        "user_metadata['env']:'staging' OR 1=1",
        "metadata['env']:'staging'",
        "*",
    ] {
        let uri = format!("/v1/sessions?q={}", q(bad));
        let (status, headers, value) = h
            .exchange(Method::GET, &uri, &[("x-wc-api-key", KEY_A)], None)
            .await;
        assert_error(
            &(status, value),
            StatusCode::BAD_REQUEST,
            &["q must have the form user_metadata['path']['to']['field']:'value'"],
        );
        assert_eq!(headers.get("x-should-retry").unwrap(), "false", "{bad}");
    }
    let long = format!("user_metadata['env']:'{}'", "s".repeat(2000));
    let r = h.get(&format!("/v1/sessions?q={}", q(&long))).await;
    assert_error(
        &r,
        StatusCode::BAD_REQUEST,
        &["q must be at most 1024 characters"],
    );
}

#[tokio::test]
async fn the_metadata_query_pages_with_the_cursor() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let ids = seed_many(&h, 120);
    // Every fourth session is tagged run=r1.
    let mut tagged = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let mut d = h.session(id);
        let run = if i % 4 == 0 { "r1" } else { "r2" };
        d.user_metadata = Some(json!({ "run": run }));
        if i % 4 == 0 {
            tagged.push(id.clone());
        }
        h.insert_session(d);
    }
    let query = format!("q={}&limit=7", q("user_metadata['run']:'r1'"));
    let (listed, pages) = all_pages(&h, &query).await;
    assert_eq!(listed, tagged);
    assert!(pages >= 5, "{pages} pages of at most 7");
    // With status too: tagged and PENDING (every third) is every twelfth.
    let both: Vec<String> = ids.iter().step_by(12).cloned().collect();
    let query = format!(
        "q={}&status=PENDING&limit=3",
        q("user_metadata['run']:'r1'")
    );
    let (listed, _) = all_pages(&h, &query).await;
    assert_eq!(listed, both);
}

// ---------------------------------------------------------------------------------------------
/// A create's `browserSettings`: the browser asked for to the launcher, refusals by field, and
/// what is not done named (`x-wallcrawler-unsupported`).
mod browser;
/// The dashboard's page: served without a key, its policy, never framed or stored.
mod dashboard;
/// A create's `proxies` and `allowedDomains`: refusals by field, managed pools, secrets kept out.
mod egress;
/// The extensions API and a create's `extensionId`.
mod extensions;
/// A session's log and its event stream, read from the chunks its controller stores.
mod logs;
/// A session's recording: its pages, their playlists, the MP4 downloads' states, the 410.
mod recordings;
