//! Issue 41, item 1, through the local platform: a page's `debuggerUrl` from the stock SDK's
//! `sessions.debug(id, {expiresIn})` opens that page's inspector socket (through the connect
//! gateway), which cannot list or read another tab, read the browser's cookies or get a wider
//! credential; and one opened with a credential valid for a few seconds dies with it.

use super::*;

#[test]
fn a_pages_debugger_url_reaches_only_that_page_and_dies_with_its_credential() {
    const TTL: u64 = 5;
    let s = Server::start("25");
    let v = create(&s, &format!(r#"{{"projectId":"{}"}}"#, s.project));
    let id = v["id"].as_str().unwrap();
    let url = v["connectUrl"].as_str().unwrap();
    let r = node::node(
        "inspector-scope.mjs",
        &[
            "--url",
            url,
            "--session",
            id,
            "--base",
            &s.base,
            "--key",
            &s.key,
            "--short-ttl",
            &TTL.to_string(),
            "--timeout-ms",
            "90000",
        ],
    );
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(
        r["own"], "tab-a-is-shown",
        "the page itself is inspected: {r}"
    );
    let answers = &r["answers"];
    for (what, says) in [
        ("getTargets", "this inspector's credential is for one page"),
        ("discover", "this inspector's credential is for one page"),
        ("attach", "this inspector's credential is for one page"),
        ("sendToB", "this inspector's credential is for one page"),
        ("allCookies", "this inspector's credential is for one page"),
        (
            "storageCookies",
            "this inspector's credential is for one page",
        ),
        ("browserPage", "this inspector's credential is for one page"),
        ("handoff", "is not allowed on an inspector"),
    ] {
        let a = &answers[what];
        assert!(
            a["result"].is_null()
                && a["error"]["message"]
                    .as_str()
                    .is_some_and(|m| m.contains(says)),
            "{what} not refused: {a}"
        );
    }
    assert!(answers["readB"].is_null(), "{r}");
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
    let after = short["afterMs"].as_u64().unwrap();
    assert!(
        ((TTL - 1) * 1000..(TTL + 10) * 1000).contains(&after),
        "closed {after} ms after /debug, expiresIn {TTL}"
    );
    s.release(id);
    s.stop();
}
