//! What [`Runtime::shutdown_timeout`](super::Runtime::shutdown_timeout) reports: whether every
//! task finished within the grace period, and if not, which ones it cancelled.
//!
//! Owns: [`ShutdownReport`] and [`CancelledTask`], built once per graceful shutdown.
//!
//! Invariants:
//! 1. The list is taken when the grace period ends, before the cancellation: the tasks in it
//!    were unfinished then (one that finished in the moment between the look and the
//!    cancellation is still listed). It holds at most [`ShutdownReport::MAX_LISTED`] tasks;
//!    [`ShutdownReport::cancelled`] counts them all.
//! 2. A runtime whose tasks all finished costs the report nothing; one that cancels tasks pays
//!    a task dump's capture (each worker records its tasks between two of them, debug/mod.rs
//!    invariant 1) without its symbolizing.
//!
//! May call: `debug` (the capture). Called by: `Runtime::shutdown_timeout`.
//!
//! Why names and spawn sites: a grace period that always runs out is most often one
//! background loop (a stats ticker, a reconnect loop) nobody stopped; the report names it, so
//! the fix — bind it to the `Context` the server cancels first — is one look away.

use std::fmt;
use std::panic::Location;
use std::sync::Arc;
use std::time::Duration;

use crate::debug::TaskState;
use crate::park::ParkReason;

/// One task [`Runtime::shutdown_timeout`](super::Runtime::shutdown_timeout) cancelled.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CancelledTask {
    /// Its [`TaskId`](crate::task::TaskId), as a number.
    pub id: u64,
    /// Its name ([`task::Builder::name`](crate::task::Builder::name)), if it had one.
    pub name: Option<Arc<str>>,
    /// Where it was spawned.
    pub spawn_site: &'static Location<'static>,
    /// Parked, runnable, or running (a task that never parks holds its worker; the shutdown
    /// waits for it).
    pub state: TaskState,
    /// What it waited for, when it was parked.
    pub reason: Option<ParkReason>,
}

impl fmt::Display for CancelledTask {
    /// `task 7 "stats" parked [sleep], spawned at src/main.rs:20:5`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "task {}", self.id)?;
        if let Some(name) = &self.name {
            write!(f, " {name:?}")?;
        }
        match self.reason.filter(|_| self.state == TaskState::Parked) {
            Some(reason) => write!(f, " parked [{reason}]")?,
            None => write!(f, " {}", self.state.as_str())?,
        }
        write!(f, ", spawned at {}", self.spawn_site)
    }
}

/// What a graceful shutdown did, returned by
/// [`Runtime::shutdown_timeout`](super::Runtime::shutdown_timeout).
///
/// Its `Display` is one line when every task finished, else a line and then one line per
/// cancelled task (at most [`MAX_LISTED`](Self::MAX_LISTED)):
///
/// ```text
/// 2 task(s) cancelled when the grace period of 200ms ended:
///   task 3 "stats" parked [sleep], spawned at src/main.rs:20:5
///   task 9 parked [socket read], spawned at src/main.rs:31:13
/// ```
#[derive(Debug, Clone)]
#[must_use = "the report says whether every task finished in time"]
pub struct ShutdownReport {
    pub(crate) finished: bool,
    pub(crate) grace: Duration,
    pub(crate) waited: Duration,
    pub(crate) cancelled: usize,
    pub(crate) unstarted: usize,
    pub(crate) tasks: Vec<CancelledTask>,
}

impl ShutdownReport {
    /// The most tasks [`cancelled_tasks`](Self::cancelled_tasks) lists (invariant 1).
    pub const MAX_LISTED: usize = 64;

    /// Whether every task finished within the grace period (then nothing was cancelled).
    pub fn finished_in_time(&self) -> bool {
        self.finished
    }

    /// How many tasks were cancelled: started ones unwound at their parks, never-started ones
    /// dropped unrun.
    pub fn cancelled(&self) -> usize {
        self.cancelled
    }

    /// How many of the cancelled tasks had never started (they have no name in the list).
    pub fn never_started(&self) -> usize {
        self.unstarted
    }

    /// The cancelled tasks that had started, with their names and spawn sites: at most
    /// [`MAX_LISTED`](Self::MAX_LISTED) of them.
    pub fn cancelled_tasks(&self) -> &[CancelledTask] {
        &self.tasks
    }

    /// How long the shutdown waited for the tasks to finish: less than the grace period when
    /// they all did.
    pub fn waited(&self) -> Duration {
        self.waited
    }
}

impl fmt::Display for ShutdownReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.finished {
            return write!(f, "every task finished in {:.1?}", self.waited);
        }
        if self.cancelled == 0 {
            return write!(
                f,
                "the grace period of {:.1?} ended; the last tasks finished right after it, \
                 none was cancelled",
                self.grace
            );
        }
        write!(
            f,
            "{} task(s) cancelled when the grace period of {:.1?} ended",
            self.cancelled, self.grace
        )?;
        if self.unstarted > 0 {
            write!(f, " ({} never started)", self.unstarted)?;
        }
        write!(f, ":")?;
        for task in &self.tasks {
            write!(f, "\n  {task}")?;
        }
        let unlisted = self
            .cancelled
            .saturating_sub(self.unstarted)
            .saturating_sub(self.tasks.len());
        if unlisted > 0 {
            write!(f, "\n  and {unlisted} more")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_names_each_cancelled_task_and_counts_the_rest() {
        let site = Location::caller();
        let task = |id, name: Option<&str>| CancelledTask {
            id,
            name: name.map(Arc::from),
            spawn_site: site,
            state: TaskState::Parked,
            reason: Some(ParkReason::Sleep),
        };
        let report = ShutdownReport {
            finished: false,
            grace: Duration::from_millis(200),
            waited: Duration::from_millis(200),
            cancelled: 5,
            unstarted: 1,
            tasks: vec![task(3, Some("stats")), task(9, None)],
        };
        assert!(!report.finished_in_time());
        let text = report.to_string();
        let mut lines = text.lines();
        assert_eq!(
            lines.next(),
            Some("5 task(s) cancelled when the grace period of 200.0ms ended (1 never started):")
        );
        assert_eq!(
            lines.next(),
            Some(&*format!(
                "  task 3 \"stats\" parked [sleep], spawned at {site}"
            ))
        );
        assert_eq!(
            lines.next(),
            Some(&*format!("  task 9 parked [sleep], spawned at {site}"))
        );
        assert_eq!(lines.next(), Some("  and 2 more"));
        assert_eq!(lines.next(), None);
    }

    #[test]
    fn a_clean_shutdown_is_one_line() {
        let report = ShutdownReport {
            finished: true,
            grace: Duration::from_secs(5),
            waited: Duration::from_millis(30),
            cancelled: 0,
            unstarted: 0,
            tasks: Vec::new(),
        };
        assert!(report.finished_in_time());
        assert_eq!(report.to_string(), "every task finished in 30.0ms");
    }
}
