//! A session's files: `GET /v1/sessions/{id}/downloads`, the zip of what its browser downloaded.
//!
//! The controller stores each finished download at
//! `files/<projectId>/<sessionId>/downloads/<stem>-<unix ms>.<ext>` and keeps the session
//! item's `downloadsInProgress` (see the controller's `session::downloads`). While that is above
//! zero and the session has not ended, the answer is 202 with `Retry-After`: never an
//! incomplete zip presented as the result. Otherwise a zip of every stored download (entries
//! named as stored; none: an empty zip, as Browserbase answers): locally its bytes; on AWS,
//! where the API's Lambda cannot return a large body, the zip is written to
//! `files/<projectId>/<sessionId>/downloads.zip` and the answer is a 302 to a presigned GET of
//! it (short-lived). An ended session's downloads stay retrievable.

use std::io::{Read, Seek, Write};

use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use wallcrawler_contract::storage::session_files_prefix;

use crate::auth::Caller;
use crate::error::{ApiError, StoreError};
use crate::handlers::{ApiResult, PathId, own_session};

/// The most content a downloads zip holds: above the controllers' default cap
/// (`DOWNLOADS_MAX_BYTES`, 500 MiB), within the API Lambda's /tmp (1 GiB in the template).
pub const MAX_ZIP_CONTENT_BYTES: u64 = 600 << 20;
/// What a 202 tells the client to wait before asking again.
pub const RETRY_AFTER_SECONDS: u64 = 2;
/// How long the presigned GET of a downloads zip is valid.
pub const ZIP_URL_TTL_SECONDS: u64 = 300;

/// A zip, as the store hands it back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Zip {
    /// Its bytes.
    Body(axum::body::Bytes),
    /// A URL it can be fetched from (a presigned GET).
    At(String),
}

/// Why a zip could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ZipFail {
    /// Reading an entry or writing the zip failed.
    #[error("reading or writing the zip failed")]
    Io(#[from] std::io::Error),
    /// The zip writer refused.
    #[error("the zip writer failed")]
    Zip(#[from] zip::result::ZipError),
    /// The entries hold more than the zip may.
    #[error("the session's downloads hold more than {0} bytes")]
    TooLarge(u64),
}

impl From<ZipFail> for StoreError {
    fn from(e: ZipFail) -> Self {
        StoreError::failed_by("making the downloads zip", e)
    }
}

/// Whether `name` (a key's rest under a `downloads/` prefix) is a stored download: one path
/// component, not a temporary file of a write in progress (a leading `.`).
pub fn is_entry_name(name: &str) -> bool {
    !name.is_empty() && !name.starts_with('.') && !name.contains('/')
}

/// Writes `entries` (name, content) into a zip on `out`, stored uncompressed (downloads are
/// mostly compressed already), at most `max` bytes of content in all.
pub fn write_zip<W, R>(
    out: W,
    entries: impl IntoIterator<Item = std::io::Result<(String, R)>>,
    max: u64,
) -> Result<W, ZipFail>
where
    W: Write + Seek,
    R: Read,
{
    let mut zip = zip::ZipWriter::new(out);
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Stored)
        .large_file(true);
    let mut total = 0u64;
    for entry in entries {
        let (name, content) = entry?;
        zip.start_file(name, options)?;
        let left = max - total;
        let n = std::io::copy(&mut content.take(left + 1), &mut zip)?;
        if n > left {
            return Err(ZipFail::TooLarge(max));
        }
        total += n;
    }
    Ok(zip.finish()?)
}

/// `GET /v1/sessions/{id}/downloads`: 202 + `Retry-After` while downloads are in progress;
/// else the zip (200 `application/zip`) or a 302 to it. Another project's session is a 404.
pub async fn session_downloads(caller: Caller, PathId(id): PathId) -> ApiResult {
    let (app, p) = caller.into_parts();
    let s = own_session(&app, &p, &id).await?;
    let in_progress = s.downloads_in_progress.unwrap_or(0);
    if s.ended_at.is_none() && in_progress > 0 {
        let body = serde_json::json!({
            "message": "downloads are in progress; ask again after Retry-After seconds",
            "downloadsInProgress": in_progress,
        });
        return Ok((
            StatusCode::ACCEPTED,
            [(header::RETRY_AFTER, RETRY_AFTER_SECONDS.to_string())],
            axum::Json(body),
        )
            .into_response());
    }
    let base = session_files_prefix(&s.project_id, &s.session_id);
    let zip = app
        .objects
        .zip_under(
            &format!("{base}downloads/"),
            &format!("{base}downloads.zip"),
            MAX_ZIP_CONTENT_BYTES,
        )
        .await
        .map_err(|e| {
            ApiError::internal("the session's downloads could not be zipped").caused_by(e)
        })?;
    Ok(match zip {
        Zip::Body(b) => ([(header::CONTENT_TYPE, "application/zip")], b).into_response(),
        Zip::At(url) => (StatusCode::FOUND, [(header::LOCATION, url)]).into_response(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_keep_their_names_and_bytes() {
        let entries = vec![
            Ok(("a-1.csv".to_owned(), &b"x,y\n"[..])),
            Ok(("b-2.bin".to_owned(), &[0u8, 1, 2][..])),
        ];
        let out = write_zip(std::io::Cursor::new(Vec::new()), entries, 100).unwrap();
        let mut z = zip::ZipArchive::new(std::io::Cursor::new(out.into_inner())).unwrap();
        assert_eq!(z.len(), 2);
        for (name, want) in [("a-1.csv", &b"x,y\n"[..]), ("b-2.bin", &[0u8, 1, 2][..])] {
            let mut got = Vec::new();
            z.by_name(name).unwrap().read_to_end(&mut got).unwrap();
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn no_entries_make_an_empty_zip_and_too_much_is_refused() {
        let none: Vec<std::io::Result<(String, &[u8])>> = vec![];
        let out = write_zip(std::io::Cursor::new(Vec::new()), none, 10).unwrap();
        assert_eq!(out.into_inner().len(), 22);
        let big = vec![Ok(("a".to_owned(), &[0u8; 11][..]))];
        let e = write_zip(std::io::Cursor::new(Vec::new()), big, 10).unwrap_err();
        assert!(matches!(e, ZipFail::TooLarge(10)));
    }

    #[test]
    fn only_single_component_names_are_entries() {
        assert!(is_entry_name("report-1.csv"));
        for bad in ["", ".report.partial-1", "a/b", ".."] {
            assert!(!is_entry_name(bad), "{bad}");
        }
    }
}
