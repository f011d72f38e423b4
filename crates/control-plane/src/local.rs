//! The local platform: the whole flow (create → connect → persist a context → release) on one
//! machine with no AWS account.
//!
//! - Sessions are documents in `<data>/sessions` (the contract's [`DirStore`]) that the API and
//!   the controllers it starts share, so a controller's READY write is what the API reads.
//! - Projects, API keys and contexts are small JSON files in `<data>`.
//! - Archives live in `<data>/contexts/<projectId>/<contextId>/profile.tar.gz`; "presigned"
//!   upload URLs point at this server (`PUT /_local/archives/<key>?expires=…&signature=…`, an
//!   HMAC of key and expiry).
//! - Controllers are child processes (see [`crate::controllers`]): a warm pool taking claims
//!   from `<data>/claims`, or one `wallcrawler-controller run` per session.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use tokio::io::AsyncWriteExt;
use tracing::info;
use wallcrawler_contract::session_doc::{DirStore, DocError, SessionDoc};
use wallcrawler_contract::{InternalStatus, time::now_iso8601};

use crate::error::{ApiError, PortError};
use crate::memory::rules;
use crate::model::{ApiKeyRecord, ContextRecord, Project};
use crate::ports::*;

fn doc_err(e: DocError) -> PortError {
    PortError::Failed(e.to_string())
}

/// Session documents in a directory.
#[derive(Clone)]
pub struct DirSessions(pub DirStore);

impl DirSessions {
    async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&DirStore) -> Result<T, DocError> + Send + 'static,
    ) -> PortResult<T> {
        let s = self.0.clone();
        tokio::task::spawn_blocking(move || f(&s))
            .await
            .map_err(|e| PortError::Failed(e.to_string()))?
            .map_err(doc_err)
    }

    async fn cond(
        &self,
        id: &str,
        f: impl FnOnce(&mut SessionDoc) -> bool + Send + 'static,
    ) -> PortResult<Cond<SessionDoc>> {
        let id = id.to_owned();
        let r = self
            .run(
                move |s| match s.update::<std::convert::Infallible>(&id, |d| Ok(f(d))) {
                    Ok(Ok((true, d))) => Ok(Cond::Done(d)),
                    Ok(Ok((false, d))) => Ok(Cond::Failed(Some(d))),
                    Ok(Err(never)) => match never {},
                    Err(DocError::Missing(_)) => Ok(Cond::Failed(None)),
                    Err(e) => Err(e),
                },
            )
            .await?;
        Ok(r)
    }

    /// The stored sessions that `keep` selects.
    async fn list_where(
        &self,
        keep: impl Fn(&SessionDoc) -> bool + Send,
    ) -> PortResult<Vec<SessionDoc>> {
        let all = self.run(|s| s.list()).await?;
        Ok(all.into_iter().filter(|d| keep(d)).collect())
    }
}

impl SessionRepo for DirSessions {
    fn create(&self, doc: SessionDoc) -> BoxFuture<'_, PortResult<Cond<SessionDoc>>> {
        Box::pin(async move {
            self.run(move |s| match s.create(&doc) {
                Ok(()) => Ok(Cond::Done(doc)),
                Err(DocError::Exists(_)) => Ok(Cond::Failed(None)),
                Err(e) => Err(e),
            })
            .await
        })
    }
    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, PortResult<Option<SessionDoc>>> {
        let id = id.to_owned();
        Box::pin(async move { self.run(move |s| s.get(&id)).await })
    }
    fn list_project<'a>(
        &'a self,
        project_id: &'a str,
    ) -> BoxFuture<'a, PortResult<Vec<SessionDoc>>> {
        let p = project_id.to_owned();
        Box::pin(self.list_where(move |d| d.project_id == p))
    }
    fn list_context<'a>(
        &'a self,
        context_id: &'a str,
    ) -> BoxFuture<'a, PortResult<Vec<SessionDoc>>> {
        let c = context_id.to_owned();
        Box::pin(self.list_where(move |d| d.context_id.as_deref() == Some(&c)))
    }
    fn find_by_task<'a>(&'a self, task_arn: &'a str) -> BoxFuture<'a, PortResult<Option<String>>> {
        let t = task_arn.to_owned();
        Box::pin(async move {
            Ok(self
                .run(|s| s.list())
                .await?
                .into_iter()
                .find(|d| d.ecs_task_arn.as_deref() == Some(&t))
                .map(|d| d.session_id))
        })
    }
    fn mark_provisioning<'a>(
        &'a self,
        id: &'a str,
        task_arn: Option<&'a str>,
        at: &'a str,
    ) -> BoxFuture<'a, PortResult<Cond<SessionDoc>>> {
        let (arn, at) = (task_arn.map(str::to_owned), at.to_owned());
        Box::pin(async move {
            self.cond(id, move |d| rules::provisioning(d, arn.as_deref(), &at))
                .await
        })
    }
    fn mark_terminal<'a>(
        &'a self,
        id: &'a str,
        status: InternalStatus,
        reason: Option<&'a str>,
        at: &'a str,
        ended: bool,
    ) -> BoxFuture<'a, PortResult<Cond<SessionDoc>>> {
        let (reason, at) = (reason.map(str::to_owned), at.to_owned());
        Box::pin(async move {
            self.cond(id, move |d| {
                rules::terminal(d, status, reason.as_deref(), &at, ended)
            })
            .await
        })
    }
    fn mark_ended_if_missing<'a>(
        &'a self,
        id: &'a str,
        at: &'a str,
    ) -> BoxFuture<'a, PortResult<()>> {
        let at = at.to_owned();
        Box::pin(async move {
            self.cond(id, move |d| {
                let missing = d.ended_at.is_none();
                if missing {
                    d.ended_at = Some(at);
                }
                missing
            })
            .await?;
            Ok(())
        })
    }
}

