//! The token's rules, one refusal at a time.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey};
use serde_json::json;

use super::fixtures::validation;
use super::jwt::SIGNED_HEADERS;
use super::*;

pub(crate) const NOW: u64 = 1_800_000_000;
/// `{"alg":"EdDSA","typ":"JWT"}`, the header most test tokens are signed under.
pub(crate) const HEADER_B64: &str = "eyJhbGciOiJFZERTQSIsInR5cCI6IkpXVCJ9";

/// The private key of a name (its bytes as the seed).
pub(crate) fn named(name: &[u8]) -> SigningKey {
    let mut seed = [0u8; 32];
    seed[..name.len()].copy_from_slice(name);
    SigningKey::from_seed(&seed)
}

pub(crate) fn key() -> SigningKey {
    named(b"test-key")
}

/// The public key of [`key`].
pub(crate) fn public() -> VerifyingKey {
    key().verifying_key().clone()
}

/// The public key of another name's pair.
fn other(name: &[u8]) -> VerifyingKey {
    named(name).verifying_key().clone()
}

pub(crate) fn v() -> Validation<'static> {
    validation(NOW)
}

fn claims() -> serde_json::Value {
    serde_json::to_value(Claims::new("sess_a", "proj_a", NOW, 3600)).unwrap()
}

fn with(f: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) -> String {
    let mut c = claims();
    f(c.as_object_mut().unwrap());
    sign_raw(HEADER_B64, &serde_json::to_vec(&c).unwrap(), &key())
}

fn with_header(header: serde_json::Value) -> String {
    let h = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&header).unwrap());
    sign_raw(&h, &serde_json::to_vec(&claims()).unwrap(), &key())
}

#[test]
fn minted_token_validates() {
    let t = Claims::new("sess_a", "proj_a", NOW, 3600).mint(&key());
    let ok = validate(&t, &[public()], &v()).unwrap();
    assert_eq!(ok.session_id, "sess_a");
    assert_eq!(ok.project_id.as_deref(), Some("proj_a"));
    assert_eq!(ok.key_index, 0);
}

#[test]
fn the_headers_taken_on_sight_are_what_minting_writes_and_pass_the_rules() {
    let minted = Claims::new("sess_a", "proj_a", NOW, 3600).mint(&key());
    assert_eq!(minted.split('.').next(), Some(SIGNED_HEADERS[0]));
    for h in SIGNED_HEADERS {
        let json: serde_json::Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(h).unwrap()).unwrap();
        assert_eq!(json, json!({"typ": "JWT", "alg": "EdDSA"}), "{h}");
        // Taken apart the long way (a header only differing in its padding-free encoding
        // is not on the list), the same header passes the same rules.
        let spaced = URL_SAFE_NO_PAD.encode(format!(" {json}"));
        let t = sign_raw(&spaced, &serde_json::to_vec(&claims()).unwrap(), &key());
        assert!(validate(&t, &[public()], &v()).is_ok());
    }
}

