//! The contexts bucket ([`S3Archives`]): presigned upload URLs and deletion of context
//! archives; extension archives and their records as objects; sessions' downloads zipped into
//! the bucket and handed out by a presigned GET.

use std::time::Duration;

use async_trait::async_trait;
use aws_config::SdkConfig;

use super::sdk_error;
use crate::error::StoreError;
use crate::stores::{ArchiveUrls, Bounded, ObjectStore, StoreResult};
use crate::zips::{ZIP_URL_TTL_SECONDS, Zip, ZipFail, is_entry_name, write_zip};

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

/// A presigned URL's settings: valid for `ttl_seconds`.
fn presigning(ttl_seconds: u64) -> StoreResult<aws_sdk_s3::presigning::PresigningConfig> {
    aws_sdk_s3::presigning::PresigningConfig::expires_in(Duration::from_secs(ttl_seconds))
        .map_err(|e| StoreError::failed_by("presigning", e))
}

#[async_trait]
impl ArchiveUrls for S3Archives {
    /// A SigV4 presigned `PutObject` (at most 7 days, S3's limit).
    async fn presign_put(&self, key: &str, ttl_seconds: u64) -> StoreResult<String> {
        let cfg = presigning(ttl_seconds.min(7 * 24 * 3600))?;
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

    /// A SigV4 presigned `GetObject` (at most 7 days, S3's limit).
    async fn presign_get(&self, key: &str, ttl_seconds: u64) -> StoreResult<String> {
        let cfg = presigning(ttl_seconds.min(7 * 24 * 3600))?;
        let req = self
            .client
            .get_object()
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
            .set_tagging(wallcrawler_contract::session_log::record_tagging(key).map(str::to_owned))
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

    /// The zip written to a temporary file, object by object (`GetObject` streamed into it),
    /// put at `zip_key`, and a presigned GET of it: the API's Lambda cannot answer a large
    /// body.
    async fn zip_under(&self, prefix: &str, zip_key: &str, max: u64) -> StoreResult<Zip> {
        let entries = self.entries_under(prefix, max).await?;
        let tmp = std::env::temp_dir().join(format!("downloads-{}.zip", uuid::Uuid::new_v4()));
        let stored = match self.zip_to_file(entries, &tmp, max).await {
            Ok(()) => self.put_file(zip_key, &tmp).await,
            Err(e) => Err(e),
        };
        let _ = tokio::fs::remove_file(&tmp).await;
        stored?;
        let cfg = presigning(ZIP_URL_TTL_SECONDS)?;
        let req = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(zip_key)
            .presigned(cfg)
            .await
            .map_err(|e| sdk_error(BUCKET, e))?;
        Ok(Zip::At(req.uri().to_owned()))
    }

    /// `ListObjectsV2` pages (in key order) until `max` names.
    async fn names_under(&self, prefix: &str, max: usize) -> StoreResult<Vec<String>> {
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .into_paginator()
            .send();
        let mut names = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| sdk_error(BUCKET, e))?;
            for key in page.contents().iter().filter_map(|o| o.key()) {
                let name = key.strip_prefix(prefix).unwrap_or("");
                if !name.is_empty() && !name.contains('/') {
                    names.push(name.to_owned());
                }
                if names.len() >= max {
                    return Ok(names);
                }
            }
        }
        Ok(names)
    }
}

impl S3Archives {
    /// The objects directly under `prefix` as (entry name, key), in key order; more than `max`
    /// bytes in all is refused before anything is read.
    async fn entries_under(&self, prefix: &str, max: u64) -> StoreResult<Vec<(String, String)>> {
        let mut pages = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .into_paginator()
            .send();
        let (mut entries, mut total) = (Vec::new(), 0u64);
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| sdk_error(BUCKET, e))?;
            for o in page.contents() {
                let Some(key) = o.key() else { continue };
                let name = &key[prefix.len().min(key.len())..];
                if key.starts_with(prefix) && is_entry_name(name) {
                    total += o.size().unwrap_or(0).max(0) as u64;
                    entries.push((name.to_owned(), key.to_owned()));
                }
            }
        }
        if total > max {
            return Err(ZipFail::TooLarge(max).into());
        }
        Ok(entries)
    }

    /// Writes the zip of `entries` to `path`, each object streamed from S3 in turn.
    async fn zip_to_file(
        &self,
        entries: Vec<(String, String)>,
        path: &std::path::Path,
        max: u64,
    ) -> StoreResult<()> {
        let (client, bucket, path) = (self.client.clone(), self.bucket.clone(), path.to_owned());
        let handle = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
            let file = std::fs::File::create(&path).map_err(ZipFail::Io)?;
            let opened = entries.into_iter().map(|(name, key)| {
                let out = handle
                    .block_on(client.get_object().bucket(&bucket).key(&key).send())
                    .map_err(std::io::Error::other)?;
                let body = out.body.into_async_read();
                Ok((
                    name,
                    tokio_util::io::SyncIoBridge::new_with_handle(body, handle.clone()),
                ))
            });
            write_zip(std::io::BufWriter::new(file), opened, max)?;
            Ok::<(), ZipFail>(())
        })
        .await
        .map_err(|e| StoreError::failed_by("zipping downloads", e))?
        .map_err(StoreError::from)
    }

    /// `PutObject` of the file at `path`, streamed.
    async fn put_file(&self, key: &str, path: &std::path::Path) -> StoreResult<()> {
        let body = aws_sdk_s3::primitives::ByteStream::from_path(path)
            .await
            .map_err(|e| StoreError::failed_by("reading the downloads zip", e))?;
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type("application/zip")
            .body(body)
            .send()
            .await
            .map_err(|e| sdk_error(BUCKET, e))?;
        Ok(())
    }
}
