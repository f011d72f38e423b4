//! The dashboard as a person uses it, on the local platform: real controllers and Chromium,
//! the stock SDK and Puppeteer making a session, a second headless Chromium (playwright-core)
//! opening `/dashboard` (tests/node/dashboard.mjs).

use serde_json::{Value, json};

use super::*;

/// The markup the session's metadata holds (tests/node/dashboard.mjs's `HOSTILE`).
const HOSTILE: &str = r#"<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>"#;

/// The person pastes the key, finds the session listed and filters the list, opens it: the
/// live view framed from the gateway, the log followed as the session runs (the first
/// `Page.navigate`, then the second as it happens), its recording, no downloads; after the
/// release the log is read whole. The key never leaves the header of the API's requests.
#[test]
fn a_person_pastes_the_key_and_follows_a_running_session_in_the_dashboard() {
    let s = Server::start("25");
    let gateway = s.gateway.clone().expect("the gateway");
    let viewer_origin = gateway.replace("ws://", "http://");
    let chrome = wallcrawler_testkit::chromium();
    let r = s.node_script(
        "dashboard.mjs",
        "person",
        &[("CHROME_PATH", chrome.to_str().unwrap())],
    );
    assert_eq!(r["ok"], true, "{r}");

    // The page's answer, as the browser got it.
    let h = &r["headers"];
    assert_eq!(h["status"], 200, "{r}");
    assert_eq!(h["cacheControl"], "no-store", "{r}");
    assert_eq!(h["xFrameOptions"], "DENY", "{r}");
    let csp = h["csp"].as_str().unwrap();
    for part in [
        "connect-src 'self';".to_owned(),
        format!("frame-src {viewer_origin};"),
        "media-src 'self';".to_owned(),
        "frame-ancestors 'none'".to_owned(),
    ] {
        assert!(csp.contains(&part), "{part} in {csp}");
    }
    assert_eq!(
        r["violations"],
        json!([]),
        "nothing the policy refused: {r}"
    );

    // Listed, filtered by text and by status.
    assert_eq!(r["listed"], true, "{r}");
    assert_eq!(r["listedStatus"], "RUNNING", "{r}");
    for check in [
        "hiddenByText",
        "shownByText",
        "hiddenByStatus",
        "shownByStatus",
    ] {
        assert_eq!(r[check], true, "{check}: {r}");
    }
    let shown: Value = serde_json::from_str(r["hostile"]["text"].as_str().unwrap()).unwrap();
    assert_eq!(shown["note"], HOSTILE, "{r}");
    assert_eq!(r["hostile"]["imgs"], 0, "{r}");
    assert_eq!(r["hostile"]["pwned"], Value::Null, "{r}");

    // The log, followed live, then read whole once the session ended.
    assert_eq!(r["firstNavigationShown"], true, "{r}");
    assert_eq!(r["logsSource"], "stream", "{r}");
    assert_eq!(r["secondNavigationStreamed"], true, "{r}");
    assert_eq!(r["endedStatusShown"], "COMPLETED", "{r}");
    assert_eq!(r["endedLogsSource"], "list", "{r}");
    assert_eq!(
        r["endedNavigations"],
        json!([r["first"], r["second"]]),
        "{r}"
    );

    // The live view: the viewer from the gateway, allowed to be framed by the dashboard.
    assert_eq!(r["live"]["state"], "live", "{r}");
    assert_eq!(r["live"]["origin"], viewer_origin.as_str(), "{r}");
    assert_eq!(r["live"]["canvas"], true, "{r}");
    assert_eq!(r["endedLive"], "none", "{r}");
    assert_eq!(r["otherOrigins"], json!([viewer_origin]), "{r}");

    assert_eq!(r["downloads"]["state"], "empty", "{r}");
    // The recording: while the session runs its page is listed as being recorded; once it
    // ended, a <video> of it loads.
    assert_eq!(r["recordingWhileRunning"]["state"], "recording", "{r}");
    assert_eq!(r["recordingEnded"]["state"], "ready", "{r}");
    assert!(
        r["recordingEnded"]["videoReadyState"].as_u64() >= Some(1),
        "{r}"
    );

    // The key: in the header of every API request, nowhere else.
    let calls = r["apiCalls"].as_u64().unwrap();
    assert!(calls >= 5, "{r}");
    assert_eq!(r["apiCallsWithKey"].as_u64(), Some(calls), "{r}");
    assert_eq!(r["urlsWithKey"], json!([]), "{r}");
    assert_eq!(r["consoleWithKey"], json!([]), "{r}");
    assert_eq!(
        r["storage"],
        json!({"local": 0, "cookie": "", "sessionHasKey": true}),
        "{r}"
    );
    assert_eq!(r["forgotten"], true, "{r}");
    s.stop();
}

/// Session metadata whose keys and values are markup is shown as text, in the list and in the
/// session's fields: no element made from it, no script of it run.
#[test]
fn hostile_metadata_renders_as_text_in_the_dashboard() {
    let s = Server::start("25");
    let chrome = wallcrawler_testkit::chromium();
    let r = s.node_script(
        "dashboard.mjs",
        "hostile",
        &[("CHROME_PATH", chrome.to_str().unwrap())],
    );
    assert_eq!(r["ok"], true, "{r}");
    for (text, elements) in [
        ("listText", "listElements"),
        ("detailText", "detailElements"),
    ] {
        let shown: Value = serde_json::from_str(r[text].as_str().unwrap())
            .unwrap_or_else(|e| panic!("{text} is the metadata's JSON as text ({e}): {r}"));
        assert_eq!(shown, r["sent"], "{text}: {r}");
        assert_eq!(r[elements], 0, "{elements}: {r}");
    }
    assert_eq!(r["imgsOrScripts"], 0, "{r}");
    assert_eq!(r["pwned"], Value::Null, "{r}");
    s.stop();
}

/// Direct mode: the viewer is on each session's own port, which the page's policy does not let
/// it frame; the page drops the refused frame and offers the live view as a link.
#[test]
fn in_direct_mode_the_live_view_is_a_link() {
    let s = Server::spawn_with("25", &controller_bin(), &[DIRECT]);
    let chrome = wallcrawler_testkit::chromium();
    let r = s.node_script(
        "dashboard.mjs",
        "direct",
        &[("CHROME_PATH", chrome.to_str().unwrap())],
    );
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["state"], "link", "{r}");
    assert_eq!(r["frames"], 0, "{r}");
    let connect = r["connectUrl"].as_str().unwrap();
    let proxy = connect
        .trim_start_matches("ws://")
        .split(['/', '?'])
        .next()
        .unwrap();
    assert_eq!(r["linkOrigin"], format!("http://{proxy}"), "{r}");
    assert_eq!(r["linkPath"], "/viewer", "{r}");
    s.stop();
}