#[test]
fn header_constant_is_what_it_claims() {
    let h = URL_SAFE_NO_PAD.decode(HEADER_B64).unwrap();
    assert_eq!(h, br#"{"alg":"EdDSA","typ":"JWT"}"#);
}

#[test]
fn any_session_takes_the_tokens_own_session_and_keeps_every_other_rule() {
    let t = Claims::new("sess_b", "proj_a", NOW, 3600).mint(&key());
    let ok = validate_any_session(&t, &[public()], None, 30, NOW).unwrap();
    assert_eq!(ok.session_id, "sess_b");
    assert_eq!(
        validate_any_session(&t, &[public()], Some("proj_x"), 30, NOW),
        Err(TokenError::Project)
    );
    assert_eq!(
        validate_any_session(&t, &[other(b"other")], None, 30, NOW),
        Err(TokenError::Signature)
    );
    assert_eq!(
        validate_any_session(&t, &[public()], None, 30, NOW + 7200),
        Err(TokenError::Expired)
    );
    let mismatched = with(|c| {
        c.insert("sub".into(), json!("sess_other"));
    });
    assert_eq!(
        validate_any_session(&mismatched, &[public()], None, 30, NOW),
        Err(TokenError::Session)
    );
    for gone in [json!(null), json!("")] {
        let t = with(|c| {
            c.insert("sessionId".into(), gone.clone());
            c.remove("sub");
        });
        assert_eq!(
            validate_any_session(&t, &[public()], None, 30, NOW),
            Err(TokenError::Session),
            "{gone}"
        );
    }
    let no_session = with(|c| {
        c.remove("sessionId");
        c.remove("sub");
    });
    assert_eq!(
        validate_any_session(&no_session, &[public()], None, 30, NOW),
        Err(TokenError::Session)
    );
}

#[test]
fn second_key_is_tried_and_reported() {
    let t = Claims::new("sess_a", "proj_a", NOW, 3600).mint(&key());
    let ok = validate(&t, &[other(b"other"), public()], &v()).unwrap();
    assert_eq!(ok.key_index, 1);
}

#[test]
fn structural_refusals() {
    let keys = [public()];
    assert_eq!(validate("", &keys, &v()), Err(TokenError::Missing));
    assert_eq!(validate("garbage", &keys, &v()), Err(TokenError::Malformed));
    assert_eq!(validate("a.b.c.d", &keys, &v()), Err(TokenError::Malformed));
    assert_eq!(
        validate(&"a".repeat(4097), &keys, &v()),
        Err(TokenError::TooLarge)
    );
    let t = Claims::new("sess_a", "proj_a", NOW, 3600).mint(&key());
    assert_eq!(
        validate(&format!("{t}="), &keys, &v()),
        Err(TokenError::Signature)
    );
}

#[test]
fn wrong_key_and_tampering_are_signature_failures() {
    let t = Claims::new("sess_a", "proj_a", NOW, 3600).mint(&key());
    assert_eq!(
        validate(&t, &[other(b"nope")], &v()),
        Err(TokenError::Signature)
    );
    let parts: Vec<&str> = t.split('.').collect();
    let forged = URL_SAFE_NO_PAD
        .encode(serde_json::to_vec(&Claims::new("sess_a", "proj_b", NOW, 99999)).unwrap());
    let tampered = format!("{}.{}.{}", parts[0], forged, parts[2]);
    assert_eq!(
        validate(&tampered, &[public()], &v()),
        Err(TokenError::Signature)
    );
}

#[test]
fn algorithm_must_be_exactly_eddsa() {
    for alg in [
        "none", "HS256", "HS512", "HS384", "RS256", "ES256", "eddsa", "Ed25519",
    ] {
        let t = with_header(json!({"alg": alg, "typ": "JWT"}));
        assert_eq!(
            validate(&t, &[public()], &v()),
            Err(TokenError::Algorithm),
            "{alg}"
        );
    }
    assert_eq!(
        validate(&with_header(json!({"typ": "JWT"})), &[public()], &v()),
        Err(TokenError::Algorithm)
    );
    // alg:none with an empty signature, the classic bypass.
    let h = URL_SAFE_NO_PAD.encode(br#"{"alg":"none"}"#);
    let p = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims()).unwrap());
    assert_eq!(
        validate(&format!("{h}.{p}."), &[public()], &v()),
        Err(TokenError::Algorithm)
    );
    let crit = with_header(json!({"alg": "EdDSA", "crit": ["b64"]}));
    assert_eq!(
        validate(&crit, &[public()], &v()),
        Err(TokenError::Malformed)
    );
}

#[test]
fn hs256_keyed_with_the_public_key_is_refused() {
    // Algorithm confusion: a verifier that let the header pick the algorithm would check an
    // HMAC keyed with the public key, which every task and gateway holds.
    let payload = serde_json::to_vec(&claims()).unwrap();
    let pem = public().to_pem();
    let raw = *public().as_bytes();
    let raw_b64 = URL_SAFE_NO_PAD.encode(raw);
    let der_b64 = pem
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect::<String>();
    let secrets: [&[u8]; 4] = [pem.as_bytes(), &raw, der_b64.as_bytes(), raw_b64.as_bytes()];
    let hs256 = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
    for secret in secrets {
        let t = sign_raw_hs256(&hs256, &payload, secret);
        assert_eq!(validate(&t, &[public()], &v()), Err(TokenError::Algorithm));
        // The same HMAC under the EdDSA header: not an Ed25519 signature.
        let t = sign_raw_hs256(HEADER_B64, &payload, secret);
        assert_eq!(validate(&t, &[public()], &v()), Err(TokenError::Signature));
    }
}

