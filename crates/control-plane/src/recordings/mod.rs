//! A session's recording: `GET /v1/sessions/{id}/replays` (its pages),
//! `GET /v1/sessions/{id}/replays/{pageId}` (a page's HLS playlist), the MP4 downloads
//! ([`downloads`]) and `GET /v1/sessions/{id}/recording` (Browserbase's rrweb events, which
//! this platform does not capture: 410 pointing at `/replays`).
//!
//! The session's controller stores each page's HLS segments and index during the session
//! ([`wallcrawler_contract::recording`]); these routes read the indexes, so they answer while
//! the session runs (an EVENT playlist of the segments stored so far) and after it ended (a
//! VOD playlist). A playlist's segment URLs are the bucket's presigned GETs on AWS and this
//! server's own signed URLs locally, valid for [`SEGMENT_URL_TTL_SECONDS`] (Browserbase: 6 h).
//! An index that is not well formed (a foreign object, a segment name that is not ours) is
//! passed over and logged.

pub mod downloads;

use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use serde_json::json;
use tracing::warn;
use wallcrawler_contract::recording::{
    MAX_INDEX_BYTES, MAX_PAGES, PLAYLIST_CONTENT_TYPE, PageIndex, index_key, page_of_index_name,
    page_prefix, playlist, recordings_prefix, valid_page_id,
};
use wallcrawler_contract::session_doc::SessionDoc;

use crate::app::App;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::handlers::{ApiResult, PathId, own_session};
use crate::stores::Bounded;

/// How long a playlist's segment URLs work (Browserbase signs them for 6 hours).
pub const SEGMENT_URL_TTL_SECONDS: u64 = 6 * 3600;

/// `GET /v1/sessions/{id}/replays`: `{pageCount, pages: [{pageId, startTimeMs, endTimeMs,
/// url}]}` in page order (none: `pageCount` 0). Another project's session is a 404.
pub async fn replays(caller: Caller, PathId(id): PathId) -> ApiResult {
    let (app, p) = caller.into_parts();
    let s = own_session(&app, &p, &id).await?;
    let pages: Vec<serde_json::Value> = page_indexes(&app, &s)
        .await?
        .iter()
        .map(|i| {
            json!({
                "pageId": i.page_id,
                "startTimeMs": i.start_time_ms,
                "endTimeMs": i.end_time_ms,
                "url": i.url,
            })
        })
        .collect();
    Ok(axum::Json(json!({"pageCount": pages.len(), "pages": pages})).into_response())
}

/// `GET /v1/sessions/{id}/replays/{pageId}`: the page's HLS playlist
/// (`application/vnd.apple.mpegurl`). A page id that is not one (`../x`, `01`) or a page not
/// recorded is a 404, as is another project's session.
pub async fn replay_page(caller: Caller, PagePath(id, page_id): PagePath) -> ApiResult {
    let (app, p) = caller.into_parts();
    let s = own_session(&app, &p, &id).await?;
    let index = page_index(&app, &s, &page_id).await?;
    let prefix = page_prefix(&s.project_id, &s.session_id, &index.page_id);
    let mut urls = Vec::with_capacity(index.segments.len());
    for seg in &index.segments {
        let key = format!("{prefix}{}", seg.name);
        let url = app
            .archives
            .presign_get(&key, SEGMENT_URL_TTL_SECONDS)
            .await
            .map_err(|e| ApiError::internal("the recording could not be signed").caused_by(e))?;
        urls.push((seg.name.clone(), url));
    }
    let text = playlist(&index, |name| {
        urls.iter()
            .find(|(n, _)| n == name)
            .map(|(_, u)| u.clone())
            .unwrap_or_default()
    });
    Ok((
        [
            (header::CONTENT_TYPE, PLAYLIST_CONTENT_TYPE),
            (header::CACHE_CONTROL, "no-store"),
        ],
        text,
    )
        .into_response())
}

/// `GET /v1/sessions/{id}/recording`: 410. Browserbase's rrweb events are not captured here;
/// the session's video is at `/replays`. Another project's session is a 404.
pub async fn recording_gone(caller: Caller, PathId(id): PathId) -> ApiResult {
    let (app, p) = caller.into_parts();
    let s = own_session(&app, &p, &id).await?;
    let body = json!({
        "statusCode": 410,
        "error": "Gone",
        "message": "rrweb recordings are not captured by this platform; the session's pages are \
                    recorded as video: GET /v1/sessions/{id}/replays lists them, \
                    GET /v1/sessions/{id}/replays/{pageId} is a page's HLS playlist, and \
                    POST /v1/sessions/{id}/recording/downloads builds MP4s",
        "replays": format!("/v1/sessions/{}/replays", s.session_id),
    });
    Ok((StatusCode::GONE, axum::Json(body)).into_response())
}

/// The path of a page's route: the session's id and the page's id, both as sent.
pub struct PagePath(pub String, pub String);

impl<S: Send + Sync> FromRequestParts<S> for PagePath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Path::<(String, String)>::from_request_parts(parts, state)
            .await
            .map(|Path((id, page))| PagePath(id, page))
            .map_err(|_| ApiError::bad_request("the ids in the path are not valid UTF-8"))
    }
}

/// The recorded pages' indexes of session `s`, in page order.
pub(crate) async fn page_indexes(app: &App, s: &SessionDoc) -> Result<Vec<PageIndex>, ApiError> {
    let prefix = recordings_prefix(&s.project_id, &s.session_id);
    let names = app
        .objects
        .names_under(&prefix, MAX_PAGES + 16)
        .await
        .map_err(|e| ApiError::internal("the recording could not be listed").caused_by(e))?;
    let mut ids: Vec<usize> = names
        .iter()
        .filter_map(|n| page_of_index_name(n))
        .filter_map(|id| id.parse().ok())
        .collect();
    ids.sort_unstable();
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(i) = read_index(app, s, &id.to_string()).await? {
            out.push(i);
        }
    }
    Ok(out)
}

/// The index of page `page_id` of session `s`: 404 when the id is not a page id or the page
/// was not recorded.
pub(crate) async fn page_index(
    app: &App,
    s: &SessionDoc,
    page_id: &str,
) -> Result<PageIndex, ApiError> {
    if !valid_page_id(page_id) {
        return Err(ApiError::not_found(
            "no such page in the session's recording",
        ));
    }
    read_index(app, s, page_id)
        .await?
        .ok_or_else(|| ApiError::not_found("no such page in the session's recording"))
}

/// A page's index, if stored and well formed (else logged and passed over).
async fn read_index(
    app: &App,
    s: &SessionDoc,
    page_id: &str,
) -> Result<Option<PageIndex>, ApiError> {
    let key = index_key(&s.project_id, &s.session_id, page_id);
    let body = match app.objects.get_at_most(&key, MAX_INDEX_BYTES).await {
        Ok(Some(Bounded::Whole(b))) => b,
        Ok(None) => return Ok(None),
        Ok(Some(Bounded::TooLarge)) => {
            warn!(page_id, "a recording's index is too large; passed over");
            return Ok(None);
        }
        Err(e) => {
            return Err(ApiError::internal("the recording could not be read").caused_by(e));
        }
    };
    match serde_json::from_slice::<PageIndex>(&body) {
        Ok(i) if i.is_well_formed() && i.page_id == page_id => Ok(Some(i)),
        _ => {
            warn!(
                page_id,
                "a recording's index is not well formed; passed over"
            );
            Ok(None)
        }
    }
}
