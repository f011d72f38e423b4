//! The two key secrets as stored in AWS Secrets Manager (`SecretString`), JSON objects:
//!
//! - the signing secret, read by the control plane alone:
//!   `{"algorithm":"EdDSA","privateKey":"<PKCS#8 PEM>"}`;
//! - the public key secret, read by controllers and gateways:
//!   `{"algorithm":"EdDSA","publicKey":"<SPKI PEM>"}`.
//!
//! Both keep `AWSCURRENT` and `AWSPREVIOUS` versions (key rotation). The PEM is what
//! `openssl genpkey -algorithm ed25519` and `openssl pkey -pubout` write; the `keygen`
//! subcommand of the control plane writes both secret strings.

use serde::Deserialize;

use crate::token::{KeyFormatError, SigningKey, VerifyingKey};

/// The one algorithm of both secrets.
pub const ALGORITHM: &str = "EdDSA";

/// Why a secret value could not be used. Messages never contain a key.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SecretError {
    /// The secret string is not JSON of the expected object shape.
    #[error("the secret is not the JSON object {{\"algorithm\",\"{0}\"}}")]
    Shape(&'static str),
    /// `algorithm` is anything but `EdDSA` (an HS256 secret of before Step 13 included).
    #[error(
        "the secret's algorithm is {0:?}; only EdDSA is supported (an HS256 secret is from before \
         asymmetric tokens: see deploy/README.md, \"Signing keys\")"
    )]
    Algorithm(String),
    /// The key is not an Ed25519 key in the expected PEM.
    #[error(transparent)]
    Key(#[from] KeyFormatError),
}

#[derive(Deserialize)]
struct Shape {
    algorithm: String,
    #[serde(rename = "privateKey")]
    private_key: Option<String>,
    #[serde(rename = "publicKey")]
    public_key: Option<String>,
}

fn shape(secret_string: &str, member: &'static str) -> Result<Shape, SecretError> {
    let s: Shape = serde_json::from_str(secret_string).map_err(|_| SecretError::Shape(member))?;
    if s.algorithm != ALGORITHM {
        return Err(SecretError::Algorithm(s.algorithm));
    }
    Ok(s)
}

/// The private key of a signing secret's `SecretString`.
pub fn parse_private(secret_string: &str) -> Result<SigningKey, SecretError> {
    let s = shape(secret_string, "privateKey")?;
    let pem = zeroize::Zeroizing::new(s.private_key.ok_or(SecretError::Shape("privateKey"))?);
    Ok(SigningKey::from_pem(&pem)?)
}

/// The public key of a public key secret's `SecretString`.
pub fn parse_public(secret_string: &str) -> Result<VerifyingKey, SecretError> {
    let s = shape(secret_string, "publicKey")?;
    let pem = s.public_key.ok_or(SecretError::Shape("publicKey"))?;
    Ok(VerifyingKey::from_pem(&pem)?)
}

/// The signing secret's `SecretString` for `key` (zeroed when dropped).
pub fn private_secret_string(key: &SigningKey) -> zeroize::Zeroizing<String> {
    let value = serde_json::json!({"algorithm": ALGORITHM, "privateKey": key.to_pem().as_str()});
    zeroize::Zeroizing::new(value.to_string())
}

/// The public key secret's `SecretString` for `key`.
pub fn public_secret_string(key: &VerifyingKey) -> String {
    serde_json::json!({"algorithm": ALGORITHM, "publicKey": key.to_pem()}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_shapes_round_trip() {
        let k = SigningKey::generate();
        let private = private_secret_string(&k);
        assert_eq!(
            parse_private(&private).unwrap().verifying_key(),
            k.verifying_key()
        );
        let public = public_secret_string(k.verifying_key());
        assert_eq!(&parse_public(&public).unwrap(), k.verifying_key());
        assert!(!public.contains("PRIVATE"));
        // Each secret is only its own kind.
        assert_eq!(
            parse_private(&public).map(drop),
            Err(SecretError::Shape("privateKey"))
        );
        assert_eq!(
            parse_public(&private).map(drop),
            Err(SecretError::Shape("publicKey"))
        );
    }

    #[test]
    fn refuses_other_shapes_without_echoing_the_key() {
        assert_eq!(
            parse_private("k").map(drop),
            Err(SecretError::Shape("privateKey"))
        );
        let old = r#"{"algorithm":"HS256","signingKey":"topsecret"}"#;
        let e = parse_private(old).map(drop).unwrap_err();
        assert_eq!(e, SecretError::Algorithm("HS256".into()));
        assert!(e.to_string().contains("only EdDSA"), "{e}");
        assert!(!e.to_string().contains("topsecret"));
        assert_eq!(
            parse_public(r#"{"algorithm":"EdDSA","publicKey":"topsecret"}"#).map(drop),
            Err(SecretError::Key(KeyFormatError::Public))
        );
        let e = parse_private(r#"{"algorithm":"EdDSA","privateKey":"topsecret"}"#)
            .map(drop)
            .unwrap_err();
        assert_eq!(e, SecretError::Key(KeyFormatError::Private));
        assert!(!e.to_string().contains("topsecret"));
    }
}
