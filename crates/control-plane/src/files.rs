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

use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use wallcrawler_contract::storage::session_files_prefix;

use crate::auth::Caller;
use crate::error::ApiError;
use crate::handlers::{ApiResult, PathId, own_session};
use crate::zips::Zip;

/// The most content a downloads zip holds: above the controllers' default cap
/// (`DOWNLOADS_MAX_BYTES`, 500 MiB), within the API Lambda's /tmp (1 GiB in the template).
pub const MAX_ZIP_CONTENT_BYTES: u64 = 600 << 20;
/// What a 202 tells the client to wait before asking again.
pub const RETRY_AFTER_SECONDS: u64 = 2;

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
