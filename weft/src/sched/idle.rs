//! The sleep handshake between a worker and whoever hands it work: no wakeup is lost, and a
//! busy worker is never sent a syscall.
//!
//! Owns: two flags per worker.
//!
//! The race it closes (numbered as the code cites them):
//! 1. The waker publishes its work (queue push), then sets `pushed` (SeqCst).
//! 2. The waker then swaps `sleeping` to false (SeqCst); if it was true, it notifies the
//!    worker's poller, whose notification is sticky (a notify before the wait makes the wait
//!    return at once).
//! 3. The worker about to sleep sets `sleeping` (SeqCst), then re-checks `pushed` and every
//!    queue; only if all are empty does it wait.
//!
//! Steps 1 and 3 are a store-then-load pair on each side, all SeqCst: either the worker sees
//! the work in step 3, or the waker sees `sleeping` in step 2. Checked by
//! `src/tests/loom_idle.rs`.

use crate::loom::sync::atomic::{AtomicBool, Ordering};

#[derive(Debug, Default)]
pub(crate) struct SleepFlags {
    /// The worker is (about to be) blocked in its poller.
    sleeping: AtomicBool,
    /// Work was pushed to the worker's remote queue since it last drained it.
    pushed: AtomicBool,
}

impl SleepFlags {
    pub(crate) fn new() -> Self {
        SleepFlags {
            sleeping: AtomicBool::new(false),
            pushed: AtomicBool::new(false),
        }
    }

    /// Waker, after pushing work (steps 1–2): true if the caller must notify the worker.
    pub(crate) fn work_pushed(&self) -> bool {
        self.pushed.store(true, Ordering::SeqCst);
        self.wake_if_sleeping()
    }

    /// Steps 2 alone, for work that was published elsewhere (a shared queue, then a SeqCst
    /// fence): true if the caller must notify the worker.
    pub(crate) fn wake_if_sleeping(&self) -> bool {
        // Relaxed pre-check keeps a busy worker's cache line shared; SeqCst swap decides.
        self.sleeping.load(Ordering::Relaxed) && self.sleeping.swap(false, Ordering::SeqCst)
    }

    /// Worker: takes the "work was pushed" mark; true if it should drain its remote queue.
    pub(crate) fn take_pushed(&self) -> bool {
        // Acquire: pairs with the SeqCst store in `work_pushed`; the queue's own lock orders
        // the items themselves.
        self.pushed.load(Ordering::Relaxed) && self.pushed.swap(false, Ordering::Acquire)
    }

    /// Worker, before its final check (step 3).
    pub(crate) fn prepare_sleep(&self) {
        self.sleeping.store(true, Ordering::SeqCst);
    }

    /// Worker, in its final check (step 3): was work pushed meanwhile?
    pub(crate) fn pushed_pending(&self) -> bool {
        self.pushed.load(Ordering::SeqCst)
    }

    /// Worker, awake again (after the wait, or when the final check found work).
    pub(crate) fn end_sleep(&self) {
        self.sleeping.store(false, Ordering::Relaxed);
    }
}
