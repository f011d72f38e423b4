//! The session's extension, loaded before READY: its archive read from the contexts store (S3,
//! or the data directory locally: where the API keeps it), unpacked with the API's own checks
//! ([`wallcrawler_local::extension_unpack::unpack`]: the archive came from our bucket, but
//! is treated as hostile) into `<profile>-extension`, beside the profile so it is never archived
//! with it, and loaded into the running Chrome with CDP `Extensions.loadUnpacked` over the
//! controller's own connection (the proxy refuses that command to clients). A pool
//! controller's warm Chrome takes it without a restart. Any failure fails the session with
//! its reason; the directory is removed with the session ([`ExtensionDir`]'s drop).
//!
//! The extension reads no file ([`crate::chrome::file_access`]): Chrome was started with "no
//! file access" written for the id an extension loaded from `<profile>-extension` gets, so the
//! manifest's `key` (which would choose another id) is removed when unpacking, and an extension
//! Chrome names otherwise is unloaded and the session failed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tracing::{error, info};
use wallcrawler_contract::extension_archive::MAX_ARCHIVE_BYTES;
use wallcrawler_local::extension_unpack::{UnpackError, unpack};

use super::{Ending, Outcome, Run, STARTUP_RETRY};
use crate::cdp;
use crate::chrome::Chrome;
use crate::chrome::file_access;
use crate::stores::{ArchiveStore, StoreError, retry};

/// How long Chrome has to load the unpacked extension.
const LOAD_TIMEOUT: Duration = Duration::from_secs(15);

/// Why the session's extension was not loaded.
#[derive(Debug, thiserror::Error)]
pub(super) enum ExtensionError {
    /// The controller has no contexts store to read the archive from.
    #[error("no contexts store is configured to read the extension from")]
    NoStore,
    /// The store has no archive at the session's key (deleted before the session started).
    #[error("the extension archive is missing from the store")]
    Missing,
    /// Reading the archive from the store failed.
    #[error("reading the extension archive failed: {0}")]
    Store(#[from] StoreError),
    /// Reading the archive's bytes failed midway.
    #[error("reading the extension archive failed")]
    Read(#[source] std::io::Error),
    /// The archive was refused, or writing its files failed.
    #[error(transparent)]
    Unpack(#[from] UnpackError),
    /// The blocking unpack stopped (a panic).
    #[error("the unpacking worker stopped")]
    Worker(#[source] tokio::task::JoinError),
    /// The browser is a headless shell, which has no extensions.
    #[error(
        "this platform's browser is a headless shell, which cannot load extensions (its operator sets CHROME_PATH to a full Chromium for them)"
    )]
    HeadlessShell,
    /// Chrome did not load it.
    #[error("chrome did not load the extension: {0}")]
    Load(#[source] cdp::CdpError),
    /// The unpacked folder's absolute path could not be resolved.
    #[error("resolving the unpacked extension's path failed")]
    Resolve(#[source] std::io::Error),
    /// Chrome gave the extension an id other than the one denied file access at its launch.
    #[error(
        "chrome named the extension {got}, not {expected}, the id denied file access; it was unloaded"
    )]
    UnexpectedId {
        /// The id Chrome answered.
        got: String,
        /// The id written into the profile's preferences.
        expected: String,
    },
}

impl ExtensionError {
    /// What the session item says: the archive's own fault in full, a service's or Chrome's
    /// in a few words (the detail is for the task log).
    pub(super) fn reason(&self) -> String {
        match self {
            Self::Unpack(UnpackError::Write { .. })
            | Self::Read(_)
            | Self::Worker(_)
            | Self::Resolve(_) => {
                "the extension could not be unpacked (see the task log)".to_owned()
            }
            Self::Unpack(e) => format!("the extension archive was refused: {e}"),
            Self::Store(e) => format!(
                "the extension archive could not be read: {} (see the task log)",
                e.summary()
            ),
            Self::Load(cdp::CdpError::Command { message, .. }) => {
                format!("chrome did not load the extension: {message}")
            }
            e => e.to_string(),
        }
    }
}

/// The unpacked extension's directory, removed when dropped (with the session).
#[derive(Debug)]
pub(crate) struct ExtensionDir {
    dir: PathBuf,
    /// The profile it sits beside (Chrome's, whose preferences deny it file access).
    profile: PathBuf,
    /// The folder holding `manifest.json`: what Chrome loads.
    root: PathBuf,
}

impl Drop for ExtensionDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub(super) use file_access::extension_dir;

impl Run<'_> {
    /// The extension at `key` unpacked beside the profile; `None` without one. A failure is
    /// the session's ending (FAILED with the reason); Chrome is not touched.
    pub(crate) async fn unpack_extension(
        &self,
        key: Option<&str>,
    ) -> Result<Option<ExtensionDir>, Outcome> {
        let Some(key) = key else {
            return Ok(None);
        };
        let dir = extension_dir(&self.profile);
        match fetch_and_unpack(self.deps.archives.as_deref(), key, &dir, &self.profile).await {
            Ok(x) => Ok(Some(x)),
            Err(e) => {
                error!(error = %e, cause = ?std::error::Error::source(&e).map(ToString::to_string), "the session's extension was not unpacked");
                Err(Ending::failed(e.reason()).into())
            }
        }
    }
}

/// Loads the unpacked extension into the running `chrome` (started on the extension's
/// profile); its extension id, which must be the one denied file access when Chrome started.
pub(crate) async fn load(chrome: &Chrome, ext: &ExtensionDir) -> Result<String, Ending> {
    match load_checked(chrome, ext).await {
        Ok(id) => {
            info!(extension.id = %id, "extension loaded");
            Ok(id)
        }
        Err(e) => {
            error!(error = %e, "loading the session's extension failed");
            Err(Ending::failed(e.reason()))
        }
    }
}

async fn load_checked(chrome: &Chrome, ext: &ExtensionDir) -> Result<String, ExtensionError> {
    if chrome.is_headless_shell() {
        return Err(ExtensionError::HeadlessShell);
    }
    // Chrome resolves the path (links included) before hashing it into the id.
    let root = tokio::fs::canonicalize(&ext.root)
        .await
        .map_err(ExtensionError::Resolve)?;
    let expected = file_access::expected_id(&ext.profile).map_err(ExtensionError::Resolve)?;
    let path = root.to_string_lossy().into_owned();
    let got = cdp::load_unpacked(&chrome.browser(), &path, LOAD_TIMEOUT)
        .await
        .map_err(ExtensionError::Load)?;
    if got != expected {
        if let Err(e) = cdp::uninstall_extension(&chrome.browser(), &got, LOAD_TIMEOUT).await {
            error!(error = %e, "unloading the extension with an unexpected id failed");
        }
        return Err(ExtensionError::UnexpectedId { got, expected });
    }
    Ok(got)
}

/// Reads the archive (at most [`MAX_ARCHIVE_BYTES`] and one byte more, so a larger one shows)
/// and unpacks it into `dir`, replacing whatever a previous run left there.
async fn fetch_and_unpack(
    store: Option<&dyn ArchiveStore>,
    key: &str,
    dir: &Path,
    profile: &Path,
) -> Result<ExtensionDir, ExtensionError> {
    let store = store.ok_or(ExtensionError::NoStore)?;
    let reader = retry("fetching the extension archive", STARTUP_RETRY, || {
        store.open(key)
    })
    .await?
    .ok_or(ExtensionError::Missing)?;
    let mut bytes = Vec::new();
    reader
        .take(MAX_ARCHIVE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .await
        .map_err(ExtensionError::Read)?;
    // A directory left by a killed run: `unpack` only writes into a new one.
    let _ = tokio::fs::remove_dir_all(dir).await;
    if let Some(parent) = dir.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|source| UnpackError::Write {
                path: parent.to_owned(),
                source,
            })?;
    }
    let target = dir.to_owned();
    let root = tokio::task::spawn_blocking(move || {
        let root = unpack(&bytes, &target)?;
        without_key(&root)?;
        Ok::<_, UnpackError>(root)
    })
    .await
    .map_err(ExtensionError::Worker)?;
    let guard = |root| ExtensionDir {
        dir: dir.to_owned(),
        profile: profile.to_owned(),
        root,
    };
    match root {
        Ok(root) => {
            info!("extension unpacked");
            Ok(guard(root))
        }
        Err(e) => {
            // Whatever was written before the refusal goes.
            drop(guard(PathBuf::new()));
            Err(e.into())
        }
    }
}

