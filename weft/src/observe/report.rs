//! The vocabulary of weft's reports that the runtime builds and the observers fill in: what a
//! task was doing when a report saw it ([`TaskState`]), and a task a graceful shutdown
//! cancelled ([`CancelledTask`]). Re-exported by `weft::debug` and `weft::sched`.
//!
//! Owns: the two types; nothing here holds state.
//!
//! Invariants: none of its own.
//!
//! May call: `park` (a reason). Called by: `debug` (dumps, the shutdown listing), the
//! runtime's shutdown report (sched/shutdown.rs).
//!
//! Why in the seam: the runtime's shutdown report lists its tasks in the words a dump uses,
//! and the runtime names no observer (lib.rs, "Layers").

use std::fmt;
use std::panic::Location;
use std::sync::Arc;

use crate::park::ParkReason;

/// What a task was doing when a report saw it (a dump, a shutdown report).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TaskState {
    /// Running on its worker: the task that called the dump, or the task a worker was
    /// running when it did not answer (a long computation, a blocking call, or a task that
    /// parked while panicking and so blocks its thread). No backtrace for the latter.
    Running,
    /// Ready to run: woken, yielded, or never started.
    Runnable,
    /// Parked, waiting for its reason (`TaskDump::reason`, `CancelledTask::reason`).
    Parked,
}

impl TaskState {
    /// The label: `running`, `runnable` or `parked`.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Running => "running",
            TaskState::Runnable => "runnable",
            TaskState::Parked => "parked",
        }
    }
}

/// One task [`Runtime::shutdown_timeout`](crate::Runtime::shutdown_timeout) cancelled.
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

/// The unfinished tasks of one runtime at the end of its grace period: at most a given
/// number listed, then how many started and how many never-started tasks there were.
pub(crate) type UnfinishedTasks = (Vec<CancelledTask>, usize, usize);
