//! The local platform: the whole flow (create → connect → persist a context → release) on one
//! machine with no AWS account.
//!
//! - Sessions are documents in `<data>/sessions` (the contract's [`DirStore`]) that the API and
//!   the controllers it starts share, so a controller's READY write is what the API reads.
//! - Projects, API keys and contexts are small JSON files in `<data>`.
//! - Archives live in `<data>/contexts/<projectId>/<contextId>/profile.tar.gz`; "presigned"
//!   upload URLs point at this server (`PUT /_local/archives/<key>?expires=…&signature=…`, an
//!   HMAC of key and expiry).
//! - Extension archives and their records are files under `<data>/contexts/extensions/`
//!   ([`DirObjects`]), the same keys as in the AWS contexts bucket.
//! - Controllers are child processes (see [`controllers`]): a warm pool taking claims
//!   from `<data>/claims`, or one `wallcrawler-controller run` per session; [`serve`] wires
//!   it all up. Started as root, each controller's Chrome runs as a uid of its own
//!   ([`wallcrawler_local::chrome_uids`]).

pub mod controllers;
pub mod retention;
pub mod serve;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use async_trait::async_trait;
use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use futures_util::StreamExt;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use tokio::io::AsyncWriteExt;
use tracing::info;
use wallcrawler_contract::SdkStatus;
use wallcrawler_contract::session_doc::SessionDoc;
use wallcrawler_contract::time::now_iso8601;
use wallcrawler_local::private_fs;
use wallcrawler_local::session_dir::{DirStore, DocError};

use crate::error::{ApiError, StoreError};
use crate::model::{ApiKeyRecord, Project, Record};
use crate::rules::{self, LockedMap};
use crate::stores::*;

fn doc_err(e: DocError) -> StoreError {
    StoreError::failed_by("the session documents", e)
}

/// Session documents in a directory; projects' usage totals in a file beside them.
#[derive(Clone)]
pub struct DirSessions(pub DirStore, pub Arc<FileMap<Usage>>);

impl DirSessions {
    /// The documents in `<data_dir>/sessions`, the usage totals in `<data_dir>/usage.json`.
    pub fn in_dir(data_dir: &Path) -> Self {
        Self(
            DirStore::new(data_dir.join("sessions")),
            Arc::new(FileMap::new(data_dir.join("usage.json"))),
        )
    }

    async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&DirStore) -> Result<T, DocError> + Send + 'static,
    ) -> StoreResult<T> {
        let s = self.0.clone();
        tokio::task::spawn_blocking(move || f(&s))
            .await
            .map_err(|e| StoreError::failed_by("the session documents", e))?
            .map_err(doc_err)
    }

    async fn cond(
        &self,
        id: &str,
        f: impl FnOnce(&mut SessionDoc) -> bool + Send + 'static,
    ) -> DocWrite {
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
    ) -> StoreResult<Vec<SessionDoc>> {
        let all = self.run(|s| s.list()).await?;
        Ok(all.into_iter().filter(|d| keep(d)).collect())
    }
}

