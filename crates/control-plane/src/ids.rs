//! The `{id}` of a route's path, and the check every id passes before a store sees it.

use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;

use crate::error::ApiError;

/// The `{id}` of a route's path. axum's own rejection (an id that does not percent-decode to
/// UTF-8) is plain text; this answers in Browserbase's error shape.
pub struct PathId(pub String);

impl<S: Send + Sync> FromRequestParts<S> for PathId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Path::<String>::from_request_parts(parts, state)
            .await
            .map(|Path(id)| PathId(id))
            .map_err(|_| ApiError::bad_request("the id in the path is not valid UTF-8"))
    }
}

/// `id`, if it can be a `what`'s id: ids are made of 1 to 128 of `A-Z a-z 0-9 _ -` (as the
/// platform mints them), checked before any store sees one (DynamoDB refuses a key over
/// 2 KB; a file store must never see a path). The refusal shows a clipped, escaped part.
pub fn checked_id<'a>(what: &str, id: &'a str) -> Result<&'a str, ApiError> {
    if wallcrawler_contract::claim::valid_id(id) {
        return Ok(id);
    }
    const SHOWN: usize = 32;
    let head: String = id.chars().take(SHOWN).collect();
    let more = if id.chars().nth(SHOWN).is_some() {
        "…"
    } else {
        ""
    };
    Err(ApiError::bad_request(format!(
        "{what} id must be 1 to 128 of the characters A-Z a-z 0-9 _ -, got {head:?}{more}"
    )))
}
