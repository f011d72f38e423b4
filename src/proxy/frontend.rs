//! The DevTools frontend's files (`/inspector/<credential>/<file>`), streamed from Chrome's
//! debug port (`/devtools/<file>`) to the client as they arrive: the handler reads Chrome's
//! answer head ([`request`]) and hands the connection over; the driver writes our head (Chrome's
//! status, content type and length) and copies the body ([`FileAnswer::send`]). One deadline,
//! the upstream timeout, bounds the whole exchange, a slow client included.

use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Empty};
use hyper::body::{Body, Incoming};
use hyper::client::conn::http1::{Builder, Connection};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::upstream::{Endpoint, UpstreamError};

/// Most bytes of Chrome's answer head.
const MAX_HEAD: usize = 64 * 1024;

type Conn = Pin<Box<Connection<TokioIo<TcpStream>, Empty<Bytes>>>>;

/// Chrome's answer to a frontend file request, its body still to come.
pub(super) struct FileAnswer {
    status: StatusCode,
    content_type: Option<HeaderValue>,
    body: Incoming,
    conn: Conn,
    deadline: Instant,
}

/// Asks Chrome for `/devtools/<file>`; `Ok` once its answer's head arrived. `timeout` bounds
/// this and [`FileAnswer::send`] together.
pub(super) async fn request(
    to: &Endpoint,
    file: &str,
    timeout: Duration,
) -> Result<FileAnswer, UpstreamError> {
    let deadline = Instant::now() + timeout;
    tokio::time::timeout_at(deadline, head(to, file, deadline))
        .await
        .unwrap_or(Err(UpstreamError::Timeout))
}

async fn head(to: &Endpoint, file: &str, deadline: Instant) -> Result<FileAnswer, UpstreamError> {
    let stream = to.connect().await.map_err(UpstreamError::Connect)?;
    let (mut sender, conn) = Builder::new()
        .max_buf_size(MAX_HEAD)
        .handshake(TokioIo::new(stream))
        .await
        .map_err(UpstreamError::Http)?;
    let mut conn: Conn = Box::pin(conn);
    let request = Request::builder()
        .method(Method::GET)
        .uri(format!("/devtools/{file}"))
        .header(header::HOST, to.addr.to_string())
        .header(header::CONNECTION, "close")
        .body(Empty::new())
        .map_err(UpstreamError::Request)?;
    let sent = sender.send_request(request);
    tokio::pin!(sent);
    let response = tokio::select! {
        r = &mut sent => r,
        c = &mut conn => {
            c.map_err(UpstreamError::Http)?;
            sent.await
        }
    }
    .map_err(UpstreamError::Http)?;
    // No second request: the connection ends with this answer's body.
    drop(sender);
    let (parts, body) = response.into_parts();
    Ok(FileAnswer {
        status: parts.status,
        content_type: parts.headers.get(header::CONTENT_TYPE).cloned(),
        body,
        conn,
        deadline,
    })
}

/// Why a file's answer stopped short.
#[derive(Debug, thiserror::Error)]
pub(super) enum SendError {
    /// Writing to the client failed (it left).
    #[error("client: {0}")]
    Client(std::io::Error),
    /// Chrome's side failed mid-body.
    #[error("chrome: {0}")]
    Chrome(hyper::Error),
    /// The deadline passed.
    #[error("timed out")]
    Timeout,
}

impl FileAnswer {
    /// The head the client gets: Chrome's status, content type and (when Chrome gave one)
    /// length; nothing else of Chrome's headers.
    fn our_head(&self) -> Vec<u8> {
        let mut head = format!(
            "HTTP/1.1 {} {}\r\n",
            self.status.as_u16(),
            self.status.canonical_reason().unwrap_or("")
        )
        .into_bytes();
        if let Some(ct) = &self.content_type {
            head.extend_from_slice(b"content-type: ");
            head.extend_from_slice(ct.as_bytes());
            head.extend_from_slice(b"\r\n");
        }
        if let Some(n) = self.body.size_hint().exact() {
            head.extend_from_slice(format!("content-length: {n}\r\n").as_bytes());
        }
        head.extend_from_slice(b"connection: close\r\ncache-control: no-store\r\n\r\n");
        head
    }

    /// Writes the answer to `client`, the body frame by frame as Chrome sends it.
    pub(super) async fn send<C: AsyncWrite + Unpin>(self, client: &mut C) -> Result<(), SendError> {
        let deadline = self.deadline;
        tokio::time::timeout_at(deadline, self.copy(client))
            .await
            .unwrap_or(Err(SendError::Timeout))
    }

    async fn copy<C: AsyncWrite + Unpin>(mut self, client: &mut C) -> Result<(), SendError> {
        client
            .write_all(&self.our_head())
            .await
            .map_err(SendError::Client)?;
        let mut conn_done = false;
        loop {
            let frame = tokio::select! {
                f = self.body.frame() => f,
                c = &mut self.conn, if !conn_done => {
                    c.map_err(SendError::Chrome)?;
                    conn_done = true;
                    continue;
                }
            };
            match frame {
                None => break,
                Some(Err(e)) => return Err(SendError::Chrome(e)),
                Some(Ok(f)) => {
                    if let Ok(data) = f.into_data() {
                        client.write_all(&data).await.map_err(SendError::Client)?;
                    }
                }
            }
        }
        client.flush().await.map_err(SendError::Client)
    }
}
