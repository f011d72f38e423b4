//! Uploads brought onto the browser's disk when a client first names them.
//!
//! `POST /v1/sessions/{id}/uploads` stores the file at
//! [`upload_key`] in the session files store (S3, or the data directory's `contexts/`
//! locally) and answers with `<uploadsDir>/<name>`; the API cannot reach this task's disk. When a
//! client's `DOM.setFileInputFiles` (or drag data) names a file directly in the uploads
//! directory that is not there, the proxy's guard ([`crate::proxy::guard`]) asks
//! [`StoreUploads`] for it before it decides: the object is streamed into a temporary file
//! beside the uploads directory (at most [`MAX_FETCH_BYTES`], within [`FETCH_TIMEOUT`]),
//! made mode 0644 (readable by Chrome's user) and renamed into place, so Chrome never sees a
//! partial file. A name with no object stays missing and the command is refused as before.
//!
//! The guard runs on the relay thread, which waits for the fetch (done on the runtime): a
//! controller serves one session, so only that session's connections pause, for at most
//! [`FETCH_TIMEOUT`] — the command itself could not go on without the file anyway.

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tracing::{info, warn};
use wallcrawler_contract::storage::{upload_key, upload_name_problem};

use crate::file_rules::FetchUpload;
use crate::stores::{ArchiveStore, StoreError};

/// The largest upload fetched. The API takes 4 MiB per request; a file put into the bucket
/// another way may be larger, up to this.
pub(crate) const MAX_FETCH_BYTES: u64 = wallcrawler_contract::storage::MAX_UPLOAD_FETCH_BYTES;

/// The longest a fetch may take (the client's command waits for it).
pub(crate) const FETCH_TIMEOUT: Duration = Duration::from_secs(20);

