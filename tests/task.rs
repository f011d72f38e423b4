//! The ECS task against a local AWS (moto) with real Chromium: READY with every attribute, the
//! context restored and saved (cookies of both kinds, localStorage), every normal end, crash,
//! idle, keepAlive, expiry, and a session released before it was ready.

use std::time::Duration;

use nix::sys::signal::Signal;
use wallcrawler_contract::storage::{SESSION_COOKIES_FILE, profile_key};

use crate::support::aws::{self, AttributeValue, get_session, number, put_session, s, text};
use crate::support::{Controller, node, node_output, now, run_task, task_metadata_server, token};

const PROJECT: &str = "proj_task";
const TASK_ARN: &str = "arn:aws:ecs:us-east-1:123456789012:task/wallcrawler/0123456789abcdef";

/// What one test's AWS side looks like.
struct World {
    table: String,
    bucket: String,
    secret_arn: String,
    signing_key: String,
    context: String,
}

impl World {
    /// A task's environment for session `id` with the bucket as its files store (no context).
    fn files_env<'a>(&'a self, id: &'a str) -> [(&'a str, &'a str); 5] {
        [
            ("SESSION_ID", id),
            ("PROJECT_ID", PROJECT),
            ("SESSIONS_TABLE_NAME", self.table.as_str()),
            (
                "WALLCRAWLER_JWT_PUBLIC_KEY_SECRET_ARN",
                self.secret_arn.as_str(),
            ),
            ("FILES_BUCKET_NAME", self.bucket.as_str()),
        ]
    }

    fn new() -> World {
        let signing_key = aws::unique("key");
        World {
            table: aws::create_sessions_table(),
            bucket: aws::create_bucket(),
            secret_arn: aws::create_secret(&signing_key),
            signing_key,
            context: aws::unique("ctx"),
        }
    }

    fn key(&self) -> String {
        profile_key(PROJECT, &self.context)
    }

    /// A session item in `status` with a token signed by the secret; returns (id, token).
    fn session(&self, status: &str, extra: Vec<(&str, AttributeValue)>) -> (String, String) {
        let id = format!("sess_{}", uuid::Uuid::new_v4());
        let t = token(&self.signing_key, &id, PROJECT, 3600);
        let mut item = vec![
            ("sessionId", s(&id)),
            ("internalStatus", s(status)),
            (
                "status",
                s(if status == "STOPPED" {
                    "COMPLETED"
                } else {
                    "PENDING"
                }),
            ),
            ("projectId", s(PROJECT)),
            ("signingKey", s(&t)),
            ("keepAlive", AttributeValue::Bool(false)),
            ("createdAt", s("2026-11-21T00:00:00.000Z")),
            ("expiresAt", AttributeValue::N((now() + 3600).to_string())),
        ];
        item.extend(extra);
        put_session(&self.table, item);
        (id, t)
    }

    fn env<'a>(&'a self, session: &'a str, persist: bool) -> Vec<(&'a str, String)> {
        vec![
            ("SESSION_ID", session.to_owned()),
            ("PROJECT_ID", PROJECT.to_owned()),
            ("SESSIONS_TABLE_NAME", self.table.clone()),
            (
                "WALLCRAWLER_JWT_PUBLIC_KEY_SECRET_ARN",
                self.secret_arn.clone(),
            ),
            ("CONTEXT_ID", self.context.clone()),
            ("CONTEXTS_BUCKET_NAME", self.bucket.clone()),
            ("CONTEXT_S3_KEY", self.key()),
            ("CONTEXT_PERSIST", persist.to_string()),
        ]
    }

    fn start(&self, session: &str, persist: bool, more: &[(&str, &str)]) -> Controller {
        let env = self.env(session, persist);
        let mut all: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        all.extend_from_slice(more);
        run_task(&all)
    }

    /// [`World::start`] with `CDP_DISCONNECT_TIMEOUT` (for the first client to come) and
    /// `CDP_DISCONNECT_GRACE` (after the last client left), in seconds.
    fn start_with_disconnect(&self, session: &str, timeout: &str, grace: &str) -> Controller {
        let more = [
            ("CDP_DISCONNECT_TIMEOUT", timeout),
            ("CDP_DISCONNECT_GRACE", grace),
        ];
        self.start(session, false, &more)
    }

    /// [`World::start`] in direct mode (`PUBLIC_IP_REQUIRED`), the task metadata endpoint at
    /// `metadata`.
    fn start_direct(&self, session: &str, persist: bool, metadata: &str) -> Controller {
        let more = [
            ("ECS_CONTAINER_METADATA_URI_V4", metadata),
            ("PUBLIC_IP_REQUIRED", "true"),
        ];
        self.start(session, persist, &more)
    }
}

/// An archive holding one session cookie for the test origin (restored over CDP at start).
fn archive_with_cookie() -> Vec<u8> {
    let cookies = serde_json::json!([{"name": "seeded", "value": "from-archive", "domain": "app.example.test", "path": "/"}]);
    let empty = tempfile::tempdir().unwrap();
    let data = serde_json::to_vec(&cookies).unwrap();
    let (_, gz) = wallcrawler_controller::profile::pack_gz(
        empty.path(),
        Vec::new(),
        &[(SESSION_COOKIES_FILE, &data)],
    )
    .unwrap();
    gz
}

/// Waits for READY in the log and returns the local ws URL for `token`.
fn wait_ready(c: &mut Controller, token: &str) -> String {
    let ev = c.wait_event(|e| e["message"] == "session ready");
    let port = ev["proxy"]
        .as_str()
        .unwrap()
        .rsplit(':')
        .next()
        .unwrap()
        .to_owned();
    format!("ws://127.0.0.1:{port}/?signingKey={token}")
}

