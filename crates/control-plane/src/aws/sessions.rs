//! The sessions table ([`DynamoSessions`]): the session item, its conditional status writes
//! and its four indexes.

use async_trait::async_trait;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::operation::update_item::{UpdateItemError, UpdateItemOutput};
use aws_sdk_dynamodb::types::{
    AttributeValue, Put, ReturnValue, ReturnValuesOnConditionCheckFailure, TransactWriteItem,
    Update,
};
use wallcrawler_aws::item::{self, Item};
use wallcrawler_contract::session::attr;
use wallcrawler_contract::session_doc::{SessionDoc, Take};
use wallcrawler_contract::{InternalStatus, SdkStatus};

use super::sdk_error;
use super::table::{SdkResult, Table, condition, from_opt, s, transact};
use crate::error::StoreError;
use crate::stores::{
    Cond, DocWrite, Ids, ListPos, Listing, PageAt, SessionPage, SessionStore, StoreResult,
    Terminal, Usage,
};

/// The sessions table's GSI by project (PK `projectId`, SK `createdAt`, projection `INCLUDE`
/// of [`crate::stores::LISTED`]: no token).
pub const PROJECT_INDEX: &str = "projectId-createdAt-index";
/// Sessions by status and expiry (hash `status`, range `expiresAt`, projection `KEYS_ONLY`):
/// what the sweeper queries.
pub const STATUS_INDEX: &str = "status-expiresAt-index";
/// Sessions by the task that served them (hash `ecsTaskArn`, projection `KEYS_ONLY`; sparse:
/// only items with a task ARN are in it).
pub const TASK_INDEX: &str = "ecsTaskArn-index";

/// Sessions by context (hash `contextId`, projection `INCLUDE` of `endedAt` only; sparse: only
/// sessions on a context are in it): how `DELETE /v1/contexts/{id}` finds the sessions that
/// may still use the context, without a scan.
pub const CONTEXT_INDEX: &str = "contextId-index";

const SESSIONS: &str = "the sessions table";
const SESSION: &str = "session";

/// `wallcrawler-sessions` (key `sessionId`).
pub struct DynamoSessions(Table);

impl DynamoSessions {
    /// Sessions in `table` (`sessionId` key).
    pub fn new(client: aws_sdk_dynamodb::Client, table: &str) -> Self {
        Self(Table::new(
            client,
            table,
            attr::SESSION_ID,
            SESSIONS,
            SESSION,
        ))
    }

    /// One `TransactWriteItems`: session `id` taken for `t.owner` — on the controller's own
    /// condition (pending, and no other live owner: none, `t.owner`, or a lapsed lease), `SET
    /// owner, ownerUntil = t.until, ecsTaskArn = t.task` — and the task's item put in the
    /// tasks table on condition that it has none ([`TaskMarker`]). Both or neither: a task
    /// takes one session in its life, however many claims it asks for at once.
    pub async fn take_for_task(
        &self,
        id: &str,
        t: &Take<'_>,
        marker: &TaskMarker<'_>,
    ) -> StoreResult<TaskTake> {
        let v = |n: u64| AttributeValue::N(n.to_string());
        let take = Update::builder()
            .table_name(&self.0.name)
            .key(attr::SESSION_ID, s(id))
            .condition_expression(
                "internalStatus IN (:c, :p, :s) AND \
                 (attribute_not_exists(#owner) OR #owner = :me OR ownerUntil < :now)",
            )
            .update_expression("SET #owner = :me, ownerUntil = :until, ecsTaskArn = :task")
            .expression_attribute_names("#owner", attr::OWNER)
            .expression_attribute_values(":c", s(InternalStatus::Creating.as_str()))
            .expression_attribute_values(":p", s(InternalStatus::Provisioning.as_str()))
            .expression_attribute_values(":s", s(InternalStatus::Starting.as_str()))
            .expression_attribute_values(":me", s(t.owner))
            .expression_attribute_values(":task", s(t.task.unwrap_or(t.owner)))
            .expression_attribute_values(":until", v(t.until))
            .expression_attribute_values(":now", v(t.now))
            .build()
            .expect("table, key and expressions set");
        let mark = Put::builder()
            .table_name(marker.table)
            .item(TASK_ID, s(marker.task_id))
            .item(attr::SESSION_ID, s(id))
            .item(attr::EXPIRES_AT, v(marker.expires_at))
            .condition_expression("attribute_not_exists(taskId)")
            .build()
            .expect("table and item set");
        let items = vec![
            TransactWriteItem::builder().update(take).build(),
            TransactWriteItem::builder().put(mark).build(),
        ];
        Ok(match transact(&self.0.client, items, SESSIONS).await? {
            Ok(()) => TaskTake::Taken,
            Err(failed) if failed.contains(&1) => TaskTake::HadSession,
            Err(_) => TaskTake::Refused,
        })
    }

