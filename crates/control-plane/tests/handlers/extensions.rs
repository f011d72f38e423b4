//! The extensions API (`POST /v1/extensions`, `GET`/`DELETE /v1/extensions/{id}`) and a session
//! create's `extensionId`, through the router over the in-memory ports: the SDK's multipart
//! shape, project scoping, one copy per content, and every hostile archive refused by name.

use std::io::{Cursor, Write};

use wallcrawler_control_plane::stores::SlotStore;
use zip::write::SimpleFileOptions;

use super::*;

const MANIFEST: &[u8] = br#"{"manifest_version":3,"name":"Mark","version":"1.0","content_scripts":[{"matches":["<all_urls>"],"js":["mark.js"]}]}"#;
const BOUNDARY: &str = "----wallcrawler-test-boundary";

/// A zip of `(name, bytes)` entries.
fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    for (name, bytes) in entries {
        w.start_file(*name, SimpleFileOptions::default()).unwrap();
        w.write_all(bytes).unwrap();
    }
    w.finish().unwrap().into_inner()
}

/// The tiny extension: a manifest and its content script.
fn extension() -> Vec<u8> {
    zip_of(&[
        ("manifest.json", MANIFEST),
        ("mark.js", b"document.documentElement.dataset.mark = '1';"),
    ])
}