/// A network interface in moto's default VPC, with a public address when `public`: (private,
/// MAC, public).
fn eni(public: bool) -> (String, String, Option<String>) {
    let ec2 = aws::ec2();
    aws::rt().block_on(async move {
        let subnets = ec2.describe_subnets().send().await.unwrap();
        let subnet = subnets.subnets()[0].subnet_id().unwrap().to_owned();
        let eni = ec2
            .create_network_interface()
            .subnet_id(subnet)
            .send()
            .await
            .unwrap();
        let eni = eni.network_interface().unwrap();
        let private = eni.private_ip_address().unwrap().to_owned();
        let mac = eni.mac_address().unwrap().to_owned();
        if !public {
            return (private, mac, None);
        }
        let alloc = ec2
            .allocate_address()
            .domain(aws_sdk_ec2::types::DomainType::Vpc)
            .send()
            .await
            .unwrap();
        ec2.associate_address()
            .allocation_id(alloc.allocation_id().unwrap())
            .network_interface_id(eni.network_interface_id().unwrap())
            .send()
            .await
            .unwrap();
        (private, mac, Some(alloc.public_ip().unwrap().to_owned()))
    })
}

enum End {
    Sigterm,
    BrowserClose,
}

fn full_lifecycle(end: End) {
    let w = World::new();
    aws::put_object(&w.bucket, &w.key(), archive_with_cookie());
    let (private_ip, mac, public_ip) = eni(true);
    let public_ip = public_ip.unwrap();
    let metadata = task_metadata_server(TASK_ARN, &private_ip, &mac);

    // Direct mode: the public address of the task's own interface (EC2, by its MAC).
    let (first, t1) = w.session("PROVISIONING", vec![]);
    let mut c = w.start_direct(&first, true, &metadata);
    let url = wait_ready(&mut c, &t1);
    let item = get_session(&w.table, &first);
    assert_eq!(text(&item, "internalStatus").as_deref(), Some("READY"));
    assert_eq!(text(&item, "status").as_deref(), Some("RUNNING"));
    assert_eq!(
        text(&item, "publicIP").as_deref(),
        Some(public_ip.as_str()),
        "public IP from the task's interface"
    );
    assert_eq!(text(&item, "ecsTaskArn").as_deref(), Some(TASK_ARN));
    assert!(
        text(&item, "readyAt")
            .is_some_and(|t| wallcrawler_contract::time::parse_iso8601(&t).is_some())
    );
    // The route, and no connectUrl: the controller never reads the token; the API forms the
    // URL from these and the token when it answers.
    let port = url.split(':').nth(2).unwrap().split('/').next().unwrap();
    assert_eq!(number(&item, "proxyPort"), port.parse().ok());
    assert_eq!(text(&item, "connectUrl"), None);

    let seen = node("context.mjs", &["--url", &url, "--mode", "read"]);
    assert_eq!(
        seen["cookies"]["seeded"], "from-archive",
        "the archived cookie is restored: {seen}"
    );
    let args: Vec<&str> = match end {
        End::Sigterm => vec!["--url", &url, "--mode", "write"],
        End::BrowserClose => vec!["--url", &url, "--mode", "write", "--close"],
    };
    let wrote = node("context.mjs", &args);
    assert_eq!(wrote["ok"], true, "{wrote}");
    let session_cookies = wrote["sessionCookies"].as_array().unwrap();
    assert!(
        session_cookies.contains(&serde_json::json!("session")),
        "{wrote}"
    );
    if let End::Sigterm = end {
        c.signal(Signal::SIGTERM);
    }
    assert_eq!(c.wait_exit().code(), Some(0), "{}", c.stderr.text());
    let item = get_session(&w.table, &first);
    assert_eq!(text(&item, "internalStatus").as_deref(), Some("STOPPED"));
    assert_eq!(text(&item, "status").as_deref(), Some("COMPLETED"));
    assert!(text(&item, "endedAt").is_some());
    // Written with endedAt: the bytes through the session's proxies (it has none).
    assert_eq!(number(&item, "proxyBytes"), Some(0.0), "{item:?}");

    let (second, t2) = w.session("PROVISIONING", vec![]);
    let mut c2 = w.start(&second, false, &[("PUBLIC_IP", "198.51.100.9")]);
    let url2 = wait_ready(&mut c2, &t2);
    assert_eq!(
        text(&get_session(&w.table, &second), "publicIP").as_deref(),
        Some("198.51.100.9")
    );
    let back = node("context.mjs", &["--url", &url2, "--mode", "read"]);
    assert_eq!(back["cookies"]["persistent"], "p-value", "{back}");
    assert_eq!(
        back["cookies"]["session"], "s-value",
        "the session cookie travels too: {back}"
    );
    assert_eq!(back["localStorage"], "ls-value", "{back}");
    c2.signal(Signal::SIGTERM);
    assert_eq!(c2.wait_exit().code(), Some(0));
}

/// Behind the connect gateway (no PUBLIC_IP_REQUIRED) the task announces its private address
/// and never asks EC2, though its interface has a public one.
#[test]
fn behind_the_gateway_the_task_announces_its_private_address() {
    let w = World::new();
    let (private_ip, mac, _) = eni(true);
    let metadata = task_metadata_server(TASK_ARN, &private_ip, &mac);
    let (id, t) = w.session("PROVISIONING", vec![]);
    let mut c = w.start(&id, false, &[("ECS_CONTAINER_METADATA_URI_V4", &metadata)]);
    wait_ready(&mut c, &t);
    let item = get_session(&w.table, &id);
    assert_eq!(
        text(&item, "privateIP").as_deref(),
        Some(private_ip.as_str())
    );
    assert_eq!(
        text(&item, "publicIP").as_deref(),
        Some(private_ip.as_str())
    );
    let chosen = c.wait_event(|e| e["message"] == "announced address chosen");
    assert_eq!(
        chosen["source"], "task metadata private address",
        "{chosen}"
    );
    c.signal(Signal::SIGTERM);
    assert_eq!(c.wait_exit().code(), Some(0), "{}", c.stderr.text());
}

