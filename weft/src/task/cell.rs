//! The one allocation of a task: its header, its join slot and its closure, side by side.
//!
//! ```text
//!   Arc<Cell<F, T>>  (repr(C): the header first, so a thin pointer to the cell is one to it)
//!   ┌────────────┬──────────────┬────────────────────┐
//!   │ Header     │ JoinSlot<T>  │ Option<F> (body)   │
//!   └────────────┴──────────────┴────────────────────┘
//!   seen as Arc<dyn TaskCell> by the scheduler, as Arc<dyn JoinCell<T>> by the JoinHandle
//! ```
//!
//! Invariants:
//! 1. `body` is taken once: by `run` on the worker that starts the task, or by `cancel` on
//!    the worker (or runtime) that drops a never-started task — both hold the task exclusively
//!    then, having popped it from a queue (task/mod.rs invariant 1).
//! 2. The join slot is completed exactly once: by `run` (the result, a panic, or the
//!    cancellation unwind) or by `cancel`.
//!
//! Why one allocation: the spawn path allocated the header, the join slot and the boxed closure
//! separately; glibc's malloc and free, with frees on another thread than the allocation, were
//! 37% of the instructions of the million example (callgrind).

use std::cell::UnsafeCell;
use std::panic::{catch_unwind, AssertUnwindSafe};

use super::join::{JoinSlot, CANCELLED};
use super::{Cancelled, Header};
use crate::park::Waiter;

/// A task as the scheduler sees it.
pub(crate) trait TaskCell: Send + Sync + 'static {
    /// Runs the closure on the current stack and completes the join slot; returns the joiner
    /// to wake once the task has fully switched out (invariant 1: called once, by the starter).
    fn run(&self) -> Option<Waiter>;

    /// Drops the closure of a task that never started and tells its joiner (invariant 1).
    fn cancel(&self);
}

/// A task as its [`JoinHandle`](super::JoinHandle) sees it.
pub(crate) trait JoinCell<T>: TaskCell {
    fn slot(&self) -> &JoinSlot<T>;
}

#[repr(C)]
pub(crate) struct Cell<F, T> {
    /// First, so that the cell's address is the header's (module doc).
    pub(crate) header: Header,
    join: JoinSlot<T>,
    body: UnsafeCell<Option<F>>,
}

// SAFETY: `header` and `join` are Sync on their own terms (task/mod.rs, join.rs); `body` is
// touched by one holder at a time (invariant 1). `F: Send` since the body may start on any
// worker; `T: Send` since the result goes to the joiner's thread.
unsafe impl<F: Send, T: Send> Sync for Cell<F, T> {}
// SAFETY: as above.
unsafe impl<F: Send, T: Send> Send for Cell<F, T> {}

impl<F, T> Cell<F, T> {
    pub(crate) fn new(header: Header, body: F) -> Self {
        Cell {
            header,
            join: JoinSlot::new(),
            body: UnsafeCell::new(Some(body)),
        }
    }

    fn take_body(&self) -> Option<F> {
        // SAFETY: invariant 1: the caller holds the task exclusively.
        unsafe { (*self.body.get()).take() }
    }
}

impl<F, T> TaskCell for Cell<F, T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    fn run(&self) -> Option<Waiter> {
        let body = self.take_body().expect("weft: task body run twice");
        match catch_unwind(AssertUnwindSafe(body)) {
            // Shutdown unwound this task at a park: its frames are gone, tell the joiner.
            Err(payload) if payload.is::<Cancelled>() => {
                self.join.complete(Err(Box::new(CANCELLED)))
            }
            result => self.join.complete(result),
        }
    }

    fn cancel(&self) {
        drop(self.take_body());
        if let Some(joiner) = self.join.complete(Err(Box::new(CANCELLED))) {
            joiner.wake();
        }
    }
}

impl<F, T> JoinCell<T> for Cell<F, T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    fn slot(&self) -> &JoinSlot<T> {
        &self.join
    }
}
