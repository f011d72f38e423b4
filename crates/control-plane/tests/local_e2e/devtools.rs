//! Another user of the machine reaches no browser of the local platform: neither a warm one
//! (the attacker of issue 25 planted a tab in one before a session claimed it) nor one serving
//! a session. `serve` runs as root, so every controller gives its Chrome a network of its own
//! (`CHROME_NETWORK` defaults to `private` with `CAP_SYS_ADMIN`).

use std::collections::BTreeSet;

use super::*;

/// `ppid` of `pid`.
fn ppid(pid: i32) -> Option<i32> {
    ppid_and_nice(pid).map(|(p, _)| p)
}

/// `root` and every process below it.
fn tree(root: i32) -> BTreeSet<i32> {
    let all: Vec<(i32, i32)> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| Some((pid, ppid(pid)?)))
        .collect();
    let mut tree = BTreeSet::from([root]);
    loop {
        let before = tree.len();
        for (pid, parent) in &all {
            if tree.contains(parent) {
                tree.insert(*pid);
            }
        }
        if tree.len() == before {
            return tree;
        }
    }
}

/// The browsers (not their helpers) among `pids` whose DevTools is up: Chrome writes
/// `DevToolsActivePort` into its profile once it listens.
fn browsers_listening(pids: &BTreeSet<i32>) -> usize {
    pids.iter()
        .filter_map(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).into_owned())
        .filter(|c| c.contains("--remote-debugging-port") && !c.contains("--type="))
        .filter_map(|c| {
            let dir = c
                .split('\0')
                .find_map(|a| a.strip_prefix("--user-data-dir="))?;
            Some(PathBuf::from(dir).join("DevToolsActivePort"))
        })
        .filter(|p| p.exists())
        .count()
}

/// The TCP ports listening in our network namespace on a socket one of `pids` holds.
fn ports_held_by(pids: &BTreeSet<i32>) -> BTreeSet<u64> {
    let inodes: BTreeSet<String> = pids
        .iter()
        .filter_map(|pid| std::fs::read_dir(format!("/proc/{pid}/fd")).ok())
        .flat_map(|d| d.flatten())
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|l| {
            let l = l.to_string_lossy().into_owned();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
        })
        .collect();
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .flat_map(|p| {
            std::fs::read_to_string(p)
                .unwrap_or_default()
                .lines()
                .skip(1)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let port = u64::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
            (f.get(3) == Some(&"0A") && inodes.contains(*f.get(9)?)).then_some(port)
        })
        .collect()
}

#[test]
fn another_local_user_reaches_no_warm_or_claimed_browser() {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_wallcrawler-control-plane"));
    let s = Server::spawn_with(
        "25",
        &bin.with_file_name("wallcrawler-controller"),
        &[("WALLCRAWLER_POOL_SIZE", "2"), DIRECT],
    );
    let v = create(&s, &format!(r#"{{"projectId":"{}"}}"#, s.project));
    assert_eq!(v["status"], "RUNNING", "{v}");
    let serve = s.child.id() as i32;
    wait_for("a claimed and a warm browser with DevTools up", || {
        browsers_listening(&tree(serve)) >= 2
    });
    // What the platform's processes listen on, as root sees it: the other tests' (and other
    // programs') sockets are not this test's business.
    let ours = ports_held_by(&tree(serve));
    let api_port: u64 = s.base.rsplit(':').next().unwrap().parse().unwrap();
    assert!(
        ours.contains(&api_port),
        "{ours:?} must hold the API's port"
    );
    let scan = wallcrawler_testkit::reach::scan_as_nobody(None);
    let mut tried = 0;
    for e in scan["listening"].as_array().unwrap() {
        if !ours.contains(&e["port"].as_u64().unwrap()) {
            continue;
        }
        tried += 1;
        let answer = e["answer"].as_str().unwrap();
        assert!(
            !wallcrawler_testkit::reach::is_devtools(answer),
            "uid 65534 reached a browser's DevTools at {e}"
        );
    }
    assert!(tried >= 3, "the API and both controllers' proxies: {scan}");
    drive(v["connectUrl"].as_str().unwrap());
    s.release(v["id"].as_str().unwrap());
    s.wait_session(v["id"].as_str().unwrap(), "COMPLETED", |d| {
        d["status"] == "COMPLETED" && d["endedAt"].is_string()
    });
    s.stop();
}