/// Direct mode with no public address on the task's interface: the session fails with a clear
/// reason and the task never announces its private address.
#[test]
fn direct_mode_without_a_public_ip_fails_the_session_and_announces_nothing() {
    let w = World::new();
    let (private_ip, mac, _) = eni(false);
    let metadata = task_metadata_server(TASK_ARN, &private_ip, &mac);
    let (id, _) = w.session("PROVISIONING", vec![]);
    let mut c = w.start_direct(&id, false, &metadata);
    assert_ne!(c.wait_exit().code(), Some(0), "{}", c.stderr.text());
    let item = get_session(&w.table, &id);
    assert_eq!(text(&item, "internalStatus").as_deref(), Some("FAILED"));
    assert_eq!(text(&item, "status").as_deref(), Some("ERROR"));
    assert_eq!(
        text(&item, "terminationReason").as_deref(),
        Some(
            "the task's public IP (PUBLIC_IP_REQUIRED) could not be found: the task's network \
             interface has no public IPv4 address"
        ),
        "{item:?}"
    );
    for never in ["publicIP", "privateIP", "readyAt", "connectUrl"] {
        assert!(!item.contains_key(never), "{never} written: {item:?}");
    }
    assert!(text(&item, "endedAt").is_some());
}

#[test]
fn full_lifecycle_ending_with_sigterm() {
    full_lifecycle(End::Sigterm);
}

#[test]
fn full_lifecycle_ending_with_puppeteer_browser_close() {
    full_lifecycle(End::BrowserClose);
}

/// The archive's entries: path → content.
fn archive_entries(gz: &[u8]) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(gz));
    let mut all = std::collections::BTreeMap::new();
    for entry in tar.entries().unwrap() {
        let mut entry = entry.unwrap();
        let path = entry.path().unwrap().to_string_lossy().into_owned();
        let mut data = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut data).unwrap();
        all.insert(path, data);
    }
    all
}

/// A client's `Browser.close` in a form that a byte-pattern check misses ends the session
/// normally: exit 0, STOPPED/COMPLETED, the profile saved. Returns the controller's log and the
/// saved archive's entries.
fn odd_browser_close_ends_normally(
    form: &str,
) -> (String, std::collections::BTreeMap<String, Vec<u8>>) {
    let w = World::new();
    let (id, t) = w.session("PROVISIONING", vec![]);
    let mut c = w.start(&id, true, &[]);
    let url = wait_ready(&mut c, &t);
    assert_eq!(
        node("context.mjs", &["--url", &url, "--mode", "write"])["ok"],
        true
    );
    let closed = node("close-raw.mjs", &["--url", &url, "--form", form]);
    assert_eq!(closed["ok"], true, "{closed}");
    assert_eq!(c.wait_exit().code(), Some(0), "{}", c.stderr.text());
    let item = get_session(&w.table, &id);
    assert_eq!(text(&item, "internalStatus").as_deref(), Some("STOPPED"));
    assert_eq!(text(&item, "status").as_deref(), Some("COMPLETED"));
    assert!(text(&item, "terminationReason").is_none(), "{item:?}");
    assert!(text(&item, "endedAt").is_some());
    let saved = aws::get_object(&w.bucket, &w.key()).expect("the profile was saved");
    let entries = archive_entries(&saved);
    assert!(
        entries.keys().any(|p| p.ends_with("Default/Cookies")),
        "the on-disk cookie store is in the archive: {:?}",
        entries.keys()
    );
    (c.stderr.text(), entries)
}

/// The proxy withheld the command and the controller closed Chrome itself, after exporting
/// the session cookies.
fn assert_withheld_and_cookies_exported(
    form: &str,
    log: &str,
    entries: &std::collections::BTreeMap<String, Vec<u8>>,
) {
    assert!(log.contains("ClientClosedBrowser"), "{form}: {log}");
    let cookies = entries
        .get(SESSION_COOKIES_FILE)
        .unwrap_or_else(|| panic!("{form}: no session cookies saved: {:?}", entries.keys()));
    let cookies: serde_json::Value = serde_json::from_slice(cookies).unwrap();
    assert!(
        cookies
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "session"),
        "{form}: {cookies}"
    );
}

#[test]
fn an_escaped_browser_close_ends_the_session_normally() {
    let (log, entries) = odd_browser_close_ends_normally("escaped");
    assert_withheld_and_cookies_exported("escaped", &log, &entries);
}

#[test]
fn a_fragmented_browser_close_ends_the_session_normally() {
    let (log, entries) = odd_browser_close_ends_normally("fragmented");
    assert_withheld_and_cookies_exported("fragmented", &log, &entries);
}

/// Padded past 64 KiB (the inspected size before every message was judged), the command is
/// still withheld: the session cookies are exported too.
#[test]
fn a_browser_close_padded_past_64_kib_ends_the_session_normally() {
    let (log, entries) = odd_browser_close_ends_normally("padded");
    assert_withheld_and_cookies_exported("padded", &log, &entries);
}

#[test]
fn released_before_start_writes_only_proxy_bytes_and_ended_at() {
    let w = World::new();
    let (id, _) = w.session("STOPPED", vec![]);
    let mut c = w.start(&id, true, &[]);
    assert_eq!(c.wait_exit().code(), Some(0), "{}", c.stderr.text());
    let item = get_session(&w.table, &id);
    assert_eq!(text(&item, "internalStatus").as_deref(), Some("STOPPED"));
    assert!(text(&item, "readyAt").is_none() && text(&item, "connectUrl").is_none());
    assert!(text(&item, "endedAt").is_some());
    assert_eq!(number(&item, "proxyBytes"), Some(0.0));
}

