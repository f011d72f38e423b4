//! The local platform's session table: one JSON document per session in a directory
//! (`<dir>/<sessionId>.json`), shared by the local API and the controllers it starts.
//!
//! [`DirStore`] gives the directory the properties the controller relies on in DynamoDB:
//! conditional updates (a read-modify-write under an exclusive file lock) and atomic
//! replacement (write to a temporary file, then rename: [`crate::private_fs::write_atomic`], so
//! no write follows a link; a document that is a link, not ours or writable by others is
//! refused, not read: documents hold session tokens). It is synchronous; async callers run it
//! on a blocking thread.

use std::fs;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use wallcrawler_contract::claim::valid_id;
use wallcrawler_contract::session_doc::SessionDoc;

use crate::private_fs;

/// Why a document operation failed.
#[derive(Debug, thiserror::Error)]
pub enum DocError {
    /// No document for this session id.
    #[error("session {0} does not exist")]
    Missing(String),
    /// A create found a document for this session id already.
    #[error("session {0} already exists")]
    Exists(String),
    /// The id is not of the platform's id alphabet, so it cannot name a file.
    #[error("session id {0:?} is not a valid file name")]
    BadId(String),
    /// Reading or writing the document failed.
    #[error("session document {path}: {source}")]
    Io {
        /// The document's path.
        path: String,
        /// What the file system said.
        #[source]
        source: io::Error,
    },
    /// The document is not a session document.
    #[error("session document {path} is not valid JSON: {source}")]
    Json {
        /// The document's path.
        path: String,
        /// What the parser said.
        #[source]
        source: serde_json::Error,
    },
}

/// Session documents in a directory: `<dir>/<sessionId>.json`.
#[derive(Debug, Clone)]
pub struct DirStore {
    dir: PathBuf,
}

impl DirStore {
    /// A store in `dir` (the directory is created, owner-only, on the first write).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, id: &str) -> Result<PathBuf, DocError> {
        if !valid_id(id) {
            return Err(DocError::BadId(id.to_owned()));
        }
        Ok(self.dir.join(format!("{id}.json")))
    }

    fn io(path: &Path) -> impl FnOnce(io::Error) -> DocError + '_ {
        move |source| DocError::Io {
            path: path.display().to_string(),
            source,
        }
    }

    /// Holds the directory-wide lock for the duration of `f` (documents are small; one lock
    /// keeps create-if-absent and read-modify-write simple and correct across processes).
    fn locked<T>(&self, f: impl FnOnce() -> Result<T, DocError>) -> Result<T, DocError> {
        // Documents hold session tokens: the directory is the owner's alone (0700 when created
        // here), each document 0600.
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(Self::io(&self.dir))?;
        let lock_path = self.dir.join(".lock");
        let lock = private_fs::open_lock(&lock_path).map_err(Self::io(&lock_path))?;
        lock.lock().map_err(Self::io(&lock_path))?;
        let r = f();
        let _ = lock.unlock();
        r
    }

    /// The document, read only when it is ours ([`private_fs::read_ours`]: a link or a file
    /// another user owns or may write is refused): a document holds a session's token.
    fn read_path(path: &Path) -> Result<Option<SessionDoc>, DocError> {
        match private_fs::read_ours(path) {
            Ok(None) => Ok(None),
            Ok(Some(bytes)) => {
                serde_json::from_slice(&bytes)
                    .map(Some)
                    .map_err(|source| DocError::Json {
                        path: path.display().to_string(),
                        source,
                    })
            }
            Err(source) => Err(DocError::Io {
                path: path.display().to_string(),
                source,
            }),
        }
    }

    fn write_path(path: &Path, doc: &SessionDoc) -> Result<(), DocError> {
        let data = serde_json::to_vec_pretty(doc).expect("documents serialize");
        private_fs::write_atomic(path, &data).map_err(Self::io(path))
    }

    /// The document, if any.
    pub fn get(&self, id: &str) -> Result<Option<SessionDoc>, DocError> {
        let path = self.path(id)?;
        Self::read_path(&path)
    }

    /// Creates the document; fails if it exists.
    pub fn create(&self, doc: &SessionDoc) -> Result<(), DocError> {
        let path = self.path(&doc.session_id)?;
        self.locked(|| {
            if path.exists() {
                return Err(DocError::Exists(doc.session_id.clone()));
            }
            Self::write_path(&path, doc)
        })
    }

    /// Conditional update: `f` sees the current document and returns whether to write it
    /// (`Ok(false)` = condition failed, nothing written). Returns `f`'s verdict and the document
    /// as it is afterwards.
    pub fn update<E>(
        &self,
        id: &str,
        f: impl FnOnce(&mut SessionDoc) -> Result<bool, E>,
    ) -> Result<Result<(bool, SessionDoc), E>, DocError> {
        let path = self.path(id)?;
        self.locked(|| {
            let mut doc =
                Self::read_path(&path)?.ok_or_else(|| DocError::Missing(id.to_owned()))?;
            let before = doc.clone();
            match f(&mut doc) {
                Ok(true) => {
                    Self::write_path(&path, &doc)?;
                    Ok(Ok((true, doc)))
                }
                Ok(false) => Ok(Ok((false, before))),
                Err(e) => Ok(Err(e)),
            }
        })
    }

    /// Every document (unreadable files are skipped).
    pub fn list(&self) -> Result<Vec<SessionDoc>, DocError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(DocError::Io {
                    path: self.dir.display().to_string(),
                    source,
                });
            }
        };
        let mut out = Vec::new();
        for e in entries.flatten() {
            let p = e.path();
            if p.extension().and_then(|x| x.to_str()) == Some("json")
                && let Ok(Some(d)) = Self::read_path(&p)
            {
                out.push(d);
            }
        }
        out.sort_by(|a, b| {
            a.created_at
                .cmp(&b.created_at)
                .then(a.session_id.cmp(&b.session_id))
        });
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use wallcrawler_contract::session::InternalStatus;

    use super::*;

    /// A new session's document: only what the store reads (its id, its status).
    fn doc(id: &str) -> SessionDoc {
        let mut d = SessionDoc {
            session_id: id.to_owned(),
            ..SessionDoc::default()
        };
        d.set_status(InternalStatus::Creating);
        d
    }

    #[test]
    fn create_is_conditional_and_update_is_read_modify_write() {
        let dir = tempfile::tempdir().unwrap();
        let store = DirStore::new(dir.path());
        store.create(&doc("sess_1")).unwrap();
        assert!(matches!(
            store.create(&doc("sess_1")),
            Err(DocError::Exists(_))
        ));
        let r = store.update::<()>("sess_1", |d| {
            if d.internal().is_some_and(|s| s.may_become_ready()) {
                d.set_status(InternalStatus::Ready);
                Ok(true)
            } else {
                Ok(false)
            }
        });
        assert!(r.unwrap().unwrap().0);
        let again = store
            .update::<()>("sess_1", |d| {
                Ok(d.internal().is_some_and(|s| s.may_become_ready()))
            })
            .unwrap()
            .unwrap();
        assert!(!again.0);
        assert_eq!(store.get("sess_1").unwrap().unwrap().status, "RUNNING");
        assert!(matches!(
            store.update::<()>("sess_2", |_| Ok(true)),
            Err(DocError::Missing(_))
        ));
        assert!(matches!(store.get("../x"), Err(DocError::BadId(_))));
        assert_eq!(store.list().unwrap().len(), 1);
    }
}
