//! `local`: a Chrome behind the proxy on loopback for a developer, with a fresh key and
//! profile, its connectUrl and live view URL printed on stdout (the URL also what a client's
//! `Wallcrawler.requestHandoff` is answered with), until a signal or the session's own end.

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tracing::{error, info};
use wallcrawler_contract::viewer::{self, ViewerClaims};
use wallcrawler_contract::{Claims, SigningKey, VerifyingKey};

use super::{ended, launch_options, profile_tempdir};
use crate::auth::{Authenticator, KeySource, StaticKeys, unix_now};
use crate::browser::{self, BrowserOptions, ProxyOptions};
use crate::config::LocalConfig;
use crate::edge::Limits;
use crate::session::Ending;
use crate::shutdown::Shutdown;

/// Runs `local` until it ends.
pub(crate) async fn run(c: LocalConfig, flags: Vec<String>, tasks: Shutdown) -> Ending {
    let session_id = format!("sess_{}", uuid::Uuid::new_v4());
    let now = unix_now();
    let (token, live, public) = mint(&c, &session_id, now);
    let profile = match profile_tempdir() {
        Ok(d) => d,
        Err(e) => {
            error!(error = %e, "could not create a profile directory");
            return Ending::Aborted;
        }
    };
    // `_own_uid` is released (what still runs as it killed) when this function returns.
    let (chrome, _own_uid) = match launch_options(&c.chrome, flags, profile.path().to_owned()) {
        Ok(o) => o,
        Err(e) => {
            error!("{e}");
            return Ending::Aborted;
        }
    };
    crate::chrome::ask_user_agent_ahead(&chrome.binary, &tasks);
    if !c.chrome.egress_allow.is_empty() {
        info!(allow = ?c.chrome.egress_allow, "pages may reach these non-public addresses (your machine's loopback by default in local mode; EGRESS_ALLOW changes it)");
    }
    let keys: Arc<dyn KeySource> = Arc::new(StaticKeys::new(public));
    let opts = BrowserOptions {
        proxy: ProxyOptions {
            auth: Authenticator::new(keys, session_id.clone(), None, 30),
            listen: SocketAddr::from(([127, 0, 0, 1], c.port)),
            metrics_addr: c.tuning.metrics_addr,
            limits: Limits {
                files: crate::session::session_files(&chrome.user_data_dir, None),
                ..Limits::from_tuning(&c.tuning)
            },
        },
        chrome,
        idle: None,
        expires_at: None,
        shutdown_budget: Duration::from_secs(25),
        background_nice: None,
        tasks: tasks.clone(),
    };
    let result = browser::run_browser(opts, tasks.token().clone(), |ready| {
        info!(
            session.id = %session_id,
            proxy = %ready.proxy_addr,
            chrome.pid = ready.chrome_pid,
            "local session ready; connect with the connectUrl printed on stdout"
        );
        let live_view = format!("http://{}/viewer?t={live}", ready.proxy_addr);
        // The URL a client's `Wallcrawler.requestHandoff` is answered with.
        ready
            .handoffs
            .set_live_view(live_view.clone(), now + c.token_ttl);
        let addr = ready.proxy_addr;
        let connect_url =
            wallcrawler_contract::session::connect_url(&addr.ip().to_string(), addr.port(), &token);
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "connectUrl: {connect_url}\nliveViewUrl: {live_view}");
        let _ = out.flush();
    })
    .await;
    crate::file_rules::remove_beside_profile(profile.path());
    ended(result)
}

/// The session's token and live-view credential (control mode, for as long as the token), and
/// the public key that checks them. `local` mints the one token it prints, then keeps only the
/// public key: the proxy checks tokens as a task does.
fn mint(c: &LocalConfig, session_id: &str, now: u64) -> (String, String, VerifyingKey) {
    let key = c
        .key
        .as_ref()
        .map_or_else(SigningKey::generate, |k| k.0.clone());
    let token = Claims::new(session_id, "", now, c.token_ttl).mint(&key);
    let live =
        ViewerClaims::new(session_id, "", viewer::Mode::Control, now, c.token_ttl).mint(&key);
    (token, live, key.verifying_key().clone())
}
