//! A client's `Wallcrawler.requestHandoff` on the local platform: answered with the session's
//! control-mode live view, which the local control plane minted for its controller, and the
//! pending handoff shown by `/debug` until it ends.

use super::*;

/// `GET url` (`http://host:port/path?query`): the status.
fn status_of(url: &str) -> u16 {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").expect("an http:// url");
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let mut stream = std::net::TcpStream::connect(authority).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nhost: {authority}\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer[9..12].parse().unwrap()
}

impl Server {
    /// The session's `/debug` answer's `handoff` (`Null` also while the session is not
    /// RUNNING yet: 409).
    fn debug_handoff(&self, id: &str) -> serde_json::Value {
        let (status, v) = self.call("GET", &format!("/v1/sessions/{id}/debug"), "");
        assert!(status == 200 || status == 409, "{status} {v}");
        v["handoff"].clone()
    }
}

/// A session created through the API on `s` (its own controller or a pool's); a raw client asks
/// for a person (timeout 3 s): answered with a URL the gateway serves, `/debug` shows the
/// handoff while it is pending and not once it timed out. The URL's credential.
fn a_handoff_round_trip(s: &Server) -> String {
    let v = create(s, &format!(r#"{{"projectId":"{}"}}"#, s.project));
    let id = v["id"].as_str().unwrap().to_owned();
    let url = v["connectUrl"].as_str().unwrap().to_owned();
    let (mut child, rx) = node::node_spawn(
        "handoff.mjs",
        &[
            "--url",
            &url,
            "--scenario",
            "ask",
            "--handoff-timeout",
            "3",
            "--wait",
        ],
    );
    // Pending: in the session's item, so in /debug.
    let pending = std::sync::Mutex::new(serde_json::Value::Null);
    wait_for("the handoff in /debug", || {
        let h = s.debug_handoff(&id);
        let seen = !h.is_null();
        *pending.lock().unwrap() = h;
        seen
    });
    let r = rx.recv_timeout(WAIT).expect("the ask scenario's answer");
    let _ = child.wait();
    assert_eq!(r["ok"], true, "{r}");
    let answer = &r["answer"]["result"];
    let handoff_url = answer["url"].as_str().unwrap_or_else(|| panic!("{r}"));
    let pending = pending.into_inner().unwrap();
    assert_eq!(pending["id"], answer["handoffId"], "{pending} {r}");
    assert_eq!(pending["reason"], "ask", "{pending}");
    // The URL is the session's viewer on the gateway's origin, served there.
    let gateway = s
        .gateway
        .as_deref()
        .unwrap()
        .replacen("ws://", "http://", 1);
    assert!(
        handoff_url.starts_with(&format!("{gateway}/viewer?t=")),
        "the viewer on the gateway's origin"
    );
    assert_eq!(status_of(handoff_url), 200);
    assert_eq!(r["events"][0]["params"]["timedOut"], true, "{r}");
    assert_eq!(
        r["events"][0]["params"]["handoffId"], answer["handoffId"],
        "{r}"
    );
    // Ended: gone from the item.
    wait_for("the handoff gone from /debug", || {
        s.debug_handoff(&id).is_null()
    });
    assert_eq!(
        s.call("GET", &format!("/v1/sessions/{id}/debug"), "").0,
        200
    );
    s.release(&id);
    handoff_url.split_once("?t=").unwrap().1.to_owned()
}

/// `serve` (`pool` warm controllers) logging to a file; the handoff round trip; then neither
/// the credential nor the URL is in the log, which has the controller's `handoff requested`.
fn round_trip_logged(pool: &str) {
    let controller = PathBuf::from(env!("CARGO_BIN_EXE_wallcrawler-control-plane"))
        .with_file_name("wallcrawler-controller");
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("serve.log");
    let file = std::fs::File::create(&log).unwrap();
    let s = Server::spawn_to(
        "25",
        &controller,
        &[("WALLCRAWLER_POOL_SIZE", pool)],
        Stdio::from(file),
    );
    let credential = a_handoff_round_trip(&s);
    s.stop();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("handoff requested"),
        "the controller's log is here"
    );
    assert!(!text.contains(&credential), "the credential is not logged");
    assert!(!text.contains("/viewer?t="), "no viewer URL is logged");
}

#[test]
fn a_cold_sessions_controller_answers_a_handoff_with_its_live_view() {
    round_trip_logged("0");
}

#[test]
fn a_pool_controller_answers_a_handoff_with_the_live_view_in_its_claim() {
    round_trip_logged("1");
}
