//! The one shutdown: who owns the root cancellation token, where every task runs, and how the
//! shutdown budget is divided among the steps of the end.
//!
//! [`Shutdown`] owns the root token — fired by SIGTERM/SIGINT ([`Shutdown::listen_for_signals`])
//! or by the end of the run ([`Shutdown::drain`]) — and the one [`TaskTracker`] every background
//! task (connections, listeners, the key refresher, Chrome's pipes and exit watcher) and the
//! relay thread ([`Shutdown::thread_token`]) run under. Nothing is spawned outside it, so when
//! `drain` returns every task has ended or the process is told which did not.
//!
//! [`Steps`] divides `SHUTDOWN_BUDGET_SECONDS` into the named steps of [`Step::ALL`], in the
//! order they run. A step ends at its deadline: the start of the end plus its own share and all
//! earlier ones, so time one step does not use passes to the next, and the last deadline is the
//! whole budget.

use std::future::Future;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tokio_util::task::task_tracker::TaskTrackerToken;
use tracing::{error, info, warn};

/// The root token and the tracker of every task. Cloning shares both.
#[derive(Clone, Default)]
pub struct Shutdown {
    /// Fired once: on a signal, or by [`Self::drain`]. Owned here; everything else holds
    /// clones or children.
    root: CancellationToken,
    tracker: TaskTracker,
}

impl Shutdown {
    /// A fresh root token and tracker.
    pub fn new() -> Self {
        Self::default()
    }

    /// The root token: cancelled on SIGTERM/SIGINT (and when the run drains).
    pub fn token(&self) -> &CancellationToken {
        &self.root
    }

    /// A token cancelled with the root, or on its own (one subsystem's stop).
    pub fn child(&self) -> CancellationToken {
        self.root.child_token()
    }

    /// Runs `task` on the runtime as one of the tracked tasks.
    pub fn spawn<F>(&self, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tracker.spawn(task)
    }

    /// The tracker itself, for code that spawns many tasks (a listener's connections).
    pub fn tracker(&self) -> &TaskTracker {
        &self.tracker
    }

    /// A token that counts as a running task until dropped: held by a thread (the relay's).
    pub fn thread_token(&self) -> TaskTrackerToken {
        self.tracker.token()
    }

    /// Cancels the root token on the first SIGTERM or SIGINT.
    pub fn listen_for_signals(&self) {
        let root = self.root.clone();
        self.spawn(async move {
            use tokio::signal::unix::{SignalKind, signal};
            let (Ok(mut term), Ok(mut int)) = (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) else {
                error!("could not install signal handlers");
                return;
            };
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
                () = root.cancelled() => return,
            };
            info!(signal = name, "shutting down");
            root.cancel();
        });
    }

    /// The end of the run: cancels the root token (what is still running stops) and waits up
    /// to `grace` for every tracked task and thread. `false` when some did not end in time.
    pub async fn drain(&self, grace: Duration) -> bool {
        self.root.cancel();
        self.tracker.close();
        let done = tokio::time::timeout(grace, self.tracker.wait())
            .await
            .is_ok();
        if !done {
            warn!(
                tasks = self.tracker.len(),
                "some tasks did not end within the shutdown grace"
            );
        }
        done
    }
}

/// The steps of a session's end, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The listener closes and every route answers no more.
    StopAdmitting,
    /// The session cookies exported over CDP (persisting sessions only).
    Cookies,
    /// Chrome closed cleanly through CDP, then signalled; the relays end with it.
    ChromeClosed,
    /// The profile packed and uploaded (persisting sessions only).
    Archive,
    /// The terminal status written.
    TerminalStatus,
    /// `proxyBytes` and, last, `endedAt` written.
    EndedAt,
}

impl Step {
    /// Every step, in the order it runs.
    pub const ALL: [Step; 6] = [
        Self::StopAdmitting,
        Self::Cookies,
        Self::ChromeClosed,
        Self::Archive,
        Self::TerminalStatus,
        Self::EndedAt,
    ];

    /// This step's share of the budget, in thousandths (they add up to 1000). With the default
    /// 25 s: 1 s, 3 s, 8 s, 10 s, 1.5 s, 1.5 s. Chrome gets room for a clean close of a busy
    /// profile; the upload most of what is left; each table write one SDK call with its retries.
    pub const fn permille(self) -> u32 {
        match self {
            Self::StopAdmitting => 40,
            Self::Cookies => 120,
            Self::ChromeClosed => 320,
            Self::Archive => 400,
            Self::TerminalStatus => 60,
            Self::EndedAt => 60,
        }
    }

