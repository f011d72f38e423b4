//! Browserbase's session uploads: `POST /v1/sessions/{id}/uploads` with a multipart `file`
//! puts the file where the session's browser can read it.
//!
//! The API cannot reach the browser's disk (on AWS it runs in a Lambda, the browser in a
//! task), so the file is stored at [`upload_key`] in the contexts bucket (the data directory's
//! `contexts/` locally), and the answer names the path the client gives
//! `DOM.setFileInputFiles` or Puppeteer's `uploadFile`: `<uploadsDir>/<name>`, with the
//! `uploadsDir` the controller wrote into the session item at READY. The controller brings the
//! file down when a client first names that path (`src/proxy/guard.rs` in the controller), so
//! the upload needs no word from the task and no waiting.
//!
//! Rules, each refused with its reason:
//!
//! - the session is the caller's project's (another's is a 404 like a missing one) and its
//!   browser is up: a session still starting is waited for (bounded by the create's wait; it
//!   has no `uploadsDir` before READY), an ended one has no browser (409);
//! - the file's name is one path component, kept as given (never rewritten: the client uses
//!   the path it is answered): not empty, not `.` or `..`, no `/` or `\`, no NUL or other
//!   control character, at most 255 bytes (400; [`upload_name_problem`]);
//! - the file is at most [`MAX_FILE_BYTES`] (413): API Gateway takes 10 MB and Lambda 6 MB,
//!   base64 included, as for extensions. A larger file (up to [`MAX_FETCH_BYTES`], what the
//!   controller brings down) goes straight to the bucket: `POST /v1/sessions/{id}/uploads/url`
//!   with `{"fileName"}` answers a presigned `PUT` URL for the same key and the same `path`
//!   (a Wallcrawler extension; no SDK calls it).
//!
//! A second upload of the same name replaces the stored file; a browser that already has the
//! first keeps it (the controller fetches a name once).

use axum::Json;
use axum::extract::Multipart;
use axum::extract::multipart::MultipartRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tokio::time::Instant;
use tracing::info;
use wallcrawler_contract::session_doc::SessionDoc;
use wallcrawler_contract::storage::{upload_key, upload_name_problem};

use axum::body::Bytes;
use serde::Deserialize;
use wallcrawler_contract::storage::MAX_UPLOAD_FETCH_BYTES as MAX_FETCH_BYTES;

use crate::app::App;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extensions::{MAX_ARCHIVE_BYTES, file_part};
use crate::handlers::{PathId, own_session, parse_body};

/// The largest uploaded file: the same bound as an extension archive, for the same reason
/// (what one request through API Gateway and Lambda can carry).
pub const MAX_FILE_BYTES: usize = MAX_ARCHIVE_BYTES;

/// The largest `POST /v1/sessions/{id}/uploads` body: the file and the multipart framing.
pub const MAX_BODY_BYTES: usize = MAX_FILE_BYTES + 64 * 1024;

fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the file is larger than {MAX_FILE_BYTES} bytes, the most one upload takes"),
    )
}

/// The session's `uploadsDir`: `Ok(None)` while it is starting, a 409 once it has ended.
fn uploads_dir(s: &SessionDoc) -> Result<Option<&str>, ApiError> {
    let id = &s.session_id;
    if s.ended_at.is_some() || s.internal().is_some_and(|st| st.is_terminal()) {
        return Err(ApiError::conflict(format!(
            "session {id} has ended: files can only be uploaded to a running session"
        )));
    }
    Ok(s.uploads_dir.as_deref().filter(|_| !s.pending()))
}

