//! The task API on AWS ([`TaskBroker`]): claims long-polled from SQS and judged as a pool
//! controller judges them ([`claim_verdict`]), a served claim's session taken for the caller
//! together with the caller's item in the tasks table (one transaction), and credentials from
//! STS `AssumeRole` of the session role with the session's policy ([`session_policy`]).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_config::SdkConfig;
use aws_config::timeout::TimeoutConfig;
use aws_sdk_sqs::types::Message;
use tokio::time::Instant;
use tracing::{error, info, warn};
use wallcrawler_contract::claim::{Claim, NO_BROWSER_IN_TIME};
use wallcrawler_contract::session_doc::{ClaimVerdict, SessionDoc, Take, claim_verdict};
use wallcrawler_contract::task_api::{
    CallerTask, ClaimGrant, CredentialsGrant, LiveViewGrant, SessionCredentials, SessionScope,
    session_policy,
};
use wallcrawler_contract::time::{now_iso8601, unix_millis};

use super::sessions::{TASK_ID, TaskMarker, TaskTake};
use super::{Config, DynamoSessions, TaskApiSettings, sdk_error};
use crate::error::StoreError;
use crate::stores::{Cond, SessionStore, Signer, StoreResult};
use crate::task_api::{Broker, ClaimOutcome};

const SQS: &str = "the claims queue";
const TASKS: &str = "the tasks table";
const STS: &str = "STS";

/// How long session credentials last (STS's default; a task refreshes them before).
const CREDENTIALS_SECONDS: i32 = 3600;

/// How long a task's item stays in the tasks table: longer than any task lives (a session
/// lasts at most 6 hours, a warm task idles for less).
const MARKER_SECONDS: u64 = 7 * 24 * 3600;

/// How often a claim whose session keeps changing under it is judged again before it is
/// dropped (as a pool controller does).
const JUDGEMENTS: usize = 3;

/// The task API's broker over SQS, DynamoDB and STS.
pub struct TaskBroker {
    /// Its own client: a long poll outlasts the API's per-call timeouts.
    sqs: aws_sdk_sqs::Client,
    sts: aws_sdk_sts::Client,
    dynamo: aws_sdk_dynamodb::Client,
    sessions: DynamoSessions,
    sessions_table: String,
    bucket: String,
    region: String,
    cluster: String,
    t: TaskApiSettings,
    /// Mints the control-mode live-view credential a grant carries (the API's own key).
    signer: Arc<dyn Signer>,
}

impl TaskBroker {
    /// The broker of `cfg`'s task API `t`, on `sdk`.
    pub fn new(sdk: &SdkConfig, cfg: &Config, t: &TaskApiSettings) -> Self {
        // A 20 s long poll, with room to connect and answer; still inside API Gateway's 29 s.
        let poll = TimeoutConfig::builder()
            .connect_timeout(Duration::from_secs(3))
            .operation_attempt_timeout(Duration::from_secs(24))
            .operation_timeout(Duration::from_secs(25))
            .build();
        let sqs = aws_sdk_sqs::config::Builder::from(sdk)
            .timeout_config(poll)
            .build();
        let dynamo = aws_sdk_dynamodb::Client::new(sdk);
        Self {
            sqs: aws_sdk_sqs::Client::from_conf(sqs),
            sts: aws_sdk_sts::Client::new(sdk),
            sessions: DynamoSessions::new(dynamo.clone(), &cfg.tables.sessions),
            dynamo,
            sessions_table: cfg.tables.sessions.clone(),
            bucket: cfg.contexts_bucket.clone(),
            region: sdk.region().map(|r| r.to_string()).unwrap_or_default(),
            // `ECS_CLUSTER` may be an ARN; task ARNs name the cluster by name.
            cluster: cfg
                .ecs
                .cluster
                .rsplit('/')
                .next()
                .unwrap_or_default()
                .to_owned(),
            t: t.clone(),
            signer: Arc::new(super::SecretsSigner::new(sdk, &cfg.signing_secret_arn)),
        }
    }

