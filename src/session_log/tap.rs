//! The copy of Chrome's messages to one client, as they stream past the relay: a message's
//! first bytes (up to the entry's bound) and its last few, gathered without holding the
//! message, then queued for the writer (never blocking: see [`super::Recorder`]).

use wallcrawler_contract::session_log::MAX_RAW_BODY;

use super::matcher::{Dir, TAIL, Tapped};
use super::{Recorder, now_ms};
use crate::edge::ws::MessageTap;

/// One connection's tap on Chrome's messages.
#[derive(Debug)]
pub(crate) struct DownTap {
    recorder: Recorder,
    conn: u64,
    head: Vec<u8>,
    /// The message's latest bytes past `head` (at most 2 × [`TAIL`], trimmed to [`TAIL`]).
    tail: Vec<u8>,
    len: usize,
    /// When the message's first bytes passed.
    at: u64,
}

impl DownTap {
    /// The tap of connection `conn`, recording through `recorder`.
    pub(crate) fn new(recorder: Recorder, conn: u64) -> Self {
        Self {
            recorder,
            conn,
            head: Vec::new(),
            tail: Vec::new(),
            len: 0,
            at: 0,
        }
    }
}

impl MessageTap for DownTap {
    fn payload(&mut self, mut bytes: &[u8]) {
        if self.len == 0 {
            self.at = now_ms();
        }
        self.len += bytes.len();
        let room = MAX_RAW_BODY - self.head.len();
        if room > 0 {
            let n = room.min(bytes.len());
            self.head.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
        if bytes.len() >= TAIL {
            self.tail.clear();
            self.tail.extend_from_slice(&bytes[bytes.len() - TAIL..]);
        } else if !bytes.is_empty() {
            self.tail.extend_from_slice(bytes);
            if self.tail.len() > 2 * TAIL {
                self.tail.drain(..self.tail.len() - TAIL);
            }
        }
    }

    fn end(&mut self) {
        let mut tail = std::mem::take(&mut self.tail);
        if tail.len() > TAIL {
            tail.drain(..tail.len() - TAIL);
        }
        let t = Tapped {
            conn: self.conn,
            dir: Dir::Down,
            at: if self.len == 0 { now_ms() } else { self.at },
            head: std::mem::take(&mut self.head),
            tail,
            len: std::mem::take(&mut self.len),
        };
        self.recorder.tapped(t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session_log::Item;

    #[test]
    fn a_streamed_message_is_copied_as_its_start_and_end() {
        let (r, mut rx, _) = Recorder::channel();
        let mut tap = DownTap::new(r, 3);
        let mut msg = vec![b'a'; MAX_RAW_BODY + 5000];
        msg.extend_from_slice(br#","sessionId":"S"}"#);
        for piece in msg.chunks(777) {
            tap.payload(piece);
        }
        tap.end();
        tap.payload(b"{}");
        tap.end();
        let Ok(Item::Message(t)) = rx.try_recv() else {
            panic!("a message")
        };
        assert_eq!((t.conn, t.dir, t.len), (3, Dir::Down, msg.len()));
        assert_eq!(t.head, msg[..MAX_RAW_BODY]);
        assert_eq!(t.tail, msg[msg.len() - TAIL..]);
        let Ok(Item::Message(t)) = rx.try_recv() else {
            panic!("a second message")
        };
        assert_eq!(
            (t.head.as_slice(), t.tail.len(), t.len),
            (b"{}".as_slice(), 0, 2)
        );
    }
}
