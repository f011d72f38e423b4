//! The sessions-stream processor: a batch of the sessions table's stream records (as Lambda
//! delivers them) in, the session events ([`wallcrawler_contract::events`]) they make out,
//! handed to every [`EventSink`] (on AWS the session topic and EventBridge, the `aws`
//! module's `SnsTopic` and `EventBus`, which depend on this module, not it on them).
//!
//! The events go out in calls of at most [`MAX_BATCH`] (SNS `PublishBatch`, EventBridge
//! `PutEvents`), as few as the rule below allows (`plan`): 25 events of sessions with at most
//! three each take three calls per sink. The calls go one after the other, each to every sink
//! at once; a call holds no two events of one session, so a session's event goes out only once
//! its earlier events were taken by every sink, even though a service that refuses one entry
//! of a call may take the others.
//!
//! Delivery is at least once. The first record with an event not taken by every sink (a
//! refused entry, or an event whose call was not made after a failure), or that cannot be
//! read, is named in the answer (`batchItemFailures`, its `SequenceNumber`): Lambda retries
//! from that record on, and after the event source mapping's retries sends the record to its
//! on-failure destination. A retried record may publish an event a second time (to a sink
//! that had taken it before the failure, or one of a later record that shared a call):
//! subscribers deduplicate on the event id, the same for every delivery of one change.

use std::collections::HashMap;

use async_trait::async_trait;
use futures_util::future::join_all;
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

/// Most events one sink call takes (SNS `PublishBatch` and EventBridge `PutEvents` alike).
pub const MAX_BATCH: usize = 10;

/// A sink took the events of a call before `index`; that one it did not, and perhaps not
/// some after it.
#[derive(Debug, thiserror::Error)]
#[error("the call's entry {index} was not taken")]
pub struct BatchFailure {
    /// The first entry not taken.
    pub index: usize,
    /// Why.
    #[source]
    pub source: EventsError,
}