/// The release lands while Chrome is starting (held at a gate by a wrapper script): the READY
/// write's condition fails, nothing is brought back to life, the task ends normally.
#[test]
fn released_while_starting_is_not_brought_back() {
    let w = World::new();
    let (id, _) = w.session("PROVISIONING", vec![]);
    let dir = tempfile::tempdir().unwrap();
    let gate = dir.path().join("gate");
    let wrapper = dir.path().join("chrome-at-gate.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nwhile [ ! -e '{}' ]; do sleep 0.05; done\nexec '{}' \"$@\"\n",
            gate.display(),
            crate::support::chromium().display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let mut c = w.start(&id, true, &[("CHROME_PATH", wrapper.to_str().unwrap())]);
    c.wait_event(|e| e["message"] == "chrome started");
    release_in_table(&w.table, &id);
    std::fs::write(&gate, "").unwrap();
    assert_eq!(c.wait_exit().code(), Some(0), "{}", c.stderr.text());
    let item = get_session(&w.table, &id);
    assert_eq!(text(&item, "internalStatus").as_deref(), Some("STOPPED"));
    assert!(
        text(&item, "readyAt").is_none(),
        "READY must not be written"
    );
    assert!(text(&item, "endedAt").is_some());
    assert!(number(&item, "proxyBytes").is_some());
    assert!(
        aws::get_object(&w.bucket, &w.key()).is_none(),
        "nothing persisted"
    );
}

/// The API's release write (STOPPED, COMPLETED), and no stop reaching the task.
fn release_in_table(table: &str, id: &str) {
    aws::rt()
        .block_on(
            aws::dynamo()
                .update_item()
                .table_name(table)
                .key("sessionId", s(id))
                .update_expression("SET internalStatus = :s, #st = :c")
                .expression_attribute_names("#st", "status")
                .expression_attribute_values(":s", s("STOPPED"))
                .expression_attribute_values(":c", s("COMPLETED"))
                .send(),
        )
        .unwrap();
}

/// Polls (bounded by `within`) until nothing accepts connections at `addr`.
fn wait_refused(addr: &str, within: Duration) -> bool {
    let deadline = std::time::Instant::now() + within;
    while std::time::Instant::now() < deadline {
        if std::net::TcpStream::connect(addr).is_err() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// A release whose stop never reached the task (it read the item before READY, so it named no
/// task; or its StopTask failed): the item alone says STOPPED. The controller, watching its
/// item, ends the session itself within seconds — its proxy refuses connections, the profile
/// is saved, `endedAt` is written and the release's status is kept — with no signal sent.
#[test]
fn a_release_whose_stop_missed_the_task_still_ends_the_browser() {
    let w = World::new();
    let (id, t) = w.session(
        "PROVISIONING",
        vec![("keepAlive", AttributeValue::Bool(true))],
    );
    let mut c = w.start(&id, true, &[("ITEM_WATCH_SECONDS", "1")]);
    let url = wait_ready(&mut c, &t);
    let proxy = url
        .trim_start_matches("ws://")
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let chrome = c.chrome_pid();
    assert!(std::net::TcpStream::connect(&proxy).is_ok(), "serving");
    release_in_table(&w.table, &id);
    assert!(
        wait_refused(&proxy, Duration::from_secs(30)),
        "the proxy still accepts connections 30 s after the release; stderr:\n{}",
        c.stderr.text()
    );
    assert_eq!(c.wait_exit().code(), Some(0), "{}", c.stderr.text());
    assert!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(chrome), None).is_err(),
        "chrome is gone"
    );
    let ending = c.wait_event(|e| {
        e["message"] == "the session item turned terminal elsewhere; ending the session"
    });
    assert_eq!(ending["status"], "STOPPED", "{ending}");
    let item = get_session(&w.table, &id);
    assert_eq!(text(&item, "internalStatus").as_deref(), Some("STOPPED"));
    assert_eq!(text(&item, "status").as_deref(), Some("COMPLETED"));
    assert!(text(&item, "terminationReason").is_none(), "{item:?}");
    assert!(text(&item, "endedAt").is_some(), "{item:?}");
    assert!(
        aws::get_object(&w.bucket, &w.key()).is_some(),
        "the profile was saved as on any normal end"
    );
}

/// Without keepAlive, a session whose last client left ends after the short grace, not after
/// the disconnect timeout (which only gives the creator time to connect the first client).
#[test]
fn a_session_ends_a_grace_after_its_last_client_left() {
    let w = World::new();
    let (id, t) = w.session("PROVISIONING", vec![]);
    let mut c = w.start_with_disconnect(&id, "3600", "1");
    let url = wait_ready(&mut c, &t);
    let (mut holder, lines) = crate::support::node_spawn("hold.mjs", &["--url", &url]);
    assert_eq!(
        lines
            .recv_timeout(crate::support::WAIT)
            .expect("client attached")["connected"],
        true
    );
    assert!(
        c.child.try_wait().unwrap().is_none(),
        "an attached client keeps the session"
    );
    holder.kill().unwrap();
    let _ = holder.wait();
    assert_eq!(c.wait_exit().code(), Some(0), "{}", c.stderr.text());
    assert!(c.stderr.text().contains("IdleTimeout"));
    let item = get_session(&w.table, &id);
    assert_eq!(text(&item, "status").as_deref(), Some("COMPLETED"));
    assert!(text(&item, "endedAt").is_some());
}

#[test]
fn keep_alive_survives_a_disconnect() {
    let w = World::new();
    let (id, t) = w.session(
        "PROVISIONING",
        vec![("keepAlive", AttributeValue::Bool(true))],
    );
    let mut c = w.start_with_disconnect(&id, "1", "1");
    let url = wait_ready(&mut c, &t);
    assert_eq!(
        node("drive.mjs", &["--client", "puppeteer", "--url", &url])["ok"],
        true
    );
    // Proving an absence: three disconnect graces pass with no client, and the task is
    // still there to serve the next one.
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        c.child.try_wait().unwrap().is_none(),
        "a keepAlive session must survive: {}",
        c.stderr.text()
    );
    assert_eq!(
        node("drive.mjs", &["--client", "puppeteer", "--url", &url])["ok"],
        true
    );
    c.signal(Signal::SIGTERM);
    assert_eq!(c.wait_exit().code(), Some(0));
    assert_eq!(
        text(&get_session(&w.table, &id), "status").as_deref(),
        Some("COMPLETED")
    );
}

