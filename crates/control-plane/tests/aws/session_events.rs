//! The sessions-stream processor against moto: the sessions table gets a `NEW_AND_OLD_IMAGES`
//! stream; a session goes through the API (create, READY played as a task writes it, release,
//! and `endedAt` as its controller writes it); the stream's records, read with the
//! DynamoDB Streams API and turned into the JSON Lambda delivers, go through
//! [`session_events::process`] to the real SNS and EventBridge adapters. moto delivers SNS to a
//! subscribed SQS queue and an EventBridge rule to its SQS target, so the test reads what a
//! subscriber would. moto cannot run the Lambda itself (no event source mapping here). The
//! sinks' clients count the requests they send (an SDK interceptor), so a test sees how many
//! calls a batch cost.

use std::sync::{Arc, Mutex};

use aws_sdk_dynamodbstreams::types::{AttributeValue as StreamValue, ShardIteratorType};
use aws_sdk_sns::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_sns::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_sns::error::BoxError;
use base64::Engine;
use serde_json::{Value, json};
use wallcrawler_control_plane::aws::{EventBus, SnsTopic};
use wallcrawler_control_plane::session_events::{self, BatchResponse, EventSink, StreamBatch};
use wallcrawler_testkit::platform::{Fixture, PUBLIC_IP, s};
use wallcrawler_testkit::unique;

/// A stream attribute value as DynamoDB JSON, the form Lambda hands a function.
fn lambda_json(v: &StreamValue) -> Value {
    let b64 = |b: &aws_sdk_dynamodbstreams::primitives::Blob| {
        base64::engine::general_purpose::STANDARD.encode(b.as_ref())
    };
    match v {
        StreamValue::S(x) => json!({ "S": x }),
        StreamValue::N(x) => json!({ "N": x }),
        StreamValue::Bool(x) => json!({ "BOOL": x }),
        StreamValue::Null(x) => json!({ "NULL": x }),
        StreamValue::B(x) => json!({ "B": b64(x) }),
        StreamValue::Ss(x) => json!({ "SS": x }),
        StreamValue::Ns(x) => json!({ "NS": x }),
        StreamValue::Bs(x) => json!({ "BS": x.iter().map(b64).collect::<Vec<_>>() }),
        StreamValue::L(x) => json!({ "L": x.iter().map(lambda_json).collect::<Vec<_>>() }),
        StreamValue::M(x) => json!({ "M": image(x) }),
        other => panic!("an attribute type this test does not know: {other:?}"),
    }
}

fn image(m: &std::collections::HashMap<String, StreamValue>) -> Value {
    m.iter().map(|(k, v)| (k.clone(), lambda_json(v))).collect()
}

/// Every record of the stream `arn` (moto: one shard), oldest first, as Lambda's JSON.
async fn stream_records(client: &aws_sdk_dynamodbstreams::Client, arn: &str) -> Vec<Value> {
    let d = client
        .describe_stream()
        .stream_arn(arn)
        .send()
        .await
        .unwrap();
    let shards = d.stream_description().unwrap().shards().to_vec();
    let mut out = Vec::new();
    for shard in shards {
        let mut it = client
            .get_shard_iterator()
            .stream_arn(arn)
            .shard_id(shard.shard_id().unwrap())
            .shard_iterator_type(ShardIteratorType::TrimHorizon)
            .send()
            .await
            .unwrap()
            .shard_iterator
            .unwrap();
        loop {
            let page = client
                .get_records()
                .shard_iterator(&it)
                .send()
                .await
                .unwrap();
            if page.records().is_empty() {
                break;
            }
            for r in page.records() {
                let change = r.dynamodb().unwrap();
                let mut c = json!({ "SequenceNumber": change.sequence_number().unwrap() });
                if let Some(o) = change.old_image() {
                    c["OldImage"] = image(o);
                }
                if let Some(n) = change.new_image() {
                    c["NewImage"] = image(n);
                }
                out.push(json!({
                    "eventID": r.event_id().unwrap(),
                    "eventName": r.event_name().unwrap().as_str(),
                    "eventSource": "aws:dynamodb",
                    "dynamodb": c,
                }));
            }
            match page.next_shard_iterator() {
                Some(next) => it = next.to_owned(),
                None => break,
            }
        }
    }
    out
}

