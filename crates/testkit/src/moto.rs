//! One moto server per test binary, started on first use on a free loopback port; it stops
//! when the test binary exits (its shell ends the server when our stdin pipe closes), so no
//! server outlives the tests. Tests share it and keep apart by using their own table,
//! bucket, queue and secret names. A test that changes what is global to a server (moto's
//! IAM enforcement) starts a private one with [`Moto::start`], stopped when dropped.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use aws_config::SdkConfig;
use aws_sdk_dynamodb::config::Credentials;

use crate::repo_root;

/// A running moto server: the shared one of this test binary, or a private one.
pub struct Moto {
    /// `http://127.0.0.1:<port>`.
    pub endpoint: String,
    child: Child,
}

/// How long moto may take to print its address (it imports a lot on a cold start).
const START_TIMEOUT: Duration = Duration::from_secs(45);

/// The shared moto server, started on first use.
pub fn moto() -> &'static Moto {
    static MOTO: OnceLock<Moto> = OnceLock::new();
    MOTO.get_or_init(Moto::start)
}

impl Moto {
    /// A moto server of the caller's own, on a free loopback port; stopped when dropped.
    pub fn start() -> Moto {
        let bin = repo_root().join(".venv/bin/moto_server");
        assert!(
            bin.is_file(),
            "moto is not installed: run scripts/install-test-deps.sh"
        );
        // moto runs under a shell that ends it when our stdin pipe closes, i.e. when the test
        // binary exits (or a private server is dropped), so no server outlives the tests.
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
        Moto { endpoint, child }
    }

    /// The SDK configuration for this server with `creds` (no retries: moto's internal errors
    /// are HTML 500s the SDK would otherwise retry for seconds).
    pub async fn sdk_config_as(&self, creds: Credentials) -> SdkConfig {
        aws_config::defaults(aws_config::BehaviorVersion::latest())
            .endpoint_url(self.endpoint.clone())
            .region(aws_config::Region::new("us-east-1"))
            .credentials_provider(creds)
            .retry_config(aws_config::retry::RetryConfig::disabled())
            .load()
            .await
    }

    /// Environment for a child process talking to this server with `creds` (the instance
    /// metadata service off, so nothing but these credentials is ever found).
    pub fn child_env_as(&self, creds: &Credentials) -> Vec<(&'static str, String)> {
        let mut env = vec![
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("AWS_REGION", "us-east-1".into()),
            ("AWS_ACCESS_KEY_ID", creds.access_key_id().to_owned()),
            (
                "AWS_SECRET_ACCESS_KEY",
                creds.secret_access_key().to_owned(),
            ),
            ("AWS_EC2_METADATA_DISABLED", "true".into()),
        ];
        if let Some(token) = creds.session_token() {
            env.push(("AWS_SESSION_TOKEN", token.to_owned()));
        }
        env
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        // Closing the shell's stdin ends the server; waiting reaps the shell.
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// The dummy credentials moto accepts while it enforces no IAM.
pub fn dummy_credentials() -> Credentials {
    Credentials::new("testing", "testing", None, None, "test")
}

/// The SDK configuration for moto: dummy credentials, no retries (moto's internal errors are
/// HTML 500s the SDK would otherwise retry for seconds).
pub async fn sdk_config() -> SdkConfig {
    moto().sdk_config_as(dummy_credentials()).await
}

/// Environment for a child process talking to moto (never to a real AWS account: dummy
/// credentials, and the instance metadata service off).
pub fn child_env() -> Vec<(&'static str, String)> {
    moto().child_env_as(&dummy_credentials())
}

/// Credentials of a session of role `role_arn` named `session`, from `moto`'s STS, as ECS
/// makes a task role's (the session named by the task id): what a task holds. Asked with
/// `caller`'s credentials (dummy ones while moto enforces no IAM).
pub async fn assume_role(
    moto: &Moto,
    caller: Credentials,
    role_arn: &str,
    session: &str,
) -> Credentials {
    let sts = aws_sdk_sts::Client::new(&moto.sdk_config_as(caller).await);
    let out = sts
        .assume_role()
        .role_arn(role_arn)
        .role_session_name(session)
        .send()
        .await
        .unwrap_or_else(|e| panic!("AssumeRole {role_arn} as {session}: {e:?}"));
    let c = out.credentials().expect("AssumeRole answers credentials");
    Credentials::new(
        c.access_key_id(),
        c.secret_access_key(),
        Some(c.session_token().to_owned()),
        None,
        "moto-assumed-role",
    )
}
