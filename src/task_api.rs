//! The control plane's task API, as a task on AWS calls it (`TASK_API_URL`; the wire types and
//! the rules are the contract's [`wallcrawler_contract::task_api`]).
//!
//! Every call carries the task's identity: an STS `GetCallerIdentity` request signed with the
//! task role's credentials (fresh per call, [`wallcrawler_aws::task_identity::sign`]), which the
//! API sends to STS to learn which task calls. Answers are bounded in size and time.
//!
//! - [`ApiClaims`]: a pool task's claim queue. A claim comes from the API's claims path, with
//!   the claim's session already taken for this task and credentials scoped to that session,
//!   installed in the [`SessionCredentialsProvider`] before the claim is handed on; settling
//!   it (delete, keep, hand back) is SQS with its receipt, under those credentials. A `409`
//!   (this task had its session) ends the waiting: no claim will come.
//! - [`TaskApi::credentials_at_start`]: a cold task's credentials for its session, retried
//!   briefly while the API still answers `403` (it writes the task into the session item right
//!   after `RunTask`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use aws_config::SdkConfig;
use backon::Retryable as _;
use bytes::Bytes;
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt as _, Full, Limited};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::{info, warn};
use wallcrawler_contract::claim::Claim;
use wallcrawler_contract::task_api::{
    CLAIMS_PATH, CREDENTIALS_PATH, ClaimGrant, ClaimRequest, CredentialsGrant, CredentialsRequest,
    IDENTITY_HEADER, LiveViewGrant, MAX_WAIT_SECONDS, SessionCredentials,
};

use crate::aws::SqsClaims;
use crate::session_credentials::{self, SessionCredentialsProvider};
use crate::stores::{BoxError, ClaimQueue, LastLiveView, Received, StoreError};

/// The largest answer read (a grant is ~2 KiB: a claim, a receipt, credentials).
pub(crate) const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// How long a call may take beyond the claim wait it asks for (API Gateway ends a request at
/// 29 s; a credentials call has only this).
const CALL_MARGIN: Duration = Duration::from_secs(10);
/// How long a cold task asks for its credentials while the API refuses (403) or fails.
const START_WITHIN: Duration = Duration::from_secs(30);

/// Why a call to the task API failed. Never holds the identity or a credential.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TaskApiError {
    /// The identity could not be signed (no task role credentials).
    #[error("the task identity could not be signed")]
    Sign(#[source] BoxError),
    /// The API could not be reached, or the connection broke.
    #[error("the task API could not be reached")]
    Unreachable(#[source] BoxError),
    /// No answer in time.
    #[error("the task API did not answer within {0:?}")]
    Timeout(Duration),
    /// An answer larger than [`MAX_ANSWER_BYTES`].
    #[error("the task API's answer is larger than {MAX_ANSWER_BYTES} bytes")]
    TooLarge,
    /// A status the call does not expect (its body is not read into the error: detail goes
    /// to the API's own log).
    #[error("the task API answered HTTP {0}")]
    Status(u16),
    /// A `200` whose body is not the contract's type.
    #[error("the task API's answer is not readable")]
    Malformed(#[source] serde_json::Error),
}

impl TaskApiError {
    /// Worth trying again soon: unreachable, slow, throttled or failing on its side.
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            Self::Unreachable(_) | Self::Timeout(_) => true,
            Self::Status(s) => *s == 429 || *s >= 500,
            _ => false,
        }
    }

    fn into_store(self) -> StoreError {
        let service = "task API";
        match self.is_transient() {
            true => StoreError::Unavailable {
                service,
                source: self.into(),
            },
            false => StoreError::Refused {
                service,
                source: self.into(),
            },
        }
    }
}

/// What the claims path answered.
#[derive(Debug)]
pub(crate) enum ClaimAnswer {
    /// A claim, its session taken for this task.
    Granted(ClaimGrant),
    /// None came in the wait (`204`).
    Nothing,
    /// This task had its session (`409`): no claim will ever come.
    Spent,
}