/// A new queue; its URL and ARN.
async fn queue(sqs: &aws_sdk_sqs::Client) -> (String, String) {
    let url = sqs
        .create_queue()
        .queue_name(unique("events"))
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let attrs = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap();
    let arn =
        attrs.attributes().unwrap()[&aws_sdk_sqs::types::QueueAttributeName::QueueArn].clone();
    (url, arn)
}

/// Exactly `n` message bodies from `url`, in the order received (moto keeps a standard queue's
/// order), each deleted; then the queue is empty.
async fn bodies(sqs: &aws_sdk_sqs::Client, url: &str, n: usize) -> Vec<Value> {
    let mut out = Vec::new();
    while out.len() < n {
        let got = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .wait_time_seconds(2)
            .send()
            .await
            .unwrap();
        assert!(
            !got.messages().is_empty(),
            "only {} of {n} messages: {out:?}",
            out.len()
        );
        for m in got.messages() {
            out.push(serde_json::from_str(m.body().unwrap()).unwrap());
            sqs.delete_message()
                .queue_url(url)
                .receipt_handle(m.receipt_handle().unwrap())
                .send()
                .await
                .unwrap();
        }
    }
    let rest = sqs
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .send()
        .await
        .unwrap();
    assert!(
        rest.messages().is_empty(),
        "more than {n}: {:?}",
        rest.messages()
    );
    out
}

/// Where the events go and who reads them.
struct Subscribers {
    /// The topic's ARN.
    topic: String,
    /// The bus's name.
    bus: String,
    /// A queue subscribed to the topic (raw delivery: the body is the event).
    topic_queue: String,
    /// The target queue of a rule on the bus matching the events' source.
    rule_queue: String,
}

impl Subscribers {
    fn sinks(&self, f: &Fixture) -> (SnsTopic, EventBus) {
        self.counted_sinks(f, &Calls::default())
    }

    /// The sinks, their clients' requests recorded in `calls`.
    fn counted_sinks(&self, f: &Fixture, calls: &Calls) -> (SnsTopic, EventBus) {
        let sns = aws_sdk_sns::config::Builder::from(&f.sdk)
            .interceptor(calls.clone())
            .build();
        let events = aws_sdk_eventbridge::config::Builder::from(&f.sdk)
            .interceptor(calls.clone())
            .build();
        (
            SnsTopic::new(aws_sdk_sns::Client::from_conf(sns), &self.topic),
            EventBus::new(aws_sdk_eventbridge::Client::from_conf(events), &self.bus),
        )
    }
}

/// The operation of every request the clients it is given to sent (a retry is a request too):
/// an interceptor that runs as the request goes on the wire.
#[derive(Debug, Clone, Default)]
struct Calls(Arc<Mutex<Vec<String>>>);

