//! Each refused credential: 401 with a generic body, no upgrade, the upstream never contacted,
//! and the token nowhere in the proxy's log.

use std::sync::atomic::Ordering;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use wallcrawler_contract::token;
use wallcrawler_testkit::keys;

use crate::support::upstream::FakeUpstream;
use crate::support::{
    Controller, KEY, SESSION, now, proxy, raw_http, status_of, token, upgrade_request,
};

fn b64(v: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(v)
}

fn claims() -> Value {
    let t = now();
    json!({
        "iss": "wallcrawler", "sub": SESSION, "aud": ["cdp-access"],
        "exp": t + 600, "iat": t, "nbf": t, "jti": "n", "nonce": "n",
        "sessionId": SESSION, "projectId": "proj_a"
    })
}

/// Signs `payload` under `header` with the private key named `key` (EdDSA), or, when the
/// header says HS512, with an HMAC keyed with `key`'s bytes.
fn sign(header: Value, payload: &Value, key: &str) -> String {
    let header_b64 = b64(header.to_string().as_bytes());
    let payload = payload.to_string();
    if header["alg"] == "HS512" {
        let input = format!("{header_b64}.{}", b64(payload.as_bytes()));
        let mut m = Hmac::<sha2::Sha512>::new_from_slice(key.as_bytes()).unwrap();
        m.update(input.as_bytes());
        return format!("{input}.{}", b64(&m.finalize().into_bytes()));
    }
    token::sign_raw(&header_b64, payload.as_bytes(), &keys::signing_key(key))
}

fn signed(payload: &Value) -> String {
    sign(json!({"alg": "EdDSA", "typ": "JWT"}), payload, KEY)
}

fn with(field: &str, value: Value) -> String {
    let mut c = claims();
    c[field] = value;
    signed(&c)
}

/// Presents `credential` (query form unless it starts with "Authorization:") and checks the
/// refusal. `envs` configure the proxy. Returns the proxy, to read its log.
fn refused(credential: Option<&str>, envs: &[(&str, &str)]) -> Controller {
    let upstream = FakeUpstream::idle();
    let (c, addr) = proxy(upstream.addr, envs);
    // The proxy asked the upstream's /json/version once at startup; nothing may follow.
    let baseline = upstream.connections.load(Ordering::SeqCst);
    let host = addr.to_string();
    let (path, headers) = match credential {
        None => ("/".to_owned(), vec![]),
        Some(h) if h.starts_with("Authorization:") => ("/".to_owned(), vec![h]),
        Some(t) => (format!("/?signingKey={t}"), vec![]),
    };
    let answer = raw_http(addr, &upgrade_request(&path, &host, &headers));
    assert_eq!(status_of(&answer), 401, "{answer}");
    assert!(!answer.contains("101"), "{answer}");
    assert!(
        answer.ends_with("\r\n\r\nunauthorized\n"),
        "generic body: {answer}"
    );
    assert_eq!(
        upstream.connections.load(Ordering::SeqCst),
        baseline,
        "the upstream was contacted"
    );
    assert!(
        upstream
            .heads
            .lock()
            .unwrap()
            .iter()
            .all(|h| h.starts_with("GET /json/version "))
    );
    if let Some(t) = credential.filter(|t| t.len() > 20) {
        let tail = &t[t.len() - 20..];
        assert!(
            !c.stderr.text().contains(tail),
            "credential text in the log"
        );
    }
    c
}

