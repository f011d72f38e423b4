//! Relaying bytes between an upgraded client socket and Chrome.
//!
//! After an authenticated upgrade the two sockets carry WebSocket frames that the proxy does not
//! need to understand, so it copies bytes. Reads go into one 64 KiB buffer per worker thread,
//! written straight on to the other socket; a connection owns memory of its own only while its
//! destination cannot take more (the unwritten rest is kept until it can, and nothing more is
//! read meanwhile — backpressure). Idle connections therefore cost no buffer at all, and a
//! message of any size streams through without ever being held whole.

use std::cell::RefCell;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use super::inspect::{Inspector, Segment};

/// Size of the per-thread read buffer.
pub const READ_BUFFER: usize = 64 * 1024;

thread_local! {
    static SCRATCH: RefCell<Box<[u8]>> = RefCell::new(vec![0u8; READ_BUFFER].into_boxed_slice());
}

/// Turns bytes read from one side into what is written to the other.
pub trait Transform {
    /// Appends the segments to forward; returns true if a `Browser.close` was withheld.
    fn apply(&mut self, input: &[u8], out: &mut Vec<Segment>) -> bool;
}

/// Forwards everything as is.
pub struct Plain;

impl Transform for Plain {
    fn apply(&mut self, input: &[u8], out: &mut Vec<Segment>) -> bool {
        out.push(Segment::Input(0..input.len()));
        false
    }
}

impl Transform for Inspector {
    fn apply(&mut self, input: &[u8], out: &mut Vec<Segment>) -> bool {
        self.feed(input, out)
    }
}

/// How a relay ended.
#[derive(Debug)]
pub enum RelayEnd {
    /// The client closed its socket.
    ClientClosed,
    /// Chrome closed its socket.
    ChromeClosed,
    /// Reading from or writing to the client failed (reset, broken pipe).
    ClientError(io::Error),
    /// Reading from or writing to Chrome failed.
    ChromeError(io::Error),
    /// The controller is shutting down.
    Cancelled,
}

/// Bytes moved by one relay.
#[derive(Debug)]
pub struct RelayOutcome {
    pub client_to_chrome: u64,
    pub chrome_to_client: u64,
    pub end: RelayEnd,
}

/// Shared byte counters the relay adds to as it goes.
pub struct ByteCounters<'a> {
    pub client_to_chrome: &'a AtomicU64,
    pub chrome_to_client: &'a AtomicU64,
}

enum PumpEnd {
    SrcEof,
    SrcError(io::Error),
    DstError(io::Error),
}

/// Relays until either side closes or `cancel` fires. `chrome_prefix` holds bytes Chrome sent
/// after its 101 answer that must reach the client first; `client_prefix` bytes the client sent
/// after its request head. `on_browser_close` is called when the client's `Browser.close` was
/// withheld.
#[allow(clippy::too_many_arguments)]
pub async fn relay<T: Transform>(
    client: &TcpStream,
    chrome: &TcpStream,
    client_prefix: &[u8],
    chrome_prefix: &[u8],
    upstream_transform: &mut T,
    counters: ByteCounters<'_>,
    on_browser_close: &(dyn Fn() + Sync),
    cancel: &CancellationToken,
) -> RelayOutcome {
    let up_local = AtomicU64::new(0);
    let down_local = AtomicU64::new(0);
    let end = async {
        let mut segs = Vec::new();
        if !client_prefix.is_empty() {
            segs.clear();
            if upstream_transform.apply(client_prefix, &mut segs) {
                on_browser_close();
            }
            for s in &segs {
                let data = match s {
                    Segment::Input(r) => &client_prefix[r.clone()],
                    Segment::Owned(v) => v.as_slice(),
                };
                write_all(chrome, data)
                    .await
                    .map_err(RelayEnd::ChromeError)?;
            }
            add(&up_local, counters.client_to_chrome, client_prefix.len());
        }
        if !chrome_prefix.is_empty() {
            write_all(client, chrome_prefix)
                .await
                .map_err(RelayEnd::ClientError)?;
            add(&down_local, counters.chrome_to_client, chrome_prefix.len());
        }
        let up = pump(
            client,
            chrome,
            upstream_transform,
            &up_local,
            counters.client_to_chrome,
            on_browser_close,
        );
        let mut plain = Plain;
        let down = pump(
            chrome,
            client,
            &mut plain,
            &down_local,
            counters.chrome_to_client,
            &|| {},
        );
        let end = tokio::select! {
            e = up => match e {
                PumpEnd::SrcEof => RelayEnd::ClientClosed,
                PumpEnd::SrcError(e) => RelayEnd::ClientError(e),
                PumpEnd::DstError(e) => RelayEnd::ChromeError(e),
            },
            e = down => match e {
                PumpEnd::SrcEof => RelayEnd::ChromeClosed,
                PumpEnd::SrcError(e) => RelayEnd::ChromeError(e),
                PumpEnd::DstError(e) => RelayEnd::ClientError(e),
            },
            () = cancel.cancelled() => RelayEnd::Cancelled,
        };
        Ok::<_, RelayEnd>(end)
    }
    .await;
    RelayOutcome {
        client_to_chrome: up_local.load(Ordering::Relaxed),
        chrome_to_client: down_local.load(Ordering::Relaxed),
        end: end.unwrap_or_else(|e| e),
    }
}

