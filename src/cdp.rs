//! A minimal CDP client for the controller's own commands to Chrome: closing the browser,
//! carrying session cookies across a persist/hydrate cycle (Chrome never writes them to disk),
//! following the browser's downloads (its events, [`Cdp::next_event`]) and loading the
//! session's extension (a command the proxy refuses to clients).

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

use crate::upstream::Endpoint;

/// Chrome's browser-level DevTools WebSocket: where to dial, and the path to upgrade.
#[derive(Debug, Clone)]
pub struct BrowserSocket {
    /// Chrome's DevTools address and its network.
    pub endpoint: Endpoint,
    /// `/devtools/browser/<id>`.
    pub path: String,
}

impl BrowserSocket {
    /// `ws://127.0.0.1:<port>/devtools/browser/<id>`.
    pub fn url(&self) -> String {
        format!("ws://{}{}", self.endpoint.addr, self.path)
    }
}

/// Failures of a controller-side CDP command.
#[derive(Debug, thiserror::Error)]
pub enum CdpError {
    /// The WebSocket handshake with Chrome's DevTools endpoint failed.
    #[error("connecting to chrome's devtools socket failed")]
    Connect(#[source] tokio_tungstenite::tungstenite::Error),
    /// The open DevTools socket failed while sending or receiving.
    #[error("the devtools socket failed")]
    Socket(#[source] tokio_tungstenite::tungstenite::Error),
    /// The socket closed before the answer to our command arrived.
    #[error("the devtools socket closed before the answer")]
    Closed,
    /// Chrome did not answer within the command's deadline.
    #[error("chrome did not answer in time")]
    Timeout,
    /// Chrome answered the command with an error.
    #[error("chrome refused {method}: {message}")]
    Command {
        /// The CDP method sent, e.g. `Browser.close`.
        method: String,
        /// Chrome's error message.
        message: String,
    },
}

/// One browser-level CDP connection.
pub struct Cdp {
    ws: WebSocketStream<TcpStream>,
    next_id: u64,
}

impl Cdp {
    /// Connects to the browser-level DevTools WebSocket `to` (dialled in its network).
    pub async fn connect(to: &BrowserSocket) -> Result<Cdp, CdpError> {
        let stream = to
            .endpoint
            .connect()
            .await
            .map_err(|e| CdpError::Connect(e.into()))?;
        let (ws, _) = tokio_tungstenite::client_async(to.url(), stream)
            .await
            .map_err(CdpError::Connect)?;
        Ok(Cdp { ws, next_id: 1 })
    }

    /// Sends a command without waiting for its answer (which [`Self::next_event`] skips); its
    /// id.
    pub async fn send(&mut self, method: &str, params: Value) -> Result<u64, CdpError> {
        let id = self.next_id;
        self.next_id += 1;
        let msg = json!({"id": id, "method": method, "params": params});
        self.ws
            .send(Message::text(msg.to_string()))
            .await
            .map_err(CdpError::Socket)?;
        Ok(id)
    }

    /// Sends a command to the flattened target session `session` without waiting for its
    /// answer; its id.
    pub async fn send_to(
        &mut self,
        session: &str,
        method: &str,
        params: Value,
    ) -> Result<u64, CdpError> {
        let id = self.next_id;
        self.next_id += 1;
        let msg = json!({"id": id, "sessionId": session, "method": method, "params": params});
        self.ws
            .send(Message::text(msg.to_string()))
            .await
            .map_err(CdpError::Socket)?;
        Ok(id)
    }

    /// Sends a command and waits for its answer (events in between are ignored).
    pub async fn call(&mut self, method: &str, params: Value) -> Result<Value, CdpError> {
        let id = self.send(method, params).await?;
        while let Some(m) = self.ws.next().await {
            let Message::Text(t) = m.map_err(CdpError::Socket)? else {
                continue;
            };
            let Ok(v) = serde_json::from_str::<Value>(t.as_str()) else {
                continue;
            };
            if v["id"].as_u64() != Some(id) {
                continue;
            }
            if let Some(err) = v.get("error") {
                return Err(CdpError::Command {
                    method: method.to_owned(),
                    message: err["message"].as_str().unwrap_or("error").to_owned(),
                });
            }
            return Ok(v["result"].clone());
        }
        Err(CdpError::Closed)
    }
}

/// One CDP event: its method and params.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// E.g. `Browser.downloadWillBegin`.
    pub method: String,
    /// Its params (`null` when it had none).
    pub params: Value,
}

impl Cdp {
    /// The next event Chrome sends on this connection (answers to commands are skipped);
    /// `None` once the socket is closed.
    pub async fn next_event(&mut self) -> Result<Option<Event>, CdpError> {
        while let Some(m) = self.ws.next().await {
            let Message::Text(t) = m.map_err(CdpError::Socket)? else {
                continue;
            };
            let Ok(mut v) = serde_json::from_str::<Value>(t.as_str()) else {
                continue;
            };
            if let Some(method) = v["method"].as_str() {
                return Ok(Some(Event {
                    method: method.to_owned(),
                    params: v["params"].take(),
                }));
            }
        }
        Ok(None)
    }
}

impl Cdp {
    /// The next text message Chrome sends on this connection, as it came (not copied); `None`
    /// once the socket is closed.
    pub async fn next_text(
        &mut self,
    ) -> Result<Option<tokio_tungstenite::tungstenite::Utf8Bytes>, CdpError> {
        while let Some(m) = self.ws.next().await {
            if let Message::Text(t) = m.map_err(CdpError::Socket)? {
                return Ok(Some(t));
            }
        }
        Ok(None)
    }

