//! A task's identity for the control plane's task API
//! ([`wallcrawler_contract::task_api`]): the task signs an STS `GetCallerIdentity` request with
//! its role's credentials and hands over the signature ([`sign`]); the control plane sends that
//! request to its own STS endpoint and reads who signed it ([`Verifier::caller`]). STS checks
//! the signature, the credentials and the time (15 minutes); nothing here trusts the task's
//! word for who it is. The request is signed over the [`AUDIENCE_HEADER`], so a signature made
//! for another service's login is not accepted, and over the STS host the control plane sends
//! it to, so it cannot be pointed elsewhere.
//!
//! [`https_client`] is the one HTTP client both sides use for these calls (hyper-rustls with the
//! system's roots, the TLS stack the SDK already builds).

use std::time::{Duration, SystemTime};

use aws_config::SdkConfig;
use aws_credential_types::provider::ProvideCredentials as _;
use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign as sigv4};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::rt::TokioExecutor;
use wallcrawler_contract::task_api::{
    AUDIENCE, AUDIENCE_HEADER, NONCE_HEADER, STS_BODY, STS_CONTENT_TYPE, SignedIdentity,
};

/// The HTTPS (and, for loopback tests, HTTP) client of the task API's calls.
pub type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector<Resolver>>, Full<Bytes>>;

/// The client's name resolution: the system's (`getaddrinfo`, as hyper's own resolver), or,
/// pinned, always one host's addresses whatever name a URL holds. A task reaches the task API
/// at its internal load balancer (`TASK_API_ADDRESS`) while TLS checks, and `Host` names, the
/// name the certificate covers (`TASK_API_URL`'s host).
#[derive(Clone, Debug, Default)]
pub struct Resolver {
    pinned: Option<std::sync::Arc<str>>,
}

impl Resolver {
    /// Resolves `host` (a DNS name or an IP address) for every name asked.
    pub fn pinned(host: &str) -> Self {
        Self {
            pinned: Some(host.into()),
        }
    }
}

impl tower_service::Service<Name> for Resolver {
    type Response = std::vec::IntoIter<std::net::SocketAddr>;
    type Error = std::io::Error;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let host: String = match &self.pinned {
            Some(h) => h.to_string(),
            None => name.as_str().to_owned(),
        };
        // Port 0: the connector puts the URL's port on each address.
        Box::pin(async move {
            let addrs: Vec<_> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            Ok(addrs.into_iter())
        })
    }
}

/// The largest STS answer read (a real one is ~500 B).
const MAX_STS_ANSWER: usize = 16 * 1024;
/// How long one STS call may take.
const STS_TIMEOUT: Duration = Duration::from_secs(5);

