//! The token signer ([`SecretsSigner`]): EdDSA with the private key of the signing secret in
//! Secrets Manager, which only the control plane's roles may read (tasks and gateways read the
//! public key secret).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use aws_config::SdkConfig;
use aws_sdk_dynamodb::error::DisplayErrorContext;
use tokio_util::task::TaskTracker;
use wallcrawler_aws::keys::{KeyCache, KeyError, KeyFetcher};
use wallcrawler_aws::secrets::{SecretsError, SecretsManagerKeys};
use wallcrawler_contract::retry::Transient as _;
use wallcrawler_contract::viewer::ViewerClaims;
use wallcrawler_contract::{Claims, SigningKey};

use crate::error::StoreError;
use crate::stores::{Signer, StoreResult};

/// How long a fetched signing key is used before it is fetched again.
pub const KEY_TTL: Duration = Duration::from_secs(300);

/// Where the signer's keys come from: Secrets Manager ([`SecretsManagerKeys`]), or a test's
/// fake.
type SignerFetcher = dyn KeyFetcher<Key = SigningKey, Error = SecretsError>;

/// Signs tokens with the `AWSCURRENT` version of the signing secret
/// (`{"algorithm":"EdDSA","privateKey":…}`), over the workspace's one key cache
/// ([`wallcrawler_aws::keys`]). The key is fetched lazily, once it is older than [`KEY_TTL`]
/// (no background task: this runs on Lambda); simultaneous signs share one fetch. When
/// Secrets Manager fails the last good key keeps signing (the task accepts the public key
/// secret's `AWSPREVIOUS` too, so a key that was just rotated out still verifies). Cursors are
/// MACed with a key derived from the same private key ([`SigningKey::mac`]).
pub struct SecretsSigner {
    keys: Arc<KeyCache<SignerFetcher>>,
}

impl SecretsSigner {
    /// A signer over the `SecretString` of `secret_id` (a name or ARN).
    pub fn new(sdk: &SdkConfig, secret_id: &str) -> Self {
        Self::with_fetcher(Arc::new(SecretsManagerKeys::signing(sdk, secret_id)))
    }

    /// A signer over `fetcher`. Its fetch tasks are awaited by the signs that start them, so
    /// nothing waits on their tracker.
    fn with_fetcher(fetcher: Arc<SignerFetcher>) -> Self {
        Self {
            keys: KeyCache::new(fetcher, TaskTracker::new()),
        }
    }

    /// The signing key: cached, else fetched (once for every caller waiting); the last good
    /// one if the fetch fails.
    pub async fn key(&self) -> StoreResult<SigningKey> {
        self.keys.current(KEY_TTL).await.map_err(|e| key_error(&e))
    }
}

/// A failed key fetch as a port error, as [`sdk_error`] classifies a failed call.
fn key_error(e: &KeyError<SecretsError>) -> StoreError {
    const SERVICE: &str = "Secrets Manager";
    // The cache shares one error among its waiters: its text is the source.
    let detail = DisplayErrorContext(e).to_string();
    if e.is_transient() {
        StoreError::unavailable_by(SERVICE, detail)
    } else {
        StoreError::failed_by(SERVICE, detail)
    }
}

