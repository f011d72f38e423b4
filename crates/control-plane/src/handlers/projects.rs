//! `/v1/projects…`: the projects a key may use, and a project's usage.

use axum::Json;
use axum::response::IntoResponse;
use serde_json::json;

use super::{ApiResult, PathId, checked_id};
use crate::app::App;
use crate::auth::{Caller, Principal};
use crate::error::ApiError;

/// `GET /v1/projects`: the projects this key may use.
pub async fn list_projects(caller: Caller) -> ApiResult {
    let (app, p) = caller.into_parts();
    let mut out = Vec::new();
    for id in &p.project_ids {
        // Inactive projects are not the key's to read (403 by id), so they are not listed.
        if let Some(project) = app.projects.get(id).await?
            && project.is_active()
        {
            out.push(project.to_api());
        }
    }
    Ok(Json(out).into_response())
}

async fn own_project(
    app: &App,
    p: &Principal,
    id: &str,
) -> Result<crate::model::Project, ApiError> {
    let id = checked_id("project", id)?;
    if !p.project_ids.iter().any(|k| k == id) {
        return Err(ApiError::not_found(format!("project {id} not found")));
    }
    let project = app
        .projects
        .get(id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("project {id} not found")))?;
    // The selected project was checked by `authorize`; one named in the path must be ACTIVE
    // too (SPEC §8: an inactive project is 403 on every handler).
    if !project.is_active() {
        return Err(ApiError::forbidden(format!("project {id} is not active")));
    }
    Ok(project)
}

/// `GET /v1/projects/{id}`.
pub async fn get_project(caller: Caller, PathId(id): PathId) -> ApiResult {
    let (app, p) = caller.into_parts();
    Ok(Json(own_project(&app, &p, &id).await?.to_api()).into_response())
}

/// `GET /v1/projects/{id}/usage`: the project's running total of browser minutes and proxy
/// bytes over its ended sessions (see [`crate::usage`]), one read.
pub async fn project_usage(caller: Caller, PathId(id): PathId) -> ApiResult {
    let (app, p) = caller.into_parts();
    own_project(&app, &p, &id).await?;
    let u = app.sessions.usage(&id).await?;
    Ok(
        Json(json!({ "browserMinutes": u.browser_minutes, "proxyBytes": u.proxy_bytes }))
            .into_response(),
    )
}