/// Why an identity could not be made or checked.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// The SDK configuration has no region or no credentials provider.
    #[error("no {0} is configured")]
    Unconfigured(&'static str),
    /// The task's credentials could not be loaded.
    #[error("the task's credentials could not be loaded")]
    Credentials(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// Signing failed (a malformed endpoint).
    #[error("the identity request could not be signed")]
    Signing(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// STS refused the signature (wrong, expired, or for another request): the caller is not
    /// who it says.
    #[error("STS refused the identity (HTTP {0})")]
    Refused(u16),
    /// STS could not be asked (unreachable, timed out, a 5xx or throttled answer, or an answer
    /// that names no caller).
    #[error("STS could not check the identity: {0}")]
    Unavailable(String),
}

/// The HTTPS client: the system's roots, HTTP/1.1, plain HTTP allowed (the task API on
/// loopback in tests; the controller refuses a non-loopback `http://` API URL at start).
pub fn https_client() -> Result<HttpsClient, std::io::Error> {
    https_client_via(Resolver::default())
}

/// [`https_client`] resolving names with `resolver`.
pub fn https_client_via(resolver: Resolver) -> Result<HttpsClient, std::io::Error> {
    use hyper_rustls::ConfigBuilderExt as _;
    let tls = rustls::ClientConfig::builder_with_provider(
        rustls::crypto::aws_lc_rs::default_provider().into(),
    )
    .with_safe_default_protocol_versions()
    .map_err(std::io::Error::other)?
    .with_native_roots()?
    .with_no_client_auth();
    Ok(client_with(tls, resolver))
}

/// The client over `tls` (its roots), resolving with `resolver`.
pub fn client_with(tls: rustls::ClientConfig, resolver: Resolver) -> HttpsClient {
    let mut http = HttpConnector::new_with_resolver(resolver);
    http.enforce_http(false);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Client::builder(TokioExecutor::new()).build(https)
}

/// The STS endpoint `sdk` talks to: `AWS_ENDPOINT_URL` when set (an emulator), else the
/// region's.
fn sts_endpoint(sdk: &SdkConfig) -> Result<(http::Uri, String), IdentityError> {
    let region = sdk
        .region()
        .ok_or(IdentityError::Unconfigured("region"))?
        .to_string();
    let url = match sdk.endpoint_url() {
        Some(u) => u.trim_end_matches('/').to_owned() + "/",
        None => format!("https://sts.{region}.amazonaws.com/"),
    };
    let uri = url
        .parse::<http::Uri>()
        .map_err(|e| IdentityError::Signing(e.into()))?;
    Ok((uri, region))
}

/// The request both sides build: the same method, URL, headers and body, so the signature the
/// task made is the one STS checks.
fn sts_request(uri: &http::Uri, nonce: &str) -> Result<http::Request<Full<Bytes>>, IdentityError> {
    let host = uri
        .authority()
        .ok_or(IdentityError::Unconfigured("STS endpoint host"))?
        .as_str()
        .to_owned();
    http::Request::post(uri.clone())
        .header(http::header::CONTENT_TYPE, STS_CONTENT_TYPE)
        .header(http::header::HOST, host)
        .header(AUDIENCE_HEADER, AUDIENCE)
        .header(NONCE_HEADER, nonce)
        .body(Full::new(Bytes::from_static(STS_BODY.as_bytes())))
        .map_err(|e| IdentityError::Signing(e.into()))
}

/// The task's identity: its credentials' signature of the STS request, made now.
pub async fn sign(sdk: &SdkConfig) -> Result<SignedIdentity, IdentityError> {
    sign_at(sdk, SystemTime::now()).await
}

/// An identity signed as if at `time` (tests of the control plane's freshness check; a task
/// signs with [`sign`]).
pub async fn sign_at(sdk: &SdkConfig, time: SystemTime) -> Result<SignedIdentity, IdentityError> {
    let provider = sdk
        .credentials_provider()
        .ok_or(IdentityError::Unconfigured("credentials provider"))?;
    let creds = provider
        .provide_credentials()
        .await
        .map_err(|e| IdentityError::Credentials(e.into()))?;
    let (uri, region) = sts_endpoint(sdk)?;
    let nonce = SignedIdentity::new_nonce();
    let mut req = sts_request(&uri, &nonce)?;
    let identity = Identity::from(creds);
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(&region)
        .name("sts")
        .time(time)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| IdentityError::Signing(e.into()))?
        .into();
    let headers = req
        .headers()
        .iter()
        .filter_map(|(k, v)| Some((k.as_str(), v.to_str().ok()?)));
    let signable = SignableRequest::new(
        "POST",
        uri.to_string(),
        headers,
        SignableBody::Bytes(STS_BODY.as_bytes()),
    )
    .map_err(|e| IdentityError::Signing(e.into()))?;
    let (instructions, _) = sigv4(signable, &params)
        .map_err(|e| IdentityError::Signing(e.into()))?
        .into_parts();
    instructions.apply_to_request_http1x(&mut req);
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    match (
        header("authorization"),
        header("x-amz-date"),
        header("x-amz-security-token"),
    ) {
        (Some(authorization), Some(amz_date), Some(security_token)) => Ok(SignedIdentity {
            authorization,
            amz_date,
            security_token,
            nonce,
        }),
        // Long-term keys (no session token) are never a task's.
        _ => Err(IdentityError::Unconfigured("session token")),
    }
}

/// Checks identities against the control plane's own STS endpoint.
#[derive(Clone)]
pub struct Verifier {
    client: HttpsClient,
    endpoint: http::Uri,
}

impl Verifier {
    /// A verifier sending to the STS endpoint of `sdk` (its region's, or `AWS_ENDPOINT_URL`).
    pub fn new(sdk: &SdkConfig) -> Result<Self, IdentityError> {
        let (endpoint, _) = sts_endpoint(sdk)?;
        let client = https_client().map_err(|e| IdentityError::Unavailable(e.to_string()))?;
        Ok(Self { client, endpoint })
    }

    /// The ARN of whoever signed `id`, as STS answers it.
    pub async fn caller(&self, id: &SignedIdentity) -> Result<String, IdentityError> {
        // The nonce's header value cannot fail: decoding took only hex.
        let mut req = sts_request(&self.endpoint, &id.nonce)?;
        let h = req.headers_mut();
        for (name, value) in [
            ("authorization", &id.authorization),
            ("x-amz-date", &id.amz_date),
            ("x-amz-security-token", &id.security_token),
        ] {
            let v = http::HeaderValue::from_str(value)
                .map_err(|_| IdentityError::Refused(http::StatusCode::BAD_REQUEST.as_u16()))?;
            h.insert(name, v);
        }
        let answer = tokio::time::timeout(STS_TIMEOUT, self.client.request(req))
            .await
            .map_err(|_| IdentityError::Unavailable("timed out".into()))?
            .map_err(|e| IdentityError::Unavailable(e.to_string()))?;
        let status = answer.status();
        let body = Limited::new(answer.into_body(), MAX_STS_ANSWER)
            .collect()
            .await
            .map_err(|e| IdentityError::Unavailable(e.to_string()))?
            .to_bytes();
        if status.is_client_error() && status != http::StatusCode::TOO_MANY_REQUESTS {
            return Err(IdentityError::Refused(status.as_u16()));
        }
        if !status.is_success() {
            return Err(IdentityError::Unavailable(format!("HTTP {status}")));
        }
        caller_arn(&body).ok_or_else(|| IdentityError::Unavailable("no caller ARN".into()))
    }
}

/// `GetCallerIdentityResponse/GetCallerIdentityResult/Arn` of an STS answer.
fn caller_arn(body: &[u8]) -> Option<String> {
    use aws_smithy_xml::decode::{Document, try_data};
    let mut doc = Document::try_from(body).ok()?;
    let mut root = doc.root_element().ok()?;
    if !root.start_el().matches("GetCallerIdentityResponse") {
        return None;
    }
    while let Some(mut result) = root.next_tag() {
        if !result.start_el().matches("GetCallerIdentityResult") {
            continue;
        }
        while let Some(mut field) = result.next_tag() {
            if field.start_el().matches("Arn") {
                return try_data(&mut field).ok().map(|s| s.into_owned());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A name the certificate covers and no resolver knows: only the pin can reach it.
    const NAME: &str = "task-api.wallcrawler.invalid";

    /// One HTTPS request served on 127.0.0.1 with a certificate for [`NAME`]: the client
    /// (its roots only that certificate) and the `Host` header the server read.
    async fn serve_once(resolver: Resolver) -> Result<String, String> {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let cert = rcgen::generate_simple_self_signed(vec![NAME.to_owned()]).unwrap();
        let der = cert.cert.der().clone();
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.signing_key.serialize_der().into());
        let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![der.clone()], key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(server));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let served = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut tls = acceptor.accept(tcp).await.ok()?;
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = tls.read(&mut buf).await.ok()?;
                if n == 0 {
                    return None;
                }
                head.extend_from_slice(&buf[..n]);
            }
            let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok";
            tls.write_all(answer).await.ok()?;
            tls.shutdown().await.ok()?;
            Some(String::from_utf8_lossy(&head).into_owned())
        });
        let mut roots = rustls::RootCertStore::empty();
        roots.add(der).unwrap();
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let client = client_with(tls, resolver);
        let req = http::Request::get(format!("https://{NAME}:{port}/"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let asked = tokio::time::timeout(Duration::from_secs(30), client.request(req)).await;
        let answer = asked.expect("bounded").map_err(|e| format!("{e:?}"))?;
        assert_eq!(answer.status(), 200);
        let head = served.await.unwrap().expect("a request");
        let host = head
            .lines()
            .find_map(|l| l.strip_prefix("host: "))
            .expect("a host header");
        Ok(host.to_owned())
    }

    #[tokio::test]
    async fn a_pinned_resolver_reaches_its_address_with_the_urls_name_for_tls_and_host() {
        let host = serve_once(Resolver::pinned("127.0.0.1")).await.unwrap();
        assert!(host.starts_with(NAME), "{host}");
        // (No unpinned case: resolving a name nobody serves would ask the system's DNS,
        // and the tests talk to loopback only. The name is reserved: no DNS answers it.)
    }

    #[test]
    fn the_caller_is_read_from_the_answer_and_nothing_else() {
        let answer =
            br#"<GetCallerIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <GetCallerIdentityResult>
    <Arn>arn:aws:sts::123456789012:assumed-role/wc-task/abc123</Arn>
    <UserId>AROAX:abc123</UserId>
    <Account>123456789012</Account>
  </GetCallerIdentityResult>
</GetCallerIdentityResponse>"#;
        assert_eq!(
            caller_arn(answer).as_deref(),
            Some("arn:aws:sts::123456789012:assumed-role/wc-task/abc123")
        );
        for other in [
            &b"<ErrorResponse><Error><Arn>x</Arn></Error></ErrorResponse>"[..],
            b"<GetCallerIdentityResponse><Arn>x</Arn></GetCallerIdentityResponse>",
            b"not xml",
            b"",
        ] {
            assert_eq!(caller_arn(other), None);
        }
    }
}
