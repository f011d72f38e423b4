//! What Chrome can reach: none of the controller's secrets in any Chrome process's environment,
//! `file://`, the ECS credential/metadata endpoints and the controller's own ports blocked by
//! the managed policy (checked inside a fresh network namespace), and the sandbox on where it
//! can run (a non-root user with user namespaces).

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use crate::support::{Controller, WAIT, bin, chromium, node, repo_root};

/// `(ppid, pgrp)` of `pid`, from `/proc/<pid>/stat`.
fn parents(pid: i32) -> Option<(i32, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    let _state = f.next()?;
    Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
}

/// Chrome's process and every process below it or in its process group.
fn chrome_tree(chrome: i32) -> BTreeSet<i32> {
    let all: Vec<(i32, i32, i32)> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| parents(pid).map(|(pp, pg)| (pid, pp, pg)))
        .collect();
    let mut tree: BTreeSet<i32> = all
        .iter()
        .filter(|(pid, _, pg)| *pid == chrome || *pg == chrome)
        .map(|(pid, _, _)| *pid)
        .collect();
    loop {
        let before = tree.len();
        for (pid, pp, _) in &all {
            if tree.contains(pp) {
                tree.insert(*pid);
            }
        }
        if tree.len() == before {
            return tree;
        }
    }
}