#[test]
fn a_fresh_key_pair_is_not_the_control_planes() {
    let t = Claims::new("sess_a", "proj_a", NOW, 3600).mint(&SigningKey::generate());
    assert_eq!(validate(&t, &[public()], &v()), Err(TokenError::Signature));
}

#[test]
fn keys_round_trip_through_pem_and_refuse_other_text() {
    let pem = key().to_pem();
    assert!(
        pem.starts_with("-----BEGIN PRIVATE KEY-----\n"),
        "{}",
        pem.as_str()
    );
    let again = SigningKey::from_pem(&pem).unwrap();
    assert_eq!(again.verifying_key(), key().verifying_key());
    assert_eq!(again.mac(b"m"), key().mac(b"m"));
    let public_pem = public().to_pem();
    assert!(public_pem.starts_with("-----BEGIN PUBLIC KEY-----\n"));
    assert_eq!(VerifyingKey::from_pem(&public_pem).unwrap(), public());
    // What openssl writes (`openssl genpkey -algorithm ed25519`, RFC 8410's example key).
    let openssl = "-----BEGIN PRIVATE KEY-----\n\
        MC4CAQAwBQYDK2VwBCIEINTuctv5E1hK1bbY8fdp+K06/nwoy/HU++CXqI9EdVhC\n\
        -----END PRIVATE KEY-----\n";
    let k = SigningKey::from_pem(openssl).unwrap();
    let t = Claims::new("sess_a", "proj_a", NOW, 3600).mint(&k);
    assert!(validate(&t, &[k.verifying_key().clone()], &v()).is_ok());
    assert_eq!(
        SigningKey::from_pem(&public_pem).map(drop),
        Err(KeyFormatError::Private)
    );
    assert_eq!(
        VerifyingKey::from_pem(&pem).map(drop),
        Err(KeyFormatError::Public)
    );
    assert_eq!(
        VerifyingKey::from_pem("hunter2").map(drop),
        Err(KeyFormatError::Public)
    );
    assert!(!format!("{:?}", key()).contains(&pem[30..60]));
}

#[test]
fn the_mac_key_is_neither_key_of_the_pair() {
    let msg = b"cursor";
    let pem = public().to_pem();
    for k in [&public().as_bytes()[..], pem.as_bytes(), &[0u8; 32]] {
        let with_public = EncodingKey::from_secret(k);
        let hmac = jsonwebtoken::crypto::sign(msg, &with_public, Algorithm::HS256).unwrap();
        assert_ne!(key().mac(msg), hmac);
    }
    assert_ne!(key().mac(msg), named(b"other").mac(msg));
}

#[test]
fn time_rules_with_leeway() {
    let k = [public()];
    let at = |f: &str, x: u64| {
        with(|c| {
            c.insert(f.into(), json!(x));
        })
    };
    assert_eq!(
        validate(
            &with(|c| {
                c.remove("exp");
            }),
            &k,
            &v()
        ),
        Err(TokenError::MissingExpiry)
    );
    assert_eq!(
        validate(&at("exp", NOW - 31), &k, &v()),
        Err(TokenError::Expired)
    );
    assert!(
        validate(&at("exp", NOW - 29), &k, &v()).is_ok(),
        "inside the leeway"
    );
    assert_eq!(
        validate(&at("nbf", NOW + 31), &k, &v()),
        Err(TokenError::NotYetValid)
    );
    assert!(validate(&at("nbf", NOW + 29), &k, &v()).is_ok());
    assert_eq!(
        validate(&at("iat", NOW + 31), &k, &v()),
        Err(TokenError::IssuedInFuture)
    );
    assert!(
        validate(
            &with(|c| {
                c.remove("nbf");
                c.remove("iat");
            }),
            &k,
            &v()
        )
        .is_ok()
    );
    let zero = Validation {
        leeway_seconds: 0,
        ..v()
    };
    assert_eq!(
        validate(&at("exp", NOW), &k, &zero),
        Err(TokenError::Expired)
    );
    assert_eq!(
        validate(
            &with(|c| {
                c.insert("exp".into(), json!("soon"));
            }),
            &k,
            &v()
        ),
        Err(TokenError::Malformed)
    );
}

