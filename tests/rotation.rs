//! The public key secret from Secrets Manager (moto): a rotation is honoured at once — a token
//! signed with the new private key works immediately, one signed with the previous key keeps
//! working (`AWSPREVIOUS`), and one signed with neither is refused. And while Secrets Manager fails (a stand-in, since moto
//! cannot be made to fail), tokens matching no key cost at most one call per 5 s and are
//! answered at once. Shown on the `proxy` subcommand, which takes its key exactly as `run` does.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::upstream::FakeUpstream;
use crate::support::{SESSION, WAIT, aws, proxy, token, upgrade_request};

/// The status line's code for an upgrade with `token`.
fn upgrade_status(addr: SocketAddr, token: &str) -> u16 {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.write_all(&upgrade_request(
        &format!("/?signingKey={token}"),
        &addr.to_string(),
        &[],
    ))
    .unwrap();
    let mut head = [0u8; 12];
    s.read_exact(&mut head).unwrap();
    std::str::from_utf8(&head[9..12]).unwrap().parse().unwrap()
}

#[test]
fn rotation_is_honoured_immediately_and_the_previous_key_still_works() {
    let arn = aws::create_secret("first-key");
    let upstream = FakeUpstream::idle();
    let env = aws::env();
    let mut all: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    all.push(("WALLCRAWLER_JWT_PUBLIC_KEY_SECRET_ARN", &arn));
    all.push(("WALLCRAWLER_JWT_PUBLIC_KEY", ""));
    let (c, addr) = proxy(upstream.addr, &all);

    assert_eq!(
        upgrade_status(addr, &token("first-key", SESSION, "", 600)),
        101
    );
    aws::rotate_secret(&arn, "second-key");
    assert_eq!(
        upgrade_status(addr, &token("second-key", SESSION, "", 600)),
        101,
        "the new key works without waiting for the TTL"
    );
    assert_eq!(
        upgrade_status(addr, &token("first-key", SESSION, "", 600)),
        101,
        "AWSPREVIOUS is still accepted"
    );
    assert_eq!(
        upgrade_status(addr, &token("third-key", SESSION, "", 600)),
        401
    );
    let log = c.stderr.text();
    assert!(log.contains("refreshing the key secret"), "{log}");
    for k in ["first-key", "second-key", "third-key"] {
        let pem = wallcrawler_testkit::keys::public_pem(k);
        assert!(!log.contains(&pem[27..60]), "key text in the log");
    }
}

/// What the stand-in Secrets Manager answers.
#[derive(Clone)]
enum Answer {
    /// The public key secret of this key pair as `AWSCURRENT` (there is no `AWSPREVIOUS`).
    Key(&'static str),
    /// 400 `AccessDeniedException`.
    Denied,
    /// 500 `InternalServiceError` (which the SDK retries).
    Broken,
}

/// A Secrets Manager on 127.0.0.1 speaking the JSON protocol the SDK uses, counting its calls.
struct StandIn {
    endpoint: String,
    answer: Arc<Mutex<Answer>>,
    /// When each `GetSecretValue` arrived.
    calls: Arc<Mutex<Vec<Instant>>>,
}

impl StandIn {
    fn start(answer: Answer) -> StandIn {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let answer = Arc::new(Mutex::new(answer));
        let calls = Arc::new(Mutex::new(Vec::new()));
        let (a, c) = (answer.clone(), calls.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let (a, c) = (a.clone(), c.clone());
                std::thread::spawn(move || serve(conn, &a, &c));
            }
        });
        StandIn {
            endpoint,
            answer,
            calls,
        }
    }

    fn set(&self, answer: Answer) {
        *self.answer.lock().unwrap() = answer;
    }

    fn calls_since(&self, t: Instant) -> Vec<Instant> {
        let calls = self.calls.lock().unwrap();
        calls.iter().copied().filter(|c| *c >= t).collect()
    }
}

/// Serves one keep-alive connection: requests with a `Content-Length` body.
fn serve(conn: TcpStream, answer: &Mutex<Answer>, calls: &Mutex<Vec<Instant>>) {
    let mut out = conn.try_clone().unwrap();
    let mut r = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let (mut length, mut target) = (0usize, String::new());
        loop {
            line.clear();
            if r.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            if line == "\r\n" {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                match k.to_ascii_lowercase().as_str() {
                    "content-length" => length = v.trim().parse().unwrap(),
                    "x-amz-target" => target = v.trim().to_owned(),
                    _ => {}
                }
            }
        }
        let mut body = vec![0u8; length];
        if r.read_exact(&mut body).is_err() {
            return;
        }
        let request: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        assert_eq!(target, "secretsmanager.GetSecretValue");
        calls.lock().unwrap().push(Instant::now());
        let error = |status: &str, kind: &str| {
            (
                status.to_owned(),
                serde_json::json!({"__type": kind, "message": "stand-in"}),
            )
        };
        let current = request["VersionStage"].as_str().unwrap_or("AWSCURRENT") == "AWSCURRENT";
        let (status, reply) = match answer.lock().unwrap().clone() {
            Answer::Key(_) if !current => error("400 Bad Request", "ResourceNotFoundException"),
            Answer::Key(k) => (
                "200 OK".to_owned(),
                serde_json::json!({
                    "ARN": request["SecretId"],
                    "Name": "signing",
                    "VersionId": "v1",
                    "VersionStages": ["AWSCURRENT"],
                    "SecretString": aws::secret_json(k),
                    "CreatedDate": 1.7e9,
                }),
            ),
            Answer::Denied => error("400 Bad Request", "AccessDeniedException"),
            Answer::Broken => error("500 Internal Server Error", "InternalServiceError"),
        };
        let reply = reply.to_string();
        let head = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/x-amz-json-1.1\r\nContent-Length: {}\r\n\r\n",
            reply.len()
        );
        if out.write_all(head.as_bytes()).is_err() || out.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

