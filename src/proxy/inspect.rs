//! Watching the client-to-Chrome byte stream for CDP `Browser.close`.
//!
//! A client's `Browser.close` must end the session normally — with the session cookies exported
//! and the profile saved before Chrome goes away — so the proxy withholds that one command and
//! tells the controller, which then closes Chrome itself. Everything else passes through
//! untouched, in order.
//!
//! The relay stays a byte relay: this tracks WebSocket frame boundaries as bytes stream past
//! and decides on *parsed* messages, however they are spelled or framed:
//!
//! - A text message is held while it is at most [`INSPECT_LIMIT`] bytes of payload in at most
//!   [`MAX_FRAGMENTS`] frames: a single frame, or a first frame and its continuation frames
//!   (RFC 6455 §5.4). When its last frame arrives the payload is unmasked and parsed as JSON;
//!   if its `method` (after JSON unescaping, e.g. `"Browser.clos\u0065"`) is `Browser.close`
//!   the held frames are dropped, otherwise they are forwarded as they came. Nothing of a held
//!   message has reached Chrome before the decision, so a close can always be withheld.
//! - Control frames may come between the fragments of a message: pings and pongs are forwarded
//!   at once (ahead of the held fragments, which RFC 6455 allows); a close frame first flushes
//!   the held fragments, so the bytes keep their order.
//! - A message that grows past either limit is flushed (the held frames forwarded in order) and
//!   the rest of it streams through without being held, like every larger message, binary
//!   message (Chrome refuses binary frames) and control frame. Memory per connection stays at
//!   most one held message.
//!
//! What cannot be inspected — a command padded past the limit, or JSON that Chrome's parser
//! accepts and serde_json does not (nesting deeper than 128) — reaches Chrome, which exits by
//! itself with status 0; the session owner treats that clean exit as a normal end too (see
//! `app::classify_exit`), only without the session cookies, which can no longer be exported.
//!
//! The upgrade toward Chrome never negotiates permessage-deflate, so payloads are plain.

use std::ops::Range;

/// Largest client message (payload bytes, all fragments together) held and inspected.
pub const INSPECT_LIMIT: usize = 64 * 1024;

/// Most frames a held message may have; a message fragmented further streams through. Bounds
/// the header bytes held beside the payload (at most 14 per frame).
pub const MAX_FRAGMENTS: usize = 64;

const OP_CONTINUATION: u8 = 0x0;
const OP_TEXT: u8 = 0x1;
const OP_CLOSE: u8 = 0x8;

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
struct Header {
    fin: bool,
    opcode: u8,
    len: u64,
    mask: Option<[u8; 4]>,
}

impl Header {
    fn is_control(&self) -> bool {
        self.opcode & 0x8 != 0
    }
}

/// One frame of a held message: where its payload sits in [`Held::raw`].
#[derive(Debug)]
struct HeldFrame {
    at: usize,
    len: usize,
    mask: Option<[u8; 4]>,
}

/// A text message held back until it is complete: its frames exactly as received.
#[derive(Debug, Default)]
struct Held {
    raw: Vec<u8>,
    frames: Vec<HeldFrame>,
    payload_len: usize,
}

impl Held {
    fn can_take(&self, h: &Header) -> bool {
        self.frames.len() < MAX_FRAGMENTS
            && (self.payload_len as u64) + h.len <= INSPECT_LIMIT as u64
    }

    /// The unmasked payload of all frames, in order.
    fn payload(&self) -> Vec<u8> {
        let mut p = Vec::with_capacity(self.payload_len);
        for f in &self.frames {
            let bytes = &self.raw[f.at..f.at + f.len];
            match f.mask {
                Some(m) => p.extend(bytes.iter().enumerate().map(|(i, b)| b ^ m[i & 3])),
                None => p.extend_from_slice(bytes),
            }
        }
        p
    }
}

/// Where the stream stands between data messages.
#[derive(Debug)]
enum Message {
    /// No data message in progress.
    Between,
    /// A text message being held for inspection.
    Held(Held),
    /// A data message in progress that is not inspected: its continuations stream through.
    Passing,
}

