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
//!
//! Two files: [`jwt`] holds the mechanics every credential of ours shares (the key pair,
//! signing, the structure, header and signature rules), [`claims`] the registered claims and
//! their rules, and this token's claims and acceptance rules. The viewer's credential
//! (the viewer module's) is built on both.

mod claims;
mod jwt;
// The test tokens' validation, shared with the integration tests.
#[cfg(test)]
#[path = "../../tests/support/tokens.rs"]
pub(crate) mod fixtures;
#[cfg(test)]
pub(crate) mod tests;

pub(crate) use claims::{ClaimSet, Credential, Registered, public_checks};
pub use claims::{
    Claims, Issued, Validation, Verified, check_signed, check_signed_any_session, validate,
    validate_any_session,
};
pub(crate) use jwt::mint_claims;
pub use jwt::{
    KeyFormatError, MAX_TOKEN_BYTES, Signed, SigningKey, VerifyingKey, random_hex, sign_raw,
    sign_raw_hs256, verify_signature,
};

/// `iss` of every token.
pub const ISSUER: &str = "wallcrawler";
/// The audience the proxy requires in `aud`.
pub const AUDIENCE: &str = "cdp-access";
/// The audience of the live view's credential (the viewer module's `AUDIENCE`), which a session
/// token may not name.
pub const VIEWER_AUDIENCE: &str = "wallcrawler-viewer";
/// Default lifetime of a minted token when nothing else is said (the default session timeout).
pub const DEFAULT_TTL_SECONDS: u64 = 3600;
/// The longest session timeout, seconds. A token lives no longer than its session, so an `exp`
/// further ahead than this (plus leeway) was not minted by the control plane.
pub const MAX_SESSION_SECONDS: u64 = 21_600;

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
