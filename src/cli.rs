//! The subcommands, as `main` runs them: configuration checked first (exit 64 with every
//! problem), then the mode until it ends, mapped to an exit status.

use std::io::Write as _;
use std::time::Duration;

use clap::Parser as _;
use tracing::error;
use wallcrawler_contract::Claims;
use wallcrawler_contract::viewer::ViewerClaims;

use crate::auth::unix_now;
use crate::chrome::flags;
use crate::config::{
    self, ChromeSettings, Cli, Command, ConfigErrors, GatewayConfig, LocalConfig, LogFormat,
    ProxyConfig, RunConfig, TokenConfig,
};
use crate::modes;
use crate::session::{EXIT_FAILURE, Ending};
use crate::shutdown::Shutdown;
use crate::telemetry;

/// Parses the command line and runs it; returns the process exit status.
pub fn main_with(cli: Cli) -> i32 {
    let command = cli.command.unwrap_or_else(|| {
        match Cli::try_parse_from(["wallcrawler-controller", "local"]) {
            Ok(Cli { command: Some(c) }) => c,
            _ => Command::Local(Default::default()),
        }
    });
    match command {
        Command::Token(a) => match TokenConfig::from_args(&a) {
            Ok(c) => token(&c),
            Err(e) => config_error(&e),
        },
        Command::Local(a) => {
            match LocalConfig::from_args(&a).and_then(|c| flags_for(&c.chrome).map(|f| (c, f))) {
                Ok((c, f)) => {
                    with_runtime(c.tuning.log_format, |tasks| modes::local::run(c, f, tasks))
                }
                Err(e) => config_error(&e),
            }
        }
        Command::Run(a) => {
            let mut s = a.auth.settings();
            s.extend(a.run.settings());
            s.extend(a.tuning.settings());
            match RunConfig::from_settings(&s).and_then(|c| flags_for(&c.chrome).map(|f| (c, f))) {
                Ok((c, f)) => with_runtime(c.tuning.log_format, |tasks| modes::run(c, f, tasks)),
                Err(e) => config_error(&e),
            }
        }
        Command::Proxy(a) => match ProxyConfig::from_args(&a) {
            Ok(c) => with_runtime(c.tuning.log_format, |tasks| modes::proxy::run(c, tasks)),
            Err(e) => config_error(&e),
        },
        Command::Gateway(a) => match GatewayConfig::from_args(&a) {
            Ok(c) => with_runtime(c.tuning.log_format, |tasks| modes::gateway::run(c, tasks)),
            Err(e) => config_error(&e),
        },
    }
}

fn config_error(e: &ConfigErrors) -> i32 {
    eprintln!("wallcrawler-controller: {e}");
    config::EXIT_CONFIG
}

fn flags_for(c: &ChromeSettings) -> Result<Vec<String>, ConfigErrors> {
    let text = match &c.flags_file {
        Some(p) => std::fs::read_to_string(p)
            .map_err(|e| ConfigErrors(vec![format!("CHROME_FLAGS_FILE {}: {e}", p.display())]))?,
        None => flags::BUILTIN_FLAGS.to_owned(),
    };
    flags::parse_flags(&text).map_err(|e| ConfigErrors(vec![format!("Chrome flags: {e}")]))
}

/// How long the end of a run waits for tasks still running after its mode returned (connection
/// tasks winding down after their relays ended, the relay thread joining). The mode's own end
/// sequence has used `SHUTDOWN_BUDGET_SECONDS` by then; this is what ECS's stop timeout leaves
/// beyond it (30 s against the default 25 s budget).
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// Runs `mode` on a new runtime with the process's [`Shutdown`] (signals listened for), then
/// drains every task it left; the exit status of how it ended.
fn with_runtime<F, Fut>(format: LogFormat, mode: F) -> i32
where
    F: FnOnce(Shutdown) -> Fut,
    Fut: Future<Output = Ending>,
{
    telemetry::init_logging(format);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            error!(error = %e, "could not start the async runtime");
            return EXIT_FAILURE;
        }
    };
    let code = rt.block_on(async {
        let tasks = Shutdown::new();
        tasks.listen_for_signals();
        let ending = mode(tasks.clone()).await;
        tasks.drain(DRAIN_GRACE).await;
        ending.exit_code()
    });
    // Every task has ended (or was reported by the drain); don't wait on stragglers.
    rt.shutdown_timeout(Duration::from_millis(200));
    code
}

fn token(c: &TokenConfig) -> i32 {
    let now = unix_now();
    let t = match &c.viewer {
        None => Claims::new(&c.session_id, &c.project_id, now, c.ttl).mint(&c.key.0),
        Some((mode, page)) => {
            let claims = ViewerClaims::new(&c.session_id, &c.project_id, *mode, now, c.ttl);
            let claims = match page.as_deref().map(|p| claims.for_page(p)) {
                None => claims,
                Some(Ok(one)) => one,
                Some(Err(e)) => {
                    error!("--page: {e}");
                    return EXIT_FAILURE;
                }
            };
            claims.mint(&c.key.0)
        }
    };
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{t}").and_then(|_| out.flush()).is_err() {
        return EXIT_FAILURE;
    }
    0
}
