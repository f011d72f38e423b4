//! Pool mode of `run`: a controller that warms up before any session exists, then serves the
//! first session claimed through the pool's queue and exits.
//!
//! Warm-up: signing keys loaded, the proxy listening (every request with a token answered 503
//! `not ready`, one without 401: its authenticator is bound to no session and no browser is
//! published), Chrome running on a
//! fresh profile. Then the controller long-polls the queue until a claim comes, a signal, or its
//! idle lifetime passes (it exits, and ECS — or the local platform — starts a fresh one, so new
//! images roll through).
//!
//! A claim whose session is still pending but past its `claimDeadline` (no client waits any
//! more) is not served: the controller ends the session (TIMED_OUT, "no browser was available
//! in time", `endedAt`; conditional on it still being pending and past its deadline), deletes
//! the claim and takes the next one at once.
//!
//! A claim that does not parse is poison (toward the dead-letter queue). A claim whose session
//! is missing or no longer pending (released meanwhile, or served by another controller after a
//! redelivery) is deleted, and the controller stays warm for the next; a session released
//! before any controller served it gets its `endedAt` from the controller that drops its claim
//! (no task of its own ever stops for it, so nothing else would write it, and a context it
//! leased would stay busy). Otherwise the controller
//! binds the proxy to the session and project; with a context it closes the warm Chrome while
//! the archive is unpacked into a new profile and starts Chrome on it (a running Chrome cannot
//! change its profile, and a Fargate task is sized for one browser); publishes the browser;
//! writes READY through the same conditional update as `run`; deletes the claim. From there it
//! is `run`: persist, terminal status, `endedAt`.
//!
//! A controller that dies between taking a claim and READY never deletes it: the claim becomes
//! visible again (SQS visibility timeout; the local platform puts it back when the controller
//! exits) and another controller takes it. The conditional READY keeps two controllers from
//! both serving one session.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, error, info, warn};
use wallcrawler_contract::InternalStatus;
use wallcrawler_contract::claim::{Claim, NO_BROWSER_IN_TIME, lapsed};

use crate::app::{Session, Started};
use crate::auth::Authenticator;
use crate::chrome::LaunchOptions;
use crate::config::{PoolConfig, RunConfig};
use crate::pool_metric;
use crate::session::{ContextPlan, Deps, Ending, Outcome, Run, STARTUP_RETRY, SessionItem};
use crate::shutdown::{Shutdown, Step};
use crate::stores::{ClaimQueue, Received, SessionRecord};

/// Longest single wait on the queue (SQS allows 20 s); the loop waits again until the idle
/// lifetime passes.
const RECEIVE_WAIT: Duration = Duration::from_secs(20);

/// What to do with a parsed claim.
enum Verdict {
    Serve(SessionRecord),
    /// Pending past its claim's deadline: no client waits any more. The session is ended
    /// ("no browser was available in time") and the claim deleted, never served to nobody.
    Unserved,
    /// Deleted unserved, with the reason for the log; `end`: the session ended before any
    /// controller served it, and this one writes its `endedAt` (as `run` does for a session
    /// released before its task started), or nobody would and its context stayed leased.
    Discard {
        why: String,
        end: bool,
    },
}

/// Runs a pool controller until its session ends (or its idle lifetime); how it ended.
pub async fn run(
    c: &RunConfig,
    pool: &PoolConfig,
    launch: LaunchOptions,
    deps: &Deps,
    tasks: &Shutdown,
) -> Ending {
    let (Some(queue), Some(_)) = (deps.claims.clone(), deps.sessions.as_ref()) else {
        error!("pool mode needs a claim queue and a session store");
        return Ending::Aborted;
    };
    let started = Instant::now();
    let warm = warm_run(c, deps, tasks, launch.user_data_dir.clone());
    let session = match warm_up(&warm, &launch).await {
        Ok(s) => s,
        Err(outcome) => return warm.settle(outcome).await,
    };
    let warm_at = Instant::now();
    let idle = pool_metric::start(pool.metric.clone(), tasks);
    let metrics = session.metrics().clone();
    metrics.pool_warmup.set((warm_at - started).as_secs_f64());
    info!(
        warmup_ms = millis(warm_at - started),
        task = %pool.task_name,
        "warm; waiting for a claim"
    );
    let waiting = Waiting {
        queue: queue.as_ref(),
        deps,
        pool,
        warm_at,
    };
    let Some((claim, received, record)) = waiting.claim(tasks.token()).await else {
        session
            .close_chrome(false, Step::ChromeClosed.share(c.shutdown_budget))
            .await;
        session.finish();
        return Ending::NoSession;
    };
    idle.set(false);
    let claimed_at = Instant::now();
    // At least 1 ms: 0 means "not claimed yet".
    metrics
        .pool_idle
        .set((claimed_at - warm_at).as_secs_f64().max(0.001));
    let span = tracing::info_span!("session", session.id = %claim.session_id);
    async move {
        info!(
            idle_ms = millis(claimed_at - warm_at),
            context = claim.context.is_some(),
            "claim taken"
        );
        let run = claimed_run(&warm, &claim, &launch);
        let served = ClaimedSession {
            run: &run,
            pool,
            claim: &claim,
            record,
            queue: queue.as_ref(),
            receipt: &received.receipt,
        };
        served.serve(session, launch, claimed_at, &metrics).await
    }
    .instrument(span)
    .await
}

