//! `GET /v1/sessions/{id}/logs` and `…/logs/stream` through the router over the in-memory
//! ports: the entries of the chunks a controller stored, in key order (lines that are not
//! entries and files that are not chunks passed over), `[]` before any; another project's
//! session 404; the stream's events numbered by place, resumed after `Last-Event-ID` (a
//! malformed one 400), new entries of a running session sent as they are stored, and `end`
//! once the session has ended.

use wallcrawler_contract::session_log::{
    LogRequest, SessionLog, session_log_chunk_key, session_log_prefix,
};

use super::*;

fn entry(method: &str, at: u64) -> SessionLog {
    SessionLog {
        method: method.to_owned(),
        page_id: 1,
        session_id: "CDP1".to_owned(),
        frame_id: None,
        loader_id: None,
        request: Some(LogRequest {
            params: wallcrawler_contract::session_log::raw_json(&json!({"n": at})),
            raw_body: format!(r#"{{"id":{at},"method":"{method}"}}"#),
            timestamp: Some(at),
        }),
        response: None,
        timestamp: Some(at),
    }
}

fn lines(entries: &[SessionLog]) -> String {
    entries
        .iter()
        .map(|e| serde_json::to_string(e).unwrap() + "\n")
        .collect()
}

impl Harness {
    /// Stores `body` as chunk `chunk` of `session`'s log (of proj_a).
    fn store_chunk(&self, session: &str, chunk: u32, body: &str) {
        self.objects.0.lock().unwrap().insert(
            session_log_chunk_key(PROJ_A, session, T0, chunk),
            axum::body::Bytes::from(body.to_owned()),
        );
    }

    /// `GET …/logs/stream` with `headers` (and `KEY_A`): the status and the whole body (the
    /// stream ends with the session).
    async fn stream_of(&self, id: &str, headers: &[(&str, &str)]) -> (StatusCode, String) {
        let mut req = Request::builder()
            .uri(format!("/v1/sessions/{id}/logs/stream"))
            .header("x-wc-api-key", KEY_A);
        for (n, v) in headers {
            req = req.header(*n, *v);
        }
        let resp = self
            .router
            .clone()
            .oneshot(req.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = resp.status();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }
}

/// The `(id, method)` of each entry event of an SSE body, and whether it ended with `end`.
fn sse_entries(body: &str) -> (Vec<(u64, String)>, bool) {
    let mut out = Vec::new();
    let mut ended = false;
    for block in body.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let field = |name: &str| {
            block
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{name}:")))
                .map(|v| v.trim().to_owned())
        };
        if field("event").as_deref() == Some("end") {
            ended = true;
            continue;
        }
        if let (Some(id), Some(data)) = (field("id"), field("data")) {
            let e: Value = serde_json::from_str(&data).unwrap();
            out.push((
                id.parse().unwrap(),
                e["method"].as_str().unwrap().to_owned(),
            ));
        }
    }
    (out, ended)
}

#[tokio::test]
async fn logs_answer_the_stored_entries_in_order_and_404_to_strangers() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    h.insert_session(doc("sess_log", PROJ_A, InternalStatus::Ready));

    // Nothing stored yet: Browserbase's empty list.
    assert_eq!(
        h.get("/v1/sessions/sess_log/logs").await,
        (StatusCode::OK, json!([]))
    );

    let first = [entry("Target.setAutoAttach", 1), entry("Page.navigate", 2)];
    let second = [entry("Runtime.evaluate", 3)];
    // Chunk 1 stored before chunk 0 was: key order is the order.
    h.store_chunk("sess_log", 1, &lines(&second));
    // A line cut short (a write in part) and a line of another shape are passed over.
    h.store_chunk(
        "sess_log",
        0,
        &format!("{}{{\"method\":\"Page.nav\n[1,2]\n", lines(&first)),
    );
    // Not a chunk: not read.
    let prefix = session_log_prefix(PROJ_A, "sess_log");
    h.objects.0.lock().unwrap().insert(
        format!("{prefix}.0000000000000-000002.jsonl.partial"),
        axum::body::Bytes::from(lines(&[entry("Hidden.method", 4)])),
    );

    let (status, body) = h.get("/v1/sessions/sess_log/logs").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let methods: Vec<&str> = body
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["method"].as_str().unwrap())
        .collect();
    assert_eq!(
        methods,
        ["Target.setAutoAttach", "Page.navigate", "Runtime.evaluate"]
    );
    assert_eq!(body[1], serde_json::to_value(&first[1]).unwrap());
    assert_eq!(body[1]["pageId"], 1);
    assert_eq!(body[1]["request"]["timestamp"], 2);

    // Another project's key: 404; an unknown session: 404.
    let r = h
        .call(
            Method::GET,
            "/v1/sessions/sess_log/logs",
            Some(KEY_OTHER),
            None,
        )
        .await;
    assert_error(&r, StatusCode::NOT_FOUND, &["session sess_log not found"]);
    let r = h.get("/v1/sessions/sess_nope/logs").await;
    assert_error(&r, StatusCode::NOT_FOUND, &["session sess_nope not found"]);
    let r = h
        .call(Method::GET, "/v1/sessions/sess_log/logs", None, None)
        .await;
    assert_error(&r, StatusCode::UNAUTHORIZED, &["missing API key"]);
}

