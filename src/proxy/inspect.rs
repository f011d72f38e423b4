//! Watching the client-to-Chrome byte stream for CDP `Browser.close`.
//!
//! A client's `Browser.close` must end the session normally — with the profile saved before
//! Chrome goes away — so the proxy withholds that one command and tells the controller, which
//! then closes Chrome itself. Everything else passes through untouched.
//!
//! The relay stays a byte relay: this tracks WebSocket frame boundaries as bytes stream past.
//! Only complete, single-frame text messages of at most [`INSPECT_LIMIT`] bytes are looked at
//! (CDP commands are small); larger frames and control frames stream through without being
//! held. The upgrade toward Chrome never negotiates permessage-deflate, so payloads are plain.

use std::ops::Range;

/// Largest client message inspected whole.
pub const INSPECT_LIMIT: u64 = 64 * 1024;

/// A piece of output: a range of the input just fed, or bytes the inspector held back earlier.
#[derive(Debug, PartialEq, Eq)]
pub enum Segment {
    Input(Range<usize>),
    Owned(Vec<u8>),
}

#[derive(Debug)]
enum State {
    /// Collecting a frame header (2..=14 bytes).
    Header { buf: [u8; 14], have: usize },
    /// Holding a small text frame until it is complete.
    Collect {
        frame: Vec<u8>,
        header_len: usize,
        total: usize,
    },
    /// Passing `remaining` payload bytes of a frame that is not inspected.
    Stream { remaining: u64 },
}

/// Per-connection frame tracker for the client-to-Chrome direction.
#[derive(Debug)]
pub struct Inspector {
    state: State,
}

impl Default for Inspector {
    fn default() -> Self {
        Self {
            state: State::Header {
                buf: [0; 14],
                have: 0,
            },
        }
    }
}

/// Length of the header that starts with `b0 b1`.
fn header_len(b1: u8) -> usize {
    let masked = if b1 & 0x80 != 0 { 4 } else { 0 };
    masked
        + match b1 & 0x7f {
            126 => 4,
            127 => 10,
            _ => 2,
        }
}

/// `(fin, opcode, payload_len, mask)` of a complete header.
fn parse_header(h: &[u8]) -> (bool, u8, u64, Option<[u8; 4]>) {
    let fin = h[0] & 0x80 != 0;
    let opcode = h[0] & 0x0f;
    let (len, mut at) = match h[1] & 0x7f {
        126 => (u16::from_be_bytes([h[2], h[3]]) as u64, 4),
        127 => (
            u64::from_be_bytes(h[2..10].try_into().expect("8 bytes")),
            10,
        ),
        n => (n as u64, 2),
    };
    let mask = if h[1] & 0x80 != 0 {
        let m = [h[at], h[at + 1], h[at + 2], h[at + 3]];
        at += 4;
        debug_assert_eq!(at, h.len());
        Some(m)
    } else {
        None
    };
    (fin, opcode, len, mask)
}

fn is_inspected(fin: bool, opcode: u8, len: u64) -> bool {
    fin && opcode == 0x1 && len <= INSPECT_LIMIT
}

/// Whether a (masked) text payload is the CDP command `Browser.close`.
pub fn is_browser_close(payload: &[u8], mask: Option<[u8; 4]>) -> bool {
    const NEEDLE: &[u8] = b"Browser.close";
    if payload.len() < NEEDLE.len() {
        return false;
    }
    let plain: std::borrow::Cow<'_, [u8]> = match mask {
        Some(m) => payload
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ m[i & 3])
            .collect::<Vec<u8>>()
            .into(),
        None => payload.into(),
    };
    if memchr::memmem::find(&plain, NEEDLE).is_none() {
        return false;
    }
    #[derive(serde::Deserialize)]
    struct Command<'a> {
        #[serde(borrow)]
        method: Option<&'a str>,
    }
    serde_json::from_slice::<Command<'_>>(&plain).is_ok_and(|c| c.method == Some("Browser.close"))
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
                    // Fast path: a whole small frame sits in this read.
                    if *have == 0 && input.len() - pos >= 2 {
                        let hl = header_len(input[pos + 1]);
                        if input.len() - pos >= hl {
                            let (fin, opcode, len, mask) = parse_header(&input[pos..pos + hl]);
                            let end = (pos + hl) as u64 + len;
                            if is_inspected(fin, opcode, len) && end <= input.len() as u64 {
                                let end = end as usize;
                                if is_browser_close(&input[pos + hl..end], mask) {
                                    close_seen = true;
                                } else {
                                    push_input(out, pos..end);
                                }
                                pos = end;
                                continue;
                            }
                        }
                    }
                    buf[*have] = input[pos];
                    *have += 1;
                    pos += 1;
                    if *have >= 2 && *have == header_len(buf[1]) {
                        let header = buf[..*have].to_vec();
                        let (fin, opcode, len, _) = parse_header(&header);
                        if is_inspected(fin, opcode, len) {
                            let total = header.len() + len as usize;
                            let header_len = header.len();
                            let mut frame = header;
                            frame.reserve_exact(len as usize);
                            self.state = State::Collect {
                                frame,
                                header_len,
                                total,
                            };
                            self.finish_collect_if_complete(out, &mut close_seen);
                        } else {
                            out.push(Segment::Owned(header));
                            self.state = if len == 0 {
                                State::Header {
                                    buf: [0; 14],
                                    have: 0,
                                }
                            } else {
                                State::Stream { remaining: len }
                            };
                        }
                    }
                }
                State::Collect { frame, total, .. } => {
                    let take = (*total - frame.len()).min(input.len() - pos);
                    frame.extend_from_slice(&input[pos..pos + take]);
                    pos += take;
                    self.finish_collect_if_complete(out, &mut close_seen);
                }
                State::Stream { remaining } => {
                    let take = (*remaining).min((input.len() - pos) as u64) as usize;
                    push_input(out, pos..pos + take);
                    pos += take;
                    *remaining -= take as u64;
                    if *remaining == 0 {
                        self.state = State::Header {
                            buf: [0; 14],
                            have: 0,
                        };
                    }
                }
            }
        }
        close_seen
    }

    fn finish_collect_if_complete(&mut self, out: &mut Vec<Segment>, close_seen: &mut bool) {
        if let State::Collect {
            frame,
            header_len,
            total,
        } = &mut self.state
            && frame.len() == *total
        {
            let (_, _, _, mask) = parse_header(&frame[..*header_len]);
            if is_browser_close(&frame[*header_len..], mask) {
                *close_seen = true;
            } else {
                out.push(Segment::Owned(std::mem::take(frame)));
            }
            self.state = State::Header {
                buf: [0; 14],
                have: 0,
            };
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
        let mask = [0x37, 0xfa, 0x21, 0x3d];
        let mut f = vec![(if fin { 0x80 } else { 0 }) | opcode];
        match payload.len() {
            n if n < 126 => f.push(0x80 | n as u8),
            n if n <= 65535 => {
                f.push(0x80 | 126);
                f.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                f.push(0x80 | 127);
                f.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        f.extend_from_slice(&mask);
        f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i & 3]));
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