/// The warm controller's run: no session yet, so nothing to write to.
fn warm_run<'a>(
    c: &'a RunConfig,
    deps: &'a Deps,
    tasks: &'a Shutdown,
    profile: PathBuf,
) -> Run<'a> {
    Run {
        c,
        deps,
        tasks,
        item: SessionItem {
            store: None,
            id: "",
        },
        plan: ContextPlan::default(),
        profile,
    }
}

/// The claimed session's run: its item, its context's plan, its profile directory (with a
/// context, its own, next to the warm one, removed at exit).
fn claimed_run<'a>(warm: &Run<'a>, claim: &'a Claim, launch: &LaunchOptions) -> Run<'a> {
    let plan = ContextPlan {
        key: claim.context.as_ref().map(|x| x.key.clone()),
        persist: claim.context.as_ref().is_some_and(|x| x.persist),
    };
    let profile = match plan.key {
        Some(_) => claimed_path(launch),
        None => launch.user_data_dir.clone(),
    };
    Run {
        c: warm.c,
        deps: warm.deps,
        tasks: warm.tasks,
        item: SessionItem {
            store: warm.deps.sessions.as_deref(),
            id: &claim.session_id,
        },
        plan,
        profile,
    }
}

/// The signing keys loaded and a warm Chrome behind a proxy bound to no session yet.
async fn warm_up(warm: &Run<'_>, launch: &LaunchOptions) -> Result<Session, Outcome> {
    let c = warm.c;
    let keys = warm.load_keys().await?;
    let auth = Authenticator::unbound(keys, c.auth.leeway_seconds);
    // Nobody waits on a warm-up: with BACKGROUND_NICE it yields to the sessions being served.
    let warm_launch = LaunchOptions {
        nice: c.background_nice,
        ..launch.clone()
    };
    let opts = warm.session_options(auth, warm_launch, false, None);
    match Session::warm(opts, warm.tasks.token()).await {
        Ok(Started::Running(s)) => Ok(*s),
        Ok(Started::Interrupted) => Err(Ending::NoSession.into()),
        Err(e) => {
            error!(error = %e, "warming up failed");
            Err(Ending::Aborted.into())
        }
    }
}

/// A warm controller waiting for a claim.
struct Waiting<'a> {
    queue: &'a dyn ClaimQueue,
    deps: &'a Deps,
    pool: &'a PoolConfig,
    warm_at: Instant,
}

