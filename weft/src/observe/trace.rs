//! The scheduler's trace events: where the runtime reports what it does to a trace that is
//! recording (`weft::debug::trace`, debug/trace/mod.rs), and costs nothing when none is.
//!
//! Owns: the on/off flag [`ON`] and the one recorder ([`Sink`]) a trace installs.
//!
//! Invariants:
//! 1. Off, an event site costs one load of a flag and a branch not taken: the events below
//!    are `#[cold]` and out of line, and everything else — the recorder's dynamic call, the
//!    task's fat pointer — is behind the flag. A worker tests its own copy of the flag
//!    (sched/worker.rs `Worker::tracing`, refreshed from [`on`]), elsewhere [`on`] itself.
//! 2. `ON` is set only after the recorder is installed, and with Release ordering: an event
//!    site that saw it on finds the recorder, and the recorder's own state the trace set up
//!    before it (debug/trace/mod.rs invariant 1).
//!
//! May call: the installed [`Sink`]. Called by: sched/worker.rs (runs, spawns, wakes,
//! steals), sched/blocking.rs (hand-offs and pool calls), debug/trace/mod.rs (installing the
//! recorder, turning it on and off).
//!
//! Why a trait object behind a flag rather than calls to `debug::trace` by name: the
//! scheduler then names no observer (lib.rs, "Layers"), and the dynamic call is paid only
//! while a trace records, where an event already costs ≈35 ns.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use super::TaskView;
use crate::park::ParkReason;

/// Whether a trace records now (invariant 1).
static ON: AtomicBool = AtomicBool::new(false);

/// The recorder, installed by the first trace (invariant 2).
static SINK: OnceLock<&'static dyn Sink> = OnceLock::new();

/// What records the events: debug/trace/mod.rs's per-thread logs.
pub(crate) trait Sink: Sync {
    /// An event's time (debug/trace/mod.rs invariant 5).
    fn ticks(&self) -> u64;
    /// A run slice of `task` from `started` (a [`Sink::ticks`]) until now, ended by `ended`.
    fn run_ended(&self, task: &dyn TaskView, started: u64, ended: Ended);
    /// `task` is being spawned by the caller.
    fn spawned(&self, task: &dyn TaskView);
    /// `task` is being woken by the caller.
    fn woke(&self, task: &dyn TaskView);
    /// This worker stole `task`, never started, from worker `from` (`None`: the injector).
    fn stole(&self, task: &dyn TaskView, from: Option<usize>);
    /// The running task hands a call to the blocking pool.
    fn handed_off(&self);
    /// A blocking-pool call of task `task` (0: not a task's) ran from `started` until now.
    fn blocking_call_ended(&self, task: u64, started: u64);
}

/// How a run slice ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// The task yielded (`yield_now`, or out of its budget).
    Yield,
    /// The task parked for this reason: a constant of the park site that travels in the
    /// `Suspend` value the park switches out with, so it costs the park nothing.
    Park(ParkReason),
    /// The task returned.
    Return,
}

/// Whether a trace records now: the one load an event site makes (invariant 1).
#[inline(always)]
pub(crate) fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Installs `sink` (the first one installed stays: there is one recorder) and turns the
/// events on (invariant 2).
pub(crate) fn start(sink: &'static dyn Sink) {
    SINK.get_or_init(|| sink);
    // Release: the recorder's session was set up before; pairs with the recorder's Acquire
    // fence before it reads it (debug/trace/mod.rs `with_log`).
    ON.store(true, Ordering::Release);
}

/// Turns the events off; an event site that saw them on a moment before may still record.
pub(crate) fn stop() {
    ON.store(false, Ordering::Relaxed);
}

/// The recorder, once installed.
#[inline]
fn sink() -> Option<&'static dyn Sink> {
    SINK.get().copied()
}

/// The start of a run slice: the time (0 if no recorder).
#[cold]
#[inline(never)]
pub(crate) fn run_started() -> u64 {
    sink().map_or(0, |s| s.ticks())
}

/// The end of a run slice that began at `started` (a [`run_started`]).
#[cold]
#[inline(never)]
pub(crate) fn run_ended(task: &dyn TaskView, started: u64, ended: Ended) {
    if let Some(sink) = sink() {
        sink.run_ended(task, started, ended);
    }
}

/// `task` is being spawned by the caller.
#[cold]
#[inline(never)]
pub(crate) fn spawned(task: &dyn TaskView) {
    if let Some(sink) = sink() {
        sink.spawned(task);
    }
}

/// `task` is being woken by the caller.
#[cold]
#[inline(never)]
pub(crate) fn woke(task: &dyn TaskView) {
    if let Some(sink) = sink() {
        sink.woke(task);
    }
}

/// This worker stole `task`'s never-started task from worker `from` (`None`: the injector).
#[cold]
#[inline(never)]
pub(crate) fn stole(task: &dyn TaskView, from: Option<usize>) {
    if let Some(sink) = sink() {
        sink.stole(task, from);
    }
}

/// The running task hands a call to the blocking pool.
#[cold]
#[inline(never)]
pub(crate) fn handed_off() {
    if let Some(sink) = sink() {
        sink.handed_off();
    }
}

/// The time a blocking-pool call starts, never 0 (0 means "not traced" to its end).
#[cold]
#[inline(never)]
pub(crate) fn blocking_call_started() -> u64 {
    sink().map_or(1, |s| s.ticks().max(1))
}

/// A blocking-pool call of task `task` (0: not a task's) ran from `started`.
#[cold]
#[inline(never)]
pub(crate) fn blocking_call_ended(task: u64, started: u64) {
    if let Some(sink) = sink() {
        sink.blocking_call_ended(task, started);
    }
}
