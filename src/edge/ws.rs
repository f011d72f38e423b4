//! WebSocket frames as the relay sees them (RFC 6455 §5): frame headers parsed as bytes stream
//! past, the frames the relay writes itself (keepalive pings, close frames, answers), the
//! Chrome-to-client tracker that finds message boundaries ([`Downstream`]) and the
//! client-to-Chrome one that drops pongs ([`Pongs`]). What a client's messages *say* is judged
//! above this, by the inspector the relay is handed (a [`super::relay::Watch`]).

use std::borrow::Cow;
use std::ops::Range;

/// Answers queued for the client beyond this end the connection: a client that sends refused
/// commands without reading the answers is not given unbounded memory.
pub const MAX_QUEUED_REPLIES: usize = 1024 * 1024;
pub(crate) const OP_CONTINUATION: u8 = 0x0;
pub(crate) const OP_TEXT: u8 = 0x1;
pub(crate) const OP_CLOSE: u8 = 0x8;
pub(crate) const OP_PING: u8 = 0x9;
pub(crate) const OP_PONG: u8 = 0xA;

/// Why a connection is ended instead of relayed further.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fatal {
    /// A message larger, or in more frames, than an inspector holds (close 1009).
    TooLarge,
    /// A binary message (close 1003).
    Binary,
    /// A message naming a guarded command that cannot be read, or frames out of order (1007).
    Unreadable,
    /// More refusals queued than the client reads (1008).
    TooManyRefusals,
    /// The credential that opened the socket expired (1008).
    Expired,
}

impl Fatal {
    /// The WebSocket close code and reason sent to the client.
    pub fn close(self) -> (u16, &'static str) {
        match self {
            Self::TooLarge => (1009, "message too large to inspect"),
            Self::Binary => (1003, "binary messages are not accepted"),
            Self::Unreadable => (1007, "message could not be inspected"),
            Self::TooManyRefusals => (1008, "too many refused commands"),
            Self::Expired => (1008, "the credential has expired"),
        }
    }
}

/// A piece of output: a range of the input just fed, or bytes the inspector held back earlier.
#[derive(Debug, PartialEq, Eq)]
pub enum Segment {
    /// This range of the input just fed, passed on unchanged.
    Input(Range<usize>),
    /// Bytes held back earlier (or rewritten), passed on now.
    Owned(Vec<u8>),
}

/// A parsed frame header.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Header {
    pub(crate) fin: bool,
    pub(crate) opcode: u8,
    pub(crate) len: u64,
    pub(crate) mask: Option<[u8; 4]>,
}

impl Header {
    pub(crate) fn is_control(&self) -> bool {
        self.opcode & 0x8 != 0
    }
}

/// Length of the header whose second byte is `b1`.
#[inline]
pub(crate) fn header_len(b1: u8) -> usize {
    let masked = if b1 & 0x80 != 0 { 4 } else { 0 };
    masked
        + match b1 & 0x7f {
            126 => 4,
            127 => 10,
            _ => 2,
        }
}

/// Parses a complete header.
#[inline]
pub(crate) fn parse_header(h: &[u8]) -> Header {
    let (len, at) = match h[1] & 0x7f {
        126 => (u16::from_be_bytes([h[2], h[3]]) as u64, 4),
        127 => (
            u64::from_be_bytes([h[2], h[3], h[4], h[5], h[6], h[7], h[8], h[9]]),
            10,
        ),
        n => (n as u64, 2),
    };
    Header {
        fin: h[0] & 0x80 != 0,
        opcode: h[0] & 0x0f,
        len,
        mask: (h[1] & 0x80 != 0).then(|| [h[at], h[at + 1], h[at + 2], h[at + 3]]),
    }
}

/// The header at the start of `bytes`, if all of it is there: (its length, it).
#[inline]
pub(crate) fn header_at(bytes: &[u8]) -> Option<(usize, Header)> {
    let hl = header_len(*bytes.get(1)?);
    (bytes.len() >= hl).then(|| (hl, parse_header(&bytes[..hl])))
}

/// Unmasks a payload (a copy).
#[inline]
pub(crate) fn unmask(payload: &[u8], mask: Option<[u8; 4]>) -> Cow<'_, [u8]> {
    match mask {
        Some(m) => {
            let mut v = Vec::with_capacity(payload.len());
            unmask_into(payload, m, &mut v);
            Cow::Owned(v)
        }
        None => Cow::Borrowed(payload),
    }
}

