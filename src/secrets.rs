//! The public keys from Secrets Manager: the workspace's one key cache
//! ([`wallcrawler_aws::keys`]: TTL, one fetch at a time, rotation, the quiet period after a
//! miss) over the shared Secrets Manager fetcher, its failures as [`StoreError`]s, as the
//! proxy's [`KeySource`].

use std::future::Future;
use std::pin::Pin;

use wallcrawler_aws::keys::{KeyCache, KeyError, KeyFetcher};
use wallcrawler_contract::VerifyingKey;

use crate::auth::{KeySet, KeySource};
use crate::stores::StoreError;

/// Where the public key secret comes from (Secrets Manager, or a test's fake).
pub(crate) type SecretFetcher = dyn KeyFetcher<Key = VerifyingKey, Error = StoreError>;

/// The public keys, cached.
pub(crate) type SecretKeyCache = KeyCache<SecretFetcher>;

/// Why a fetch failed; shared by every caller waiting on the same fetch.
pub(crate) type FetchError = wallcrawler_aws::keys::FetchError<StoreError>;

/// A few words on a failed fetch for a stored reason (see [`StoreError::summary`]).
pub(crate) fn summary(e: &KeyError<StoreError>) -> String {
    match e {
        KeyError::Fetch(e) => e.summary(),
        other => other.to_string(),
    }
}

impl KeySource for SecretKeyCache {
    fn keys(&self) -> Option<KeySet> {
        KeyCache::keys(self)
    }

    fn refresh_after_miss(&self) -> Pin<Box<dyn Future<Output = Option<KeySet>> + Send + '_>> {
        Box::pin(KeyCache::refresh_after_miss(self))
    }
}