/// A JSON map in one file, read and rewritten whole under a lock (tiny local data).
pub struct FileMap<T> {
    path: PathBuf,
    lock: Mutex<()>,
    _t: std::marker::PhantomData<T>,
}

impl<T: Serialize + DeserializeOwned + Clone> FileMap<T> {
    /// A map kept in the file at `path` (created on the first write).
    pub fn new(path: PathBuf) -> Self {
        Self {
            path,
            lock: Mutex::new(()),
            _t: std::marker::PhantomData,
        }
    }

    fn load(&self) -> PortResult<BTreeMap<String, T>> {
        match std::fs::read(&self.path) {
            Ok(b) => serde_json::from_slice(&b)
                .map_err(|e| PortError::Failed(format!("{}: {e}", self.path.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
            Err(e) => Err(PortError::Failed(format!("{}: {e}", self.path.display()))),
        }
    }

    fn store(&self, m: &BTreeMap<String, T>) -> PortResult<()> {
        let tmp = self.path.with_extension("json.tmp");
        write_private(&tmp, &serde_json::to_vec_pretty(m).expect("serializes"))
            .and_then(|_| std::fs::rename(&tmp, &self.path))
            .map_err(|e| PortError::Failed(format!("{}: {e}", self.path.display())))
    }

    /// The entry under `k`, if any.
    pub fn get(&self, k: &str) -> PortResult<Option<T>> {
        let _g = self.lock.lock().expect("not poisoned");
        Ok(self.load()?.get(k).cloned())
    }

    /// Applies `f` to the map and saves it; returns `f`'s result.
    pub fn modify<R>(&self, f: impl FnOnce(&mut BTreeMap<String, T>) -> R) -> PortResult<R> {
        let _g = self.lock.lock().expect("not poisoned");
        let mut m = self.load()?;
        let r = f(&mut m);
        self.store(&m)?;
        Ok(r)
    }
}

macro_rules! ready {
    ($e:expr) => {{
        let r = $e;
        Box::pin(async move { r })
    }};
}

impl ProjectRepo for FileMap<Project> {
    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, PortResult<Option<Project>>> {
        ready!(FileMap::get(self, id))
    }
    fn put(&self, p: Project) -> BoxFuture<'_, PortResult<()>> {
        ready!(self.modify(|m| {
            m.insert(p.project_id.clone(), p);
        }))
    }
}

impl KeyRepo for FileMap<ApiKeyRecord> {
    fn get<'a>(&'a self, hash: &'a str) -> BoxFuture<'a, PortResult<Option<ApiKeyRecord>>> {
        ready!(FileMap::get(self, hash))
    }
    fn put(&self, k: ApiKeyRecord) -> BoxFuture<'_, PortResult<()>> {
        ready!(self.modify(|m| {
            m.insert(k.api_key_hash.clone(), k);
        }))
    }
    fn set_status<'a>(&'a self, hash: &'a str, status: &'a str) -> BoxFuture<'a, PortResult<bool>> {
        ready!(self.modify(|m| match m.get_mut(hash) {
            Some(k) => {
                k.status = status.to_owned();
                true
            }
            None => false,
        }))
    }
}