fn environ(pid: i32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/environ"))
        .map(|b| {
            String::from_utf8_lossy(&b)
                .split('\0')
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

#[test]
fn no_chrome_process_environment_holds_the_controllers_secrets() {
    let secret_values = [
        // `local` signs its own token: the private key's file is in its environment.
        crate::support::private_key_file(),
        "AKIACHROMEREACHTEST1",
        "chrome-reach-secret-access-key-77aa",
        "chrome-reach-session-token-9f0e",
        "/v2/credentials/6c0ffee0-chrome-reach",
        "http://127.0.0.1:1/v4/chrome-reach-metadata",
    ];
    let envs = [
        ("WALLCRAWLER_JWT_PRIVATE_KEY_FILE", secret_values[0]),
        ("AWS_ACCESS_KEY_ID", secret_values[1]),
        ("AWS_SECRET_ACCESS_KEY", secret_values[2]),
        ("AWS_SESSION_TOKEN", secret_values[3]),
        ("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", secret_values[4]),
        ("ECS_CONTAINER_METADATA_URI_V4", secret_values[5]),
        // Allowed through: Chrome needs its time zone and locale.
        ("TZ", "Pacific/Chatham"),
        ("LANG", "C.UTF-8"),
    ];
    let (c, s) = Controller::local(&[], &envs);
    let controller_env = environ(c.child.id() as i32);
    assert!(
        controller_env.iter().any(|v| v.contains(secret_values[0])),
        "the controller itself must hold the key, or this test proves nothing"
    );
    // A page drawn and screenshotted: renderers and the GPU/utility processes exist, and text
    // rendering (fonts) works with the cleared environment.
    let r = node(
        "drive.mjs",
        &["--client", "puppeteer", "--url", &s.connect_url],
    );
    assert_eq!(r["ok"], true, "{r}");
    assert!(r["screenshotBytes"].as_u64().unwrap_or(0) > 1000, "{r}");

    let chrome = c.chrome_pid();
    let tree = chrome_tree(chrome);
    let renderers = tree
        .iter()
        .filter(|p| cmdline(**p).contains("--type=renderer"))
        .count();
    assert!(
        tree.len() >= 3 && renderers >= 1,
        "expected Chrome's browser, zygote and renderer processes, got {tree:?}"
    );
    let mut read = 0;
    for pid in &tree {
        let env = environ(*pid);
        if env.is_empty() {
            continue; // exited meanwhile
        }
        read += 1;
        for v in &env {
            for secret in secret_values {
                assert!(
                    !v.contains(secret),
                    "process {pid} ({}) has {v:?} in its environment",
                    cmdline(*pid)
                );
            }
            let name = v.split_once('=').map_or(v.as_str(), |(n, _)| n);
            assert!(
                !name.starts_with("AWS_")
                    && !name.starts_with("ECS_")
                    && !name.starts_with("WALLCRAWLER_"),
                "process {pid} has {name} in its environment"
            );
        }
    }
    assert!(read >= 3, "read the environment of {read} processes only");
    let browser_env = environ(chrome);
    for wanted in ["TZ=Pacific/Chatham", "LANG=C.UTF-8"] {
        assert!(
            browser_env.iter().any(|v| v == wanted),
            "{wanted} must reach Chrome: {browser_env:?}"
        );
    }
    assert!(browser_env.iter().any(|v| v.starts_with("HOME=")));
}

/// The navigations of the policy test and how each must end.
const BLOCKED: [&str; 7] = [
    "file:///etc/passwd",
    "http://169.254.170.2/v2/credentials/x",
    "http://169.254.169.254/latest/meta-data/",
    // The controller's metrics, its proxy and Chrome's own DevTools port, on their defaults.
    "http://127.0.0.1:9224/metrics",
    "http://localhost:9224/metrics",
    "http://127.0.0.1:9223/health",
    "http://127.0.0.1:9222/json/version",
];
/// Controls: not blocked by the policy, so they reach the network stack and fail there with
/// another error — the block is what the assertions above see, not the closed network. Run as
/// root, the controller puts Chrome in a private network (`CHROME_NETWORK`) whose egress is its
/// SOCKS5 server: that refuses the link-local address and finds nothing on 9225, and Chrome
/// reports either as a failed SOCKS connection.
const CONTROLS: [(&str, &[&str]); 2] = [
    (
        "http://169.254.170.3/",
        &["net::ERR_SOCKS_CONNECTION_FAILED"],
    ),
    (
        "http://127.0.0.1:9225/",
        &["net::ERR_SOCKS_CONNECTION_FAILED"],
    ),
];

/// Runs the controller and puppeteer inside a fresh network namespace (only `lo`, so no
/// packet to 169.254.x can leave even if the block failed) and a private mount namespace in
/// which `/etc/chromium/policies` is the repository's `chrome/policies` — exactly what the
/// image installs — and navigates to each target.
#[test]
fn file_urls_metadata_endpoints_and_own_ports_are_blocked_by_policy() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = r#"
set -eu
ip link set lo up
# /etc/chromium as it is, with policies/ replaced by the repository's.
mkdir "$TMP/etc-chromium"
if [ -d /etc/chromium ]; then cp -a /etc/chromium/. "$TMP/etc-chromium/"; else mkdir -p /etc/chromium; fi
rm -rf "$TMP/etc-chromium/policies"
cp -a "$POLICIES" "$TMP/etc-chromium/policies"
mount --bind "$TMP/etc-chromium" /etc/chromium
mkfifo "$TMP/out"
# Fixed ports are safe here: this network namespace is the test's own.
METRICS_ADDR=127.0.0.1:9224 CHROME_DEBUG_PORT=9222 RUST_LOG=info \
  "$BIN" local --port 9223 --chrome-path "$CHROME" >"$TMP/out" 2>"$TMP/err" &
controller=$!
exec 3<"$TMP/out"
url=
while IFS= read -r -t "$WAIT" -u 3 line; do
  case $line in connectUrl:\ *) url=${line#connectUrl: }; break ;; esac
done
if [ -z "$url" ]; then echo "no connectUrl" >&2; cat "$TMP/err" >&2; exit 1; fi
status=0
(cd "$NODE_DIR" && node navigate.mjs --url "$url" --targets "$TARGETS" --timeout-ms 150000) || status=$?
kill -TERM "$controller"
wait "$controller" || true
cat "$TMP/err" >&2
exit "$status"
"#;
    let targets: Vec<&str> = BLOCKED
        .iter()
        .copied()
        .chain(CONTROLS.iter().map(|(u, _)| *u))
        .chain(["data:text/html,<p>allowed</p>"])
        .collect();
    let out = Command::new("unshare")
        .args([
            "--net",
            "--mount",
            "--propagation",
            "private",
            "bash",
            "-c",
            script,
        ])
        .env("TMP", dir.path())
        .env("POLICIES", repo_root().join("chrome/policies"))
        .env("BIN", bin())
        .env("CHROME", chromium())
        .env("NODE_DIR", repo_root().join("tests/node"))
        .env("TARGETS", targets.join("|"))
        .env("WAIT", WAIT.as_secs().to_string())
        .env_remove("WALLCRAWLER_JWT_SIGNING_KEY")
        .env_remove("WALLCRAWLER_JWT_PRIVATE_KEY_FILE")
        .output()
        .expect("run unshare (util-linux)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let last = stdout.lines().last().unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(last).unwrap_or_else(|_| {
        panic!(
            "no result: {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
            out.status
        )
    });
    assert_eq!(v["ok"], true, "{v}\nstderr:\n{stderr}");
    let results = &v["results"];
    assert!(
        stderr.contains("metrics listening"),
        "the metrics port must really be open: {stderr}"
    );
    for url in BLOCKED {
        // A client's file: navigation is refused by the proxy before Chrome's policy could
        // block it (see proxy::guard); the policy stays for what the page itself opens.
        let refused_by_proxy = url.starts_with("file:")
            && results[url]
                .as_str()
                .is_some_and(|r| r.contains("not allowed for a local file URL"));
        assert!(
            refused_by_proxy || results[url] == "net::ERR_BLOCKED_BY_ADMINISTRATOR",
            "{url}: {results}"
        );
    }
    for (url, errors) in CONTROLS {
        assert!(
            errors.iter().any(|e| results[url] == *e),
            "{url}: {results}"
        );
    }
    assert_eq!(results["data:text/html,<p>allowed</p>"], "ok", "{results}");
}

/// As a non-root user on a machine with unprivileged user namespaces, Chrome's renderers run
/// in the sandbox (seccomp-bpf filter on, in their own PID namespace) and a client still
/// drives the browser.
#[test]
fn chrome_runs_sandboxed_as_a_non_root_user() {
    const NOBODY: &str = "65534";
    let home = tempfile::tempdir().unwrap();
    nix::unistd::chown(
        home.path(),
        Some(nix::unistd::Uid::from_raw(65534)),
        Some(nix::unistd::Gid::from_raw(65534)),
    )
    .unwrap();
    let chrome = chromium();
    let home_s = home.path().to_str().unwrap().to_owned();
    let mut c = Controller::spawn_via(
        &[
            "setpriv",
            &format!("--reuid={NOBODY}"),
            &format!("--regid={NOBODY}"),
            "--clear-groups",
        ],
        &[
            "local",
            "--port",
            "0",
            "--chrome-path",
            chrome.to_str().unwrap(),
        ],
        // No namespace can be made unprivileged: the shared loopback, asked for explicitly.
        &[
            ("HOME", &home_s),
            ("TMPDIR", &home_s),
            ("CHROME_NETWORK", "shared"),
        ],
    );
    let line = c.wait_stdout_line(|l| l.starts_with("connectUrl: "));
    let url = line.trim_start_matches("connectUrl: ").to_owned();
    let log = c.stderr.text();
    assert!(log.contains("sandbox=on"), "{log}");
    assert!(log.contains("network=shared"), "{log}");
    let r = node("drive.mjs", &["--client", "puppeteer", "--url", &url]);
    assert_eq!(r["ok"], true, "{r}");
    let tree = chrome_tree(c.chrome_pid());
    let renderers: Vec<i32> = tree
        .iter()
        .copied()
        .filter(|p| cmdline(*p).contains("--type=renderer"))
        .collect();
    assert!(!renderers.is_empty(), "no renderer in {tree:?}");
    for pid in renderers {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        assert!(
            status.lines().any(|l| l == "Seccomp:\t2"),
            "renderer {pid} runs without a seccomp filter:\n{status}"
        );
        let ns = std::fs::read_link(format!("/proc/{pid}/ns/pid")).unwrap();
        let ours = std::fs::read_link("/proc/self/ns/pid").unwrap();
        assert_ne!(ns, ours, "renderer {pid} shares our PID namespace");
    }
}

/// `/proc/<pid>/status`'s `Uid:` and `Gid:` numbers (real, effective, saved, file system).
fn ids(pid: i32) -> Option<(Vec<u32>, Vec<u32>)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = |key: &str| -> Option<Vec<u32>> {
        let l = status.lines().find(|l| l.starts_with(key))?;
        Some(
            l.split_whitespace()
                .skip(1)
                .filter_map(|n| n.parse().ok())
                .collect(),
        )
    };
    Some((line("Uid:")?, line("Gid:")?))
}

