//! The CDP access token: an EdDSA (Ed25519) JWT minted by the control plane and checked by the
//! proxy and the gateway.
//!
//! Only the control plane holds the private key ([`SigningKey`]); controllers and gateways hold
//! public keys ([`VerifyingKey`]), so a compromised task or gateway can check tokens but not
//! mint one. Signing and the signature check are `jsonwebtoken`'s, for EdDSA alone. Around
//! them, each rule reported with its own refusal reason ([`TokenError::reason`]):
//!
//! - at most [`MAX_TOKEN_BYTES`]; three base64url (unpadded) segments;
//! - header `alg` exactly `EdDSA` (no `none`, no HMAC — an HS256 token keyed with the public
//!   key's bytes is the classic algorithm confusion —, no other asymmetric algorithm), no `crit`
//!   member at all (not even `null`: `jsonwebtoken` parses `crit` but does not act on it);
//! - the signature matches one of the given public keys (key rotation: the index of the one
//!   that did is reported);
//! - header and payload are JSON objects (never arrays read field by field);
//! - `exp` present, not passed, and no further ahead than the longest session
//!   ([`MAX_SESSION_SECONDS`]); `nbf` and `iat`, when present, not in the future — each time
//!   check allowing `leeway` seconds of clock skew;
//! - `iss` is `wallcrawler`; `aud` contains `cdp-access` (a string or an array) and not
//!   `wallcrawler-viewer` (the live view's credential, the viewer module's, never opens CDP);
//! - `sessionId` present and equal to the expected session, `sub` equal too when present;
//! - `projectId` equal to the expected project when one is configured.
//!
//! The claim rules stay ours, in this order, rather than `jsonwebtoken`'s `Validation`: it reads
//! the system clock itself (the caller's `now` could not be honoured), accepts a token at
//! exactly `exp + leeway`, has no `iat` rule and no horizon, and would check `iss`/`aud` before
//! the time rules, changing the reason (a metric label) a token that breaks both is refused for.
//!
//! `jti`, `nonce`, `userId` and `ipAddress` are informational: a token may be reused for several
//! connections until it expires.

use std::borrow::Cow;
use std::marker::PhantomData;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey};
use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor, value::MapAccessDeserializer};
use serde::{Deserialize, Serialize};

/// `iss` of every token.
pub const ISSUER: &str = "wallcrawler";
/// The audience the proxy requires in `aud`.
pub const AUDIENCE: &str = "cdp-access";
/// The audience of the live view's credential (the viewer module's `AUDIENCE`), which a session
/// token may not name.
pub const VIEWER_AUDIENCE: &str = "wallcrawler-viewer";
/// Longest token the proxy will look at.
pub const MAX_TOKEN_BYTES: usize = 4096;
/// Default lifetime of a minted token when nothing else is said (the default session timeout).
pub const DEFAULT_TTL_SECONDS: u64 = 3600;
/// The longest session timeout, seconds. A token lives no longer than its session, so an `exp`
/// further ahead than this (plus leeway) was not minted by the control plane.
pub const MAX_SESSION_SECONDS: u64 = 21_600;

/// Salt and info of the HKDF that derives the control plane's MAC key from the private key.
const MAC_SALT: &[u8] = b"wallcrawler";
const MAC_INFO: &[u8] = b"wallcrawler control-plane mac v1";

/// Why a key could not be read. Messages never contain the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum KeyFormatError {
    /// Not a PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`) holding an Ed25519 key.
    #[error("the private key is not an Ed25519 key in PKCS#8 PEM (-----BEGIN PRIVATE KEY-----)")]
    Private,
    /// Not an SPKI PEM (`-----BEGIN PUBLIC KEY-----`) holding an Ed25519 key.
    #[error("the public key is not an Ed25519 key in SPKI PEM (-----BEGIN PUBLIC KEY-----)")]
    Public,
}

/// The control plane's Ed25519 private key: signs tokens (EdDSA) and, through a key derived
/// from it (HKDF-SHA256), MACs the values it hands out and must recognise (cursors). Only the
/// control plane holds one; controllers and gateways hold [`VerifyingKey`]s.
#[derive(Clone)]
pub struct SigningKey {
    /// The pair itself (zeroed on drop), for the PEM and the public half.
    pair: ed25519_dalek::SigningKey,
    /// The same key in PKCS#8 DER, as `jsonwebtoken` signs with it.
    encoding: EncodingKey,
    /// The HMAC key of [`SigningKey::mac`].
    mac: EncodingKey,
    verifying: VerifyingKey,
}

