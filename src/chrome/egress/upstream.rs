//! The session's upstream proxies, as the hop dials through them: HTTP `CONNECT` (over TLS
//! for `https://`) with Basic authentication, and SOCKS5 with username/password (RFC 1929).
//! The destination goes to the proxy as the name Chrome gave, unresolved: the task makes no
//! DNS lookup for a proxied host.
//!
//! A proxy that refuses or fails is reported as such ([`UpstreamError`]); the hop then refuses
//! the connection (the page gets a network error) and never dials the destination itself.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use base64::Engine as _;
use bytes::Bytes;
use fast_socks5::client::{Config as SocksConfig, Socks5Stream};
use fast_socks5::util::target_addr::TargetAddr;
use fast_socks5::{AuthenticationMethod, Socks5Command};
use http::{Method, Request, StatusCode, header};
use http_body_util::Empty;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use wallcrawler_contract::egress::{ProxyScheme, ProxyServer};

use super::policy::EgressAllow;

/// Anything the relay can copy through.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// A connection through a proxy.
pub type Tunnel = Pin<Box<dyn Io>>;

/// What the proxy did instead of connecting. Its text names the proxy's fault, never a
/// credential or the destination.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The proxy's name did not resolve.
    #[error("the proxy's name did not resolve")]
    Resolve(#[source] std::io::Error),
    /// The proxy's address is one the hop may not reach (`EGRESS_ALLOW`).
    #[error(
        "the proxy's address is not allowed (loopback, private or link-local; see EGRESS_ALLOW)"
    )]
    NotAllowed,
    /// Dialling the proxy failed.
    #[error("the proxy is unreachable")]
    Unreachable(#[source] std::io::Error),
    /// TLS to an `https://` proxy failed.
    #[error("TLS to the proxy failed")]
    Tls(#[source] std::io::Error),
    /// The proxy refused the credentials (HTTP 407, or SOCKS5 authentication).
    #[error("the proxy refused the credentials")]
    Auth,
    /// The proxy answered `CONNECT` with another status.
    #[error("the proxy answered CONNECT with {0}")]
    Status(StatusCode),
    /// The HTTP exchange with the proxy failed.
    #[error("the proxy's HTTP answer failed")]
    Http(#[source] hyper::Error),
    /// The SOCKS5 exchange with the proxy failed (or it refused the destination).
    #[error("the proxy's SOCKS5 exchange failed: {0}")]
    Socks(String),
}

/// Connects to `host:port` through `proxy`.
pub async fn connect(
    proxy: &ProxyServer,
    allow: &EgressAllow,
    host: &str,
    port: u16,
) -> Result<Tunnel, UpstreamError> {
    let stream = dial(proxy, allow).await?;
    match proxy.scheme {
        ProxyScheme::Http => http_connect(stream, proxy, host, port).await,
        ProxyScheme::Https => {
            let tls = tls_to(stream, &proxy.host).await?;
            http_connect(tls, proxy, host, port).await
        }
        ProxyScheme::Socks5 => socks5_connect(stream, proxy, host, port).await,
    }
}

/// A TCP connection to the proxy itself, at an address the hop may reach.
async fn dial(proxy: &ProxyServer, allow: &EgressAllow) -> Result<TcpStream, UpstreamError> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((proxy.host.as_str(), proxy.port))
        .await
        .map_err(UpstreamError::Resolve)?
        .collect();
    if addrs.is_empty() || addrs.iter().any(|a| !allow.permits(*a)) {
        return Err(if addrs.is_empty() {
            UpstreamError::Resolve(std::io::ErrorKind::NotFound.into())
        } else {
            UpstreamError::NotAllowed
        });
    }
    let s = TcpStream::connect(&addrs[..])
        .await
        .map_err(UpstreamError::Unreachable)?;
    let _ = s.set_nodelay(true);
    Ok(s)
}

/// `host:port` as an authority (IPv6 literals bracketed).
fn authority(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

async fn http_connect<S>(
    stream: S,
    proxy: &ProxyServer,
    host: &str,
    port: u16,
) -> Result<Tunnel, UpstreamError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(UpstreamError::Http)?;
    tokio::spawn(conn.with_upgrades());
    let target = authority(host, port);
    let mut request = Request::builder()
        .method(Method::CONNECT)
        .uri(&target)
        .header(header::HOST, &target)
        .header(header::USER_AGENT, crate::USER_AGENT);
    if let Some(user) = &proxy.username {
        let pair = format!("{user}:{}", proxy.password.as_deref().unwrap_or(""));
        let basic = base64::engine::general_purpose::STANDARD.encode(pair);
        request = request.header(header::PROXY_AUTHORIZATION, format!("Basic {basic}"));
    }
    let request = request
        .body(Empty::<Bytes>::new())
        .map_err(|_| UpstreamError::Status(StatusCode::BAD_REQUEST))?;
    let answer = sender
        .send_request(request)
        .await
        .map_err(UpstreamError::Http)?;
    match answer.status() {
        s if s.is_success() => {
            let upgraded = hyper::upgrade::on(answer)
                .await
                .map_err(UpstreamError::Http)?;
            Ok(Box::pin(TokioIo::new(upgraded)))
        }
        StatusCode::PROXY_AUTHENTICATION_REQUIRED => Err(UpstreamError::Auth),
        s => Err(UpstreamError::Status(s)),
    }
}

async fn socks5_connect(
    stream: TcpStream,
    proxy: &ProxyServer,
    host: &str,
    port: u16,
) -> Result<Tunnel, UpstreamError> {
    let auth = proxy
        .username
        .as_ref()
        .map(|u| AuthenticationMethod::Password {
            username: u.clone(),
            password: proxy.password.clone().unwrap_or_default(),
        });
    let mut socks = Socks5Stream::use_stream(stream, auth, SocksConfig::default())
        .await
        .map_err(|e| match e {
            fast_socks5::SocksError::AuthenticationRejected(_)
            | fast_socks5::SocksError::AuthMethodUnacceptable(_) => UpstreamError::Auth,
            e => UpstreamError::Socks(e.to_string()),
        })?;
    let target = match host.parse() {
        Ok(ip) => TargetAddr::Ip(SocketAddr::new(ip, port)),
        Err(_) => TargetAddr::Domain(host.to_owned(), port),
    };
    socks
        .request(Socks5Command::TCPConnect, target)
        .await
        .map_err(|e| UpstreamError::Socks(e.to_string()))?;
    Ok(Box::pin(socks))
}

/// TLS to an `https://` proxy, verified against the system's roots.
async fn tls_to(
    stream: TcpStream,
    host: &str,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, UpstreamError> {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    let config = CONFIG.get_or_init(|| {
        let mut roots = rustls::RootCertStore::empty();
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        Arc::new(
            rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::aws_lc_rs::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .expect("the provider's default versions")
            .with_root_certificates(roots)
            .with_no_client_auth(),
        )
    });
    let name = rustls::pki_types::ServerName::try_from(host.to_owned()).map_err(|e| {
        UpstreamError::Tls(std::io::Error::new(std::io::ErrorKind::InvalidInput, e))
    })?;
    tokio_rustls::TlsConnector::from(config.clone())
        .connect(name, stream)
        .await
        .map_err(UpstreamError::Tls)
}