#[async_trait]
impl SessionStore for DirSessions {
    async fn create(&self, doc: SessionDoc) -> DocWrite {
        self.run(move |s| match s.create(&doc) {
            Ok(()) => Ok(Cond::Done(doc)),
            Err(DocError::Exists(_)) => Ok(Cond::Failed(None)),
            Err(e) => Err(e),
        })
        .await
    }
    async fn get(&self, id: &str) -> StoreResult<Option<SessionDoc>> {
        let id = id.to_owned();
        self.run(move |s| s.get(&id)).await
    }
    async fn list_project(&self, project_id: &str, at: PageAt) -> Listing {
        let all = self.list_where(|d| d.project_id == project_id).await?;
        Ok(page_of(all, at))
    }
    async fn on_context(&self, context_id: &str) -> Ids {
        let all = self.run(|s| s.list()).await?;
        Ok(rules::on_context(all, context_id))
    }
    async fn find_by_task(&self, task_arn: &str) -> StoreResult<Option<String>> {
        Ok(self
            .list_where(|d| d.ecs_task_arn.as_deref() == Some(task_arn))
            .await?
            .into_iter()
            .next()
            .map(|d| d.session_id))
    }
    async fn mark_provisioning(&self, id: &str, task_arn: Option<&str>, at: &str) -> DocWrite {
        let (arn, at) = (task_arn.map(str::to_owned), at.to_owned());
        self.cond(id, move |d| rules::provisioning(d, arn.as_deref(), &at))
            .await
    }
    async fn mark_terminal(&self, id: &str, to: Terminal<'_>, at: &str) -> DocWrite {
        let (status, ended, at) = (to.status, to.ended, at.to_owned());
        let reason = to.reason.map(str::to_owned);
        self.cond(id, move |d| {
            let to = Terminal {
                status,
                reason: reason.as_deref(),
                ended,
            };
            rules::terminal(d, to, &at)
        })
        .await
    }
    async fn mark_ended_if_missing(&self, id: &str, at: &str) -> StoreResult<()> {
        let at = at.to_owned();
        self.cond(id, move |d| rules::ended_if_missing(d, &at))
            .await?;
        Ok(())
    }
    async fn extend_claim(&self, id: &str, to: u64) -> DocWrite {
        self.cond(id, move |d| d.extend_claim(to)).await
    }
    async fn end_unserved(&self, id: &str, now: u64, at: &str) -> DocWrite {
        let at = at.to_owned();
        self.cond(id, move |d| d.end_unserved(now, &at)).await
    }
    async fn expiring(&self, status: SdkStatus, before: u64, limit: usize) -> Ids {
        let all = self.run(|s| s.list()).await?;
        Ok(rules::expiring(all, status, before, limit))
    }
    /// Marks the document (under its lock), then adds to the total (under the file's): a
    /// crash between the two leaves the session marked but uncounted.
    async fn count_usage(&self, id: &str, project_id: &str, used: Usage) -> StoreResult<bool> {
        let first = matches!(self.cond(id, rules::mark_counted).await?, Cond::Done(_));
        if first {
            self.1.modify(|m| rules::add_usage(m, project_id, used))?;
        }
        Ok(first)
    }
    async fn usage(&self, project_id: &str) -> StoreResult<Usage> {
        self.1
            .modify(|m| m.get(project_id).copied().unwrap_or_default())
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

    /// The map, read only from a file of ours ([`private_fs::read_ours`]).
    fn load(&self) -> StoreResult<BTreeMap<String, T>> {
        match private_fs::read_ours(&self.path) {
            Ok(Some(b)) => serde_json::from_slice(&b).map_err(|e| self.failed(e)),
            Ok(None) => Ok(BTreeMap::new()),
            Err(e) => Err(self.failed(e)),
        }
    }

    fn store(&self, m: &BTreeMap<String, T>) -> StoreResult<()> {
        private_fs::write_atomic(
            &self.path,
            &serde_json::to_vec_pretty(m).expect("serializes"),
        )
        .map_err(|e| self.failed(e))
    }

    fn failed(&self, e: impl Into<crate::error::BoxError>) -> StoreError {
        StoreError::failed_by(self.path.display().to_string(), e)
    }

    /// The entry under `k`, if any.
    pub fn get(&self, k: &str) -> StoreResult<Option<T>> {
        let _g = self.lock.lock().expect("not poisoned");
        Ok(self.load()?.get(k).cloned())
    }

    /// Applies `f` to the map and saves it; returns `f`'s result.
    pub fn modify<R>(&self, f: impl FnOnce(&mut BTreeMap<String, T>) -> R) -> StoreResult<R> {
        let _g = self.lock.lock().expect("not poisoned");
        let mut m = self.load()?;
        let r = f(&mut m);
        self.store(&m)?;
        Ok(r)
    }
}

#[async_trait]
impl<R: Record> RecordStore<R> for FileMap<R> {
    async fn get(&self, key: &str) -> StoreResult<Option<R>> {
        FileMap::get(self, key)
    }
    async fn put(&self, record: R) -> StoreResult<()> {
        self.modify(|m| m.insert(record.key().to_owned(), record))
            .map(drop)
    }
}

/// Projects, API keys, contexts and slot sets (`<data>/active-sessions.json`), changed under
/// the map's lock: the one server process is the only writer.
impl<V: Serialize + DeserializeOwned + Clone + Send + Sync> LockedMap<V> for FileMap<V> {
    fn modify<T>(&self, f: impl FnOnce(&mut BTreeMap<String, V>) -> T) -> StoreResult<T> {
        FileMap::modify(self, f)
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

#[async_trait]
impl ArchiveUrls for LocalArchives {
    async fn presign_put(&self, key: &str, ttl_seconds: u64) -> StoreResult<String> {
        let expires = wallcrawler_contract::time::unix_millis() / 1000 + ttl_seconds;
        let sig = signature(&self.url_key, key, expires);
        Ok(format!(
            "{}/_local/archives/{key}?expires={expires}&signature={sig}",
            self.base_url
        ))
    }
    /// This server's own signed URL (`/_local/objects/<key>`), signed apart from upload URLs
    /// (one cannot stand for the other).
    async fn presign_get(&self, key: &str, ttl_seconds: u64) -> StoreResult<String> {
        let expires = wallcrawler_contract::time::unix_millis() / 1000 + ttl_seconds;
        let sig = signature(&self.url_key, &get_message(key), expires);
        Ok(format!(
            "{}/_local/objects/{key}?expires={expires}&signature={sig}",
            self.base_url
        ))
    }
    async fn delete(&self, key: &str) -> StoreResult<()> {
        match tokio::fs::remove_file(self.dir.join(key)).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(StoreError::failed_by(format!("removing archive {key}"), e)),
        }
    }
}

/// Objects as files under a directory (the data directory's `contexts/`, the local contexts
/// bucket): `<dir>/<key>`, written to a temporary file and renamed into place, 0600.
pub struct DirObjects {
    /// The root every key is under.
    pub dir: PathBuf,
}

impl DirObjects {
    /// The file of `key`; a key that is not plain segments is our bug, refused all the same.
    fn path(&self, key: &str) -> StoreResult<PathBuf> {
        let key = key.trim_end_matches('/');
        if valid_key(key) {
            Ok(self.dir.join(key))
        } else {
            Err(StoreError::failed(format!("{key:?} is not an object key")))
        }
    }
}

/// A new temporary file (0600: archives hold cookies and logins, like every file here) in the
/// folder `path` will be in (created if missing; `root` when `path` has no parent):
/// [`private_fs::create_temp`], named with a leading `.` so listings pass it over; renamed onto
/// `path` once complete.
async fn temp_beside(path: &Path, root: &Path) -> std::io::Result<(PathBuf, tokio::fs::File)> {
    let parent = path.parent().unwrap_or(root);
    tokio::fs::create_dir_all(parent).await?;
    let (tmp, f) = private_fs::create_temp(parent, "upload")?;
    Ok((tmp, tokio::fs::File::from_std(f)))
}

fn object_err(what: &str, key: &str, e: std::io::Error) -> StoreError {
    StoreError::failed_by(format!("{what} object {key}"), e)
}

#[async_trait]
impl ObjectStore for DirObjects {
    async fn put(&self, key: &str, body: axum::body::Bytes) -> StoreResult<()> {
        let path = self.path(key)?;
        let fail = |e| object_err("writing", key, e);
        let (tmp, mut f) = temp_beside(&path, &self.dir).await.map_err(fail)?;
        f.write_all(&body).await.map_err(fail)?;
        f.sync_all().await.map_err(fail)?;
        tokio::fs::rename(&tmp, &path).await.map_err(fail)
    }
    /// Only a file of ours, not through a link ([`private_fs::read_ours`]).
    async fn get(&self, key: &str) -> StoreResult<Option<axum::body::Bytes>> {
        let path = self.path(key)?;
        let read = tokio::task::spawn_blocking(move || private_fs::read_ours(&path))
            .await
            .map_err(|e| StoreError::failed_by(format!("reading object {key}"), e))?;
        match read {
            Ok(b) => Ok(b.map(Into::into)),
            Err(e) => Err(object_err("reading", key, e)),
        }
    }
    /// Reads at most `max` + 1 bytes whatever the file's length says (only a file of ours, not
    /// through a link: [`private_fs::open_ours`]).
    async fn get_at_most(&self, key: &str, max: u64) -> StoreResult<Option<Bounded>> {
        use tokio::io::AsyncReadExt;
        let f = match private_fs::open_ours(&self.path(key)?) {
            Ok(Some(f)) => tokio::fs::File::from_std(f),
            Ok(None) => return Ok(None),
            Err(e) => return Err(object_err("reading", key, e)),
        };
        let mut body = Vec::new();
        f.take(max.saturating_add(1))
            .read_to_end(&mut body)
            .await
            .map_err(|e| object_err("reading", key, e))?;
        Ok(Some(if body.len() as u64 > max {
            Bounded::TooLarge
        } else {
            Bounded::Whole(body.into())
        }))
    }
    async fn delete(&self, key: &str) -> StoreResult<()> {
        match tokio::fs::remove_file(self.path(key)?).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(object_err("removing", key, e)),
        }
    }
    /// Whether the folder `prefix` holds a file (a name not starting with `.`: the temporary
    /// files of a write in progress do not count).
    async fn any_under(&self, prefix: &str) -> StoreResult<bool> {
        let mut entries = match tokio::fs::read_dir(self.path(prefix)?).await {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(object_err("listing", prefix, e)),
        };
        while let Some(e) = entries
            .next_entry()
            .await
            .map_err(|e| object_err("listing", prefix, e))?
        {
            if !e.file_name().as_encoded_bytes().starts_with(b".") {
                return Ok(true);
            }
        }
        Ok(false)
    }
    /// The zip built in memory from the folder's regular files (links and temporary files of
    /// a write in progress are passed over), answered as its bytes.
    async fn zip_under(&self, prefix: &str, _: &str, max: u64) -> StoreResult<crate::zips::Zip> {
        let dir = self.path(prefix)?;
        let made = tokio::task::spawn_blocking(move || zip_dir(&dir, max))
            .await
            .map_err(|e| StoreError::failed_by("zipping downloads", e))?;
        Ok(crate::zips::Zip::Body(made?.into()))
    }
    /// The folder's regular files (not links, not the temporary files of a write in
    /// progress), sorted.
    async fn names_under(&self, prefix: &str, max: usize) -> StoreResult<Vec<String>> {
        let mut entries = match tokio::fs::read_dir(self.path(prefix)?).await {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(object_err("listing", prefix, e)),
        };
        let mut names = Vec::new();
        while let Some(e) = entries
            .next_entry()
            .await
            .map_err(|e| object_err("listing", prefix, e))?
        {
            let regular = e.file_type().await.is_ok_and(|t| t.is_file());
            match e.file_name().into_string() {
                Ok(n) if regular && !n.starts_with('.') => names.push(n),
                _ => {}
            }
        }
        names.sort();
        names.truncate(max);
        Ok(names)
    }
}

/// A zip of `dir`'s regular files, sorted by name (a missing `dir`: an empty zip).
fn zip_dir(dir: &Path, max: u64) -> StoreResult<Vec<u8>> {
    let mut names: Vec<String> = match std::fs::read_dir(dir) {
        Ok(d) => d
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|n| crate::zips::is_entry_name(n))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(object_err("listing", &dir.to_string_lossy(), e)),
    };
    names.sort();
    let entries = names
        .into_iter()
        .map(|n| std::fs::File::open(dir.join(&n)).map(|f| (n, f)));
    let out = crate::zips::write_zip(std::io::Cursor::new(Vec::new()), entries, max)?;
    Ok(out.into_inner())
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
    let fail = |e: std::io::Error| ApiError::internal(format!("storing the archive failed: {e}"));
    let (tmp, mut f) = temp_beside(&path, &archives.dir).await.map_err(fail)?;
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
    info!(key = %key, "archive uploaded to a presigned URL");
    Ok(StatusCode::OK)
}