impl ContextRepo for FileMap<ContextRecord> {
    fn create(&self, c: ContextRecord) -> BoxFuture<'_, PortResult<()>> {
        ready!(self.modify(|m| {
            m.insert(c.context_id.clone(), c);
        }))
    }
    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, PortResult<Option<ContextRecord>>> {
        ready!(FileMap::get(self, id))
    }
    fn touch<'a>(&'a self, id: &'a str, at: &'a str) -> BoxFuture<'a, PortResult<()>> {
        ready!(self.modify(|m| {
            if let Some(c) = m.get_mut(id) {
                c.updated_at = at.to_owned();
            }
        }))
    }
    fn delete<'a>(&'a self, id: &'a str) -> BoxFuture<'a, PortResult<()>> {
        ready!(self.modify(|m| {
            m.remove(id);
        }))
    }
    fn take_writer<'a>(
        &'a self,
        id: &'a str,
        session_id: &'a str,
        replacing: Option<&'a str>,
    ) -> BoxFuture<'a, PortResult<Lease>> {
        ready!(self.modify(|m| match m.get_mut(id) {
            Some(c) => rules::take_writer(c, session_id, replacing),
            None => Lease::NoContext,
        }))
    }
    fn release_writer<'a>(
        &'a self,
        id: &'a str,
        session_id: &'a str,
    ) -> BoxFuture<'a, PortResult<()>> {
        ready!(self.modify(|m| {
            if let Some(c) = m.get_mut(id) {
                rules::release_writer(c, session_id);
            }
        }))
    }
}

/// Projects' slot sets (`<data>/active-sessions.json`: project id → session ids), changed
/// under the map's lock: the one server process is the only writer.
impl SlotRepo for FileMap<Vec<String>> {
    fn take<'a>(
        &'a self,
        project_id: &'a str,
        session_id: &'a str,
        limit: u64,
    ) -> BoxFuture<'a, PortResult<Slot>> {
        ready!(self.modify(|m| rules::take_slot(
            m.entry(project_id.to_owned()).or_default(),
            session_id,
            limit
        )))
    }
    fn give_back<'a>(
        &'a self,
        project_id: &'a str,
        session_id: &'a str,
    ) -> BoxFuture<'a, PortResult<()>> {
        ready!(self.modify(|m| {
            if let Some(held) = m.get_mut(project_id) {
                held.retain(|h| h != session_id);
                if held.is_empty() {
                    m.remove(project_id);
                }
            }
        }))
    }
}

/// Archives in a directory, uploaded through this server.
pub struct LocalArchives {
    /// The archives' root: each is at `<dir>/<projectId>/<contextId>/profile.tar.gz`.
    pub dir: PathBuf,
    /// This server's base URL (`http://127.0.0.1:<port>`), which upload URLs start with.
    pub base_url: String,
    /// The HMAC-SHA256 key that signs upload URLs (in `serve`, the local signing key).
    pub url_key: Vec<u8>,
}

fn signature(url_key: &[u8], key: &str, expires: u64) -> String {
    let mut m = <Hmac<sha2::Sha256> as Mac>::new_from_slice(url_key).expect("any key length");
    m.update(key.as_bytes());
    m.update(b"\n");
    m.update(expires.to_string().as_bytes());
    m.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Archive keys look like `<projectId>/<contextId>/profile.tar.gz`: plain segments only.
fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key.split('/').all(|seg| {
            !seg.is_empty()
                && seg != "."
                && seg != ".."
                && seg
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
        })
}

impl ArchiveUrls for LocalArchives {
    fn presign_put<'a>(
        &'a self,
        key: &'a str,
        ttl_seconds: u64,
    ) -> BoxFuture<'a, PortResult<String>> {
        let expires = wallcrawler_contract::time::unix_millis() / 1000 + ttl_seconds;
        let sig = signature(&self.url_key, key, expires);
        ready!(Ok(format!(
            "{}/_local/archives/{key}?expires={expires}&signature={sig}",
            self.base_url
        )))
    }
    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, PortResult<()>> {
        let path = self.dir.join(key);
        Box::pin(async move {
            match tokio::fs::remove_file(&path).await {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(PortError::Failed(e.to_string())),
            }
        })
    }
}

/// The query of an upload URL: `expires` (Unix seconds) and `signature` (HMAC of key and expiry).
#[derive(Deserialize)]
pub struct UploadQuery {
    expires: u64,
    signature: String,
}

