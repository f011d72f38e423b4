//! The claims: the registered claims every credential of ours carries — as the control plane
//! writes them ([`Issued`]) and as a check reads them back ([`Registered`]) — with their rules
//! (the times, `iss`, `aud`, the session and project bindings), and the CDP token's own claims
//! ([`Claims`]) and acceptance rules ([`validate`] and its siblings). A credential is judged
//! here only after [`super::jwt`] found its signature good.

use std::borrow::Cow;
use std::ops::Range;

use serde::de::{Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

use super::jwt::{Object, Signed, SigningKey, VerifyingKey, mint_claims, random_hex, signature};
use super::{AUDIENCE, ISSUER, MAX_SESSION_SECONDS, TokenError, VIEWER_AUDIENCE};

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

/// The registered claims the control plane writes into every credential it mints (all of a
/// session token's but its nonce, a viewer credential's beside its own), in this order on the
/// wire; [`Registered`] reads them back.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Issued {
    /// `iss`: always `wallcrawler`.
    pub iss: String,
    /// `sub`: the session id, as `sessionId`.
    pub sub: String,
    /// `aud`: the credential's one audience (`["cdp-access"]`, `["wallcrawler-viewer"]`).
    pub aud: Vec<String>,
    /// `exp`: Unix seconds when the credential expires (the session's timeout by default,
    /// never after it).
    pub exp: u64,
    /// `iat`: Unix seconds when it was minted.
    pub iat: u64,
    /// `nbf`: Unix seconds from which it is valid (the minting time).
    pub nbf: u64,
    /// `jti`: 128 bits, lower-case hex (a session token's nonce again).
    pub jti: String,
    /// `sessionId`: the only session the credential opens.
    #[serde(rename = "sessionId")]
    pub session_id: String,
    /// `projectId`: the session's project.
    #[serde(rename = "projectId")]
    pub project_id: String,
}

impl Issued {
    /// The registered claims of a credential for `audience`, naming `session_id` of
    /// `project_id`, valid over `valid` (from `iat`, until `exp`), its id `jti`.
    pub(crate) fn new(
        audience: &str,
        session_id: &str,
        project_id: &str,
        valid: Range<u64>,
        jti: String,
    ) -> Self {
        Self {
            iss: ISSUER.to_owned(),
            sub: session_id.to_owned(),
            aud: vec![audience.to_owned()],
            exp: valid.end,
            iat: valid.start,
            nbf: valid.start,
            jti,
            session_id: session_id.to_owned(),
            project_id: project_id.to_owned(),
        }
    }
}

/// The claims the control plane mints.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Claims {
    /// The registered claims: `aud` is `["cdp-access"]`, `jti` the nonce again, as a token id.
    #[serde(flatten)]
    pub issued: Issued,
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
            issued: Issued::new(AUDIENCE, session_id, project_id, iat..exp, nonce.clone()),
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

/// A kind of credential (a session token, [`Cdp`], or a viewer credential, the viewer module's):
/// the claims its payload is read as and what one that passed says. Its checks are the same
/// four for every kind: the signature then the claim rules, for one session or whichever the
/// credential names, or the claim rules alone on a signature verified before.
pub(crate) trait Credential {
    /// What a credential that passed says.
    type Verified;
    /// Its claims, strings borrowed from the decoded payload.
    type Claims<'a>: ClaimSet<'a, Verified = Self::Verified>;

    /// The signature, then every claim rule for `v`.
    fn validate(
        token: &str,
        keys: &[VerifyingKey],
        v: &Validation<'_>,
    ) -> Result<Self::Verified, TokenError> {
        let (key_index, payload) = signature(token, keys)?;
        judge::<Self::Claims<'_>>(&payload, key_index, v)
    }

    /// [`Credential::validate`] for whichever session the credential names.
    fn validate_any_session(
        token: &str,
        keys: &[VerifyingKey],
        project_id: Option<&str>,
        leeway_seconds: u64,
        now: u64,
    ) -> Result<Self::Verified, TokenError> {
        let (key_index, payload) = signature(token, keys)?;
        judge_any_session::<Self::Claims<'_>>(&payload, key_index, project_id, leeway_seconds, now)
    }

