//! The managed proxy pools on AWS: the `SecretString` of the secret `MANAGED_PROXIES_SECRET_ARN`
//! names ([`crate::egress::pools`] has its shape), read once when the API function starts.

use aws_config::SdkConfig;

use crate::egress::{ManagedProxies, PoolsError};

/// The variable naming the secret.
pub const MANAGED_PROXIES_SECRET_ARN: &str = "MANAGED_PROXIES_SECRET_ARN";

/// The pools in secret `secret_id`'s current version. The error never holds the secret's text.
pub(super) async fn read(sdk: &SdkConfig, secret_id: &str) -> Result<ManagedProxies, PoolsError> {
    let read_failed = |source: Box<dyn std::error::Error + Send + Sync>| PoolsError::Read {
        what: format!("the secret {MANAGED_PROXIES_SECRET_ARN} names"),
        source,
    };
    let answer = aws_sdk_secretsmanager::Client::new(sdk)
        .get_secret_value()
        .secret_id(secret_id)
        .send()
        .await
        .map_err(|e| read_failed(e.into()))?;
    let text = answer
        .secret_string()
        .ok_or_else(|| read_failed("the secret has no SecretString".into()))?;
    ManagedProxies::parse(text)
}
