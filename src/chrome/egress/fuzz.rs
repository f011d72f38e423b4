//! Fuzz targets for the egress hop: the SOCKS5 handshake Chrome sends (its destinations are a
//! page's choice) and the policy's decision for every destination whatever `EGRESS_ALLOW` says.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use wallcrawler_testkit::fuzz::proptest::prelude::*;
use wallcrawler_testkit::fuzz::{self, hostile_bytes, hostile_text};

use super::policy::{EC2_METADATA_V6, EgressAllow};
use super::{Hop, handshake};

/// Link-local and metadata destinations, as IPv4, IPv6 and IPv4-mapped IPv6.
fn never_reachable() -> impl Strategy<Value = SocketAddr> {
    let v4 = any::<[u8; 2]>().prop_map(|[c, d]| IpAddr::V4(Ipv4Addr::new(169, 254, c, d)));
    let v6 = any::<[u16; 7]>().prop_map(|s| {
        IpAddr::V6(Ipv6Addr::new(
            0xfe80 | (s[0] & 0x3f),
            s[1],
            s[2],
            s[3],
            s[4],
            s[5],
            s[6],
            1,
        ))
    });
    let ip = prop_oneof![
        v4.clone(),
        v4.prop_map(|ip| match ip {
            IpAddr::V4(v4) => IpAddr::V6(v4.to_ipv6_mapped()),
            v6 => v6,
        }),
        v6,
        Just(IpAddr::V6(EC2_METADATA_V6)),
        Just(IpAddr::V4(Ipv4Addr::new(169, 254, 170, 2))),
        Just(IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254))),
    ];
    (ip, any::<u16>()).prop_map(|(ip, port)| SocketAddr::new(ip, port))
}

/// `EGRESS_ALLOW`: random and mutated lists (the policy tests' good and bad ones among the
/// seeds, and lists naming the metadata endpoints outright) never panic the parser; and
/// whatever list parses, no link-local or metadata destination is permitted (the ECS task
/// metadata endpoint 169.254.170.2 and the EC2 one 169.254.169.254 among them, on any port).
#[test]
fn egress_policy() {
    let seeds = [
        "127.0.0.1:8080, 10.1.0.0/16,::1",
        "0.0.0.0/0,::/0",
        "169.254.170.2",
        "169.254.170.2:80",
        "169.254.169.254/32",
        "169.254.0.0/16",
        "[::ffff:169.254.170.2]:80",
        "::ffff:169.254.0.0/112",
        "fe80::/10",
        "[fd00:ec2::254]:80",
        "localhost",
        "10.0.0.0/33",
        "1.2.3.4:99999",
        "http://x",
        "",
    ];
    fuzz::run(
        "egress_policy",
        (hostile_text(&seeds, 64), never_reachable()),
        |(list, to)| {
            if let Ok(allow) = list.parse::<EgressAllow>() {
                prop_assert!(!allow.permits(to), "{list:?} lets {to} through");
            }
            Ok(())
        },
    );
}

/// Item 4 of Step 20: on the shared network (Fargate's) a page must not reach the task
/// metadata endpoints; the hop refuses them even when `EGRESS_ALLOW` names them exactly.
#[test]
fn the_task_metadata_endpoints_are_refused_whatever_egress_allow_names() {
    for list in [
        "",
        "169.254.170.2",
        "169.254.170.2:80",
        "169.254.169.254:80,169.254.170.2:80",
        "169.254.0.0/16",
        "0.0.0.0/0,::/0",
        "[::ffff:169.254.170.2]:80",
        "::ffff:0.0.0.0/96",
        "[fd00:ec2::254]:80",
    ] {
        let allow: EgressAllow = list.parse().unwrap();
        for to in [
            "169.254.170.2:80",
            "169.254.169.254:80",
            "[::ffff:169.254.170.2]:80",
            "[fd00:ec2::254]:80",
        ] {
            assert!(!allow.permits(to.parse().unwrap()), "{list:?} lets {to}");
        }
    }
}

/// A SOCKS5 `CONNECT` to `host` (a name) and `port`, after a no-auth greeting.
fn by_name(host: &[u8], port: u16) -> Vec<u8> {
    let mut r = vec![5, 1, 0, 5, 1, 0, 3, host.len() as u8];
    r.extend_from_slice(host);
    r.extend_from_slice(&port.to_be_bytes());
    r
}

