//! `proxy`: the authenticating proxy alone, in front of a CDP endpoint it does not run, until
//! a signal.

use tracing::{error, info};

use super::{ended, proxy_keys};
use crate::auth::Authenticator;
use crate::browser::{self, ProxyOptions};
use crate::config::ProxyConfig;
use crate::edge::Limits;
use crate::session::Ending;
use crate::shutdown::Shutdown;

/// Runs `proxy` until a signal.
pub(crate) async fn run(c: ProxyConfig, tasks: Shutdown) -> Ending {
    let keys = match proxy_keys(&c.auth.key, &tasks).await {
        Ok(k) => k,
        Err(e) => {
            error!(error = %e, "the public key secret is unavailable");
            return Ending::Aborted;
        }
    };
    let upstream = match tokio::net::lookup_host(&c.upstream)
        .await
        .map(|mut a| a.next())
    {
        Ok(Some(a)) => a,
        _ => {
            error!(upstream = %c.upstream, "cannot resolve the upstream address");
            return Ending::Aborted;
        }
    };
    let auth = Authenticator::new(
        keys,
        c.auth.session_id.clone(),
        c.auth.project_id.clone(),
        c.auth.leeway_seconds,
    );
    let opts = ProxyOptions {
        auth,
        listen: c.listen,
        metrics_addr: c.tuning.metrics_addr,
        limits: Limits::from_tuning(&c.tuning),
    };
    let result = browser::run_proxy(opts, upstream, &tasks, |addr| {
        info!(listen = %addr, upstream = %upstream, "proxy ready");
    })
    .await;
    ended(result)
}