/// Started as root with no `CHROME_USER`, the controller never runs Chrome as root: every
/// process below it runs as one uid:gid of its own from the shared allocator's range (all four
/// ids), with the sandbox of a non-root user, and that uid cannot read the controller's
/// `/proc/<pid>/environ` (its keys, the task's credentials endpoint).
#[test]
fn a_root_controller_runs_chrome_as_a_uid_of_its_own() {
    use std::os::unix::process::CommandExt;
    assert!(nix::unistd::geteuid().is_root(), "the suite runs as root");
    let (c, s) = Controller::local(&[], &[]);
    // A page drawn: renderers and the GPU/utility processes exist.
    let r = node(
        "drive.mjs",
        &["--client", "puppeteer", "--url", &s.connect_url],
    );
    assert_eq!(r["ok"], true, "{r}");
    let (first, last) = wallcrawler_local::chrome_uids::DEFAULT_UIDS
        .split_once('-')
        .unwrap();
    let range = first.parse::<u32>().unwrap()..=last.parse::<u32>().unwrap();
    let controller = c.child.id() as i32;
    let below: Vec<i32> = chrome_tree(controller)
        .into_iter()
        .filter(|p| *p != controller)
        .collect();
    assert!(below.contains(&c.chrome_pid()), "{below:?}");
    let uid = ids(c.chrome_pid()).expect("Chrome runs").0[0];
    assert!(
        range.contains(&uid),
        "Chrome's uid {uid} is not in {range:?}"
    );
    let mut seen = 0;
    for pid in &below {
        let Some((uids, gids)) = ids(*pid) else {
            continue; // exited meanwhile
        };
        seen += 1;
        assert_eq!(uids, [uid; 4], "{pid} {}", cmdline(*pid));
        assert_eq!(gids, [uid; 4], "{pid} {}", cmdline(*pid));
    }
    assert!(
        seen >= 3,
        "expected Chrome's browser, zygote and renderers: {below:?}"
    );
    let log = c.stderr.text();
    assert!(log.contains(&format!("uid={uid}")), "{log}");
    assert!(log.contains("sandbox=on"), "{log}");
    assert!(!cmdline(c.chrome_pid()).contains("--no-sandbox"));

    let read = Command::new("cat")
        .arg(format!("/proc/{controller}/environ"))
        .uid(uid)
        .gid(uid)
        .output()
        .unwrap();
    assert!(
        !read.status.success(),
        "Chrome's uid read the controller's environment"
    );
    assert!(read.stdout.is_empty());
    assert!(
        String::from_utf8_lossy(&read.stderr).contains("Permission denied"),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );

    // At its end the controller gives the uid back: nothing runs as it, its lock is free.
    let mut c = c;
    c.signal(nix::sys::signal::Signal::SIGTERM);
    assert_eq!(c.wait_exit().code(), Some(0), "{}", c.stderr.text());
    // Killed at release; polled until their parents (init, once reparented) have reaped them.
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let left: Vec<i32> = chrome_tree(1)
            .into_iter()
            .filter(|p| ids(*p).is_some_and(|(u, g)| u.contains(&uid) || g.contains(&uid)))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still running as {uid}: {left:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let lock = std::path::Path::new(wallcrawler_local::chrome_uids::LOCK_DIR).join(uid.to_string());
    std::fs::File::open(&lock)
        .unwrap()
        .try_lock()
        .expect("the uid's lock is free once the controller ended");
}

/// `run` as uid 65534 (no capabilities) with one more setting: its exit and its log.
fn run_unprivileged(name: &str, value: &str) -> (std::process::Output, String) {
    use std::os::unix::process::CommandExt;
    let mut child = Command::new(bin())
        .arg("run")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("SESSION_ID", "sess_x")
        .env("WALLCRAWLER_JWT_PUBLIC_KEY", crate::support::public_key())
        .env(name, value)
        .env("CHROME_PATH", chromium())
        .env("CDP_PROXY_PORT", "0")
        .env("CHROME_DEBUG_PORT", "0")
        .env("LOG_FORMAT", "text")
        .uid(65534)
        .gid(65534)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A refusal ends the controller at once; one that started instead is ended here, so the
    // test fails on its log rather than waiting out a session.
    let deadline = std::time::Instant::now() + WAIT;
    while child.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, log)
}

