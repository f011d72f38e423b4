//! In-memory implementations of the ports, for handler tests (and as the reference semantics
//! the DynamoDB and local implementations follow).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use wallcrawler_contract::session_doc::SessionDoc;
use wallcrawler_contract::{Claims, InternalStatus, SigningKey};

use crate::model::{ApiKeyRecord, ContextRecord, Project};
use crate::ports::*;

/// Applies the shared conditional rules to a document: the one place they are written down
/// for the non-DynamoDB stores.
pub mod rules {
    use super::*;

    /// CREATING → PROVISIONING with the task's ARN; `false` (nothing written) from any other
    /// status.
    pub fn provisioning(d: &mut SessionDoc, task_arn: Option<&str>, at: &str) -> bool {
        if d.internal() != Some(InternalStatus::Creating) {
            return false;
        }
        d.set_status(InternalStatus::Provisioning);
        if let Some(a) = task_arn {
            d.ecs_task_arn = Some(a.to_owned());
        }
        d.updated_at = Some(at.to_owned());
        true
    }

    /// Sets `status` unless the session is terminal already (then its status is kept); with
    /// `ended`, also sets a missing `endedAt`. Returns whether anything changed.
    pub fn terminal(
        d: &mut SessionDoc,
        status: InternalStatus,
        reason: Option<&str>,
        at: &str,
        ended: bool,
    ) -> bool {
        let already = d.internal().is_some_and(InternalStatus::is_terminal);
        let add_end = ended && d.ended_at.is_none();
        if already && !add_end {
            return false;
        }
        if !already {
            d.set_status(status);
            if let Some(r) = reason {
                d.termination_reason = Some(r.to_owned());
            }
        }
        if add_end {
            d.ended_at = Some(at.to_owned());
        }
        d.updated_at = Some(at.to_owned());
        true
    }

    /// A project's slot set: add `session_id` unless `limit` ids are held (one already held
    /// by this session is taken again).
    pub fn take_slot(held: &mut Vec<String>, session_id: &str, limit: u64) -> Slot {
        if held.iter().any(|h| h == session_id) {
            return Slot::Taken;
        }
        if held.len() as u64 >= limit {
            return Slot::Full(held.clone());
        }
        held.push(session_id.to_owned());
        Slot::Taken
    }

    /// A context's writer lease: free, already this session's, or `replacing`'s → taken.
    pub fn take_writer(c: &mut ContextRecord, session_id: &str, replacing: Option<&str>) -> Lease {
        match c.writer_session_id.as_deref() {
            None => {}
            Some(w) if w == session_id || Some(w) == replacing => {}
            Some(w) => return Lease::Held(w.to_owned()),
        }
        c.writer_session_id = Some(session_id.to_owned());
        Lease::Taken
    }

    /// Clears the lease if `session_id` holds it; whether it did.
    pub fn release_writer(c: &mut ContextRecord, session_id: &str) -> bool {
        let held = c.writer_session_id.as_deref() == Some(session_id);
        if held {
            c.writer_session_id = None;
        }
        held
    }
}

/// Session items in memory, keyed by `sessionId`.
#[derive(Default, Clone)]
pub struct MemSessions(pub Arc<Mutex<BTreeMap<String, SessionDoc>>>);

