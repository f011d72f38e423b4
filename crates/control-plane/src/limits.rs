//! A project's concurrency cap and a context's one-writer rule, held under concurrency by
//! conditional writes rather than check-then-act.
//!
//! - **Slots.** A create takes one of its project's `concurrency` slots ([`SlotStore`]) before
//!   its item exists or its task starts; of N simultaneous creates at most `concurrency` get
//!   one. In DynamoDB (`aws::DynamoSlots`, table `wallcrawler-slots`, key
//!   `projectId` + `sessionId`) a project's slots are one small counter item (`held`) plus one
//!   small item per holder, and a take is one `TransactWriteItems` of two writes: the counter
//!   `ADD 1` on condition `held < :limit`, and the holder's item `Put` on condition it does not
//!   exist. Both happen or neither, so the counter is always the number of holder items, and
//!   the write costs the same with 1 or 100,000 active sessions (the old design, one string
//!   set of every holder, rewrote the whole set on each take: its cost grew with the number of
//!   active sessions and it broke at DynamoDB's 400 KB item limit near 9,700). A retried take
//!   finds its item there (that condition fails alone): `Taken`, nothing counted twice. A
//!   give-back deletes the holder's item on condition it exists and `ADD -1`s the counter in
//!   one transaction, so a second give-back changes nothing. Simultaneous creates of one
//!   project contend on its counter item: DynamoDB cancels a transaction that meets another on
//!   the same item (`TransactionConflict`) and the store retries it after a short jittered
//!   wait; one counter item takes on the order of hundreds of such transactions per second
//!   (each costs 2 write units per item; an item's partition serves 1,000 per second).
//!   When the counter says full, the create reads the holders (a strongly consistent `Query`
//!   of the project's partition, at most `concurrency` small items) and looks each up by key
//!   (strongly consistent reads), gives back the slots of stale ones
//!   — terminal, with `endedAt`, expired, or gone (TTL) — then tries once more; else 429. That
//!   is how sessions that ended by themselves (idle timeout, expiry, `Browser.close`: only the
//!   controller knows, and it writes the sessions table alone) give their slot back.
//!   Release, a failed create, the ECS task-state handler and the local launcher (when its
//!   child exits) give slots back directly. (The local and in-memory stores keep a list per
//!   project under one lock: the same rules, without DynamoDB's item costs.)
//! - **Writer lease.** A context's record names its writer (`writerSessionId`). A persisting
//!   create takes the lease on condition that there is none or that it is a writer it has seen
//!   end (`endedAt`: the controller writes it last, after its upload). While the writer has
//!   not ended, every create on the context — persisting or not, as before — waits within the
//!   create budget, polling the writer's session by key, and then answers 409. The lease is
//!   claimed before the slot, so a create waiting for a writer holds no slot meanwhile; one
//!   that then finds the project full gives the lease back. No create scans
//!   the sessions table. The task-state handler and the local launcher clear the lease of a
//!   session they close; a lease whose writer ended by itself is simply taken over, and so is
//!   one whose writer is past its `expiresAt` plus the longest shutdown budget without
//!   `endedAt` (its controller died before writing it: nobody is saving the context).
//!
//! Session ids are UUID v7 (`sess_<uuid>`): a member of a slot set whose session item is not
//! there (yet) counts as stale only once its id is older than [`MISSING_GRACE`], so a
//! simultaneous create that has taken its slot but not written its item yet is never robbed.

use std::time::Duration;
use tokio::time::Instant;

use tracing::{info, warn};
use wallcrawler_contract::InternalStatus;
use wallcrawler_contract::session::MAX_SHUTDOWN_BUDGET_SECONDS;
use wallcrawler_contract::session_doc::SessionDoc;

use crate::app::App;
use crate::error::ApiError;
use crate::model::{ContextRecord, Project};
use crate::stores::{ContextStore, Lease, SessionStore, Slot, SlotStore, StoreResult};

/// How long after its id was minted a session whose item is missing still counts as active
/// (its create may be between taking the slot and writing the item).
pub const MISSING_GRACE: Duration = Duration::from_secs(300);

/// A new session id: `sess_<UUID v7>` (time-ordered; see the module doc).
pub fn new_session_id() -> String {
    format!("sess_{}", uuid::Uuid::now_v7())
}

