//! The AWS implementations of the stores, one file per service: the DynamoDB table helpers
//! (`table`), sessions (`sessions`), projects, API keys and contexts (`records`), projects'
//! slots (`slots`), S3 presigned upload URLs (`s3`), ECS Fargate (`ecs`) and the SQS pool
//! (`sqs`) as task launchers, the Secrets Manager backed token signer (`signer`), the task
//! API's broker (`broker`: claims handed to tasks, session credentials from STS) and its
//! identity check (`identity`: a task's signed STS request, sent to STS); the session
//! events' topic and bus (`publish`: SNS and EventBridge); the managed proxy pools' secret
//! (`managed_proxies`); the task API as a service of its own ([`task_service`]); the
//! configuration that names them and the wiring ([`Config::from_env`], [`build_app`], in
//! `config`); and [`lambda`], what the Lambda functions run. SDK types stay in this module.
//!
//! Items are written with exactly the attribute names and types of the table schema
//! (`seeds/dynamodb-schema.md`), through the workspace's one mapping
//! ([`wallcrawler_aws::item`]): the records' serde names are the attribute names, strings are
//! `S` (timestamps ISO 8601), numbers `N` (`expiresAt`, `proxyBytes`, `defaultTimeout`, …),
//! booleans `BOOL`, `userMetadata` an `M` and `projectIds` an `L` of `S`. Reads are strongly
//! consistent `GetItem`s, except the two listings:
//!
//! - a project's sessions come a page at a time (`Limit`, `ExclusiveStartKey`) from the
//!   `projectId-createdAt-index` GSI, which projects only what listing shows
//!   ([`crate::stores::LISTED`]; never `signingKey` or `connectUrl`). GSIs cannot be read
//!   consistently, so a session created a moment ago may be missing from `GET /v1/sessions`
//!   for a short while. The concurrency cap does not use it: it is the project's slots
//!   ([`DynamoSlots`], see [`crate::limits`]).
//! - the sweeper's candidates come from the `status-expiresAt-index` GSI (`KEYS_ONLY`), each
//!   then read by key.
//! - a stopped pool task's session comes from the sparse `ecsTaskArn-index` GSI (`KEYS_ONLY`),
//!   written with READY long before the task stops.
//! - a context's sessions come from the sparse `contextId-index` GSI (projection `INCLUDE` of
//!   `endedAt` only), used by `DELETE /v1/contexts/{id}`: the sessions it does not show ended
//!   are each read by key to decide whether they are live. Nothing scans the table (the API's
//!   role has no `dynamodb:Scan`); the one-writer rule is the context item's `writerSessionId`
//!   lease, checked by key, and the context's deletion is conditional on it.
//!
//! Conditional writes follow the `rules` module exactly; see each method.

mod broker;
mod config;
mod ecs;
mod identity;
pub mod lambda;
mod managed_proxies;
mod publish;
mod records;
mod s3;
mod sessions;
mod signer;
mod slots;
mod sqs;
mod table;
pub mod task_service;

use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};

pub use broker::TaskBroker;
pub use config::{
    Config, ConfigError, EcsSettings, Tables, TaskApiSettings, build_app, build_router,
    build_task_api, sdk_config,
};
pub use ecs::{EcsLauncher, controller_environment};
pub use identity::StsIdentities;
pub use managed_proxies::MANAGED_PROXIES_SECRET_ARN;
pub use publish::{BUS_NAME_VAR, EventBus, EventsConfig, SnsTopic, TOPIC_ARN_VAR};
pub use records::{DynamoContexts, DynamoKeys, DynamoProjects, DynamoRecords};
pub use s3::S3Archives;
pub use sessions::{
    CONTEXT_INDEX, DynamoSessions, PROJECT_INDEX, STATUS_INDEX, TASK_ID, TASK_INDEX, TaskMarker,
    TaskTake, usage_key,
};
pub use signer::{KEY_TTL, SecretsSigner};
pub use slots::{COUNTER, DynamoSlots, HELD};
pub use sqs::SqsPoolLauncher;

use crate::error::StoreError;

/// A failed SDK call as a store error, the call's error as its source: unreachable or
/// throttled = `Unavailable` (503, "try again"), anything else = `Failed` (500; the detail
/// goes to the log only).
fn sdk_error<E, R>(service: &'static str, e: SdkError<E, R>) -> StoreError
where
    E: std::error::Error + ProvideErrorMetadata + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    if wallcrawler_aws::classify(&e) == wallcrawler_aws::Failure::Transient {
        StoreError::unavailable_by(service, e)
    } else {
        StoreError::failed_by(service, e)
    }
}