impl SigningKey {
    /// A fresh key pair from the OS random source.
    pub fn generate() -> Self {
        let mut seed = zeroize::Zeroizing::new([0u8; 32]);
        getrandom::fill(seed.as_mut()).expect("the OS random source is available");
        Self::from_seed(&seed)
    }

    /// The key pair of a 32-byte Ed25519 seed (RFC 8032's private key). Tests derive theirs
    /// from a name this way.
    pub fn from_seed(seed: &[u8; 32]) -> Self {
        use ed25519_dalek::pkcs8::EncodePrivateKey as _;
        let pair = ed25519_dalek::SigningKey::from_bytes(seed);
        let der = pair
            .to_pkcs8_der()
            .expect("an Ed25519 key encodes as PKCS#8");
        let mut mac = zeroize::Zeroizing::new([0u8; 32]);
        hkdf::Hkdf::<sha2::Sha256>::new(Some(MAC_SALT), seed)
            .expand(MAC_INFO, mac.as_mut())
            .expect("32 bytes is a valid HKDF-SHA256 length");
        Self {
            encoding: EncodingKey::from_ed_der(der.as_bytes()),
            mac: EncodingKey::from_secret(mac.as_ref()),
            verifying: VerifyingKey::from_dalek(&pair.verifying_key()),
            pair,
        }
    }

    /// Reads a PKCS#8 PEM Ed25519 private key (what `openssl genpkey -algorithm ed25519`
    /// writes, and [`SigningKey::to_pem`]).
    pub fn from_pem(pem: &str) -> Result<Self, KeyFormatError> {
        use ed25519_dalek::pkcs8::DecodePrivateKey as _;
        let pair = ed25519_dalek::SigningKey::from_pkcs8_pem(pem.trim())
            .map_err(|_| KeyFormatError::Private)?;
        Ok(Self::from_seed(&pair.to_bytes()))
    }

    /// This key as PKCS#8 PEM (zeroed when dropped).
    pub fn to_pem(&self) -> zeroize::Zeroizing<String> {
        use ed25519_dalek::pkcs8::{EncodePrivateKey as _, spki::der::pem::LineEnding};
        self.pair
            .to_pkcs8_pem(LineEnding::LF)
            .expect("an Ed25519 key encodes as PKCS#8 PEM")
    }

    /// The public half, which verifies this key's tokens.
    pub fn verifying_key(&self) -> &VerifyingKey {
        &self.verifying
    }

    /// An HMAC-SHA256 of `msg`, base64url, with a key derived from this one (never the private
    /// key itself, and nothing a public key holder can compute): for values the control plane
    /// hands out and must recognise unaltered, such as listing cursors.
    pub fn mac(&self, msg: &[u8]) -> String {
        jsonwebtoken::crypto::sign(msg, &self.mac, Algorithm::HS256)
            .expect("HS256 signs with any key")
    }
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKey(<redacted>)")
    }
}

/// An Ed25519 public key: checks tokens, cannot mint them.
#[derive(Clone)]
pub struct VerifyingKey {
    raw: [u8; 32],
    decoding: DecodingKey,
}

impl VerifyingKey {
    fn from_dalek(key: &ed25519_dalek::VerifyingKey) -> Self {
        let raw = key.to_bytes();
        Self {
            raw,
            decoding: DecodingKey::from_ed_der(&raw),
        }
    }

    /// Reads an SPKI PEM Ed25519 public key (`-----BEGIN PUBLIC KEY-----`, what
    /// `openssl pkey -pubout` writes, and [`VerifyingKey::to_pem`]).
    pub fn from_pem(pem: &str) -> Result<Self, KeyFormatError> {
        use ed25519_dalek::pkcs8::DecodePublicKey as _;
        let key = ed25519_dalek::VerifyingKey::from_public_key_pem(pem.trim())
            .map_err(|_| KeyFormatError::Public)?;
        Ok(Self::from_dalek(&key))
    }

    /// This key as SPKI PEM.
    pub fn to_pem(&self) -> String {
        use ed25519_dalek::pkcs8::{EncodePublicKey as _, spki::der::pem::LineEnding};
        ed25519_dalek::VerifyingKey::from_bytes(&self.raw)
            .expect("a key read before is valid")
            .to_public_key_pem(LineEnding::LF)
            .expect("an Ed25519 key encodes as SPKI PEM")
    }