/// Unix milliseconds at which a `sess_<UUID v7>` id was minted.
fn minted_millis(session_id: &str) -> Option<u64> {
    let u = uuid::Uuid::parse_str(session_id.strip_prefix("sess_")?).ok()?;
    let (secs, nanos) = u.get_timestamp()?.to_unix();
    Some(secs * 1000 + u64::from(nanos) / 1_000_000)
}

/// Whether a slot holder no longer needs its slot. `now_secs` is the API's clock (for
/// `expiresAt`); the id's age is measured on the system clock that minted it.
fn stale(id: &str, doc: Option<&SessionDoc>, now_secs: u64) -> bool {
    match doc {
        Some(d) => {
            d.internal().is_some_and(InternalStatus::is_terminal)
                || d.ended_at.is_some()
                || d.expires_at <= now_secs
        }
        None => missing_long_enough(id),
    }
}

/// Whether a session whose item is missing is gone (TTL, or a create that died) rather than a
/// create still in flight.
fn missing_long_enough(id: &str) -> bool {
    minted_millis(id).is_none_or(|at| {
        at + MISSING_GRACE.as_millis() as u64 <= wallcrawler_contract::time::unix_millis()
    })
}

/// Takes one of `project`'s slots for `session_id`, reclaiming stale holders when full; 429
/// when the project is at its limit.
pub async fn take_slot(app: &App, project: &Project, session_id: &str) -> Result<(), ApiError> {
    let pid = &project.project_id;
    let limit = project.concurrency;
    let full = |n: usize| {
        ApiError::too_many(format!(
            "project {pid} already has {n} active sessions, its concurrency limit"
        ))
    };
    if limit == 0 {
        return Err(full(0));
    }
    // Two rounds: take; if full, reclaim stale holders and take again.
    let mut held = Vec::new();
    for round in 0..2 {
        held = match app.slots.take(pid, session_id, limit).await? {
            Slot::Taken => return Ok(()),
            Slot::Full(held) => held,
        };
        if round == 1 {
            break;
        }
        let now = app.now_secs();
        let mut reclaimed = 0;
        for h in &held {
            let doc = app.sessions.get(h).await?;
            if stale(h, doc.as_ref(), now) {
                app.slots.give_back(pid, h).await?;
                reclaimed += 1;
                // An ended session the API learns about only now.
                if let Some(d) = &doc {
                    crate::usage::count(app.sessions.as_ref(), d).await;
                }
            }
        }
        if reclaimed == 0 {
            break;
        }
        info!(project.id = %pid, reclaimed, "gave back the slots of ended sessions");
    }
    Err(full(held.len()))
}

/// Whether the lease holder is a writer a new session must wait for: a persisting session
/// that may still be saving the context ([`may_be_saving`]), or one whose create is still in
/// flight (lease taken, item not written yet). `false` when it has ended or is gone.
pub(crate) async fn live_writer(
    sessions: &dyn SessionStore,
    holder: &str,
    now_secs: u64,
) -> StoreResult<bool> {
    Ok(match sessions.get(holder).await? {
        Some(d) => may_be_saving(&d, now_secs),
        None => !missing_long_enough(holder),
    })
}

/// Whether a persisting session may still be saving its context: it has no `endedAt` and its
/// controller may still be running. A controller ends its session at `expiresAt` at the
/// latest and then has its shutdown budget (at most [`MAX_SHUTDOWN_BUDGET_SECONDS`], ECS's
/// longest stop timeout, after which ECS kills it) to upload the profile and write `endedAt`;
/// past both, a session without `endedAt` is one whose controller died before writing it, and
/// waiting for it would hold the context forever.
fn may_be_saving(d: &SessionDoc, now_secs: u64) -> bool {
    d.ended_at.is_none()
        && d.context_persist == Some(true)
        && now_secs <= d.expires_at.saturating_add(MAX_SHUTDOWN_BUDGET_SECONDS)
}

