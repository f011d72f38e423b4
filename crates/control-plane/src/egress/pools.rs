//! The operator's managed proxy pools ([`ManagedProxies`]): what Browserbase's managed proxies
//! (`proxies: true`, `{type: "browserbase", geolocation}`) map to on a platform that has none
//! of Browserbase's. A JSON object of pools, each named `"default"` or by an ISO 3166-1
//! alpha-2 country code in upper case, each a non-empty array of upstream proxies:
//!
//! ```json
//! {"default": [{"server": "http://proxy.example:3128", "username": "u", "password": "p"}],
//!  "US": [{"server": "socks5://us.proxy.example:1080"}]}
//! ```
//!
//! Read once at start (`serve --managed-proxies FILE` or `MANAGED_PROXIES_FILE` locally, the
//! secret `MANAGED_PROXIES_SECRET_ARN` on AWS); every entry is checked as a create's external
//! proxy is, and a problem is a start-up error naming the pool and the index, never a value.
//! A session's server is chosen within its pool by its id ([`ManagedProxies::pick`]), so a
//! retried launch of the same session goes through the same proxy.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use sha2::{Digest, Sha256};
use wallcrawler_contract::egress::ProxyServer;

use super::{Bad, proxy_server};

/// The pool of `proxies: true` and of a managed entry without `geolocation`.
pub const DEFAULT_POOL: &str = "default";

/// Why the managed proxy pools could not be read. Messages name the pool and index, never a
/// server or a credential.
#[derive(Debug, thiserror::Error)]
pub enum PoolsError {
    /// The file or secret could not be read.
    #[error("reading the managed proxies ({what}) failed")]
    Read {
        /// The file's path, or the secret's variable.
        what: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Not JSON (serde_json's syntax message: a position, never the input).
    #[error("the managed proxies are not JSON")]
    Json(#[source] serde_json::Error),
    /// The top level is not an object of pools.
    #[error(
        "the managed proxies must be a JSON object of pools, such as \
         {{\"default\": [{{\"server\": \"http://proxy.example:3128\"}}], \"US\": [...]}}"
    )]
    NotObject,
    /// A pool's name is neither `default` nor a country code.
    #[error(
        "managed proxy pool {0:?} must be named \"default\" or by an ISO 3166-1 alpha-2 country \
         code in upper case, such as \"US\""
    )]
    BadName(String),
    /// A pool is not a non-empty array.
    #[error("managed proxy pool {0:?} must be a non-empty array of proxies")]
    NotPool(String),
    /// An entry of a pool is refused.
    #[error("managed proxy {pool}[{index}]{why}")]
    Entry {
        /// The pool's name.
        pool: String,
        /// The entry's index in it.
        index: usize,
        /// What is wrong (` server is not a URL (…)`, `.username must be …`).
        why: String,
    },
}

/// The managed proxy pools, by name (`default`, `US`, …). Cheap to clone; its `Debug` shows
/// the pools' names and sizes only.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ManagedProxies(Arc<BTreeMap<String, Vec<ProxyServer>>>);

impl std::fmt::Debug for ManagedProxies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.0.iter().map(|(k, v)| (k, v.len())))
            .finish()
    }
}

/// Whether `name` may name a pool: `default`, or two upper-case ASCII letters.
fn pool_name(name: &str) -> bool {
    name == DEFAULT_POOL || (name.len() == 2 && name.bytes().all(|b| b.is_ascii_uppercase()))
}

