//! The single-session driver of `run` (an ECS task started for one session): the steps of
//! [`crate::session::Run`] from the session item to the end. A session released before the
//! task started is never brought up: only its `endedAt` is written, and the exit is 0. Any
//! failure before READY is written as FAILED with a reason, and the exit is non-zero.

use tracing::info;

use crate::app::{Session, Started};
use crate::auth::Authenticator;
use crate::chrome::LaunchOptions;
use crate::config::RunConfig;
use crate::session::{ContextPlan, Deps, Ending, Outcome, Run, SessionItem};
use crate::shutdown::Shutdown;
use crate::stores::SessionRecord;

/// One session's task, from the session item to its ending: start, READY, serve, end.
pub async fn run(c: &RunConfig, launch: LaunchOptions, deps: &Deps, tasks: &Shutdown) -> Ending {
    let run = Run {
        c,
        deps,
        tasks,
        item: SessionItem {
            store: deps.sessions.as_deref(),
            id: &c.auth.session_id,
        },
        plan: ContextPlan::from_config(c),
        profile: launch.user_data_dir.clone(),
    };
    match serve(&run, launch).await {
        Ok(ending) => ending,
        Err(outcome) => run.settle(outcome).await,
    }
}

/// The steps up to the end; `Err`: how the run stopped early.
async fn serve(run: &Run<'_>, launch: LaunchOptions) -> Result<Ending, Outcome> {
    let c = run.c;
    // The session item: lifecycle settings and the token for connectUrl.
    let record = run.load_record().await?;
    if ended_before_start(record.as_ref()) {
        return Err(Ending::Released.into());
    }
    let keep_alive = record.as_ref().map_or(c.keep_alive, |r| r.keep_alive);
    let expires_at = record.as_ref().and_then(|r| r.expires_at).or(c.expires_at);
    let keys = run.load_keys().await?;
    run.restore_profile().await?;

    // Chrome and the proxy.
    let auth = Authenticator::new(
        keys,
        c.auth.session_id.clone(),
        c.auth.project_id.clone(),
        c.auth.leeway_seconds,
    );
    let opts = run.session_options(auth, launch, keep_alive, expires_at);
    let session = start(opts, run).await?;
    run.restore_session_cookies(&session.chrome).await;

    // READY, only from a pending status.
    let session = run.announce_ready(session, record.as_ref(), None).await?;
    Ok(run.serve_until_end(session).await)
}

/// Chrome and the proxy started.
async fn start(opts: crate::app::SessionOptions, run: &Run<'_>) -> Result<Session, Outcome> {
    match Session::start(opts, run.tasks.token()).await {
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
