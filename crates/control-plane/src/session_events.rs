//! The sessions-stream processor: a batch of the sessions table's stream records (as Lambda
//! delivers them) in, the session events ([`wallcrawler_contract::events`]) they make out,
//! each handed to every [`EventSink`] (on AWS the session topic and EventBridge, the `aws`
//! module's `SnsTopic` and `EventBus`, which depend on this module, not it on them).
//!
//! Delivery is at least once. Records are handled in stream order; the first record whose
//! events cannot all be published stops the batch, and the answer names it
//! (`batchItemFailures`, its `SequenceNumber`): Lambda retries from that record on, and after
//! the event source mapping's retries sends the record to its on-failure destination. The
//! records after it are not published out of order. A retried record may publish an event a
//! second time (to a sink that had taken it before the failure): subscribers deduplicate on
//! the event id, the same for every delivery of one change.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tracing::{error, info};
use wallcrawler_contract::events::{SessionEvent, events_of};
use wallcrawler_contract::session::attr;
use wallcrawler_contract::session_doc::SessionDoc;

/// A DynamoDB stream event as Lambda delivers it (only the fields the processor reads).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct StreamBatch {
    /// The records, in stream order (one shard's).
    #[serde(rename = "Records", default)]
    pub records: Vec<StreamRecord>,
}

/// One stream record.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct StreamRecord {
    /// The record's id (logged; the event id does not come from it: see
    /// [`wallcrawler_contract::events`]).
    #[serde(rename = "eventID", default)]
    pub event_id: String,
    /// `INSERT`, `MODIFY` or `REMOVE`.
    #[serde(rename = "eventName", default)]
    pub event_name: String,
    /// The change.
    pub dynamodb: StreamChange,
}

/// A record's `dynamodb` part: the images, in DynamoDB JSON (`{"S": …}`).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct StreamChange {
    /// The record's position in its shard: what a partial-batch failure names.
    #[serde(rename = "SequenceNumber", default)]
    pub sequence_number: String,
    /// The item before the change (absent for an INSERT).
    #[serde(rename = "OldImage", default, skip_serializing_if = "Option::is_none")]
    pub old_image: Option<serde_dynamo::Item>,
    /// The item after the change (absent for a REMOVE).
    #[serde(rename = "NewImage", default, skip_serializing_if = "Option::is_none")]
    pub new_image: Option<serde_dynamo::Item>,
}

/// The partial-batch answer (the event source mapping's `ReportBatchItemFailures`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchResponse {
    /// At most one: the first record not fully published (Lambda retries from it on).
    pub batch_item_failures: Vec<BatchItemFailure>,
}

/// One record Lambda is to retry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchItemFailure {
    /// The record's `SequenceNumber`.
    pub item_identifier: String,
}

/// Why an event was not published, or a record not read.
#[derive(Debug, thiserror::Error)]
pub enum EventsError {
    /// A sink refused or failed the event.
    #[error("publishing {event_id} to {sink} failed: {reason}")]
    Publish {
        /// `sns` or `eventbridge`.
        sink: &'static str,
        /// The event's id.
        event_id: String,
        /// The service's reason (an error code and message; no event content).
        reason: String,
    },
    /// An image is not a session item.
    #[error("the record's {which} image is not a session item: {source}")]
    Image {
        /// `old` or `new`.
        which: &'static str,
        /// serde_dynamo's reason.
        #[source]
        source: serde_dynamo::Error,
    },
}

/// Somewhere session events go.
#[async_trait]
pub trait EventSink: Send + Sync {
    /// Publishes one event; `Ok` once the service has taken it.
    async fn publish(&self, event: &SessionEvent) -> Result<(), EventsError>;
}

/// Whether an image is a session's: its key is a session id. The sessions table also holds
/// each project's usage item (`usage#<projectId>`, the `aws` module's `usage_key`), which makes no
/// events.
fn is_session(image: Option<&serde_dynamo::Item>) -> bool {
    image.is_some_and(|i| {
        matches!(i.get(attr::SESSION_ID), Some(serde_dynamo::AttributeValue::S(id)) if id.starts_with("sess_"))
    })
}