    /// The session's control-mode live view for the task taking it (what a client's
    /// `Wallcrawler.requestHandoff` is answered with), until the session expires; on the
    /// gateway's origin when clients connect through one. `None` (handoffs refused by the
    /// task) when it cannot be minted: the claim is served all the same.
    async fn live_view(&self, doc: &SessionDoc, now: u64) -> Option<LiveViewGrant> {
        crate::task_api::live_view_grant(self.signer.as_ref(), doc, now).await
    }

    /// The caller's task ARN, as its task metadata and the session items name it.
    fn task_arn(&self, task: &CallerTask) -> String {
        task.task_arn(&self.region, &self.cluster)
    }

    /// What credentials for `session` may reach, for `task`.
    fn scope(&self, task: &CallerTask, session: Resources<'_>) -> SessionScope {
        let (partition, account) = (&task.partition, &task.account);
        let (queue_account, queue) = &self.t.queue;
        SessionScope {
            partition: partition.clone(),
            sessions_table_arn: format!(
                "arn:{partition}:dynamodb:{}:{account}:table/{}",
                self.region, self.sessions_table
            ),
            bucket: self.bucket.clone(),
            queue_arn: format!(
                "arn:{partition}:sqs:{}:{queue_account}:{queue}",
                self.region
            ),
            task_arn: self.task_arn(task),
            project_id: session.project_id.to_owned(),
            session_id: session.session_id.to_owned(),
            context_key: session.context_key.map(str::to_owned),
            extension_key: session.extension_key.map(str::to_owned),
        }
    }

    /// `AssumeRole` of the session role, named by the task id, narrowed to `scope`.
    async fn assume(
        &self,
        task: &CallerTask,
        scope: &SessionScope,
    ) -> StoreResult<SessionCredentials> {
        let out = self
            .sts
            .assume_role()
            .role_arn(&self.t.session_role_arn)
            .role_session_name(&task.task_id)
            .duration_seconds(CREDENTIALS_SECONDS)
            .policy(session_policy(scope).to_string())
            .send()
            .await
            .map_err(|e| sdk_error(STS, e))?;
        let c = out
            .credentials()
            .ok_or_else(|| StoreError::failed("STS answered AssumeRole without credentials"))?;
        Ok(SessionCredentials {
            access_key_id: c.access_key_id().to_owned(),
            secret_access_key: c.secret_access_key().to_owned(),
            session_token: c.session_token().to_owned(),
            expiration: u64::try_from(c.expiration().secs()).unwrap_or(0),
        })
    }

