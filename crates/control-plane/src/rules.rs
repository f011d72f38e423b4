//! The conditional rules of the stores that are not DynamoDB (local files, memory), written
//! once: each changes a record in place and says whether its condition held. The DynamoDB
//! stores express the same rules as condition expressions. The stores over one locked map
//! ([`LockedMap`]: in memory, in a local file) are written here once.

use std::collections::BTreeMap;

use wallcrawler_contract::session_doc::SessionDoc;
use wallcrawler_contract::{InternalStatus, SdkStatus};

use async_trait::async_trait;

use crate::model::{ApiKeyRecord, ContextRecord};
use crate::stores::{
    ContextStore, KeyStore, Lease, RecordStore, Slot, SlotStore, StoreResult, Terminal, Usage,
};

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

/// Sets `to.status` unless the session is terminal already (then its status is kept); with
/// `to.ended`, also sets a missing `endedAt`. Returns whether anything changed.
pub fn terminal(d: &mut SessionDoc, to: Terminal<'_>, at: &str) -> bool {
    let already = d.internal().is_some_and(InternalStatus::is_terminal);
    let add_end = to.ended && d.ended_at.is_none();
    if already && !add_end {
        return false;
    }
    if !already {
        d.set_status(to.status);
        if let Some(r) = to.reason {
            d.termination_reason = Some(r.to_owned());
        }
    }
    if add_end {
        d.ended_at = Some(at.to_owned());
    }
    d.updated_at = Some(at.to_owned());
    true
}

/// Sets a missing `endedAt` (orphaned tasks); whether it was missing.
pub fn ended_if_missing(d: &mut SessionDoc, at: &str) -> bool {
    let missing = d.ended_at.is_none();
    if missing {
        d.ended_at = Some(at.to_owned());
    }
    missing
}

/// The index query of [`SessionStore::expiring`](crate::stores::SessionStore::expiring) over
/// `all`: up to `limit` ids whose `status` is `status` and `expiresAt` before `before`,
/// earliest expiry first (ties by id).
pub fn expiring(all: Vec<SessionDoc>, status: SdkStatus, before: u64, limit: usize) -> Vec<String> {
    let mut due: Vec<SessionDoc> = all
        .into_iter()
        .filter(|d| d.status == status.as_str() && d.expires_at < before)
        .collect();
    due.sort_by(|a, b| {
        a.expires_at
            .cmp(&b.expires_at)
            .then(a.session_id.cmp(&b.session_id))
    });
    due.into_iter().take(limit).map(|d| d.session_id).collect()
}

/// Marks the session's usage counted; whether it was not yet (then the caller adds it).
pub fn mark_counted(d: &mut SessionDoc) -> bool {
    let first = d.usage_counted != Some(true);
    d.usage_counted = Some(true);
    first
}

/// Adds `used` to `project_id`'s total in `totals`.
pub fn add_usage(totals: &mut BTreeMap<String, Usage>, project_id: &str, used: Usage) {
    let t = totals.entry(project_id.to_owned()).or_default();
    t.browser_minutes += used.browser_minutes;
    t.proxy_bytes += used.proxy_bytes;
}

/// Projects' slot sets: project id → the ids of the sessions holding its slots.
pub type SlotSets = BTreeMap<String, Vec<String>>;

/// Takes one of `project_id`'s slots for `session_id` ([`take_slot_in`]).
pub fn take_slot(sets: &mut SlotSets, project_id: &str, session_id: &str, limit: u64) -> Slot {
    take_slot_in(
        sets.entry(project_id.to_owned()).or_default(),
        session_id,
        limit,
    )
}

/// Gives back `session_id`'s slot of `project_id` (idempotent); an emptied set is removed.
pub fn give_back_slot(sets: &mut SlotSets, project_id: &str, session_id: &str) {
    if let Some(held) = sets.get_mut(project_id) {
        held.retain(|h| h != session_id);
        if held.is_empty() {
            sets.remove(project_id);
        }
    }
}