/// One writer per context: a persisting session takes the lease, any session waits (until
/// `deadline`) while a live writer holds it; 409 after that, 404 if the context went away.
pub async fn claim_context(
    app: &App,
    ctx: &ContextRecord,
    session_id: &str,
    persist: bool,
    deadline: Instant,
) -> Result<(), ApiError> {
    let cid = &ctx.context_id;
    let mut replacing: Option<String> = None;
    loop {
        let holder = if persist {
            match app
                .contexts
                .take_writer(cid, session_id, replacing.as_deref())
                .await?
            {
                Lease::Taken => return Ok(()),
                Lease::NoContext => {
                    return Err(ApiError::not_found(format!("context {cid} not found")));
                }
                Lease::Held(h) => h,
            }
        } else {
            match app.contexts.get(cid).await? {
                None => return Err(ApiError::not_found(format!("context {cid} not found"))),
                Some(c) => match c.writer_session_id {
                    None => return Ok(()),
                    Some(h) => h,
                },
            }
        };
        if !live_writer(app.sessions.as_ref(), &holder, app.now_secs()).await? {
            if !persist {
                return Ok(());
            }
            // The writer has ended: take over on condition that it is still the writer.
            replacing = Some(holder);
            continue;
        }
        replacing = None;
        if Instant::now() + app.settings.poll_every >= deadline {
            return Err(ApiError::conflict(format!(
                "context {cid} is in use by session {holder}, which is still saving it; retry once that session has ended"
            )));
        }
        tokio::time::sleep(app.settings.poll_every).await;
    }
}

/// Gives back what a session holds: its project slot, and its context's writer lease once it
/// has `endedAt` (before that the controller may still be saving the context). Both writes are
/// conditional on the session's id, so calling this twice, or for a session that holds
/// nothing, is harmless. Failures are logged; an unreturned slot is reclaimed by a later
/// create, an unreturned lease taken over.
pub async fn give_back(slots: &dyn SlotStore, contexts: &dyn ContextStore, d: &SessionDoc) {
    if let Err(e) = slots.give_back(&d.project_id, &d.session_id).await {
        warn!(session.id = %d.session_id, error = %crate::error::chain(&e), "giving back the project slot failed");
    }
    if let (Some(ctx), Some(_)) = (&d.context_id, &d.ended_at)
        && let Err(e) = contexts.release_writer(ctx, &d.session_id).await
    {
        warn!(session.id = %d.session_id, error = %crate::error::chain(&e), "releasing the context lease failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_carry_their_minting_time() {
        let before = wallcrawler_contract::time::unix_millis();
        let id = new_session_id();
        let at = minted_millis(&id).unwrap();
        assert!(at >= before && at <= wallcrawler_contract::time::unix_millis() + 1);
        assert_eq!(minted_millis("sess_not-a-uuid"), None);
        assert_eq!(
            minted_millis(&format!("sess_{}", uuid::Uuid::new_v4())),
            None
        );
    }

    #[test]
    fn a_writer_past_its_expiry_and_the_shutdown_budget_is_not_saving() {
        let now = 1_800_000_000;
        let d = SessionDoc {
            expires_at: now - MAX_SHUTDOWN_BUDGET_SECONDS,
            context_persist: Some(true),
            ..Default::default()
        };
        assert!(may_be_saving(&d, now), "within the budget after expiry");
        assert!(
            !may_be_saving(&d, now + 1),
            "past it: the controller is gone"
        );
        let ended = SessionDoc {
            ended_at: Some("2027-01-15T08:00:00.000Z".into()),
            expires_at: now + 60,
            ..d.clone()
        };
        assert!(!may_be_saving(&ended, now), "endedAt: saved");
        let reading = SessionDoc {
            context_persist: Some(false),
            expires_at: now + 60,
            ..d
        };
        assert!(!may_be_saving(&reading, now), "not a writer");
    }

    #[test]
    fn missing_holders_are_stale_only_when_old() {
        let now = wallcrawler_contract::time::unix_millis() / 1000;
        assert!(!stale(&new_session_id(), None, now), "a create in flight");
        let old = uuid::Uuid::new_v7(uuid::Timestamp::from_unix(
            uuid::NoContext,
            now - MISSING_GRACE.as_secs() - 1,
            0,
        ));
        assert!(stale(&format!("sess_{old}"), None, now));
        assert!(stale("sess_legacy", None, now));
        let mut d = SessionDoc {
            expires_at: now + 60,
            ..Default::default()
        };
        d.set_status(InternalStatus::Ready);
        assert!(!stale("sess_x", Some(&d), now));
        d.expires_at = now;
        assert!(stale("sess_x", Some(&d), now), "expired");
        d.expires_at = now + 60;
        d.ended_at = Some("2026-01-01T00:00:00.000Z".into());
        assert!(stale("sess_x", Some(&d), now), "ended");
        d.ended_at = None;
        d.set_status(InternalStatus::Stopped);
        assert!(stale("sess_x", Some(&d), now), "released");
    }
}
