//! Administration over the stores (`wallcrawler-control-plane admin …`): create projects, create
//! API keys (the raw key exists only in the return value; the store gets its SHA-256 hash) and
//! revoke them.

use wallcrawler_contract::token::random_hex;

use crate::error::StoreError;
use crate::handlers::TIMEOUT_RANGE;
use crate::model::{ApiKeyRecord, Project, hash_api_key};
use crate::stores::{KeyStore, RecordStore};

/// Why an administrative action was refused.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The input was refused (a bad id, a missing project, an unknown key); the message says which.
    #[error("{0}")]
    Invalid(String),
    /// A table could not be read or written.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A new project.
#[derive(Debug, Clone)]
pub struct NewProject {
    /// `name`: shown to people.
    pub name: String,
    /// `proj_<random>` when not given.
    pub project_id: Option<String>,
    /// `concurrency`: how many sessions may be live at once.
    pub concurrency: u64,
    /// Seconds.
    pub default_timeout: u64,
    /// `ownerId`: who owns it, free-form.
    pub owner_id: Option<String>,
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Creates an ACTIVE project; refuses an id that exists.
pub async fn create_project(
    projects: &dyn RecordStore<Project>,
    new: NewProject,
    now: &str,
) -> Result<Project, AdminError> {
    let id = new
        .project_id
        .unwrap_or_else(|| format!("proj_{}", random_hex(12)));
    if !valid_id(&id) {
        return Err(AdminError::Invalid(format!(
            "project id {id:?} must be 1-128 letters, digits, '_' or '-'"
        )));
    }
    if new.name.trim().is_empty() {
        return Err(AdminError::Invalid("the project name is empty".into()));
    }
    if new.concurrency == 0 {
        return Err(AdminError::Invalid("concurrency must be at least 1".into()));
    }
    if !TIMEOUT_RANGE.contains(&new.default_timeout) {
        return Err(AdminError::Invalid(format!(
            "the default timeout must be between {} and {} seconds",
            TIMEOUT_RANGE.start(),
            TIMEOUT_RANGE.end()
        )));
    }
    if projects.get(&id).await?.is_some() {
        return Err(AdminError::Invalid(format!("project {id} already exists")));
    }
    let p = Project {
        project_id: id,
        name: new.name.trim().to_owned(),
        owner_id: new.owner_id,
        default_timeout: new.default_timeout,
        concurrency: new.concurrency,
        status: "ACTIVE".into(),
        created_at: now.to_owned(),
        updated_at: now.to_owned(),
    };
    projects.put(p.clone()).await?;
    Ok(p)
}

/// A freshly generated API key: `wc_` and 256 random bits in hex.
pub fn generate_key() -> String {
    format!("wc_{}", random_hex(32))
}

/// A new API key.
#[derive(Debug, Clone, Copy)]
pub struct NewKey<'a> {
    /// The key's default project.
    pub project_id: &'a str,
    /// Other projects it may select (each must exist).
    pub extra: &'a [String],
    /// `name`: a label.
    pub name: Option<&'a str>,
}

impl<'a> NewKey<'a> {
    /// A key for `project_id` alone, without a name.
    pub fn of(project_id: &'a str) -> Self {
        Self {
            project_id,
            extra: &[],
            name: None,
        }
    }
}

/// Creates an ACTIVE key for `new.project_id` (and `new.extra` projects, which must exist
/// too). Returns the raw key — shown once, stored nowhere — and the stored record.
pub async fn create_key(
    keys: &dyn KeyStore,
    projects: &dyn RecordStore<Project>,
    new: NewKey<'_>,
    now: &str,
) -> Result<(String, ApiKeyRecord), AdminError> {
    let project_id = new.project_id;
    let mut ids = vec![project_id.to_owned()];
    for p in new.extra {
        if !ids.contains(p) {
            ids.push(p.clone());
        }
    }
    for id in &ids {
        if projects.get(id).await?.is_none() {
            return Err(AdminError::Invalid(format!("project {id} does not exist")));
        }
    }
    let raw = generate_key();
    let record = ApiKeyRecord {
        api_key_hash: hash_api_key(&raw),
        key_id: Some(format!("key_{}", random_hex(8))),
        project_id: project_id.to_owned(),
        project_ids: ids,
        name: new.name.map(str::to_owned),
        status: "ACTIVE".into(),
        created_at: now.to_owned(),
    };
    keys.put(record.clone()).await?;
    Ok((raw, record))
}

/// A key's hash from `--hash` (64 hex digits, any case).
pub fn parse_hash(h: &str) -> Result<String, AdminError> {
    let h = h.trim().to_ascii_lowercase();
    if h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(h)
    } else {
        Err(AdminError::Invalid(
            "a key hash is 64 hexadecimal digits (SHA-256)".into(),
        ))
    }
}

/// Marks a key INACTIVE; refuses an unknown one.
pub async fn revoke_key(keys: &dyn KeyStore, hash: &str) -> Result<(), AdminError> {
    if keys.set_status(hash, "INACTIVE").await? {
        Ok(())
    } else {
        Err(AdminError::Invalid("no API key with this hash".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{MemKeys, MemProjects};

    fn new(id: Option<&str>) -> NewProject {
        NewProject {
            name: "Acme".into(),
            project_id: id.map(str::to_owned),
            concurrency: 10,
            default_timeout: 3600,
            owner_id: None,
        }
    }

    #[tokio::test]
    async fn projects_keys_and_revocation() {
        let (projects, keys) = (MemProjects::default(), MemKeys::default());
        let p = create_project(&projects, new(None), "t").await.unwrap();
        assert!(p.project_id.starts_with("proj_") && p.is_active());
        assert!(
            create_project(&projects, new(Some(&p.project_id)), "t")
                .await
                .is_err()
        );
        assert!(
            create_project(&projects, new(Some("a/b")), "t")
                .await
                .is_err()
        );

        let missing = ["proj_nope".to_owned()];
        assert!(
            create_key(
                &keys,
                &projects,
                NewKey {
                    extra: &missing,
                    ..NewKey::of(&p.project_id)
                },
                "t"
            )
            .await
            .is_err()
        );
        let (raw, rec) = create_key(&keys, &projects, NewKey::of(&p.project_id), "t")
            .await
            .unwrap();
        assert!(raw.starts_with("wc_") && raw.len() == 67);
        assert_eq!(rec.api_key_hash, hash_api_key(&raw));
        assert_eq!(rec.project_ids, std::slice::from_ref(&p.project_id));
        let stored = keys.0.lock().unwrap().clone();
        assert!(!serde_json::to_string(&stored).unwrap().contains(&raw));

        revoke_key(&keys, &rec.api_key_hash).await.unwrap();
        assert_eq!(
            keys.get(&rec.api_key_hash).await.unwrap().unwrap().status,
            "INACTIVE"
        );
        assert!(revoke_key(&keys, &"0".repeat(64)).await.is_err());
        assert_eq!(
            parse_hash(&rec.api_key_hash.to_uppercase()).unwrap(),
            rec.api_key_hash
        );
        assert!(parse_hash("abc").is_err());
    }
}