/// What a download URL of `key` signs: never an upload's message (a key has no newline).
fn get_message(key: &str) -> String {
    format!("GET\n{key}")
}

/// `GET /_local/objects/<key>?expires=&signature=`: a session's file (a recording's segment,
/// its MP4) at a URL [`LocalArchives::presign_get`] signed; only keys under `files/`.
pub async fn download_object(
    State(archives): State<Arc<LocalArchives>>,
    axum::extract::Path(key): axum::extract::Path<String>,
    Query(q): Query<UploadQuery>,
) -> Result<axum::response::Response, ApiError> {
    let prefix = format!("{}/", wallcrawler_contract::storage::FILES_PREFIX);
    if !valid_key(&key) || !key.starts_with(&prefix) {
        return Err(ApiError::not_found("no such object"));
    }
    if q.expires < wallcrawler_contract::time::unix_millis() / 1000 {
        return Err(ApiError::forbidden("this download URL has expired"));
    }
    let want = signature(&archives.url_key, &get_message(&key), q.expires);
    if !subtle_eq(want.as_bytes(), q.signature.as_bytes()) {
        return Err(ApiError::forbidden("invalid download URL signature"));
    }
    let path = archives.dir.join(&key);
    let read = tokio::task::spawn_blocking(move || private_fs::read_ours(&path))
        .await
        .map_err(|_| ApiError::internal("reading the object failed"))?;
    let body = match read {
        Ok(Some(b)) => b,
        Ok(None) => return Err(ApiError::not_found("no such object")),
        Err(e) => {
            return Err(ApiError::internal(format!(
                "reading the object failed: {e}"
            )));
        }
    };
    let kind = match key.rsplit('.').next() {
        Some("ts") => "video/mp2t",
        Some("mp4") => "video/mp4",
        _ => "application/octet-stream",
    };
    Ok(([(axum::http::header::CONTENT_TYPE, kind)], body).into_response())
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
    /// `privateKey`: the Ed25519 private key (PKCS#8 PEM) the local API signs tokens with. It
    /// stays here (the file is 0600, the directory 0700); controllers and the gateway get its
    /// public key only.
    pub private_key: String,
}