    /// The claim rules on a signature verified before, refused as [`TokenError::Signature`]
    /// when the key that signed it is not among `keys` any more.
    fn check_signed(
        signed: &Signed,
        keys: &[VerifyingKey],
        v: &Validation<'_>,
    ) -> Result<Self::Verified, TokenError> {
        let key_index = signed.key_index(keys).ok_or(TokenError::Signature)?;
        judge::<Self::Claims<'_>>(signed.payload(), key_index, v)
    }

    /// [`Credential::check_signed`] for whichever session the credential names.
    fn check_signed_any_session(
        signed: &Signed,
        keys: &[VerifyingKey],
        project_id: Option<&str>,
        leeway_seconds: u64,
        now: u64,
    ) -> Result<Self::Verified, TokenError> {
        let key_index = signed.key_index(keys).ok_or(TokenError::Signature)?;
        let payload = signed.payload();
        judge_any_session::<Self::Claims<'_>>(payload, key_index, project_id, leeway_seconds, now)
    }
}

/// The CDP access token: the registered claims alone ([`Registered`]), naming `cdp-access`.
pub(crate) struct Cdp;

impl Credential for Cdp {
    type Verified = Verified;
    type Claims<'a> = Registered<'a>;
}

/// A kind of credential's four checks as its module's public functions (this module's for the
/// session token, the viewer module's for the viewer credential), each [`Credential`]'s, with
/// the doc the module gives it: written once, so the two kinds cannot drift apart.
macro_rules! public_checks {
    (
        $kind:ty => $verified:ty;
        $(#[$validate:meta])* validate;
        $(#[$validate_any:meta])* validate_any_session;
        $(#[$check:meta])* check_signed;
        $(#[$check_any:meta])* check_signed_any_session;
    ) => {
        $(#[$validate])*
        pub fn validate(
            token: &str,
            keys: &[$crate::token::VerifyingKey],
            v: &$crate::token::Validation<'_>,
        ) -> Result<$verified, $crate::token::TokenError> {
            <$kind as $crate::token::Credential>::validate(token, keys, v)
        }

        $(#[$validate_any])*
        pub fn validate_any_session(
            token: &str,
            keys: &[$crate::token::VerifyingKey],
            project_id: Option<&str>,
            leeway_seconds: u64,
            now: u64,
        ) -> Result<$verified, $crate::token::TokenError> {
            <$kind as $crate::token::Credential>::validate_any_session(
                token,
                keys,
                project_id,
                leeway_seconds,
                now,
            )
        }

        $(#[$check])*
        pub fn check_signed(
            signed: &$crate::token::Signed,
            keys: &[$crate::token::VerifyingKey],
            v: &$crate::token::Validation<'_>,
        ) -> Result<$verified, $crate::token::TokenError> {
            <$kind as $crate::token::Credential>::check_signed(signed, keys, v)
        }

        $(#[$check_any])*
        pub fn check_signed_any_session(
            signed: &$crate::token::Signed,
            keys: &[$crate::token::VerifyingKey],
            project_id: Option<&str>,
            leeway_seconds: u64,
            now: u64,
        ) -> Result<$verified, $crate::token::TokenError> {
            <$kind as $crate::token::Credential>::check_signed_any_session(
                signed,
                keys,
                project_id,
                leeway_seconds,
                now,
            )
        }
    };
}
pub(crate) use public_checks;

public_checks! {
    Cdp => Verified;
    /// Checks `token` against `keys` and `v`. Returns what the token says once every rule holds.
    validate;
    /// Checks `token` against `keys` as [`validate`] does, for whichever session the token names:
    /// every rule holds but the session binding, and the session the token is for (`sessionId`,
    /// with `sub` equal when present) is what the result says. For the connect gateway, which
    /// serves every session and routes by that id; the task behind it still checks the token
    /// against its own session. A token without `sessionId` is refused as [`validate`] refuses it
    /// ([`TokenError::Session`], after the time and issuer rules, so the reason is the same).
    validate_any_session;
    /// The claim rules of [`validate`] on a token whose signature was verified before: refused as
    /// [`TokenError::Signature`] when the key that signed it is not among `keys` any more, then
    /// every claim rule at `v`'s time and for `v`'s session, as though the token were new.
    check_signed;
    /// [`check_signed`] for whichever session the token names, as [`validate_any_session`].
    check_signed_any_session;
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