/// Appends `payload` unmasked with `m`, eight bytes at a time (every message is unmasked now,
/// so this is on the hot path: byte by byte it cost more than the rest of the inspection).
#[inline]
pub(crate) fn unmask_into(payload: &[u8], m: [u8; 4], out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(payload);
    let m8 = u64::from_ne_bytes([m[0], m[1], m[2], m[3], m[0], m[1], m[2], m[3]]);
    let (chunks, rest) = out[start..].as_chunks_mut::<8>();
    for c in chunks.iter_mut() {
        *c = (u64::from_ne_bytes(*c) ^ m8).to_ne_bytes();
    }
    // Whole chunks cover a multiple of 4 bytes, so the rest starts at mask byte 0.
    for (i, b) in rest.iter_mut().enumerate() {
        *b ^= m[i & 3];
    }
}

/// A whole frame carrying `payload`: masked (with a zero mask, which RFC 6455 allows) when it
/// goes to Chrome, which takes only masked client frames; plain toward the client.
pub fn frame_of(opcode: u8, payload: &[u8], masked: bool) -> Vec<u8> {
    let mut f = frame_head(0x80 | opcode, payload.len(), masked);
    if masked {
        f.extend_from_slice(&[0; 4]);
    }
    f.extend_from_slice(payload);
    f
}

/// A frame's first byte and length bytes (the mask key, if any, comes next).
pub(crate) fn frame_head(first: u8, len: usize, masked: bool) -> Vec<u8> {
    let bit = if masked { 0x80 } else { 0 };
    let mut f = Vec::with_capacity(len + 14);
    f.push(first);
    match len {
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
    f
}

/// The keepalive ping toward the client: unmasked, empty.
pub fn ping_frame() -> Vec<u8> {
    frame_of(OP_PING, &[], false)
}

/// A close frame toward the client.
pub fn close_frame(fatal: Fatal) -> Vec<u8> {
    let (code, reason) = fatal.close();
    let mut payload = code.to_be_bytes().to_vec();
    payload.extend_from_slice(reason.as_bytes());
    frame_of(OP_CLOSE, &payload, false)
}

/// Frame tracker for the Chrome-to-client direction: finds the boundaries between Chrome's
/// messages, where answers to refused commands can be slotted in without splitting a message.
#[derive(Debug, Default)]
pub struct Downstream {
    header: [u8; 14],
    have: usize,
    remaining: u64,
    /// Inside a fragmented data message (control frames may come between its fragments).
    in_message: bool,
    /// Chrome sent a close frame: nothing of the proxy's may follow it (RFC 6455 §5.5.1).
    closing: bool,
    queued: Vec<u8>,
    /// Who is shown Chrome's messages as they pass (the session log's copy), if anyone.
    tap: Option<Box<dyn MessageTap>>,
    /// The frame being passed is a data frame (its payload goes to the tap).
    data_frame: bool,
    /// ... and the last of its message.
    last_frame: bool,
}

/// What is shown the payloads of Chrome's data messages as they pass the relay (Chrome's
/// frames are not masked: the bytes are the message). It must be quick and never block: it
/// runs on the relay thread.
pub trait MessageTap: Send + std::fmt::Debug {
    /// The next payload bytes of the current message.
    fn payload(&mut self, bytes: &[u8]);
    /// The current message is complete.
    fn end(&mut self);
}

impl Downstream {
    /// This tracker, showing Chrome's messages to `tap` as they pass.
    pub fn tapped(mut self, tap: Option<Box<dyn MessageTap>>) -> Self {
        self.tap = tap;
        self
    }

    /// Queues whole frames for the client, to go at the next message boundary.
    pub fn queue(&mut self, frames: Vec<u8>) {
        if self.queued.is_empty() {
            self.queued = frames;
        } else {
            self.queued.extend(frames);
        }
    }

    /// Whether frames are waiting for a boundary.
    pub fn has_queued(&self) -> bool {
        !self.queued.is_empty()
    }

    /// Bytes waiting for a boundary.
    pub fn queued_len(&self) -> usize {
        self.queued.len()
    }

    /// Whether Chrome has sent a close frame (a ping after it would break the protocol).
    pub fn closing(&self) -> bool {
        self.closing
    }

    fn at_boundary(&self) -> bool {
        self.have == 0 && self.remaining == 0 && !self.in_message
    }

    /// Passes Chrome's bytes on, with queued frames put in at the first message boundary
    /// (the end of `input` included, so `feed(&[])` flushes them when the stream is between
    /// messages).
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<Segment>) {
        let mut pos = 0;
        let mut from = 0;
        while pos < input.len() {
            if self.remaining > 0 {
                let take = self.remaining.min((input.len() - pos) as u64);
                if self.data_frame
                    && let Some(t) = self.tap.as_mut()
                {
                    t.payload(&input[pos..pos + take as usize]);
                }
                pos += take as usize;
                self.remaining -= take;
                if self.remaining == 0 {
                    self.frame_done();
                }
                continue;
            }
            if self.at_boundary() && !self.queued.is_empty() {
                push_input(out, from..pos);
                out.push(Segment::Owned(std::mem::take(&mut self.queued)));
                from = pos;
            }
            self.header[self.have] = input[pos];
            self.have += 1;
            pos += 1;
            if self.have >= 2 && self.have == header_len(self.header[1]) {
                let h = parse_header(&self.header[..self.have]);
                self.have = 0;
                self.remaining = h.len;
                if !h.is_control() {
                    self.in_message = !h.fin;
                }
                self.data_frame = !h.is_control();
                self.last_frame = h.fin;
                self.closing |= h.opcode == OP_CLOSE;
                if h.len == 0 {
                    self.frame_done();
                }
            }
        }
        push_input(out, from..pos);
        if self.at_boundary() && !self.queued.is_empty() {
            out.push(Segment::Owned(std::mem::take(&mut self.queued)));
        }
    }
}