impl MemSessions {
    fn with<T>(&self, f: impl FnOnce(&mut BTreeMap<String, SessionDoc>) -> T) -> T {
        f(&mut self.0.lock().expect("not poisoned"))
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

impl SessionRepo for MemSessions {
    fn create(&self, doc: SessionDoc) -> BoxFuture<'_, PortResult<Cond<SessionDoc>>> {
        let r = self.with(|m| {
            if let Some(cur) = m.get(&doc.session_id) {
                Cond::Failed(Some(cur.clone()))
            } else {
                m.insert(doc.session_id.clone(), doc.clone());
                Cond::Done(doc)
            }
        });
        Box::pin(async move { Ok(r) })
    }
    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, PortResult<Option<SessionDoc>>> {
        let r = self.with(|m| m.get(id).cloned());
        Box::pin(async move { Ok(r) })
    }
    fn list_project<'a>(
        &'a self,
        project_id: &'a str,
    ) -> BoxFuture<'a, PortResult<Vec<SessionDoc>>> {
        let mut r: Vec<_> = self.with(|m| {
            m.values()
                .filter(|d| d.project_id == project_id)
                .cloned()
                .collect()
        });
        r.sort_by(|a, b| a.created_at.cmp(&b.created_at));
        Box::pin(async move { Ok(r) })
    }
    fn list_context<'a>(
        &'a self,
        context_id: &'a str,
    ) -> BoxFuture<'a, PortResult<Vec<SessionDoc>>> {
        let r = self.with(|m| {
            m.values()
                .filter(|d| d.context_id.as_deref() == Some(context_id))
                .cloned()
                .collect()
        });
        Box::pin(async move { Ok(r) })
    }
    fn find_by_task<'a>(&'a self, task_arn: &'a str) -> BoxFuture<'a, PortResult<Option<String>>> {
        let r = self.with(|m| {
            m.values()
                .find(|d| d.ecs_task_arn.as_deref() == Some(task_arn))
                .map(|d| d.session_id.clone())
        });
        Box::pin(async move { Ok(r) })
    }
    fn mark_provisioning<'a>(
        &'a self,
        id: &'a str,
        task_arn: Option<&'a str>,
        at: &'a str,
    ) -> BoxFuture<'a, PortResult<Cond<SessionDoc>>> {
        let r = self.cond(id, |d| rules::provisioning(d, task_arn, at));
        Box::pin(async move { Ok(r) })
    }
    fn mark_terminal<'a>(
        &'a self,
        id: &'a str,
        status: InternalStatus,
        reason: Option<&'a str>,
        at: &'a str,
        ended: bool,
    ) -> BoxFuture<'a, PortResult<Cond<SessionDoc>>> {
        let r = self.cond(id, |d| rules::terminal(d, status, reason, at, ended));
        Box::pin(async move { Ok(r) })
    }
    fn mark_ended_if_missing<'a>(
        &'a self,
        id: &'a str,
        at: &'a str,
    ) -> BoxFuture<'a, PortResult<()>> {
        self.with(|m| {
            if let Some(d) = m.get_mut(id)
                && d.ended_at.is_none()
            {
                d.ended_at = Some(at.to_owned());
            }
        });
        Box::pin(async { Ok(()) })
    }
}

/// Project records in memory, keyed by `projectId`.
#[derive(Default, Clone)]
pub struct MemProjects(pub Arc<Mutex<BTreeMap<String, Project>>>);

impl ProjectRepo for MemProjects {
    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, PortResult<Option<Project>>> {
        let r = self.0.lock().expect("not poisoned").get(id).cloned();
        Box::pin(async move { Ok(r) })
    }
    fn put(&self, p: Project) -> BoxFuture<'_, PortResult<()>> {
        self.0
            .lock()
            .expect("not poisoned")
            .insert(p.project_id.clone(), p);
        Box::pin(async { Ok(()) })
    }
}

/// API-key records in memory, keyed by the key's hash.
#[derive(Default, Clone)]
pub struct MemKeys(pub Arc<Mutex<BTreeMap<String, ApiKeyRecord>>>);

impl KeyRepo for MemKeys {
    fn get<'a>(&'a self, hash: &'a str) -> BoxFuture<'a, PortResult<Option<ApiKeyRecord>>> {
        let r = self.0.lock().expect("not poisoned").get(hash).cloned();
        Box::pin(async move { Ok(r) })
    }
    fn put(&self, k: ApiKeyRecord) -> BoxFuture<'_, PortResult<()>> {
        self.0
            .lock()
            .expect("not poisoned")
            .insert(k.api_key_hash.clone(), k);
        Box::pin(async { Ok(()) })
    }
    fn set_status<'a>(&'a self, hash: &'a str, status: &'a str) -> BoxFuture<'a, PortResult<bool>> {
        let r = match self.0.lock().expect("not poisoned").get_mut(hash) {
            Some(k) => {
                k.status = status.to_owned();
                true
            }
            None => false,
        };
        Box::pin(async move { Ok(r) })
    }
}

/// Context records in memory, keyed by `contextId`.
#[derive(Default, Clone)]
pub struct MemContexts(pub Arc<Mutex<BTreeMap<String, ContextRecord>>>);

impl ContextRepo for MemContexts {
    fn create(&self, c: ContextRecord) -> BoxFuture<'_, PortResult<()>> {
        self.0
            .lock()
            .expect("not poisoned")
            .insert(c.context_id.clone(), c);
        Box::pin(async { Ok(()) })
    }
    fn get<'a>(&'a self, id: &'a str) -> BoxFuture<'a, PortResult<Option<ContextRecord>>> {
        let r = self.0.lock().expect("not poisoned").get(id).cloned();
        Box::pin(async move { Ok(r) })
    }
    fn touch<'a>(&'a self, id: &'a str, at: &'a str) -> BoxFuture<'a, PortResult<()>> {
        if let Some(c) = self.0.lock().expect("not poisoned").get_mut(id) {
            c.updated_at = at.to_owned();
        }
        Box::pin(async { Ok(()) })
    }
    fn delete<'a>(&'a self, id: &'a str) -> BoxFuture<'a, PortResult<()>> {
        self.0.lock().expect("not poisoned").remove(id);
        Box::pin(async { Ok(()) })
    }
    fn take_writer<'a>(
        &'a self,
        id: &'a str,
        session_id: &'a str,
        replacing: Option<&'a str>,
    ) -> BoxFuture<'a, PortResult<Lease>> {
        let r = match self.0.lock().expect("not poisoned").get_mut(id) {
            Some(c) => rules::take_writer(c, session_id, replacing),
            None => Lease::NoContext,
        };
        Box::pin(async move { Ok(r) })
    }
    fn release_writer<'a>(
        &'a self,
        id: &'a str,
        session_id: &'a str,
    ) -> BoxFuture<'a, PortResult<()>> {
        if let Some(c) = self.0.lock().expect("not poisoned").get_mut(id) {
            rules::release_writer(c, session_id);
        }
        Box::pin(async { Ok(()) })
    }
}

