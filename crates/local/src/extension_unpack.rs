//! Unpacking an extension archive into a new directory (a controller's, before it loads the
//! extension into Chrome): the archive came from our own store, but it is checked again here,
//! as hostile, by the contract's rules ([`wallcrawler_contract::extension_archive`]), and
//! counted again while it is written.

use std::io::{Cursor, Read};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use wallcrawler_contract::extension_archive::{
    ArchiveError, MAX_ARCHIVE_BYTES, MAX_EXPANDED_BYTES, check, checked_name,
};

/// Why an archive was not unpacked.
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    /// The archive is larger than [`MAX_ARCHIVE_BYTES`] (it was not kept by the API).
    #[error("the extension archive is larger than {MAX_ARCHIVE_BYTES} bytes")]
    ArchiveTooLarge,
    /// The archive fails the checks of [`check`].
    #[error(transparent)]
    Refused(#[from] ArchiveError),
    /// Writing the unpacked files failed.
    #[error("writing the unpacked extension failed at {}", path.display())]
    Write {
        /// The file or folder being written.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Checks `bytes` as [`check`] does, then writes its entries into `dest`, a directory made
/// here (its parent must exist; an existing `dest` is refused, so nothing it holds is
/// followed). Only plain folders and files are made, each file new (`O_EXCL`), and what they
/// expand to is counted again while writing. An archive whose manifest is in its one
/// top-level folder is written without that folder, so `manifest.json` is always at `dest`,
/// the folder Chrome loads (returned): Chrome names an unpacked extension after its folder's
/// path, and the controller must know that name before it loads it. Folders are 0755 and
/// files 0644: a browser running as another user reads them (an extension's code is no
/// secret).
pub fn unpack(bytes: &[u8], dest: &Path) -> Result<PathBuf, UnpackError> {
    if bytes.len() > MAX_ARCHIVE_BYTES {
        return Err(UnpackError::ArchiveTooLarge);
    }
    let checked = check(bytes)?;
    let write = |path: &Path| {
        let path = path.to_owned();
        move |source| UnpackError::Write { path, source }
    };
    let mut dirs = std::fs::DirBuilder::new();
    dirs.mode(0o755);
    dirs.create(dest).map_err(write(dest))?;
    dirs.recursive(true);
    let mut zip = zip::ZipArchive::new(Cursor::new(bytes))
        .map_err(|e| ArchiveError::NotZip(e.to_string()))?;
    let mut budget = MAX_EXPANDED_BYTES;
    for i in 0..zip.len() {
        let mut entry = zip
            .by_index(i)
            .map_err(|e| ArchiveError::NotZip(e.to_string()))?;
        let name = String::from_utf8_lossy(entry.name_raw()).into_owned();
        let mut parts = checked_name(&name)?;
        // With a manifest in a folder, every entry is in that folder (`check` made sure).
        if !checked.root.is_empty() && parts.first() == Some(&checked.root) {
            parts.remove(0);
        }
        if parts.is_empty() {
            continue;
        }
        let path = parts
            .iter()
            .fold(dest.to_path_buf(), |p, part| p.join(part));
        if entry.is_dir() {
            dirs.create(&path).map_err(write(&path))?;
            continue;
        }
        if let Some(parent) = path.parent() {
            dirs.create(parent).map_err(write(parent))?;
        }
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&path)
            .map_err(write(&path))?;
        let n =
            std::io::copy(&mut (&mut entry).take(budget + 1), &mut file).map_err(write(&path))?;
        budget = budget
            .checked_sub(n)
            .ok_or(ArchiveError::TooLarge(MAX_EXPANDED_BYTES))?;
    }
    Ok(dest.to_path_buf())
}
