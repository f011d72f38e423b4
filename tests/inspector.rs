//! The DevTools inspector through the proxy (`local`, real Chromium): the frontend Chromium ships
//! served under `/inspector/<viewer credential>/`, its CDP socket on
//! `/inspector/<credential>/page/<id>` relayed to the page; a second headless Chromium
//! (puppeteer-core, tests/node/inspector.mjs) opens it as a person opens a page's debuggerUrl.
//! Control credentials only, the socket for the credential's own page; no credential in the log.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use crate::support::{
    Controller, KEY, LocalSession, WAIT, bin, chromium, node, now, private_key_file, raw_http,
    status_of, upgrade_request,
};

fn controller() -> (Controller, LocalSession, SocketAddr) {
    let envs = [
        ("METRICS_ADDR", "127.0.0.1:0"),
        ("LOG_FORMAT", "json"),
        ("WALLCRAWLER_JWT_PRIVATE_KEY_FILE", private_key_file()),
    ];
    let (mut c, s) = Controller::local(&[], &envs);
    let ev = c.wait_event(|e| e["message"] == "metrics listening");
    let metrics: SocketAddr = ev["addr"].as_str().expect("addr field").parse().unwrap();
    (c, s, metrics)
}

fn credential(s: &LocalSession, mode: &str, page: Option<&str>) -> String {
    wallcrawler_testkit::keys::mint_viewer(KEY, &s.session_id(), mode, page, now()..now() + 600)
}

/// The head of the answer to `request` (read byte by byte: a 101 keeps the socket open).
fn head_of(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.write_all(request).unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut b).unwrap(), 1, "closed before an answer");
        head.push(b[0]);
    }
    String::from_utf8(head).unwrap()
}

/// The id of the session's one page, from the proxy's `/json/list`.
fn page_id(s: &LocalSession) -> String {
    let answer = raw_http(
        s.addr,
        format!(
            "GET /json/list?signingKey={} HTTP/1.1\r\nHost: {}\r\n\r\n",
            s.token, s.addr
        )
        .as_bytes(),
    );
    let body = answer.split_once("\r\n\r\n").unwrap().1;
    let list: serde_json::Value = serde_json::from_str(body).unwrap();
    list.as_array()
        .unwrap()
        .iter()
        .find(|t| t["type"] == "page")
        .and_then(|t| t["id"].as_str())
        .unwrap_or_else(|| panic!("a page in {body}"))
        .to_owned()
}

#[test]
fn a_second_chromium_opens_the_inspector_on_the_sessions_page() {
    let (c, s, metrics) = controller();
    let chrome = chromium();
    let mint = bin();
    let metrics = format!("http://{metrics}/metrics");
    let r = node(
        "inspector.mjs",
        &[
            "--url",
            &s.connect_url,
            "--session",
            &s.session_id(),
            "--mint",
            mint.to_str().unwrap(),
            "--key-file",
            private_key_file(),
            "--chrome",
            chrome.to_str().unwrap(),
            "--metrics",
            &metrics,
            "--timeout-ms",
            "60000",
        ],
    );
    assert_eq!(r["ok"], true, "{r}");
    eprintln!("inspector: {r}");
    assert_eq!(r["failed"], serde_json::json!([]), "{r}");
    assert_eq!(
        (r["before"].as_f64(), r["during"].as_f64()),
        (Some(1.0), Some(2.0)),
        "{r}"
    );
    assert!(
        r["loaded"].as_u64().unwrap() > 10,
        "the frontend's modules: {r}"
    );
    let log = c.stderr.text();
    assert!(!log.contains("/inspector/"), "an inspector path in the log");
    assert!(!log.contains(&s.token), "a token in the log");
}