/// The events of one record (its images read as session items; none for another item).
pub fn record_events(r: &StreamRecord) -> Result<Vec<SessionEvent>, EventsError> {
    let (old, new) = (r.dynamodb.old_image.as_ref(), r.dynamodb.new_image.as_ref());
    if !is_session(old) && !is_session(new) {
        return Ok(Vec::new());
    }
    let doc = |which, image: &Option<serde_dynamo::Item>| -> Result<_, EventsError> {
        image
            .clone()
            .map(serde_dynamo::from_item::<_, SessionDoc>)
            .transpose()
            .map_err(|source| EventsError::Image { which, source })
    };
    let (old, new) = (
        doc("old", &r.dynamodb.old_image)?,
        doc("new", &r.dynamodb.new_image)?,
    );
    Ok(events_of(old.as_ref(), new.as_ref()))
}

/// Publishes every event of `batch`'s records, in order, to every sink; stops at the first
/// record that fails and names it in the answer.
pub async fn process(batch: &StreamBatch, sinks: &[&dyn EventSink]) -> BatchResponse {
    for r in &batch.records {
        if let Err(e) = publish_record(r, sinks).await {
            error!(
                record = %r.event_id,
                sequence = %r.dynamodb.sequence_number,
                error = %crate::error::chain(&e),
                "a stream record's events were not all published; retried from it"
            );
            return BatchResponse {
                batch_item_failures: vec![BatchItemFailure {
                    item_identifier: r.dynamodb.sequence_number.clone(),
                }],
            };
        }
    }
    BatchResponse::default()
}

