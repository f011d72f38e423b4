//! How a session ends: SIGTERM and a client's Browser.close are normal ends (exit 0, Chrome
//! closed through CDP, nothing left running); a Chrome crash closes clients and fails.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::support::{
    Controller, WAIT, chromium, node, node_spawn, processes_with, user_data_dir_of,
};

/// Waits (bounded) until no process mentions `profile` any more.
fn assert_no_chrome_left(profile: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        let left = processes_with(profile);
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "chrome processes left behind: {left:?}"
        );
        // No event announces that the kernel finished tearing a process down; poll /proc.
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigterm_closes_chrome_through_cdp_and_exits_zero() {
    let (mut c, _s) = Controller::local(&[], &[]);
    let pid = c.chrome_pid();
    let profile = user_data_dir_of(pid);
    c.signal(Signal::SIGTERM);
    let status = c.wait_exit();
    assert_eq!(status.code(), Some(0), "{}", c.stderr.text());
    let log = c.stderr.text();
    assert!(log.contains("Browser.close acknowledged"), "{log}");
    assert!(
        log.contains("clean=true"),
        "chrome must exit from Browser.close, not a signal: {log}"
    );
    assert_no_chrome_left(&profile);
    assert!(
        !std::path::Path::new(&profile).exists(),
        "the local profile is removed"
    );
}

#[test]
fn sigint_is_a_normal_end_too() {
    let (mut c, _s) = Controller::local(&[], &[]);
    c.signal(Signal::SIGINT);
    assert_eq!(c.wait_exit().code(), Some(0), "{}", c.stderr.text());
}

#[test]
fn puppeteer_browser_close_ends_the_session_normally() {
    let (mut c, s) = Controller::local(&[], &[]);
    let profile = user_data_dir_of(c.chrome_pid());
    let r = node("close-browser.mjs", &["--url", &s.connect_url]);
    assert_eq!(r["ok"], true, "{r}");
    let status = c.wait_exit();
    assert_eq!(status.code(), Some(0), "{}", c.stderr.text());
    let log = c.stderr.text();
    assert!(log.contains("ClientClosedBrowser"), "{log}");
    assert!(log.contains("clean=true"), "{log}");
    assert_no_chrome_left(&profile);
}

#[test]
fn chrome_crash_closes_clients_and_fails() {
    let (mut c, s) = Controller::local(&[], &[]);
    let chrome = c.chrome_pid();
    let profile = user_data_dir_of(chrome);
    let (mut holder, lines) = node_spawn("hold.mjs", &["--url", &s.connect_url]);
    let first = lines.recv_timeout(WAIT).expect("hold.mjs connected");
    assert_eq!(first["connected"], true, "{first}");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(chrome), Signal::SIGKILL).unwrap();
    let closed = lines
        .recv_timeout(WAIT)
        .expect("the client saw its socket close");
    assert_eq!(closed["closed"], true, "{closed}");
    let status = c.wait_exit();
    assert_ne!(status.code(), Some(0), "a crash is a failure");
    assert!(
        c.stderr.text().contains("chrome exited unexpectedly"),
        "{}",
        c.stderr.text()
    );
    let _ = holder.wait();
    assert_no_chrome_left(&profile);
}

#[test]
fn a_missing_chrome_is_a_clear_failure() {
    let mut c = Controller::spawn(
        &[
            "local",
            "--port",
            "0",
            "--chrome-path",
            "/nonexistent/chrome",
        ],
        &[],
    );
    let status = c.wait_exit();
    assert_eq!(status.code(), Some(1));
    assert!(
        c.stderr
            .text()
            .contains("/nonexistent/chrome does not exist"),
        "{}",
        c.stderr.text()
    );
}

