//! The live page list of a running session, read from its proxy's `/json/list` with the
//! session's own token (the proxy rewrites every URL to point back at itself).

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `host:port` of a `ws://host:port?signingKey=…` connect URL.
pub fn authority_of(connect_url: &str) -> Option<&str> {
    let rest = connect_url.strip_prefix("ws://")?;
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    Some(&rest[..end]).filter(|a| !a.is_empty())
}

/// Browserbase's `pages[]` from the proxy's `/json/list`.
pub async fn page_list(connect_url: &str, token: &str) -> Result<Vec<Value>, String> {
    let authority = authority_of(connect_url)
        .ok_or("connectUrl has no host")?
        .to_owned();
    let body = tokio::time::timeout(Duration::from_secs(5), async {
        let mut s = tokio::net::TcpStream::connect(&authority).await.map_err(|e| e.to_string())?;
        let req = format!("GET /json/list?signingKey={token} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        (&mut s).take(8 * 1024 * 1024).read_to_end(&mut out).await.map_err(|e| e.to_string())?;
        Ok::<_, String>(out)
    })
    .await
    .map_err(|_| "timed out".to_owned())??;
    let text = String::from_utf8_lossy(&body);
    let (head, json_body) = text.split_once("\r\n\r\n").ok_or("malformed answer")?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!(
            "the proxy answered {}",
            head.lines().next().unwrap_or("")
        ));
    }
    let list: Vec<Value> = serde_json::from_str(json_body).map_err(|e| e.to_string())?;
    Ok(list
        .into_iter()
        .filter(|t| t["type"] == "page")
        .map(|t| {
            json!({
                "id": t["id"],
                "url": t["url"],
                "title": t["title"],
                "faviconUrl": t.get("faviconUrl").cloned().unwrap_or(Value::String(String::new())),
                "wsUrl": t["webSocketDebuggerUrl"],
                "debuggerUrl": Value::Null,
                "debuggerFullscreenUrl": Value::Null,
            })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    #[test]
    fn authority() {
        assert_eq!(
            super::authority_of("ws://1.2.3.4:9223?signingKey=x"),
            Some("1.2.3.4:9223")
        );
        assert_eq!(super::authority_of("ws://h:1/devtools"), Some("h:1"));
        assert_eq!(super::authority_of("http://h"), None);
    }
}
