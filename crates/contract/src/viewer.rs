//! The live view's credential: an EdDSA JWT of its own audience (`wallcrawler-viewer`), minted
//! by the control plane in `GET /v1/sessions/{id}/debug` and checked by the proxy and the
//! gateway on the viewer routes (`/viewer`, `/viewer/ws`).
//!
//! It is a session token's sibling, signed by the same key and held to the same rules
//! ([`crate::token`]: size, `alg` exactly EdDSA, no `crit`, the signature under one of the public
//! keys, JSON objects, the time rules with the longest session as the `exp` horizon, `iss`,
//! the session and project bindings), with these differences:
//!
//! - `aud` is exactly `wallcrawler-viewer` (a string, or an array naming it alone): a session
//!   token (`cdp-access`) is refused here, and a viewer credential is refused as a session token
//!   ([`crate::token::validate`] refuses any `aud` naming `wallcrawler-viewer`), so a link
//!   handed to a person watching never opens CDP and the reverse;
//! - `mode` is `view` or `control` (required): what the person may do; the server drops input
//!   under `view`;
//! - `page`, when present, is one CDP target id (32 hex digits): the only page the credential
//!   shows.
//!
//! A claim of the wrong shape (`mode` missing or unknown, `page` not a target id) is
//! [`TokenError::Malformed`]: the control plane never mints one.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::token::{
    self, ClaimSet, Credential, Issued, Registered, SigningKey, TokenError, Validation,
};

/// The audience of every viewer credential, and the only one it names.
pub const AUDIENCE: &str = token::VIEWER_AUDIENCE;

/// What a viewer may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Watch only: the server drops every input the page sends.
    View,
    /// Watch and drive the page (mouse, wheel, keyboard, text).
    Control,
}

impl Mode {
    /// The claim's value: `view` or `control`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::View => "view",
            Self::Control => "control",
        }
    }

    /// The mode a claim (or the API's `?mode=`) names, if any.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "view" => Some(Self::View),
            "control" => Some(Self::Control),
            _ => None,
        }
    }

    /// Whether input from this viewer reaches the page.
    pub fn allows_input(self) -> bool {
        self == Self::Control
    }
}

/// Whether `id` is a CDP target id as Chrome writes them: 32 hex digits.
pub fn is_target_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A `page` that is not a CDP target id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the page is not a CDP target id (32 hex digits)")]
pub struct PageIdError;

/// The claims of a viewer credential.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ViewerClaims {
    /// The registered claims: `aud` is `["wallcrawler-viewer"]`, `jti` 128 random bits.
    #[serde(flatten)]
    pub issued: Issued,
    /// `mode`: `view` or `control`.
    pub mode: Mode,
    /// `page`: the one target the credential shows; every page of the session when absent.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub page: Option<String>,
}

impl ViewerClaims {
    /// Claims for every page of `session_id` in `mode`, valid from `now` for `ttl_seconds`
    /// (the caller bounds it by the session's expiry), with a fresh 128-bit `jti`.
    pub fn new(session_id: &str, project_id: &str, mode: Mode, now: u64, ttl_seconds: u64) -> Self {
        let valid = now..now.saturating_add(ttl_seconds);
        Self {
            issued: Issued::new(
                AUDIENCE,
                session_id,
                project_id,
                valid,
                token::random_hex(16),
            ),
            mode,
            page: None,
        }
    }

    /// The same claims for one page only (a fresh `jti`), refused unless `page` is a target id.
    pub fn for_page(&self, page: &str) -> Result<Self, PageIdError> {
        if !is_target_id(page) {
            return Err(PageIdError);
        }
        Ok(Self {
            issued: Issued {
                jti: token::random_hex(16),
                ..self.issued.clone()
            },
            page: Some(page.to_owned()),
            ..self.clone()
        })
    }

    /// Signs these claims with `key` (EdDSA).
    pub fn mint(&self, key: &SigningKey) -> String {
        token::mint_claims(self, key)
    }
}

/// What a verified viewer credential says.
#[derive(Debug, Clone, PartialEq)]
pub struct ViewerVerified {
    /// The credential's `sessionId`.
    pub session_id: String,
    /// The credential's `projectId`, when it has one.
    pub project_id: Option<String>,
    /// What the viewer may do.
    pub mode: Mode,
    /// The one page it shows, when it names one.
    pub page: Option<String>,
    /// The credential's `exp` in Unix seconds.
    pub exp: f64,
    /// Index into the key list of the key that verified the signature.
    pub key_index: usize,
}