/// The HTTP client the task API is called with (TLS, or plain HTTP to loopback).
type Client = wallcrawler_aws::task_identity::HttpsClient;

/// The task API at one base URL, called as the task whose role `sdk` holds.
pub(crate) struct TaskApi {
    base: String,
    /// The task role's configuration: what the identity is signed with.
    sdk: SdkConfig,
    client: Client,
}

impl TaskApi {
    /// The API at `base` (`TASK_API_URL`, no trailing `/`), reached at `address`
    /// (`TASK_API_ADDRESS`) when given, else at `base`'s host. Fails when the system's root
    /// certificates cannot be read.
    pub(crate) fn new(
        base: String,
        address: Option<&str>,
        sdk: SdkConfig,
    ) -> std::io::Result<Self> {
        use wallcrawler_aws::task_identity::{Resolver, https_client_via};
        let resolver = address.map(Resolver::pinned).unwrap_or_default();
        Ok(Self {
            base,
            sdk,
            client: https_client_via(resolver)?,
        })
    }

    /// Waits up to `wait` (at most [`MAX_WAIT_SECONDS`]) for a claim.
    pub(crate) async fn claim(&self, wait: Duration) -> Result<ClaimAnswer, TaskApiError> {
        let wait_seconds = wait.as_secs().min(MAX_WAIT_SECONDS);
        let (status, body) = self
            .post(
                CLAIMS_PATH,
                &ClaimRequest { wait_seconds },
                Duration::from_secs(wait_seconds) + CALL_MARGIN,
            )
            .await?;
        match status {
            StatusCode::OK => Ok(ClaimAnswer::Granted(parse(&body)?)),
            StatusCode::NO_CONTENT => Ok(ClaimAnswer::Nothing),
            StatusCode::CONFLICT => Ok(ClaimAnswer::Spent),
            s => Err(TaskApiError::Status(s.as_u16())),
        }
    }

    /// Fresh credentials for `session_id` (`403`: the session is not this task's).
    pub(crate) async fn credentials(
        &self,
        session_id: &str,
    ) -> Result<SessionCredentials, TaskApiError> {
        Ok(self.credentials_grant(session_id).await?.credentials)
    }

    /// The whole answer of [`Self::credentials`] (with the session's live view, if any).
    async fn credentials_grant(&self, session_id: &str) -> Result<CredentialsGrant, TaskApiError> {
        let request = CredentialsRequest {
            session_id: session_id.to_owned(),
        };
        let (status, body) = self.post(CREDENTIALS_PATH, &request, CALL_MARGIN).await?;
        match status {
            StatusCode::OK => parse::<CredentialsGrant>(&body),
            s => Err(TaskApiError::Status(s.as_u16())),
        }
    }

    /// A cold task's credentials for its session, installed in `into`: asked again (for at
    /// most [`START_WITHIN`]) while the API refuses (`403`: it has not written this task into
    /// the session item yet) or fails. The session's live view, when the grant carried one.
    pub(crate) async fn credentials_at_start(
        &self,
        session_id: &str,
        into: &SessionCredentialsProvider,
    ) -> Result<Option<LiveViewGrant>, TaskApiError> {
        let grant = (|| self.credentials_grant(session_id))
            .retry(wallcrawler_contract::retry::policy(START_WITHIN))
            .sleep(tokio::time::sleep)
            .when(|e| e.is_transient() || matches!(e, TaskApiError::Status(403)))
            .notify(|e, wait| {
                info!(error = %e, retry_in_ms = wait.as_millis() as u64, "the session's credentials are not granted yet; asking again");
            })
            .await?;
        into.install(session_id, grant.credentials);
        Ok(grant.live_view)
    }