#[test]
fn identity_rules() {
    let k = [public()];
    // (claim, its value or None to leave it out, the outcome)
    let cases = [
        ("iss", Some(json!("evil")), Err(TokenError::Issuer)),
        ("iss", None, Err(TokenError::Issuer)),
        ("aud", Some(json!(["other"])), Err(TokenError::Audience)),
        ("aud", Some(json!("other")), Err(TokenError::Audience)),
        ("aud", Some(json!("cdp-access")), Ok(())),
        ("aud", Some(json!(["x", "cdp-access"])), Ok(())),
        ("aud", None, Err(TokenError::Audience)),
        ("aud", Some(json!(null)), Err(TokenError::Audience)),
        ("aud", Some(json!(7)), Err(TokenError::Malformed)),
        (
            "aud",
            Some(json!({"cdp-access": true})),
            Err(TokenError::Malformed),
        ),
        (
            "aud",
            Some(json!(["cdp-access", 7])),
            Err(TokenError::Malformed),
        ),
        ("sessionId", Some(json!(7)), Err(TokenError::Malformed)),
        ("sessionId", Some(json!("sess_b")), Err(TokenError::Session)),
        ("sessionId", None, Err(TokenError::Session)),
        ("sub", Some(json!("sess_b")), Err(TokenError::Session)),
        ("sub", None, Ok(())),
        ("projectId", Some(json!("proj_b")), Err(TokenError::Project)),
    ];
    for (claim, value, want) in cases {
        let token = with(|c| match value.clone() {
            Some(x) => drop(c.insert(claim.into(), x)),
            None => drop(c.remove(claim)),
        });
        assert_eq!(
            validate(&token, &k, &v()).map(drop),
            want,
            "{claim} = {value:?}"
        );
    }
    let any_project = Validation {
        project_id: None,
        ..v()
    };
    let other_project = with(|c| drop(c.insert("projectId".into(), json!("proj_b"))));
    assert!(validate(&other_project, &k, &any_project).is_ok());
}

#[test]
fn escaped_strings_in_claims_read_as_their_text() {
    // JSON escapes make serde copy a string it would otherwise borrow: same rules.
    let payload = serde_json::to_string(&claims())
        .unwrap()
        .replace("\"sess_a\"", "\"sess\\u005fa\"")
        .replace("\"cdp-access\"", "\"cdp\\u002daccess\"");
    assert!(
        payload.contains("\\u005f") && payload.contains("\\u002d"),
        "{payload}"
    );
    let t = sign_raw(HEADER_B64, payload.as_bytes(), &key());
    let verified = validate(&t, &[public()], &v()).unwrap();
    assert_eq!(verified.session_id, "sess_a");
    assert_eq!(verified.project_id.as_deref(), Some("proj_a"));
}

#[test]
fn payload_must_be_a_json_object() {
    // The claims by position, in `Registered`' field order: serde would fill a struct from it.
    let array = json!([
        ISSUER,
        "sess_a",
        [AUDIENCE],
        NOW + 3600,
        NOW,
        NOW,
        "sess_a",
        "proj_a"
    ]);
    let t = sign_raw(HEADER_B64, &serde_json::to_vec(&array).unwrap(), &key());
    assert_eq!(validate(&t, &[public()], &v()), Err(TokenError::Malformed));
    for payload in [&b" [1]"[..], b"\"x\"", b"null", b"3"] {
        let t = sign_raw(HEADER_B64, payload, &key());
        assert_eq!(validate(&t, &[public()], &v()), Err(TokenError::Malformed));
    }
    // Whitespace before the object is still an object.
    let mut spaced = b" \n".to_vec();
    spaced.extend(serde_json::to_vec(&claims()).unwrap());
    assert!(validate(&sign_raw(HEADER_B64, &spaced, &key()), &[public()], &v()).is_ok());
}

#[test]
fn any_crit_header_is_refused() {
    for crit in [
        json!(null),
        json!([]),
        json!(["exp"]),
        json!("b64"),
        json!({}),
    ] {
        let t = with_header(json!({"alg": "EdDSA", "typ": "JWT", "crit": crit}));
        assert_eq!(
            validate(&t, &[public()], &v()),
            Err(TokenError::Malformed),
            "crit: {crit}"
        );
    }
    // A header that is an array would be read by position: `alg`, then `crit`.
    for header in [json!(["EdDSA"]), json!(["EdDSA", null])] {
        assert_eq!(
            validate(&with_header(header.clone()), &[public()], &v()),
            Err(TokenError::Malformed),
            "{header}"
        );
    }
}