#[test]
fn expiry_ends_the_session_as_timed_out() {
    let w = World::new();
    let expires = now() + 4;
    let (id, t) = w.session(
        "PROVISIONING",
        vec![
            ("keepAlive", AttributeValue::Bool(true)),
            ("expiresAt", AttributeValue::N(expires.to_string())),
        ],
    );
    let mut c = w.start(&id, false, &[]);
    wait_ready(&mut c, &t);
    assert_eq!(c.wait_exit().code(), Some(0), "{}", c.stderr.text());
    let item = get_session(&w.table, &id);
    assert_eq!(text(&item, "internalStatus").as_deref(), Some("TIMED_OUT"));
    assert_eq!(text(&item, "status").as_deref(), Some("TIMED_OUT"));
    assert!(text(&item, "endedAt").is_some());
    assert!(now() >= expires);
}

#[test]
fn chrome_crash_fails_and_keeps_the_previous_archive() {
    chrome_crash_fails(Signal::SIGKILL);
}

#[test]
fn chrome_segfault_fails_and_keeps_the_previous_archive() {
    chrome_crash_fails(Signal::SIGSEGV);
}

/// Chrome dies by `signal` after client traffic: ERROR, not persisted, exit non-zero.
fn chrome_crash_fails(signal: Signal) {
    let w = World::new();
    let previous = archive_with_cookie();
    aws::put_object(&w.bucket, &w.key(), previous.clone());
    let (id, t) = w.session("PROVISIONING", vec![]);
    let mut c = w.start(&id, true, &[]);
    let url = wait_ready(&mut c, &t);
    assert_eq!(
        node("context.mjs", &["--url", &url, "--mode", "write"])["ok"],
        true
    );
    let chrome = c.chrome_pid();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(chrome), signal).unwrap();
    assert_ne!(c.wait_exit().code(), Some(0));
    let item = get_session(&w.table, &id);
    assert_eq!(text(&item, "internalStatus").as_deref(), Some("FAILED"));
    assert_eq!(text(&item, "status").as_deref(), Some("ERROR"));
    assert!(
        text(&item, "terminationReason")
            .unwrap()
            .contains(&format!("exited unexpectedly (killed by {signal})")),
        "{item:?}"
    );
    assert!(text(&item, "endedAt").is_some());
    assert_eq!(
        aws::get_object(&w.bucket, &w.key()),
        Some(previous),
        "a crashed profile is not uploaded"
    );
}

#[test]
fn a_token_for_this_session_from_the_item_works_and_others_do_not() {
    let w = World::new();
    let (id, t) = w.session("PROVISIONING", vec![]);
    let mut c = w.start(&id, false, &[]);
    let url = wait_ready(&mut c, &t);
    let other = token(&w.signing_key, "sess_other", PROJECT, 600);
    let bad_url = url.replace(&t, &other);
    let out = node_output("drive.mjs", &["--client", "puppeteer", "--url", &bad_url]);
    assert!(
        !out.status.success() && out.stdout.contains("401"),
        "{out:?}"
    );
    let wrong_project = token(&w.signing_key, &id, "proj_other", 600);
    let out = node_output(
        "drive.mjs",
        &[
            "--client",
            "puppeteer",
            "--url",
            &url.replace(&t, &wrong_project),
        ],
    );
    assert!(
        !out.status.success() && out.stdout.contains("401"),
        "{out:?}"
    );
    c.signal(Signal::SIGTERM);
    assert_eq!(c.wait_exit().code(), Some(0));
}

/// The local platform's stand-ins: session documents in `SESSIONS_DIR` and archives in
/// `CONTEXTS_DIR`, with the same lifecycle as the table and the bucket.
#[test]
fn local_session_documents_and_archive_directory() {
    local_session(LocalEnd::Sigterm);
}

/// The local platform's session document turned STOPPED (a release) with no signal to the
/// controller: its watch reads the document as it reads the table, and it ends the session.
#[test]
fn local_a_session_document_released_elsewhere_ends_the_controller() {
    local_session(LocalEnd::ReleasedInDocument);
}

/// How [`local_session`] ends its controller.
enum LocalEnd {
    Sigterm,
    /// The release's STOPPED written into the document, and nothing else.
    ReleasedInDocument,
}

