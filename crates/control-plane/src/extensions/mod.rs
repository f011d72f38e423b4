//! Browserbase's extensions API: `POST /v1/extensions` (a multipart `file`, the zip of an
//! unpacked Chrome extension), `GET` and `DELETE /v1/extensions/{id}`; and the lookup a session
//! create does for its `extensionId`.
//!
//! In the contexts bucket (the data directory's `contexts/` locally), per project:
//!
//! - `extensions/<projectId>/<sha256>.zip`: the archive, one copy per content
//!   ([`wallcrawler_contract::storage::extension_key`]);
//! - `extensions/<projectId>/records/<extensionId>.json`: one record per upload (its name and
//!   times), so each client's upload has its own id and its own delete;
//! - `extensions/<projectId>/refs/<sha256>/<extensionId>`: which records use an archive. A
//!   delete removes the archive once no record uses it.
//!
//! Each upload gets its own id even when its content is kept once: Stagehand uploads the same
//! extension for every session and deletes it at the end, and one client's delete must not
//! take away the extension another client is about to create a session with.
//!
//! The archive is checked before anything is written ([`archive::check_upload`]), a manifest
//! asking for `file://` access refused with the pattern it names (Chrome denies every
//! extension file access anyway: the controller's `chrome::file_access`). A request body is at
//! most [`MAX_BODY_BYTES`] (413 beyond): API Gateway takes 10 MB and Lambda 6 MB, base64
//! included ([`MAX_ARCHIVE_BYTES`]), so a larger archive cannot come in through one request.
//! It comes in two (a Wallcrawler extension, no SDK calls it): `POST /v1/extensions/uploads`
//! answers a presigned `PUT` URL for `extension-uploads/<projectId>/<uploadId>.zip` (the
//! server itself locally), the client `PUT`s the zip there, and
//! `POST /v1/extensions/uploads/{uploadId}` checks the staged archive (at most
//! [`MAX_STAGED_ARCHIVE_BYTES`], read no further), keeps it as an upload through the API would
//! be kept, and removes the staged copy. The bucket's lifecycle removes unfinished ones.
//!
//! The session item and the claim carry the archive's key (`extensionKey`); the controller
//! unpacks it with the same checks ([`archive::unpack`]) and loads it into Chrome before READY.

pub use wallcrawler_contract::extension_archive as archive;

use axum::Json;
use axum::body::Bytes;
use axum::extract::Multipart;
use axum::extract::multipart::MultipartError;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};
use tracing::info;
use wallcrawler_contract::storage::{EXTENSIONS_PREFIX, extension_key, extension_upload_key};

use crate::app::App;
use crate::auth::{Caller, Principal};
use crate::error::ApiError;
use crate::ids::{PathId, checked_id};
use crate::stores::{Bounded, ObjectStore, StoreResult};

pub use archive::MAX_ARCHIVE_BYTES;

/// The largest archive a presigned upload may bring (the API function holds it in memory while
/// it checks it: 256 MB).
pub const MAX_STAGED_ARCHIVE_BYTES: u64 = 32 * 1024 * 1024;

/// The largest `POST /v1/extensions` body: the archive and the multipart framing around it.
pub const MAX_BODY_BYTES: usize = MAX_ARCHIVE_BYTES + 64 * 1024;

/// One upload of an extension, as kept in its record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExtensionRecord {
    /// `ext_<uuid>`.
    pub id: String,
    /// The project that uploaded it.
    pub project_id: String,
    /// The uploaded file's name (sanitised), as the client named it.
    pub file_name: String,
    /// SHA-256 of the archive, lower-case hex.
    pub sha256: String,
    /// `createdAt`: ISO 8601.
    pub created_at: String,
    /// `updatedAt`: ISO 8601.
    pub updated_at: String,
}

impl ExtensionRecord {
    /// The archive's key in the contexts bucket.
    pub fn archive_key(&self) -> String {
        extension_key(&self.project_id, &self.sha256)
    }

    /// The extension as Browserbase answers it.
    pub fn to_api(&self) -> serde_json::Value {
        json!({
            "id": self.id,
            "fileName": self.file_name,
            "projectId": self.project_id,
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
        })
    }
}

fn record_key(project_id: &str, id: &str) -> String {
    format!("{EXTENSIONS_PREFIX}/{project_id}/records/{id}.json")
}

fn refs_prefix(project_id: &str, sha256: &str) -> String {
    format!("{EXTENSIONS_PREFIX}/{project_id}/refs/{sha256}/")
}