#[async_trait]
impl Signer for SecretsSigner {
    async fn sign(&self, claims: Claims) -> StoreResult<String> {
        Ok(claims.mint(&self.key().await?))
    }
    async fn sign_viewer(&self, claims: ViewerClaims) -> StoreResult<String> {
        Ok(claims.mint(&self.key().await?))
    }
    async fn mac(&self, msg: &[u8]) -> StoreResult<String> {
        Ok(self.key().await?.mac(msg))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use wallcrawler_aws::Failure;
    use wallcrawler_aws::keys::FetchMode;
    use wallcrawler_contract::token::{Validation, validate};

    use futures_util::future::BoxFuture;

    use super::*;
    use crate::error::chain;

    /// How long each fetch of the fake takes (paused time): long enough for every
    /// concurrent sign to join it.
    const FETCH_TIME: Duration = Duration::from_secs(1);

    /// A Secrets Manager holding (calls so far, the current key; `None` refuses).
    struct Fake(Mutex<(usize, Option<&'static str>)>);

    /// The key pair of a name (its bytes as the seed).
    fn named(name: &str) -> SigningKey {
        let mut seed = [0u8; 32];
        seed[..name.len()].copy_from_slice(name.as_bytes());
        SigningKey::from_seed(&seed)
    }

    impl KeyFetcher for Fake {
        type Key = SigningKey;
        type Error = SecretsError;

        fn fetch(&self, _: FetchMode) -> BoxFuture<'_, Result<Vec<SigningKey>, SecretsError>> {
            let current = {
                let mut state = self.0.lock().unwrap();
                state.0 += 1;
                state.1
            };
            Box::pin(async move {
                tokio::time::sleep(FETCH_TIME).await;
                let current = current.ok_or_else(|| SecretsError::Call {
                    failure: Failure::Refused,
                    source: "AccessDeniedException".into(),
                })?;
                // AWSCURRENT, then AWSPREVIOUS: only the first signs.
                Ok([current, "previous"].map(named).into())
            })
        }
    }

    impl Fake {
        fn calls(&self) -> usize {
            self.0.lock().unwrap().0
        }
        fn set_key(&self, key: Option<&'static str>) {
            self.0.lock().unwrap().1 = key;
        }
    }

    fn signer(key: Option<&'static str>) -> (Arc<Fake>, Arc<SecretsSigner>) {
        let f = Arc::new(Fake(Mutex::new((0, key))));
        (f.clone(), Arc::new(SecretsSigner::with_fetcher(f)))
    }

    /// A token to sign, and whether `token` was signed with exactly `key`.
    fn claims() -> Claims {
        Claims::new("s", "p", 1, 60)
    }
    fn signed_with(token: &str, key: &str) -> bool {
        let v = Validation {
            session_id: "s",
            project_id: None,
            leeway_seconds: 0,
            now: 2,
        };
        validate(token, &[named(key).verifying_key().clone()], &v).is_ok()
    }

    #[tokio::test(start_paused = true)]
    async fn the_signer_fetches_once_per_ttl_and_signs_with_the_last_good_key_on_failure() {
        let (f, signer) = signer(Some("k1"));
        assert!(signed_with(&signer.sign(claims()).await.unwrap(), "k1"));
        assert_eq!(f.calls(), 1);
        // A fresh key within the TTL: no fetch.
        tokio::time::advance(KEY_TTL - Duration::from_millis(1)).await;
        assert!(signed_with(&signer.sign(claims()).await.unwrap(), "k1"));
        assert_eq!(f.calls(), 1);
        // After the TTL: one fetch shared by 20 concurrent signs.
        tokio::time::advance(Duration::from_millis(1)).await;
        f.set_key(Some("k2"));
        let signs: Vec<_> = (0..20)
            .map(|_| {
                let s = signer.clone();
                tokio::spawn(async move { s.sign(claims()).await })
            })
            .collect();
        for t in signs {
            assert!(signed_with(&t.await.unwrap().unwrap(), "k2"));
        }
        assert_eq!(f.calls(), 2, "one fetch for all 20");
        // The refresh fails: the last good key signs.
        tokio::time::advance(KEY_TTL).await;
        f.set_key(None);
        assert!(signed_with(&signer.sign(claims()).await.unwrap(), "k2"));
        assert_eq!(f.calls(), 3);
        // Just after a failed fetch: the last good key at once, no new fetch.
        assert!(signed_with(&signer.sign(claims()).await.unwrap(), "k2"));
        assert_eq!(f.calls(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_signer_that_never_had_a_key_fails_and_tries_again_next_time() {
        let (f, signer) = signer(None);
        let e = signer.sign(claims()).await.unwrap_err();
        assert!(
            matches!(&e, StoreError::Failed { .. }) && chain(&e).contains("AccessDeniedException"),
            "{e}"
        );
        assert!(signer.sign(claims()).await.is_err());
        assert_eq!(f.calls(), 2, "no quiet period without a key to sign with");
        f.set_key(Some("k"));
        assert!(signed_with(&signer.sign(claims()).await.unwrap(), "k"));
    }
}
