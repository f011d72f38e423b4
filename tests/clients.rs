use crate::support::{Controller, node};

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
