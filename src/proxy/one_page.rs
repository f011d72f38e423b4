//! What an inspector socket opened with a one-page live-view credential may send: only
//! commands that concern that page ([`page_rule`]).
//!
//! The socket is Chrome's page endpoint (`/devtools/page/<id>`), but a page session reaches
//! further than its page: `Target` lists, attaches to and opens other targets, `Network` and
//! `Storage` read and change the browser's whole cookie jar, cache and other origins' data,
//! `Browser` and `SystemInfo` are the browser's own. So the rule is an allowlist (Chromium
//! 156's protocol read domain by domain):
//!
//! | domain | decision |
//! |---|---|
//! | [`PAGE_DOMAINS`] (`Page`, `Runtime`, `DOM`, `CSS`, `Debugger`, …) | forwarded: they act on the target the command is sent to (a page, or a frame or worker of it attached by `Target.setAutoAttach`); the renderer finds storage by the page's own frames |
//! | `Target` | `setAutoAttach` (the page's own frames and workers), `detachFromTarget`, `setRemoteLocations` forwarded; `getTargetInfo`, `sendMessageToTarget` without a `targetId` or with the page's; `attachToTarget`, `activateTarget`, `closeTarget`, `autoAttachRelated` with the page's `targetId` only; every other refused (`getTargets`, `setDiscoverTargets`, `createTarget`, browser contexts, …) |
//! | `Network` | forwarded but the browser's cookie jar and cache: `getAllCookies`, `setCookie`, `setCookies`, `deleteCookies`, `clearBrowserCookies`, `clearBrowserCache`, `deleteDeviceBoundSession` refused; `getCookies` goes on without its `urls` (Chrome then answers the cookies of the page and its frames) |
//! | `Storage` | `getStorageKeyForFrame`, `getStorageKey` forwarded; the rest (cookies of the browser context, other origins' data, quota and tracking) refused |
//! | `Security` | forwarded but `setIgnoreCertificateErrors` (browser-wide) |
//! | `Page.navigate` | forwarded for `http:`, `https:`, `data:` and `about:blank` only: a `chrome:` page (or `about:` standing for one) shows the browser's history, tabs and settings |
//! | every other domain (`Browser`, `SystemInfo`, `Extensions`, `PWA`, `ServiceWorker`, `BackgroundService`, `Cast`, `Tethering`, `FileSystem`, …, and any newer one) | refused |
//!
//! Refused commands are answered with a CDP error by the inspector; the DevTools frontend
//! carries on without them (its Elements, Console, Sources, Network and Performance panels
//! work; the Application panel shows no service workers and cannot edit cookies).

use serde::Deserialize;
use serde_json::Value;

/// Domains whose every command acts on the target it is sent to.
pub const PAGE_DOMAINS: [&str; 40] = [
    "Accessibility",
    "Animation",
    "Audits",
    "Autofill",
    "CSS",
    "CacheStorage",
    "Console",
    "DOM",
    "DOMDebugger",
    "DOMSnapshot",
    "DOMStorage",
    "Debugger",
    "DeviceAccess",
    "DeviceOrientation",
    "Emulation",
    "EventBreakpoints",
    "FedCm",
    "Fetch",
    "HeadlessExperimental",
    "HeapProfiler",
    "IO",
    "IndexedDB",
    "Input",
    "Inspector",
    "LayerTree",
    "Log",
    "Media",
    "Memory",
    "Overlay",
    "Page",
    "Performance",
    "PerformanceTimeline",
    "Preload",
    "Profiler",
    "Runtime",
    "Schema",
    "Tracing",
    "WebAudio",
    "WebAuthn",
    "Security",
];

/// `Network` commands that reach the browser's cookie jar or cache rather than the page.
const NETWORK_BROWSER_WIDE: [&str; 7] = [
    "getAllCookies",
    "setCookie",
    "setCookies",
    "deleteCookies",
    "clearBrowserCookies",
    "clearBrowserCache",
    "deleteDeviceBoundSession",
];

/// What becomes of one command on a one-page inspector socket.
#[derive(Debug, PartialEq, Eq)]
pub enum PageRule {
    /// It concerns the page: judged further by the file rules.
    Pass,
    /// It reaches beyond the page: answered with a CDP error.
    Refuse,
    /// This command instead (a `Network.getCookies` without `urls`).
    Rewrite(Vec<u8>),
}

