//! The serving modes `cli` chooses between, each driven to its end and saying how it ended
//! ([`Ending`]): `local` (a Chrome behind the proxy, for a developer), `run` (an ECS task or
//! a local controller: one session ([`task`]) or a pool controller's ([`pool`])), `proxy` (the
//! proxy alone) and `gateway` (the connect gateway).

mod deps;
pub(crate) mod gateway;
pub(crate) mod local;
mod pool;
pub(crate) mod proxy;
mod task;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tracing::{error, info};
use wallcrawler_aws::secrets::SecretsManagerKeys;

use crate::auth::{KeySource, StaticKeys};
use crate::aws;
use crate::browser::{AppError, EndReason};
use crate::chrome::user::OwnUid;
use crate::chrome::{self, LaunchOptions};
use crate::config::{ChromeSettings, KeyConfig, RunConfig};
use crate::secrets::{FetchError, SecretKeyCache};
use crate::session::Ending;
use crate::shutdown::Shutdown;

/// `run`: the outside services and the profile directory set up, then one session's task or a
/// pool controller, until it ends.
pub(crate) async fn run(c: RunConfig, flags: Vec<String>, tasks: Shutdown) -> Ending {
    if c.exit_with_parent && !exit_with_parent() {
        info!("the process that started this one has exited already");
        return Ending::NoSession;
    }
    let deps = match deps::build(&c).await {
        Ok(d) => d,
        Err(e) => {
            error!(error = %e, cause = ?std::error::Error::source(&e).map(|s| s.to_string()), "setting up the task failed");
            return Ending::Aborted;
        }
    };
    let (profile, _tmp) = match &c.chrome.user_data_dir {
        Some(d) => (d.clone(), None),
        None => match profile_tempdir() {
            Ok(t) => (t.path().to_owned(), Some(t)),
            Err(e) => {
                error!(error = %e, "could not create a profile directory");
                return Ending::Aborted;
            }
        },
    };
    // `_own_uid` is released (what still runs as it killed) when this function returns.
    let (launch, _own_uid) = match launch_options(&c.chrome, flags, profile.clone()) {
        Ok(o) => o,
        Err(e) => {
            error!("{e}");
            return Ending::Aborted;
        }
    };
    // Every launch sends the headful User-Agent: its `--version` runs while keys load.
    chrome::ask_user_agent_ahead(&launch.binary, &tasks);
    let ending = match &c.pool {
        Some(pool) => pool::run(&c, pool, launch, &deps, &tasks).await,
        None => task::run(&c, launch, &deps, &tasks).await,
    };
    crate::file_rules::remove_beside_profile(&profile);
    // The controller's own peak memory (not Chrome's): hostile archives are meant to leave
    // it small, and an operator sizing the task wants the figure.
    info!(
        exit_code = ending.exit_code(),
        peak_rss_kib = peak_rss_kib(),
        "task finished"
    );
    ending
}

/// This process's peak resident set (`VmHWM`), in KiB, when the kernel reports it.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// A fresh profile directory, removed when dropped.
fn profile_tempdir() -> std::io::Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix("wallcrawler-profile-")
        .tempdir()
}

/// How Chrome is launched: the binary found, on `user_data_dir`, as `CHROME_USER` if this
/// process may switch to it (checked here, before any session is taken) — or, running as
/// root with none, as a uid of its own, held until the returned [`OwnUid`] is dropped.
fn launch_options(
    c: &ChromeSettings,
    flags: Vec<String>,
    user_data_dir: PathBuf,
) -> Result<(LaunchOptions, Option<OwnUid>), chrome::ChromeError> {
    let binary = chrome::find_chrome(c.path.as_deref(), std::env::var_os("PATH").as_deref())?;
    let own = match c.user {
        None if nix::unistd::geteuid().is_root() => Some(OwnUid::take()?),
        _ => None,
    };
    let user = c.user.or(own.as_ref().map(OwnUid::user));
    chrome::check_shell_user(&binary, user)?;
    if user.is_some() {
        chrome::user::ChromeUser::check_privileges()?;
    }
    let network = crate::netns::decide(c.network, crate::netns::can_make_namespaces())?;
    let launch = LaunchOptions {
        binary,
        user_data_dir,
        debug_port: c.debug_port,
        flags,
        ready_timeout: Duration::from_secs(30),
        nice: None,
        hurry: None,
        user,
        network,
        hop: chrome::egress::Hop::with_ad_lists(
            c.egress_allow.clone(),
            c.ad_block_lists.clone(),
            c.ad_filter_cache.clone(),
        ),
        proxied_udp_only: false,
        headful_user_agent: true,
    };
    Ok((launch, own))
}

/// Asks the kernel for SIGTERM when our parent exits (handled as any SIGTERM). False when the
/// parent is gone already (we were re-parented to init).
fn exit_with_parent() -> bool {
    if let Err(e) = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM) {
        error!(error = %e, "EXIT_WITH_PARENT: the parent-death signal could not be set");
    }
    nix::unistd::getppid() != nix::unistd::Pid::from_raw(1)
}

/// The key source of `proxy` and `gateway`: a literal public key, or the Secrets Manager cache loaded
/// before serving (and refreshed until the run ends).
async fn proxy_keys(k: &KeyConfig, tasks: &Shutdown) -> Result<Arc<dyn KeySource>, FetchError> {
    match k {
        KeyConfig::Literal(key) => Ok(Arc::new(StaticKeys::new(key.clone()))),
        KeyConfig::SecretArn(arn) => {
            let sdk = aws::sdk_config().await;
            let fetcher = Arc::new(aws::SecretsManagerSecret(SecretsManagerKeys::public(
                &sdk, arn,
            )));
            let cache = SecretKeyCache::new(fetcher, tasks.tracker().clone());
            cache.load_initial(Duration::from_secs(10)).await?;
            cache.spawn_refresher(tasks.token().clone());
            Ok(cache)
        }
    }
}

/// How a session of `local` or `proxy` ended, logged.
fn ended(result: Result<EndReason, AppError>) -> Ending {
    match result {
        Ok(reason) => {
            info!(reason = ?reason, "session ended");
            Ending::from(&reason)
        }
        Err(e) => {
            error!(error = %e, cause = ?std::error::Error::source(&e).map(|s| s.to_string()), "session failed");
            Ending::Aborted
        }
    }
}
