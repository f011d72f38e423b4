//! The DynamoDB helpers every store here shares: one table addressed by one string key
//! ([`Table`]), conditional writes and their outcome ([`condition`]), transactions retried
//! while they conflict ([`transact`]), items as records.

use std::time::Duration;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::operation::update_item::{UpdateItemError, UpdateItemOutput};
use aws_sdk_dynamodb::types::error::ConditionalCheckFailedException;
use aws_sdk_dynamodb::types::{
    AttributeValue, ReturnValuesOnConditionCheckFailure, TransactWriteItem,
};
use backon::{BackoffBuilder as _, ExponentialBuilder};
use serde::Serialize;
use serde::de::DeserializeOwned;
use wallcrawler_aws::item::{self, Item};

use super::sdk_error;
use crate::error::StoreError;
use crate::model::Record;
use crate::stores::StoreResult;

/// A string attribute.
pub(super) fn s(v: &str) -> AttributeValue {
    AttributeValue::S(v.to_owned())
}

/// An item that may be missing (a `GetItem`, a failed condition's ALL_OLD) as a record.
pub(super) fn from_opt<T: DeserializeOwned>(
    what: &'static str,
    i: Option<&Item>,
) -> StoreResult<Option<T>> {
    Ok(i.map(|i| item::from_item(what, i)).transpose()?)
}

/// An SDK call's result.
pub(super) type SdkResult<O, E> =
    Result<O, SdkError<E, aws_sdk_dynamodb::config::http::HttpResponse>>;

/// The error of a write that can carry a condition.
pub(super) trait ConditionalWriteError {
    /// The failed condition's exception, when that is what this error is.
    fn failed_condition(&self) -> Option<&ConditionalCheckFailedException>;
}

impl ConditionalWriteError for PutItemError {
    fn failed_condition(&self) -> Option<&ConditionalCheckFailedException> {
        match self {
            Self::ConditionalCheckFailedException(c) => Some(c),
            _ => None,
        }
    }
}

impl ConditionalWriteError for DeleteItemError {
    fn failed_condition(&self) -> Option<&ConditionalCheckFailedException> {
        match self {
            Self::ConditionalCheckFailedException(c) => Some(c),
            _ => None,
        }
    }
}

impl ConditionalWriteError for UpdateItemError {
    fn failed_condition(&self) -> Option<&ConditionalCheckFailedException> {
        match self {
            Self::ConditionalCheckFailedException(c) => Some(c),
            _ => None,
        }
    }
}

/// A conditional write's outcome: `Ok(output)`, or `Err(item)` when its condition failed,
/// with the item as it was (when the write asked for ALL_OLD and there was one). Any other
/// failure is a port error about `service`.
pub(super) fn condition<O, E>(
    r: SdkResult<O, E>,
    service: &'static str,
) -> StoreResult<Result<O, Option<Item>>>
where
    E: ConditionalWriteError + std::error::Error + ProvideErrorMetadata + Send + Sync + 'static,
{
    match r {
        Ok(out) => Ok(Ok(out)),
        Err(e) => match e.as_service_error().and_then(E::failed_condition) {
            Some(c) => Ok(Err(c.item().cloned())),
            None => Err(sdk_error(service, e)),
        },
    }
}

/// A table addressed by one string key, and the calls the stores share.
pub(super) struct Table {
    pub(super) client: aws_sdk_dynamodb::Client,
    pub(super) name: String,
    /// The key attribute.
    key: &'static str,
    /// For errors: "the projects table".
    service: &'static str,
    /// For errors about one item: "project".
    what: &'static str,
}

impl Table {
    /// The table of records `R` ([`Record`]'s key and names).
    pub(super) fn of<R: Record>(client: aws_sdk_dynamodb::Client, name: &str) -> Self {
        Self::new(client, name, R::KEY, R::TABLE, R::WHAT)
    }

    /// Table `name`, its key attribute, and the names its errors use.
    pub(super) fn new(
        client: aws_sdk_dynamodb::Client,
        name: &str,
        key: &'static str,
        service: &'static str,
        what: &'static str,
    ) -> Self {
        Self {
            client,
            name: name.to_owned(),
            key,
            service,
            what,
        }
    }