    /// An update of session `id` that answers with the new item (ALL_NEW), or with the current
    /// one (ALL_OLD) when its condition fails.
    fn update_returning(&self, id: &str) -> UpdateItemFluentBuilder {
        self.0.update_or_old(id).return_values(ReturnValue::AllNew)
    }
}

#[async_trait]
impl SessionStore for DynamoSessions {
    /// `PutItem` on condition `attribute_not_exists(sessionId)`.
    async fn create(&self, doc: SessionDoc) -> DocWrite {
        let r = self
            .0
            .client
            .put_item()
            .table_name(&self.0.name)
            .set_item(Some(item::to_item(SESSION, &doc)?))
            .condition_expression("attribute_not_exists(sessionId)")
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match condition(r, SESSIONS)? {
            Ok(_) => Ok(Cond::Done(doc)),
            Err(old) => Ok(Cond::Failed(from_opt(SESSION, old.as_ref())?)),
        }
    }

    async fn get(&self, id: &str) -> StoreResult<Option<SessionDoc>> {
        self.0.get(id).await
    }

    /// One `Query` on [`PROJECT_INDEX`] (eventually consistent: GSIs cannot be read
    /// otherwise) with `Limit`, from `ExclusiveStartKey` = `at.after`'s index and table keys;
    /// `LastEvaluatedKey` is where the next page starts.
    async fn list_project(&self, project_id: &str, at: PageAt) -> Listing {
        let start = at.after.map(|a| {
            Item::from([
                (attr::PROJECT_ID.to_owned(), s(project_id)),
                (attr::CREATED_AT.to_owned(), s(&a.created_at)),
                (attr::SESSION_ID.to_owned(), s(&a.session_id)),
            ])
        });
        let out = self
            .0
            .client
            .query()
            .table_name(&self.0.name)
            .index_name(PROJECT_INDEX)
            .key_condition_expression("projectId = :p")
            .expression_attribute_values(":p", s(project_id))
            .scan_index_forward(true)
            .limit(i32::try_from(at.limit).unwrap_or(i32::MAX))
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| sdk_error(SESSIONS, e))?;
        let sessions = out
            .items()
            .iter()
            .map(|i| item::from_item(SESSION, i))
            .collect::<Result<_, _>>()?;
        let next = out.last_evaluated_key().map(|k| {
            let text = |a: &str| k.get(a).and_then(|v| v.as_s().ok()).cloned();
            ListPos {
                created_at: text(attr::CREATED_AT).unwrap_or_default(),
                session_id: text(attr::SESSION_ID).unwrap_or_default(),
            }
        });
        Ok(SessionPage { sessions, next })
    }

    /// `Query` on [`TASK_INDEX`]; a task serves one session, so the first key is the answer.
    async fn find_by_task(&self, task_arn: &str) -> StoreResult<Option<String>> {
        let page = self
            .0
            .client
            .query()
            .table_name(&self.0.name)
            .index_name(TASK_INDEX)
            .key_condition_expression("ecsTaskArn = :t")
            .expression_attribute_values(":t", s(task_arn))
            .limit(1)
            .send()
            .await
            .map_err(|e| sdk_error(SESSIONS, e))?;
        Ok(page
            .items()
            .first()
            .and_then(|i| i.get("sessionId"))
            .and_then(|v| v.as_s().ok())
            .cloned())
    }

    /// `Query` on [`CONTEXT_INDEX`], every page, filtered on `attribute_not_exists(endedAt)`:
    /// the index holds only the keys and `endedAt`, so a context's ended sessions cost a few
    /// bytes each to pass over, and nothing reads the rest of the table.
    async fn on_context(&self, context_id: &str) -> Ids {
        let items: Result<Vec<Item>, _> = self
            .0
            .client
            .query()
            .table_name(&self.0.name)
            .index_name(CONTEXT_INDEX)
            .key_condition_expression("contextId = :c")
            .filter_expression("attribute_not_exists(endedAt)")
            .expression_attribute_values(":c", s(context_id))
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await;
        Ok(items
            .map_err(|e| sdk_error(SESSIONS, e))?
            .iter()
            .filter_map(|i| i.get(attr::SESSION_ID)?.as_s().ok().cloned())
            .collect())
    }

    /// `UpdateItem` on condition `internalStatus = CREATING`.
    async fn mark_provisioning(&self, id: &str, task_arn: Option<&str>, at: &str) -> DocWrite {
        let mut expr = String::from("SET internalStatus = :prov, #st = :sdk, updatedAt = :at");
        let mut req = self
            .update_returning(id)
            .condition_expression("internalStatus = :creating")
            .expression_attribute_names("#st", attr::STATUS)
            .expression_attribute_values(":creating", s(InternalStatus::Creating.as_str()))
            .expression_attribute_values(":prov", s(InternalStatus::Provisioning.as_str()))
            .expression_attribute_values(
                ":sdk",
                s(InternalStatus::Provisioning.sdk_status().as_str()),
            )
            .expression_attribute_values(":at", s(at));
        if let Some(arn) = task_arn {
            expr.push_str(", ecsTaskArn = :arn");
            req = req.expression_attribute_values(":arn", s(arn));
        }
        updated(req.update_expression(expr).send().await)
    }

    /// Two conditional `UpdateItem`s, race-free because a terminal status never changes:
    /// 1. on condition "exists and not terminal": the status (and reason), `updatedAt`, and
    ///    with `ended` `endedAt = if_not_exists(endedAt, :at)`;
    /// 2. only if (1) failed on a terminal item without `endedAt` and `ended` is asked for: on
    ///    condition "exists and no `endedAt`", `endedAt` and `updatedAt`.
    async fn mark_terminal(&self, id: &str, to: Terminal<'_>, at: &str) -> DocWrite {
        let req = self.update_returning(id);
        let (req, mut expr) = wallcrawler_aws::terminal_update(req, to.status, to.reason, at);
        let ended = to.ended;
        if ended {
            expr.push_str(", endedAt = if_not_exists(endedAt, :at)");
        }
        let current = match updated(req.update_expression(expr).send().await)? {
            Cond::Done(d) => return Ok(Cond::Done(d)),
            Cond::Failed(None) => return Ok(Cond::Failed(None)),
            Cond::Failed(Some(d)) => d,
        };
        if !ended || current.ended_at.is_some() {
            return Ok(Cond::Failed(Some(current)));
        }
        let r = self
            .update_returning(id)
            .condition_expression(ENDED_MISSING)
            .update_expression("SET endedAt = :at, updatedAt = :at")
            .expression_attribute_values(":at", s(at))
            .send()
            .await;
        updated(r)
    }

    /// `UpdateItem` on condition "exists and no `endedAt`"; a failed condition is fine.
    async fn mark_ended_if_missing(&self, id: &str, at: &str) -> StoreResult<()> {
        let req = self
            .0
            .update(id)
            .condition_expression(ENDED_MISSING)
            .update_expression("SET endedAt = :at")
            .expression_attribute_values(":at", s(at));
        self.0.unless_condition_fails(req).await
    }

    /// `UpdateItem` on condition "pending and `claimDeadline` < `to`".
    async fn extend_claim(&self, id: &str, to: u64) -> DocWrite {
        let req =
            wallcrawler_aws::pending_condition(self.update_returning(id), "claimDeadline < :to")
                .update_expression("SET claimDeadline = :to")
                .expression_attribute_values(":to", AttributeValue::N(to.to_string()));
        updated(req.send().await)
    }

    /// `UpdateItem` on condition "pending and `claimDeadline` < `now`"
    /// ([`wallcrawler_aws::unserved_update`], the controller's own write).
    async fn end_unserved(&self, id: &str, now: u64, at: &str) -> DocWrite {
        let req = wallcrawler_aws::unserved_update(self.update_returning(id), now, at);
        updated(req.send().await)
    }

    /// `Query` on [`STATUS_INDEX`]: `status = :st AND expiresAt < :before`, ascending, pages
    /// until `limit` keys.
    async fn expiring(&self, status: SdkStatus, before: u64, limit: usize) -> Ids {
        let mut ids = Vec::new();
        let mut start = None;
        while ids.len() < limit {
            let page = self
                .0
                .client
                .query()
                .table_name(&self.0.name)
                .index_name(STATUS_INDEX)
                .key_condition_expression("#st = :st AND expiresAt < :before")
                .expression_attribute_names("#st", attr::STATUS)
                .expression_attribute_values(":st", s(status.as_str()))
                .expression_attribute_values(":before", AttributeValue::N(before.to_string()))
                .limit(i32::try_from(limit - ids.len()).unwrap_or(i32::MAX))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| sdk_error(SESSIONS, e))?;
            ids.extend(
                page.items()
                    .iter()
                    .filter_map(|i| i.get(attr::SESSION_ID)?.as_s().ok().cloned()),
            );
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                break;
            }
        }
        Ok(ids)
    }

    /// One `TransactWriteItems`: the session `SET usageCounted` on condition that it exists
    /// and has none, and the project's usage item (`usage#<projectId>`, [`usage_key`]) `ADD`s
    /// the minutes and bytes. Only the first of simultaneous counts passes the condition.
    async fn count_usage(&self, id: &str, project_id: &str, used: Usage) -> StoreResult<bool> {
        let mark = Update::builder()
            .table_name(&self.0.name)
            .key(attr::SESSION_ID, s(id))
            .update_expression("SET #c = :t")
            .condition_expression("attribute_exists(sessionId) AND attribute_not_exists(#c)")
            .expression_attribute_names("#c", attr::USAGE_COUNTED)
            .expression_attribute_values(":t", AttributeValue::Bool(true))
            .build()
            .expect("table, key and expression set");
        let add = Update::builder()
            .table_name(&self.0.name)
            .key(attr::SESSION_ID, s(&usage_key(project_id)))
            .update_expression("ADD #m :m, #b :b")
            .expression_attribute_names("#m", BROWSER_MINUTES)
            .expression_attribute_names("#b", attr::PROXY_BYTES)
            .expression_attribute_values(":m", number(used.browser_minutes))
            .expression_attribute_values(":b", number(used.proxy_bytes))
            .build()
            .expect("table, key and expression set");
        let items = vec![
            TransactWriteItem::builder().update(mark).build(),
            TransactWriteItem::builder().update(add).build(),
        ];
        Ok(transact(&self.0.client, items, SESSIONS).await?.is_ok())
    }

    /// A consistent `GetItem` of the project's usage item.
    async fn usage(&self, project_id: &str) -> StoreResult<Usage> {
        let out = self
            .0
            .client
            .get_item()
            .table_name(&self.0.name)
            .key(attr::SESSION_ID, s(&usage_key(project_id)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| sdk_error(SESSIONS, e))?;
        let read = |a: &str| {
            out.item()
                .and_then(|i| i.get(a)?.as_n().ok()?.parse().ok())
                .unwrap_or(0)
        };
        Ok(Usage {
            browser_minutes: read(BROWSER_MINUTES),
            proxy_bytes: read(attr::PROXY_BYTES),
        })
    }
}

