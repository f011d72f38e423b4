//! The one validation every test token is checked against: the session `sess_a` of project
//! `proj_a`, 30 seconds of clock skew. Shared by the contract's unit tests (`src/token/mod.rs`
//! includes this file as `token::fixtures`) and its integration tests (`tests/main.rs`); the
//! includer has `Validation` in scope.

use super::Validation;

/// The rules for `sess_a` of `proj_a` at `now`, with 30 seconds of leeway.
pub(crate) fn validation(now: u64) -> Validation<'static> {
    Validation {
        session_id: "sess_a",
        project_id: Some("proj_a"),
        leeway_seconds: 30,
        now,
    }
}