#[derive(Deserialize)]
struct With<P> {
    #[serde(default = "Option::default")]
    params: Option<P>,
}

#[derive(Deserialize)]
struct TargetParams {
    #[serde(rename = "targetId", default)]
    target_id: Option<Value>,
}

#[derive(Deserialize)]
struct NavigateParams {
    #[serde(default)]
    url: Option<Value>,
}

/// The rule for `method` (of the message `plain`) on a socket held to target `page`.
pub fn page_rule(plain: &[u8], method: &str, page: &str) -> serde_json::Result<PageRule> {
    let Some((domain, command)) = method.split_once('.') else {
        return Ok(PageRule::Refuse);
    };
    let target = || -> serde_json::Result<Option<Value>> {
        Ok(serde_json::from_slice::<With<TargetParams>>(plain)?
            .params
            .and_then(|p| p.target_id))
    };
    let own = |t: Option<Value>| t.as_ref().and_then(Value::as_str) == Some(page);
    let pass = |yes: bool| {
        if yes {
            PageRule::Pass
        } else {
            PageRule::Refuse
        }
    };
    Ok(match (domain, command) {
        ("Target", "setAutoAttach" | "detachFromTarget" | "setRemoteLocations") => PageRule::Pass,
        ("Target", "getTargetInfo" | "sendMessageToTarget") => {
            let t = target()?;
            pass(t.is_none() || own(t))
        }
        ("Target", "attachToTarget" | "activateTarget" | "closeTarget" | "autoAttachRelated") => {
            pass(own(target()?))
        }
        ("Target", _) => PageRule::Refuse,
        ("Network", "getCookies") => without_urls(plain)?,
        ("Network", c) => pass(!NETWORK_BROWSER_WIDE.contains(&c)),
        ("Storage", c) => pass(matches!(c, "getStorageKeyForFrame" | "getStorageKey")),
        ("Security", "setIgnoreCertificateErrors") => PageRule::Refuse,
        ("Page", "navigate") => {
            let url = serde_json::from_slice::<With<NavigateParams>>(plain)?
                .params
                .and_then(|p| p.url);
            pass(url.as_ref().and_then(Value::as_str).is_some_and(web_url))
        }
        (d, _) => pass(PAGE_DOMAINS.contains(&d)),
    })
}

/// Whether a URL a one-page inspector navigates to is a web page (not one of the browser's
/// own): `http:`, `https:`, `data:`, or `about:blank`.
fn web_url(url: &str) -> bool {
    let lower = super::guard::as_browser_reads(url);
    ["http:", "https:", "data:"]
        .iter()
        .any(|s| lower.starts_with(s))
        || lower == "about:blank"
}