/// Where the stream stands within a frame.
#[derive(Debug)]
enum State {
    /// Collecting a frame header (2..=14 bytes).
    Header { buf: [u8; 14], have: usize },
    /// Copying `remaining` payload bytes of a frame of the held message.
    Collect { remaining: usize, fin: bool },
    /// Passing `remaining` payload bytes of a frame that is not held.
    Stream { remaining: u64 },
}

const NO_HEADER: State = State::Header {
    buf: [0; 14],
    have: 0,
};

/// Per-connection frame tracker for the client-to-Chrome direction.
#[derive(Debug)]
pub struct Inspector {
    state: State,
    message: Message,
}

impl Default for Inspector {
    fn default() -> Self {
        Self {
            state: NO_HEADER,
            message: Message::Between,
        }
    }
}

/// Length of the header whose second byte is `b1`.
fn header_len(b1: u8) -> usize {
    let masked = if b1 & 0x80 != 0 { 4 } else { 0 };
    masked
        + match b1 & 0x7f {
            126 => 4,
            127 => 10,
            _ => 2,
        }
}

/// Parses a complete header.
fn parse_header(h: &[u8]) -> Header {
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
fn header_at(bytes: &[u8]) -> Option<(usize, Header)> {
    let hl = header_len(*bytes.get(1)?);
    (bytes.len() >= hl).then(|| (hl, parse_header(&bytes[..hl])))
}

/// Whether a (masked) text payload is the CDP command `Browser.close`.
pub fn is_browser_close(payload: &[u8], mask: Option<[u8; 4]>) -> bool {
    match mask {
        Some(m) => {
            let plain: Vec<u8> = payload
                .iter()
                .enumerate()
                .map(|(i, b)| b ^ m[i & 3])
                .collect();
            is_browser_close_plain(&plain)
        }
        None => is_browser_close_plain(payload),
    }
}

/// Whether an unmasked payload is a JSON object whose `method` is `Browser.close`.
fn is_browser_close_plain(plain: &[u8]) -> bool {
    // Cheap refusal first: without the literal name, only a JSON escape could spell it.
    if memchr::memmem::find(plain, b"Browser.close").is_none()
        && memchr::memchr(b'\\', plain).is_none()
    {
        return false;
    }
    serde_json::from_slice::<command::MethodIsBrowserClose>(plain).is_ok_and(|c| c.0)
}

/// Reading just the `method` of a CDP command, without allocating for keys or values.
mod command {
    use std::fmt;

    use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};

    /// Whether the command's one `method` is `Browser.close`. A repeated `method` is an error,
    /// as it is for Chrome ("duplicate map key").
    pub struct MethodIsBrowserClose(pub bool);

    /// Whether a string (a key, or a value) is `self.0`, read without allocating.
    struct StrIs(&'static str);

    impl Visitor<'_> for StrIs {
        type Value = bool;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            write!(f, "a string")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<bool, E> {
            Ok(v == self.0)
        }
    }

    /// An object key: whether it is `method`.
    struct IsMethod(bool);

    impl<'de> de::Deserialize<'de> for IsMethod {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_identifier(StrIs("method")).map(IsMethod)
        }
    }

    /// The `method` value: whether it is `Browser.close`.
    struct IsClose(bool);

    impl<'de> de::Deserialize<'de> for IsClose {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_str(StrIs("Browser.close")).map(IsClose)
        }
    }

    impl<'de> de::Deserialize<'de> for MethodIsBrowserClose {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = MethodIsBrowserClose;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a CDP command object")
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                    let mut method = None;
                    while let Some(IsMethod(is_method)) = map.next_key()? {
                        if !is_method {
                            map.next_value::<IgnoredAny>()?;
                        } else if method.is_some() {
                            return Err(de::Error::duplicate_field("method"));
                        } else {
                            method = Some(map.next_value::<IsClose>()?.0);
                        }
                    }
                    Ok(MethodIsBrowserClose(method == Some(true)))
                }
            }
            d.deserialize_map(V)
        }
    }
}

