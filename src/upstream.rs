//! The CDP endpoint behind the proxy (our Chrome, or an external one in `proxy` mode), and a
//! tiny HTTP/1.1 client for its `/json/*` endpoints.
//!
//! Chrome refuses a `Host` that is not an IP or `localhost`, so every request toward it carries
//! `Host: <its loopback address>`.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

/// Largest `/json/*` answer read from Chrome (`/json/protocol` is ~1 MiB).
pub const MAX_JSON_BODY: usize = 32 * 1024 * 1024;

/// A reachable CDP endpoint.
#[derive(Debug)]
pub struct Upstream {
    pub addr: SocketAddr,
    /// `/devtools/browser/<id>`, learned from `/json/version`.
    browser_path: Mutex<Option<String>>,
}

impl Upstream {
    pub fn new(addr: SocketAddr, browser_path: Option<String>) -> Self {
        Self {
            addr,
            browser_path: Mutex::new(browser_path),
        }
    }

    /// The browser target's path, asking Chrome when it is not known yet.
    pub async fn browser_path(&self, timeout: Duration) -> Result<String, UpstreamError> {
        if let Some(p) = self.browser_path.lock().expect("not poisoned").clone() {
            return Ok(p);
        }
        let p = fetch_browser_path(self.addr, timeout).await?;
        *self.browser_path.lock().expect("not poisoned") = Some(p.clone());
        Ok(p)
    }

    /// Forgets the cached browser path (the external browser may have restarted).
    pub fn forget_browser_path(&self) {
        *self.browser_path.lock().expect("not poisoned") = None;
    }
}

/// Whether the proxy can reach its upstream now.
#[derive(Debug, Clone)]
pub enum UpstreamState {
    /// Chrome is starting: requests get 503.
    Starting,
    /// Pool mode: Chrome is up but serves no session yet. Requests get 503 (401 without a
    /// token); `/health` answers 200 `{"status":"warm"}`, so a container health check keeps
    /// the warm task.
    Warm,
    Ready(Arc<Upstream>),
    /// Chrome has gone (crash or shutdown): requests get 503.
    Gone,
}

/// The owner (the Chrome supervisor or `proxy` mode setup) publishes, the proxy reads.
pub fn upstream_channel() -> (watch::Sender<UpstreamState>, watch::Receiver<UpstreamState>) {
    watch::channel(UpstreamState::Starting)
}

/// Failures talking to the upstream.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("connecting to the CDP endpoint failed")]
    Connect(#[source] std::io::Error),
    #[error("the CDP endpoint did not answer in time")]
    Timeout,
    #[error("talking to the CDP endpoint failed")]
    Io(#[source] std::io::Error),
    #[error("the CDP endpoint sent a malformed answer")]
    BadResponse,
    #[error("the CDP endpoint answered {0}")]
    Status(u16),
}

/// An HTTP answer from the upstream.
#[derive(Debug)]
pub struct HttpAnswer {
    pub status: u16,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

/// `METHOD target` against the upstream, answer read whole (bounded).
pub async fn http_request(
    addr: SocketAddr,
    method: &str,
    target: &str,
    timeout: Duration,
) -> Result<HttpAnswer, UpstreamError> {
    http_request_json(addr, method, target, b"", timeout).await
}

/// [`http_request`] with a JSON body (none when empty).
pub async fn http_request_json(
    addr: SocketAddr,
    method: &str,
    target: &str,
    json: &[u8],
    timeout: Duration,
) -> Result<HttpAnswer, UpstreamError> {
    tokio::time::timeout(timeout, http_request_inner(addr, method, target, json))
        .await
        .unwrap_or(Err(UpstreamError::Timeout))
}

async fn http_request_inner(
    addr: SocketAddr,
    method: &str,
    target: &str,
    json: &[u8],
) -> Result<HttpAnswer, UpstreamError> {
    let mut s = TcpStream::connect(addr)
        .await
        .map_err(UpstreamError::Connect)?;
    let content_type = if json.is_empty() {
        ""
    } else {
        "Content-Type: application/json\r\n"
    };
    let mut req = format!(
        "{method} {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{content_type}Content-Length: {}\r\n\r\n",
        json.len()
    )
    .into_bytes();
    req.extend_from_slice(json);
    s.write_all(&req).await.map_err(UpstreamError::Io)?;
    let mut buf = Vec::with_capacity(8192);
    let (status, content_type, head_len, content_length) = loop {
        let mut chunk = [0u8; 8192];
        let n = s.read(&mut chunk).await.map_err(UpstreamError::Io)?;
        if n == 0 {
            return Err(UpstreamError::BadResponse);
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut resp = httparse::Response::new(&mut headers);
        match resp.parse(&buf) {
            Ok(httparse::Status::Complete(len)) => {
                let find = |name: &str| {
                    resp.headers
                        .iter()
                        .find(|h| h.name.eq_ignore_ascii_case(name))
                        .and_then(|h| std::str::from_utf8(h.value).ok())
                        .map(|v| v.trim().to_owned())
                };
                let cl = find("content-length").and_then(|v| v.parse::<usize>().ok());
                break (resp.code.unwrap_or(0), find("content-type"), len, cl);
            }
            Ok(httparse::Status::Partial) if buf.len() < 64 * 1024 => continue,
            _ => return Err(UpstreamError::BadResponse),
        }
    };
    let mut body = buf.split_off(head_len);
    match content_length {
        Some(cl) if cl > MAX_JSON_BODY => return Err(UpstreamError::BadResponse),
        Some(cl) => {
            while body.len() < cl {
                let mut chunk = vec![0u8; (cl - body.len()).min(64 * 1024)];
                let n = s.read(&mut chunk).await.map_err(UpstreamError::Io)?;
                if n == 0 {
                    return Err(UpstreamError::BadResponse);
                }
                body.extend_from_slice(&chunk[..n]);
            }
            body.truncate(cl);
        }
        None => {
            let mut limited = (&mut s).take((MAX_JSON_BODY - body.len().min(MAX_JSON_BODY)) as u64);
            limited
                .read_to_end(&mut body)
                .await
                .map_err(UpstreamError::Io)?;
        }
    }
    Ok(HttpAnswer {
        status,
        content_type,
        body,
    })
}

/// `/devtools/browser/<id>` from the endpoint's `/json/version`.
pub async fn fetch_browser_path(
    addr: SocketAddr,
    timeout: Duration,
) -> Result<String, UpstreamError> {
    let answer = http_request(addr, "GET", "/json/version", timeout).await?;
    if answer.status != 200 {
        return Err(UpstreamError::Status(answer.status));
    }
    browser_path_from_version(&answer.body).ok_or(UpstreamError::BadResponse)
}

/// Extracts the path of `webSocketDebuggerUrl` from a `/json/version` body.
pub fn browser_path_from_version(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let url = v.get("webSocketDebuggerUrl")?.as_str()?;
    let rest = url.split_once("://")?.1;
    let path = &rest[rest.find('/')?..];
    path.starts_with("/devtools/browser/")
        .then(|| path.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn browser_path_is_extracted() {
        let body = br#"{"webSocketDebuggerUrl":"ws://127.0.0.1:9222/devtools/browser/ab-12"}"#;
        assert_eq!(
            browser_path_from_version(body).as_deref(),
            Some("/devtools/browser/ab-12")
        );
        assert_eq!(browser_path_from_version(b"{}"), None);
        assert_eq!(
            browser_path_from_version(br#"{"webSocketDebuggerUrl":"ws://h/other"}"#),
            None
        );
    }
}
