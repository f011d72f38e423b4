//! The PROXY protocol v2 header (HAProxy's specification, what an AWS Network Load Balancer
//! sends when its target group has it on): the client's real address, put before the
//! connection's own bytes by the load balancer in front of the connect gateway, or by the
//! gateway in front of a task.
//!
//! It is taken **only from configured networks** ([`TrustedNetworks`]): anyone else who sends
//! one is just a client whose request starts with bytes no HTTP request starts with, and gets
//! the HTTP edge's 400. From a trusted peer the header is optional (a peer that sends none
//! speaks for itself), read with exactly its own length (at most 16 + 65,535 bytes, the
//! format's bound), so whatever follows it stays in the socket for the HTTP edge. Parsing is
//! the `ppp` crate's.
//!
//! The header also says whether the client's connection was TLS (the `PP2_TYPE_SSL` TLV with
//! its client bit): a task behind the gateway writes `wss://` URLs in its `/json` answers then.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use ipnet::IpNet;
use ppp::v2::{self, Addresses, Command, Header, Protocol, Type, Version};
use tokio::io::{AsyncRead, AsyncReadExt as _};
use tokio::net::TcpStream;

/// The fixed part of a v2 header: the 12-byte signature, version and command, family and
/// protocol, and the 16-bit length of what follows.
const FIXED_LEN: usize = 16;

/// The `PP2_TYPE_SSL` TLV's client bit: the client's connection was TLS.
const PP2_CLIENT_SSL: u8 = 0x01;

/// The networks whose connections may carry a PROXY header (a load balancer's subnets, the
/// gateway's). Empty: nobody's header is taken.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedNetworks(Vec<IpNet>);

/// A network list that does not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("'{0}' is not an address or a network in CIDR notation (10.0.0.0/16, fd00::/8)")]
pub struct NetworkListError(pub String);

impl FromStr for TrustedNetworks {
    type Err = NetworkListError;

    /// A comma-separated list of networks (`10.0.0.0/16`) or single addresses (`10.0.1.7`);
    /// blank items are ignored, so an empty string is an empty list.
    fn from_str(list: &str) -> Result<Self, Self::Err> {
        list.split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(|item| {
                item.parse::<IpNet>()
                    .or_else(|_| item.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| NetworkListError(item.to_owned()))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Self)
    }
}

impl TrustedNetworks {
    /// Whether a connection from `ip` may carry a header (IPv4-mapped IPv6 counts as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0.iter().any(|net| net.contains(&ip))
    }

    /// No network is trusted.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Who a connection speaks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// No header, or a `LOCAL` one (the load balancer's own health check): the peer itself.
    Direct,
    /// A `PROXY` header: the client's address, and whether its connection was TLS.
    Forwarded {
        /// The client's address and port.
        client: SocketAddr,
        /// The client's connection to the sender was TLS.
        tls: bool,
    },
}

/// A header that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HeaderError {
    /// It starts as a PROXY v2 header but is not a valid one.
    #[error("malformed PROXY protocol header")]
    Malformed,
    /// The peer closed the connection before a whole header arrived.
    #[error("connection closed before the PROXY protocol header was complete")]
    Closed,
    /// Reading failed.
    #[error("reading the PROXY protocol header: {0}")]
    Io(#[source] io::Error),
}

impl From<io::Error> for HeaderError {
    fn from(e: io::Error) -> Self {
        match e.kind() {
            io::ErrorKind::UnexpectedEof => Self::Closed,
            _ => Self::Io(e),
        }
    }
}

/// Reads the header a **trusted** peer may have put first, leaving every byte after it in the
/// socket; `Source::Direct` when the connection does not start with one (nothing is consumed
/// then). The caller bounds the time (the header deadline) and decides trust first: never call
/// this for an untrusted peer.
pub async fn read(stream: &mut TcpStream) -> Result<Source, HeaderError> {
    let mut first = [0u8; FIXED_LEN];
    let n = stream.peek(&mut first).await?;
    if n == 0 {
        return Err(HeaderError::Closed);
    }
    let seen = n.min(v2::PROTOCOL_PREFIX.len());
    if first[..seen] != v2::PROTOCOL_PREFIX[..seen] {
        return Ok(Source::Direct);
    }
    // It starts like the signature (no HTTP request does): from here on it is a header or an
    // error, so the bytes are consumed.
    read_header(stream).await
}

