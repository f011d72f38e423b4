//! The records besides sessions: projects and API keys (one generic store,
//! [`DynamoRecords`]) and contexts with their writer lease ([`DynamoContexts`]).

use std::marker::PhantomData;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;

use super::table::{Table, s};
use crate::model::{ApiKeyRecord, ContextRecord, Project, Record};
use crate::stores::{ContextStore, KeyStore, Lease, RecordStore, StoreResult};

/// A table of records `R` (key [`Record::KEY`]): `GetItem` and `PutItem`.
pub struct DynamoRecords<R> {
    table: Table,
    _records: PhantomData<fn() -> R>,
}

/// `wallcrawler-projects` (key `projectId`).
pub type DynamoProjects = DynamoRecords<Project>;

/// `wallcrawler-api-keys` (key `apiKeyHash`; only hashes are stored).
pub type DynamoKeys = DynamoRecords<ApiKeyRecord>;

impl<R: Record> DynamoRecords<R> {
    /// Records in `table`.
    pub fn new(client: aws_sdk_dynamodb::Client, table: &str) -> Self {
        Self {
            table: Table::of::<R>(client, table),
            _records: PhantomData,
        }
    }
}

#[async_trait]
impl<R: Record> RecordStore<R> for DynamoRecords<R> {
    async fn get(&self, key: &str) -> StoreResult<Option<R>> {
        self.table.get(key).await
    }

    /// Creates or replaces the record.
    async fn put(&self, record: R) -> StoreResult<()> {
        self.table.put(&record, false).await
    }
}

#[async_trait]
impl KeyStore for DynamoKeys {
    /// `UpdateItem` on condition `attribute_exists(apiKeyHash)`; false when there is no key.
    async fn set_status(&self, hash: &str, status: &str) -> StoreResult<bool> {
        self.table.set_if_exists(hash, "status", status).await
    }
}

/// `wallcrawler-contexts` (key `contextId`).
pub struct DynamoContexts(Table);

impl DynamoContexts {
    /// Contexts in `table` (`contextId` key).
    pub fn new(client: aws_sdk_dynamodb::Client, table: &str) -> Self {
        Self(Table::of::<ContextRecord>(client, table))
    }
}

#[async_trait]
impl ContextStore for DynamoContexts {
    /// `PutItem` on condition `attribute_not_exists(contextId)` (ids are random; a collision is
    /// an error, never an overwrite).
    async fn create(&self, c: ContextRecord) -> StoreResult<()> {
        self.0.put(&c, true).await
    }

    async fn get(&self, id: &str) -> StoreResult<Option<ContextRecord>> {
        self.0.get(id).await
    }

    /// Sets `updatedAt` of an existing context (a missing one is left missing).
    async fn touch(&self, id: &str, at: &str) -> StoreResult<()> {
        self.0.set_if_exists(id, "updatedAt", at).await.map(drop)
    }

    /// `DeleteItem` on condition that there is no writer (`attribute_not_exists(
    /// writerSessionId)`) or it is `writer`, so a persisting create that took the lease after
    /// the caller looked keeps its context.
    async fn delete(&self, id: &str, writer: Option<&str>) -> StoreResult<bool> {
        const FREE: &str = "attribute_not_exists(writerSessionId)";
        match writer {
            None => self.0.delete_if(id, FREE, Default::default()).await,
            Some(w) => {
                let values = [(":w".to_owned(), s(w))].into();
                let cond = format!("{FREE} OR writerSessionId = :w");
                self.0.delete_if(id, &cond, values).await
            }
        }
    }

    /// `UpdateItem SET writerSessionId = :sid` on condition that the context exists and has no
    /// writer, or has this one, or has `replacing`; ALL_OLD on failure names the holder.
    async fn take_writer(
        &self,
        id: &str,
        session_id: &str,
        replacing: Option<&str>,
    ) -> StoreResult<Lease> {
        let mut cond = String::from(
            "attribute_exists(contextId) AND (attribute_not_exists(writerSessionId) \
             OR writerSessionId = :sid",
        );
        let mut req = self
            .0
            .update_or_old(id)
            .update_expression("SET writerSessionId = :sid")
            .expression_attribute_values(":sid", s(session_id));
        if let Some(old) = replacing {
            cond.push_str(" OR writerSessionId = :old");
            req = req.expression_attribute_values(":old", s(old));
        }
        cond.push(')');
        let old = match self.0.conditional(req.condition_expression(cond)).await? {
            Ok(_) => return Ok(Lease::Taken),
            Err(old) => old,
        };
        Ok(match old.as_ref().and_then(|i| i.get("writerSessionId")) {
            Some(AttributeValue::S(holder)) => Lease::Held(holder.clone()),
            // No item (or, oddly, no writer after all): no such context.
            _ => Lease::NoContext,
        })
    }

    /// `UpdateItem REMOVE writerSessionId` on condition `writerSessionId = :sid`.
    async fn release_writer(&self, id: &str, session_id: &str) -> StoreResult<()> {
        let req = self
            .0
            .update(id)
            .condition_expression("writerSessionId = :sid")
            .update_expression("REMOVE writerSessionId")
            .expression_attribute_values(":sid", s(session_id));
        self.0.unless_condition_fails(req).await
    }
}
