//! Which address the task announces, and the private address READY carries for the connect
//! gateway.
//!
//! - `PUBLIC_IP` set: that address.
//! - Behind the connect gateway (the default): the task's private address from the ECS task
//!   metadata v4 (else this machine's first non-loopback address). No EC2 call at all: clients
//!   reach the task only through the gateway, which dials the private address.
//! - Direct mode (`PUBLIC_IP_REQUIRED=true`): the public address of the task's **own** network
//!   interface, found in EC2 by the MAC address the task metadata gives together with its
//!   private address (never a region-wide search by private address alone, which can name
//!   another VPC's interface), retried on throttling and transient failures. When it cannot be
//!   found the task fails its session: it never announces a private address that clients
//!   outside the VPC cannot reach.
//!
//! The source is logged.

use std::net::IpAddr;
use std::time::Duration;

use http::uri::Scheme;
use http::{Method, StatusCode, Uri};
use tracing::{info, warn};

use crate::stores::{self, NetworkLookup, StoreError, TaskInterface};
use crate::upstream;

/// How long the lookups may keep retrying transient failures, in all.
const LOOKUP_RETRY_BUDGET: Duration = Duration::from_secs(10);

/// The announced address and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Discovered {
    pub ip: String,
    pub source: &'static str,
    pub task_arn: Option<String>,
    /// The task's private address from the task metadata, when it answered.
    pub private_ip: Option<String>,
}

/// Why a public address that was required could not be announced.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PublicIpError {
    /// The task metadata endpoint did not answer (after retries).
    #[error("the ECS task metadata endpoint did not answer")]
    NoMetadata,
    /// The task metadata names no network interface (MAC and private address).
    #[error("the ECS task metadata names no network interface (MAC address and private IPv4)")]
    NoInterface,
    /// No EC2 lookup is configured.
    #[error("no EC2 lookup is configured")]
    NoLookup,
    /// The task's interface has no public address (a private subnet, or no public IP assigned).
    #[error("the task's network interface has no public IPv4 address")]
    NoPublicAddress,
    /// EC2 failed for good (refused, or still failing when the retries ran out).
    #[error("looking up the task's network interface failed")]
    Lookup(#[source] StoreError),
}

impl PublicIpError {
    /// The session's `terminationReason`: fixed words, no service detail.
    pub(crate) fn reason(&self) -> String {
        let why = match self {
            Self::Lookup(e) => format!(
                "looking up the task's network interface failed: {}",
                e.summary()
            ),
            other => other.to_string(),
        };
        format!("the task's public IP (PUBLIC_IP_REQUIRED) could not be found: {why}")
    }
}

/// What the task metadata says about the task.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TaskMetadata {
    pub task_arn: Option<String>,
    pub private_ip: Option<String>,
    /// The MAC address of the interface holding `private_ip`.
    pub mac: Option<String>,
}

impl TaskMetadata {
    /// The task's network interface, when the metadata names both its MAC and private address.
    pub(crate) fn interface(&self) -> Option<TaskInterface> {
        Some(TaskInterface {
            mac: self.mac.clone()?,
            private_ip: self.private_ip.clone()?,
        })
    }
}

/// Parses the v4 `/task` document: the task ARN and the first network with an IPv4 address
/// (its MAC address with it, from the same network entry).
pub(crate) fn parse_task_metadata(body: &[u8]) -> Option<TaskMetadata> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let network = v["Containers"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["Networks"].as_array().into_iter().flatten())
        .find_map(|n| {
            let ip = n["IPv4Addresses"].as_array()?.first()?.as_str()?.to_owned();
            let mac = n["MACAddress"]
                .as_str()
                .filter(|m| !m.is_empty())
                .map(str::to_owned);
            Some((ip, mac))
        });
    let (private_ip, mac) = match network {
        Some((ip, mac)) => (Some(ip), mac),
        None => (None, None),
    };
    Some(TaskMetadata {
        task_arn: v["TaskARN"].as_str().map(str::to_owned),
        private_ip,
        mac,
    })
}

/// Splits `http://host[:port]/path` into an address to dial (`host:port`, port 80 by default)
/// and the path without its trailing `/`; `None` for anything but an absolute `http` URL.
pub(crate) fn split_http_url(url: &str) -> Option<(String, String)> {
    let uri: Uri = url.parse().ok()?;
    if uri.scheme() != Some(&Scheme::HTTP) {
        return None;
    }
    let authority = uri.authority()?;
    let port = authority.port_u16().unwrap_or(80);
    let path = uri.path().trim_end_matches('/').to_owned();
    Some((format!("{}:{port}", authority.host()), path))
}

