//! A barrier and a one-time initialiser that park tasks.
//!
//! Owns: [`Barrier`] — a count and a generation behind a task [`Mutex`], and a [`Condvar`];
//! [`Once`] — a state word (any thread, atomically) and a task [`Mutex`] that runs the
//! initialiser under it.
//!
//! Invariants:
//! 1. A barrier generation ends when its `n`th task arrives; that task is the leader, and
//!    every task of the generation is released (generation counting makes it reusable).
//! 2. `Once` runs its closure at most once to completion; others park on its mutex meanwhile
//!    and see DONE (Acquire) afterwards. A closure that panics, or whose task is cancelled
//!    while it runs (it unwinds), leaves it incomplete and unlocks the mutex while unwinding,
//!    so the next caller — one already queued on the mutex included — runs it again; a caller
//!    cancelled while queued leaves the mutex's queue (sema.rs invariant 4).
//! 3. A barrier waiter that unwinds out of `wait` (a task cancelled at shutdown) stays counted
//!    as arrived in its generation; its condvar node leaves the queue (condvar.rs invariant
//!    3). Its pre-barrier work is done, which is what the others wait for; withdrawing the
//!    arrival instead would leave them waiting for an `n`th task that may never come.
//!
//! May call: `sync::mutex`, `sync::condvar`. Called by: users.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{Condvar, Mutex};

/// Lets `n` tasks wait for each other, like std's `Barrier`.
pub struct Barrier {
    state: Mutex<(usize, u64)>,
    cvar: Condvar,
    n: usize,
}

/// Returned by [`Barrier::wait`]: one task of each generation is the leader.
#[derive(Debug, Clone, Copy)]
pub struct BarrierWaitResult(bool);

impl BarrierWaitResult {
    /// True for exactly one task of each generation.
    pub fn is_leader(&self) -> bool {
        self.0
    }
}

impl Barrier {
    /// A barrier for `n` tasks (`n == 0` behaves like 1).
    pub fn new(n: usize) -> Self {
        Barrier {
            state: Mutex::new((0, 0)),
            cvar: Condvar::new(),
            n,
        }
    }

    /// Parks until `n` tasks have called `wait` (invariant 1). A waiter cancelled by its
    /// runtime's shutdown still counts as arrived (invariant 3).
    pub fn wait(&self) -> BarrierWaitResult {
        let mut state = self.state.lock();
        let generation = state.1;
        state.0 += 1;
        if state.0 < self.n {
            let _state = self.cvar.wait_while_for(
                state,
                &mut |s| s.1 == generation,
                crate::park::ParkReason::Barrier,
            );
            BarrierWaitResult(false)
        } else {
            state.0 = 0;
            state.1 = state.1.wrapping_add(1);
            self.cvar.notify_all();
            BarrierWaitResult(true)
        }
    }
}

impl fmt::Debug for Barrier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Barrier").field("n", &self.n).finish()
    }
}

/// Runs an initialiser once, like Go's `sync.Once`; other callers park until it is done.
pub struct Once {
    done: AtomicBool,
    lock: Mutex<()>,
}

impl Default for Once {
    fn default() -> Self {
        Self::new()
    }
}

impl Once {
    /// A `Once` that has not run.
    pub fn new() -> Self {
        Once {
            done: AtomicBool::new(false),
            lock: Mutex::new(()),
        }
    }

    /// Runs `f` if no call has completed yet; returns once some call has (invariant 2).
    ///
    /// If `f` panics (or its task is cancelled inside it), the `Once` stays incomplete and the
    /// panic propagates; the next caller, or one already waiting, runs its own closure.
    pub fn call_once(&self, f: impl FnOnce()) {
        // Acquire: pairs with the Release store below, so `f`'s effects are visible.
        if self.done.load(Ordering::Acquire) {
            return;
        }
        let _guard = self.lock.lock_for(crate::park::ParkReason::Once);
        if !self.done.load(Ordering::Relaxed) {
            f();
            // Release: pairs with the Acquire load above.
            self.done.store(true, Ordering::Release);
        }
    }

    /// True once a call has completed.
    pub fn is_completed(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }
}

impl fmt::Debug for Once {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Once")
            .field("done", &self.is_completed())
            .finish()
    }
}