    /// This step alone, out of `budget` (a Chrome closed outside the end sequence, say).
    pub fn share(self, budget: Duration) -> Duration {
        budget * self.permille() / 1000
    }
}

/// The deadlines of one run of the end sequence.
#[derive(Debug, Clone, Copy)]
pub struct Steps {
    start: Instant,
    budget: Duration,
}

impl Steps {
    /// The sequence starting now, within `budget` (`SHUTDOWN_BUDGET_SECONDS`).
    pub fn start(budget: Duration) -> Self {
        Self {
            start: Instant::now(),
            budget,
        }
    }

    /// When `step` must be done: its share and every earlier one, from the start.
    pub fn deadline(&self, step: Step) -> Instant {
        let upto: u32 = Step::ALL
            .iter()
            .take_while(|s| **s != step)
            .map(|s| s.permille())
            .sum::<u32>()
            + step.permille();
        self.start + self.budget * upto / 1000
    }

    /// Time left for `step` (zero once its deadline has passed).
    pub fn left(&self, step: Step) -> Duration {
        self.deadline(step)
            .saturating_duration_since(Instant::now())
    }

    /// Time left in the whole budget.
    pub fn remaining(&self) -> Duration {
        (self.start + self.budget).saturating_duration_since(Instant::now())
    }

    /// Runs `work` until `step`'s deadline; `None` (logged) when the deadline came first.
    pub async fn run<T>(&self, step: Step, work: impl Future<Output = T>) -> Option<T> {
        match tokio::time::timeout_at(self.deadline(step), work).await {
            Ok(v) => Some(v),
            Err(_) => {
                warn!(step = ?step, "shutdown step ran out of its budget");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up_to_the_whole_budget() {
        let total: u32 = Step::ALL.iter().map(|s| s.permille()).sum();
        assert_eq!(total, 1000);
        let budget = Duration::from_secs(25);
        let sum: Duration = Step::ALL.iter().map(|s| s.share(budget)).sum();
        assert_eq!(sum, budget);
    }

    #[tokio::test(start_paused = true)]
    async fn deadlines_accumulate_and_the_last_is_the_budget() {
        let budget = Duration::from_secs(25);
        let steps = Steps::start(budget);
        let t0 = Instant::now();
        assert_eq!(
            steps.deadline(Step::StopAdmitting),
            t0 + Duration::from_secs(1)
        );
        assert_eq!(steps.deadline(Step::Cookies), t0 + Duration::from_secs(4));
        assert_eq!(
            steps.deadline(Step::ChromeClosed),
            t0 + Duration::from_secs(12)
        );
        assert_eq!(steps.deadline(Step::Archive), t0 + Duration::from_secs(22));
        assert_eq!(steps.deadline(Step::EndedAt), t0 + budget);
        // Time a step leaves unused passes to the next.
        tokio::time::advance(Duration::from_millis(500)).await;
        assert_eq!(steps.left(Step::Cookies), Duration::from_millis(3500));
        assert_eq!(steps.remaining(), Duration::from_millis(24_500));
    }

    #[tokio::test(start_paused = true)]
    async fn a_step_past_its_deadline_is_cut_off() {
        let steps = Steps::start(Duration::from_secs(10));
        let out = steps
            .run(Step::StopAdmitting, std::future::pending::<()>())
            .await;
        assert_eq!(out, None);
        assert_eq!(steps.run(Step::Cookies, async { 7 }).await, Some(7));
    }

    #[tokio::test]
    async fn drain_cancels_the_root_and_waits_for_tasks_and_threads() {
        let s = Shutdown::new();
        let token = s.child();
        let task = s.spawn(async move { token.cancelled().await });
        let held = s.thread_token();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let _ = rx.recv();
            drop(held);
        });
        let drain = tokio::spawn({
            let s = s.clone();
            async move { s.drain(Duration::from_secs(30)).await }
        });
        // The child task ends with the root; the thread holds the drain open until it ends.
        task.await.unwrap();
        assert!(!drain.is_finished());
        tx.send(()).unwrap();
        assert!(drain.await.unwrap());
        thread.join().unwrap();
        assert!(s.token().is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn drain_gives_up_after_the_grace() {
        let s = Shutdown::new();
        let _held = s.thread_token();
        assert!(!s.drain(Duration::from_secs(1)).await);
    }
}
