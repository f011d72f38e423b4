//! Fuzz targets for the contract's parsers of hostile input (extension archives: the local
//! crate's, where they are unpacked), each seeded with the hostile cases
//! of the parser's own unit tests (`wallcrawler_testkit::fuzz` runs them: a few cases under
//! `cargo test`, `FUZZ_SECONDS` each under `scripts/fuzz.sh`). Every target checks at least
//! that the parser never panics and answers in bounded time and memory (an input over a
//! parser's size bound is refused before it is read); each says what more it checks.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use wallcrawler_contract::claim::{Claim, ClaimContext, MAX_CLAIM_BYTES, valid_id};
use wallcrawler_contract::storage;
use wallcrawler_contract::token::{
    self, Claims, MAX_TOKEN_BYTES, SigningKey, Validation, VerifyingKey,
};
use wallcrawler_contract::viewer::{self, Mode, ViewerClaims};
use wallcrawler_testkit::fuzz::proptest::prelude::*;
use wallcrawler_testkit::fuzz::{self, hostile_bytes, hostile_text};

const NOW: u64 = 1_700_000_000;

fn key() -> SigningKey {
    SigningKey::from_seed(&[7; 32])
}

fn keys() -> Vec<VerifyingKey> {
    vec![
        SigningKey::from_seed(&[9; 32]).verifying_key().clone(),
        key().verifying_key().clone(),
    ]
}

fn v() -> Validation<'static> {
    crate::tokens::validation(NOW)
}

/// A token signed by [`key`] with this header (JSON) and these claims.
fn signed(header: &str, claims: &serde_json::Value) -> String {
    let h = URL_SAFE_NO_PAD.encode(header);
    token::sign_raw(&h, &serde_json::to_vec(claims).unwrap(), &key())
}