/// Keeps a checked archive and its record: the reference first, then the archive, then the
/// record, so that a concurrent delete of another upload of the same content sees this one's
/// reference before it decides the archive is unused.
async fn keep(objects: &dyn ObjectStore, rec: &ExtensionRecord, zip: Bytes) -> StoreResult<()> {
    let reference = format!("{}{}", refs_prefix(&rec.project_id, &rec.sha256), rec.id);
    objects.put(&reference, Bytes::new()).await?;
    objects.put(&rec.archive_key(), zip).await?;
    let body = serde_json::to_vec(rec).expect("records serialize");
    objects
        .put(&record_key(&rec.project_id, &rec.id), body.into())
        .await
}

/// The record of extension `id` of `project_id`, if any.
async fn find(
    objects: &dyn ObjectStore,
    project_id: &str,
    id: &str,
) -> StoreResult<Option<ExtensionRecord>> {
    let Some(bytes) = objects.get(&record_key(project_id, id)).await? else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| crate::error::StoreError::failed_by(format!("extension record {id}"), e))
}

/// Removes the record, its reference, and the archive when no other record uses it.
async fn remove(objects: &dyn ObjectStore, rec: &ExtensionRecord) -> StoreResult<()> {
    let refs = refs_prefix(&rec.project_id, &rec.sha256);
    objects
        .delete(&record_key(&rec.project_id, &rec.id))
        .await?;
    objects.delete(&format!("{refs}{}", rec.id)).await?;
    if !objects.any_under(&refs).await? {
        objects.delete(&rec.archive_key()).await?;
    }
    Ok(())
}

/// The extension `id`, if it is the caller's project's (another project's is 404 like a
/// missing one, revealing nothing).
pub async fn own_extension(
    app: &App,
    p: &Principal,
    id: &str,
) -> Result<ExtensionRecord, ApiError> {
    let id = checked_id("extension", id)?;
    find(app.objects.as_ref(), p.project_id(), id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("extension {id} not found")))
}

/// A multipart failure as an answer: `too_large` past the body limit, else 400 with its
/// reason.
fn multipart_refusal(e: MultipartError, too_large: fn() -> ApiError) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        too_large()
    } else {
        ApiError::bad_request(format!("invalid multipart body: {}", e.body_text()))
    }
}

fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "the extension archive is larger than {MAX_ARCHIVE_BYTES} bytes, the most one request takes"
        ),
    )
}

/// A multipart body's `file` field (other fields are ignored): the client's file name, if it
/// gave one, and the bytes, at most `max` (else `too_large`). `what` names the file in the
/// refusal of a body without one.
pub(crate) async fn file_part(
    mut form: Multipart,
    max: usize,
    too_large: fn() -> ApiError,
    what: &str,
) -> Result<(Option<String>, Bytes), ApiError> {
    let refusal = |e| multipart_refusal(e, too_large);
    while let Some(field) = form.next_field().await.map_err(refusal)? {
        if field.name() != Some("file") {
            continue;
        }
        let name = field.file_name().map(str::to_owned);
        let bytes = field.bytes().await.map_err(refusal)?;
        if bytes.len() > max {
            return Err(too_large());
        }
        return Ok((name, bytes));
    }
    Err(ApiError::bad_request(format!(
        "the multipart body has no \"file\" field ({what})"
    )))
}

/// The multipart `file` field: its file name and bytes.
async fn file_field(form: Multipart) -> Result<(String, Bytes), ApiError> {
    let (name, bytes) =
        file_part(form, MAX_ARCHIVE_BYTES, too_large, "the extension's zip").await?;
    Ok((
        shown_name(name.as_deref().unwrap_or("extension.zip")),
        bytes,
    ))
}

/// The client's file name as shown back: its last path component, printable, at most 255
/// characters (it is only ever shown, never used as a path).
fn shown_name(name: &str) -> String {
    let last = name.rsplit(['/', '\\']).next().unwrap_or("");
    let clean: String = last.chars().filter(|c| !c.is_control()).take(255).collect();
    if clean.is_empty() {
        "extension.zip".to_owned()
    } else {
        clean
    }
}

/// `POST /v1/extensions`: a multipart `file`, checked ([`archive::check_upload`]), kept, 201 with the
/// extension. A body that is not multipart is a 400; one over [`MAX_BODY_BYTES`] a 413.
pub async fn create_extension(
    caller: Caller,
    form: Result<Multipart, axum::extract::multipart::MultipartRejection>,
) -> Result<Response, ApiError> {
    let (app, p) = caller.into_parts();
    let form = form.map_err(|e| {
        ApiError::bad_request(format!(
            "POST /v1/extensions takes a multipart/form-data body with a \"file\": {}",
            e.body_text()
        ))
    })?;
    let (file_name, zip) = file_field(form).await?;
    let rec = check_and_keep(&app, &p, file_name, zip).await?;
    Ok((StatusCode::CREATED, Json(rec.to_api())).into_response())
}