    /// The 32 raw bytes of the key (RFC 8032).
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.raw
    }
}

impl PartialEq for VerifyingKey {
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw
    }
}

impl Eq for VerifyingKey {}

impl std::fmt::Debug for VerifyingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "VerifyingKey({})", URL_SAFE_NO_PAD.encode(self.raw))
    }
}

/// The claims the control plane mints.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Claims {
    /// `iss`: always `wallcrawler`.
    pub iss: String,
    /// `sub`: the session id, as `sessionId`.
    pub sub: String,
    /// `aud`: `["cdp-access"]`.
    pub aud: Vec<String>,
    /// `exp`: Unix seconds when the token expires (the session's timeout by default).
    pub exp: u64,
    /// `iat`: Unix seconds when it was minted.
    pub iat: u64,
    /// `nbf`: Unix seconds from which it is valid (the minting time).
    pub nbf: u64,
    /// `jti`: the nonce again, as a token id.
    pub jti: String,
    /// `sessionId`: the only session the token opens.
    #[serde(rename = "sessionId")]
    pub session_id: String,
    /// `projectId`: the session's project.
    #[serde(rename = "projectId")]
    pub project_id: String,
    /// `nonce`: 128 random bits, lower-case hex.
    pub nonce: String,
    /// `userId`: informational, optional.
    #[serde(rename = "userId", skip_serializing_if = "Option::is_none", default)]
    pub user_id: Option<String>,
    /// `ipAddress`: informational, optional.
    #[serde(rename = "ipAddress", skip_serializing_if = "Option::is_none", default)]
    pub ip_address: Option<String>,
}

impl Claims {
    /// Claims for `session_id` valid from `now` for `ttl_seconds`, with a fresh 128-bit nonce.
    pub fn new(session_id: &str, project_id: &str, now: u64, ttl_seconds: u64) -> Self {
        let exp = now.saturating_add(ttl_seconds);
        Self::issued(session_id, project_id, now, exp, random_hex(16))
    }

    /// Claims for `session_id` valid from `iat` until `exp`, with `nonce` (also the `jti`).
    fn issued(session_id: &str, project_id: &str, iat: u64, exp: u64, nonce: String) -> Self {
        Self {
            iss: ISSUER.to_owned(),
            sub: session_id.to_owned(),
            aud: vec![AUDIENCE.to_owned()],
            exp,
            iat,
            nbf: iat,
            jti: nonce.clone(),
            session_id: session_id.to_owned(),
            project_id: project_id.to_owned(),
            nonce,
            user_id: None,
            ip_address: None,
        }
    }

    /// The one token of a session, formed again from what its item keeps: issued at its
    /// creation (`createdAt`, Unix seconds), expiring at its `expiresAt`, with a nonce derived
    /// from the session id. EdDSA (Ed25519) signatures are deterministic, so minting these
    /// claims again with the same key gives the same token, byte for byte: the API can answer
    /// a session's `signingKey` at read time instead of keeping the token in the session item
    /// (and so in its stream). After a key rotation the token is another one, as valid.
    pub fn for_session(
        session_id: &str,
        project_id: &str,
        issued_at: u64,
        expires_at: u64,
    ) -> Self {
        use sha2::{Digest, Sha256};
        let digest = Sha256::new()
            .chain_update(b"wallcrawler session token\0")
            .chain_update(session_id.as_bytes())
            .finalize();
        let nonce: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
        Self::issued(session_id, project_id, issued_at, expires_at, nonce)
    }

    /// Signs these claims with `key` (EdDSA).
    pub fn mint(&self, key: &SigningKey) -> String {
        mint_claims(self, key)
    }
}

/// Signs `claims` with `key` (EdDSA, under `{"typ":"JWT","alg":"EdDSA"}`).
pub(crate) fn mint_claims(claims: &impl Serialize, key: &SigningKey) -> String {
    let header = jsonwebtoken::Header::new(Algorithm::EdDSA);
    // Fails only for a key of another family or claims that do not serialize: neither here.
    jsonwebtoken::encode(&header, claims, &key.encoding).expect("EdDSA signs any claims")
}

