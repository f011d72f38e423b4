//! How long the local platform keeps a session's records (its log's chunks): those last
//! written longer ago than the retention are deleted, hourly and at the start, as the
//! contexts bucket's lifecycle rule expires them on AWS (`SessionRecordRetentionDays` in
//! `deploy/template.yaml`).
//!
//! Only what is surely a record goes: a regular file whose name is a log chunk's, in
//! `files/<projectId>/<sessionId>/logs/` under the data directory's `contexts/`; symlinks are
//! never followed, anything else is left.

use std::path::Path;
use std::time::{Duration, SystemTime};

use wallcrawler_contract::session_log::is_chunk_name;

/// The retention unless told otherwise, in days.
pub const DEFAULT_RETENTION_DAYS: u64 = 30;
/// [`DEFAULT_RETENTION_DAYS`] as a duration.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(DEFAULT_RETENTION_DAYS * 86_400);
/// How often the records are looked over.
pub const EXPIRE_EVERY: Duration = Duration::from_secs(3600);
/// The folders of a session's records under its `files/<projectId>/<sessionId>/`.
const RECORD_DIRS: [&str; 1] = ["logs"];

/// Deletes the records under `root` (the data directory's `contexts/`) last written before
/// `before`; how many went.
pub fn expire(root: &Path, before: SystemTime) -> usize {
    let mut gone = 0;
    for project in subdirs(&root.join("files")) {
        for session in subdirs(&project) {
            for dir in RECORD_DIRS {
                gone += expire_in(&session.join(dir), before);
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

fn expire_in(dir: &Path, before: SystemTime) -> usize {
    let mut gone = 0;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let old = e
            .metadata()
            .is_ok_and(|m| m.is_file() && m.modified().is_ok_and(|t| t < before));
        let chunk = e.file_name().to_str().is_some_and(is_chunk_name);
        // DirEntry::metadata does not follow a symlink: a link is never a file here.
        if old && chunk && std::fs::remove_file(e.path()).is_ok() {
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
                "session log chunks past their retention deleted"
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

        assert_eq!(expire(root.path(), now - 30 * day), 1);
        assert!(!old.exists());
        assert!(young.exists() && foreign.exists() && kept_outside.exists());
        // Nothing there at all: nothing to do.
        assert_eq!(expire(&root.path().join("missing"), now), 0);
    }
}
