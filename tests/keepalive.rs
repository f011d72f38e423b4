//! Idle CDP connections kept alive: the proxy pings a client after `CDP_KEEPALIVE_SECONDS`
//! without traffic (through the gateway, which passes the pings and pongs as bytes, or
//! directly), the client's pongs stop at the proxy (Chrome's stand-in records every frame it
//! gets), and `0` turns the pings off.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::support::upstream::{Frame, frame_bytes, read_frame, recording_cdp};
use crate::support::{KEY, SESSION, WAIT, first_head, proxy, token, upgrade_request};

const TEXT: u8 = 0x1;
const PING: u8 = 0x9;
const PONG: u8 = 0xA;

/// Opens a CDP WebSocket through `addr` (a proxy or the gateway); the socket after the 101.
fn connect(addr: SocketAddr) -> TcpStream {
    let t = token(KEY, SESSION, "proj_a", 600);
    let request = upgrade_request(&format!("/?signingKey={t}"), &addr.to_string(), &[]);
    let (s, head) = first_head(addr, &request);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    s
}

/// Sends command `id` as one masked text frame.
fn command(c: &mut TcpStream, id: u32) -> Vec<u8> {
    let text = format!(r#"{{"id":{id},"method":"Browser.getVersion"}}"#);
    c.write_all(&frame_bytes(TEXT, true, text.as_bytes(), true))
        .unwrap();
    text.into_bytes()
}

/// Reads frames until a text message, answering pings on the way; its text.
fn next_text(c: &mut TcpStream) -> String {
    loop {
        let f = read_frame(c).unwrap();
        match f.opcode {
            TEXT => return String::from_utf8(f.payload).unwrap(),
            PING => c
                .write_all(&frame_bytes(PONG, true, &f.payload, true))
                .unwrap(),
            _ => panic!("unexpected {f:?}"),
        }
    }
}

fn answer(id: u32) -> String {
    format!(r#"{{"id":{id},"result":{{}}}}"#)
}

fn text_frame(fin: bool, opcode: u8, payload: &[u8]) -> Frame {
    Frame {
        fin,
        opcode,
        payload: payload.to_vec(),
    }
}

/// A client idle behind the gateway is pinged every 4 s by its task's proxy and stays
/// connected; it answers each ping with a pong, and sends a pong between the fragments of a
/// message too. Chrome's stand-in gets the client's messages, in order, and no pong.
#[test]
fn an_idle_client_behind_the_gateway_is_pinged_and_chrome_never_sees_a_pong() {
    let (up, received) = recording_cdp();
    let (_task, task) = proxy(
        up.addr,
        &[
            ("TRUSTED_PROXY_NETWORKS", "127.0.0.1/32"),
            ("CDP_KEEPALIVE_SECONDS", "4"),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    let sessions = dir.path().join("sessions");
    crate::support::ready_session(&sessions, SESSION, task);
    let (_gateway, gw) = crate::support::gateway(&sessions, "127.0.0.1:0", &[]);
    let mut c = connect(gw);

    let before = command(&mut c, 1);
    assert_eq!(next_text(&mut c), answer(1));
    // Idle from here: two pings within 15 s, none before the interval is up.
    let idle = Instant::now();
    for n in 1..=2u32 {
        let f = read_frame(&mut c).unwrap();
        assert_eq!((f.opcode, f.fin), (PING, true), "{f:?}");
        let at = idle.elapsed();
        assert!(
            at >= Duration::from_secs(3 * u64::from(n)),
            "ping {n} at {at:?}"
        );
        c.write_all(&frame_bytes(PONG, true, &f.payload, true))
            .unwrap();
    }
    assert!(
        idle.elapsed() < Duration::from_secs(15),
        "{:?}",
        idle.elapsed()
    );

    // Still connected: a command in two fragments with a pong between them is answered.
    let first = br#"{"id":2,"method":"Browser."#;
    let last = br#"getVersion"}"#;
    c.write_all(
        &[
            frame_bytes(TEXT, false, first, true),
            frame_bytes(PONG, true, b"unsolicited", true),
            frame_bytes(0x0, true, last, true),
        ]
        .concat(),
    )
    .unwrap();
    assert_eq!(next_text(&mut c), answer(2));

    // The answer came after Chrome's stand-in read the last fragment: everything the client
    // sent before it has been recorded.
    let got: Vec<Frame> = received.try_iter().collect();
    assert_eq!(
        got,
        vec![
            text_frame(true, TEXT, &before),
            text_frame(false, TEXT, first),
            text_frame(true, 0x0, last),
        ]
    );
}

/// Directly at a task's proxy: with 1 s a client is pinged, with 0 an idle client gets nothing
/// (over a wait in which the other was pinged several times) and its connection works.
#[test]
fn keepalive_pings_a_direct_client_and_zero_turns_it_off() {
    let (up, _received) = recording_cdp();
    let (_on, on) = proxy(up.addr, &[("CDP_KEEPALIVE_SECONDS", "1")]);
    let (_off, off) = proxy(up.addr, &[("CDP_KEEPALIVE_SECONDS", "0")]);
    let mut pinged = connect(on);
    let mut quiet = connect(off);
    let idle = Instant::now();
    for _ in 0..3 {
        let f = read_frame(&mut pinged).unwrap();
        assert_eq!(f.opcode, PING, "{f:?}");
        pinged
            .write_all(&frame_bytes(PONG, true, &f.payload, true))
            .unwrap();
    }
    // The quiet client has been idle as long; nothing has come, nor comes within 2 s more.
    quiet
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let mut b = [0u8; 1];
    let read = quiet.read(&mut b);
    assert!(
        matches!(&read, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut),
        "after {:?} idle: {read:?}",
        idle.elapsed()
    );
    quiet.set_read_timeout(Some(WAIT)).unwrap();
    command(&mut quiet, 7);
    assert_eq!(next_text(&mut quiet), answer(7));
    command(&mut pinged, 8);
    assert_eq!(next_text(&mut pinged), answer(8));
}
