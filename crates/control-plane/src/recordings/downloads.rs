//! `POST` and `GET /v1/sessions/{id}/recording/downloads`: one MP4 per recorded page,
//! `PENDING` then `COMPLETED` with a signed URL (or `FAILED`; asking again retries).
//!
//! The session's controller joins each page's segments into its MP4 when the page's recording
//! ends and marks the page's index ([`PageIndex::mp4`]): a request for such a page is
//! `COMPLETED` at once, wherever the API runs. A page still recording is built on request
//! where [`Mp4Build`] (the API's settings) says: locally by a task of the server's own
//! process after the answer (ffmpeg's concat, [`wallcrawler_local::mp4`]); on AWS the API's
//! Lambda has no ffmpeg (none in the `provided.al2023` runtime), so the page stays `PENDING`
//! until its controller has stored the MP4 (unless the function is given one, a layer with
//! `FFMPEG_PATH`: then the build runs before the answer, as a Lambda's process is frozen once
//! it has answered).
//!
//! A page's state is `…/recordings/<pageId>/download.json`
//! ([`wallcrawler_contract::recording::DownloadState`]), its MP4 `…/recording.mp4`. A
//! `PENDING` state older than [`BUILD_DEADLINE_MS`] was lost (the process building it ended)
//! and is built again when asked; an ended page whose controller stored no MP4 is `FAILED`
//! where the API cannot build it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::response::IntoResponse;
use serde_json::{Value, json};
use tracing::{info, warn};
use wallcrawler_contract::recording::{
    DOWNLOAD_NAME, DownloadState, DownloadStatus, MP4_NAME, PageIndex, page_prefix,
};
use wallcrawler_contract::session_doc::SessionDoc;
use wallcrawler_contract::time::{now_iso8601, unix_millis};
use wallcrawler_local::mp4;

use super::page_indexes;
use crate::app::{App, Mp4Build};
use crate::auth::Caller;
use crate::error::ApiError;
use crate::handlers::{ApiResult, PathId, own_session};
use crate::stores::Bounded;

/// How long a download URL works.
pub const DOWNLOAD_URL_TTL_SECONDS: u64 = 3600;
/// How long a build may take: a `PENDING` state older than this was lost.
pub const BUILD_DEADLINE_MS: u64 = 10 * 60 * 1000;
/// The most bytes of segments one MP4 is built from (a session's recording is capped at
/// 1 GiB by its controller).
pub const MAX_SOURCE_BYTES: u64 = 1 << 30;
/// The largest segment read (2 s of video; far above what the controller writes).
const MAX_SEGMENT_BYTES: u64 = 64 << 20;
/// ffmpeg's own deadline within a build.
const FFMPEG_TIMEOUT: Duration = Duration::from_secs(300);

/// `POST /v1/sessions/{id}/recording/downloads`: builds each recorded page's MP4 (a page
/// built or being built is left as it is; a failed or lost one, or one built before its
/// recording grew, is built again; one with no segment yet is not built); answers the pages' states as `GET` does. Another
/// project's session is a 404.
pub async fn create_downloads(caller: Caller, PathId(id): PathId) -> ApiResult {
    let (app, p) = caller.into_parts();
    let s = own_session(&app, &p, &id).await?;
    for index in page_indexes(&app, &s).await? {
        if index.segments.is_empty() {
            // Nothing stored yet (a page just opened): nothing to build, nothing failed.
            continue;
        }
        let state = read_state(&app, &s, &index.page_id).await;
        if index.mp4 {
            // Built by the session's controller.
            if state.is_none_or(|st| st.status != DownloadStatus::Completed) {
                let done = state_of(DownloadStatus::Completed, None);
                write_state(&app, &s, &index.page_id, &done).await;
            }
            continue;
        }
        // A page built while its recording went on (a running session's) is built again
        // once it has more than the build saw.
        let busy = state.as_ref().is_some_and(|st| {
            st.status == DownloadStatus::Completed && index.end_time_ms <= st.at_ms
                || st.status == DownloadStatus::Pending
                    && unix_millis().saturating_sub(st.at_ms) < BUILD_DEADLINE_MS
        });
        if !busy {
            start_build(&app, &s, index).await?;
        }
    }
    answer(&app, &s).await
}