/// Signs an arbitrary payload under any header (base64url, as it goes on the wire) with EdDSA.
/// Tests use it to build tokens that break one rule at a time.
pub fn sign_raw(header_b64: &str, payload_json: &[u8], key: &SigningKey) -> String {
    sign_raw_with(header_b64, payload_json, &key.encoding, Algorithm::EdDSA)
}

/// Signs an arbitrary payload under any header with HS256 and `secret` as the HMAC key: what
/// a holder of a public key could forge (algorithm confusion). Tests use it to show it refused.
pub fn sign_raw_hs256(header_b64: &str, payload_json: &[u8], secret: &[u8]) -> String {
    let key = EncodingKey::from_secret(secret);
    sign_raw_with(header_b64, payload_json, &key, Algorithm::HS256)
}

fn sign_raw_with(header_b64: &str, payload: &[u8], key: &EncodingKey, alg: Algorithm) -> String {
    let mut token = format!("{header_b64}.{}", URL_SAFE_NO_PAD.encode(payload));
    let signature =
        jsonwebtoken::crypto::sign(token.as_bytes(), key, alg).expect("the key fits the algorithm");
    token.push('.');
    token.push_str(&signature);
    token
}

/// `n` random bytes, lower-case hex. Used for nonces and generated keys.
pub fn random_hex(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes).expect("the OS random source is available");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What the verifier expects of a token, and the time it checks against.
#[derive(Debug, Clone, Copy)]
pub struct Validation<'a> {
    /// The session this task serves; the token's `sessionId` (and `sub`) must equal it.
    pub session_id: &'a str,
    /// When set, the token's `projectId` must equal it.
    pub project_id: Option<&'a str>,
    /// Clock-skew allowance, in seconds, for `exp`, `nbf` and `iat`.
    pub leeway_seconds: u64,
    /// Seconds since the Unix epoch.
    pub now: u64,
}

/// What a verified token says that the proxy uses.
#[derive(Debug, Clone, PartialEq)]
pub struct Verified {
    /// The token's `sessionId`.
    pub session_id: String,
    /// The token's `projectId`, when it has one.
    pub project_id: Option<String>,
    /// The token's `exp` in Unix seconds (a JSON number, so possibly fractional).
    pub exp: f64,
    /// Index into the key list of the key that verified the signature.
    pub key_index: usize,
}

/// Why a token was refused. Messages are for logs and never contain the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Neither the query nor the header carried a token.
    #[error("no token was presented")]
    Missing,
    /// The same source carried two tokens.
    #[error("more than one token of the same kind was presented")]
    Ambiguous,
    /// Longer than 4096 bytes.
    #[error("the token is longer than 4096 bytes")]
    TooLarge,
    /// Not three base64url parts with JSON header and payload.
    #[error("the token is not a well-formed JWT")]
    Malformed,
    /// The header's `alg` is not `EdDSA`.
    #[error("the token's algorithm is not EdDSA")]
    Algorithm,
    /// The signature matches none of the cached keys.
    #[error("the token's signature matches no current public key")]
    Signature,
    /// No `exp` claim.
    #[error("the token has no exp claim")]
    MissingExpiry,
    /// `exp` (plus leeway) has passed.
    #[error("the token has expired")]
    Expired,
    /// `exp` is further ahead than the longest session lasts.
    #[error("the token's exp is further ahead than the longest session")]
    ExpiryTooFar,
    /// `nbf` is in the future (beyond leeway).
    #[error("the token is not valid yet (nbf in the future)")]
    NotYetValid,
    /// `iat` is in the future (beyond leeway).
    #[error("the token was issued in the future (iat)")]
    IssuedInFuture,
    /// `iss` is not `wallcrawler`.
    #[error("the token's issuer is not wallcrawler")]
    Issuer,
    /// `aud` does not contain `cdp-access`.
    #[error("the token's audience does not include cdp-access")]
    Audience,
    /// `sessionId` or `sub` names another session.
    #[error("the token is for another session")]
    Session,
    /// `projectId` names another project than the task's.
    #[error("the token is for another project")]
    Project,
}

