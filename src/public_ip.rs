//! Which address the task announces: an explicit override, else the task's network interface
//! (ECS task metadata v4 → private address → EC2's public address for that interface), else the
//! private address. The source is logged.

use std::net::IpAddr;
use std::time::Duration;

use http::uri::Scheme;
use http::{Method, StatusCode, Uri};
use tracing::{info, warn};

use crate::stores::NetworkLookup;
use crate::upstream;

/// The announced address and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovered {
    pub ip: String,
    pub source: &'static str,
    pub task_arn: Option<String>,
    /// The task's private address from the task metadata, when it answered.
    pub private_ip: Option<String>,
}

/// What the task metadata says about the task.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskMetadata {
    pub task_arn: Option<String>,
    pub private_ip: Option<String>,
}

/// Parses the v4 `/task` document.
pub fn parse_task_metadata(body: &[u8]) -> Option<TaskMetadata> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let private_ip = v["Containers"]
        .as_array()
        .into_iter()
        .flatten()
        .find_map(|c| {
            c["Networks"]
                .as_array()
                .into_iter()
                .flatten()
                .find_map(|n| {
                    n["IPv4Addresses"]
                        .as_array()?
                        .first()?
                        .as_str()
                        .map(str::to_owned)
                })
        });
    Some(TaskMetadata {
        task_arn: v["TaskARN"].as_str().map(str::to_owned),
        private_ip,
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

/// Reads the task metadata from `ECS_CONTAINER_METADATA_URI_V4`.
pub async fn task_metadata(uri: &str) -> Option<TaskMetadata> {
    let (authority, path) = split_http_url(uri)?;
    let addr = tokio::net::lookup_host(&authority).await.ok()?.next()?;
    let answer = upstream::http_request(
        addr,
        Method::GET,
        &format!("{path}/task"),
        Duration::from_secs(3),
    )
    .await
    .ok()?;
    (answer.status == StatusCode::OK)
        .then(|| parse_task_metadata(&answer.body))
        .flatten()
}

/// Decides the announced address.
pub async fn discover(
    override_ip: Option<IpAddr>,
    metadata_uri: Option<&str>,
    network: Option<&dyn NetworkLookup>,
) -> Discovered {
    let metadata = match metadata_uri {
        Some(uri) => {
            let m = task_metadata(uri).await;
            if m.is_none() {
                warn!("the ECS task metadata endpoint did not answer");
            }
            m.unwrap_or_default()
        }
        None => TaskMetadata::default(),
    };
    let task_arn = metadata.task_arn.clone();
    let private_ip = metadata.private_ip.clone();
    let found = |ip: String, source| {
        info!(public_ip = %ip, source, "announced address chosen");
        Discovered {
            ip,
            source,
            task_arn: task_arn.clone(),
            private_ip: private_ip.clone(),
        }
    };
    if let Some(ip) = override_ip {
        return found(ip.to_string(), "PUBLIC_IP");
    }
    if let Some(private) = &metadata.private_ip {
        if let Some(net) = network {
            match net.public_ip_for(private).await {
                Ok(Some(public)) => return found(public, "network interface (EC2)"),
                Ok(None) => info!("the task's network interface has no public address"),
                Err(e) => warn!(error = %e, "looking up the task's network interface failed"),
            }
        }
        return found(private.clone(), "task metadata private address");
    }
    found(
        local_address().unwrap_or_else(|| "127.0.0.1".to_owned()),
        "local interface",
    )
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
    use super::*;

    #[test]
    fn task_metadata_shape() {
        let body = br#"{"TaskARN":"arn:aws:ecs:us-east-1:1:task/c/abc","Containers":[{"Networks":[{"NetworkMode":"awsvpc","IPv4Addresses":["10.0.2.106"]}]}]}"#;
        let m = parse_task_metadata(body).unwrap();
        assert_eq!(
            m.task_arn.as_deref(),
            Some("arn:aws:ecs:us-east-1:1:task/c/abc")
        );
        assert_eq!(m.private_ip.as_deref(), Some("10.0.2.106"));
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
        let d = discover(Some("203.0.113.7".parse().unwrap()), None, None).await;
        assert_eq!((d.ip.as_str(), d.source), ("203.0.113.7", "PUBLIC_IP"));
    }
}
