//! The contexts bucket ([`S3Archives`]): presigned upload URLs and deletion of context
//! archives; extension archives and their records as objects.

use std::time::Duration;

use async_trait::async_trait;
use aws_config::SdkConfig;

use super::sdk_error;
use crate::error::StoreError;
use crate::stores::{ArchiveUrls, Bounded, ObjectStore, StoreResult};

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

#[async_trait]
/// Extension archives and their records.
impl ObjectStore for S3Archives {
    async fn put(&self, key: &str, body: axum::body::Bytes) -> StoreResult<()> {
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .body(body.into())
            .send()
            .await
            .map_err(|e| sdk_error(BUCKET, e))?;
        Ok(())
    }

    /// `GetObject`; `NoSuchKey` is `None`. Objects here are small (records, archives within
    /// the API's body limit), so the body is read whole.
    async fn get(&self, key: &str) -> StoreResult<Option<axum::body::Bytes>> {
        let out = match wallcrawler_aws::get_object(&self.client, &self.bucket, key).await {
            Ok(Some(out)) => out,
            Ok(None) => return Ok(None),
            Err(e) => return Err(sdk_error(BUCKET, e)),
        };
        let body = out
            .body
            .collect()
            .await
            .map_err(|e| StoreError::unavailable_by(BUCKET, e))?;
        Ok(Some(body.into_bytes()))
    }

    /// `GetObject`, refused on its `Content-Length` before the body is read.
    async fn get_at_most(&self, key: &str, max: u64) -> StoreResult<Option<Bounded>> {
        let out = match wallcrawler_aws::get_object(&self.client, &self.bucket, key).await {
            Ok(Some(out)) => out,
            Ok(None) => return Ok(None),
            Err(e) => return Err(sdk_error(BUCKET, e)),
        };
        if out.content_length().is_none_or(|n| n < 0 || n as u64 > max) {
            return Ok(Some(Bounded::TooLarge));
        }
        let body = out
            .body
            .collect()
            .await
            .map_err(|e| StoreError::unavailable_by(BUCKET, e))?;
        Ok(Some(Bounded::Whole(body.into_bytes())))
    }

    async fn delete(&self, key: &str) -> StoreResult<()> {
        ArchiveUrls::delete(self, key).await
    }

    /// `ListObjectsV2` of one key under `prefix`.
    async fn any_under(&self, prefix: &str) -> StoreResult<bool> {
        let out = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .max_keys(1)
            .send()
            .await
            .map_err(|e| sdk_error(BUCKET, e))?;
        Ok(out.key_count().unwrap_or(0) > 0 || !out.contents().is_empty())
    }
}
