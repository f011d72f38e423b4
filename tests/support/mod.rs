//! Shared helpers of the integration tests: the controller binary as a child process, real
//! Chromium, the Node clients, token minting and raw sockets.
//!
//! Every wait here is on an event (a line printed, a socket closing, a process exiting) with a
//! generous bound that only exists to turn a hang into a failure.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

pub(crate) mod aws;
pub(crate) mod upstream;

pub(crate) use wallcrawler_testkit::node::{node, node_output, node_spawn};
pub(crate) use wallcrawler_testkit::{chromium, repo_root};

/// Writes session `id` (project `proj_a`) READY in the sessions directory `sessions`, its
/// task's proxy at `task`: what a gateway over that directory routes to.
pub(crate) fn ready_session(sessions: &Path, id: &str, task: SocketAddr) {
    use wallcrawler_contract::InternalStatus;
    use wallcrawler_contract::session_doc::SessionDoc;
    use wallcrawler_local::session_dir::DirStore;
    let mut d = SessionDoc {
        session_id: id.into(),
        project_id: "proj_a".into(),
        created_at: "2026-01-01T00:00:00.000Z".into(),
        expires_at: now() + 600,
        private_ip: Some(task.ip().to_string()),
        proxy_port: Some(task.port()),
        ..Default::default()
    };
    d.set_status(InternalStatus::Ready);
    DirStore::new(sessions).create(&d).unwrap();
}

/// Bound on any single wait in these tests (a hang guard, not a speed assertion).
pub(crate) const WAIT: Duration = Duration::from_secs(45);

/// The name of the key pair the tests use ([`wallcrawler_testkit::keys`]): tokens are minted
/// with its private key, controllers and gateways get [`public_key`] only.
pub(crate) const KEY: &str = "integration-test-signing-key";

/// [`KEY`]'s public key, SPKI PEM (`WALLCRAWLER_JWT_PUBLIC_KEY`).
pub(crate) fn public_key() -> &'static str {
    static PEM: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| wallcrawler_testkit::keys::public_pem(KEY));
    PEM.as_str()
}

/// A file holding [`KEY`]'s private key (`WALLCRAWLER_JWT_PRIVATE_KEY_FILE` of `local` and
/// `token`, the modes that sign).
pub(crate) fn private_key_file() -> &'static str {
    static PATH: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        let p = wallcrawler_testkit::keys::private_key_file(KEY);
        p.to_str().expect("a UTF-8 temp path").to_owned()
    });
    PATH.as_str()
}

pub(crate) fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_wallcrawler-controller"))
}

/// A token for `session` (and `project`) signed with the private key named `key`, valid for
/// `ttl` seconds.
pub(crate) fn token(key: &str, session: &str, project: &str, ttl: u64) -> String {
    wallcrawler_testkit::keys::mint(key, session, project, now(), ttl)
}

pub(crate) fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Everything a child wrote to stderr so far, shared with the reader thread.
#[derive(Clone, Default)]
pub(crate) struct Captured(Arc<Mutex<Vec<String>>>);

impl Captured {
    pub(crate) fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
    pub(crate) fn text(&self) -> String {
        self.lines().join("\n")
    }
}

/// A running `wallcrawler-controller`.
pub(crate) struct Controller {
    pub child: Child,
    pub stderr: Captured,
    /// Disconnected once stderr reached its end (see `spawn`).
    stderr_eof: mpsc::Receiver<()>,
    /// Lines printed on stdout, as they arrive.
    stdout_rx: mpsc::Receiver<String>,
    pub stdout: Vec<String>,
    /// JSON log events (when LOG_FORMAT=json), as they arrive.
    events_rx: mpsc::Receiver<serde_json::Value>,
    pub events: Vec<serde_json::Value>,
}

impl Controller {
    /// Starts the binary with exactly `args` and `envs` (the test environment is cleared of
    /// the controller's own variables so nothing leaks in from the outside).
    pub(crate) fn spawn(args: &[&str], envs: &[(&str, &str)]) -> Controller {
        Controller::spawn_via(&[], args, envs)
    }

