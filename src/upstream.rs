//! The CDP endpoint behind the proxy (our Chrome, or an external one in `proxy` mode), and a
//! small HTTP/1.1 client (hyper's) for its `/json/*` endpoints and the ECS endpoints.
//!
//! Chrome refuses a `Host` that is not an IP or `localhost`, so every request toward it carries
//! `Host: <its loopback address>`.
//!
//! Every dial to Chrome goes through one [`Endpoint`]: Chrome's address may be on a loopback of
//! its own (`CHROME_NETWORK=private`, `chrome/netns.rs`), reached only through its namespace.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Body as _;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::netns::NetNs;

/// Largest `/json/*` answer read from Chrome (`/json/protocol` is ~1 MiB).
pub const MAX_JSON_BODY: usize = 32 * 1024 * 1024;

/// An address and the network it is in: the controller's, or a Chrome's private namespace.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// The address (in its network).
    pub addr: SocketAddr,
    /// The private network namespace `addr` is in (`None`: the controller's network).
    netns: Option<Arc<NetNs>>,
}

impl Endpoint {
    /// `addr` in the controller's own network.
    pub fn host(addr: SocketAddr) -> Self {
        Self { addr, netns: None }
    }

    /// `addr` inside the network namespace `netns`.
    pub fn in_netns(addr: SocketAddr, netns: Arc<NetNs>) -> Self {
        Self {
            addr,
            netns: Some(netns),
        }
    }

    /// A TCP connection to the endpoint, made in its network.
    pub async fn connect(&self) -> std::io::Result<TcpStream> {
        match &self.netns {
            None => TcpStream::connect(self.addr).await,
            Some(ns) => ns.connect(self.addr).await,
        }
    }
}

/// A reachable CDP endpoint.
#[derive(Debug)]
pub struct Upstream {
    /// Chrome's DevTools address (host and port) and its network.
    pub endpoint: Endpoint,
    /// `addr` as the `Host` header of a request to Chrome names it (formatted once).
    pub host: String,
    /// `/devtools/browser/<id>`, learned from `/json/version`.
    browser_path: Mutex<Option<String>>,
}

impl Upstream {
    /// The endpoint at `endpoint`, with the browser target's path if it is already known.
    pub fn new(endpoint: Endpoint, browser_path: Option<String>) -> Self {
        Self {
            host: endpoint.addr.to_string(),
            endpoint,
            browser_path: Mutex::new(browser_path),
        }
    }

    /// The browser target's path, asking Chrome when it is not known yet.
    pub async fn browser_path(&self, timeout: Duration) -> Result<String, UpstreamError> {
        if let Some(p) = self.browser_path.lock().expect("not poisoned").clone() {
            return Ok(p);
        }
        let p = fetch_browser_path(&self.endpoint, timeout).await?;
        *self.browser_path.lock().expect("not poisoned") = Some(p.clone());
        Ok(p)
    }

    /// Forgets the cached browser path (the external browser may have restarted).
    pub fn forget_browser_path(&self) {
        *self.browser_path.lock().expect("not poisoned") = None;
    }
}

/// Whether `id` can be a Chrome target id in a path (`/devtools/page/<id>`): one short
/// component of letters, digits, `-`, `_` and `.`, never `.` or `..`.
pub fn is_target_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && id != "."
        && id != ".."
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
    /// Chrome is up and serves this session: requests are relayed to it.
    Ready(Arc<Upstream>),
    /// Chrome has gone (crash or shutdown): requests get 503.
    Gone,
}

/// The owner (the Chrome supervisor or `proxy` mode setup) publishes, the proxy reads.
pub fn upstream_channel() -> (watch::Sender<UpstreamState>, watch::Receiver<UpstreamState>) {
    watch::channel(UpstreamState::Starting)
}