impl Waiting<'_> {
    /// Waits for a claim this controller should serve. `None`: a signal, or the idle lifetime
    /// passed, or the session store failed (the claim, if any, is left to come back).
    async fn claim(&self, signal: &CancellationToken) -> Option<(Claim, Received, SessionRecord)> {
        let queue = self.queue;
        let idle_deadline = self.warm_at + self.pool.idle_lifetime;
        loop {
            let left = idle_deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                info!("idle lifetime reached with no claim; exiting");
                return None;
            }
            let got = tokio::select! {
                r = queue.receive(left.min(RECEIVE_WAIT)) => r,
                () = signal.cancelled() => {
                    info!("signal received while waiting for a claim");
                    return None;
                }
            };
            let received = match got {
                Ok(Some(r)) => r,
                Ok(None) => continue,
                Err(e) => {
                    warn!(error = %e, "receiving a claim failed; retrying");
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                        () = signal.cancelled() => return None,
                    }
                }
            };
            let claim = match Claim::parse(&received.body) {
                Ok(c) => c,
                Err(e) => {
                    warn!(error = %e, "a claim was refused; it goes toward the dead-letter queue");
                    if let Err(e) = queue.poison(&received.receipt).await {
                        warn!(error = %e, "returning the refused claim failed");
                    }
                    continue;
                }
            };
            match self.judged(&claim).await? {
                Verdict::Serve(record) => return Some((claim, received, record)),
                // Acted on by `judged`: never returned.
                Verdict::Unserved => {}
                Verdict::Discard { why, end } => {
                    info!(session.id = %claim.session_id, why, "claim dropped");
                    if end {
                        let item = SessionItem {
                            store: self.deps.sessions.as_deref(),
                            id: &claim.session_id,
                        };
                        item.settle(&Ending::Released, 0, None).await;
                    }
                    if let Err(e) = queue.discard(&received.receipt).await {
                        warn!(error = %e, "deleting the dropped claim failed");
                    }
                }
            }
        }
    }

    /// The claim's verdict, with a session whose claim lapsed ended here (conditionally: a
    /// session made READY, or whose deadline a poll moved, meanwhile is judged again) and
    /// its claim then discarded, so the controller takes the next claim at once. `None`: the
    /// store failed (logged).
    async fn judged(&self, claim: &Claim) -> Option<Verdict> {
        let store = self.deps.sessions.as_ref()?;
        for _ in 0..3 {
            let now = wallcrawler_contract::time::unix_millis() / 1000;
            match judge(self.deps, claim, now).await? {
                Verdict::Unserved => {}
                v => return Some(v),
            }
            let at = wallcrawler_contract::time::now_iso8601();
            match store.end_unserved(&claim.session_id, now, &at).await {
                Ok(true) => {
                    return Some(Verdict::Discard {
                        why: format!("its claim's deadline passed: {NO_BROWSER_IN_TIME}"),
                        end: false,
                    });
                }
                Ok(false) => debug!("the session changed while its claim lapsed; judged again"),
                Err(e) => {
                    error!(error = %e, "ending an unserved session failed; leaving its claim to come back");
                    return None;
                }
            }
        }
        Some(Verdict::Discard {
            why: "the session kept changing while its claim lapsed".into(),
            end: false,
        })
    }
}

/// Whether the claimed session is still waiting for a browser, at `now` (unix seconds).
/// `None`: the store failed (logged).
async fn judge(deps: &Deps, claim: &Claim, now: u64) -> Option<Verdict> {
    let store = deps.sessions.as_ref()?;
    let loaded = crate::stores::retry("reading the claimed session", STARTUP_RETRY, || {
        store.load(&claim.session_id)
    })
    .await;
    match loaded {
        Ok(record) => Some(verdict(claim, record, now)),
        Err(e) => {
            error!(error = %e, "the sessions table cannot be read; leaving the claim to come back");
            None
        }
    }
}

/// What to do with `claim`, given its session item (`None`: no such session), at `now`.
fn verdict(claim: &Claim, record: Option<SessionRecord>, now: u64) -> Verdict {
    let Some(record) = record else {
        return Verdict::Discard {
            why: "the session does not exist".into(),
            end: false,
        };
    };
    if record.project_id.as_deref() != Some(claim.project_id.as_str()) {
        return Verdict::Discard {
            why: "the claim names another project than the session".into(),
            end: false,
        };
    }
    match record.internal_status {
        Some(s) if s.may_become_ready() && lapsed(record.claim_deadline, now) => Verdict::Unserved,
        Some(s) if s.may_become_ready() => Verdict::Serve(record),
        s => Verdict::Discard {
            why: format!(
                "the session is {}, no longer waiting for a browser",
                s.map_or("without a status", InternalStatus::as_str)
            ),
            // Only a session nobody served: a controller that did writes `endedAt` itself,
            // last, after saving its context.
            end: s.is_some_and(InternalStatus::is_terminal) && !record.ever_ready && !record.ended,
        },
    }
}

/// A claim being served, and what serving it needs.
struct ClaimedSession<'a> {
    run: &'a Run<'a>,
    pool: &'a PoolConfig,
    claim: &'a Claim,
    record: SessionRecord,
    queue: &'a dyn ClaimQueue,
    receipt: &'a str,
}