    /// Whether the task has an item in the tasks table (it has taken a session).
    async fn had_session(&self, task_id: &str) -> StoreResult<bool> {
        let out = self
            .dynamo
            .get_item()
            .table_name(&self.t.tasks_table)
            .key(
                TASK_ID,
                aws_sdk_dynamodb::types::AttributeValue::S(task_id.to_owned()),
            )
            .projection_expression(TASK_ID)
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| sdk_error(TASKS, e))?;
        Ok(out.item().is_some())
    }

    /// One receive of at most one claim, waiting up to `wait`, hidden for the claim
    /// visibility once received.
    async fn receive(&self, wait: Duration) -> StoreResult<Option<Message>> {
        let out = self
            .sqs
            .receive_message()
            .queue_url(&self.t.queue_url)
            .max_number_of_messages(1)
            .wait_time_seconds(i32::try_from(wait.as_secs()).unwrap_or(20))
            .visibility_timeout(i32::try_from(self.t.claim_visibility).unwrap_or(60))
            .send()
            .await
            .map_err(|e| sdk_error(SQS, e))?;
        Ok(out.messages.and_then(|mut m| m.pop()))
    }

    /// The claim visible again `after` from now (0: at once).
    async fn hand_back(&self, receipt: &str, after: u64) {
        let r = self
            .sqs
            .change_message_visibility()
            .queue_url(&self.t.queue_url)
            .receipt_handle(receipt)
            .visibility_timeout(i32::try_from(after).unwrap_or(i32::MAX))
            .send()
            .await;
        if let Err(e) = r {
            warn!(error = %crate::error::chain(&e), "handing a claim back failed; it comes back when its visibility ends");
        }
    }

    /// The claim deleted.
    async fn delete(&self, receipt: &str) {
        let r = self
            .sqs
            .delete_message()
            .queue_url(&self.t.queue_url)
            .receipt_handle(receipt)
            .send()
            .await;
        if let Err(e) = r {
            warn!(error = %crate::error::chain(&e), "deleting a dropped claim failed; it comes back and is dropped again");
        }
    }

    /// A received claim judged and acted on for `task`: `Some` answers the request; `None`
    /// waits for the next claim.
    async fn consider(&self, task: &CallerTask, m: Message) -> StoreResult<Option<ClaimOutcome>> {
        let (Some(body), Some(receipt)) = (m.body, m.receipt_handle) else {
            return Ok(None);
        };
        let claim = match Claim::parse(body.as_bytes()) {
            Ok(c) => c,
            Err(e) => {
                // Back at once: its receive count grows until the redrive policy moves it to
                // the dead-letter queue.
                warn!(error = %e, "a claim was refused; it goes toward the dead-letter queue");
                self.hand_back(&receipt, 0).await;
                return Ok(None);
            }
        };
        let me = self.task_arn(task);
        for _ in 0..JUDGEMENTS {
            let now = unix_millis() / 1000;
            let doc = self.sessions.get(&claim.session_id).await?;
            match claim_verdict(&claim, doc.as_ref().map(SessionDoc::claim_facts), now, &me) {
                ClaimVerdict::Serve => match self.take(task, &claim.session_id, &me, now).await? {
                    TaskTake::Taken => {
                        let mut grant = self.grant(task, &claim, body, receipt).await?;
                        if let Some(d) = &doc {
                            grant.live_view = self.live_view(d, now).await;
                        }
                        return Ok(Some(ClaimOutcome::Granted(Box::new(grant))));
                    }
                    TaskTake::Refused => continue,
                    TaskTake::HadSession => {
                        self.hand_back(&receipt, 0).await;
                        return Ok(Some(ClaimOutcome::HadSession));
                    }
                },
                ClaimVerdict::Unserved => {
                    let at = now_iso8601();
                    if let Cond::Done(_) = self
                        .sessions
                        .end_unserved(&claim.session_id, now, &at)
                        .await?
                    {
                        info!(session.id = %claim.session_id, "claim dropped: its deadline passed: {NO_BROWSER_IN_TIME}");
                        self.delete(&receipt).await;
                        return Ok(None);
                    }
                }
                verdict => {
                    self.decline(&claim, verdict, &receipt, now).await?;
                    return Ok(None);
                }
            }
        }
        info!(session.id = %claim.session_id, "claim dropped: the session kept changing while it was judged");
        self.delete(&receipt).await;
        Ok(None)
    }

    /// Session `id` taken by task `me` (`task`) for a claim's visibility, with the marker that
    /// the task holds a session.
    async fn take(&self, task: &CallerTask, id: &str, me: &str, now: u64) -> StoreResult<TaskTake> {
        let t = Take {
            owner: me,
            until: now + self.t.claim_visibility,
            task: Some(me),
            now,
        };
        let marker = TaskMarker {
            table: &self.t.tasks_table,
            task_id: &task.task_id,
            expires_at: now + MARKER_SECONDS,
        };
        self.sessions.take_for_task(id, &t, &marker).await
    }

    /// A claim not to serve: handed back until another owner's lease ends, or dropped (with
    /// `endedAt` for a session released before anyone served it).
    async fn decline(
        &self,
        claim: &Claim,
        verdict: ClaimVerdict,
        receipt: &str,
        now: u64,
    ) -> StoreResult<()> {
        match verdict {
            ClaimVerdict::HandBack { until } => {
                // Not deleted: should that owner die before READY, this claim is how the
                // session is still served.
                info!(session.id = %claim.session_id, "another task holds the claim's session; handed back");
                let after = until.map_or(self.t.claim_visibility, |u| u.saturating_sub(now) + 1);
                self.hand_back(receipt, after).await;
            }
            ClaimVerdict::Discard { why, end } => {
                info!(session.id = %claim.session_id, why, "claim dropped");
                if end {
                    self.sessions
                        .mark_ended_if_missing(&claim.session_id, &now_iso8601())
                        .await?;
                }
                self.delete(receipt).await;
            }
            ClaimVerdict::Serve | ClaimVerdict::Unserved => {}
        }
        Ok(())
    }

    /// The grant of a claim whose session `task` has taken: credentials for it. If STS fails
    /// here the task is answered 503 and, its item written, 409 from then on (it exits and is
    /// replaced); the claim comes back when its visibility ends and the lease lapses with it.
    async fn grant(
        &self,
        task: &CallerTask,
        claim: &Claim,
        body: String,
        receipt: String,
    ) -> StoreResult<ClaimGrant> {
        let scope = self.scope(task, Resources::of_claim(claim));
        let credentials = self.assume(task, &scope).await.inspect_err(|e| {
            error!(task.id = %task.task_id, session.id = %claim.session_id, error = %crate::error::chain(e), "session credentials failed after the take");
        })?;
        info!(task.id = %task.task_id, session.id = %claim.session_id, "claim granted");
        Ok(ClaimGrant {
            claim: body,
            receipt,
            credentials,
            live_view: None,
        })
    }
}

