use tokio_tungstenite::tungstenite::{self, Message};

use crate::support::{Controller, first_head, node, status_of, upgrade_request};

fn assert_drove(result: &serde_json::Value, client: &str) {
    assert_eq!(result["ok"], true, "{client}: {result}");
    assert_eq!(result["eval"], 2, "{client}: {result}");
    assert!(
        result["screenshotBytes"].as_u64().unwrap_or(0) > 0,
        "{client}: {result}"
    );
}

#[test]
fn puppeteer_with_the_connect_url() {
    let (_c, s) = Controller::local(&[], &[]);
    let r = node(
        "drive.mjs",
        &["--client", "puppeteer", "--url", &s.connect_url],
    );
    assert_drove(&r, "puppeteer");
}

#[test]
fn puppeteer_with_the_token_in_an_authorization_header() {
    let (_c, s) = Controller::local(&[], &[]);
    let r = s.drive_with_bearer("puppeteer", &s.ws_url());
    assert_drove(&r, "puppeteer (header)");
}

/// `local` prints its connectUrl with the `/` path; a URL without it still works with a
/// client that sends its empty path as is (`GET ?signingKey=…`: tungstenite, as chromiumoxide
/// uses it), which hyper alone would refuse as malformed.
#[test]
fn the_printed_connect_url_has_a_path_and_a_path_less_target_is_upgraded() {
    let (_c, s) = Controller::local(&[], &[]);
    assert_eq!(
        s.connect_url,
        format!("ws://{}/?signingKey={}", s.addr, s.token)
    );

    let path_less = format!("?signingKey={}", s.token);
    let (_ws, head) = first_head(
        s.addr,
        &upgrade_request(&path_less, &s.addr.to_string(), &[]),
    );
    assert_eq!(status_of(&head), 101, "{head}");

    let url = format!("ws://{}?signingKey={}", s.addr, s.token);
    let (mut ws, resp) = tungstenite::connect(url).expect("upgrade on the path-less URL");
    assert_eq!(resp.status(), 101);
    ws.send(Message::text(r#"{"id":1,"method":"Browser.getVersion"}"#))
        .unwrap();
    let version = loop {
        if let Message::Text(t) = ws.read().unwrap() {
            let v: serde_json::Value = serde_json::from_str(t.as_str()).unwrap();
            if v["id"] == 1 {
                break v;
            }
        }
    };
    assert!(
        version["result"]["product"]
            .as_str()
            .is_some_and(|p| p.contains("Chrome/")),
        "{version}"
    );
}

#[test]
fn playwright_with_the_ws_url() {
    let (_c, s) = Controller::local(&[], &[]);
    let r = node(
        "drive.mjs",
        &["--client", "playwright", "--url", &s.connect_url],
    );
    assert_drove(&r, "playwright ws");
}

#[test]
fn playwright_with_the_http_url_and_query_token() {
    let (_c, s) = Controller::local(&[], &[]);
    let url = format!("{}?signingKey={}", s.http_url(), s.token);
    let r = node("drive.mjs", &["--client", "playwright", "--url", &url]);
    assert_drove(&r, "playwright http+query");
}

#[test]
fn playwright_with_the_http_url_and_header() {
    let (_c, s) = Controller::local(&[], &[]);
    let r = s.drive_with_bearer("playwright", &s.http_url());
    assert_drove(&r, "playwright http+header");
}

#[test]
fn chrome_remote_interface_with_the_connect_url() {
    let (_c, s) = Controller::local(&[], &[]);
    let r = node("drive.mjs", &["--client", "cri", "--url", &s.connect_url]);
    assert_drove(&r, "chrome-remote-interface");
}

#[test]
fn stagehand_with_the_connect_url() {
    let (_c, s) = Controller::local(&[], &[]);
    let r = node(
        "drive.mjs",
        &["--client", "stagehand", "--url", &s.connect_url],
    );
    assert_drove(&r, "stagehand");
}

#[test]
fn puppeteer_and_playwright_attached_at_once() {
    let (_c, s) = Controller::local(&[], &[]);
    let r = node("two-clients.mjs", &["--url", &s.connect_url]);
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["puppeteer"], 2, "{r}");
    assert_eq!(r["playwright"], 2, "{r}");
}

#[test]
fn a_client_without_the_token_cannot_connect() {
    let (_c, s) = Controller::local(&[], &[]);
    let out = crate::support::node_output(
        "drive.mjs",
        &["--client", "puppeteer", "--url", &s.ws_url()],
    );
    assert!(!out.status.success());
    assert!(out.stdout.contains("401"), "{out:?}");
}