/// Failures talking to the upstream (or another small HTTP endpoint: the ECS agent).
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The TCP connection to the endpoint could not be made.
    #[error("connecting to the endpoint failed")]
    Connect(#[source] std::io::Error),
    /// The endpoint did not answer within the deadline.
    #[error("the endpoint did not answer in time")]
    Timeout,
    /// Our request could not be built (a target the HTTP types refuse): our fault.
    #[error("the request could not be built")]
    Request(#[source] http::Error),
    /// The exchange failed on the wire: the endpoint closed, reset or spoke broken HTTP.
    #[error("the HTTP exchange with the endpoint failed")]
    Http(#[source] hyper::Error),
    /// Reading from or writing to the endpoint failed.
    #[error("talking to the endpoint failed")]
    Io(#[source] std::io::Error),
    /// The answer's body is larger than the cap.
    #[error("the endpoint's answer is larger than {limit} bytes")]
    TooLarge {
        /// The cap in bytes.
        limit: usize,
    },
    /// The answer (its head, or its JSON body) could not be parsed.
    #[error("the endpoint sent a malformed answer")]
    Malformed,
    /// The endpoint answered with this unexpected status.
    #[error("the endpoint answered {0}")]
    Status(StatusCode),
}

/// An HTTP answer from the upstream.
#[derive(Debug)]
pub struct HttpAnswer {
    /// The answer's status.
    pub status: StatusCode,
    /// The answer's `Content-Type`, when it sent one.
    pub content_type: Option<HeaderValue>,
    /// The answer's body (at most [`MAX_JSON_BODY`] bytes).
    pub body: Bytes,
}

/// Largest response head read from an endpoint (hyper's smallest allowed buffer is 8 KiB).
const MAX_ANSWER_HEAD: usize = 64 * 1024;

/// `METHOD target` against the upstream, answer read whole (bounded).
pub async fn http_request(
    to: &Endpoint,
    method: Method,
    target: &str,
    timeout: Duration,
) -> Result<HttpAnswer, UpstreamError> {
    http_request_json(to, method, target, Bytes::new(), timeout).await
}

/// [`http_request`] with a JSON body (none when empty).
pub async fn http_request_json(
    to: &Endpoint,
    method: Method,
    target: &str,
    json: Bytes,
    timeout: Duration,
) -> Result<HttpAnswer, UpstreamError> {
    let mut request = Request::builder()
        .method(method)
        .uri(target)
        .header(header::HOST, to.addr.to_string())
        .header(header::CONNECTION, "close");
    if !json.is_empty() {
        request = request.header(header::CONTENT_TYPE, "application/json");
    }
    let request = request
        .body(Full::new(json))
        .map_err(UpstreamError::Request)?;
    tokio::time::timeout(timeout, exchange(to, request))
        .await
        .unwrap_or(Err(UpstreamError::Timeout))
}

/// One request on a fresh connection (`Connection: close`), the answer's body bounded by
/// [`MAX_JSON_BODY`]. The connection is driven here, beside the request: no task of its own.
async fn exchange(
    to: &Endpoint,
    request: Request<Full<Bytes>>,
) -> Result<HttpAnswer, UpstreamError> {
    let stream = to.connect().await.map_err(UpstreamError::Connect)?;
    let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
        .max_buf_size(MAX_ANSWER_HEAD)
        .handshake(TokioIo::new(stream))
        .await
        .map_err(UpstreamError::Http)?;
    let answer = async move {
        let response = sender
            .send_request(request)
            .await
            .map_err(UpstreamError::Http)?;
        let (parts, body) = response.into_parts();
        // A declared length over the limit is refused before reading any of it.
        if body.size_hint().lower() > MAX_JSON_BODY as u64 {
            return Err(UpstreamError::TooLarge {
                limit: MAX_JSON_BODY,
            });
        }
        let body = Limited::new(body, MAX_JSON_BODY)
            .collect()
            .await
            .map_err(body_error)?
            .to_bytes();
        Ok(HttpAnswer {
            status: parts.status,
            content_type: parts.headers.get(header::CONTENT_TYPE).cloned(),
            body,
        })
    };
    let mut answer = std::pin::pin!(answer);
    tokio::select! {
        a = &mut answer => return a,
        c = conn => c.map_err(UpstreamError::Http)?,
    }
    // The connection ended cleanly; the body it delivered may still be buffered for us.
    answer.await
}

/// What a bounded body read failed on.
fn body_error(e: Box<dyn std::error::Error + Send + Sync>) -> UpstreamError {
    if e.is::<LengthLimitError>() {
        return UpstreamError::TooLarge {
            limit: MAX_JSON_BODY,
        };
    }
    match e.downcast::<hyper::Error>() {
        Ok(e) => UpstreamError::Http(*e),
        Err(_) => UpstreamError::Malformed,
    }
}

/// `/devtools/browser/<id>` from the endpoint's `/json/version`.
pub async fn fetch_browser_path(to: &Endpoint, timeout: Duration) -> Result<String, UpstreamError> {
    let answer = http_request(to, Method::GET, "/json/version", timeout).await?;
    if answer.status != StatusCode::OK {
        return Err(UpstreamError::Status(answer.status));
    }
    browser_path_from_version(&answer.body).ok_or(UpstreamError::Malformed)
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

    /// A one-shot HTTP endpoint on 127.0.0.1:0 that reads a request head and answers `answer`.
    async fn endpoint(answer: Vec<u8>) -> SocketAddr {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            let mut b = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && s.read(&mut b).await.unwrap_or(0) == 1 {
                head.push(b[0]);
            }
            let _ = s.write_all(&answer).await;
            // Held open until the client hangs up, so only the framing ends the body.
            let _ = s.read(&mut b).await;
        });
        addr
    }

    const WAIT: Duration = Duration::from_secs(10);

    #[tokio::test]
    async fn an_answer_is_read_whole_with_its_status_and_type() {
        let addr = endpoint(
            b"HTTP/1.1 404 Not Found\r\nContent-Type: text/x\r\nContent-Length: 4\r\n\r\nnope"
                .to_vec(),
        )
        .await;
        let a = http_request(&Endpoint::host(addr), Method::GET, "/json/x", WAIT)
            .await
            .unwrap();
        assert_eq!(a.status, StatusCode::NOT_FOUND);
        assert_eq!(a.content_type.unwrap(), "text/x");
        assert_eq!(&a.body[..], b"nope");
    }

    /// The error a GET of `/json/protocol` at `addr` ends in.
    async fn refused(addr: SocketAddr, timeout: Duration) -> UpstreamError {
        http_request(
            &Endpoint::host(addr),
            Method::GET,
            "/json/protocol",
            timeout,
        )
        .await
        .unwrap_err()
    }

    #[tokio::test]
    async fn an_oversized_answer_is_refused_without_reading_it() {
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
            MAX_JSON_BODY + 1
        );
        let addr = endpoint(head.into_bytes()).await;
        let e = refused(addr, WAIT).await;
        assert!(matches!(e, UpstreamError::TooLarge { .. }), "{e:?}");
    }

    #[tokio::test]
    async fn an_oversized_chunked_answer_is_cut_at_the_limit() {
        let mut answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        let chunk = vec![b'a'; 1 << 20];
        for _ in 0..=(MAX_JSON_BODY >> 20) {
            answer.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
            answer.extend_from_slice(&chunk);
            answer.extend_from_slice(b"\r\n");
        }
        let addr = endpoint(answer).await;
        let e = refused(addr, WAIT).await;
        assert!(matches!(e, UpstreamError::TooLarge { .. }), "{e:?}");
    }

    #[tokio::test]
    async fn broken_http_silence_and_no_listener_are_told_apart() {
        let addr = endpoint(b"SSH-2.0-OpenSSH\r\n\r\n".to_vec()).await;
        let e = http_request(&Endpoint::host(addr), Method::GET, "/", WAIT)
            .await
            .unwrap_err();
        assert!(matches!(e, UpstreamError::Http(_)), "{e:?}");

        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let e = refused(silent.local_addr().unwrap(), Duration::from_millis(200)).await;
        assert!(matches!(e, UpstreamError::Timeout), "{e:?}");

        let closed = silent.local_addr().unwrap();
        drop(silent);
        let e = http_request(&Endpoint::host(closed), Method::GET, "/", WAIT)
            .await
            .unwrap_err();
        assert!(matches!(e, UpstreamError::Connect(_)), "{e:?}");
    }
}
