//! Chrome's one way out: a SOCKS5 server (RFC 1928: no authentication, `CONNECT` only; IPv4,
//! IPv6 and domain targets) on a loopback listener — inside Chrome's private network namespace
//! ([`crate::netns`]), or on the machine's loopback on the shared network — dialling from the
//! controller's network. Chrome is pointed at it in every mode with
//! `--proxy-server=socks5://127.0.0.1:<port>` and `--proxy-bypass-list=<-loopback>` (without
//! which Chrome never proxies 127.0.0.1), so every connection a page makes passes here and the
//! session's rules apply whatever the page does. Chrome sends domain names to a SOCKS5 proxy, so
//! a direct destination is resolved here, and a proxied one is handed to the proxy unresolved.
//!
//! The protocol is `fast-socks5`'s; the policy ([`policy`]) is ours: what Chrome sends is
//! hostile input (a page chooses the destinations), so each handshake is bounded in time (the
//! protocol bounds its sizes: at most 255 methods, 255-byte names), the number of connections
//! is capped, and each destination is checked:
//!
//! - link-local and instance-metadata destinations (169.254.0.0/16, fe80::/10, fd00:ec2::254)
//!   are refused always ("connection not allowed by ruleset"), defence in depth beside the
//!   managed policy's URL blocklist;
//! - loopback, private and other non-public addresses (the machine's own services, the task's
//!   network) only when `EGRESS_ALLOW` names them (`local`: loopback by default);
//! - a session's proxy routes (its `proxies`, [`Hop::configure`]) send a host through an
//!   upstream proxy ([`upstream`]); a proxy that refuses fails the connection closed — it is
//!   never dialled directly instead — and the log names the proxy and why;
//! - with the session's `blockAds` ([`Hop::set_block_ads`]), a connection to an ad or tracking
//!   host ([`ads`]) is refused ("connection not allowed by ruleset") before anything is dialled
//!   or resolved: the page gets a network error for that resource and loads without it.

mod ad_cache;
pub mod ads;
#[cfg(test)]
mod fuzz;
pub mod policy;
pub mod upstream;

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use fast_socks5::server::{Socks5ServerProtocol, SocksServerError};
use fast_socks5::util::target_addr::TargetAddr;
use fast_socks5::{ReplyError, Socks5Command};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

pub use ads::{AdBlockError, AdLists};
pub use policy::{EgressAllow, Hop, MAX_NOTES, Notes};
use upstream::{Tunnel, UpstreamError};

/// Connections through the egress at once, per Chrome (Chrome itself keeps at most 256 per
/// proxy); more wait in the listener's backlog.
const MAX_CONNECTIONS: usize = 1024;

/// Why a connection through the egress did not go through.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    /// The client broke the SOCKS5 protocol, or its socket failed.
    #[error("SOCKS5 handshake failed")]
    Protocol(#[from] SocksServerError),
    /// The handshake did not finish within its deadline.
    #[error("SOCKS5 handshake took too long")]
    Timeout,
    /// A command other than `CONNECT`.
    #[error("SOCKS5 command not supported")]
    Command,
    /// The destination is refused (link-local, metadata, or not allowed).
    #[error("destination {0} is not allowed")]
    Refused(SocketAddr),
    /// The destination is an ad or tracking host, and the session blocks ads.
    #[error("the destination is an ad or tracking host (blockAds)")]
    Ad,
    /// The name did not resolve.
    #[error("the destination's name did not resolve")]
    Resolve(#[source] std::io::Error),
    /// Dialling the destination failed.
    #[error("connecting to the destination failed")]
    Connect(#[source] std::io::Error),
    /// The session's proxy did not connect (its fault, said why).
    #[error("through {proxy}: {source}")]
    Proxy {
        /// The proxy, `scheme://host:port` (no credentials).
        proxy: String,
        /// What it did.
        #[source]
        source: UpstreamError,
    },
}

/// Whether Chrome may ever be connected to `ip` (link-local and metadata: never).
pub fn allowed(ip: std::net::IpAddr) -> bool {
    !policy::never(ip)
}

/// Serves SOCKS5 on `listener` until `stop`, by `hop`'s rules; each connection on `tracker`,
/// the handshake within `handshake_timeout`.
pub async fn serve(
    listener: TcpListener,
    hop: Hop,
    tracker: TaskTracker,
    stop: CancellationToken,
    handshake_timeout: Duration,
) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let stream = tokio::select! {
            () = stop.cancelled() => return,
            a = listener.accept() => match a {
                Ok((s, _)) => s,
                Err(e) => {
                    debug!(error = %e, "egress accept failed");
                    continue;
                }
            },
        };
        let stop = stop.clone();
        let hop = hop.clone();
        tracker.spawn(async move {
            let _slot = slot;
            tokio::select! {
                () = stop.cancelled() => {}
                () = connection(stream, &hop, handshake_timeout) => {}
            }
        });
    }
}