/// A session's resources, from its claim or its item.
struct Resources<'a> {
    project_id: &'a str,
    session_id: &'a str,
    context_key: Option<&'a str>,
    extension_key: Option<&'a str>,
}

impl<'a> Resources<'a> {
    fn of_claim(c: &'a Claim) -> Self {
        Self {
            project_id: &c.project_id,
            session_id: &c.session_id,
            context_key: c.context.as_ref().map(|x| x.key.as_str()),
            extension_key: c.extension_key.as_deref(),
        }
    }

    fn of_item(d: &'a SessionDoc) -> Self {
        Self {
            project_id: &d.project_id,
            session_id: &d.session_id,
            context_key: d.context_storage_key.as_deref(),
            extension_key: d.extension_key.as_deref(),
        }
    }
}

#[async_trait]
impl Broker for TaskBroker {
    /// Refused at once (409) for a task with an item in the tasks table; else receives until
    /// a claim is served or `wait` has passed.
    async fn claim(&self, task: &CallerTask, wait: Duration) -> StoreResult<ClaimOutcome> {
        if self.had_session(&task.task_id).await? {
            return Ok(ClaimOutcome::HadSession);
        }
        let until = Instant::now() + wait;
        let mut first = true;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if !first && left < Duration::from_secs(1) {
                return Ok(ClaimOutcome::Nothing);
            }
            first = false;
            let Some(m) = self.receive(left).await? else {
                return Ok(ClaimOutcome::Nothing);
            };
            if let Some(outcome) = self.consider(task, m).await? {
                return Ok(outcome);
            }
        }
    }

    /// A consistent read of the item: credentials only when its `ecsTaskArn` is the caller's
    /// task (taken from a claim, or written when the task was started for the session).
    async fn credentials(
        &self,
        task: &CallerTask,
        session_id: &str,
    ) -> StoreResult<Option<CredentialsGrant>> {
        let Some(doc) = self.sessions.get(session_id).await? else {
            return Ok(None);
        };
        if doc.ecs_task_arn.as_deref() != Some(self.task_arn(task).as_str()) {
            return Ok(None);
        }
        let scope = self.scope(task, Resources::of_item(&doc));
        let credentials = self.assume(task, &scope).await?;
        let live_view = self.live_view(&doc, unix_millis() / 1000).await;
        Ok(Some(CredentialsGrant {
            credentials,
            live_view,
        }))
    }

    /// An item `identity#<digest>` in the tasks table (no task id has a `#`), put only if
    /// there is none, with the table's TTL at `until`.
    async fn first_use(&self, digest: &str, until: u64) -> StoreResult<bool> {
        use aws_sdk_dynamodb::types::AttributeValue;
        let put = self
            .dynamo
            .put_item()
            .table_name(&self.t.tasks_table)
            .item(TASK_ID, AttributeValue::S(format!("identity#{digest}")))
            .item(
                wallcrawler_contract::session::attr::EXPIRES_AT,
                AttributeValue::N(until.to_string()),
            )
            .condition_expression("attribute_not_exists(#k)")
            .expression_attribute_names("#k", TASK_ID)
            .send()
            .await;
        Ok(super::table::condition(put, TASKS)?.is_ok())
    }
}
