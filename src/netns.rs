//! Chrome's network (`CHROME_NETWORK`): a private network namespace per Chrome, so its DevTools
//! port (127.0.0.1:<port>, no token) is on a loopback only Chrome and the controller reach.
//!
//! On a machine shared by several users or browsers (the local platform, `local` mode), a
//! DevTools port on the host's loopback is open to every process of the machine: any user
//! could find it in `/proc/net/tcp` and drive the browser without going through the proxy.
//! With `private`, each Chrome gets a network namespace of its own:
//!
//! - a dedicated thread [`unshare`]s a new network namespace (network namespaces are
//!   per-thread, so the rest of the process stays in the host's), brings its `lo` up, keeps
//!   a descriptor of it, and serves the controller's requests: a TCP socket, or a listener,
//!   made inside it. A socket belongs to the namespace it was made in whichever thread uses
//!   it later, so only its creation goes through the thread: the connect itself runs on the
//!   runtime (dials never queue behind one another, e.g. behind Chrome's short listen
//!   backlog in a burst), and nothing per message changes.
//! - Chrome joins the namespace before it executes (`setns` in the child, before it drops
//!   to `CHROME_USER`), and its DevTools listens on 127.0.0.1 *there*: not in the host's
//!   `/proc/net/tcp` at all.
//! - Chrome has no route out of the namespace: its egress goes through a SOCKS5 server the
//!   controller runs on a listener inside it (`src/chrome/egress.rs`), dialling from the host's
//!   network. TCP only: QUIC, other UDP and WebRTC have no route from the namespace.
//!
//! Which platform uses what:
//!
//! | where | `CHROME_NETWORK` | why |
//! |---|---|---|
//! | the image on Fargate | `shared` (set in the Dockerfile) | awsvpc already gives the task a network namespace of its own, whose loopback is the browser's; Fargate grants no `CAP_SYS_ADMIN` to make another |
//! | the local platform (`serve`), `local` as root | `private` (the default with `CAP_SYS_ADMIN`) | many browsers and users on one machine |
//! | `local` unprivileged | refused at start unless `CHROME_NETWORK=shared` is set: no namespace can be made, and the shared loopback is never a silent default | another local user would reach the browser |
//!
//! The cost: one hop to the namespace's thread per dial (the socket's creation, a few
//! microseconds; a loopback dial measured the same as on the host, ~160 µs in a debug build),
//! none per message; egress through the controller's SOCKS5 server.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::sched::{CloneFlags, setns, unshare};
use rustix::thread::CapabilitySet;
use tokio::sync::{mpsc, oneshot};

/// Requests queued for the namespace's thread.
const QUEUE: usize = 64;

/// `CHROME_NETWORK`: where Chrome's DevTools port listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChromeNetwork {
    /// A network namespace of Chrome's own (needs `CAP_SYS_ADMIN`).
    Private,
    /// The controller's network: Chrome's port on the loopback every process here shares.
    Shared,
}

/// A `CHROME_NETWORK` that is neither `private` nor `shared`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("CHROME_NETWORK must be private or shared")]
pub struct UnknownNetwork;

impl std::str::FromStr for ChromeNetwork {
    type Err = UnknownNetwork;

    fn from_str(s: &str) -> Result<Self, UnknownNetwork> {
        match s {
            "private" => Ok(Self::Private),
            "shared" => Ok(Self::Shared),
            _ => Err(UnknownNetwork),
        }
    }
}

impl std::fmt::Display for ChromeNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Private => "private",
            Self::Shared => "shared",
        })
    }
}

/// What can go wrong with Chrome's network namespace.
#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    /// `CHROME_NETWORK=private` without the capability to make a namespace.
    #[error(
        "CHROME_NETWORK=private needs CAP_SYS_ADMIN (run the controller as root, or set CHROME_NETWORK=shared)"
    )]
    Privileges,
    /// No `CHROME_NETWORK`, and no capability to make the namespace the default asks for.
    #[error(
        "Chrome's DevTools port gets a network namespace of its own by default, which needs CAP_SYS_ADMIN: run the controller as root, or set CHROME_NETWORK=shared to put the port on this machine's loopback, where every local user can reach the browser without a token"
    )]
    NoDefault,
    /// The namespace could not be made or set up.
    #[error("making Chrome's network namespace failed")]
    Setup(#[source] io::Error),
    /// The namespace's thread has gone (it only ends when its handle drops).
    #[error("Chrome's network namespace is gone")]
    Gone,
}