#[test]
fn exp_beyond_the_longest_session_is_refused() {
    let k = [public()];
    let exp = |x: serde_json::Value| {
        with(|c| {
            c.insert("exp".into(), x);
        })
    };
    let longest = NOW + MAX_SESSION_SECONDS;
    assert!(validate(&exp(json!(longest)), &k, &v()).is_ok());
    assert!(
        validate(&exp(json!(longest + 30)), &k, &v()).is_ok(),
        "inside the leeway"
    );
    for far in [json!(longest + 31), json!(u64::MAX), json!(1e308)] {
        assert_eq!(
            validate(&exp(far.clone()), &k, &v()),
            Err(TokenError::ExpiryTooFar),
            "exp {far}"
        );
    }
    // What the control plane mints for its longest session timeout passes.
    let t = Claims::new("sess_a", "proj_a", NOW, MAX_SESSION_SECONDS).mint(&key());
    assert!(
        validate(
            &t,
            &k,
            &Validation {
                leeway_seconds: 0,
                ..v()
            }
        )
        .is_ok()
    );
}

#[test]
fn claim_rules_are_ours_where_jsonwebtoken_differs() {
    let k = [public()];
    // The caller's clock, not the system's: a token of 2001 checked as of 2001 passes, and
    // one valid by the system clock but expired as of `now` is refused.
    let then = 1_000_000_000;
    let old = Claims::new("sess_a", "proj_a", then, 60).mint(&key());
    assert!(validate(&old, &k, &Validation { now: then, ..v() }).is_ok());
    let fresh = Claims::new("sess_a", "proj_a", crate::time::unix_millis() / 1000, 60);
    assert_eq!(
        validate(
            &fresh.mint(&key()),
            &k,
            &Validation {
                now: fresh.issued.exp + 31,
                ..v()
            }
        ),
        Err(TokenError::Expired)
    );
    // jsonwebtoken still accepts a token at exactly `exp + leeway`; it has passed.
    let at_edge = with(|c| {
        c.insert("exp".into(), json!(NOW - 30));
    });
    assert_eq!(validate(&at_edge, &k, &v()), Err(TokenError::Expired));
    // jsonwebtoken has no `iat` rule and no horizon.
    let iat = with(|c| {
        c.insert("iat".into(), json!(NOW + 3600));
    });
    assert_eq!(validate(&iat, &k, &v()), Err(TokenError::IssuedInFuture));
    // jsonwebtoken would take an array of issuers; the claims name one issuer.
    let issuers = with(|c| {
        c.insert("iss".into(), json!([ISSUER]));
    });
    assert_eq!(validate(&issuers, &k, &v()), Err(TokenError::Malformed));
    // The time rules come before `iss`/`aud`, as they always have: expired and from another
    // issuer is reported as expired.
    let both = with(|c| {
        c.insert("exp".into(), json!(NOW - 3600));
        c.insert("iss".into(), json!("evil"));
    });
    assert_eq!(validate(&both, &k, &v()), Err(TokenError::Expired));
}

#[test]
fn a_signed_token_is_judged_again_by_every_claim_rule_and_its_key() {
    let t = Claims::new("sess_a", "proj_a", NOW, 3600).mint(&key());
    let two = [other(b"a"), public()];
    let signed = verify_signature(&t, &two).unwrap();
    assert_eq!(signed.key_index(&two), Some(1));
    assert_eq!(check_signed(&signed, &two, &v()), validate(&t, &two, &v()));
    // Another time, another session, another project: the rules run again.
    let later = Validation {
        now: NOW + 3600 + 30,
        ..v()
    };
    assert_eq!(
        check_signed(&signed, &two, &later),
        Err(TokenError::Expired)
    );
    let other_session = Validation {
        session_id: "sess_b",
        ..v()
    };
    assert_eq!(
        check_signed(&signed, &two, &other_session),
        Err(TokenError::Session)
    );
    assert_eq!(
        check_signed_any_session(&signed, &two, Some("proj_b"), 30, NOW),
        Err(TokenError::Project)
    );
    assert_eq!(
        check_signed_any_session(&signed, &two, None, 30, NOW).map(|ok| ok.key_index),
        Ok(1)
    );
    // Its key rotated out: refused as a signature that matches no key; moved: found.
    assert_eq!(
        check_signed(&signed, &[other(b"a")], &v()),
        Err(TokenError::Signature)
    );
    assert_eq!(
        check_signed(&signed, &[public()], &v()).map(|ok| ok.key_index),
        Ok(0)
    );
    // A bad signature or shape gives nothing to keep, with the reason validate gives.
    let mut bad = t.clone().into_bytes();
    let at = t.rfind('.').unwrap() + 10;
    bad[at] = if bad[at] == b'A' { b'B' } else { b'A' };
    let bad = String::from_utf8(bad).unwrap();
    assert_eq!(
        verify_signature(&bad, &two).map(drop),
        Err(TokenError::Signature)
    );
    assert_eq!(
        verify_signature("a.b", &two).map(drop),
        Err(TokenError::Malformed)
    );
    assert!(!format!("{signed:?}").contains("sess_a"));
}

