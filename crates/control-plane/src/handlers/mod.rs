//! The API's handlers, written once over the ports and served by one router — locally and in
//! Lambda alike. Every handler authorises first and only ever touches the selected project's
//! records: ids of other projects answer 404. One file per resource: [`sessions`],
//! [`contexts`], [`projects`]; what they share (body parsing, ownership) is here.

mod contexts;
mod projects;
mod sessions;

pub use contexts::{create_context, delete_context, get_context, update_context};
pub use projects::{get_project, list_projects, project_usage};
pub use sessions::{
    ListQuery, NEXT_CURSOR, PAGE_DEFAULT, PAGE_MAX, create_session, debug_session, get_session,
    is_connect_base, list_sessions, update_session,
};

use axum::body::Bytes;
use axum::response::Response;
use serde::Deserialize;
use wallcrawler_contract::session_doc::SessionDoc;

use crate::app::App;
use crate::auth::{Caller, Principal};
use crate::error::ApiError;
pub use crate::ids::{PathId, checked_id};
use crate::model::ContextRecord;

/// Shortest and longest session timeout, seconds.
pub const TIMEOUT_RANGE: std::ops::RangeInclusive<u64> = 60..=21_600;

/// Regions a session may name.
pub const REGIONS: [&str; 4] = ["us-west-2", "us-east-1", "eu-central-1", "ap-southeast-1"];

pub(crate) type ApiResult = Result<Response, ApiError>;

/// Parses a JSON body leniently: empty = `{}`, unknown fields ignored, malformed → 400 naming
/// the problem.
pub(crate) fn parse_body<T: for<'de> Deserialize<'de> + Default>(
    body: &Bytes,
) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
}

/// A record that belongs to one project.
pub(super) trait Owned {
    /// What a 404 calls it: "session".
    const WHAT: &'static str;
    /// The owning project.
    fn project_id(&self) -> &str;
}

impl Owned for SessionDoc {
    const WHAT: &'static str = "session";
    fn project_id(&self) -> &str {
        &self.project_id
    }
}

impl Owned for ContextRecord {
    const WHAT: &'static str = "context";
    fn project_id(&self) -> &str {
        &self.project_id
    }
}

/// The record `found` under `id`, if it belongs to the caller's project: a missing one and
/// another project's alike are 404, so ids of other projects reveal nothing.
pub(super) fn owned<T: Owned>(p: &Principal, id: &str, found: Option<T>) -> Result<T, ApiError> {
    match found {
        Some(r) if r.project_id() == p.project_id() => Ok(r),
        _ => Err(ApiError::not_found(format!("{} {id} not found", T::WHAT))),
    }
}

/// The session, if it belongs to the caller's project.
pub(crate) async fn own_session(
    app: &App,
    p: &Principal,
    id: &str,
) -> Result<SessionDoc, ApiError> {
    let id = checked_id(SessionDoc::WHAT, id)?;
    owned(p, id, app.sessions.get(id).await?)
}

/// Browserbase endpoints not implemented yet.
pub async fn not_implemented(_: Caller) -> ApiResult {
    Err(ApiError::not_implemented(
        "this endpoint (recordings) is not implemented by Wallcrawler yet",
    ))
}
