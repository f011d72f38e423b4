//! How long the local platform keeps a session's records (its log's chunks, its recording's
//! indexes, segments and MP4s): those last written longer ago than the retention are deleted,
//! hourly and at the start, as the contexts bucket's lifecycle rule expires them on AWS
//! (`SessionRecordRetentionDays` in `deploy/template.yaml`).
//!
//! Only what is surely a record goes, under the data directory's `contexts/`: a regular file
//! whose name is a log chunk's in `files/<projectId>/<sessionId>/logs/`, and the regular files
//! of `files/<projectId>/<sessionId>/recordings/` and of its page folders; symlinks are never
//! followed, anything else is left.

use std::path::Path;
use std::time::{Duration, SystemTime};

use wallcrawler_contract::session_log::is_chunk_name;

/// The retention unless told otherwise, in days.
pub const DEFAULT_RETENTION_DAYS: u64 = 30;
/// [`DEFAULT_RETENTION_DAYS`] as a duration.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(DEFAULT_RETENTION_DAYS * 86_400);
/// How often the records are looked over.
pub const EXPIRE_EVERY: Duration = Duration::from_secs(3600);

/// Deletes the records under `root` (the data directory's `contexts/`) last written before
/// `before`; how many went.
pub fn expire(root: &Path, before: SystemTime) -> usize {
    let mut gone = 0;
    for project in subdirs(&root.join("files")) {
        for session in subdirs(&project) {
            gone += expire_in(&session.join("logs"), before, is_chunk_name);
            let recordings = session.join("recordings");
            gone += expire_in(&recordings, before, |_| true);
            for page in subdirs(&recordings) {
                gone += expire_in(&page, before, |_| true);
            }
        }
    }
    gone
}

/// The directories (not symlinks) in `dir`.
fn subdirs(dir: &Path) -> impl Iterator<Item = std::path::PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
}

/// Deletes the regular files of `dir` last written before `before` whose names `named`.
fn expire_in(dir: &Path, before: SystemTime, named: impl Fn(&str) -> bool) -> usize {
    let mut gone = 0;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let old = e
            .metadata()
            .is_ok_and(|m| m.is_file() && m.modified().is_ok_and(|t| t < before));
        let wanted = e.file_name().to_str().is_some_and(&named);
        // DirEntry::metadata does not follow a symlink: a link is never a file here.
        if old && wanted && std::fs::remove_file(e.path()).is_ok() {
            gone += 1;
        }
    }
    gone
}

/// [`expire`] of what is older than `keep`, now and every [`EXPIRE_EVERY`].
pub async fn expire_periodically(root: std::path::PathBuf, keep: Duration) {
    let mut ticks = tokio::time::interval(EXPIRE_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let root = root.clone();
        let gone = tokio::task::spawn_blocking(move || {
            SystemTime::now()
                .checked_sub(keep)
                .map_or(0, |before| expire(&root, before))
        })
        .await
        .unwrap_or(0);
        if gone > 0 {
            tracing::info!(
                chunks = gone,
                "session records (log chunks, recording files) past their retention deleted"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_chunks_past_the_retention_go() {
        let root = tempfile::tempdir().unwrap();
        let logs = root.path().join("files/proj_a/sess_1/logs");
        std::fs::create_dir_all(&logs).unwrap();
        let day = Duration::from_secs(86_400);
        let now = SystemTime::now();
        let write = |name: &str, age: Duration| {
            let p = logs.join(name);
            std::fs::write(&p, b"{}\n").unwrap();
            let f = std::fs::File::options().write(true).open(&p).unwrap();
            f.set_modified(now - age).unwrap();
            p
        };
        let old = write("1765100000000-000000.jsonl", 31 * day);
        let young = write("1765100000000-000001.jsonl", 29 * day);
        let foreign = write("notes.txt", 31 * day);
        // A recording's index and segments go the same way.
        let page = root.path().join("files/proj_a/sess_1/recordings/0");
        std::fs::create_dir_all(&page).unwrap();
        let aged = |p: std::path::PathBuf, age: Duration| {
            std::fs::write(&p, b"x").unwrap();
            let f = std::fs::File::options().write(true).open(&p).unwrap();
            f.set_modified(now - age).unwrap();
            p
        };
        let old_index = aged(page.with_file_name("0.json"), 31 * day);
        let old_segment = aged(page.join("seg-00001.ts"), 31 * day);
        let young_segment = aged(page.join("seg-00002.ts"), day);
        // An old chunk reached through a symlinked session folder stays: links are not followed.
        let elsewhere = tempfile::tempdir().unwrap();
        let outside = elsewhere.path().join("logs");
        std::fs::create_dir_all(&outside).unwrap();
        let kept_outside = outside.join("1765100000000-000000.jsonl");
        std::fs::write(&kept_outside, b"{}\n").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&kept_outside)
            .unwrap()
            .set_modified(now - 31 * day)
            .unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), root.path().join("files/proj_a/sess_2"))
            .unwrap();

        assert_eq!(expire(root.path(), now - 30 * day), 3);
        assert!(!old.exists() && !old_index.exists() && !old_segment.exists());
        assert!(young_segment.exists());
        assert!(young.exists() && foreign.exists() && kept_outside.exists());
        // Nothing there at all: nothing to do.
        assert_eq!(expire(&root.path().join("missing"), now), 0);
    }
}
