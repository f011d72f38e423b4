//! The PROXY protocol v2 header: taken only from `TRUSTED_PROXY_NETWORKS` (a task behind the
//! gateway, the gateway behind a load balancer), where it names the client the task counts and
//! logs and says whether its connection was TLS (then discovery answers `wss://`); refused from
//! anyone else; and put by the gateway before each connection it opens to a task.

use std::io::Read;
use std::net::{SocketAddr, TcpListener};

use serde_json::Value;
use wallcrawler_controller::edge::proxy_header;

use crate::support::{Controller, KEY, raw_http, status_of, token, upgrade_request};

/// A client far away, as a load balancer's header names it.
const FAR: &str = "203.0.113.9:50123";

fn header(client: &str, to: SocketAddr, tls: bool) -> Vec<u8> {
    proxy_header::encode(client.parse().unwrap(), to, tls).unwrap()
}

/// `GET target` with `Host: host`, after `prefix`.
fn get_after(addr: SocketAddr, prefix: &[u8], target: &str, host: &str) -> String {
    let mut req = prefix.to_vec();
    req.extend_from_slice(
        format!("GET {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
    );
    raw_http(addr, &req)
}

fn json_body(answer: &str) -> Value {
    let body = answer.split_once("\r\n\r\n").expect("a body").1;
    serde_json::from_str(body).unwrap_or_else(|_| panic!("not JSON: {answer}"))
}

#[test]
fn a_header_from_an_untrusted_address_is_a_bad_request_and_names_nobody() {
    // A task that trusts nobody (the default).
    let (mut c, s) = Controller::local(&[], &[("LOG_FORMAT", "json")]);
    let q = format!("?signingKey={}", s.token);
    let answer = get_after(
        s.addr,
        &header(FAR, s.addr, true),
        &format!("/json/version{q}"),
        "connect.example.test",
    );
    assert_eq!(status_of(&answer), 400, "{answer}");
    // The same request without the header is served: only the header was refused.
    let plain = get_after(s.addr, b"", &format!("/json/version{q}"), "127.0.0.1");
    assert_eq!(status_of(&plain), 200, "{plain}");
    c.signal(nix::sys::signal::Signal::SIGTERM);
    c.wait_exit();
    assert!(
        !c.stderr.text().contains("203.0.113.9"),
        "the header named nobody"
    );
}

#[test]
fn from_a_trusted_network_the_task_counts_the_named_client_and_answers_wss_behind_tls() {
    let (mut c, s) = Controller::local(
        &[],
        &[
            ("LOG_FORMAT", "json"),
            ("TRUSTED_PROXY_NETWORKS", "127.0.0.1/32"),
        ],
    );
    let q = format!("?signingKey={}", s.token);
    // The client used TLS in front of us: every URL discovery hands out is wss://.
    let version = get_after(
        s.addr,
        &header(FAR, s.addr, true),
        &format!("/json/version{q}"),
        "connect.example.test",
    );
    assert_eq!(status_of(&version), 200, "{version}");
    let ws = json_body(&version)["webSocketDebuggerUrl"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        ws.starts_with("wss://connect.example.test/devtools/browser/"),
        "{ws}"
    );
    // Without TLS in front: ws://, as before.
    let plain = get_after(
        s.addr,
        &header(FAR, s.addr, false),
        &format!("/json/version{q}"),
        "connect.example.test",
    );
    assert!(
        json_body(&plain)["webSocketDebuggerUrl"]
            .as_str()
            .unwrap()
            .starts_with("ws://connect.example.test/devtools/browser/"),
        "{plain}"
    );
    // A trusted peer may also speak for itself (no header).
    let direct = get_after(s.addr, b"", &format!("/json/version{q}"), "127.0.0.1");
    assert_eq!(status_of(&direct), 200, "{direct}");
    // A refused credential is logged under the client the header named.
    let mut bad = header(FAR, s.addr, false);
    bad.extend(upgrade_request(
        "/?signingKey=not.a.token",
        "connect.example.test",
        &[],
    ));
    let refused = raw_http(s.addr, &bad);
    assert_eq!(status_of(&refused), 401, "{refused}");
    c.wait_event(|e| {
        e["message"].as_str().is_some_and(|m| m.contains("refused")) && e.to_string().contains(FAR)
    });
    // A broken header from the trusted network closes the connection, nothing answered.
    let mut broken = header(FAR, s.addr, false);
    broken[12] = 0x11; // version 1 in a v2 header
    broken.extend_from_slice(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(raw_http(s.addr, &broken), "");
    c.signal(nix::sys::signal::Signal::SIGTERM);
    c.wait_exit();
}

/// A gateway over a sessions directory holding one READY session whose task is `task`.
fn gateway_with_one_session(
    task: SocketAddr,
    envs: &[(&str, &str)],
) -> (Controller, SocketAddr, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let sessions = dir.path().join("sessions");
    let id = "sess_cccccccc-0000-0000-0000-000000000003";
    crate::support::ready_session(&sessions, id, task);
    let (c, addr) = crate::support::gateway(&sessions, "127.0.0.1:0", envs);
    (c, addr, token(KEY, id, "proj_a", 600), dir)
}

/// What a stand-in task reads from the gateway's connection: the PROXY header, decoded, and
/// the request after it.
fn task_reads(task: &TcpListener) -> (ppp::v2::Header<'static>, String) {
    let (mut s, _) = task.accept().unwrap();
    s.set_read_timeout(Some(crate::support::WAIT)).unwrap();
    let mut fixed = [0u8; 16];
    s.read_exact(&mut fixed).unwrap();
    let len = usize::from(u16::from_be_bytes([fixed[14], fixed[15]]));
    let mut whole = fixed.to_vec();
    whole.resize(16 + len, 0);
    s.read_exact(&mut whole[16..]).unwrap();
    let header = ppp::v2::Header::try_from(whole.as_slice())
        .expect("a PROXY v2 header first")
        .to_owned();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut b).unwrap();
        head.push(b[0]);
    }
    (header, String::from_utf8(head).unwrap())
}