/// Nobody ever connects: the disconnect timeout ends the session (the grace after a last
/// client, an hour here, does not apply).
#[test]
fn run_mode_ends_itself_when_idle() {
    let chrome = chromium();
    let mut c = Controller::spawn(
        &["run"],
        &[
            ("SESSION_ID", crate::support::SESSION),
            ("WALLCRAWLER_JWT_PUBLIC_KEY", crate::support::public_key()),
            ("CHROME_PATH", chrome.to_str().unwrap()),
            ("CHROME_DEBUG_PORT", "0"),
            ("CDP_PROXY_PORT", "0"),
            ("CDP_DISCONNECT_TIMEOUT", "1"),
            ("CDP_DISCONNECT_GRACE", "3600"),
            ("METRICS_ADDR", ""),
        ],
    );
    let ready = c.wait_event(|e| e["message"] == "session ready");
    assert!(
        ready["proxy"].as_str().unwrap().starts_with("0.0.0.0:"),
        "{ready}"
    );
    let status = c.wait_exit();
    assert_eq!(status.code(), Some(0), "{}", c.stderr.text());
    assert!(
        c.stderr.text().contains("IdleTimeout"),
        "{}",
        c.stderr.text()
    );
}

/// However the controller dies — here SIGKILL, which it cannot handle — Chrome dies with it.
#[test]
fn chrome_does_not_outlive_a_killed_controller() {
    let (mut c, _s) = Controller::local(&[], &[]);
    let profile = user_data_dir_of(c.chrome_pid());
    c.signal(Signal::SIGKILL);
    assert_eq!(c.wait_exit().code(), None);
    assert_no_chrome_left(&profile);
}

/// Whether process `pid` is gone (or a zombie nobody has reaped yet: it runs no more).
fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rfind(')')
            .and_then(|i| stat.get(i + 2..i + 3))
            .is_some_and(|state| state == "Z"),
    }
}

/// A signal while Chrome is still starting ends its whole process group, helpers included:
/// nothing of it lives on to write into a profile its owner is removing. (Chrome's helpers are
/// its children in its group; the parent-death signal reaches only the browser process.)
#[test]
fn a_signal_while_chrome_starts_leaves_none_of_its_processes() {
    // A "browser" that answers `--version`, starts a helper, then never becomes ready.
    interrupted_start_leaves_nothing(
        "if [ \"$1\" = --version ]; then echo 'Chromium 156.0.0.1'; exit 0; fi\n",
        "signal received while Chrome was starting",
    );
}

/// The same while the binary's `--version` (asked ahead of the launch, for the User-Agent)
/// has not answered: what it started is killed with it.
#[test]
fn a_signal_while_the_version_is_asked_leaves_none_of_its_processes() {
    interrupted_start_leaves_nothing("", "shutting down");
}

/// Starts `local` on a "browser" script that runs `preamble`, then starts a helper (its pid in a
/// marker file) and never becomes ready; SIGTERM once the helper runs: the controller exits 0,
/// its log says `says`, and the helper is gone.
fn interrupted_start_leaves_nothing(preamble: &str, says: &str) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    // Chrome runs as a uid of its own (the controller is root): it must run the script and
    // write the marker here.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let marker = dir.path().join("helper.pid");
    let chrome = dir.path().join("chromium");
    std::fs::write(
        &chrome,
        format!(
            "#!/bin/sh\n{preamble}sleep 600 &\necho $! > '{m}.tmp' && mv '{m}.tmp' '{m}'\nexec sleep 600\n",
            m = marker.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&chrome, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut c = Controller::spawn(
        &[
            "local",
            "--port",
            "0",
            "--chrome-path",
            chrome.to_str().unwrap(),
        ],
        &[],
    );
    let deadline = Instant::now() + WAIT;
    while !marker.exists() {
        assert!(Instant::now() < deadline, "the helper never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let helper: i32 = std::fs::read_to_string(&marker)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    c.signal(Signal::SIGTERM);
    assert_eq!(c.wait_exit().code(), Some(0), "{}", c.stderr.text());
    assert!(c.stderr.text().contains(says), "{}", c.stderr.text());
    let deadline = Instant::now() + WAIT;
    while !gone(helper) {
        assert!(
            Instant::now() < deadline,
            "the browser's helper {helper} outlived the interrupted start"
        );
        // No event announces that the kernel finished tearing a process down; poll /proc.
        std::thread::sleep(Duration::from_millis(20));
    }
}