#[test]
fn keys_are_tried_in_order_and_none_is_a_signature_refusal() {
    let t = Claims::new("sess_a", "proj_a", NOW, 3600).mint(&key());
    assert_eq!(validate(&t, &[], &v()), Err(TokenError::Signature));
    let three = [other(b"a"), other(b"b"), public()];
    assert_eq!(validate(&t, &three, &v()).map(|ok| ok.key_index), Ok(2));
    // A payload that is not an object is only looked at under a matching key.
    let array = sign_raw(HEADER_B64, b"[1]", &key());
    assert_eq!(
        validate(&array, &[other(b"a")], &v()),
        Err(TokenError::Signature)
    );
}

#[test]
fn header_members_other_than_alg_and_crit_are_informational() {
    // As before jsonwebtoken: a signed token is not refused for what it says beside `alg`
    // (`jsonwebtoken::decode` would call a non-string `kid` or extra member malformed).
    for header in [
        json!({"alg": "EdDSA", "typ": "JWT", "x": 1}),
        json!({"alg": "EdDSA", "kid": 5}),
        json!({"alg": "EdDSA", "kid": "k1"}),
    ] {
        assert!(
            validate(&with_header(header.clone()), &[public()], &v()).is_ok(),
            "{header}"
        );
    }
}

#[test]
fn minted_tokens_carry_the_eddsa_jwt_header() {
    let t = Claims::new("sess_a", "proj_a", NOW, 3600).mint(&key());
    let header = URL_SAFE_NO_PAD
        .decode(t.split('.').next().unwrap())
        .unwrap();
    let header: serde_json::Value = serde_json::from_slice(&header).unwrap();
    assert_eq!(header, json!({"alg": "EdDSA", "typ": "JWT"}));
}

#[test]
fn a_sessions_token_minted_again_is_the_same_token() {
    let first = Claims::for_session("sess_a", "proj_a", NOW - 10, NOW + 3600).mint(&key());
    let again = Claims::for_session("sess_a", "proj_a", NOW - 10, NOW + 3600).mint(&key());
    assert_eq!(first, again, "Ed25519 signs deterministically");
    let ok = validate(&first, &[public()], &v()).unwrap();
    assert_eq!(ok.exp, (NOW + 3600) as f64);
    let c = Claims::for_session("sess_a", "proj_a", NOW - 10, NOW + 3600);
    assert_eq!(
        (c.issued.iat, c.issued.nbf, c.issued.exp),
        (NOW - 10, NOW - 10, NOW + 3600)
    );
    assert_eq!(c.nonce.len(), 32);
    assert!(
        c.nonce
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    );
    assert_eq!(c.issued.jti, c.nonce);
    let b = Claims::for_session("sess_b", "proj_a", NOW - 10, NOW + 3600);
    assert_ne!(b.nonce, c.nonce, "one nonce per session");
    // Another key (a rotation): another token, valid with that key.
    let rotated =
        Claims::for_session("sess_a", "proj_a", NOW - 10, NOW + 3600).mint(&named(b"next-key"));
    assert_ne!(rotated, first);
    assert!(validate(&rotated, &[other(b"next-key")], &v()).is_ok());
}

#[test]
fn nonce_has_128_bits() {
    let c = Claims::new("s", "p", NOW, 1);
    assert_eq!(c.nonce.len(), 32);
    assert_ne!(c.nonce, Claims::new("s", "p", NOW, 1).nonce);
}

#[test]
fn reasons_are_unique() {
    let mut r: Vec<_> = TokenError::ALL.iter().map(|e| e.reason()).collect();
    r.sort();
    r.dedup();
    assert_eq!(r.len(), TokenError::ALL.len());
}
