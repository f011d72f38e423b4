//! The pending handoff mirrored into the session item (`handoff`), where the API's `/debug`
//! shows it: written when a client asks for a person, removed when the handoff ends.

use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use wallcrawler_contract::session_doc::Handoff;

use super::downloads::Item;
use crate::stores::HandoffUpdate;
use crate::viewer::handoff::Shown;

/// The item's form of a shown handoff.
fn record(s: &Shown) -> Handoff {
    Handoff {
        id: s.id.clone(),
        reason: s.reason.clone(),
        requested_at: s.requested_at.clone(),
        expires_at: s.expires_at.clone(),
    }
}

/// Keeps the item's `handoff` equal to the pending one until `stop` fires. A failed write is
/// logged and tried again at the next change.
pub(super) async fn publish(
    mut rx: watch::Receiver<Option<Shown>>,
    item: Arc<Item>,
    stop: CancellationToken,
) {
    let mut written: Option<Shown> = None;
    loop {
        let now = rx.borrow_and_update().clone();
        if now != written {
            let handoff = now.as_ref().map(record);
            let u = HandoffUpdate {
                owner: &item.owner,
                now: wallcrawler_contract::time::unix_millis() / 1000,
                handoff: handoff.as_ref(),
            };
            match item.store.set_handoff(&item.id, &u).await {
                Ok(true) => written = now,
                Ok(false) => info!("the session is another controller's; handoff is not written"),
                Err(e) => warn!(error = %e, "writing the handoff to the session item failed"),
            }
        }
        tokio::select! {
            r = rx.changed() => if r.is_err() { return },
            () = stop.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stores::{DirectorySessions, ServedSessions};
    use crate::viewer::handoff::{Deliver, Handoffs, Request};

    struct Nowhere;
    impl Deliver for Nowhere {
        fn deliver(&self, _: u64, _: String) {}
    }

    /// A handoff asked for appears in the item (a session directory here, the local
    /// platform's store) and goes when it is done.
    #[tokio::test]
    async fn the_item_follows_the_pending_handoff() {
        let dir = tempfile::tempdir().unwrap();
        let mut d = crate::stores::tests::doc("sess_h");
        d.owner = Some("me".into());
        crate::stores::tests::pending(&d, dir.path());
        let store: Arc<dyn ServedSessions> =
            Arc::new(DirectorySessions::new(dir.path().to_owned()));
        let handoffs = Handoffs::new(Arc::new(Nowhere));
        handoffs.set_live_view("http://x/viewer?t=c".into(), u64::MAX / 2000);
        let item = Arc::new(Item {
            store,
            id: "sess_h".into(),
            owner: "me".into(),
        });
        let stop = CancellationToken::new();
        let task = tokio::spawn(publish(handoffs.watch(), item, stop.clone()));
        let read = || {
            let text = std::fs::read_to_string(dir.path().join("sess_h.json")).unwrap();
            serde_json::from_str::<serde_json::Value>(&text).unwrap()
        };
        let answer: serde_json::Value = serde_json::from_str(&handoffs.request(
            1,
            &Request {
                id: serde_json::json!(1),
                session_id: None,
                reason: "Please log in".into(),
                timeout: 60,
            },
        ))
        .unwrap();
        let id = answer["result"]["handoffId"].as_str().unwrap().to_owned();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while read()["handoff"]["id"] != id.as_str() {
            assert!(std::time::Instant::now() < deadline, "{}", read());
            tokio::task::yield_now().await;
        }
        assert_eq!(read()["handoff"]["reason"], "Please log in");
        assert!(handoffs.complete(Some(&id)));
        while read().get("handoff").is_some() {
            assert!(std::time::Instant::now() < deadline, "{}", read());
            tokio::task::yield_now().await;
        }
        stop.cancel();
        task.await.unwrap();
    }
}
