//! Scheduler counters for the debug endpoint that `weft::metrics` does not keep: steals and
//! busy time per worker, monitor warnings per runtime.
//!
//! Owns: [`WorkerActivity`], one per worker (in its `Remote`).
//!
//! Invariants:
//! 1. Each field is written by its worker's thread only, with a load and a store (no locked
//!    instruction), and only off the hot paths: a steal is already a trip through other
//!    workers' queues, and idle time is added where the worker reads the clock anyway (after
//!    a spin, after a sleep). Readers may see a value a moment old.
//!
//! May call: nothing. Called by: sched/worker.rs (writes), `debug` (reads).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// One worker's steals and idle time (invariant 1).
#[derive(Debug, Default)]
pub(crate) struct WorkerActivity {
    steals: AtomicU64,
    idle_nanos: AtomicU64,
    started: OnceLock<Instant>,
}

/// Adds `n` to a counter only this thread writes (invariant 1).
fn add(counter: &AtomicU64, n: u64) {
    let old = counter.load(Ordering::Relaxed);
    counter.store(old.wrapping_add(n), Ordering::Relaxed);
}

impl WorkerActivity {
    /// The worker's thread started.
    pub(crate) fn start(&self) {
        let _ = self.started.set(Instant::now());
    }

    /// The worker took a task from another worker's queue or inbox.
    pub(crate) fn stole(&self) {
        add(&self.steals, 1);
    }

    /// The worker spun or slept for `d` without running a task.
    pub(crate) fn idled(&self, d: Duration) {
        add(&self.idle_nanos, d.as_nanos().min(u64::MAX as u128) as u64);
    }

    /// Tasks stolen so far.
    pub(crate) fn steals(&self) -> u64 {
        self.steals.load(Ordering::Relaxed)
    }

    /// Time since the worker started that it spent outside `idle` (running tasks and
    /// looking for them).
    pub(crate) fn busy(&self) -> Duration {
        let Some(started) = self.started.get() else {
            return Duration::ZERO;
        };
        let idle = Duration::from_nanos(self.idle_nanos.load(Ordering::Relaxed));
        started.elapsed().saturating_sub(idle)
    }
}
