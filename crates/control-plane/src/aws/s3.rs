//! The contexts bucket ([`S3Archives`]): presigned upload URLs and deletion of archives.

use std::time::Duration;

use async_trait::async_trait;
use aws_config::SdkConfig;

use super::sdk_error;
use crate::error::StoreError;
use crate::stores::{ArchiveUrls, StoreResult};

/// The contexts bucket: presigned `PUT` URLs for archives, and deletion.
///
/// A presigned URL is only as long-lived as the credentials that signed it: signed with a
/// Lambda role's temporary credentials it stops working when they expire, which can be before
/// the requested lifetime.
pub struct S3Archives {
    client: aws_sdk_s3::Client,
    bucket: String,
}

impl S3Archives {
    /// Path-style addressing when `AWS_ENDPOINT_URL` points at an emulator.
    pub fn new(sdk: &SdkConfig, bucket: &str) -> Self {
        Self {
            client: wallcrawler_aws::s3_client(sdk),
            bucket: bucket.to_owned(),
        }
    }
}

const BUCKET: &str = "the contexts bucket";

#[async_trait]
impl ArchiveUrls for S3Archives {
    /// A SigV4 presigned `PutObject` (at most 7 days, S3's limit).
    async fn presign_put(&self, key: &str, ttl_seconds: u64) -> StoreResult<String> {
        let cfg = aws_sdk_s3::presigning::PresigningConfig::expires_in(Duration::from_secs(
            ttl_seconds.min(7 * 24 * 3600),
        ))
        .map_err(|e| StoreError::failed_by("presigning", e))?;
        let req = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .presigned(cfg)
            .await
            .map_err(|e| sdk_error(BUCKET, e))?;
        Ok(req.uri().to_owned())
    }

    /// `DeleteObject` (succeeds when the object is already gone).
    async fn delete(&self, key: &str) -> StoreResult<()> {
        self.client
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| sdk_error(BUCKET, e))?;
        Ok(())
    }
}
