//! The request head as the proxy's rules read it ([`RequestHead`], built from what hyper
//! parsed), and, for the metrics listener until it moves to hyper, a minimal request-head
//! reader and plain responses.

use std::time::Duration;

use ::http::header::{HeaderMap, HeaderName, HeaderValue};
use ::http::{Version, request};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// Most headers a request may carry.
pub const MAX_HEADERS: usize = 64;

/// A parsed request head.
#[derive(Debug, Clone)]
pub struct RequestHead {
    pub method: String,
    /// Path and query exactly as sent.
    pub target: String,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub version: u8,
    pub headers: HeaderMap,
}

impl RequestHead {
    /// The head of a request hyper parsed; `None` unless its target is in origin form
    /// (`/path?query`): an absolute URL (`GET http://host/`) or `*` is malformed here.
    pub fn from_parts(parts: request::Parts) -> Option<Self> {
        let uri = &parts.uri;
        if uri.scheme().is_some() || uri.authority().is_some() || !uri.path().starts_with('/') {
            return None;
        }
        Some(Self {
            method: parts.method.as_str().to_owned(),
            target: uri
                .path_and_query()
                .map_or("/", |pq| pq.as_str())
                .to_owned(),
            version: u8::from(parts.version != Version::HTTP_10),
            headers: parts.headers,
        })
    }

    /// Values of every header called `name` (case-insensitive).
    pub fn header_values<'a, 'n>(
        &'a self,
        name: &'n str,
    ) -> impl Iterator<Item = &'a [u8]> + use<'a, 'n> {
        self.headers
            .get_all(name)
            .into_iter()
            .map(HeaderValue::as_bytes)
    }

    /// The single value of `name` as text, if present exactly once and valid UTF-8.
    pub fn header<'a>(&'a self, name: &str) -> Option<&'a str> {
        let mut it = self.header_values(name);
        let first = it.next()?;
        if it.next().is_some() {
            return None;
        }
        std::str::from_utf8(first).ok().map(str::trim)
    }

    /// Whether a comma-separated header (e.g. `Connection`) lists `token`.
    pub fn header_has_token(&self, name: &str, token: &str) -> bool {
        self.header_values(name).any(|v| {
            std::str::from_utf8(v)
                .map(|s| s.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
                .unwrap_or(false)
        })
    }

    /// Path without the query.
    pub fn path(&self) -> &str {
        self.target
            .split_once('?')
            .map_or(self.target.as_str(), |(p, _)| p)
    }

    /// The raw query, if any.
    pub fn query(&self) -> Option<&str> {
        self.target.split_once('?').map(|(_, q)| q)
    }
}

// What follows is the metrics listener's (`telemetry::serve_metrics`): the proxy's own edge
// reads heads with hyper. It goes when that listener moves to hyper; `parse_request_head`
// stays for the tests that build a `RequestHead` from raw text.

/// Why no request head could be read.
#[derive(Debug, thiserror::Error)]
pub enum HeadError {
    #[error("request headers not complete in time")]
    Timeout,
    #[error("request headers too large")]
    TooLarge,
    #[error("malformed request")]
    Malformed,
    #[error("connection closed before a request arrived")]
    Closed,
    #[error("reading the request failed")]
    Io(#[source] std::io::Error),
}

/// Reads one request head into `buf`. Returns the head and the number of bytes of `buf` it used;
/// anything after that is early data from the client.
pub async fn read_request_head(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    limit: usize,
    timeout: Duration,
) -> Result<(RequestHead, usize), HeadError> {
    tokio::time::timeout(timeout, read_loop(stream, buf, limit))
        .await
        .unwrap_or(Err(HeadError::Timeout))
}

async fn read_loop(
    stream: &mut TcpStream,
    buf: &mut Vec<u8>,
    limit: usize,
) -> Result<(RequestHead, usize), HeadError> {
    loop {
        if let Some(parsed) = parse_request_head(buf, limit)? {
            return Ok(parsed);
        }
        if buf.len() >= limit {
            return Err(HeadError::TooLarge);
        }
        buf.reserve(1024.min(limit - buf.len()).max(1));
        let room = (limit - buf.len()).min(buf.capacity() - buf.len()).max(1);
        let start = buf.len();
        buf.resize(start + room, 0);
        let n = stream.read(&mut buf[start..]).await;
        match n {
            Ok(0) => {
                buf.truncate(start);
                return Err(if start == 0 {
                    HeadError::Closed
                } else {
                    HeadError::Malformed
                });
            }
            Ok(n) => buf.truncate(start + n),
            Err(e) => {
                buf.truncate(start);
                return Err(HeadError::Io(e));
            }
        }
    }
}

/// Parses a complete request head from `buf`, or `None` when more bytes are needed.
pub fn parse_request_head(
    buf: &[u8],
    limit: usize,
) -> Result<Option<(RequestHead, usize)>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => {
            if len > limit {
                return Err(HeadError::TooLarge);
            }
            let mut headers = HeaderMap::with_capacity(req.headers.len());
            for h in req.headers.iter() {
                let name = HeaderName::from_bytes(h.name.as_bytes());
                let value = HeaderValue::from_bytes(h.value);
                let (Ok(name), Ok(value)) = (name, value) else {
                    return Err(HeadError::Malformed);
                };
                headers.append(name, value);
            }
            let head = RequestHead {
                method: req.method.unwrap_or_default().to_owned(),
                target: req.path.unwrap_or_default().to_owned(),
                version: req.version.unwrap_or(1),
                headers,
            };
            if !head.target.starts_with('/') {
                return Err(HeadError::Malformed);
            }
            Ok(Some((head, len)))
        }
        Ok(httparse::Status::Partial) => {
            if buf.len() > limit {
                Err(HeadError::TooLarge)
            } else {
                Ok(None)
            }
        }
        Err(httparse::Error::TooManyHeaders) => Err(HeadError::TooLarge),
        Err(_) => Err(HeadError::Malformed),
    }
}

