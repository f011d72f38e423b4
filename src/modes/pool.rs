//! Pool mode of `run`: a controller that warms up before any session exists, then serves the
//! first session claimed through the pool's queue and exits.
//!
//! Warm-up: public keys loaded, the proxy listening (every request with a token answered 503
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
//! binds the proxy to the session and project; unpacks the claim's extension, if any; with a
//! context it closes the warm Chrome while the archive is unpacked into a new profile and
//! starts Chrome on it (a running Chrome cannot change its profile, and a Fargate task is sized
//! for one browser); loads the extension into the running Chrome (`Extensions.loadUnpacked`:
//! the warm one is not restarted for it); publishes the browser;
//! writes READY through the same conditional update as `run`; deletes the claim. From there it
//! is `run`: persist, terminal status, `endedAt`.
//!
//! One owner per session: right after judging a claim worth serving, the controller takes the
//! session with one conditional write (pending, and no other live owner: `owner`, `ownerUntil`
//! = now + the claim's visibility, renewed with the claim, and `ecsTaskArn`), and every later
//! write of its — READY, the terminal status, `proxyBytes`, `endedAt` — is conditional on
//! being the owner. A claim delivered twice (SQS delivers at least once) thus gives one owner;
//! a controller that finds the session held by another live controller hands the claim back
//! for when that lease ends (never deletes it: it is how the session gets served should that
//! owner die), and one that loses the session later (its READY or lease refused) closes its
//! browser, drops the claim and writes nothing ([`Ending::Lost`]).
//!
//! A controller that dies between taking a claim and READY never deletes it: the claim becomes
//! visible again (SQS visibility timeout; the local platform puts it back when the controller
//! exits) and another controller takes it once the lease has lapsed. A controller being stopped
//! hands back whatever claim it holds at once: a signal during the long poll lets the receive
//! in flight finish and hands back what it brings; a signal before READY closes Chrome, gives
//! the session up (owner removed) and hands the claim back, writing nothing else
//! ([`Ending::HandedBack`]). On ECS the controller's owner id is its task ARN from the task
//! metadata, without which it does not go warm.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{Instrument, debug, error, info, warn};
use wallcrawler_contract::InternalStatus;
use wallcrawler_contract::claim::{Claim, NO_BROWSER_IN_TIME};
use wallcrawler_contract::session_doc::{ClaimFacts, ClaimVerdict, claim_verdict};

use crate::auth::Authenticator;
use crate::browser::{Browser, Started};
use crate::chrome::LaunchOptions;
use crate::config::{PoolConfig, RunConfig};
use crate::pool_metric;
use crate::scale_in::Protection;
use crate::session::{
    ContextPlan, Deps, Ending, ExtensionDir, Outcome, Run, STARTUP_RETRY, SessionItem,
    load_extension,
};
use crate::shutdown::{Shutdown, Step};
use crate::stores::{ClaimQueue, Received, ServedSessions, SessionRecord, Take, TakeResult};

/// Longest single wait on the queue (SQS allows 20 s); the loop waits again until the idle
/// lifetime passes.
const RECEIVE_WAIT: Duration = Duration::from_secs(20);

/// What to do with a parsed claim: the contract's verdict ([`ClaimVerdict`]), a session to
/// serve carrying its item. A session released before any controller served it gets its
/// `endedAt` from the controller that drops its claim (as `run` does for a session released
/// before its task started), or nobody would and its context stayed leased.
enum Verdict {
    Serve(SessionRecord),
    Not(ClaimVerdict),
}

