//! The sweeper: ends the sessions nothing else will end, so none stays stranded — one whose
//! claim went to the dead-letter queue or was never taken, one whose task vanished without a
//! task-state event, anything still not terminal past its `expiresAt`.
//!
//! One run ([`sweep`]):
//!
//! - finds candidates through the sessions table's `status-expiresAt-index` (hash `status`,
//!   range `expiresAt`, `KEYS_ONLY`; [`SessionStore::expiring`]), never a scan: RUNNING
//!   sessions whose `expiresAt` is more than [`EXPIRY_GRACE`] ago, and PENDING ones, earliest
//!   expiry first (a pending session's `claimDeadline` is not in the index, so each is read);
//!   at most `limit` of each per run, so a run is bounded whatever the backlog. Ended sessions
//!   leave those statuses, so the next run goes on with the rest; but pending sessions not due
//!   yet keep their place, so with more than `limit` pending at once the ones expiring last
//!   wait until earlier ones are READY or ended;
//! - reads each by key (strongly consistent) and ends it when it is due:
//!   - still pending past its `claimDeadline`: TIMED_OUT, "no browser was available in time",
//!     `endedAt` — one conditional write, only if still pending and past the deadline, so a
//!     session a controller makes READY (or a client's poll extends) at the same moment is
//!     left alone;
//!   - not terminal and past `expiresAt` + [`EXPIRY_GRACE`]: TIMED_OUT with
//!     [`EXPIRED_REASON`] on condition that it is not terminal, then `endedAt` if missing;
//! - for each session it ended: stops its task ([`Launcher::stop`]) and gives back its
//!   project slot and its context's writer lease ([`crate::limits::give_back`]), and counts its
//!   usage ([`crate::usage::count`]).
//!
//! Idempotent: a session already ended fails the conditions and is skipped, so two runs at
//! once or a retried run end each session once. The grace leaves a live controller time to
//! end its own expired session (it enforces `expiresAt` itself, saves its context and writes
//! `endedAt` last, within the ECS stop timeout of at most 120 s): the sweeper's `endedAt`
//! never frees a context whose archive is still being written.

use serde::Serialize;
use tracing::{info, warn};
use wallcrawler_contract::claim::lapsed;
use wallcrawler_contract::session_doc::SessionDoc;
use wallcrawler_contract::{InternalStatus, SdkStatus};

use crate::app::App;
use crate::error::chain;
use crate::stores::{Cond, SessionStore, StoreResult, Terminal};

/// Sessions of each status one run looks at, at most.
pub const PAGE_LIMIT: usize = 200;

/// Seconds past its `expiresAt` a session's own controller has to end it before the sweeper
/// does: ECS's longest stop timeout (120 s) and a margin.
pub const EXPIRY_GRACE: u64 = 180;

/// The `terminationReason` of a session the sweeper ended at its expiry.
pub const EXPIRED_REASON: &str = "the session expired and its browser task did not end it";

/// What one run did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Swept {
    /// Sessions read.
    pub examined: usize,
    /// Sessions ended, both kinds together.
    pub ended: usize,
    /// Of those, pending ones past their claim's deadline.
    pub unserved: usize,
    /// Of those, ones past their expiry.
    pub expired: usize,
    /// Sessions whose reading or ending failed (logged; the next run tries again).
    pub failed: usize,
}

/// Why a session is ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Due {
    /// Pending past its claim's deadline.
    Unserved,
    /// Not terminal, past its expiry and the grace.
    Expired,
}

/// Whether `d` is due at `now` (Unix seconds), and why.
fn due(d: &SessionDoc, now: u64) -> Option<Due> {
    if d.internal().is_some_and(InternalStatus::is_terminal) {
        return None;
    }
    if d.pending() && lapsed(d.claim_deadline, now) {
        return Some(Due::Unserved);
    }
    (d.expires_at.saturating_add(EXPIRY_GRACE) < now).then_some(Due::Expired)
}