/// The tasks table's key: a task's id.
pub const TASK_ID: &str = "taskId";

/// A task's item in the tasks table: the session it took, kept until `expires_at` (the
/// table's TTL attribute, Unix seconds), well past the task's life.
#[derive(Debug, Clone, Copy)]
pub struct TaskMarker<'a> {
    /// The tasks table.
    pub table: &'a str,
    /// The task's id.
    pub task_id: &'a str,
    /// When DynamoDB may delete the item.
    pub expires_at: u64,
}

/// What taking a claimed session for a task came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskTake {
    /// Taken: the task owns it, and its item names it.
    Taken,
    /// The session is not pending any more, or another live owner holds it: judge again.
    Refused,
    /// The task has taken a session before (its item exists); nothing was written.
    HadSession,
}

/// The usage item's minutes attribute.
const BROWSER_MINUTES: &str = "browserMinutes";

/// The key of a project's usage item in the sessions table: not a session id (those start
/// with `sess_`), and with no `projectId`, `createdAt`, `status` or `expiresAt` it is in no
/// index and never expires.
pub fn usage_key(project_id: &str) -> String {
    format!("usage#{project_id}")
}

/// A number attribute.
fn number(n: u64) -> AttributeValue {
    AttributeValue::N(n.to_string())
}

/// The condition of the writes of `endedAt`: the session exists and has none yet.
const ENDED_MISSING: &str = "attribute_exists(sessionId) AND attribute_not_exists(endedAt)";

