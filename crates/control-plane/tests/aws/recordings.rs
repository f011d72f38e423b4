//! A session's recording on moto: the playlist's segment URLs are presigned S3 GETs that fetch
//! the segments a controller stored; the API's Lambda builds no MP4 (no ffmpeg there), so a
//! download request answers FAILED; another project's session is a 404.

use wallcrawler_contract::recording::{index_key, page_prefix};
use wallcrawler_testkit::platform::raw_call_with_key;

use super::*;

/// A READY session of `project`.
async fn session(f: &Fixture, project: &str) -> String {
    let (sessions, _, _) = f.stores();
    let mut doc = SessionDoc {
        session_id: format!("sess_{}", uuid::Uuid::new_v4().simple()),
        project_id: project.to_owned(),
        created_at: wallcrawler_contract::time::now_iso8601(),
        expires_at: wallcrawler_contract::time::unix_millis() / 1000 + 3600,
        ..Default::default()
    };
    doc.set_status(InternalStatus::Ready);
    sessions.create(doc.clone()).await.unwrap();
    doc.session_id
}

async fn put(f: &Fixture, key: &str, body: &[u8]) {
    s3(&f.sdk)
        .put_object()
        .bucket(&f.cfg.contexts_bucket)
        .key(key)
        .body(body.to_vec().into())
        .send()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_playlist_s_segments_are_presigned_gets_of_the_bucket() {
    let f = Fixture::new(1).await;
    let id = session(&f, &f.project_id).await;
    let index = json!({"pageId": "0", "url": "http://127.0.0.1/", "startTimeMs": 1,
        "endTimeMs": 2001, "ended": true,
        "segments": [{"name": "seg-00000.ts", "duration": 2.0}]});
    put(
        &f,
        &index_key(&f.project_id, &id, "0"),
        index.to_string().as_bytes(),
    )
    .await;
    let seg = format!("{}seg-00000.ts", page_prefix(&f.project_id, &id, "0"));
    put(&f, &seg, b"TS-SEGMENT-BYTES").await;

    let (status, v) = f
        .call(Method::GET, &format!("/v1/sessions/{id}/replays"), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["pageCount"], 1, "{v}");
    let path = format!("/v1/sessions/{id}/replays/0");
    let (status, headers, body) =
        raw_call_with_key(&f.router, &f.api_key, Method::GET, &path, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["content-type"], "application/vnd.apple.mpegurl");
    let text = String::from_utf8(body.to_vec()).unwrap();
    let url = text.lines().find(|l| !l.starts_with('#')).unwrap();
    assert!(url.contains("X-Amz-Signature="), "a presigned URL: {url}");
    let (status, got) = http("GET", url, &[], Vec::new()).await;
    assert_eq!(status, StatusCode::OK, "{got}");
    assert_eq!(got, "TS-SEGMENT-BYTES");

    // No ffmpeg in the API's Lambda: the download request answers FAILED.
    let dl = format!("/v1/sessions/{id}/recording/downloads");
    let (status, v) = f.call(Method::POST, &dl, None).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["downloads"][0]["status"], "FAILED", "{v}");

    let foreign = session(&f, "proj_someone_else").await;
    let (status, v) = f
        .call(
            Method::GET,
            &format!("/v1/sessions/{foreign}/replays"),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{v}");
}