/// A project's slot set: add `session_id` unless `limit` ids are held (one already held
/// by this session is taken again).
pub fn take_slot_in(held: &mut Vec<String>, session_id: &str, limit: u64) -> Slot {
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

/// Sets key `hash`'s status; false when there is no such key.
pub fn set_status(keys: &mut BTreeMap<String, ApiKeyRecord>, hash: &str, status: &str) -> bool {
    match keys.get_mut(hash) {
        Some(k) => {
            k.status = status.to_owned();
            true
        }
        None => false,
    }
}

/// Sets context `id`'s `updatedAt` (nothing when there is no such context).
pub fn touch(contexts: &mut BTreeMap<String, ContextRecord>, id: &str, at: &str) {
    if let Some(c) = contexts.get_mut(id) {
        c.updated_at = at.to_owned();
    }
}

/// [`take_writer`] of context `id`; `NoContext` when there is none.
pub fn take_writer_of(
    contexts: &mut BTreeMap<String, ContextRecord>,
    id: &str,
    session_id: &str,
    replacing: Option<&str>,
) -> Lease {
    match contexts.get_mut(id) {
        Some(c) => take_writer(c, session_id, replacing),
        None => Lease::NoContext,
    }
}

/// [`release_writer`] of context `id`, if there is one.
pub fn release_writer_of(
    contexts: &mut BTreeMap<String, ContextRecord>,
    id: &str,
    session_id: &str,
) {
    if let Some(c) = contexts.get_mut(id) {
        release_writer(c, session_id);
    }
}

/// Removes context `id` if it has no writer, or its writer is `writer` (one seen to have
/// ended); whether the condition held (also when there is no such context).
pub fn delete_context_of(
    contexts: &mut BTreeMap<String, ContextRecord>,
    id: &str,
    writer: Option<&str>,
) -> bool {
    match contexts.get(id) {
        Some(c) if c.writer_session_id.is_some() && c.writer_session_id.as_deref() != writer => {
            false
        }
        Some(_) => contexts.remove(id).is_some(),
        None => true,
    }
}

/// The ids of `docs` on context `context_id` without `endedAt`: what DynamoDB's
/// `contextId-index` answers, for the stores that have no index.
pub fn on_context(docs: Vec<SessionDoc>, context_id: &str) -> Vec<String> {
    docs.into_iter()
        .filter(|d| d.context_id.as_deref() == Some(context_id) && d.ended_at.is_none())
        .map(|d| d.session_id)
        .collect()
}

/// Records in one map, changed under a lock: the memory and local-file stores, whose key,
/// context and slot stores are the implementations below.
pub trait LockedMap<V>: Send + Sync {
    /// Applies `f` to the map (saved afterwards where it is kept); `f`'s result.
    fn modify<T>(&self, f: impl FnOnce(&mut BTreeMap<String, V>) -> T) -> StoreResult<T>;
}

#[async_trait]
impl<M: LockedMap<ApiKeyRecord> + RecordStore<ApiKeyRecord>> KeyStore for M {
    async fn set_status(&self, hash: &str, status: &str) -> StoreResult<bool> {
        self.modify(|m| set_status(m, hash, status))
    }
}

#[async_trait]
impl<M: LockedMap<ContextRecord>> ContextStore for M {
    async fn create(&self, c: ContextRecord) -> StoreResult<()> {
        self.modify(|m| m.insert(c.context_id.clone(), c)).map(drop)
    }
    async fn get(&self, id: &str) -> StoreResult<Option<ContextRecord>> {
        self.modify(|m| m.get(id).cloned())
    }
    async fn touch(&self, id: &str, at: &str) -> StoreResult<()> {
        self.modify(|m| touch(m, id, at))
    }
    async fn delete(&self, id: &str, writer: Option<&str>) -> StoreResult<bool> {
        self.modify(|m| delete_context_of(m, id, writer))
    }
    async fn take_writer(
        &self,
        id: &str,
        sid: &str,
        replacing: Option<&str>,
    ) -> StoreResult<Lease> {
        self.modify(|m| take_writer_of(m, id, sid, replacing))
    }
    async fn release_writer(&self, id: &str, session_id: &str) -> StoreResult<()> {
        self.modify(|m| release_writer_of(m, id, session_id))
    }
}

/// Projects' slot sets (project id → session ids).
#[async_trait]
impl<M: LockedMap<Vec<String>>> SlotStore for M {
    async fn take(&self, project_id: &str, session_id: &str, limit: u64) -> StoreResult<Slot> {
        self.modify(|m| take_slot(m, project_id, session_id, limit))
    }
    async fn give_back(&self, project_id: &str, session_id: &str) -> StoreResult<()> {
        self.modify(|m| give_back_slot(m, project_id, session_id))
    }
    async fn held(&self, project_id: &str) -> StoreResult<u64> {
        self.modify(|m| m.get(project_id).map_or(0, |h| h.len() as u64))
    }
}
