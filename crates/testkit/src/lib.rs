//! Test support shared by every test binary of the workspace (a dev-dependency only): the one
//! harness for what the tests run against.
//!
//! - [`moto`]: one local AWS (moto) server per test binary; [`sdk_config`] points the real AWS
//!   SDK at it, [`child_env`] a child process (the controller, a Lambda).
//! - [`keys`]: the tests' token key pairs, named, and minting with them.
//! - [`tables`]: the DynamoDB tables as deploy/template.yaml declares them, under unique names.
//! - [`chromium`]: the real Chromium the browser tests run.
//! - [`node`]: the Node clients of tests/node (puppeteer-core, playwright-core, Stagehand...).
//! - [`tar`]: archives with raw headers, for the hostile-archive tests.
//! - [`fuzz`]: the fuzz targets' runner (proptest on stable: random and mutated hostile input,
//!   for a case count or `FUZZ_SECONDS`).
//! - [`reach`]: what another user of the machine reaches (a loopback scan as uid 65534).
//! - [`video`]: a recorded video's frame decoded (ffmpeg) and its colour judged.
//! - `platform` (feature `platform`): the control plane on moto, built as its Lambda builds it.
// Test code is not held to the shape limits of clippy.toml: a test reads top to bottom.
#![cfg_attr(test, allow(clippy::too_many_lines, clippy::too_many_arguments))]
#![warn(missing_docs)]

use std::path::{Path, PathBuf};

pub mod fuzz;
pub mod keys;
pub mod moto;
pub mod node;
#[cfg(feature = "platform")]
pub mod platform;
pub mod reach;
pub mod tables;
pub mod tar;
pub mod video;

pub use moto::{Moto, child_env, dummy_credentials, moto, sdk_config};

/// The workspace's root directory.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A resource name no other test uses: `<prefix>-<uuid>`.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

/// Debian's Chromium headless shell (`chromium-headless-shell`), the lighter browser an operator
/// may choose. Panics — never skips — when missing.
pub fn headless_shell() -> PathBuf {
    let p = PathBuf::from("/usr/lib/chromium/chromium-headless-shell");
    assert!(
        p.is_file(),
        "the Chromium headless shell is not installed: run scripts/install-test-deps.sh (apt-get install chromium-headless-shell)"
    );
    p
}

/// The real Chromium binary (`CHROME_PATH`, else Debian's). Panics — never skips — when
/// missing.
pub fn chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("CHROME_PATH") {
        return PathBuf::from(p);
    }
    [
        "/usr/lib/chromium/chromium",
        "/usr/bin/chromium",
        "/usr/bin/google-chrome",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.is_file())
    .expect(
        "Chromium is not installed: run scripts/install-test-deps.sh (apt-get install chromium)",
    )
}