#[test]
fn chrome_user_needs_a_controller_that_can_switch_users() {
    // A controller that is not root (nor holds the capabilities) cannot start Chrome as
    // CHROME_USER: it says what it lacks and ends before any session is taken.
    let (out, log) = run_unprivileged("CHROME_USER", "65534:65534");
    assert!(!out.status.success(), "{log}");
    assert!(
        log.contains("CHROME_USER is set but this process lacks CAP_SETUID, CAP_SETGID, CAP_CHOWN, CAP_DAC_OVERRIDE"),
        "{log}"
    );
    assert!(!log.contains("chrome started"), "{log}");
}

/// Another user of the machine cannot reach Chrome's DevTools. The controller (root, so
/// `CHROME_NETWORK` defaults to `private`) runs in a network namespace of the test's own, so
/// only its sockets are there; a process as uid 65534 in that namespace tries every listening
/// socket: the proxy answers 401 without a token, and nothing answers as DevTools.
#[test]
fn another_local_user_reaches_no_devtools_port() {
    let (c, s) = Controller::local_via(
        &[
            "unshare",
            "--net",
            "sh",
            "-c",
            "ip link set lo up && exec \"$0\" \"$@\"",
        ],
        &[],
        &[],
    );
    let v = wallcrawler_testkit::reach::scan_as_nobody(Some(c.child.id()));
    let listening = v["listening"].as_array().unwrap();
    let proxy_port = u64::from(s.addr.port());
    let proxy = listening
        .iter()
        .find(|e| e["port"] == proxy_port)
        .unwrap_or_else(|| panic!("the scan must see the proxy's port {proxy_port}: {v}"));
    assert!(
        proxy["answer"]
            .as_str()
            .unwrap()
            .starts_with("HTTP/1.1 401"),
        "{proxy}"
    );
    for e in listening {
        let answer = e["answer"].as_str().unwrap();
        assert!(
            !wallcrawler_testkit::reach::is_devtools(answer),
            "uid 65534 reached DevTools at {e}"
        );
    }
    // Chrome's DevTools really is in another network namespace (the controller reached it:
    // it printed the connectUrl once DevTools answered).
    let chrome_ns = std::fs::read_link(format!("/proc/{}/ns/net", c.chrome_pid())).unwrap();
    let controller_ns = std::fs::read_link(format!("/proc/{}/ns/net", c.child.id())).unwrap();
    assert_ne!(chrome_ns, controller_ns);
}