/// [`refused`], and the log names `reason` (a `TokenError::reason()` label).
fn refused_because(credential: &str, reason: &str) {
    let mut c = refused(Some(credential), &[]);
    let ev = c.wait_event(|e| {
        e["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("credential refused"))
    });
    assert_eq!(ev["reason"], reason, "{ev}");
}

#[test]
fn no_token() {
    refused(None, &[]);
}

#[test]
fn garbage() {
    refused(Some("not-a-jwt-at-all"), &[]);
}

#[test]
fn wrong_key() {
    refused(Some(&token("another-key", SESSION, "proj_a", 600)), &[]);
}

#[test]
fn tampered_payload() {
    let good = token(KEY, SESSION, "proj_a", 600);
    let parts: Vec<&str> = good.split('.').collect();
    let mut c = claims();
    c["exp"] = json!(now() + 999_999);
    let forged = format!(
        "{}.{}.{}",
        parts[0],
        b64(c.to_string().as_bytes()),
        parts[2]
    );
    refused(Some(&forged), &[]);
}

#[test]
fn expired() {
    refused(Some(&with("exp", json!(now() - 3600))), &[]);
}

#[test]
fn not_before_in_the_future() {
    refused(Some(&with("nbf", json!(now() + 3600))), &[]);
}

#[test]
fn alg_none() {
    let unsigned = format!(
        "{}.{}.",
        b64(br#"{"alg":"none","typ":"JWT"}"#),
        b64(claims().to_string().as_bytes())
    );
    refused(Some(&unsigned), &[]);
}

/// Algorithm confusion: an HS256 token whose HMAC key is the public key the task holds (its
/// PEM, its raw 32 bytes) would pass a verifier that let the header choose the algorithm.
#[test]
fn hs256_keyed_with_the_public_key() {
    let public = keys::public_key(KEY);
    let header = b64(br#"{"alg":"HS256","typ":"JWT"}"#);
    let payload = claims().to_string();
    for secret in [public.to_pem().as_bytes(), &public.as_bytes()[..]] {
        refused_because(
            &token::sign_raw_hs256(&header, payload.as_bytes(), secret),
            "algorithm",
        );
    }
}

/// A token signed with a key pair the control plane never had (one a task could make itself).
#[test]
fn a_fresh_ed25519_key() {
    let fresh = wallcrawler_contract::SigningKey::generate();
    let t = wallcrawler_contract::Claims::new(SESSION, "proj_a", now(), 600).mint(&fresh);
    refused_because(&t, "signature");
}

#[test]
fn hs512() {
    refused(
        Some(&sign(json!({"alg": "HS512", "typ": "JWT"}), &claims(), KEY)),
        &[],
    );
}

#[test]
fn wrong_issuer() {
    refused(Some(&with("iss", json!("someone-else"))), &[]);
}

#[test]
fn wrong_audience() {
    refused(Some(&with("aud", json!(["other-audience"]))), &[]);
}

/// The live view's credential (same key, same session, either mode) opens no CDP connection.
#[test]
fn a_viewer_credential() {
    use wallcrawler_contract::viewer::{Mode, ViewerClaims};
    for mode in [Mode::View, Mode::Control] {
        let credential =
            ViewerClaims::new(SESSION, "proj_a", mode, now(), 600).mint(&keys::signing_key(KEY));
        refused_because(&credential, "audience");
    }
}

/// Nor does a token naming the viewer's audience beside `cdp-access`.
#[test]
fn an_audience_naming_the_viewer_too() {
    refused_because(
        &with("aud", json!(["cdp-access", "wallcrawler-viewer"])),
        "audience",
    );
}

#[test]
fn another_sessions_token() {
    refused(
        Some(&token(
            KEY,
            "sess_99999999-0000-0000-0000-000000000000",
            "proj_a",
            600,
        )),
        &[],
    );
}

#[test]
fn another_projects_token_when_project_id_is_set() {
    refused(
        Some(&token(KEY, SESSION, "proj_other", 600)),
        &[("PROJECT_ID", "proj_a")],
    );
}

#[test]
fn a_bad_bearer_header_with_a_good_query_token() {
    let good = token(KEY, SESSION, "proj_a", 600);
    let upstream = FakeUpstream::idle();
    let (_c, addr) = proxy(upstream.addr, &[]);
    let baseline = upstream.connections.load(Ordering::SeqCst);
    let bad = format!(
        "Authorization: Bearer {}",
        token("another-key", SESSION, "proj_a", 600)
    );
    let answer = raw_http(
        addr,
        &upgrade_request(&format!("/?signingKey={good}"), &addr.to_string(), &[&bad]),
    );
    assert_eq!(
        status_of(&answer),
        401,
        "both credentials must be valid: {answer}"
    );
    assert_eq!(upstream.connections.load(Ordering::SeqCst), baseline);
}

#[test]
fn a_payload_that_is_an_array() {
    // The claims by position: serde fills a struct from an array unless told not to.
    let c = claims();
    let by_position = json!([
        c["iss"],
        c["sub"],
        c["aud"],
        c["exp"],
        c["nbf"],
        c["iat"],
        c["sessionId"],
        c["projectId"]
    ]);
    refused_because(&signed(&by_position), "malformed");
}

#[test]
fn a_crit_header() {
    let t = sign(
        json!({"alg": "EdDSA", "typ": "JWT", "crit": null}),
        &claims(),
        KEY,
    );
    refused_because(&t, "malformed");
}

#[test]
fn exp_beyond_the_longest_session() {
    refused_because(&with("exp", json!(1e308)), "exp_too_far");
    // Longest session (21600 s) plus the default leeway (30 s), plus one, plus slack for the
    // moments between our clock read and the proxy's.
    refused_because(&with("exp", json!(now() + 21_600 + 31 + 5)), "exp_too_far");
}

#[test]
fn the_right_project_is_accepted() {
    // The counterpart of the refusals above: the same setup with a valid token upgrades.
    let upstream = FakeUpstream::idle();
    let (_c, addr) = proxy(upstream.addr, &[("PROJECT_ID", "proj_a")]);
    let t = token(KEY, SESSION, "proj_a", 600);
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    std::io::Write::write_all(
        &mut s,
        &upgrade_request(&format!("/?signingKey={t}"), &addr.to_string(), &[]),
    )
    .unwrap();
    s.set_read_timeout(Some(crate::support::WAIT)).unwrap();
    let mut buf = [0u8; 12];
    std::io::Read::read_exact(&mut s, &mut buf).unwrap();
    assert_eq!(&buf, b"HTTP/1.1 101");
}
