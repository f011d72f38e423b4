//! Tasks' identities checked by STS ([`StsIdentities`]): the task API's [`Identities`] over
//! [`wallcrawler_aws::task_identity::Verifier`], which sends a task's signed
//! `GetCallerIdentity` to this function's own STS endpoint.

use async_trait::async_trait;
use aws_config::SdkConfig;
use wallcrawler_aws::task_identity::{IdentityError, Verifier};
use wallcrawler_contract::task_api::SignedIdentity;

use crate::error::StoreError;
use crate::task_api::{Identities, IdentityCheck};

const STS: &str = "STS";

/// Identities checked by the STS endpoint of the function's SDK configuration.
pub struct StsIdentities(Verifier);

impl StsIdentities {
    /// Checks against `sdk`'s STS endpoint (its region's, or `AWS_ENDPOINT_URL`).
    pub fn new(sdk: &SdkConfig) -> Result<Self, IdentityError> {
        Verifier::new(sdk).map(Self)
    }
}

#[async_trait]
impl Identities for StsIdentities {
    async fn caller(&self, id: &SignedIdentity) -> Result<String, IdentityCheck> {
        self.0.caller(id).await.map_err(|e| match e {
            IdentityError::Refused(_) => IdentityCheck::Refused,
            IdentityError::Unavailable(_) => {
                IdentityCheck::Unavailable(StoreError::unavailable_by(STS, e))
            }
            other => {
                IdentityCheck::Unavailable(StoreError::failed_by("checking a task identity", other))
            }
        })
    }
}
