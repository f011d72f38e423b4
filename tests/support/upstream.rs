//! A stand-in CDP endpoint for the proxy's edge cases that real Chrome cannot be made to
//! produce on demand (huge frames, abrupt closes), and for observing exactly what reached the
//! upstream (or that nothing did).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};

/// What happened at the fake upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UpEvent {
    /// A WebSocket connection was accepted (its request head).
    Upgraded(String),
    /// A WebSocket connection's peer (the proxy) closed it.
    Closed,
}

/// A fake CDP endpoint on 127.0.0.1:0.
pub(crate) struct FakeUpstream {
    pub addr: SocketAddr,
    /// TCP connections accepted (any request).
    pub connections: Arc<AtomicUsize>,
    /// Every request head received, raw.
    pub heads: Arc<Mutex<Vec<String>>>,
    pub events: mpsc::Receiver<UpEvent>,
}

/// Runs after the 101 answer on each WebSocket connection.
pub(crate) type Handler = Arc<dyn Fn(&mut TcpStream) -> io::Result<()> + Send + Sync>;

impl FakeUpstream {
    /// Starts the upstream; `handler` serves each upgraded connection. When it returns, the
    /// upstream reads until the peer closes and reports [`UpEvent::Closed`].
    pub(crate) fn start(handler: Handler) -> FakeUpstream {
        Self::start_with_list(handler, None)
    }

    /// Like [`FakeUpstream::start`], answering `/json/list` (and every other `/json` path but
    /// `/json/version`) with `list`, in which `{addr}` stands for the upstream's address.
    pub(crate) fn start_with_list(handler: Handler, list: Option<String>) -> FakeUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let heads = Arc::new(Mutex::new(Vec::new()));
        let (tx, events) = mpsc::channel();
        {
            let connections = connections.clone();
            let heads = heads.clone();
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    let Ok(mut stream) = stream else { continue };
                    connections.fetch_add(1, Ordering::SeqCst);
                    let heads = heads.clone();
                    let tx = tx.clone();
                    let handler = handler.clone();
                    let list = list.clone();
                    std::thread::spawn(move || {
                        let Some(head) = read_head(&mut stream) else {
                            return;
                        };
                        heads.lock().unwrap().push(head.clone());
                        let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
                        if path.starts_with("/json/version") {
                            let body = format!(
                                r#"{{"Browser":"Fake/1.0","webSocketDebuggerUrl":"ws://{addr}/devtools/browser/fake-browser"}}"#
                            );
                            let _ = write!(
                                stream,
                                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                                body.len()
                            );
                            return;
                        }
                        if path.starts_with("/json") {
                            let body = list.map(|l| l.replace("{addr}", &addr.to_string())).unwrap_or_else(|| format!(
                                r#"[{{"id":"P1","type":"page","devtoolsFrontendUrl":"/devtools/inspector.html?ws={addr}/devtools/page/P1","webSocketDebuggerUrl":"ws://{addr}/devtools/page/P1"}}]"#
                            ));
                            let _ = write!(
                                stream,
                                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                                body.len()
                            );
                            return;
                        }
                        let key = head
                            .lines()
                            .find_map(|l| {
                                let (n, v) = l.split_once(':')?;
                                n.trim()
                                    .eq_ignore_ascii_case("sec-websocket-key")
                                    .then(|| v.trim().to_owned())
                            })
                            .unwrap_or_default();
                        let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(
                            key.as_bytes(),
                        );
                        if write!(stream, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n").is_err() {
                            return;
                        }
                        let _ = tx.send(UpEvent::Upgraded(head));
                        let _ = handler(&mut stream);
                        let mut sink = [0u8; 65536];
                        loop {
                            match stream.read(&mut sink) {
                                Ok(0) | Err(_) => break,
                                Ok(_) => {}
                            }
                        }
                        let _ = tx.send(UpEvent::Closed);
                    });
                }
            });
        }
        FakeUpstream {
            addr,
            connections,
            heads,
            events,
        }
    }

    /// An upstream whose WebSocket connections just wait for the peer to close.
    pub(crate) fn idle() -> FakeUpstream {
        Self::start(Arc::new(|_| Ok(())))
    }

    /// Waits for the next event (bounded).
    pub(crate) fn next_event(&self) -> UpEvent {
        self.events
            .recv_timeout(super::WAIT)
            .expect("an upstream event in time")
    }
}

/// Reads a request head (until CRLFCRLF), byte by byte so nothing after it is consumed.
pub(crate) fn read_head(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut b).ok()? == 0 {
            return None;
        }
        head.push(b[0]);
        if head.len() > 65536 {
            return None;
        }
    }
    Some(String::from_utf8_lossy(&head).into_owned())
}

/// Writes one WebSocket frame of `len` payload bytes, generated in chunks (never whole in
/// memory). `masked` for client-to-server frames. Payload byte i is `(i % 251) as u8`.
pub(crate) fn write_big_frame(
    stream: &mut impl Write,
    opcode: u8,
    len: u64,
    masked: bool,
) -> io::Result<()> {
    let mut header = vec![0x80 | opcode];
    let mask_bit = if masked { 0x80 } else { 0 };
    if len < 126 {
        header.push(mask_bit | len as u8);
    } else if len <= 65535 {
        header.push(mask_bit | 126);
        header.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        header.push(mask_bit | 127);
        header.extend_from_slice(&len.to_be_bytes());
    }
    let mask = [0x12, 0x34, 0x56, 0x78];
    if masked {
        header.extend_from_slice(&mask);
    }
    stream.write_all(&header)?;
    let mut chunk = vec![0u8; 256 * 1024];
    let mut sent: u64 = 0;
    while sent < len {
        let n = ((len - sent) as usize).min(chunk.len());
        for (j, b) in chunk[..n].iter_mut().enumerate() {
            let i = sent + j as u64;
            let plain = (i % 251) as u8;
            *b = if masked {
                plain ^ mask[(i % 4) as usize]
            } else {
                plain
            };
        }
        stream.write_all(&chunk[..n])?;
        sent += n as u64;
    }
    stream.flush()
}