impl TokenError {
    /// A short stable label (metrics, structured logs).
    pub fn reason(self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Ambiguous => "ambiguous",
            Self::TooLarge => "too_large",
            Self::Malformed => "malformed",
            Self::Algorithm => "algorithm",
            Self::Signature => "signature",
            Self::MissingExpiry => "missing_exp",
            Self::Expired => "expired",
            Self::ExpiryTooFar => "exp_too_far",
            Self::NotYetValid => "not_yet_valid",
            Self::IssuedInFuture => "issued_in_future",
            Self::Issuer => "issuer",
            Self::Audience => "audience",
            Self::Session => "session",
            Self::Project => "project",
        }
    }

    /// Every reason, for pre-registering metric series.
    pub const ALL: [TokenError; 15] = [
        Self::Missing,
        Self::Ambiguous,
        Self::TooLarge,
        Self::Malformed,
        Self::Algorithm,
        Self::Signature,
        Self::MissingExpiry,
        Self::Expired,
        Self::ExpiryTooFar,
        Self::NotYetValid,
        Self::IssuedInFuture,
        Self::Issuer,
        Self::Audience,
        Self::Session,
        Self::Project,
    ];
}

/// The header the control plane signs under, base64url: `{"typ":"JWT","alg":"EdDSA"}`
/// (`jsonwebtoken`'s). It passes the header rules, so a token carrying it byte for byte skips
/// decoding and parsing it.
const SIGNED_HEADERS: [&str; 1] = ["eyJ0eXAiOiJKV1QiLCJhbGciOiJFZERTQSJ9"];

/// The header members the rules on top read.
#[derive(Deserialize)]
struct Header<'a> {
    #[serde(borrow)]
    alg: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    crit: Named,
}

/// Whether a member is named at all, whatever its value: `"crit": null` counts.
#[derive(Default)]
struct Named(bool);

impl<'de> Deserialize<'de> for Named {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(d)?;
        Ok(Self(true))
    }
}

/// `T` read from a JSON object only: serde would otherwise fill a struct from an array, field by
/// field in declaration order.
pub(crate) struct Object<T>(pub(crate) T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Only<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Only<T> {
            type Value = T;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map))
            }
        }
        d.deserialize_map(Only(PhantomData)).map(Object)
    }
}

/// `aud`, a string or an array of strings (anything else is malformed): which audiences it
/// names. Read in place, where serde's untagged enum would buffer the value to try each shape.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Audience {
    /// It names `cdp-access` ([`AUDIENCE`]).
    pub(crate) cdp: bool,
    /// It names `wallcrawler-viewer` ([`VIEWER_AUDIENCE`]).
    pub(crate) viewer: bool,
    /// It names something else too.
    pub(crate) other: bool,
}

impl Audience {
    fn name(&mut self, name: &str) {
        match name {
            AUDIENCE => self.cdp = true,
            VIEWER_AUDIENCE => self.viewer = true,
            _ => self.other = true,
        }
    }
}

impl<'de> Deserialize<'de> for Audience {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Names;
        impl<'de> Visitor<'de> for Names {
            type Value = Audience;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string or an array of strings")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Audience, E> {
                let mut a = Audience::default();
                a.name(v);
                Ok(a)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Audience, A::Error> {
                let mut a = Audience::default();
                while let Some(name) = seq.next_element::<Cow<'de, str>>()? {
                    a.name(&name);
                }
                Ok(a)
            }
        }
        d.deserialize_any(Names)
    }
}

/// The registered claims every credential of ours carries (a session token's all of them, a
/// viewer credential's beside its own), strings borrowed from the decoded payload where JSON
/// allows.
#[derive(Deserialize)]
pub(crate) struct Registered<'a> {
    #[serde(borrow)]
    iss: Option<Cow<'a, str>>,
    #[serde(borrow)]
    sub: Option<Cow<'a, str>>,
    aud: Option<Audience>,
    exp: Option<f64>,
    nbf: Option<f64>,
    iat: Option<f64>,
    #[serde(rename = "sessionId", borrow)]
    pub(crate) session_id: Option<Cow<'a, str>>,
    #[serde(rename = "projectId", borrow)]
    pub(crate) project_id: Option<Cow<'a, str>>,
}

