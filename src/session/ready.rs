//! READY: the public address chosen, then the conditional write (only from a pending status,
//! only by the session's owner) with the announced address. No `connectUrl`: the controller
//! never reads the session's token; the control plane forms a direct session's URL from the
//! address and port written here.

use tracing::{debug, error, info};
use wallcrawler_contract::task_api::LiveViewGrant;
use wallcrawler_contract::time::now_iso8601;

use super::{Ending, Outcome, Run};
use crate::browser::{Browser, Ready};
use crate::public_ip::{self, Discovered};
use crate::shutdown::Step;
use crate::stores::{ReadyResult, ReadyUpdate, ServedSessions};

impl Run<'_> {
    /// Writes READY (only from a pending status) with the announced address.
    /// `Err` once the browser is closed: released when the session was released meanwhile, a
    /// failure when the address or the write failed.
    pub(crate) async fn announce_ready(
        &self,
        session: Browser,
        fallback_task_arn: Option<&str>,
        live_view: Option<&LiveViewGrant>,
    ) -> Result<Browser, Outcome> {
        let c = self.c;
        let t0 = std::time::Instant::now();
        let ready = session.ready();
        let announced = match public_ip::discover(
            c.public_ip,
            c.metadata_uri.as_deref(),
            self.deps.network.as_deref(),
            c.public_ip_required,
        )
        .await
        {
            Ok(a) => a,
            // Direct mode: clients could not reach a private address, so no READY at all.
            Err(e) => {
                error!(error = %e, cause = ?std::error::Error::source(&e).map(|s| s.to_string()), "no public IP to announce");
                let proxy_bytes = self.close(session).await;
                return Err(Outcome {
                    ending: Ending::failed(e.reason()),
                    proxy_bytes,
                });
            }
        };
        debug!(ms = t0.elapsed().as_millis(), "announce: address chosen");
        // Before READY: a client that asks for a person as soon as it connects gets the URL.
        if let Some(lv) = live_view {
            let url = lv.url(&own_base(&announced.ip, ready.proxy_addr.port()));
            ready.handoffs.set_live_view(url, lv.expires_at);
            // The pending handoff in the item, for the API's /debug.
            if let Some(store) = &self.deps.sessions {
                let item = std::sync::Arc::new(super::downloads::Item {
                    store: store.clone(),
                    id: self.item.id.to_owned(),
                    owner: self.item.owner.to_owned(),
                });
                let stop = self.tasks.token().clone();
                self.tasks.spawn(super::handoff_mirror::publish(
                    ready.handoffs.watch(),
                    item,
                    stop,
                ));
            }
        }
        if let Some(store) = &self.deps.sessions {
            let mut update = ready_update(&ready, &announced, fallback_task_arn);
            update.owner = self.item.owner.to_owned();
            update.uploads_dir = session
                .uploads_dir()
                .and_then(|d| d.to_str())
                .map(str::to_owned);
            return self.mark_ready(session, store.as_ref(), &update).await;
        }
        info!(session.id = %self.item.id, proxy = %ready.proxy_addr, chrome.pid = ready.chrome_pid, "session ready");
        Ok(session)
    }

    /// The conditional READY write; the browser closed when it does not pass.
    async fn mark_ready(
        &self,
        session: Browser,
        store: &dyn ServedSessions,
        update: &ReadyUpdate,
    ) -> Result<Browser, Outcome> {
        let outcome = store.mark_ready(self.item.id, update).await;
        let ending = match outcome {
            Ok(ReadyResult::Ready) => {
                info!(public_ip = %update.public_ip, "session READY");
                let ready = session.ready();
                info!(session.id = %self.item.id, proxy = %ready.proxy_addr, chrome.pid = ready.chrome_pid, "session ready");
                return Ok(session);
            }
            Ok(ReadyResult::Lost) => {
                let proxy_bytes = self.close(session).await;
                info!("another controller owns the session now; leaving it to that one");
                return Err(Outcome {
                    ending: Ending::Lost,
                    proxy_bytes,
                });
            }
            Ok(ReadyResult::NotPending(status)) => {
                let proxy_bytes = self.close(session).await;
                info!(status = ?status.map(|s| s.as_str()), "the session was released before it was ready; shutting down");
                return Err(Outcome {
                    ending: Ending::Released,
                    proxy_bytes,
                });
            }
            Err(e) => e,
        };
        let proxy_bytes = self.close(session).await;
        error!(error = %ending, "writing READY failed");
        let reason = format!(
            "announcing READY failed: {} (see the task log)",
            ending.summary()
        );
        Err(Outcome {
            ending: Ending::failed(reason),
            proxy_bytes,
        })
    }

    /// Closes the browser of a session that will not be served; the bytes it relayed.
    async fn close(&self, session: Browser) -> u64 {
        session
            .close_chrome(false, Step::ChromeClosed.share(self.c.shutdown_budget))
            .await;
        let bytes = session.proxy_bytes();
        session.finish();
        bytes
    }
}

/// The viewer's origin on this task's announced address (what a direct client's `ws://`
/// connect URL names, as `http://`).
fn own_base(public_ip: &str, port: u16) -> String {
    if public_ip.contains(':') {
        format!("http://[{public_ip}]:{port}")
    } else {
        format!("http://{public_ip}:{port}")
    }
}

/// The READY write: where clients and the connect gateway reach this task (its `owner` is
/// the run's, set by the caller).
fn ready_update(
    ready: &Ready,
    announced: &Discovered,
    fallback_task_arn: Option<&str>,
) -> ReadyUpdate {
    // Where the connect gateway dials this task: its private address (task metadata),
    // else the address the proxy is bound to, else the announced one.
    let private_ip = announced.private_ip.clone().unwrap_or_else(|| {
        let bound = ready.proxy_addr.ip();
        if bound.is_unspecified() {
            announced.ip.clone()
        } else {
            bound.to_string()
        }
    });
    ReadyUpdate {
        owner: String::new(),
        public_ip: announced.ip.clone(),
        private_ip,
        proxy_port: ready.proxy_addr.port(),
        task_arn: announced
            .task_arn
            .clone()
            .or_else(|| fallback_task_arn.map(str::to_owned)),
        uploads_dir: None,
        at: now_iso8601(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_own_viewer_origin_is_the_announced_address() {
        assert_eq!(
            super::own_base("203.0.113.9", 9222),
            "http://203.0.113.9:9222"
        );
        assert_eq!(
            super::own_base("2001:db8::1", 9222),
            "http://[2001:db8::1]:9222"
        );
    }
}