#[test]
fn the_gateway_names_the_client_to_the_task_and_takes_a_header_only_from_trusted_networks() {
    let task = TcpListener::bind("127.0.0.1:0").unwrap();
    let task_addr = task.local_addr().unwrap();

    // Behind a load balancer on a trusted network: the client its header names (and its TLS)
    // is what the gateway passes on.
    let (_gw, gw, t, _dir) =
        gateway_with_one_session(task_addr, &[("TRUSTED_PROXY_NETWORKS", "127.0.0.0/8")]);
    let client = std::thread::spawn({
        let t = t.clone();
        move || {
            let mut req = header(FAR, gw, true);
            req.extend(upgrade_request(
                &format!("/?signingKey={t}"),
                "connect.example.test",
                &[],
            ));
            raw_http(gw, &req)
        }
    });
    let (h, head) = task_reads(&task);
    match h.addresses {
        ppp::v2::Addresses::IPv4(a) => {
            assert_eq!(
                SocketAddr::from((a.source_address, a.source_port)),
                FAR.parse().unwrap()
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(
        h.tlvs()
            .flatten()
            .any(|tlv| tlv.kind == ppp::v2::Type::SSL as u8 && tlv.value[0] & 1 == 1),
        "the client's TLS is passed on"
    );
    assert!(
        head.starts_with(&format!("GET /?signingKey={t} HTTP/1.1\r\n")),
        "{head}"
    );
    drop(task); // the task hangs up: the client gets its answer
    let _ = client.join().unwrap();

    // A gateway that trusts nobody: the header is a malformed request, and no task is dialled.
    let task = TcpListener::bind("127.0.0.1:0").unwrap();
    task.set_nonblocking(true).unwrap();
    let (_gw2, gw2, t2, _dir2) = gateway_with_one_session(task.local_addr().unwrap(), &[]);
    let mut req = header(FAR, gw2, true);
    req.extend(upgrade_request(
        &format!("/?signingKey={t2}"),
        "connect.example.test",
        &[],
    ));
    let answer = raw_http(gw2, &req);
    assert_eq!(status_of(&answer), 400, "{answer}");
    assert!(
        matches!(task.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "no task was dialled"
    );
    // Its own connections carry the peer's address: a plain client through it.
    let direct = std::thread::spawn({
        let t2 = t2.clone();
        move || {
            raw_http(
                gw2,
                &upgrade_request(&format!("/?signingKey={t2}"), &gw2.to_string(), &[]),
            )
        }
    });
    task.set_nonblocking(false).unwrap();
    let (h, _) = task_reads(&task);
    match h.addresses {
        ppp::v2::Addresses::IPv4(a) => {
            assert_eq!(a.source_address, std::net::Ipv4Addr::LOCALHOST);
        }
        other => panic!("{other:?}"),
    }
    assert!(
        !h.tlvs()
            .flatten()
            .any(|tlv| tlv.kind == ppp::v2::Type::SSL as u8),
        "a plain client is not TLS"
    );
    drop(task);
    let _ = direct.join().unwrap();
}
