//! The join slot: where a task's result waits for its [`JoinHandle`].
//!
//! Owns: one `JoinSlot<T>` per task, shared by the handle and the task's [`Completion`].
//!
//! ```text
//!   EMPTY ──join: waiter stored, CAS──► WAITING ──complete: swap──► DONE (wake the waiter)
//!     └────────────────complete: swap──────────────────────────────► DONE (no one to wake)
//! ```
//!
//! Invariants:
//! 1. `result` is written only by the completion, before its swap to DONE; read only by the
//!    joiner after it saw DONE.
//! 2. `waiter` is written only by the joiner, before its CAS to WAITING; taken only by the
//!    completion after its swap saw WAITING.
//! 3. The slot is completed exactly once, by the task's cell (task/cell.rs invariant 2):
//!    with its result, or with [`CANCELLED`] when it was dropped before it ran or unwound
//!    at shutdown.
//!
//! Checked by `src/tests/loom_join.rs`.

use std::cell::UnsafeCell;
#[cfg(not(loom))]
use std::fmt;
use std::thread;

use crate::loom::sync::atomic::{AtomicU8, Ordering};
use crate::park::Waiter;

#[cfg(not(loom))]
use super::{Task, TaskId};

/// No result, no joiner waiting.
const EMPTY: u8 = 0;
/// A joiner stored its waiter and parks.
const WAITING: u8 = 1;
/// The result is in.
const DONE: u8 = 2;

/// The payload `join` returns for a task that never finished because its runtime shut down.
pub(crate) const CANCELLED: &str = "weft: task cancelled: its runtime shut down";

pub(crate) struct JoinSlot<T> {
    state: AtomicU8,
    waiter: UnsafeCell<Option<Waiter>>,
    result: UnsafeCell<Option<thread::Result<T>>>,
}

// SAFETY: the cells are handed over by the state machine (invariants 1 and 2): each has one
// writer at a time, and the reader reads after an Acquire that saw the writer's Release.
// `T: Send` because the result moves from the task's thread to the joiner's.
unsafe impl<T: Send> Sync for JoinSlot<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for JoinSlot<T> {}

impl<T> JoinSlot<T> {
    pub(crate) fn new() -> Self {
        JoinSlot {
            state: AtomicU8::new(EMPTY),
            waiter: UnsafeCell::new(None),
            result: UnsafeCell::new(None),
        }
    }

    /// Stores the result; returns the joiner to wake, if one waits. Called once (invariant 3).
    pub(crate) fn complete(&self, result: thread::Result<T>) -> Option<Waiter> {
        // SAFETY: invariant 1: the single completion writes before publishing DONE.
        unsafe { *self.result.get() = Some(result) };
        // AcqRel: Release publishes `result` (pairs with the joiner's Acquire loads); Acquire
        // pairs with the joiner's CAS to WAITING so its `waiter` write is visible.
        if self.state.swap(DONE, Ordering::AcqRel) == WAITING {
            // SAFETY: invariant 2: the joiner wrote it before WAITING and no longer touches it.
            unsafe { (*self.waiter.get()).take() }
        } else {
            None
        }
    }

    pub(crate) fn is_done(&self) -> bool {
        self.state.load(Ordering::Acquire) == DONE
    }

    /// Blocks the caller (parks its task, or its thread) until the result is in, and takes it.
    pub(crate) fn wait(
        &self,
        current: impl FnOnce() -> Waiter,
        park: impl Fn(),
    ) -> thread::Result<T> {
        if !self.is_done() {
            // SAFETY: invariant 2: the state is not WAITING yet, so the completion does not read
            // `waiter`; only this joiner (there is one: `join` takes the handle by value) writes.
            unsafe { *self.waiter.get() = Some(current()) };
            // Release: publishes `waiter` (pairs with the AcqRel swap in `complete`).
            // Acquire on failure: the state is DONE; pairs with the Release of that swap.
            if self
                .state
                .compare_exchange(EMPTY, WAITING, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                while !self.is_done() {
                    park();
                }
            }
        }
        // SAFETY: invariant 1: DONE was observed with Acquire, and the completion is finished.
        unsafe { (*self.result.get()).take() }.expect("weft: join slot done without a result")
    }
}

/// An owned permission to join a task, like `std::thread::JoinHandle`.
///
/// Dropping it detaches the task: it runs on, and its result is dropped.
#[cfg(not(loom))]
pub struct JoinHandle<T> {
    /// The joiner's reference to the task.
    task: Task,
    _result: std::marker::PhantomData<fn() -> T>,
}

#[cfg(not(loom))]
impl<T: 'static> JoinHandle<T> {
    /// The join handle of `task`, whose cell's result type is `T`.
    pub(crate) fn new(task: Task) -> Self {
        JoinHandle {
            task,
            _result: std::marker::PhantomData,
        }
    }

    fn slot(&self) -> &JoinSlot<T> {
        // SAFETY: `new`'s caller made `task` with a cell whose result type is `T`, and our
        // reference keeps the cell alive.
        unsafe { super::cell::join_slot(self.task.as_ptr()) }
    }

    /// Waits for the task to finish and returns its result; a panic in the task comes back as
    /// `Err` with the panic's payload, like `std::thread::JoinHandle::join`. A task cancelled
    /// by its runtime's shutdown gives `Err` with a `&str` payload saying so.
    ///
    /// From a task this parks only the task; from a plain OS thread it blocks the thread.
    pub fn join(self) -> thread::Result<T> {
        self.slot().wait(Waiter::current, crate::park::park_current)
    }

    /// Whether the task has finished (its result is ready to join).
    pub fn is_finished(&self) -> bool {
        self.slot().is_done()
    }

    /// The task's handle.
    pub fn task(&self) -> Task {
        self.task.clone()
    }

    /// The task's id.
    pub fn id(&self) -> TaskId {
        self.task().id()
    }
}

#[cfg(not(loom))]
impl<T: 'static> fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinHandle")
            .field("task", &self.task())
            .finish()
    }
}

#[cfg(not(loom))]
impl<T> fmt::Debug for JoinSlot<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinSlot").finish_non_exhaustive()
    }
}