/// Somewhere session events go.
#[async_trait]
pub trait EventSink: Send + Sync {
    /// Publishes `events` (at most [`MAX_BATCH`]) in one call; `Ok` once the service has taken
    /// them all.
    async fn publish_batch(&self, events: &[SessionEvent]) -> Result<(), BatchFailure>;
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

/// Publishes the events of `batch`'s records to every sink (`plan`, `publish`); names the
/// first record not fully published, if any, in the answer.
pub async fn process(batch: &StreamBatch, sinks: &[&dyn EventSink]) -> BatchResponse {
    let mut events = Vec::new();
    let mut unread = None;
    for (i, r) in batch.records.iter().enumerate() {
        match record_events(r) {
            Ok(made) => events.extend(made.into_iter().map(|e| (i, e))),
            Err(e) => {
                error!(
                    record = %r.event_id,
                    error = %crate::error::chain(&e),
                    "a stream record was not read"
                );
                // The records after it are retried with it: not published now.
                unread = Some(i);
                break;
            }
        }
    }
    let unpublished = publish(&plan(events), sinks, &batch.records).await;
    let Some(first) = unread.into_iter().chain(unpublished).min() else {
        return BatchResponse::default();
    };
    let r = &batch.records[first];
    error!(
        record = %r.event_id,
        sequence = %r.dynamodb.sequence_number,
        "a stream record's events were not all published; retried from it"
    );
    BatchResponse {
        batch_item_failures: vec![BatchItemFailure {
            item_identifier: r.dynamodb.sequence_number.clone(),
        }],
    }
}

/// One sink call's events, in stream order, each with the index of its record.
#[derive(Debug, Default)]
struct Call {
    records: Vec<usize>,
    events: Vec<SessionEvent>,
}

/// The calls `events` (each with its record's index, in stream order) go out in: at most
/// [`MAX_BATCH`] events each, no two of one session, a session's events in its order over
/// the calls; and as few calls as that allows: the larger of `⌈n / MAX_BATCH⌉` and the most
/// events of one session. The events are dealt to the calls in turn, session by session
/// (McNaughton's wrap-around), so no call gets more than its share and a session's events
/// land in different calls.
fn plan(events: Vec<(usize, SessionEvent)>) -> Vec<Call> {
    let mut sessions: Vec<Vec<(usize, SessionEvent)>> = Vec::new();
    let mut of_session = HashMap::new();
    for (record, e) in events {
        let i = *of_session.entry(e.session_id.clone()).or_insert_with(|| {
            sessions.push(Vec::new());
            sessions.len() - 1
        });
        sessions[i].push((record, e));
    }
    let n: usize = sessions.iter().map(Vec::len).sum();
    let longest = sessions.iter().map(Vec::len).max().unwrap_or(0);
    let k = n.div_ceil(MAX_BATCH).max(longest);
    let mut calls: Vec<Vec<(usize, SessionEvent)>> = (0..k).map(|_| Vec::new()).collect();
    let mut dealt = 0;
    for session in sessions {
        // Consecutive turns modulo k are distinct calls (a session has at most k events);
        // taken in ascending order, they keep the session's order.
        let mut turns: Vec<usize> = (dealt..dealt + session.len()).map(|t| t % k).collect();
        turns.sort_unstable();
        dealt += session.len();
        for (turn, event) in turns.into_iter().zip(session) {
            calls[turn].push(event);
        }
    }
    calls
        .into_iter()
        .map(|mut c| {
            c.sort_by_key(|(record, _)| *record);
            let (records, events) = c.into_iter().unzip();
            Call { records, events }
        })
        .collect()
}

/// Makes `calls` one after the other, each to every sink at once; stops at the first call a
/// sink did not take in full. The first record (of `records`) with an event not taken by every
/// sink, if any.
async fn publish(
    calls: &[Call],
    sinks: &[&dyn EventSink],
    records: &[StreamRecord],
) -> Option<usize> {
    for (n, call) in calls.iter().enumerate() {
        let answers = join_all(sinks.iter().map(|s| s.publish_batch(&call.events))).await;
        let Some(failed) = answers
            .into_iter()
            .filter_map(Result::err)
            .min_by_key(|f| f.index)
        else {
            for (e, &r) in call.events.iter().zip(&call.records) {
                info!(
                    event = %e.event_id,
                    record = %records[r].event_id,
                    session.id = %e.session_id,
                    "session event published"
                );
            }
            continue;
        };
        error!(error = %crate::error::chain(&failed), "a sink did not take a call's events");
        let untaken = call.records.get(failed.index..).unwrap_or(&call.records);
        let unmade = calls[n + 1..].iter().flat_map(|c| &c.records);
        return untaken.iter().chain(unmade).min().copied();
    }
    None
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::Mutex;

    use serde_json::{Value, json};

    use super::*;

    /// A sink that records what it took, and refuses the event ids it is told to as SNS
    /// refuses entries of a batch: it takes the call's other entries.
    #[derive(Default)]
    struct Sink {
        took: Mutex<Vec<String>>,
        fail: Vec<String>,
    }

    #[async_trait]
    impl EventSink for Sink {
        async fn publish_batch(&self, events: &[SessionEvent]) -> Result<(), BatchFailure> {
            assert!(
                !events.is_empty() && events.len() <= MAX_BATCH,
                "{events:?}"
            );
            let mut first = None;
            for (i, e) in events.iter().enumerate() {
                if self.fail.contains(&e.event_id) {
                    first = first.or(Some((i, e)));
                } else {
                    self.took.lock().unwrap().push(e.event_id.clone());
                }
            }
            first.map_or(Ok(()), |(index, e)| {
                Err(BatchFailure {
                    index,
                    source: EventsError::Publish {
                        sink: "test",
                        event_id: e.event_id.clone(),
                        reason: "refused".into(),
                    },
                })
            })
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

    /// A session's created, ready and ended images.
    fn images_of(id: &str) -> [Value; 3] {
        let id = json!({"sessionId": {"S": id}});
        let mut ready = id.clone();
        ready["readyAt"] = json!({"S": "2026-11-26T10:00:05.000Z"});
        let mut ended = ready.clone();
        ended["endedAt"] = json!({"S": "2026-11-26T10:01:00.000Z"});
        [
            image("CREATING", "PENDING", id),
            image("READY", "RUNNING", ready),
            image("STOPPED", "COMPLETED", ended),
        ]
    }

    /// The record at `seq` taking `id` to its `step`th image (0: created).
    fn step(seq: usize, id: &str, step: usize) -> Value {
        let images = images_of(id);
        let old = step.checked_sub(1).map(|s| images[s].clone());
        record(&seq.to_string(), old, Some(images[step].clone()))
    }

    fn batch(records: Vec<Value>) -> StreamBatch {
        serde_json::from_value(json!({ "Records": records })).unwrap()
    }

    /// The event ids of `events`, as the calls `plan` makes of them.
    fn planned(events: Vec<(usize, SessionEvent)>) -> Vec<Vec<String>> {
        plan(events)
            .into_iter()
            .map(|c| c.events.into_iter().map(|e| e.event_id).collect())
            .collect()
    }

    fn events(b: &StreamBatch) -> Vec<(usize, SessionEvent)> {
        b.records
            .iter()
            .enumerate()
            .flat_map(|(i, r)| record_events(r).unwrap().into_iter().map(move |e| (i, e)))
            .collect()
    }

    #[test]
    fn a_plan_takes_the_fewest_calls_of_ten_with_no_session_twice_in_one() {
        // Twenty sessions of one event each, then one of three: each event put in the first
        // call with room after its session's last, in stream order, would take five calls;
        // three are enough.
        let mut records: Vec<Value> = (0..20).map(|i| step(i, &format!("sess_{i}"), 0)).collect();
        records.extend((0..3).map(|s| step(20 + s, "sess_long", s)));
        let calls = planned(events(&batch(records)));
        assert_eq!(calls.len(), 3, "{calls:?}");
        for c in &calls {
            assert!(c.len() <= MAX_BATCH, "{c:?}");
            let sessions: HashSet<_> = c.iter().map(|id| id.split(':').next().unwrap()).collect();
            assert_eq!(
                sessions.len(),
                c.len(),
                "no session twice in one call: {c:?}"
            );
        }
        let long: Vec<_> = calls
            .iter()
            .flatten()
            .filter(|id| id.starts_with("sess_long:"))
            .collect();
        assert_eq!(
            long,
            ["sess_long:created", "sess_long:ready", "sess_long:ended"]
        );
        assert_eq!(calls.iter().map(Vec::len).sum::<usize>(), 23);
        // More events of one session than calls of ten need: one call per event of it.
        let one: Vec<Value> = (0..3).map(|s| step(s, "sess_1", s)).collect();
        assert_eq!(planned(events(&batch(one))).len(), 3);
        assert!(plan(Vec::new()).is_empty());
    }

    #[tokio::test]
    async fn an_entry_refused_mid_call_names_its_record_and_holds_its_sessions_later_events() {
        // Three sessions' lifecycles interleaved, and one more created: three calls.
        let b = batch(vec![
            step(1, "sess_a", 0),
            step(2, "sess_b", 0),
            step(3, "sess_c", 0),
            step(4, "sess_d", 0),
            step(5, "sess_a", 1),
            step(6, "sess_c", 1),
            step(7, "sess_b", 1),
            step(8, "sess_c", 2),
            step(9, "sess_a", 2),
            step(10, "sess_b", 2),
        ]);
        let ok = Sink::default();
        let failing = Sink {
            fail: vec!["sess_c:ready".into()],
            ..Sink::default()
        };
        let answer = process(&b, &[&ok, &failing]).await;
        assert_eq!(
            answer.batch_item_failures,
            [BatchItemFailure {
                item_identifier: "6".into()
            }]
        );
        let took = failing.took.lock().unwrap().clone();
        // The refused entry's call-mates went out (their records are retried too) ...
        assert!(took.contains(&"sess_b:ready".to_owned()), "{took:?}");
        // ... but nothing of sess_c after its refused ready, nor any later call.
        assert!(!took.iter().any(|id| id.ends_with(":ended")), "{took:?}");
        // Every event of the records before the named one went out everywhere.
        for s in [&ok, &failing] {
            let took = s.took.lock().unwrap();
            for (record, e) in events(&b) {
                if record < 5 {
                    assert!(took.contains(&e.event_id), "{} not in {took:?}", e.event_id);
                }
            }
        }
        // Both sinks got each call at once: the other sink took the whole second call.
        assert!(ok.took.lock().unwrap().contains(&"sess_c:ready".to_owned()));
    }
}