/// Why one read of the task metadata failed.
#[derive(Debug, thiserror::Error)]
enum MetadataError {
    #[error("ECS_CONTAINER_METADATA_URI_V4 is not an http:// URL")]
    BadUri,
    #[error("the endpoint's address could not be resolved")]
    Resolve,
    #[error("the request failed")]
    Request(#[source] upstream::UpstreamError),
    #[error("the endpoint answered {0}")]
    Status(StatusCode),
    #[error("the answer is not a task metadata document")]
    Parse,
}

/// One read of `{ECS_CONTAINER_METADATA_URI_V4}/task`; unreachable and 5xx are transient.
async fn read_task_metadata(uri: &str) -> Result<TaskMetadata, StoreError> {
    const SERVICE: &str = "ECS task metadata endpoint";
    let fail = |transient: bool, e: MetadataError| {
        if transient {
            StoreError::Unavailable {
                service: SERVICE,
                source: Box::new(e),
            }
        } else {
            StoreError::Other {
                service: SERVICE,
                source: Box::new(e),
            }
        }
    };
    let (authority, path) =
        split_http_url(uri).ok_or_else(|| fail(false, MetadataError::BadUri))?;
    let addr = tokio::net::lookup_host(&authority)
        .await
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| fail(true, MetadataError::Resolve))?;
    let answer = upstream::http_request(
        &upstream::Endpoint::host(addr),
        Method::GET,
        &format!("{path}/task"),
        Duration::from_secs(3),
    )
    .await
    .map_err(|e| fail(true, MetadataError::Request(e)))?;
    if answer.status != StatusCode::OK {
        return Err(fail(
            answer.status.is_server_error(),
            MetadataError::Status(answer.status),
        ));
    }
    parse_task_metadata(&answer.body).ok_or_else(|| fail(false, MetadataError::Parse))
}

/// Reads the task metadata from `ECS_CONTAINER_METADATA_URI_V4` (one attempt).
pub(crate) async fn task_metadata(uri: &str) -> Option<TaskMetadata> {
    read_task_metadata(uri).await.ok()
}

/// [`task_metadata`] with bounded retries (what the startup self-check reads).
pub(crate) async fn task_metadata_retried(uri: &str) -> Option<TaskMetadata> {
    read_metadata(uri, true).await
}

/// The task metadata, or `None` (logged) when the endpoint does not answer; `retried`: with
/// bounded retries (a public address depends on it).
async fn read_metadata(uri: &str, retried: bool) -> Option<TaskMetadata> {
    let read = if retried {
        stores::retry("reading the ECS task metadata", LOOKUP_RETRY_BUDGET, || {
            read_task_metadata(uri)
        })
        .await
        .map_err(|e| warn!(error = %e, "the ECS task metadata endpoint did not answer"))
        .ok()
    } else {
        task_metadata(uri).await
    };
    if read.is_none() && !retried {
        warn!("the ECS task metadata endpoint did not answer");
    }
    read
}

/// Decides the announced address. `required` (`PUBLIC_IP_REQUIRED`, direct mode): a public
/// address must be found, else the error; otherwise `network` is never asked.
pub(crate) async fn discover(
    override_ip: Option<IpAddr>,
    metadata_uri: Option<&str>,
    network: Option<&dyn NetworkLookup>,
    required: bool,
) -> Result<Discovered, PublicIpError> {
    let metadata = match metadata_uri {
        Some(uri) => read_metadata(uri, required && override_ip.is_none()).await,
        None => None,
    };
    let answered = metadata.is_some();
    let metadata = metadata.unwrap_or_default();
    let found = |ip: String, source| {
        info!(public_ip = %ip, source, "announced address chosen");
        Discovered {
            ip,
            source,
            task_arn: metadata.task_arn.clone(),
            private_ip: metadata.private_ip.clone(),
        }
    };
    if let Some(ip) = override_ip {
        return Ok(found(
            ip.to_string(),
            wallcrawler_contract::task_env::PUBLIC_IP,
        ));
    }
    if required {
        if !answered {
            return Err(PublicIpError::NoMetadata);
        }
        let iface = metadata.interface().ok_or(PublicIpError::NoInterface)?;
        let net = network.ok_or(PublicIpError::NoLookup)?;
        let public = stores::retry(
            "looking up the task's network interface",
            LOOKUP_RETRY_BUDGET,
            || net.public_ip_of(&iface),
        )
        .await
        .map_err(PublicIpError::Lookup)?;
        return match public {
            Some(ip) => Ok(found(ip, "network interface (EC2, by MAC address)")),
            None => Err(PublicIpError::NoPublicAddress),
        };
    }
    if let Some(private) = &metadata.private_ip {
        return Ok(found(private.clone(), "task metadata private address"));
    }
    Ok(found(
        local_address().unwrap_or_else(|| "127.0.0.1".to_owned()),
        "local interface",
    ))
}

