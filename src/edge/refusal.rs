//! Every answer the proxy gives instead of serving a request: one type that says whose fault it
//! was, which decides its status, outcome label, log level and short body, and one place that
//! turns it into a response.

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::Full;
use tracing::Level;

use crate::telemetry::ConnectionEnd;

/// Whose fault a refusal is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The client sent something we refuse.
    Client,
    /// Chrome failed or refused.
    Chrome,
    /// Our own state or limits (not ready, at capacity).
    Us,
}

/// Why a request was not served. Bodies are short and generic; the detail goes to the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not an HTTP/1.x request head we accept (400).
    Malformed,
    /// A WebSocket route without a valid RFC 6455 upgrade (400).
    BadUpgrade,
    /// A `Host` that cannot be echoed into discovery URLs (400).
    BadHost,
    /// The request head did not arrive in time (408).
    HeaderTimeout,
    /// The request head was larger than the limit (431).
    HeadersTooLarge,
    /// No such route (404).
    NotFound,
    /// The route exists, not for this method (405).
    MethodNotAllowed,
    /// The credential was refused (401).
    Unauthorized,
    /// Chrome has no such target (404).
    NoSuchTarget,
    /// Pending budget or connection cap reached (503, `Retry-After`).
    AtCapacity,
    /// No public key yet, or a pool controller not claimed yet (503, `Retry-After`).
    NotReady,
    /// Chrome is not serving (starting, warm or gone) (503, `Retry-After`).
    BrowserNotReady,
    /// Chrome could not be reached or answered wrongly (502).
    BadGateway,
    /// Gateway: the token's session has ended (410).
    SessionEnded,
    /// Gateway: the token's session does not exist (404).
    NoSuchSession,
    /// `/json/new` asked for a local file URL (403).
    LocalFile,
    /// A valid credential that does not grant this (403): a view-mode or another page's
    /// live-view credential on the inspector.
    Forbidden,
    /// Gateway: the session did not become ready in time, or too many clients wait for it
    /// (503, `Retry-After`).
    SessionNotReady,
}

impl Refusal {
    /// Whose fault it is.
    pub fn fault(self) -> Fault {
        match self {
            Self::Malformed
            | Self::BadUpgrade
            | Self::BadHost
            | Self::HeaderTimeout
            | Self::HeadersTooLarge
            | Self::NotFound
            | Self::MethodNotAllowed
            | Self::Unauthorized
            | Self::NoSuchTarget
            | Self::SessionEnded
            | Self::NoSuchSession
            | Self::LocalFile
            | Self::Forbidden => Fault::Client,
            Self::AtCapacity | Self::NotReady | Self::BrowserNotReady | Self::SessionNotReady => {
                Fault::Us
            }
            Self::BadGateway => Fault::Chrome,
        }
    }

    /// Status, outcome label and body of each refusal, side by side.
    fn parts(self) -> (StatusCode, ConnectionEnd, &'static str) {
        use ConnectionEnd as O;
        use StatusCode as S;
        match self {
            Self::Malformed => (S::BAD_REQUEST, O::BadRequest, "bad request\n"),
            Self::BadUpgrade => (S::BAD_REQUEST, O::BadRequest, "bad websocket upgrade\n"),
            Self::BadHost => (S::BAD_REQUEST, O::BadRequest, "bad host header\n"),
            Self::HeaderTimeout => (S::REQUEST_TIMEOUT, O::HeaderTimeout, "request timeout\n"),
            Self::HeadersTooLarge => (
                S::REQUEST_HEADER_FIELDS_TOO_LARGE,
                O::HeadersTooLarge,
                "request headers too large\n",
            ),
            Self::NotFound => (S::NOT_FOUND, O::NotFound, "not found\n"),
            Self::MethodNotAllowed => (S::METHOD_NOT_ALLOWED, O::NotFound, "method not allowed\n"),
            Self::Unauthorized => (S::UNAUTHORIZED, O::Unauthorized, "unauthorized\n"),
            Self::NoSuchTarget => (S::NOT_FOUND, O::UpstreamFailed, "no such target\n"),
            Self::AtCapacity => (
                S::SERVICE_UNAVAILABLE,
                O::AtCapacity,
                "too many connections\n",
            ),
            Self::NotReady => (S::SERVICE_UNAVAILABLE, O::NotReady, "not ready\n"),
            Self::BrowserNotReady => (S::SERVICE_UNAVAILABLE, O::NotReady, "browser not ready\n"),
            Self::BadGateway => (S::BAD_GATEWAY, O::UpstreamFailed, "bad gateway\n"),
            Self::SessionEnded => (S::GONE, O::NotFound, "session ended\n"),
            Self::NoSuchSession => (S::NOT_FOUND, O::NotFound, "no such session\n"),
            Self::LocalFile => (S::FORBIDDEN, O::BadRequest, "local files are not allowed\n"),
            Self::Forbidden => (S::FORBIDDEN, O::Unauthorized, "forbidden\n"),
            Self::SessionNotReady => (S::SERVICE_UNAVAILABLE, O::NotReady, "session not ready\n"),
        }
    }