/// The other end of a connection: the destination itself, or a tunnel through a proxy.
enum Remote {
    Direct(TcpStream),
    Proxied(Tunnel),
}

/// One client: the handshake, then bytes both ways until either side closes or the routes
/// change.
async fn connection(stream: TcpStream, hop: &Hop, handshake_timeout: Duration) {
    let pair = tokio::time::timeout(handshake_timeout, handshake(stream, hop))
        .await
        .unwrap_or(Err(EgressError::Timeout));
    match pair {
        Ok((chrome, remote, epoch)) => {
            let relay = async {
                match remote {
                    Remote::Direct(mut r) => {
                        let mut chrome = chrome;
                        let _ = tokio::io::copy_bidirectional(&mut chrome, &mut r).await;
                    }
                    Remote::Proxied(r) => {
                        let mut chrome = Counted { inner: chrome, hop };
                        let mut r = Counted { inner: r, hop };
                        let _ = tokio::io::copy_bidirectional(&mut chrome, &mut r).await;
                    }
                }
            };
            tokio::select! {
                () = epoch.cancelled() => {}
                () = relay => {}
            }
        }
        // The session's proxy failed it: the operator's and the session's business.
        Err(e @ EgressError::Proxy { .. }) => {
            warn!(error = %e, "the session's proxy did not connect; the page gets a network error (nothing went direct)");
            hop.note(|| format!("the session's proxy did not connect: {e}; the page got a network error (nothing went direct)"));
        }
        // Chrome's own business (a page's unreachable host): debug, never the destination's
        // name (it may carry what a page encodes in it).
        Err(e) => debug!(error = %e, "egress connection refused"),
    }
}

/// Reads the client's `CONNECT`, connects its destination the way the routes say and answers;
/// both ends, and the token that ends them when the routes change.
async fn handshake(
    stream: TcpStream,
    hop: &Hop,
) -> Result<(TcpStream, Remote, CancellationToken), EgressError> {
    let (proto, cmd, target) = Socks5ServerProtocol::accept_no_auth(stream)
        .await?
        .read_command()
        .await?;
    if !matches!(cmd, Socks5Command::TCPConnect) {
        proto.reply_error(&ReplyError::CommandNotSupported).await?;
        return Err(EgressError::Command);
    }
    let (host, port) = match &target {
        TargetAddr::Ip(a) => (a.ip().to_string(), a.port()),
        TargetAddr::Domain(name, port) => (name.clone(), *port),
    };
    let way = hop.way(&host, port);
    if way.blocked {
        hop.count_ad_blocked();
        proto.reply_error(&ReplyError::ConnectionNotAllowed).await?;
        return Err(EgressError::Ad);
    }
    let connected = match &way.proxy {
        Some(proxy) => upstream::connect(proxy, hop.allow(), &host, port)
            .await
            .map(Remote::Proxied)
            .map_err(|source| EgressError::Proxy {
                proxy: proxy.display(),
                source,
            }),
        None => direct(target, hop.allow()).await.map(Remote::Direct),
    };
    let remote = match connected {
        Ok(r) => r,
        Err(e) => {
            proto.reply_error(&reply_for(&e)).await?;
            return Err(e);
        }
    };
    let bound = match &remote {
        Remote::Direct(r) => r.local_addr().map_err(EgressError::Connect)?,
        Remote::Proxied(_) => SocketAddr::from(([0, 0, 0, 0], 0)),
    };
    let chrome = proto.reply_success(bound).await?;
    Ok((chrome, remote, way.epoch))
}

