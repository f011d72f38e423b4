//! Token costs on the connection path: validating a typical minted token (one key, and two
//! keys during a rotation where the second one matches), the claim rules alone on a token
//! whose signature was verified before (what a hit of the controller's verified-token cache
//! still runs), and minting one.
//!
//! Keys, claims and the token are built once, outside the timed loop; `now` is fixed so the
//! result does not depend on the clock.
// Test code is not held to the shape limits of clippy.toml: a test reads top to bottom.
#![allow(clippy::too_many_lines, clippy::too_many_arguments)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use wallcrawler_contract::token::{Validation, check_signed, validate, verify_signature};
use wallcrawler_contract::{Claims, SigningKey};

const NOW: u64 = 1_800_000_000;

fn bench_token(c: &mut Criterion) {
    let key = SigningKey::from_seed(b"0123456789abcdef0123456789abcdef");
    let retired = SigningKey::from_seed(b"fedcba9876543210fedcba9876543210");
    let claims = Claims::new(
        "sess_0f4c2a9e-5b7d-4e21-9c3a-7d8e1f2a3b4c",
        "proj_bench",
        NOW,
        3600,
    );
    let token = claims.mint(&key);
    let v = Validation {
        session_id: &claims.issued.session_id,
        project_id: Some("proj_bench"),
        leeway_seconds: 30,
        now: NOW,
    };
    let one = [key.verifying_key().clone()];
    let two = [retired.verifying_key().clone(), key.verifying_key().clone()];
    assert_eq!(validate(&token, &one, &v).map(|ok| ok.key_index), Ok(0));
    assert_eq!(validate(&token, &two, &v).map(|ok| ok.key_index), Ok(1));

    let mut g = c.benchmark_group("token");
    g.bench_function("validate/1_key", |b| {
        b.iter(|| validate(black_box(&token), black_box(&one), black_box(&v)))
    });
    g.bench_function("validate/2_keys_second_matches", |b| {
        b.iter(|| validate(black_box(&token), black_box(&two), black_box(&v)))
    });
    let signed = verify_signature(&token, &one).expect("a valid token");
    assert_eq!(check_signed(&signed, &one, &v), validate(&token, &one, &v));
    g.bench_function("check_signed/1_key", |b| {
        b.iter(|| check_signed(black_box(&signed), black_box(&one), black_box(&v)))
    });
    g.bench_function("mint", |b| {
        b.iter(|| black_box(&claims).mint(black_box(&key)))
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(std::time::Duration::from_secs(1)).measurement_time(std::time::Duration::from_secs(3));
    targets = bench_token
}
criterion_main!(benches);