/// `GET /v1/sessions/{id}/recording/downloads`: `{downloads: [{pageId, status, completedAt?,
/// downloadUrl?}]}`, one per recorded page (`NOT_REQUESTED` before any `POST`), the URL
/// signed anew for each answer. Another project's session is a 404.
pub async fn list_downloads(caller: Caller, PathId(id): PathId) -> ApiResult {
    let (app, p) = caller.into_parts();
    let s = own_session(&app, &p, &id).await?;
    answer(&app, &s).await
}

async fn answer(app: &App, s: &SessionDoc) -> ApiResult {
    let mut downloads = Vec::new();
    for index in page_indexes(app, s).await? {
        downloads.push(download(app, s, &index).await?);
    }
    Ok(axum::Json(json!({ "downloads": downloads })).into_response())
}

/// A page's entry of the answer. A page `PENDING` whose controller has since stored its MP4
/// is `COMPLETED`.
async fn download(app: &App, s: &SessionDoc, index: &PageIndex) -> Result<Value, ApiError> {
    let page_id = index.page_id.as_str();
    let mut state = read_state(app, s, page_id).await;
    if index.mp4
        && let Some(st) = state
            .as_mut()
            .filter(|st| st.status == DownloadStatus::Pending)
    {
        *st = state_of(DownloadStatus::Completed, None);
        write_state(app, s, page_id, st).await;
    }
    let status = state
        .as_ref()
        .map_or(DownloadStatus::NotRequested, |st| st.status);
    let mut out = json!({"pageId": page_id, "status": status});
    if let Some(st) = state.filter(|st| st.status == DownloadStatus::Completed) {
        let key = format!(
            "{}{MP4_NAME}",
            page_prefix(&s.project_id, &s.session_id, page_id)
        );
        let url = app
            .archives
            .presign_get(&key, DOWNLOAD_URL_TTL_SECONDS)
            .await
            .map_err(|e| ApiError::internal("the download could not be signed").caused_by(e))?;
        out["completedAt"] = json!(st.completed_at);
        out["downloadUrl"] = json!(url);
    }
    Ok(out)
}

fn state_key(s: &SessionDoc, page_id: &str) -> String {
    format!(
        "{}{DOWNLOAD_NAME}",
        page_prefix(&s.project_id, &s.session_id, page_id)
    )
}

/// A page's build state, if one was asked for (an unreadable one counts as none).
async fn read_state(app: &App, s: &SessionDoc, page_id: &str) -> Option<DownloadState> {
    match app
        .objects
        .get_at_most(&state_key(s, page_id), 64 << 10)
        .await
    {
        Ok(Some(Bounded::Whole(b))) => serde_json::from_slice(&b).ok(),
        _ => None,
    }
}

async fn write_state(app: &App, s: &SessionDoc, page_id: &str, state: &DownloadState) {
    let body = serde_json::to_vec(state).unwrap_or_default();
    if let Err(e) = app.objects.put(&state_key(s, page_id), body.into()).await {
        warn!(error = %e, page_id, "a recording download's state could not be stored");
    }
}

fn state_of(status: DownloadStatus, error: Option<String>) -> DownloadState {
    DownloadState {
        status,
        at_ms: unix_millis(),
        completed_at: (status == DownloadStatus::Completed).then(now_iso8601),
        error,
    }
}

