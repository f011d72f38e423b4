//! Rewriting Chrome's discovery answers so clients come back through the proxy.
//!
//! Chrome puts the `Host` it was asked with (our loopback address) into `webSocketDebuggerUrl`
//! and `devtoolsFrontendUrl`. Clients must instead be sent back to the address *they* used, and
//! a client that authenticated with the query parameter gets the token in those URLs too, since
//! it will dial them exactly as given (Playwright's `connectOverCDP(httpUrl)` does).

use serde_json::Value;

pub use crate::auth::{TOKEN_PARAM, token_params};

/// Whether `host` is safe to echo into URLs: an authority (`name[:port]`, `[v6]:port`), nothing
/// that could change a URL's structure.
pub fn is_valid_authority(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 255
        && host.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':' | b'[' | b']')
        })
}

/// Rewrites every `webSocketDebuggerUrl` and `devtoolsFrontendUrl` in a `/json/version` or
/// `/json/list` body to point at `authority`, carrying `token` when given; `secure`: the
/// client's connection was TLS (ended in front of the proxy), so the URLs are `wss://` too.
pub fn rewrite_discovery(
    body: &[u8],
    authority: &str,
    token: Option<&str>,
    secure: bool,
) -> Result<Vec<u8>, serde_json::Error> {
    let mut value: Value = serde_json::from_slice(body)?;
    match &mut value {
        Value::Array(items) => items
            .iter_mut()
            .for_each(|i| rewrite_object(i, authority, token, secure)),
        other => rewrite_object(other, authority, token, secure),
    }
    serde_json::to_vec_pretty(&value)
}

fn rewrite_object(v: &mut Value, authority: &str, token: Option<&str>, secure: bool) {
    let Some(obj) = v.as_object_mut() else { return };
    if let Some(Value::String(url)) = obj.get_mut("webSocketDebuggerUrl") {
        *url = rewrite_ws_url(url, authority, token, secure);
    }
    if let Some(Value::String(url)) = obj.get_mut("devtoolsFrontendUrl") {
        *url = rewrite_frontend_url(url, authority, token, secure);
    }
}

/// `ws://127.0.0.1:9222/devtools/page/X` → `ws://<authority>/devtools/page/X[?signingKey=T]`
/// (`wss://` when `secure`).
pub fn rewrite_ws_url(url: &str, authority: &str, token: Option<&str>, secure: bool) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("ws", url));
    let scheme = if secure { "wss" } else { scheme };
    let path = rest.find('/').map_or("/", |i| &rest[i..]);
    let mut out = format!("{scheme}://{authority}{path}");
    if let Some(t) = token {
        out.push(if path.contains('?') { '&' } else { '?' });
        out.push_str(TOKEN_PARAM);
        out.push('=');
        out.extend(form_urlencoded::byte_serialize(t.as_bytes()));
    }
    out
}

/// Whether a `devtoolsFrontendUrl` is a path on the server that answered, i.e. on the proxy
/// once rewritten. Chrome sends either such a path (`/devtools/inspector.html?ws=…`) or an
/// absolute URL on another host (`https://chrome-devtools-frontend.appspot.com/…?ws=…`). A
/// scheme, `//` or `/\` (which browsers read as `//`) means another host; so does any control
/// character or space, since URL parsers drop tabs and newlines (`/<TAB>/host` is `//host`).
pub fn is_proxy_relative(url: &str) -> bool {
    let b = url.as_bytes();
    b.first() == Some(&b'/')
        && !matches!(b.get(1), Some(b'/' | b'\\'))
        && !b.iter().any(|c| c.is_ascii_control() || *c == b' ')
}