/// `Network.getCookies` with its `urls` taken out: Chrome then answers the cookies of the page
/// and its frames. Passed as it came when it names none.
fn without_urls(plain: &[u8]) -> serde_json::Result<PageRule> {
    let mut command: serde_json::Map<String, Value> = serde_json::from_slice(plain)?;
    let Some(Value::Object(params)) = command.get_mut("params") else {
        return Ok(PageRule::Pass);
    };
    if params.remove("urls").is_none() {
        return Ok(PageRule::Pass);
    }
    Ok(PageRule::Rewrite(serde_json::to_vec(&command)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = "0123456789ABCDEF0123456789ABCDEF";
    const OTHER: &str = "FEDCBA9876543210FEDCBA9876543210";

    fn rule(method: &str, params: Value) -> PageRule {
        let m = serde_json::json!({"id": 1, "method": method, "params": params}).to_string();
        page_rule(m.as_bytes(), method, PAGE).unwrap()
    }

    #[test]
    fn other_targets_are_out_of_reach() {
        let none = serde_json::json!({});
        for m in [
            "Target.getTargets",
            "Target.setDiscoverTargets",
            "Target.createTarget",
            "Target.attachToBrowserTarget",
            "Target.createBrowserContext",
            "Target.getBrowserContexts",
            "Target.disposeBrowserContext",
            "Target.exposeDevToolsProtocol",
            "Target.openDevTools",
            "Target.getDevToolsTarget",
            "Target.somethingNew",
        ] {
            assert_eq!(rule(m, none.clone()), PageRule::Refuse, "{m}");
        }
        for m in [
            "Target.attachToTarget",
            "Target.activateTarget",
            "Target.closeTarget",
            "Target.autoAttachRelated",
            "Target.getTargetInfo",
            "Target.sendMessageToTarget",
        ] {
            let other = serde_json::json!({"targetId": OTHER, "flatten": true});
            assert_eq!(rule(m, other), PageRule::Refuse, "{m}");
            let own = serde_json::json!({"targetId": PAGE, "flatten": true});
            assert_eq!(rule(m, own), PageRule::Pass, "{m}");
            let odd = serde_json::json!({"targetId": [PAGE]});
            assert_eq!(rule(m, odd), PageRule::Refuse, "{m}");
        }
        assert_eq!(
            rule("Target.attachToTarget", none.clone()),
            PageRule::Refuse
        );
        assert_eq!(rule("Target.getTargetInfo", none.clone()), PageRule::Pass);
        let auto = serde_json::json!({"autoAttach": true, "waitForDebuggerOnStart": true, "flatten": true});
        assert_eq!(rule("Target.setAutoAttach", auto), PageRule::Pass);
    }

    #[test]
    fn the_browsers_cookies_storage_and_own_domains_are_refused() {
        let none = serde_json::json!({});
        for m in [
            "Network.getAllCookies",
            "Network.setCookie",
            "Network.setCookies",
            "Network.deleteCookies",
            "Network.clearBrowserCookies",
            "Network.clearBrowserCache",
            "Storage.getCookies",
            "Storage.clearCookies",
            "Storage.clearDataForOrigin",
            "Storage.getSharedStorageEntries",
            "Storage.trackIndexedDBForOrigin",
            "Browser.getVersion",
            "Browser.close",
            "Browser.grantPermissions",
            "SystemInfo.getProcessInfo",
            "Extensions.getExtensions",
            "PWA.install",
            "ServiceWorker.enable",
            "BackgroundService.startObserving",
            "Cast.startDesktopMirroring",
            "Tethering.bind",
            "Security.setIgnoreCertificateErrors",
            "Wallcrawler.requestHandoff",
            "NoDomain",
            "Future.thing",
        ] {
            assert_eq!(rule(m, none.clone()), PageRule::Refuse, "{m}");
        }
        for m in [
            "Runtime.evaluate",
            "Page.enable",
            "DOM.getDocument",
            "Network.enable",
            "Network.getResponseBody",
            "Storage.getStorageKeyForFrame",
            "Security.enable",
            "Tracing.start",
            "Debugger.enable",
        ] {
            assert_eq!(rule(m, none.clone()), PageRule::Pass, "{m}");
        }
    }

    #[test]
    fn get_cookies_loses_its_urls() {
        let PageRule::Rewrite(p) = rule(
            "Network.getCookies",
            serde_json::json!({"urls": ["https://bank.example/"]}),
        ) else {
            panic!("not rewritten");
        };
        let v: Value = serde_json::from_slice(&p).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"id": 1, "method": "Network.getCookies", "params": {}})
        );
        assert_eq!(
            rule("Network.getCookies", serde_json::json!({})),
            PageRule::Pass
        );
    }

    #[test]
    fn the_page_navigates_to_web_pages_only() {
        for url in [
            "https://example.com/",
            "http://127.0.0.1:8080/x",
            "data:text/html,hi",
            "about:blank",
            " HTTPS://a/",
        ] {
            let p = serde_json::json!({"url": url});
            assert_eq!(rule("Page.navigate", p), PageRule::Pass, "{url}");
        }
        for url in [
            "chrome://history",
            "chrome://inspect/#pages",
            "about:history",
            "about:blankx",
            "chrome-untrusted://x",
            "devtools://devtools/bundled/inspector.html",
            "view-source:chrome://settings",
            "file:///etc/passwd",
            "javascript:1",
        ] {
            let p = serde_json::json!({"url": url});
            assert_eq!(rule("Page.navigate", p), PageRule::Refuse, "{url}");
        }
        assert_eq!(
            rule("Page.navigate", serde_json::json!({"url": 1})),
            PageRule::Refuse
        );
    }
}