fn add(local: &AtomicU64, shared: &AtomicU64, n: usize) {
    local.fetch_add(n as u64, Ordering::Relaxed);
    shared.fetch_add(n as u64, Ordering::Relaxed);
}

/// Writes all of `data`, waiting for writability as needed.
pub async fn write_all(dst: &TcpStream, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        dst.writable().await?;
        match dst.try_write(data) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

enum Step {
    Again,
    Eof,
    Moved,
}

async fn pump<T: Transform>(
    src: &TcpStream,
    dst: &TcpStream,
    transform: &mut T,
    local: &AtomicU64,
    shared: &AtomicU64,
    on_browser_close: &(dyn Fn() + Sync),
) -> PumpEnd {
    let mut segs: Vec<Segment> = Vec::new();
    // Bytes read but not yet accepted by `dst`; allocated only under backpressure.
    let mut pending: Vec<u8> = Vec::new();
    loop {
        if !pending.is_empty() {
            if let Err(e) = write_all(dst, &pending).await {
                return PumpEnd::DstError(e);
            }
            pending = Vec::new();
        }
        if let Err(e) = src.readable().await {
            return PumpEnd::SrcError(e);
        }
        let step = SCRATCH.with(|cell| -> Result<Step, PumpEnd> {
            let mut buf = cell.borrow_mut();
            let n = match src.try_read(&mut buf[..]) {
                Ok(0) => return Ok(Step::Eof),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Step::Again),
                Err(e) => return Err(PumpEnd::SrcError(e)),
            };
            add(local, shared, n);
            let input = &buf[..n];
            segs.clear();
            if transform.apply(input, &mut segs) {
                on_browser_close();
            }
            let mut blocked = false;
            for seg in segs.drain(..) {
                let data: &[u8] = match &seg {
                    Segment::Input(r) => &input[r.clone()],
                    Segment::Owned(v) => v,
                };
                if blocked {
                    pending.extend_from_slice(data);
                    continue;
                }
                let mut off = 0;
                while off < data.len() {
                    match dst.try_write(&data[off..]) {
                        Ok(0) => return Err(PumpEnd::DstError(io::ErrorKind::WriteZero.into())),
                        Ok(w) => off += w,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            blocked = true;
                            break;
                        }
                        Err(e) => return Err(PumpEnd::DstError(e)),
                    }
                }
                if blocked {
                    pending.extend_from_slice(&data[off..]);
                }
            }
            Ok(Step::Moved)
        });
        match step {
            Ok(Step::Again | Step::Moved) => {}
            Ok(Step::Eof) => return PumpEnd::SrcEof,
            Err(end) => return end,
        }
    }
}
