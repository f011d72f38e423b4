//! The viewer's page: one static HTML document with its script and style inline (compiled in,
//! no CDN), and the Content-Security-Policy it is served with: only that script and style
//! (by hash), images from `data:` (the frames), connections to its own origin (the socket),
//! and embedding only by `VIEWER_FRAME_ANCESTORS`.

use std::sync::LazyLock;

use base64::Engine;
use sha2::{Digest, Sha256};

const SCRIPT: &str = include_str!("viewer.js");
const STYLE: &str = include_str!("viewer.css");

/// Default of `VIEWER_FRAME_ANCESTORS`: only pages of the proxy's own origin may embed it.
pub const DEFAULT_FRAME_ANCESTORS: &str = "'self'";

/// The page, assembled once.
pub static HTML: LazyLock<String> = LazyLock::new(|| {
    format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Live view</title>\
         <meta name=\"viewport\" content=\"width=device-width\"><style>{STYLE}</style></head>\
         <body><nav id=\"tabs\"></nav><canvas id=\"screen\" tabindex=\"0\"></canvas>\
         <script>{SCRIPT}</script></body></html>"
    )
});

fn hash(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    format!(
        "'sha256-{}'",
        base64::engine::general_purpose::STANDARD.encode(digest)
    )
}

/// The page's Content-Security-Policy, embeddable by `frame_ancestors`.
pub fn csp(frame_ancestors: &str) -> String {
    format!(
        "default-src 'none'; script-src {}; style-src {}; img-src data:; connect-src 'self'; \
         base-uri 'none'; form-action 'none'; frame-ancestors {frame_ancestors}",
        hash(SCRIPT),
        hash(STYLE)
    )
}

/// Whether `value` can be put in the policy as its `frame-ancestors` sources: source
/// expressions only (no `;` or `,` to start another directive, no control characters).
pub fn valid_frame_ancestors(value: &str) -> bool {
    !value.trim().is_empty()
        && value
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b';' && b != b',' || b == b' ')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_names_the_inline_script_and_style_by_hash() {
        let p = csp("'self' https://app.example.test");
        assert!(p.contains(&hash(SCRIPT)) && p.contains(&hash(STYLE)));
        assert!(p.ends_with("frame-ancestors 'self' https://app.example.test"));
        assert!(HTML.contains(SCRIPT) && !HTML.contains("http://") && !HTML.contains("https://"));
    }

    #[test]
    fn frame_ancestors_cannot_add_a_directive() {
        assert!(valid_frame_ancestors("'self' https://a.test"));
        for bad in ["", "'self'; script-src *", "a,b", "a\nb"] {
            assert!(!valid_frame_ancestors(bad), "{bad}");
        }
    }
}