/// Whether this process may make network namespaces.
pub fn can_make_namespaces() -> bool {
    rustix::thread::capabilities(None)
        .map(|c| c.effective.contains(CapabilitySet::SYS_ADMIN))
        .unwrap_or(false)
}

/// The network Chrome gets: the setting, else `private`, which needs this process to be able
/// to make namespaces (`can`). Never a silent fall back to the shared loopback: without the
/// capability, only an explicit `shared` starts.
pub fn decide(setting: Option<ChromeNetwork>, can: bool) -> Result<ChromeNetwork, NetnsError> {
    match (setting, can) {
        (Some(ChromeNetwork::Private), false) => Err(NetnsError::Privileges),
        (None, false) => Err(NetnsError::NoDefault),
        (Some(n), _) => Ok(n),
        (None, true) => Ok(ChromeNetwork::Private),
    }
}

/// What the namespace's thread is asked to do.
enum Request {
    /// A TCP socket (not connected) of `addr`'s family.
    Socket(SocketAddr, oneshot::Sender<io::Result<OwnedFd>>),
    Listen(
        SocketAddr,
        oneshot::Sender<io::Result<std::net::TcpListener>>,
    ),
}

/// A private network namespace and the thread that makes sockets in it. The thread, and the
/// namespace once no process is in it any more, end when this drops.
#[derive(Debug)]
pub struct NetNs {
    /// Held by this handle (and its clones' owners); the thread ends when it closes.
    requests: mpsc::Sender<Request>,
    /// The namespace (`/proc/thread-self/ns/net` of the thread), for Chrome to join.
    fd: OwnedFd,
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Socket(a, _) => write!(f, "Socket({a})"),
            Self::Listen(a, _) => write!(f, "Listen({a})"),
        }
    }
}

impl NetNs {
    /// Makes a namespace with its loopback up, on a thread of its own.
    pub async fn new() -> Result<NetNs, NetnsError> {
        let (requests, rx) = mpsc::channel(QUEUE);
        let (ready_tx, ready_rx) = oneshot::channel();
        std::thread::Builder::new()
            .name("chrome-netns".into())
            .spawn(move || match enter() {
                Ok(fd) => {
                    if ready_tx.send(Ok(fd)).is_ok() {
                        serve(rx);
                    }
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                }
            })
            .map_err(NetnsError::Setup)?;
        let fd = ready_rx
            .await
            .map_err(|_| NetnsError::Gone)?
            .map_err(NetnsError::Setup)?;
        Ok(NetNs { requests, fd })
    }

    /// A TCP connection to `addr` inside the namespace: the socket made there, connected here.
    pub async fn connect(&self, addr: SocketAddr) -> io::Result<tokio::net::TcpStream> {
        let (tx, rx) = oneshot::channel();
        self.ask(Request::Socket(addr, tx)).await?;
        let fd = rx.await.map_err(|_| gone())??;
        tokio::net::TcpSocket::from_std_stream(std::net::TcpStream::from(fd))
            .connect(addr)
            .await
    }

    /// A listener on `addr` inside the namespace.
    pub async fn listen(&self, addr: SocketAddr) -> io::Result<tokio::net::TcpListener> {
        let (tx, rx) = oneshot::channel();
        self.ask(Request::Listen(addr, tx)).await?;
        let listener = rx.await.map_err(|_| gone())??;
        tokio::net::TcpListener::from_std(listener)
    }

    async fn ask(&self, request: Request) -> io::Result<()> {
        self.requests.send(request).await.map_err(|_| gone())
    }

