//! One moto server per test binary, started on first use on a free loopback port; it stops
//! when the test binary exits (its shell ends the server when our stdin pipe closes), so no
//! server outlives the tests. Tests share it and keep apart by using their own table,
//! bucket, queue and secret names.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use aws_config::SdkConfig;

use crate::repo_root;

/// The running moto server of this test binary.
pub struct Moto {
    /// `http://127.0.0.1:<port>`.
    pub endpoint: String,
    _child: Child,
}

/// How long moto may take to print its address (it imports a lot on a cold start).
const START_TIMEOUT: Duration = Duration::from_secs(45);

/// The shared moto server, started on first use.
pub fn moto() -> &'static Moto {
    static MOTO: OnceLock<Moto> = OnceLock::new();
    MOTO.get_or_init(start)
}

fn start() -> Moto {
    let bin = repo_root().join(".venv/bin/moto_server");
    assert!(
        bin.is_file(),
        "moto is not installed: run scripts/install-test-deps.sh"
    );
    // moto runs under a shell that ends it when our stdin pipe closes, i.e. when the test
    // binary exits, so no server outlives the tests.
    // moto's server with DynamoDB's conditional writes made atomic (tests/py/moto_server.py).
    let python = repo_root().join(".venv/bin/python");
    let wrapper = repo_root().join("tests/py/moto_server.py");
    let script = format!(
        "{} {} 127.0.0.1 0 2>&1 & m=$!; cat >/dev/null; kill $m",
        python.display(),
        wrapper.display()
    );
    let mut child = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start moto");
    let out = child.stdout.take().expect("piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut sent = false;
        // Keep draining moto's log so it never blocks on a full pipe.
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if !sent && let Some(i) = line.find("http://127.0.0.1:") {
                let url: String = line[i..]
                    .chars()
                    .take_while(|c| !c.is_whitespace())
                    .collect();
                let _ = tx.send(url);
                sent = true;
            }
        }
    });
    let endpoint = rx
        .recv_timeout(START_TIMEOUT)
        .expect("moto printed its address");
    Moto {
        endpoint,
        _child: child,
    }
}

/// The SDK configuration for moto: dummy credentials, no retries (moto's internal errors are
/// HTML 500s the SDK would otherwise retry for seconds).
pub async fn sdk_config() -> SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(moto().endpoint.clone())
        .region(aws_config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "testing", "testing", None, None, "test",
        ))
        .retry_config(aws_config::retry::RetryConfig::disabled())
        .load()
        .await
}

/// Environment for a child process talking to moto (never to a real AWS account: dummy
/// credentials, and the instance metadata service off).
pub fn child_env() -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ENDPOINT_URL", moto().endpoint.clone()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_ACCESS_KEY_ID", "testing".into()),
        ("AWS_SECRET_ACCESS_KEY", "testing".into()),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
    ]
}
