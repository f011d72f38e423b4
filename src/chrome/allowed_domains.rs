//! A session's `allowedDomains`, as Browserbase defines them: top-level (main-frame)
//! navigations only to the listed domains and their subdomains; iframes and subresources are
//! not restricted. Enforced in Chrome before the request leaves: a browser-wide CDP `Fetch`
//! interception of document requests on a connection of the controller's own; a document
//! request of a page's main frame (a page target's id is its main frame's id) to another host
//! fails with `net::ERR_BLOCKED_BY_CLIENT` and never reaches the host.
//!
//! The rule must not lapse silently: should the connection end while the session runs, the
//! browser is killed (the session ends as a crash) rather than left unguarded.

use std::collections::{HashMap, HashSet};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use crate::cdp::{BrowserSocket, Cdp, CdpError};
use wallcrawler_contract::egress::host_allowed;

/// Starts guarding `browser`'s navigations until `stop`; when the guard's connection ends
/// before that, `on_lost` runs (it kills the browser).
pub async fn guard(
    browser: &BrowserSocket,
    allowed: Vec<String>,
    stop: CancellationToken,
    on_lost: impl FnOnce() + Send + 'static,
) -> Result<tokio::task::JoinHandle<()>, CdpError> {
    let mut cdp = Cdp::connect(browser).await?;
    cdp.call("Target.setDiscoverTargets", json!({"discover": true}))
        .await?;
    cdp.call(
        "Fetch.enable",
        json!({"patterns": [{"urlPattern": "*", "resourceType": "Document", "requestStage": "Request"}]}),
    )
    .await?;
    let targets = cdp.call("Target.getTargets", json!({})).await?;
    let mut g = Guard {
        allowed,
        pages: HashSet::new(),
        held: HashMap::new(),
    };
    for t in targets["targetInfos"].as_array().into_iter().flatten() {
        g.seen(t);
    }
    info!(
        domains = g.allowed.len(),
        "top-level navigations restricted to allowedDomains"
    );
    Ok(tokio::spawn(async move {
        let ended = tokio::select! {
            () = stop.cancelled() => None,
            e = g.run(&mut cdp) => Some(e),
        };
        if let Some(e) = ended {
            error!(error = ?e, "the allowedDomains guard lost its connection; ending the browser rather than leaving it unguarded");
            on_lost();
        }
    }))
}

struct Guard {
    allowed: Vec<String>,
    /// Page targets: their ids are their main frames' ids.
    pages: HashSet<String>,
    /// Paused requests of frames not known yet, by the id of the `Target.getTargets` asked
    /// for them.
    held: HashMap<u64, Value>,
}

impl Guard {
    fn seen(&mut self, info: &Value) {
        if info["type"] == "page"
            && let Some(id) = info["targetId"].as_str()
        {
            self.pages.insert(id.to_owned());
        }
    }

    async fn run(&mut self, cdp: &mut Cdp) -> Option<CdpError> {
        loop {
            let msg = match cdp.next_message().await {
                Ok(Some(m)) => m,
                Ok(None) => return None,
                Err(e) => return Some(e),
            };
            if let Err(e) = self.on(cdp, msg).await {
                return Some(e);
            }
        }
    }

    async fn on(&mut self, cdp: &mut Cdp, mut msg: Value) -> Result<(), CdpError> {
        if let Some(id) = msg["id"].as_u64() {
            // The targets asked for a request of an unknown frame: decide it now.
            if let Some(paused) = self.held.remove(&id) {
                for t in msg["result"]["targetInfos"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    self.seen(t);
                }
                self.decide(cdp, &paused).await?;
            }
            return Ok(());
        }
        let params = msg["params"].take();
        match msg["method"].as_str() {
            Some("Target.targetCreated" | "Target.targetInfoChanged") => {
                self.seen(&params["targetInfo"])
            }
            Some("Target.targetDestroyed") => {
                if let Some(id) = params["targetId"].as_str() {
                    self.pages.remove(id);
                }
            }
            Some("Fetch.requestPaused") => {
                let known = params["frameId"]
                    .as_str()
                    .is_some_and(|f| self.pages.contains(f));
                if known {
                    self.decide(cdp, &params).await?;
                } else {
                    // Maybe a page whose creation has not reached us yet: ask, then decide.
                    let id = cdp.send("Target.getTargets", json!({})).await?;
                    self.held.insert(id, params);
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Continues a paused document request, or fails it when it is a main frame's navigation
    /// to a host outside the allowed domains.
    async fn decide(&mut self, cdp: &mut Cdp, paused: &Value) -> Result<(), CdpError> {
        let request_id = paused["requestId"].clone();
        let main = paused["frameId"]
            .as_str()
            .is_some_and(|f| self.pages.contains(f));
        let url = paused["request"]["url"].as_str().unwrap_or("");
        if main && !navigation_allowed(&self.allowed, url) {
            // Not the URL: it is the tenant's, and may carry what a page encodes in it.
            warn!("a top-level navigation outside allowedDomains was refused");
            cdp.send(
                "Fetch.failRequest",
                json!({"requestId": request_id, "errorReason": "BlockedByClient"}),
            )
            .await?;
        } else {
            cdp.send("Fetch.continueRequest", json!({"requestId": request_id}))
                .await?;
        }
        Ok(())
    }
}

/// Whether a main frame may load `url`: an http(s) or ws(s) URL whose host is allowed.
fn navigation_allowed(allowed: &[String], url: &str) -> bool {
    let Some((scheme, rest)) = url.split_once("://") else {
        return false;
    };
    if !matches!(scheme, "http" | "https") {
        return false;
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = host_port.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        host_port.split(':').next().unwrap_or("")
    };
    !host.is_empty() && host_allowed(allowed, host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn navigations_are_judged_by_their_host() {
        let allowed = vec!["example.com".to_owned()];
        for ok in [
            "https://example.com/",
            "http://www.example.com:8080/x?y#z",
            "https://user:pw@a.example.com/",
        ] {
            assert!(navigation_allowed(&allowed, ok), "{ok}");
        }
        for refused in [
            "https://notexample.com/",
            "https://example.com.evil.net/",
            "https://evil.net/?example.com",
            "https://example.com@evil.net/",
            "ftp://example.com/",
            "https://[::1]/",
            "garbage",
        ] {
            assert!(!navigation_allowed(&allowed, refused), "{refused}");
        }
    }
}