fn local_session(end: LocalEnd) {
    use wallcrawler_contract::InternalStatus;
    use wallcrawler_contract::session_doc::SessionDoc;
    use wallcrawler_local::session_dir::DirStore;
    let root = tempfile::tempdir().unwrap();
    let sessions = DirStore::new(root.path().join("sessions"));
    let contexts = root.path().join("contexts");
    let key = profile_key(PROJECT, "ctx_local");
    let id = format!("sess_{}", uuid::Uuid::new_v4());
    let t = token(crate::support::KEY, &id, PROJECT, 600);
    let mut doc = SessionDoc {
        session_id: id.clone(),
        project_id: PROJECT.into(),
        created_at: wallcrawler_contract::time::now_iso8601(),
        expires_at: now() + 600,
        signing_key: Some(t.clone()),
        // Nothing but the end under test ends it (no idle end once the client has left).
        keep_alive: true,
        ..Default::default()
    };
    doc.set_status(InternalStatus::Creating);
    sessions.create(&doc).unwrap();
    let dirs = (
        root.path().join("sessions").display().to_string(),
        contexts.display().to_string(),
    );
    let mut c = run_task(&[
        ("SESSION_ID", &id),
        ("WALLCRAWLER_JWT_PUBLIC_KEY", crate::support::public_key()),
        ("SESSIONS_DIR", &dirs.0),
        ("CONTEXT_ID", "ctx_local"),
        ("CONTEXTS_DIR", &dirs.1),
        ("CONTEXT_S3_KEY", &key),
        ("CONTEXT_PERSIST", "true"),
        ("PUBLIC_IP", "127.0.0.1"),
        ("ITEM_WATCH_SECONDS", "1"),
    ]);
    let url = wait_ready(&mut c, &t);
    let ready = sessions.get(&id).unwrap().unwrap();
    assert_eq!(
        (ready.internal_status.as_str(), ready.status.as_str()),
        ("READY", "RUNNING")
    );
    // No connectUrl written: the one clients get is formed from the route and the token.
    assert_eq!(ready.connect_url, None);
    assert_eq!(ready.client_connect_url().as_deref(), Some(url.as_str()));
    assert_eq!(
        node("context.mjs", &["--url", &url, "--mode", "write"])["ok"],
        true
    );
    match end {
        LocalEnd::Sigterm => c.signal(Signal::SIGTERM),
        LocalEnd::ReleasedInDocument => {
            let released = sessions.update(&id, |d| {
                d.set_status(InternalStatus::Stopped);
                Ok::<_, ()>(true)
            });
            assert!(matches!(released, Ok(Ok((true, _)))), "{released:?}");
            c.wait_event(|e| {
                e["message"] == "the session item turned terminal elsewhere; ending the session"
            });
        }
    }
    assert_eq!(c.wait_exit().code(), Some(0), "{}", c.stderr.text());
    let done = sessions.get(&id).unwrap().unwrap();
    assert_eq!(
        (done.internal_status.as_str(), done.status.as_str()),
        ("STOPPED", "COMPLETED")
    );
    // proxyBytes written with endedAt: the bytes through the session's proxies (none here).
    assert!(done.ended_at.is_some() && done.proxy_bytes == Some(0));
    assert!(
        contexts.join(&key).is_file(),
        "the profile was saved to the directory"
    );
}

/// The tests' extension's manifest: `mark.js` on every page.
const MARK_MANIFEST: &[u8] = br#"{"manifest_version":3,"name":"Mark","version":"1.0","content_scripts":[{"matches":["<all_urls>"],"js":["mark.js"],"run_at":"document_start"}]}"#;

/// The tests' extension as a zip: a content script that marks every page
/// (`document.documentElement.dataset.wallcrawler = "ext"`), and `more` entries.
fn mark_zip(more: &[(&str, &[u8])]) -> Vec<u8> {
    let script: &[u8] = br#"document.documentElement.dataset.wallcrawler = "ext";"#;
    let opts = zip::write::SimpleFileOptions::default();
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, bytes) in [("manifest.json", MARK_MANIFEST), ("mark.js", script)]
        .into_iter()
        .chain(more.iter().copied())
    {
        w.start_file(name, opts).unwrap();
        std::io::Write::write_all(&mut w, bytes).unwrap();
    }
    w.finish().unwrap().into_inner()
}

/// `zip` put in the bucket where the API keeps an extension archive; its key.
fn put_extension(w: &World, zip: Vec<u8>) -> String {
    use sha2::Digest;
    let key = format!("extensions/{PROJECT}/{:x}.zip", sha2::Sha256::digest(&zip));
    aws::put_object(&w.bucket, &key, zip);
    key
}

/// The task's environment with an extension (`EXTENSION_S3_KEY`, in the contexts bucket) and
/// no context.
fn extension_env<'a>(w: &'a World, session: &'a str, key: &'a str) -> Vec<(&'a str, String)> {
    let mut env: Vec<(&str, String)> = w
        .env(session, false)
        .into_iter()
        .filter(|(k, _)| !k.starts_with("CONTEXT_"))
        .collect();
    env.push(("EXTENSION_S3_KEY", key.to_owned()));
    env.push(("PUBLIC_IP", "198.51.100.9".to_owned()));
    env
}

/// A task loads its session's extension from S3 before READY: a page served on 127.0.0.1
/// shows the extension's mark; the unpacked extension, beside the profile, is gone at the end.
#[test]
fn a_task_loads_its_sessions_extension_from_s3_before_ready() {
    let w = World::new();
    let key = put_extension(&w, mark_zip(&[]));
    let (id, t) = w.session("PROVISIONING", vec![]);
    let env = extension_env(&w, &id, &key);
    let all: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut c = run_task(&all);
    let url = wait_ready(&mut c, &t);
    let seen = node("mark.mjs", &["--url", &url]);
    assert_eq!(
        seen["mark"], "ext",
        "the extension's content script ran: {seen}"
    );
    let profile = crate::support::user_data_dir_of(c.chrome_pid());
    let unpacked = std::path::PathBuf::from(format!("{profile}-extension"));
    assert!(
        unpacked.join("manifest.json").is_file(),
        "beside the profile"
    );
    c.signal(Signal::SIGTERM);
    assert_eq!(c.wait_exit().code(), Some(0), "{}", c.stderr.text());
    assert!(!unpacked.exists(), "removed with the session");
}