/// A short response with a generic body; the connection is closed after it.
pub fn simple_response(status: u16, extra_headers: &[(&str, &str)], body: &str) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\nCache-Control: no-store\r\n",
        reason(status),
        body.len()
    );
    for (k, v) in extra_headers {
        out.push_str(k);
        out.push_str(": ");
        out.push_str(v);
        out.push_str("\r\n");
    }
    out.push_str("\r\n");
    out.push_str(body);
    out.into_bytes()
}

/// A response with a body of the given type; the connection is closed after it.
pub fn body_response(status: u16, content_type: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\nCache-Control: no-store\r\n\r\n",
        reason(status),
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

/// The standard reason phrase.
fn reason(status: u16) -> &'static str {
    match status {
        101 => "Switching Protocols",
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        426 => "Upgrade Required",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_complete_head_and_reports_its_length() {
        let raw = b"GET /json/version?signingKey=x HTTP/1.1\r\nHost: a:1\r\nX-A: 1\r\n\r\nEXTRA";
        let (head, len) = parse_request_head(raw, 16 * 1024).unwrap().unwrap();
        assert_eq!(head.method, "GET");
        assert_eq!(head.path(), "/json/version");
        assert_eq!(head.query(), Some("signingKey=x"));
        assert_eq!(head.header("host"), Some("a:1"));
        assert_eq!(&raw[len..], b"EXTRA");
    }

    #[test]
    fn partial_then_too_large() {
        assert!(
            parse_request_head(b"GET / HTTP/1.1\r\nHost: a", 1024)
                .unwrap()
                .is_none()
        );
        let big = format!("GET / HTTP/1.1\r\nX: {}", "a".repeat(2000));
        assert!(matches!(
            parse_request_head(big.as_bytes(), 1024),
            Err(HeadError::TooLarge)
        ));
    }

    #[test]
    fn malformed_and_absolute_form_are_refused() {
        assert!(matches!(
            parse_request_head(b"NOT HTTP\r\n\r\n", 1024),
            Err(HeadError::Malformed)
        ));
        assert!(matches!(
            parse_request_head(b"GET http://evil/ HTTP/1.1\r\n\r\n", 1024),
            Err(HeadError::Malformed)
        ));
    }

    #[test]
    fn too_many_headers_is_too_large() {
        let mut raw = String::from("GET / HTTP/1.1\r\n");
        for i in 0..100 {
            raw.push_str(&format!("X-{i}: v\r\n"));
        }
        raw.push_str("\r\n");
        assert!(matches!(
            parse_request_head(raw.as_bytes(), 64 * 1024),
            Err(HeadError::TooLarge)
        ));
    }

    #[test]
    fn connection_tokens_and_duplicates() {
        let raw = b"GET / HTTP/1.1\r\nConnection: keep-alive, Upgrade\r\nA: 1\r\nA: 2\r\n\r\n";
        let (head, _) = parse_request_head(raw, 1024).unwrap().unwrap();
        assert!(head.header_has_token("connection", "upgrade"));
        assert_eq!(head.header("a"), None, "duplicates are not a single value");
    }

    #[test]
    fn responses_are_well_formed() {
        let r = String::from_utf8(simple_response(503, &[("Retry-After", "1")], "busy\n")).unwrap();
        assert!(r.starts_with("HTTP/1.1 503 Service Unavailable\r\n"));
        assert!(r.contains("Retry-After: 1\r\n"));
        assert!(r.ends_with("\r\n\r\nbusy\n"));
    }
}
