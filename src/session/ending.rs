//! How a run ends ([`Ending`]), and the one place that turns it into the session item's last
//! writes ([`SessionItem::settle`]) and the process's exit status ([`Ending::exit_code`]).

use std::future::Future;

use tracing::{error, info};
use wallcrawler_contract::InternalStatus;
use wallcrawler_contract::time::now_iso8601;

use crate::browser::EndReason;
use crate::shutdown::{Step, Steps};
use crate::stores::{EndedUpdate, ServedSessions, TerminalUpdate};
use crate::telemetry::clip;

/// Exit status of a failed run.
pub(crate) const EXIT_FAILURE: i32 = 1;

/// The most a `terminationReason` holds, in bytes.
pub(super) const MAX_REASON_BYTES: usize = 1024;

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ending {
    /// The session ended as sessions do (a signal, a client's `Browser.close`, idle, Chrome
    /// closing itself cleanly): STOPPED.
    Completed,
    /// The session's `expiresAt` passed: TIMED_OUT.
    TimedOut,
    /// The session was released before it was served (before its task started, or before
    /// READY), or ended by someone else while served (its item turned terminal): nothing but
    /// `endedAt`, the item's own terminal status kept.
    Released,
    /// A signal while the browser started: STOPPED.
    Interrupted,
    /// FAILED, with the reason the session item keeps.
    Failed {
        /// What went wrong, in a few words (clipped to [`MAX_REASON_BYTES`] when written).
        reason: String,
    },
    /// Ended before taking on any session (a pool controller's idle lifetime, a signal while
    /// it waited): nothing to write.
    NoSession,
    /// Could not start, with no session item to write to (logged where it happened).
    Aborted,
    /// Another controller owns the session (a claim delivered twice, or this one's lease
    /// lapsed and another took it over): this one served nothing and writes nothing.
    Lost,
    /// Stopped before READY: the claim went back to the queue and the session's ownership
    /// was given up, for another controller to serve it; nothing else written.
    HandedBack,
}

impl Ending {
    /// A failure of the session, logged once here.
    pub(crate) fn failed(reason: impl Into<String>) -> Self {
        let reason = reason.into();
        error!(reason, "session failed");
        Self::Failed { reason }
    }

    /// The process's exit status for this ending.
    pub(crate) fn exit_code(&self) -> i32 {
        match self {
            Self::Failed { .. } | Self::Aborted => EXIT_FAILURE,
            _ => 0,
        }
    }

    /// The terminal status this ending writes (`None`: the item keeps its own).
    fn terminal(&self) -> Option<TerminalStatus<'_>> {
        let (status, reason) = match self {
            Self::Completed | Self::Interrupted => (InternalStatus::Stopped, None),
            Self::TimedOut => (InternalStatus::TimedOut, Some("the session expired")),
            Self::Failed { reason } => (InternalStatus::Failed, Some(reason.as_str())),
            Self::Released | Self::NoSession | Self::Aborted | Self::Lost | Self::HandedBack => {
                return None;
            }
        };
        Some(TerminalStatus { status, reason })
    }

    /// Whether this ending writes `endedAt` (every ending of a session taken on).
    fn writes_ended(&self) -> bool {
        !matches!(
            self,
            Self::NoSession | Self::Aborted | Self::Lost | Self::HandedBack
        )
    }
}

impl From<&EndReason> for Ending {
    fn from(reason: &EndReason) -> Self {
        match reason {
            EndReason::Expired => Self::TimedOut,
            EndReason::EndedElsewhere => Self::Released,
            // Logged as the crash it is when the session saw it end.
            EndReason::ChromeCrashed(how) => Self::Failed {
                reason: format!("the browser exited unexpectedly ({how})"),
            },
            _ => Self::Completed,
        }
    }
}

/// A terminal status and its reason.
struct TerminalStatus<'a> {
    status: InternalStatus,
    reason: Option<&'a str>,
}

/// How a run stopped before its session was served to the end, and the bytes relayed by then.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// How the run ends.
    pub ending: Ending,
    /// Bytes relayed, both directions, for `proxyBytes`.
    pub proxy_bytes: u64,
}

impl From<Ending> for Outcome {
    fn from(ending: Ending) -> Self {
        Self {
            ending,
            proxy_bytes: 0,
        }
    }
}

/// Writes to the session item, tolerant of its absence (no table configured, or a pool
/// controller's warm-up, which serves no session yet); each conditional on `owner` owning it.
pub(crate) struct SessionItem<'a> {
    /// Where the item lives.
    pub store: Option<&'a dyn ServedSessions>,
    /// The session's id.
    pub id: &'a str,
    /// This controller, as the item's `owner` names it.
    pub owner: &'a str,
}

