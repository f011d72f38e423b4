//! The live page list of a running session, read from its proxy's `/json/list` with the
//! session's own token (the proxy rewrites every URL to point back at itself) — through the
//! connect gateway when the session's `connectUrl` is the gateway's, over TLS when it is
//! `wss://` (trusting the system's roots, and the local platform's authority when given).

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Why the page list could not be read (logged; the client gets a generic 502).
#[derive(Debug, thiserror::Error)]
pub enum DebugError {
    /// The connect URL names no host.
    #[error("connectUrl has no host")]
    NoHost,
    /// The proxy did not answer within the time allowed.
    #[error("timed out")]
    TimedOut,
    /// Connecting, writing or reading failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The host is not a name TLS can check.
    #[error(transparent)]
    Name(#[from] rustls::pki_types::InvalidDnsNameError),
    /// The extra authority's PEM file could not be read.
    #[error(transparent)]
    Pem(#[from] rustls::pki_types::pem::Error),
    /// The TLS setup refused a certificate or the protocol versions.
    #[error(transparent)]
    Tls(#[from] rustls::Error),
    /// The answer is not HTTP.
    #[error("malformed answer")]
    Malformed,
    /// The proxy answered, but not 200: its status line.
    #[error("the proxy answered {0}")]
    Status(String),
    /// The body is not the JSON list.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

/// `(tls, host:port)` of a `ws://host:port/?signingKey=…` or `wss://…` connect URL.
pub fn endpoint_of(connect_url: &str) -> Option<(bool, &str)> {
    let (tls, rest) = if let Some(r) = connect_url.strip_prefix("wss://") {
        (true, r)
    } else {
        (false, connect_url.strip_prefix("ws://")?)
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    Some((tls, &rest[..end])).filter(|(_, a)| !a.is_empty())
}

/// `host:port` of a connect URL.
pub fn authority_of(connect_url: &str) -> Option<&str> {
    endpoint_of(connect_url).map(|(_, a)| a)
}

/// The system's root certificates, read once.
fn native_roots() -> &'static [CertificateDer<'static>] {
    static ROOTS: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    ROOTS.get_or_init(|| rustls_native_certs::load_native_certs().certs)
}

/// A TLS client trusting the system's roots and `extra_ca` (a PEM file), when given.
fn tls_client(extra_ca: Option<&Path>) -> Result<tokio_rustls::TlsConnector, DebugError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(native_roots().iter().cloned());
    if let Some(path) = extra_ca {
        for cert in CertificateDer::pem_file_iter(path)? {
            roots.add(cert?)?;
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// Sends `request` on `s` and reads the answer to its end (at most 8 MiB). A TLS peer that
/// closes without `close_notify` after answering is taken as the end.
async fn exchange(
    mut s: impl AsyncRead + AsyncWrite + Unpin,
    request: &[u8],
) -> Result<Vec<u8>, DebugError> {
    s.write_all(request).await?;
    let mut out = Vec::new();
    match (&mut s).take(8 * 1024 * 1024).read_to_end(&mut out).await {
        Ok(_) => Ok(out),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !out.is_empty() => Ok(out),
        Err(e) => Err(e.into()),
    }
}

/// Browserbase's `pages[]` from the proxy's `/json/list`; `extra_ca`: an authority trusted
/// beside the system's for a `wss://` URL (the local platform's).
pub async fn page_list(
    connect_url: &str,
    token: &str,
    extra_ca: Option<&Path>,
) -> Result<Vec<Value>, DebugError> {
    let (tls, authority) = endpoint_of(connect_url).ok_or(DebugError::NoHost)?;
    let authority = authority.to_owned();
    let body = tokio::time::timeout(Duration::from_secs(5), async {
        let tcp = tokio::net::TcpStream::connect(&authority).await?;
        let req = format!("GET /json/list?signingKey={token} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
        if !tls {
            return exchange(tcp, req.as_bytes()).await;
        }
        let host = authority
            .rsplit_once(':')
            .map_or(authority.as_str(), |(h, _)| h)
            .trim_start_matches('[')
            .trim_end_matches(']');
        let name = ServerName::try_from(host.to_owned())?;
        let s = tls_client(extra_ca)?.connect(name, tcp).await?;
        exchange(s, req.as_bytes()).await
    })
    .await
    .map_err(|_| DebugError::TimedOut)??;
    let text = String::from_utf8_lossy(&body);
    let (head, json_body) = text.split_once("\r\n\r\n").ok_or(DebugError::Malformed)?;
    if !head.starts_with("HTTP/1.1 200") {
        let status = head.lines().next().unwrap_or("");
        return Err(DebugError::Status(status.to_owned()));
    }
    let list: Vec<Value> = serde_json::from_str(json_body)?;
    Ok(list
        .into_iter()
        .filter(|t| t["type"] == "page")
        .map(|t| {
            json!({
                "id": t["id"],
                "url": t["url"],
                "title": t["title"],
                "faviconUrl": t.get("faviconUrl").cloned().unwrap_or(Value::String(String::new())),
                "wsUrl": t["webSocketDebuggerUrl"],
                "debuggerUrl": Value::Null,
                "debuggerFullscreenUrl": Value::Null,
            })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    #[test]
    fn authority() {
        assert_eq!(
            super::authority_of("ws://1.2.3.4:9223?signingKey=x"),
            Some("1.2.3.4:9223")
        );
        assert_eq!(super::authority_of("ws://h:1/devtools"), Some("h:1"));
        assert_eq!(super::authority_of("http://h"), None);
        assert_eq!(
            super::endpoint_of("wss://connect.example.test/?signingKey=x"),
            Some((true, "connect.example.test"))
        );
        assert_eq!(
            super::endpoint_of("ws://127.0.0.1:5/?signingKey=x"),
            Some((false, "127.0.0.1:5"))
        );
        assert_eq!(super::endpoint_of("wss://"), None);
    }
}