    /// Moves the calling thread into the namespace. For a child about to exec (Chrome), before
    /// it gives up its privileges: `setns` needs `CAP_SYS_ADMIN`.
    pub fn join(&self) -> io::Result<()> {
        Ok(setns(self.fd.as_fd(), CloneFlags::CLONE_NEWNET)?)
    }
}

fn gone() -> io::Error {
    io::Error::other(NetnsError::Gone)
}

/// On the namespace's thread: a new network namespace, its loopback up, and its descriptor.
/// (Tests also run in one of their own, so that a check meant to stop a packet to a
/// non-loopback address can fail without the packet leaving the machine.)
pub(crate) fn enter() -> io::Result<OwnedFd> {
    unshare(CloneFlags::CLONE_NEWNET)?;
    loopback_up()?;
    Ok(std::fs::File::open("/proc/thread-self/ns/net")?.into())
}

/// Serves requests until every handle has dropped.
fn serve(mut rx: mpsc::Receiver<Request>) {
    while let Some(request) = rx.blocking_recv() {
        match request {
            Request::Socket(addr, reply) => {
                let _ = reply.send(tcp_socket(addr));
            }
            Request::Listen(addr, reply) => {
                let l = std::net::TcpListener::bind(addr)
                    .and_then(|l| l.set_nonblocking(true).map(|()| l));
                let _ = reply.send(l);
            }
        }
    }
}

/// A non-blocking TCP socket of `addr`'s family, in the calling thread's namespace.
fn tcp_socket(addr: SocketAddr) -> io::Result<OwnedFd> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socket};
    let family = match addr {
        SocketAddr::V4(_) => AddressFamily::Inet,
        SocketAddr::V6(_) => AddressFamily::Inet6,
    };
    Ok(socket(
        family,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        None,
    )?)
}

/// Sets `IFF_UP` on `lo` (a new namespace's loopback starts down): the two interface-flag
/// ioctls, which neither nix nor rustix wraps — a netlink library for one flag would be more
/// code than this.
#[allow(unsafe_code)]
fn loopback_up() -> io::Result<()> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socket};
    let sock = socket(
        AddressFamily::Inet,
        SockType::Datagram,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    // SAFETY: `ifreq` is plain old data; all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads the name and writes the flags member of the `ifreq` we own,
    // on a socket we own.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS as _, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFFLAGS filled the flags member of the union.
    unsafe { req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
    // SAFETY: as above; SIOCSIFFLAGS only reads the `ifreq`.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS as _, &req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_setting_parses_and_defaults_on_the_capability() {
        assert_eq!("private".parse(), Ok(ChromeNetwork::Private));
        assert_eq!("shared".parse(), Ok(ChromeNetwork::Shared));
        assert!("host".parse::<ChromeNetwork>().is_err());
        use ChromeNetwork::*;
        assert_eq!(decide(None, true).unwrap(), Private);
        assert!(matches!(decide(None, false), Err(NetnsError::NoDefault)));
        assert_eq!(decide(Some(Shared), false).unwrap(), Shared);
        assert_eq!(decide(Some(Shared), true).unwrap(), Shared);
        assert_eq!(decide(Some(Private), true).unwrap(), Private);
        assert!(matches!(
            decide(Some(Private), false),
            Err(NetnsError::Privileges)
        ));
    }

    #[tokio::test]
    async fn a_listener_in_the_namespace_is_reached_only_through_it() {
        if !can_make_namespaces() {
            return;
        }
        let ns = NetNs::new().await.unwrap();
        let listener = ns
            .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = tokio::spawn(async move { listener.accept().await.map(|_| ()) });
        ns.connect(addr).await.unwrap();
        accepted.await.unwrap().unwrap();
        // The host's loopback has no such listener (the port may be taken there by chance
        // by something else; a refusal is what we expect almost always).
        let on_host = ns
            .listen(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .unwrap();
        let port = on_host.local_addr().unwrap().port();
        let host = tokio::net::TcpStream::connect(("127.0.0.1", port)).await;
        assert!(host.is_err(), "port {port} answered on the host's loopback");
    }
}