#[tokio::test(start_paused = true)]
async fn the_stream_sends_every_entry_then_end_and_resumes_after_last_event_id() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    h.insert_session(doc("sess_sse", PROJ_A, InternalStatus::Ready));
    h.store_chunk(
        "sess_sse",
        0,
        &lines(&[entry("Page.navigate", 1), entry("Page.navigate", 2)]),
    );
    h.store_chunk("sess_sse", 1, &lines(&[entry("Runtime.evaluate", 3)]));
    end_session(&h.sessions, "sess_sse", T0 + 1000);

    let (status, body) = h.stream_of("sess_sse", &[]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (got, ended) = sse_entries(&body);
    assert_eq!(
        got,
        [
            (0, "Page.navigate".to_owned()),
            (1, "Page.navigate".to_owned()),
            (2, "Runtime.evaluate".to_owned())
        ]
    );
    assert!(ended, "{body}");

    // Resumed after entry 1: only entry 2.
    let (_, body) = h.stream_of("sess_sse", &[("last-event-id", "1")]).await;
    assert_eq!(
        sse_entries(&body),
        (vec![(2, "Runtime.evaluate".to_owned())], true)
    );
    // After the last: nothing but the end.
    let (_, body) = h.stream_of("sess_sse", &[("last-event-id", "2")]).await;
    assert_eq!(sse_entries(&body), (vec![], true));

    // Not a number (or past every number): 400, nothing streamed.
    for bad in ["x", "-1", "18446744073709551615", "1.5"] {
        let (status, body) = h.stream_of("sess_sse", &[("last-event-id", bad)]).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert!(body.contains("Last-Event-ID must be"), "{body}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_running_sessions_stream_sends_new_entries_as_they_are_stored() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    h.insert_session(doc("sess_run", PROJ_A, InternalStatus::Ready));
    h.store_chunk("sess_run", 0, &lines(&[entry("Page.navigate", 1)]));

    let req = Request::builder()
        .uri("/v1/sessions/sess_run/logs/stream")
        .header("x-wc-api-key", KEY_A)
        .body(Body::empty())
        .unwrap();
    let resp = h.router.clone().oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut body = resp.into_body();
    let mut text = String::new();
    // Read until `n` entries have come.
    async fn until(body: &mut Body, text: &mut String, n: usize) {
        while sse_entries(text).0.len() < n {
            let frame = body.frame().await.expect("more").unwrap();
            if let Ok(data) = frame.into_data() {
                text.push_str(std::str::from_utf8(&data).unwrap());
            }
        }
    }
    until(&mut body, &mut text, 1).await;
    assert!(!sse_entries(&text).1, "not ended: {text}");

    // The writer rewrites its current chunk with one more entry, then starts the next.
    h.store_chunk(
        "sess_run",
        0,
        &lines(&[entry("Page.navigate", 1), entry("Runtime.evaluate", 2)]),
    );
    until(&mut body, &mut text, 2).await;
    h.store_chunk("sess_run", 1, &lines(&[entry("Page.navigate", 3)]));
    end_session(&h.sessions, "sess_run", T0 + 1000);
    while !sse_entries(&text).1 {
        match body.frame().await {
            Some(f) => {
                if let Ok(data) = f.unwrap().into_data() {
                    text.push_str(std::str::from_utf8(&data).unwrap());
                }
            }
            None => break,
        }
    }
    let (got, ended) = sse_entries(&text);
    assert!(ended, "{text}");
    assert_eq!(
        got.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        [0, 1, 2],
        "each entry once, in order: {text}"
    );
    assert_eq!(got[2].1, "Page.navigate");
}
