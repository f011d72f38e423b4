//! A session's recording on moto: the playlist's segment URLs are presigned S3 GETs that fetch
//! the segments a controller stored; the API's Lambda builds no MP4 (no ffmpeg there), so a
//! download is PENDING until the controller has stored the page's MP4 (at its recording's
//! end), then COMPLETED with a presigned GET of it, and FAILED for an ended session whose
//! controller stored none; another project's session is a 404.

use wallcrawler_contract::recording::{index_key, page_prefix};
use wallcrawler_testkit::platform::raw_call_with_key;

use super::*;

/// A READY session of `project`.
async fn session(f: &Fixture, project: &str) -> String {
    session_as(f, project, InternalStatus::Ready).await
}

/// A session of `project` in `status` (a terminal one ended).
async fn session_as(f: &Fixture, project: &str, status: InternalStatus) -> String {
    let (sessions, _, _) = f.stores();
    let now = wallcrawler_contract::time::now_iso8601();
    let mut doc = SessionDoc {
        session_id: format!("sess_{}", uuid::Uuid::new_v4().simple()),
        project_id: project.to_owned(),
        created_at: now.clone(),
        expires_at: wallcrawler_contract::time::unix_millis() / 1000 + 3600,
        ended_at: matches!(status, InternalStatus::Stopped).then_some(now),
        ..Default::default()
    };
    doc.set_status(status);
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

    // No ffmpeg in the API's Lambda: PENDING while the session runs (its controller joins the
    // MP4 when the page's recording ends)...
    let dl = format!("/v1/sessions/{id}/recording/downloads");
    let (status, v) = f.call(Method::POST, &dl, None).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["downloads"][0]["status"], "PENDING", "{v}");
    // ... COMPLETED once it has, with a presigned GET of the MP4.
    let mut built = index.clone();
    built["mp4"] = json!(true);
    put(
        &f,
        &index_key(&f.project_id, &id, "0"),
        built.to_string().as_bytes(),
    )
    .await;
    let mp4 = format!("{}recording.mp4", page_prefix(&f.project_id, &id, "0"));
    put(&f, &mp4, b"MP4-BYTES").await;
    let (status, v) = f.call(Method::GET, &dl, None).await;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["downloads"][0]["status"], "COMPLETED", "{v}");
    let url = v["downloads"][0]["downloadUrl"].as_str().unwrap();
    assert!(url.contains("X-Amz-Signature="), "a presigned URL: {url}");
    let (status, got) = http("GET", url, &[], Vec::new()).await;
    assert_eq!(status, StatusCode::OK, "{got}");
    assert_eq!(got, "MP4-BYTES");

    // An ended session whose controller stored no MP4 (it died first): FAILED, saying why.
    let ended = session_as(&f, &f.project_id, InternalStatus::Stopped).await;
    put(
        &f,
        &index_key(&f.project_id, &ended, "0"),
        index.to_string().as_bytes(),
    )
    .await;
    let (status, v) = f
        .call(
            Method::POST,
            &format!("/v1/sessions/{ended}/recording/downloads"),
            None,
        )
        .await;
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
