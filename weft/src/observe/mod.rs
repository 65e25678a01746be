//! The seam between the runtime and its observers: what the scheduler and the layers below it
//! report to `debug` and `metrics` goes through here, and nothing below the observers names
//! them (lib.rs, "Layers").
//!
//! Owns: the on/off flag of the scheduler's trace events and the recorder a trace installs
//! (`trace.rs`); the reports' vocabulary — backtraces (`backtrace.rs`: a raw stack symbolized and
//! trimmed), which the monitor's and the overflow's reports carry and dumps are built from;
//! a task as a report names it ([`TaskView`]) — and the capture of a parked task for a dump
//! (`capture.rs`): what the task records of itself when its worker resumes it to, the
//! worker's answer, and the [`DumpRequest`](capture::DumpRequest) a dump queues on a worker,
//! through which the worker answers without naming `debug`; what SIGQUIT does
//! (`sigquit.rs`); and [`Observers`], what a runtime's build sets off in the layers above.
//!
//! Invariants:
//! 1. This layer names nothing above `park`: the runtime calls into it, the observers read
//!    from it or install what it calls (a trace's recorder, a dump's request).
//! 2. What the runtime sets off above it — at a build, the SIGQUIT dump and the interposed
//!    libc calls; at a graceful shutdown that runs out of time, the listing of what it
//!    cancels — it reaches through [`observers`], which the crate root defines: no layer
//!    below the root names those layers.
//!
//! May call: `park` (a reason), what the observers installed (a trace's recorder, a dump's
//! request, the functions lib.rs wires in). Called by: `sched` (trace events, the monitor,
//! the overflow report's symbolizer, the worker answering a dump, the capture a parked task
//! makes, the build's SIGQUIT and interposition), `debug`; lib.rs (the wiring).
//!
//! Why a seam: the scheduler called the observers by name (the monitor symbolized with
//! `debug`, the worker counted into `metrics`), so a change to a dump's rendering could break
//! the scheduler's build, and no layer could be read or tested apart from the others. Go's
//! runtime funnels its tracing through a few `trace*` entry points; tokio's worker owns one
//! metrics batch the metrics API reads.

pub(crate) mod backtrace;
pub(crate) mod capture;
pub(crate) mod report;
pub(crate) mod sigquit;
pub(crate) mod trace;

use std::io;
use std::panic::Location;
use std::sync::Arc;

use capture::DumpTarget;
use report::UnfinishedTasks;
use sigquit::SigquitAction;

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

/// What a runtime's build sets off in the layers above it, as the crate root wires them in
/// (lib.rs `observers`): the one place the runtime reaches them, and only by these pointers.
pub(crate) struct Observers {
    /// Makes SIGQUIT print the task dump, then do what the action says (debug/signal.rs).
    pub(crate) install_sigquit: fn(SigquitAction) -> io::Result<()>,
    /// Keeps the interposed libc functions linked and resolves them (interpose/mod.rs
    /// `init`, with the `interpose` feature; else nothing).
    pub(crate) init_interpose: fn(),
    /// The unfinished tasks of a runtime whose graceful shutdown ran out of time: at most
    /// the given number listed, then how many started and never-started tasks there were
    /// (debug/mod.rs `unfinished_tasks`, a dump's capture without its symbolizing).
    pub(crate) unfinished_tasks: fn(&dyn DumpTarget, usize) -> UnfinishedTasks,
}

extern "Rust" {
    /// The observers, defined by the crate root (lib.rs), which alone may name both the
    /// runtime and the layers above it. A link-time name rather than a registration: a
    /// runtime's build must reach them before any code of theirs has run (the SIGQUIT dump
    /// is on by default), and the call from here is what links them into a program that
    /// never names them, as `#[global_allocator]` provides `__rust_alloc` to `alloc`.
    #[link_name = "__weft_0_1_observers"]
    fn observers_of_this_build() -> &'static Observers;
}

/// The observers a runtime's build sets off (invariant 2).
pub(crate) fn observers() -> &'static Observers {
    // SAFETY: lib.rs defines the function under this link name with this signature, in this
    // crate; it only returns a reference to a static.
    unsafe { observers_of_this_build() }
}
