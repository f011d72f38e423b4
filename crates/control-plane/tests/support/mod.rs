//! Helpers shared by the test modules.

use std::sync::{Arc, Mutex};

use serde_json::json;

/// The target id of the stand-in proxy's page.
pub(crate) const PAGE_ID: &str = "6A9D3C0E1F2B4A5968778695A4B3C2D1";

/// A loopback stand-in for a session's proxy: answers `GET /json/list?signingKey=<token>` with
/// one page and one `browser_ui` target, as the proxy does, anything else 401. Returns its port
/// and the request lines it was sent.
pub(crate) async fn stand_in_proxy(token: &str) -> (u16, Arc<Mutex<Vec<String>>>) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let list = json!([
        {"id": PAGE_ID, "type": "page", "url": "http://127.0.0.1:1/a", "title": "A",
         "faviconUrl": "http://127.0.0.1:1/favicon.ico",
         "webSocketDebuggerUrl": format!("ws://127.0.0.1:{port}/devtools/page/{PAGE_ID}?signingKey={token}")},
        {"id": "B0B0B0B0B0B0B0B0B0B0B0B0B0B0B0B0", "type": "browser_ui", "url": "chrome://newtab",
         "title": "ui", "webSocketDebuggerUrl": "ws://x"},
    ])
    .to_string();
    let want = format!("GET /json/list?signingKey={token} HTTP/1.1");
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = listener.accept().await {
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match c.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let head = String::from_utf8_lossy(&head);
            let line = head.lines().next().unwrap_or("").to_owned();
            let answer = if line == want {
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{list}",
                    list.len()
                )
            } else {
                "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    .to_owned()
            };
            log.lock().unwrap().push(line);
            let _ = c.write_all(answer.as_bytes()).await;
        }
    });
    (port, seen)
}
