//! Raw WebSocket plumbing shared by `benches/relay.rs` and `examples/wsload.rs`: an echo
//! upstream, the client's upgrade request and masked frames, and a round trip.
//!
//! The echo upstream answers `/json/version` like Chrome (so `proxy` mode can learn a browser
//! path) and, after its 101, returns every byte it reads verbatim. The client's frames therefore
//! come back still masked: neither the proxy nor nginx looks at server-to-client frames, and the
//! client only counts bytes, so the upstream costs as little as possible and the figures are the
//! relay's.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::Poll;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

/// Largest request or response head read.
const MAX_HEAD: usize = 16 * 1024;
/// The echo upstream's read buffer per upgraded connection.
const ECHO_BUFFER: usize = 64 * 1024;

/// Accepts connections until the listener fails, serving each on its own task.
pub(crate) async fn serve_echo(listener: TcpListener) {
    let addr = match listener.local_addr() {
        Ok(a) => a,
        Err(_) => return,
    };
    while let Ok((stream, _)) = listener.accept().await {
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let _ = echo_connection(stream, addr).await;
        });
    }
}

async fn echo_connection(mut stream: TcpStream, addr: SocketAddr) -> io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let head_len = read_head(&mut stream, &mut buf).await?;
    let head = String::from_utf8_lossy(&buf[..head_len]).into_owned();
    let path = head.split_whitespace().nth(1).unwrap_or("/");
    if path.starts_with("/json/version") {
        let body = format!(
            r#"{{"Browser":"wsload-echo/1.0","webSocketDebuggerUrl":"ws://{addr}/devtools/browser/echo"}}"#
        );
        let resp = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        return stream.write_all(resp.as_bytes()).await;
    }
    let key = head.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("sec-websocket-key")
            .then(|| value.trim().to_owned())
    });
    let Some(key) = key else {
        return stream
            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .await;
    };
    let resp = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n\r\n",
        derive_accept_key(key.as_bytes())
    );
    stream.write_all(resp.as_bytes()).await?;
    stream.write_all(&buf[head_len..]).await?;
    drop(buf);
    // Wait for the first bytes before taking a buffer, so idle connections stay cheap.
    stream.readable().await?;
    let mut chunk = vec![0u8; ECHO_BUFFER];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        stream.write_all(&chunk[..n]).await?;
    }
}

/// Reads into `buf` until it holds a complete HTTP head; returns the head's length (any bytes
/// after it stay in `buf`).
pub(crate) async fn read_head<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut Vec<u8>,
) -> io::Result<usize> {
    let mut chunk = [0u8; 2048];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Ok(end + 4);
        }
        if buf.len() > MAX_HEAD {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "head too large"));
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// A client's upgrade request for `path` (which may carry `?signingKey=`).
pub(crate) fn upgrade_request(host: &str, path: &str) -> Vec<u8> {
    format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    .into_bytes()
}

/// Connects, upgrades on `path` and reads the 101. Fails on any other answer, or if the
/// server sent frame bytes along with its 101 (the echo upstream never does).
#[allow(dead_code)] // benches/relay.rs uses it; wsload connects through its own `Target`
pub(crate) async fn connect_upgraded(addr: SocketAddr, request: &[u8]) -> io::Result<TcpStream> {
    let mut stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    upgrade(&mut stream, request).await?;
    Ok(stream)
}

/// Sends the upgrade `request` on a connected stream (plain or TLS) and reads the 101, as
/// [`connect_upgraded`] does.
pub(crate) async fn upgrade<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    request: &[u8],
) -> io::Result<()> {
    stream.write_all(request).await?;
    stream.flush().await?;
    let mut buf = Vec::with_capacity(512);
    let len = read_head(stream, &mut buf).await?;
    if !buf.starts_with(b"HTTP/1.1 101") {
        let line = String::from_utf8_lossy(&buf[..len])
            .lines()
            .next()
            .unwrap_or("")
            .to_owned();
        return Err(io::Error::other(format!("upgrade refused: {line}")));
    }
    if buf.len() != len {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "unexpected bytes after the 101",
        ));
    }
    Ok(())
}

/// A `Runtime.evaluate` command of `len` bytes (padded with spaces), the text frames' payload.
pub(crate) fn text_payload(len: usize) -> Vec<u8> {
    let mut p = br#"{"id":1,"method":"Runtime.evaluate","params":{"expression":"1+1"}}"#.to_vec();
    p.truncate(len);
    p.resize(len, b' ');
    p
}

/// One masked client frame (FIN set) with a `len`-byte payload: a CDP-looking JSON text when
/// `opcode` is 1 (padded with spaces), `x` bytes otherwise.
pub(crate) fn masked_frame(opcode: u8, len: usize) -> Vec<u8> {
    let mask = [0x37u8, 0xfa, 0x21, 0x3d];
    let payload = if opcode == 1 {
        text_payload(len)
    } else {
        vec![b'x'; len]
    };
    let mut frame = Vec::with_capacity(len + 14);
    frame.push(0x80 | opcode);
    match len {
        0..=125 => frame.push(0x80 | len as u8),
        126..=0xffff => {
            frame.push(0x80 | 126);
            frame.extend_from_slice(&(len as u16).to_be_bytes());
        }
        _ => {
            frame.push(0x80 | 127);
            frame.extend_from_slice(&(len as u64).to_be_bytes());
        }
    }
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i & 3]));
    frame
}

/// Sends `frame` and reads the same number of bytes back into `scratch` (at least as long),
/// writing and reading at once so a frame larger than the socket buffers cannot deadlock.
/// Both halves are polled from one future, so any stream works (a TLS stream cannot be split
/// without a lock) at no extra cost for a plain one.
pub(crate) async fn round_trip<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    frame: &[u8],
    scratch: &mut [u8],
) -> io::Result<()> {
    let back = &mut scratch[..frame.len()];
    let (mut sent, mut got, mut flushed) = (0, 0, false);
    std::future::poll_fn(|cx| {
        while sent < frame.len() {
            match Pin::new(&mut *stream).poll_write(cx, &frame[sent..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => sent += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => break,
            }
        }
        if sent == frame.len() && !flushed {
            match Pin::new(&mut *stream).poll_flush(cx) {
                Poll::Ready(Ok(())) => flushed = true,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {}
            }
        }
        while got < back.len() {
            let mut rb = ReadBuf::new(&mut back[got..]);
            match Pin::new(&mut *stream).poll_read(cx, &mut rb) {
                Poll::Ready(Ok(())) if rb.filled().is_empty() => {
                    return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
                }
                Poll::Ready(Ok(())) => got += rb.filled().len(),
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => break,
            }
        }
        if flushed && got == back.len() {
            Poll::Ready(Ok(()))
        } else {
            Poll::Pending
        }
    })
    .await
}