    /// Consistent `GetItem`.
    pub(super) async fn get<T: DeserializeOwned>(&self, id: &str) -> StoreResult<Option<T>> {
        let out = self
            .client
            .get_item()
            .table_name(&self.name)
            .key(self.key, s(id))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| sdk_error(self.service, e))?;
        from_opt(self.what, out.item())
    }

    /// `PutItem`; with `create_only`, on condition that no item has the key.
    pub(super) async fn put<T: Serialize>(&self, record: &T, create_only: bool) -> StoreResult<()> {
        let mut req = self
            .client
            .put_item()
            .table_name(&self.name)
            .set_item(Some(item::to_item(self.what, record)?));
        if create_only {
            req = req.condition_expression(format!("attribute_not_exists({})", self.key));
        }
        req.send().await.map_err(|e| sdk_error(self.service, e))?;
        Ok(())
    }

    /// An `UpdateItem` of the item with key `id`, for the caller to give its expressions.
    pub(super) fn update(&self, id: &str) -> UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.name)
            .key(self.key, s(id))
    }

    /// [`Table::update`] that answers a failed condition with the item as it was (ALL_OLD).
    pub(super) fn update_or_old(&self, id: &str) -> UpdateItemFluentBuilder {
        self.update(id)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
    }

    /// Sends a conditional update: [`condition`]'s outcome.
    pub(super) async fn conditional(
        &self,
        req: UpdateItemFluentBuilder,
    ) -> StoreResult<Result<UpdateItemOutput, Option<Item>>> {
        condition(req.send().await, self.service)
    }

    /// Sends a conditional update whose failed condition means "nothing to do".
    pub(super) async fn unless_condition_fails(
        &self,
        req: UpdateItemFluentBuilder,
    ) -> StoreResult<()> {
        self.conditional(req).await.map(drop)
    }

    /// `UpdateItem` `SET attr = :v` on condition that the item exists; false when it does not.
    pub(super) async fn set_if_exists(
        &self,
        id: &str,
        attr: &str,
        value: &str,
    ) -> StoreResult<bool> {
        let req = self
            .update(id)
            .condition_expression(format!("attribute_exists({})", self.key))
            .update_expression("SET #a = :v")
            .expression_attribute_names("#a", attr)
            .expression_attribute_values(":v", s(value));
        Ok(self.conditional(req).await?.is_ok())
    }

    /// `DeleteItem` on `condition` (with `values`), or on the item being gone already: `false`
    /// when the item is there and the condition does not hold (nothing deleted).
    pub(super) async fn delete_if(
        &self,
        id: &str,
        condition_expr: &str,
        values: Item,
    ) -> StoreResult<bool> {
        let r = self
            .client
            .delete_item()
            .table_name(&self.name)
            .key(self.key, s(id))
            .condition_expression(format!(
                "attribute_not_exists({}) OR ({condition_expr})",
                self.key
            ))
            .set_expression_attribute_values((!values.is_empty()).then_some(values))
            .send()
            .await;
        Ok(condition(r, self.service)?.is_ok())
    }
}

/// How many times a transaction that met another on one of its items (`TransactionConflict`:
/// e.g. simultaneous creates of one project on its slot counter) is tried again, after a short
/// jittered wait.
const CONFLICT_RETRIES: usize = 10;

/// What a cancelled transaction's reasons say, by the position of its items.
enum Cancelled {
    /// The condition on these items (by index) failed.
    Conditions(Vec<usize>),
    /// Another transaction was writing one of the items: try again.
    Conflict,
}

/// Sends a `TransactWriteItems`, trying again while it conflicts with another transaction on
/// the same items; `Ok(Err(indexes))` when the conditions of those items failed.
pub(super) async fn transact(
    client: &aws_sdk_dynamodb::Client,
    items: Vec<TransactWriteItem>,
    service: &'static str,
) -> StoreResult<Result<(), Vec<usize>>> {
    let mut waits = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(10))
        .with_max_delay(Duration::from_millis(200))
        .with_jitter()
        .with_max_times(CONFLICT_RETRIES)
        .build();
    loop {
        let r = client
            .transact_write_items()
            .set_transact_items(Some(items.clone()))
            .send()
            .await;
        let e = match r {
            Ok(_) => return Ok(Ok(())),
            Err(e) => e,
        };
        match e.as_service_error().and_then(cancelled) {
            Some(Cancelled::Conditions(failed)) => return Ok(Err(failed)),
            Some(Cancelled::Conflict) => match waits.next() {
                Some(wait) => tokio::time::sleep(wait).await,
                // Still contended: "try again" (503), not a failure of ours.
                None => return Err(StoreError::unavailable_by(service, e)),
            },
            None => return Err(sdk_error(service, e)),
        }
    }
}

/// A cancelled transaction's reasons; `None` when the error is something else.
fn cancelled(e: &TransactWriteItemsError) -> Option<Cancelled> {
    let TransactWriteItemsError::TransactionCanceledException(c) = e else {
        return None;
    };
    let codes: Vec<_> = c.cancellation_reasons().iter().map(|r| r.code()).collect();
    if codes.contains(&Some("TransactionConflict")) {
        return Some(Cancelled::Conflict);
    }
    let failed: Vec<usize> = codes
        .iter()
        .enumerate()
        .filter(|(_, c)| **c == Some("ConditionalCheckFailed"))
        .map(|(i, _)| i)
        .collect();
    (!failed.is_empty()).then_some(Cancelled::Conditions(failed))
}
