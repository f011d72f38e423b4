//! The live viewer's routes on the proxy: its page, and its WebSocket served here (not
//! relayed to Chrome) by [`crate::viewer`]. A connected viewer holds one of the
//! `MAX_CONNECTIONS` slots and counts as a client for the idle rules, like a CDP client.

use std::sync::Arc;
use std::time::Instant;

use ::http::{HeaderValue, StatusCode, header};
use bytes::Bytes;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
use tracing::{debug, info};

use super::refusal::{self, Refusal};
use super::{Admitted, Answer, ClientGuard, Handover, Proxy};
use crate::edge::exchange::Exchange;
use crate::telemetry::ConnectionEnd;
use crate::upstream::Upstream;
use crate::viewer::{self, grant::ViewerGrant, page};

/// An accepted viewer upgrade, waiting for hyper to hand the client's socket back.
pub(super) struct ViewerUpgrade {
    grant: ViewerGrant,
    /// The client's `Sec-WebSocket-Key`, answered in the 101.
    key: String,
    up: Arc<Upstream>,
    /// One of the `MAX_CONNECTIONS` slots, held while the viewer is connected.
    permit: OwnedSemaphorePermit,
    started: Instant,
}

impl Proxy {
    /// `GET /viewer`: the page, with its Content-Security-Policy.
    pub(super) fn viewer_page(&self) -> Answer {
        self.metrics.outcome(ConnectionEnd::Http);
        let mut answer = refusal::plain(
            StatusCode::OK,
            HeaderValue::from_static("text/html; charset=utf-8"),
            Bytes::from(page::HTML.as_str()),
        );
        let csp = page::csp(&self.limits.viewer_frame_ancestors);
        let headers = answer.headers_mut();
        if let Ok(v) = HeaderValue::from_str(&csp) {
            headers.insert(header::CONTENT_SECURITY_POLICY, v);
        }
        headers.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
        headers.insert(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        );
        answer
    }

    /// `GET /viewer/ws`: an authenticated viewer's upgrade, stashed for [`Proxy::handle`];
    /// `Some` is the refusal to answer instead.
    pub(super) fn viewer_upgrade(
        &self,
        admitted: Admitted,
        exchange: &Exchange<Handover>,
    ) -> Option<Answer> {
        let Ok(permit) = self.permits.clone().try_acquire_owned() else {
            debug!("connection cap reached");
            return Some(self.refuse(Refusal::AtCapacity, None));
        };
        let Admitted {
            head, grant, up, ..
        } = admitted;
        let Some(grant) = grant else {
            return Some(self.refuse(Refusal::Unauthorized, None));
        };
        let key = head
            .header(header::SEC_WEBSOCKET_KEY)
            .unwrap_or_default()
            .to_owned();
        exchange.stash(Handover::Viewer(ViewerUpgrade {
            grant,
            key,
            up,
            permit,
            started: Instant::now(),
        }));
        None
    }

    /// Answers the viewer's upgrade and serves it until it leaves. `read_ahead`: what hyper
    /// read past the head (early frames).
    pub(super) async fn serve_viewer(
        &self,
        mut client: TcpStream,
        read_ahead: Bytes,
        v: ViewerUpgrade,
    ) {
        let answer = format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Accept: {}\r\n\r\n",
            derive_accept_key(v.key.as_bytes())
        );
        if let Err(e) = client.write_all(answer.as_bytes()).await {
            debug!(error = %e, "viewer left during the upgrade");
            return self.metrics.outcome(ConnectionEnd::ClientGone);
        }
        let _ = client.set_nodelay(true);
        let _guard = ClientGuard::new(&self.clients, &self.metrics);
        let config = WebSocketConfig::default()
            .max_message_size(Some(viewer::MAX_VIEWER_MESSAGE))
            .max_frame_size(Some(viewer::MAX_VIEWER_MESSAGE));
        let ws = WebSocketStream::from_partially_read(
            client,
            read_ahead.to_vec(),
            Role::Server,
            Some(config),
        )
        .await;
        info!(mode = ?v.grant.mode, "viewer connected");
        let shared = viewer::Shared {
            hubs: &self.hubs,
            handoffs: &self.handoffs,
            stop: &self.viewers_stop,
        };
        viewer::serve(ws, v.grant, shared, v.up).await;
        drop(v.permit);
        self.metrics.outcome(ConnectionEnd::Relayed);
        info!(
            duration_ms = v.started.elapsed().as_millis() as u64,
            "viewer connection closed"
        );
    }
}
