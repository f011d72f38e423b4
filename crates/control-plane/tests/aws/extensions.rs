//! The extensions API on moto: the archive lands in the contexts bucket under
//! `extensions/<projectId>/<sha256>.zip` with its record, a session created with the extension
//! carries its id and key in its DynamoDB item, and a delete removes archive and record.

use std::io::{Cursor, Write};

use axum::body::Body;
use axum::http::Request;
use http_body_util::BodyExt;
use sha2::Digest;
use tower::ServiceExt;

use super::*;

pub(super) const BOUNDARY: &str = "----wallcrawler-moto-boundary";

/// A multipart body with the one `file` field, as the SDKs send it.
pub(super) fn multipart(file_name: &str, zip: &[u8]) -> Vec<u8> {
    let mut body = format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{file_name}\"\r\nContent-Type: application/zip\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(zip);
    body.extend_from_slice(format!("\r\n--{BOUNDARY}--\r\n").as_bytes());
    body
}

/// `POST path` of a multipart body with `bytes` as its `file` named `name`: the status and
/// JSON answer.
pub(super) async fn post_file(
    f: &Fixture,
    path: &str,
    name: &str,
    bytes: &[u8],
) -> (StatusCode, Value) {
    let req = Request::post(path)
        .header("x-wc-api-key", &f.api_key)
        .header(
            "content-type",
            format!("multipart/form-data; boundary={BOUNDARY}"),
        )
        .body(Body::from(multipart(name, bytes)))
        .unwrap();
    let resp = f.router.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&body).unwrap())
}

/// Where the API keeps `zip` for the fixture's project.
fn archive_key(f: &Fixture, zip: &[u8]) -> String {
    let sha: String = sha2::Sha256::digest(zip)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("extensions/{}/{sha}.zip", f.project_id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_lands_in_the_bucket_under_its_project_and_a_delete_removes_it() {
    let f = Fixture::new(1).await;
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default();
    w.start_file("manifest.json", opts).unwrap();
    w.write_all(br#"{"manifest_version":3,"name":"Mark","version":"1.0"}"#)
        .unwrap();
    let zip = w.finish().unwrap().into_inner();
    let (status, ext) = post_file(&f, "/v1/extensions", "mark.zip", &zip).await;
    assert_eq!(status, StatusCode::CREATED, "{ext}");
    let id = ext["id"].as_str().unwrap().to_owned();

    let key = archive_key(&f, &zip);
    assert_eq!(
        object(&f, &key).await.as_deref(),
        Some(&zip[..]),
        "the archive is in the bucket at extensions/<projectId>/<sha256>.zip"
    );
    let prefix = format!("extensions/{}/", f.project_id);
    let sha = &key[prefix.len()..key.len() - ".zip".len()];
    assert_eq!(
        f.keys_under(&prefix).await,
        [
            key.clone(),
            format!("{prefix}records/{id}.json"),
            format!("{prefix}refs/{sha}/{id}"),
        ]
    );
    let (status, got) = f
        .call(Method::GET, &format!("/v1/extensions/{id}"), None)
        .await;
    assert_eq!((status, &got), (StatusCode::OK, &ext));

    let (status, v) = f.create(json!({ "extensionId": id })).await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
    let item = f.item(v["id"].as_str().unwrap()).await;
    assert_eq!(text(&item, "extensionId").as_deref(), Some(id.as_str()));
    assert_eq!(text(&item, "extensionKey").as_deref(), Some(key.as_str()));
    let (status, unknown) = f
        .create(json!({ "extensionId": "ext_0123456789abcdef" }))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{unknown}");

    let (status, _) = f
        .call(Method::DELETE, &format!("/v1/extensions/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(f.keys_under(&prefix).await, Vec::<String>::new());
    let (status, _) = f
        .call(Method::GET, &format!("/v1/extensions/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// Through the API function's binary, as API Gateway's REST API delivers a `multipart/form-data`
/// body it treats as binary (`BinaryMediaTypes`): base64 in the event, the zip's bytes intact in
/// the bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_function_takes_an_extension_as_api_gateway_delivers_it() {
    use base64::Engine;
    let f = Fixture::new(1).await;
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    w.start_file("manifest.json", zip::write::SimpleFileOptions::default())
        .unwrap();
    w.write_all(br#"{"manifest_version":3,"name":"Binary","version":"2"}"#)
        .unwrap();
    w.start_file("bytes.bin", zip::write::SimpleFileOptions::default())
        .unwrap();
    w.write_all(&(0..=255u8).collect::<Vec<_>>()).unwrap();
    let zip = w.finish().unwrap().into_inner();
    let body = multipart("b.zip", &zip);
    let ct = format!("multipart/form-data; boundary={BOUNDARY}");
    let mut event = rest_event("POST", "/v1/extensions", &f.api_key, None);
    event["headers"]["content-type"] = json!(ct);
    event["multiValueHeaders"]["content-type"] = json!([ct]);
    event["body"] = json!(base64::engine::general_purpose::STANDARD.encode(&body));
    event["isBase64Encoded"] = json!(true);
    let (posted, _) = run_lambda(
        env!("CARGO_BIN_EXE_wallcrawler-api-lambda"),
        &f.vars,
        vec![event],
    )
    .await;
    let (status, ext) = proxy_answer(&posted[0]);
    assert_eq!(status, 201, "{ext}");
    let key = archive_key(&f, &zip);
    assert_eq!(object(&f, &key).await.as_deref(), Some(&zip[..]));
}

/// An archive larger than one request takes (6 MiB, stored: incompressible bytes) comes in
/// through the presigned `PUT` to the bucket and `POST /v1/extensions/uploads/{id}`: kept under
/// the project's prefix as an upload through the API is, the staged copy gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_extension_comes_in_through_a_presigned_upload() {
    use wallcrawler_control_plane::extensions::MAX_ARCHIVE_BYTES;
    let f = Fixture::new(1).await;
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let stored =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    w.start_file("manifest.json", stored).unwrap();
    w.write_all(br#"{"manifest_version":3,"name":"Large","version":"1"}"#)
        .unwrap();
    w.start_file("model.bin", stored).unwrap();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let noise: Vec<u8> = (0..6 * 1024 * 1024)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    w.write_all(&noise).unwrap();
    let zip = w.finish().unwrap().into_inner();
    assert!(
        zip.len() > MAX_ARCHIVE_BYTES,
        "larger than one request takes"
    );

    let (status, up) = f.call(Method::POST, "/v1/extensions/uploads", None).await;
    assert_eq!(status, StatusCode::CREATED, "{up}");
    let id = up["id"].as_str().unwrap().to_owned();
    let url = up["uploadUrl"].as_str().unwrap();
    assert!(url.contains("X-Amz-Signature="), "a presigned URL: {url}");
    let (status, answer) = http("PUT", url, &[], zip.clone()).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let (status, ext) = f
        .call(Method::POST, &format!("/v1/extensions/uploads/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::CREATED, "{ext}");
    let key = archive_key(&f, &zip);
    assert_eq!(object(&f, &key).await.as_deref(), Some(&zip[..]));
    assert_eq!(
        f.keys_under("extension-uploads/").await,
        Vec::<String>::new(),
        "the staged copy is removed"
    );
    let (status, v) = f
        .create(json!({ "extensionId": ext["id"].as_str().unwrap() }))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
}