/// Rewrites the `ws=` (or `wss=`) parameter of a DevTools frontend URL to `authority` (named
/// `wss=` when `secure`: the frontend then dials `wss://`). The token is added only when the
/// URL itself points back at the proxy ([`is_proxy_relative`]): a frontend on another host
/// must never receive it.
pub fn rewrite_frontend_url(
    url: &str,
    authority: &str,
    token: Option<&str>,
    secure: bool,
) -> String {
    let token = token.filter(|_| is_proxy_relative(url));
    for key in ["?ws=", "&ws=", "?wss=", "&wss="] {
        if let Some(start) = url.find(key) {
            let value_start = start + key.len();
            // `?` or `&`, then the parameter's name as the client's scheme wants it.
            let name_start = start + 1;
            let value_end = url[value_start..]
                .find('&')
                .map_or(url.len(), |i| value_start + i);
            let value = &url[value_start..value_end];
            let path = value.find('/').map_or("", |i| &value[i..]);
            let mut new_value = format!("{authority}{path}");
            if let Some(t) = token {
                // The frontend percent-decodes the parameter before dialling it.
                new_value.push_str("%3F");
                new_value.push_str(TOKEN_PARAM);
                new_value.push_str("%3D");
                new_value.extend(form_urlencoded::byte_serialize(t.as_bytes()));
            }
            let name = if secure { "wss=" } else { &key[1..] };
            return format!(
                "{}{name}{new_value}{}",
                &url[..name_start],
                &url[value_end..]
            );
        }
    }
    url.to_owned()
}

/// Whether one `name[=value]` pair of a query is the token parameter. The name is decoded
/// exactly as [`token_params`] decodes it (`form_urlencoded`: percent escapes and `+`), so
/// every spelling that is accepted as the token is also stripped (`signing%4Bey=…`).
fn is_token_pair(pair: &str) -> bool {
    form_urlencoded::parse(pair.as_bytes())
        .next()
        .is_some_and(|(name, _)| name == TOKEN_PARAM)
}

