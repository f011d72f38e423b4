//! A connection's first request line read with a path-less target (`GET ?signingKey=… HTTP/1.1`)
//! amended to origin form (`GET /?signingKey=…`), before hyper parses it.
//!
//! tungstenite-based clients (chromiumoxide among them) send a `ws://host:port?q` URL's empty
//! path as is, and hyper refuses such a target as malformed (it is not origin form) before any
//! of our code sees the request. The amendment is one `/`, only where the target starts with
//! `?`, only in a connection's first request (the proxy and the gateway answer one request per
//! connection); every other target, absolute ones and `*` included, reaches hyper unchanged and
//! keeps its refusal.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Longest method read before giving up on the line (the longest registered one is 17 bytes).
const MAX_METHOD: usize = 32;

/// Where the scan of a connection's first request line stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scan {
    /// In the method, this many bytes of it read.
    Method(usize),
    /// Past the method and its space: the next byte starts the target.
    Target,
    /// Decided: nothing (more) to amend.
    Done,
}

impl Scan {
    /// Reads `bytes`, the line's next ones: the state after them, and where in `bytes` a `/`
    /// goes (before the `?` that starts a path-less target).
    fn feed(mut self, bytes: &[u8]) -> (Self, Option<usize>) {
        for (i, &b) in bytes.iter().enumerate() {
            self = match self {
                Self::Method(n) if b == b' ' && n > 0 => Self::Target,
                Self::Method(n) if n < MAX_METHOD && is_token(b) => Self::Method(n + 1),
                Self::Target if b == b'?' => return (Self::Done, Some(i)),
                Self::Method(_) | Self::Target | Self::Done => return (Self::Done, None),
            };
        }
        (self, None)
    }
}

/// A `tchar` of RFC 9110: what a method is made of.
fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The request line `line` with a path-less target amended (`GET ?q` → `GET /?q`); any other
/// line as it is. The whole-line form of what [`OriginForm`] does on the fly.
#[cfg(test)]
fn amended(line: &[u8]) -> Vec<u8> {
    let mut out = line.to_vec();
    if let (_, Some(at)) = Scan::Method(0).feed(line) {
        out.insert(at, b'/');
    }
    out
}

/// A client's stream whose first request line is read amended (see the module). Writes pass
/// through; once the line's target has begun, so do reads.
#[derive(Debug)]
pub(crate) struct OriginForm<I> {
    inner: I,
    scan: Scan,
    /// A byte read from `inner` that the `/` pushed out of a full read buffer: the next
    /// read's first.
    held: Option<u8>,
}

impl<I> OriginForm<I> {
    pub(crate) fn new(inner: I) -> Self {
        Self {
            inner,
            scan: Scan::Method(0),
            held: None,
        }
    }

    /// The stream, and a byte read from it but not yet delivered (if the `/` pushed one out
    /// of the last read and nothing has read since).
    pub(crate) fn into_inner(self) -> (I, Option<u8>) {
        (self.inner, self.held)
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for OriginForm<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.scan == Scan::Done && this.held.is_none() {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        if let Some(b) = this.held {
            if buf.remaining() > 0 {
                buf.put_slice(&[b]);
                this.held = None;
            }
            return Poll::Ready(Ok(()));
        }
        let start = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        let (scan, at) = this.scan.feed(&buf.filled()[start..]);
        this.scan = scan;
        if let Some(at) = at {
            this.held = insert_slash(buf, start + at);
        }
        Poll::Ready(Ok(()))
    }
}

/// Puts a `/` at `at` in `buf`'s filled bytes, shifting the rest right; the last byte when
/// `buf` has no room for one more.
fn insert_slash(buf: &mut ReadBuf<'_>, at: usize) -> Option<u8> {
    let len = buf.filled().len();
    // The bytes from `at` to `kept` move one right; a byte past them is pushed out.
    let (kept, held) = if buf.remaining() > 0 {
        buf.put_slice(b"/");
        (len, None)
    } else {
        (len - 1, Some(buf.filled()[len - 1]))
    };
    let filled = buf.filled_mut();
    filled.copy_within(at..kept, at + 1);
    filled[at] = b'/';
    held
}

impl<I: AsyncWrite + Unpin> AsyncWrite for OriginForm<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use tokio::io::AsyncReadExt as _;

