//! Records the control plane keeps besides sessions (which use the shared [`SessionDoc`]), and
//! the Browserbase-shaped JSON it answers with.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use wallcrawler_contract::session_doc::SessionDoc;

/// A record kept in a table addressed by one string key (the stores' generic part).
pub trait Record: Serialize + serde::de::DeserializeOwned + Clone + Send + Sync + 'static {
    /// The key's attribute name (`projectId`, …).
    const KEY: &'static str;
    /// What one record is called in errors ("project").
    const WHAT: &'static str;
    /// What its table is called in errors ("the projects table").
    const TABLE: &'static str;
    /// This record's key.
    fn key(&self) -> &str;
}

/// `wallcrawler-projects` item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Project {
    /// `projectId`: the table's key.
    pub project_id: String,
    /// `name`: shown to people, not unique.
    pub name: String,
    /// `ownerId`: who owns the project, free-form; absent when not recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_id: Option<String>,
    /// `defaultTimeout`: a session's timeout in seconds when the request gives none.
    #[serde(deserialize_with = "wallcrawler_contract::whole::required")]
    pub default_timeout: u64,
    /// `concurrency`: how many sessions may be live at once (beyond it, 429).
    #[serde(deserialize_with = "wallcrawler_contract::whole::required")]
    pub concurrency: u64,
    /// ACTIVE or INACTIVE.
    pub status: String,
    /// `createdAt`: ISO 8601.
    pub created_at: String,
    /// `updatedAt`: ISO 8601.
    pub updated_at: String,
}

impl Record for Project {
    const KEY: &'static str = "projectId";
    const WHAT: &'static str = "project";
    const TABLE: &'static str = "the projects table";
    fn key(&self) -> &str {
        &self.project_id
    }
}

impl Record for ApiKeyRecord {
    const KEY: &'static str = "apiKeyHash";
    const WHAT: &'static str = "API key";
    const TABLE: &'static str = "the API keys table";
    fn key(&self) -> &str {
        &self.api_key_hash
    }
}

impl Record for ContextRecord {
    const KEY: &'static str = "contextId";
    const WHAT: &'static str = "context";
    const TABLE: &'static str = "the contexts table";
    fn key(&self) -> &str {
        &self.context_id
    }
}

impl Project {
    /// The project may be used (`status` is `ACTIVE`).
    pub fn is_active(&self) -> bool {
        self.status == "ACTIVE"
    }

    /// The project as `GET /v1/projects/{id}` answers it.
    pub fn to_api(&self) -> Value {
        json!({
            "id": self.project_id,
            "name": self.name,
            "ownerId": self.owner_id.clone().unwrap_or_default(),
            "defaultTimeout": self.default_timeout,
            "concurrency": self.concurrency,
            "createdAt": self.created_at,
            "updatedAt": self.updated_at,
        })
    }
}

/// `wallcrawler-api-keys` item (the raw key is never stored).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiKeyRecord {
    /// SHA-256 of the raw key, lower-case hex.
    pub api_key_hash: String,
    /// `keyId`: a public name for the key (`key_<hex>`), safe to show; the hash is the table's key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
    /// `projectId`: the key's default project.
    pub project_id: String,
    /// `projectIds`: every project the key may select with `x-wc-project-id` (besides `projectId`).
    #[serde(default)]
    pub project_ids: Vec<String>,
    /// `name`: a label given at creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// ACTIVE or INACTIVE.
    pub status: String,
    /// `createdAt`: ISO 8601.
    pub created_at: String,
}

/// `wallcrawler-contexts` item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContextRecord {
    /// `contextId`: the table's key, `ctx_<uuid>`.
    pub context_id: String,
    /// `projectId`: the owning project.
    pub project_id: String,
    /// `storageKey`: the archive's S3 key, `<projectId>/<contextId>/profile.tar.gz`.
    pub storage_key: String,
    /// `status`: `CREATED` when made by the API.
    pub status: String,
    /// `createdAt`: ISO 8601.
    pub created_at: String,
    /// `updatedAt`: ISO 8601.
    pub updated_at: String,
    /// The persisting session that holds the context's writer lease (`writerSessionId`); the
    /// lease is free once that session has `endedAt` (see the `limits` module).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writer_session_id: Option<String>,
}

impl ContextRecord {
    /// The context as `GET /v1/contexts/{id}` answers it.
    pub fn to_api(&self) -> Value {
        json!({ "id": self.context_id, "projectId": self.project_id, "createdAt": self.created_at, "updatedAt": self.updated_at })
    }
}

/// SHA-256 hex of a raw API key.
pub fn hash_api_key(raw: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(raw.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Browserbase's session object (timestamps as ISO 8601 strings).
pub fn session_to_api(d: &SessionDoc) -> Value {
    let mut v = json!({
        "id": d.session_id,
        "createdAt": d.created_at,
        "updatedAt": d.updated_at.clone().unwrap_or_else(|| d.created_at.clone()),
        "projectId": d.project_id,
        "startedAt": d.started_at.clone().unwrap_or_else(|| d.created_at.clone()),
        "endedAt": d.ended_at,
        "expiresAt": wallcrawler_contract::time::iso8601_millis(d.expires_at * 1000),
        "status": d.status,
        "proxyBytes": d.proxy_bytes.unwrap_or(0),
        "keepAlive": d.keep_alive,
        "region": d.region,
        "contextId": d.context_id,
        "userMetadata": d.user_metadata.clone().unwrap_or_else(|| json!({})),
    });
    if let Some(ip) = &d.public_ip {
        v["publicIp"] = json!(ip);
    }
    v
}

/// The create answer: the session plus how to connect (while it is running).
pub fn session_create_to_api(d: &SessionDoc) -> Value {
    let mut v = session_to_api(d);
    if d.status == "RUNNING" {
        v["connectUrl"] = json!(d.client_connect_url());
        v["signingKey"] = json!(d.signing_key);
        v["seleniumRemoteUrl"] = Value::Null;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_hash_is_sha256_hex() {
        assert_eq!(
            hash_api_key("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn pending_sessions_carry_no_connect_url() {
        let mut d = SessionDoc {
            session_id: "sess_1".into(),
            connect_url: Some("ws://x".into()),
            signing_key: Some("t".into()),
            ..Default::default()
        };
        d.set_status(wallcrawler_contract::InternalStatus::Provisioning);
        let v = session_create_to_api(&d);
        assert_eq!(v["status"], "PENDING");
        assert!(v.get("connectUrl").is_none() && v.get("signingKey").is_none());
        d.set_status(wallcrawler_contract::InternalStatus::Ready);
        assert_eq!(session_create_to_api(&d)["connectUrl"], "ws://x");
    }
}
