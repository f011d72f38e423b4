//! Rewriting Chrome's discovery answers so clients come back through the proxy.
//!
//! Chrome puts the `Host` it was asked with (our loopback address) into `webSocketDebuggerUrl`
//! and `devtoolsFrontendUrl`. Clients must instead be sent back to the address *they* used, and
//! a client that authenticated with the query parameter gets the token in those URLs too, since
//! it will dial them exactly as given (Playwright's `connectOverCDP(httpUrl)` does).

use serde_json::Value;

/// Name of the query parameter carrying the token.
pub const TOKEN_PARAM: &str = "signingKey";

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
/// `/json/list` body to point at `authority`, carrying `token` when given.
pub fn rewrite_discovery(
    body: &[u8],
    authority: &str,
    token: Option<&str>,
) -> Result<Vec<u8>, serde_json::Error> {
    let mut value: Value = serde_json::from_slice(body)?;
    match &mut value {
        Value::Array(items) => items
            .iter_mut()
            .for_each(|i| rewrite_object(i, authority, token)),
        other => rewrite_object(other, authority, token),
    }
    serde_json::to_vec_pretty(&value)
}

fn rewrite_object(v: &mut Value, authority: &str, token: Option<&str>) {
    let Some(obj) = v.as_object_mut() else { return };
    if let Some(Value::String(url)) = obj.get_mut("webSocketDebuggerUrl") {
        *url = rewrite_ws_url(url, authority, token);
    }
    if let Some(Value::String(url)) = obj.get_mut("devtoolsFrontendUrl") {
        *url = rewrite_frontend_url(url, authority, token);
    }
}

/// `ws://127.0.0.1:9222/devtools/page/X` → `ws://<authority>/devtools/page/X[?signingKey=T]`.
pub fn rewrite_ws_url(url: &str, authority: &str, token: Option<&str>) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("ws", url));
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

/// Rewrites the `ws=` (or `wss=`) parameter of a DevTools frontend URL.
pub fn rewrite_frontend_url(url: &str, authority: &str, token: Option<&str>) -> String {
    for key in ["?ws=", "&ws=", "?wss=", "&wss="] {
        if let Some(start) = url.find(key) {
            let value_start = start + key.len();
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
            return format!("{}{}{}", &url[..value_start], new_value, &url[value_end..]);
        }
    }
    url.to_owned()
}

/// The query with every `signingKey` parameter removed (others kept byte for byte), or `None`
/// when nothing is left.
pub fn strip_token_param(query: &str) -> Option<String> {
    let kept: Vec<&str> = query
        .split('&')
        .filter(|pair| {
            let name = pair.split_once('=').map_or(*pair, |(n, _)| n);
            !pair.is_empty() && name != TOKEN_PARAM
        })
        .collect();
    if kept.is_empty() {
        None
    } else {
        Some(kept.join("&"))
    }
}

/// Every value of the `signingKey` query parameter, percent-decoded.
pub fn token_params(query: &str) -> Vec<String> {
    form_urlencoded::parse(query.as_bytes())
        .filter(|(k, _)| k == TOKEN_PARAM)
        .map(|(_, v)| v.into_owned())
        .collect()
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
        )
        .unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            v["webSocketDebuggerUrl"],
            "ws://browser.example.test:9223/devtools/browser/abc?signingKey=t.k.n"
        );
        assert_eq!(v["Browser"], "Chrome/156");
    }

    #[test]
    fn list_rewrites_every_url_and_keeps_other_entries() {
        let out = rewrite_discovery(LIST.as_bytes(), "10.0.0.1:9223", None).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            v[0]["webSocketDebuggerUrl"],
            "ws://10.0.0.1:9223/devtools/page/P1"
        );
        assert_eq!(
            v[0]["devtoolsFrontendUrl"],
            "https://chrome-devtools-frontend.appspot.com/serve_rev/@x/inspector.html?ws=10.0.0.1:9223/devtools/page/P1"
        );
        assert_eq!(v[1]["type"], "browser_ui");
        assert!(!String::from_utf8(out).unwrap().contains("127.0.0.1"));
    }

    #[test]
    fn frontend_url_carries_an_encoded_token() {
        let u = rewrite_frontend_url(
            "/devtools/inspector.html?ws=127.0.0.1:1/devtools/page/P&x=1",
            "h:2",
            Some("a.b"),
        );
        assert_eq!(
            u,
            "/devtools/inspector.html?ws=h:2/devtools/page/P%3FsigningKey%3Da.b&x=1"
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
