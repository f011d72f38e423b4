//! `wallcrawler-task-events-lambda`: the target of an EventBridge rule on "ECS Task State
//! Change" events with `lastStatus` STOPPED. Closes the session of a task that stopped without
//! ending it (FAILED/ERROR if it was live, and `endedAt` in every case) and gives back its
//! project slot and context lease. Reads `SESSIONS_TABLE_NAME`, `SLOTS_TABLE_NAME` and
//! `CONTEXTS_TABLE_NAME`. A store failure fails the invocation, so EventBridge retries it.

use lambda_runtime::{LambdaEvent, service_fn};
use wallcrawler_control_plane::aws::lambda::{TaskStateChange, handle_task_state_change};
use wallcrawler_control_plane::aws::{self, lambda};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    let (tables, dynamo) = lambda::tables_from_env().await;
    let sessions = aws::DynamoSessions::new(dynamo.clone(), &tables.sessions);
    let slots = aws::DynamoSlots::new(dynamo.clone(), &tables.slots);
    let contexts = aws::DynamoContexts::new(dynamo, &tables.contexts);
    let (sessions, slots, contexts) = (&sessions, &slots, &contexts);
    lambda_runtime::run(service_fn(|ev: LambdaEvent<TaskStateChange>| async move {
        let at = wallcrawler_contract::time::now_iso8601();
        handle_task_state_change(sessions, slots, contexts, &ev.payload, &at)
            .await
            .map(|outcome| serde_json::json!({ "outcome": format!("{outcome:?}") }))
            .map_err(|e| wallcrawler_control_plane::error::chain(&e))
    }))
    .await
}