impl Registered<'_> {
    /// The time rules, then `iss`, then `aud` as `audience` accepts it: the `exp` it holds.
    pub(crate) fn check_issued(
        &self,
        v: &Validation<'_>,
        audience: impl FnOnce(&Audience) -> bool,
    ) -> Result<f64, TokenError> {
        let times = Times {
            exp: self.exp,
            nbf: self.nbf,
            iat: self.iat,
        };
        let exp = check_times(times, v.now, v.leeway_seconds)?;
        if self.iss.as_deref() != Some(ISSUER) {
            return Err(TokenError::Issuer);
        }
        if !self.aud.as_ref().is_some_and(audience) {
            return Err(TokenError::Audience);
        }
        Ok(exp)
    }

    /// The bindings: `sessionId` present and `v`'s session (`sub` too, when present), and
    /// `projectId` `v`'s project when it names one.
    pub(crate) fn check_bound(&self, v: &Validation<'_>) -> Result<(), TokenError> {
        let session_id = self.session_id.as_deref().ok_or(TokenError::Session)?;
        if session_id != v.session_id || self.sub.as_deref().is_some_and(|s| s != v.session_id) {
            return Err(TokenError::Session);
        }
        if let Some(expected) = v.project_id
            && self.project_id.as_deref() != Some(expected)
        {
            return Err(TokenError::Project);
        }
        Ok(())
    }
}

/// A credential's claims as its rules judge them: a session token's ([`Registered`] alone) or
/// a viewer credential's (the viewer module's, the registered claims and its own).
pub(crate) trait ClaimSet<'a>: Deserialize<'a> {
    /// What a credential that passed says.
    type Verified;
    /// The session it names (`sessionId`), if any.
    fn session_id(&self) -> Option<Cow<'a, str>>;
    /// Every claim rule, in its order, at `v`'s time and for `v`'s session.
    fn check(self, key_index: usize, v: &Validation<'_>) -> Result<Self::Verified, TokenError>;
}

impl<'a> ClaimSet<'a> for Registered<'a> {
    type Verified = Verified;

    fn session_id(&self) -> Option<Cow<'a, str>> {
        self.session_id.clone()
    }

    fn check(self, key_index: usize, v: &Validation<'_>) -> Result<Verified, TokenError> {
        // Ours, and not also a viewer credential's: a token naming both was never minted.
        let exp = self.check_issued(v, |a| a.cdp && !a.viewer)?;
        self.check_bound(v)?;
        Ok(Verified {
            session_id: self.session_id.map(Cow::into_owned).unwrap_or_default(),
            project_id: self.project_id.map(Cow::into_owned),
            exp,
            key_index,
        })
    }
}

/// `payload` (of a token whose signature the key at `key_index` matched) judged as `C` by
/// `v`.
pub(crate) fn judge<'a, C: ClaimSet<'a>>(
    payload: &'a [u8],
    key_index: usize,
    v: &Validation<'_>,
) -> Result<C::Verified, TokenError> {
    let Object(claims): Object<C> =
        serde_json::from_slice(payload).map_err(|_| TokenError::Malformed)?;
    claims.check(key_index, v)
}

/// [`judge`] for whichever session the claims name, every other rule as it is.
pub(crate) fn judge_any_session<'a, C: ClaimSet<'a>>(
    payload: &'a [u8],
    key_index: usize,
    project_id: Option<&str>,
    leeway_seconds: u64,
    now: u64,
) -> Result<C::Verified, TokenError> {
    let Object(claims): Object<C> =
        serde_json::from_slice(payload).map_err(|_| TokenError::Malformed)?;
    // Bound to the credential's own session. An empty `sessionId` is bound to a name no
    // credential carries, so the same rule refuses it (a missing one is refused by that rule
    // anyway).
    let session = claims.session_id().unwrap_or_default();
    let v = Validation {
        session_id: if session.is_empty() { "\0" } else { &session },
        project_id,
        leeway_seconds,
        now,
    };
    claims.check(key_index, &v)
}

/// Checks `token` against `keys` and `v`. Returns what the token says once every rule holds.
pub fn validate(
    token: &str,
    keys: &[VerifyingKey],
    v: &Validation<'_>,
) -> Result<Verified, TokenError> {
    let (key_index, payload) = signature(token, keys)?;
    judge::<Registered>(&payload, key_index, v)
}

/// Checks `token` against `keys` as [`validate`] does, for whichever session the token names:
/// every rule holds but the session binding, and the session the token is for (`sessionId`,
/// with `sub` equal when present) is what the result says. For the connect gateway, which
/// serves every session and routes by that id; the task behind it still checks the token
/// against its own session. A token without `sessionId` is refused as [`validate`] refuses it
/// ([`TokenError::Session`], after the time and issuer rules, so the reason is the same).
pub fn validate_any_session(
    token: &str,
    keys: &[VerifyingKey],
    project_id: Option<&str>,
    leeway_seconds: u64,
    now: u64,
) -> Result<Verified, TokenError> {
    let (key_index, payload) = signature(token, keys)?;
    judge_any_session::<Registered>(&payload, key_index, project_id, leeway_seconds, now)
}

