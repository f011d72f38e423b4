//! The accept loop's two steps the proxy and the gateway share: taking the next connection,
//! and running it as a counted, traced task; and the TCP keepalive their sockets get.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Interval;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{Instrument, Span, debug, warn};

use super::proxy_header::{self, Source};

/// Silence on a socket before the kernel's first keepalive probe: well under the idle timeouts
/// of load balancers (an AWS NLB's 350 s) and NATs on the way.
pub(crate) const TCP_KEEPALIVE_IDLE: Duration = Duration::from_secs(60);
/// Between unanswered probes; after [`TCP_KEEPALIVE_PROBES`] of them the peer is taken for
/// gone (the socket errors), about two minutes after it went silent.
const TCP_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(15);
const TCP_KEEPALIVE_PROBES: u32 = 4;

/// Turns on TCP keepalive on `stream` (an accepted client's, or a socket the gateway dialled):
/// a peer that vanished without a FIN or reset (a crashed host, a dropped NAT entry) is noticed
/// and the connection ended, and middleboxes see the connection alive. Best effort: a failure
/// leaves the connection as it was.
pub(crate) fn set_keepalive(stream: &TcpStream) {
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(TCP_KEEPALIVE_IDLE)
        .with_interval(TCP_KEEPALIVE_INTERVAL)
        .with_retries(TCP_KEEPALIVE_PROBES);
    if let Err(e) = socket2::SockRef::from(stream).set_tcp_keepalive(&keepalive) {
        debug!(error = %e, "could not turn on TCP keepalive");
    }
}

/// The next connection `listener` accepts (`TCP_NODELAY` and keepalive set), or `None` once
/// `stop` fires.
/// `pacer`'s ticks are taken in passing (see `Proxy::serve`).
pub(crate) async fn next(
    listener: &TcpListener,
    stop: &CancellationToken,
    mut pacer: Option<&mut Interval>,
) -> Option<(TcpStream, SocketAddr)> {
    loop {
        let tick = async {
            match pacer.as_mut() {
                Some(p) => {
                    p.tick().await;
                }
                None => std::future::pending().await,
            }
        };
        let (stream, peer) = tokio::select! {
            () = tick => continue,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // EMFILE and friends: back off briefly instead of spinning.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = stop.cancelled() => return None,
        };
        let _ = stream.set_nodelay(true);
        set_keepalive(&stream);
        return Some((stream, peer));
    }
}

/// Runs the future `work` makes on `tracker` inside `span`, counted in `open` meanwhile.
pub(crate) fn spawn<W, F>(tracker: &TaskTracker, open: &Gauge, span: Span, work: W)
where
    W: FnOnce() -> F + Send + 'static,
    F: Future<Output = ()> + Send + 'static,
{
    tracker.spawn(counted(open.clone(), work).instrument(span));
}

/// `work`'s future counted in `open` while it runs. The future is made here, inside: an async
/// block that captured a made future and awaited it would hold it twice (the captured value
/// and the awaited one occupy separate places in its state), doubling every connection's task
/// (measured: 12.4 against 8.6 KiB of RSS per idle upgraded connection).
async fn counted<W, F>(open: Gauge, work: W)
where
    W: FnOnce() -> F,
    F: Future<Output = ()>,
{
    open.inc();
    work().await;
    open.dec();
}

/// Why a trusted peer's connection named no client.
pub(crate) enum Unread {
    /// Evicted from the pending budget while its header was awaited.
    Evicted,
    /// Its PROXY header was malformed (logged here).
    Refused,
    /// Its header did not arrive within the deadline.
    Late,
}

/// Reads the PROXY protocol v2 header a trusted `peer`'s connection may start with, within
/// `deadline`, giving up when `evicted` fires.
pub(crate) async fn read_source(
    stream: &mut TcpStream,
    peer: SocketAddr,
    deadline: Duration,
    evicted: &CancellationToken,
) -> Result<Source, Unread> {
    let read = tokio::select! {
        r = tokio::time::timeout(deadline, proxy_header::read(stream)) => r,
        () = evicted.cancelled() => return Err(Unread::Evicted),
    };
    match read {
        Ok(Ok(source)) => Ok(source),
        Ok(Err(e)) => {
            debug!(peer.addr = %peer, error = %e, "refused a PROXY protocol header");
            Err(Unread::Refused)
        }
        Err(_) => Err(Unread::Late),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn accepted_sockets_have_tcp_keepalive() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let _client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (stream, _) = next(&listener, &CancellationToken::new(), None)
            .await
            .unwrap();
        let s = socket2::SockRef::from(&stream);
        assert!(s.keepalive().unwrap());
        assert_eq!(s.tcp_keepalive_time().unwrap(), TCP_KEEPALIVE_IDLE);
        assert_eq!(s.tcp_keepalive_interval().unwrap(), TCP_KEEPALIVE_INTERVAL);
        assert_eq!(s.tcp_keepalive_retries().unwrap(), TCP_KEEPALIVE_PROBES);
    }

    /// A future that keeps 4 KiB across an await, as a connection's does (hyper's state).
    async fn heavy() {
        let state = [1u8; 4096];
        tokio::task::yield_now().await;
        std::hint::black_box(&state);
    }

    #[test]
    fn a_counted_connection_holds_its_future_once() {
        let one = std::mem::size_of_val(&heavy());
        let task = counted(Gauge::default(), heavy);
        let counted = std::mem::size_of_val(&task);
        assert!(one >= 4096, "the probe future is {one} bytes");
        // Holding it twice (an async block awaiting a captured future) would be ≥ 2 × 4 KiB.
        assert!(
            counted < one + 256,
            "{counted} bytes for a {one}-byte future"
        );
    }

    #[tokio::test]
    async fn a_counted_connection_is_open_while_it_runs() {
        let open = Gauge::default();
        let seen = open.clone();
        counted(
            open.clone(),
            move || async move { assert_eq!(seen.get(), 1) },
        )
        .await;
        assert_eq!(open.get(), 0);
    }
}