impl Calls {
    fn sent(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

impl Intercept for Calls {
    fn name(&self) -> &'static str {
        "Calls"
    }

    fn read_before_transmit(
        &self,
        cx: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        // EventBridge (JSON) names the operation in a header, SNS (query) in the form body.
        let req = cx.request();
        let body = String::from_utf8_lossy(req.body().bytes().unwrap_or_default());
        let op = match req.headers().get("x-amz-target") {
            Some(target) => target.to_owned(),
            None => body
                .split('&')
                .find_map(|kv| kv.strip_prefix("Action="))
                .unwrap_or("?")
                .to_owned(),
        };
        self.0.lock().unwrap().push(op);
        Ok(())
    }
}

/// The topic with a raw-delivery queue subscribed, and a bus with a rule on the events'
/// source targeting a second queue.
async fn subscribers(f: &Fixture) -> Subscribers {
    let sqs = aws_sdk_sqs::Client::new(&f.sdk);
    let sns = aws_sdk_sns::Client::new(&f.sdk);
    let events = aws_sdk_eventbridge::Client::new(&f.sdk);
    let topic = sns
        .create_topic()
        .name(unique("wallcrawler-session-ready"))
        .send()
        .await
        .unwrap()
        .topic_arn
        .unwrap();
    let (topic_queue, topic_queue_arn) = queue(&sqs).await;
    sns.subscribe()
        .topic_arn(&topic)
        .protocol("sqs")
        .endpoint(topic_queue_arn)
        .attributes("RawMessageDelivery", "true")
        .send()
        .await
        .unwrap();
    let bus = unique("sessions");
    events.create_event_bus().name(&bus).send().await.unwrap();
    let rule = unique("session-events");
    events
        .put_rule()
        .name(&rule)
        .event_bus_name(&bus)
        .event_pattern(json!({ "source": [wallcrawler_contract::events::SOURCE] }).to_string())
        .send()
        .await
        .unwrap();
    let (rule_queue, rule_queue_arn) = queue(&sqs).await;
    let target = aws_sdk_eventbridge::types::Target::builder()
        .id("queue")
        .arn(rule_queue_arn)
        .build()
        .unwrap();
    events
        .put_targets()
        .rule(&rule)
        .event_bus_name(&bus)
        .targets(target)
        .send()
        .await
        .unwrap();
    Subscribers {
        topic,
        bus,
        topic_queue,
        rule_queue,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_lifecycle_reaches_the_topic_and_eventbridge_as_created_ready_ended() {
    let f = Fixture::new(20).await;
    let dynamo = f.dynamo();
    let stream_arn = dynamo
        .update_table()
        .table_name(&f.cfg.tables.sessions)
        .stream_specification(
            aws_sdk_dynamodb::types::StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(aws_sdk_dynamodb::types::StreamViewType::NewAndOldImages)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap()
        .table_description
        .and_then(|t| t.latest_stream_arn)
        .expect("a stream");
    let subs = subscribers(&f).await;
    let (topic, bus) = subs.sinks(&f);
    let (topic_queue, rule_queue) = (subs.topic_queue.clone(), subs.rule_queue.clone());
    let sinks: [&dyn EventSink; 2] = [&topic, &bus];

    // The lifecycle: create (READY played as a task writes it), release, then `endedAt` and
    // `proxyBytes` as the session's controller writes them after its upload.
    let v = f.running_session(json!({})).await;
    let id = v["id"].as_str().unwrap().to_owned();
    let token = v["signingKey"].as_str().unwrap().to_owned();
    let (status, _) = f.release(&id).await;
    assert_eq!(status, axum::http::StatusCode::OK);
    let ended_at = wallcrawler_contract::time::now_iso8601();
    dynamo
        .update_item()
        .table_name(&f.cfg.tables.sessions)
        .key("sessionId", s(&id))
        .update_expression("SET proxyBytes = :b, endedAt = :at, updatedAt = :at")
        .expression_attribute_values(
            ":b",
            aws_sdk_dynamodb::types::AttributeValue::N("2048".into()),
        )
        .expression_attribute_values(":at", s(&ended_at))
        .send()
        .await
        .unwrap();
    let item = f.item(&id).await;
    assert!(
        !item.contains_key("signingKey") && !format!("{item:?}").contains(&token),
        "the item holds no token"
    );

    let streams = aws_sdk_dynamodbstreams::Client::new(&f.sdk);
    let records = stream_records(&streams, &stream_arn).await;
    assert!(records.len() >= 4, "{records:?}");
    assert!(
        !records.iter().any(|r| r.to_string().contains(&token)),
        "no stream record carries the token"
    );
    let batch: StreamBatch = serde_json::from_value(json!({ "Records": records })).unwrap();
    assert_eq!(
        session_events::process(&batch, &sinks).await,
        BatchResponse::default()
    );

    let sqs = aws_sdk_sqs::Client::new(&f.sdk);
    let on_topic = bodies(&sqs, &topic_queue, 3).await;
    let on_rule = bodies(&sqs, &rule_queue, 3).await;
    let expected = [
        ("created", "Session Created"),
        ("ready", "Session Ready"),
        ("ended", "Session Ended"),
    ];
    for (i, (kind, detail_type)) in expected.into_iter().enumerate() {
        let (sns, eb) = (&on_topic[i], &on_rule[i]);
        assert_eq!(sns["kind"], kind, "{on_topic:?}");
        assert_eq!(sns["eventId"], format!("{id}:{kind}"));
        assert_eq!(sns["sessionId"], id.as_str());
        assert_eq!(sns["projectId"], f.project_id.as_str());
        assert_eq!(eb["source"], "wallcrawler.sessions");
        assert_eq!(eb["detail-type"], detail_type);
        assert_eq!(&eb["detail"], sns, "the same event both ways");
    }
    assert_eq!(on_topic[1]["connectHost"], format!("{PUBLIC_IP}:9223"));
    assert_eq!(on_topic[2]["status"], "COMPLETED");
    assert_eq!(on_topic[2]["proxyBytes"], 2048);
    assert_eq!(on_topic[2]["at"], ended_at.as_str());
    for body in on_topic.iter().chain(&on_rule) {
        let text = body.to_string();
        assert!(
            !text.contains(&token) && !text.contains("signingKey"),
            "{text}"
        );
    }

    // A record delivered twice (a retried batch): the same event, the same id.
    let ready_record = batch
        .records
        .iter()
        .find(|r| {
            session_events::record_events(r)
                .unwrap()
                .iter()
                .any(|e| e.event_id.ends_with(":ready"))
        })
        .unwrap()
        .clone();
    let again = StreamBatch {
        records: vec![ready_record],
    };
    assert_eq!(
        session_events::process(&again, &sinks).await,
        BatchResponse::default()
    );
    let redelivered = bodies(&sqs, &topic_queue, 1).await;
    assert_eq!(redelivered[0], on_topic[1], "same event, same eventId");
    assert_eq!(bodies(&sqs, &rule_queue, 1).await[0]["detail"], on_topic[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lambda_binary_publishes_a_batch_and_names_the_record_it_could_not_read() {
    let f = Fixture::new(1).await;
    let subs = subscribers(&f).await;
    let mut vars = f.vars.clone();
    vars.insert("SESSION_EVENTS_TOPIC_ARN", subs.topic.clone());
    vars.insert("SESSION_EVENTS_BUS_NAME", subs.bus.clone());
    let token = "eyJhbGciOiJFZERTQSJ9.eyJzdWIiOiJzZXNzXzEifQ.c2lnbmF0dXJl";
    let item = json!({
        "sessionId": {"S": "sess_bin"}, "projectId": {"S": "proj_1"}, "region": {"S": "us-east-1"},
        "createdAt": {"S": "2026-11-26T10:00:00.000Z"}, "expiresAt": {"N": "1900000000"},
        "internalStatus": {"S": "CREATING"}, "status": {"S": "PENDING"},
        "signingKey": {"S": token},
        "connectUrl": {"S": format!("wss://gw.example/?signingKey={token}")},
    });
    let record = |seq: &str, new: Value| {
        json!({"eventID": format!("e{seq}"), "eventName": "INSERT", "eventSource": "aws:dynamodb",
               "awsRegion": "us-east-1", "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/s/stream/x",
               "dynamodb": {"SequenceNumber": seq, "Keys": {"sessionId": {"S": "sess_bin"}}, "NewImage": new,
                            "StreamViewType": "NEW_AND_OLD_IMAGES", "SizeBytes": 1}})
    };
    let batch = json!({"Records": [
        record("1", item),
        record("2", json!({"sessionId": {"S": "sess_broken"}})),
    ]});
    let (posted, log) = super::run_lambda(
        env!("CARGO_BIN_EXE_wallcrawler-session-events-lambda"),
        &vars,
        vec![batch],
    )
    .await;
    assert_eq!(posted[0].1, "response", "{posted:?}");
    assert_eq!(
        posted[0].2,
        json!({"batchItemFailures": [{"itemIdentifier": "2"}]})
    );
    let sqs = aws_sdk_sqs::Client::new(&f.sdk);
    let on_topic = bodies(&sqs, &subs.topic_queue, 1).await;
    assert_eq!(on_topic[0]["eventId"], "sess_bin:created");
    let on_rule = bodies(&sqs, &subs.rule_queue, 1).await;
    assert_eq!(on_rule[0]["detail"], on_topic[0]);
    for text in [
        log.as_str(),
        &on_topic[0].to_string(),
        &on_rule[0].to_string(),
    ] {
        assert!(!text.contains(token), "the token is in {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sink_that_fails_stops_the_batch_at_its_record_for_lambda_to_retry() {
    let f = Fixture::new(1).await;
    let subs = subscribers(&f).await;
    let (topic, _) = subs.sinks(&f);
    // moto refuses PutEvents to a bus that does not exist (ResourceNotFoundException).
    let missing = EventBus::new(
        aws_sdk_eventbridge::Client::new(&f.sdk),
        unique("no-such-bus"),
    );
    let insert = |seq: &str, id: &str| {
        json!({"eventID": format!("e{seq}"), "eventName": "INSERT",
               "dynamodb": {"SequenceNumber": seq, "NewImage": {
                   "sessionId": {"S": id}, "projectId": {"S": "proj_1"},
                   "createdAt": {"S": "2026-11-26T10:00:00.000Z"}, "expiresAt": {"N": "1900000000"},
                   "internalStatus": {"S": "CREATING"}, "status": {"S": "PENDING"}}}})
    };
    let mut ready = insert("12", "sess_a");
    ready["eventName"] = json!("MODIFY");
    ready["dynamodb"]["OldImage"] = ready["dynamodb"]["NewImage"].clone();
    ready["dynamodb"]["NewImage"]["internalStatus"] = json!({"S": "READY"});
    ready["dynamodb"]["NewImage"]["status"] = json!({"S": "RUNNING"});
    let batch: StreamBatch = serde_json::from_value(
        json!({"Records": [insert("10", "sess_a"), insert("11", "sess_b"), ready]}),
    )
    .unwrap();
    let answer = session_events::process(&batch, &[&topic, &missing]).await;
    assert_eq!(
        serde_json::to_value(&answer).unwrap(),
        json!({"batchItemFailures": [{"itemIdentifier": "10"}]})
    );
    // The topic took the first call (both sessions' created) while the bus refused it (the
    // retry publishes them again: subscribers deduplicate on eventId); sess_a's ready, in the
    // next call, did not go out.
    let sqs = aws_sdk_sqs::Client::new(&f.sdk);
    let on_topic = bodies(&sqs, &subs.topic_queue, 2).await;
    assert_eq!(on_topic[0]["eventId"], "sess_a:created");
    assert_eq!(on_topic[1]["eventId"], "sess_b:created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_five_records_go_out_in_three_calls_per_sink_in_order_per_session() {
    let f = Fixture::new(1).await;
    let subs = subscribers(&f).await;
    // A second subscriber filters on the `kind` message attribute: the attributes arrive.
    let sqs = aws_sdk_sqs::Client::new(&f.sdk);
    let (ready_queue, ready_queue_arn) = queue(&sqs).await;
    aws_sdk_sns::Client::new(&f.sdk)
        .subscribe()
        .topic_arn(&subs.topic)
        .protocol("sqs")
        .endpoint(ready_queue_arn)
        .attributes("RawMessageDelivery", "true")
        .attributes(
            "FilterPolicy",
            json!({"kind": ["ready"], "projectId": ["proj_1"]}).to_string(),
        )
        .send()
        .await
        .unwrap();
    let calls = Calls::default();
    let (topic, bus) = subs.counted_sinks(&f, &calls);

    // Nine sessions: eight go through created, ready and ended, one is only created; their
    // records interleaved (session i's step s comes at about i / 2 + s).
    let image = |id: &str, step: usize| {
        let mut m = json!({
            "sessionId": {"S": id}, "projectId": {"S": "proj_1"}, "region": {"S": "us-east-1"},
            "createdAt": {"S": "2026-11-26T10:00:00.000Z"}, "expiresAt": {"N": "1900000000"},
            "internalStatus": {"S": "CREATING"}, "status": {"S": "PENDING"},
        });
        if step >= 1 {
            m["internalStatus"] = json!({"S": "READY"});
            m["status"] = json!({"S": "RUNNING"});
            m["readyAt"] = json!({"S": "2026-11-26T10:00:05.000Z"});
        }
        if step == 2 {
            m["internalStatus"] = json!({"S": "STOPPED"});
            m["status"] = json!({"S": "COMPLETED"});
            m["endedAt"] = json!({"S": "2026-11-26T10:01:00.000Z"});
        }
        m
    };
    let steps = |i: usize| if i == 8 { 1 } else { 3 };
    let mut order: Vec<(usize, usize)> = (0..9)
        .flat_map(|i| (0..steps(i)).map(move |s| (i, s)))
        .collect();
    order.sort_by_key(|&(i, s)| (i / 2 + s, i));
    let records: Vec<Value> = order
        .iter()
        .enumerate()
        .map(|(seq, &(i, s))| {
            let id = format!("sess_{i}");
            let mut change =
                json!({ "SequenceNumber": (100 + seq).to_string(), "NewImage": image(&id, s) });
            if s > 0 {
                change["OldImage"] = image(&id, s - 1);
            }
            let name = if s == 0 { "INSERT" } else { "MODIFY" };
            json!({"eventID": format!("e{seq}"), "eventName": name, "dynamodb": change})
        })
        .collect();
    assert_eq!(records.len(), 25);
    let batch: StreamBatch = serde_json::from_value(json!({ "Records": records })).unwrap();
    assert_eq!(
        session_events::process(&batch, &[&topic, &bus]).await,
        BatchResponse::default()
    );

    let sent = calls.sent();
    let count = |op: &str| sent.iter().filter(|o| o.as_str() == op).count();
    assert_eq!(
        (count("PublishBatch"), count("AWSEvents.PutEvents")),
        (3, 3),
        "{sent:?}"
    );
    assert_eq!(sent.len(), 6, "nothing else was sent: {sent:?}");

    let on_topic = bodies(&sqs, &subs.topic_queue, 25).await;
    let on_rule = bodies(&sqs, &subs.rule_queue, 25).await;
    let details: Vec<Value> = on_rule.iter().map(|m| m["detail"].clone()).collect();
    for (sink, got) in [("sns", &on_topic), ("eventbridge", &details)] {
        for i in 0..9 {
            let id = format!("sess_{i}");
            let kinds: Vec<&str> = got
                .iter()
                .filter(|e| e["sessionId"] == id.as_str())
                .map(|e| e["kind"].as_str().unwrap())
                .collect();
            assert_eq!(
                kinds,
                ["created", "ready", "ended"][..steps(i)],
                "{sink}: {id} in its order"
            );
        }
    }
    // The same events both ways, each with its id.
    let ids = |got: &[Value]| {
        let mut ids: Vec<String> = got.iter().map(|e| e["eventId"].to_string()).collect();
        ids.sort();
        ids
    };
    assert_eq!(ids(&on_topic), ids(&details));
    for e in &on_topic {
        let same = details
            .iter()
            .find(|d| d["eventId"] == e["eventId"])
            .unwrap();
        assert_eq!(same, e);
    }
    let ready = bodies(&sqs, &ready_queue, 8).await;
    assert!(ready.iter().all(|e| e["kind"] == "ready"), "{ready:?}");
}