/// A conditional session update's outcome: the new item, or the current one (ALL_OLD) when
/// the condition failed.
fn updated(r: SdkResult<UpdateItemOutput, UpdateItemError>) -> DocWrite {
    match condition(r, SESSIONS)? {
        Ok(out) => match out.attributes() {
            Some(i) => Ok(Cond::Done(item::from_item(SESSION, i)?)),
            None => Err(StoreError::failed(format!(
                "{SESSIONS}: an update returned no item"
            ))),
        },
        Err(old) => Ok(Cond::Failed(from_opt(SESSION, old.as_ref())?)),
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::types::AttributeValue;

    use super::*;
    use crate::model::ApiKeyRecord;

    #[test]
    fn session_items_use_the_schema_names_and_types() {
        let mut d = SessionDoc {
            session_id: "sess_1".into(),
            project_id: "proj_1".into(),
            created_at: "2026-01-01T00:00:00.000Z".into(),
            expires_at: 1_800_000_000,
            keep_alive: true,
            region: "us-east-1".into(),
            proxy_bytes: Some(42),
            context_persist: Some(false),
            public_ip: Some("203.0.113.1".into()),
            user_metadata: Some(serde_json::json!({"a": [1, "x", null], "b": {"c": true}})),
            ..Default::default()
        };
        d.set_status(InternalStatus::Creating);
        let item = item::to_item(SESSION, &d).unwrap();
        assert_eq!(item[attr::SESSION_ID], s("sess_1"));
        assert_eq!(item[attr::STATUS], s("PENDING"));
        assert_eq!(item[attr::INTERNAL_STATUS], s("CREATING"));
        assert_eq!(item[attr::CREATED_AT], s("2026-01-01T00:00:00.000Z"));
        assert_eq!(
            item[attr::EXPIRES_AT],
            AttributeValue::N("1800000000".into())
        );
        assert_eq!(item[attr::KEEP_ALIVE], AttributeValue::Bool(true));
        assert_eq!(item[attr::PROXY_BYTES], AttributeValue::N("42".into()));
        assert_eq!(item[attr::CONTEXT_PERSIST], AttributeValue::Bool(false));
        assert_eq!(item[attr::PUBLIC_IP], s("203.0.113.1"));
        assert!(matches!(item[attr::USER_METADATA], AttributeValue::M(_)));
        assert!(!item.contains_key(attr::ENDED_AT), "absent stays absent");
        assert_eq!(item::from_item::<SessionDoc>(SESSION, &item).unwrap(), d);
    }

    #[test]
    fn key_items_hold_project_ids_as_a_list_of_strings() {
        let k = ApiKeyRecord {
            api_key_hash: "ab".into(),
            key_id: None,
            project_id: "p1".into(),
            project_ids: vec!["p1".into(), "p2".into()],
            name: None,
            status: "ACTIVE".into(),
            created_at: "2026-01-01T00:00:00.000Z".into(),
        };
        let item = item::to_item("API key", &k).unwrap();
        assert_eq!(item["apiKeyHash"], s("ab"));
        assert_eq!(
            item["projectIds"],
            AttributeValue::L(vec![s("p1"), s("p2")])
        );
        assert_eq!(item::from_item::<ApiKeyRecord>("key", &item).unwrap(), k);
    }

    #[test]
    fn whole_numbers_another_tool_wrote_read_back_and_sets_read_as_lists() {
        // (`numbers_read_back_as_integers_when_whole` itself is in `wallcrawler_aws::item`.)
        let mut d = SessionDoc {
            session_id: "sess_1".into(),
            expires_at: 1_700_000_000,
            proxy_bytes: Some(7),
            ..Default::default()
        };
        d.set_status(InternalStatus::Ready);
        let mut i = item::to_item(SESSION, &d).unwrap();
        i.insert(
            attr::EXPIRES_AT.into(),
            AttributeValue::N("1700000000.0".into()),
        );
        i.insert(attr::PROXY_BYTES.into(), AttributeValue::N("7.0".into()));
        assert_eq!(item::from_item::<SessionDoc>(SESSION, &i).unwrap(), d);
        i.insert(attr::EXPIRES_AT.into(), AttributeValue::N("1.5".into()));
        let e = item::from_item::<SessionDoc>(SESSION, &i).unwrap_err();
        assert!(e.to_string().contains("malformed session item"), "{e}");

        let mut k = item::to_item(
            "API key",
            &ApiKeyRecord {
                api_key_hash: "ab".into(),
                key_id: None,
                project_id: "p1".into(),
                project_ids: vec![],
                name: None,
                status: "ACTIVE".into(),
                created_at: "2026-01-01T00:00:00.000Z".into(),
            },
        )
        .unwrap();
        k.insert("projectIds".into(), AttributeValue::Ss(vec!["p1".into()]));
        let r: ApiKeyRecord = item::from_item("API key", &k).unwrap();
        assert_eq!(r.project_ids, ["p1"]);
    }

    #[test]
    fn a_malformed_item_is_a_failure_not_a_panic() {
        let i: Item = [
            (attr::SESSION_ID.to_owned(), s("sess_1")),
            (
                attr::SIGNING_KEY.to_owned(),
                AttributeValue::B(aws_sdk_dynamodb::primitives::Blob::new(b"x".to_vec())),
            ),
        ]
        .into();
        assert!(matches!(
            from_opt::<SessionDoc>(SESSION, Some(&i)),
            Err(StoreError::Failed { .. })
        ));
    }
}
