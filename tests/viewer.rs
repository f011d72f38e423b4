//! The live viewer on the real controller (`local`, real Chromium) watched by a second headless
//! Chromium through puppeteer-core (tests/node/viewer.mjs): what it shows, whose input reaches
//! the page, one screencast for many viewers, and the page's refusals and headers; and that
//! Chromium ships the DevTools frontend the proxy serves under `/inspector/<credential>/` alone.
//!
//! The credentials are live-view credentials (audience `wallcrawler-viewer`) signed with the
//! key `local` signs with: the one it printed (`liveViewUrl`), or minted here and by
//! `wallcrawler-controller token --viewer` (from viewer.mjs, which knows the page ids).

use std::net::SocketAddr;

use crate::support::{
    Controller, KEY, LocalSession, ViewerStart, chromium, now, raw_http, status_of,
    upgrade_request, viewer_read_until,
};

/// A local controller signing with [`KEY`], its metrics listener's address.
fn controller(envs: &[(&str, &str)]) -> (Controller, LocalSession, SocketAddr) {
    Controller::local_signing(envs)
}

/// A viewer credential for `s`'s session in `mode`, for one `page` when given.
fn credential(s: &LocalSession, mode: &str, page: Option<&str>) -> String {
    s.viewer_credential(mode, page)
}

fn scenario(s: &LocalSession, name: &str, metrics: SocketAddr) -> serde_json::Value {
    let metrics = format!("http://{metrics}/metrics");
    s.node_viewer("viewer.mjs", &["--scenario", name, "--metrics", &metrics])
}

#[test]
fn the_viewer_shows_the_page_and_follows_a_navigation() {
    let (_c, s, metrics) = controller(&[]);
    let r = scenario(&s, "show", metrics);
    // The figure the issue asks for (a navigation followed within a second), with room for a
    // debug build on a loaded machine; the measured value is printed.
    let follow = r["followMs"].as_u64().unwrap();
    eprintln!("viewer followed a navigation in {follow} ms");
    assert!(follow < 3000, "{r}");
}

#[test]
fn control_mode_click_and_typing_reach_the_page() {
    let (_c, s, metrics) = controller(&[]);
    let r = scenario(&s, "control", metrics);
    assert_eq!(r["value"], "abc", "{r}");
    assert_eq!(r["clicks"][0], serde_json::json!([100, 50]), "{r}");
}

#[test]
fn view_mode_input_reaches_nothing() {
    let (_c, s, metrics) = controller(&[]);
    let r = scenario(&s, "view", metrics);
    // Only the control viewer's click and "z", queued after the view-only viewer's input.
    assert_eq!(r["value"], "z", "{r}");
    assert_eq!(r["clicks"], 1, "{r}");
}

#[test]
fn the_tab_strip_lists_the_pages_and_switches_between_them() {
    let (_c, s, metrics) = controller(&[]);
    let r = scenario(&s, "tabs", metrics);
    let titles = r["titles"].as_array().unwrap();
    assert!(
        titles.contains(&"red".into()) && titles.contains(&"green".into()),
        "{r}"
    );
    assert_eq!(r["shown"].as_array().unwrap().len(), 2, "{r}");
}

#[test]
fn five_viewers_of_a_page_share_one_screencast() {
    let (_c, s, metrics) = controller(&[]);
    let r = scenario(&s, "five", metrics);
    assert_eq!(r["frames"].as_array().unwrap().len(), 5, "{r}");
    assert_eq!(r["screencastsStarted"], 1, "{r}");
    assert!(
        r["frames"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f.as_u64() > Some(0)),
        "{r}"
    );
}

