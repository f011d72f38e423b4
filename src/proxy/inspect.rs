//! Watching the client-to-Chrome byte stream: every client message is judged before any of
//! it reaches Chrome.
//!
//! A client's `Browser.close` must end the session normally — with the session cookies exported
//! and the profile saved before Chrome goes away — so the proxy withholds that command and
//! tells the controller, which then closes Chrome itself. Commands that would reach local files
//! are refused or rewritten by the rules of [`super::guard`]: a refused command is answered
//! with a CDP error for its id (see [`Downstream`], which slots the answer in between Chrome's
//! messages) and the connection stays usable. `Wallcrawler.*` commands are the proxy's own,
//! answered the same way (a handoff request by [`crate::viewer::handoff`]). Everything else
//! passes through untouched, in order. An inspector socket opened with a live-view credential
//! is judged in that credential's [`guard::Scope`] (no handoff; one page's commands only when
//! it names a page) and is ended when the credential expires ([`Inspector::expiring_at`]).
//!
//! The relay stays a byte relay: this tracks WebSocket frame boundaries as bytes stream past
//! and decides on *parsed* messages, however they are spelled or framed:
//!
//! - Every text message is held until complete — a single frame, or a first frame and its
//!   continuation frames (RFC 6455 §5.4) — then unmasked and judged; nothing of it has reached
//!   Chrome before the decision. A message whose whole payload is in one read is judged in
//!   place, without a copy of its frame.
//! - Control frames may come between the fragments of a message: pings and pongs are forwarded
//!   at once (ahead of the held fragments, which RFC 6455 allows); a close frame drops the
//!   incomplete message and passes (the connection is ending). With keepalive on, pongs are
//!   the answers to the proxy's own pings and are dropped instead
//!   ([`Inspector::dropping_pongs`]; [`Pongs`] does only that, for connections without an
//!   inspector).
//! - What cannot be judged ends the connection ([`Fatal`]): a message over [`MAX_MESSAGE`]
//!   bytes or [`MAX_FRAGMENTS`] frames (close 1009), a binary message (Chrome reads only text;
//!   close 1003), a message naming a guarded command that serde cannot read — JSON Chrome might
//!   read differently, e.g. nested deeper than 128 — or frames out of order (close 1007). Memory
//!   per connection stays at most one held message (its frames, and its unmasked payload while
//!   it is judged).
//!
//! The upgrade toward Chrome never negotiates permessage-deflate, so payloads are plain.
//!
//! When the session is logged ([`Inspector::logging`]), every judged message is copied to the
//! session's log as it is judged (its first 64 KiB and last bytes, queued without blocking),
//! with the answers to refused commands and, through the relay's downstream tracker, Chrome's
//! messages to this client ([`crate::session_log`]).

use std::ops::Range;
use std::sync::Arc;

use super::guard::{self, Verdict};
use crate::edge::relay::{Transform, Watch};
use crate::edge::ws::{
    Fatal, Header, HeaderBytes, OP_CLOSE, OP_CONTINUATION, OP_PONG, OP_TEXT, Segment, frame_of,
    header_at, header_len, parse_header, push_input, unmask, unmask_into,
};
use crate::file_rules::FileRules;
use crate::session_log::tap::DownTap;
use crate::session_log::{Dir, Recorder};
use crate::viewer::handoff::{self, Handoffs};

/// Largest client message (payload bytes, all fragments together). Chrome's own DevTools
/// server reads up to 100 MiB; clients send megabytes at most (`Fetch.fulfillRequest` bodies,
/// injected scripts), and each connection may hold one message this large.
pub const MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// Most frames a message may have. Bounds the header bytes held beside the payload (at most
/// 14 per frame).
pub const MAX_FRAGMENTS: usize = 1024;

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
            && (self.payload_len as u64).saturating_add(h.len) <= MAX_MESSAGE as u64
    }

    /// The unmasked payload of all frames, in order.
    fn payload(&self) -> Vec<u8> {
        let mut p = Vec::with_capacity(self.payload_len);
        for f in &self.frames {
            let bytes = &self.raw[f.at..f.at + f.len];
            match f.mask {
                Some(m) => unmask_into(bytes, m, &mut p),
                None => p.extend_from_slice(bytes),
            }
        }
        p
    }
}