/// A SOCKS5 `CONNECT` to `to`, after a no-auth greeting.
fn by_address(to: SocketAddr) -> Vec<u8> {
    let mut r = vec![5, 1, 0, 5, 1, 0];
    match to.ip() {
        IpAddr::V4(v4) => {
            r.push(1);
            r.extend_from_slice(&v4.octets());
        }
        IpAddr::V6(v6) => {
            r.push(4);
            r.extend_from_slice(&v6.octets());
        }
    }
    r.extend_from_slice(&to.port().to_be_bytes());
    r
}

/// The hostile handshakes: every spelling of the machine's loopback (where `service` listens),
/// the metadata addresses, the unit tests' malformed greetings (SOCKS4, no acceptable
/// method, BIND, UDP ASSOCIATE).
fn handshakes(service: u16) -> Vec<Vec<u8>> {
    let mut seeds: Vec<Vec<u8>> = [
        "localhost",
        "LOCALHOST",
        "localhost.",
        "127.1",
        "2130706433",
        "0x7f.1",
        "0177.0.0.1",
        "0.0.0.0",
        "::1",
        "[::1]",
        "ip6-localhost",
        "169.254.170.2",
    ]
    .iter()
    .map(|h| by_name(h.as_bytes(), service))
    .collect();
    for to in [
        "127.0.0.1",
        "127.9.9.9",
        "0.0.0.0",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "[::]",
        "169.254.170.2",
        "169.254.169.254",
        "[fd00:ec2::254]",
    ] {
        seeds.push(by_address(format!("{to}:{service}").parse().unwrap()));
    }
    seeds.push(vec![4, 1, 0, 80, 127, 0, 0, 1, 0]);
    seeds.push(vec![5, 1, 2]);
    seeds.push(vec![5, 1, 0, 5, 2, 0, 1, 127, 0, 0, 1, 0, 80]);
    seeds.push(vec![5, 1, 0, 5, 3, 0, 1, 127, 0, 0, 1, 0, 80]);
    seeds.push(vec![5, 255]);
    seeds
}

/// Sends `bytes` to the hop's handshake and closes; what came back, and whether the
/// handshake ended within the bound.
async fn exchange(hop: &Hop, bytes: &[u8]) -> (Vec<u8>, bool) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut client = TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (server, _) = listener.accept().await.unwrap();
    let talk = async {
        let _ = client.write_all(bytes).await;
        let _ = client.shutdown().await;
        let mut back = Vec::new();
        let _ = client.read_to_end(&mut back).await;
        back
    };
    let shake = tokio::time::timeout(Duration::from_secs(5), handshake(server, hop));
    let (shook, back) = tokio::join!(
        async {
            let r = shake.await;
            // Whatever it answered, the connection is done: nothing is relayed here.
            r.is_ok()
        },
        talk
    );
    (back, shook)
}

/// The hop's SOCKS5 server on random and mutated handshakes, with `EGRESS_ALLOW` unset, run in
/// a network namespace of the test's own (only `lo`: were a check broken, a dial outside
/// would fail at once with no route instead of leaving the machine): never a panic; every
/// handshake ends within the bound; a service on the loopback is never reached, by any
/// spelling of its address or name; and no `CONNECT` is answered with success.
#[test]
fn socks5_handshake() {
    std::thread::spawn(|| {
        crate::netns::enter().expect("a network namespace of the test's own (root)");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let service = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        service.set_nonblocking(true).unwrap();
        let port = service.local_addr().unwrap().port();
        let hop = Hop::new(EgressAllow::default());
        fuzz::run(
            "socks5_handshake",
            hostile_bytes(handshakes(port), 48),
            |bytes| {
                let (back, shook) = rt.block_on(exchange(&hop, &bytes));
                prop_assert!(shook, "the handshake did not end within its bound");
                prop_assert!(
                    matches!(service.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
                    "the loopback service was reached"
                );
                prop_assert!(!back.starts_with(&[5, 0, 5, 0]), "a CONNECT answered with success");
                Ok(())
            },
        );
    })
    .join()
    .unwrap();
}
