//! A serving controller's watch on its own session item, from READY to the end.
//!
//! Others end sessions by writing the item: the API's release (STOPPED), the sweeper
//! (TIMED_OUT), the ECS task-state handler (FAILED). A release also stops the task, but that
//! stop can miss: a release that read the item before READY names no task, and a StopTask can
//! fail. Then nothing but the item says the session is over, and the browser would keep serving
//! its token until expiry (up to 6 h) while the API answers COMPLETED and gives its slot away.
//! So the controller reads its item, strongly consistently, every `ITEM_WATCH_SECONDS`, and ends
//! the session itself once the item is terminal or gone: one small `GetItem` (a file read
//! locally) per interval per session. A failed read is logged and retried at the next tick; it
//! never ends a session.

use std::time::Duration;

use tracing::{info, warn};

use crate::stores::ServedSessions;

/// Completes once session `id`'s item is terminal or gone, reading it every `every` (never
/// completes when there is no store).
pub(super) async fn until_ended_elsewhere(
    store: Option<&dyn ServedSessions>,
    id: &str,
    every: Duration,
) {
    let Some(store) = store else {
        return std::future::pending().await;
    };
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    // A tick missed while the host was busy is one read late, not a burst of reads.
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        match store.load(id).await {
            Ok(None) => {
                info!("the session item is gone; ending the session");
                return;
            }
            Ok(Some(r)) => {
                if let Some(status) = r.internal_status.filter(|s| s.is_terminal()) {
                    info!(
                        status = status.as_str(),
                        "the session item turned terminal elsewhere; ending the session"
                    );
                    return;
                }
            }
            Err(e) => {
                warn!(error = %e, "reading the session item failed; trying again at the next tick")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use wallcrawler_contract::InternalStatus;

    use super::*;
    use crate::stores::{
        DownloadsUpdate, EndedUpdate, ReadyResult, ReadyUpdate, SessionRecord, StoreError, Take,
        TakeResult, TerminalUpdate,
    };

    /// Answers each read with the next of its answers (the last one for ever after).
    struct Script(Mutex<Vec<Result<Option<InternalStatus>, ()>>>);

    #[async_trait::async_trait]
    impl ServedSessions for Script {
        async fn load(&self, _: &str) -> Result<Option<SessionRecord>, StoreError> {
            let mut answers = self.0.lock().unwrap();
            let next = if answers.len() > 1 {
                answers.remove(0)
            } else {
                answers[0]
            };
            match next {
                Ok(Some(status)) => Ok(Some(SessionRecord {
                    internal_status: Some(status),
                    ..Default::default()
                })),
                Ok(None) => Ok(None),
                Err(()) => Err(StoreError::Unavailable {
                    service: "sessions table",
                    source: "timed out".into(),
                }),
            }
        }
        async fn mark_ready(&self, _: &str, _: &ReadyUpdate) -> Result<ReadyResult, StoreError> {
            unreachable!("the watch only reads")
        }
        async fn mark_terminal(&self, _: &str, _: &TerminalUpdate<'_>) -> Result<bool, StoreError> {
            unreachable!("the watch only reads")
        }
        async fn take(&self, _: &str, _: &Take<'_>) -> Result<TakeResult, StoreError> {
            unreachable!("the watch only reads")
        }
        async fn keep_owner(&self, _: &str, _: &str, _: u64) -> Result<bool, StoreError> {
            unreachable!("the watch only reads")
        }
        async fn give_up(&self, _: &str, _: &str) -> Result<bool, StoreError> {
            unreachable!("the watch only reads")
        }
        async fn mark_ended(&self, _: &str, _: &EndedUpdate<'_>) -> Result<bool, StoreError> {
            unreachable!("the watch only reads")
        }
        async fn end_unserved(&self, _: &str, _: u64, _: &str) -> Result<bool, StoreError> {
            unreachable!("the watch only reads")
        }
        async fn set_downloads_in_progress(
            &self,
            _: &str,
            _: &DownloadsUpdate<'_>,
        ) -> Result<bool, StoreError> {
            unreachable!("the watch only reads")
        }
        async fn set_handoff(
            &self,
            _: &str,
            _: &crate::stores::HandoffUpdate<'_>,
        ) -> Result<bool, StoreError> {
            unreachable!("the watch only reads")
        }
    }

    const EVERY: Duration = Duration::from_secs(5);

    /// Spawns the watch over `answers`.
    fn watch(answers: Vec<Result<Option<InternalStatus>, ()>>) -> tokio::task::JoinHandle<()> {
        let store = Script(Mutex::new(answers));
        tokio::spawn(async move { until_ended_elsewhere(Some(&store), "sess_1", EVERY).await })
    }

    #[tokio::test(start_paused = true)]
    async fn a_terminal_item_ends_the_watch_at_the_next_read() {
        use InternalStatus::*;
        let w = watch(vec![Ok(Some(Ready)), Ok(Some(Active)), Ok(Some(Stopped))]);
        tokio::time::sleep(EVERY * 2 + Duration::from_millis(100)).await;
        assert!(!w.is_finished(), "READY and ACTIVE are live");
        tokio::time::sleep(EVERY).await;
        assert!(w.is_finished(), "STOPPED written elsewhere");
    }

    #[tokio::test(start_paused = true)]
    async fn every_terminal_status_and_a_missing_item_end_it() {
        for end in [
            Some(InternalStatus::Stopped),
            Some(InternalStatus::TimedOut),
            Some(InternalStatus::Failed),
            None,
        ] {
            let w = watch(vec![Ok(end)]);
            tokio::time::sleep(EVERY + Duration::from_millis(100)).await;
            assert!(w.is_finished(), "{end:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn read_failures_never_end_it() {
        let w = watch(vec![
            Err(()),
            Err(()),
            Ok(Some(InternalStatus::Ready)),
            Err(()),
        ]);
        tokio::time::sleep(EVERY * 20).await;
        assert!(!w.is_finished());
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_store_it_never_ends() {
        let w = tokio::spawn(until_ended_elsewhere(None, "sess_1", EVERY));
        tokio::time::sleep(EVERY * 100).await;
        assert!(!w.is_finished());
    }
}
