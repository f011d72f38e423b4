//! The AWS SDK pieces the controller and the control plane share, so both talk to AWS the
//! same way: one SDK configuration ([`sdk_config`], with the timeouts each side needs), one S3
//! client setup ([`s3_client`]), one classifier of failed calls ([`classify`], built on the
//! contract's transient codes), the one mapping between records and DynamoDB items
//! ([`item`], on `serde_dynamo`), the sessions table's terminal-status write
//! ([`terminal_update`]), and the signing keys: one cache ([`keys`]) over one Secrets Manager
//! fetcher ([`secrets`]); and a task's identity for the task API ([`task_identity`]). Each crate keeps its own error type and its own narrow interfaces;
//! SDK types stay in their adapter modules and here.
// Test code is not held to the shape limits of clippy.toml: a test reads top to bottom.
#![cfg_attr(test, allow(clippy::too_many_lines, clippy::too_many_arguments))]
#![warn(missing_docs)]

pub mod item;
pub mod keys;
pub mod secrets;
pub mod task_identity;

use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, SdkConfig};
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use wallcrawler_contract::InternalStatus;
use wallcrawler_contract::retry::is_transient_code;
use wallcrawler_contract::session::attr;

/// How long calls may take, and how many attempts one call makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallLimits {
    /// Connecting to the service's endpoint.
    pub connect: Duration,
    /// One attempt of a call.
    pub attempt: Duration,
    /// The whole call, every attempt included (`None`: attempts × `attempt`).
    pub operation: Option<Duration>,
    /// Attempts per call (`None`: the standard chain's, `AWS_MAX_ATTEMPTS` or 3).
    pub max_attempts: Option<u32>,
}

impl CallLimits {
    /// The controller: an archive part may take a while; three attempts per call.
    pub const TASK: CallLimits = CallLimits {
        connect: Duration::from_secs(3),
        attempt: Duration::from_secs(30),
        operation: None,
        max_attempts: Some(3),
    };

    /// The API: everything well inside API Gateway's 29 s; attempts from the standard chain.
    pub const API: CallLimits = CallLimits {
        connect: Duration::from_secs(3),
        attempt: Duration::from_secs(5),
        operation: Some(Duration::from_secs(12)),
        max_attempts: None,
    };
}

/// The one SDK configuration: region, credentials and `AWS_ENDPOINT_URL` from the standard
/// chain, with `limits`, so a dead dependency is a clear error within seconds, never a hang.
pub async fn sdk_config(limits: CallLimits) -> SdkConfig {
    let mut timeouts = TimeoutConfig::builder()
        .connect_timeout(limits.connect)
        .operation_attempt_timeout(limits.attempt);
    if let Some(op) = limits.operation {
        timeouts = timeouts.operation_timeout(op);
    }
    let mut loader =
        aws_config::defaults(BehaviorVersion::latest()).timeout_config(timeouts.build());
    if let Some(n) = limits.max_attempts {
        loader = loader.retry_config(RetryConfig::standard().with_max_attempts(n));
    }
    loader.load().await
}

/// An S3 client; path-style addressing when `AWS_ENDPOINT_URL` points at an emulator (whose
/// buckets are not DNS names).
pub fn s3_client(sdk: &SdkConfig) -> aws_sdk_s3::Client {
    let mut b = aws_sdk_s3::config::Builder::from(sdk);
    if sdk.endpoint_url().is_some() {
        b = b.force_path_style(true);
    }
    aws_sdk_s3::Client::from_conf(b.build())
}

/// What a `GetObject` answers: the object, or the SDK's error.
pub type GetObject = Result<
    Option<aws_sdk_s3::operation::get_object::GetObjectOutput>,
    SdkError<
        aws_sdk_s3::operation::get_object::GetObjectError,
        aws_sdk_s3::config::http::HttpResponse,
    >,
>;

/// `GetObject` of `key` in `bucket`: `None` when S3 answers `NoSuchKey` (a role that may not
/// list the bucket gets `AccessDenied` instead, left to the caller).
pub async fn get_object(client: &aws_sdk_s3::Client, bucket: &str, key: &str) -> GetObject {
    match client.get_object().bucket(bucket).key(key).send().await {
        Ok(out) => Ok(Some(out)),
        Err(e) if e.as_service_error().is_some_and(|se| se.is_no_such_key()) => Ok(None),
        Err(e) => Err(e),
    }
}

/// What a failed call means for the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Unreachable, timed out, or throttled/failing on the service's side: try again later.
    Transient,
    /// The service answered no (access denied, validation, a condition): not again.
    Refused,
    /// Anything else (a request that could not even be built).
    Other,
}

/// Classifies a failed SDK call, the same way on both sides.
pub fn classify<E, R>(e: &SdkError<E, R>) -> Failure
where
    E: ProvideErrorMetadata,
{
    match e {
        SdkError::DispatchFailure(_) | SdkError::TimeoutError(_) | SdkError::ResponseError(_) => {
            Failure::Transient
        }
        SdkError::ServiceError(se) if is_transient_code(se.err().code()) => Failure::Transient,
        SdkError::ServiceError(_) => Failure::Refused,
        _ => Failure::Other,
    }
}