/// Runs a pool controller until its session ends (or its idle lifetime); how it ended.
pub(super) async fn run(
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
    let Some(me) = identity(c, pool).await else {
        return Ending::Aborted;
    };
    let started = Instant::now();
    let warm = warm_run(c, deps, tasks, launch.user_data_dir.clone());
    let session = match warm_up(&warm, &launch, queue.as_ref()).await {
        Ok(s) => s,
        Err(outcome) => return warm.settle(outcome).await,
    };
    let warm_at = Instant::now();
    let idle = pool_metric::start(pool.metric.clone(), tasks);
    let metrics = session.metrics().clone();
    metrics.pool_warmup.set((warm_at - started).as_secs_f64());
    info!(
        warmup_ms = millis(warm_at - started),
        task = %me,
        "warm; waiting for a claim"
    );
    let waiting = Waiting {
        queue: queue.as_ref(),
        deps,
        pool,
        warm_at,
        me: &me,
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
        let run = claimed_run(&warm, &claim, &launch, &me);
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

/// This controller's id, the `owner` it writes and the task READY names: on ECS (task
/// metadata given) its task ARN, which it must have (a release stops the task the item
/// names); elsewhere `POOL_TASK_NAME` (unique by default). `None`: on ECS without an ARN
/// (logged).
async fn identity(c: &RunConfig, pool: &PoolConfig) -> Option<String> {
    let Some(uri) = c.metadata_uri.as_deref() else {
        return Some(pool.task_name.clone());
    };
    let arn = crate::public_ip::task_metadata(uri)
        .await
        .and_then(|m| m.task_arn);
    if arn.is_none() {
        error!(
            "the ECS task metadata gave no task ARN; a pool controller never announces READY \
             without it (a release could not stop this task), so it does not go warm"
        );
    }
    arn
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
            owner: "",
        },
        plan: ContextPlan::default(),
        profile,
        downloads: Default::default(),
        session_log: Default::default(),
        recording: Default::default(),
    }
}

/// The claimed session's run: its item, its context's plan, its profile directory (with a
/// context, its own, next to the warm one, removed at exit).
fn claimed_run<'a>(
    warm: &Run<'a>,
    claim: &'a Claim,
    launch: &LaunchOptions,
    me: &'a str,
) -> Run<'a> {
    let plan = ContextPlan {
        key: claim.context.as_ref().map(|x| x.key.clone()),
        persist: claim.context.as_ref().is_some_and(|x| x.persist),
    };
    let profile = if plan.key.is_some() || udp_relaunch(claim, launch) {
        claimed_path(launch)
    } else {
        launch.user_data_dir.clone()
    };
    Run {
        c: warm.c,
        deps: warm.deps,
        tasks: warm.tasks,
        item: SessionItem {
            store: warm.deps.sessions.as_deref(),
            id: &claim.session_id,
            owner: me,
        },
        plan,
        profile,
        downloads: Default::default(),
        session_log: Default::default(),
        recording: Default::default(),
    }
}

/// Whether the claimed session needs a Chrome started for it although it has no context: it
/// has a proxy, and on the shared network WebRTC's UDP would leave beside it unless Chrome
/// starts with the flag that keeps it behind the proxy (a launch flag: a running Chrome cannot
/// take it). In a private network no UDP leaves at all, and the warm Chrome serves as it is.
fn udp_relaunch(claim: &Claim, launch: &LaunchOptions) -> bool {
    claim.egress.as_ref().is_some_and(|e| e.proxied())
        && launch.network == crate::netns::ChromeNetwork::Shared
}

/// How often a warming controller looks whether it is asked to hurry.
const HURRY_CHECK: Duration = Duration::from_millis(10);

/// Fires `hurry` once the queue says a claim waits on this controller's warm-up
/// ([`ClaimQueue::hurried`]); then pends.
async fn hurry_when_waited_on(queue: &dyn ClaimQueue, hurry: &CancellationToken) {
    while !queue.hurried() {
        tokio::time::sleep(HURRY_CHECK).await;
    }
    hurry.cancel();
    std::future::pending().await
}

