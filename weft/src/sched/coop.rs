//! The cooperative budget: a task that keeps completing operations without ever parking
//! yields now and then, so the other tasks of its worker — which it cannot leave, since a
//! started task never changes thread — still run.
//!
//! Owns: one thread-local count, `BUDGET`, touched only by its own thread.
//!
//! Invariants:
//! 1. The worker sets the count to [`COOP_BUDGET`] before each resume of a task
//!    ([`reset`]), so a task that parked or yielded starts afresh.
//! 2. Each spawn, and each join, channel, lock, semaphore or socket operation that may block
//!    (and each `try_send`, `try_recv` and `select!`, which may not),
//!    spends one unit first
//!    ([`spend`]); the one that finds nothing left yields (to the back of its worker's ready
//!    queue) before it starts, with no lock held, then proceeds.
//!
//! May call: `sched::worker` (to yield). Called by: `task` (spawn, join), `chan`, `sync`,
//! `net`, `sched/worker.rs`.
//!
//! Why: measured, a chat hub fanning lines out to 2,000 clients over buffered channels never
//! parked, and a 5 ms sleep on its worker woke 190–372 ms late; a pipeline of always-ready
//! channels let a 100 ms ticker fire once in 2 s. This is tokio's coop budget (128 units per
//! poll) in a stackful form: the yield is a plain switch, so no operation needs to be retried.
//! `try_send`, `try_recv` and a `select!` with a `default` arm spend too, although they
//! never block: a loop around them that never finds its channel ready would otherwise hold
//! its worker for good, and starve the very task that would make it ready. Why a thread-local rather than a field of the task: only one task runs on
//! a thread at a time, and a thread-local is one load away from every operation, which need
//! not look up the running task.

use std::cell::Cell;

/// Operations a task may complete in a row without parking before it yields.
pub(crate) const COOP_BUDGET: u32 = 128;

thread_local! {
    /// Units left to the task running on this thread; plain threads never run out (it starts
    /// at `u32::MAX` and is topped up when it does).
    static BUDGET: Cell<u32> = const { Cell::new(u32::MAX) };
}

/// Invariant 1: a fresh budget for the task about to be resumed.
#[inline]
pub(crate) fn reset() {
    BUDGET.with(|b| b.set(COOP_BUDGET));
}

/// Invariant 2: spends one unit; yields first when none is left.
#[inline]
pub(crate) fn spend() {
    BUDGET.with(|b| {
        let left = b.get();
        if left > 1 {
            b.set(left - 1);
        } else {
            out_of_budget(b);
        }
    });
}

#[cold]
fn out_of_budget(budget: &Cell<u32>) {
    // A yield resumes through `reset`; off a task (a plain thread), just top it up.
    budget.set(COOP_BUDGET);
    if !super::suspend_current(super::task::Suspend::Yield) {
        budget.set(u32::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_thread_never_yields() {
        for _ in 0..1000 {
            spend();
        }
        assert!(BUDGET.with(Cell::get) > u32::MAX - 2000);
    }
}