/// The sessions table's terminal write on `req` (an `UpdateItem` of one session): status,
/// SDK status, `updatedAt` and (when given) `terminationReason`, on condition that the item
/// exists and is not terminal already — the status the API or the controller wrote first
/// stays. Returns the request and its update expression, for the caller to extend.
pub fn terminal_update(
    req: UpdateItemFluentBuilder,
    status: InternalStatus,
    reason: Option<&str>,
    at: &str,
) -> (UpdateItemFluentBuilder, String) {
    let s = |v: &str| AttributeValue::S(v.to_owned());
    let mut expr = String::from("SET internalStatus = :st, #st = :sdk, updatedAt = :at");
    let mut req = req
        .condition_expression(
            "attribute_exists(sessionId) AND NOT (internalStatus IN (:t1, :t2, :t3))",
        )
        .expression_attribute_names("#st", attr::STATUS)
        .expression_attribute_values(":st", s(status.as_str()))
        .expression_attribute_values(":sdk", s(status.sdk_status().as_str()))
        .expression_attribute_values(":at", s(at))
        .expression_attribute_values(":t1", s(InternalStatus::Stopped.as_str()))
        .expression_attribute_values(":t2", s(InternalStatus::Failed.as_str()))
        .expression_attribute_values(":t3", s(InternalStatus::TimedOut.as_str()));
    if let Some(r) = reason {
        expr.push_str(", terminationReason = :reason");
        req = req.expression_attribute_values(":reason", s(r));
    }
    (req, expr)
}

/// The sessions table's end of a session no browser took in time, on `req` (an `UpdateItem`
/// of one session): [`UNSERVED_STATUS`](wallcrawler_contract::claim::UNSERVED_STATUS) with
/// [`NO_BROWSER_IN_TIME`](wallcrawler_contract::claim::NO_BROWSER_IN_TIME), `endedAt` and
/// `updatedAt` = `at`, on condition that the session is still pending (never one a
/// controller made READY meanwhile) and its `claimDeadline` is before `now` (Unix seconds;
/// never one a client's poll extended meanwhile). The same rule as
/// `SessionDoc::end_unserved`.
pub fn unserved_update(
    req: UpdateItemFluentBuilder,
    now: u64,
    at: &str,
) -> UpdateItemFluentBuilder {
    use wallcrawler_contract::claim::{NO_BROWSER_IN_TIME, UNSERVED_STATUS};
    let s = |v: &str| AttributeValue::S(v.to_owned());
    pending_condition(req, "claimDeadline < :now")
        .update_expression(
            "SET internalStatus = :to, #st = :sdk, terminationReason = :reason, \
             endedAt = :at, updatedAt = :at",
        )
        .expression_attribute_names("#st", attr::STATUS)
        .expression_attribute_values(":to", s(UNSERVED_STATUS.as_str()))
        .expression_attribute_values(":sdk", s(UNSERVED_STATUS.sdk_status().as_str()))
        .expression_attribute_values(":reason", s(NO_BROWSER_IN_TIME))
        .expression_attribute_values(":at", s(at))
        .expression_attribute_values(":now", AttributeValue::N(now.to_string()))
}

/// A `ProjectionExpression` of exactly `attrs`, each through an expression attribute name
/// (`#p0`, `#p1`, …, so that reserved words such as `status` and `owner` may be named), with
/// those names. For a `GetItem` that may read only these attributes (IAM's
/// `dynamodb:Attributes`).
pub fn projection(attrs: &[&str]) -> (String, std::collections::HashMap<String, String>) {
    let names: std::collections::HashMap<String, String> = attrs
        .iter()
        .enumerate()
        .map(|(i, a)| (format!("#p{i}"), (*a).to_owned()))
        .collect();
    let expr = (0..attrs.len())
        .map(|i| format!("#p{i}"))
        .collect::<Vec<_>>()
        .join(", ");
    (expr, names)
}

/// `req` on condition that the session is pending (CREATING, PROVISIONING or STARTING) and
/// `and` holds; the values `:c`, `:p`, `:s` are set here.
pub fn pending_condition(req: UpdateItemFluentBuilder, and: &str) -> UpdateItemFluentBuilder {
    let s = |v: &str| AttributeValue::S(v.to_owned());
    req.condition_expression(format!("internalStatus IN (:c, :p, :s) AND {and}"))
        .expression_attribute_values(":c", s(InternalStatus::Creating.as_str()))
        .expression_attribute_values(":p", s(InternalStatus::Provisioning.as_str()))
        .expression_attribute_values(":s", s(InternalStatus::Starting.as_str()))
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::error::ErrorMetadata;
    use aws_sdk_dynamodb::operation::get_item::GetItemError;

    use super::*;

    fn service(code: &str) -> SdkError<GetItemError, ()> {
        let meta = ErrorMetadata::builder().code(code).build();
        SdkError::service_error(GetItemError::generic(meta), ())
    }

    #[test]
    fn throttling_and_unreachable_are_transient_a_refusal_is_not() {
        for (code, want) in [
            ("ThrottlingException", Failure::Transient),
            ("ProvisionedThroughputExceededException", Failure::Transient),
            ("ConditionalCheckFailedException", Failure::Refused),
            ("AccessDeniedException", Failure::Refused),
        ] {
            assert_eq!(classify(&service(code)), want, "{code}");
        }
        let timeout: SdkError<GetItemError, ()> = SdkError::timeout_error("no answer");
        assert_eq!(classify(&timeout), Failure::Transient);
        let unbuilt: SdkError<GetItemError, ()> = SdkError::construction_failure("bad input");
        assert_eq!(classify(&unbuilt), Failure::Other);
    }

    #[test]
    fn a_projection_names_each_attribute_through_a_placeholder() {
        let (expr, names) = projection(&["sessionId", "status", "owner"]);
        assert_eq!(expr, "#p0, #p1, #p2");
        assert_eq!(names["#p1"], "status");
        assert_eq!(names.len(), 3);
    }

    #[test]
    fn api_calls_end_well_inside_api_gateway_s_limit() {
        let op = CallLimits::API.operation.expect("bounded");
        assert!(op < Duration::from_secs(29));
        assert!(CallLimits::API.attempt <= op);
    }
}
