//! The local crate's integration tests: one binary, a module per concern.
// Test code is not held to the shape limits of clippy.toml: a test reads top to bottom.
#![allow(clippy::too_many_lines)]

/// Fuzz targets for what the local crate reads from hostile input (extension archives);
/// `scripts/fuzz.sh` runs them for longer.
mod fuzz;
/// Unpacking an extension archive into a new folder.
mod unpack;