impl LocalIdentity {
    /// The private key of `privateKey`.
    pub fn signing_key(&self) -> anyhow::Result<wallcrawler_contract::SigningKey> {
        wallcrawler_contract::SigningKey::from_pem(&self.private_key)
            .map_err(|e| anyhow::anyhow!("local.json's privateKey: {e}"))
    }
}

/// Loads `<data>/local.json`, creating the local project, API key and signing key on first
/// start. The data directory holds the local API key, the signing key, session tokens and
/// context archives: it is ours or refused ([`private_fs::ensure_private_dir`]), and so is
/// `local.json` ([`private_fs::read_ours`]), each refusal naming the path and what is wrong.
pub fn load_or_init(data_dir: &Path) -> anyhow::Result<LocalIdentity> {
    private_fs::ensure_private_dir(data_dir)
        .with_context(|| format!("the data directory {}", data_dir.display()))?;
    let path = data_dir.join("local.json");
    if let Some(b) = private_fs::read_ours(&path)? {
        // A local.json of before EdDSA tokens has an HS256 `signingKey` and no `privateKey`.
        return serde_json::from_slice(&b).map_err(|e| {
            anyhow::anyhow!(
                "{} is unreadable ({e}); one written before EdDSA tokens (an HS256 signingKey, \
                 no privateKey) is not read: move the data directory away to start afresh",
                path.display()
            )
        });
    }
    let id = LocalIdentity {
        project_id: "proj_local".to_owned(),
        api_key: format!("wc_local_{}", wallcrawler_contract::token::random_hex(24)),
        private_key: wallcrawler_contract::SigningKey::generate()
            .to_pem()
            .to_string(),
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
    private_fs::write_atomic(&path, &serde_json::to_vec_pretty(&id)?)?;
    Ok(id)
}

impl From<StoreError> for std::io::Error {
    fn from(e: StoreError) -> Self {
        std::io::Error::other(e)
    }
}

/// Response for the archive route's errors.
impl IntoResponse for StoreError {
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
