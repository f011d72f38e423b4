//! The verified-token cache: a token whose Ed25519 signature matched a trusted key is
//! remembered, so the same token presented again (a client reconnecting) skips the signature
//! check. Only the signature check: every claim rule (expiry against the time of this check,
//! with its leeway, `nbf`, `iat`, issuer, audience, the session binding, the project) is judged
//! again at every use, by the same contract code a fresh token goes through
//! ([`wallcrawler_contract::token::check_signed`]).
//!
//! - Keyed by the SHA-256 of the whole token string, signature included: the token itself is
//!   never kept, and a forged token (the same claims under another signature) hashes to
//!   another key, so it can only be checked in full, and fails.
//! - Only a token that passed every rule is remembered: nothing refused is kept (no negative
//!   caching), so no request can put anything into the cache that a valid token did not.
//! - An entry remembers the public key that matched, not a position in the key set. A hit whose
//!   key is no longer in the current set (rotated out of `AWSCURRENT`/`AWSPREVIOUS`) is
//!   forgotten and the token checked in full against the current keys, where it fails as it
//!   would have without the cache. A refresh that keeps the key (the usual rotation, where the
//!   old key becomes `AWSPREVIOUS`) keeps the entries valid.
//! - An entry lives until the token's `exp` (moka's per-entry [`Expiry`]), after which the
//!   token is refused by its expiry rule anyway (past the leeway) or checked in full (within
//!   it); at most [`CAPACITY`] entries, moka evicting by its TinyLFU policy beyond that.
//!
//! Memory per entry, about 0.6 KiB: the 32-byte hash (key), the entry behind an `Arc` (the
//! 32-byte public key, the decoded payload — 280 to 330 bytes for a minted session token or
//! viewer credential —, its expiry), and moka's own bookkeeping per entry (hash table slot,
//! access-order node, timer-wheel node for the per-entry expiry, counters: a few hundred
//! bytes). [`CAPACITY`] entries stay under 8 MiB.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use moka::Expiry;
use sha2::{Digest, Sha256};
use wallcrawler_contract::token::{self, Signed, Verified};
use wallcrawler_contract::viewer::ViewerVerified;
use wallcrawler_contract::{TokenError, VerifyingKey};

use super::{AuthError, KeySource, unix_now};

/// Tokens remembered at most at once.
pub const CAPACITY: u64 = 10_000;

/// The SHA-256 of a token string.
type TokenHash = [u8; 32];

/// What is remembered of a verified token.
struct Entry {
    signed: Signed,
    /// The token's `exp`, Unix seconds (rounded down): when moka drops the entry.
    exp: u64,
}

/// Each entry expires at its token's `exp`.
struct UntilExp;

impl Expiry<TokenHash, Arc<Entry>> for UntilExp {
    fn expire_after_create(
        &self,
        _key: &TokenHash,
        entry: &Arc<Entry>,
        _created_at: Instant,
    ) -> Option<Duration> {
        Some(Duration::from_secs(entry.exp.saturating_sub(unix_now())))
    }
}

/// What a check of a credential gives, and when the credential expires.
pub trait Expires {
    /// The credential's `exp`, Unix seconds.
    fn exp(&self) -> f64;
}

impl Expires for Verified {
    fn exp(&self) -> f64 {
        self.exp
    }
}

impl Expires for ViewerVerified {
    fn exp(&self) -> f64 {
        self.exp
    }
}

/// Tokens whose signature was verified, by the hash of the token (see the module
/// documentation). One per [`crate::auth::Authenticator`] and per gateway verifier.
pub struct TokenCache {
    entries: moka::future::Cache<TokenHash, Arc<Entry>>,
    /// Checks the cache did not answer (the signature verified, or refused before that).
    full_checks: AtomicU64,
}

impl Default for TokenCache {
    fn default() -> Self {
        Self::new(CAPACITY)
    }
}

impl TokenCache {
    /// A cache of at most `capacity` tokens.
    pub fn new(capacity: u64) -> Self {
        Self {
            entries: moka::future::Cache::builder()
                .max_capacity(capacity)
                .expire_after(UntilExp)
                .build(),
            full_checks: AtomicU64::new(0),
        }
    }

    /// How many checks were not answered from the cache: the token was checked in full, its
    /// signature included (or refused by a structure rule before it).
    pub fn full_checks(&self) -> u64 {
        self.full_checks.load(Ordering::Relaxed)
    }

    /// Tokens remembered now (after moka's pending evictions and expiries have run).
    pub async fn len(&self) -> u64 {
        self.entries.run_pending_tasks().await;
        self.entries.entry_count()
    }

    /// Whether nothing is remembered (see [`Self::len`]).
    pub async fn is_empty(&self) -> bool {
        self.len().await == 0
    }

    /// Whether `token` is remembered.
    pub fn contains(&self, token: &str) -> bool {
        self.entries.contains_key(&digest(token))
    }

