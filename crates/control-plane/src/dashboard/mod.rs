//! `GET /dashboard`: one static page (HTML with its script and style inline, compiled in, no
//! CDN, no build step) where a person pastes an API key and looks at the project's sessions —
//! the list, a session's live view, its log (streamed while it runs), its recording and its
//! downloads — through the same `/v1/…` routes the SDKs call, with the key in the
//! `x-bb-api-key` header. The page itself needs no key: it holds no data.
//!
//! The key stays in the tab (`sessionStorage`), never in a URL, a cookie or `localStorage`;
//! every string from the API is put in the page as text. The answer's Content-Security-Policy
//! ([`csp`]) allows only that script and style (by hash), requests to the API's own origin,
//! frames of the live viewer's origin (the connect gateway's; none in direct mode, where each
//! session's viewer is on its own task) and media from the API and the download origins
//! ([`crate::app::Settings::download_origins`]); nothing may frame the dashboard, and nothing
//! keeps a copy of it (`no-store`).

use std::sync::LazyLock;

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use sha2::{Digest, Sha256};

use crate::app::{App, Settings};

const PAGE: &str = include_str!("dashboard.html");
const SCRIPT: &str = include_str!("dashboard.js");
const STYLE: &str = include_str!("dashboard.css");

/// The page, assembled once: `dashboard.html` with the style and script put inline.
pub static HTML: LazyLock<String> = LazyLock::new(|| {
    PAGE.replacen("/*STYLE*/", STYLE, 1)
        .replacen("/*SCRIPT*/", SCRIPT, 1)
});

/// `'sha256-…'` of an inline script or style, as a CSP source.
fn hash(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    format!(
        "'sha256-{}'",
        base64::engine::general_purpose::STANDARD.encode(digest)
    )
}

/// The origin a session's live viewer is served from: the connect gateway's (`https://` for
/// `wss://`), as `/debug` names it; `None` in direct mode.
pub fn viewer_origin(settings: &Settings) -> Option<String> {
    settings
        .connect_base
        .as_deref()
        .and_then(crate::debug::viewer_base)
}

/// The dashboard's Content-Security-Policy under `settings` (see the module doc).
pub fn csp(settings: &Settings) -> String {
    let frames = viewer_origin(settings).unwrap_or_else(|| "'none'".to_owned());
    let mut media = String::from("'self'");
    for origin in &settings.download_origins {
        media.push(' ');
        media.push_str(origin);
    }
    format!(
        "default-src 'none'; script-src {}; style-src {}; connect-src 'self'; \
         frame-src {frames}; media-src {media}; img-src 'none'; base-uri 'none'; \
         form-action 'none'; frame-ancestors 'none'",
        hash(SCRIPT),
        hash(STYLE)
    )
}

/// `GET /dashboard`: the page, with its policy, `X-Frame-Options: DENY` and `no-store`.
pub async fn dashboard(State(app): State<App>) -> Response {
    let mut res = (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        HTML.as_str(),
    )
        .into_response();
    let h = res.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&csp(&app.settings)) {
        h.insert(header::CONTENT_SECURITY_POLICY, v);
    }
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // The viewer's URLs carry credentials; the dashboard's own URL never does, but no page
    // it frames or links learns where it was opened from.
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_names_the_inline_script_and_style_by_hash_and_forbids_framing() {
        let p = csp(&Settings::default());
        assert!(p.contains(&hash(SCRIPT)) && p.contains(&hash(STYLE)), "{p}");
        assert!(p.contains("connect-src 'self';"), "{p}");
        assert!(p.contains("frame-ancestors 'none'"), "{p}");
        // Direct mode: no viewer origin is known when the page is served.
        assert!(p.contains("frame-src 'none';"), "{p}");
        assert!(p.contains("media-src 'self';"), "{p}");
        assert!(!p.contains("unsafe"), "{p}");
    }

    #[test]
    fn the_viewer_and_download_origins_are_allowed() {
        let settings = Settings {
            connect_base: Some("wss://connect.example.test".to_owned()),
            download_origins: vec!["https://b.s3.us-east-1.amazonaws.com".to_owned()],
            ..Settings::default()
        };
        let p = csp(&settings);
        assert!(p.contains("frame-src https://connect.example.test;"), "{p}");
        assert!(
            p.contains("media-src 'self' https://b.s3.us-east-1.amazonaws.com;"),
            "{p}"
        );
        let local = Settings {
            connect_base: Some("ws://127.0.0.1:4567".to_owned()),
            ..Settings::default()
        };
        assert!(csp(&local).contains("frame-src http://127.0.0.1:4567;"));
    }

    #[test]
    fn the_page_is_whole_and_loads_nothing_from_elsewhere() {
        assert!(HTML.contains(SCRIPT) && HTML.contains(STYLE));
        assert!(!HTML.contains("/*SCRIPT*/") && !HTML.contains("/*STYLE*/"));
        assert!(!HTML.contains("http://") && !HTML.contains("https://"));
        // The key never goes anywhere but a header: not into storage that outlives the tab,
        // nor a cookie.
        assert!(!SCRIPT.contains("localStorage") && !SCRIPT.contains("document.cookie"));
        assert!(!SCRIPT.contains("innerHTML") && !SCRIPT.contains("insertAdjacentHTML"));
    }
}