/// A task whose browser is a headless shell (`CHROME_PATH`, the lighter browser) fails a
/// session with an extension with that reason, never READY: the shell has no extensions. (The
/// local platform refuses such a create first; a control plane that does not know its tasks'
/// browser leaves it to this.)
#[test]
fn a_task_on_a_headless_shell_fails_a_session_with_an_extension_and_says_why() {
    let w = World::new();
    let key = put_extension(&w, mark_zip(&[]));
    let (id, _) = w.session("PROVISIONING", vec![]);
    let shell = wallcrawler_testkit::headless_shell();
    let mut env = extension_env(&w, &id, &key);
    env.push(("CHROME_PATH", shell.to_str().unwrap().to_owned()));
    let all: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut c = run_task(&all);
    assert_ne!(c.wait_exit().code(), Some(0));
    let item = get_session(&w.table, &id);
    assert_eq!(text(&item, "internalStatus").as_deref(), Some("FAILED"));
    assert_eq!(
        text(&item, "terminationReason").as_deref(),
        Some(
            "this platform's browser is a headless shell, which cannot load extensions (its operator sets CHROME_PATH to a full Chromium for them)"
        )
    );
    assert!(text(&item, "readyAt").is_none(), "never READY");
}

/// An archive put in the bucket directly (never through the API's checks) with a link entry,
/// or a `..` name, fails the session with the refusal as its reason, before Chrome starts.
#[test]
fn a_hostile_extension_archive_in_the_bucket_fails_the_task_with_its_reason() {
    let w = World::new();
    let opts = zip::write::SimpleFileOptions::default();
    let mut link = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    link.start_file("manifest.json", opts).unwrap();
    std::io::Write::write_all(&mut link, MARK_MANIFEST).unwrap();
    link.add_symlink("key", "/etc/shadow", opts).unwrap();
    let cases = [
        (
            link.finish().unwrap().into_inner(),
            "the extension archive was refused: entry \"key\" is a symbolic link; links are not allowed",
        ),
        (
            mark_zip(&[("../../x.js", b"x")]),
            "the extension archive was refused: entry \"../../x.js\" leaves the extension's folder (a `..` component)",
        ),
    ];
    for (zip, reason) in cases {
        let key = put_extension(&w, zip);
        let (id, _) = w.session("PROVISIONING", vec![]);
        let env = extension_env(&w, &id, &key);
        let all: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let mut c = run_task(&all);
        assert_ne!(c.wait_exit().code(), Some(0));
        let item = get_session(&w.table, &id);
        assert_eq!(text(&item, "internalStatus").as_deref(), Some("FAILED"));
        assert_eq!(text(&item, "terminationReason").as_deref(), Some(reason));
        assert!(text(&item, "readyAt").is_none(), "never READY");
        let log = c.stderr.text();
        assert!(
            !log.contains("chrome started"),
            "Chrome was never started: {log}"
        );
    }
}

/// An extension that asks for `file:///*` (and `<all_urls>`), put in the bucket directly (the
/// API would refuse it) and loaded by the task into its Chrome, reads no file: its service
/// worker's `fetch` of a file written here, of that file's folder and of `/etc/passwd` fails,
/// and Chrome says it has no file access; the same worker reads the page's http URL (so a read
/// that worked would show). Without the controller's preference Chromium 156 gives such an
/// unpacked extension every one of those files (shown by hand; src/chrome/file_access.rs).
#[test]
fn an_extension_loaded_past_the_upload_check_reads_no_file() {
    use std::os::unix::fs::PermissionsExt;
    let w = World::new();
    // Readable by Chrome's user, whichever it is: only Chrome's own denial keeps it out.
    let scratch = tempfile::tempdir().unwrap();
    std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let secret = scratch.path().join("secret.txt");
    let token = format!("not-for-extensions-{}", std::process::id());
    std::fs::write(&secret, &token).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
    let files = [
        format!("file://{}", secret.display()),
        format!("file://{}/", scratch.path().display()),
        "file:///etc/passwd".to_owned(),
    ];
    let manifest = br#"{"manifest_version":3,"name":"Reader","version":"1.0",
        "host_permissions":["file:///*","<all_urls>"],
        "background":{"service_worker":"sw.js"},
        "content_scripts":[{"matches":["http://127.0.0.1/*"],"js":["ask.js"],"run_at":"document_start"}]}"#;
    let worker: &[u8] = br#"
const read = async (url) => {
  try { const r = await fetch(url); return { ok: true, text: (await r.text()).slice(0, 400) }; }
  catch (e) { return { ok: false, error: String(e) }; }
};
chrome.runtime.onMessage.addListener((m, sender, reply) => {
  (async () => {
    const fileAccess = await new Promise((r) => chrome.extension.isAllowedFileSchemeAccess(r));
    const reads = {};
    for (const u of m.files) reads[u] = await read(u);
    reply({ fileAccess, reads, page: await read(sender.url) });
  })();
  return true;
});
"#;
    let ask = format!(
        "chrome.runtime.sendMessage({{ files: {} }}, (r) => {{ document.documentElement.dataset.wallcrawler = JSON.stringify(r ?? {{ error: String(chrome.runtime.lastError && chrome.runtime.lastError.message) }}); }});",
        serde_json::to_string(&files).unwrap()
    );
    let opts = zip::write::SimpleFileOptions::default();
    let mut z = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, bytes) in [
        ("manifest.json", &manifest[..]),
        ("sw.js", worker),
        ("ask.js", ask.as_bytes()),
    ] {
        z.start_file(name, opts).unwrap();
        std::io::Write::write_all(&mut z, bytes).unwrap();
    }
    let zip = z.finish().unwrap().into_inner();
    assert!(
        wallcrawler_contract::extension_archive::check_upload(&zip).is_err(),
        "the API would refuse it"
    );
    let key = put_extension(&w, zip);
    let (id, t) = w.session("PROVISIONING", vec![]);
    let env = extension_env(&w, &id, &key);
    let all: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let mut c = run_task(&all);
    let url = wait_ready(&mut c, &t);
    let seen = node("mark.mjs", &["--url", &url]);
    let report: serde_json::Value = serde_json::from_str(seen["mark"].as_str().unwrap_or("null"))
        .unwrap_or_else(|e| panic!("the extension answered: {seen} ({e})"));
    assert_eq!(report["fileAccess"], false, "{report}");
    for f in &files {
        let r = &report["reads"][f];
        assert_eq!(r["ok"], false, "{f}: {report}");
        assert!(
            r["error"]
                .as_str()
                .unwrap_or_default()
                .contains("Failed to fetch"),
            "{f}: {report}"
        );
    }
    assert!(!report.to_string().contains(&token), "{report}");
    assert!(!report.to_string().contains("root:x:0:0"), "{report}");
    assert_eq!(
        report["page"]["ok"], true,
        "the worker reads http: {report}"
    );
    assert!(
        report["page"]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("served"),
        "{report}"
    );
    c.signal(Signal::SIGTERM);
    assert_eq!(c.wait_exit().code(), Some(0), "{}", c.stderr.text());
}

