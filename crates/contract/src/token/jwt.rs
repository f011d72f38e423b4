//! The JWT mechanics every credential of ours shares (the session token's and the viewer
//! module's live view credential): the Ed25519 key pair and its PEM forms, signing, and the
//! rules before any claim is read — size, three base64url segments, the header (`alg` exactly
//! `EdDSA`, no `crit`), the signature under one of the public keys — and reading JSON objects
//! only. What the claims must say is [`super::claims`]'.

use std::marker::PhantomData;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey};
use serde::de::{Deserializer, MapAccess, Visitor, value::MapAccessDeserializer};
use serde::{Deserialize, Serialize};

use super::TokenError;

/// Longest token the proxy will look at.
pub const MAX_TOKEN_BYTES: usize = 4096;

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

/// The header the control plane signs under, base64url: `{"typ":"JWT","alg":"EdDSA"}`
/// (`jsonwebtoken`'s). It passes the header rules, so a token carrying it byte for byte skips
/// decoding and parsing it.
pub(super) const SIGNED_HEADERS: [&str; 1] = ["eyJ0eXAiOiJKV1QiLCJhbGciOiJFZERTQSJ9"];

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

/// A token whose signature one of the keys matched, and its payload, not yet judged by any
/// claim rule: what [`verify_signature`] returns and [`super::check_signed`] (or
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

/// The structure, header and signature rules of [`super::validate`], in its order, and nothing
/// else: which key signed `token`, and its payload for [`super::check_signed`] to judge.
pub fn verify_signature(token: &str, keys: &[VerifyingKey]) -> Result<Signed, TokenError> {
    let (key_index, payload) = signature(token, keys)?;
    Ok(Signed {
        key: keys[key_index].raw,
        payload: payload.into_boxed_slice(),
    })
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