/// `PUT /_local/archives/<key>`: the target of local "presigned" URLs. Streams the body to a
/// temporary file and renames it into place once complete.
pub async fn upload_archive(
    State(archives): State<Arc<LocalArchives>>,
    axum::extract::Path(key): axum::extract::Path<String>,
    Query(q): Query<UploadQuery>,
    body: Body,
) -> Result<StatusCode, ApiError> {
    if !valid_key(&key) {
        return Err(ApiError::bad_request("invalid archive key"));
    }
    if q.expires < wallcrawler_contract::time::unix_millis() / 1000 {
        return Err(ApiError::forbidden("this upload URL has expired"));
    }
    let want = signature(&archives.url_key, &key, q.expires);
    if !subtle_eq(want.as_bytes(), q.signature.as_bytes()) {
        return Err(ApiError::forbidden("invalid upload URL signature"));
    }
    let path = archives.dir.join(&key);
    let parent = path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| archives.dir.clone());
    let fail = |e: std::io::Error| ApiError::internal(format!("storing the archive failed: {e}"));
    tokio::fs::create_dir_all(&parent).await.map_err(fail)?;
    let tmp = parent.join(format!(".upload-{}", uuid::Uuid::new_v4()));
    // Archives hold cookies and logins: 0600, like every file here.
    let mut f = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .await
        .map_err(fail)?;
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(_) => {
                let _ = tokio::fs::remove_file(&tmp).await;
                return Err(ApiError::bad_request("the upload was interrupted"));
            }
        };
        f.write_all(&chunk).await.map_err(fail)?;
    }
    f.sync_all().await.map_err(fail)?;
    tokio::fs::rename(&tmp, &path).await.map_err(fail)?;
    info!(key = %key, "context archive uploaded");
    Ok(StatusCode::OK)
}

fn subtle_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// What the local platform keeps about itself (`<data>/local.json`).
#[derive(Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LocalIdentity {
    /// `projectId`: the local project.
    pub project_id: String,
    /// The local API key (stored raw only here, on the user's own machine, so it can be printed
    /// at every start; its record holds only the hash).
    pub api_key: String,
    /// `signingKey`: the HS256 key local controllers verify tokens with.
    pub signing_key: String,
}

/// Writes `data` to a new (or truncated) file readable and writable by its owner only (0600,
/// whatever the umask): the local platform's files hold keys, tokens and profiles.
pub fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    // An existing file keeps its mode on open: set it.
    f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    f.write_all(data)
}

/// Creates the data directory 0700 (and makes an existing one 0700): it holds the local API
/// key, the signing key, session tokens and context archives.
pub fn private_dir(data_dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(data_dir)?;
    std::fs::set_permissions(data_dir, std::fs::Permissions::from_mode(0o700))
}

/// Loads `<data>/local.json`, creating the local project, API key and signing key on first start.
pub fn load_or_init(data_dir: &Path) -> anyhow::Result<LocalIdentity> {
    private_dir(data_dir)?;
    let path = data_dir.join("local.json");
    if let Ok(b) = std::fs::read(&path) {
        return Ok(serde_json::from_slice(&b)?);
    }
    let id = LocalIdentity {
        project_id: "proj_local".to_owned(),
        api_key: format!("wc_local_{}", wallcrawler_contract::token::random_hex(24)),
        signing_key: wallcrawler_contract::token::random_hex(32),
    };
    let now = now_iso8601();
    FileMap::<Project>::new(data_dir.join("projects.json")).modify(|m| {
        m.insert(
            id.project_id.clone(),
            Project {
                project_id: id.project_id.clone(),
                name: "Local project".to_owned(),
                owner_id: None,
                default_timeout: 3600,
                concurrency: 10,
                status: "ACTIVE".to_owned(),
                created_at: now.clone(),
                updated_at: now.clone(),
            },
        );
    })?;
    FileMap::<ApiKeyRecord>::new(data_dir.join("api-keys.json")).modify(|m| {
        let hash = crate::model::hash_api_key(&id.api_key);
        m.insert(
            hash.clone(),
            ApiKeyRecord {
                api_key_hash: hash,
                key_id: Some("local".to_owned()),
                project_id: id.project_id.clone(),
                project_ids: vec![id.project_id.clone()],
                name: Some("local".to_owned()),
                status: "ACTIVE".to_owned(),
                created_at: now.clone(),
            },
        );
    })?;
    let tmp = path.with_extension("json.tmp");
    write_private(&tmp, &serde_json::to_vec_pretty(&id)?)?;
    std::fs::rename(&tmp, &path)?;
    Ok(id)
}

impl From<PortError> for std::io::Error {
    fn from(e: PortError) -> Self {
        std::io::Error::other(e.to_string())
    }
}

/// Response for the archive route's errors.
impl IntoResponse for PortError {
    fn into_response(self) -> axum::response::Response {
        ApiError::from(self).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_keys_are_plain() {
        assert!(valid_key("proj_a/ctx_b/profile.tar.gz"));
        for bad in ["", "../x", "a//b", "a/./b", "/abs", "a/b c"] {
            assert!(!valid_key(bad), "{bad}");
        }
    }

    #[test]
    fn signatures_bind_key_and_expiry() {
        let s = signature(b"k", "a/b", 10);
        assert_ne!(s, signature(b"k", "a/c", 10));
        assert_ne!(s, signature(b"k", "a/b", 11));
        assert!(subtle_eq(
            s.as_bytes(),
            signature(b"k", "a/b", 10).as_bytes()
        ));
    }
}