/// The public keys loaded and a warm Chrome behind a proxy bound to no session yet.
async fn warm_up(
    warm: &Run<'_>,
    launch: &LaunchOptions,
    queue: &dyn ClaimQueue,
) -> Result<Browser, Outcome> {
    let c = warm.c;
    let keys = warm.load_keys().await?;
    let auth = Authenticator::unbound(keys, c.auth.leeway_seconds);
    // Nobody waits on a warm-up: with BACKGROUND_NICE it yields to the sessions being served.
    // Unless a claim waits with no warm controller to take it (the pool ran dry): then a
    // session waits on this warm-up, and Chrome goes back to full priority
    // ([`LaunchOptions::hurry`]).
    let hurry = CancellationToken::new();
    let warm_launch = LaunchOptions {
        nice: c.background_nice,
        hurry: Some(hurry.clone()),
        ..launch.clone()
    };
    let opts = warm.session_options(auth, warm_launch, false, None);
    // The ad filter (about half a second, 10 MiB) built while nobody waits (so at
    // BACKGROUND_NICE too), so a claim asking for blockAds does not wait for it; a failure is
    // the asking session's to report.
    let (hop, nice) = (launch.hop.clone(), c.background_nice);
    warm.tasks.spawn(async move {
        if let Err(e) = hop.prepare_block_ads(nice).await {
            debug!(error = %e, "the ad filter is not ready ahead of a session");
        }
    });
    let warmed = tokio::select! {
        w = Browser::warm(opts, warm.tasks.token()) => w,
        () = hurry_when_waited_on(queue, &hurry) => unreachable!("pends once fired"),
    };
    match warmed {
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
    /// This controller, as the session item's `owner` names it.
    me: &'a str,
}

impl Waiting<'_> {
    /// Waits for a claim this controller should serve, and takes its session. `None`: a
    /// signal, or the idle lifetime passed, or the session store failed (the claim, if any,
    /// is left to come back).
    async fn claim(&self, signal: &CancellationToken) -> Option<(Claim, Received, SessionRecord)> {
        let idle_deadline = self.warm_at + self.pool.idle_lifetime;
        loop {
            let left = idle_deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                info!("idle lifetime reached with no claim; exiting");
                return None;
            }
            let received = match self.receive(left.min(RECEIVE_WAIT), signal).await? {
                Ok(Some(r)) => r,
                Ok(None) if self.queue.spent() => {
                    info!("no claim will come to this task any more; exiting");
                    return None;
                }
                Ok(None) => continue,
                Err(e) => {
                    warn!(error = %e, "receiving a claim failed; retrying");
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                        () = signal.cancelled() => return None,
                    }
                }
            };
            if signal.is_cancelled() {
                self.give_back(&received).await;
                return None;
            }
            if let Some(served) = self.consider(received).await? {
                return Some(served);
            }
        }
    }

    /// One receive. A signal never drops a receive in flight (SQS may still answer it with a
    /// claim, which would then stay hidden for its visibility timeout and count as a lost
    /// receive): it is finished (at most [`RECEIVE_WAIT`]) and whatever it brings is handed
    /// back at once. `None`: a signal.
    async fn receive(
        &self,
        wait: Duration,
        signal: &CancellationToken,
    ) -> Option<Result<Option<Received>, crate::stores::StoreError>> {
        if signal.is_cancelled() {
            return None;
        }
        let receive = self.queue.receive(wait);
        tokio::pin!(receive);
        tokio::select! {
            r = &mut receive => Some(r),
            () = signal.cancelled() => {
                if self.queue.receive_is_cancel_safe() {
                    info!("signal received while waiting for a claim");
                    return None;
                }
                info!("signal received while waiting for a claim; finishing the receive in flight");
                if let Ok(Some(r)) = receive.await {
                    self.give_back(&r).await;
                }
                None
            }
        }
    }

    /// A claim received as a signal came, handed back at once. From the task API its session
    /// came taken for this controller already: it is given up too (only if this controller
    /// owns it, pending), or another controller would wait for the lease to lapse.
    async fn give_back(&self, received: &Received) {
        if let (Some(store), Ok(claim)) = (&self.deps.sessions, Claim::parse(&received.body)) {
            match store.give_up(&claim.session_id, self.me).await {
                Ok(true) => info!("the session is given up for another controller"),
                Ok(false) => {}
                Err(e) => {
                    warn!(error = %e, "giving the session up failed; it is free once its lease ends")
                }
            }
        }
        self.hand_back(&received.receipt, Duration::ZERO).await;
    }

    /// Hands a claim back to the queue, visible again `after` from now.
    async fn hand_back(&self, receipt: &str, after: Duration) {
        match self.queue.hand_back(receipt, after).await {
            Ok(()) => info!(after_s = after.as_secs(), "claim handed back"),
            Err(e) => warn!(error = %e, "handing the claim back failed"),
        }
    }

    /// A received claim judged and acted on: `Some(Some(…))` to serve (its session taken),
    /// `Some(None)` to wait for the next. `None`: the session store failed.
    async fn consider(
        &self,
        received: Received,
    ) -> Option<Option<(Claim, Received, SessionRecord)>> {
        let claim = match Claim::parse(&received.body) {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "a claim was refused; it goes toward the dead-letter queue");
                if let Err(e) = self.queue.poison(&received.receipt).await {
                    warn!(error = %e, "returning the refused claim failed");
                }
                return Some(None);
            }
        };
        match self.judged(&claim).await? {
            Verdict::Serve(record) => return Some(Some((claim, received, record))),
            // Acted on by `judged`: never returned.
            Verdict::Not(ClaimVerdict::Serve | ClaimVerdict::Unserved) => {}
            Verdict::Not(ClaimVerdict::HandBack { until }) => {
                // Not deleted: if its owner dies before READY, this claim is the only way
                // the session is ever served.
                info!(session.id = %claim.session_id, "another controller holds the claim's session");
                let now = wallcrawler_contract::time::unix_millis() / 1000;
                let after = until.map_or(self.pool.visibility, |u| {
                    Duration::from_secs(u.saturating_sub(now) + 1)
                });
                self.hand_back(&received.receipt, after).await;
            }
            Verdict::Not(ClaimVerdict::Discard { why, end }) => {
                info!(session.id = %claim.session_id, why, "claim dropped");
                if end {
                    let item = SessionItem {
                        store: self.deps.sessions.as_deref(),
                        id: &claim.session_id,
                        owner: self.me,
                    };
                    item.settle(&Ending::Released, 0, None).await;
                }
                if let Err(e) = self.queue.discard(&received.receipt).await {
                    warn!(error = %e, "deleting the dropped claim failed");
                }
            }
        }
        Some(None)
    }

    /// The claim's verdict, with a session whose claim lapsed ended here (conditionally: a
    /// session made READY, or whose deadline a poll moved, meanwhile is judged again) and
    /// its claim then discarded, so the controller takes the next claim at once; a session
    /// to serve is taken first (one conditional write: pending and held by nobody else), and
    /// judged again when that fails. `None`: the store failed (logged).
    async fn judged(&self, claim: &Claim) -> Option<Verdict> {
        let store = self.deps.sessions.as_ref()?;
        for _ in 0..3 {
            let now = wallcrawler_contract::time::unix_millis() / 1000;
            match judge(self.deps, claim, now, self.me).await? {
                Verdict::Not(ClaimVerdict::Unserved) => {}
                Verdict::Serve(record) => match self.take(store.as_ref(), claim, now).await? {
                    true => return Some(Verdict::Serve(record)),
                    false => {
                        debug!("the session changed while it was taken; judged again");
                        continue;
                    }
                },
                v => return Some(v),
            }
            let at = wallcrawler_contract::time::now_iso8601();
            match store.end_unserved(&claim.session_id, now, &at).await {
                Ok(true) => {
                    return Some(Verdict::Not(ClaimVerdict::Discard {
                        why: format!("its claim's deadline passed: {NO_BROWSER_IN_TIME}"),
                        end: false,
                    }));
                }
                Ok(false) => debug!("the session changed while its claim lapsed; judged again"),
                Err(e) => {
                    error!(error = %e, "ending an unserved session failed; leaving its claim to come back");
                    return None;
                }
            }
        }
        Some(Verdict::Not(ClaimVerdict::Discard {
            why: "the session kept changing while its claim was judged".into(),
            end: false,
        }))
    }

    /// Takes the claim's session for this controller, its lease as long as the claim's
    /// visibility (kept alive with the claim). `Some(false)`: refused.
    async fn take(&self, store: &dyn ServedSessions, claim: &Claim, now: u64) -> Option<bool> {
        let t = Take {
            owner: self.me,
            until: now + self.pool.visibility.as_secs(),
            task: Some(self.me),
            now,
        };
        match crate::stores::retry("taking the claimed session", STARTUP_RETRY, || {
            store.take(&claim.session_id, &t)
        })
        .await
        {
            Ok(TakeResult::Taken) => Some(true),
            Ok(TakeResult::Refused(_)) => Some(false),
            Err(e) => {
                error!(error = %e, "taking the claimed session failed; leaving its claim to come back");
                None
            }
        }
    }
}