/// Projects' slot sets.
#[derive(Default, Clone)]
pub struct MemSlots(pub Arc<Mutex<BTreeMap<String, Vec<String>>>>);

impl SlotRepo for MemSlots {
    fn take<'a>(
        &'a self,
        project_id: &'a str,
        session_id: &'a str,
        limit: u64,
    ) -> BoxFuture<'a, PortResult<Slot>> {
        let r = rules::take_slot(
            self.0
                .lock()
                .expect("not poisoned")
                .entry(project_id.to_owned())
                .or_default(),
            session_id,
            limit,
        );
        Box::pin(async move { Ok(r) })
    }
    fn give_back<'a>(
        &'a self,
        project_id: &'a str,
        session_id: &'a str,
    ) -> BoxFuture<'a, PortResult<()>> {
        if let Some(held) = self.0.lock().expect("not poisoned").get_mut(project_id) {
            held.retain(|h| h != session_id);
        }
        Box::pin(async { Ok(()) })
    }
}

/// Presigned URLs that name the key; deletions recorded.
#[derive(Default, Clone)]
pub struct MemArchives(pub Arc<Mutex<Vec<String>>>);

impl ArchiveUrls for MemArchives {
    fn presign_put<'a>(
        &'a self,
        key: &'a str,
        ttl_seconds: u64,
    ) -> BoxFuture<'a, PortResult<String>> {
        Box::pin(async move { Ok(format!("https://archives.test/{key}?expires={ttl_seconds}")) })
    }
    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, PortResult<()>> {
        self.0.lock().expect("not poisoned").push(key.to_owned());
        Box::pin(async { Ok(()) })
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
}

impl MemLauncher {
    /// A launcher over `sessions` that does `behaviour` on each launch.
    pub fn new(sessions: MemSessions, behaviour: LaunchBehaviour) -> Self {
        Self {
            sessions,
            behaviour: Arc::new(Mutex::new(behaviour)),
            launched: Default::default(),
            stopped: Default::default(),
        }
    }
}

impl Launcher for MemLauncher {
    fn launch(&self, spec: LaunchSpec) -> BoxFuture<'_, PortResult<Option<String>>> {
        let behaviour = *self.behaviour.lock().expect("not poisoned");
        self.launched
            .lock()
            .expect("not poisoned")
            .push(spec.clone());
        let sessions = self.sessions.clone();
        Box::pin(async move {
            match behaviour {
                LaunchBehaviour::Fail => Err(crate::error::PortError::Unavailable(
                    "the task launcher".into(),
                )),
                LaunchBehaviour::StayPending => {
                    Ok(Some(format!("arn:test:task/{}", spec.session_id)))
                }
                LaunchBehaviour::BecomeReady => {
                    let id = spec.session_id.clone();
                    tokio::spawn(async move {
                        sessions.with(|m| {
                            if let Some(d) = m.get_mut(&id) {
                                d.set_status(InternalStatus::Ready);
                                d.public_ip = Some("203.0.113.10".into());
                                d.connect_url = Some(format!(
                                    "ws://203.0.113.10:9223?signingKey={}",
                                    d.signing_key.clone().unwrap_or_default()
                                ));
                            }
                        });
                    });
                    Ok(Some(format!("arn:test:task/{}", spec.session_id)))
                }
            }
        })
    }
    fn stop<'a>(
        &'a self,
        session_id: &'a str,
        _task_arn: Option<&'a str>,
    ) -> BoxFuture<'a, PortResult<()>> {
        self.stopped
            .lock()
            .expect("not poisoned")
            .push(session_id.to_owned());
        Box::pin(async { Ok(()) })
    }
}

/// Signs with a fixed key.
pub struct StaticSigner(pub SigningKey);

impl Signer for StaticSigner {
    fn sign(&self, claims: Claims) -> BoxFuture<'_, PortResult<String>> {
        let t = claims.mint(&self.0);
        Box::pin(async move { Ok(t) })
    }
}