/// A multipart body with one `file` field, as the SDKs send it.
fn multipart(file_name: &str, bytes: &[u8]) -> Vec<u8> {
    let mut body = format!(
        "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{file_name}\"\r\nContent-Type: application/zip\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(bytes);
    body.extend_from_slice(format!("\r\n--{BOUNDARY}--\r\n").as_bytes());
    body
}

impl Harness {
    /// `POST /v1/extensions` with `body` as `content_type`, by `key`.
    async fn upload_raw(
        &self,
        key: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> (StatusCode, Value) {
        let req = Request::builder()
            .method(Method::POST)
            .uri("/v1/extensions")
            .header("x-wc-api-key", key)
            .header("content-type", content_type)
            .body(Body::from(body))
            .unwrap();
        let resp = self.router.clone().oneshot(req).await.unwrap();
        let status = resp.status();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    /// Uploads `zip` as `file_name` with `KEY_A`.
    async fn upload(&self, file_name: &str, zip: &[u8]) -> (StatusCode, Value) {
        let ct = format!("multipart/form-data; boundary={BOUNDARY}");
        self.upload_raw(KEY_A, &ct, multipart(file_name, zip)).await
    }

    /// `method` on `/v1/extensions/{id}` by `key`.
    async fn on_extension(&self, method: Method, id: &str, key: &str) -> (StatusCode, Value) {
        let uri = format!("/v1/extensions/{id}");
        self.call(method, &uri, Some(key), None).await
    }

    /// `POST /v1/extensions/uploads` by `KEY_A`.
    async fn start_upload(&self) -> (StatusCode, Value) {
        self.call(Method::POST, "/v1/extensions/uploads", Some(KEY_A), None)
            .await
    }

    /// `POST /v1/extensions/uploads/{id}` by `key`.
    async fn finish_upload(&self, id: &str, key: &str) -> (StatusCode, Value) {
        let uri = format!("/v1/extensions/uploads/{id}");
        self.call(Method::POST, &uri, Some(key), None).await
    }

    /// Puts `bytes` where upload `id`'s URL would (as the client's `PUT` does).
    fn stage(&self, id: &str, bytes: Vec<u8>) {
        let key = format!("extension-uploads/{PROJ_A}/{id}.zip");
        self.objects.0.lock().unwrap().insert(key, bytes.into());
    }

    /// The keys of the objects kept, in order.
    fn object_keys(&self) -> Vec<String> {
        self.objects.0.lock().unwrap().keys().cloned().collect()
    }
}

/// `r` is the 404 of an unknown (or another project's) extension `id`.
fn assert_no_such_extension(r: &(StatusCode, Value), id: &str) {
    assert_error(
        r,
        StatusCode::NOT_FOUND,
        &[&format!("extension {id} not found")],
    );
}

fn sha256_hex(b: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(b)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[tokio::test]
async fn an_upload_is_kept_once_per_content_and_each_delete_is_its_own() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let zip = extension();
    let (status, a) = h.upload("mark.zip", &zip).await;
    assert_eq!(status, StatusCode::CREATED, "{a}");
    let id = a["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("ext_"), "{a}");
    assert_eq!(
        a,
        json!({
            "id": id, "fileName": "mark.zip", "projectId": PROJ_A,
            "createdAt": iso8601_millis(T0), "updatedAt": iso8601_millis(T0),
        })
    );
    let archive = format!("extensions/{PROJ_A}/{}.zip", sha256_hex(&zip));
    assert_eq!(h.objects.0.lock().unwrap()[&archive].as_ref(), &zip[..]);

    // The same archive again: its own id, the same one copy.
    let (_, b) = h.upload("again.zip", &zip).await;
    let other = b["id"].as_str().unwrap().to_owned();
    assert_ne!(other, id);
    let zips = |h: &Harness| {
        h.object_keys()
            .into_iter()
            .filter(|k| k.ends_with(".zip"))
            .count()
    };
    assert_eq!(zips(&h), 1, "{:?}", h.object_keys());

    let got = h.on_extension(Method::GET, &id, KEY_A).await;
    assert_eq!(got, (StatusCode::OK, a.clone()));
    // Another project's key: 404, as a missing one.
    let foreign = h.on_extension(Method::GET, &id, KEY_OTHER).await;
    assert_no_such_extension(&foreign, &id);
    let foreign = h.on_extension(Method::DELETE, &id, KEY_OTHER).await;
    assert_eq!(foreign.0, StatusCode::NOT_FOUND);

    // One delete leaves the copy the other upload still uses; the last removes it.
    let gone = h.on_extension(Method::DELETE, &id, KEY_A).await;
    assert_eq!(gone, (StatusCode::NO_CONTENT, Value::Null));
    let again = h.on_extension(Method::GET, &id, KEY_A).await;
    assert_eq!(again.0, StatusCode::NOT_FOUND);
    assert!(h.object_keys().contains(&archive));
    let kept = h.on_extension(Method::GET, &other, KEY_A).await;
    assert_eq!(kept.0, StatusCode::OK);
    h.on_extension(Method::DELETE, &other, KEY_A).await;
    assert_eq!(h.object_keys(), Vec::<String>::new());
}

#[tokio::test]
async fn hostile_archives_are_refused_with_their_reasons_and_nothing_is_kept() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let m = ("manifest.json", MANIFEST);
    let mut link = zip::ZipWriter::new(Cursor::new(Vec::new()));
    link.start_file("manifest.json", SimpleFileOptions::default())
        .unwrap();
    link.write_all(MANIFEST).unwrap();
    link.add_symlink(
        "key.json",
        "/work/data/local.json",
        SimpleFileOptions::default(),
    )
    .unwrap();
    let link = link.finish().unwrap().into_inner();
    let mut bomb = zip::ZipWriter::new(Cursor::new(Vec::new()));
    bomb.start_file("manifest.json", SimpleFileOptions::default())
        .unwrap();
    bomb.write_all(MANIFEST).unwrap();
    // One mebibyte past the 64 MiB budget (more would only slow the test's own deflating: the
    // check stops at the budget whatever the entry claims; the unit tests show that).
    bomb.start_file(
        "zeros",
        SimpleFileOptions::default().compression_level(Some(1)),
    )
    .unwrap();
    let block = vec![0u8; 1 << 20];
    for _ in 0..65 {
        bomb.write_all(&block).unwrap();
    }
    let bomb = bomb.finish().unwrap().into_inner();
    assert!(bomb.len() < 1024 * 1024, "a small archive: {}", bomb.len());
    let many: Vec<String> = (0..2_001).map(|i| format!("f{i}")).collect();
    let mut many: Vec<(&str, &[u8])> = many.iter().map(|n| (n.as_str(), &b""[..])).collect();
    many.push(m);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "zip-slip",
            zip_of(&[m, ("../../evil.sh", b"x")]),
            r#"entry "../../evil.sh" leaves the extension's folder"#,
        ),
        (
            "absolute",
            zip_of(&[m, ("/etc/cron.d/x", b"x")]),
            r#"entry "/etc/cron.d/x" has an absolute path"#,
        ),
        (
            "symlink",
            link,
            r#"entry "key.json" is a symbolic link; links are not allowed"#,
        ),
        (
            "bomb",
            bomb,
            "the extension archive expands to more than 67108864 bytes",
        ),
        (
            "entries",
            zip_of(&many),
            "the extension archive has 2002 entries; at most 2000 are allowed",
        ),
        (
            "no manifest",
            zip_of(&[("mark.js", b"x")]),
            "has no manifest.json at its root",
        ),
        (
            "bad manifest",
            zip_of(&[("manifest.json", b"{\"name\":")]),
            "manifest.json does not parse as a JSON object",
        ),
        (
            "mv2",
            zip_of(&[(
                "manifest.json",
                br#"{"manifest_version":2,"name":"a","version":"1"}"#,
            )]),
            "manifest_version 2, which Chrome no longer loads",
        ),
        (
            "not a zip",
            b"PK\x03\x04 not really".to_vec(),
            "the extension archive is not a valid zip",
        ),
    ];
    for (what, zip, reason) in cases {
        let r = h.upload("x.zip", &zip).await;
        assert_eq!(r.0, StatusCode::BAD_REQUEST, "{what}: {}", r.1);
        assert_error(&r, StatusCode::BAD_REQUEST, &[reason]);
    }
    assert_eq!(h.object_keys(), Vec::<String>::new(), "nothing kept");
}

/// A manifest asking for `file://` access, wherever it asks, is a 400 naming the pattern and
/// the place, through `POST /v1/extensions` and a staged upload alike; nothing is kept.
/// `<all_urls>` and `*://*/*` are taken (Chrome denies every extension file access).
#[tokio::test]
async fn a_manifest_asking_for_file_access_is_refused_with_the_pattern_it_names() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let manifest = |field: &str, value: &str| {
        format!(r#"{{"manifest_version":3,"name":"Reader","version":"1.0","{field}":{value}}}"#)
    };
    let cases = [
        (
            "host_permissions",
            r#"["file:///*"]"#,
            "file:///*",
            "host_permissions",
        ),
        (
            "optional_host_permissions",
            r#"["https://a.test/*","file:///etc/*"]"#,
            "file:///etc/*",
            "optional_host_permissions",
        ),
        (
            "permissions",
            r#"["storage","file:///*"]"#,
            "file:///*",
            "permissions",
        ),
        (
            "optional_permissions",
            r#"["File:///home/*"]"#,
            "File:///home/*",
            "optional_permissions",
        ),
        (
            "content_scripts",
            r#"[{"matches":["file:///*"],"js":["mark.js"]}]"#,
            "file:///*",
            "content_scripts[0].matches",
        ),
    ];
    for (field, value, pattern, named) in cases {
        let zip = zip_of(&[
            ("manifest.json", manifest(field, value).as_bytes()),
            ("mark.js", b"1"),
        ]);
        let expected = format!(
            "the extension's manifest asks for file access ({pattern:?} in {named}); extensions may not read the browser's disk"
        );
        let r = h.upload("reader.zip", &zip).await;
        assert_error(&r, StatusCode::BAD_REQUEST, &[]);
        assert_eq!(r.1["message"], expected.as_str(), "{field}");
        let (_, up) = h.start_upload().await;
        let id = up["id"].as_str().unwrap().to_owned();
        h.stage(&id, zip);
        let r = h.finish_upload(&id, KEY_A).await;
        assert_error(&r, StatusCode::BAD_REQUEST, &[]);
        assert_eq!(r.1["message"], expected.as_str(), "{field}, staged");
    }
    assert_eq!(h.object_keys(), Vec::<String>::new(), "nothing kept");
    for value in [r#"["<all_urls>"]"#, r#"["*://*/*"]"#] {
        let zip = zip_of(&[(
            "manifest.json",
            manifest("host_permissions", value).as_bytes(),
        )]);
        let (status, ext) = h.upload("wide.zip", &zip).await;
        assert_eq!(status, StatusCode::CREATED, "{value}: {ext}");
    }
}

#[tokio::test]
async fn a_body_over_the_limit_is_413_and_a_body_that_is_not_the_sdks_shape_is_400() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let max = wallcrawler_control_plane::extensions::MAX_ARCHIVE_BYTES;
    // Stored (not deflated) noise so the archive itself is over the limit.
    let mut big = zip::ZipWriter::new(Cursor::new(Vec::new()));
    big.start_file("manifest.json", SimpleFileOptions::default())
        .unwrap();
    big.write_all(MANIFEST).unwrap();
    let stored = SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    big.start_file("pad", stored).unwrap();
    big.write_all(&vec![7u8; max + 1]).unwrap();
    let big = big.finish().unwrap().into_inner();
    let r = h.upload("big.zip", &big).await;
    assert_error(
        &r,
        StatusCode::PAYLOAD_TOO_LARGE,
        &["larger than 4194304 bytes"],
    );
    let r = h
        .upload_raw(KEY_A, "application/json", b"{}".to_vec())
        .await;
    assert_error(
        &r,
        StatusCode::BAD_REQUEST,
        &["multipart/form-data", "\"file\""],
    );
    let ct = format!("multipart/form-data; boundary={BOUNDARY}");
    let other_field = multipart("x.zip", &extension());
    let other_field =
        String::from_utf8_lossy(&other_field).replace("name=\"file\"", "name=\"other\"");
    let r = h.upload_raw(KEY_A, &ct, other_field.into_bytes()).await;
    assert_error(&r, StatusCode::BAD_REQUEST, &["no \"file\" field"]);
    assert_eq!(h.object_keys(), Vec::<String>::new());
}

