//! The TLS copy: a client's TLS connection ended here, relayed to a plain socket on the runtime
//! (the relay thread moves bytes between sockets; TLS records need the session's keys), with
//! pooled buffers so an idle connection holds none.

use std::future::poll_fn;
use std::pin::Pin;
use std::task::Poll;

use tokio::net::TcpStream;

/// Buffer per direction of a TLS client's relay while bytes are in flight (plain connections use
/// the relay thread's shared buffers).
const TLS_RELAY_BUFFER: usize = 64 * 1024;
/// Free TLS relay buffers a runtime thread keeps for the next read (at most 1 MiB per thread).
const TLS_RELAY_POOL: usize = 16;

thread_local! {
    /// This thread's free TLS relay buffers: a direction takes one to read and gives it back as
    /// soon as its destination has taken every byte, so an idle connection holds none.
    static TLS_RELAY_BUFFERS: std::cell::RefCell<Vec<Box<[u8]>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

fn take_tls_buffer() -> Box<[u8]> {
    TLS_RELAY_BUFFERS
        .with(|pool| pool.borrow_mut().pop())
        .unwrap_or_else(|| vec![0; TLS_RELAY_BUFFER].into_boxed_slice())
}

fn give_back_tls_buffer(buf: Box<[u8]>) {
    TLS_RELAY_BUFFERS.with(|pool| {
        let mut pool = pool.borrow_mut();
        if pool.len() < TLS_RELAY_POOL {
            pool.push(buf);
        }
    });
}

/// One direction of a TLS client's relay: reads into a pooled buffer, writes it all out, and
/// owns the buffer only between the two (tokio's bidirectional copy keeps 64 KiB per direction
/// for the connection's whole life).
#[derive(Default)]
struct TlsLeg {
    buf: Option<Box<[u8]>>,
    pos: usize,
    cap: usize,
    read_done: bool,
    need_flush: bool,
    copied: u64,
}

impl TlsLeg {
    /// Reads into the empty buffer: `Ready` once bytes (or the end) are in; `Pending` with what
    /// was written pushed out (a TLS writer may still hold part of a record) and the buffer
    /// given back while nothing is in flight.
    fn poll_fill<R, W>(
        &mut self,
        cx: &mut std::task::Context<'_>,
        src: Pin<&mut R>,
        dst: Pin<&mut W>,
    ) -> Poll<std::io::Result<()>>
    where
        R: tokio::io::AsyncRead + ?Sized,
        W: tokio::io::AsyncWrite + ?Sized,
    {
        let mut buf = self.buf.take().unwrap_or_else(take_tls_buffer);
        let mut read = tokio::io::ReadBuf::new(&mut buf);
        match src.poll_read(cx, &mut read) {
            Poll::Ready(Ok(())) => {
                let n = read.filled().len();
                if n == 0 {
                    self.read_done = true;
                    give_back_tls_buffer(buf);
                } else {
                    (self.pos, self.cap) = (0, n);
                    self.buf = Some(buf);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => {
                give_back_tls_buffer(buf);
                Poll::Ready(Err(e))
            }
            Poll::Pending => {
                give_back_tls_buffer(buf);
                if self.need_flush {
                    std::task::ready!(dst.poll_flush(cx))?;
                    self.need_flush = false;
                }
                Poll::Pending
            }
        }
    }

    /// Copies until `src` ends, then shuts `dst` down; the bytes copied.
    fn poll_copy<R, W>(
        &mut self,
        cx: &mut std::task::Context<'_>,
        mut src: Pin<&mut R>,
        mut dst: Pin<&mut W>,
    ) -> Poll<std::io::Result<u64>>
    where
        R: tokio::io::AsyncRead + ?Sized,
        W: tokio::io::AsyncWrite + ?Sized,
    {
        loop {
            if self.pos == self.cap && !self.read_done {
                std::task::ready!(self.poll_fill(cx, src.as_mut(), dst.as_mut()))?;
            }
            if let Some(buf) = &mut self.buf {
                while self.pos < self.cap {
                    let n = match dst.as_mut().poll_write(cx, &buf[self.pos..self.cap]) {
                        Poll::Ready(n) => n?,
                        Poll::Pending => {
                            // The destination is full: read more behind the bytes waiting,
                            // so the next write is larger (as tokio's copy does).
                            if !self.read_done && self.cap < buf.len() {
                                let mut more = tokio::io::ReadBuf::new(&mut buf[self.cap..]);
                                if let Poll::Ready(r) = src.as_mut().poll_read(cx, &mut more) {
                                    r?;
                                    match more.filled().len() {
                                        0 => self.read_done = true,
                                        n => self.cap += n,
                                    }
                                }
                            }
                            return Poll::Pending;
                        }
                    };
                    if n == 0 {
                        return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
                    }
                    self.pos += n;
                    self.copied += n as u64;
                    self.need_flush = true;
                }
            }
            if let Some(buf) = self.buf.take() {
                give_back_tls_buffer(buf);
            }
            (self.pos, self.cap) = (0, 0);
            if self.read_done {
                std::task::ready!(dst.as_mut().poll_shutdown(cx))?;
                return Poll::Ready(Ok(self.copied));
            }
        }
    }
}

impl Drop for TlsLeg {
    fn drop(&mut self) {
        if let Some(buf) = self.buf.take() {
            give_back_tls_buffer(buf);
        }
    }
}

/// Copies both ways until both sides have ended (each end passed on as a shutdown), or either
/// fails, like `tokio::io::copy_bidirectional`; the bytes each way (client → task, task →
/// client).
pub(crate) async fn copy_tls_bidirectional(
    client: &mut tokio_rustls::server::TlsStream<TcpStream>,
    upstream: &mut TcpStream,
) -> std::io::Result<(u64, u64)> {
    let (mut up, mut down) = (TlsLeg::default(), TlsLeg::default());
    let (mut up_done, mut down_done) = (None, None);
    poll_fn(|cx| {
        if up_done.is_none()
            && let Poll::Ready(r) =
                up.poll_copy(cx, Pin::new(&mut *client), Pin::new(&mut *upstream))
        {
            up_done = Some(r?);
        }
        if down_done.is_none()
            && let Poll::Ready(r) =
                down.poll_copy(cx, Pin::new(&mut *upstream), Pin::new(&mut *client))
        {
            down_done = Some(r?);
        }
        match (up_done, down_done) {
            (Some(u), Some(d)) => Poll::Ready(Ok((u, d))),
            _ => Poll::Pending,
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::io::AsyncWriteExt as _;
    use tokio::net::TcpListener;

    use super::*;

    /// The TLS relay's own copy (buffers taken only while bytes are in flight): several MiB
    /// each way arrive intact, each side's end is passed on as a shutdown, and the counts are
    /// the bytes each way.
    #[tokio::test]
    async fn the_tls_copy_carries_megabytes_both_ways_and_passes_each_end_on() {
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::{CertificateDer, ServerName};
        use tokio::io::AsyncReadExt as _;

        let dir = tempfile::tempdir().unwrap();
        let ca = crate::tls::LocalCa::ensure(dir.path()).unwrap();
        let cert = Arc::new(crate::tls::ReloadingCert::load(ca.server.clone()).unwrap());
        let acceptor = tokio_rustls::TlsAcceptor::from(crate::tls::server_config(cert).unwrap());
        // The "task": echoes everything, then ends its side once the client's end arrives.
        let task = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let task_addr = task.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = task.accept().await.unwrap();
            let (mut r, mut w) = s.split();
            tokio::io::copy(&mut r, &mut w).await.unwrap();
            w.shutdown().await.unwrap();
        });
        let front = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let front_addr = front.local_addr().unwrap();
        let relay = tokio::spawn(async move {
            let (tcp, _) = front.accept().await.unwrap();
            let mut client = acceptor.accept(tcp).await.unwrap();
            let mut upstream = TcpStream::connect(task_addr).await.unwrap();
            copy_tls_bidirectional(&mut client, &mut upstream)
                .await
                .unwrap()
        });

        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(&ca.ca_cert).unwrap() {
            roots.add(c.unwrap()).unwrap();
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let tcp = TcpStream::connect(front_addr).await.unwrap();
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
            .await
            .unwrap();
        let sent: Vec<u8> = (0..3 * 1024 * 1024 + 7)
            .map(|i| (i * 31 % 251) as u8)
            .collect();
        let (mut r, mut w) = tokio::io::split(tls);
        let writer = {
            let sent = sent.clone();
            tokio::spawn(async move {
                w.write_all(&sent).await.unwrap();
                w.shutdown().await.unwrap();
            })
        };
        let mut back = Vec::new();
        r.read_to_end(&mut back).await.unwrap();
        writer.await.unwrap();
        assert!(back == sent, "the bytes came back changed");
        let n = sent.len() as u64;
        assert_eq!(relay.await.unwrap(), (n, n));
    }
}