/// Marks the page `PENDING` and builds its MP4 where [`Mp4Build`] says.
async fn start_build(app: &App, s: &SessionDoc, index: PageIndex) -> Result<(), ApiError> {
    let page_id = index.page_id.clone();
    match app.settings.mp4.clone() {
        // The controller stores it when the page's recording ends, before the session's end.
        Mp4Build::Unavailable if !index.ended || s.ended_at.is_none() => {
            let pending = state_of(DownloadStatus::Pending, None);
            write_state(app, s, &page_id, &pending).await;
        }
        Mp4Build::Unavailable => {
            let why = "the session's controller stored no MP4 of the page, and this API has no \
                       ffmpeg to build one";
            let failed = state_of(DownloadStatus::Failed, Some(why.into()));
            write_state(app, s, &page_id, &failed).await;
        }
        Mp4Build::Background(ffmpeg) => {
            write_state(app, s, &page_id, &state_of(DownloadStatus::Pending, None)).await;
            tokio::spawn(build(app.clone(), s.clone(), index, ffmpeg));
        }
        Mp4Build::Inline(ffmpeg) => {
            write_state(app, s, &page_id, &state_of(DownloadStatus::Pending, None)).await;
            build(app.clone(), s.clone(), index, ffmpeg).await;
        }
    }
    Ok(())
}

/// Builds and stores the page's MP4, then its final state.
async fn build(app: App, s: SessionDoc, index: PageIndex, ffmpeg: PathBuf) {
    let dir = std::env::temp_dir().join(format!("recording-{}", uuid::Uuid::new_v4()));
    let result = build_in(&app, &s, &index, &ffmpeg, &dir).await;
    let _ = tokio::fs::remove_dir_all(&dir).await;
    let done = match result {
        Ok(bytes) => {
            info!(page_id = %index.page_id, bytes, "a recording's MP4 is built");
            state_of(DownloadStatus::Completed, None)
        }
        Err(e) => {
            warn!(page_id = %index.page_id, error = %e, "a recording's MP4 could not be built");
            state_of(DownloadStatus::Failed, Some(e))
        }
    };
    write_state(&app, &s, &index.page_id, &done).await;
}

/// The segments fetched into `dir`, joined into an MP4 by ffmpeg, and the MP4 stored; its
/// size.
async fn build_in(
    app: &App,
    s: &SessionDoc,
    index: &PageIndex,
    ffmpeg: &Path,
    dir: &Path,
) -> Result<u64, String> {
    if index.segments.is_empty() {
        return Err("the page has no stored segment".into());
    }
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(|e| format!("no scratch directory: {e}"))?;
    let prefix = page_prefix(&s.project_id, &s.session_id, &index.page_id);
    let mut total = 0u64;
    for seg in &index.segments {
        let body = match app
            .objects
            .get_at_most(&format!("{prefix}{}", seg.name), MAX_SEGMENT_BYTES)
            .await
        {
            Ok(Some(Bounded::Whole(b))) => b,
            Ok(_) => return Err(format!("segment {} is missing or too large", seg.name)),
            Err(e) => return Err(format!("segment {} could not be read: {e}", seg.name)),
        };
        total += body.len() as u64;
        if total > MAX_SOURCE_BYTES {
            return Err("the page's segments are too large to join".into());
        }
        // Segment names are checked ([`PageIndex::is_well_formed`]): plain file names.
        tokio::fs::write(dir.join(&seg.name), &body)
            .await
            .map_err(|e| format!("writing a segment: {e}"))?;
    }
    mp4::write_list(dir, index).map_err(|e| format!("writing the list: {e}"))?;
    mp4::join(ffmpeg, dir, FFMPEG_TIMEOUT, drop).await?;
    let mp4 = tokio::fs::read(dir.join(MP4_NAME))
        .await
        .map_err(|e| format!("reading the MP4: {e}"))?;
    let n = mp4.len() as u64;
    // The page's controller may have stored its whole MP4 meanwhile (its recording ended
    // while this one was built from fewer segments): that one is kept.
    if super::page_index(app, s, &index.page_id)
        .await
        .is_ok_and(|i| i.mp4)
    {
        return Ok(n);
    }
    app.objects
        .put(&format!("{prefix}{MP4_NAME}"), mp4.into())
        .await
        .map_err(|e| format!("storing the MP4: {e}"))?;
    Ok(n)
}