/// Chrome in its private network still loads a page from a server on the host's loopback:
/// through the controller's SOCKS5 egress, the only way out of its namespace.
#[test]
fn chrome_in_its_own_network_loads_a_page_from_the_hosts_loopback() {
    use std::io::{Read, Write};
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port();
    let (served_tx, served_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for s in server.incoming() {
            let Ok(mut s) = s else { return };
            let mut buf = [0u8; 4096];
            let n = s.read(&mut buf).unwrap_or(0);
            let head = String::from_utf8_lossy(&buf[..n]).to_string();
            let body = "<title>host page</title><p>from the host</p>";
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = served_tx.send(head);
        }
    });
    let (c, s) = Controller::local(&[], &[]);
    let log = c.stderr.text();
    assert!(log.contains("network=private"), "{log}");
    let chrome_ns = std::fs::read_link(format!("/proc/{}/ns/net", c.chrome_pid())).unwrap();
    let our_ns = std::fs::read_link("/proc/self/ns/net").unwrap();
    assert_ne!(chrome_ns, our_ns, "Chrome must be in a network of its own");
    let target = format!("http://127.0.0.1:{port}/page");
    let r = node(
        "navigate.mjs",
        &["--url", &s.connect_url, "--targets", &target],
    );
    assert_eq!(r["results"][&target], "ok", "{r}");
    let head = served_rx
        .recv_timeout(WAIT)
        .expect("the host's server was asked");
    assert!(head.starts_with("GET /page "), "{head}");
}

#[test]
fn an_unprivileged_controller_never_puts_devtools_on_the_shared_loopback_unasked() {
    // No CHROME_NETWORK (empty is unset) and no namespace can be made: refused at start,
    // before any Chrome, naming both ways out.
    let (out, log) = run_unprivileged("CHROME_NETWORK", "");
    assert!(!out.status.success(), "{log}");
    assert!(
        log.contains("Chrome's DevTools port gets a network namespace of its own by default, which needs CAP_SYS_ADMIN: run the controller as root, or set CHROME_NETWORK=shared"),
        "{log}"
    );
    assert!(!log.contains("chrome started"), "{log}");
}

#[test]
fn a_private_network_needs_a_controller_that_can_make_one() {
    // Unprivileged, CHROME_NETWORK=private cannot be honoured: a clear error at start, before
    // any Chrome (never a silent fall back to the shared loopback).
    let (out, log) = run_unprivileged("CHROME_NETWORK", "private");
    assert!(!out.status.success(), "{log}");
    assert!(
        log.contains("CHROME_NETWORK=private needs CAP_SYS_ADMIN"),
        "{log}"
    );
    assert!(!log.contains("chrome started"), "{log}");
}
