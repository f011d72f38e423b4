//! The single-session driver of `run` (an ECS task started for one session): the steps of
//! [`crate::session::Run`] from the session item to the end. A session released before the
//! task started is never brought up: only its `endedAt` is written, and the exit is 0. Any
//! failure before READY is written as FAILED with a reason, and the exit is non-zero.
//!
//! Like a pool controller, the task takes ownership of its session first (`owner`: its ECS
//! task ARN, else a unique name), so every controller's writes follow the same rule: only the
//! owner writes READY, the terminal status and the end (see `crate::modes::pool`).

use tracing::{error, info};

use crate::auth::Authenticator;
use crate::browser::{Browser, Started};
use crate::chrome::LaunchOptions;
use crate::config::RunConfig;
use crate::session::{
    ContextPlan, Deps, Ending, Outcome, Run, STARTUP_RETRY, SessionItem, load_extension,
};
use crate::shutdown::{Shutdown, Step};
use crate::stores::{SessionRecord, Take, TakeResult, retry};

/// One session's task, from the session item to its ending: start, READY, serve, end.
pub(super) async fn run(
    c: &RunConfig,
    launch: LaunchOptions,
    deps: &Deps,
    tasks: &Shutdown,
) -> Ending {
    let task_arn = match c.metadata_uri.as_deref() {
        Some(uri) => crate::public_ip::task_metadata(uri)
            .await
            .and_then(|m| m.task_arn),
        None => None,
    };
    let me = task_arn
        .clone()
        .unwrap_or_else(|| format!("task-{}", uuid::Uuid::new_v4()));
    let run = Run {
        c,
        deps,
        tasks,
        item: SessionItem {
            store: deps.sessions.as_deref(),
            id: &c.auth.session_id,
            owner: &me,
        },
        plan: ContextPlan::from_config(c),
        profile: launch.user_data_dir.clone(),
        downloads: Default::default(),
        session_log: Default::default(),
        recording: Default::default(),
    };
    match serve(&run, launch, task_arn.as_deref()).await {
        Ok(ending) => ending,
        Err(outcome) => run.settle(outcome).await,
    }
}

/// The steps up to the end; `Err`: how the run stopped early.
async fn serve(
    run: &Run<'_>,
    launch: LaunchOptions,
    task_arn: Option<&str>,
) -> Result<Ending, Outcome> {
    let c = run.c;
    // The session item: lifecycle settings and the token for connectUrl.
    let record = run.load_record().await?;
    if ended_before_start(record.as_ref()) {
        return Err(Ending::Released.into());
    }
    take(run, record.as_ref(), task_arn).await?;
    let keep_alive = record.as_ref().map_or(c.keep_alive, |r| r.keep_alive);
    let expires_at = record.as_ref().and_then(|r| r.expires_at).or(c.expires_at);
    let keys = run.load_keys().await?;
    run.restore_profile().await?;
    let extension_key = c.extension.as_ref().map(|x| x.key.as_str());
    // Removed when the run ends, with the session.
    let extension = run.unpack_extension(extension_key).await?;

    // Chrome and the proxy.
    let auth = Authenticator::new(
        keys,
        c.auth.session_id.clone(),
        c.auth.project_id.clone(),
        c.auth.leeway_seconds,
    );
    let mut launch = launch;
    // A proxied session's WebRTC sends no UDP beside its proxy (a launch flag).
    launch.proxied_udp_only = c.egress.as_ref().is_some_and(|e| e.proxied());
    let opts = run.session_options(auth, launch, keep_alive, expires_at);
    let mut session = start(opts, run).await?;
    let egress_failed = session
        .apply_asked(c.egress.as_ref(), c.browser.as_ref())
        .await
        .err()
        .map(Ending::failed);
    let extension_failed = match (&extension, egress_failed) {
        (_, Some(ending)) => Some(ending),
        (Some(ext), None) => load_extension(&session.chrome, ext).await.err(),
        (None, None) => None,
    };
    if let Some(ending) = extension_failed {
        let bytes = session.proxy_bytes();
        session
            .close_chrome(false, Step::ChromeClosed.share(c.shutdown_budget))
            .await;
        session.finish();
        return Err(Outcome {
            ending,
            proxy_bytes: bytes,
        });
    }
    run.restore_session_cookies(&session.chrome).await;
    run.start_records(&session, c.auth.project_id.as_deref(), c.browser.as_ref())
        .await;
    // Clients through only now: never to a browser without its extension.
    session.publish();

    // READY, only from a pending status.
    let session = run
        .announce_ready(session, None, run.deps.live_view.as_ref())
        .await?;
    let ending = run.serve_until_end(session).await;
    drop(extension);
    Ok(ending)
}

/// The session taken for this task (no lease to keep: no other controller is sent it), or
/// how the run stops: another controller holds it, or it ended meanwhile.
async fn take(
    run: &Run<'_>,
    record: Option<&SessionRecord>,
    task_arn: Option<&str>,
) -> Result<(), Outcome> {
    let (Some(store), Some(record)) = (run.item.store, record) else {
        return Ok(());
    };
    let now = wallcrawler_contract::time::unix_millis() / 1000;
    let t = Take {
        owner: run.item.owner,
        until: record.expires_at.unwrap_or(now + 3600).max(now + 60),
        task: task_arn,
        now,
    };
    match retry("taking the session", STARTUP_RETRY, || {
        store.take(run.item.id, &t)
    })
    .await
    {
        Ok(TakeResult::Taken) => Ok(()),
        Ok(TakeResult::Refused(Some(r)))
            if r.internal_status.is_some_and(|s| s.may_become_ready()) =>
        {
            info!(
                owner = r.owner.as_deref().unwrap_or(""),
                "another controller owns the session"
            );
            Err(Ending::Lost.into())
        }
        Ok(TakeResult::Refused(_)) => {
            info!("the session is no longer waiting for a browser");
            Err(Ending::Released.into())
        }
        Err(e) => {
            error!(error = %e, "taking the session failed");
            Err(Ending::Aborted.into())
        }
    }
}

/// Chrome and the proxy started, the proxy answering 503 until published.
async fn start(opts: crate::browser::BrowserOptions, run: &Run<'_>) -> Result<Browser, Outcome> {
    match Browser::warm(opts, run.tasks.token()).await {
        Ok(Started::Running(s)) => Ok(*s),
        Ok(Started::Interrupted) => Err(Ending::Interrupted.into()),
        Err(e) => Err(Ending::failed(format!("the browser could not be started: {e}")).into()),
    }
}

/// A session released before its task started is not brought up.
fn ended_before_start(record: Option<&SessionRecord>) -> bool {
    let Some(status) = record.and_then(|r| r.internal_status) else {
        return false;
    };
    if !status.is_terminal() {
        return false;
    }
    info!(
        status = status.as_str(),
        "the session ended before the task started"
    );
    true
}
