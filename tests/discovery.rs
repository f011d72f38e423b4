//! Clients that reach the proxy under another name, or send an Origin, work; every URL Chrome
//! hands out in discovery points back at the proxy under the name the client used.

use std::sync::Arc;

use serde_json::Value;
use tokio_tungstenite::tungstenite::{self, Message, client::IntoClientRequest};

use crate::support::upstream::FakeUpstream;
use crate::support::{Controller, KEY, SESSION, node, proxy, raw_http, status_of, token};

fn json_body(answer: &str) -> Value {
    let body = answer.split_once("\r\n\r\n").expect("a body").1;
    serde_json::from_str(body).unwrap_or_else(|_| panic!("not JSON: {answer}"))
}

fn get(addr: std::net::SocketAddr, target: &str, host: &str) -> String {
    raw_http(
        addr,
        format!("GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
}

#[test]
fn discovery_urls_use_the_name_the_client_used() {
    let (_c, s) = Controller::local(&[], &[]);
    let host = format!("browser.example.test:{}", s.addr.port());
    let q = format!("?signingKey={}", s.token);

    let version = get(s.addr, &format!("/json/version{q}"), &host);
    assert_eq!(status_of(&version), 200, "{version}");
    let v = json_body(&version);
    let ws = v["webSocketDebuggerUrl"].as_str().unwrap();
    assert!(
        ws.starts_with(&format!("ws://{host}/devtools/browser/")),
        "{ws}"
    );
    assert!(ws.ends_with(&q), "a query client gets its token back: {ws}");

    // Open a page so /json/list has one, through the proxy, with the header credential.
    let new = raw_http(
        s.addr,
        format!(
            "PUT /json/new?about:blank HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
            s.token
        )
        .as_bytes(),
    );
    assert_eq!(status_of(&new), 200, "{new}");
    let page = json_body(&new);
    assert!(
        page["webSocketDebuggerUrl"]
            .as_str()
            .unwrap()
            .starts_with(&format!("ws://{host}/devtools/page/")),
        "{page}"
    );

    for target in ["/json/list", "/json", "/json/list/", "/json/"] {
        let list = get(s.addr, &format!("{target}{q}"), &host);
        assert_eq!(status_of(&list), 200, "{target}: {list}");
        assert!(
            !list.contains("127.0.0.1"),
            "{target} leaks Chrome's address: {list}"
        );
        let items = json_body(&list);
        let pages: Vec<&Value> = items
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["type"] == "page")
            .collect();
        assert!(!pages.is_empty(), "{list}");
        for p in pages {
            let ws = p["webSocketDebuggerUrl"].as_str().unwrap();
            assert!(
                ws.starts_with(&format!("ws://{host}/devtools/page/")) && ws.ends_with(&q),
                "{ws}"
            );
            let fe = p["devtoolsFrontendUrl"].as_str().unwrap();
            assert!(fe.contains(&format!("ws={host}/devtools/page/")), "{fe}");
        }
    }
}

#[test]
fn a_header_client_gets_urls_without_the_token() {
    let (_c, s) = Controller::local(&[], &[]);
    let answer = raw_http(
        s.addr,
        format!(
            "GET /json/version/ HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\r\n",
            s.addr, s.token
        )
        .as_bytes(),
    );
    assert_eq!(status_of(&answer), 200, "{answer}");
    let ws = json_body(&answer)["webSocketDebuggerUrl"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        ws.starts_with(&format!("ws://{}/devtools/browser/", s.addr)),
        "{ws}"
    );
    assert!(!ws.contains("signingKey"), "{ws}");
}

/// Upgrades with `Host: browser.example.test:PORT` and a foreign `Origin` (which Chrome itself
/// would refuse), then runs a CDP command on the browser target.
#[test]
fn a_client_using_a_dns_name_and_an_origin_works() {
    let (_c, s) = Controller::local(&[], &[]);
    let url = format!(
        "ws://browser.example.test:{}/?signingKey={}",
        s.addr.port(),
        s.token
    );
    let mut req = url.into_client_request().unwrap();
    req.headers_mut()
        .insert("Origin", "https://app.example.test".parse().unwrap());
    let tcp = std::net::TcpStream::connect(s.addr).unwrap();
    tcp.set_read_timeout(Some(crate::support::WAIT)).unwrap();
    let (mut ws, resp) = tungstenite::client(req, tcp).expect("upgrade through the proxy");
    assert_eq!(resp.status(), 101);
    ws.send(Message::text(r#"{"id":1,"method":"Browser.getVersion"}"#))
        .unwrap();
    loop {
        match ws.read().unwrap() {
            Message::Text(t) => {
                let v: Value = serde_json::from_str(t.as_str()).unwrap();
                if v["id"] == 1 {
                    assert!(
                        v["result"]["product"].as_str().unwrap().contains("Chrome"),
                        "{v}"
                    );
                    break;
                }
            }
            _ => continue,
        }
    }
}

/// Playwright reaching the proxy as `localhost` follows the rewritten discovery URL.
#[test]
fn playwright_via_localhost_name() {
    let (_c, s) = Controller::local(&[], &[]);
    let url = format!("http://localhost:{}?signingKey={}", s.addr.port(), s.token);
    let r = node("drive.mjs", &["--client", "playwright", "--url", &url]);
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["eval"], 2, "{r}");
}

#[test]
fn health_needs_no_token_and_reveals_nothing() {
    let (_c, s) = Controller::local(&[], &[]);
    let answer = get(s.addr, "/health", &s.addr.to_string());
    assert_eq!(status_of(&answer), 200, "{answer}");
    let body = answer.split_once("\r\n\r\n").unwrap().1;
    assert_eq!(body.trim(), r#"{"status":"ok"}"#);
}

/// Chrome's hosted frontend (`devtoolsFrontendUrl` on another host) never gets the token: its
/// `ws=` points at the proxy, without the token; a frontend path on the proxy still carries it.
#[test]
fn a_third_party_frontend_url_never_carries_the_token() {
    let list = r#"[{"id":"P1","type":"page","devtoolsFrontendUrl":"https://chrome-devtools-frontend.appspot.com/serve_rev/@abc/inspector.html?ws={addr}/devtools/page/P1","webSocketDebuggerUrl":"ws://{addr}/devtools/page/P1"},{"id":"P2","type":"page","devtoolsFrontendUrl":"/devtools/inspector.html?ws={addr}/devtools/page/P2","webSocketDebuggerUrl":"ws://{addr}/devtools/page/P2"}]"#;
    let up = FakeUpstream::start_with_list(Arc::new(|_| Ok(())), Some(list.to_owned()));
    let (_c, addr) = proxy(up.addr, &[]);
    let token = token(KEY, SESSION, "", 3600);
    let signature = token.rsplit('.').next().unwrap();
    let host = addr.to_string();
    let answer = get(addr, &format!("/json/list?signingKey={token}"), &host);
    assert_eq!(status_of(&answer), 200, "{answer}");
    let items = json_body(&answer);
    let hosted = items[0]["devtoolsFrontendUrl"].as_str().unwrap();
    assert_eq!(
        hosted,
        format!(
            "https://chrome-devtools-frontend.appspot.com/serve_rev/@abc/inspector.html?ws={host}/devtools/page/P1"
        )
    );
    assert!(!hosted.contains(signature), "{hosted}");
    assert_eq!(
        items[0]["webSocketDebuggerUrl"],
        format!("ws://{host}/devtools/page/P1?signingKey={token}")
    );
    assert_eq!(
        items[1]["devtoolsFrontendUrl"],
        format!("/devtools/inspector.html?ws={host}/devtools/page/P2%3FsigningKey%3D{token}")
    );
}

/// The browser starts without the address bar's dropdown preloaded as a page of its own
/// (`chrome/flags.conf`: about 0.7 s of CPU per start otherwise): no such target in the
/// browser's own list of targets, the one a client's `Target.getTargets` reads.
#[test]
fn the_browser_starts_without_the_omnibox_popup_page() {
    let (_c, s) = Controller::local(&[], &[]);
    let host = format!("127.0.0.1:{}", s.addr.port());
    let version = get(
        s.addr,
        &format!("/json/version?signingKey={}", s.token),
        &host,
    );
    let ws = json_body(&version)["webSocketDebuggerUrl"]
        .as_str()
        .unwrap()
        .to_owned();
    let (mut socket, _) = tungstenite::connect(ws.into_client_request().unwrap()).unwrap();
    socket
        .send(Message::text(r#"{"id":1,"method":"Target.getTargets"}"#))
        .unwrap();
    let answer = loop {
        let m = socket.read().unwrap();
        let v: Value = serde_json::from_str(m.to_text().unwrap()).unwrap();
        if v["id"] == 1 {
            break v;
        }
    };
    let infos = answer["result"]["targetInfos"]
        .as_array()
        .unwrap_or_else(|| panic!("{answer}"));
    assert!(!infos.is_empty(), "the browser's page is listed: {answer}");
    let popups: Vec<&Value> = infos
        .iter()
        .filter(|t| t["url"].as_str().unwrap_or("").contains("omnibox-popup"))
        .collect();
    assert!(popups.is_empty(), "preloaded omnibox popups: {popups:?}");
}
