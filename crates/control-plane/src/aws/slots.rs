//! Projects' concurrency slots, in their own table ([`DynamoSlots`]).

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{AttributeValue, Delete, Put, TransactWriteItem, Update};

use super::sdk_error;
use super::table::{s, transact};
use crate::stores::{Slot, SlotStore, StoreResult};

/// Projects' concurrency slots: table `wallcrawler-slots`, partition key `projectId`, sort key
/// `sessionId`. Per project, one item per held slot (sort key = the holder's session id) and
/// one counter item (sort key [`COUNTER`], attribute [`HELD`]) that is always the number of
/// slot items: the two change only together, in one `TransactWriteItems`. A take or give-back
/// writes these two small items whatever the number of active sessions; only a full project's
/// create reads the holders (a consistent `Query` of the partition) to reclaim stale ones.
pub struct DynamoSlots {
    client: aws_sdk_dynamodb::Client,
    table: String,
}

/// The counter item's sort key (session ids start with `sess_`, so no holder has it).
pub const COUNTER: &str = "#count";
/// The counter item's attribute: how many slot items the project has.
pub const HELD: &str = "held";

const SLOTS: &str = "the slots table";

impl DynamoSlots {
    /// Slots kept in `table`.
    pub fn new(client: aws_sdk_dynamodb::Client, table: &str) -> Self {
        Self {
            client,
            table: table.to_owned(),
        }
    }

    /// The key of project `project_id`'s item `sort` (a holder's session id, or [`COUNTER`]).
    fn key(project_id: &str, sort: &str) -> std::collections::HashMap<String, AttributeValue> {
        [
            ("projectId".to_owned(), s(project_id)),
            ("sessionId".to_owned(), s(sort)),
        ]
        .into()
    }

    /// The counter update `ADD held :d`; with a limit, on condition that fewer slots than it
    /// are held (or none ever were).
    fn counter(&self, project_id: &str, d: i64, limit: Option<u64>) -> TransactWriteItem {
        let mut u = Update::builder()
            .table_name(&self.table)
            .set_key(Some(Self::key(project_id, COUNTER)))
            .update_expression("ADD #h :d")
            .expression_attribute_names("#h", HELD)
            .expression_attribute_values(":d", AttributeValue::N(d.to_string()));
        if let Some(limit) = limit {
            u = u
                .condition_expression("attribute_not_exists(#h) OR #h < :limit")
                .expression_attribute_values(":limit", AttributeValue::N(limit.to_string()));
        }
        TransactWriteItem::builder()
            .update(u.build().expect("table, key and expression set"))
            .build()
    }

    /// The project's holders: a consistent `Query` of its partition, the counter left out.
    pub async fn holders(&self, project_id: &str) -> StoreResult<Vec<String>> {
        let items: Vec<_> = self
            .client
            .query()
            .table_name(&self.table)
            .key_condition_expression("projectId = :p")
            .expression_attribute_values(":p", s(project_id))
            .projection_expression("sessionId")
            .consistent_read(true)
            .into_paginator()
            .items()
            .send()
            .try_collect()
            .await
            .map_err(|e| sdk_error(SLOTS, e))?;
        Ok(items
            .iter()
            .filter_map(|i| i.get("sessionId")?.as_s().ok())
            .filter(|id| *id != COUNTER)
            .cloned()
            .collect())
    }
}

#[async_trait]
impl SlotStore for DynamoSlots {
    /// One transaction: the counter `ADD held 1` on condition `held < :limit` (or no counter
    /// yet), and the slot item `Put` on condition that it does not exist. The slot item's
    /// condition failing means this session holds a slot already (a retried take): `Taken`.
    /// The counter's alone: full, and the holders are read (a `Query`) for the caller to
    /// reclaim stale ones.
    async fn take(&self, project_id: &str, session_id: &str, limit: u64) -> StoreResult<Slot> {
        let mut item = Self::key(project_id, session_id);
        item.insert(
            "takenAt".to_owned(),
            s(&wallcrawler_contract::time::now_iso8601()),
        );
        let put = Put::builder()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(sessionId)")
            .build()
            .expect("table and item set");
        let items = vec![
            self.counter(project_id, 1, Some(limit)),
            TransactWriteItem::builder().put(put).build(),
        ];
        match transact(&self.client, items, SLOTS).await? {
            Ok(()) => Ok(Slot::Taken),
            Err(failed) if failed.contains(&1) => Ok(Slot::Taken),
            Err(_) => Ok(Slot::Full(self.holders(project_id).await?)),
        }
    }

    /// One transaction: the slot item `Delete` on condition that it exists, and the counter
    /// `ADD held -1`. A slot not held (a second give-back) fails the condition and changes
    /// nothing.
    async fn give_back(&self, project_id: &str, session_id: &str) -> StoreResult<()> {
        let delete = Delete::builder()
            .table_name(&self.table)
            .set_key(Some(Self::key(project_id, session_id)))
            .condition_expression("attribute_exists(sessionId)")
            .build()
            .expect("table and key set");
        let items = vec![
            TransactWriteItem::builder().delete(delete).build(),
            self.counter(project_id, -1, None),
        ];
        transact(&self.client, items, SLOTS).await.map(drop)
    }

    /// A strongly consistent `GetItem` of the counter item's `held` (0 when there is none).
    async fn held(&self, project_id: &str) -> StoreResult<u64> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(Self::key(project_id, COUNTER)))
            .projection_expression("#h")
            .expression_attribute_names("#h", HELD)
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| sdk_error(SLOTS, e))?;
        Ok(out
            .item()
            .and_then(|i| i.get(HELD)?.as_n().ok()?.parse().ok())
            .unwrap_or(0))
    }
}
