//! Downloads on AWS (moto): a pool task stores a finished download in the contexts bucket under
//! the session's prefix, before the item's `endedAt`; the API answers
//! `GET /v1/sessions/{id}/downloads` with a redirect to a presigned URL at the moto endpoint,
//! which returns the zip.

use super::*;

/// The zip at a presigned URL (plain HTTP/1.0 to moto on 127.0.0.1): status and body.
fn fetch(url: &str) -> (u16, Vec<u8>) {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").expect("an http URL at moto");
    let (authority, path) = rest.split_at(rest.find('/').unwrap());
    let mut s = std::net::TcpStream::connect(authority).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {authority}\r\n\r\n").unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).unwrap();
    let end = memchr::memmem::find(&answer, b"\r\n\r\n").unwrap();
    let status = std::str::from_utf8(&answer[9..12])
        .unwrap()
        .parse()
        .unwrap();
    (status, answer[end + 4..].to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_a_download_is_in_s3_before_ended_at_and_the_api_redirects_to_its_zip() {
    let pool = Pool::new(20).await;
    let mut task = pool.warm_task(TaskOptions::default()).await;
    let (id, url) = pool.served_at_once(&mut task).await;
    let out = tempfile::tempdir().unwrap();
    let elsewhere = out.path().join("elsewhere");
    let o = out.path().to_str().unwrap();
    let e = elsewhere.to_str().unwrap();
    let v = node(
        "downloads.mjs",
        &[
            "--scenario",
            "click",
            "--url",
            &url,
            "--out",
            o,
            "--elsewhere",
            e,
        ],
    )
    .await;
    assert_eq!(v["state"], "completed", "{v}");
    assert!(
        !elsewhere.exists(),
        "nothing lands where the client pointed"
    );
    let served = std::fs::read(out.path().join("export.csv")).unwrap();

    // Released right after Chrome finished it: whatever the upload's progress, the file is
    // in S3 by the time endedAt is.
    let prefix = format!("files/{}/{id}/downloads/", pool.f.project_id);
    let (f, watched) = (&pool.f, id.clone());
    let at_end = async move {
        let deadline = Instant::now() + POOL_WAIT;
        loop {
            if f.item(&watched).await.contains_key("endedAt") {
                return f.keys_under(&prefix).await;
            }
            assert!(Instant::now() < deadline, "no endedAt");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let (keys, ()) = tokio::join!(at_end, pool.released_and_ended(&mut task, &id));
    assert_eq!(keys.len(), 1, "{keys:?}\n{}", task.text());
    let name = keys[0].rsplit('/').next().unwrap().to_owned();
    assert!(
        name.starts_with("export-") && name.ends_with(".csv"),
        "{name}"
    );

    // The ended session's downloads: a redirect to a presigned GET of the zip at moto.
    let (status, headers, _) = wallcrawler_testkit::platform::raw_call_with_key(
        &pool.f.router,
        &pool.f.api_key,
        Method::GET,
        &format!("/v1/sessions/{id}/downloads"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::FOUND);
    let location = headers["location"].to_str().unwrap().to_owned();
    assert!(location.starts_with("http://127.0.0.1:"), "{location}");
    assert!(location.contains("X-Amz-Signature="), "presigned");
    let (status, zip) = tokio::task::spawn_blocking(move || fetch(&location))
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert!(zip.starts_with(b"PK\x03\x04"), "a zip");
    // Entries are stored uncompressed: the name, then exactly the bytes served.
    let at = memchr::memmem::find(&zip, name.as_bytes()).expect("the entry's name");
    assert!(
        memchr::memmem::find(&zip[at..], &served).is_some(),
        "the entry's bytes"
    );

    // Another project's key gets a 404, not the files.
    let (_, other_key) = pool.f.project_with_key(1).await;
    let (status, _) = wallcrawler_testkit::platform::call_with_key(
        &pool.f.router,
        &other_key,
        Method::GET,
        &format!("/v1/sessions/{id}/downloads"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}
