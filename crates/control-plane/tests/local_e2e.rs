//! The whole platform on one machine: `wallcrawler-control-plane serve` starting real
//! `wallcrawler-controller run` processes with real Chromium, driven by the stock Browserbase
//! SDK, Playwright and Stagehand (tests/node/platform.mjs).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(60);

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

struct Server {
    child: Child,
    base: String,
    key: String,
    project: String,
    data: tempfile::TempDir,
}

impl Server {
    fn start(create_wait: &str) -> Server {
        let bin = PathBuf::from(env!("CARGO_BIN_EXE_wallcrawler-control-plane"));
        let controller = bin.with_file_name("wallcrawler-controller");
        assert!(
            controller.is_file(),
            "build the controller first (cargo build --workspace): {}",
            controller.display()
        );
        let data = tempfile::tempdir().unwrap();
        let mut child = Command::new(&bin)
            .args(["serve", "--port", "0", "--data-dir"])
            .arg(data.path())
            .args(["--create-wait-seconds", create_wait])
            .env("WALLCRAWLER_CONTROLLER_BIN", &controller)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut get = |prefix: &str| {
            let l = lines.next().expect("a line").unwrap();
            l.strip_prefix(prefix)
                .unwrap_or_else(|| panic!("expected {prefix}, got {l}"))
                .to_owned()
        };
        let base = get("baseURL: ");
        let key = get("apiKey: ");
        let project = get("projectId: ");
        Server {
            child,
            base,
            key,
            project,
            data,
        }
    }

    fn node(&self, scenario: &str) -> serde_json::Value {
        let dir = workspace().join("tests/node");
        assert!(
            dir.join("node_modules").is_dir(),
            "run scripts/install-test-deps.sh first"
        );
        let out = Command::new("node")
            .arg(dir.join("platform.mjs"))
            .args([
                "--base",
                &self.base,
                "--key",
                &self.key,
                "--project",
                &self.project,
                "--scenario",
                scenario,
            ])
            .current_dir(&dir)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let last = stdout.lines().last().unwrap_or_default();
        serde_json::from_str(last).unwrap_or_else(|_| {
            panic!(
                "no JSON from {scenario}: {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
    }

    /// SIGTERM; the server stops the controllers it started before it exits.
    fn stop(mut self) {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                assert!(s.success(), "serve exited with {s}");
                break;
            }
            assert!(Instant::now() < deadline, "serve did not stop");
            // std has no way to wait for a child with a timeout; poll its status.
            std::thread::sleep(Duration::from_millis(20));
        }
        let profiles = self.data.path().join("profiles");
        let left: Vec<_> = std::fs::read_dir(&profiles)
            .map(|d| d.flatten().collect())
            .unwrap_or_default();
        assert!(
            left.is_empty(),
            "controllers left profiles behind: {left:?}"
        );
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn browserbase_sdk_and_playwright_persist_a_context_across_sessions() {
    let s = Server::start("25");
    let r = s.node("persist");
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["firstStatusAfterRelease"], "COMPLETED", "{r}");
    assert_eq!(r["firstEnded"], "COMPLETED", "{r}");
    assert!(r["firstProxyBytes"].as_u64().unwrap_or(0) > 0, "{r}");
    assert_eq!(
        r["secondCookies"]["pw"], "from-first-session",
        "the cookie survived through the context: {r}"
    );
    // The session documents the controllers wrote are the API's source of truth.
    let docs = std::fs::read_dir(s.data.path().join("sessions"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .count();
    assert_eq!(docs, 2);
    s.stop();
}

#[test]
fn stagehand_drives_a_session_created_through_the_api() {
    let s = Server::start("25");
    let r = s.node("stagehand");
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["eval"], 2, "{r}");
    assert_eq!(r["title"], "stagehand", "{r}");
    assert!(
        r["debugPages"].as_u64().unwrap_or(0) >= 1,
        "debug lists the live pages: {r}"
    );
    assert_eq!(r["debugWsUrl"], true, "{r}");
    s.stop();
}

#[test]
fn a_second_persisting_session_on_a_busy_context_gets_409_then_waits_its_turn() {
    let s = Server::start("6");
    let r = s.node("busy");
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["conflict"]["status"], 409, "{r}");
    assert!(
        r["conflict"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("still saving it"),
        "{r}"
    );
    assert_eq!(r["secondStatus"], "RUNNING", "{r}");
    assert_eq!(r["firstEndedBeforeSecond"], true, "{r}");
    s.stop();
}