/// The first non-loopback IPv4 address of this machine.
fn local_address() -> Option<String> {
    nix::ifaddrs::getifaddrs().ok()?.find_map(|i| {
        let a = i.address?.as_sockaddr_in()?.ip();
        (!a.is_loopback()).then(|| a.to_string())
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    const ARN: &str = "arn:aws:ecs:us-east-1:1:task/c/abc";
    const MAC: &str = "0e:9e:32:c7:48:85";

    fn document(mac: Option<&str>) -> String {
        let mut network = serde_json::json!({
            "NetworkMode": "awsvpc",
            "IPv4Addresses": ["10.0.2.106"],
        });
        if let Some(m) = mac {
            network["MACAddress"] = m.into();
        }
        serde_json::json!({"TaskARN": ARN, "Containers": [{"Networks": [network]}]}).to_string()
    }

    /// A stand-in for the ECS task metadata v4 endpoint on 127.0.0.1 answering `/task` with
    /// `body` after `failures` 500s. Its base URL and the number of requests it got.
    async fn metadata_server(
        body: String,
        failures: usize,
    ) -> (String, std::sync::Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let hits = std::sync::Arc::new(AtomicUsize::new(0));
        let seen = hits.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let n = seen.fetch_add(1, Ordering::SeqCst);
                let mut buf = vec![0u8; 4096];
                let mut got = 0;
                while !buf[..got].windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf[got..]).await {
                        Ok(0) | Err(_) => break,
                        Ok(k) => got += k,
                    }
                }
                let head = String::from_utf8_lossy(&buf[..got]).into_owned();
                let (status, answer) = if n < failures {
                    ("500 Internal Server Error", String::new())
                } else if head.starts_with("GET /v4/abc/task ") {
                    ("200 OK", body.clone())
                } else {
                    ("404 Not Found", String::new())
                };
                let reply = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                    answer.len()
                );
                let _ = s.write_all(reply.as_bytes()).await;
            }
        });
        (format!("http://{addr}/v4/abc"), hits)
    }

    /// A stand-in for EC2: answers from `answers` in turn (the last one again when they run
    /// out), recording what it was asked.
    struct FakeNetwork {
        answers: Mutex<Vec<Result<Option<String>, &'static str>>>,
        asked: Mutex<Vec<TaskInterface>>,
    }

    impl FakeNetwork {
        fn new(answers: Vec<Result<Option<String>, &'static str>>) -> Self {
            Self {
                answers: Mutex::new(answers),
                asked: Mutex::new(Vec::new()),
            }
        }

        fn asked(&self) -> Vec<TaskInterface> {
            self.asked.lock().unwrap().clone()
        }
    }

    /// `"throttled"` is a transient failure (as EC2's RequestLimitExceeded is classified),
    /// anything else a refusal.
    fn failure(what: &'static str) -> StoreError {
        let source = Box::new(std::io::Error::other(what));
        if what == "throttled" {
            StoreError::Unavailable {
                service: "EC2",
                source,
            }
        } else {
            StoreError::Refused {
                service: "EC2",
                source,
            }
        }
    }

    #[async_trait::async_trait]
    impl NetworkLookup for FakeNetwork {
        async fn public_ip_of(&self, iface: &TaskInterface) -> Result<Option<String>, StoreError> {
            self.asked.lock().unwrap().push(iface.clone());
            let mut answers = self.answers.lock().unwrap();
            let answer = if answers.len() > 1 {
                answers.remove(0)
            } else {
                answers[0].clone()
            };
            answer.map_err(failure)
        }
    }

    fn ours() -> TaskInterface {
        TaskInterface {
            mac: MAC.into(),
            private_ip: "10.0.2.106".into(),
        }
    }

    #[test]
    fn task_metadata_shape() {
        let m = parse_task_metadata(document(Some(MAC)).as_bytes()).unwrap();
        assert_eq!(m.task_arn.as_deref(), Some(ARN));
        assert_eq!(m.private_ip.as_deref(), Some("10.0.2.106"));
        assert_eq!(m.mac.as_deref(), Some(MAC));
        assert_eq!(m.interface(), Some(ours()));
        let m = parse_task_metadata(document(None).as_bytes()).unwrap();
        assert_eq!(m.interface(), None, "no MAC, no interface to look up");
    }

    #[test]
    fn metadata_url_split() {
        assert_eq!(
            split_http_url("http://169.254.170.2/v4/abc"),
            Some(("169.254.170.2:80".into(), "/v4/abc".into()))
        );
        assert_eq!(
            split_http_url("http://127.0.0.1:8080/v4/x/"),
            Some(("127.0.0.1:8080".into(), "/v4/x".into()))
        );
        assert_eq!(split_http_url("https://x"), None);
    }

    #[tokio::test]
    async fn override_wins() {
        let net = FakeNetwork::new(vec![Ok(Some("198.51.100.1".into()))]);
        let d = discover(Some("203.0.113.7".parse().unwrap()), None, Some(&net), true)
            .await
            .unwrap();
        assert_eq!((d.ip.as_str(), d.source), ("203.0.113.7", "PUBLIC_IP"));
        assert!(net.asked().is_empty());
    }

    #[tokio::test]
    async fn behind_the_gateway_the_private_address_is_announced_and_ec2_never_asked() {
        let (uri, _) = metadata_server(document(Some(MAC)), 0).await;
        let net = FakeNetwork::new(vec![Ok(Some("198.51.100.1".into()))]);
        let d = discover(None, Some(&uri), Some(&net), false).await.unwrap();
        assert_eq!(d.ip, "10.0.2.106");
        assert_eq!(d.private_ip.as_deref(), Some("10.0.2.106"));
        assert_eq!(d.task_arn.as_deref(), Some(ARN));
        assert!(net.asked().is_empty(), "no DescribeNetworkInterfaces");
    }

    #[tokio::test]
    async fn direct_mode_looks_up_the_tasks_own_interface_by_mac_and_private_ip() {
        let (uri, _) = metadata_server(document(Some(MAC)), 0).await;
        let net = FakeNetwork::new(vec![Ok(Some("198.51.100.1".into()))]);
        let d = discover(None, Some(&uri), Some(&net), true).await.unwrap();
        assert_eq!(d.ip, "198.51.100.1");
        assert_eq!(
            d.private_ip.as_deref(),
            Some("10.0.2.106"),
            "READY's privateIP too"
        );
        assert_eq!(net.asked(), vec![ours()]);
    }

    #[tokio::test]
    async fn direct_mode_retries_throttling_and_a_failing_metadata_endpoint() {
        let (uri, hits) = metadata_server(document(Some(MAC)), 2).await;
        let net = FakeNetwork::new(vec![
            Err("throttled"),
            Err("throttled"),
            Ok(Some("198.51.100.1".into())),
        ]);
        let d = discover(None, Some(&uri), Some(&net), true).await.unwrap();
        assert_eq!(d.ip, "198.51.100.1");
        assert_eq!(net.asked().len(), 3);
        assert_eq!(hits.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn direct_mode_never_falls_back_to_the_private_address() {
        let (uri, _) = metadata_server(document(Some(MAC)), 0).await;
        // The interface has no public address.
        let net = FakeNetwork::new(vec![Ok(None)]);
        let e = discover(None, Some(&uri), Some(&net), true)
            .await
            .unwrap_err();
        assert!(matches!(e, PublicIpError::NoPublicAddress), "{e:?}");
        assert!(
            e.reason().contains("no public IPv4 address"),
            "{}",
            e.reason()
        );
        // EC2 refuses (e.g. no permission): once, no retries, and the same refusal.
        let net = FakeNetwork::new(vec![Err("refused")]);
        let e = discover(None, Some(&uri), Some(&net), true)
            .await
            .unwrap_err();
        assert!(matches!(e, PublicIpError::Lookup(_)), "{e:?}");
        assert_eq!(net.asked().len(), 1);
        assert!(
            e.reason().contains("the EC2 refused the request"),
            "{}",
            e.reason()
        );
        // No MAC in the metadata: nothing to look up by, and no region-wide search instead.
        let (uri, _) = metadata_server(document(None), 0).await;
        let net = FakeNetwork::new(vec![Ok(Some("198.51.100.1".into()))]);
        let e = discover(None, Some(&uri), Some(&net), true)
            .await
            .unwrap_err();
        assert!(matches!(e, PublicIpError::NoInterface), "{e:?}");
        assert!(net.asked().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn direct_mode_without_metadata_fails() {
        // A port nothing listens on (bound, then closed).
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let net = FakeNetwork::new(vec![Ok(Some("198.51.100.1".into()))]);
        let uri = format!("http://{closed}/v4/abc");
        let e = discover(None, Some(&uri), Some(&net), true)
            .await
            .unwrap_err();
        assert!(matches!(e, PublicIpError::NoMetadata), "{e:?}");
        assert!(net.asked().is_empty());
    }
}