#[tokio::test]
async fn a_create_with_an_extension_records_it_and_refuses_an_unknown_or_foreign_one() {
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let (_, a) = h.upload("mark.zip", &extension()).await;
    let id = a["id"].as_str().unwrap();
    let key = format!("extensions/{PROJ_A}/{}.zip", sha256_hex(&extension()));
    for body in [
        json!({ "extensionId": id }),
        json!({ "browserSettings": { "extensionId": id } }),
    ] {
        let (status, s) = h.create(&body.to_string()).await;
        assert_eq!(status, StatusCode::CREATED, "{s}");
        let doc = h.sessions.0.lock().unwrap()[s["id"].as_str().unwrap()].clone();
        assert_eq!(doc.extension_id.as_deref(), Some(id));
        assert_eq!(doc.extension_key.as_deref(), Some(key.as_str()));
        let spec = h.launcher.launched.lock().unwrap().last().unwrap().clone();
        assert_eq!(spec.extension.as_deref(), Some(key.as_str()));
        assert_eq!(spec.claim().extension_key.as_deref(), Some(key.as_str()));
    }
    let launched = h.launcher.launched.lock().unwrap().len();
    let r = h.create(r#"{"extensionId": "ext_nope"}"#).await;
    assert_error(&r, StatusCode::NOT_FOUND, &["extension ext_nope not found"]);
    // Another project's extension: the same 404, its project never told.
    let (_, theirs) = h
        .upload_raw(
            KEY_OTHER,
            &format!("multipart/form-data; boundary={BOUNDARY}"),
            multipart("theirs.zip", &extension()),
        )
        .await;
    let theirs = theirs["id"].as_str().unwrap();
    let r = h
        .create(&json!({ "extensionId": theirs }).to_string())
        .await;
    assert_no_such_extension(&r, theirs);
    let r = h
        .create(
            &json!({ "extensionId": id, "browserSettings": { "extensionId": theirs } }).to_string(),
        )
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, &["name different extensions"]);
    let r = h.create(r#"{"extensionId": "../../x"}"#).await;
    assert_error(
        &r,
        StatusCode::BAD_REQUEST,
        &["extension id must be 1 to 128"],
    );
    assert_eq!(
        h.launcher.launched.lock().unwrap().len(),
        launched,
        "no launch"
    );
    assert_eq!(
        h.slots.held(PROJ_A).await.unwrap(),
        2,
        "no slot taken by a refused create"
    );
}

/// An archive too large for one request comes in through a presigned `PUT` and
/// `POST /v1/extensions/uploads/{id}`: kept as a request's would be, the staged copy removed
/// whatever the check says; past the staged limit a 413 (the archive never read), a bad archive
/// its reason, an unknown or another project's upload a 404.
#[tokio::test]
async fn a_staged_upload_is_checked_and_kept_and_its_copy_removed() {
    use wallcrawler_control_plane::extensions::MAX_STAGED_ARCHIVE_BYTES;
    let h = Harness::new(LaunchBehaviour::BecomeReady);
    let (status, up) = h.start_upload().await;
    assert_eq!(status, StatusCode::CREATED, "{up}");
    let id = up["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("extup_"), "{up}");
    assert_eq!(up["maxBytes"], MAX_STAGED_ARCHIVE_BYTES);
    let url = up["uploadUrl"].as_str().unwrap();
    assert!(
        url.contains(&format!("extension-uploads/{PROJ_A}/{id}.zip")),
        "{url}"
    );
    // Nothing PUT yet: 404, for this project and for another.
    let none = h.finish_upload(&id, KEY_A).await;
    assert_error(&none, StatusCode::NOT_FOUND, &["has no archive"]);
    let zip = extension();
    h.stage(&id, zip.clone());
    assert_eq!(
        h.finish_upload(&id, KEY_OTHER).await.0,
        StatusCode::NOT_FOUND
    );
    let (status, ext) = h.finish_upload(&id, KEY_A).await;
    assert_eq!(status, StatusCode::CREATED, "{ext}");
    assert_eq!(ext["fileName"], format!("{id}.zip"));
    let archive = format!("extensions/{PROJ_A}/{}.zip", sha256_hex(&zip));
    assert!(h.object_keys().contains(&archive), "{:?}", h.object_keys());
    // Used once: the staged copy is gone.
    assert_eq!(h.finish_upload(&id, KEY_A).await.0, StatusCode::NOT_FOUND);

    // Past the limit: 413, the copy removed.
    let (_, big) = h.start_upload().await;
    let big = big["id"].as_str().unwrap().to_owned();
    h.stage(&big, vec![0; MAX_STAGED_ARCHIVE_BYTES as usize + 1]);
    let r = h.finish_upload(&big, KEY_A).await;
    assert_error(
        &r,
        StatusCode::PAYLOAD_TOO_LARGE,
        &["larger than 33554432 bytes"],
    );
    // A bad archive: its reason, the copy removed.
    let (_, bad) = h.start_upload().await;
    let bad = bad["id"].as_str().unwrap().to_owned();
    h.stage(&bad, zip_of(&[("../x/manifest.json", MANIFEST)]));
    let r = h.finish_upload(&bad, KEY_A).await;
    assert_error(
        &r,
        StatusCode::BAD_REQUEST,
        &["leaves the extension's folder"],
    );
    assert!(
        !h.object_keys()
            .iter()
            .any(|k| k.starts_with("extension-uploads/")),
        "{:?}",
        h.object_keys()
    );
    // An id that is not one: 400 before any lookup.
    let r = h
        .call(
            Method::POST,
            "/v1/extensions/uploads/..%2Fx",
            Some(KEY_A),
            None,
        )
        .await;
    assert_eq!(r.0, StatusCode::BAD_REQUEST, "{}", r.1);
}
