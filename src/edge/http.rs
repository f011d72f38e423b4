//! The request head as the proxy's rules read it ([`RequestHead`], built from what hyper
//! parsed).

#[cfg(test)]
use ::http::header::HeaderName;
use ::http::header::{AsHeaderName, HeaderMap, HeaderValue};
use ::http::uri::PathAndQuery;
use ::http::{Method, StatusCode, Version, request};
use wallcrawler_contract::TokenError;

use crate::auth::{self, Presented};

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

    /// The credentials presented; the query is read only when `use_query` (it is not ours on
    /// `/json/new`).
    pub fn credentials(&self, use_query: bool) -> Result<Presented, TokenError> {
        auth::extract(self.query().filter(|_| use_query), &self.headers)
    }
}

/// Why a raw head could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HeadError {
    /// The head is larger than the allowed size, or has too many header fields.
    #[error("request headers too large")]
    TooLarge,
    /// The head is not a valid HTTP/1.x head.
    #[error("malformed request")]
    Malformed,
}

/// A complete HTTP/1.x head read from raw bytes: what the proxy reads itself (Chrome's answer
/// to an upgrade, whose socket is ours rather than hyper's) and the tests' raw requests.
pub struct RawHead<'a> {
    /// The request or status line, without its line ending.
    pub start: &'a str,
    /// The header lines, each checked to be a `name: value` field.
    fields: &'a [u8],
    /// The head's length, blank line included: what follows is the body (or frames).
    pub len: usize,
}

impl<'a> RawHead<'a> {
    /// Reads a complete head from `buf`, or `None` when more bytes are needed. Lines end in
    /// CRLF (or LF); more than `max_fields` header fields is [`HeadError::TooLarge`].
    pub fn read(buf: &'a [u8], max_fields: usize) -> Result<Option<Self>, HeadError> {
        let mut lines = Lines { buf, pos: 0 };
        let Some(start) = lines.next() else {
            return Ok(None);
        };
        let start = std::str::from_utf8(start).map_err(|_| HeadError::Malformed)?;
        let fields_at = lines.pos;
        let mut count = 0;
        while let Some(line) = lines.next() {
            if line.is_empty() {
                let fields = &buf[fields_at..lines.pos];
                let len = lines.pos;
                return Ok(Some(Self { start, fields, len }));
            }
            count += 1;
            if count > max_fields {
                return Err(HeadError::TooLarge);
            }
            split_field(line).ok_or(HeadError::Malformed)?;
        }
        Ok(None)
    }

    /// The header fields as `(name, value)`, the value trimmed of surrounding blanks.
    pub fn fields(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + use<'a> {
        let lines = Lines {
            buf: self.fields,
            pos: 0,
        };
        lines.filter_map(split_field)
    }

    /// The status of a response head (`HTTP/1.x NNN reason`).
    pub fn status(&self) -> Result<StatusCode, HeadError> {
        let rest = self
            .start
            .strip_prefix("HTTP/1.")
            .ok_or(HeadError::Malformed)?;
        let mut parts = rest.splitn(3, ' ');
        let (Some("0" | "1"), Some(code)) = (parts.next(), parts.next()) else {
            return Err(HeadError::Malformed);
        };
        if code.len() != 3 {
            return Err(HeadError::Malformed);
        }
        StatusCode::from_bytes(code.as_bytes()).map_err(|_| HeadError::Malformed)
    }
}

/// The lines of a head, each without its line ending; stops at the first incomplete one.
struct Lines<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Iterator for Lines<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let rest = &self.buf[self.pos..];
        let nl = rest.iter().position(|&b| b == b'\n')?;
        self.pos += nl + 1;
        let line = &rest[..nl];
        Some(line.strip_suffix(b"\r").unwrap_or(line))
    }
}

/// A `name: value` header line split, or `None` when it is not one (the name a token, the
/// value without control bytes but tabs).
fn split_field(line: &[u8]) -> Option<(&[u8], &[u8])> {
    let colon = line.iter().position(|&b| b == b':')?;
    let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
    let token = |b: &u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b);
    let text = |b: &u8| *b == b'\t' || (*b >= 0x20 && *b != 0x7f);
    (!name.is_empty() && name.iter().all(token) && value.iter().all(text)).then_some((name, value))
}

/// Parses a complete request head from `buf`, or `None` when more bytes are needed: the
/// tests' way to build a [`RequestHead`] from raw text (the proxy's own come from hyper).
#[cfg(test)]
pub fn parse_request_head(
    buf: &[u8],
    limit: usize,
) -> Result<Option<(RequestHead, usize)>, HeadError> {
    let Some(raw) = RawHead::read(buf, MAX_HEADERS)? else {
        return if buf.len() > limit {
            Err(HeadError::TooLarge)
        } else {
            Ok(None)
        };
    };
    if raw.len > limit {
        return Err(HeadError::TooLarge);
    }
    let mut headers = HeaderMap::new();
    for (name, value) in raw.fields() {
        let name = HeaderName::from_bytes(name).map_err(|_| HeadError::Malformed)?;
        let value = HeaderValue::from_bytes(value).map_err(|_| HeadError::Malformed)?;
        headers.append(name, value);
    }
    let mut parts = raw.start.split(' ');
    let (Some(method), Some(path), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HeadError::Malformed);
    };
    let version = match version {
        "HTTP/1.0" => 0,
        "HTTP/1.1" => 1,
        _ => return Err(HeadError::Malformed),
    };
    if !path.starts_with('/') {
        return Err(HeadError::Malformed);
    }
    let method = Method::from_bytes(method.as_bytes()).map_err(|_| HeadError::Malformed)?;
    let target = PathAndQuery::try_from(path).map_err(|_| HeadError::Malformed)?;
    let head = RequestHead {
        method,
        target,
        version,
        headers,
    };
    Ok(Some((head, raw.len)))
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