impl Downstream {
    /// A frame's payload has passed: the tap learns when it ended a message.
    fn frame_done(&mut self) {
        if self.data_frame
            && self.last_frame
            && let Some(t) = self.tap.as_mut()
        {
            t.end();
        }
        self.data_frame = false;
    }
}

/// Frame tracker for the client-to-Chrome direction of a connection without an inspector but
/// with keepalive: passes every frame as it streams, except pongs (the answers to the proxy's
/// pings), which are dropped. A frame's opcode is in its first byte, so nothing is held: a
/// pong between the fragments of a message, or split across reads, goes nowhere and the rest
/// passes byte for byte.
#[derive(Debug, Default)]
pub struct Pongs {
    header: [u8; 14],
    have: usize,
    remaining: u64,
    /// The current frame is a pong.
    dropping: bool,
}

impl Pongs {
    /// Appends what of the client's `input` goes on to Chrome to `out`.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<Segment>) {
        let mut pos = 0;
        // input[from..pos] is passed on.
        let mut from = 0;
        while pos < input.len() {
            let start = pos;
            if self.remaining > 0 {
                let take = self.remaining.min((input.len() - pos) as u64);
                pos += take as usize;
                self.remaining -= take;
            } else {
                if self.have == 0 {
                    self.dropping = input[pos] & 0x0f == OP_PONG;
                }
                self.header[self.have] = input[pos];
                self.have += 1;
                pos += 1;
                if self.have >= 2 && self.have == header_len(self.header[1]) {
                    self.remaining = parse_header(&self.header[..self.have]).len;
                    self.have = 0;
                }
            }
            if self.dropping {
                push_input(out, from..start);
                from = pos;
            }
        }
        push_input(out, from..pos);
    }
}

/// Where a complete header's bytes are.
pub(crate) enum HeaderBytes {
    /// In the input being fed.
    Input(Range<usize>),
    /// Gathered across reads.
    Owned(Vec<u8>),
}

impl HeaderBytes {
    pub(crate) fn bytes<'a>(&'a self, input: &'a [u8]) -> &'a [u8] {
        match self {
            Self::Input(r) => &input[r.clone()],
            Self::Owned(v) => v,
        }
    }
}

/// Appends a range, merging it with a directly preceding one.
#[inline]
pub(crate) fn push_input(out: &mut Vec<Segment>, r: Range<usize>) {
    if r.is_empty() {
        return;
    }
    if let Some(Segment::Input(last)) = out.last_mut()
        && last.end == r.start
    {
        last.end = r.end;
        return;
    }
    out.push(Segment::Input(r));
}