impl ClaimedSession<'_> {
    /// The claim deleted: completed once served (`done`), else dropped.
    async fn settle(&self, done: bool) {
        let r = if done {
            self.queue.complete(self.receipt).await
        } else {
            self.queue.discard(self.receipt).await
        };
        if let Err(e) = r {
            warn!(error = %e, "deleting the claim failed");
        }
    }

    async fn serve(
        self,
        session: Session,
        launch: LaunchOptions,
        claimed_at: Instant,
        metrics: &Arc<crate::telemetry::Metrics>,
    ) -> Ending {
        // Until READY (or the end of trying) the claim is kept from other controllers: a slow
        // bring-up (a large archive, a loaded host) must not let a second controller take the
        // claim and race this one, whose failure would then end the session the other serves.
        let up = tokio::select! {
            biased;
            up = self.bring_up(session, &launch) => up,
            never = self.keep_claim() => match never {},
        };
        let (session, claimed_dir) = match up {
            Ok(up) => up,
            Err(outcome) => {
                // A session released meanwhile is not this controller's to complete.
                let done = outcome.ending != Ending::Released;
                let ending = self.run.settle(outcome).await;
                self.settle(done).await;
                return ending;
            }
        };
        metrics
            .pool_claim_to_ready
            .set(claimed_at.elapsed().as_secs_f64().max(0.001));
        info!(
            claim_to_ready_ms = millis(claimed_at.elapsed()),
            "claimed session READY"
        );
        self.settle(true).await;
        let ending = self.run.serve_until_end(session).await;
        drop(claimed_dir);
        ending
    }

    /// Restarts the claim's visibility timeout every half of it, for as long as it is polled.
    async fn keep_claim(&self) -> std::convert::Infallible {
        let every = (self.pool.visibility / 2).max(Duration::from_millis(500));
        loop {
            tokio::time::sleep(every).await;
            match self.queue.keep(self.receipt, self.pool.visibility).await {
                Ok(()) => debug!("claim kept"),
                Err(e) => warn!(error = %e, "keeping the claim from other controllers failed"),
            }
        }
    }

    /// Asks the ECS agent, in the background, to keep the pool's scale-in off this task until
    /// the session can have ended: READY does not wait on the agent, and a failure costs
    /// nothing but the protection.
    fn protect_from_scale_in(&self) {
        let c = self.run.c;
        let Some(uri) = c.agent_uri.clone() else {
            return;
        };
        let minutes = crate::scale_in::minutes_until(
            self.record.expires_at,
            wallcrawler_contract::time::unix_millis() / 1000,
            c.shutdown_budget,
        );
        self.run.tasks.spawn(
            async move {
                match crate::scale_in::protect(&uri, minutes).await {
                    Ok(()) => info!(minutes, "task protected from scale-in"),
                    Err(e) => warn!(error = %e, "scale-in protection failed"),
                }
            }
            .instrument(tracing::Span::current()),
        );
    }

    /// The session brought up: its proxy bound, Chrome on the context's profile if it has one,
    /// READY written; with a context, its profile directory (removed when dropped).
    async fn bring_up(
        &self,
        mut session: Session,
        launch: &LaunchOptions,
    ) -> Result<(Session, Option<ClaimedDir>), Outcome> {
        let run = self.run;
        // A client waits on this session from now on (its Chrome, or the close of the warm one).
        session.to_foreground();
        self.protect_from_scale_in();
        session.bind(
            self.claim.session_id.clone(),
            Some(self.claim.project_id.clone()),
        );
        session.set_lifecycle(
            run.idle_policy(self.record.keep_alive),
            self.record.expires_at,
        );
        let claimed_dir = match run.plan.key {
            Some(_) => match ClaimedDir::create(&run.profile) {
                Ok(d) => Some(d),
                Err(e) => {
                    let reason = format!("no profile directory for the context: {e}");
                    return Err(Ending::failed(reason).into());
                }
            },
            None => None,
        };
        if claimed_dir.is_some() {
            let stopped = match self.switch_profile(&mut session, launch).await {
                Ok(true) => None,
                // A signal while Chrome started: the session was not brought up.
                Ok(false) => Some(Ending::Interrupted.into()),
                Err(outcome) => Some(outcome),
            };
            if let Some(outcome) = stopped {
                session.finish();
                return Err(outcome);
            }
        }
        session.publish();
        run.restore_session_cookies(&session.chrome).await;
        let session = run
            .announce_ready(session, Some(&self.record), Some(&self.pool.task_name))
            .await?;
        Ok((session, claimed_dir))
    }

    /// Closes the warm Chrome while the context's archive is unpacked into the claimed
    /// profile, then starts Chrome on it. `Ok(false)`: a signal came first.
    async fn switch_profile(
        &self,
        session: &mut Session,
        launch: &LaunchOptions,
    ) -> Result<bool, Outcome> {
        let run = self.run;
        let t0 = Instant::now();
        let close_budget = Step::ChromeClosed.share(run.c.shutdown_budget);
        let (closed, restored) =
            tokio::join!(session.chrome.close(close_budget), run.restore_profile());
        let closed_ms = millis(t0.elapsed());
        restored?;
        info!(outcome = ?closed, elapsed_ms = closed_ms, "warm chrome closed and profile restored");
        let claimed = LaunchOptions {
            user_data_dir: run.profile.clone(),
            ..launch.clone()
        };
        let t1 = Instant::now();
        match session.relaunch(&claimed, run.tasks.token()).await {
            Ok(started) => {
                info!(
                    elapsed_ms = millis(t1.elapsed()),
                    "chrome started on the context's profile"
                );
                Ok(started)
            }
            Err(e) => Err(Ending::failed(format!("the browser could not be started: {e}")).into()),
        }
    }
}