/// Removes `key` from the unpacked extension's manifest (at `root`, checked by `unpack`): a
/// key chooses the extension's id, and the id Chrome denies file access to is the one of the
/// folder's path. The extension's id is then its folder's, as for any extension without one.
fn without_key(root: &Path) -> Result<(), UnpackError> {
    let path = root.join("manifest.json");
    let write = |source| UnpackError::Write {
        path: path.clone(),
        source,
    };
    let bytes = std::fs::read(&path).map_err(write)?;
    let text = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&bytes);
    let Ok(serde_json::Value::Object(mut manifest)) = serde_json::from_slice(text) else {
        // `unpack` checked it parses as an object.
        return Ok(());
    };
    if manifest.remove("key").is_none() {
        return Ok(());
    }
    let out = serde_json::to_vec(&manifest).expect("a JSON object serializes");
    std::fs::write(&path, out).map_err(write)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manifest_key_is_removed_and_nothing_else_changes() {
        let dir = tempfile::tempdir().unwrap();
        let manifest = dir.path().join("manifest.json");
        std::fs::write(
            &manifest,
            b"\xEF\xBB\xBF{\"manifest_version\":3,\"name\":\"K\",\"version\":\"1\",\"key\":\"MIIB\",\"permissions\":[\"storage\"]}",
        )
        .unwrap();
        without_key(dir.path()).unwrap();
        let v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"manifest_version":3,"name":"K","version":"1","permissions":["storage"]})
        );
        // Without a key the file is left as it was.
        let plain = br#"{"manifest_version":3,"name":"P","version":"1"}"#;
        std::fs::write(&manifest, plain).unwrap();
        without_key(dir.path()).unwrap();
        assert_eq!(std::fs::read(&manifest).unwrap(), plain);
    }
}
