//! `GET /v1/sessions/{id}/debug`: the live page list of a running session, read from its
//! proxy's `/json/list` with the session's own token (the proxy rewrites every URL to point back
//! at itself) — through the connect gateway when the session's `connectUrl` is the gateway's,
//! over TLS when it is `wss://` (trusting the system's roots, and the local platform's authority
//! when given) — and the live view's URLs: the viewer on the connect host, each carrying a
//! viewer credential ([`wallcrawler_contract::viewer`]) minted here, never the session token.

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use wallcrawler_contract::token::MAX_SESSION_SECONDS;
use wallcrawler_contract::viewer::{Mode, ViewerClaims};

use crate::stores::{Signer, StoreResult};

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

/// The query of `GET /v1/sessions/{id}/debug`: `mode` (`view` | `control`, our extension;
/// `control` when absent) and `expiresIn` (seconds, the Browserbase SDK's `SessionDebugParams`).
#[derive(Debug, Default, Deserialize)]
pub struct DebugQuery {
    mode: Option<String>,
    #[serde(rename = "expiresIn")]
    expires_in: Option<String>,
}

/// A `/debug` query refused (the message is the 400's).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// `mode` names neither mode.
    #[error("mode must be view or control, got {0:?}")]
    Mode(String),
    /// `expiresIn` is not a whole number of seconds in range.
    #[error(
        "expiresIn must be a whole number of seconds from 1 to {MAX_SESSION_SECONDS}, got {0:?}"
    )]
    ExpiresIn(String),
}

impl DebugQuery {
    /// The viewers' mode: `control` unless the query says `view`.
    pub fn mode(&self) -> Result<Mode, QueryError> {
        match self.mode.as_deref().filter(|m| !m.is_empty()) {
            None => Ok(Mode::Control),
            Some(m) => Mode::from_name(m).ok_or_else(|| QueryError::Mode(m.to_owned())),
        }
    }

    /// The credentials' lifetime asked for, if any.
    pub fn expires_in(&self) -> Result<Option<u64>, QueryError> {
        let Some(s) = self.expires_in.as_deref().filter(|s| !s.is_empty()) else {
            return Ok(None);
        };
        s.parse::<u64>()
            .ok()
            .filter(|n| (1..=MAX_SESSION_SECONDS).contains(n))
            .map(Some)
            .ok_or_else(|| QueryError::ExpiresIn(s.to_owned()))
    }
}

/// Where the viewer of a session is served: the connect URL's host, `https://` for a `wss://`
/// URL (the gateway, or a proxy behind TLS) and `http://` for `ws://` (a task's own proxy).
pub fn viewer_base(connect_url: &str) -> Option<String> {
    let (tls, authority) = endpoint_of(connect_url)?;
    Some(format!(
        "{}://{authority}",
        if tls { "https" } else { "http" }
    ))
}

/// `<base>/viewer?t=<credential>[&page=<id>][&fullscreen=1]`. The credential is base64url
/// segments and dots, the page id hex: neither needs escaping.
pub fn viewer_url(base: &str, credential: &str, page: Option<&str>, fullscreen: bool) -> String {
    let mut url = format!("{base}/viewer?t={credential}");
    if let Some(page) = page {
        url.push_str("&page=");
        url.push_str(page);
    }
    if fullscreen {
        url.push_str("&fullscreen=1");
    }
    url
}

/// The DevTools inspector for one page, served by the proxy under the credential in its path:
/// `<base>/inspector/<credential>/inspector.html?<ws|wss>=<host>/inspector/<credential>/page/<id>`
/// (`wss` for an `https` base), as Chrome's own `devtoolsFrontendUrl` names its socket.
pub fn inspector_url(base: &str, credential: &str, page: &str) -> String {
    let (scheme, host) = match base.strip_prefix("https://") {
        Some(host) => ("wss", host),
        None => ("ws", base.strip_prefix("http://").unwrap_or(base)),
    };
    format!(
        "{base}/inspector/{credential}/inspector.html?{scheme}={host}/inspector/{credential}/page/{page}"
    )
}