/// A token whose signature one of the keys matched, and its payload, not yet judged by any
/// claim rule: what [`verify_signature`] returns and [`check_signed`] (or
/// the viewer module's `check_signed`) judges. The expensive half of a check (the Ed25519
/// verification) is done once; a caller may keep this and judge it again at every use, at
/// that use's time and for that use's session, without checking the signature again.
///
/// It remembers the public key that matched, not its position: judged against a key set that
/// no longer holds that key (rotated out), it is refused as [`TokenError::Signature`].
#[derive(Clone)]
pub struct Signed {
    /// The raw bytes of the public key whose signature matched.
    key: [u8; 32],
    /// The payload segment, base64url-decoded (JSON, not parsed yet).
    payload: Box<[u8]>,
}

impl Signed {
    /// Where the key that signed it is in `keys`; `None` once it is not among them.
    pub fn key_index(&self, keys: &[VerifyingKey]) -> Option<usize> {
        keys.iter().position(|k| k.raw == self.key)
    }

    /// Bytes held on the heap (the decoded payload), for memory accounting.
    pub fn heap_bytes(&self) -> usize {
        self.payload.len()
    }

    /// The decoded payload, for the claim rules.
    pub(crate) fn payload(&self) -> &[u8] {
        &self.payload
    }
}

impl std::fmt::Debug for Signed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signed")
            .field("key", &URL_SAFE_NO_PAD.encode(self.key))
            .field("payload_bytes", &self.payload.len())
            .finish()
    }
}

/// The structure, header and signature rules of [`validate`], in its order, and nothing
/// else: which key signed `token`, and its payload for [`check_signed`] to judge.
pub fn verify_signature(token: &str, keys: &[VerifyingKey]) -> Result<Signed, TokenError> {
    let (key_index, payload) = signature(token, keys)?;
    Ok(Signed {
        key: keys[key_index].raw,
        payload: payload.into_boxed_slice(),
    })
}

/// The claim rules of [`validate`] on a token whose signature was verified before: refused as
/// [`TokenError::Signature`] when the key that signed it is not among `keys` any more, then
/// every claim rule at `v`'s time and for `v`'s session, as though the token were new.
pub fn check_signed(
    signed: &Signed,
    keys: &[VerifyingKey],
    v: &Validation<'_>,
) -> Result<Verified, TokenError> {
    let key_index = signed.key_index(keys).ok_or(TokenError::Signature)?;
    judge::<Registered>(&signed.payload, key_index, v)
}

/// [`check_signed`] for whichever session the token names, as [`validate_any_session`].
pub fn check_signed_any_session(
    signed: &Signed,
    keys: &[VerifyingKey],
    project_id: Option<&str>,
    leeway_seconds: u64,
    now: u64,
) -> Result<Verified, TokenError> {
    let key_index = signed.key_index(keys).ok_or(TokenError::Signature)?;
    judge_any_session::<Registered>(&signed.payload, key_index, project_id, leeway_seconds, now)
}

/// Structure, header and signature; the payload is read only under a matching key. Separated so
/// a caller can tell "no key matched" (worth refreshing the key set) from every other refusal.
///
/// The signature is `jsonwebtoken`'s EdDSA verification ([`jsonwebtoken::crypto::verify`]),
/// the payload parsed once here. `jsonwebtoken::decode` would parse the header
/// twice more and the payload twice per key tried: validation took 4.73 µs that way against
/// 1.84 µs before `jsonwebtoken`, and connection setup in `scripts/bench/compare.sh` paid for
/// it (`cargo bench --bench token` in crates/contract gives the figures of this way).
pub(crate) fn signature(
    token: &str,
    keys: &[VerifyingKey],
) -> Result<(usize, Vec<u8>), TokenError> {
    let (message, payload_b64, signature_b64) = check_header(token)?;
    for (i, key) in keys.iter().enumerate() {
        let matched = jsonwebtoken::crypto::verify(
            signature_b64,
            message.as_bytes(),
            &key.decoding,
            Algorithm::EdDSA,
        )
        .map_err(|_| TokenError::Signature)?;
        if matched {
            let payload = URL_SAFE_NO_PAD
                .decode(payload_b64)
                .map_err(|_| TokenError::Malformed)?;
            return Ok((i, payload));
        }
    }
    Err(TokenError::Signature)
}