impl ViewerVerified {
    /// Whether the credential shows the target `id`: its own page, or any when it names none.
    pub fn shows(&self, id: &str) -> bool {
        self.page.as_deref().is_none_or(|p| p == id)
    }
}

/// The payload's claims: the registered ones, read as a session token's are, and the viewer's
/// own (strings borrowed from the decoded payload where JSON allows).
#[derive(Deserialize)]
struct RawViewerClaims<'a> {
    #[serde(flatten, borrow)]
    registered: Registered<'a>,
    #[serde(borrow)]
    mode: Option<Cow<'a, str>>,
    #[serde(borrow)]
    page: Option<Cow<'a, str>>,
}

impl<'a> ClaimSet<'a> for RawViewerClaims<'a> {
    type Verified = ViewerVerified;

    fn session_id(&self) -> Option<Cow<'a, str>> {
        self.registered.session_id.clone()
    }

    /// The claim rules, in a session token's order (time, `iss`, `aud`, session, project),
    /// with the viewer's own shape (`mode`, `page`) checked once the audience says it is a
    /// viewer credential.
    fn check(self, key_index: usize, v: &Validation<'_>) -> Result<ViewerVerified, TokenError> {
        let r = self.registered;
        let exp = r.check_issued(v, |a| a.viewer && !a.cdp && !a.other)?;
        let mode = self
            .mode
            .as_deref()
            .and_then(Mode::from_name)
            .ok_or(TokenError::Malformed)?;
        if self.page.as_deref().is_some_and(|p| !is_target_id(p)) {
            return Err(TokenError::Malformed);
        }
        r.check_bound(v)?;
        Ok(ViewerVerified {
            session_id: r.session_id.map(Cow::into_owned).unwrap_or_default(),
            project_id: r.project_id.map(Cow::into_owned),
            mode,
            page: self.page.map(Cow::into_owned),
            exp,
            key_index,
        })
    }
}

/// A viewer credential: the registered claims and the viewer's own.
struct Viewer;

impl Credential for Viewer {
    type Verified = ViewerVerified;
    type Claims<'a> = RawViewerClaims<'a>;
}

