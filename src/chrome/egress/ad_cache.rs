//! The built ad filter kept on disk (`AD_FILTER_CACHE`), so that the next controller of the same
//! machine loads it instead of building it again.
//!
//! Every warm controller builds the filter ahead of its session ([`super::ads::shared_at`]);
//! on the local platform each session is a controller of its own, so each one rebuilt the same
//! engine from the same lists: 0.1-0.26 s of CPU per session (release build, measured in
//! `scripts/bench/lifecycle.sh` runs, 2026-12-07), a sixth of what a session costs the
//! machine besides Chrome. The engine's own serialized form (`adblock::Engine::serialize`)
//! loads in milliseconds ([`super::ads`] gives the figures).
//!
//! The file is named by a SHA-256 of this crate's version, the engine's format tag and the
//! lists' text, so a changed list or a new binary never reads an old file; it holds the number
//! of host rules and the engine. The engine of a file this adblock version wrote is loaded
//! without verifying its flatbuffer (its checksum is checked): the file is trusted as our own
//! code, so it is read only when it and its directory belong to this process's user and
//! nobody else may write them (the directory is made 0700). A file that fails any check, or
//! does not load, is ignored (logged) and rebuilt over. Two controllers that build at once
//! each write a temporary file and rename it into place: the same bytes, the last one stays.
//! A controller that keeps a filter removes the other kept filters of the directory (older
//! lists', another binary's: a new file is written only when the name changed), so one file
//! of about 4 MiB stays, not one more per list update or release.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use adblock::Engine;
use sha2::{Digest, Sha256};
use tracing::{debug, warn};

use super::ads::AdFilter;

/// The file's first bytes; the version changes with the layout after it.
const MAGIC: &[u8] = b"wallcrawler ad filter 1\n";

/// What names the engine's format besides our version: the adblock release it was built with.
const ENGINE_TAG: &str = "adblock 0.13";

/// The largest file read (the two Debian lists' engine is about 10 MiB).
const MAX_BYTES: u64 = 128 << 20;

/// The file holding the engine built from `texts`, in `dir`.
pub(super) fn path(dir: &Path, texts: &[String]) -> PathBuf {
    let mut h = Sha256::new();
    h.update(env!("CARGO_PKG_VERSION"));
    h.update([0]);
    h.update(ENGINE_TAG);
    for t in texts {
        h.update((t.len() as u64).to_le_bytes());
        h.update(t);
    }
    let digest = h.finalize();
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    dir.join(format!("ad-filter-{hex}.bin"))
}

/// The filter kept in `file`, if it passes every check.
pub(super) fn load(file: &Path) -> Option<AdFilter> {
    let bytes = match read_own(file) {
        Ok(Some(b)) => b,
        Ok(None) => return None,
        Err(why) => {
            warn!(file = %file.display(), why, "the kept ad filter is not used; building it");
            return None;
        }
    };
    let rest = bytes.strip_prefix(MAGIC)?;
    let (count, engine) = rest.split_at_checked(8)?;
    let rules = usize::try_from(u64::from_le_bytes(count.try_into().ok()?)).ok()?;
    let mut e = Engine::default();
    if let Err(err) = e.deserialize(engine) {
        warn!(file = %file.display(), error = ?err, "the kept ad filter does not load; building it");
        return None;
    }
    Some(AdFilter { engine: e, rules })
}

/// `file`'s bytes: `None` when there is none; an error saying why when it, or its directory,
/// is not this user's alone, is not a regular file, or is too large.
fn read_own(file: &Path) -> Result<Option<Vec<u8>>, &'static str> {
    let meta = match std::fs::symlink_metadata(file) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(_) => return Err("it cannot be read"),
    };
    let dir = file.parent().ok_or("it has no directory")?;
    let dir_meta = std::fs::symlink_metadata(dir).map_err(|_| "its directory cannot be read")?;
    if !dir_meta.is_dir() || !only_mine(&dir_meta) {
        return Err("its directory is not this user's alone");
    }
    if !meta.is_file() || !only_mine(&meta) {
        return Err("it is not a file of this user's alone");
    }
    if meta.len() > MAX_BYTES {
        return Err("it is too large");
    }
    std::fs::read(file)
        .map(Some)
        .map_err(|_| "it cannot be read")
}

/// Owned by this process's user, and writable by nobody else.
fn only_mine(meta: &std::fs::Metadata) -> bool {
    meta.uid() == nix::unistd::geteuid().as_raw() && meta.mode() & 0o022 == 0
}