/// The token unit tests' hostile tokens, around one valid token (returned first).
fn token_seeds(valid: &str) -> Vec<String> {
    let claims = serde_json::to_value(Claims::new("sess_a", "proj_a", NOW, 3600)).unwrap();
    let p = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).unwrap());
    let mut seeds = vec![
        valid.to_owned(),
        String::new(),
        "garbage".into(),
        "a.b.c.d".into(),
        "a".repeat(MAX_TOKEN_BYTES + 1),
        format!("{valid}="),
        format!("{}.{p}.", URL_SAFE_NO_PAD.encode(br#"{"alg":"none"}"#)),
        signed(r#"{"alg":"EdDSA","crit":["b64"]}"#, &claims),
        signed(r#"{"typ":"JWT"}"#, &claims),
        token::sign_raw_hs256(
            &URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#),
            &serde_json::to_vec(&claims).unwrap(),
            key().verifying_key().as_bytes(),
        ),
        signed(r#"{"alg":"EdDSA"}"#, &serde_json::json!([1, 2])),
        signed(
            r#"{"alg":"EdDSA"}"#,
            &serde_json::json!({"sessionId": "sess_a\u{0}", "exp": 1e300, "nbf": -1}),
        ),
    ];
    let parts: Vec<&str> = valid.split('.').collect();
    seeds.push(format!("{}.{}", parts[0], parts[1]));
    seeds.push(format!("{}..{}", parts[0], parts[2]));
    seeds
}

/// Session tokens: random and mutated tokens never panic, and nothing but the one valid token
/// validates (no other spelling of it, no tampering passes); refusals are errors.
#[test]
fn token_validate() {
    let valid = Claims::new("sess_a", "proj_a", NOW, 3600).mint(&key());
    let seeds = token_seeds(&valid);
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let keys = keys();
    fuzz::run("token_validate", hostile_text(&seeds, 600), |t| {
        let ok = token::validate(&t, &keys, &v()).is_ok();
        let any = token::validate_any_session(&t, &keys, None, 30, NOW).is_ok();
        prop_assert_eq!(ok, t == valid);
        prop_assert_eq!(any, t == valid);
        Ok(())
    });
}

/// Viewer credentials: random and mutated credentials (and session tokens, another audience)
/// never panic, and only the one valid credential validates.
#[test]
fn viewer_validate() {
    let claims = ViewerClaims::new("sess_a", "proj_a", Mode::View, NOW, 600);
    let valid = claims.for_page(&"A".repeat(32)).unwrap().mint(&key());
    let mut seeds = token_seeds(&valid);
    seeds.push(Claims::new("sess_a", "proj_a", NOW, 3600).mint(&key()));
    let mut control = serde_json::to_value(&claims).unwrap();
    control["mode"] = "drive".into();
    control["page"] = "../x".into();
    seeds.push(signed(r#"{"alg":"EdDSA","typ":"JWT"}"#, &control));
    let seeds: Vec<&str> = seeds.iter().map(String::as_str).collect();
    let keys = keys();
    fuzz::run("viewer_validate", hostile_text(&seeds, 600), |t| {
        let ok = viewer::validate(&t, &keys, &v()).is_ok();
        let any = viewer::validate_any_session(&t, &keys, None, 30, NOW).is_ok();
        prop_assert_eq!(ok, t == valid);
        prop_assert_eq!(any, t == valid);
        Ok(())
    });
}

/// Claims off the queue: never a panic; what parses has valid ids and reads back the same
/// (parse → `to_json` → parse gives the same claim); over [`MAX_CLAIM_BYTES`] is refused.
#[test]
fn claim_parse() {
    let with_context = Claim {
        session_id: "sess_1".into(),
        project_id: "proj_1".into(),
        context: Some(ClaimContext {
            id: "ctx_1".into(),
            key: storage::profile_key("proj_1", "ctx_1"),
            persist: true,
        }),
        extension_key: Some(storage::extension_key("proj_1", &"0f".repeat(32))),
        egress: None,
        browser: None,
    };
    let seeds: Vec<Vec<u8>> = [
        with_context.to_json().as_str(),
        r#"{"sessionId":"s","projectId":"proj_1","context":{"id":"ctx_1","key":"proj_2/ctx_1/profile.tar.gz","persist":true}}"#,
        r#"{"sessionId":"s","projectId":"proj_1","extensionKey":"extensions/proj_2/0f.zip"}"#,
        r#"{"sessionId":"../../etc","projectId":"p"}"#,
        r#"{"sessionId":"s"}"#,
        r#"{"sessionId":"s","projectId":"p","egress":{"proxies":[{"server":"http://u:p@h:1"}],"allowedDomains":["a.com"]}}"#,
        r#"{"sessionId":"s","projectId":"p","browser":{"viewport":{"width":1,"height":99999},"locales":["en-US"]}}"#,
        r#"{"sessionId":"s","projectId":"p","liveView":{"url":"x"}}"#,
        "not json",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    fuzz::run("claim_parse", hostile_bytes(seeds, 400), |body| {
        if let Ok(c) = Claim::parse(&body) {
            prop_assert!(body.len() <= MAX_CLAIM_BYTES);
            prop_assert!(valid_id(&c.session_id) && valid_id(&c.project_id));
            prop_assert_eq!(Claim::parse(c.to_json().as_bytes()), Ok(c));
        }
        Ok(())
    });
    assert!(Claim::parse(&vec![b' '; MAX_CLAIM_BYTES + 1]).is_err());
}

/// A replay's page id (a client's path) and a stored page index (what the API turns into a
/// playlist): never a panic; an accepted page id is a small decimal number, so a key made from
/// it stays in the session's folder; a well-formed index names only plain segment files, and
/// its playlist has one URL line per segment and no line a segment name could have added.
#[test]
fn recording_page_and_index() {
    use wallcrawler_contract::recording::{
        PageIndex, index_key, is_segment_name, playlist, valid_page_id,
    };
    let seeds = [
        "0",
        "12",
        "999",
        "../0",
        "00",
        "1000",
        r#"{"pageId":"0","url":"u","startTimeMs":1,"endTimeMs":2,"segments":[{"name":"seg-00000.ts","duration":2.0}],"ended":true}"#,
        r#"{"pageId":"0","url":"u","startTimeMs":1,"endTimeMs":2,"segments":[{"name":"../seg-00000.ts","duration":2.0}]}"#,
        r#"{"pageId":"../1","url":"u\n#EXT-X-ENDLIST","startTimeMs":1,"endTimeMs":2,"segments":[]}"#,
    ];
    fuzz::run("recording_page_and_index", hostile_text(&seeds, 600), |t| {
        if valid_page_id(&t) {
            prop_assert!(t.len() <= 3 && t.bytes().all(|b| b.is_ascii_digit()));
            prop_assert!(index_key("p", "s", &t).starts_with("files/p/s/recordings/"));
            prop_assert!(!index_key("p", "s", &t).contains(".."));
        }
        if let Ok(i) = serde_json::from_str::<PageIndex>(&t)
            && i.is_well_formed()
        {
            prop_assert!(i.segments.iter().all(|s| is_segment_name(&s.name)));
            let text = playlist(&i, |n| format!("https://x.test/{n}"));
            let urls = text.lines().filter(|l| !l.starts_with('#')).count();
            prop_assert_eq!(urls, i.segments.len());
        }
        Ok(())
    });
}