    /// Like [`Controller::spawn`], with the binary run through `wrapper` (a command and its
    /// arguments, e.g. `setpriv --reuid=65534 …`) when it is not empty.
    pub(crate) fn spawn_via(wrapper: &[&str], args: &[&str], envs: &[(&str, &str)]) -> Controller {
        let mut cmd = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest).arg(bin());
                c
            }
            None => Command::new(bin()),
        };
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, _) in std::env::vars() {
            if k.starts_with("WALLCRAWLER_")
                || k.starts_with("CDP_")
                || k == "SESSION_ID"
                || k == "PROJECT_ID"
                || k == "RUST_LOG"
            {
                cmd.env_remove(k);
            }
        }
        cmd.env("RUST_LOG", "debug");
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn wallcrawler-controller");
        let stderr = Captured::default();
        let (events_tx, events_rx) = mpsc::channel();
        // Closed (the sender dropped) when the reader has taken the last line: `wait_exit`
        // waits for it, so an exited controller's last words are always in `stderr`.
        let (stderr_eof_tx, stderr_eof) = mpsc::channel::<()>();
        {
            let err = child.stderr.take().unwrap();
            let cap = stderr.clone();
            std::thread::spawn(move || {
                let _eof = stderr_eof_tx;
                for line in BufReader::new(err).lines().map_while(Result::ok) {
                    if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
                        let _ = events_tx.send(v);
                    }
                    cap.0.lock().unwrap().push(line);
                }
            });
        }
        let (stdout_tx, stdout_rx) = mpsc::channel();
        {
            let out = child.stdout.take().unwrap();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    let _ = stdout_tx.send(line);
                }
            });
        }
        Controller {
            child,
            stderr,
            stderr_eof,
            stdout_rx,
            stdout: Vec::new(),
            events_rx,
            events: Vec::new(),
        }
    }

    /// `local --port 0` signing with [`KEY`] (so a test mints viewer credentials), with `envs`
    /// and its metrics listener; that listener's address.
    pub(crate) fn local_signing(envs: &[(&str, &str)]) -> (Controller, LocalSession, SocketAddr) {
        let mut all = vec![
            ("METRICS_ADDR", "127.0.0.1:0"),
            ("LOG_FORMAT", "json"),
            ("WALLCRAWLER_JWT_PRIVATE_KEY_FILE", private_key_file()),
        ];
        all.extend_from_slice(envs);
        let (mut c, s) = Controller::local(&[], &all);
        let ev = c.wait_event(|e| e["message"] == "metrics listening");
        let metrics = ev["addr"].as_str().expect("addr field").parse().unwrap();
        (c, s, metrics)
    }

    /// `local --port 0` with real Chromium; waits for the connectUrl.
    pub(crate) fn local(extra_args: &[&str], envs: &[(&str, &str)]) -> (Controller, LocalSession) {
        Controller::local_via(&[], extra_args, envs)
    }

    /// [`Controller::local`] with the binary run through `wrapper` (see [`Controller::spawn_via`]).
    pub(crate) fn local_via(
        wrapper: &[&str],
        extra_args: &[&str],
        envs: &[(&str, &str)],
    ) -> (Controller, LocalSession) {
        let chrome = chromium();
        let mut args = vec![
            "local",
            "--port",
            "0",
            "--chrome-path",
            chrome.to_str().unwrap(),
        ];
        args.extend_from_slice(extra_args);
        let mut c = Controller::spawn_via(wrapper, &args, envs);
        let line = c.wait_stdout_line(|l| l.starts_with("connectUrl: "));
        let url = line.trim_start_matches("connectUrl: ").to_owned();
        let mut s = LocalSession::parse(&url);
        let line = c.wait_stdout_line(|l| l.starts_with("liveViewUrl: "));
        s.live_view_url = line.trim_start_matches("liveViewUrl: ").to_owned();
        (c, s)
    }

    /// Waits for a stdout line matching `pred`.
    pub(crate) fn wait_stdout_line(&mut self, pred: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stdout_rx.recv_timeout(left) {
                Ok(l) => {
                    self.stdout.push(l.clone());
                    if pred(&l) {
                        return l;
                    }
                }
                Err(_) => panic!(
                    "no matching stdout line in time; stdout: {:?}\nstderr:\n{}",
                    self.stdout,
                    self.stderr.text()
                ),
            }
        }
    }

    /// Waits for a JSON log event matching `pred` (needs LOG_FORMAT=json).
    pub(crate) fn wait_event(
        &mut self,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        if let Some(e) = self.events.iter().find(|e| pred(e)) {
            return e.clone();
        }
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events_rx.recv_timeout(left) {
                Ok(e) => {
                    self.events.push(e.clone());
                    if pred(&e) {
                        return e;
                    }
                }
                Err(_) => panic!(
                    "no matching log event in time; stderr:\n{}",
                    self.stderr.text()
                ),
            }
        }
    }

    /// Waits for the process to exit (bounded).
    pub(crate) fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                // The exit can be seen before the reader thread took the last stderr lines.
                // Bounded: a descendant still holding the pipe must not hang the test.
                let _ = self.stderr_eof.recv_timeout(Duration::from_secs(10));
                return s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!(
                    "controller did not exit in time; stderr:\n{}",
                    self.stderr.text()
                );
            }
            // Polling a child's exit status has no event to wait on in std; 20 ms steps.
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(crate) fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), sig).unwrap();
    }

    /// The pid of the Chrome this controller launched (from its "chrome started" log line).
    pub(crate) fn chrome_pid(&self) -> i32 {
        let text = self.stderr.text();
        let re = regex_lite::Regex::new(
            r#"pid[="]+:?(\d+)[^\n]*chrome started|chrome started[^\n]*pid[=":]+(\d+)"#,
        )
        .unwrap();
        for line in text.lines().filter(|l| l.contains("chrome started")) {
            if let Some(c) = re.captures(line) {
                let m = c.get(1).or(c.get(2)).unwrap();
                return m.as_str().parse().unwrap();
            }
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(line)
                && let Some(p) = v["pid"].as_i64()
            {
                return p as i32;
            }
        }
        panic!("no 'chrome started' line in:\n{text}");
    }
}

