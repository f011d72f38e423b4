//! A whole session at debug level — valid clients by query and header, discovery, refused
//! tokens, the live view — leaves no token or viewer credential text in the log, and stdout
//! holds only the connectUrl and liveViewUrl lines.

use nix::sys::signal::Signal;

use crate::support::{Controller, KEY, node, private_key_file, raw_http, token};

#[test]
fn no_token_text_in_a_debug_log() {
    let (mut c, s) = Controller::local(
        &[],
        &[("WALLCRAWLER_JWT_PRIVATE_KEY_FILE", private_key_file())],
    );
    let session = s.session_id();
    let other = token(KEY, "sess_someone-else", "", 600);
    let expired = crate::support::token(KEY, &session, "", 1);

    let r = node(
        "drive.mjs",
        &["--client", "puppeteer", "--url", &s.connect_url],
    );
    assert_eq!(r["ok"], true, "{r}");
    let http = format!("{}?signingKey={}", s.http_url(), s.token);
    let r = node("drive.mjs", &["--client", "playwright", "--url", &http]);
    assert_eq!(r["ok"], true, "{r}");
    let r = s.drive_with_bearer("playwright", &s.http_url());
    assert_eq!(r["ok"], true, "{r}");
    for bad in [&other, &format!("{}x", s.token)] {
        let a = raw_http(
            s.addr,
            format!("GET /json/version?signingKey={bad} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
        );
        assert!(a.starts_with("HTTP/1.1 401"), "{a}");
        let a = raw_http(
            s.addr,
            format!("GET /json/list HTTP/1.1\r\nAuthorization: Bearer {bad}\r\n\r\n").as_bytes(),
        );
        assert!(a.starts_with("HTTP/1.1 401"), "{a}");
    }
    let _ = expired;
    // The live view's page, by the credential `local` printed.
    let live = s
        .live_view_url
        .split_once("/viewer?t=")
        .expect("a viewer URL")
        .1
        .to_owned();
    let a = raw_http(
        s.addr,
        format!("GET /viewer?t={live} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
    );
    assert!(a.starts_with("HTTP/1.1 200"), "{a}");

    c.signal(Signal::SIGTERM);
    assert_eq!(c.wait_exit().code(), Some(0));
    let log = c.stderr.text();
    assert!(log.lines().count() > 20, "a debug log was captured");
    assert!(log.contains("DEBUG"), "the run logged at debug level");
    for secret in [s.token.as_str(), other.as_str(), live.as_str(), KEY] {
        // The signature part alone is enough to replay nothing, but no part may appear.
        for part in secret.split('.').filter(|p| p.len() >= 16) {
            assert!(!log.contains(part), "token/key text found in the log");
        }
    }
    assert!(!log.contains("signingKey="), "a query string was logged");
    assert!(!log.contains("t=ey"), "a viewer query string was logged");
    assert_eq!(
        c.stdout.len(),
        2,
        "stdout carries only the connectUrl and the liveViewUrl: {:?}",
        c.stdout
    );
}
