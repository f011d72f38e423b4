//! In-memory implementations of the ports, for handler tests (and as the reference semantics
//! the DynamoDB and local implementations follow).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use wallcrawler_contract::session_doc::SessionDoc;
use wallcrawler_contract::{InternalStatus, SdkStatus};

use crate::error::StoreError;
use crate::model::{ApiKeyRecord, ContextRecord, Project, Record};
use crate::rules::{self, LockedMap};
use crate::stores::*;

/// Session items in memory, keyed by `sessionId`; and projects' usage totals.
#[derive(Default, Clone)]
pub struct MemSessions(
    pub Arc<Mutex<BTreeMap<String, SessionDoc>>>,
    pub Arc<Mutex<BTreeMap<String, Usage>>>,
);

impl MemSessions {
    fn with<T>(&self, f: impl FnOnce(&mut BTreeMap<String, SessionDoc>) -> T) -> T {
        f(&mut self.0.lock().expect("not poisoned"))
    }

    /// The sessions `keep` selects, in id order.
    fn list_where(&self, keep: impl Fn(&SessionDoc) -> bool) -> Vec<SessionDoc> {
        self.with(|m| m.values().filter(|d| keep(d)).cloned().collect())
    }

    /// A conditional update: `rule` changes session `id` and says whether its condition held.
    fn cond(&self, id: &str, rule: impl FnOnce(&mut SessionDoc) -> bool) -> Cond<SessionDoc> {
        self.with(|m| {
            let Some(d) = m.get_mut(id) else {
                return Cond::Failed(None);
            };
            if rule(d) {
                Cond::Done(d.clone())
            } else {
                Cond::Failed(Some(d.clone()))
            }
        })
    }
}

#[async_trait]
impl SessionStore for MemSessions {
    async fn create(&self, doc: SessionDoc) -> DocWrite {
        Ok(self.with(|m| {
            if let Some(cur) = m.get(&doc.session_id) {
                Cond::Failed(Some(cur.clone()))
            } else {
                m.insert(doc.session_id.clone(), doc.clone());
                Cond::Done(doc)
            }
        }))
    }
    async fn get(&self, id: &str) -> StoreResult<Option<SessionDoc>> {
        Ok(self.with(|m| m.get(id).cloned()))
    }
    async fn list_project(&self, project_id: &str, at: PageAt) -> Listing {
        Ok(page_of(self.list_where(|d| d.project_id == project_id), at))
    }
    async fn on_context(&self, context_id: &str) -> Ids {
        Ok(rules::on_context(self.list_where(|_| true), context_id))
    }
    async fn find_by_task(&self, task_arn: &str) -> StoreResult<Option<String>> {
        Ok(self.with(|m| {
            m.values()
                .find(|d| d.ecs_task_arn.as_deref() == Some(task_arn))
                .map(|d| d.session_id.clone())
        }))
    }
    async fn mark_provisioning(&self, id: &str, task_arn: Option<&str>, at: &str) -> DocWrite {
        Ok(self.cond(id, |d| rules::provisioning(d, task_arn, at)))
    }
    async fn mark_terminal(&self, id: &str, to: Terminal<'_>, at: &str) -> DocWrite {
        Ok(self.cond(id, |d| rules::terminal(d, to, at)))
    }
    async fn mark_ended_if_missing(&self, id: &str, at: &str) -> StoreResult<()> {
        self.cond(id, |d| rules::ended_if_missing(d, at));
        Ok(())
    }
    async fn extend_claim(&self, id: &str, to: u64) -> DocWrite {
        Ok(self.cond(id, |d| d.extend_claim(to)))
    }
    async fn end_unserved(&self, id: &str, now: u64, at: &str) -> DocWrite {
        Ok(self.cond(id, |d| d.end_unserved(now, at)))
    }
    async fn expiring(&self, status: SdkStatus, before: u64, limit: usize) -> Ids {
        Ok(rules::expiring(
            self.list_where(|_| true),
            status,
            before,
            limit,
        ))
    }
    /// Marks and adds under the sessions' lock: both or neither.
    async fn count_usage(&self, id: &str, project_id: &str, used: Usage) -> StoreResult<bool> {
        Ok(self.with(|m| {
            let first = m.get_mut(id).is_some_and(rules::mark_counted);
            if first {
                let mut totals = self.1.lock().expect("not poisoned");
                rules::add_usage(&mut totals, project_id, used);
            }
            first
        }))
    }
    async fn usage(&self, project_id: &str) -> StoreResult<Usage> {
        let totals = self.1.lock().expect("not poisoned");
        Ok(totals.get(project_id).copied().unwrap_or_default())
    }
}