    /// One `POST` of `body` as JSON to `path` with the identity; the status and the body
    /// (bounded), within `timeout`.
    async fn post<T: Serialize>(
        &self,
        path: &str,
        body: &T,
        timeout: Duration,
    ) -> Result<(StatusCode, Bytes), TaskApiError> {
        let identity = wallcrawler_aws::task_identity::sign(&self.sdk)
            .await
            .map_err(|e| TaskApiError::Sign(e.into()))?;
        let json = serde_json::to_vec(body).expect("plain fields serialize");
        let request = Request::builder()
            .method(Method::POST)
            .uri(format!("{}{path}", self.base))
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::USER_AGENT, crate::USER_AGENT)
            .header(IDENTITY_HEADER, identity.encode())
            .body(Full::new(Bytes::from(json)))
            .map_err(|e| TaskApiError::Unreachable(e.into()))?;
        let call = async {
            let answer = self
                .client
                .request(request)
                .await
                .map_err(|e| TaskApiError::Unreachable(e.into()))?;
            let status = answer.status();
            let body = Limited::new(answer.into_body(), MAX_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|e| match e.downcast::<http_body_util::LengthLimitError>() {
                    Ok(_) => TaskApiError::TooLarge,
                    Err(e) => TaskApiError::Unreachable(e),
                })?;
            Ok((status, body.to_bytes()))
        };
        tokio::time::timeout(timeout, call)
            .await
            .map_err(|_| TaskApiError::Timeout(timeout))?
    }
}

fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, TaskApiError> {
    serde_json::from_slice(body).map_err(TaskApiError::Malformed)
}

#[async_trait::async_trait]
impl session_credentials::Source for TaskApi {
    async fn credentials(&self, session_id: &str) -> Result<SessionCredentials, BoxError> {
        Ok(TaskApi::credentials(self, session_id).await?)
    }
}

/// A pool task's claims from the task API, settled through SQS with the session's
/// credentials (see the module's documentation).
pub(crate) struct ApiClaims {
    api: Arc<TaskApi>,
    credentials: SessionCredentialsProvider,
    /// The claims queue, its client signing with `credentials`: what settles a claim.
    queue: SqsClaims,
    /// The API answered `409`: this task had its session.
    spent: AtomicBool,
    /// The last grant's live view.
    live_view: LastLiveView,
}

impl ApiClaims {
    /// Claims from `api`, their credentials installed in `credentials`, settled by `queue`.
    pub(crate) fn new(
        api: Arc<TaskApi>,
        credentials: SessionCredentialsProvider,
        queue: SqsClaims,
    ) -> Self {
        Self {
            api,
            credentials,
            queue,
            spent: AtomicBool::new(false),
            live_view: LastLiveView::default(),
        }
    }
}

