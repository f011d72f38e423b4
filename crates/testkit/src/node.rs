//! The Node clients of tests/node, run as child processes: each script prints JSON lines, the
//! last one its result.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;

use serde_json::Value;

/// tests/node, asserted installed (its `node_modules`).
pub fn dir() -> PathBuf {
    let dir = crate::repo_root().join("tests/node");
    assert!(
        dir.join("node_modules").is_dir(),
        "tests/node/node_modules is missing: run scripts/install-test-deps.sh"
    );
    dir
}

/// `node tests/node/<script>` run in tests/node, for the caller to add arguments, environment
/// and how it waits (`tokio::process::Command::from` it for an async test).
pub fn command(script: &str) -> Command {
    let dir = dir();
    let mut cmd = Command::new("node");
    cmd.arg(dir.join(script)).current_dir(&dir);
    cmd
}

/// The JSON of the last line `script` printed. Panics, with both outputs, when there is none.
pub fn last_json(script: &str, stdout: &str, stderr: &str) -> Value {
    stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("{script} printed no JSON: {stdout}\n{stderr}"))
}

/// [`last_json`] of a finished command's output (`script` names it in the panic).
pub fn output_json(script: &str, out: &std::process::Output) -> Value {
    last_json(
        script,
        &String::from_utf8_lossy(&out.stdout),
        &String::from_utf8_lossy(&out.stderr),
    )
}

/// Runs `script` with `args` and returns the JSON of its last stdout line.
pub fn node(script: &str, args: &[&str]) -> Value {
    let out = node_output(script, args);
    last_json(script, &out.stdout, &out.stderr)
}

/// What a finished script left.
#[derive(Debug)]
pub struct NodeOutput {
    /// How it exited.
    pub status: ExitStatus,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

/// Runs `script` with `args` to its end.
pub fn node_output(script: &str, args: &[&str]) -> NodeOutput {
    let out = command(script).args(args).output().expect("run node");
    NodeOutput {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Starts `script` in the background: the child and a receiver of its stdout lines parsed as
/// JSON.
pub fn node_spawn(script: &str, args: &[&str]) -> (Child, mpsc::Receiver<Value>) {
    let mut child = command(script)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run node");
    let (tx, rx) = mpsc::channel();
    let out = child.stdout.take().expect("piped");
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str(&line) {
                let _ = tx.send(v);
            }
        }
    });
    (child, rx)
}