/// Records in memory, by key: projects, API keys, contexts and slot sets.
pub struct MemRecords<R>(pub Arc<Mutex<BTreeMap<String, R>>>);

impl<R> Default for MemRecords<R> {
    fn default() -> Self {
        Self(Default::default())
    }
}

impl<R> Clone for MemRecords<R> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<R> MemRecords<R> {
    fn with<T>(&self, f: impl FnOnce(&mut BTreeMap<String, R>) -> T) -> T {
        f(&mut self.0.lock().expect("not poisoned"))
    }
}

/// Project records in memory, keyed by `projectId`.
pub type MemProjects = MemRecords<Project>;

/// API-key records in memory, keyed by the key's hash.
pub type MemKeys = MemRecords<ApiKeyRecord>;

/// Context records in memory, keyed by `contextId`.
pub type MemContexts = MemRecords<ContextRecord>;

#[async_trait]
impl<R: Record> RecordStore<R> for MemRecords<R> {
    async fn get(&self, key: &str) -> StoreResult<Option<R>> {
        Ok(self.with(|m| m.get(key).cloned()))
    }
    async fn put(&self, record: R) -> StoreResult<()> {
        self.with(|m| m.insert(record.key().to_owned(), record));
        Ok(())
    }
}

impl<V: Send> LockedMap<V> for MemRecords<V> {
    fn modify<T>(&self, f: impl FnOnce(&mut BTreeMap<String, V>) -> T) -> StoreResult<T> {
        Ok(self.with(f))
    }
}

/// Projects' slot sets in memory, keyed by `projectId`.
pub type MemSlots = MemRecords<Vec<String>>;

/// Presigned URLs that name the key; deletions recorded.
#[derive(Default, Clone)]
pub struct MemArchives(pub Arc<Mutex<Vec<String>>>);

#[async_trait]
impl ArchiveUrls for MemArchives {
    async fn presign_put(&self, key: &str, ttl_seconds: u64) -> StoreResult<String> {
        Ok(format!("https://archives.test/{key}?expires={ttl_seconds}"))
    }
    async fn presign_get(&self, key: &str, ttl_seconds: u64) -> StoreResult<String> {
        Ok(format!(
            "https://archives.test/get/{key}?expires={ttl_seconds}"
        ))
    }
    async fn delete(&self, key: &str) -> StoreResult<()> {
        self.0.lock().expect("not poisoned").push(key.to_owned());
        Ok(())
    }
}

/// Objects in memory, by key.
#[derive(Default, Clone)]
pub struct MemObjects(pub Arc<Mutex<BTreeMap<String, axum::body::Bytes>>>);

