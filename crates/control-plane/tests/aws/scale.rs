//! Limits that scale (Step 10, item 6), on moto through the real SDK: the concurrency slots'
//! writes stay the same size however many sessions are active, the limit is exact under
//! simultaneous creates at the boundary, a give-back twice is harmless; the listing index pages
//! and holds no token; usage is a running total, each session counted once.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use axum::http::{Method, StatusCode};
use futures_util::StreamExt;
use serde_json::json;
use wallcrawler_contract::time::{iso8601_millis, now_iso8601, parse_iso8601};
use wallcrawler_control_plane::aws::{COUNTER, DynamoSessions, DynamoSlots};
use wallcrawler_control_plane::limits::new_session_id;
use wallcrawler_control_plane::memory::MemSessions;
use wallcrawler_control_plane::stores::{LISTED, PageAt, SessionStore, Slot, SlotStore};
use wallcrawler_testkit::platform::{Fixture, call_with_key, refused, s, stopped_event, text};
use wallcrawler_testkit::tables;

/// DynamoDB's size of an item: each attribute's name plus its value (numbers counted as their
/// text, an upper bound of their stored size).
fn item_size(item: &HashMap<String, AttributeValue>) -> usize {
    item.iter()
        .map(|(k, v)| {
            k.len()
                + match v {
                    AttributeValue::S(s) | AttributeValue::N(s) => s.len(),
                    other => panic!("slot items hold strings and numbers, got {other:?}"),
                }
        })
        .sum()
}

/// The slot store on the fixture's table.
fn slots(f: &Fixture) -> DynamoSlots {
    DynamoSlots::new(f.dynamo(), &f.cfg.tables.slots)
}

/// Item `sort` of `project`'s partition of the slots table (empty when none).
async fn slot_item(f: &Fixture, project: &str, sort: &str) -> HashMap<String, AttributeValue> {
    f.dynamo()
        .get_item()
        .table_name(&f.cfg.tables.slots)
        .key("projectId", s(project))
        .key("sessionId", s(sort))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item
        .unwrap_or_default()
}