/// Keeps `filter` in `file`, making its directory (0700) if need be. A failure is logged: the
/// next controller builds the filter again.
pub(super) fn store(file: &Path, filter: &AdFilter) {
    let Some(dir) = file.parent() else { return };
    let written = (|| -> std::io::Result<()> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        let meta = std::fs::symlink_metadata(dir)?;
        if !meta.is_dir() || !only_mine(&meta) {
            return Err(std::io::Error::other(
                "the directory is not this user's alone",
            ));
        }
        let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
        tmp.write_all(MAGIC)?;
        tmp.write_all(&(filter.rules as u64).to_le_bytes())?;
        tmp.write_all(&filter.engine.serialize())?;
        tmp.persist(file).map_err(|e| e.error)?;
        Ok(())
    })();
    match written {
        Ok(()) => {
            debug!(file = %file.display(), "ad filter kept for the next controller");
            remove_others(dir, file);
        }
        Err(e) => warn!(file = %file.display(), error = %e, "the ad filter could not be kept"),
    }
}

/// Removes the kept filters of `dir` other than `kept` (names of [`path`]'s form only).
fn remove_others(dir: &Path, kept: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let is_filter = name.to_str().is_some_and(|n| {
            n.strip_prefix("ad-filter-")
                .and_then(|n| n.strip_suffix(".bin"))
                .is_some_and(|h| h.len() == 32 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        });
        if is_filter && Some(name.as_os_str()) != kept.file_name() {
            match std::fs::remove_file(entry.path()) {
                Ok(()) => debug!(file = %entry.path().display(), "an older kept ad filter removed"),
                Err(e) => {
                    debug!(file = %entry.path().display(), error = %e, "an older kept ad filter stays")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn filter() -> AdFilter {
        AdFilter::from_lists(["||ads.test^\n@@||ok.ads.test^"])
    }

    #[test]
    fn keeping_a_filter_removes_the_older_ones_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        let old = path(&cache, &["||old.test^\n".to_owned()]);
        store(&old, &filter());
        std::fs::write(cache.join("notes.txt"), "mine").unwrap();
        std::fs::write(cache.join("ad-filter-mine.bin"), "mine").unwrap();
        let new = path(&cache, &["||new.test^\n".to_owned()]);
        store(&new, &filter());
        let mut names: Vec<String> = std::fs::read_dir(&cache)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        let new_name = new.file_name().unwrap().to_str().unwrap().to_owned();
        let mut expected = [
            "ad-filter-mine.bin".to_owned(),
            new_name,
            "notes.txt".to_owned(),
        ];
        expected.sort();
        assert_eq!(names, expected);
    }

    #[test]
    fn a_kept_filter_loads_as_it_was_built() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        let file = path(&cache, &["||ads.test^\n".to_owned()]);
        assert!(load(&file).is_none(), "nothing kept yet");
        store(&file, &filter());
        let mode = std::fs::metadata(&cache).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let kept = load(&file).expect("kept");
        assert_eq!(kept.rules, 2);
        assert!(kept.blocks("ads.test", 443));
        assert!(kept.blocks("x.ads.test", 80));
        assert!(
            !kept.blocks("ok.ads.test", 443),
            "the exception is kept too"
        );
        assert!(!kept.blocks("news.test", 443));
    }

    #[test]
    fn other_lists_or_another_version_name_another_file() {
        let dir = Path::new("/c");
        let a = path(dir, &["||a.test^\n".to_owned()]);
        assert_ne!(a, path(dir, &["||b.test^\n".to_owned()]));
        // The list boundaries count: one list "ab" is not the lists "a" and "b".
        assert_ne!(
            path(dir, &["ab".to_owned()]),
            path(dir, &["a".to_owned(), "b".to_owned()])
        );
        assert!(a.starts_with(dir));
    }

    #[test]
    fn a_damaged_foreign_or_odd_file_is_not_used() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        let file = path(&cache, &[String::new()]);
        store(&file, &filter());
        let good = std::fs::read(&file).unwrap();

        // One byte of the engine changed: its checksum refuses it.
        let mut bad = good.clone();
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        std::fs::write(&file, &bad).unwrap();
        assert!(load(&file).is_none());
        // Cut short, or not ours at all.
        std::fs::write(&file, &good[..MAGIC.len() + 4]).unwrap();
        assert!(load(&file).is_none());
        std::fs::write(&file, b"some other file").unwrap();
        assert!(load(&file).is_none());

        // Good bytes, but others may write the file, or the directory.
        std::fs::write(&file, &good).unwrap();
        assert!(load(&file).is_some());
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o622)).unwrap();
        assert!(load(&file).is_none());
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(load(&file).is_none());
        // ... and then nothing is written there either.
        std::fs::remove_file(&file).unwrap();
        store(&file, &filter());
        assert!(!file.exists());
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).unwrap();

        // A link in the file's place is not followed.
        let elsewhere = dir.path().join("elsewhere.bin");
        std::fs::write(&elsewhere, &good).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &file).unwrap();
        assert!(load(&file).is_none());
    }
}