    /// The status code.
    pub fn status(self) -> StatusCode {
        self.parts().0
    }

    /// The connection outcome it is counted as.
    pub fn outcome(self) -> ConnectionEnd {
        self.parts().1
    }

    /// The level it is logged at: a client's mistakes and our ordinary limits at debug (a
    /// refused credential is logged at info, with its reason, where it is refused); Chrome's
    /// failures at warn: they end sessions.
    pub fn level(self) -> Level {
        match self.fault() {
            Fault::Client | Fault::Us => Level::DEBUG,
            Fault::Chrome => Level::WARN,
        }
    }

    /// The short body.
    pub fn body(self) -> &'static str {
        self.parts().2
    }

    /// Whether the client is told to retry in a second.
    fn retry_after(self) -> bool {
        matches!(
            self,
            Self::AtCapacity | Self::NotReady | Self::BrowserNotReady | Self::SessionNotReady
        )
    }

    /// Logs it once, at its level, with the cause when there is one.
    pub fn log(self, cause: Option<&(dyn std::error::Error + 'static)>) {
        let status = self.status().as_u16();
        let fault = self.fault();
        macro_rules! at {
            ($level:expr) => {
                match cause {
                    Some(e) => tracing::event!($level, status, ?fault, error = e, "refused"),
                    None => tracing::event!($level, status, ?fault, "refused"),
                }
            };
        }
        match self.level() {
            Level::WARN => at!(Level::WARN),
            _ => at!(Level::DEBUG),
        }
    }

    /// The response: the one place a refusal becomes HTTP.
    pub fn response(self) -> Response<Full<Bytes>> {
        let mut response = plain(
            self.status(),
            HeaderValue::from_static("text/plain; charset=utf-8"),
            Bytes::from_static(self.body().as_bytes()),
        );
        if self.retry_after() {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }

    /// The response as bytes on the wire, for the two cases where hyper has no request to
    /// answer: a head that never completed (408) and a connection evicted before it sent one
    /// (503).
    pub fn to_bytes(self) -> Vec<u8> {
        let response = self.response();
        let status = response.status();
        let mut out = format!(
            "HTTP/1.1 {} {}\r\n",
            status.as_str(),
            status.canonical_reason().unwrap_or("Error")
        )
        .into_bytes();
        for (name, value) in response.headers() {
            out.extend_from_slice(name.as_str().as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(format!("content-length: {}\r\n\r\n", self.body().len()).as_bytes());
        out.extend_from_slice(self.body().as_bytes());
        out
    }
}

/// A response the connection closes after, never cached.
pub fn plain(status: StatusCode, content_type: HeaderValue, body: Bytes) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, content_type);
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_form_of_a_refusal() {
        let raw = String::from_utf8(Refusal::AtCapacity.to_bytes()).unwrap();
        assert!(
            raw.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{raw}"
        );
        assert!(raw.contains("retry-after: 1\r\n"), "{raw}");
        assert!(raw.contains("connection: close\r\n"), "{raw}");
        assert!(
            raw.ends_with("content-length: 21\r\n\r\ntoo many connections\n"),
            "{raw}"
        );
        let raw = String::from_utf8(Refusal::HeaderTimeout.to_bytes()).unwrap();
        assert!(raw.starts_with("HTTP/1.1 408 Request Timeout\r\n"), "{raw}");
        assert!(!raw.contains("retry-after"), "{raw}");
    }

    #[test]
    fn faults_decide_levels() {
        assert_eq!(Refusal::BadGateway.fault(), Fault::Chrome);
        assert_eq!(Refusal::BadGateway.level(), Level::WARN);
        assert_eq!(Refusal::Unauthorized.fault(), Fault::Client);
        assert_eq!(Refusal::AtCapacity.fault(), Fault::Us);
        assert_eq!(Refusal::NoSuchTarget.status(), StatusCode::NOT_FOUND);
        assert_eq!(
            Refusal::NoSuchTarget.outcome(),
            ConnectionEnd::UpstreamFailed
        );
    }
}