/// Takes `n` slots of `project` (limit `limit`), 32 at a time; their ids.
async fn fill(f: &Fixture, project: &str, n: usize, limit: u64) -> Vec<String> {
    let store = slots(f);
    let ids: Vec<String> = (0..n).map(|_| new_session_id()).collect();
    let taken: Vec<Slot> = futures_util::stream::iter(&ids)
        .map(|id| {
            let store = &store;
            async move { store.take(project, id, limit).await.unwrap() }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    assert!(taken.iter().all(|t| *t == Slot::Taken));
    ids
}

/// The size of the two items a take writes (the counter and the new holder's item).
async fn written_by_take(f: &Fixture, project: &str, id: &str) -> usize {
    item_size(&slot_item(f, project, COUNTER).await) + item_size(&slot_item(f, project, id).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_with_1000_active_sessions_writes_what_it_writes_with_one() {
    let f = Fixture::new(1).await;
    // A project with one active session, and one with a thousand.
    let (small, small_key) = f.project_with_key(1_001).await;
    let (big, big_key) = f.project_with_key(1_001).await;
    fill(&f, &small, 1, 1_001).await;
    fill(&f, &big, 1_000, 1_001).await;
    assert_eq!(f.held(&big).await.len(), 1_000);

    let mut written = Vec::new();
    for (project, key) in [(&small, &small_key), (&big, &big_key)] {
        let (status, v) = f.create_as(key, json!({})).await;
        assert_eq!(status, StatusCode::CREATED, "{v}");
        written.push(written_by_take(&f, project, v["id"].as_str().unwrap()).await);
    }
    // The counter's number has three more digits; nothing else grows.
    assert!(written[1] <= written[0] + 3, "{written:?}");
    assert!(
        written[1] < 200,
        "a take writes two small items: {written:?} bytes"
    );
    assert_eq!(f.held(&big).await.len(), 1_001);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limit_stays_exact_under_50_simultaneous_creates_at_the_boundary() {
    let f = Fixture::new(1).await;
    let (project, key) = f.project_with_key(20).await;
    // 15 creates in flight (slots taken, items not written yet: never reclaimed).
    let mut held = fill(&f, &project, 15, 20).await;
    let answers =
        futures_util::future::join_all((0..50).map(|_| f.create_as(&key, json!({})))).await;
    let created: Vec<String> = answers
        .iter()
        .filter(|(st, _)| *st == StatusCode::CREATED)
        .map(|(_, v)| v["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(created.len(), 5, "{answers:?}");
    for (status, v) in refused(&answers) {
        assert_eq!(*status, StatusCode::TOO_MANY_REQUESTS, "{v}");
    }
    held.extend(created);
    held.sort();
    assert_eq!(
        f.held(&project).await,
        held,
        "exactly the limit, counted exactly"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_double_give_back_is_harmless() {
    let f = Fixture::new(1).await;
    let store = slots(&f);
    let (a, b, never) = (new_session_id(), new_session_id(), new_session_id());
    assert_eq!(store.take("p", &a, 2).await.unwrap(), Slot::Taken);
    assert_eq!(
        store.take("p", &a, 2).await.unwrap(),
        Slot::Taken,
        "a retry"
    );
    assert_eq!(store.take("p", &b, 2).await.unwrap(), Slot::Taken);
    assert_eq!(f.held("p").await.len(), 2, "the retry counted once");
    for _ in 0..2 {
        store.give_back("p", &a).await.unwrap();
    }
    store.give_back("p", &never).await.unwrap();
    store.give_back("other", &b).await.unwrap();
    assert_eq!(
        f.held("p").await,
        std::slice::from_ref(&b),
        "one slot given back, once"
    );
    let c = new_session_id();
    assert_eq!(store.take("p", &c, 2).await.unwrap(), Slot::Taken);
    let d = new_session_id();
    let mut want = vec![b, c];
    want.sort();
    match store.take("p", &d, 2).await.unwrap() {
        Slot::Full(mut holders) => {
            holders.sort();
            assert_eq!(holders, want);
        }
        Slot::Taken => panic!("a third slot of two"),
    }
    assert_eq!(f.held("p").await, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_project_still_reclaims_holders_that_are_gone() {
    let f = Fixture::new(1).await;
    let (project, key) = f.project_with_key(1).await;
    // A holder minted long ago whose item is gone (TTL, or a create that died).
    let long_ago = uuid::Uuid::new_v7(uuid::Timestamp::from_unix(
        uuid::NoContext,
        1_700_000_000,
        0,
    ));
    let gone = format!("sess_{long_ago}");
    assert_eq!(
        slots(&f).take(&project, &gone, 1).await.unwrap(),
        Slot::Taken
    );
    let (status, v) = f.create_as(&key, json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
    assert_eq!(
        f.held(&project).await,
        [v["id"].as_str().unwrap().to_owned()]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listing_index_pages_like_the_reference_and_holds_no_token() {
    let f = Fixture::new(1).await;
    let (project, key) = f.project_with_key(10).await;
    for _ in 0..5 {
        let (status, v) = f.create_as(&key, json!({"userMetadata": {"k": "v"}})).await;
        assert_eq!(status, StatusCode::CREATED, "{v}");
    }
    assert_eq!(
        tables::SESSIONS.indexes[0].include,
        LISTED,
        "the fixture's index is the code's"
    );
    let dynamo = DynamoSessions::new(f.dynamo(), &f.cfg.tables.sessions);
    // The same sessions in the reference store, in full.
    let memory = MemSessions::default();
    let all = dynamo
        .list_project(
            &project,
            PageAt {
                after: None,
                limit: 100,
            },
        )
        .await
        .unwrap();
    for d in &all.sessions {
        memory
            .create(dynamo.get(&d.session_id).await.unwrap().unwrap())
            .await
            .unwrap();
    }
    assert!(
        memory
            .get(&all.sessions[0].session_id)
            .await
            .unwrap()
            .unwrap()
            .claim_deadline
            .is_some(),
        "the item holds what the index leaves out"
    );
    let (mut after, mut pages) = (None, Vec::new());
    loop {
        let at = PageAt { after, limit: 2 };
        let got = dynamo.list_project(&project, at.clone()).await.unwrap();
        let want = memory.list_project(&project, at).await.unwrap();
        assert_eq!(
            got.sessions, want.sessions,
            "the index holds what listing needs, no more"
        );
        for d in &got.sessions {
            assert_eq!((d.signing_key.as_ref(), d.claim_deadline), (None, None));
            assert_eq!(d.user_metadata, Some(json!({"k": "v"})));
        }
        pages.push(got.sessions.len());
        // DynamoDB may name a next page that turns out empty; the reference does not.
        match got.next {
            Some(next) if !got.sessions.is_empty() => after = Some(next),
            _ => break,
        }
    }
    assert_eq!(pages.iter().sum::<usize>(), 5, "{pages:?}");
    assert_eq!(pages[..3], [2, 2, 1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_counts_a_session_once_under_two_simultaneous_enders() {
    let f = Fixture::new(1).await;
    let (project, key) = f.project_with_key(5).await;
    let usage = || async {
        let path = format!("/v1/projects/{project}/usage");
        let (status, v) = call_with_key(&f.router, &key, Method::GET, &path, None).await;
        assert_eq!(status, StatusCode::OK, "{v}");
        v
    };
    assert_eq!(usage().await, json!({"browserMinutes": 0, "proxyBytes": 0}));
    let mut ids = Vec::new();
    for bytes in [1_000u64, 234] {
        let (status, v) = f.create_as(&key, json!({})).await;
        assert_eq!(status, StatusCode::CREATED, "{v}");
        let id = v["id"].as_str().unwrap().to_owned();
        // The controller ends it 61 s after it started, with its proxy's byte count.
        let item = f.item(&id).await;
        let started = parse_iso8601(&text(&item, "startedAt").unwrap()).unwrap();
        f.dynamo()
            .update_item()
            .table_name(&f.cfg.tables.sessions)
            .key("sessionId", s(&id))
            .update_expression(
                "SET internalStatus = :st, #st = :sdk, endedAt = :at, proxyBytes = :b",
            )
            .expression_attribute_names("#st", "status")
            .expression_attribute_values(":st", s("STOPPED"))
            .expression_attribute_values(":sdk", s("COMPLETED"))
            .expression_attribute_values(":at", s(&iso8601_millis(started + 61_000)))
            .expression_attribute_values(":b", AttributeValue::N(bytes.to_string()))
            .send()
            .await
            .unwrap();
        ids.push((id, text(&item, "ecsTaskArn").unwrap()));
    }
    // Each task's stop is delivered twice at once (EventBridge delivers at least once), and a
    // create reclaiming the slot would count too: each session is counted once.
    let at = now_iso8601();
    let events: Vec<_> = ids
        .iter()
        .map(|(id, arn)| stopped_event(arn, Some(id), None))
        .collect();
    futures_util::future::join_all(events.iter().chain(&events).map(|e| f.task_stopped(e, &at)))
        .await;
    assert_eq!(
        usage().await,
        json!({"browserMinutes": 4, "proxyBytes": 1_234})
    );
    for (id, _) in &ids {
        assert_eq!(
            f.item(id).await.get("usageCounted"),
            Some(&AttributeValue::Bool(true))
        );
    }
    // The total is one item, never a session: the listing does not show it.
    let (_, listed) = call_with_key(&f.router, &key, Method::GET, "/v1/sessions", None).await;
    assert_eq!(listed.as_array().unwrap().len(), 2, "{listed}");
}
