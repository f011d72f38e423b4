//! Where a session's files may be: the uploads and downloads directories beside its profile,
//! the only directories a client's commands may name paths in (the proxy's guard asks
//! [`FileRules::allows_path`]; Chrome's launch and the session's downloads use the same
//! directories), and the fetcher that brings an upload down the first time a client names it.

use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

/// Brings a session's uploads onto the browser's disk: the API stores an uploaded file where
/// the task cannot be reached, and the controller fetches it the first time a client names it.
pub trait FetchUpload: Send + Sync {
    /// Binds it to the session (a pool controller learns it from its claim; once).
    fn bind(&self, project_id: &str, session_id: &str);
    /// Writes the session's upload `name` into `dir` when its store has it (bounded in size and
    /// time). Blocks the calling thread (the relay's) until done; whether the file is there.
    fn fetch(&self, name: &str, dir: &Path) -> bool;
}

/// The session's [`FetchUpload`], if any (equal when it is the same one).
#[derive(Clone, Default)]
struct Fetcher(Option<Arc<dyn FetchUpload>>);

impl std::fmt::Debug for Fetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Fetcher" } else { "None" })
    }
}

impl PartialEq for Fetcher {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (a, b) => a.is_none() && b.is_none(),
        }
    }
}

impl Eq for Fetcher {}

/// Where a session's files may be: the only directories a client's paths may name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileRules {
    /// Canonical uploads directory (files put there for the browser to read).
    uploads: Option<PathBuf>,
    /// Canonical downloads directory (where every download lands).
    downloads: Option<PathBuf>,
    /// Brings an upload a client names into `uploads` when it is not there yet.
    fetcher: Fetcher,
}

impl FileRules {
    /// Rules for these directories, created (mode 0700) if missing and canonicalised.
    pub fn new(uploads: &Path, downloads: &Path) -> std::io::Result<Self> {
        Ok(Self {
            uploads: Some(private_dir(uploads)?),
            downloads: Some(private_dir(downloads)?),
            fetcher: Fetcher::default(),
        })
    }

    /// These rules, with uploads a client names fetched by `f` when missing.
    pub fn fetching(mut self, f: Arc<dyn FetchUpload>) -> Self {
        self.fetcher = Fetcher(Some(f));
        self
    }

    /// Binds the fetcher, if any, to the session a pool controller was claimed for.
    pub fn bind(&self, project_id: &str, session_id: &str) {
        if let Some(f) = &self.fetcher.0 {
            f.bind(project_id, session_id);
        }
    }

    /// The default directories of a session whose profile is `user_data_dir`: beside it (not
    /// inside, so they are never archived with the profile), `<profile>-files/uploads` and
    /// `<profile>-files/downloads`.
    pub fn beside_profile(user_data_dir: &Path) -> std::io::Result<Self> {
        let base = files_dir(user_data_dir);
        private_dir(&base)?;
        Self::new(&base.join("uploads"), &base.join("downloads"))
    }

    /// The canonical uploads directory, if any.
    pub fn uploads(&self) -> Option<&Path> {
        self.uploads.as_deref()
    }

    /// The canonical downloads directory, if any.
    pub fn downloads(&self) -> Option<&Path> {
        self.downloads.as_deref()
    }

    /// Whether `p` names an existing file strictly inside the uploads or downloads directory.
    /// An upload named directly in the uploads directory and not there yet is fetched first.
    pub fn allows_path(&self, p: &str) -> bool {
        let path = Path::new(p);
        if !path.is_absolute() || path.components().any(|c| c == Component::ParentDir) {
            return false;
        }
        self.fetch_if_missing(path);
        let Ok(real) = std::fs::canonicalize(path) else {
            return false;
        };
        [&self.uploads, &self.downloads]
            .into_iter()
            .flatten()
            .any(|root| real != *root && real.starts_with(root))
    }
}

impl FileRules {
    /// Fetches `path` when it names a missing file directly in the uploads directory.
    fn fetch_if_missing(&self, path: &Path) {
        let (Some(dir), Some(f)) = (&self.uploads, &self.fetcher.0) else {
            return;
        };
        let name = path.file_name().and_then(|n| n.to_str());
        // `symlink_metadata`: anything there already (a link included) is left to the check.
        if let Some(name) = name
            && path.parent() == Some(dir.as_path())
            && path.symlink_metadata().is_err()
        {
            f.fetch(name, dir);
        }
    }
}

/// `<profile>-files`: where [`FileRules::beside_profile`] puts a session's directories.
pub(crate) fn files_dir(user_data_dir: &Path) -> PathBuf {
    let mut base = user_data_dir.as_os_str().to_owned();
    base.push("-files");
    PathBuf::from(base)
}

/// Removes `<profile>-files` when the session is over (nothing in it outlives the session).
pub(crate) fn remove_beside_profile(user_data_dir: &Path) {
    let dir = files_dir(user_data_dir);
    if let Err(e) = std::fs::remove_dir_all(&dir)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(dir = %dir.display(), error = %e, "could not remove the session's files directory");
    }
}

/// Creates `dir` (0700) if missing; its canonical path.
fn private_dir(dir: &Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    std::fs::canonicalize(dir)
}