/// Reads one frame, verifying the payload pattern of [`write_big_frame`] as it streams.
/// Returns (opcode, payload length).
pub(crate) fn read_big_frame(stream: &mut impl Read) -> io::Result<(u8, u64)> {
    let mut h = [0u8; 2];
    stream.read_exact(&mut h)?;
    let opcode = h[0] & 0x0f;
    let masked = h[1] & 0x80 != 0;
    let len = match h[1] & 0x7f {
        126 => {
            let mut b = [0u8; 2];
            stream.read_exact(&mut b)?;
            u16::from_be_bytes(b) as u64
        }
        127 => {
            let mut b = [0u8; 8];
            stream.read_exact(&mut b)?;
            u64::from_be_bytes(b)
        }
        n => n as u64,
    };
    let mut mask = [0u8; 4];
    if masked {
        stream.read_exact(&mut mask)?;
    }
    let mut chunk = vec![0u8; 256 * 1024];
    let mut got: u64 = 0;
    while got < len {
        let n = ((len - got) as usize).min(chunk.len());
        stream.read_exact(&mut chunk[..n])?;
        for (j, b) in chunk[..n].iter().enumerate() {
            let i = got + j as u64;
            let plain = if masked {
                b ^ mask[(i % 4) as usize]
            } else {
                *b
            };
            if plain != (i % 251) as u8 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("payload byte {i} corrupted"),
                ));
            }
        }
        got += n as u64;
    }
    Ok((opcode, len))
}

/// Chrome's stand-in for big messages: reads one frame whole (checking every byte), reports it
/// on the receiver, and answers with a frame of `len` bytes.
pub(crate) fn big_echo(len: u64) -> (FakeUpstream, mpsc::Receiver<io::Result<(u8, u64)>>) {
    let (received_tx, received_rx) = mpsc::channel();
    let received_tx = Mutex::new(received_tx);
    let up = FakeUpstream::start(Arc::new(move |s: &mut TcpStream| {
        let got = read_big_frame(s);
        let ok = got.is_ok();
        let _ = received_tx.lock().unwrap().send(got);
        if ok {
            write_big_frame(s, 0x2, len, false)?;
        }
        Ok(())
    }));
    (up, received_rx)
}

/// One WebSocket frame, unmasked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Frame {
    pub fin: bool,
    pub opcode: u8,
    pub payload: Vec<u8>,
}

/// Reads one whole frame (masked or not) and unmasks its payload.
pub(crate) fn read_frame(stream: &mut impl Read) -> io::Result<Frame> {
    let mut h = [0u8; 2];
    stream.read_exact(&mut h)?;
    let len = match h[1] & 0x7f {
        126 => {
            let mut b = [0u8; 2];
            stream.read_exact(&mut b)?;
            u16::from_be_bytes(b) as usize
        }
        127 => {
            let mut b = [0u8; 8];
            stream.read_exact(&mut b)?;
            u64::from_be_bytes(b) as usize
        }
        n => n as usize,
    };
    let mut mask = [0u8; 4];
    if h[1] & 0x80 != 0 {
        stream.read_exact(&mut mask)?;
    }
    let mut payload = vec![0u8; len];
    stream.read_exact(&mut payload)?;
    for (i, b) in payload.iter_mut().enumerate() {
        *b ^= mask[i % 4];
    }
    Ok(Frame {
        fin: h[0] & 0x80 != 0,
        opcode: h[0] & 0x0f,
        payload,
    })
}

/// One frame: masked (a client's, with a fixed key) or not (a server's).
pub(crate) fn frame_bytes(opcode: u8, fin: bool, payload: &[u8], masked: bool) -> Vec<u8> {
    let mut f = vec![if fin { 0x80 } else { 0 } | opcode];
    let bit = if masked { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => f.push(bit | n as u8),
        n if n <= 65535 => {
            f.push(bit | 126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            f.push(bit | 127);
            f.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    let mask = [0x5a, 0x0f, 0xc3, 0x91];
    if masked {
        f.extend_from_slice(&mask);
        f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    } else {
        f.extend_from_slice(payload);
    }
    f
}

/// Chrome's stand-in that records every frame it receives (on the receiver, in order) and
/// answers each complete text message `{"id":N,…}` with `{"id":N,"result":{}}`.
pub(crate) fn recording_cdp() -> (FakeUpstream, mpsc::Receiver<Frame>) {
    let (tx, rx) = mpsc::channel();
    let up = FakeUpstream::start(Arc::new(move |s: &mut TcpStream| {
        let mut message = Vec::new();
        loop {
            let f = read_frame(s)?;
            let _ = tx.send(f.clone());
            if f.opcode == 0x8 {
                return Ok(());
            }
            if f.opcode & 0x8 != 0 {
                continue;
            }
            message.extend_from_slice(&f.payload);
            if !f.fin {
                continue;
            }
            let text = std::mem::take(&mut message);
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&text)
                && let Some(id) = v["id"].as_i64()
            {
                let answer = format!(r#"{{"id":{id},"result":{{}}}}"#);
                s.write_all(&frame_bytes(0x1, true, answer.as_bytes(), false))?;
            }
        }
    }));
    (up, rx)
}