/// Reads one whole header from `r` (signature included).
pub(crate) async fn read_header(r: &mut (impl AsyncRead + Unpin)) -> Result<Source, HeaderError> {
    let mut head = [0u8; FIXED_LEN];
    r.read_exact(&mut head).await?;
    if head[..v2::PROTOCOL_PREFIX.len()] != *v2::PROTOCOL_PREFIX {
        return Err(HeaderError::Malformed);
    }
    let len = usize::from(u16::from_be_bytes([head[14], head[15]]));
    let mut whole = Vec::with_capacity(FIXED_LEN + len);
    whole.extend_from_slice(&head);
    whole.resize(FIXED_LEN + len, 0);
    r.read_exact(&mut whole[FIXED_LEN..]).await?;
    let header = Header::try_from(whole.as_slice()).map_err(|_| HeaderError::Malformed)?;
    Ok(source_of(&header))
}

fn source_of(header: &Header<'_>) -> Source {
    if header.command == Command::Local {
        return Source::Direct;
    }
    let client = match header.addresses {
        Addresses::IPv4(a) => SocketAddr::from((a.source_address, a.source_port)),
        Addresses::IPv6(a) => SocketAddr::from((a.source_address, a.source_port)),
        // The specification: with an unknown family, use the connection's own addresses.
        Addresses::Unspecified | Addresses::Unix(_) => return Source::Direct,
    };
    let tls = header.tlvs().flatten().any(|tlv| {
        tlv.kind == Type::SSL as u8 && tlv.value.first().is_some_and(|f| f & PP2_CLIENT_SSL != 0)
    });
    Source::Forwarded {
        client: SocketAddr::new(client.ip().to_canonical(), client.port()),
        tls,
    }
}

/// The header the gateway puts before a connection it opens to a task: `client` (connected to
/// `local`), and with `tls` the `PP2_TYPE_SSL` TLV with the client bit. (Writing into a Vec
/// does not fail, and two addresses and one TLV are far below the format's 64 KiB bound: the
/// error is `ppp`'s signature, not a case that happens.)
pub fn encode(client: SocketAddr, local: SocketAddr, tls: bool) -> io::Result<Vec<u8>> {
    let addresses: Addresses = match (client, local) {
        (SocketAddr::V4(c), SocketAddr::V4(l)) => (SocketAddr::V4(c), SocketAddr::V4(l)).into(),
        // One family for both: IPv4 as IPv4-mapped IPv6.
        _ => (v6(client), v6(local)).into(),
    };
    let builder =
        v2::Builder::with_addresses(Version::Two | Command::Proxy, Protocol::Stream, addresses);
    let builder = if tls {
        // Client flags, then the 32-bit verify result (0: no client certificate was verified).
        builder.write_tlv(Type::SSL, [PP2_CLIENT_SSL, 0, 0, 0, 0].as_slice())
    } else {
        Ok(builder)
    };
    builder.and_then(v2::Builder::build)
}