/// Uploads on AWS: an object the API stored under the session's prefix in the bucket
/// (`FILES_BUCKET_NAME`; no context) is fetched by the task when a client names its path in
/// the item's `uploadsDir`, and the page reads its exact bytes; a name with no object, or
/// another session's object, gives the page nothing.
#[test]
fn an_upload_in_the_bucket_is_fetched_when_a_client_names_its_path() {
    use base64::Engine as _;
    use wallcrawler_contract::storage::upload_key;
    let w = World::new();
    let (id, t) = w.session("PROVISIONING", vec![]);
    let bytes = b"col\n1\n\x00\xfe\xff end".to_vec();
    aws::put_object(
        &w.bucket,
        &upload_key(PROJECT, &id, "data file.csv"),
        bytes.clone(),
    );
    aws::put_object(
        &w.bucket,
        &upload_key(PROJECT, "sess_other", "theirs.txt"),
        b"no".to_vec(),
    );
    let mut c = run_task(&w.files_env(&id));
    let url = wait_ready(&mut c, &t);
    let item = get_session(&w.table, &id);
    let dir = text(&item, "uploadsDir").expect("uploadsDir written with READY");
    let paths = [
        format!("{dir}/data file.csv"),
        format!("{dir}/never-uploaded.txt"),
        format!("{dir}/theirs.txt"),
    ];
    let r = node(
        "uploads.mjs",
        &["--connect", &url, "--paths", &paths.join(",")],
    );
    assert_eq!(r["ok"], true, "{r}");
    let b64 = base64::engine::general_purpose::STANDARD.encode(&bytes);
    assert_eq!(
        r["read"]["0"]["files"],
        serde_json::json!([{"name": "data file.csv", "base64": b64}]),
        "{r}"
    );
    assert_eq!(r["read"]["1"]["files"], serde_json::json!([]), "{r}");
    assert_eq!(r["read"]["2"]["files"], serde_json::json!([]), "{r}");
    c.signal(Signal::SIGTERM);
    assert_eq!(c.wait_exit().code(), Some(0), "{}", c.stderr.text());
}

/// Recordings on AWS: a task with a files bucket records the page a client shows into the
/// bucket as it goes, and when the session ends joins each page's segments into its MP4
/// (`recording.mp4`, the page's index marked `mp4`), so the API's Lambda, which has no ffmpeg,
/// answers the page's download with it: its frame one second in shows the red page.
#[test]
fn a_recorded_page_s_mp4_is_in_the_bucket_when_the_session_ends() {
    use wallcrawler_contract::recording::{MP4_NAME, PageIndex, index_key, page_prefix};
    let w = World::new();
    let (id, t) = w.session("PROVISIONING", vec![]);
    let mut c = run_task(&w.files_env(&id));
    let url = wait_ready(&mut c, &t);
    let red = "data:text/html,<title>red</title><body style='margin:0;background:rgb(255,0,0)'>";
    let (mut holder, lines) =
        crate::support::node_spawn("hold.mjs", &["--url", &url, "--goto", red]);
    let first = lines
        .recv_timeout(Duration::from_secs(60))
        .expect("hold.mjs showed the page");
    assert_eq!(first["connected"], true, "{first}");
    // Page 1 is the client's (page 0 the first blank tab), kept open by the client.
    let index = || {
        aws::get_object(&w.bucket, &index_key(PROJECT, &id, "1"))
            .map(|b| serde_json::from_slice::<PageIndex>(&b).expect("an index"))
    };
    // Two segments (4 s) stored while the session runs; the bound is a hang guard.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while index().is_none_or(|i| i.segments.len() < 2) {
        assert!(
            std::time::Instant::now() < deadline,
            "no two segments of page 1 stored in 60 s: {}",
            c.stderr.text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    c.signal(Signal::SIGTERM);
    assert_eq!(c.wait_exit().code(), Some(0), "{}", c.stderr.text());
    let _ = holder.wait();
    let i = index().unwrap();
    assert!(i.ended && i.mp4, "{i:?}");
    let key = format!("{}{MP4_NAME}", page_prefix(PROJECT, &id, "1"));
    let mp4 = aws::get_object(&w.bucket, &key).expect("the page's MP4 is in the bucket");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(MP4_NAME);
    std::fs::write(&path, &mp4).unwrap();
    let share = wallcrawler_testkit::video::red_share(&path, "1");
    assert!(share > 0.9, "the MP4 at 1 s is {share} red");
}