impl Drop for Controller {
    /// A controller still running at the end of a test is asked to stop (SIGTERM: Chrome is
    /// closed cleanly), and killed only if it does not within a bound.
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_some() {
            return;
        }
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The parts of a local connectUrl.
#[derive(Debug, Clone)]
pub(crate) struct LocalSession {
    pub connect_url: String,
    pub addr: SocketAddr,
    pub token: String,
    /// The `liveViewUrl` `local` printed (a control-mode viewer credential); empty when parsed
    /// from a connectUrl alone.
    pub live_view_url: String,
}

impl LocalSession {
    /// The parts of `ws://<addr>/?signingKey=<token>`; panics on any other shape (a URL
    /// without the `/` path among them: some clients send its empty path as is).
    pub(crate) fn parse(url: &str) -> LocalSession {
        let rest = url.strip_prefix("ws://").expect("ws url");
        let (hostport, query) = rest
            .split_once("/?")
            .unwrap_or_else(|| panic!("not ws://host:port/?query: {url}"));
        let token = query
            .strip_prefix("signingKey=")
            .expect("signingKey")
            .to_owned();
        LocalSession {
            connect_url: url.to_owned(),
            addr: hostport.parse().unwrap(),
            token,
            live_view_url: String::new(),
        }
    }

    pub(crate) fn ws_url(&self) -> String {
        format!("ws://{}", self.addr)
    }

    pub(crate) fn http_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `client` (tests/node/drive.mjs) at `url`, the token in an `Authorization` header.
    pub(crate) fn drive_with_bearer(&self, client: &str, url: &str) -> serde_json::Value {
        node(
            "drive.mjs",
            &["--client", client, "--url", url, "--bearer", &self.token],
        )
    }

    /// A live-view credential for this session in `mode` (`view` or `control`), for one
    /// `page` when given, signed with [`KEY`] (the key of a [`Controller::local_signing`]),
    /// valid for ten minutes.
    pub(crate) fn viewer_credential(&self, mode: &str, page: Option<&str>) -> String {
        let from = now();
        wallcrawler_testkit::keys::mint_viewer(
            KEY,
            &self.session_id(),
            mode,
            page,
            from..from + 600,
        )
    }

    /// Runs `script` (tests/node) on this session: `--url` its connectUrl, `--session` its id,
    /// `--mint`/`--key-file` to mint viewer credentials with `wallcrawler-controller token
    /// --viewer` and [`KEY`], `--chrome` the viewer's browser, then `extra`; asserts `ok`.
    pub(crate) fn node_viewer(&self, script: &str, extra: &[&str]) -> serde_json::Value {
        let (chrome, mint, session) = (chromium(), bin(), self.session_id());
        let mut args = vec![
            "--url",
            &self.connect_url,
            "--session",
            &session,
            "--mint",
            mint.to_str().unwrap(),
            "--key-file",
            private_key_file(),
            "--chrome",
            chrome.to_str().unwrap(),
            "--timeout-ms",
            "60000",
        ];
        args.extend_from_slice(extra);
        let r = node(script, &args);
        assert_eq!(r["ok"], true, "{script} {extra:?}: {r}");
        r
    }

    /// The session id inside the local token.
    pub(crate) fn session_id(&self) -> String {
        use base64::Engine;
        let payload = self.token.split('.').nth(1).unwrap();
        let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload)
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
        v["sessionId"].as_str().unwrap().to_owned()
    }
}

