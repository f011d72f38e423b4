//! A minimal CDP client for the controller's own commands to Chrome (closing the browser).

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

/// Failures of a controller-side CDP command.
#[derive(Debug, thiserror::Error)]
pub enum CdpError {
    #[error("connecting to chrome's devtools socket failed")]
    Connect(#[source] tokio_tungstenite::tungstenite::Error),
    #[error("the devtools socket failed")]
    Socket(#[source] tokio_tungstenite::tungstenite::Error),
    #[error("chrome did not answer in time")]
    Timeout,
}

/// Sends `Browser.close` to the browser target at `ws_url` and waits until Chrome answers or
/// drops the socket.
pub async fn browser_close(ws_url: &str, timeout: Duration) -> Result<(), CdpError> {
    tokio::time::timeout(timeout, async {
        let (mut ws, _) = tokio_tungstenite::connect_async(ws_url).await.map_err(CdpError::Connect)?;
        ws.send(Message::text(r#"{"id":1,"method":"Browser.close"}"#))
            .await
            .map_err(CdpError::Socket)?;
        while let Some(msg) = ws.next().await {
            match msg {
                Ok(Message::Text(t)) if t.as_str().contains("\"id\":1") => return Ok(()),
                Ok(Message::Close(_)) | Err(_) => return Ok(()),
                Ok(_) => {}
            }
        }
        Ok(())
    })
    .await
    .unwrap_or(Err(CdpError::Timeout))
}
