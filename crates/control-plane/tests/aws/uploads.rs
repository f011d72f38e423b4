//! Session uploads on moto: the file the API is given lands in the contexts bucket under the
//! session's prefix (`files/<projectId>/<sessionId>/uploads/`), and the answer names its path
//! in the item's `uploadsDir`; another project's session is a 404 and nothing is written.

use wallcrawler_contract::storage::{session_files_prefix, upload_key};

use super::*;

/// `POST /v1/sessions/{id}/uploads` of one `file` named `name`: the status and JSON answer.
async fn upload(f: &Fixture, id: &str, name: &str, bytes: &[u8]) -> (StatusCode, Value) {
    super::extensions::post_file(f, &format!("/v1/sessions/{id}/uploads"), name, bytes).await
}

/// A READY session of `project` whose controller announced `/srv/up` as its uploads directory.
async fn ready_session(f: &Fixture, project: &str) -> String {
    let (sessions, _, _) = f.stores();
    let mut doc = SessionDoc {
        session_id: format!("sess_{}", uuid::Uuid::new_v4().simple()),
        project_id: project.to_owned(),
        created_at: wallcrawler_contract::time::now_iso8601(),
        expires_at: wallcrawler_contract::time::unix_millis() / 1000 + 3600,
        uploads_dir: Some("/srv/up".into()),
        ..Default::default()
    };
    doc.set_status(InternalStatus::Ready);
    sessions.create(doc.clone()).await.unwrap();
    doc.session_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_lands_under_the_sessions_prefix_and_the_answer_names_its_path() {
    let f = Fixture::new(1).await;
    let id = ready_session(&f, &f.project_id).await;
    let bytes = b"a,b\n1,2\n\x00\xff".to_vec();
    let (status, answer) = upload(&f, &id, "table 1.csv", &bytes).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["path"], "/srv/up/table 1.csv", "{answer}");
    assert_eq!(answer["message"], "File uploaded successfully", "{answer}");
    let key = upload_key(&f.project_id, &id, "table 1.csv");
    assert!(key.starts_with(&session_files_prefix(&f.project_id, &id)));
    assert_eq!(object(&f, &key).await, Some(bytes));

    let foreign = ready_session(&f, "proj_someone_else").await;
    let (status, answer) = upload(&f, &foreign, "x.txt", b"x").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
    let key = upload_key("proj_someone_else", &foreign, "x.txt");
    assert_eq!(object(&f, &key).await, None);
}

/// A file over the one-request limit: `POST …/uploads/url` hands out a presigned `PUT` to the
/// same key under the session's prefix, and the answer's `path` is where the browser reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_upload_goes_to_the_bucket_through_its_presigned_url() {
    let f = Fixture::new(1).await;
    let id = ready_session(&f, &f.project_id).await;
    let uri = format!("/v1/sessions/{id}/uploads/url");
    let (status, v) = f
        .call(Method::POST, &uri, Some(json!({ "fileName": "big.bin" })))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
    assert_eq!(v["path"], "/srv/up/big.bin", "{v}");
    let url = v["uploadUrl"].as_str().unwrap();
    assert!(url.contains("X-Amz-Signature="), "a presigned URL: {url}");
    let big: Vec<u8> = (0..5 * 1024 * 1024u32).map(|i| (i % 253) as u8).collect();
    let (status, answer) = http("PUT", url, &[], big.clone()).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let key = upload_key(&f.project_id, &id, "big.bin");
    assert_eq!(object(&f, &key).await.as_deref(), Some(&big[..]));
    let (status, v) = f
        .call(
            Method::POST,
            &uri,
            Some(json!({ "fileName": "/etc/passwd" })),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{v}");
}
