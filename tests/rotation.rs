//! The signing key from Secrets Manager (moto): a rotation is honoured at once — a token signed
//! with the new key works immediately, one signed with the previous key keeps working, and one
//! signed with neither is refused. Shown on the `proxy` subcommand, which takes its key exactly
//! as `run` does.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use crate::support::upstream::FakeUpstream;
use crate::support::{SESSION, WAIT, aws, proxy, token, upgrade_request};

/// The status line's code for an upgrade with `token`.
fn upgrade_status(addr: SocketAddr, token: &str) -> u16 {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.write_all(&upgrade_request(
        &format!("/?signingKey={token}"),
        &addr.to_string(),
        &[],
    ))
    .unwrap();
    let mut head = [0u8; 12];
    s.read_exact(&mut head).unwrap();
    std::str::from_utf8(&head[9..12]).unwrap().parse().unwrap()
}

#[test]
fn rotation_is_honoured_immediately_and_the_previous_key_still_works() {
    let arn = aws::create_secret("first-key");
    let upstream = FakeUpstream::idle();
    let env = aws::env();
    let mut all: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    all.push(("WALLCRAWLER_JWT_SIGNING_SECRET_ARN", &arn));
    all.push(("WALLCRAWLER_JWT_SIGNING_KEY", ""));
    let (c, addr) = proxy(upstream.addr, &all);

    assert_eq!(
        upgrade_status(addr, &token("first-key", SESSION, "", 600)),
        101
    );
    aws::rotate_secret(&arn, "second-key");
    assert_eq!(
        upgrade_status(addr, &token("second-key", SESSION, "", 600)),
        101,
        "the new key works without waiting for the TTL"
    );
    assert_eq!(
        upgrade_status(addr, &token("first-key", SESSION, "", 600)),
        101,
        "AWSPREVIOUS is still accepted"
    );
    assert_eq!(
        upgrade_status(addr, &token("third-key", SESSION, "", 600)),
        401
    );
    let log = c.stderr.text();
    assert!(log.contains("refreshing the signing secret"), "{log}");
    for k in ["first-key", "second-key", "third-key"] {
        assert!(!log.contains(k), "key text in the log");
    }
}