#[test]
fn the_inspector_takes_a_control_credential_for_its_page_and_refuses_the_rest() {
    let (c, s, _) = controller();
    let host = s.addr.to_string();
    let id = page_id(&s);
    let get = |target: &str| {
        raw_http(
            s.addr,
            format!("GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes(),
        )
    };
    let control = credential(&s, "control", Some(&id));
    let any_page = credential(&s, "control", None);

    // Served: Chrome's own file, with Chrome's content type; no query reaches Chrome.
    let html = get(&format!("/inspector/{control}/inspector.html?x=1"));
    assert_eq!(status_of(&html), 200, "{html}");
    assert!(
        html.to_ascii_lowercase()
            .contains("content-type: text/html"),
        "{html}"
    );
    assert!(
        html.contains("src=\"./entrypoints/inspector/inspector.js\""),
        "{html}"
    );
    let js = get(&format!(
        "/inspector/{any_page}/entrypoints/inspector/inspector.js"
    ));
    assert_eq!(status_of(&js), 200, "{js}");
    assert!(
        js.to_ascii_lowercase()
            .contains("content-type: text/javascript"),
        "{js}"
    );
    // A file Chrome does not have: Chrome's own answer (an empty 200), passed on as it is.
    let missing = get(&format!("/inspector/{control}/no-such-file.js"));
    assert_eq!(status_of(&missing), 200, "{missing}");
    assert!(missing.ends_with("content-length: 0\r\n\r\n"), "{missing}");
    // The socket: the credential's page, or any page for a credential naming none.
    for cred in [&control, &any_page] {
        let head = head_of(
            s.addr,
            &upgrade_request(&format!("/inspector/{cred}/page/{id}"), &host, &[]),
        );
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    }

    let view = credential(&s, "view", Some(&id));
    let other_page = credential(&s, "control", Some("ABCDEF0123456789ABCDEF0123456789"));
    let expired = wallcrawler_testkit::keys::mint_viewer(
        KEY,
        &s.session_id(),
        "control",
        Some(&id),
        now() - 600..now() - 540,
    );
    let refusals = [
        // (why, credential, file status, socket status, body)
        ("view mode", view.as_str(), 403, 403, "forbidden\n"),
        ("another page", other_page.as_str(), 200, 403, "forbidden\n"),
        (
            "session token",
            s.token.as_str(),
            401,
            401,
            "unauthorized\n",
        ),
        ("garbage", "not-a-token", 401, 401, "unauthorized\n"),
        ("expired", expired.as_str(), 401, 401, "unauthorized\n"),
    ];
    for (why, cred, file, socket, body) in refusals {
        let answer = get(&format!("/inspector/{cred}/inspector.html"));
        assert_eq!(status_of(&answer), file, "{why}: {answer}");
        if file != 200 {
            assert!(
                answer.ends_with(&format!("\r\n\r\n{body}")),
                "{why}: {answer}"
            );
        }
        let answer = raw_http(
            s.addr,
            &upgrade_request(&format!("/inspector/{cred}/page/{id}"), &host, &[]),
        );
        assert_eq!(status_of(&answer), socket, "{why} (socket): {answer}");
        assert!(
            answer.ends_with(&format!("\r\n\r\n{body}")),
            "{why}: {answer}"
        );
    }
    // Paths outside the frontend, and other methods, with a good credential.
    for (target, status) in [
        (format!("/inspector/{control}/../json/version"), 404),
        (format!("/inspector/{control}/a/../../json/list"), 404),
        (format!("/inspector/{control}/%2e%2e/json/list"), 404),
        (format!("/inspector/{control}/page/{id}"), 404),
        (format!("/inspector/{control}"), 404),
    ] {
        let answer = get(&target);
        assert_eq!(status_of(&answer), status, "{answer}");
        assert!(answer.ends_with("\r\n\r\nnot found\n"), "{answer}");
    }
    let post = raw_http(
        s.addr,
        format!("POST /inspector/{control}/inspector.html HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\n\r\n").as_bytes(),
    );
    assert_eq!(status_of(&post), 405, "{post}");

    let log = c.stderr.text();
    assert!(!log.contains("/inspector/"), "an inspector path in the log");
    assert!(log.contains("DEBUG"), "the run logged at debug level");
    for secret in [&control, &any_page, &view, &other_page, &expired, &s.token] {
        for part in secret.split('.').filter(|p| p.len() >= 16) {
            assert!(!log.contains(part), "credential text in the log");
        }
    }
}