token::public_checks! {
    Viewer => ViewerVerified;
    /// Checks a viewer credential against `keys` and `v` (the session the route serves).
    validate;
    /// Checks a viewer credential as [`validate`] does, for whichever session it names: for the
    /// connect gateway, which routes a viewer by the credential's `sessionId` as it routes a
    /// connect by the token's (the task behind it checks the credential against its own session
    /// again).
    validate_any_session;
    /// The claim rules of [`validate`] on a credential whose signature was verified before
    /// ([`token::verify_signature`]), as [`token::check_signed`] for a session token: refused as
    /// [`TokenError::Signature`] when its key is no longer among `keys`.
    check_signed;
    /// [`check_signed`] for whichever session the credential names, as [`validate_any_session`].
    check_signed_any_session;
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use serde_json::json;

    use super::*;
    use crate::token::tests::{HEADER_B64, NOW, key, named, public, v};
    use crate::token::{Claims, sign_raw};

    const PAGE: &str = "0123456789ABCDEF0123456789ABCDEF";

    fn viewer(mode: Mode) -> ViewerClaims {
        ViewerClaims::new("sess_a", "proj_a", mode, NOW, 600)
    }

    /// A credential of [`viewer`]'s claims (control mode) changed by `f`, signed with [`key`].
    fn with(f: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) -> String {
        let mut c = serde_json::to_value(viewer(Mode::Control)).unwrap();
        f(c.as_object_mut().unwrap());
        sign_raw(HEADER_B64, &serde_json::to_vec(&c).unwrap(), &key())
    }

    #[test]
    fn a_minted_credential_says_its_mode_session_and_page() {
        let k = [named(b"old").verifying_key().clone(), public()];
        let view = validate(&viewer(Mode::View).mint(&key()), &k, &v()).unwrap();
        assert_eq!(view.mode, Mode::View);
        assert!(!view.mode.allows_input());
        assert_eq!(view.session_id, "sess_a");
        assert_eq!(view.project_id.as_deref(), Some("proj_a"));
        assert_eq!(view.page, None);
        assert_eq!(view.exp, (NOW + 600) as f64);
        assert_eq!(view.key_index, 1, "the previous key is tried too");
        assert!(view.shows(PAGE));

        let control = viewer(Mode::Control).for_page(PAGE).unwrap();
        let got = validate(&control.mint(&key()), &k, &v()).unwrap();
        assert_eq!(got.mode, Mode::Control);
        assert!(got.mode.allows_input());
        assert_eq!(got.page.as_deref(), Some(PAGE));
        assert!(got.shows(PAGE));
        assert!(!got.shows("FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF"));
    }

    #[test]
    fn minted_claims_carry_the_viewer_audience_and_the_mode_by_name() {
        let c = serde_json::to_value(viewer(Mode::View).for_page(PAGE).unwrap()).unwrap();
        assert_eq!(c["aud"], json!(["wallcrawler-viewer"]));
        assert_eq!(c["mode"], "view");
        assert_eq!(c["page"], PAGE);
        assert_eq!(c["sub"], "sess_a");
        assert_eq!(c["jti"].as_str().unwrap().len(), 32);
        let header = URL_SAFE_NO_PAD
            .decode(viewer(Mode::View).mint(&key()).split('.').next().unwrap())
            .unwrap();
        let header: serde_json::Value = serde_json::from_slice(&header).unwrap();
        assert_eq!(header, json!({"alg": "EdDSA", "typ": "JWT"}));
    }

    #[test]
    fn a_session_token_is_not_a_viewer_credential() {
        let session = Claims::new("sess_a", "proj_a", NOW, 600).mint(&key());
        assert_eq!(
            validate(&session, &[public()], &v()),
            Err(TokenError::Audience)
        );
        assert_eq!(
            validate_any_session(&session, &[public()], None, 30, NOW),
            Err(TokenError::Audience)
        );
        // Nor is one that also carries a `mode`.
        let mut c = serde_json::to_value(Claims::new("sess_a", "proj_a", NOW, 600)).unwrap();
        c["mode"] = json!("control");
        let t = sign_raw(HEADER_B64, &serde_json::to_vec(&c).unwrap(), &key());
        assert_eq!(validate(&t, &[public()], &v()), Err(TokenError::Audience));
    }

    #[test]
    fn a_viewer_credential_is_not_a_session_token() {
        for mode in [Mode::View, Mode::Control] {
            let t = viewer(mode).mint(&key());
            assert_eq!(
                token::validate(&t, &[public()], &v()),
                Err(TokenError::Audience)
            );
            assert_eq!(
                token::validate_any_session(&t, &[public()], None, 30, NOW),
                Err(TokenError::Audience)
            );
        }
    }

    #[test]
    fn an_audience_naming_both_is_refused_both_ways() {
        for aud in [
            json!(["wallcrawler-viewer", "cdp-access"]),
            json!(["cdp-access", "wallcrawler-viewer"]),
        ] {
            let t = with(|c| {
                c.insert("aud".into(), aud.clone());
            });
            assert_eq!(
                validate(&t, &[public()], &v()),
                Err(TokenError::Audience),
                "{aud}"
            );
            assert_eq!(
                token::validate(&t, &[public()], &v()),
                Err(TokenError::Audience),
                "{aud}"
            );
        }
    }

    #[test]
    fn the_audience_is_exactly_the_viewers() {
        for (aud, ok) in [
            (json!("wallcrawler-viewer"), true),
            (json!(["wallcrawler-viewer"]), true),
            (json!(["wallcrawler-viewer", "other"]), false),
            (json!("other"), false),
            (json!([]), false),
            (json!(null), false),
        ] {
            let t = with(|c| {
                c.insert("aud".into(), aud.clone());
            });
            assert_eq!(validate(&t, &[public()], &v()).is_ok(), ok, "{aud}");
        }
        let t = with(|c| {
            c.remove("aud");
        });
        assert_eq!(validate(&t, &[public()], &v()), Err(TokenError::Audience));
    }

    #[test]
    fn expired_and_too_far_credentials_are_refused() {
        let t = viewer(Mode::Control).mint(&key());
        let later = Validation {
            now: NOW + 600 + 30,
            ..v()
        };
        assert_eq!(validate(&t, &[public()], &later), Err(TokenError::Expired));
        let far = ViewerClaims::new("sess_a", "proj_a", Mode::View, NOW, 21_600 + 31);
        assert_eq!(
            validate(&far.mint(&key()), &[public()], &v()),
            Err(TokenError::ExpiryTooFar)
        );
        let future = with(|c| {
            c.insert("nbf".into(), json!(NOW + 3600));
        });
        assert_eq!(
            validate(&future, &[public()], &v()),
            Err(TokenError::NotYetValid)
        );
    }

    #[test]
    fn foreign_session_project_and_key_are_refused() {
        let other_session = ViewerClaims::new("sess_b", "proj_a", Mode::View, NOW, 600);
        assert_eq!(
            validate(&other_session.mint(&key()), &[public()], &v()),
            Err(TokenError::Session)
        );
        let other_project = ViewerClaims::new("sess_a", "proj_b", Mode::View, NOW, 600);
        assert_eq!(
            validate(&other_project.mint(&key()), &[public()], &v()),
            Err(TokenError::Project)
        );
        let sub = with(|c| {
            c.insert("sub".into(), json!("sess_b"));
        });
        assert_eq!(validate(&sub, &[public()], &v()), Err(TokenError::Session));
        let foreign_key = viewer(Mode::View).mint(&named(b"someone else"));
        assert_eq!(
            validate(&foreign_key, &[public()], &v()),
            Err(TokenError::Signature)
        );
        // The gateway's check: any session, routed by the credential's own.
        let got = validate_any_session(&other_session.mint(&key()), &[public()], None, 30, NOW);
        assert_eq!(got.unwrap().session_id, "sess_b");
        let empty = with(|c| {
            c.insert("sessionId".into(), json!(""));
            c.remove("sub");
        });
        assert_eq!(
            validate_any_session(&empty, &[public()], None, 30, NOW),
            Err(TokenError::Session)
        );
    }

    #[test]
    fn mode_and_page_of_the_wrong_shape_are_malformed() {
        for (field, value) in [
            ("mode", json!("admin")),
            ("mode", json!("View")),
            ("mode", json!(null)),
            ("mode", json!(1)),
            ("page", json!("0123")),
            ("page", json!("../../json/list")),
            ("page", json!(format!("{PAGE}0"))),
            ("page", json!("0123456789ABCDEF0123456789ABCDEG")),
            ("page", json!(7)),
        ] {
            let t = with(|c| {
                c.insert(field.into(), value.clone());
            });
            assert_eq!(
                validate(&t, &[public()], &v()),
                Err(TokenError::Malformed),
                "{field}: {value}"
            );
        }
        let t = with(|c| {
            c.remove("mode");
        });
        assert_eq!(validate(&t, &[public()], &v()), Err(TokenError::Malformed));
        assert_eq!(viewer(Mode::View).for_page("x"), Err(PageIdError));
        assert!(is_target_id(&PAGE.to_lowercase()));
    }

    #[test]
    fn header_rules_are_the_session_tokens() {
        let payload = serde_json::to_vec(&viewer(Mode::Control)).unwrap();
        for (header, err) in [
            (json!({"alg": "none"}), TokenError::Algorithm),
            (json!({"alg": "HS256"}), TokenError::Algorithm),
            (
                json!({"alg": "EdDSA", "crit": ["exp"]}),
                TokenError::Malformed,
            ),
            (json!({"alg": "EdDSA", "crit": null}), TokenError::Malformed),
        ] {
            let h = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&header).unwrap());
            let t = sign_raw(&h, &payload, &key());
            assert_eq!(validate(&t, &[public()], &v()), Err(err), "{header}");
        }
        // Algorithm confusion: HS256 keyed with the public key's bytes.
        let h = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
        let t = token::sign_raw_hs256(&h, &payload, public().as_bytes());
        assert_eq!(validate(&t, &[public()], &v()), Err(TokenError::Algorithm));
        let huge = "a".repeat(token::MAX_TOKEN_BYTES + 1);
        assert_eq!(
            validate(&huge, &[public()], &v()),
            Err(TokenError::TooLarge)
        );
    }
}
