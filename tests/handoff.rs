//! Handoff on the real controller (`local`, real Chromium): Puppeteer's
//! `CDPSession.send('Wallcrawler.requestHandoff')` answered by the proxy with the live-view URL
//! `local` printed, a person (a second headless Chromium, tests/node/handoff.mjs) pressing Done
//! there, and the client told `Wallcrawler.handoffCompleted`; a view-only viewer's done ends
//! nothing; the timeout; the exact refusals; Chrome never sees a `Wallcrawler.*` command.

use serde_json::{Value, json};

use crate::support::{Controller, LocalSession, private_key_file};

fn controller() -> (Controller, LocalSession) {
    Controller::local(
        &[],
        &[
            ("LOG_FORMAT", "json"),
            ("RUST_LOG", "debug"),
            ("WALLCRAWLER_JWT_PRIVATE_KEY_FILE", private_key_file()),
        ],
    )
}

fn scenario(s: &LocalSession, name: &str) -> Value {
    s.node_viewer("handoff.mjs", &["--scenario", name])
}

/// The credential in a viewer URL (what no log line may hold).
fn credential_of(url: &str) -> String {
    url.split("t=").nth(1).expect("a credential").to_owned()
}

#[test]
fn a_person_presses_done_and_the_client_that_asked_is_told() {
    let (c, s) = controller();
    let r = scenario(&s, "done");
    let result = &r["result"];
    // The URL is the one `local` printed for its session (control mode).
    assert_eq!(result["url"], s.live_view_url.as_str(), "{r}");
    let id = result["handoffId"].as_str().unwrap();
    assert!(id.starts_with("ho_"), "{r}");
    let expires = wallcrawler_contract::time::parse_iso8601(result["expiresAt"].as_str().unwrap())
        .expect("ISO 8601 expiresAt");
    let now_ms = crate::support::now() * 1000;
    assert!(
        expires > now_ms + 100_000 && expires <= now_ms + 125_000,
        "{r}"
    );
    // The view-only viewer had no Done button, and its done ended nothing.
    assert_eq!(r["watcherButton"], true, "{r}");
    assert_eq!(r["afterViewDone"], id, "{r}");
    // The reason is shown as text, never as markup.
    assert_eq!(
        r["bannerHtml"], "Please solve the &lt;b&gt;captcha&lt;/b&gt;",
        "{r}"
    );
    assert_eq!(
        r["event"],
        json!({"handoffId": id, "timedOut": false}),
        "{r}"
    );
    eprintln!("done → handoffCompleted in {} ms", r["ms"]);
    let logs = c.stderr.text();
    assert!(
        !logs.contains(&credential_of(&s.live_view_url)),
        "the URL's credential was logged"
    );
    assert!(
        !logs.contains("captcha"),
        "the reason (client text) was logged"
    );
    assert!(logs.contains("handoff requested") && logs.contains("handoff completed"));
}

#[test]
fn a_handoff_nobody_ends_times_out() {
    let (_c, s) = controller();
    let r = scenario(&s, "timeout");
    let id = r["result"]["handoffId"].as_str().unwrap();
    assert_eq!(
        r["event"],
        json!({"handoffId": id, "timedOut": true}),
        "{r}"
    );
    assert!(r["ms"].as_u64().unwrap() < 5000, "{r}");
}

#[test]
fn wallcrawler_commands_are_refused_exactly_and_never_reach_chrome() {
    let (_c, s) = controller();
    let r = scenario(&s, "refused");
    let e = &r["errors"];
    // Puppeteer's message: "Protocol error (<method>): <the answer's message>".
    let want = [
        (
            "unknown",
            "Protocol error (Wallcrawler.nope): 'Wallcrawler.nope' wasn't found",
        ),
        (
            "huge",
            "Protocol error (Wallcrawler.requestHandoff): Invalid parameters: reason must be at most 1000 characters",
        ),
        (
            "zero",
            "Protocol error (Wallcrawler.requestHandoff): Invalid parameters: timeout must be an integer from 1 to 3600 (seconds)",
        ),
        (
            "long",
            "Protocol error (Wallcrawler.requestHandoff): Invalid parameters: timeout must be an integer from 1 to 3600 (seconds)",
        ),
        (
            "noReason",
            "Protocol error (Wallcrawler.requestHandoff): Invalid parameters: reason must be a non-empty string",
        ),
        (
            "second",
            "Protocol error (Wallcrawler.requestHandoff): Wallcrawler.requestHandoff: a handoff is already pending",
        ),
    ];
    for (k, msg) in want {
        assert!(
            e[k].as_str().is_some_and(|m| m.starts_with(msg)),
            "{k}: {}",
            e[k]
        );
    }
    assert!(r["first"]["handoffId"].is_string(), "{r}");
    // A session Chrome does not have: Chrome answers the ordinary command with its own error,
    // the proxy answers the Wallcrawler ones (so Chrome never saw them).
    let raw = r["rawAnswers"].as_array().unwrap();
    assert_eq!(
        raw[0],
        json!({"id": 1, "sessionId": "NOT-A-SESSION", "error": {"code": -32601, "message": "'Wallcrawler.nope' wasn't found"}}),
        "{r}"
    );
    assert_eq!(
        raw[1],
        json!({"id": 2, "sessionId": "NOT-A-SESSION", "error": {"code": -32000, "message": "Wallcrawler.requestHandoff: a handoff is already pending"}}),
        "{r}"
    );
    assert_eq!(
        raw[2]["error"]["message"], "Session with given id not found.",
        "{r}"
    );
    assert_eq!(r["still"], 42, "{r}");
}