impl SessionItem<'_> {
    /// The item's last writes for `ending`: its terminal status (an item already terminal
    /// keeps its own), then `proxyBytes` and `endedAt`; each within its step's deadline when
    /// the end sequence's `steps` are given.
    pub(crate) async fn settle(&self, ending: &Ending, proxy_bytes: u64, steps: Option<&Steps>) {
        if let Some(t) = ending.terminal() {
            within(steps, Step::TerminalStatus, self.terminal(&t)).await;
        }
        if ending.writes_ended() {
            within(steps, Step::EndedAt, self.ended(proxy_bytes)).await;
        }
    }

    async fn terminal(&self, t: &TerminalStatus<'_>) {
        let Some(store) = self.store else { return };
        // Whatever the source, the stored reason stays small (DynamoDB refuses items over 400 KB:
        // a huge reason would mean the terminal status is never written).
        let reason = t.reason.map(|r| clip(r, MAX_REASON_BYTES));
        let update = TerminalUpdate {
            owner: self.owner,
            status: t.status,
            reason: reason.as_deref(),
            at: &now_iso8601(),
        };
        match store.mark_terminal(self.id, &update).await {
            Ok(true) => info!(status = t.status.as_str(), "terminal status written"),
            Ok(false) => info!(
                "the session was already terminal, or is another controller's; its status is kept"
            ),
            Err(e) => error!(error = %e, "writing the terminal status failed"),
        }
    }

    /// `proxyBytes` and `endedAt`: by the session's owner, or by anyone when nobody holds it.
    pub(crate) async fn ended(&self, proxy_bytes: u64) {
        let Some(store) = self.store else { return };
        let update = EndedUpdate {
            owner: self.owner,
            now: wallcrawler_contract::time::unix_millis() / 1000,
            proxy_bytes,
            at: &now_iso8601(),
        };
        match store.mark_ended(self.id, &update).await {
            Ok(true) => info!(proxy_bytes, "endedAt written"),
            Ok(false) => info!("the session is another controller's; endedAt is its to write"),
            Err(e) => error!(error = %e, "writing endedAt failed"),
        }
    }
}

/// Runs `work` within `step`'s deadline when there are `steps`, else to its end.
async fn within(steps: Option<&Steps>, step: Step, work: impl Future<Output = ()>) {
    match steps {
        Some(steps) => {
            steps.run(step, work).await;
        }
        None => work.await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_failure_exits_non_zero() {
        for reason in [
            EndReason::Signal,
            EndReason::ClientClosedBrowser,
            EndReason::IdleTimeout,
            EndReason::Expired,
            EndReason::ChromeExitedCleanly,
        ] {
            assert_eq!(Ending::from(&reason).exit_code(), 0, "{reason:?}");
        }
        let crash = Ending::from(&EndReason::ChromeCrashed("x".into()));
        assert_eq!(crash.exit_code(), 1);
        for ending in [
            Ending::Released,
            Ending::Interrupted,
            Ending::NoSession,
            Ending::Lost,
            Ending::HandedBack,
        ] {
            assert_eq!(ending.exit_code(), 0, "{ending:?}");
        }
        assert_eq!(Ending::Aborted.exit_code(), 1);
    }

    #[test]
    fn each_ending_writes_its_terminal_status() {
        let status = |e: &Ending| {
            e.terminal()
                .map(|t| (t.status, t.reason.map(str::to_owned)))
        };
        assert_eq!(
            status(&Ending::Completed),
            Some((InternalStatus::Stopped, None))
        );
        assert_eq!(
            status(&Ending::Interrupted),
            Some((InternalStatus::Stopped, None))
        );
        assert_eq!(
            status(&Ending::TimedOut),
            Some((InternalStatus::TimedOut, Some("the session expired".into())))
        );
        assert_eq!(
            status(&Ending::from(&EndReason::ChromeCrashed(
                "killed by SIGKILL".into()
            ))),
            Some((
                InternalStatus::Failed,
                Some("the browser exited unexpectedly (killed by SIGKILL)".into())
            ))
        );
        for quiet in [
            Ending::Released,
            Ending::NoSession,
            Ending::Aborted,
            Ending::Lost,
            Ending::HandedBack,
        ] {
            assert_eq!(status(&quiet), None, "{quiet:?}");
        }
        assert!(!Ending::Lost.writes_ended(), "a lost session is another's");
        assert!(!Ending::HandedBack.writes_ended());
        assert!(Ending::Released.writes_ended());
        assert!(!Ending::NoSession.writes_ended());
        assert!(!Ending::Aborted.writes_ended());
    }
}