/// Dials `target` from here, when every address it has is allowed.
async fn direct(target: TargetAddr, allow: &EgressAllow) -> Result<TcpStream, EgressError> {
    let candidates = resolve(target).await?;
    if let Some(bad) = candidates.iter().find(|a| !allow.permits(**a)) {
        return Err(EgressError::Refused(*bad));
    }
    let remote = TcpStream::connect(&candidates[..])
        .await
        .map_err(EgressError::Connect)?;
    let _ = remote.set_nodelay(true);
    Ok(remote)
}

/// The destination's addresses (a name resolved here).
async fn resolve(target: TargetAddr) -> Result<Vec<SocketAddr>, EgressError> {
    match target {
        TargetAddr::Ip(a) => Ok(vec![a]),
        TargetAddr::Domain(name, port) => {
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), port))
                .await
                .map_err(EgressError::Resolve)?
                .collect();
            if addrs.is_empty() {
                return Err(EgressError::Resolve(std::io::ErrorKind::NotFound.into()));
            }
            Ok(addrs)
        }
    }
}

/// The RFC 1928 reply for a failed connection.
fn reply_for(e: &EgressError) -> ReplyError {
    use std::io::ErrorKind::*;
    match e {
        EgressError::Refused(_) | EgressError::Ad => ReplyError::ConnectionNotAllowed,
        EgressError::Connect(e) => match e.kind() {
            ConnectionRefused => ReplyError::ConnectionRefused,
            TimedOut => ReplyError::ConnectionTimeout,
            NetworkUnreachable => ReplyError::NetworkUnreachable,
            _ => ReplyError::HostUnreachable,
        },
        EgressError::Proxy { .. } => ReplyError::GeneralFailure,
        _ => ReplyError::HostUnreachable,
    }
}