/// Whether the claimed session is still waiting for a browser, at `now` (unix seconds).
/// `None`: the store failed (logged).
async fn judge(deps: &Deps, claim: &Claim, now: u64, me: &str) -> Option<Verdict> {
    let store = deps.sessions.as_ref()?;
    let loaded = crate::stores::retry("reading the claimed session", STARTUP_RETRY, || {
        store.load(&claim.session_id)
    })
    .await;
    match loaded {
        Ok(record) => Some(verdict(claim, record, now, me)),
        Err(e) => {
            error!(error = %e, "the sessions table cannot be read; leaving the claim to come back");
            None
        }
    }
}

/// What to do with `claim`, given its session item (`None`: no such session), at `now`, for
/// controller `me`: the contract's verdict, the one the task API applies too.
fn verdict(claim: &Claim, record: Option<SessionRecord>, now: u64, me: &str) -> Verdict {
    let facts = record.as_ref().map(|r| ClaimFacts {
        project_id: r.project_id.as_deref(),
        status: r.internal_status,
        owner: r.owner.as_deref(),
        owner_until: r.owner_until,
        claim_deadline: r.claim_deadline,
        ever_ready: r.ever_ready,
        ended: r.ended,
    });
    match claim_verdict(claim, facts, now, me) {
        ClaimVerdict::Serve => match record {
            Some(record) => Verdict::Serve(record),
            None => unreachable!("a session to serve has an item"),
        },
        other => Verdict::Not(other),
    }
}