impl Inspector {
    /// Feeds the next bytes read from the client. Appends what to forward to `out` (in order)
    /// and returns true when a `Browser.close` command was seen and withheld.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<Segment>) -> bool {
        let mut pos = 0;
        let mut close_seen = false;
        while pos < input.len() {
            match &mut self.state {
                State::Header { buf, have } => {
                    let (header, seg) = if *have == 0
                        && let Some((hl, h)) = header_at(&input[pos..])
                    {
                        // Fast path: a whole small text message sits in this read.
                        let end = pos as u64 + hl as u64 + h.len;
                        if h.fin
                            && h.opcode == OP_TEXT
                            && matches!(self.message, Message::Between)
                            && h.len <= INSPECT_LIMIT as u64
                            && end <= input.len() as u64
                        {
                            let end = end as usize;
                            if is_browser_close(&input[pos + hl..end], h.mask) {
                                close_seen = true;
                            } else {
                                push_input(out, pos..end);
                            }
                            pos = end;
                            continue;
                        }
                        pos += hl;
                        (h, HeaderBytes::Input(pos - hl..pos))
                    } else {
                        buf[*have] = input[pos];
                        *have += 1;
                        pos += 1;
                        if *have < 2 || *have < header_len(buf[1]) {
                            continue;
                        }
                        let bytes = buf[..*have].to_vec();
                        (parse_header(&bytes), HeaderBytes::Owned(bytes))
                    };
                    close_seen |= self.start_frame(header, seg, input, out);
                }
                State::Collect { remaining, fin } => {
                    let take = (*remaining).min(input.len() - pos);
                    let fin = *fin;
                    *remaining -= take;
                    let done = *remaining == 0;
                    if let Message::Held(held) = &mut self.message {
                        held.raw.extend_from_slice(&input[pos..pos + take]);
                    }
                    pos += take;
                    if done {
                        close_seen |= self.end_held_frame(fin, out);
                    }
                }
                State::Stream { remaining } => {
                    let take = (*remaining).min((input.len() - pos) as u64) as usize;
                    push_input(out, pos..pos + take);
                    pos += take;
                    *remaining -= take as u64;
                    if *remaining == 0 {
                        self.state = NO_HEADER;
                    }
                }
            }
        }
        close_seen
    }

    /// A complete header was read: hold the frame or stream it. True when it completed a
    /// withheld `Browser.close` (an empty last fragment).
    fn start_frame(
        &mut self,
        h: Header,
        header: HeaderBytes,
        input: &[u8],
        out: &mut Vec<Segment>,
    ) -> bool {
        if h.is_control() {
            // Pings and pongs may overtake the held fragments; a close may not.
            if h.opcode == OP_CLOSE {
                self.flush(out);
            }
            self.stream(h, header, out);
            return false;
        }
        let hold = match &self.message {
            Message::Between => h.opcode == OP_TEXT && h.len <= INSPECT_LIMIT as u64,
            Message::Held(held) => h.opcode == OP_CONTINUATION && held.can_take(&h),
            Message::Passing => false,
        };
        if !hold {
            self.flush(out);
            self.message = if h.fin {
                Message::Between
            } else {
                Message::Passing
            };
            self.stream(h, header, out);
            return false;
        }
        if matches!(self.message, Message::Between) {
            self.message = Message::Held(Held::default());
        }
        let Message::Held(held) = &mut self.message else {
            unreachable!("set just above");
        };
        held.raw.extend_from_slice(header.bytes(input));
        let len = h.len as usize; // ≤ INSPECT_LIMIT
        held.frames.push(HeldFrame {
            at: held.raw.len(),
            len,
            mask: h.mask,
        });
        held.payload_len += len;
        held.raw.reserve(len);
        self.state = State::Collect {
            remaining: len,
            fin: h.fin,
        };
        len == 0 && self.end_held_frame(h.fin, out)
    }

    /// The payload of a held frame is complete; decide on the message if it was the last.
    /// True when it was the last fragment of a `Browser.close`, which is withheld.
    fn end_held_frame(&mut self, fin: bool, out: &mut Vec<Segment>) -> bool {
        self.state = NO_HEADER;
        if !fin {
            return false;
        }
        if let Message::Held(held) = std::mem::replace(&mut self.message, Message::Between) {
            if is_browser_close_plain(&held.payload()) {
                return true;
            }
            out.push(Segment::Owned(held.raw));
        }
        false
    }

    /// Forwards a held, incomplete message as it came; the rest of it streams.
    fn flush(&mut self, out: &mut Vec<Segment>) {
        if let Message::Held(held) = &mut self.message {
            out.push(Segment::Owned(std::mem::take(&mut held.raw)));
            self.message = Message::Passing;
        }
    }

    /// Forwards a frame's header and then its payload as it arrives.
    fn stream(&mut self, h: Header, header: HeaderBytes, out: &mut Vec<Segment>) {
        match header {
            HeaderBytes::Input(r) => push_input(out, r),
            HeaderBytes::Owned(v) => out.push(Segment::Owned(v)),
        }
        self.state = if h.len == 0 {
            NO_HEADER
        } else {
            State::Stream { remaining: h.len }
        };
    }
}

