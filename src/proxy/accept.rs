//! The accept loop's two steps the proxy and the gateway share: taking the next connection,
//! and running it as a counted, traced task.

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

/// The next connection `listener` accepts (`TCP_NODELAY` set), or `None` once `stop` fires.
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
        return Some((stream, peer));
    }
}

/// Runs a connection's `work` on `tracker` inside `span`, counted in `open` meanwhile.
pub(crate) fn spawn(
    tracker: &TaskTracker,
    open: &Gauge,
    span: Span,
    work: impl Future<Output = ()> + Send + 'static,
) {
    let open = open.clone();
    tracker.spawn(
        async move {
            open.inc();
            work.await;
            open.dec();
        }
        .instrument(span),
    );
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