/// Checks an archive ([`archive::check_upload`]: a manifest asking for file access is refused
/// too; 400 with the reason) and keeps it with a new record.
async fn check_and_keep(
    app: &App,
    p: &Principal,
    file_name: String,
    zip: Bytes,
) -> Result<ExtensionRecord, ApiError> {
    let checked = archive::check_upload(&zip).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let now = app.now_iso();
    let rec = ExtensionRecord {
        id: format!("ext_{}", uuid::Uuid::new_v4().simple()),
        project_id: p.project_id().to_owned(),
        file_name,
        sha256: hex(&Sha256::digest(&zip)),
        created_at: now.clone(),
        updated_at: now,
    };
    keep(app.objects.as_ref(), &rec, zip).await?;
    info!(extension.id = %rec.id, project.id = %rec.project_id, name = %checked.name, version = %checked.version, "extension uploaded");
    Ok(rec)
}

/// `POST /v1/extensions/uploads`: 201 `{id, uploadUrl, expiresAt, maxBytes}` — a presigned URL
/// to `PUT` an archive too large for one request to (at most [`MAX_STAGED_ARCHIVE_BYTES`]).
pub async fn start_upload(caller: Caller) -> Result<Response, ApiError> {
    let (app, p) = caller.into_parts();
    let id = format!("extup_{}", uuid::Uuid::new_v4().simple());
    let key = extension_upload_key(p.project_id(), &id);
    let ttl = app.settings.upload_url_ttl;
    let url = app.archives.presign_put(&key, ttl).await?;
    let expires_at =
        wallcrawler_contract::time::iso8601_millis(app.clock.now_millis() + ttl * 1000);
    info!(project.id = %p.project_id(), upload.id = %id, "extension upload started");
    let body = json!({
        "id": id,
        "uploadUrl": url,
        "expiresAt": expires_at,
        "maxBytes": MAX_STAGED_ARCHIVE_BYTES,
    });
    Ok((StatusCode::CREATED, Json(body)).into_response())
}

/// `POST /v1/extensions/uploads/{id}`: the archive `PUT` to that upload's URL checked and kept
/// as `POST /v1/extensions` keeps one (201 with the extension, named `<id>.zip`); the staged
/// copy is removed whatever the check says. 404 when nothing was put there (or it was already
/// used), 413 past [`MAX_STAGED_ARCHIVE_BYTES`].
pub async fn finish_upload(caller: Caller, PathId(id): PathId) -> Result<Response, ApiError> {
    let (app, p) = caller.into_parts();
    let id = checked_id("extension upload", &id)?;
    let key = extension_upload_key(p.project_id(), id);
    let staged = app
        .objects
        .get_at_most(&key, MAX_STAGED_ARCHIVE_BYTES)
        .await?;
    let result = match staged {
        None => {
            return Err(ApiError::not_found(format!(
                "extension upload {id} has no archive (nothing was PUT to its URL, or it was already used)"
            )));
        }
        Some(Bounded::TooLarge) => Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the extension archive is larger than {MAX_STAGED_ARCHIVE_BYTES} bytes, the most an upload takes"
            ),
        )),
        Some(Bounded::Whole(zip)) => check_and_keep(&app, &p, format!("{id}.zip"), zip).await,
    };
    app.objects.delete(&key).await?;
    let rec = result?;
    Ok((StatusCode::CREATED, Json(rec.to_api())).into_response())
}

/// `GET /v1/extensions/{id}`.
pub async fn get_extension(caller: Caller, PathId(id): PathId) -> Result<Response, ApiError> {
    let (app, p) = caller.into_parts();
    Ok(Json(own_extension(&app, &p, &id).await?.to_api()).into_response())
}

/// `DELETE /v1/extensions/{id}`: 204. Sessions created with it keep what they loaded.
pub async fn delete_extension(caller: Caller, PathId(id): PathId) -> Result<Response, ApiError> {
    let (app, p) = caller.into_parts();
    let rec = own_extension(&app, &p, &id).await?;
    remove(app.objects.as_ref(), &rec).await?;
    info!(extension.id = %rec.id, project.id = %rec.project_id, "extension deleted");
    Ok(StatusCode::NO_CONTENT.into_response())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_are_shown_without_their_folders() {
        assert_eq!(shown_name("../../etc/passwd"), "passwd");
        assert_eq!(shown_name("C:\\x\\ext.zip"), "ext.zip");
        assert_eq!(shown_name("a\u{0}b\n.zip"), "ab.zip");
        assert_eq!(shown_name("dir/"), "extension.zip");
    }
}