/// Another controller owns the session.
struct Lost;

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
    async fn delete_claim(&self, done: bool) {
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
        session: Browser,
        launch: LaunchOptions,
        claimed_at: Instant,
        metrics: &Arc<crate::telemetry::Metrics>,
    ) -> Ending {
        // Until READY (or the end of trying) the claim and the session's ownership are kept
        // from other controllers: a slow bring-up (a large archive, a loaded host) must not
        // let a second controller take them and race this one. A signal before READY hands
        // both back; the announce itself is never cut short (its write may land).
        let signal = self.run.tasks.token();
        let prepared = tokio::select! {
            biased;
            () = signal.cancelled() => None,
            Lost = self.keep_claim() => return self.lost().await,
            up = self.prepare(session, &launch) => Some(up),
        };
        let up = match prepared {
            Some(Ok(up)) if !signal.is_cancelled() => up,
            Some(Ok((session, _))) => return self.handed_back(Some(session)).await,
            Some(Err(outcome)) if !signal.is_cancelled() => return self.failed(outcome).await,
            // A signal: whatever the bring-up got to, the claim goes back.
            Some(Err(_)) | None => return self.handed_back(None).await,
        };
        debug!(
            ms = millis(claimed_at.elapsed()),
            "bring-up: settings applied, downloads captured"
        );
        let live_view = self.queue.live_view();
        let announced = tokio::select! {
            biased;
            Lost = self.keep_claim() => return self.lost().await,
            r = self.run.announce_ready(up.0, Some(self.run.item.owner), live_view.as_ref()) => r,
        };
        let (session, claimed_dir) = match announced {
            Ok(session) => (session, up.1),
            Err(outcome) => return self.failed(outcome).await,
        };
        metrics
            .pool_claim_to_ready
            .set(claimed_at.elapsed().as_secs_f64().max(0.001));
        info!(
            claim_to_ready_ms = millis(claimed_at.elapsed()),
            "claimed session READY"
        );
        self.delete_claim(true).await;
        let ending = self.run.serve_until_end(session).await;
        drop(claimed_dir);
        ending
    }

    /// A bring-up that stopped before READY: its last writes (none when the session is
    /// another controller's), the claim dropped.
    async fn failed(&self, outcome: Outcome) -> Ending {
        // A session released meanwhile is not this controller's to complete.
        let done = !matches!(outcome.ending, Ending::Released | Ending::Lost);
        let ending = self.run.settle(outcome).await;
        self.delete_claim(done).await;
        ending
    }

    /// Another controller owns the session: the browser closed (with the bring-up dropped),
    /// the claim dropped, nothing written.
    async fn lost(&self) -> Ending {
        info!("another controller owns the session now; leaving it to that one");
        self.delete_claim(false).await;
        Ending::Lost
    }

    /// Stopped before READY: the browser closed, the session given up (only while this
    /// controller owns it and it is pending) and the claim handed back at once, for another
    /// controller to serve; nothing else written.
    async fn handed_back(&self, session: Option<Browser>) -> Ending {
        if let Some(session) = session {
            self.close(session).await;
        }
        if let Some(store) = self.run.item.store {
            match store.give_up(self.run.item.id, self.run.item.owner).await {
                Ok(true) => info!("the session is given up for another controller"),
                Ok(false) => {
                    info!("the session was not this controller's to give up any more");
                    self.end_if_released(store).await;
                }
                Err(e) => {
                    warn!(error = %e, "giving the session up failed; it is free once its lease ends")
                }
            }
        }
        match self.queue.hand_back(self.receipt, Duration::ZERO).await {
            Ok(()) => info!("stopped before READY; the claim is handed back"),
            Err(e) => warn!(error = %e, "handing the claim back failed"),
        }
        Ending::HandedBack
    }

    /// A session released (made terminal) while this controller still owned it, before READY:
    /// no other controller will write its `endedAt` — one that receives the handed-back claim
    /// sees the lease still held and drops it — so its context would stay "still saving" for
    /// good. Nothing was served, so nothing is saved: `endedAt` now, as its owner (the write's
    /// condition keeps it to the owner, or to anyone once nobody holds it).
    async fn end_if_released(&self, store: &dyn ServedSessions) {
        match store.load(self.run.item.id).await {
            Ok(Some(r))
                if r.internal_status.is_some_and(InternalStatus::is_terminal) && !r.ended =>
            {
                self.run.item.ended(0).await;
            }
            Ok(_) => {}
            Err(e) => warn!(error = %e, "reading the session after giving it up failed"),
        }
    }

    async fn close(&self, session: Browser) {
        let budget = Step::ChromeClosed.share(self.run.c.shutdown_budget);
        session.close_chrome(false, budget).await;
        session.finish();
    }

    /// Restarts the claim's visibility timeout and the session's lease every half of the
    /// visibility, for as long as it is polled; returns once another controller owns the
    /// session.
    async fn keep_claim(&self) -> Lost {
        let every = (self.pool.visibility / 2).max(Duration::from_millis(500));
        loop {
            tokio::time::sleep(every).await;
            match self.queue.keep(self.receipt, self.pool.visibility).await {
                Ok(()) => debug!("claim kept"),
                Err(e) => warn!(error = %e, "keeping the claim from other controllers failed"),
            }
            if self.lease_lost().await {
                return Lost;
            }
        }
    }

    /// Keeps the session's lease; whether another controller owns the session now (a lease
    /// refused on a session released meanwhile is still this controller's to end).
    async fn lease_lost(&self) -> bool {
        let Some(store) = self.run.item.store else {
            return false;
        };
        let (id, me) = (self.run.item.id, self.run.item.owner);
        let until =
            wallcrawler_contract::time::unix_millis() / 1000 + self.pool.visibility.as_secs();
        match store.keep_owner(id, me, until).await {
            Ok(true) => false,
            Ok(false) => match store.load(id).await {
                Ok(r) => r.is_none_or(|r| r.owner.as_deref() != Some(me)),
                Err(e) => {
                    warn!(error = %e, "reading the session after its lease was refused failed");
                    false
                }
            },
            Err(e) => {
                warn!(error = %e, "keeping the session's lease failed");
                false
            }
        }
    }

    /// Asks the ECS agent, in the background, to keep the pool's scale-in off this task until
    /// the session can have ended: READY does not wait on the agent, and a failure costs
    /// nothing but the protection.
    ///
    /// With the task API, through the ECS API with the session's credentials (which allow
    /// it on this task's own ARN only), not the agent (which uses the task role).
    fn protect_from_scale_in(&self) {
        let c = self.run.c;
        let protection = match (&self.run.deps.protection, c.agent_uri.clone()) {
            (Some(ecs), _) => Protection::Ecs(ecs.clone(), self.run.item.owner.to_owned()),
            (None, Some(uri)) => Protection::Agent(uri),
            (None, None) => return,
        };
        let minutes = crate::scale_in::minutes_until(
            self.record.expires_at,
            wallcrawler_contract::time::unix_millis() / 1000,
            c.shutdown_budget,
        );
        self.run.tasks.spawn(
            async move {
                match protection.protect(minutes).await {
                    Ok(()) => info!(minutes, "task protected from scale-in"),
                    Err(e) => warn!(error = %e, "scale-in protection failed"),
                }
            }
            .instrument(tracing::Span::current()),
        );
    }

    /// The session prepared for READY: its proxy bound, Chrome on the context's profile if it
    /// has one; with a context, its profile directory (removed when dropped).
    async fn prepare(
        &self,
        mut session: Browser,
        launch: &LaunchOptions,
    ) -> Result<(Browser, Kept), Outcome> {
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
        let claimed_dir = self.claimed_dir(launch)?;
        // Unpacked (and refused) before Chrome is touched.
        let extension = match run
            .unpack_extension(self.claim.extension_key.as_deref())
            .await
        {
            Ok(x) => x,
            Err(outcome) => {
                self.close(session).await;
                return Err(outcome);
            }
        };
        if claimed_dir.is_some() {
            session = self.on_claimed_profile(session, launch).await?;
        }
        // The session's routes, allowed domains and browser settings, before any client.
        if let Err(reason) = session
            .apply_asked(self.claim.egress.as_ref(), self.claim.browser.as_ref())
            .await
        {
            self.close(session).await;
            return Err(Ending::failed(reason).into());
        }
        // Into the running Chrome (the warm one, or the context's), before any client.
        if let Some(ext) = &extension
            && let Err(ending) = load_extension(&session.chrome, ext).await
        {
            self.close(session).await;
            return Err(ending.into());
        }
        session.publish();
        run.restore_session_cookies(&session.chrome).await;
        let browser = self.claim.browser.as_ref();
        run.start_records(&session, Some(&self.claim.project_id), browser)
            .await;
        Ok((
            session,
            Kept {
                _profile: claimed_dir,
                _extension: extension,
            },
        ))
    }

    /// The directory a Chrome of the session's own (its context's profile, or its proxy's
    /// WebRTC flag) starts on, beside the warm one's; `None` when the warm Chrome serves.
    fn claimed_dir(&self, launch: &LaunchOptions) -> Result<Option<ClaimedDir>, Outcome> {
        if self.run.profile == launch.user_data_dir {
            return Ok(None);
        }
        match ClaimedDir::create(&self.run.profile) {
            Ok(d) => Ok(Some(d)),
            Err(e) => {
                let reason = format!("no profile directory for the session: {e}");
                Err(Ending::failed(reason).into())
            }
        }
    }

    /// The browser with Chrome restarted on the claimed profile ([`Self::switch_profile`]), or
    /// the outcome that ended the session, the browser finished.
    async fn on_claimed_profile(
        &self,
        mut session: Browser,
        launch: &LaunchOptions,
    ) -> Result<Browser, Outcome> {
        let stopped = match self.switch_profile(&mut session, launch).await {
            Ok(true) => None,
            // A signal while Chrome started: the session was not brought up.
            Ok(false) => Some(Ending::Interrupted.into()),
            Err(outcome) => Some(outcome),
        };
        match stopped {
            Some(outcome) => {
                session.finish();
                Err(outcome)
            }
            None => Ok(session),
        }
    }

    /// Closes the warm Chrome while the context's archive is unpacked into the claimed
    /// profile, then starts Chrome on it. `Ok(false)`: a signal came first.
    async fn switch_profile(
        &self,
        session: &mut Browser,
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
            proxied_udp_only: self.claim.egress.as_ref().is_some_and(|e| e.proxied()),
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

/// What a served session keeps on disk beside the warm profile, removed when dropped (with
/// the session): the context's profile directory and the unpacked extension.
struct Kept {
    _profile: Option<ClaimedDir>,
    _extension: Option<ExtensionDir>,
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
        // Chrome launched as CHROME_USER on it had its HOME beside it (chrome::user).
        crate::file_rules::remove_beside_profile(&self.0);
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
            extension_key: None,
            egress: None,
            browser: None,
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
        match verdict(&claim(), record, 1_000, "me") {
            Verdict::Not(ClaimVerdict::Discard { end, .. }) => Some(end),
            _ => None,
        }
    }

    /// A pool task's claims from the task API at `base` (settled on a queue nobody serves).
    fn api_claims(base: String) -> crate::task_api::ApiClaims {
        use crate::session_credentials::SessionCredentialsProvider;
        use crate::task_api::tests::{api, task_sdk};
        let api = api(base);
        let queue = crate::aws::SqsClaims {
            client: aws_sdk_sqs::Client::new(&task_sdk()),
            queue_url: "http://127.0.0.1:1/q".into(),
            visibility: Duration::from_secs(60),
        };
        crate::task_api::ApiClaims::new(api.clone(), SessionCredentialsProvider::new(api), queue)
    }

    /// Deps with only `sessions`.
    fn deps_with(sessions: Option<Arc<dyn ServedSessions>>) -> Deps {
        Deps {
            sessions,
            archives: None,
            files: None,
            secrets: None,
            network: None,
            claims: None,
            protection: None,
            live_view: None,
        }
    }

    const ME: &str = "arn:aws:ecs:us-east-1:123456789012:task/wc/abc";

    /// A pool task (`ME`) with `deps` waiting for a claim from the task API at `base`.
    async fn wait_on_api(
        base: String,
        deps: Deps,
        signal: &CancellationToken,
    ) -> Option<(Claim, Received, SessionRecord)> {
        let queue = api_claims(base);
        let pool = PoolConfig {
            queue: crate::config::PoolQueue::Sqs("http://127.0.0.1:1/q".into()),
            archives: crate::config::ArchivePlace::None,
            idle_lifetime: Duration::from_secs(3600),
            visibility: Duration::from_secs(60),
            task_name: "pool-1".into(),
            metric: None,
        };
        let waiting = Waiting {
            queue: &queue,
            deps: &deps,
            pool: &pool,
            warm_at: Instant::now(),
            me: ME,
        };
        waiting.claim(signal).await
    }

    /// A pool task on the task API whose API failed once, then said this task has had its
    /// session (409): it stops waiting at once, long before its idle lifetime, and asks no
    /// more.
    #[tokio::test]
    async fn a_task_that_had_its_session_stops_waiting_for_claims() {
        use crate::task_api::tests::{answer, stub_api};

        let (base, asked) = stub_api(vec![
            answer("503 Service Unavailable", "{}"),
            answer("409 Conflict", "{}"),
        ])
        .await;
        let signal = CancellationToken::new();
        let waited = tokio::time::timeout(
            Duration::from_secs(30),
            wait_on_api(base, deps_with(None), &signal),
        )
        .await
        .expect("stops waiting");
        assert!(waited.is_none());
        assert_eq!(
            asked.lock().unwrap().len(),
            2,
            "the failure retried, the 409 not"
        );
    }

    /// A signal while the task API's claim wait is in flight: the wait is finished, and the
    /// session the API took for this task is given up (and its claim handed back) at once,
    /// not held until its lease lapses.
    #[tokio::test]
    async fn a_claim_granted_as_a_signal_comes_is_given_up_at_once() {
        use tokio::io::AsyncWriteExt as _;

        use crate::stores::DirectorySessions;
        use crate::task_api::tests::{answer, grant_json, read_request};

        let dir = tempfile::tempdir().unwrap();
        crate::stores::tests::pending(&crate::stores::tests::doc("sess_1"), dir.path());
        let sessions = DirectorySessions::new(dir.path().to_owned());
        let now = wallcrawler_contract::time::unix_millis() / 1000;
        // As the API left it: taken for this task.
        let taken = Take {
            owner: ME,
            until: now + 60,
            task: Some(ME),
            now,
        };
        assert_eq!(
            sessions.take("sess_1", &taken).await.unwrap(),
            TakeResult::Taken
        );

        // The API answers the grant only once the task has been told to stop.
        let signal = CancellationToken::new();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let stop = signal.clone();
        tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            read_request(&mut conn).await;
            stop.cancel();
            let grant = answer("200 OK", &grant_json("ASIAGRANT"));
            conn.write_all(grant.as_bytes()).await.unwrap();
        });
        let sessions: Arc<dyn ServedSessions> = Arc::new(sessions);
        let deps = deps_with(Some(sessions.clone()));
        assert!(wait_on_api(base, deps, &signal).await.is_none());
        let after = sessions.load("sess_1").await.unwrap().unwrap();
        assert_eq!(after.owner, None, "given up");
        assert_eq!(after.internal_status, Some(InternalStatus::Provisioning));
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
        let v = |r| verdict(&claim(), Some(r), 1_000, "me");
        assert!(matches!(
            v(with(InternalStatus::Provisioning, Some(999))),
            Verdict::Not(ClaimVerdict::Unserved)
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
            Verdict::Not(ClaimVerdict::Discard { end: false, .. })
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
