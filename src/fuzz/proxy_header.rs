//! The PROXY protocol v2 header ([`crate::edge::proxy_header`]) as a trusted peer's bytes.

use std::net::SocketAddr;

use wallcrawler_testkit::fuzz::proptest::prelude::*;
use wallcrawler_testkit::fuzz::{self, hostile_bytes};

use crate::edge::proxy_header::{Source, encode, read_header};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

fn addr() -> impl Strategy<Value = SocketAddr> {
    prop_oneof![
        any::<([u8; 4], u16)>().prop_map(SocketAddr::from),
        any::<([u16; 8], u16)>().prop_map(SocketAddr::from),
    ]
}

/// Encoding then reading gives the client back (IPv4-mapped addresses as IPv4), and what is
/// read, encoded again, reads the same (parse → encode → parse).
#[test]
fn proxy_header_round_trip() {
    let rt = runtime();
    fuzz::run(
        "proxy_header_round_trip",
        (addr(), addr(), any::<bool>()),
        |(client, local, tls)| {
            let bytes = encode(client, local, tls).unwrap();
            let read = rt.block_on(read_header(&mut &bytes[..])).unwrap();
            let expected = SocketAddr::new(client.ip().to_canonical(), client.port());
            prop_assert_eq!(
                read,
                Source::Forwarded {
                    client: expected,
                    tls
                }
            );
            let again = encode(expected, local, tls).unwrap();
            prop_assert_eq!(rt.block_on(read_header(&mut &again[..])).unwrap(), read);
            Ok(())
        },
    );
}

/// Random and mutated headers (the unit tests' broken ones among the seeds): never a panic;
/// at most the format's bound (16 + 65,535 bytes) is read, and a header read takes exactly its
/// own length off the stream, leaving what follows it.
#[test]
fn proxy_header_bytes() {
    let rt = runtime();
    let a = |s: &str| s.parse::<SocketAddr>().unwrap();
    let good = encode(a("203.0.113.9:5"), a("10.0.0.1:9223"), false).unwrap();
    let mut seeds = vec![
        good.clone(),
        encode(a("[2001:db8::9]:443"), a("[fd00::5]:9223"), true).unwrap(),
        ppp::v2::Builder::new(ppp::v2::Version::Two | ppp::v2::Command::Local, 0)
            .build()
            .unwrap(),
    ];
    let mut bad_version = good.clone();
    bad_version[12] = 0x11;
    seeds.push(bad_version);
    let mut short_len = good.clone();
    short_len[15] = 4;
    seeds.push(short_len[..20].to_vec());
    let mut lying = good;
    lying[14] = 0xff;
    seeds.push(lying);
    fuzz::run(
        "proxy_header_bytes",
        (
            hostile_bytes(seeds, 64),
            prop::collection::vec(any::<u8>(), 0..8),
        ),
        |(header, after)| {
            let mut stream = header.clone();
            stream.extend_from_slice(&after);
            let mut rest = &stream[..];
            let read = rt.block_on(read_header(&mut rest));
            let taken = stream.len() - rest.len();
            prop_assert!(taken <= 16 + 65_535);
            if read.is_ok() {
                let declared = 16 + usize::from(u16::from_be_bytes([stream[14], stream[15]]));
                prop_assert_eq!(taken, declared);
            }
            Ok(())
        },
    );
}