/// The query with every `signingKey` parameter removed (others kept byte for byte), or `None`
/// when nothing is left.
pub fn strip_token_param(query: &str) -> Option<String> {
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| !pair.is_empty() && !is_token_pair(pair))
        .collect();
    if kept.is_empty() {
        None
    } else {
        Some(kept.join("&"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VERSION: &str = r#"{"Browser":"Chrome/156","Protocol-Version":"1.3","webSocketDebuggerUrl":"ws://127.0.0.1:9222/devtools/browser/abc"}"#;
    const LIST: &str = r#"[{"id":"P1","type":"page","url":"about:blank","devtoolsFrontendUrl":"https://chrome-devtools-frontend.appspot.com/serve_rev/@x/inspector.html?ws=127.0.0.1:9222/devtools/page/P1","webSocketDebuggerUrl":"ws://127.0.0.1:9222/devtools/page/P1"},{"id":"B","type":"browser_ui"}]"#;

    #[test]
    fn version_points_back_at_the_proxy_with_the_token() {
        let out = rewrite_discovery(
            VERSION.as_bytes(),
            "browser.example.test:9223",
            Some("t.k.n"),
            false,
        )
        .unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            v["webSocketDebuggerUrl"],
            "ws://browser.example.test:9223/devtools/browser/abc?signingKey=t.k.n"
        );
        assert_eq!(v["Browser"], "Chrome/156");
    }

    /// [`LIST`] rewritten for `host`: the answer, and its first entry's two URLs.
    fn list_for(host: &str, token: Option<&str>, secure: bool) -> (Vec<u8>, Value, Value) {
        let out = rewrite_discovery(LIST.as_bytes(), host, token, secure).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        let urls = (
            v[0]["webSocketDebuggerUrl"].clone(),
            v[0]["devtoolsFrontendUrl"].clone(),
        );
        (out, urls.0, urls.1)
    }

    #[test]
    fn list_rewrites_every_url_and_keeps_other_entries() {
        let (out, ws, frontend) = list_for("10.0.0.1:9223", None, false);
        assert_eq!(ws, "ws://10.0.0.1:9223/devtools/page/P1");
        assert_eq!(
            frontend,
            "https://chrome-devtools-frontend.appspot.com/serve_rev/@x/inspector.html?ws=10.0.0.1:9223/devtools/page/P1"
        );
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v[1]["type"], "browser_ui");
        assert!(!String::from_utf8(out).unwrap().contains("127.0.0.1"));
    }

    #[test]
    fn behind_tls_the_urls_are_secure() {
        let (_, ws, frontend) = list_for("connect.example.test", Some("a.b"), true);
        assert_eq!(
            ws,
            "wss://connect.example.test/devtools/page/P1?signingKey=a.b"
        );
        assert_eq!(
            frontend,
            "https://chrome-devtools-frontend.appspot.com/serve_rev/@x/inspector.html?wss=connect.example.test/devtools/page/P1"
        );
        let relative = rewrite_frontend_url(
            "/devtools/inspector.html?ws=127.0.0.1:1/devtools/page/P&x=1",
            "h",
            None,
            true,
        );
        assert_eq!(
            relative,
            "/devtools/inspector.html?wss=h/devtools/page/P&x=1"
        );
    }

    #[test]
    fn frontend_url_carries_an_encoded_token() {
        let u = rewrite_frontend_url(
            "/devtools/inspector.html?ws=127.0.0.1:1/devtools/page/P&x=1",
            "h:2",
            Some("a.b"),
            false,
        );
        assert_eq!(
            u,
            "/devtools/inspector.html?ws=h:2/devtools/page/P%3FsigningKey%3Da.b&x=1"
        );
    }

    #[test]
    fn only_urls_on_the_proxy_carry_the_token() {
        let absolute = rewrite_frontend_url(
            "https://chrome-devtools-frontend.appspot.com/serve_rev/@x/inspector.html?ws=127.0.0.1:1/devtools/page/P",
            "h:2",
            Some("a.b"),
            false,
        );
        assert_eq!(
            absolute,
            "https://chrome-devtools-frontend.appspot.com/serve_rev/@x/inspector.html?ws=h:2/devtools/page/P"
        );
        for elsewhere in [
            "//evil.example/inspector.html?ws=127.0.0.1:1/devtools/page/P",
            "/\\evil.example/inspector.html?ws=127.0.0.1:1/devtools/page/P",
            "/\t/evil.example/inspector.html?ws=127.0.0.1:1/devtools/page/P",
            "devtools://devtools/bundled/inspector.html?ws=127.0.0.1:1/devtools/page/P",
            "inspector.html?ws=127.0.0.1:1/devtools/page/P",
        ] {
            assert!(!is_proxy_relative(elsewhere), "{elsewhere}");
            let out = rewrite_frontend_url(elsewhere, "h:2", Some("a.b"), false);
            assert!(
                out.contains("ws=h:2/devtools/page/P"),
                "ws= still rewritten: {out}"
            );
            assert!(!out.contains("a.b") && !out.contains("signingKey"), "{out}");
        }
        assert!(is_proxy_relative(
            "/devtools/inspector.html?ws=h/devtools/page/P"
        ));
        let out = rewrite_discovery(LIST.as_bytes(), "h:2", Some("a.b"), false).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            v[0]["webSocketDebuggerUrl"],
            "ws://h:2/devtools/page/P1?signingKey=a.b"
        );
        assert!(
            !v[0]["devtoolsFrontendUrl"]
                .as_str()
                .unwrap()
                .contains("a.b"),
            "{v}"
        );
    }

    #[test]
    fn every_accepted_spelling_of_the_name_is_stripped() {
        for q in [
            "signing%4Bey=jwt",
            "signing%4bey=jwt",
            "%73igningKey=jwt",
            "%73%69%67%6E%69%6E%67%4B%65%79=jwt",
        ] {
            assert_eq!(token_params(q), vec!["jwt".to_owned()], "{q}");
            assert_eq!(strip_token_param(q), None, "{q}");
            assert_eq!(
                strip_token_param(&format!("a=1&{q}&b=%41")),
                Some("a=1&b=%41".into()),
                "{q}"
            );
        }
        assert_eq!(strip_token_param("signing%4Bey"), None);
        assert_eq!(
            strip_token_param("signing+Key=1"),
            Some("signing+Key=1".into())
        );
    }

    #[test]
    fn token_param_handling() {
        assert_eq!(strip_token_param("signingKey=abc"), None);
        assert_eq!(
            strip_token_param("a=1&signingKey=abc&b=2"),
            Some("a=1&b=2".into())
        );
        assert_eq!(
            strip_token_param("signingKeyX=1"),
            Some("signingKeyX=1".into())
        );
        assert_eq!(
            token_params("a=1&signingKey=x%2Ey&signingKey=z"),
            vec!["x.y".to_owned(), "z".to_owned()]
        );
    }

    #[test]
    fn authority_validation() {
        for ok in [
            "127.0.0.1:9223",
            "browser.example.test:9223",
            "[::1]:9223",
            "localhost",
        ] {
            assert!(is_valid_authority(ok), "{ok}");
        }
        for bad in ["", "a/b", "a?b", "a b", "a@b", "a#b", "evil\r\nx"] {
            assert!(!is_valid_authority(bad), "{bad:?}");
        }
    }
}