    /// Checks `token`: its signature against the keys of `keys` unless a previous check
    /// remembered it (refreshing the keys once, rate-limited by the source, when it matches
    /// none), then `rules` (the claim rules, [`token::check_signed`] or one of its siblings,
    /// with the time and session of this check) every time. Remembers it once every rule
    /// passed.
    pub async fn check<T: Expires>(
        &self,
        token: &str,
        keys: &dyn KeySource,
        rules: impl Fn(&Signed, &[VerifyingKey]) -> Result<T, TokenError>,
    ) -> Result<T, AuthError> {
        let current = keys.keys().ok_or(AuthError::KeysUnavailable)?;
        let hash = digest(token);
        if let Some(entry) = self.entries.get(&hash).await {
            match rules(&entry.signed, &current) {
                // Its key is not trusted any more: forgotten, and the token checked in full.
                Err(TokenError::Signature) => self.entries.invalidate(&hash).await,
                judged => return Ok(judged?),
            }
        }
        self.full_checks.fetch_add(1, Ordering::Relaxed);
        let (signed, current) = match token::verify_signature(token, &current) {
            Err(TokenError::Signature) => match keys.refresh_after_miss().await {
                Some(fresh) => (token::verify_signature(token, &fresh)?, fresh),
                None => return Err(AuthError::Token(TokenError::Signature)),
            },
            other => (other?, current),
        };
        let verified = rules(&signed, &current)?;
        let exp = verified.exp().floor() as u64;
        self.entries
            .insert(hash, Arc::new(Entry { signed, exp }))
            .await;
        Ok(verified)
    }
}

fn digest(token: &str) -> TokenHash {
    Sha256::digest(token.as_bytes()).into()
}

/// A key source whose set a test replaces (a rotation).
#[cfg(test)]
pub(crate) struct SwappableKeys(std::sync::Mutex<crate::auth::KeySet>);

#[cfg(test)]
impl SwappableKeys {
    /// Starts with the public keys of `names` (testkit's names).
    pub(crate) fn new(names: &[&str]) -> Self {
        Self(std::sync::Mutex::new(Self::set(names)))
    }

    /// From now on, the public keys of `names` only.
    pub(crate) fn rotate(&self, names: &[&str]) {
        *self.0.lock().unwrap() = Self::set(names);
    }

    fn set(names: &[&str]) -> crate::auth::KeySet {
        Arc::new(
            names
                .iter()
                .map(|n| wallcrawler_testkit::keys::public_key(n))
                .collect(),
        )
    }
}

#[cfg(test)]
impl KeySource for SwappableKeys {
    fn keys(&self) -> Option<crate::auth::KeySet> {
        Some(self.0.lock().unwrap().clone())
    }
}

/// `token` with one character of its signature changed.
#[cfg(test)]
pub(crate) fn tampered(token: &str) -> String {
    let mut bytes = token.as_bytes().to_vec();
    let at = token.rfind('.').unwrap() + 10;
    bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
    String::from_utf8(bytes).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::StaticKeys;
    use wallcrawler_contract::Claims;
    use wallcrawler_contract::token::Validation;
    use wallcrawler_testkit::keys::{public_key, signing_key};

    #[tokio::test]
    async fn the_cache_stays_bounded() {
        let keys = StaticKeys::new(public_key("k"));
        let cache = TokenCache::new(8);
        let now = unix_now();
        for i in 0..64 {
            let session = format!("sess_{i}");
            let t = Claims::new(&session, "p", now, 600).mint(&signing_key("k"));
            let v = Validation {
                session_id: &session,
                project_id: None,
                leeway_seconds: 30,
                now,
            };
            cache
                .check(&t, &keys, |s, k| token::check_signed(s, k, &v))
                .await
                .unwrap();
        }
        assert_eq!(cache.full_checks(), 64);
        let held = cache.len().await;
        assert!((1..=8).contains(&held), "{held} entries held");
    }

    #[tokio::test]
    async fn an_entry_lives_until_the_tokens_exp() {
        let keys = StaticKeys::new(public_key("k"));
        let cache = TokenCache::default();
        let now = unix_now();
        // Accepted inside the leeway, already past its exp: nothing to keep.
        let t = Claims::new("sess_a", "p", now - 70, 60).mint(&signing_key("k"));
        let v = Validation {
            session_id: "sess_a",
            project_id: None,
            leeway_seconds: 30,
            now,
        };
        assert!(
            cache
                .check(&t, &keys, |s, k| token::check_signed(s, k, &v))
                .await
                .is_ok()
        );
        assert!(!cache.contains(&t));
        let again = cache.check(&t, &keys, |s, k| token::check_signed(s, k, &v));
        assert!(again.await.is_ok());
        assert_eq!(cache.full_checks(), 2, "checked in full both times");
    }
}
