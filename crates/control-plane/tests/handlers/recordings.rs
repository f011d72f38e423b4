//! A session's recording through the router over the in-memory ports: `…/replays` lists the
//! page indexes a controller stored, in page order (an index naming a foreign object, or a
//! file that is not an index, passed over); `…/replays/{pageId}` is the page's playlist with a
//! signed URL per segment (a page id that is not one 404); `…/recording/downloads` reports
//! each page's state with a signed URL once built, and leaves a built page alone;
//! `…/recording` is a 410; another project's session 404 on every route.

use wallcrawler_contract::recording::{index_key, page_prefix};

use super::*;

impl Harness {
    /// Stores `body` at `key` in the contexts bucket.
    fn put_object(&self, key: &str, body: String) {
        self.objects
            .0
            .lock()
            .unwrap()
            .insert(key.to_owned(), axum::body::Bytes::from(body));
    }

    /// `GET uri` with `KEY_A`: the status, the content type and the body as text.
    async fn text_of(&self, uri: &str) -> (StatusCode, String, String) {
        let req = Request::builder()
            .uri(uri)
            .header("x-wc-api-key", KEY_A)
            .body(Body::empty())
            .unwrap();
        let resp = self.router.clone().oneshot(req).await.unwrap();
        let status = resp.status();
        let kind = resp
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, kind, String::from_utf8(body.to_vec()).unwrap())
    }
}

fn index(page: &str, segment: &str) -> String {
    json!({"pageId": page, "url": format!("http://127.0.0.1/{page}"), "startTimeMs": 1000,
           "endTimeMs": 5000, "ended": true,
           "segments": [{"name": "seg-00000.ts", "duration": 2.0},
                        {"name": segment, "duration": 2.0}]})
    .to_string()
}

#[tokio::test]
async fn replays_list_the_stored_pages_and_playlists_sign_each_segment() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    h.insert_session(doc("sess_rec", PROJ_A, InternalStatus::Ready));
    for page in ["0", "2", "10"] {
        h.put_object(
            &index_key(PROJ_A, "sess_rec", page),
            index(page, "seg-00001.ts"),
        );
    }
    // An index naming another session's object, and files that are not indexes.
    h.put_object(
        &index_key(PROJ_A, "sess_rec", "3"),
        index("3", "../../sess_x/recordings/0/seg-00000.ts"),
    );
    h.put_object(
        &index_key(PROJ_A, "sess_rec", "4"),
        index("5", "seg-00001.ts"),
    );
    h.put_object(
        &format!("{}notes.json", page_prefix(PROJ_A, "sess_rec", "0")),
        "{}".into(),
    );

    let (status, body) = h.get("/v1/sessions/sess_rec/replays").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["pageCount"], 3, "{body}");
    let ids: Vec<&str> = body["pages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pageId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["0", "2", "10"]);
    assert_eq!(
        body["pages"][1],
        json!({"pageId": "2", "startTimeMs": 1000, "endTimeMs": 5000, "url": "http://127.0.0.1/2"})
    );

    let (status, kind, text) = h.text_of("/v1/sessions/sess_rec/replays/2").await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(kind, "application/vnd.apple.mpegurl");
    let prefix = page_prefix(PROJ_A, "sess_rec", "2");
    assert_eq!(
        text,
        format!(
            "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:2\n#EXT-X-MEDIA-SEQUENCE:0\n\
             #EXT-X-PLAYLIST-TYPE:VOD\n\
             #EXTINF:2.000,\nhttps://archives.test/get/{prefix}seg-00000.ts?expires=21600\n\
             #EXTINF:2.000,\nhttps://archives.test/get/{prefix}seg-00001.ts?expires=21600\n\
             #EXT-X-ENDLIST\n"
        )
    );
    // Not a page: 404 (and the malformed index is no page either).
    for page in ["3", "4", "7", "02", "..%2F0", "%2E%2E", "0%2F..%2F..%2Fx"] {
        let (status, _, text) = h
            .text_of(&format!("/v1/sessions/sess_rec/replays/{page}"))
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{page}: {text}");
    }
}

#[tokio::test]
async fn downloads_report_each_page_and_strangers_get_404() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    h.insert_session(doc("sess_dl", PROJ_A, InternalStatus::Ready));
    for page in ["0", "1"] {
        h.put_object(
            &index_key(PROJ_A, "sess_dl", page),
            index(page, "seg-00001.ts"),
        );
    }
    let (status, body) = h.get("/v1/sessions/sess_dl/recording/downloads").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        json!({"downloads": [{"pageId": "0", "status": "NOT_REQUESTED"},
                             {"pageId": "1", "status": "NOT_REQUESTED"}]})
    );
    // Page 0 built: its URL signed; a POST leaves it as it is.
    let state = json!({"status": "COMPLETED", "atMs": 1, "completedAt": "2027-01-15T08:00:00Z"});
    let dir = page_prefix(PROJ_A, "sess_dl", "0");
    h.put_object(&format!("{dir}download.json"), state.to_string());
    h.put_object(&format!("{dir}recording.mp4"), "mp4".into());
    let (status, body) = h.get("/v1/sessions/sess_dl/recording/downloads").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["downloads"][0],
        json!({"pageId": "0", "status": "COMPLETED", "completedAt": "2027-01-15T08:00:00Z",
               "downloadUrl": format!("https://archives.test/get/{dir}recording.mp4?expires=3600")})
    );
    let before = h
        .objects
        .0
        .lock()
        .unwrap()
        .get(&format!("{dir}download.json"))
        .cloned();

    // rrweb: 410 naming the replays.
    let (status, body) = h.get("/v1/sessions/sess_dl/recording").await;
    assert_eq!(status, StatusCode::GONE, "{body}");
    assert_eq!(body["replays"], "/v1/sessions/sess_dl/replays");

    // Another project's key: 404 on every route, nothing written.
    for (method, uri) in [
        (Method::GET, "/v1/sessions/sess_dl/replays"),
        (Method::GET, "/v1/sessions/sess_dl/replays/0"),
        (Method::GET, "/v1/sessions/sess_dl/recording"),
        (Method::GET, "/v1/sessions/sess_dl/recording/downloads"),
        (Method::POST, "/v1/sessions/sess_dl/recording/downloads"),
    ] {
        let r = h.call(method.clone(), uri, Some(KEY_OTHER), None).await;
        assert_error(&r, StatusCode::NOT_FOUND, &["session sess_dl not found"]);
    }
    let after = h
        .objects
        .0
        .lock()
        .unwrap()
        .get(&format!("{dir}download.json"))
        .cloned();
    assert_eq!(before, after);
    assert!(!h.objects.0.lock().unwrap().contains_key(&format!(
        "{}download.json",
        page_prefix(PROJ_A, "sess_dl", "1")
    )));
}