impl ManagedProxies {
    /// Parses and checks the pools' JSON.
    pub fn parse(text: &str) -> Result<Self, PoolsError> {
        let v: Value = serde_json::from_str(text).map_err(PoolsError::Json)?;
        let Value::Object(pools) = v else {
            return Err(PoolsError::NotObject);
        };
        let mut out = BTreeMap::new();
        for (name, pool) in pools {
            if !pool_name(&name) {
                return Err(PoolsError::BadName(name));
            }
            let entries = match pool {
                Value::Array(a) if !a.is_empty() => a,
                _ => return Err(PoolsError::NotPool(name)),
            };
            let servers = entries
                .iter()
                .enumerate()
                .map(|(index, e)| {
                    entry(e).map_err(|b| PoolsError::Entry {
                        pool: name.clone(),
                        index,
                        why: b.after_path(),
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            out.insert(name, servers);
        }
        Ok(Self(Arc::new(out)))
    }

    /// Reads and checks the pools' file.
    pub fn read_file(path: &Path) -> Result<Self, PoolsError> {
        let text = std::fs::read_to_string(path).map_err(|e| PoolsError::Read {
            what: PathBuf::from(path).display().to_string(),
            source: e.into(),
        })?;
        Self::parse(&text)
    }

    /// Whether there is no pool at all.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The pools' names and sizes (`default: 2, US: 1`), for the start-up log.
    pub fn summary(&self) -> String {
        self.0
            .iter()
            .map(|(k, v)| format!("{k}: {}", v.len()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Session `session_id`'s server of pool `name`, if there is such a pool: the same one for
    /// the same session (SHA-256 of its id, modulo the pool's size).
    pub fn pick(&self, name: &str, session_id: &str) -> Option<ProxyServer> {
        let pool = self.0.get(name)?;
        let digest = Sha256::digest(session_id.as_bytes());
        let n = u64::from_be_bytes(digest[..8].try_into().expect("8 bytes"));
        let i = usize::try_from(n % pool.len() as u64).expect("below the pool's size");
        pool.get(i).cloned()
    }
}

/// One pool entry: `{server, username?, password?}`, nothing else.
fn entry(e: &Value) -> Result<ProxyServer, Bad> {
    let Value::Object(m) = e else {
        return Err(Bad::at("", "must be an object with a server"));
    };
    super::only_fields(m, &["server", "username", "password"], "")?;
    proxy_server(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MARK: &str = "pool-secret-7d1f";

    #[test]
    fn pools_parse_by_country_and_pick_by_session() {
        let p = ManagedProxies::parse(&format!(
            r#"{{"default": [{{"server": "http://a.example:3128", "username": "u", "password": "{MARK}"}},
                            {{"server": "socks5://b.example"}}],
                "US": [{{"server": "https://us.example:8443"}}]}}"#
        ))
        .unwrap();
        assert_eq!(p.summary(), "US: 1, default: 2");
        assert!(!format!("{p:?}").contains(MARK));
        assert_eq!(
            p.pick("US", "sess_1").unwrap().display(),
            "https://us.example:8443"
        );
        assert_eq!(p.pick("DE", "sess_1"), None);
        // Stable per session, and spread over the pool.
        let servers: std::collections::BTreeSet<String> = (0..32)
            .map(|i| {
                let id = format!("sess_{i}");
                let s = p.pick(DEFAULT_POOL, &id).unwrap();
                assert_eq!(p.pick(DEFAULT_POOL, &id).unwrap(), s);
                s.display()
            })
            .collect();
        assert_eq!(servers.len(), 2, "{servers:?}");
        let a = ManagedProxies::parse(
            r#"{"default":[{"server":"http://a.example:1","username":"u","password":"p"}]}"#,
        )
        .unwrap();
        assert_eq!(
            a.pick(DEFAULT_POOL, "sess_x").unwrap().password.as_deref(),
            Some("p")
        );
        assert!(ManagedProxies::parse("{}").unwrap().is_empty());
    }

    #[test]
    fn a_bad_pool_names_its_name_and_index_and_never_a_secret() {
        let cases = [
            ("not json", "the managed proxies are not JSON"),
            (
                "[]",
                "the managed proxies must be a JSON object of pools, such as {\"default\": \
                 [{\"server\": \"http://proxy.example:3128\"}], \"US\": [...]}",
            ),
            (
                r#"{"us": [{"server": "http://a:1"}]}"#,
                "managed proxy pool \"us\" must be named \"default\" or by an ISO 3166-1 \
                 alpha-2 country code in upper case, such as \"US\"",
            ),
            (
                r#"{"US": []}"#,
                "managed proxy pool \"US\" must be a non-empty array of proxies",
            ),
            (
                r#"{"US": {"server": "http://a:1"}}"#,
                "managed proxy pool \"US\" must be a non-empty array of proxies",
            ),
            (
                r#"{"DE": [{"server": "http://a:1"}, {"server": "ftp://a:1", "username": "u", "password": "MARK"}]}"#,
                "managed proxy DE[1].server has the scheme \"ftp\"; supported: http://, \
                 https://, socks5://",
            ),
            (
                r#"{"default": [{"server": "http://a:1", "password": "MARK"}]}"#,
                "managed proxy default[0] has a password without a username",
            ),
            (
                r#"{"default": [{"server": "http://MARK@a:1"}]}"#,
                "managed proxy default[0].server carries credentials in the URL; give them \
                 as username and password",
            ),
            (
                r#"{"default": [{"url": "http://a:1", "password": "MARK"}]}"#,
                "managed proxy default[0] has unknown fields: url (expected server, username, \
                 password)",
            ),
            (
                r#"{"default": [{"password": "MARK", "username": "u"}]}"#,
                "managed proxy default[0].server is required",
            ),
            (
                r#"{"default": ["http://u:MARK@a:1"]}"#,
                "managed proxy default[0] must be an object with a server",
            ),
            (
                r#"{"default": [{"server": "http://a:1", "username": 7, "password": "MARK"}]}"#,
                "managed proxy default[0].username must be a string",
            ),
        ];
        for (json, want) in cases {
            let e = ManagedProxies::parse(json).unwrap_err().to_string();
            assert_eq!(e, want, "{json}");
            assert!(!e.contains("MARK"), "{e}");
        }
    }

    #[test]
    fn a_missing_file_is_named() {
        let e = ManagedProxies::read_file(Path::new("/nonexistent/pools.json")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "reading the managed proxies (/nonexistent/pools.json) failed"
        );
    }
}