/// Sends `request` to `addr` and returns the socket once the answer's head arrived (read
/// byte by byte: a 101 keeps the socket open), with that head.
pub(crate) fn first_head(addr: SocketAddr, request: &[u8]) -> (std::net::TcpStream, String) {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.write_all(request).unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut b).unwrap(), 1, "closed before an answer");
        head.push(b[0]);
    }
    (s, String::from_utf8(head).unwrap())
}

/// A viewer's socket (`/viewer/ws`), and the messages it reads until `until` matches one
/// (returned too, frames' data elided).
pub(crate) fn viewer_read_until(
    ws: &mut tokio_tungstenite::tungstenite::WebSocket<std::net::TcpStream>,
    mut until: impl FnMut(&serde_json::Value) -> bool,
) -> Vec<serde_json::Value> {
    use tokio_tungstenite::tungstenite::Message;
    let mut seen = Vec::new();
    loop {
        let m = ws
            .read()
            .unwrap_or_else(|e| panic!("no message ({e}) after {seen:?}"));
        let Message::Text(t) = m else {
            continue;
        };
        let mut v: serde_json::Value = serde_json::from_str(t.as_str()).unwrap();
        let done = until(&v);
        if v["type"] == "frame" {
            v["data"] = "…".into();
        }
        seen.push(v);
        if done {
            return seen;
        }
    }
}

/// What a new viewer is sent first: a non-empty tab list, a JPEG frame, and the handoff
/// banner's state, which must be "none pending".
#[derive(Default)]
pub(crate) struct ViewerStart {
    pub tabs: bool,
    pub frame: bool,
}

impl ViewerStart {
    /// Notes `v`; `false` when it is none of those messages (the caller's to judge).
    pub(crate) fn note(&mut self, v: &serde_json::Value) -> bool {
        match v["type"].as_str() {
            Some("tabs") => self.tabs = !v["tabs"].as_array().unwrap().is_empty(),
            Some("frame") => {
                self.frame = v["data"].as_str().is_some_and(|d| d.starts_with("/9j/"));
            }
            Some("handoff") => assert!(v["handoff"].is_null(), "{v}"),
            _ => return false,
        }
        true
    }

    /// Whether both the tabs and a frame came.
    pub(crate) fn both(&self) -> bool {
        self.tabs && self.frame
    }
}

/// One raw HTTP exchange: sends `request` bytes, reads until the server closes (bounded).
/// Returns the whole answer as text.
pub(crate) fn raw_http(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.write_all(request).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Status code of an HTTP answer.
pub(crate) fn status_of(answer: &str) -> u16 {
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not HTTP: {answer:?}"))
}

/// A WebSocket upgrade request for `path` with the given extra header lines.
pub(crate) fn upgrade_request(path: &str, host: &str, extra: &[&str]) -> Vec<u8> {
    let mut r = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
    );
    for h in extra {
        r.push_str(h);
        r.push_str("\r\n");
    }
    r.push_str("\r\n");
    r.into_bytes()
}

/// Chrome processes whose command line mentions `needle`.
pub(crate) fn processes_with(needle: &str) -> Vec<i32> {
    let mut pids = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        // Zombies have an empty cmdline and hold nothing.
        if String::from_utf8_lossy(&cmd).contains(needle) {
            pids.push(pid);
        }
    }
    pids
}

/// The user-data-dir of the Chrome with `pid`.
pub(crate) fn user_data_dir_of(pid: i32) -> String {
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    String::from_utf8_lossy(&cmd)
        .split('\0')
        .find_map(|a| a.strip_prefix("--user-data-dir=").map(str::to_owned))
        .expect("user-data-dir flag")
}

/// The session id the proxy-mode tests serve.
pub(crate) const SESSION: &str = "sess_11111111-2222-3333-4444-555555555555";

/// `proxy --listen 127.0.0.1:0 --upstream <upstream>` for [`SESSION`] signed by [`KEY`];
/// returns the controller and the address it listens on.
pub(crate) fn proxy(upstream: SocketAddr, envs: &[(&str, &str)]) -> (Controller, SocketAddr) {
    let up = upstream.to_string();
    let mut all = vec![
        ("SESSION_ID", SESSION),
        ("WALLCRAWLER_JWT_PUBLIC_KEY", public_key()),
        ("LOG_FORMAT", "json"),
        ("METRICS_ADDR", ""),
    ];
    all.extend_from_slice(envs);
    let mut c = Controller::spawn(
        &["proxy", "--listen", "127.0.0.1:0", "--upstream", &up],
        &all,
    );
    let ev = c.wait_event(|e| e["message"] == "proxy ready");
    let addr = ev["listen"]
        .as_str()
        .expect("listen field")
        .parse()
        .unwrap();
    (c, addr)
}