/// Where the stream stands within a frame.
#[derive(Debug)]
enum State {
    /// Collecting a frame header (2..=14 bytes).
    Header { buf: [u8; 14], have: usize },
    /// Copying `remaining` payload bytes of a frame of the held message.
    Collect { remaining: usize, fin: bool },
    /// Passing `remaining` payload bytes of a control frame.
    Stream { remaining: u64 },
    /// Dropping `remaining` payload bytes of a pong.
    Skip { remaining: u64 },
    /// The connection is being ended: nothing more is read into the inspector.
    Ended(Fatal),
}

const NO_HEADER: State = State::Header {
    buf: [0; 14],
    have: 0,
};

/// Per-connection frame tracker for the client-to-Chrome direction.
#[derive(Debug)]
pub struct Inspector {
    state: State,
    /// The text message being held, if one is in progress.
    held: Option<Held>,
    rules: Arc<FileRules>,
    /// CDP error answers (whole frames) for refused commands, for the client.
    replies: Vec<u8>,
    /// Who answers `Wallcrawler.requestHandoff`, and this connection's id for the relay
    /// (`None`: refused, this proxy hands nothing off).
    handoffs: Option<(Arc<Handoffs>, u64)>,
    /// Drop the client's pongs (they answer the proxy's keepalive pings, not Chrome's).
    drop_pongs: bool,
    /// Whose socket this is: what its commands may reach ([`guard::Scope`]).
    scope: guard::Scope,
    /// When the credential that opened the socket expires: the relay ends it then.
    expires: Option<std::time::Instant>,
    /// The session's log and this connection's id there, when the session is logged: every
    /// judged message is copied to it (bounded, without blocking).
    log: Option<(Recorder, u64)>,
}

impl Default for Inspector {
    fn default() -> Self {
        Self::new(Arc::default())
    }
}

impl Inspector {
    /// An inspector judging paths by `rules`.
    pub fn new(rules: Arc<FileRules>) -> Self {
        Self {
            state: NO_HEADER,
            held: None,
            rules,
            replies: Vec::new(),
            handoffs: None,
            drop_pongs: false,
            scope: guard::Scope::Session,
            expires: None,
            log: None,
        }
    }

    /// This inspector, judging commands in `scope` (an inspector socket's live-view
    /// credential).
    pub fn scoped(mut self, scope: guard::Scope) -> Self {
        self.scope = scope;
        self
    }

    /// This inspector, for a socket whose credential expires at `at`: the relay closes it
    /// then (1008).
    pub fn expiring_at(mut self, at: std::time::Instant) -> Self {
        self.expires = Some(at);
        self
    }

    /// When the socket's credential expires, if it does.
    pub fn expires(&self) -> Option<std::time::Instant> {
        self.expires
    }

    /// This inspector, dropping the client's pongs instead of forwarding them if `drop`
    /// (keepalive on: they answer the proxy's pings).
    pub fn dropping_pongs(mut self, drop: bool) -> Self {
        self.drop_pongs = drop;
        self
    }

    /// This inspector, copying every message of relayed connection `conn` (and, through
    /// [`Watch::downstream_tap`], Chrome's) to the session's log.
    pub(crate) fn logging(mut self, log: Option<Recorder>, conn: u64) -> Self {
        self.log = log.map(|r| (r, conn));
        self
    }

    /// This inspector, with handoff requests answered by `handoffs` for relayed connection
    /// `conn`.
    pub fn with_handoffs(mut self, handoffs: Arc<Handoffs>, conn: u64) -> Self {
        self.handoffs = Some((handoffs, conn));
        self
    }

    /// The connection id given with [`with_handoffs`](Self::with_handoffs).
    pub fn conn(&self) -> Option<u64> {
        self.handoffs.as_ref().map(|(_, c)| *c)
    }