    /// The next message Chrome sends on this connection, answer or event, as JSON; `None` once
    /// the socket is closed. For a client that keeps commands in flight while it reads events.
    pub async fn next_message(&mut self) -> Result<Option<Value>, CdpError> {
        while let Some(m) = self.ws.next().await {
            let Message::Text(t) = m.map_err(CdpError::Socket)? else {
                continue;
            };
            if let Ok(v) = serde_json::from_str::<Value>(t.as_str()) {
                return Ok(Some(v));
            }
        }
        Ok(None)
    }
}

/// Sends `Browser.close` and waits until Chrome answers or drops the socket.
pub async fn browser_close(to: &BrowserSocket, timeout: Duration) -> Result<(), CdpError> {
    tokio::time::timeout(timeout, async {
        let mut cdp = Cdp::connect(to).await?;
        match cdp.call("Browser.close", json!({})).await {
            Ok(_) | Err(CdpError::Closed) | Err(CdpError::Socket(_)) => Ok(()),
            Err(e) => Err(e),
        }
    })
    .await
    .unwrap_or(Err(CdpError::Timeout))
}

/// Loads the unpacked extension at `path` (`Extensions.loadUnpacked`); its extension id.
pub async fn load_unpacked(
    to: &BrowserSocket,
    path: &str,
    timeout: Duration,
) -> Result<String, CdpError> {
    tokio::time::timeout(timeout, async {
        let mut cdp = Cdp::connect(to).await?;
        let r = cdp
            .call("Extensions.loadUnpacked", json!({ "path": path }))
            .await?;
        Ok(r["id"].as_str().unwrap_or_default().to_owned())
    })
    .await
    .unwrap_or(Err(CdpError::Timeout))
}

/// Unloads and removes the unpacked extension `id` (`Extensions.uninstall`).
pub async fn uninstall_extension(
    to: &BrowserSocket,
    id: &str,
    timeout: Duration,
) -> Result<(), CdpError> {
    tokio::time::timeout(timeout, async {
        let mut cdp = Cdp::connect(to).await?;
        cdp.call("Extensions.uninstall", json!({ "id": id }))
            .await?;
        Ok(())
    })
    .await
    .unwrap_or(Err(CdpError::Timeout))
}

/// Every cookie of the browser's default context.
pub async fn all_cookies(to: &BrowserSocket, timeout: Duration) -> Result<Vec<Value>, CdpError> {
    tokio::time::timeout(timeout, async {
        let mut cdp = Cdp::connect(to).await?;
        let r = cdp.call("Storage.getCookies", json!({})).await?;
        Ok(r["cookies"].as_array().cloned().unwrap_or_default())
    })
    .await
    .unwrap_or(Err(CdpError::Timeout))
}

/// Sets cookies (as `Storage.setCookies` params).
pub async fn set_cookies(
    to: &BrowserSocket,
    cookies: Vec<Value>,
    timeout: Duration,
) -> Result<(), CdpError> {
    tokio::time::timeout(timeout, async {
        let mut cdp = Cdp::connect(to).await?;
        cdp.call("Storage.setCookies", json!({ "cookies": cookies }))
            .await?;
        Ok(())
    })
    .await
    .unwrap_or(Err(CdpError::Timeout))
}

/// The session cookies (no expiry: Chrome keeps them in memory only) of `cookies`, as
/// `CookieParam` objects ready for `Storage.setCookies`.
pub fn session_cookie_params(cookies: &[Value]) -> Vec<Value> {
    const KEEP: [&str; 11] = [
        "name",
        "value",
        "domain",
        "path",
        "secure",
        "httpOnly",
        "sameSite",
        "priority",
        "sourceScheme",
        "sourcePort",
        "partitionKey",
    ];
    cookies
        .iter()
        .filter(|c| c["session"].as_bool() == Some(true))
        .map(|c| {
            let mut p = serde_json::Map::new();
            for k in KEEP {
                if let Some(v) = c.get(k)
                    && !v.is_null()
                {
                    p.insert(k.to_owned(), v.clone());
                }
            }
            Value::Object(p)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_session_cookies_are_carried_without_expiry() {
        let cookies = vec![
            json!({"name":"s","value":"1","domain":"a.test","path":"/","expires":-1,"size":2,"session":true,"secure":false,"httpOnly":true,"sameSite":"Lax","priority":"Medium"}),
            json!({"name":"p","value":"2","domain":"a.test","path":"/","expires":1.9e9,"session":false}),
        ];
        let params = session_cookie_params(&cookies);
        assert_eq!(params.len(), 1);
        assert_eq!(params[0]["name"], "s");
        assert!(params[0].get("expires").is_none());
        assert!(params[0].get("size").is_none() && params[0].get("session").is_none());
        assert_eq!(params[0]["httpOnly"], true);
    }
}
