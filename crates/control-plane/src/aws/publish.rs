//! Where the sessions-stream processor publishes session events: the session topic (SNS,
//! [`SnsTopic`]) and an EventBridge bus ([`EventBus`]), and the processor's configuration
//! ([`EventsConfig`]).
//!
//! SNS (`PublishBatch`): the message is the event's JSON; message attributes `kind` and
//! `projectId` let a subscription's filter policy pick events without reading the body; an
//! entry's id is its position in the call. EventBridge (`PutEvents`): source
//! [`wallcrawler_contract::events::SOURCE`], the event's detail type, the event's JSON as
//! `detail`. Both answer 200 even when they refused entries (SNS's `Failed`, EventBridge's
//! `FailedEntryCount` and an error code on the entry's result): the first refused entry is
//! the call's failure here.

use async_trait::async_trait;
use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use aws_sdk_sns::error::DisplayErrorContext;
use aws_sdk_sns::types::{MessageAttributeValue, PublishBatchRequestEntry};
use wallcrawler_contract::events::{SOURCE, SessionEvent};

use super::config::ConfigError;
use crate::session_events::{BatchFailure, EventSink, EventsError};

/// The session topic's ARN.
pub const TOPIC_ARN_VAR: &str = "SESSION_EVENTS_TOPIC_ARN";
/// The EventBridge bus's name or ARN (default: the account's `default` bus).
pub const BUS_NAME_VAR: &str = "SESSION_EVENTS_BUS_NAME";

/// The processor's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventsConfig {
    /// `SESSION_EVENTS_TOPIC_ARN` (required).
    pub topic_arn: String,
    /// `SESSION_EVENTS_BUS_NAME` (default `default`).
    pub bus_name: String,
}

impl EventsConfig {
    /// Reads the two variables from `get` (the environment in the binary).
    pub fn from_source(get: &dyn Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let var = |k| {
            get(k)
                .map(|v| v.trim().to_owned())
                .filter(|v| !v.is_empty())
        };
        let Some(topic_arn) = var(TOPIC_ARN_VAR) else {
            return Err(ConfigError(vec![format!("{TOPIC_ARN_VAR} is required")]));
        };
        Ok(Self {
            topic_arn,
            bus_name: var(BUS_NAME_VAR).unwrap_or_else(|| "default".into()),
        })
    }
}

/// The session topic.
pub struct SnsTopic {
    client: aws_sdk_sns::Client,
    arn: String,
}

impl SnsTopic {
    /// The topic `arn`.
    pub fn new(client: aws_sdk_sns::Client, arn: impl Into<String>) -> Self {
        Self {
            client,
            arn: arn.into(),
        }
    }
}

fn string_attribute(v: &str) -> MessageAttributeValue {
    MessageAttributeValue::builder()
        .data_type("String")
        .string_value(v)
        .build()
        .expect("data_type is set")
}

fn body(e: &SessionEvent) -> String {
    serde_json::to_string(e).expect("a session event serialises")
}

/// `sink` did not take `events[index]`, for `reason`.
fn refused(
    sink: &'static str,
    events: &[SessionEvent],
    index: usize,
    reason: String,
) -> BatchFailure {
    BatchFailure {
        index,
        source: EventsError::Publish {
            sink,
            event_id: events
                .get(index)
                .map(|e| e.event_id.clone())
                .unwrap_or_default(),
            reason,
        },
    }
}

#[async_trait]
impl EventSink for SnsTopic {
    async fn publish_batch(&self, events: &[SessionEvent]) -> Result<(), BatchFailure> {
        let entries = events.iter().enumerate().map(|(i, e)| {
            let mut entry = PublishBatchRequestEntry::builder()
                .id(i.to_string())
                .message(body(e))
                .message_attributes("kind", string_attribute(e.kind.as_str()));
            if !e.project_id.is_empty() {
                entry = entry.message_attributes("projectId", string_attribute(&e.project_id));
            }
            entry.build().expect("id and message are set")
        });
        let out = self
            .client
            .publish_batch()
            .topic_arn(&self.arn)
            .set_publish_batch_request_entries(Some(entries.collect()))
            .send()
            .await
            .map_err(|err| refused("sns", events, 0, DisplayErrorContext(&err).to_string()))?;
        // An id that is no position of ours (never, from SNS) counts as the first entry.
        let first = out
            .failed()
            .iter()
            .map(|f| (f.id().parse().unwrap_or(0), f))
            .min_by_key(|(i, _)| *i);
        match first {
            None => Ok(()),
            Some((i, f)) => Err(refused(
                "sns",
                events,
                i,
                format!("{}: {}", f.code(), f.message().unwrap_or("")),
            )),
        }
    }
}

/// An EventBridge bus.
pub struct EventBus {
    client: aws_sdk_eventbridge::Client,
    name: String,
}

impl EventBus {
    /// The bus `name` (or ARN).
    pub fn new(client: aws_sdk_eventbridge::Client, name: impl Into<String>) -> Self {
        Self {
            client,
            name: name.into(),
        }
    }
}

#[async_trait]
impl EventSink for EventBus {
    async fn publish_batch(&self, events: &[SessionEvent]) -> Result<(), BatchFailure> {
        let entries = events.iter().map(|e| {
            PutEventsRequestEntry::builder()
                .event_bus_name(&self.name)
                .source(SOURCE)
                .detail_type(e.detail_type())
                .detail(body(e))
                .build()
        });
        let out = self
            .client
            .put_events()
            .set_entries(Some(entries.collect()))
            .send()
            .await
            .map_err(|err| {
                refused(
                    "eventbridge",
                    events,
                    0,
                    DisplayErrorContext(&err).to_string(),
                )
            })?;
        if out.failed_entry_count() == 0 {
            return Ok(());
        }
        // The results are in the entries' order; a refused entry's has an error code.
        let (i, why) = out
            .entries()
            .iter()
            .enumerate()
            .find_map(|(i, r)| {
                let code = r.error_code()?;
                Some((i, format!("{code}: {}", r.error_message().unwrap_or(""))))
            })
            .unwrap_or_else(|| (0, "refused".to_owned()));
        Err(refused("eventbridge", events, i, why))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_topic_is_required_and_the_bus_defaults() {
        let none = |_: &str| None;
        assert!(EventsConfig::from_source(&none).is_err());
        let topic = |k: &str| (k == TOPIC_ARN_VAR).then(|| " arn:aws:sns:us-east-1:1:t ".into());
        assert_eq!(
            EventsConfig::from_source(&topic).unwrap(),
            EventsConfig {
                topic_arn: "arn:aws:sns:us-east-1:1:t".into(),
                bus_name: "default".into()
            }
        );
        let both = |k: &str| Some(if k == BUS_NAME_VAR { "ops" } else { "arn:t" }.into());
        assert_eq!(EventsConfig::from_source(&both).unwrap().bus_name, "ops");
    }
}
