//! A session's log through the local platform: real controllers and Chromium, Puppeteer
//! driving pages served on 127.0.0.1, the stock Node SDK reading `sessions.logs.list(id)`
//! while the session runs and after it ended (tests/node/logs.mjs).

use serde_json::Value;

use super::*;

/// ms since the epoch of an ISO 8601 time the API answered.
fn ms(v: &Value) -> u64 {
    wallcrawler_contract::time::parse_iso8601(v.as_str().unwrap()).unwrap()
}

/// While the session runs the log already holds the client's first `Page.navigate`; after
/// the release it holds both navigations in order, the evaluate with its answer, every entry
/// well formed (a method, a page number, a CDP session, request and response bodies with ms
/// timestamps within the session), and nothing of the session's token.
#[test]
fn a_session_is_logged_while_it_runs_and_after_it_ends() {
    let s = Server::start("25");
    let r = s.node_script("logs.mjs", "logged", &[]);
    assert_eq!(r["ok"], true, "{r}");
    assert!(
        r["runningMethods"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m == "Page.navigate"),
        "{r}"
    );
    assert_eq!(r["evaluated"], 42);
    let logs = r["logs"].as_array().unwrap();
    let navigations: Vec<&str> = logs
        .iter()
        .filter(|e| e["method"] == "Page.navigate")
        .map(|e| e["request"]["params"]["url"].as_str().unwrap())
        .collect();
    let (first, second) = (r["first"].as_str().unwrap(), r["second"].as_str().unwrap());
    assert_eq!(navigations, [first, second], "both, in order");
    let evaluate = logs
        .iter()
        .find(|e| {
            e["method"] == "Runtime.evaluate" && e["request"]["params"]["expression"] == "6 * 7"
        })
        .unwrap_or_else(|| panic!("the evaluate in {logs:?}"));
    assert_eq!(
        evaluate["response"]["result"]["result"]["value"], 42,
        "{evaluate}"
    );

    // Every entry well formed, its times within the session (the API's times are whole
    // seconds: a second's slack on each side).
    let (from, to) = (ms(&r["createdAt"]) - 1000, ms(&r["endedAt"]) + 1000);
    let within = |t: &Value| t.as_u64().is_some_and(|t| (from..=to).contains(&t));
    for e in logs {
        assert!(
            e["method"].is_string() && e["pageId"].is_u64() && e["sessionId"].is_string(),
            "{e}"
        );
        assert!(within(&e["timestamp"]), "{e}");
        if let Some(req) = e.get("request") {
            assert!(
                req["params"].is_object() && req["rawBody"].is_string(),
                "{e}"
            );
            assert!(within(&req["timestamp"]), "{e}");
        }
        if let Some(res) = e.get("response") {
            assert!(
                res["result"].is_object() && res["rawBody"].is_string(),
                "{e}"
            );
            assert!(within(&res["timestamp"]), "{e}");
        }
    }
    // The page's console line (Puppeteer watches the console too): logged once.
    let console: Vec<_> = logs
        .iter()
        .filter(|e| {
            e["method"] == "Runtime.consoleAPICalled" && e.to_string().contains("on /first")
        })
        .collect();
    assert_eq!(console.len(), 1, "{console:?}");

    // The navigations were answered, on a page of their own (not the browser's 0).
    for e in logs.iter().filter(|e| e["method"] == "Page.navigate") {
        assert!(e["response"]["result"]["frameId"].is_string(), "{e}");
        assert!(e["pageId"].as_u64().unwrap() > 0, "{e}");
        assert!(!e["sessionId"].as_str().unwrap().is_empty(), "{e}");
    }

    // Nothing of the token: not in the answer, not in the stored chunks.
    let token = r["token"].as_str().unwrap();
    assert!(token.len() > 40);
    let text = serde_json::to_string(logs).unwrap();
    assert!(!text.contains(token), "the token is in the log");
    assert!(
        !text.contains(&token[token.len() - 30..]),
        "a part of the token is in the log"
    );
    let sid = r["sessionId"].as_str().unwrap();
    let dir = s
        .data
        .path()
        .join("data/contexts/files")
        .join(&s.project)
        .join(sid)
        .join("logs");
    let chunks: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(!chunks.is_empty(), "chunks in {}", dir.display());
    for c in chunks {
        let stored = std::fs::read_to_string(&c).unwrap();
        assert!(
            !stored.contains(&token[token.len() - 30..]),
            "{}",
            c.display()
        );
    }
}

/// What happens in a page is logged whether or not a client watches it: a raw CDP client that
/// enables no domain opens a page that logs a console line and throws, navigates it again, then
/// crashes it; the log holds the console line (once), the page error, the second navigation and
/// the crash, each on the page's number, and none of the controller's own commands.
#[test]
fn a_pages_console_errors_navigations_and_crash_are_logged_unwatched() {
    let s = Server::start("25");
    let r = s.node_script("logs.mjs", "raw", &[]);
    assert_eq!(r["ok"], true, "{r}");
    let logs = r["logs"].as_array().unwrap();
    let of = |method: &str, text: &str| -> Vec<&Value> {
        logs.iter()
            .filter(|e| e["method"] == method && e.to_string().contains(text))
            .collect()
    };
    let console = of("Runtime.consoleAPICalled", "raw-console-line");
    assert_eq!(console.len(), 1, "{logs:?}");
    let error = of("Runtime.exceptionThrown", "raw-page-error");
    assert_eq!(error.len(), 1, "{logs:?}");
    let page = r["page"].as_str().unwrap();
    let navigated = of("Page.frameNavigated", "<title>raw-second</title>");
    assert!(!navigated.is_empty(), "{logs:?}");
    assert!(
        navigated[0]["response"]["result"]["frame"]["url"]
            .as_str()
            .is_some_and(|u| u == page),
        "{navigated:?}"
    );
    let page_id = console[0]["pageId"].as_u64().unwrap();
    assert!(page_id > 0, "the page's number, not the browser's");
    assert_eq!(error[0]["pageId"], page_id);
    assert_eq!(navigated[0]["pageId"], page_id);
    assert!(
        logs.iter().any(|e| e["method"]
            .as_str()
            .is_some_and(|m| m.ends_with("targetCrashed"))),
        "{logs:?}"
    );
    for own in [
        "Runtime.enable",
        "Page.enable",
        "Log.enable",
        "Target.attachToTarget",
    ] {
        let n = logs.iter().filter(|e| e["method"] == own).count();
        let client = usize::from(own == "Target.attachToTarget");
        assert_eq!(n, client, "{own}: only the client's commands are entries");
    }
}

/// `logSession: false`: the client's navigation is nowhere in the log.
#[test]
fn a_session_created_with_log_session_false_logs_nothing() {
    let s = Server::start("25");
    let r = s.node_script("logs.mjs", "unlogged", &[]);
    assert_eq!(r["ok"], true, "{r}");
    let logs = r["logs"].as_array().unwrap();
    assert!(
        !logs.iter().any(|e| e["method"] == "Page.navigate"),
        "{logs:?}"
    );
    assert_eq!(logs.len(), 0, "{logs:?}");
}