/// The session's `uploadsDir` once its browser is up. Behind the connect gateway a session is
/// shown RUNNING from its create on, so a client may upload while its browser is starting:
/// the item is read again (as the create does) until READY, for at most the create's wait.
async fn live_uploads_dir(app: &App, mut s: SessionDoc) -> Result<String, ApiError> {
    let deadline = Instant::now() + app.settings.create_wait;
    loop {
        if let Some(dir) = uploads_dir(&s)? {
            return Ok(dir.to_owned());
        }
        if !s.pending() || Instant::now() + app.settings.poll_every >= deadline {
            return Err(ApiError::conflict(format!(
                "session {} is not running yet: upload once its browser is up",
                s.session_id
            )));
        }
        tokio::time::sleep(app.settings.poll_every).await;
        s =
            app.sessions.get(&s.session_id).await?.ok_or_else(|| {
                ApiError::not_found(format!("session {} not found", s.session_id))
            })?;
    }
}

/// `name` as an upload's file name, or the 400 naming why not.
fn checked_name(name: &str) -> Result<&str, ApiError> {
    match upload_name_problem(name) {
        None => Ok(name),
        Some(why) => {
            let shown: String = name.chars().take(64).collect();
            Err(ApiError::bad_request(format!("{why}: {shown:?}")))
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct UploadUrlRequest {
    file_name: String,
}

/// `POST /v1/sessions/{id}/uploads/url` with `{"fileName"}`: 201 `{uploadUrl, path, expiresAt,
/// maxBytes}` — a presigned `PUT` of a file too large for one request, stored where an upload
/// through the API is; the browser reads it at `path` (at most [`MAX_FETCH_BYTES`]: the
/// controller refuses to bring down more). The same session and name rules as an upload.
pub async fn create_upload_url(
    caller: Caller,
    PathId(id): PathId,
    body: Bytes,
) -> Result<Response, ApiError> {
    let (app, p) = caller.into_parts();
    let session = own_session(&app, &p, &id).await?;
    let req: UploadUrlRequest = parse_body(&body)?;
    let name = checked_name(&req.file_name)?;
    let dir = live_uploads_dir(&app, session.clone()).await?;
    let key = upload_key(&session.project_id, &session.session_id, name);
    let ttl = app.settings.upload_url_ttl;
    let url = app.archives.presign_put(&key, ttl).await?;
    let expires_at =
        wallcrawler_contract::time::iso8601_millis(app.clock.now_millis() + ttl * 1000);
    info!(session.id = %session.session_id, project.id = %session.project_id, "upload URL handed out");
    let body = json!({
        "uploadUrl": url,
        "path": format!("{}/{name}", dir.trim_end_matches('/')),
        "expiresAt": expires_at,
        "maxBytes": MAX_FETCH_BYTES,
    });
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// `POST /v1/sessions/{id}/uploads`: a multipart `file`, stored for the session's browser.
/// 200 with Browserbase's `{message}` and the `path` to name in `DOM.setFileInputFiles`.
pub async fn create_upload(
    caller: Caller,
    PathId(id): PathId,
    form: Result<Multipart, MultipartRejection>,
) -> Result<Response, ApiError> {
    let (app, p) = caller.into_parts();
    let session = own_session(&app, &p, &id).await?;
    let dir = live_uploads_dir(&app, session.clone()).await?;
    let form = form.map_err(|e| {
        ApiError::bad_request(format!(
            "POST /v1/sessions/{{id}}/uploads takes a multipart/form-data body with a \"file\": {}",
            e.body_text()
        ))
    })?;
    let (name, bytes) = file_part(form, MAX_FILE_BYTES, too_large, "the file to upload").await?;
    let name = checked_name(name.as_deref().unwrap_or(""))?;
    let key = upload_key(&session.project_id, &session.session_id, name);
    let size = bytes.len();
    app.objects.put(&key, bytes).await?;
    info!(session.id = %session.session_id, project.id = %session.project_id, bytes = size, "file uploaded for the session");
    let path = format!("{}/{name}", dir.trim_end_matches('/'));
    Ok((
        StatusCode::OK,
        Json(json!({ "message": "File uploaded successfully", "path": path })),
    )
        .into_response())
}
