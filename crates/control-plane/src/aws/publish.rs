//! Where the sessions-stream processor publishes session events: the session topic (SNS,
//! [`SnsTopic`]) and an EventBridge bus ([`EventBus`]), and the processor's configuration
//! ([`EventsConfig`]).
//!
//! SNS: the message is the event's JSON; message attributes `kind` and `projectId` let a
//! subscription's filter policy pick events without reading the body. EventBridge: source
//! [`wallcrawler_contract::events::SOURCE`], the event's detail type, the event's JSON as
//! `detail`. `PutEvents` answers 200 even when it refused the entry (`FailedEntryCount`):
//! that counts as a failure here.

use async_trait::async_trait;
use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use aws_sdk_sns::error::DisplayErrorContext;
use aws_sdk_sns::types::MessageAttributeValue;
use wallcrawler_contract::events::{SOURCE, SessionEvent};

use super::config::ConfigError;
use crate::session_events::{EventSink, EventsError};

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

#[async_trait]
impl EventSink for SnsTopic {
    async fn publish(&self, e: &SessionEvent) -> Result<(), EventsError> {
        let mut req = self
            .client
            .publish()
            .topic_arn(&self.arn)
            .message(body(e))
            .message_attributes("kind", string_attribute(e.kind.as_str()));
        if !e.project_id.is_empty() {
            req = req.message_attributes("projectId", string_attribute(&e.project_id));
        }
        req.send()
            .await
            .map(|_| ())
            .map_err(|err| EventsError::Publish {
                sink: "sns",
                event_id: e.event_id.clone(),
                reason: DisplayErrorContext(&err).to_string(),
            })
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
    async fn publish(&self, e: &SessionEvent) -> Result<(), EventsError> {
        let failed = |reason: String| EventsError::Publish {
            sink: "eventbridge",
            event_id: e.event_id.clone(),
            reason,
        };
        let entry = PutEventsRequestEntry::builder()
            .event_bus_name(&self.name)
            .source(SOURCE)
            .detail_type(e.detail_type())
            .detail(body(e))
            .build();
        let out = self
            .client
            .put_events()
            .entries(entry)
            .send()
            .await
            .map_err(|err| failed(DisplayErrorContext(&err).to_string()))?;
        if out.failed_entry_count() == 0 {
            return Ok(());
        }
        let why = out.entries().first().map_or_else(
            || "refused".to_owned(),
            |r| {
                format!(
                    "{}: {}",
                    r.error_code().unwrap_or("refused"),
                    r.error_message().unwrap_or("")
                )
            },
        );
        Err(failed(why))
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