    /// Why the connection must end, once something could not be judged.
    pub fn fatal(&self) -> Option<Fatal> {
        match self.state {
            State::Ended(f) => Some(f),
            _ => None,
        }
    }

    /// The answers (whole frames) to refused commands queued since the last call.
    pub fn take_replies(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.replies)
    }

    /// Feeds the next bytes read from the client. Appends what to forward to `out` (in order)
    /// and returns true when a `Browser.close` command was seen and withheld. After a
    /// [`fatal`](Self::fatal) end nothing more is forwarded.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<Segment>) -> bool {
        let mut pos = 0;
        let mut close_seen = false;
        while pos < input.len() {
            match &mut self.state {
                State::Ended(_) => return close_seen,
                State::Header { buf, have } => {
                    let (header, seg) = if *have == 0
                        && let Some((hl, h)) = header_at(&input[pos..])
                    {
                        // Fast path: a whole text message sits in this read.
                        // Saturating: a header may declare up to 2^64 - 1 bytes (found by
                        // fuzz::cdp::inspector_bytes; it overflowed, a panic in debug builds).
                        let end = (pos as u64 + hl as u64).saturating_add(h.len);
                        if h.fin
                            && h.opcode == OP_TEXT
                            && self.held.is_none()
                            && h.len <= MAX_MESSAGE as u64
                            && end <= input.len() as u64
                        {
                            let end = end as usize;
                            let plain = unmask(&input[pos + hl..end], h.mask);
                            close_seen |= self.decide(&plain, Forward::Input(pos..end), out);
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
                    if let Some(held) = &mut self.held {
                        held.raw.extend_from_slice(&input[pos..pos + take]);
                    }
                    pos += take;
                    if done {
                        close_seen |= self.end_held_frame(fin, out);
                    }
                }
                State::Stream { .. } | State::Skip { .. } => {
                    pos = self.rest_of_payload(input, pos, out);
                }
            }
        }
        close_seen
    }

    /// A frame's payload passed on as it comes (`Stream`) or dropped (`Skip`), as much of it as
    /// `input` holds from `pos`; the position after it.
    #[inline]
    fn rest_of_payload(&mut self, input: &[u8], pos: usize, out: &mut Vec<Segment>) -> usize {
        let (remaining, forward) = match &mut self.state {
            State::Stream { remaining } => (remaining, true),
            State::Skip { remaining } => (remaining, false),
            _ => return pos,
        };
        let take = (*remaining).min((input.len() - pos) as u64);
        let end = pos + take as usize;
        if forward {
            push_input(out, pos..end);
        }
        *remaining -= take;
        if *remaining == 0 {
            self.state = NO_HEADER;
        }
        end
    }

    /// Acts on the verdict for a complete message whose frames are `frames`. True for a
    /// withheld `Browser.close`.
    fn decide(&mut self, plain: &[u8], frames: Forward, out: &mut Vec<Segment>) -> bool {
        if let Some((r, conn)) = &self.log {
            r.message(*conn, Dir::Up, plain);
        }
        match guard::judge_in(plain, &self.rules, &self.scope) {
            Verdict::Forward => match frames {
                Forward::Input(r) => push_input(out, r),
                Forward::Owned(v) => out.push(Segment::Owned(v)),
            },
            Verdict::BrowserClose => return true,
            Verdict::Refuse(reply) => self.answer(&reply),
            Verdict::Handoff(request) => {
                let reply = match &self.handoffs {
                    Some((h, conn)) => h.request(*conn, &request),
                    None => handoff::error_answer(
                        &request.id,
                        request.session_id.as_ref(),
                        handoff::SERVER_ERROR,
                        "Wallcrawler.requestHandoff: this controller has no live view URL",
                    ),
                };
                self.answer(&reply);
            }
            Verdict::Rewrite(payload) => {
                out.push(Segment::Owned(frame_of(OP_TEXT, &payload, true)))
            }
            Verdict::Unreadable => self.end(Fatal::Unreadable),
        }
        false
    }

    /// Queues `reply` (a complete CDP answer) for the client.
    fn answer(&mut self, reply: &str) {
        if let Some((r, conn)) = &self.log {
            r.message(*conn, Dir::Down, reply.as_bytes());
        }
        self.replies
            .extend(frame_of(OP_TEXT, reply.as_bytes(), false));
        if self.replies.len() > crate::edge::ws::MAX_QUEUED_REPLIES {
            self.end(Fatal::TooManyRefusals);
        }
    }

    fn end(&mut self, why: Fatal) {
        self.held = None;
        self.state = State::Ended(why);
    }

    /// A complete header was read: hold the frame, stream it (control frames) or end the
    /// connection. True when it completed a withheld `Browser.close` (an empty last fragment).
    fn start_frame(
        &mut self,
        h: Header,
        header: HeaderBytes,
        input: &[u8],
        out: &mut Vec<Segment>,
    ) -> bool {
        if h.is_control() {
            if h.opcode == OP_PONG && self.drop_pongs {
                // Header and payload go nowhere; a held message is untouched.
                self.state = match h.len {
                    0 => NO_HEADER,
                    n => State::Skip { remaining: n },
                };
                return false;
            }
            // Pings and pongs may overtake the held fragments; a close ends the message.
            if h.opcode == OP_CLOSE {
                self.held = None;
            }
            self.stream(h, header, out);
            return false;
        }
        let problem = match (&self.held, h.opcode) {
            (None, OP_TEXT) if h.len <= MAX_MESSAGE as u64 => None,
            (None, OP_TEXT) => Some(Fatal::TooLarge),
            (Some(held), OP_CONTINUATION) if held.can_take(&h) => None,
            (Some(_), OP_CONTINUATION) => Some(Fatal::TooLarge),
            (_, OP_TEXT | OP_CONTINUATION) => Some(Fatal::Unreadable),
            _ => Some(Fatal::Binary),
        };
        if let Some(why) = problem {
            self.end(why);
            return false;
        }
        let held = self.held.get_or_insert_with(Held::default);
        held.raw.extend_from_slice(header.bytes(input));
        let len = h.len as usize; // ≤ MAX_MESSAGE
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
        match self.held.take() {
            Some(held) => {
                let plain = held.payload();
                self.decide(&plain, Forward::Owned(held.raw), out)
            }
            None => false,
        }
    }

    /// Forwards a control frame's header and then its payload as it arrives.
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

/// The frames of a judged message, to forward if it passes.
enum Forward {
    /// In the input being fed.
    Input(Range<usize>),
    /// Held across reads.
    Owned(Vec<u8>),
}

impl Transform for Inspector {
    fn apply(&mut self, input: &[u8], out: &mut Vec<Segment>) -> bool {
        self.feed(input, out)
    }
}

impl Watch for Inspector {
    fn conn(&self) -> Option<u64> {
        Inspector::conn(self)
    }

    fn expires(&self) -> Option<std::time::Instant> {
        Inspector::expires(self)
    }

    fn fatal(&self) -> Option<Fatal> {
        Inspector::fatal(self)
    }

    fn take_replies(&mut self) -> Vec<u8> {
        Inspector::take_replies(self)
    }

    fn dropping_pongs(mut self: Box<Self>, drop: bool) -> Box<dyn Watch> {
        self.drop_pongs = drop;
        self
    }

    fn downstream_tap(&mut self) -> Option<Box<dyn crate::edge::ws::MessageTap>> {
        let (r, conn) = self.log.clone()?;
        Some(Box::new(DownTap::new(r, conn)))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::edge::ws::{Downstream, Pongs, frame_head};

    /// A masked client frame.
    pub(crate) fn frame(opcode: u8, fin: bool, payload: &[u8]) -> Vec<u8> {
        frame_with(opcode, fin, payload, Some([0x37, 0xfa, 0x21, 0x3d]))
    }

    /// A frame, masked with `mask` or not.
    pub(crate) fn frame_with(
        opcode: u8,
        fin: bool,
        payload: &[u8],
        mask: Option<[u8; 4]>,
    ) -> Vec<u8> {
        let first = (if fin { 0x80 } else { 0 }) | opcode;
        let mut f = frame_head(first, payload.len(), mask.is_some());
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
        stream.extend(frame(1, true, &vec![b'x'; 70_000])); // held and judged: no command
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
    fn a_browser_close_padded_past_64_kib_is_withheld() {
        let mut payload = br#"{"id":9,"method":"Browser.close","params":{"pad":""#.to_vec();
        payload.extend(vec![b'a'; 70_000]);
        payload.extend(br#""}}"#);
        let stream = frame(1, true, &payload);
        for chunk in [4096, 1 << 20] {
            let (out, seen) = run(&stream, chunk);
            assert!(seen, "chunk {chunk}");
            assert!(out.is_empty());
        }
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

    /// Feeds `stream` to `feed` in every two-piece split and in chunks of a few sizes; checks
    /// that what goes on is `want` each time.
    fn check_splits<F: FnMut(&[u8], &mut Vec<Segment>)>(
        stream: &[u8],
        want: &[u8],
        mut fresh: impl FnMut() -> F,
    ) {
        let pieces = (0..=stream.len())
            .map(|at| vec![&stream[..at], &stream[at..]])
            .chain([1, 2, 3, 5, 7, 100].map(|n| stream.chunks(n).collect()));
        for (i, split) in pieces.enumerate() {
            let mut feed = fresh();
            let mut got = Vec::new();
            for piece in split {
                let mut out = Vec::new();
                feed(piece, &mut out);
                got.extend(forwarded(piece, &out));
            }
            assert_eq!(got, want, "split {i}");
        }
    }

    /// A data message in three fragments with a pong (with a payload) and a ping between them,
    /// then a pong on its own and a last message: (the stream, what reaches Chrome).
    fn pongs_between_fragments(mask: Option<[u8; 4]>) -> (Vec<u8>, Vec<u8>) {
        let first = frame_with(1, false, br#"{"id":7,"method":"Target.getT"#, mask);
        let pong = frame_with(10, true, b"keepalive answer", mask);
        let ping = frame_with(9, true, b"", mask);
        let middle = frame_with(0, false, b"arge", mask);
        let last = frame_with(0, true, br#"ts"}"#, mask);
        let empty_pong = frame_with(10, true, b"", mask);
        let after = frame_with(1, true, br#"{"id":8,"method":"Page.enable"}"#, mask);
        let stream = [
            first.clone(),
            pong.clone(),
            middle.clone(),
            ping.clone(),
            pong,
            last.clone(),
            empty_pong,
            after.clone(),
        ]
        .concat();
        (stream, [first, middle, ping, last, after].concat())
    }

    #[test]
    fn pongs_are_dropped_between_fragments_and_across_reads() {
        for mask in MASKS {
            let (stream, want) = pongs_between_fragments(mask);
            check_splits(&stream, &want, || {
                let mut p = Pongs::default();
                move |input: &[u8], out: &mut Vec<Segment>| p.feed(input, out)
            });
        }
        // A pong longer than 125 bytes cannot be a valid control frame, but is still only
        // skipped by its length: what follows passes.
        let after = frame(1, true, b"{}");
        let stream = [frame(10, true, &[b'p'; 300]), after.clone()].concat();
        check_splits(&stream, &after, || {
            let mut p = Pongs::default();
            move |input: &[u8], out: &mut Vec<Segment>| p.feed(input, out)
        });
    }

    #[test]
    fn an_inspector_dropping_pongs_drops_them_between_fragments_and_across_reads() {
        for mask in MASKS {
            let (stream, _) = pongs_between_fragments(mask);
            // The ping overtakes the held fragments, as before; the pongs go nowhere.
            let first = frame_with(1, false, br#"{"id":7,"method":"Target.getT"#, mask);
            let middle = frame_with(0, false, b"arge", mask);
            let last = frame_with(0, true, br#"ts"}"#, mask);
            let ping = frame_with(9, true, b"", mask);
            let after = frame_with(1, true, br#"{"id":8,"method":"Page.enable"}"#, mask);
            let want = [ping, first, middle, last, after].concat();
            check_splits(&stream, &want, || {
                let mut i = Inspector::default().dropping_pongs(true);
                move |input: &[u8], out: &mut Vec<Segment>| {
                    assert!(!i.feed(input, out));
                    assert_eq!(i.fatal(), None);
                }
            });
        }
        // Without keepalive a pong is passed on.
        let pong = frame(10, true, b"x");
        let (out, _) = run(&pong, 1);
        assert_eq!(out, pong);
    }

    /// Every message the session's log was sent, as (direction, text).
    fn logged(rx: &mut crate::session_log::Receiver) -> Vec<(Dir, String)> {
        let mut got = Vec::new();
        while let Ok(i) = rx.try_recv() {
            if let crate::session_log::Item::Message(t) = i {
                got.push((t.dir, String::from_utf8(t.head).unwrap()));
            }
        }
        got
    }

    #[test]
    fn a_logged_connection_copies_each_judged_message_and_each_of_chromes() {
        let (r, mut rx, _) = Recorder::channel();
        let mut insp = Inspector::default().logging(Some(r), 7);
        let cmd = br#"{"id":1,"method":"Page.navigate","params":{"url":"http://127.0.0.1/"}}"#;
        let refused = br#"{"id":2,"method":"Extensions.loadUnpacked","params":{"path":"/etc"}}"#;
        let mut stream = frame(1, false, &cmd[..10]);
        stream.extend(frame(9, true, b"")); // a ping between the fragments: not a message
        stream.extend(frame(0, true, &cmd[10..]));
        stream.extend(frame(1, true, refused));
        for piece in stream.chunks(3) {
            insp.feed(piece, &mut Vec::new());
        }
        let got = logged(&mut rx);
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(got[0], (Dir::Up, String::from_utf8(cmd.to_vec()).unwrap()));
        assert_eq!(got[1].0, Dir::Up);
        // The proxy's own answer to the refused command, as Chrome's would be.
        assert_eq!(got[2].0, Dir::Down);
        let answer: serde_json::Value = serde_json::from_str(&got[2].1).unwrap();
        assert_eq!(answer["id"], 2, "{answer}");

        // Chrome's side: whole messages, however framed and split, control frames not.
        let mut d = Downstream::default().tapped(insp.downstream_tap());
        let answer = br#"{"id":1,"result":{"frameId":"F"}}"#;
        let mut down = frame_with(1, true, answer, None);
        down.extend(frame_with(9, true, b"pp", None));
        down.extend(frame_with(1, false, b"{\"method\":", None));
        down.extend(frame_with(10, true, b"", None));
        down.extend(frame_with(0, true, b"\"Page.frameNavigated\"}", None));
        down.extend(frame_with(1, true, b"", None));
        for piece in down.chunks(2) {
            d.feed(piece, &mut Vec::new());
        }
        let got = logged(&mut rx);
        assert_eq!(
            got,
            [
                (Dir::Down, String::from_utf8(answer.to_vec()).unwrap()),
                (Dir::Down, r#"{"method":"Page.frameNavigated"}"#.to_owned()),
                (Dir::Down, String::new()),
            ]
        );
        // Not logged: nothing is copied, and no tap is offered.
        let mut quiet = Inspector::default();
        assert!(quiet.downstream_tap().is_none());
    }

    #[test]
    fn a_close_from_chrome_is_noticed() {
        let mut d = Downstream::default();
        let mut out = Vec::new();
        d.feed(&frame_with(1, true, b"{}", None), &mut out);
        assert!(!d.closing());
        let close = frame_of(OP_CLOSE, &1000u16.to_be_bytes(), false);
        d.feed(&close[..1], &mut out);
        d.feed(&close[1..], &mut out);
        assert!(d.closing());
    }

    /// Feeds `stream` in chunks; the forwarded bytes and how the inspector ended.
    fn run_to_end(stream: &[u8], chunk: usize) -> (Vec<u8>, Option<Fatal>) {
        let mut insp = Inspector::default();
        let mut all = Vec::new();
        for piece in stream.chunks(chunk) {
            let mut out = Vec::new();
            insp.feed(piece, &mut out);
            all.extend(forwarded(piece, &out));
        }
        (all, insp.fatal())
    }

    #[test]
    fn a_message_past_the_limit_ends_the_connection_unforwarded() {
        let before = frame(1, true, br#"{"id":0,"method":"Page.enable"}"#);
        let mut pad = br#"{"id":1,"method":"Extensions.loadUnpacked","params":{"pad":""#.to_vec();
        pad.extend(vec![b' '; MAX_MESSAGE - pad.len()]);
        let first = frame(1, false, &pad); // exactly the limit: held
        let pong = frame(10, true, b"");
        let rest = frame(0, true, br#""}}"#); // one byte too many
        let after = frame(1, true, br#"{"id":2,"method":"Page.enable"}"#);
        let stream = [before.clone(), first, pong.clone(), rest, after].concat();
        for chunk in [1000, 1 << 20] {
            let (out, fatal) = run_to_end(&stream, chunk);
            assert_eq!(fatal, Some(Fatal::TooLarge));
            assert_eq!(out, [before.clone(), pong.clone()].concat());
        }
        let single = [before.clone(), frame(1, true, &vec![b' '; MAX_MESSAGE + 1])].concat();
        assert_eq!(
            run_to_end(&single, 1 << 16),
            (before, Some(Fatal::TooLarge))
        );
    }

    #[test]
    fn a_message_in_too_many_fragments_ends_the_connection() {
        let mut stream = frame(1, false, br#"{"method":"#);
        for _ in 0..MAX_FRAGMENTS - 1 {
            stream.extend(frame(0, false, b" "));
        }
        stream.extend(frame(0, true, br#""Extensions.loadUnpacked"}"#));
        for chunk in [5, 4096] {
            assert_eq!(
                run_to_end(&stream, chunk),
                (Vec::new(), Some(Fatal::TooLarge))
            );
        }
    }

    #[test]
    fn a_close_frame_drops_the_held_fragments() {
        let first = frame(1, false, br#"{"id":1,"method":"Browser.close""#);
        let close = frame(8, true, &[0x03, 0xe8]);
        let stream = [first, close.clone()].concat();
        check_everywhere(&stream, &close, false);
    }

    #[test]
    fn what_cannot_be_read_ends_the_connection() {
        for payload in [
            br#"{"id":1,"method":"Browser.getVersion","method":"Browser.close"}"#.as_slice(),
            br#"{"id":1,"method":"Browser.close","method":"Browser.getVersion"}"#,
            br#"{"id":1,"method":"Browser.close",}"#,
            br#"["Browser.close"]"#,
            br#"{"id":1,"method":["Browser.close"]}"#,
        ] {
            let stream = frame(1, true, payload);
            assert_eq!(
                run_to_end(&stream, 3),
                (Vec::new(), Some(Fatal::Unreadable))
            );
        }
        let binary = frame(2, true, br#"{"id":1,"method":"Browser.close"}"#);
        assert_eq!(run_to_end(&binary, 7), (Vec::new(), Some(Fatal::Binary)));
        // A continuation with no message started is out of order.
        let stray = frame(0, true, b"{}");
        assert_eq!(run_to_end(&stray, 7), (Vec::new(), Some(Fatal::Unreadable)));
    }

    #[test]
    fn refused_commands_are_answered_and_later_ones_pass() {
        let refused = frame(
            1,
            true,
            br#"{"id":5,"sessionId":"AB","method":"Extensions.loadUnpack\u0065d","params":{"path":"/tmp"}}"#,
        );
        let after = frame(1, true, br#"{"id":6,"method":"Page.enable"}"#);
        let stream = [refused, after.clone()].concat();
        for chunk in [1, 9, 4096] {
            let mut insp = Inspector::default();
            let mut all = Vec::new();
            for piece in stream.chunks(chunk) {
                let mut out = Vec::new();
                assert!(!insp.feed(piece, &mut out));
                all.extend(forwarded(piece, &out));
            }
            assert_eq!(all, after);
            assert_eq!(insp.fatal(), None);
            let replies = insp.take_replies();
            let (hl, h) = header_at(&replies).unwrap();
            assert!(h.mask.is_none() && h.fin && h.opcode == OP_TEXT);
            let v: serde_json::Value = serde_json::from_slice(&replies[hl..]).unwrap();
            assert_eq!(
                (v["id"].as_i64(), v["sessionId"].as_str()),
                (Some(5), Some("AB"))
            );
            assert_eq!(v["error"]["code"], -32000);
        }
    }

    #[test]
    fn a_rewritten_command_goes_on_as_a_masked_frame() {
        let c = frame(
            1,
            true,
            br#"{"id":1,"method":"Page.setDownloadBehavior","params":{"behavior":"allow","downloadPath":"/tmp"}}"#,
        );
        let dir = tempfile::tempdir().unwrap();
        let rules = FileRules::new(&dir.path().join("u"), &dir.path().join("d")).unwrap();
        let mut insp = Inspector::new(Arc::new(rules.clone()));
        let mut out = Vec::new();
        assert!(!insp.feed(&c, &mut out));
        let sent = forwarded(&c, &out);
        let (hl, h) = header_at(&sent).unwrap();
        assert!(h.mask.is_some() && h.fin && h.opcode == OP_TEXT);
        let plain = unmask(&sent[hl..], h.mask);
        let v: serde_json::Value = serde_json::from_slice(&plain).unwrap();
        assert_eq!(
            v["params"]["downloadPath"],
            rules.downloads().unwrap().to_str().unwrap()
        );
        // Without a downloads directory it is refused: nothing forwarded.
        let (out, _) = run(&c, 4096);
        assert!(out.is_empty());
    }

    #[test]
    fn answers_wait_for_the_end_of_chromes_message() {
        let reply = frame_of(OP_TEXT, br#"{"id":1,"error":{}}"#, false);
        let big = frame_with(1, true, &vec![b'x'; 300], None);
        let frag1 = frame_with(1, false, b"{", None);
        let ping = frame_with(9, true, b"", None);
        let frag2 = frame_with(0, true, b"}", None);
        let stream = [big.clone(), frag1.clone(), ping.clone(), frag2.clone()].concat();
        for at in 1..stream.len() {
            // Queued mid-way: it goes out at the first boundary after `at`.
            let mut d = Downstream::default();
            let mut out = Vec::new();
            d.feed(&stream[..at], &mut out);
            let mut got = forwarded(&stream[..at], &out);
            d.queue(reply.clone());
            let mut out = Vec::new();
            d.feed(&[], &mut out);
            got.extend(forwarded(&[], &out));
            let mut out = Vec::new();
            d.feed(&stream[at..], &mut out);
            got.extend(forwarded(&stream[at..], &out));
            let boundary = [0, big.len(), stream.len()]
                .into_iter()
                .find(|b| *b >= at)
                .unwrap();
            let want = [&stream[..boundary], &reply, &stream[boundary..]].concat();
            assert_eq!(got, want, "queued after {at}");
        }
    }

    #[test]
    fn browser_close_detection() {
        let r = FileRules::default();
        let close = |m: &[u8]| guard::judge(m, &r) == Verdict::BrowserClose;
        assert!(close(br#"{"id":1,"method":"Browser.close"}"#));
        assert!(close(
            br#"{"method":"Browser.close","id":1,"sessionId":"S"}"#
        ));
        assert!(!close(br#"{"id":1,"method":"Browser.closeX"}"#));
        assert!(!close(
            br#"{"id":1,"method":"Browser.getVersion","x":"Browser.close"}"#
        ));
        assert!(!close(b"Browser.close"));
    }
}