async fn publish_record(r: &StreamRecord, sinks: &[&dyn EventSink]) -> Result<(), EventsError> {
    for event in record_events(r)? {
        for sink in sinks {
            sink.publish(&event).await?;
        }
        info!(
            event = %event.event_id,
            record = %r.event_id,
            session.id = %event.session_id,
            "session event published"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use serde_json::{Value, json};

    use super::*;

    /// A sink that records what it took, and fails the event ids it is told to.
    #[derive(Default)]
    struct Sink {
        took: Mutex<Vec<String>>,
        fail: Vec<String>,
    }

    #[async_trait]
    impl EventSink for Sink {
        async fn publish(&self, e: &SessionEvent) -> Result<(), EventsError> {
            if self.fail.contains(&e.event_id) {
                return Err(EventsError::Publish {
                    sink: "test",
                    event_id: e.event_id.clone(),
                    reason: "refused".into(),
                });
            }
            self.took.lock().unwrap().push(e.event_id.clone());
            Ok(())
        }
    }

    fn image(status: &str, sdk: &str, extra: Value) -> Value {
        let mut m = json!({
            "sessionId": {"S": "sess_1"},
            "projectId": {"S": "proj_1"},
            "region": {"S": "us-east-1"},
            "createdAt": {"S": "2026-11-26T10:00:00.000Z"},
            "expiresAt": {"N": "1900000000"},
            "internalStatus": {"S": status},
            "status": {"S": sdk},
            "signingKey": {"S": "secret.token.here"},
            "connectUrl": {"S": "wss://gw.example/?signingKey=secret.token.here"},
            "userMetadata": {"M": {"n": {"N": "1"}, "l": {"L": [{"S": "x"}]}}},
            "keepAlive": {"BOOL": false},
        });
        for (k, v) in extra.as_object().unwrap() {
            m[k] = v.clone();
        }
        m
    }

    fn record(seq: &str, old: Option<Value>, new: Option<Value>) -> Value {
        let mut change = json!({"SequenceNumber": seq, "Keys": {"sessionId": {"S": "sess_1"}}});
        if let Some(o) = old {
            change["OldImage"] = o;
        }
        if let Some(n) = new {
            change["NewImage"] = n;
        }
        let name = if change.get("OldImage").is_some() {
            "MODIFY"
        } else {
            "INSERT"
        };
        json!({"eventID": format!("ev{seq}"), "eventName": name, "eventSource": "aws:dynamodb",
               "awsRegion": "us-east-1", "dynamodb": change})
    }

    fn lifecycle() -> StreamBatch {
        let pending = image("CREATING", "PENDING", json!({}));
        let ready = image(
            "READY",
            "RUNNING",
            json!({"readyAt": {"S": "2026-11-26T10:00:05.000Z"}}),
        );
        let stopped = image(
            "STOPPED",
            "COMPLETED",
            json!({"readyAt": {"S": "2026-11-26T10:00:05.000Z"}}),
        );
        let ended = image(
            "STOPPED",
            "COMPLETED",
            json!({
                "readyAt": {"S": "2026-11-26T10:00:05.000Z"},
                "endedAt": {"S": "2026-11-26T10:01:00.000Z"},
                "proxyBytes": {"N": "12"},
            }),
        );
        serde_json::from_value(json!({"Records": [
            record("1", None, Some(pending.clone())),
            record("2", Some(pending), Some(ready.clone())),
            record("3", Some(ready), Some(stopped.clone())),
            record("4", Some(stopped), Some(ended)),
        ]}))
        .unwrap()
    }

    #[tokio::test]
    async fn a_lifecycle_publishes_created_ready_ended_to_every_sink_in_order() {
        let (a, b) = (Sink::default(), Sink::default());
        let answer = process(&lifecycle(), &[&a, &b]).await;
        assert_eq!(answer, BatchResponse::default());
        for s in [&a, &b] {
            assert_eq!(
                *s.took.lock().unwrap(),
                ["sess_1:created", "sess_1:ready", "sess_1:ended"]
            );
        }
    }

    #[tokio::test]
    async fn the_first_failure_stops_the_batch_and_is_named() {
        let ok = Sink::default();
        let failing = Sink {
            fail: vec!["sess_1:ready".into()],
            ..Sink::default()
        };
        let answer = process(&lifecycle(), &[&ok, &failing]).await;
        assert_eq!(
            answer.batch_item_failures,
            [BatchItemFailure {
                item_identifier: "2".into()
            }]
        );
        // Nothing after the failed record went out (Lambda retries from it, in order).
        assert_eq!(*ok.took.lock().unwrap(), ["sess_1:created", "sess_1:ready"]);
        assert_eq!(*failing.took.lock().unwrap(), ["sess_1:created"]);
        let wire = serde_json::to_value(&answer).unwrap();
        assert_eq!(
            wire,
            json!({"batchItemFailures": [{"itemIdentifier": "2"}]})
        );
    }

    #[tokio::test]
    async fn an_image_that_is_no_session_fails_its_record() {
        let batch: StreamBatch = serde_json::from_value(json!({"Records": [
            record("7", None, Some(json!({"sessionId": {"S": "sess_1"}}))),
        ]}))
        .unwrap();
        let sink = Sink::default();
        let answer = process(&batch, &[&sink]).await;
        assert_eq!(answer.batch_item_failures[0].item_identifier, "7");
        assert!(sink.took.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn the_projects_usage_item_in_the_same_table_makes_nothing() {
        let usage =
            |n: &str| json!({"sessionId": {"S": "usage#proj_1"}, "browserMinutes": {"N": n}});
        let batch: StreamBatch = serde_json::from_value(json!({"Records": [
            record("5", None, Some(usage("1"))),
            record("6", Some(usage("1")), Some(usage("3"))),
        ]}))
        .unwrap();
        let sink = Sink::default();
        assert_eq!(process(&batch, &[&sink]).await, BatchResponse::default());
        assert!(sink.took.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn removes_and_an_empty_batch_publish_nothing() {
        let batch: StreamBatch = serde_json::from_value(json!({"Records": [
            record("9", Some(image("STOPPED", "COMPLETED", json!({}))), None),
        ]}))
        .unwrap();
        let sink = Sink::default();
        assert_eq!(process(&batch, &[&sink]).await, BatchResponse::default());
        assert_eq!(
            process(&StreamBatch::default(), &[&sink]).await,
            BatchResponse::default()
        );
        assert!(sink.took.lock().unwrap().is_empty());
    }
}