fn v6(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V4(v4) => SocketAddr::from((v4.ip().to_ipv6_mapped(), v4.port())),
        v6 => v6,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt as _;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn networks_parse_lists_single_addresses_and_refuse_the_rest() {
        let n: TrustedNetworks = " 10.0.0.0/16, 192.0.2.7 ,fd00::/8,".parse().unwrap();
        assert!(n.contains("10.0.200.1".parse().unwrap()));
        assert!(n.contains("192.0.2.7".parse().unwrap()));
        assert!(!n.contains("192.0.2.8".parse().unwrap()));
        assert!(n.contains("fd00::1".parse().unwrap()));
        assert!(
            n.contains("::ffff:10.0.0.1".parse().unwrap()),
            "IPv4-mapped"
        );
        assert!(!n.contains("127.0.0.1".parse().unwrap()));
        assert!("".parse::<TrustedNetworks>().unwrap().is_empty());
        assert_eq!(
            "10.0.0.0/16,10.0.0.0/33".parse::<TrustedNetworks>(),
            Err(NetworkListError("10.0.0.0/33".into()))
        );
        assert_eq!(
            "example.com".parse::<TrustedNetworks>(),
            Err(NetworkListError("example.com".into()))
        );
    }

    async fn round_trip(bytes: &[u8]) -> Result<Source, HeaderError> {
        read_header(&mut &bytes[..]).await
    }

    #[tokio::test]
    async fn encoded_headers_read_back_as_the_client() {
        for (client, local, tls) in [
            ("203.0.113.9:50000", "10.0.1.5:9223", false),
            ("203.0.113.9:50000", "10.0.1.5:9223", true),
            ("[2001:db8::9]:443", "[fd00::5]:9223", true),
            ("203.0.113.9:1", "[fd00::5]:9223", false),
        ] {
            let got = round_trip(&encode(addr(client), addr(local), tls).unwrap())
                .await
                .unwrap();
            assert_eq!(
                got,
                Source::Forwarded {
                    client: addr(client),
                    tls
                },
                "{client} {local} {tls}"
            );
        }
    }

    #[tokio::test]
    async fn local_commands_and_unknown_families_speak_for_the_peer() {
        let local = v2::Builder::new(Version::Two | Command::Local, 0)
            .build()
            .unwrap();
        assert_eq!(round_trip(&local).await.unwrap(), Source::Direct);
        let unspec = v2::Builder::new(Version::Two | Command::Proxy, 0)
            .build()
            .unwrap();
        assert_eq!(round_trip(&unspec).await.unwrap(), Source::Direct);
    }

    #[tokio::test]
    async fn broken_headers_are_refused() {
        let good = encode(addr("203.0.113.9:5"), addr("10.0.0.1:9223"), false).unwrap();
        // Version 1 in a v2 header, a truncated one, a lying length.
        let mut bad_version = good.clone();
        bad_version[12] = 0x11;
        assert!(matches!(
            round_trip(&bad_version).await,
            Err(HeaderError::Malformed)
        ));
        assert!(matches!(
            round_trip(&good[..good.len() - 3]).await,
            Err(HeaderError::Closed)
        ));
        let mut short_len = good.clone();
        short_len[15] = 4; // IPv4 addresses need 12 bytes
        assert!(matches!(
            round_trip(&short_len[..20]).await,
            Err(HeaderError::Malformed)
        ));
    }

    /// The header comes off the socket exactly: the request after it is the HTTP edge's; and a
    /// connection without a header loses nothing.
    #[tokio::test]
    async fn read_takes_exactly_the_header_off_the_socket() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = listener.local_addr().unwrap();
        let request = b"GET /json/version HTTP/1.1\r\nHost: x\r\n\r\n";
        for with_header in [true, false] {
            let mut client = TcpStream::connect(at).await.unwrap();
            let (mut server, _) = listener.accept().await.unwrap();
            let mut sent = Vec::new();
            if with_header {
                sent.extend(encode(addr("198.51.100.4:6000"), at, true).unwrap());
            }
            sent.extend_from_slice(request);
            client.write_all(&sent).await.unwrap();
            let source = read(&mut server).await.unwrap();
            if with_header {
                assert_eq!(
                    source,
                    Source::Forwarded {
                        client: addr("198.51.100.4:6000"),
                        tls: true
                    }
                );
            } else {
                assert_eq!(source, Source::Direct);
            }
            let mut rest = vec![0u8; request.len()];
            server.read_exact(&mut rest).await.unwrap();
            assert_eq!(rest, request);
        }
    }

    #[tokio::test]
    async fn a_peer_that_closes_at_once_is_closed() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (mut server, _) = listener.accept().await.unwrap();
        drop(client);
        assert!(matches!(read(&mut server).await, Err(HeaderError::Closed)));
    }
}
