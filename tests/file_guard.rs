//! A client reaches no file it was not given: real Chromium behind `local`, raw CDP and
//! Puppeteer through the proxy (tests/node/file-guard.mjs).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::Value;

use crate::support::{Controller, node, raw_http, status_of, user_data_dir_of};

/// A tiny MV3 extension whose content script marks every page.
fn write_extension(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("manifest.json"),
        r#"{"manifest_version":3,"name":"mark","version":"1.0","content_scripts":[{"matches":["<all_urls>"],"js":["mark.js"]}]}"#,
    )
    .unwrap();
    std::fs::write(
        dir.join("mark.js"),
        "document.documentElement.dataset.marked = '1';",
    )
    .unwrap();
}

fn assert_refused(answer: &Value, what: &str) {
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        answer["error"]["code"] == -32000 && message.contains("not allowed"),
        "{what}: expected the proxy's refusal, got {answer}"
    );
}

#[test]
fn a_client_reaches_no_file_it_was_not_given() {
    let scratch = tempfile::tempdir().unwrap();
    // Stands in for the local platform's data directory and its 0600 `local.json`.
    let data_dir = scratch.path().join("data");
    std::fs::create_dir_all(&data_dir).unwrap();
    let secret = data_dir.join("local.json");
    std::fs::write(&secret, br#"{"apiKey":"not-for-pages"}"#).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let extension = scratch.path().join("ext");
    write_extension(&extension);

    let (mut c, s) = Controller::local(&[], &[]);
    let profile = user_data_dir_of(c.chrome_pid());
    let uploads = Path::new(&format!("{profile}-files")).join("uploads");
    // (Made here too, so that without the guard the test fails on its assertions, not here.)
    std::fs::create_dir_all(&uploads).unwrap();
    let inside = uploads.join("hello.bin");
    let bytes: Vec<u8> = (0..=255u8).cycle().take(3000).collect();
    std::fs::write(&inside, &bytes).unwrap();
    let escape = uploads.join("escape");
    std::os::unix::fs::symlink(&secret, &escape).unwrap();
    let environ = format!("/proc/{}/environ", c.child.id());
    // Enough `..` to reach the root from the uploads directory, then the secret's own path.
    let dotdot = format!(
        "{}/{}{}",
        uploads.display(),
        "../".repeat(12),
        secret.display()
    );
    let outside = [
        secret.to_str().unwrap(),
        environ.as_str(),
        escape.to_str().unwrap(),
        dotdot.as_str(),
    ]
    .join(",");

    let r = node(
        "file-guard.mjs",
        &[
            "--url",
            &s.connect_url,
            "--inside",
            inside.to_str().unwrap(),
            "--outside",
            &outside,
            "--extension",
            extension.to_str().unwrap(),
            "--data-dir",
            data_dir.to_str().unwrap(),
            "--timeout-ms",
            "60000",
        ],
    );
    assert_eq!(r["ok"], true, "{r}");
    for form in ["plain", "escaped", "fragmented", "padded"] {
        assert_refused(
            &r["extensions"][form],
            &format!("Extensions.loadUnpacked ({form})"),
        );
    }
    assert!(
        r["version"]["result"]["product"].is_string(),
        "the connection works after the refusals: {}",
        r["version"]
    );
    assert_eq!(r["stillOpen"], true);
    for path in outside.split(',') {
        let f = &r["files"][path];
        assert_refused(&f["answer"], &format!("DOM.setFileInputFiles {path}"));
        assert_eq!(
            f["read"],
            serde_json::json!([]),
            "the page got nothing of {path}"
        );
    }
    let f = &r["files"][inside.to_str().unwrap()];
    assert!(f["answer"]["error"].is_null(), "{f}");
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(&bytes);
    assert_eq!(
        f["read"][0]["base64"],
        b64.as_str(),
        "the page reads the upload's exact bytes"
    );
    assert_refused(&r["navigate"], "Page.navigate to file:");
    assert_refused(&r["createFile"], "Target.createTarget to FILE:");
    assert_refused(&r["expose"], "Target.exposeDevToolsProtocol");
    assert_eq!(
        r["exposed"], "undefined",
        "the page has no DevTools channel"
    );
    let p = &r["puppeteer"];
    assert!(p[inside.to_str().unwrap()]["error"].is_null(), "{p}");
    assert_eq!(
        p[inside.to_str().unwrap()]["read"][0]["base64"],
        b64.as_str()
    );
    let refused = &p[secret.to_str().unwrap()];
    assert!(
        refused["error"]
            .as_str()
            .unwrap_or_default()
            .contains("not allowed"),
        "{p}"
    );
    assert_eq!(refused["read"], serde_json::json!([]));
    c.signal(nix::sys::signal::Signal::SIGTERM);
    c.wait_exit();
}

/// `/json/new` opens a target at any URL Chrome is given: a local file URL is refused (403)
/// and Chrome is never asked; an http URL still opens.
#[test]
fn json_new_with_a_file_url_is_refused() {
    let (mut c, s) = Controller::local(&[], &[]);
    let ask = |query: &str| {
        let req = format!(
            "PUT /json/new?{query} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\r\n",
            s.addr, s.token
        );
        raw_http(s.addr, req.as_bytes())
    };
    for query in [
        "file:///etc/passwd",
        "%66ile:///etc/passwd",
        "view-source:file:///etc/",
    ] {
        let answer = ask(query);
        assert_eq!(status_of(&answer), 403, "{query}: {answer}");
    }
    let answer = ask("about:blank");
    assert_eq!(status_of(&answer), 200, "{answer}");
    let list = raw_http(
        s.addr,
        format!(
            "GET /json/list HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\r\n",
            s.addr, s.token
        )
        .as_bytes(),
    );
    assert!(!list.contains("file://"), "{list}");
    c.signal(nix::sys::signal::Signal::SIGTERM);
    c.wait_exit();
}