/// Why an upload could not be brought down.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FetchError {
    /// The store failed.
    #[error("reading the upload failed")]
    Store(#[from] StoreError),
    /// Writing it to disk failed.
    #[error("writing the upload to disk failed")]
    Disk(#[from] std::io::Error),
    /// It is larger than [`MAX_FETCH_BYTES`].
    #[error("the upload is larger than {MAX_FETCH_BYTES} bytes")]
    TooLarge,
}

/// Fetches a session's uploads from its files store (see the module doc).
pub(crate) struct StoreUploads {
    store: Arc<dyn ArchiveStore>,
    runtime: tokio::runtime::Handle,
    /// `(projectId, sessionId)`, set once: at start, or when a pool controller is claimed.
    session: OnceLock<(String, String)>,
}

impl StoreUploads {
    /// Fetches from `store` on `runtime`; bound to no session yet.
    pub(crate) fn new(store: Arc<dyn ArchiveStore>, runtime: tokio::runtime::Handle) -> Self {
        Self {
            store,
            runtime,
            session: OnceLock::new(),
        }
    }
}

impl FetchUpload for StoreUploads {
    fn bind(&self, project_id: &str, session_id: &str) {
        let _ = self
            .session
            .set((project_id.to_owned(), session_id.to_owned()));
    }

    fn fetch(&self, name: &str, dir: &Path) -> bool {
        let Some((project, session)) = self.session.get() else {
            return false;
        };
        if upload_name_problem(name).is_some() {
            return false;
        }
        let key = upload_key(project, session, name);
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let store = self.store.clone();
        let (dir, name) = (dir.to_owned(), name.to_owned());
        let task = self.runtime.spawn(async move {
            let r = tokio::time::timeout(FETCH_TIMEOUT, bring(store.as_ref(), &key, &dir, &name));
            let _ = tx.send(r.await);
        });
        // A little longer than the task's own bound: it answers first unless the runtime is
        // stuck or gone.
        match rx.recv_timeout(FETCH_TIMEOUT + Duration::from_secs(1)) {
            Ok(Ok(Ok(found))) => {
                if found {
                    info!("upload fetched from the session's files");
                } else {
                    info!("a client named an upload the session's files do not have");
                }
                found
            }
            Ok(Ok(Err(e))) => {
                warn!(error = %e, cause = ?std::error::Error::source(&e).map(|s| s.to_string()), "fetching an upload failed");
                false
            }
            Ok(Err(_)) | Err(_) => {
                task.abort();
                warn!(
                    seconds = FETCH_TIMEOUT.as_secs(),
                    "fetching an upload timed out"
                );
                false
            }
        }
    }
}

/// Streams `key` into `dir/name` through a temporary file beside `dir`; false when there is
/// no such object.
async fn bring(
    store: &dyn ArchiveStore,
    key: &str,
    dir: &Path,
    name: &str,
) -> Result<bool, FetchError> {
    let Some(body) = store.open(key).await? else {
        return Ok(false);
    };
    // Beside the uploads directory, not in it: a client can never name the partial file.
    let parent = dir.parent().unwrap_or(dir);
    let part = parent.join(format!(".upload-{}.part", uuid::Uuid::new_v4().simple()));
    let written = write_part(body, &part).await;
    let done = match written {
        Ok(()) => tokio::fs::rename(&part, dir.join(name))
            .await
            .map_err(FetchError::from),
        Err(e) => Err(e),
    };
    if done.is_err() {
        let _ = tokio::fs::remove_file(&part).await;
    }
    done.map(|()| true)
}

/// Writes at most [`MAX_FETCH_BYTES`] of `body` to a new file at `part`, mode 0644.
async fn write_part(body: crate::stores::BoxRead, part: &Path) -> Result<(), FetchError> {
    use std::os::unix::fs::PermissionsExt;
    let mut file = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(part)
        .await?;
    let mut limited = body.take(MAX_FETCH_BYTES + 1);
    let n = tokio::io::copy(&mut limited, &mut file).await?;
    if n > MAX_FETCH_BYTES {
        return Err(FetchError::TooLarge);
    }
    file.flush().await?;
    // Explicit, whatever the umask: Chrome's user reads it.
    file.set_permissions(std::fs::Permissions::from_mode(0o644))
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::DirectoryArchives;

    fn setup() -> (tempfile::TempDir, StoreUploads, std::path::PathBuf) {
        let root = tempfile::tempdir().unwrap();
        let store = Arc::new(DirectoryArchives {
            dir: root.path().join("store"),
        });
        let up = StoreUploads::new(store, tokio::runtime::Handle::current());
        let dir = root.path().join("p-files/uploads");
        std::fs::create_dir_all(&dir).unwrap();
        (root, up, dir)
    }

    fn put(root: &Path, key: &str, bytes: &[u8]) {
        let p = root.join("store").join(key);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_bound_fetch_writes_the_object_0644_and_nothing_else() {
        use std::os::unix::fs::PermissionsExt;
        let (root, up, dir) = setup();
        put(root.path(), &upload_key("proj_1", "s_1", "a.txt"), b"hello");
        put(root.path(), &upload_key("proj_2", "s_1", "b.txt"), b"other");
        let run = |name: &'static str, dir: std::path::PathBuf, up: Arc<StoreUploads>| {
            std::thread::spawn(move || up.fetch(name, &dir))
                .join()
                .unwrap()
        };
        let up = Arc::new(up);
        // Unbound: nothing.
        assert!(!run("a.txt", dir.clone(), up.clone()));
        up.bind("proj_1", "s_1");
        assert!(run("a.txt", dir.clone(), up.clone()));
        assert_eq!(std::fs::read(dir.join("a.txt")).unwrap(), b"hello");
        let mode = std::fs::metadata(dir.join("a.txt"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o644);
        // Another project's object, a missing one, a name that is a path: nothing.
        assert!(!run("b.txt", dir.clone(), up.clone()));
        assert!(!run("nope", dir.clone(), up.clone()));
        assert!(!run("..", dir.clone(), up.clone()));
        let left: Vec<_> = std::fs::read_dir(dir.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("uploads")]);
    }
}