/// The claimed context's profile directory, `<warm profile>.claimed` (a name the local platform
/// also removes when the controller dies).
fn claimed_path(launch: &LaunchOptions) -> PathBuf {
    let mut name = launch.user_data_dir.as_os_str().to_owned();
    name.push(".claimed");
    name.into()
}

/// The claimed context's profile directory, removed when dropped.
struct ClaimedDir(PathBuf);

impl ClaimedDir {
    /// A new empty directory at `path` (anything left there by a previous controller removed).
    fn create(path: &Path) -> std::io::Result<Self> {
        let dir = Self(path.to_owned());
        match std::fs::remove_dir_all(&dir.0) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        std::fs::DirBuilder::new().mode(0o700).create(&dir.0)?;
        Ok(dir)
    }
}

impl Drop for ClaimedDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn millis(d: Duration) -> u64 {
    d.as_millis().min(u128::from(u64::MAX)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim() -> Claim {
        Claim {
            session_id: "sess_1".into(),
            project_id: "proj_1".into(),
            context: None,
        }
    }

    fn record(status: InternalStatus) -> SessionRecord {
        SessionRecord {
            internal_status: Some(status),
            project_id: Some("proj_1".into()),
            ..Default::default()
        }
    }

    /// `Some(end)` for a discard, `None` for a serve.
    fn discard_end(record: Option<SessionRecord>) -> Option<bool> {
        match verdict(&claim(), record, 1_000) {
            Verdict::Serve(_) | Verdict::Unserved => None,
            Verdict::Discard { end, .. } => Some(end),
        }
    }

    #[test]
    fn pending_sessions_are_served() {
        for s in [
            InternalStatus::Creating,
            InternalStatus::Provisioning,
            InternalStatus::Starting,
        ] {
            assert_eq!(discard_end(Some(record(s))), None, "{s:?}");
        }
    }

    #[test]
    fn a_pending_session_past_its_claims_deadline_is_not_served() {
        let with = |status, deadline| SessionRecord {
            claim_deadline: deadline,
            ..record(status)
        };
        let v = |r| verdict(&claim(), Some(r), 1_000);
        assert!(matches!(
            v(with(InternalStatus::Provisioning, Some(999))),
            Verdict::Unserved
        ));
        for (status, deadline) in [
            (InternalStatus::Provisioning, Some(1_000)),
            (InternalStatus::Creating, Some(1_001)),
            // An item older than deadlines.
            (InternalStatus::Provisioning, None),
        ] {
            assert!(
                matches!(v(with(status, deadline)), Verdict::Serve(_)),
                "{status:?} {deadline:?}"
            );
        }
        // READY (served by another controller) or ended: dropped as before, not ended here.
        assert!(matches!(
            v(with(InternalStatus::Ready, Some(1))),
            Verdict::Discard { end: false, .. }
        ));
    }

    #[test]
    fn only_a_session_that_ended_unserved_gets_its_end_from_the_dropped_claim() {
        for s in [
            InternalStatus::Stopped,
            InternalStatus::Failed,
            InternalStatus::TimedOut,
        ] {
            assert_eq!(discard_end(Some(record(s))), Some(true), "{s:?}");
            let served = SessionRecord {
                ever_ready: true,
                ..record(s)
            };
            assert_eq!(discard_end(Some(served)), Some(false), "{s:?} served");
            let ended = SessionRecord {
                ended: true,
                ..record(s)
            };
            assert_eq!(discard_end(Some(ended)), Some(false), "{s:?} ended");
        }
        // Served by another controller after a redelivery, still live.
        assert_eq!(
            discard_end(Some(record(InternalStatus::Ready))),
            Some(false)
        );
        assert_eq!(discard_end(None), Some(false));
        let other = SessionRecord {
            project_id: Some("proj_2".into()),
            ..record(InternalStatus::Stopped)
        };
        assert_eq!(discard_end(Some(other)), Some(false), "another project's");
    }
}
