//! The whole platform on one machine: `wallcrawler-control-plane serve` starting real
//! `wallcrawler-controller run` processes with real Chromium, driven by the stock Browserbase
//! SDK, Playwright and Stagehand (tests/node/platform.mjs).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use wallcrawler_contract::session_doc::SessionDoc;
use wallcrawler_local::session_dir::DirStore;
use wallcrawler_testkit::node;

/// The browser a session asks for: viewport, locales, no headless tells, certificates,
/// unsupported fields named.
mod browser;
/// The dashboard as a person uses it: key pasted, the session listed and opened (live view,
/// log streamed, no recording), hostile metadata shown as text, the key in headers only.
mod dashboard;
/// The data directory ours or refused; no planted link followed.
mod data_dir;
/// Another user of the machine reaches no browser's DevTools (warm or claimed).
mod devtools;
/// Every download captured, stored and served as a zip.
mod downloads;
/// A session's egress: its proxies (routed by host, fail closed, counted), its allowed
/// domains, WebRTC behind the proxy, the machine's loopback refused unless allowed.
mod egress;
/// A client's handoff answered with the live view the local platform minted.
mod handoff;
/// A page's `debuggerUrl` reaches that page alone and dies with its credential.
mod inspector;
/// A session's log: read while it runs and after it ended, secrets never in it, nothing with
/// `logSession: false`.
mod logs;
/// A session's recording: its pages' video while it runs and after, the playlist's signed
/// segments and the MP4 download showing the page, nothing with `recordSession: false`,
/// hostile page ids and other projects refused.
mod recordings;

const WAIT: Duration = Duration::from_secs(60);

/// `serve`'s direct mode: no connect gateway, each create waits for its controller's READY
/// (the tests of the create's own waiting, and those whose controller is a stand-in script).
const DIRECT: (&str, &str) = ("WALLCRAWLER_DIRECT_CONNECT", "true");

/// `serve --tls`: the gateway serves `wss://` with a local authority's certificate.
const TLS: (&str, &str) = ("WALLCRAWLER_TLS", "true");

struct Server {
    child: Child,
    base: String,
    /// The connect gateway's `ws://` (`wss://` with `--tls`) base (`None` in direct mode).
    gateway: Option<String>,
    /// The local certificate authority's PEM (`--tls`).
    ca: Option<String>,
    key: String,
    project: String,
    data: tempfile::TempDir,
}

impl Server {
    fn start(create_wait: &str) -> Server {
        let controller = controller_bin();
        assert!(
            controller.is_file(),
            "build the controller first (cargo build --workspace): {}",
            controller.display()
        );
        Self::spawn(create_wait, &controller)
    }

    /// `serve` under umask 022 (the usual default, explicit so the files' modes are tested
    /// against it) with `controller` as the controller binary, data in a new directory.
    fn spawn(create_wait: &str, controller: &std::path::Path) -> Server {
        Self::spawn_with(create_wait, controller, &[])
    }

    /// [`Server::spawn`] with more environment for `serve` (and the settings it passes
    /// through to its controllers).
    fn spawn_with(create_wait: &str, controller: &std::path::Path, env: &[(&str, &str)]) -> Server {
        Self::spawn_to(create_wait, controller, env, Stdio::inherit())
    }

    /// [`Server::spawn_with`], `serve`'s log (and its controllers') going to `stderr`.
    fn spawn_to(
        create_wait: &str,
        controller: &std::path::Path,
        env: &[(&str, &str)],
        stderr: Stdio,
    ) -> Server {
        let bin = PathBuf::from(env!("CARGO_BIN_EXE_wallcrawler-control-plane"));
        let data = tempfile::tempdir().unwrap();
        let data_dir = data.path().join("data");
        let mut child = Command::new("sh")
            .args(["-c", "umask 022 && exec \"$0\" \"$@\""])
            .arg(&bin)
            .args(["serve", "--port", "0", "--data-dir"])
            .arg(&data_dir)
            .args(["--create-wait-seconds", create_wait])
            .env("WALLCRAWLER_CONTROLLER_BIN", controller)
            .env("RUST_LOG", "info")
            // Pages served on this machine's loopback are what these tests browse: allowed
            // through every controller's egress (a test of the default refusal unsets it).
            .env("EGRESS_ALLOW", "127.0.0.0/8,::1")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
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
        let direct = env.iter().any(|(k, v)| *k == DIRECT.0 && *v == DIRECT.1);
        let gateway = (!direct).then(|| get("gateway: "));
        let tls = env.iter().any(|(k, v)| *k == TLS.0 && *v == TLS.1);
        let ca = tls.then(|| get("caCert: "));
        Server {
            child,
            base,
            gateway,
            ca,
            key,
            project,
            data,
        }
    }

    fn node(&self, scenario: &str) -> serde_json::Value {
        self.node_with_env(scenario, &[])
    }

    /// [`Server::node`] for a scenario that must pass (`ok`): its answer.
    #[track_caller]
    fn passing(&self, scenario: &str) -> serde_json::Value {
        let r = self.node(scenario);
        assert_eq!(r["ok"], true, "{r}");
        r
    }

    /// [`Server::node`] with more environment for Node (e.g. `NODE_EXTRA_CA_CERTS`).
    fn node_with_env(&self, scenario: &str, env: &[(&str, &str)]) -> serde_json::Value {
        self.node_script("platform.mjs", scenario, env)
    }

    /// A scenario of `script` (in tests/node) against this platform, with more environment.
    fn node_script(&self, script: &str, scenario: &str, env: &[(&str, &str)]) -> serde_json::Value {
        let out = node::command(script)
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
            // Stagehand's own SDK client reads it; any client built without a baseURL then
            // calls the platform, never api.browserbase.com.
            .env("BROWSERBASE_BASE_URL", &self.base)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        node::output_json(scenario, &out)
    }

    /// The data directory.
    fn dir(&self) -> PathBuf {
        self.data.path().join("data")
    }

