//! Projects' concurrency slots, in the projects table ([`DynamoSlots`]).

use async_trait::async_trait;
use aws_sdk_dynamodb::types::AttributeValue;

use super::table::{Table, s};
use crate::stores::{Slot, SlotStore, StoreResult};

/// Projects' concurrency slots: in the projects table, one item per project with key
/// `projectId` = `<projectId>#active` (project ids hold no `#`) and a string set
/// `activeSessions` (DynamoDB drops an emptied set, so "no attribute" = no slot taken). Kept
/// apart from the project item so that replacing a project (admin) never resets it.
pub struct DynamoSlots(Table);

/// The attribute holding a project's active session ids.
pub const ACTIVE_SESSIONS: &str = "activeSessions";

impl DynamoSlots {
    /// Slots kept in `projects_table`, on the `<projectId>#active` items.
    pub fn new(client: aws_sdk_dynamodb::Client, projects_table: &str) -> Self {
        Self(Table::new(
            client,
            projects_table,
            "projectId",
            "the projects table",
            "project slots",
        ))
    }

    /// The slot item's key for a project.
    pub fn key(project_id: &str) -> String {
        format!("{project_id}#active")
    }
}

#[async_trait]
impl SlotStore for DynamoSlots {
    /// `UpdateItem ADD activeSessions :sid` on condition `attribute_not_exists(activeSessions)
    /// OR size(activeSessions) < :limit OR contains(activeSessions, :sid)`; ALL_OLD on failure
    /// lists the holders.
    async fn take(&self, project_id: &str, session_id: &str, limit: u64) -> StoreResult<Slot> {
        let req = self
            .0
            .update_or_old(&Self::key(project_id))
            .update_expression("ADD #a :sids")
            .condition_expression(
                "attribute_not_exists(#a) OR size(#a) < :limit OR contains(#a, :sid)",
            )
            .expression_attribute_names("#a", ACTIVE_SESSIONS)
            .expression_attribute_values(":sids", AttributeValue::Ss(vec![session_id.into()]))
            .expression_attribute_values(":sid", s(session_id))
            .expression_attribute_values(":limit", AttributeValue::N(limit.to_string()));
        let old = match self.0.conditional(req).await? {
            Ok(_) => return Ok(Slot::Taken),
            Err(old) => old,
        };
        Ok(Slot::Full(
            match old.as_ref().and_then(|i| i.get(ACTIVE_SESSIONS)) {
                Some(AttributeValue::Ss(v)) => v.clone(),
                _ => Vec::new(),
            },
        ))
    }

    /// `UpdateItem DELETE activeSessions :sid` on condition that the item exists (so no empty
    /// item is created).
    async fn give_back(&self, project_id: &str, session_id: &str) -> StoreResult<()> {
        let req = self
            .0
            .update(&Self::key(project_id))
            .condition_expression("attribute_exists(projectId)")
            .update_expression("DELETE #a :sids")
            .expression_attribute_names("#a", ACTIVE_SESSIONS)
            .expression_attribute_values(":sids", AttributeValue::Ss(vec![session_id.into()]));
        self.0.unless_condition_fails(req).await
    }
}