/// Where a complete header's bytes are.
enum HeaderBytes {
    /// In the input being fed.
    Input(Range<usize>),
    /// Gathered across reads.
    Owned(Vec<u8>),
}

impl HeaderBytes {
    fn bytes<'a>(&'a self, input: &'a [u8]) -> &'a [u8] {
        match self {
            Self::Input(r) => &input[r.clone()],
            Self::Owned(v) => v,
        }
    }
}

/// Appends a range, merging it with a directly preceding one.
fn push_input(out: &mut Vec<Segment>, r: Range<usize>) {
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A masked client frame.
    pub fn frame(opcode: u8, fin: bool, payload: &[u8]) -> Vec<u8> {
        frame_with(opcode, fin, payload, Some([0x37, 0xfa, 0x21, 0x3d]))
    }

    /// A frame, masked with `mask` or not.
    pub fn frame_with(opcode: u8, fin: bool, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
        let bit = if mask.is_some() { 0x80 } else { 0 };
        let mut f = vec![(if fin { 0x80 } else { 0 }) | opcode];
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
        match mask {
            Some(m) => {
                f.extend_from_slice(&m);
                f.extend(payload.iter().enumerate().map(|(i, b)| b ^ m[i & 3]));
            }
            None => f.extend_from_slice(payload),
        }
        f
    }

    fn forwarded(input: &[u8], out: &[Segment]) -> Vec<u8> {
        let mut v = Vec::new();
        for s in out {
            match s {
                Segment::Input(r) => v.extend_from_slice(&input[r.clone()]),
                Segment::Owned(o) => v.extend_from_slice(o),
            }
        }
        v
    }

    /// Feeds `stream` in chunks of `chunk` bytes; returns the forwarded bytes and whether a
    /// close was seen.
    fn run(stream: &[u8], chunk: usize) -> (Vec<u8>, bool) {
        let mut insp = Inspector::default();
        let mut all = Vec::new();
        let mut seen = false;
        for piece in stream.chunks(chunk) {
            let mut out = Vec::new();
            seen |= insp.feed(piece, &mut out);
            all.extend(forwarded(piece, &out));
        }
        (all, seen)
    }

    #[test]
    fn ordinary_commands_pass_byte_for_byte_at_any_split() {
        let mut stream = frame(1, true, br#"{"id":1,"method":"Target.getTargets"}"#);
        stream.extend(frame(1, true, &vec![b'x'; 70_000])); // streamed, not inspected
        stream.extend(frame(2, true, &[0u8; 300])); // binary
        stream.extend(frame(9, true, b"")); // ping
        stream.extend(frame(
            1,
            true,
            br#"{"id":2,"method":"Page.navigate","params":{"url":"Browser.close"}}"#,
        ));
        for chunk in [1, 2, 3, 7, 100, 4096, 1 << 20] {
            let (out, seen) = run(&stream, chunk);
            assert!(!seen, "chunk {chunk}");
            assert_eq!(out, stream, "chunk {chunk}");
        }
    }

    #[test]
    fn browser_close_is_withheld_at_any_split() {
        let before = frame(1, true, br#"{"id":1,"method":"Runtime.evaluate"}"#);
        let close = frame(1, true, br#"{"id":2,"method":"Browser.close"}"#);
        let after = frame(1, true, br#"{"id":3,"method":"Page.enable"}"#);
        let stream = [before.clone(), close, after.clone()].concat();
        for chunk in [1, 2, 5, 13, 4096] {
            let (out, seen) = run(&stream, chunk);
            assert!(seen, "chunk {chunk}");
            assert_eq!(
                out,
                [before.clone(), after.clone()].concat(),
                "chunk {chunk}"
            );
        }
    }

    #[test]
    fn a_large_message_mentioning_close_streams_through() {
        let mut payload = br#"{"id":9,"method":"Browser.close","params":{"pad":""#.to_vec();
        payload.extend(vec![b'a'; 70_000]);
        payload.extend(br#""}}"#);
        let stream = frame(1, true, &payload);
        let (out, seen) = run(&stream, 4096);
        assert!(!seen);
        assert_eq!(out, stream);
    }

    /// Feeds `stream` in two pieces split at `at`.
    fn run_split(stream: &[u8], at: usize) -> (Vec<u8>, bool) {
        let mut insp = Inspector::default();
        let mut all = Vec::new();
        let mut seen = false;
        for piece in [&stream[..at], &stream[at..]] {
            let mut out = Vec::new();
            seen |= insp.feed(piece, &mut out);
            all.extend(forwarded(piece, &out));
        }
        (all, seen)
    }

    /// Checks `stream` at every two-piece split and a few chunk sizes.
    fn check_everywhere(stream: &[u8], want_out: &[u8], want_seen: bool) {
        for at in 0..=stream.len() {
            let (out, seen) = run_split(stream, at);
            assert_eq!(seen, want_seen, "split at {at}");
            assert_eq!(out, want_out, "split at {at}");
        }
        for chunk in [1, 2, 3, 7, 100, 4096] {
            let (out, seen) = run(stream, chunk);
            assert_eq!(seen, want_seen, "chunk {chunk}");
            assert_eq!(out, want_out, "chunk {chunk}");
        }
    }

    const MASKS: [Option<[u8; 4]>; 2] = [Some([0x9a, 0x01, 0xff, 0x42]), None];

    #[test]
    fn an_escaped_browser_close_is_withheld_at_every_split() {
        for spelling in [
            br#"{"id":1,"method":"Browser.clos\u0065"}"#.as_slice(),
            br#"{"id":1,"method":"\u0042rowser\u002eclose"}"#,
            br#"{"id":1,"\u006dethod":"Browser.close"}"#,
            br#" {"method" : "Browser.close" , "params":{"x":"\ud800"}} "#,
        ] {
            for mask in MASKS {
                let before = frame_with(1, true, br#"{"id":0,"method":"Page.enable"}"#, mask);
                let close = frame_with(1, true, spelling, mask);
                let stream = [before.clone(), close].concat();
                check_everywhere(&stream, &before, true);
            }
        }
    }

    /// The fragments of a close, with a ping between them.
    fn fragmented_close(mask: Option<[u8; 4]>) -> (Vec<u8>, Vec<u8>) {
        let ping = frame_with(9, true, b"are you there", mask);
        let stream = [
            frame_with(1, false, br#"{"id":7,"meth"#, mask),
            ping.clone(),
            frame_with(0, false, br#"od":"Browser.cl"#, mask),
            frame_with(0, false, b"", mask),
            frame_with(0, true, br#"ose"}"#, mask),
        ]
        .concat();
        (stream, ping)
    }

    #[test]
    fn a_fragmented_browser_close_is_withheld_at_every_split() {
        for mask in MASKS {
            let (close, ping) = fragmented_close(mask);
            let after = frame_with(1, true, br#"{"id":8,"method":"Page.enable"}"#, mask);
            let stream = [close, after.clone()].concat();
            // The ping goes on at once; the message's fragments are dropped.
            check_everywhere(&stream, &[ping, after].concat(), true);
        }
    }

    #[test]
    fn a_fragmented_ordinary_message_passes_byte_for_byte_at_every_split() {
        for mask in MASKS {
            let first = frame_with(1, false, br#"{"id":7,"method":"Target.getT"#, mask);
            let ping = frame_with(9, true, b"", mask);
            let last = frame_with(0, true, br#"argets"}"#, mask);
            let stream = [first.clone(), ping.clone(), last.clone()].concat();
            // The ping overtakes the held first fragment; the message keeps its bytes.
            check_everywhere(&stream, &[ping, first, last].concat(), false);
        }
    }

    #[test]
    fn a_message_growing_past_the_limit_is_flushed_in_order() {
        let mut pad = br#"{"id":1,"method":"Browser.close","params":{"pad":""#.to_vec();
        pad.extend(vec![b' '; INSPECT_LIMIT - pad.len()]);
        let first = frame(1, false, &pad); // exactly the limit: held
        let pong = frame(10, true, b"");
        let rest = frame(0, true, br#""}}"#); // one byte too many: flushed, then streamed
        let after = frame(1, true, br#"{"id":2,"method":"Browser.close"}"#);
        let stream = [first.clone(), pong.clone(), rest.clone(), after].concat();
        for chunk in [1, 3, 1000, 4096, 1 << 20] {
            let (out, seen) = run(&stream, chunk);
            assert!(seen, "the next message is inspected again (chunk {chunk})");
            assert_eq!(out, [pong.clone(), first.clone(), rest.clone()].concat());
        }
    }

    #[test]
    fn a_message_in_too_many_fragments_is_flushed_in_order() {
        let mut stream = frame(1, false, br#"{"method":"#);
        for _ in 0..MAX_FRAGMENTS - 1 {
            stream.extend(frame(0, false, b" "));
        }
        stream.extend(frame(0, true, br#""Browser.close"}"#));
        for chunk in [1, 5, 4096] {
            let (out, seen) = run(&stream, chunk);
            assert!(!seen);
            assert_eq!(out, stream);
        }
    }

    #[test]
    fn a_close_frame_flushes_the_held_fragments_first() {
        let first = frame(1, false, br#"{"id":1,"method":"Browser.close""#);
        let close = frame(8, true, &[0x03, 0xe8]);
        let stream = [first, close].concat();
        check_everywhere(&stream, &stream, false);
    }

    #[test]
    fn what_chrome_refuses_is_not_taken_for_a_close() {
        for payload in [
            br#"{"id":1,"method":"Browser.getVersion","method":"Browser.close"}"#.as_slice(),
            br#"{"id":1,"method":"Browser.close","method":"Browser.getVersion"}"#,
            br#"{"id":1,"method":"Browser.close",}"#,
            br#"["Browser.close"]"#,
            br#"{"id":1,"method":["Browser.close"]}"#,
        ] {
            let stream = frame(1, true, payload);
            check_everywhere(&stream, &stream, false);
        }
        // Chrome refuses binary messages, so a binary one is not inspected.
        let binary = frame(2, true, br#"{"id":1,"method":"Browser.close"}"#);
        check_everywhere(&binary, &binary, false);
    }

    #[test]
    fn browser_close_detection() {
        assert!(is_browser_close(
            br#"{"id":1,"method":"Browser.close"}"#,
            None
        ));
        assert!(is_browser_close(
            br#"{"method":"Browser.close","id":1,"sessionId":"S"}"#,
            None
        ));
        assert!(!is_browser_close(
            br#"{"id":1,"method":"Browser.closeX"}"#,
            None
        ));
        assert!(!is_browser_close(
            br#"{"id":1,"method":"Browser.getVersion","x":"Browser.close"}"#,
            None
        ));
        assert!(!is_browser_close(b"Browser.close", None));
    }
}
