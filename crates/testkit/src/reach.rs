//! What another user of the machine reaches: a process as uid 65534 that tries every listening
//! TCP socket it sees (`/proc/net/tcp`, `/proc/net/tcp6`) with `GET /json/version`, as the
//! attacker of issue 25 found the browsers' DevTools ports.

use std::process::Command;

/// The scan (Python, the system's): one JSON line `{"uid", "listening": [{"family", "port",
/// "answer"}]}`, `answer` being what came back within 3 s (or the error).
const SCAN: &str = r#"
import json, socket
found = []
for path, family, loop in (("/proc/net/tcp", socket.AF_INET, "127.0.0.1"), ("/proc/net/tcp6", socket.AF_INET6, "::1")):
    try:
        lines = open(path).read().splitlines()[1:]
    except OSError:
        continue
    for line in lines:
        f = line.split()
        if f[3] != "0A":
            continue
        port = int(f[1].split(":")[1], 16)
        entry = {"family": path[-4:].strip("/"), "port": port, "answer": ""}
        data = b""
        try:
            s = socket.create_connection((loop, port), timeout=3)
            s.settimeout(3)
            s.sendall(("GET /json/version HTTP/1.1\r\nHost: localhost:%d\r\nConnection: close\r\n\r\n" % port).encode())
            # Chrome keeps the connection open after its answer: read what comes until then.
            while len(data) < 65536:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        except OSError as e:
            data += ("\nerror: %s" % e).encode()
        entry["answer"] = data.decode("latin-1")
        found.append(entry)
print(json.dumps({"uid": __import__("os").getuid(), "listening": found}))
"#;

/// Runs the scan as uid:gid 65534:65534 (no supplementary groups), in the network namespace of
/// process `netns_of` when given (else ours); its result.
pub fn scan_as_nobody(netns_of: Option<u32>) -> serde_json::Value {
    let ns = netns_of.map(|pid| format!("--net=/proc/{pid}/ns/net"));
    let mut cmd = Command::new("nsenter");
    cmd.args(ns.as_slice()).args([
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "/usr/bin/python3",
        "-c",
        SCAN,
    ]);
    let out = cmd
        .env_clear()
        .output()
        .expect("run nsenter and setpriv (util-linux)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap();
    assert_eq!(v["uid"], 65534, "{v}");
    v
}

/// Whether a scanned answer is Chrome's DevTools.
pub fn is_devtools(answer: &str) -> bool {
    answer.contains("webSocketDebuggerUrl") || answer.contains("\"Browser\"")
}