#[async_trait]
impl ObjectStore for MemObjects {
    async fn put(&self, key: &str, body: axum::body::Bytes) -> StoreResult<()> {
        self.0
            .lock()
            .expect("not poisoned")
            .insert(key.to_owned(), body);
        Ok(())
    }
    async fn get(&self, key: &str) -> StoreResult<Option<axum::body::Bytes>> {
        Ok(self.0.lock().expect("not poisoned").get(key).cloned())
    }
    async fn get_at_most(&self, key: &str, max: u64) -> StoreResult<Option<Bounded>> {
        Ok(self.get(key).await?.map(|b| {
            if b.len() as u64 > max {
                Bounded::TooLarge
            } else {
                Bounded::Whole(b)
            }
        }))
    }
    async fn delete(&self, key: &str) -> StoreResult<()> {
        self.0.lock().expect("not poisoned").remove(key);
        Ok(())
    }
    async fn any_under(&self, prefix: &str) -> StoreResult<bool> {
        let m = self.0.lock().expect("not poisoned");
        Ok(m.range(prefix.to_owned()..)
            .next()
            .is_some_and(|(k, _)| k.starts_with(prefix)))
    }
    async fn zip_under(&self, prefix: &str, _: &str, max: u64) -> StoreResult<crate::zips::Zip> {
        let entries: Vec<(String, axum::body::Bytes)> = {
            let m = self.0.lock().expect("not poisoned");
            m.range(prefix.to_owned()..)
                .take_while(|(k, _)| k.starts_with(prefix))
                .filter(|(k, _)| crate::zips::is_entry_name(&k[prefix.len()..]))
                .map(|(k, v)| (k[prefix.len()..].to_owned(), v.clone()))
                .collect()
        };
        let entries = entries
            .into_iter()
            .map(|(k, v)| Ok((k, std::io::Cursor::new(v))));
        let out = crate::zips::write_zip(std::io::Cursor::new(Vec::new()), entries, max)?;
        Ok(crate::zips::Zip::Body(out.into_inner().into()))
    }
    async fn names_under(&self, prefix: &str, max: usize) -> StoreResult<Vec<String>> {
        let m = self.0.lock().expect("not poisoned");
        Ok(m.range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, _)| &k[prefix.len()..])
            .filter(|n| !n.is_empty() && !n.contains('/'))
            .take(max)
            .map(str::to_owned)
            .collect())
    }
}

/// What a [`MemLauncher`] does when asked to launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaunchBehaviour {
    /// Play the controller: write READY with a connect URL at once.
    BecomeReady,
    /// Leave the session starting (PENDING answers).
    StayPending,
    /// Fail to launch.
    Fail,
}

/// Records launches and stops; may play the controller's READY write.
#[derive(Clone)]
pub struct MemLauncher {
    /// The sessions a `BecomeReady` launch marks READY.
    pub sessions: MemSessions,
    /// What the next launch does (tests change it mid-way).
    pub behaviour: Arc<Mutex<LaunchBehaviour>>,
    /// Every launch asked for, in order.
    pub launched: Arc<Mutex<Vec<LaunchSpec>>>,
    /// The session id of every stop asked for, in order.
    pub stopped: Arc<Mutex<Vec<String>>>,
    /// The task ARN each of those stops named, in the same order.
    pub stopped_tasks: Arc<Mutex<Vec<Option<String>>>>,
}

impl MemLauncher {
    /// A launcher over `sessions` that does `behaviour` on each launch.
    pub fn new(sessions: MemSessions, behaviour: LaunchBehaviour) -> Self {
        Self {
            sessions,
            behaviour: Arc::new(Mutex::new(behaviour)),
            launched: Default::default(),
            stopped: Default::default(),
            stopped_tasks: Default::default(),
        }
    }
}

#[async_trait]
impl Launcher for MemLauncher {
    async fn launch(&self, spec: LaunchSpec) -> StoreResult<Option<String>> {
        let behaviour = *self.behaviour.lock().expect("not poisoned");
        self.launched
            .lock()
            .expect("not poisoned")
            .push(spec.clone());
        match behaviour {
            LaunchBehaviour::Fail => Err(StoreError::unavailable("the task launcher")),
            LaunchBehaviour::StayPending => Ok(Some(format!("arn:test:task/{}", spec.session_id))),
            LaunchBehaviour::BecomeReady => {
                let (sessions, id) = (self.sessions.clone(), spec.session_id.clone());
                tokio::spawn(async move {
                    sessions.with(|m| {
                        if let Some(d) = m.get_mut(&id) {
                            d.set_status(InternalStatus::Ready);
                            d.public_ip = Some("203.0.113.10".into());
                            d.proxy_port = Some(9223);
                        }
                    });
                });
                Ok(Some(format!("arn:test:task/{}", spec.session_id)))
            }
        }
    }
    async fn stop(&self, session_id: &str, task_arn: Option<&str>) -> StoreResult<()> {
        self.stopped
            .lock()
            .expect("not poisoned")
            .push(session_id.to_owned());
        self.stopped_tasks
            .lock()
            .expect("not poisoned")
            .push(task_arn.map(str::to_owned));
        Ok(())
    }
}
