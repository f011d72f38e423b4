//! Command line and environment: what the operator can set, and the checked configuration built
//! from it.
//!
//! Every setting is read as text (from a flag or its environment variable, the names of the
//! existing ECS task definition) into a [`Settings`] map keyed by the variable name; the typed
//! configs are built from that map by pure functions that list **every** problem at once, so
//! tests pass a map and `main` exits 64 with the full list.
//!
//! One file per concern: [`names`] (the controller's own variables), [`cli`] (subcommands and
//! flags), [`reader`] (text to typed values, every problem collected), [`shared`] (what more
//! than one mode reads), [`run`] (a session's controller and the pool) and [`modes`] (`local`,
//! `proxy`, `gateway`, `token`).

use std::collections::BTreeMap;

use names::*;

pub use crate::telemetry::LogFormat;

mod cli;
mod modes;
mod names;
mod reader;
mod run;
mod shared;
#[cfg(test)]
mod tests;

pub use cli::*;
pub use modes::*;
use reader::*;
pub use run::*;
pub use shared::*;

/// Raw settings keyed by environment-variable name.
pub type Settings = BTreeMap<&'static str, String>;

/// Exit status for configuration errors (EX_USAGE).
pub const EXIT_CONFIG: i32 = 64;
