//! The seam between the runtime and its observers: what the scheduler and the layers below it
//! report to `debug` and `metrics` goes through here, and nothing below the observers names
//! them (lib.rs, "Layers").
//!
//! Owns: the reports' vocabulary — backtraces (`backtrace.rs`: a raw stack symbolized and
//! trimmed), which the monitor's and the overflow's reports carry and dumps are built from;
//! a task as a report names it ([`TaskView`]) — and the capture of a parked task for a dump
//! (`capture.rs`): what the task records of itself when its worker resumes it to, the
//! worker's answer, and the [`DumpRequest`](capture::DumpRequest) a dump queues on a worker,
//! through which the worker answers without naming `debug`.
//!
//! Invariants:
//! 1. This layer names nothing above `park`: the runtime calls into it, the observers read
//!    from it.
//!
//! May call: `park` (a reason), a dump request's own methods. Called by: `sched` (the monitor,
//! the overflow report's symbolizer, the worker answering a dump, the capture a parked task
//! makes), `debug`.
//!
//! Why a seam: the scheduler called the observers by name (the monitor symbolized with
//! `debug`, the worker counted into `metrics`), so a change to a dump's rendering could break
//! the scheduler's build, and no layer could be read or tested apart from the others. Go's
//! runtime funnels its tracing through a few `trace*` entry points; tokio's worker owns one
//! metrics batch the metrics API reads.

pub(crate) mod backtrace;
pub(crate) mod capture;
pub(crate) mod trace;

use std::panic::Location;
use std::sync::Arc;

/// A task, as a report names it (sched/task/mod.rs `Header` implements it): the seam names
/// no type of the scheduler's.
pub(crate) trait TaskView {
    /// Its id (`TaskId::as_u64`).
    fn id(&self) -> u64;
    /// The name it was spawned with, if any.
    fn name(&self) -> Option<&Arc<str>>;
    /// Where it was spawned.
    fn spawn_site(&self) -> &'static Location<'static>;
}