    use super::*;

    #[test]
    fn a_path_less_target_is_read_as_the_root_path() {
        assert_eq!(
            amended(b"GET ?signingKey=a.b.c HTTP/1.1"),
            b"GET /?signingKey=a.b.c HTTP/1.1"
        );
        assert_eq!(amended(b"OPTIONS ?x HTTP/1.1"), b"OPTIONS /?x HTTP/1.1");
    }

    #[test]
    fn every_other_target_is_left_as_it_is() {
        for line in [
            "GET /?signingKey=a HTTP/1.1",
            "GET /devtools/browser/x?signingKey=a HTTP/1.1",
            "GET http://evil/?signingKey=a HTTP/1.1",
            "GET * HTTP/1.1",
            "GET  ?signingKey=a HTTP/1.1",
            " GET ?signingKey=a HTTP/1.1",
            "\r\nGET ?signingKey=a HTTP/1.1",
            "G(T ?signingKey=a HTTP/1.1",
            "GET",
            "",
        ] {
            assert_eq!(amended(line.as_bytes()), line.as_bytes(), "{line:?}");
        }
        let long = format!("{} ?x HTTP/1.1", "A".repeat(MAX_METHOD + 1));
        assert_eq!(amended(long.as_bytes()), long.as_bytes());
        let longest = format!("{} ?x HTTP/1.1", "A".repeat(MAX_METHOD));
        assert_eq!(
            amended(longest.as_bytes()),
            format!("{} /?x HTTP/1.1", "A".repeat(MAX_METHOD)).as_bytes()
        );
    }

    #[test]
    fn only_the_first_target_of_a_connection_is_read() {
        let two = b"GET /a HTTP/1.1\r\n\r\nGET ?b HTTP/1.1\r\n\r\n";
        assert_eq!(amended(two), two);
    }

    /// A reader handing out `chunks` one per read.
    struct Chunks(VecDeque<&'static [u8]>);

    impl AsyncRead for Chunks {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            if let Some(c) = self.0.pop_front() {
                let n = c.len().min(buf.remaining());
                buf.put_slice(&c[..n]);
                if n < c.len() {
                    self.0.push_front(&c[n..]);
                }
            }
            Poll::Ready(Ok(()))
        }
    }

    /// Everything read through [`OriginForm`] from `chunks`, `size` bytes at most per read.
    async fn read_all(chunks: &[&'static [u8]], size: usize) -> Vec<u8> {
        let mut r = OriginForm::new(Chunks(chunks.iter().copied().collect()));
        let mut out = Vec::new();
        let mut buf = vec![0; size];
        loop {
            let n = r.read(&mut buf).await.unwrap();
            if n == 0 {
                return out;
            }
            out.extend_from_slice(&buf[..n]);
        }
    }

    #[tokio::test]
    async fn the_line_is_amended_however_it_is_split_and_whatever_the_buffer() {
        let sent: &[u8] = b"GET ?signingKey=t HTTP/1.1\r\nHost: h\r\n\r\n\x81\x00";
        let want = b"GET /?signingKey=t HTTP/1.1\r\nHost: h\r\n\r\n\x81\x00";
        for split in 1..sent.len() {
            let (a, b) = sent.split_at(split);
            for size in [1, 2, 4, 5, 64] {
                assert_eq!(
                    read_all(&[a, b], size).await,
                    want,
                    "split at {split}, reads of {size}"
                );
            }
        }
        let bytewise: Vec<&'static [u8]> = sent.chunks(1).collect();
        assert_eq!(read_all(&bytewise, 64).await, want);
        let root = b"GET /?signingKey=t HTTP/1.1\r\n\r\n";
        assert_eq!(read_all(&[root], 5).await, root);
    }

    #[tokio::test]
    async fn a_byte_pushed_out_of_a_full_buffer_comes_back_with_the_stream() {
        let mut r = OriginForm::new(Chunks([&b"GET ?q"[..]].into()));
        let mut buf = [0; 6];
        r.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"GET /?");
        assert_eq!(r.into_inner().1, Some(b'q'));
    }
}