    /// The session documents in the data directory's `sessions/`.
    fn session_docs(&self) -> Vec<PathBuf> {
        std::fs::read_dir(self.dir().join("sessions"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect()
    }

    /// One request with the API key; the status and JSON body.
    fn call(&self, method: &str, path: &str, body: &str) -> (u16, serde_json::Value) {
        self.call_for(&self.project, method, path, body)
    }

    /// [`Server::call`] for project `project` of the key (`x-wc-project-id`).
    fn call_for(
        &self,
        project: &str,
        method: &str,
        path: &str,
        body: &str,
    ) -> (u16, serde_json::Value) {
        use std::io::{Read, Write};
        let authority = self.base.trim_start_matches("http://");
        let mut stream = std::net::TcpStream::connect(authority).unwrap();
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nhost: {authority}\r\nx-wc-api-key: {}\r\n\
             x-wc-project-id: {project}\r\n\
             content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            self.key,
            body.len()
        )
        .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        let status = answer[9..12].parse().unwrap();
        let json = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        (status, serde_json::from_str(json).unwrap_or_default())
    }

    /// [`Server::stop`], the data directory kept for the caller to look into.
    fn stop_keeping_data(mut self) -> tempfile::TempDir {
        let data = std::mem::replace(&mut self.data, tempfile::tempdir().unwrap());
        let profiles = data.path().join("data").join("profiles");
        self.stop();
        assert_no_profile_left(&profiles);
        data
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
        assert_no_profile_left(&self.dir().join("profiles"));
    }
}

/// Asserts the controllers left no profile behind in `profiles`.
fn assert_no_profile_left(profiles: &Path) {
    let left: Vec<_> = std::fs::read_dir(profiles)
        .map(|d| d.flatten().collect())
        .unwrap_or_default();
    assert!(
        left.is_empty(),
        "controllers left profiles behind: {left:?}"
    );
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
    let r = s.passing("persist");
    assert_eq!(r["firstStatusAfterRelease"], "COMPLETED", "{r}");
    assert_eq!(r["firstEnded"], "COMPLETED", "{r}");
    // Written with endedAt: the bytes through the session's proxies, none here.
    assert_eq!(r["firstProxyBytes"].as_u64(), Some(0), "{r}");
    assert_eq!(
        r["secondCookies"]["pw"], "from-first-session",
        "the cookie survived through the context: {r}"
    );
    // The session documents the controllers wrote are the API's source of truth.
    let docs = s.session_docs().len();
    assert_eq!(docs, 2);
    s.stop();
}

#[test]
fn stagehand_drives_a_session_created_through_the_api() {
    let s = Server::start("25");
    let r = s.passing("stagehand");
    assert_eq!(r["eval"], 2, "{r}");
    assert_eq!(r["title"], "stagehand", "{r}");
    assert!(
        r["debugPages"].as_u64().unwrap_or(0) >= 1,
        "debug lists the live pages: {r}"
    );
    assert_eq!(r["debugWsUrl"], true, "{r}");
    // The SDK's SessionLiveURLs filled: the viewer on the session's proxy, a view-only
    // credential for `mode: "view"`, bounded by `expiresIn`.
    assert_eq!(r["debugShape"], serde_json::json!([]), "{r}");
    assert_eq!(r["debugOnConnectHost"], true, "{r}");
    assert_eq!(
        r["viewOnlyClaims"],
        serde_json::json!({"aud": ["wallcrawler-viewer"], "mode": "view", "ttl": 60, "page": null}),
        "{r}"
    );
    s.stop();
}

/// Stagehand with `env: "BROWSERBASE"` and `disableAPI: true`, pointed at the platform by
/// `BROWSERBASE_BASE_URL`, creates its session through the SDK, drives it and closes — without
/// releasing it. The session ends by itself once the disconnect grace after its last client
/// is over (one second here, passed through `serve` to the controller).
#[test]
fn stagehand_env_browserbase_session_ends_after_its_client_left_without_a_release() {
    let controller = controller_bin();
    let s = Server::spawn_with("25", &controller, &[("CDP_DISCONNECT_GRACE", "1")]);
    let r = s.passing("stagehand-browserbase");
    assert_eq!(r["eval"], 2, "{r}");
    assert_eq!(r["title"], "stagehand", "{r}");
    let id = r["sessionId"].as_str().expect("Stagehand's session id");
    let deadline = Instant::now() + WAIT;
    let ended = loop {
        let (status, v) = s.call("GET", &format!("/v1/sessions/{id}"), "");
        assert_eq!(status, 200, "{v}");
        if v["status"] == "COMPLETED" && v["endedAt"].is_string() {
            break v;
        }
        assert!(
            Instant::now() < deadline,
            "the session never ended by itself: {v}"
        );
        // The API is the only view of the session a client has: poll it.
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(
        ended["userMetadata"]["stagehand"], "true",
        "Stagehand created it: {ended}"
    );
    s.stop();
}

/// The script `body` as `dir/name`, executable (mode 0755).
fn executable(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, body).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path
}

/// A directory of gates with a Chromium wrapper in it, `chromium`: `template` with `@GATE@` the
/// directory. Chrome (the wrapper) runs as nobody when `serve` runs as root: it takes and leaves
/// gates, so anyone may write there.
fn gated_chromium(template: &str) -> (tempfile::TempDir, PathBuf) {
    let gate = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        gate.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let script = template.replace("@GATE@", &gate.path().display().to_string());
    let wrapper = executable(gate.path(), "chromium", &script);
    (gate, wrapper)
}

/// A controller that exits at once, as one whose browser cannot start.
const FAILING_CONTROLLER: &str = "#!/bin/sh\nexit 1\n";

/// The stock SDK, with its own retry policy (2 retries of 408/409/429/5xx), sends a create the
/// platform fails and refused downloads, logs and recording exactly once: `x-should-retry:
/// false` stops it, so no duplicate session is started.
#[test]
fn the_stock_sdk_sends_a_failed_create_and_a_refusal_only_once() {
    let scripts = tempfile::tempdir().unwrap();
    let failing = executable(scripts.path(), "failing-controller", FAILING_CONTROLLER);
    // One controller per session (a failing pool controller never takes the claim: the create
    // would wait and answer PENDING instead of failing).
    let s = Server::spawn_with("25", &failing, &[("WALLCRAWLER_POOL_SIZE", "0"), DIRECT]);
    let r = s.passing("no-retry");
    let once = |status: u16| serde_json::json!([status, 1]);
    let got = |what: &str| serde_json::json!([r[what]["status"], r[what]["requests"]]);
    assert_eq!(got("create"), once(500), "{r}");
    // Implemented now: an unknown session is refused, once.
    for endpoint in ["downloads", "logs", "recording"] {
        assert_eq!(got(endpoint), once(404), "{endpoint}: {r}");
    }
    let sessions = s.session_docs();
    assert_eq!(sessions.len(), 1, "one create, one session: {sessions:?}");
    s.stop();
}

/// A controller that starts and waits to be stopped, never READY: the create answers PENDING.
const WAITING_CONTROLLER: &str = "#!/bin/sh\nexec sleep 120\n";

/// The stock Node SDK's `extensions.create({ file })` uploads a zip as Browserbase's multipart
/// `file`; `retrieve` and `delete` work on its id; a session created with it is accepted and
/// records it (this controller never starts, so nothing loads it), one with an unknown id is refused; the
/// archive is kept under the data directory's `contexts/extensions/<projectId>/` until the
/// delete.
#[test]
fn the_stock_sdk_uploads_an_extension_creates_a_session_with_it_and_deletes_it() {
    let scripts = tempfile::tempdir().unwrap();
    let waiting = executable(scripts.path(), "waiting-controller", WAITING_CONTROLLER);
    let zip_path = scripts.path().join("mark.zip");
    let manifest = br#"{"manifest_version":3,"name":"Mark","version":"1.0"}"#;
    std::fs::write(&zip_path, zip_of(&[("manifest.json", manifest)])).unwrap();
    let s = Server::spawn_with("1", &waiting, &[("WALLCRAWLER_POOL_SIZE", "0"), DIRECT]);
    let r = s.node_with_env(
        "extensions",
        &[("EXTENSION_ZIP", zip_path.to_str().unwrap())],
    );
    assert_eq!(r["ok"], true, "{r}");
    let id = r["ext"]["id"].as_str().unwrap();
    assert_eq!(r["ext"]["fileName"], "mark.zip", "{r}");
    assert_eq!(r["ext"]["projectId"], s.project.as_str(), "{r}");
    assert_eq!(r["got"], r["ext"], "{r}");
    assert_eq!(r["unknown"]["status"], 404, "{r}");
    assert_eq!(r["after"]["status"], 404, "{r}");
    let sid = r["session"]["id"].as_str().unwrap();
    let doc = DirStore::new(s.dir().join("sessions"))
        .get(sid)
        .unwrap()
        .unwrap();
    assert_eq!(doc.extension_id.as_deref(), Some(id));
    let key = doc.extension_key.unwrap();
    assert!(
        key.starts_with(&format!("extensions/{}/", s.project)),
        "{key}"
    );
    assert!(
        !s.dir().join("contexts").join(&key).exists(),
        "the archive is removed with the last record"
    );
    s.stop();
}

/// The stock Python SDK's `extensions.create(file=…)`, `retrieve` and `delete`, as written,
/// against the local platform: its multipart upload is taken, the extension is the project's,
/// and after the delete it is gone (404, archive removed).
#[test]
fn the_stock_python_sdk_creates_retrieves_and_deletes_an_extension() {
    let scripts = tempfile::tempdir().unwrap();
    let zip_path = scripts.path().join("py-mark.zip");
    let manifest = br#"{"manifest_version":3,"name":"PyMark","version":"1.0"}"#;
    std::fs::write(&zip_path, zip_of(&[("manifest.json", manifest)])).unwrap();
    // No session is created: no controller is ever started.
    let none = scripts.path().join("no-controller");
    let s = Server::spawn_with("1", &none, &[("WALLCRAWLER_POOL_SIZE", "0"), DIRECT]);
    const SCRIPT: &str = "import json, sys\n\
        from browserbase import Browserbase, NotFoundError\n\
        bb = Browserbase(api_key=sys.argv[1], base_url=sys.argv[2])\n\
        ext = bb.extensions.create(file=open(sys.argv[3], 'rb'))\n\
        got = bb.extensions.retrieve(ext.id)\n\
        bb.extensions.delete(ext.id)\n\
        try:\n    bb.extensions.retrieve(ext.id); after = 200\n\
        except NotFoundError:\n    after = 404\n\
        print(json.dumps({'ext': ext.to_dict(), 'got': got.to_dict(), 'after': after}))\n";
    let out = std::process::Command::new(wallcrawler_testkit::repo_root().join(".venv/bin/python"))
        .args(["-c", SCRIPT, &s.key, &s.base])
        .arg(&zip_path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = r["ext"]["id"].as_str().unwrap();
    assert!(id.starts_with("ext_"), "{r}");
    assert_eq!(r["ext"]["fileName"], "py-mark.zip", "{r}");
    assert_eq!(r["ext"]["projectId"], s.project.as_str(), "{r}");
    assert_eq!(r["got"], r["ext"], "{r}");
    assert_eq!(r["after"], 404, "{r}");
    assert!(
        !s.dir()
            .join("contexts/extensions")
            .join(&s.project)
            .read_dir()
            .unwrap()
            .flatten()
            .any(|e| e.path().extension().is_some_and(|x| x == "zip")),
        "the archive is removed with its only record"
    );
    s.stop();
}

/// A platform whose sessions a test writes where it keeps them: no warm controller, and any it
/// would start fails at once ([`FAILING_CONTROLLER`], in the directory returned). With the store
/// of its session documents.
fn stored_sessions_platform() -> (Server, DirStore, tempfile::TempDir) {
    let scripts = tempfile::tempdir().unwrap();
    let failing = executable(scripts.path(), "failing-controller", FAILING_CONTROLLER);
    let s = Server::spawn_with("5", &failing, &[("WALLCRAWLER_POOL_SIZE", "0"), DIRECT]);
    let store = DirStore::new(s.dir().join("sessions"));
    (s, store, scripts)
}

/// The document of a stopped session `id` of `project`, created `i` milliseconds after the
/// others' epoch, its token stored.
fn stored_doc(project: &str, id: &str, i: u64) -> SessionDoc {
    let mut d = SessionDoc {
        session_id: id.to_owned(),
        project_id: project.to_owned(),
        created_at: wallcrawler_contract::time::iso8601_millis(1_767_225_600_000 + i),
        expires_at: 1_767_229_200,
        signing_key: Some("a-token".into()),
        ..Default::default()
    };
    d.set_status(wallcrawler_contract::InternalStatus::Stopped);
    d
}

/// The stock SDK pages through more sessions than one page with its paging parameters, and a
/// tampered cursor is refused with a 400 (the sessions are written where the platform keeps
/// them: no controller runs).
#[test]
fn the_stock_sdk_pages_through_the_sessions_and_a_tampered_cursor_is_refused() {
    let (s, store, _scripts) = stored_sessions_platform();
    let mut ids = Vec::new();
    for i in 0..5u64 {
        let d = stored_doc(&s.project, &format!("sess_paging_{i}"), i);
        store.create(&d).unwrap();
        ids.push(d.session_id);
    }
    let r = s.passing("paging");
    assert_eq!(r["ids"], serde_json::json!(ids), "{r}");
    assert_eq!(r["pages"], serde_json::json!([2, 2, 1]), "{r}");
    assert_eq!(r["refused"]["status"], 400, "{r}");
    assert!(
        r["refused"]["message"]
            .as_str()
            .unwrap()
            .contains("cursor is not valid"),
        "{r}"
    );
    s.stop();
}

/// The stock SDK, with its own retry policy, lists by metadata query (`q`, with `status` too)
/// and gets only the matching sessions; a malformed `q`, `debug` of a released session (409), a
/// malformed id (the file store's refusal was a 500) and userMetadata over 512 characters are
/// each refused with one request (`x-should-retry: false`), and the refused create starts
/// nothing. The sessions are written where the platform keeps them: no controller runs.
#[test]
fn the_stock_sdk_lists_by_metadata_query_and_each_refusal_costs_one_request() {
    let (s, store, _scripts) = stored_sessions_platform();
    use wallcrawler_contract::InternalStatus::{Failed, Stopped};
    let shipped = serde_json::json!({"order": {"status": "shipped"}, "env": "staging"});
    for (i, (id, status, metadata)) in [
        ("sess_edges_ship_done", Stopped, Some(shipped.clone())),
        (
            "sess_edges_ship_err",
            Failed,
            Some(serde_json::json!({"order": {"status": "shipped"}})),
        ),
        (
            "sess_edges_pending_order",
            Stopped,
            Some(serde_json::json!({"order": {"status": "pending"}, "env": "staging"})),
        ),
        ("sess_edges_plain", Stopped, None),
        ("sess_edges_released", Stopped, Some(shipped.clone())),
    ]
    .into_iter()
    .enumerate()
    {
        let mut d = SessionDoc {
            user_metadata: metadata,
            ..stored_doc(&s.project, id, i as u64)
        };
        d.set_status(status);
        store.create(&d).unwrap();
    }
    let r = s.passing("edges");
    let ids = |v: &[&str]| serde_json::json!(v);
    assert_eq!(
        r["shipped"],
        ids(&[
            "sess_edges_released",
            "sess_edges_ship_done",
            "sess_edges_ship_err"
        ]),
        "{r}"
    );
    assert_eq!(
        r["shippedCompleted"],
        ids(&["sess_edges_ship_done", "sess_edges_released"]),
        "{r}"
    );
    assert_eq!(
        r["staging"],
        ids(&[
            "sess_edges_pending_order",
            "sess_edges_released",
            "sess_edges_ship_done"
        ]),
        "{r}"
    );
    assert_eq!(r["lost"], ids(&[]), "{r}");
    for (what, status, says) in [
        ("badQuery", 400, "q must have the form"),
        ("debugReleased", 409, "is not running"),
        ("malformedId", 400, "id must be 1 to 128"),
        ("bigMetadata", 400, "at most 512 characters"),
    ] {
        assert_eq!(r[what]["status"], status, "{what}: {r}");
        assert_eq!(r[what]["requests"], 1, "{what}: {r}");
        assert!(
            r[what]["message"].as_str().unwrap_or("").contains(says),
            "{what}: {r}"
        );
    }
    let sessions = s.session_docs().len();
    assert_eq!(sessions, 5, "the refused create started nothing");
    s.stop();
}

#[test]
fn a_second_persisting_session_on_a_busy_context_gets_409_then_waits_its_turn() {
    let s = Server::start("6");
    let r = s.passing("busy");
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

/// A stand-in controller: records the proxy address it was told to listen on, then runs until
/// `<data>/exit-now` exists and exits 3 (a task that died under its session). It also ends
/// when the data directory is gone, so a failed test leaves no process behind.
const FAKE_CONTROLLER: &str = r#"#!/bin/sh
d="$SESSIONS_DIR/.."
env > "$d/env-$SESSION_ID"
printf %s "$CDP_PROXY_HOST" > "$d/host-$SESSION_ID"
printf '%s %s' "$CDP_DISCONNECT_TIMEOUT" "$CDP_DISCONNECT_GRACE" > "$d/idle-$SESSION_ID"
while [ -d "$SESSIONS_DIR" ] && [ ! -e "$d/exit-now" ]; do sleep 0.05; done
exit 3
"#;

fn mode(p: &std::path::Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o777
}

/// Polls `cond` (a file the server writes) until it holds.
fn wait_for(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn local_platform_files_are_private_limits_hold_and_exited_controllers_give_slots_back() {
    let scripts = tempfile::tempdir().unwrap();
    let fake = executable(scripts.path(), "fake-controller", FAKE_CONTROLLER);
    let s = Server::spawn_with(
        "1",
        &fake,
        &[
            ("CDP_DISCONNECT_TIMEOUT", "300"),
            ("CDP_DISCONNECT_GRACE", "7"),
            ("WALLCRAWLER_POOL_SIZE", "0"),
            DIRECT,
        ],
    );
    let dir = s.dir();
    let (status, c) = s.call("POST", "/v1/contexts", "{}");
    assert_eq!(status, 201, "{c}");
    let ctx = c["id"].as_str().unwrap().to_owned();

    // 12 simultaneous creates in the local project (concurrency 10): exactly 10 sessions.
    let answers: Vec<(u16, serde_json::Value)> = std::thread::scope(|scope| {
        let calls: Vec<_> = (0..12)
            .map(|_| scope.spawn(|| s.call("POST", "/v1/sessions", "{}")))
            .collect();
        calls.into_iter().map(|c| c.join().unwrap()).collect()
    });
    let created: Vec<String> = answers
        .iter()
        .filter(|(st, _)| *st == 201)
        .map(|(_, v)| v["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(created.len(), 10, "{answers:?}");
    for (st, v) in answers.iter().filter(|(st, _)| *st != 201) {
        assert_eq!(*st, 429, "{v}");
        assert!(
            v["message"].as_str().unwrap().contains("concurrency"),
            "{v}"
        );
    }
    let (st, v) = s.call(
        "POST",
        "/v1/sessions",
        &format!(r#"{{"browserSettings": {{"context": {{"id": "{ctx}", "persist": true}}}}}}"#),
    );
    assert_eq!(st, 429, "{v}");

    // The token private key, generated at first start, kept in local.json (0600, below).
    let identity: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("local.json")).unwrap()).unwrap();
    let private_pem = identity["privateKey"]
        .as_str()
        .expect("privateKey in local.json");
    let private_key = wallcrawler_contract::SigningKey::from_pem(private_pem).unwrap();
    let private_body: String = private_pem
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect();

    // Every file holding a secret is 0600 and the data directory 0700, under umask 022.
    assert_eq!(mode(&dir), 0o700, "data directory");
    assert_eq!(mode(&dir.join("sessions")), 0o700, "sessions directory");
    for f in [
        "local.json",
        "api-keys.json",
        "projects.json",
        "contexts.json",
        "active-sessions.json",
    ] {
        assert_eq!(mode(&dir.join(f)), 0o600, "{f}");
    }
    for id in &created {
        let doc = dir.join("sessions").join(format!("{id}.json"));
        let text = std::fs::read_to_string(&doc).unwrap();
        assert!(
            !text.contains("signingKey") && !text.contains("eyJ"),
            "the document holds no token: {text}"
        );
        assert_eq!(mode(&doc), 0o600, "{id}.json");
        // The controllers the platform starts listen on loopback only.
        let host = dir.join(format!("host-{id}"));
        wait_for("the controller started", || host.exists());
        assert_eq!(std::fs::read_to_string(&host).unwrap(), "127.0.0.1");
        // Controllers get the public key only; the private key stays in local.json.
        let env = std::fs::read_to_string(dir.join(format!("env-{id}"))).unwrap();
        let public = private_key.verifying_key().to_pem();
        assert!(
            env.contains(&format!("WALLCRAWLER_JWT_PUBLIC_KEY={}", public.trim_end())),
            "{env}"
        );
        assert!(!env.contains("PRIVATE KEY") && !env.contains(&private_body));
        // Idle settings set for `serve` reach its controllers.
        let idle = dir.join(format!("idle-{id}"));
        wait_for("the controller wrote its idle settings", || {
            std::fs::read_to_string(&idle).is_ok_and(|t| t == "300 7")
        });
    }

    // The controllers exit under their sessions: each is marked FAILED and gives its slot
    // back, so the project takes new sessions again (a persisting one: the context is free).
    std::fs::write(dir.join("exit-now"), b"").unwrap();
    wait_for("every slot given back", || {
        std::fs::read_to_string(dir.join("active-sessions.json")).is_ok_and(|t| t.trim() == "{}")
    });
    for id in &created {
        let (st, v) = s.call("GET", &format!("/v1/sessions/{id}"), "");
        assert_eq!((st, v["status"].as_str()), (200, Some("ERROR")), "{v}");
    }
    std::fs::remove_file(dir.join("exit-now")).unwrap();
    let (st, v) = s.call(
        "POST",
        "/v1/sessions",
        &format!(r#"{{"browserSettings": {{"context": {{"id": "{ctx}", "persist": true}}}}}}"#),
    );
    assert_eq!(st, 201, "{v}");
    let contexts = std::fs::read_to_string(dir.join("contexts.json")).unwrap();
    assert!(
        contexts.contains(v["id"].as_str().unwrap()),
        "the new writer holds the lease: {contexts}"
    );
    s.stop();
}

// ---------------------------------------------------------------------------------------------
// The warm pool (`serve --pool N`, the default): real controllers in pool mode taking claims
// from `<data>/claims`, with Chromium behind a wrapper whose gates the tests open.

/// Chromium behind two gates in `$GATE`: a warm launch (the pool controller's first Chrome)
/// waits until `warm` exists; a launch on a claimed context's profile (`<warm profile>.claimed`) hangs (as a task that dies
/// before READY would) when `hang-claimed` exists, which it removes so only one launch hangs
/// (and it says so in `hanging`).
const GATED_CHROMIUM: &str = r#"#!/bin/sh
gate="@GATE@"
case "$*" in
  *.claimed*)
    if rm "$gate/hang-claimed" 2>/dev/null; then : > "$gate/hanging"; exec sleep 600; fi ;;
  *)
    while [ ! -e "$gate/warm" ]; do sleep 0.02; done ;;
esac
exec /usr/lib/chromium/chromium "$@"
"#;

/// A pool server whose controllers run [`GATED_CHROMIUM`] (gates in the returned directory).
fn gated_pool(pool: &str, create_wait: &str) -> (Server, tempfile::TempDir) {
    gated_pool_with(pool, create_wait, &[])
}

/// [`gated_pool`] with more environment for `serve`.
fn gated_pool_with(
    pool: &str,
    create_wait: &str,
    extra: &[(&str, &str)],
) -> (Server, tempfile::TempDir) {
    let (gate, wrapper) = gated_chromium(GATED_CHROMIUM);
    let controller = controller_bin();
    let chrome = wrapper.display().to_string();
    let mut env = vec![
        ("WALLCRAWLER_POOL_SIZE", pool),
        ("CHROME_PATH", chrome.as_str()),
        DIRECT,
    ];
    env.extend_from_slice(extra);
    let s = Server::spawn_with(create_wait, &controller, &env);
    (s, gate)
}

fn open_gate(gate: &tempfile::TempDir, name: &str) {
    std::fs::write(gate.path().join(name), b"").unwrap();
}

impl Server {
    /// The session document as the controllers wrote it.
    fn doc(&self, id: &str) -> serde_json::Value {
        let p = self.dir().join("sessions").join(format!("{id}.json"));
        serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap()
    }

    /// Pool controller `n` of this server (names are `pool-<serve's pid>-<n>`).
    fn pool_name(&self, n: u32) -> String {
        format!("pool-{}-{n}", self.child.id())
    }

    /// Asserts that session `id` was served by one of this server's pool controllers: which
    /// one is a race when claims wait, since a claim nobody took starts a replacement at once
    /// and the first to warm up takes it.
    fn assert_served_by_the_pool(&self, id: &str) {
        let doc = self.doc(id);
        let server = doc["ecsTaskArn"].as_str().unwrap_or_default();
        let prefix = format!("pool-{}-", self.child.id());
        assert!(
            server
                .strip_prefix(&prefix)
                .is_some_and(|n| n.parse::<u32>().is_ok()),
            "served by {server:?}, not a pool controller of this server: {doc}"
        );
    }

    /// Polls the session through the API until `cond` holds; the last answer.
    fn wait_session(
        &self,
        id: &str,
        what: &str,
        cond: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = Instant::now() + WAIT;
        loop {
            let (status, v) = self.call("GET", &format!("/v1/sessions/{id}"), "");
            assert_eq!(status, 200, "{v}");
            if cond(&v) {
                return v;
            }
            assert!(Instant::now() < deadline, "{what}: {v}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn release(&self, id: &str) {
        let (status, v) = self.call(
            "POST",
            &format!("/v1/sessions/{id}"),
            &format!(
                r#"{{"projectId":"{}","status":"REQUEST_RELEASE"}}"#,
                self.project
            ),
        );
        assert_eq!(status, 200, "{v}");
    }

    /// Claim files in `<data>/claims/<sub>`.
    fn claims(&self, sub: &str) -> Vec<String> {
        std::fs::read_dir(self.dir().join("claims").join(sub))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Puppeteer connects to `url`, evaluates 1+1 and disconnects.
fn drive(url: &str) {
    drive_with("puppeteer", url);
}

fn create(s: &Server, body: &str) -> serde_json::Value {
    let (status, v) = s.call("POST", "/v1/sessions", body);
    assert_eq!(status, 201, "{v}");
    v
}

/// A create of `s.project`'s while no controller is warm: it answers PENDING without a
/// connectUrl. The session's id.
fn create_pending(s: &Server) -> String {
    let v = create(s, &format!(r#"{{"projectId":"{}"}}"#, s.project));
    assert_eq!(v["status"], "PENDING", "{v}");
    assert!(v["connectUrl"].is_null(), "{v}");
    v["id"].as_str().unwrap().to_owned()
}

/// The pid of the process whose environment has `POOL_TASK_NAME=<name>` (a pool controller).
fn pool_controller_pid(name: &str) -> Option<i32> {
    let needle = format!("POOL_TASK_NAME={name}");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let env = std::fs::read(e.path().join("environ")).ok()?;
        env.split(|b| *b == 0)
            .any(|v| v == needle.as_bytes())
            .then_some(pid)
    })
}

#[test]
fn pool_controllers_answer_creates_at_once_each_session_with_its_own_controller() {
    let (s, gate) = gated_pool("2", "25");
    open_gate(&gate, "warm");
    let project = s.project.clone();
    let body = format!(r#"{{"projectId":"{project}"}}"#);
    let (a, b) = std::thread::scope(|t| {
        let first = t.spawn(|| create(&s, &body));
        let second = t.spawn(|| create(&s, &body));
        (first.join().unwrap(), second.join().unwrap())
    });
    for v in [&a, &b] {
        assert_eq!(v["status"], "RUNNING", "{v}");
        drive(v["connectUrl"].as_str().unwrap());
    }
    let owner = |v: &serde_json::Value| {
        s.doc(v["id"].as_str().unwrap())["ecsTaskArn"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (oa, ob) = (owner(&a), owner(&b));
    assert_ne!(oa, ob, "two sessions, two controllers");
    for o in [&oa, &ob] {
        assert!(o.starts_with(&format!("pool-{}-", s.child.id())), "{o}");
    }
    // Each claim was taken once and is done; both sessions end through their own controller.
    assert!(s.claims("new").is_empty() && s.claims("taken").is_empty());
    s.release(a["id"].as_str().unwrap());
    s.release(b["id"].as_str().unwrap());
    for v in [&a, &b] {
        s.wait_session(v["id"].as_str().unwrap(), "COMPLETED with endedAt", |d| {
            d["status"] == "COMPLETED" && d["endedAt"].is_string()
        });
    }
    s.stop();
}

#[test]
fn a_claim_whose_controller_dies_before_ready_is_served_by_another() {
    let (s, gate) = gated_pool("2", "1");
    open_gate(&gate, "warm");
    open_gate(&gate, "hang-claimed");
    let (status, c) = s.call("POST", "/v1/contexts", "{}");
    assert_eq!(status, 201, "{c}");
    let ctx = c["id"].as_str().unwrap();
    let v = create(
        &s,
        &format!(
            r#"{{"projectId":"{}","browserSettings":{{"context":{{"id":"{ctx}","persist":true}}}}}}"#,
            s.project
        ),
    );
    let id = v["id"].as_str().unwrap().to_owned();
    // The controller that took the claim hangs starting Chrome on the context's profile.
    wait_for("a controller hangs on the claim", || {
        gate.path().join("hanging").exists()
    });
    let taken = s.claims("taken").remove(0);
    let first = taken.rsplit_once('@').unwrap().1.to_owned();
    assert!(taken.contains(&id), "{taken}");
    let pid = pool_controller_pid(&first).expect("the controller holding the claim runs");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let running = s.wait_running(&id, "RUNNING, served by another controller");
    let second = s.doc(&id)["ecsTaskArn"].as_str().unwrap().to_owned();
    assert_ne!(second, first, "another controller serves the session");
    drive(running["connectUrl"].as_str().unwrap());
    s.release_and_wait(&id);
    assert!(
        s.dir()
            .join("contexts")
            .join(&s.project)
            .join(ctx)
            .join("profile.tar.gz")
            .is_file(),
        "the context was persisted by the controller that served it"
    );
    s.stop();
}

#[test]
fn a_session_released_before_its_claim_was_taken_is_never_brought_up() {
    let (s, gate) = gated_pool("1", "1");
    // No controller is warm: the create waits, then answers PENDING.
    let id = create_pending(&s);
    s.release(&id);
    assert_eq!(s.claims("new").len(), 1, "the claim still waits");
    open_gate(&gate, "warm");
    // The controller takes the claim, finds the session released and drops it.
    wait_for("the claim was dropped", || {
        s.claims("new").is_empty() && s.claims("taken").is_empty() && s.claims("served").is_empty()
    });
    let doc = s.wait_session(&id, "endedAt from the dropping controller", |d| {
        d["endedAt"].is_string()
    });
    assert_eq!(doc["status"], "COMPLETED", "{doc}");
    let stored = s.doc(&id);
    assert!(
        stored["readyAt"].is_null() && stored["publicIP"].is_null(),
        "never brought up: {stored}"
    );
    // The controller stayed warm: it serves the next session.
    let next = create(&s, &format!(r#"{{"projectId":"{}"}}"#, s.project));
    assert_eq!(next["status"], "RUNNING", "{next}");
    let next_id = next["id"].as_str().unwrap();
    s.assert_served_by_the_pool(next_id);
    s.release(next_id);
    s.stop();
}

impl Server {
    /// Moves session `id`'s claim deadline into the past, in its document (the test moves
    /// time along for one session instead of waiting for it; no GET, which would move it on).
    fn lapse_claim(&self, id: &str) {
        let p = self.dir().join("sessions").join(format!("{id}.json"));
        let mut doc = self.doc(id);
        let past = wallcrawler_contract::time::unix_millis() / 1000 - 1;
        assert!(
            doc["claimDeadline"].is_u64(),
            "a new session has a deadline: {doc}"
        );
        doc["claimDeadline"] = past.into();
        std::fs::write(&p, serde_json::to_vec(&doc).unwrap()).unwrap();
    }
}

#[test]
fn a_claim_past_its_deadline_is_never_served_and_the_controller_serves_the_next() {
    let (s, gate) = gated_pool("1", "1");
    // Two sessions wait while no controller is warm; the first one's client has gone.
    let gone = create_pending(&s);
    s.lapse_claim(&gone);
    let waiting = create_pending(&s);
    open_gate(&gate, "warm");
    let running = s.wait_running(&waiting, "RUNNING, served by the one controller");
    drive(running["connectUrl"].as_str().unwrap());
    s.assert_served_by_the_pool(&waiting);
    let doc = s.doc(&gone);
    assert_eq!(doc["internalStatus"], "TIMED_OUT", "{doc}");
    assert_eq!(doc["status"], "TIMED_OUT", "{doc}");
    assert_eq!(doc["terminationReason"], "no browser was available in time");
    assert!(
        doc["endedAt"].is_string() && doc["readyAt"].is_null(),
        "{doc}"
    );
    assert!(s.claims("new").is_empty() && s.claims("dead").is_empty());
    s.release(&waiting);
    s.stop();
}

#[test]
fn the_sweeper_ends_a_stranded_session_and_gives_back_its_slot_and_lease() {
    // No controller ever warms up (the gate stays shut): the claim is never taken.
    let (s, gate) = gated_pool_with("1", "1", &[("SWEEP_INTERVAL_SECONDS", "1")]);
    let (status, c) = s.call("POST", "/v1/contexts", "{}");
    assert_eq!(status, 201, "{c}");
    let ctx = c["id"].as_str().unwrap().to_owned();
    let persisting =
        format!(r#"{{"browserSettings": {{"context": {{"id": "{ctx}", "persist": true}}}}}}"#);
    let v = create(&s, &persisting);
    assert_eq!(v["status"], "PENDING", "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    let slots = || std::fs::read_to_string(s.dir().join("active-sessions.json")).unwrap();
    let writer = || std::fs::read_to_string(s.dir().join("contexts.json")).unwrap();
    assert!(slots().contains(&id) && writer().contains(&id));
    s.lapse_claim(&id);
    wait_for("the sweeper ended the session", || {
        s.doc(&id)["endedAt"].is_string()
    });
    let doc = s.doc(&id);
    assert_eq!(doc["internalStatus"], "TIMED_OUT", "{doc}");
    assert_eq!(doc["terminationReason"], "no browser was available in time");
    wait_for("its slot and lease given back", || {
        !slots().contains(&id) && !writer().contains(&id)
    });
    // A persisting create on the context goes through (it would wait, then 409, for a live
    // writer).
    let next = create(&s, &persisting);
    assert_eq!(next["status"], "PENDING", "{next}");
    open_gate(&gate, "warm");
    s.stop();
}

#[test]
fn with_no_idle_controller_create_answers_pending_and_the_next_to_start_serves_it() {
    let (s, gate) = gated_pool("1", "1");
    let id = create_pending(&s);
    open_gate(&gate, "warm");
    let running = s.wait_running(&id, "RUNNING once a controller warmed up");
    drive(running["connectUrl"].as_str().unwrap());
    s.assert_served_by_the_pool(&id);
    s.release_and_wait(&id);
    s.stop();
}

/// `(ppid, nice)` of process `pid`, from `/proc/<pid>/stat`.
fn ppid_and_nice(pid: i32) -> Option<(i32, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name's closing parenthesis, from field 3 (state) on.
    let rest: Vec<&str> = stat.get(stat.rfind(')')? + 2..)?.split(' ').collect();
    Some((rest.get(1)?.parse().ok()?, rest.get(16)?.parse().ok()?))
}

/// The nice value of the browser process pool controller `name` started.
fn pool_chrome_nice(name: &str) -> Option<(i32, i32)> {
    let controller = pool_controller_pid(name)?;
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let (ppid, nice) = ppid_and_nice(pid)?;
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        // The browser, not the short `chromium --version` a controller asks first (for the
        // User-Agent it starts Chrome with).
        let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
        let browser = cmdline
            .split(|b| *b == 0)
            .any(|a| a.starts_with(b"--remote-debugging-port="));
        (ppid == controller && comm.trim() == "chromium" && browser).then_some((pid, nice))
    })
}

#[test]
fn warm_browsers_yield_the_cpu_and_a_claimed_one_gets_it_back() {
    let s = Server::spawn_with(
        "25",
        &controller_bin(),
        &[("WALLCRAWLER_POOL_SIZE", "1"), DIRECT],
    );
    let (first, second) = (s.pool_name(1), s.pool_name(2));
    let own = ppid_and_nice(std::process::id() as i32).unwrap().1;
    wait_for("the warm Chrome at BACKGROUND_NICE (19)", || {
        pool_chrome_nice(&first).is_some_and(|(_, n)| n == 19)
    });
    let (warm_pid, _) = pool_chrome_nice(&first).unwrap();
    let v = create(&s, &format!(r#"{{"projectId":"{}"}}"#, s.project));
    assert_eq!(v["status"], "RUNNING", "{v}");
    // The same browser (no context: the warm Chrome serves as it is), back at our priority by
    // the time create answers.
    assert_eq!(pool_chrome_nice(&first), Some((warm_pid, own)));
    drive(v["connectUrl"].as_str().unwrap());
    // Its replacement warms up in the background.
    wait_for("the replacement's Chrome at 19", || {
        pool_chrome_nice(&second).is_some_and(|(_, n)| n == 19)
    });
    s.release(v["id"].as_str().unwrap());
    s.wait_session(v["id"].as_str().unwrap(), "COMPLETED", |d| {
        d["status"] == "COMPLETED" && d["endedAt"].is_string()
    });
    s.stop();
}

/// `Uid:` of `/proc/<pid>/status`: real, effective, saved and file-system uid.
fn uids(pid: i32) -> Option<Vec<u32>> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace()
        .skip(1)
        .map(|n| n.parse().ok())
        .collect()
}

/// The pids of Chrome's process group (the browser and its helpers: zygotes, renderers).
fn process_group(pgid: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            (nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(pid)))
                .ok()?
                .as_raw()
                == pgid)
                .then_some(pid)
        })
        .collect()
}

/// Whether a process as uid:gid `uid`:`uid` (a Chrome's user) can run `cmd` `args` (`cat` a
/// file, `kill -0` a process); what it said when it cannot.
fn as_uid(uid: u32, cmd: &str, args: &[&std::ffi::OsStr]) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let out = Command::new(cmd)
        .args(args)
        .uid(uid)
        .gid(uid)
        .stdout(Stdio::null())
        .output()
        .unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Whether uid `uid` can read `path`.
fn reads_as(uid: u32, path: &std::path::Path) -> Result<(), String> {
    as_uid(uid, "cat", &[path.as_os_str()])
}

/// The profile directory of Chrome's browser process `pid` (its `--user-data-dir=`).
fn profile_of(pid: i32) -> PathBuf {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    cmdline
        .split(|b| *b == 0)
        .find_map(|a| a.strip_prefix(b"--user-data-dir="))
        .map(|p| PathBuf::from(String::from_utf8_lossy(p).into_owned()))
        .expect("Chrome names its profile")
}

/// A regular file directly in `dir` (one Chrome wrote into its profile).
fn a_file_in(dir: &std::path::Path) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .find(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.path())
}

/// The one uid Chrome's browser process `pid` and every process of its group run as.
fn chrome_uid(pid: i32) -> u32 {
    let uid = uids(pid).unwrap()[0];
    for p in process_group(pid) {
        assert_eq!(uids(p), Some(vec![uid; 4]), "Chrome's process {p}");
    }
    uid
}

/// `serve` started as root (as the tests are): each warm Chrome runs as a uid of its own
/// (from `LOCAL_CHROME_UIDS`' default range, not root), drives as before, and its user reads
/// neither the other browser's profile nor the platform's keys (`local.json`) nor its
/// controller's environment (the signing key), and cannot signal the other browser.
#[test]
fn started_as_root_each_chrome_runs_as_a_uid_of_its_own_and_reads_no_other_secret() {
    assert!(nix::unistd::geteuid().is_root(), "the tests run as root");
    let s = Server::spawn_with(
        "25",
        &controller_bin(),
        &[("WALLCRAWLER_POOL_SIZE", "2"), DIRECT],
    );
    let (one, two) = (s.pool_name(1), s.pool_name(2));
    wait_for("two warm Chromes", || {
        pool_chrome_nice(&one).is_some() && pool_chrome_nice(&two).is_some()
    });
    let (a, b) = (
        pool_chrome_nice(&one).unwrap().0,
        pool_chrome_nice(&two).unwrap().0,
    );
    let controller = pool_controller_pid(&one).unwrap();
    assert_eq!(uids(controller), Some(vec![0; 4]), "the controller is root");
    let v = create(&s, &format!(r#"{{"projectId":"{}"}}"#, s.project));
    assert_eq!(v["status"], "RUNNING", "{v}");
    drive(v["connectUrl"].as_str().unwrap());
    // After a page was driven: the browser, its zygotes and at least one renderer.
    wait_for("Chrome's helpers", || process_group(a).len() > 2);
    let (ua, ub) = (chrome_uid(a), chrome_uid(b));
    assert_ne!(ua, ub, "one uid per browser");
    for u in [ua, ub] {
        assert!(
            u >= 1_900_000_000,
            "from LOCAL_CHROME_UIDS' default range: {u}"
        );
    }

    let (pa, pb) = (profile_of(a), profile_of(b));
    wait_for("a file in each profile", || {
        a_file_in(&pa).is_some() && a_file_in(&pb).is_some()
    });
    let (fa, fb) = (a_file_in(&pa).unwrap(), a_file_in(&pb).unwrap());
    // Each reads its own profile and its own process's environment (so the checks work)…
    reads_as(ua, &fa).unwrap();
    reads_as(ub, &fb).unwrap();
    reads_as(ua, &PathBuf::from(format!("/proc/{a}/environ"))).unwrap();
    // …but not the other's profile, the platform's keys nor its controller's environment.
    for (uid, secret) in [
        (ua, fb.clone()),
        (ub, fa.clone()),
        (ua, s.dir().join("local.json")),
        (ua, s.dir().join("sessions")),
        (ua, PathBuf::from(format!("/proc/{controller}/environ"))),
    ] {
        let refused = reads_as(uid, &secret).unwrap_err();
        assert!(
            refused.contains("Permission denied"),
            "{uid} reads {}: {refused}",
            secret.display()
        );
    }
    // Nor signal the other browser (ptrace needs at least as much).
    let refused = as_uid(ua, "kill", &["-0".as_ref(), b.to_string().as_ref()]).unwrap_err();
    assert!(refused.contains("not permitted"), "{refused}");

    s.release(v["id"].as_str().unwrap());
    s.wait_session(v["id"].as_str().unwrap(), "COMPLETED", |d| {
        d["status"] == "COMPLETED" && d["endedAt"].is_string()
    });
    s.stop();
}

// ---------------------------------------------------------------------------------------------
// The connect gateway (`serve`'s default): one port for every session, URLs handed out at create.

/// Drives `url` with `client` (puppeteer or playwright) through tests/node/drive.mjs.
fn drive_with(client: &str, url: &str) -> serde_json::Value {
    drive_with_env(client, url, &[])
}

/// [`drive_with`] with more environment for the client (e.g. `NODE_EXTRA_CA_CERTS`).
fn drive_with_env(client: &str, url: &str, env: &[(&str, &str)]) -> serde_json::Value {
    let out = node::command("drive.mjs")
        .args(["--client", client, "--url", url])
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap_or_default();
    assert_eq!(
        last["eval"],
        2,
        "{client} {url}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    last
}

/// Sends an upgrade for `path` to `addr` and returns the answer's head (the socket stays open
/// until the head has arrived, so a held client waits here).
fn upgrade_head(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(1) => head.push(b[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// The path and query of a gateway connectUrl (`/?signingKey=…`).
fn path_of(connect_url: &str) -> &str {
    let rest = connect_url.strip_prefix("ws://").unwrap();
    &rest[rest.find('/').unwrap()..]
}

#[test]
fn puppeteer_and_playwright_drive_a_page_through_the_gateway() {
    let s = Server::start("25");
    let gw = s.gateway.clone().expect("serve runs a gateway by default");
    let v = create(&s, &format!(r#"{{"projectId":"{}"}}"#, s.project));
    assert_eq!(v["status"], "RUNNING", "{v}");
    let url = v["connectUrl"].as_str().unwrap();
    let token = v["signingKey"].as_str().unwrap();
    assert_eq!(
        url,
        format!("{gw}/?signingKey={token}"),
        "one port for every session"
    );
    drive_with("puppeteer", url);
    drive_with("playwright", url);
    drive_with("cri", url);
    // Playwright's HTTP discovery: /json/version through the gateway names the gateway.
    drive_with("playwright", &url.replacen("ws://", "http://", 1));
    let second = create(&s, &format!(r#"{{"projectId":"{}"}}"#, s.project));
    let second_url = second["connectUrl"].as_str().unwrap();
    assert!(
        second_url.starts_with(&format!("{gw}/?signingKey=")),
        "{second}"
    );
    drive_with("puppeteer", second_url);
    for v in [&v, &second] {
        s.release(v["id"].as_str().unwrap());
    }
    s.stop();
}

#[test]
fn with_pool_0_create_answers_at_once_and_a_client_connecting_at_once_is_held_then_served() {
    let metrics = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let s = Server::spawn_with(
        "25",
        &controller_bin(),
        &[
            ("WALLCRAWLER_POOL_SIZE", "0"),
            ("WALLCRAWLER_GATEWAY_METRICS_ADDR", &metrics),
        ],
    );
    let started = Instant::now();
    let v = create(&s, &format!(r#"{{"projectId":"{}"}}"#, s.project));
    let took = started.elapsed();
    assert_eq!(v["status"], "RUNNING", "{v}");
    let url = v["connectUrl"].as_str().unwrap().to_owned();
    // At once: the controller has only just been started, its Chrome is not up.
    let gw = s.gateway.clone().unwrap();
    let head = upgrade_head(gw.trim_start_matches("ws://"), path_of(&url));
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(
        took < Duration::from_secs(5),
        "the create did not wait: {took:?}"
    );
    let scrape = |name: &str| -> f64 {
        use std::io::{Read, Write};
        let mut m = std::net::TcpStream::connect(&metrics).unwrap();
        write!(
            m,
            "GET /metrics HTTP/1.1\r\nHost: m\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut text = String::new();
        m.read_to_string(&mut text).unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    };
    assert_eq!(
        scrape("wallcrawler_gateway_hold_seconds_count"),
        1.0,
        "the client was held until the controller was up"
    );
    drive_with("puppeteer", &url);
    s.release(v["id"].as_str().unwrap());
    s.stop();
}

#[test]
fn a_released_sessions_client_gets_410_within_a_second() {
    let s = Server::start("25");
    let gw = s.gateway.clone().unwrap();
    let v = create(&s, &format!(r#"{{"projectId":"{}"}}"#, s.project));
    let url = v["connectUrl"].as_str().unwrap();
    s.release(v["id"].as_str().unwrap());
    let started = Instant::now();
    let head = upgrade_head(gw.trim_start_matches("ws://"), path_of(url));
    assert!(head.starts_with("HTTP/1.1 410"), "{head}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    s.stop();
}

/// Per tapped connection: the client's bytes, then the server's.
type Recorded = std::sync::Mutex<Vec<(Vec<u8>, Vec<u8>)>>;

/// A loopback forwarder in front of `to` that records every byte each connection sent either
/// way (what a capture of the wire would show).
struct Tap {
    addr: std::net::SocketAddr,
    seen: std::sync::Arc<Recorded>,
}

impl Tap {
    fn start(to: std::net::SocketAddr) -> Tap {
        use std::sync::Arc;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Recorded> = Arc::default();
        let all = seen.clone();
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = std::net::TcpStream::connect(to) else {
                    return;
                };
                let slot = {
                    let mut v = all.lock().unwrap();
                    v.push((Vec::new(), Vec::new()));
                    v.len() - 1
                };
                for (from, into, up) in [
                    (
                        client.try_clone().unwrap(),
                        server.try_clone().unwrap(),
                        true,
                    ),
                    (server, client, false),
                ] {
                    let all = all.clone();
                    std::thread::spawn(move || Tap::pump(from, into, &all, slot, up));
                }
            }
        });
        Tap { addr, seen }
    }

    fn pump(
        mut from: std::net::TcpStream,
        mut into: std::net::TcpStream,
        all: &Recorded,
        slot: usize,
        up: bool,
    ) {
        use std::io::{Read, Write};
        let mut buf = [0u8; 16 * 1024];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 || into.write_all(&buf[..n]).is_err() {
                break;
            }
            let mut v = all.lock().unwrap();
            let rec = if up { &mut v[slot].0 } else { &mut v[slot].1 };
            rec.extend_from_slice(&buf[..n]);
        }
        let _ = into.shutdown(std::net::Shutdown::Write);
    }

    fn connections(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.seen.lock().unwrap().clone()
    }
}

#[test]
fn with_tls_every_client_drives_a_page_over_wss_and_the_wire_never_shows_the_token() {
    let s = Server::spawn_with("25", &controller_bin(), &[TLS]);
    let gw = s.gateway.clone().expect("a gateway");
    assert!(gw.starts_with("wss://127.0.0.1:"), "{gw}");
    let ca = s.ca.clone().expect("serve --tls prints caCert:");
    assert!(std::path::Path::new(&ca).is_file(), "{ca}");
    let v = create(&s, &format!(r#"{{"projectId":"{}"}}"#, s.project));
    assert_eq!(v["status"], "RUNNING", "{v}");
    let url = v["connectUrl"].as_str().unwrap().to_owned();
    let token = v["signingKey"].as_str().unwrap().to_owned();
    assert_eq!(url, format!("{gw}/?signingKey={token}"));

    // Every client goes through a recording forwarder in front of the gateway.
    let gw_addr: std::net::SocketAddr = gw.trim_start_matches("wss://").parse().unwrap();
    let tap = Tap::start(gw_addr);
    let tapped = url.replacen(&gw_addr.to_string(), &tap.addr.to_string(), 1);
    let trust = [("NODE_EXTRA_CA_CERTS", ca.as_str())];
    for client in ["puppeteer", "playwright", "cri", "stagehand"] {
        drive_with_env(client, &tapped, &trust);
    }
    // Playwright's discovery over https: /json/version through the gateway names wss:// URLs,
    // and they work (Playwright dials the one it is given).
    drive_with_env(
        "playwright",
        &tapped.replacen("wss://", "https://", 1),
        &trust,
    );

    // Stagehand 3 with env BROWSERBASE: it creates its session through the API and connects
    // to the wss:// connectUrl it is given.
    let r = s.node_with_env("stagehand-browserbase", &trust);
    assert_eq!(r["eval"], 2, "{r}");

    // /debug reads the pages through the wss:// gateway too (trusting serve's authority), and
    // every page's URL is a wss:// one on the gateway.
    let (status, debug) = s.call(
        "GET",
        &format!("/v1/sessions/{}/debug", v["id"].as_str().unwrap()),
        "",
    );
    assert_eq!(status, 200, "{debug}");
    assert_eq!(debug["wsUrl"], url.as_str(), "{debug}");
    let pages = debug["pages"].as_array().expect("pages");
    assert!(!pages.is_empty(), "{debug}");
    for p in pages {
        assert!(
            p["wsUrl"]
                .as_str()
                .unwrap()
                .starts_with(&format!("{gw}/devtools/page/")),
            "{debug}"
        );
    }
    // The live view is on the gateway's https:// origin.
    let viewer = gw.replacen("wss://", "https://", 1);
    for url in [
        &debug["debuggerUrl"],
        &debug["debuggerFullscreenUrl"],
        &pages[0]["debuggerFullscreenUrl"],
    ] {
        assert!(
            url.as_str()
                .is_some_and(|u| u.starts_with(&format!("{viewer}/viewer?t="))),
            "{debug}"
        );
    }
    // A page's debuggerUrl: the DevTools inspector, its socket on the gateway over wss.
    let host = gw.strip_prefix("wss://").unwrap();
    let inspector = pages[0]["debuggerUrl"].as_str().unwrap();
    assert!(
        inspector.starts_with(&format!("{viewer}/inspector/"))
            && inspector.contains(&format!("/inspector.html?wss={host}/inspector/"))
            && inspector.ends_with(&format!("/page/{}", pages[0]["id"].as_str().unwrap())),
        "{debug}"
    );

    // Without trusting the authority, a client is refused by its own TLS check.
    let untrusting = node::command("drive.mjs")
        .args(["--client", "puppeteer", "--url", &tapped])
        .env_remove("NODE_EXTRA_CA_CERTS")
        .output()
        .unwrap();
    assert!(
        !untrusting.status.success(),
        "a client that trusts no local CA"
    );

    let conns = tap.connections();
    assert!(
        conns.len() >= 6,
        "every client went through the tap: {}",
        conns.len()
    );
    for (i, (up, down)) in conns.iter().enumerate() {
        // TLS records from the first byte: a handshake record (0x16), TLS 1.x (0x03).
        if !up.is_empty() {
            assert_eq!(
                &up[..2],
                &[0x16, 0x03],
                "connection {i} starts with a TLS handshake"
            );
        }
        for (dir, bytes) in [("client", up), ("server", down)] {
            for needle in [
                token.as_bytes(),
                b"signingKey".as_slice(),
                b"HTTP/1.1".as_slice(),
            ] {
                assert!(
                    !bytes.windows(needle.len()).any(|w| w == needle),
                    "connection {i}: the {dir}'s bytes show {:?} in clear",
                    String::from_utf8_lossy(needle)
                );
            }
        }
    }
    s.release(v["id"].as_str().unwrap());
    s.stop();
}

/// `script` (tests/node) run as a person on a new session of a `serve --tls` platform, its
/// Chromium trusting `serve`'s authority; `extra` after the common arguments. Returns the
/// script's answer (asserted `ok`), the gateway's `https://` origin and the platform.
fn a_person_over_tls(script: &str, extra: &[&str]) -> (serde_json::Value, String, Server) {
    let s = Server::spawn_with("25", &controller_bin(), &[TLS]);
    let gw = s.gateway.clone().expect("a gateway");
    let ca = s.ca.clone().expect("serve --tls prints caCert:");
    let v = create(&s, &format!(r#"{{"projectId":"{}"}}"#, s.project));
    assert_eq!(v["status"], "RUNNING", "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    let chrome = wallcrawler_testkit::chromium();
    let out = node::command(script)
        .args([
            "--url",
            v["connectUrl"].as_str().unwrap(),
            "--session",
            &id,
            "--base",
            &s.base,
            "--key",
            &s.key,
            "--ca",
            &ca,
            "--chrome",
            chrome.to_str().unwrap(),
            "--timeout-ms",
            "60000",
        ])
        .args(extra)
        // The session's own client (Puppeteer over wss://) trusts the authority as Node does.
        .env("NODE_EXTRA_CA_CERTS", &ca)
        .output()
        .unwrap();
    let r = node::output_json(script, &out);
    assert_eq!(r["ok"], true, "{r}");
    s.release(&id);
    (r, gw.replacen("wss://", "https://", 1), s)
}

/// The live view as a person opens it, through the TLS gateway: the session shows a red page;
/// the stock SDK's `sessions.debug()` names its `debuggerFullscreenUrl` (https://, on the
/// gateway); a second headless Chromium that trusts `serve`'s authority from an NSS db in its
/// HOME (as `certutil` adds one for a person; no certificate error ignored) opens it, a
/// screenshot shows red, and a navigation to green is followed. A Chromium without the
/// authority is refused the URL by its own TLS check (tests/node/viewer.mjs `sdk`).
#[test]
fn with_tls_a_second_chromium_opens_the_sdks_live_view_over_https_and_follows_the_page() {
    let (r, origin, s) = a_person_over_tls("viewer.mjs", &["--scenario", "sdk"]);
    assert_eq!(r["origin"], origin, "{r}");
    assert!(
        r["protocol"].as_str().is_some_and(|p| p.starts_with("TLS")),
        "{r}"
    );
    assert_eq!(r["untrusted"], "net::ERR_CERT_AUTHORITY_INVALID", "{r}");
    // The issue's figure is a second; this bound is a hang guard for a loaded debug build, the
    // measured time is printed.
    let follow = r["followMs"].as_u64().expect("followMs");
    eprintln!("live view over https followed a navigation in {follow} ms ({r})");
    assert!(follow < 3000, "{r}");
    s.stop();
}

/// A page's `debuggerUrl` as a person opens it, through the TLS gateway: the stock SDK's
/// `sessions.debug()` names the DevTools inspector on the page (https://, its socket wss:// on the
/// gateway); a second headless Chromium trusting `serve`'s authority opens it, every request of
/// the frontend loads and the page's text appears in its Elements panel
/// (tests/node/inspector.mjs with --base).
#[test]
fn with_tls_a_second_chromium_opens_a_pages_debugger_url_the_devtools_inspector() {
    let (r, origin, s) = a_person_over_tls("inspector.mjs", &[]);
    eprintln!("inspector through the gateway: {r}");
    assert_eq!(r["origin"], origin, "{r}");
    assert_eq!(r["socket"], "wss", "{r}");
    assert_eq!(r["failed"], serde_json::json!([]), "{r}");
    s.stop();
}

/// A claim delivered twice (a second claim file for the same session) with two warm
/// controllers: one takes the session and serves it; the other hands its copy back (hidden
/// until the owner's lease would end) and writes nothing: the session is never ended under the
/// controller serving it, and its context's writer lease stays with it (a persisting create on
/// the same context gets 409).
#[test]
fn a_claim_delivered_twice_has_one_owner_and_the_lease_stays_with_the_live_session() {
    let (s, gate) = gated_pool("2", "1");
    let (status, c) = s.call("POST", "/v1/contexts", "{}");
    assert_eq!(status, 201, "{c}");
    let ctx = c["id"].as_str().unwrap().to_owned();
    let persisting = format!(
        r#"{{"projectId":"{}","browserSettings":{{"context":{{"id":"{ctx}","persist":true}}}}}}"#,
        s.project
    );
    // No controller is warm yet: the claim waits, and the test sends it a second time.
    let v = create(&s, &persisting);
    assert_eq!(v["status"], "PENDING", "{v}");
    let id = v["id"].as_str().unwrap().to_owned();
    let claims = s.dir().join("claims");
    let waiting = s.claims("new");
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    let body = std::fs::read(claims.join("new").join(&waiting[0])).unwrap();
    let claim = wallcrawler_contract::claim::Claim::parse(&body).unwrap();
    wallcrawler_local::claim_queue::DirQueue::new(&claims)
        .send(&claim)
        .unwrap();
    open_gate(&gate, "warm");
    // Both copies taken and settled: one served, the other handed back (in new/ again, hidden).
    let running = s.wait_session(&id, "RUNNING", |d| d["status"] == "RUNNING");
    wait_for("both claims settled", || {
        s.claims("taken").is_empty() && s.claims("served").len() == 1
    });
    let doc = s.doc(&id);
    assert!(
        doc["endedAt"].is_null() && doc["terminationReason"].is_null(),
        "the other controller wrote nothing: {doc}"
    );
    assert_eq!(doc["internalStatus"], "READY", "{doc}");
    let owner = doc["owner"].as_str().unwrap_or_else(|| panic!("{doc}"));
    assert!(
        owner.starts_with(&format!("pool-{}-", s.child.id())),
        "{doc}"
    );
    assert_eq!(doc["ecsTaskArn"], owner, "{doc}");
    assert_eq!(
        s.claims("new").len(),
        1,
        "the copy is handed back, not deleted"
    );
    drive(running["connectUrl"].as_str().unwrap());
    // The context's writer lease is the live session's.
    let (status, busy) = s.call("POST", "/v1/sessions", &persisting);
    assert_eq!(status, 409, "{busy}");
    assert!(s.doc(&id)["endedAt"].is_null());
    s.release_and_wait(&id);
    s.stop();
}

// ---------------------------------------------------------------------------------------------
// A project's share of the warm pool (`serve --pool-share`).

/// Chromium whose pool launches (profiles `pool-*`) beyond the first two wait until `more`
/// exists in `$GATE`: the pool has exactly two warm browsers while the test runs. A session's
/// own controller (profile `sess_*`) starts at once.
const TWO_WARM_CHROMIUM: &str = r#"#!/bin/sh
gate="@GATE@"
case "$*" in
  *profiles/pool-*)
    mkdir "$gate/w1" 2>/dev/null || mkdir "$gate/w2" 2>/dev/null ||
      while [ ! -e "$gate/more" ]; do sleep 0.02; done ;;
esac
exec /usr/lib/chromium/chromium "$@"
"#;

impl Server {
    /// Adds project `id` (a copy of the local project) and lets the local key select it.
    fn add_project(&self, id: &str) {
        let edit = |file: &str, f: &dyn Fn(&mut serde_json::Map<String, serde_json::Value>)| {
            let path = self.dir().join(file);
            let mut m: serde_json::Map<String, serde_json::Value> =
                serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            f(&mut m);
            std::fs::write(&path, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
        };
        edit("projects.json", &|m| {
            let mut p = m[&self.project].clone();
            p["projectId"] = id.into();
            m.insert(id.to_owned(), p);
        });
        edit("api-keys.json", &|m| {
            for k in m.values_mut() {
                k["projectIds"].as_array_mut().unwrap().push(id.into());
            }
        });
    }

    /// Who serves session `id`: `pool-…` (a warm pool controller) or `local:<pid>` (its own).
    fn owner(&self, id: &str) -> String {
        self.doc(id)["ecsTaskArn"].as_str().unwrap().to_owned()
    }
}

#[test]
fn a_project_beyond_its_share_of_the_pool_gets_its_own_controller_and_leaves_a_warm_one() {
    let (gate, wrapper) = gated_chromium(TWO_WARM_CHROMIUM);
    let chrome = wrapper.display().to_string();
    let env = [
        ("WALLCRAWLER_POOL_SIZE", "2"),
        ("WALLCRAWLER_POOL_SHARE", "1"),
        ("CHROME_PATH", chrome.as_str()),
        DIRECT,
    ];
    let s = Server::spawn_with("10", &controller_bin(), &env);
    s.add_project("proj_b");
    // Both warm browsers up and waiting (lowered to the background priority once warm) before
    // the creates: on a loaded machine a create may otherwise come before either is warm.
    for n in [1, 2] {
        let name = s.pool_name(n);
        wait_for("a warm pool Chrome at BACKGROUND_NICE (19)", || {
            pool_chrome_nice(&name).is_some_and(|(_, nice)| nice == 19)
        });
    }
    // Project A's first session is within its share: warm.
    let body = format!(r#"{{"projectId":"{}"}}"#, s.project);
    let pool = format!("pool-{}-", s.child.id());
    let a1 = create(&s, &body);
    assert_eq!(a1["status"], "RUNNING", "{a1}");
    let a1_owner = s.owner(a1["id"].as_str().unwrap());
    assert!(a1_owner.starts_with(&pool), "{a1_owner}");
    // Two more at once are beyond it: each gets a controller of its own, however their slot
    // takes and counter reads interleave (each reads at least its own take's count, 2 or 3).
    // Two at once with none before could both go cold (both read 2: docs/capacity.md, "at
    // most `share` go warm"), which is why the first comes alone.
    let (a2, a3) = std::thread::scope(|t| {
        let second = t.spawn(|| create(&s, &body));
        let third = t.spawn(|| create(&s, &body));
        (second.join().unwrap(), third.join().unwrap())
    });
    for v in [&a2, &a3] {
        assert_eq!(v["status"], "RUNNING", "{v}");
        let owner = s.owner(v["id"].as_str().unwrap());
        assert!(owner.starts_with("local:"), "{owner}");
    }
    // Project B still finds the pool's other warm browser (any later pool controller's Chrome
    // waits at the gate, so it is one of the first two).
    let (status, b) = s.call_for(
        "proj_b",
        "POST",
        "/v1/sessions",
        r#"{"projectId":"proj_b"}"#,
    );
    assert_eq!(status, 201, "{b}");
    assert_eq!(b["status"], "RUNNING", "{b}");
    let b_owner = s.owner(b["id"].as_str().unwrap());
    assert!(
        b_owner.starts_with(&pool) && b_owner != a1_owner,
        "{b_owner}"
    );
    for v in [&a1, &a2, &a3, &b] {
        drive(v["connectUrl"].as_str().unwrap());
    }
    open_gate(&gate, "more");
    for v in [&a1, &a2, &a3] {
        s.release(v["id"].as_str().unwrap());
    }
    let (status, r) = s.call_for(
        "proj_b",
        "POST",
        &format!("/v1/sessions/{}", b["id"].as_str().unwrap()),
        r#"{"projectId":"proj_b","status":"REQUEST_RELEASE"}"#,
    );
    assert_eq!(status, 200, "{r}");
    for v in [&a1, &a2, &a3] {
        s.wait_session(v["id"].as_str().unwrap(), "COMPLETED with endedAt", |d| {
            d["status"] == "COMPLETED" && d["endedAt"].is_string()
        });
    }
    s.stop();
}

// ---------------------------------------------------------------------------------------------
// Sessions with extensions: loaded by the controller before READY (cold, and into a pool's
// warm Chrome), and Stagehand 4, which only runs through its own extension.

/// A session outlives its last client for 5 minutes (a loaded machine cannot end it before the
/// test has looked at it).
const KEEP: (&str, &str) = ("CDP_DISCONNECT_GRACE", "300");

/// A zip of `(name, bytes)` entries.
fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, bytes) in entries {
        w.start_file(*name, zip::write::SimpleFileOptions::default())
            .unwrap();
        std::io::Write::write_all(&mut w, bytes).unwrap();
    }
    w.finish().unwrap().into_inner()
}

/// A tiny MV3 extension whose content script marks every page
/// (`document.documentElement.dataset.wallcrawler = "ext"`), as a zip in `dir`.
fn mark_extension(dir: &std::path::Path) -> PathBuf {
    let path = dir.join("mark.zip");
    let manifest = br#"{"manifest_version":3,"name":"Mark","version":"1.0","content_scripts":[{"matches":["<all_urls>"],"js":["mark.js"],"run_at":"document_start"}]}"#;
    let script = br#"document.documentElement.dataset.wallcrawler = "ext";"#;
    std::fs::write(
        &path,
        zip_of(&[("manifest.json", manifest), ("mark.js", script)]),
    )
    .unwrap();
    path
}

impl Server {
    /// Waits for session `id` to be RUNNING with a `connectUrl` (`what` says who should serve
    /// it, for a timeout); its document.
    fn wait_running(&self, id: &str, what: &str) -> serde_json::Value {
        self.wait_session(id, what, |d| {
            d["status"] == "RUNNING" && d["connectUrl"].is_string()
        })
    }

    /// Releases `id` and waits for its end.
    fn release_and_wait(&self, id: &str) {
        self.release(id);
        self.wait_session(id, "COMPLETED with endedAt", |d| {
            d["status"] == "COMPLETED" && d["endedAt"].is_string()
        });
    }

    /// The `extension-mark` scenario with the extension at `zip`; its result.
    fn extension_mark(&self, zip: &std::path::Path) -> serde_json::Value {
        let r = self.node_with_env(
            "extension-mark",
            &[("EXTENSION_ZIP", zip.to_str().unwrap())],
        );
        assert_eq!(r["ok"], true, "{r}");
        r
    }

    /// Deletes extension `id` through the API and checks that it is gone (404).
    fn delete_extension(&self, id: &str) {
        let (status, v) = self.call("DELETE", &format!("/v1/extensions/{id}"), "");
        assert!(status == 200 || status == 204, "{status} {v}");
        self.assert_extension_gone(id);
    }

    fn assert_extension_gone(&self, id: &str) {
        let (status, v) = self.call("GET", &format!("/v1/extensions/{id}"), "");
        assert_eq!(status, 404, "the extension is deleted: {v}");
    }
}

/// Cold (a controller per session): the session created with the uploaded extension shows its
/// mark on a page served on 127.0.0.1, one without does not; the unpacked extension sits
/// beside the session's profile while it runs and is gone with it.
#[test]
fn a_session_with_an_extension_shows_its_mark_and_one_without_does_not_cold() {
    let (_scratch, zip) = mark_zip();
    // Both sessions outlive the scenario's clients until the test has looked at them.
    let s = Server::spawn_with(
        "25",
        &controller_bin(),
        &[("WALLCRAWLER_POOL_SIZE", "0"), KEEP],
    );
    let r = s.extension_mark(&zip);
    assert_eq!(
        r["marked"], "ext",
        "the extension's content script ran: {r}"
    );
    assert!(r["unmarked"].is_null(), "no extension, no mark: {r}");
    let id = r["withExt"].as_str().unwrap();
    // The profile is `<uploadsDir without -files/uploads>` (the data directory's `profiles/`, or
    // the browsers' own directory when `serve` runs as root).
    let uploads = s.doc(id)["uploadsDir"].as_str().unwrap().to_owned();
    let profile = uploads.strip_suffix("-files/uploads").unwrap();
    let unpacked = PathBuf::from(format!("{profile}-extension"));
    assert!(
        unpacked.join("manifest.json").is_file(),
        "unpacked beside the profile: {}",
        s.doc(id)
    );
    release_both(&s, &r);
    wait_for("the unpacked extension removed with the session", || {
        !unpacked.exists()
    });
    s.delete_extension(r["extId"].as_str().unwrap());
    s.stop();
}

/// The pool (`--pool 2`): the extension is loaded into the warm Chrome, not a new one (the
/// serving controller's Chrome is one of the warm browsers), and the create answers at once.
#[test]
fn a_session_with_an_extension_shows_its_mark_in_a_warm_pool_chrome() {
    let (_scratch, zip) = mark_zip();
    let s = Server::spawn_with("25", &controller_bin(), &[KEEP]);
    let names = [s.pool_name(1), s.pool_name(2)];
    wait_for("both pool controllers' Chrome warm", || {
        names.iter().all(|n| pool_chrome_nice(n).is_some())
    });
    let warm: Vec<i32> = names
        .iter()
        .map(|n| pool_chrome_nice(n).unwrap().0)
        .collect();
    let r = s.extension_mark(&zip);
    assert_eq!(r["marked"], "ext", "{r}");
    assert!(r["unmarked"].is_null(), "{r}");
    assert!(
        r["createMs"].as_u64().unwrap() < 2000,
        "the create answers at once: {r}"
    );
    let id = r["withExt"].as_str().unwrap();
    let owner = s.doc(id)["ecsTaskArn"].as_str().unwrap().to_owned();
    let (chrome, _) = pool_chrome_nice(&owner).expect("the serving controller's Chrome");
    assert!(
        warm.contains(&chrome),
        "the warm Chrome ({warm:?}) took the extension, no restart: {chrome}"
    );
    release_both(&s, &r);
    s.delete_extension(r["extId"].as_str().unwrap());
    s.stop();
}

/// An archive tampered with in the store (a `..` entry put there directly, after the API
/// checked and kept the upload) fails the session with the refusal's reason; nothing is
/// written outside, and no browser serves it.
#[test]
fn a_hostile_archive_in_the_store_fails_the_session_with_its_reason() {
    let (_scratch, zip) = mark_zip();
    for pool in ["0", "1"] {
        let s = Server::spawn_with("25", &controller_bin(), &[("WALLCRAWLER_POOL_SIZE", pool)]);
        let ext = upload_extension(&s, &zip);
        // Where the API keeps it: named by its content.
        let digest = sha2::Sha256::digest(std::fs::read(&zip).unwrap());
        let doc_key = format!("extensions/{}/{digest:x}.zip", s.project);
        assert!(s.dir().join("contexts").join(&doc_key).is_file());
        let hostile = zip_of(&[
            (
                "manifest.json",
                br#"{"manifest_version":3,"name":"X","version":"1"}"#,
            ),
            ("../../escaped.txt", b"x"),
        ]);
        std::fs::write(s.dir().join("contexts").join(&doc_key), hostile).unwrap();
        let (status, v) = s.call(
            "POST",
            "/v1/sessions",
            &format!(r#"{{"projectId":"{}","extensionId":"{ext}"}}"#, s.project),
        );
        let id = v["id"].as_str().unwrap_or_default().to_owned();
        assert_eq!(status, 201, "{v}");
        let doc = s.wait_session(&id, "the session failed", |d| d["status"] == "ERROR");
        let reason = s.doc(&id)["terminationReason"].clone();
        assert_eq!(
            reason,
            "the extension archive was refused: entry \"../../escaped.txt\" leaves the extension's folder (a `..` component)",
            "pool {pool}: {doc}"
        );
        assert!(s.doc(&id)["readyAt"].is_null(), "never READY");
        let outside: Vec<_> = walk(s.data.path())
            .into_iter()
            .filter(|p| p.ends_with("escaped.txt"))
            .collect();
        assert!(outside.is_empty(), "nothing written: {outside:?}");
        s.stop();
    }
}

/// A platform whose browser is a headless shell (`CHROME_PATH`, the lighter browser an operator
/// may choose) cannot load extensions: `serve` refuses a create naming one with a 400 that says
/// so (top level or in `browserSettings`), instead of a session that fails at its start; one
/// without an extension is served by the shell, cold and warm.
#[test]
fn a_headless_shell_platform_refuses_an_extension_at_create_and_serves_the_rest() {
    let (_scratch, zip) = mark_zip();
    let shell = wallcrawler_testkit::headless_shell();
    for pool in ["0", "1"] {
        let s = Server::spawn_with(
            "25",
            &controller_bin(),
            &[
                ("WALLCRAWLER_POOL_SIZE", pool),
                ("CHROME_PATH", shell.to_str().unwrap()),
            ],
        );
        let ext = upload_extension(&s, &zip);
        for body in [
            format!(r#"{{"projectId":"{}","extensionId":"{ext}"}}"#, s.project),
            format!(
                r#"{{"projectId":"{}","browserSettings":{{"extensionId":"{ext}"}}}}"#,
                s.project
            ),
        ] {
            let (status, v) = s.call("POST", "/v1/sessions", &body);
            assert_eq!(status, 400, "pool {pool}: {v}");
            assert_eq!(
                v["message"],
                format!(
                    "extensionId: this platform's browser ({}) is a headless shell, which cannot load extensions",
                    shell.display()
                ),
                "pool {pool}: {v}"
            );
        }
        assert!(s.session_docs().is_empty(), "no session made");
        let v = create(&s, &format!(r#"{{"projectId":"{}"}}"#, s.project));
        assert_eq!(v["status"], "RUNNING", "{v}");
        let id = v["id"].as_str().unwrap().to_owned();
        // The shell names itself HeadlessChrome to DevTools (the full browser: Chrome).
        let r = drive_with("puppeteer", v["connectUrl"].as_str().unwrap());
        assert!(
            r["browserVersion"]
                .as_str()
                .unwrap()
                .starts_with("HeadlessChrome/"),
            "pool {pool}: the shell serves it: {r}"
        );
        s.release_and_wait(&id);
        s.stop();
    }
}

use sha2::Digest;

/// The controller binary, built beside this package's.
fn controller_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_wallcrawler-control-plane"))
        .with_file_name("wallcrawler-controller")
}

/// [`mark_extension`] in a scratch directory of its own (returned: the zip lives as long).
fn mark_zip() -> (tempfile::TempDir, PathBuf) {
    let scratch = tempfile::tempdir().unwrap();
    let zip = mark_extension(scratch.path());
    (scratch, zip)
}

/// Releases the extension scenario's two sessions (`withExt`, `plain`) and waits for each to end.
fn release_both(s: &Server, r: &serde_json::Value) {
    for id in [&r["withExt"], &r["plain"]] {
        s.release_and_wait(id.as_str().unwrap());
    }
}

/// Uploads the zip at `path` through the API (the SDK's multipart shape); the extension's id.
fn upload_extension(s: &Server, path: &std::path::Path) -> String {
    use std::io::{Read, Write};
    let bytes = std::fs::read(path).unwrap();
    let boundary = "wallcrawler-test-boundary";
    let mut body = format!(
        "--{boundary}\r\ncontent-disposition: form-data; name=\"file\"; filename=\"mark.zip\"\r\n\
         content-type: application/zip\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(&bytes);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let authority = s.base.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(authority).unwrap();
    write!(
        stream,
        "POST /v1/extensions HTTP/1.1\r\nhost: {authority}\r\nx-bb-api-key: {}\r\n\
         content-type: multipart/form-data; boundary={boundary}\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n",
        s.key,
        body.len()
    )
    .unwrap();
    stream.write_all(&body).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let json = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let v: serde_json::Value = serde_json::from_str(json).unwrap_or_default();
    v["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"))
        .to_owned()
}

/// Every path under `dir`.
fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}

/// Stagehand 4.4.0's `browserbase.launch({ apiKey, baseUrl })` against the platform with
/// `pool` warm controllers: it uploads its extension, creates the session with it, runs
/// through it (a page served on 127.0.0.1, `1+1` and a value from the page), and its close
/// releases the session and deletes the extension.
fn stagehand4_with_pool(pool: &str) {
    let s = Server::spawn_with("25", &controller_bin(), &[("WALLCRAWLER_POOL_SIZE", pool)]);
    let r = s.passing("stagehand4");
    assert_eq!(r["eval"], 2, "{r}");
    assert_eq!(r["fromPage"], 41, "{r}");
    assert_eq!(r["title"], "served", "{r}");
    let id = r["sessionId"].as_str().expect("the session's id");
    let doc = s.doc(id);
    let ext = doc["extensionId"]
        .as_str()
        .expect("created with its extension");
    s.assert_extension_gone(ext);
    s.wait_session(id, "released and ended", |d| {
        d["status"] == "COMPLETED" && d["endedAt"].is_string()
    });
    s.stop();
}

#[test]
fn stagehand_4_launches_runs_and_closes_through_its_extension_cold() {
    stagehand4_with_pool("0");
}

#[test]
fn stagehand_4_launches_runs_and_closes_through_its_extension_with_the_pool() {
    stagehand4_with_pool("2");
}

/// The stock Python SDK's `sessions.uploads.create` and the stock Node SDK's, each uploading a
/// file to one session of `s`; Puppeteer sets each on an `<input type=file>` by the path an
/// answer gave (the controller fetches it then) and the page reads its exact bytes; a path in
/// the uploads directory nothing was uploaded to gives the page nothing. Refused with their
/// reasons: `../../x` and `/etc/passwd` as names (400), another project's session (404), a
/// file one byte over the limit (413), an upload after the release (409). The files are stored
/// under the session's prefix in the data directory's `contexts/`.
fn uploads_reach_the_browser_by_the_returned_path(s: &Server) {
    use base64::Engine as _;
    let files = tempfile::tempdir().unwrap();
    let py_bytes: Vec<u8> = (0..=255u8).cycle().take(3_000).collect();
    let node_bytes = b"name,qty\nwidget,3\n\x00\xff binary tail".to_vec();
    let py_file = files.path().join("from python.bin");
    let node_file = files.path().join("orders.csv");
    std::fs::write(&py_file, &py_bytes).unwrap();
    std::fs::write(&node_file, &node_bytes).unwrap();
    // Another project's live-looking session.
    let mut foreign = SessionDoc {
        session_id: "sess_uploads_foreign".into(),
        project_id: "proj_someone_else".into(),
        created_at: wallcrawler_contract::time::iso8601_millis(1_767_225_600_000),
        expires_at: 4_102_444_800,
        uploads_dir: Some("/tmp".into()),
        ..Default::default()
    };
    foreign.set_status(wallcrawler_contract::InternalStatus::Ready);
    DirStore::new(s.dir().join("sessions"))
        .create(&foreign)
        .unwrap();

    let root = wallcrawler_testkit::repo_root();
    let out = Command::new(root.join(".venv/bin/python"))
        .arg(root.join("tests/py/uploads.py"))
        .args([&s.base, &s.key, &s.project])
        .arg(&py_file)
        .arg(&foreign.session_id)
        .output()
        .unwrap();
    let py = node::output_json("uploads.py", &out);
    let sid = py["session"]["id"].as_str().unwrap().to_owned();
    let py_path = py["upload"]["path"].as_str().unwrap().to_owned();
    assert_eq!(
        py["upload"]["message"], "File uploaded successfully",
        "{py}"
    );
    assert!(py_path.ends_with("-files/uploads/from python.bin"), "{py}");
    assert_eq!(py["dotdot"]["status"], 400, "{py}");
    let why = |v: &serde_json::Value| v["message"].as_str().unwrap_or("").to_owned();
    assert!(
        why(&py["dotdot"]).contains("one path component") && why(&py["dotdot"]).contains("../../x"),
        "{py}"
    );
    assert_eq!(py["absolute"]["status"], 400, "{py}");
    assert!(why(&py["absolute"]).contains("one path component"), "{py}");
    assert_eq!(py["foreign"]["status"], 404, "{py}");
    let stored = s
        .dir()
        .join("contexts")
        .join(wallcrawler_contract::storage::upload_key(
            &s.project,
            &sid,
            "from python.bin",
        ));
    assert_eq!(std::fs::read(&stored).unwrap(), py_bytes);
    large_upload_through_its_url(s, &sid, py["session"]["connectUrl"].as_str().unwrap());

    let r = node::command("uploads.mjs")
        .args(["--base", &s.base, "--key", &s.key, "--project", &s.project])
        .args(["--session", &sid])
        .args(["--connect", py["session"]["connectUrl"].as_str().unwrap()])
        .arg("--file")
        .arg(&node_file)
        .args(["--also", &py_path])
        .output()
        .unwrap();
    let r = node::output_json("uploads.mjs", &r);
    assert_eq!(r["ok"], true, "{r}");
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let read = |what: &str| r["read"][what]["files"].clone();
    assert_eq!(
        read("node"),
        serde_json::json!([{"name": "orders.csv", "base64": b64(&node_bytes)}]),
        "{r}"
    );
    assert_eq!(
        read("also"),
        serde_json::json!([{"name": "from python.bin", "base64": b64(&py_bytes)}]),
        "{r}"
    );
    assert_eq!(read("missing"), serde_json::json!([]), "{r}");
    assert_eq!(r["oversized"]["status"], 413, "{r}");
    assert!(
        why(&r["oversized"]).contains("larger than 4194304 bytes"),
        "{r}"
    );
    assert_eq!(r["ended"]["status"], 409, "{r}");
    assert!(why(&r["ended"]).contains("has ended"), "{r}");
}

/// A file over the one-request limit goes to the URL `POST …/uploads/url` hands out (a `PUT`
/// straight to the store: the server itself locally), and the page reads its exact bytes at
/// the `path` answered; a name that is not one path component gets no URL.
fn large_upload_through_its_url(s: &Server, sid: &str, connect_url: &str) {
    use std::io::{Read, Write};
    let uri = format!("/v1/sessions/{sid}/uploads/url");
    let (status, v) = s.call("POST", &uri, r#"{"fileName":"../../x"}"#);
    assert_eq!(status, 400, "{v}");
    let (status, v) = s.call("POST", &uri, r#"{"fileName":"big file.bin"}"#);
    assert_eq!(status, 201, "{v}");
    let path = v["path"].as_str().unwrap().to_owned();
    assert!(path.ends_with("-files/uploads/big file.bin"), "{v}");
    let url = v["uploadUrl"].as_str().unwrap();
    let rest = url.strip_prefix("http://").unwrap();
    let (authority, target) = rest.split_at(rest.find('/').unwrap());
    let big: Vec<u8> = (0..4 * 1024 * 1024 + 1)
        .map(|i: u32| (i * 7 % 251) as u8)
        .collect();
    let mut stream = std::net::TcpStream::connect(authority).unwrap();
    write!(
        stream,
        "PUT {target} HTTP/1.1\r\nhost: {authority}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        big.len()
    )
    .unwrap();
    stream.write_all(&big).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let r = node::command("uploads.mjs")
        .args(["--connect", connect_url, "--paths", &path, "--digest", "1"])
        .output()
        .unwrap();
    let r = node::output_json("uploads.mjs", &r);
    let sha: String = sha2::Sha256::digest(&big)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        r["read"]["0"]["files"],
        serde_json::json!([{"name": "big file.bin", "size": big.len(), "sha256": sha}]),
        "the page reads the large upload's exact bytes"
    );
}

#[test]
fn uploads_reach_a_pool_controllers_browser_by_the_returned_path() {
    let s = Server::start("25");
    uploads_reach_the_browser_by_the_returned_path(&s);
    s.stop();
}

#[test]
fn uploads_reach_a_cold_controllers_browser_by_the_returned_path() {
    let s = Server::spawn_with("25", &controller_bin(), &[("WALLCRAWLER_POOL_SIZE", "0")]);
    uploads_reach_the_browser_by_the_returned_path(&s);
    s.stop();
}
