//! `wallcrawler-session-events-lambda`: the target of an event source mapping on the sessions
//! table's stream (with `ReportBatchItemFailures` and an on-failure destination). Publishes
//! the records' session events (created, ready, ended; `wallcrawler_contract::events`) to the
//! session topic and to EventBridge, both at once, in calls of up to ten (`PublishBatch`,
//! `PutEvents`), and answers `batchItemFailures` naming the first record not fully published
//! ([`session_events`]). Reads `SESSION_EVENTS_TOPIC_ARN` (required) and
//! `SESSION_EVENTS_BUS_NAME` (default `default`); a configuration error is logged and the
//! process exits 64.

use lambda_runtime::{LambdaEvent, service_fn};
use wallcrawler_control_plane::aws::{self, EventBus, EventsConfig, SnsTopic, lambda};
use wallcrawler_control_plane::session_events::{self, EventSink, StreamBatch};

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    lambda::init_tracing();
    let cfg = match EventsConfig::from_source(&|k| std::env::var(k).ok()) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("{e}");
            std::process::exit(64);
        }
    };
    let sdk = aws::sdk_config().await;
    let topic = SnsTopic::new(aws_sdk_sns::Client::new(&sdk), cfg.topic_arn);
    let bus = EventBus::new(aws_sdk_eventbridge::Client::new(&sdk), cfg.bus_name);
    let sinks: [&dyn EventSink; 2] = [&topic, &bus];
    let sinks = &sinks;
    lambda_runtime::run(service_fn(|ev: LambdaEvent<StreamBatch>| async move {
        Ok::<_, lambda_runtime::Error>(session_events::process(&ev.payload, sinks).await)
    }))
    .await
}
