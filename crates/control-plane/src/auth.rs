//! API-key authorisation: `x-wc-api-key` (or Browserbase's `x-bb-api-key`) → SHA-256 hex →
//! the key record (ACTIVE) → the selected project (`x-wc-project-id` when given, which must be
//! one of the key's projects, else the key's own) → the project must be ACTIVE.
//! Missing or unknown key: 401; inactive key or project, or a foreign project: 403. The raw key
//! goes nowhere past this function.

use tokio::time::Instant;

use axum::extract::FromRequestParts;
use axum::http::HeaderMap;
use axum::http::request::Parts;

use crate::app::App;
use crate::error::ApiError;
use crate::model::{Project, hash_api_key};
use crate::stores::{KeyStore, RecordStore};

/// Who is calling.
#[derive(Debug, Clone)]
pub struct Principal {
    /// The selected project (`x-wc-project-id`, else the key's `projectId`), known to be ACTIVE.
    pub project: Project,
    /// Every project the key may use.
    pub project_ids: Vec<String>,
    /// The key's SHA-256 hex (never the raw key).
    pub key_hash: String,
}

impl Principal {
    /// The selected project's id.
    pub fn project_id(&self) -> &str {
        &self.project.project_id
    }
}

/// An authorised caller, as the handlers take it: the first extractor of each, so a request
/// is refused (401/403) before its path, query or body is looked at.
pub struct Caller {
    /// The application state.
    pub app: App,
    /// Who is calling.
    pub principal: Principal,
    /// When the request reached the front door ([`Received`], API Gateway's own time), else
    /// when it began to be handled here: deadlines such as the create's wait for READY count
    /// from it.
    pub started: Instant,
}

/// A request extension: when the request reached the front door in front of this process
/// (API Gateway's receive time), so that the time it spent before the handler counts against
/// the front door's own limit.
#[derive(Debug, Clone, Copy)]
pub struct Received(pub Instant);

impl Caller {
    /// The application state and the principal.
    pub fn into_parts(self) -> (App, Principal) {
        (self.app, self.principal)
    }
}

impl FromRequestParts<App> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &App) -> Result<Self, ApiError> {
        let started = parts
            .extensions
            .get::<Received>()
            .map_or_else(Instant::now, |r| r.0);
        let principal = authorize(app.keys.as_ref(), app.projects.as_ref(), &parts.headers).await?;
        Ok(Self {
            app: app.clone(),
            principal,
            started,
        })
    }
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

/// Authorises a request from its headers: reads only the key's record and the selected
/// project's.
pub async fn authorize(
    keys: &dyn KeyStore,
    projects: &dyn RecordStore<Project>,
    headers: &HeaderMap,
) -> Result<Principal, ApiError> {
    let raw = header(headers, "x-wc-api-key")
        .or_else(|| header(headers, "x-bb-api-key"))
        .ok_or_else(|| {
            ApiError::unauthorized(
                "missing API key: send it in the x-wc-api-key (or x-bb-api-key) header",
            )
        })?;
    let hash = hash_api_key(raw);
    let key = keys
        .get(&hash)
        .await?
        .ok_or_else(|| ApiError::unauthorized("unknown API key"))?;
    if key.status != "ACTIVE" {
        return Err(ApiError::forbidden("this API key is not active"));
    }
    let mut project_ids = key.project_ids.clone();
    if !project_ids.contains(&key.project_id) {
        project_ids.insert(0, key.project_id.clone());
    }
    let selected = match header(headers, "x-wc-project-id") {
        Some(p) if project_ids.iter().any(|k| k == p) => p.to_owned(),
        Some(p) => {
            return Err(ApiError::forbidden(format!(
                "project {p} is not one of this API key's projects"
            )));
        }
        None => key.project_id.clone(),
    };
    let project = projects
        .get(&selected)
        .await?
        .ok_or_else(|| ApiError::forbidden(format!("project {selected} does not exist")))?;
    if !project.is_active() {
        return Err(ApiError::forbidden(format!(
            "project {selected} is not active"
        )));
    }
    Ok(Principal {
        project,
        project_ids,
        key_hash: hash,
    })
}

/// A body `projectId` must be the selected project.
pub fn check_body_project(p: &Principal, body_project: Option<&str>) -> Result<(), ApiError> {
    match body_project {
        Some(b) if !b.is_empty() && b != p.project_id() => Err(ApiError::forbidden(format!(
            "projectId {b} in the body is not the selected project {}",
            p.project_id()
        ))),
        _ => Ok(()),
    }
}
