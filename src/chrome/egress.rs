//! Chrome's way out of its private network namespace ([`crate::netns`]): a SOCKS5 server
//! (RFC 1928: no authentication, `CONNECT` only; IPv4, IPv6 and domain targets) on a listener
//! inside the namespace, dialling from the controller's network. Chrome is pointed at it with
//! `--proxy-server=socks5://127.0.0.1:<port>` and `--proxy-bypass-list=<-loopback>` (without
//! which Chrome never proxies 127.0.0.1, and pages on the host's loopback would be out of
//! reach). Chrome sends domain names to a SOCKS5 proxy, so names are resolved here.
//!
//! The protocol is `fast-socks5`'s; the policy is ours: what Chrome sends is hostile input (a
//! page chooses the destinations), so each handshake is bounded in time (the protocol bounds
//! its sizes: at most 255 methods, 255-byte names), the number of connections is capped, and
//! link-local and instance-metadata destinations (169.254.0.0/16, fe80::/10, fd00:ec2::254)
//! are refused with "connection not allowed by ruleset" — defence in depth beside the managed
//! policy's URL blocklist.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use fast_socks5::server::{Socks5ServerProtocol, SocksServerError};
use fast_socks5::util::target_addr::TargetAddr;
use fast_socks5::{ReplyError, Socks5Command};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::debug;

/// Connections through the egress at once, per Chrome (Chrome itself keeps at most 256 per
/// proxy); more wait in the listener's backlog.
const MAX_CONNECTIONS: usize = 1024;

/// AWS's IPv6 instance metadata and DNS address (Nitro).
const EC2_METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);

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
    /// The destination is refused (link-local or metadata).
    #[error("destination {0} is not allowed")]
    Refused(IpAddr),
    /// The name did not resolve.
    #[error("the destination's name did not resolve")]
    Resolve(#[source] std::io::Error),
    /// Dialling the destination failed.
    #[error("connecting to the destination failed")]
    Connect(#[source] std::io::Error),
}

/// Whether Chrome may be connected to `ip`.
pub fn allowed(ip: IpAddr) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(v4) => !v4.is_link_local(),
        IpAddr::V6(v6) => !(v6.is_unicast_link_local() || v6 == EC2_METADATA_V6),
    }
}

/// Serves SOCKS5 on `listener` until `stop`; each connection on `tracker`, the handshake
/// within `handshake_timeout`.
pub async fn serve(
    listener: TcpListener,
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
        tracker.spawn(async move {
            let _slot = slot;
            tokio::select! {
                () = stop.cancelled() => {}
                () = connection(stream, handshake_timeout) => {}
            }
        });
    }
}

/// One client: the handshake, then bytes both ways until either side closes.
async fn connection(stream: TcpStream, handshake_timeout: Duration) {
    let pair = tokio::time::timeout(handshake_timeout, handshake(stream))
        .await
        .unwrap_or(Err(EgressError::Timeout));
    match pair {
        Ok((mut chrome, mut remote)) => {
            let _ = tokio::io::copy_bidirectional(&mut chrome, &mut remote).await;
        }
        // Chrome's own business (a page's unreachable host): debug, never the destination's
        // name (it may carry what a page encodes in it).
        Err(e) => debug!(error = %e, "egress connection refused"),
    }
}

/// Reads the client's `CONNECT`, dials its destination and answers; both sockets.
async fn handshake(stream: TcpStream) -> Result<(TcpStream, TcpStream), EgressError> {
    let (proto, cmd, target) = Socks5ServerProtocol::accept_no_auth(stream)
        .await?
        .read_command()
        .await?;
    if !matches!(cmd, Socks5Command::TCPConnect) {
        proto.reply_error(&ReplyError::CommandNotSupported).await?;
        return Err(EgressError::Command);
    }
    let candidates = match resolve(target).await {
        Ok(c) => c,
        Err(e) => {
            proto.reply_error(&ReplyError::HostUnreachable).await?;
            return Err(e);
        }
    };
    if let Some(bad) = candidates.iter().find(|a| !allowed(a.ip())) {
        proto.reply_error(&ReplyError::ConnectionNotAllowed).await?;
        return Err(EgressError::Refused(bad.ip()));
    }
    let remote = match TcpStream::connect(&candidates[..]).await {
        Ok(r) => r,
        Err(e) => {
            proto.reply_error(&reply_for(&e)).await?;
            return Err(EgressError::Connect(e));
        }
    };
    let _ = remote.set_nodelay(true);
    let bound = remote.local_addr().map_err(EgressError::Connect)?;
    let chrome = proto.reply_success(bound).await?;
    Ok((chrome, remote))
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

/// The RFC 1928 reply for a failed dial.
fn reply_for(e: &std::io::Error) -> ReplyError {
    use std::io::ErrorKind::*;
    match e.kind() {
        ConnectionRefused => ReplyError::ConnectionRefused,
        TimedOut => ReplyError::ConnectionTimeout,
        NetworkUnreachable => ReplyError::NetworkUnreachable,
        _ => ReplyError::HostUnreachable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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

    /// An egress on the host's loopback (the namespace changes nothing of the protocol).
    async fn egress(handshake: Duration) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve(
            listener,
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
