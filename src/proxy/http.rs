//! The request head as the proxy's rules read it ([`RequestHead`], built from what hyper
//! parsed).

#[cfg(test)]
use ::http::header::HeaderName;
use ::http::header::{AsHeaderName, HeaderMap, HeaderValue};
use ::http::uri::PathAndQuery;
use ::http::{Method, Version, request};

/// Most headers a request may carry.
pub const MAX_HEADERS: usize = 64;

/// A parsed request head.
#[derive(Debug, Clone)]
pub struct RequestHead {
    /// The request method, e.g. `GET`.
    pub method: Method,
    /// Path and query exactly as sent (hyper's, not copied).
    pub target: PathAndQuery,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub version: u8,
    /// The request's headers.
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
        let target = parts.uri.into_parts().path_and_query?;
        Some(Self {
            method: parts.method,
            target,
            version: u8::from(parts.version != Version::HTTP_10),
            headers: parts.headers,
        })
    }

    /// Values of every header called `name` (case-insensitive; a [`HeaderName`] constant
    /// such as `header::UPGRADE` is found without parsing the name).
    pub fn header_values<'a, K: AsHeaderName>(
        &'a self,
        name: K,
    ) -> impl Iterator<Item = &'a [u8]> + use<'a, K> {
        self.headers
            .get_all(name)
            .into_iter()
            .map(HeaderValue::as_bytes)
    }

    /// The single value of `name` as text, if present exactly once and valid UTF-8.
    pub fn header<K: AsHeaderName>(&self, name: K) -> Option<&str> {
        let mut it = self.header_values(name);
        let first = it.next()?;
        if it.next().is_some() {
            return None;
        }
        std::str::from_utf8(first).ok().map(str::trim)
    }

    /// Whether a comma-separated header (e.g. `Connection`) lists `token`.
    pub fn header_has_token<K: AsHeaderName>(&self, name: K, token: &str) -> bool {
        self.header_values(name).any(|v| {
            std::str::from_utf8(v)
                .map(|s| s.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
                .unwrap_or(false)
        })
    }

    /// Path without the query.
    pub fn path(&self) -> &str {
        self.target.path()
    }

    /// The raw query, if any.
    pub fn query(&self) -> Option<&str> {
        self.target.query()
    }
}

/// Why a raw request head could not be parsed (tests build heads from raw text).
#[cfg(test)]
#[derive(Debug, thiserror::Error)]
pub enum HeadError {
    /// The head is larger than the allowed size.
    #[error("request headers too large")]
    TooLarge,
    /// The head is not a valid HTTP/1.x request head.
    #[error("malformed request")]
    Malformed,
}

/// Parses a complete request head from `buf`, or `None` when more bytes are needed: the
/// tests' way to build a [`RequestHead`] from raw text (the proxy's own come from hyper).
#[cfg(test)]
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
            let path = req.path.unwrap_or_default();
            if !path.starts_with('/') {
                return Err(HeadError::Malformed);
            }
            let method = Method::from_bytes(req.method.unwrap_or_default().as_bytes());
            let (Ok(method), Ok(target)) = (method, PathAndQuery::try_from(path)) else {
                return Err(HeadError::Malformed);
            };
            let head = RequestHead {
                method,
                target,
                version: req.version.unwrap_or(1),
                headers,
            };
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
}