#[test]
fn the_page_is_served_with_its_policy_and_refused_without_a_credential() {
    let ancestors = "'self' https://app.example.test";
    let (c, s, _) = controller(&[("VIEWER_FRAME_ANCESTORS", ancestors)]);
    let host = s.addr.to_string();
    let get = |target: &str| {
        raw_http(
            s.addr,
            format!("GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes(),
        )
    };
    // The URL `local` printed.
    let printed = s
        .live_view_url
        .strip_prefix(&format!("http://{host}"))
        .expect("the live view on the proxy's address");
    let page = get(&format!("{printed}&fullscreen=1"));
    assert_eq!(status_of(&page), 200, "{page}");
    let lower = page.to_ascii_lowercase();
    assert!(
        lower.contains("content-type: text/html; charset=utf-8"),
        "{page}"
    );
    let csp = page
        .lines()
        .find(|l| {
            l.to_ascii_lowercase()
                .starts_with("content-security-policy:")
        })
        .expect("a CSP header");
    assert!(csp.contains("default-src 'none'"), "{csp}");
    assert!(
        csp.ends_with(&format!("frame-ancestors {ancestors}")),
        "{csp}"
    );
    assert!(page.contains("<canvas id=\"screen\""), "{page}");

    let good = credential(&s, "view", None);
    let keys = wallcrawler_testkit::keys::mint_viewer;
    let refused = [
        ("none", "/viewer".to_owned()),
        ("not a token", "/viewer?t=not-a-token".to_owned()),
        ("twice", format!("/viewer?t={good}&t={good}")),
        // The session token is not a viewer credential, in `t` or its own parameter.
        ("session token", format!("/viewer?t={}", s.token)),
        ("session token", format!("/viewer?signingKey={}", s.token)),
        // Expired (past the minute of leeway), another session's, another key's.
        (
            "expired",
            format!(
                "/viewer?t={}",
                keys(
                    KEY,
                    &s.session_id(),
                    "control",
                    None,
                    now() - 600..now() - 540
                )
            ),
        ),
        (
            "foreign",
            format!(
                "/viewer?t={}",
                keys(KEY, "sess_another", "control", None, now()..now() + 600)
            ),
        ),
        (
            "other key",
            format!(
                "/viewer?t={}",
                keys(
                    "another-key",
                    &s.session_id(),
                    "control",
                    None,
                    now()..now() + 600
                )
            ),
        ),
    ];
    for (why, target) in &refused {
        let answer = get(target);
        assert_eq!(status_of(&answer), 401, "{why}: {answer}");
        assert!(
            answer.ends_with("\r\n\r\nunauthorized\n"),
            "{why}: {answer}"
        );
        let ws = raw_http(
            s.addr,
            &upgrade_request(&target.replacen("/viewer", "/viewer/ws", 1), &host, &[]),
        );
        assert_eq!(status_of(&ws), 401, "{why} (socket): {ws}");
    }
    // And the reverse: the viewer credential opens no CDP route.
    let answer = get(&format!("/json/version?signingKey={good}"));
    assert_eq!(status_of(&answer), 401, "{answer}");
    let answer = raw_http(
        s.addr,
        &upgrade_request(&format!("/?signingKey={good}"), &host, &[]),
    );
    assert_eq!(status_of(&answer), 401, "{answer}");
    let log = c.stderr.text();
    assert!(!log.contains(&s.token), "a token reached the log");
    assert!(!log.contains(&good), "a viewer credential reached the log");
}

/// One metric's value in the controller's exposition.
fn metric(addr: SocketAddr, name: &str) -> f64 {
    let answer = raw_http(
        addr,
        format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes(),
    );
    answer
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in {answer}"))
        .trim()
        .parse()
        .unwrap()
}

/// Polls metric `name` until it is `want` (a screencast is counted once Chrome answered its
/// start, which may come after the page's still frame reached the viewer); its last value.
fn metric_becomes(addr: SocketAddr, name: &str, want: f64) -> f64 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let v = metric(addr, name);
        if v == want || std::time::Instant::now() > deadline {
            return v;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn a_raw_viewer_gets_tabs_and_frames_counts_as_a_client_stops_the_screencast_last_and_is_closed_at_shutdown()
 {
    use tokio_tungstenite::tungstenite::{self, Message};
    let (mut c, s, metrics) = controller(&[]);
    let url = format!(
        "ws://{}/viewer/ws?t={}",
        s.addr,
        credential(&s, "control", None)
    );
    let stream = std::net::TcpStream::connect(s.addr).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let (mut ws, answer) = tungstenite::client(url.as_str(), stream).expect("upgrade");
    assert_eq!(answer.status(), 101);
    // Anything but the viewer's own messages is refused and the connection stays open.
    let hostile = [
        r#"{"id":1,"method":"Runtime.evaluate","params":{"expression":"1"}}"#,
        "not json",
        r#"{"type":"mouse","event":"mousePressed","x":1e300,"y":1}"#,
    ];
    for h in hostile {
        ws.send(Message::text(h)).unwrap();
    }
    let mut errors = Vec::new();
    ws.send(Message::text(r#"{"type":"ping"}"#)).unwrap();
    let (mut start, mut pong) = (ViewerStart::default(), false);
    viewer_read_until(&mut ws, |v| {
        if !start.note(v) {
            match v["type"].as_str() {
                Some("pong") => pong = true,
                Some("error") => errors.push(v["error"].as_str().unwrap().to_owned()),
                other => panic!("unexpected message {other:?}: {v}"),
            }
        }
        start.both() && pong
    });
    assert_eq!(
        errors,
        ["unknown message", "unknown message", "invalid field x"]
    );
    assert_eq!(metric(metrics, "wallcrawler_proxy_clients"), 1.0);
    assert_eq!(
        metric_becomes(metrics, "wallcrawler_viewer_screencasts_started_total", 1.0),
        1.0
    );

    // The last viewer gone, the screencast stops; the next viewer starts a new one.
    ws.close(None).unwrap();
    while ws.read().is_ok() {}
    c.wait_event(|e| e["message"] == "screencast stopped: no viewer left");
    let stream = std::net::TcpStream::connect(s.addr).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let (mut ws, _) = tungstenite::client(url.as_str(), stream).expect("upgrade");
    loop {
        let Message::Text(t) = ws.read().expect("a message") else {
            continue;
        };
        let v: serde_json::Value = serde_json::from_str(t.as_str()).unwrap();
        if v["type"] == "frame" {
            break;
        }
    }
    assert_eq!(
        metric_becomes(metrics, "wallcrawler_viewer_screencasts_started_total", 2.0),
        2.0
    );

    c.signal(nix::sys::signal::Signal::SIGTERM);
    let closed = loop {
        match ws.read() {
            Ok(Message::Close(f)) => break f,
            Ok(_) => continue,
            Err(e) => panic!("no close frame: {e}"),
        }
    };
    let f = closed.expect("a close frame with a code");
    assert_eq!(u16::from(f.code), 1001, "{f:?}");
    assert_eq!(c.wait_exit().code(), Some(0), "{}", c.stderr.text());
}

fn open_viewer(
    s: &LocalSession,
    credential: &str,
) -> tokio_tungstenite::tungstenite::WebSocket<std::net::TcpStream> {
    let url = format!("ws://{}/viewer/ws?t={credential}", s.addr);
    let stream = std::net::TcpStream::connect(s.addr).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    tokio_tungstenite::tungstenite::client(url.as_str(), stream)
        .expect("upgrade")
        .0
}

#[test]
fn a_viewer_for_one_page_sees_and_selects_only_that_page() {
    use tokio_tungstenite::tungstenite::Message;
    let (c, s, _) = controller(&[]);
    let _dump = Dump(c.stderr.clone());
    let answer = raw_http(
        s.addr,
        format!(
            "PUT /json/new?about:blank HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\r\n",
            s.addr, s.token
        )
        .as_bytes(),
    );
    assert_eq!(status_of(&answer), 200, "{answer}");
    let body = &answer[answer.find("\r\n\r\n").unwrap() + 4..];
    let other: serde_json::Value = serde_json::from_str(body).unwrap();
    let other = other["id"].as_str().unwrap().to_owned();

    // An unpinned viewer lists both pages; pick the one that is not `other`.
    let mut all = open_viewer(&s, &credential(&s, "view", None));
    let seen = viewer_read_until(&mut all, |v| {
        v["type"] == "tabs" && v["tabs"].as_array().unwrap().len() >= 2
    });
    let tabs = seen.last().unwrap()["tabs"].as_array().unwrap().clone();
    // The page opened last is in front, the other in the background (it paints nothing: the
    // viewer shows its still frame).
    let pinned = tabs
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_owned())
        .find(|id| *id != other)
        .unwrap();
    drop(all);

    // A query's `page` or `mode` widens nothing: the credential's claims alone count.
    let pinned_view = credential(&s, "view", Some(&pinned));
    let mut ws = open_viewer(&s, &format!("{pinned_view}&page={other}&mode=control"));
    let seen = viewer_read_until(&mut ws, |v| v["type"] == "frame");
    for v in seen.iter().filter(|v| v["type"] == "tabs") {
        let ids: Vec<&str> = v["tabs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, [pinned.as_str()], "{v}");
    }
    assert_eq!(seen.last().unwrap()["page"], pinned.as_str());
    // Selecting the other page is ignored (no tabs answer); input in view mode is dropped
    // without an answer; the ping's pong is the only reply.
    ws.send(Message::text(
        serde_json::json!({"type": "select", "page": other}).to_string(),
    ))
    .unwrap();
    ws.send(Message::text(
        r#"{"type":"mouse","event":"mousePressed","x":1,"y":1,"button":"left","clickCount":1}"#,
    ))
    .unwrap();
    ws.send(Message::text(r#"{"type":"ping"}"#)).unwrap();
    let seen = viewer_read_until(&mut ws, |v| v["type"] == "pong");
    assert!(
        seen.iter()
            .all(|v| v["type"] == "frame" || v["type"] == "pong"),
        "{seen:?}"
    );
}

/// On a failing test, prints the controller's viewer and screencast log lines.
struct Dump(crate::support::Captured);
impl Drop for Dump {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for l in self.0.lines().iter().filter(|l| {
                l.contains("viewer") || l.contains("screencast") || l.contains("egress")
            }) {
                eprintln!("{l}");
            }
        }
    }
}

/// The check behind docs/operating.md's "DevTools inspector": our Chromium ships the DevTools
/// frontend (its debug port serves `/devtools/inspector.html` and the module it loads), and the
/// proxy serves it only under `/inspector/<viewer credential>/` (tests/inspector.rs): its
/// `/devtools/*` are CDP sockets only, a session token opens no frontend file.
#[test]
fn chromium_ships_the_devtools_frontend_and_the_proxy_serves_it_only_under_inspector() {
    use std::io::BufRead;
    use std::process::{Command, Stdio};

    // A bare Chromium on a port of its own: the controller's runs in a private network
    // namespace. It says where it listens on stderr.
    let dir = tempfile::tempdir().unwrap();
    let mut chrome = Command::new(chromium())
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            &format!("--user-data-dir={}", dir.path().display()),
            "about:blank",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = std::io::BufReader::new(chrome.stderr.take().unwrap()).lines();
    let port: u16 = stderr
        .find_map(|l| {
            let l = l.ok()?;
            let rest = l.strip_prefix("DevTools listening on ws://127.0.0.1:")?;
            rest.split('/').next()?.parse().ok()
        })
        .expect("Chromium names its debug port");
    // Keep draining its stderr so that it never blocks on a full pipe.
    std::thread::spawn(move || stderr.for_each(drop));
    let at = SocketAddr::from(([127, 0, 0, 1], port));
    let html = get_one(at, "/devtools/inspector.html");
    let js = get_one(at, "/devtools/entrypoints/inspector/inspector.js");
    let _ = chrome.kill();
    let _ = chrome.wait();
    assert_eq!(status_of(&html), 200, "{html}");
    assert!(html.contains("Content-Type:text/html"), "{html}");
    assert!(
        html.contains("src=\"./entrypoints/inspector/inspector.js\""),
        "{html}"
    );
    assert_eq!(status_of(&js), 200, "{js}");
    assert!(js.contains("Content-Type:text/javascript"), "{js}");

    let (_c, s, _) = controller(&[]);
    for path in [
        "/devtools/inspector.html",
        "/viewer/devtools/inspector.html",
    ] {
        let target = format!("{path}?signingKey={}", s.token);
        let answer = get_one(s.addr, &target);
        assert_eq!(status_of(&answer), 404, "{path}: {answer}");
    }
    let control = credential(&s, "control", None);
    let served = get_one(s.addr, &format!("/inspector/{control}/inspector.html"));
    assert_eq!(status_of(&served), 200, "{served}");
    assert_eq!(
        served.split_once("\r\n\r\n").map(|(_, b)| b),
        html.split_once("\r\n\r\n").map(|(_, b)| b),
        "Chrome's own file"
    );
}

/// One GET on a fresh connection, read to the end of its body by `Content-Length` (Chrome's
/// HTTP server keeps the connection open after its answer, `Connection: close` or not).
fn get_one(addr: SocketAddr, target: &str) -> String {
    use std::io::{BufRead, BufReader, Read, Write};
    let mut tcp = std::net::TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(crate::support::WAIT)).unwrap();
    write!(tcp, "GET {target} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut r = BufReader::new(tcp);
    let mut head = String::new();
    while !head.ends_with("\r\n\r\n") {
        assert!(
            r.read_line(&mut head).unwrap() > 0,
            "closed in the head: {head}"
        );
    }
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0; length];
    r.read_exact(&mut body).unwrap();
    head + &String::from_utf8_lossy(&body)
}

/// Issue 41, item 1: a viewer's socket dies with its credential: opened with one that expires
/// in a few seconds, it is shown the page and then closed (1008) when the credential expires,
/// waited on by its close.
#[test]
fn a_viewer_socket_is_closed_when_its_credential_expires() {
    use tokio_tungstenite::tungstenite::Message;
    const TTL: u64 = 3;
    let (c, s, _) = controller(&[]);
    let minted = now();
    let short = wallcrawler_testkit::keys::mint_viewer(
        crate::support::KEY,
        &s.session_id(),
        "view",
        None,
        minted..minted + TTL,
    );
    let mut ws = open_viewer(&s, &short);
    viewer_read_until(&mut ws, |v| v["type"] == "tabs");
    let closed = loop {
        match ws.read() {
            Ok(Message::Close(f)) => break f.expect("a close frame with a code"),
            Ok(_) => continue,
            Err(e) => panic!("no close frame: {e}"),
        }
    };
    assert_eq!(
        (u16::from(closed.code), closed.reason.as_str()),
        (1008, "the credential has expired")
    );
    // `exp` is whole seconds: closed within a second of it, not before.
    let at = now();
    assert!(
        (minted + TTL..=minted + TTL + 2).contains(&at),
        "closed at {at}, minted at {minted} for {TTL} s"
    );
    drop(c);
}
