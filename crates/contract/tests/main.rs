//! The contract's integration tests: one binary, a module per concern.
// Test code is not held to the shape limits of clippy.toml: a test reads top to bottom.
#![allow(clippy::too_many_lines)]

/// Fuzz targets for the contract's parsers of hostile input (tokens, viewer credentials,
/// claims, extension archives); `scripts/fuzz.sh` runs them for longer.
mod fuzz;

/// The validation every test token is checked against, shared with the unit tests (the file
/// reads `Validation` from here).
#[path = "support/tokens.rs"]
mod tokens;
use wallcrawler_contract::token::Validation;
