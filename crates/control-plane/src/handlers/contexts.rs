//! `/v1/contexts…`: a context's record and its profile archive's upload URL.

use axum::Json;
use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::{Value, json};
use wallcrawler_contract::storage::profile_key;

use super::{ApiResult, Owned, PathId, checked_id, owned, parse_body};
use crate::app::App;
use crate::auth::{Caller, Principal, check_body_project};
use crate::error::ApiError;
use crate::model::ContextRecord;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CreateContext {
    project_id: Option<String>,
}

async fn upload_answer(app: &App, c: &ContextRecord) -> Result<Value, ApiError> {
    let url = app
        .archives
        .presign_put(&c.storage_key, app.settings.upload_url_ttl)
        .await?;
    Ok(json!({
        "id": c.context_id,
        "uploadUrl": url,
        // Browserbase encrypts uploads; Wallcrawler archives are plain gzip-compressed tars of
        // the user-data-dir (see the README), so there is no key.
        "publicKey": "",
        "cipherAlgorithm": "NONE",
        "initializationVectorSize": 0,
    }))
}

/// `POST /v1/contexts`.
pub async fn create_context(caller: Caller, body: Bytes) -> ApiResult {
    let (app, p) = caller.into_parts();
    let req: CreateContext = parse_body(&body)?;
    check_body_project(&p, req.project_id.as_deref())?;
    let id = format!("ctx_{}", uuid::Uuid::new_v4().simple());
    let now = app.now_iso();
    let c = ContextRecord {
        storage_key: profile_key(p.project_id(), &id),
        context_id: id,
        project_id: p.project_id().to_owned(),
        status: "CREATED".to_owned(),
        created_at: now.clone(),
        updated_at: now,
        writer_session_id: None,
    };
    app.contexts.create(c.clone()).await?;
    Ok((StatusCode::CREATED, Json(upload_answer(&app, &c).await?)).into_response())
}

/// The context, if it belongs to the caller's project.
pub(super) async fn own_context(
    app: &App,
    p: &Principal,
    id: &str,
) -> Result<ContextRecord, ApiError> {
    let id = checked_id(ContextRecord::WHAT, id)?;
    owned(p, id, app.contexts.get(id).await?)
}

/// `GET /v1/contexts/{id}`.
pub async fn get_context(caller: Caller, PathId(id): PathId) -> ApiResult {
    let (app, p) = caller.into_parts();
    Ok(Json(own_context(&app, &p, &id).await?.to_api()).into_response())
}

/// `PUT /v1/contexts/{id}`: a fresh upload URL.
pub async fn update_context(caller: Caller, PathId(id): PathId) -> ApiResult {
    let (app, p) = caller.into_parts();
    let c = own_context(&app, &p, &id).await?;
    app.contexts.touch(&id, &app.now_iso()).await?;
    Ok(Json(upload_answer(&app, &c).await?).into_response())
}

/// `DELETE /v1/contexts/{id}`: refused (409) while a session still uses it. The sessions the
/// context index does not show ended are each read by key (the index lags); a live writer
/// lease refuses too, and the record's deletion is conditional on the lease as seen here, so
/// a persisting create that takes it meanwhile (its session maybe not in the index yet) keeps
/// its context. The archive goes only after the record.
pub async fn delete_context(caller: Caller, PathId(id): PathId) -> ApiResult {
    let (app, p) = caller.into_parts();
    let c = own_context(&app, &p, &id).await?;
    let in_use = |sid: &str| ApiError::conflict(format!("context {id} is in use by session {sid}"));
    for sid in app.sessions.on_context(&id).await? {
        if let Some(s) = app.sessions.get(&sid).await?
            && s.ended_at.is_none()
            && s.context_id.as_deref() == Some(id.as_str())
        {
            return Err(in_use(&sid));
        }
    }
    let writer = c.writer_session_id.as_deref();
    if let Some(w) = writer
        && crate::limits::live_writer(app.sessions.as_ref(), w, app.now_secs()).await?
    {
        return Err(in_use(w));
    }
    if !app.contexts.delete(&id, writer).await? {
        return Err(ApiError::conflict(format!(
            "context {id} was taken by a new session while it was being deleted"
        )));
    }
    app.archives.delete(&c.storage_key).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