#[async_trait::async_trait]
impl ClaimQueue for ApiClaims {
    async fn receive(&self, wait: Duration) -> Result<Option<Received>, StoreError> {
        match self
            .api
            .claim(wait)
            .await
            .map_err(TaskApiError::into_store)?
        {
            ClaimAnswer::Granted(grant) => {
                // The claim's own session, for the refresh; one that does not parse is
                // settled (toward the dead-letter queue) with these credentials all the same.
                let session = Claim::parse(grant.claim.as_bytes())
                    .map(|c| c.session_id)
                    .unwrap_or_default();
                self.credentials.install(&session, grant.credentials);
                self.live_view.set(grant.live_view);
                Ok(Some(Received {
                    body: grant.claim.into_bytes(),
                    receipt: grant.receipt,
                }))
            }
            ClaimAnswer::Nothing => Ok(None),
            ClaimAnswer::Spent => {
                if !self.spent.swap(true, Ordering::SeqCst) {
                    warn!("the task API says this task has had its session; no claim will come");
                }
                Ok(None)
            }
        }
    }
    fn spent(&self) -> bool {
        self.spent.load(Ordering::SeqCst)
    }
    fn live_view(&self) -> Option<wallcrawler_contract::task_api::LiveViewGrant> {
        self.live_view.get()
    }
    async fn complete(&self, receipt: &str) -> Result<(), StoreError> {
        self.queue.complete(receipt).await
    }
    async fn discard(&self, receipt: &str) -> Result<(), StoreError> {
        self.queue.discard(receipt).await
    }
    async fn poison(&self, receipt: &str) -> Result<(), StoreError> {
        self.queue.poison(receipt).await
    }
    async fn keep(&self, receipt: &str, more: Duration) -> Result<(), StoreError> {
        self.queue.keep(receipt, more).await
    }
    async fn hand_back(&self, receipt: &str, after: Duration) -> Result<(), StoreError> {
        self.queue.hand_back(receipt, after).await
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Mutex;

    use aws_credential_types::Credentials;
    use aws_credential_types::provider::{ProvideCredentials as _, SharedCredentialsProvider};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use wallcrawler_contract::task_api::SignedIdentity;

    use super::*;

    /// What a stub API was asked: `POST <path> <body>`, one per request (`UNSIGNED` instead
    /// of `POST` without a readable identity, `NO-USER-AGENT` without our User-Agent).
    pub(crate) type Asked = Arc<Mutex<Vec<String>>>;

    /// A task API on loopback answering `answers` in turn, one per connection (the last one
    /// again once they run out), recording each request; only a request carrying a readable
    /// identity header is answered. Returns its base URL (with a stage path).
    pub(crate) async fn stub_api(answers: Vec<String>) -> (String, Asked) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let asked = Asked::default();
        let recorded = asked.clone();
        tokio::spawn(async move {
            let mut n = 0;
            while let Ok((mut conn, _)) = listener.accept().await {
                let answer = answers[n.min(answers.len() - 1)].clone();
                n += 1;
                let (head, body) = read_request(&mut conn).await;
                let identity = head.lines().find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case(IDENTITY_HEADER)
                        .then(|| value.trim().to_owned())
                });
                let path = head.split_whitespace().nth(1).unwrap_or("").to_owned();
                let ok = identity.is_some_and(|i| SignedIdentity::decode(&i).is_ok());
                // AWS's managed WAF rules refuse a request with no User-Agent: recorded as
                // such, so every test of this API sees one missing.
                let agent = head.lines().find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("user-agent")
                        .then(|| value.trim().to_owned())
                });
                let tag = match (ok, agent.as_deref()) {
                    (false, _) => "UNSIGNED",
                    (true, Some(crate::USER_AGENT)) => "POST",
                    (true, _) => "NO-USER-AGENT",
                };
                recorded
                    .lock()
                    .unwrap()
                    .push(format!("{tag} {path} {body}"));
                let _ = conn.write_all(answer.as_bytes()).await;
                let _ = conn.shutdown().await;
            }
        });
        (format!("http://{addr}/prod"), asked)
    }

    /// One request's head and body, read from `conn`.
    pub(crate) async fn read_request(conn: &mut tokio::net::TcpStream) -> (String, String) {
        let mut req = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            if let Some(end) = req.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&req[..end]).into_owned();
                let len: usize = head
                    .to_ascii_lowercase()
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map_or(0, |v| v.trim().parse().unwrap_or(0));
                if req.len() >= end + 4 + len {
                    let body = String::from_utf8_lossy(&req[end + 4..end + 4 + len]).into_owned();
                    return (head, body);
                }
            }
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return (String::new(), String::new()),
                Ok(n) => req.extend_from_slice(&buf[..n]),
            }
        }
    }

    /// An HTTP answer with `status` and `body`.
    pub(crate) fn answer(status: &str, body: &str) -> String {
        format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n{body}",
            body.len()
        )
    }

    pub(crate) fn grant_json(key: &str) -> String {
        serde_json::json!({
            "claim": r#"{"sessionId":"sess_1","projectId":"proj_1"}"#,
            "receipt": "receipt-1",
            "credentials": {
                "accessKeyId": key,
                "secretAccessKey": "s3cr3t",
                "sessionToken": "t0ken",
                "expiration": wallcrawler_contract::time::unix_millis() / 1000 + 3600,
            },
        })
        .to_string()
    }

    fn credentials_json(key: &str) -> String {
        let grant: serde_json::Value = serde_json::from_str(&grant_json(key)).unwrap();
        serde_json::json!({ "credentials": grant["credentials"] }).to_string()
    }

    /// The task role's configuration a test task signs with.
    pub(crate) fn task_sdk() -> SdkConfig {
        let role = Credentials::new(
            "AKIDTASK",
            "task-secret",
            Some("task-token".into()),
            None,
            "test",
        );
        SdkConfig::builder()
            .credentials_provider(SharedCredentialsProvider::new(role))
            .region(aws_config::Region::new("us-east-1"))
            .behavior_version(aws_config::BehaviorVersion::latest())
            .build()
    }

    pub(crate) fn api(base: String) -> Arc<TaskApi> {
        Arc::new(TaskApi::new(base, None, task_sdk()).unwrap())
    }

    #[tokio::test]
    async fn the_claims_path_answers_a_grant_nothing_or_spent() {
        let (base, asked) = stub_api(vec![
            answer("200 OK", &grant_json("ASIAGRANT")),
            answer("204 No Content", ""),
            answer(
                "409 Conflict",
                r#"{"error":"this task has had its session"}"#,
            ),
        ])
        .await;
        let api = api(base);
        let ClaimAnswer::Granted(g) = api.claim(Duration::from_secs(60)).await.unwrap() else {
            panic!("a grant")
        };
        assert_eq!(g.receipt, "receipt-1");
        assert_eq!(g.credentials.access_key_id, "ASIAGRANT");
        assert!(matches!(
            api.claim(Duration::from_secs(1)).await.unwrap(),
            ClaimAnswer::Nothing
        ));
        assert!(matches!(
            api.claim(Duration::from_secs(1)).await.unwrap(),
            ClaimAnswer::Spent
        ));
        assert_eq!(
            *asked.lock().unwrap(),
            [
                // At most SQS's longest wait, whatever is asked.
                r#"POST /prod/v1/internal/claims {"waitSeconds":20}"#,
                r#"POST /prod/v1/internal/claims {"waitSeconds":1}"#,
                r#"POST /prod/v1/internal/claims {"waitSeconds":1}"#,
            ]
        );
    }

    #[tokio::test]
    async fn an_oversized_malformed_or_failed_answer_is_an_error_without_its_body() {
        let huge = format!(r#"{{"pad":"{}"}}"#, "x".repeat(MAX_ANSWER_BYTES));
        let (base, _) = stub_api(vec![
            answer("200 OK", &huge),
            answer("200 OK", r#"{"claim":"x"}"#),
            answer("503 Service Unavailable", r#"{"error":"s3cr3t detail"}"#),
            answer("403 Forbidden", r#"{"error":"not this task's session"}"#),
        ])
        .await;
        let api = api(base);
        let too_large = api.claim(Duration::ZERO).await.unwrap_err();
        assert!(matches!(too_large, TaskApiError::TooLarge), "{too_large:?}");
        assert_eq!(
            too_large.to_string(),
            "the task API's answer is larger than 65536 bytes"
        );
        let malformed = api.claim(Duration::ZERO).await.unwrap_err();
        assert!(
            matches!(malformed, TaskApiError::Malformed(_)),
            "{malformed:?}"
        );
        let failed = api.claim(Duration::ZERO).await.unwrap_err();
        assert_eq!(failed.to_string(), "the task API answered HTTP 503");
        assert!(failed.is_transient());
        let refused = api.credentials("sess_1").await.unwrap_err();
        assert_eq!(refused.to_string(), "the task API answered HTTP 403");
        assert!(!refused.is_transient());
    }

    #[tokio::test]
    async fn an_api_that_does_not_answer_is_an_error_in_bounded_time() {
        // Accepts and never answers.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let held = tokio::spawn(async move {
            let mut conns = Vec::new();
            while let Ok((c, _)) = listener.accept().await {
                conns.push(c);
            }
        });
        tokio::time::pause();
        let e = api(base).credentials("sess_1").await.unwrap_err();
        assert!(
            matches!(e, TaskApiError::Timeout(t) if t == CALL_MARGIN),
            "{e:?}"
        );
        assert!(e.is_transient());
        held.abort();
    }

    #[tokio::test]
    async fn a_grant_installs_its_credentials_before_the_claim_is_handed_on() {
        let (base, _) = stub_api(vec![
            answer("200 OK", &grant_json("ASIAGRANT")),
            answer("409 Conflict", "{}"),
        ])
        .await;
        let api = api(base);
        let credentials = SessionCredentialsProvider::new(api.clone());
        assert!(credentials.provide_credentials().await.is_err());
        let queue = SqsClaims {
            client: aws_sdk_sqs::Client::new(&task_sdk()),
            queue_url: "http://127.0.0.1:1/q".into(),
            visibility: Duration::from_secs(60),
        };
        let claims = ApiClaims::new(api, credentials.clone(), queue);
        let got = claims
            .receive(Duration::from_secs(1))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got.receipt, "receipt-1");
        assert_eq!(
            Claim::parse(&got.body).unwrap().session_id,
            "sess_1",
            "the claim as the API sent it"
        );
        let c = credentials.provide_credentials().await.unwrap();
        assert_eq!(c.access_key_id(), "ASIAGRANT");
        assert!(!claims.spent());
        assert_eq!(claims.receive(Duration::from_secs(1)).await.unwrap(), None);
        assert!(claims.spent());
    }

    #[tokio::test]
    async fn a_grants_live_view_is_kept_for_the_handoffs() {
        let mut with: serde_json::Value = serde_json::from_str(&grant_json("ASIAGRANT")).unwrap();
        with["liveView"] =
            serde_json::json!({"credential": "v.i.ew", "expiresAt": 4_000_000_000u64});
        let (base, _) = stub_api(vec![answer("200 OK", &with.to_string())]).await;
        let api = api(base);
        let credentials = SessionCredentialsProvider::new(api.clone());
        let queue = SqsClaims {
            client: aws_sdk_sqs::Client::new(&task_sdk()),
            queue_url: "http://127.0.0.1:1/q".into(),
            visibility: Duration::from_secs(60),
        };
        let claims = ApiClaims::new(api, credentials, queue);
        assert_eq!(claims.live_view(), None);
        claims
            .receive(Duration::from_secs(1))
            .await
            .unwrap()
            .unwrap();
        let lv = claims.live_view().expect("the grant's live view");
        assert_eq!(lv.expires_at, 4_000_000_000);
        assert_eq!(
            lv.url("http://203.0.113.9:9222"),
            "http://203.0.113.9:9222/viewer?t=v.i.ew"
        );
    }

    #[tokio::test]
    async fn a_cold_tasks_first_grant_gives_its_live_view() {
        let mut with: serde_json::Value =
            serde_json::from_str(&credentials_json("ASIACOLD")).unwrap();
        with["liveView"] = serde_json::json!({"credential": "c.o.ld", "expiresAt": 4_000_000_000u64, "base": "https://gw.test"});
        let (base, _) = stub_api(vec![answer("200 OK", &with.to_string())]).await;
        let api = api(base);
        let credentials = SessionCredentialsProvider::new(api.clone());
        let lv = api
            .credentials_at_start("sess_1", &credentials)
            .await
            .unwrap()
            .expect("the grant's live view");
        assert_eq!(
            lv.url("http://203.0.113.9:9222"),
            "https://gw.test/viewer?t=c.o.ld"
        );
    }

    #[tokio::test]
    async fn a_cold_task_asks_again_while_its_session_is_not_granted_yet() {
        let (base, asked) = stub_api(vec![
            answer("403 Forbidden", "{}"),
            answer("403 Forbidden", "{}"),
            answer("200 OK", &credentials_json("ASIACOLD")),
        ])
        .await;
        let api = api(base);
        let credentials = SessionCredentialsProvider::new(api.clone());
        let live_view = api
            .credentials_at_start("sess_1", &credentials)
            .await
            .unwrap();
        assert_eq!(live_view, None, "a grant without one");
        assert_eq!(
            credentials
                .provide_credentials()
                .await
                .unwrap()
                .access_key_id(),
            "ASIACOLD"
        );
        let asked = asked.lock().unwrap();
        assert_eq!(asked.len(), 3);
        assert_eq!(
            asked[0],
            r#"POST /prod/v1/internal/credentials {"sessionId":"sess_1"}"#
        );
    }
}
