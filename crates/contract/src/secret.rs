//! The signing secret as stored in AWS Secrets Manager (`SecretString`).

use serde::{Deserialize, Serialize};

/// `{"algorithm":"HS256","signingKey":"<string>"}`; the HMAC key is the raw UTF-8 bytes of
/// `signingKey`.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SigningSecret {
    /// `algorithm`: always `HS256`.
    pub algorithm: String,
    /// `signingKey`: the HMAC key as a string.
    pub signing_key: String,
}

/// Why a secret value could not be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SecretError {
    /// The secret string is not JSON of that object shape.
    #[error("the secret is not the JSON object {{\"algorithm\",\"signingKey\"}}")]
    Shape,
    /// `algorithm` is anything but `HS256`.
    #[error("the secret's algorithm is {0:?}; only HS256 is supported")]
    Algorithm(String),
    /// `signingKey` is the empty string.
    #[error("the secret's signingKey is empty")]
    EmptyKey,
}

impl SigningSecret {
    /// Parses and checks a `SecretString`. Error messages never contain the key.
    pub fn parse(secret_string: &str) -> Result<Self, SecretError> {
        let secret: SigningSecret =
            serde_json::from_str(secret_string).map_err(|_| SecretError::Shape)?;
        if secret.algorithm != "HS256" {
            return Err(SecretError::Algorithm(secret.algorithm));
        }
        if secret.signing_key.is_empty() {
            return Err(SecretError::EmptyKey);
        }
        Ok(secret)
    }
}

impl std::fmt::Debug for SigningSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningSecret")
            .field("algorithm", &self.algorithm)
            .field("signing_key", &"<redacted>")
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_shape() {
        let s = SigningSecret::parse(r#"{"algorithm":"HS256","signingKey":"k"}"#).unwrap();
        assert_eq!(s.signing_key, "k");
    }

    #[test]
    fn refuses_other_shapes_without_echoing_the_key() {
        assert_eq!(SigningSecret::parse("k"), Err(SecretError::Shape));
        assert_eq!(
            SigningSecret::parse(r#"{"algorithm":"HS512","signingKey":"k"}"#),
            Err(SecretError::Algorithm("HS512".into()))
        );
        assert_eq!(
            SigningSecret::parse(r#"{"algorithm":"HS256","signingKey":""}"#),
            Err(SecretError::EmptyKey)
        );
        let dbg = format!(
            "{:?}",
            SigningSecret::parse(r#"{"algorithm":"HS256","signingKey":"topsecret"}"#).unwrap()
        );
        assert!(!dbg.contains("topsecret"));
    }
}