/// One run over `app`'s stores, looking at up to `limit` sessions of each live status.
pub async fn sweep(app: &App, limit: usize) -> StoreResult<Swept> {
    let now = app.now_secs();
    let running = app
        .sessions
        .expiring(SdkStatus::Running, now.saturating_sub(EXPIRY_GRACE), limit)
        .await?;
    // Pending sessions are few (each is READY or ended within its claim's wait); the claim
    // deadline is not in the index, so every one is a candidate.
    let pending = app
        .sessions
        .expiring(SdkStatus::Pending, u64::MAX, limit)
        .await?;
    let mut out = Swept::default();
    for id in running.iter().chain(&pending) {
        out.examined += 1;
        match end_if_due(app, id, now).await {
            Ok(Some(Due::Unserved)) => out.unserved += 1,
            Ok(Some(Due::Expired)) => out.expired += 1,
            Ok(None) => {}
            Err(e) => {
                warn!(session.id = %id, error = %chain(&e), "sweeping the session failed");
                out.failed += 1;
            }
        }
    }
    out.ended = out.unserved + out.expired;
    if out.ended > 0 || out.failed > 0 {
        info!(?out, "sweep done");
    }
    Ok(out)
}

/// Ends session `id` if it is due at `now`: its terminal write (conditional), its task
/// stopped, its slot and lease given back. What it was ended for, if it was.
async fn end_if_due(app: &App, id: &str, now: u64) -> StoreResult<Option<Due>> {
    let Some(d) = app.sessions.get(id).await? else {
        return Ok(None);
    };
    let Some(why) = due(&d, now) else {
        return Ok(None);
    };
    let at = app.now_iso();
    let ended = match why {
        Due::Unserved => match app.sessions.end_unserved(id, now, &at).await? {
            Cond::Done(d) => Some(d),
            Cond::Failed(_) => None,
        },
        Due::Expired => end_expired(app.sessions.as_ref(), id, &at).await?,
    };
    let Some(ended) = ended else {
        // READY, extended or ended meanwhile: not the sweeper's any more.
        return Ok(None);
    };
    if let Err(e) = app.launcher.stop(id, ended.ecs_task_arn.as_deref()).await {
        warn!(session.id = %id, error = %chain(&e), "stopping the session's task failed");
    }
    crate::limits::give_back(app.slots.as_ref(), app.contexts.as_ref(), &ended).await;
    crate::usage::count(app.sessions.as_ref(), &ended).await;
    info!(session.id = %id, reason = ?why, "stranded session ended");
    Ok(Some(why))
}

/// TIMED_OUT with [`EXPIRED_REASON`] on condition that the session is not terminal, then its
/// `endedAt` if missing: the session as ended, or `None` when it was terminal already (its own
/// controller or a release got there first, and `endedAt` stays theirs to write).
async fn end_expired(
    sessions: &dyn SessionStore,
    id: &str,
    at: &str,
) -> StoreResult<Option<SessionDoc>> {
    let to = Terminal {
        status: InternalStatus::TimedOut,
        reason: Some(EXPIRED_REASON),
        ended: false,
    };
    let Cond::Done(mut d) = sessions.mark_terminal(id, to, at).await? else {
        return Ok(None);
    };
    sessions.mark_ended_if_missing(id, at).await?;
    d.ended_at.get_or_insert_with(|| at.to_owned());
    Ok(Some(d))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(status: InternalStatus, expires_at: u64, deadline: Option<u64>) -> SessionDoc {
        let mut d = SessionDoc {
            session_id: "sess_1".into(),
            expires_at,
            claim_deadline: deadline,
            ..Default::default()
        };
        d.set_status(status);
        d
    }

    #[test]
    fn only_stranded_sessions_are_due() {
        use InternalStatus::*;
        let now = 10_000;
        assert_eq!(
            due(&doc(Provisioning, 20_000, Some(9_999)), now),
            Some(Due::Unserved)
        );
        assert_eq!(due(&doc(Provisioning, 20_000, Some(10_000)), now), None);
        assert_eq!(due(&doc(Creating, 20_000, None), now), None, "older item");
        // Past expiry: only once the grace is over, whatever the status short of terminal.
        let past = now - EXPIRY_GRACE - 1;
        for s in [Creating, Starting, Ready, Active, Terminating] {
            assert_eq!(due(&doc(s, past, None), now), Some(Due::Expired), "{s:?}");
            assert_eq!(due(&doc(s, past + 1, None), now), None, "{s:?} in grace");
        }
        // READY is never ended for its claim; terminal never at all.
        assert_eq!(due(&doc(Ready, 20_000, Some(1)), now), None);
        for s in [Stopped, Failed, TimedOut] {
            assert_eq!(due(&doc(s, 1, Some(1)), now), None, "{s:?}");
        }
    }
}