/// Browserbase's `SessionLiveURLs`: `debuggerUrl` (the viewer with its tab strip) and
/// `debuggerFullscreenUrl` (the page alone) over every page with `claims`, and for each of
/// `pages` the same over that page alone, with a credential bound to it (`page`); `wsUrl`
/// the session's connect URL. In control mode a page's `debuggerUrl` is the DevTools inspector
/// on that page ([`inspector_url`]), as Browserbase's is; its `debuggerFullscreenUrl` stays the
/// viewer.
pub async fn live_urls(
    signer: &dyn Signer,
    claims: &ViewerClaims,
    base: &str,
    ws_url: &str,
    mut pages: Vec<Value>,
) -> StoreResult<Value> {
    let credential = signer.sign_viewer(claims.clone()).await?;
    for page in &mut pages {
        // An id that is not a target id (never from our proxy) gets the session-wide URLs.
        let (credential, id) = match page["id"].as_str().map(|id| claims.for_page(id)) {
            Some(Ok(one)) => (signer.sign_viewer(one.clone()).await?, one.page),
            _ => (credential.clone(), None),
        };
        page["debuggerUrl"] = json!(match id.as_deref() {
            Some(id) if claims.mode == Mode::Control => inspector_url(base, &credential, id),
            _ => viewer_url(base, &credential, id.as_deref(), false),
        });
        page["debuggerFullscreenUrl"] = json!(viewer_url(base, &credential, id.as_deref(), true));
    }
    Ok(json!({
        "wsUrl": ws_url,
        "debuggerUrl": viewer_url(base, &credential, None, false),
        "debuggerFullscreenUrl": viewer_url(base, &credential, None, true),
        "pages": pages,
    }))
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

    #[test]
    fn the_viewer_is_on_the_connect_host() {
        assert_eq!(
            super::viewer_base("wss://connect.example.test/?signingKey=x").as_deref(),
            Some("https://connect.example.test")
        );
        assert_eq!(
            super::viewer_base("ws://127.0.0.1:5/?signingKey=x").as_deref(),
            Some("http://127.0.0.1:5")
        );
        assert_eq!(super::viewer_base("http://h"), None);
        let page = "0123456789ABCDEF0123456789ABCDEF";
        assert_eq!(
            super::viewer_url("https://h", "a.b.c", Some(page), true),
            format!("https://h/viewer?t=a.b.c&page={page}&fullscreen=1")
        );
        assert_eq!(
            super::viewer_url("http://h:1", "a.b.c", None, false),
            "http://h:1/viewer?t=a.b.c"
        );
    }

    #[test]
    fn the_inspector_names_its_socket_on_the_same_host() {
        let page = "0123456789ABCDEF0123456789ABCDEF";
        assert_eq!(
            super::inspector_url("https://h", "a.b.c", page),
            format!("https://h/inspector/a.b.c/inspector.html?wss=h/inspector/a.b.c/page/{page}")
        );
        assert_eq!(
            super::inspector_url("http://127.0.0.1:5", "a.b.c", page),
            format!(
                "http://127.0.0.1:5/inspector/a.b.c/inspector.html?ws=127.0.0.1:5/inspector/a.b.c/page/{page}"
            )
        );
    }

    #[test]
    fn the_query_is_checked() {
        use super::{DebugQuery, QueryError};
        use wallcrawler_contract::viewer::Mode;
        let q = |mode: Option<&str>, exp: Option<&str>| DebugQuery {
            mode: mode.map(str::to_owned),
            expires_in: exp.map(str::to_owned),
        };
        assert_eq!(q(None, None).mode(), Ok(Mode::Control));
        assert_eq!(q(Some(""), None).mode(), Ok(Mode::Control));
        assert_eq!(q(Some("view"), None).mode(), Ok(Mode::View));
        assert_eq!(q(Some("control"), None).mode(), Ok(Mode::Control));
        assert_eq!(
            q(Some("admin"), None).mode().unwrap_err().to_string(),
            "mode must be view or control, got \"admin\""
        );
        assert_eq!(q(None, None).expires_in(), Ok(None));
        assert_eq!(q(None, Some("60")).expires_in(), Ok(Some(60)));
        assert_eq!(q(None, Some("21600")).expires_in(), Ok(Some(21_600)));
        for bad in ["0", "-1", "1.5", "21601", "1e3", "x"] {
            assert_eq!(
                q(None, Some(bad)).expires_in(),
                Err(QueryError::ExpiresIn(bad.to_owned())),
                "{bad}"
            );
        }
        assert_eq!(
            q(None, Some("0")).expires_in().unwrap_err().to_string(),
            "expiresIn must be a whole number of seconds from 1 to 21600, got \"0\""
        );
    }
}