/// The status code and how long the answer took.
fn timed_status(addr: SocketAddr, token: &str) -> (u16, Duration) {
    let t = Instant::now();
    let status = upgrade_status(addr, token);
    (status, t.elapsed())
}

#[test]
fn a_failing_secrets_manager_is_asked_at_most_once_per_5_s() {
    let sm = StandIn::start(Answer::Key("good-key"));
    let upstream = FakeUpstream::idle();
    let envs = [
        ("AWS_ENDPOINT_URL", sm.endpoint.as_str()),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
        (
            "WALLCRAWLER_JWT_PUBLIC_KEY_SECRET_ARN",
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:public",
        ),
        ("WALLCRAWLER_JWT_PUBLIC_KEY", ""),
    ];
    let (c, addr) = proxy(upstream.addr, &envs);
    let good = token("good-key", SESSION, "", 600);
    assert_eq!(upgrade_status(addr, &good), 101);

    // Secrets Manager refuses (AccessDenied), then breaks (500s, which the SDK would retry).
    // Bad tokens keep arriving for over 5 s in each state, one after another and then in
    // concurrent bursts, so the outage spans several 5 s windows.
    let outage = Duration::from_secs(6);
    let start = Instant::now();
    let bad = token("unknown-key", SESSION, "", 600);
    let (mut requests, mut slowest) = (0, Duration::ZERO);
    sm.set(Answer::Denied);
    while start.elapsed() < outage {
        let (status, took) = timed_status(addr, &bad);
        assert_eq!(status, 401);
        (requests, slowest) = (requests + 1, slowest.max(took));
        // Pacing the load generator, not waiting for anything.
        std::thread::sleep(Duration::from_millis(20));
    }
    sm.set(Answer::Broken);
    while start.elapsed() < outage * 2 {
        let burst: Vec<_> = (0..10)
            .map(|_| {
                let bad = bad.clone();
                std::thread::spawn(move || timed_status(addr, &bad))
            })
            .collect();
        for b in burst {
            let (status, took) = b.join().unwrap();
            assert_eq!(status, 401);
            (requests, slowest) = (requests + 1, slowest.max(took));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // The last good key keeps working meanwhile.
    let (status, took) = timed_status(addr, &good);
    assert_eq!(status, 101);
    slowest = slowest.max(took);
    let elapsed = start.elapsed();

    // At most one fetch per 5 s (each one call: no SDK retries, no AWSPREVIOUS after the
    // refusal), and a fetch in each window where bad tokens kept coming.
    let calls = sm.calls_since(start);
    let allowed = 1 + (elapsed.as_secs_f64() / 5.0).floor() as usize;
    assert!(
        calls.len() >= 2 && calls.len() <= allowed,
        "{} calls to Secrets Manager for {requests} bad tokens in {elapsed:?} (at most {allowed})",
        calls.len()
    );
    for w in calls.windows(2) {
        assert!(
            w[1] - w[0] >= Duration::from_millis(4900),
            "two calls {:?} apart",
            w[1] - w[0]
        );
    }
    // Generous for a loaded machine; none waits longer than the one coalesced fetch (which
    // answers at once here), never for the SDK's retries.
    assert!(
        slowest < Duration::from_secs(5),
        "a request took {slowest:?}"
    );

    // Healthy again with a new key: once the quiet period is over, a token signed with it
    // triggers a fetch and works.
    sm.set(Answer::Key("rotated-key"));
    let rotated = token("rotated-key", SESSION, "", 600);
    let deadline = Instant::now() + WAIT;
    loop {
        match upgrade_status(addr, &rotated) {
            101 => break,
            401 if Instant::now() < deadline => {
                // Each try is a miss, answered at once until the quiet period ends; pace them.
                std::thread::sleep(Duration::from_millis(250));
            }
            s => panic!("status {s}"),
        }
    }
    let log = c.stderr.text();
    for k in ["good-key", "unknown-key", "rotated-key"] {
        assert!(!log.contains(k), "key text in the log");
    }
}
