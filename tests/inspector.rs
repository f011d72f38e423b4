//! The DevTools inspector through the proxy (`local`, real Chromium): the frontend Chromium ships
//! served under `/inspector/<viewer credential>/`, its CDP socket on
//! `/inspector/<credential>/page/<id>` relayed to the page; a second headless Chromium
//! (puppeteer-core, tests/node/inspector.mjs) opens it as a person opens a page's debuggerUrl.
//! Control credentials only, the socket for the credential's own page; no credential in the log.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use crate::support::{
    Controller, KEY, LocalSession, WAIT, first_head, now, raw_http, status_of, upgrade_request,
};

fn controller() -> (Controller, LocalSession, SocketAddr) {
    Controller::local_signing(&[])
}

fn credential(s: &LocalSession, mode: &str, page: Option<&str>) -> String {
    s.viewer_credential(mode, page)
}

/// The head of the answer to `request` (a 101 keeps the socket open).
fn head_of(addr: SocketAddr, request: &[u8]) -> String {
    first_head(addr, request).1
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
    let metrics = format!("http://{metrics}/metrics");
    let r = s.node_viewer("inspector.mjs", &["--metrics", &metrics]);
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
    assert!(
        missing.ends_with("\r\n\r\n") && missing.contains("content-length: 0\r\n"),
        "{missing}"
    );
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

/// A frontend file is streamed: the client has the first half of the body while Chrome (a
/// stand-in on the debug port) still holds the second back; the answer carries Chrome's status,
/// content type and length and none of its other headers; what reached Chrome has no query and
/// no credential.
#[test]
fn a_frontend_file_is_streamed_as_chrome_sends_it() {
    use std::io::BufRead;
    use std::sync::mpsc;
    const HALF: usize = 256 * 1024;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let upstream = listener.local_addr().unwrap();
    let (release, held) = mpsc::channel::<()>();
    let (heads_tx, heads) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut head = String::new();
            let mut r = std::io::BufReader::new(stream.try_clone().unwrap());
            while !head.ends_with("\r\n\r\n") {
                if r.read_line(&mut head).unwrap_or(0) == 0 {
                    break;
                }
            }
            let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
            if path.starts_with("/json/version") {
                let body = format!(
                    r#"{{"Browser":"Fake/1.0","webSocketDebuggerUrl":"ws://{upstream}/devtools/browser/b"}}"#
                );
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                continue;
            }
            heads_tx.send(head).unwrap();
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/javascript\r\nX-Chrome-Only: 1\r\nContent-Length: {}\r\n\r\n",
                2 * HALF
            );
            let _ = stream.write_all(&vec![b'a'; HALF]);
            // The second half only once the client has the first.
            let _ = held.recv();
            let _ = stream.write_all(&vec![b'b'; HALF]);
            break;
        }
    });
    let (c, addr) = crate::support::proxy(upstream, &[]);
    let cred = wallcrawler_testkit::keys::mint_viewer(
        KEY,
        crate::support::SESSION,
        "control",
        None,
        now()..now() + 600,
    );
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    write!(
        s,
        "GET /inspector/{cred}/panels/big.js?x=1 HTTP/1.1\r\nHost: {addr}\r\n\r\n"
    )
    .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    let head_end = loop {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
        if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n")
            && got.len() >= end + 4 + HALF
        {
            break end + 4;
        }
    };
    let head = String::from_utf8_lossy(&got[..head_end]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200 ok\r\n"), "{head}");
    assert!(head.contains("content-type: text/javascript\r\n"), "{head}");
    assert!(
        head.contains(&format!("content-length: {}\r\n", 2 * HALF)),
        "{head}"
    );
    assert!(!head.contains("x-chrome-only"), "{head}");
    release.send(()).unwrap();
    s.read_to_end(&mut got).unwrap();
    let body = &got[head_end..];
    assert_eq!(body.len(), 2 * HALF);
    assert!(body[..HALF].iter().all(|&b| b == b'a') && body[HALF..].iter().all(|&b| b == b'b'));
    let forwarded = heads.recv_timeout(WAIT).unwrap();
    assert!(
        forwarded.starts_with("GET /devtools/panels/big.js HTTP/1.1\r\n"),
        "{forwarded}"
    );
    assert!(!forwarded.contains(&cred), "{forwarded}");
    let log = c.stderr.text();
    assert!(!log.contains("/inspector/"), "an inspector path in the log");
}

/// Issue 41, item 1: a one-page control credential's inspector socket reaches that page and
/// nothing else of the browser (tests/node/inspector-scope.mjs: another tab B, the cookie jar,
/// a handoff, a `chrome://` page), and a socket opened with a credential that expires in a few
/// seconds is closed then (1008), waited on by its close.
#[test]
fn a_one_page_inspector_reaches_no_other_tab_no_cookie_jar_no_handoff_and_dies_with_its_credential()
{
    let (c, s, _) = controller();
    let r = s.node_viewer("inspector-scope.mjs", &["--short-ttl", "4"]);
    check_one_page_scope(&r, 4);
    let log = c.stderr.text();
    assert!(!log.contains("/inspector/"), "an inspector path in the log");
    assert!(
        log.contains("credential_expired"),
        "the expired socket's end is logged"
    );
}

/// What inspector-scope.mjs reports for a one-page credential, `ttl` its short credential's
/// seconds.
pub(crate) fn check_one_page_scope(r: &serde_json::Value, ttl: u64) {
    assert_eq!(
        r["own"], "tab-a-is-shown",
        "the page itself is inspected: {r}"
    );
    let answers = &r["answers"];
    let refused = |what: &str, says: &str| {
        let a = &answers[what];
        let msg = a["error"]["message"].as_str();
        assert!(
            a["result"].is_null() && msg.is_some_and(|m| m.contains(says)),
            "{what} not refused ({says}): {a}"
        );
        assert_eq!(a["error"]["code"], -32000, "{what}: {a}");
    };
    for what in [
        "getTargets",
        "discover",
        "attach",
        "sendToB",
        "allCookies",
        "storageCookies",
        "browserPage",
    ] {
        refused(
            what,
            "is not allowed: this inspector's credential is for one page",
        );
    }
    refused(
        "handoff",
        "Wallcrawler.requestHandoff is not allowed on an inspector",
    );
    assert!(answers["readB"].is_null(), "{r}");
    // The other site's cookie is not among the page's.
    assert!(
        answers["cookiesOfAnotherSite"]["result"]["cookies"].is_array(),
        "{r}"
    );
    let text = answers.to_string();
    let id_b = r["idB"].as_str().unwrap();
    for leaked in [
        "secret-of-tab-b",
        "secret-cookie-of-the-jar",
        id_b,
        "viewer?t=",
    ] {
        assert!(
            !text.contains(leaked),
            "{leaked} reached the inspector: {text}"
        );
    }
    assert_eq!(answers["ownAgain"]["result"]["result"]["value"], 2, "{r}");
    let short = &r["short"];
    assert_eq!(
        short["answered"], 4,
        "the short credential's socket worked: {r}"
    );
    assert_eq!(
        (short["code"].as_u64(), short["reason"].as_str()),
        (Some(1008), Some("the credential has expired")),
        "{r}"
    );
    // `exp` is whole seconds from the minting: up to one early, a few late at most.
    let after = short["afterMs"].as_u64().unwrap();
    assert!(
        ((ttl - 1) * 1000..(ttl + 10) * 1000).contains(&after),
        "closed {after} ms after the credential was asked for, ttl {ttl} s"
    );
}