/// A stream whose reads are counted as bytes carried through a proxy: each byte crossing the
/// hop is read once, from Chrome or from the proxy, so the sum is both directions. Counted as
/// it flows, so the figure is final when Chrome is gone, however its connections ended.
struct Counted<'h, S> {
    inner: S,
    hop: &'h Hop,
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<'_, S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = buf.filled().len() - before;
        if read > 0 {
            self.hop.count_proxied(read as u64);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<'_, S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy::EC2_METADATA_V6;
    use std::net::Ipv6Addr;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    const WAIT: Duration = Duration::from_secs(10);

    #[test]
    fn link_local_and_metadata_are_refused() {
        for bad in [
            "169.254.169.254",
            "169.254.0.1",
            "fe80::1",
            "fd00:ec2::254",
            "::ffff:169.254.169.254",
        ] {
            assert!(!allowed(bad.parse().unwrap()), "{bad}");
        }
        for good in [
            "127.0.0.1",
            "93.184.216.34",
            "::1",
            "2001:db8::1",
            "fd00:ec2::253",
        ] {
            assert!(allowed(good.parse().unwrap()), "{good}");
        }
    }

    /// An egress on the host's loopback (the namespace changes nothing of the protocol) that
    /// may reach the machine's loopback.
    async fn egress(handshake: Duration) -> SocketAddr {
        egress_with(Hop::new(EgressAllow::loopback()), handshake).await
    }

    async fn egress_with(hop: Hop, handshake: Duration) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve(
            listener,
            hop,
            TaskTracker::new(),
            CancellationToken::new(),
            handshake,
        ));
        addr
    }

    /// Sends `request` after a no-auth greeting; the reply's code.
    async fn connect_reply(egress: SocketAddr, request: &[u8]) -> (TcpStream, u8) {
        let mut s = TcpStream::connect(egress).await.unwrap();
        s.write_all(&[5, 1, 0]).await.unwrap();
        let mut choice = [0u8; 2];
        s.read_exact(&mut choice).await.unwrap();
        assert_eq!(choice, [5, 0]);
        s.write_all(request).await.unwrap();
        let mut head = [0u8; 2];
        tokio::time::timeout(WAIT, s.read_exact(&mut head))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(head[0], 5);
        (s, head[1])
    }

    /// Reads until the server closes; fails if it does not within the bound.
    async fn closed(mut s: TcpStream) {
        let mut rest = Vec::new();
        tokio::time::timeout(WAIT, s.read_to_end(&mut rest))
            .await
            .expect("the server closed the connection")
            .ok();
    }

    /// Run in a network namespace of the test's own (only `lo`, on a current-thread runtime,
    /// so every socket is made there): were the check broken, the egress's dial to
    /// 169.254.169.254 would fail at once with no route instead of leaving the machine.
    #[test]
    fn metadata_and_link_local_destinations_are_refused() {
        std::thread::spawn(|| {
            crate::netns::enter().expect("a network namespace of the test's own (root)");
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(refused_in_this_network());
        })
        .join()
        .unwrap();
    }

    async fn refused_in_this_network() {
        let e = egress(WAIT).await;
        let v4 = [5, 1, 0, 1, 169, 254, 169, 254, 0, 80];
        let mut v6 = vec![5, 1, 0, 4];
        v6.extend_from_slice(&EC2_METADATA_V6.octets());
        v6.extend_from_slice(&[0, 80]);
        let mut ll = vec![5, 1, 0, 4];
        ll.extend_from_slice(&"fe80::1".parse::<Ipv6Addr>().unwrap().octets());
        ll.extend_from_slice(&[0, 80]);
        for request in [&v4[..], &v6, &ll] {
            let (s, code) = connect_reply(e, request).await;
            assert_eq!(code, 2, "connection not allowed by ruleset: {request:?}");
            closed(s).await;
        }
    }

    #[tokio::test]
    async fn a_connect_to_the_hosts_loopback_goes_through() {
        let target = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = target.local_addr().unwrap().port().to_be_bytes();
        tokio::spawn(async move {
            let (mut s, _) = target.accept().await.unwrap();
            drop(target);
            s.write_all(b"hello").await.unwrap();
        });
        let e = egress(WAIT).await;
        let mut by_name = vec![5, 1, 0, 3, 9];
        by_name.extend_from_slice(b"localhost");
        by_name.extend_from_slice(&port);
        let (mut s, code) = connect_reply(e, &[5, 1, 0, 1, 127, 0, 0, 1, port[0], port[1]]).await;
        assert_eq!(code, 0);
        let mut rest = [0u8; 8];
        s.read_exact(&mut rest).await.unwrap();
        let mut hello = [0u8; 5];
        s.read_exact(&mut hello).await.unwrap();
        assert_eq!(&hello, b"hello");
        // Nobody listens there any more: refused, by name too.
        let (s, code) = connect_reply(e, &by_name).await;
        assert_eq!(code, 5, "connection refused");
        closed(s).await;
    }

    /// A stand-in proxy's read of one request head (up to its blank line).
    async fn request_head(s: &mut TcpStream) -> String {
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            s.read_exact(&mut b).await.unwrap();
            head.push(b[0]);
        }
        String::from_utf8(head).unwrap()
    }

    /// A hop whose one route sends everything through the HTTP proxy at `proxy`.
    async fn proxied_egress(proxy: SocketAddr, password: &str) -> SocketAddr {
        use wallcrawler_contract::egress::{Egress, ProxyServer, Route};
        let hop = Hop::new(EgressAllow::loopback());
        let server = ProxyServer::parse(&format!("http://{proxy}"), Some("u"), Some(password));
        hop.configure(&Egress {
            routes: vec![Route {
                domain_pattern: None,
                proxy: Some(server.unwrap()),
            }],
            allowed_domains: vec![],
        })
        .unwrap();
        egress_with(hop, WAIT).await
    }

    /// The proxy refuses the credentials: the client gets a general failure, and the
    /// destination (listening, reachable) never sees a connection: nothing goes direct.
    #[tokio::test]
    async fn a_refusing_proxy_fails_the_connection_closed() {
        let site = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let site_port = site.local_addr().unwrap().port().to_be_bytes();
        let proxy = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy_addr = proxy.local_addr().unwrap();
        let asked = tokio::spawn(async move {
            let (mut s, _) = proxy.accept().await.unwrap();
            let head = request_head(&mut s).await;
            s.write_all(b"HTTP/1.1 407 Proxy Authentication Required\r\ncontent-length: 0\r\n\r\n")
                .await
                .unwrap();
            head
        });
        let e = proxied_egress(proxy_addr, "wrong-password").await;
        let (s, code) =
            connect_reply(e, &[5, 1, 0, 1, 127, 0, 0, 1, site_port[0], site_port[1]]).await;
        assert_eq!(code, 1, "general SOCKS server failure");
        closed(s).await;
        let head = asked.await.unwrap();
        assert!(head.starts_with("CONNECT 127.0.0.1:"), "{head}");
        assert!(
            head.to_ascii_lowercase()
                .contains("proxy-authorization: basic "),
            "{head}"
        );
        assert!(
            head.to_ascii_lowercase()
                .contains("user-agent: wallcrawler-controller/"),
            "{head}"
        );
        let direct = tokio::time::timeout(Duration::from_millis(200), site.accept()).await;
        assert!(direct.is_err(), "the destination was dialled directly");
    }

    /// Through a proxy that accepts, the bytes both ways are counted as they flow.
    #[tokio::test]
    async fn bytes_through_a_proxy_are_counted_both_ways() {
        use wallcrawler_contract::egress::{Egress, ProxyServer, Route};
        let proxy = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy_addr = proxy.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = proxy.accept().await.unwrap();
            request_head(&mut s).await;
            s.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                .await
                .unwrap();
            // An echo of 1000 bytes, as the destination would answer.
            let mut data = [0u8; 1000];
            s.read_exact(&mut data).await.unwrap();
            s.write_all(&data).await.unwrap();
        });
        let hop = Hop::new(EgressAllow::loopback());
        hop.configure(&Egress {
            routes: vec![Route {
                domain_pattern: None,
                proxy: Some(
                    ProxyServer::parse(&format!("http://{proxy_addr}"), None, None).unwrap(),
                ),
            }],
            allowed_domains: vec![],
        })
        .unwrap();
        let e = egress_with(hop.clone(), WAIT).await;
        let mut by_name = vec![5, 1, 0, 3, 6];
        by_name.extend_from_slice(b"a.test");
        by_name.extend_from_slice(&443u16.to_be_bytes());
        let (mut s, code) = connect_reply(e, &by_name).await;
        assert_eq!(code, 0);
        let mut rest = [0u8; 8];
        s.read_exact(&mut rest).await.unwrap();
        s.write_all(&[7u8; 1000]).await.unwrap();
        let mut back = [0u8; 1000];
        s.read_exact(&mut back).await.unwrap();
        assert_eq!(back, [7u8; 1000]);
        assert_eq!(hop.proxied_bytes(), 2000);
    }

    /// An HTTP proxy on the loopback that accepts every `CONNECT` (and then holds the
    /// tunnel open); the targets it was asked for, in order.
    async fn recording_proxy() -> (SocketAddr, Arc<std::sync::Mutex<Vec<String>>>) {
        let proxy = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = proxy.local_addr().unwrap();
        let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = asked.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = proxy.accept().await {
                let seen = seen.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut b = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        if s.read_exact(&mut b).await.is_err() {
                            return;
                        }
                        head.push(b[0]);
                    }
                    let head = String::from_utf8_lossy(&head).into_owned();
                    let target = head.split(' ').nth(1).unwrap_or_default().to_owned();
                    seen.lock().unwrap().push(target);
                    let _ = s
                        .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                        .await;
                    let mut rest = Vec::new();
                    let _ = s.read_to_end(&mut rest).await;
                });
            }
        });
        (addr, asked)
    }

    /// A SOCKS5 `CONNECT` to `host:port` by name.
    fn by_name(host: &str, port: u16) -> Vec<u8> {
        let mut r = vec![5, 1, 0, 3, host.len() as u8];
        r.extend_from_slice(host.as_bytes());
        r.extend_from_slice(&port.to_be_bytes());
        r
    }

    /// With `blockAds`, the ad host is refused by the ruleset and never reaches the session's
    /// proxy, while the site goes through it; without, both do. Every connection goes through
    /// the proxy, so nothing here is dialled or resolved on the network.
    async fn ads_are_refused_with_block_ads(hop: Hop) {
        use wallcrawler_contract::egress::{Egress, ProxyServer, Route};
        let (proxy, asked) = recording_proxy().await;
        hop.configure(&Egress {
            routes: vec![Route {
                domain_pattern: None,
                proxy: Some(ProxyServer::parse(&format!("http://{proxy}"), None, None).unwrap()),
            }],
            allowed_domains: vec![],
        })
        .unwrap();
        let e = egress_with(hop.clone(), WAIT).await;
        let ad = by_name("pagead2.googlesyndication.com", 443);
        let site = by_name("example.test", 443);

        let (_ad_off, code) = connect_reply(e, &ad).await;
        assert_eq!(code, 0, "blockAds off: the ad host goes through");
        let (_site_off, code) = connect_reply(e, &site).await;
        assert_eq!(code, 0);
        assert_eq!(
            *asked.lock().unwrap(),
            ["pagead2.googlesyndication.com:443", "example.test:443"]
        );
        assert_eq!(hop.ads_blocked(), 0);

        hop.set_block_ads(true).await.unwrap();
        let (s, code) = connect_reply(e, &ad).await;
        assert_eq!(code, 2, "connection not allowed by ruleset");
        closed(s).await;
        let (_site_on, code) = connect_reply(e, &site).await;
        assert_eq!(code, 0, "the site is still attempted");
        assert_eq!(
            *asked.lock().unwrap(),
            [
                "pagead2.googlesyndication.com:443",
                "example.test:443",
                "example.test:443"
            ],
            "the proxy is never asked for the ad host with blockAds"
        );
        assert_eq!(hop.ads_blocked(), 1);

        hop.set_block_ads(false).await.unwrap();
        let (_ad_again, code) = connect_reply(e, &ad).await;
        assert_eq!(code, 0, "blockAds off again");
        assert_eq!(hop.ads_blocked(), 1);
    }

    #[tokio::test]
    async fn block_ads_refuses_ad_hosts_by_a_tiny_list() {
        let dir = tempfile::tempdir().unwrap();
        let list = dir.path().join("tiny.txt");
        std::fs::write(
            &list,
            "||pagead2.googlesyndication.com^\n||g.doubleclick.net^\n",
        )
        .unwrap();
        let lists: AdLists = list.display().to_string().parse().unwrap();
        ads_are_refused_with_block_ads(Hop::with_ad_lists(EgressAllow::loopback(), lists, None))
            .await;
    }

    /// Debian's EasyList and EasyPrivacy, which `scripts/install-test-deps.sh` installs.
    #[tokio::test]
    async fn block_ads_refuses_ad_hosts_by_the_debian_lists() {
        ads_are_refused_with_block_ads(Hop::new(EgressAllow::loopback())).await;
    }

    /// With no `EGRESS_ALLOW`, the machine's loopback is out of reach (by address and by name).
    #[tokio::test]
    async fn loopback_is_refused_unless_allowed() {
        let target = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = target.local_addr().unwrap().port().to_be_bytes();
        let e = egress_with(Hop::new(EgressAllow::default()), WAIT).await;
        let (s, code) = connect_reply(e, &[5, 1, 0, 1, 127, 0, 0, 1, port[0], port[1]]).await;
        assert_eq!(code, 2, "connection not allowed by ruleset");
        closed(s).await;
        let mut by_name = vec![5, 1, 0, 3, 9];
        by_name.extend_from_slice(b"localhost");
        by_name.extend_from_slice(&port);
        let (s, code) = connect_reply(e, &by_name).await;
        assert_eq!(code, 2, "connection not allowed by ruleset");
        closed(s).await;
        let nothing = tokio::time::timeout(Duration::from_millis(200), target.accept()).await;
        assert!(nothing.is_err(), "the loopback service was reached");
    }

    #[tokio::test]
    async fn malformed_and_silent_handshakes_are_closed() {
        let e = egress(Duration::from_millis(300)).await;
        // SOCKS4, a greeting offering no acceptable method, a BIND.
        let mut s4 = TcpStream::connect(e).await.unwrap();
        s4.write_all(&[4, 1, 0, 80, 127, 0, 0, 1, 0]).await.unwrap();
        closed(s4).await;
        let mut no_method = TcpStream::connect(e).await.unwrap();
        no_method.write_all(&[5, 1, 2]).await.unwrap();
        closed(no_method).await;
        let (s, code) = connect_reply(e, &[5, 2, 0, 1, 127, 0, 0, 1, 0, 80]).await;
        assert_eq!(code, 7, "command not supported");
        closed(s).await;
        // Silent after connecting: closed at the handshake's deadline.
        closed(TcpStream::connect(e).await.unwrap()).await;
    }
}
