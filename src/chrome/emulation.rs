//! The page a session asked for, in every page of its browser — the first and those a client
//! opens, in a browser started before the session was known (a warm pool Chrome): its page
//! area (`viewport`) and its locales (`navigator.language(s)`, `Accept-Language`, `Intl`), and
//! whether certificate errors are ignored.
//!
//! A CDP connection of the controller's own, kept for the session: browser-wide
//! `Security.setIgnoreCertificateErrors`; and auto-attach to every new page (paused until its
//! overrides are set, so its first request already carries them) and attach to those already
//! open, each given `Emulation.setDeviceMetricsOverride`, `Emulation.setLocaleOverride` and
//! `Emulation.setUserAgentOverride` (the browser's own User-Agent, with the locales'
//! `acceptLanguage`).
//! A client that sets its own (Puppeteer's `defaultViewport`) overrides ours for its pages.

use std::collections::HashSet;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use wallcrawler_contract::browser::BrowserSettings;

use crate::cdp::{BrowserSocket, Cdp, CdpError};

/// What each page is given.
struct Overrides {
    metrics: Option<Value>,
    locale: Option<String>,
    user_agent: Option<Value>,
}

impl Overrides {
    fn of(settings: &BrowserSettings) -> Option<Overrides> {
        let metrics = settings.viewport.map(|v| {
            json!({"width": v.width, "height": v.height, "deviceScaleFactor": 0, "mobile": false})
        });
        let locale = settings.locales.first().cloned();
        let user_agent = settings
            .accept_language()
            // An empty userAgent keeps the browser's own (and its client hints: a userAgent
            // given here without its metadata would empty navigator.userAgentData.brands).
            .map(|al| json!({"userAgent": "", "acceptLanguage": al}));
        (metrics.is_some() || locale.is_some()).then_some(Overrides {
            metrics,
            locale,
            user_agent,
        })
    }

    async fn apply(&self, cdp: &mut Cdp, session: &str) -> Result<(), CdpError> {
        if let Some(m) = &self.metrics {
            cdp.send_to(session, "Emulation.setDeviceMetricsOverride", m.clone())
                .await?;
        }
        if let Some(l) = &self.locale {
            cdp.send_to(session, "Emulation.setLocaleOverride", json!({"locale": l}))
                .await?;
        }
        if let Some(ua) = &self.user_agent {
            cdp.send_to(session, "Emulation.setUserAgentOverride", ua.clone())
                .await?;
        }
        Ok(())
    }
}

/// Applies `settings` to `browser` until `stop` (nothing to keep when there is nothing to
/// set: the connection then ends at once).
pub async fn apply(
    browser: &BrowserSocket,
    settings: &BrowserSettings,
    stop: CancellationToken,
) -> Result<(), CdpError> {
    let mut cdp = Cdp::connect(browser).await?;
    if settings.ignore_certificate_errors {
        cdp.call(
            "Security.setIgnoreCertificateErrors",
            json!({"ignore": true}),
        )
        .await?;
        info!("certificate errors are ignored for this session (ignoreCertificateErrors)");
    }
    let Some(overrides) = Overrides::of(settings) else {
        if settings.ignore_certificate_errors {
            // The setting lives as long as the connection that set it.
            tokio::spawn(async move {
                tokio::select! {
                    () = stop.cancelled() => {}
                    _ = drain(&mut cdp) => {}
                }
            });
        }
        return Ok(());
    };
    cdp.call(
        "Target.setAutoAttach",
        json!({"autoAttach": true, "waitForDebuggerOnStart": true, "flatten": true}),
    )
    .await?;
    let targets = cdp.call("Target.getTargets", json!({})).await?;
    let mut attaching = HashSet::new();
    for t in targets["targetInfos"].as_array().into_iter().flatten() {
        if t["type"] == "page" {
            let id = cdp
                .send(
                    "Target.attachToTarget",
                    json!({"targetId": t["targetId"], "flatten": true}),
                )
                .await?;
            attaching.insert(id);
        }
    }
    info!(
        viewport = ?settings.viewport,
        locales = ?settings.locales,
        "every page of the session gets its viewport and locales"
    );
    tokio::spawn(async move {
        let ended = tokio::select! {
            () = stop.cancelled() => None,
            e = serve(&mut cdp, &overrides, attaching) => Some(e),
        };
        if let Some(e) = ended {
            warn!(error = ?e, "the session's page settings connection ended; new pages get the browser's defaults");
        }
    });
    Ok(())
}

/// Reads until the connection ends.
async fn drain(cdp: &mut Cdp) -> Option<CdpError> {
    loop {
        match cdp.next_message().await {
            Ok(Some(_)) => {}
            Ok(None) => return None,
            Err(e) => return Some(e),
        }
    }
}

async fn serve(cdp: &mut Cdp, o: &Overrides, mut attaching: HashSet<u64>) -> Option<CdpError> {
    loop {
        let msg = match cdp.next_message().await {
            Ok(Some(m)) => m,
            Ok(None) => return None,
            Err(e) => return Some(e),
        };
        if let Err(e) = on(cdp, o, &mut attaching, &msg).await {
            return Some(e);
        }
    }
}

async fn on(
    cdp: &mut Cdp,
    o: &Overrides,
    attaching: &mut HashSet<u64>,
    msg: &Value,
) -> Result<(), CdpError> {
    // A page open before the session, attached now.
    if let Some(id) = msg["id"].as_u64() {
        if attaching.remove(&id)
            && let Some(session) = msg["result"]["sessionId"].as_str()
        {
            o.apply(cdp, session).await?;
        }
        return Ok(());
    }
    if msg["method"] != "Target.attachedToTarget" {
        return Ok(());
    }
    let p = &msg["params"];
    let Some(session) = p["sessionId"].as_str() else {
        return Ok(());
    };
    if p["targetInfo"]["type"] == "page" {
        o.apply(cdp, session).await?;
        debug!("a new page got the session's viewport and locales");
    }
    if p["waitingForDebugger"] == true {
        cdp.send_to(session, "Runtime.runIfWaitingForDebugger", json!({}))
            .await?;
    }
    Ok(())
}
