//! The one Secrets Manager fetcher of the key secrets ([`SecretsManagerKeys`]), used through
//! [`crate::keys::KeyCache`]: the signing secret (private key) by the control plane, the public
//! key secret by the controller and the gateway.

use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use futures_util::future::BoxFuture;
use tracing::warn;
use wallcrawler_contract::retry::Transient;
use wallcrawler_contract::secret::{self, SecretError};
use wallcrawler_contract::{SigningKey, VerifyingKey};

use crate::keys::{FetchMode, KeyFetcher};
use crate::{Failure, classify};

/// Longest one call of a [`FetchMode::Quick`] fetch may take.
pub const QUICK_FETCH_TIMEOUT: Duration = Duration::from_secs(2);

/// The cause of a [`SecretsError`]: the SDK's error, with its own sources.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a key secret could not be fetched. Messages never contain the secret.
#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    /// The call failed; `failure` says whether trying again may help ([`classify`]).
    #[error("getting the key secret failed ({failure:?})")]
    Call {
        /// What the failure means for the caller.
        failure: Failure,
        /// The SDK's error.
        #[source]
        source: BoxError,
    },
    /// The `AWSCURRENT` version is not a signing secret (the secret's owner's fault).
    #[error("the AWSCURRENT secret is unusable")]
    Unusable(#[source] SecretError),
}

impl Transient for SecretsError {
    fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Call {
                failure: Failure::Transient,
                ..
            }
        )
    }
}

/// A key secret in Secrets Manager: `AWSCURRENT`, then `AWSPREVIOUS` when there is one (an
/// unusable or missing previous version is skipped), each version read into a `K`.
pub struct SecretsManagerKeys<K> {
    /// The Secrets Manager client.
    pub client: aws_sdk_secretsmanager::Client,
    /// The secret's id (name or ARN).
    pub secret_id: String,
    /// Reads one version's `SecretString`.
    parse: fn(&str) -> Result<K, SecretError>,
}

impl SecretsManagerKeys<SigningKey> {
    /// The fetcher of the signing secret `secret_id` (private keys: the control plane's alone).
    pub fn signing(sdk: &aws_config::SdkConfig, secret_id: &str) -> Self {
        Self::new(sdk, secret_id, secret::parse_private)
    }
}

impl SecretsManagerKeys<VerifyingKey> {
    /// The fetcher of the public key secret `secret_id` (controllers and gateways).
    pub fn public(sdk: &aws_config::SdkConfig, secret_id: &str) -> Self {
        Self::new(sdk, secret_id, secret::parse_public)
    }
}

impl<K> SecretsManagerKeys<K> {
    fn new(
        sdk: &aws_config::SdkConfig,
        secret_id: &str,
        parse: fn(&str) -> Result<K, SecretError>,
    ) -> Self {
        Self {
            client: aws_sdk_secretsmanager::Client::new(sdk),
            secret_id: secret_id.to_owned(),
            parse,
        }
    }

    /// One version's `SecretString`; `None` when the stage does not exist and may be absent
    /// (`AWSPREVIOUS` before the first rotation).
    async fn stage(&self, stage: &str, mode: FetchMode) -> Result<Option<String>, SecretsError> {
        let request = self
            .client
            .get_secret_value()
            .secret_id(&self.secret_id)
            .version_stage(stage);
        let answer = match mode {
            FetchMode::Patient => request.send().await,
            // A request waits on this one: no retries (their backoff would hold it), and a
            // short timeout.
            FetchMode::Quick => {
                request
                    .customize()
                    .config_override(
                        aws_sdk_secretsmanager::config::Builder::default()
                            .retry_config(RetryConfig::disabled())
                            .timeout_config(
                                TimeoutConfig::builder()
                                    .operation_timeout(QUICK_FETCH_TIMEOUT)
                                    .build(),
                            ),
                    )
                    .send()
                    .await
            }
        };
        match answer {
            Ok(v) => Ok(Some(v.secret_string().unwrap_or_default().to_owned())),
            Err(e)
                if stage == "AWSPREVIOUS"
                    && e.as_service_error()
                        .is_some_and(|se| se.is_resource_not_found_exception()) =>
            {
                Ok(None)
            }
            Err(e) => Err(SecretsError::Call {
                failure: classify(&e),
                source: e.into(),
            }),
        }
    }
}

impl<K: Clone + Send + Sync + 'static> KeyFetcher for SecretsManagerKeys<K> {
    type Key = K;
    type Error = SecretsError;

    fn fetch(&self, mode: FetchMode) -> BoxFuture<'_, Result<Vec<K>, SecretsError>> {
        Box::pin(async move {
            let mut out = Vec::with_capacity(2);
            for stage in ["AWSCURRENT", "AWSPREVIOUS"] {
                let Some(text) = self.stage(stage, mode).await? else {
                    continue;
                };
                match (self.parse)(&text) {
                    Ok(secret) => out.push(secret),
                    Err(e) if stage == "AWSCURRENT" => return Err(SecretsError::Unusable(e)),
                    Err(e) => warn!(stage, "ignoring the previous secret version: {e}"),
                }
            }
            Ok(out)
        })
    }
}