/// A stand-in for the ECS task metadata v4 endpoint: answers every GET with a task document
/// naming `task_arn`, and `private_ip` with the interface's MAC address `mac`. Returns the
/// `ECS_CONTAINER_METADATA_URI_V4` value.
pub(crate) fn task_metadata_server(task_arn: &str, private_ip: &str, mac: &str) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let body = serde_json::json!({
        "Cluster": "wallcrawler",
        "TaskARN": task_arn,
        "Family": "wallcrawler-browser",
        "Containers": [{"Name": "controller", "Networks": [{"NetworkMode": "awsvpc",
            "IPv4Addresses": [private_ip], "MACAddress": mac}]}]
    })
    .to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let _ = upstream::read_head(&mut s);
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    format!("http://{addr}/v4/test-container")
}

/// `wallcrawler-controller run` with JSON logs, real Chromium on free ports, no metrics, the
/// local AWS, and `envs` on top.
pub(crate) fn run_task(envs: &[(&str, &str)]) -> Controller {
    let chrome = chromium();
    let aws = aws::env();
    let mut all: Vec<(&str, &str)> = vec![
        ("LOG_FORMAT", "json"),
        ("CHROME_PATH", chrome.to_str().unwrap()),
        ("CHROME_DEBUG_PORT", "0"),
        ("CDP_PROXY_PORT", "0"),
        ("METRICS_ADDR", ""),
        // Pages served on this machine's loopback are what these tests browse (a test of the
        // default refusal sets it empty).
        ("EGRESS_ALLOW", "127.0.0.0/8,::1"),
    ];
    all.extend(aws.iter().map(|(k, v)| (*k, v.as_str())));
    all.extend_from_slice(envs);
    Controller::spawn(&["run"], &all)
}

/// `n` connections to `addr` at once, each sending `request` (an upgrade) as soon as it is
/// connected, all before the first answer is read; asserts every one got 101 and is a working
/// CDP connection to a browser (`Browser.getVersion`).
pub(crate) fn burst_of_upgrades(addr: SocketAddr, request: &[u8], n: usize) {
    use tokio_tungstenite::tungstenite::{self, Message};
    let mut conns: Vec<TcpStream> = (0..n)
        .map(|_| {
            let mut t = TcpStream::connect(addr).unwrap();
            t.set_read_timeout(Some(WAIT)).unwrap();
            t.set_write_timeout(Some(WAIT)).unwrap();
            t.write_all(request).unwrap();
            t
        })
        .collect();
    let mut refused = Vec::new();
    for (i, c) in conns.iter_mut().enumerate() {
        let head = upstream::read_head(c).unwrap_or_else(|| panic!("connection {i}: no answer"));
        if status_of(&head) != 101 {
            refused.push((i, head));
        }
    }
    assert!(
        refused.is_empty(),
        "{} of {n} refused, first: {:?}",
        refused.len(),
        refused.first()
    );
    for (i, c) in conns.into_iter().enumerate() {
        let mut ws =
            tungstenite::WebSocket::from_raw_socket(c, tungstenite::protocol::Role::Client, None);
        let msg = serde_json::json!({"id": i, "method": "Browser.getVersion"});
        ws.send(Message::text(msg.to_string())).unwrap();
        let reply = loop {
            if let Message::Text(t) = ws.read().unwrap() {
                let v: serde_json::Value = serde_json::from_str(t.as_str()).unwrap();
                if v["id"] == i {
                    break v;
                }
            }
        };
        assert!(
            reply["result"]["product"].as_str().is_some(),
            "connection {i}: {reply}"
        );
    }
}

/// `wallcrawler-controller gateway` over the session documents in `sessions`, listening on
/// `listen`, with `envs` on top; its bound address (read from its `listen:` line).
pub(crate) fn gateway(
    sessions: &Path,
    listen: &str,
    envs: &[(&str, &str)],
) -> (Controller, SocketAddr) {
    let dir = sessions.display().to_string();
    let mut all = vec![
        ("SESSIONS_DIR", dir.as_str()),
        ("WALLCRAWLER_JWT_PUBLIC_KEY", public_key()),
        ("GATEWAY_LISTEN", listen),
        ("LOG_FORMAT", "json"),
    ];
    all.extend_from_slice(envs);
    let mut c = Controller::spawn(&["gateway"], &all);
    let line = c.wait_stdout_line(|l| l.starts_with("listen: "));
    (c, line.trim_start_matches("listen: ").parse().unwrap())
}