/// The rules before any key is tried, in the order their reasons have always been given: size,
/// three segments, the header an object with `alg` EdDSA and no `crit`, a 64-byte signature.
/// Returns the signed message (header and payload) and the payload and signature segments.
fn check_header(token: &str) -> Result<(&str, &str, &str), TokenError> {
    if token.is_empty() {
        return Err(TokenError::Missing);
    }
    if token.len() > MAX_TOKEN_BYTES {
        return Err(TokenError::TooLarge);
    }
    let mut parts = token.split('.');
    let (Some(header_b64), Some(payload_b64), Some(signature_b64), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenError::Malformed);
    };
    if !SIGNED_HEADERS.contains(&header_b64) {
        let header_json = URL_SAFE_NO_PAD
            .decode(header_b64)
            .map_err(|_| TokenError::Malformed)?;
        let Object(header): Object<Header<'_>> =
            serde_json::from_slice(&header_json).map_err(|_| TokenError::Malformed)?;
        if header.alg.as_deref() != Some("EdDSA") {
            return Err(TokenError::Algorithm);
        }
        if header.crit.0 {
            return Err(TokenError::Malformed);
        }
    }
    let mut signature = [0u8; 65];
    match URL_SAFE_NO_PAD.decode_slice(signature_b64, &mut signature) {
        Ok(64) => {
            let message = &token[..header_b64.len() + 1 + payload_b64.len()];
            Ok((message, payload_b64, signature_b64))
        }
        _ => Err(TokenError::Signature),
    }
}

/// The time claims of a token, as JSON numbers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Times {
    pub(crate) exp: Option<f64>,
    pub(crate) nbf: Option<f64>,
    pub(crate) iat: Option<f64>,
}

/// The time rules, in the order their reasons are given: `exp` present, not passed, not
/// beyond the longest session; `nbf` and `iat` not in the future. Returns `exp`.
pub(crate) fn check_times(t: Times, now: u64, leeway_seconds: u64) -> Result<f64, TokenError> {
    let now = now as f64;
    let leeway = leeway_seconds as f64;
    let exp = t.exp.ok_or(TokenError::MissingExpiry)?;
    if !exp.is_finite() || exp + leeway <= now {
        return Err(TokenError::Expired);
    }
    if exp - leeway > now + MAX_SESSION_SECONDS as f64 {
        return Err(TokenError::ExpiryTooFar);
    }
    if let Some(nbf) = t.nbf
        && (!nbf.is_finite() || nbf - leeway > now)
    {
        return Err(TokenError::NotYetValid);
    }
    if let Some(iat) = t.iat
        && (!iat.is_finite() || iat - leeway > now)
    {
        return Err(TokenError::IssuedInFuture);
    }
    Ok(exp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: u64 = 1_800_000_000;
    /// `{"alg":"EdDSA","typ":"JWT"}`, the header most test tokens are signed under.
    const HEADER_B64: &str = "eyJhbGciOiJFZERTQSIsInR5cCI6IkpXVCJ9";

    /// The private key of a name (its bytes as the seed).
    fn named(name: &[u8]) -> SigningKey {
        let mut seed = [0u8; 32];
        seed[..name.len()].copy_from_slice(name);
        SigningKey::from_seed(&seed)
    }

    fn key() -> SigningKey {
        named(b"test-key")
    }

    /// The public key of [`key`].
    fn public() -> VerifyingKey {
        key().verifying_key().clone()
    }

    /// The public key of another name's pair.
    fn other(name: &[u8]) -> VerifyingKey {
        named(name).verifying_key().clone()
    }

    fn v() -> Validation<'static> {
        Validation {
            session_id: "sess_a",
            project_id: Some("proj_a"),
            leeway_seconds: 30,
            now: NOW,
        }
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
                    now: fresh.exp + 31,
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
        assert_eq!((c.iat, c.nbf, c.exp), (NOW - 10, NOW - 10, NOW + 3600));
        assert_eq!(c.nonce.len(), 32);
        assert!(
            c.nonce
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        );
        assert_eq!(c.jti, c.nonce);
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
}
