//! The token keys of the tests: the one helper every test mints with.
//!
//! A test names its key (`"integration-test-signing-key"`, `"another-key"`...): the name's
//! SHA-256 is the Ed25519 seed, so the same name gives the same pair in every process (a test
//! mints with [`signing_key`], hands the controller or gateway [`public_pem`] only — what a
//! task holds — and a name of its own is a key the control plane never had).

use std::path::PathBuf;

use sha2::{Digest, Sha256};
use wallcrawler_contract::{Claims, SigningKey, VerifyingKey};

/// The private key of `name` (what only the control plane holds).
pub fn signing_key(name: &str) -> SigningKey {
    SigningKey::from_seed(&Sha256::digest(name.as_bytes()).into())
}

/// The public key of `name`.
pub fn public_key(name: &str) -> VerifyingKey {
    signing_key(name).verifying_key().clone()
}

/// The public key of `name` as SPKI PEM (`WALLCRAWLER_JWT_PUBLIC_KEY`).
pub fn public_pem(name: &str) -> String {
    public_key(name).to_pem()
}

/// A file holding the private key of `name` as PKCS#8 PEM, mode 0600
/// (`WALLCRAWLER_JWT_PRIVATE_KEY_FILE` of `local` and `token`); one per name and process.
pub fn private_key_file(name: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("wallcrawler-test-keys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory for test keys");
    let hex: String = Sha256::digest(name.as_bytes())[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let path = dir.join(format!("{hex}.pem"));
    if !path.exists() {
        let tmp = dir.join(format!("{hex}.{}.tmp", crate::unique("k")));
        std::fs::write(&tmp, signing_key(name).to_pem().as_bytes()).expect("writing a test key");
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::rename(&tmp, &path).expect("placing a test key");
    }
    path
}

/// A token for `session` (and `project`) signed with `name`'s key, valid from `now` for `ttl`
/// seconds.
pub fn mint(name: &str, session: &str, project: &str, now: u64, ttl: u64) -> String {
    Claims::new(session, project, now, ttl).mint(&signing_key(name))
}

/// A live-view credential for `session` in `mode` (`"view"` or `"control"`), for one `page`
/// when given, signed with `name`'s key, valid over `valid` (Unix seconds).
pub fn mint_viewer(
    name: &str,
    session: &str,
    mode: &str,
    page: Option<&str>,
    valid: std::ops::Range<u64>,
) -> String {
    use wallcrawler_contract::viewer::{Mode, ViewerClaims};
    let mode = Mode::from_name(mode).expect("view or control");
    let claims = ViewerClaims::new(session, "", mode, valid.start, valid.end - valid.start);
    let claims = match page {
        Some(p) => claims.for_page(p).expect("a target id"),
        None => claims,
    };
    claims.mint(&signing_key(name))
}
