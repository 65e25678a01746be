//! The join slot: where a task's result waits for its [`JoinHandle`].
//!
//! Owns: one `JoinSlot<T>` per task, shared by the handle and the task's [`Completion`].
//!
//! ```text
//!   EMPTY ──join: waiter stored, CAS──► WAITING ──complete: swap──► DONE (wake the waiter)
//!                                        └──join timed out: CAS──► EMPTY (the joiner drops its waiter)
//!     ├────────────────complete: swap──────────────────────────────► DONE (no one to wake)
//!     └──handle dropped: swap──► DETACHED ──complete: swap──► DONE (the task drops the result)
//!   DONE ──handle dropped: swap──► DETACHED (the dropper drops the result)
//! ```
//!
//! Invariants:
//! 1. `result` is written only by the completion, before its swap to DONE; read only by the
//!    joiner after it saw DONE.
//! 2. `waiter` is written only by the joiner, before its CAS to WAITING; taken only by the
//!    completion after its swap saw WAITING.
//! 3. The slot is completed exactly once, by the task's cell (sched/task/cell.rs invariant 2):
//!    with its result, or with a `Cancelled` payload when it was dropped before it ran or
//!    unwound at a park because it was cancelled.
//! 4. A result no one will join is dropped by user code's own context, never by a worker
//!    between tasks: a handle dropped before completion (DETACHED) makes `complete` hand the
//!    result back to the task, which drops it on its own stack (sched/task/cell.rs); a handle
//!    dropped after completion takes the result and drops it itself, like
//!    `std::thread::JoinHandle`. So a result's `Drop` that panics is caught like a task's
//!    panic, and one that blocks parks its task instead of blocking a worker thread.
//! 5. A joiner that stops waiting (`join_timeout`) takes its waiter back only by its own CAS
//!    WAITING → EMPTY; if that fails the state is DONE and the result is the joiner's. The
//!    handle survives a timed-out join, so a later join (or the handle's drop) takes over.
//!
//! May call: the parking of the caller (sched/park.rs), the cooperative budget. Called by:
//! `cell.rs` (completion), users through [`JoinHandle`] (re-exported by `task`).
//!
//! Checked by `src/tests/loom_join.rs`.

use std::cell::UnsafeCell;
#[cfg(not(loom))]
use std::fmt;
use std::thread;

use crate::loom::sync::atomic::{AtomicU8, Ordering};
use crate::sched::Waiter;

#[cfg(not(loom))]
use super::{Task, TaskId};

/// No result, no joiner waiting.
const EMPTY: u8 = 0;
/// A joiner stored its waiter and parks.
const WAITING: u8 = 1;
/// The result is in.
const DONE: u8 = 2;
/// The handle was dropped: no one will join (invariant 4).
const DETACHED: u8 = 3;

/// What `complete` leaves to its caller.
pub(crate) enum Completion<T> {
    /// The result is stored; wake this joiner, if one waits.
    Joined(Option<Waiter>),
    /// The handle is gone: the caller drops the result (invariant 4).
    Detached(thread::Result<T>),
}

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

    /// Stores the result; returns the joiner to wake, or the result itself when the handle
    /// is gone. Called once (invariant 3).
    pub(crate) fn complete(&self, result: thread::Result<T>) -> Completion<T> {
        // SAFETY: invariant 1: the single completion writes before publishing DONE.
        unsafe { *self.result.get() = Some(result) };
        // AcqRel: Release publishes `result` (pairs with the joiner's Acquire loads and with
        // `detach`'s swap); Acquire pairs with the joiner's CAS to WAITING so its `waiter`
        // write is visible, and with `detach`'s swap.
        match self.state.swap(DONE, Ordering::AcqRel) {
            // SAFETY: invariant 2: the joiner wrote it before WAITING and no longer touches it.
            WAITING => Completion::Joined(unsafe { (*self.waiter.get()).take() }),
            DETACHED => {
                // SAFETY: invariant 1 and 4: the handle is gone, so no joiner reads `result`;
                // it was written by this call.
                let result = unsafe { (*self.result.get()).take() };
                Completion::Detached(result.expect("weft: join slot lost its result"))
            }
            _ => Completion::Joined(None),
        }
    }

    /// The handle is dropped without joining: returns the result if the task already
    /// completed (the caller drops it), else leaves it to the completion (invariant 4).
    pub(crate) fn detach(&self) -> Option<thread::Result<T>> {
        // AcqRel: Acquire pairs with the Release of `complete`'s swap, so a result it stored
        // is visible; Release pairs with its Acquire, so the completion sees DETACHED after
        // everything the handle did.
        if self.state.swap(DETACHED, Ordering::AcqRel) == DONE {
            // SAFETY: invariant 1: DONE was observed with Acquire; the completion is finished
            // and no joiner exists any more.
            unsafe { (*self.result.get()).take() }
        } else {
            None
        }
    }

    pub(crate) fn is_done(&self) -> bool {
        self.state.load(Ordering::Acquire) == DONE
    }

    /// Like `wait`, but `park` returns false once the joiner's deadline has passed: then the
    /// joiner withdraws (invariant 5) and gets `None`, unless the result came in meanwhile.
    pub(crate) fn wait_timed(
        &self,
        current: impl FnOnce() -> Waiter,
        park: impl Fn() -> bool,
    ) -> Option<thread::Result<T>> {
        if !self.is_done() {
            // SAFETY: invariant 2: the state is not WAITING yet, so the completion does not read
            // `waiter`; only this joiner (there is one: joins take the handle by value) writes.
            unsafe { *self.waiter.get() = Some(current()) };
            // Release: publishes `waiter` (pairs with the AcqRel swap in `complete`).
            // Acquire on failure: the state is DONE; pairs with the Release of that swap.
            if self
                .state
                .compare_exchange(EMPTY, WAITING, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                while !self.is_done() {
                    if park() {
                        continue;
                    }
                    // Acquire on failure: the state is DONE; pairs with `complete`'s swap.
                    // Relaxed on success: the completion has not run and read nothing.
                    if self
                        .state
                        .compare_exchange(WAITING, EMPTY, Ordering::Relaxed, Ordering::Acquire)
                        .is_ok()
                    {
                        // SAFETY: invariant 5: back in EMPTY by our CAS, the completion will
                        // not read `waiter`; only this joiner writes it.
                        drop(unsafe { (*self.waiter.get()).take() });
                        return None;
                    }
                }
            } else {
                // SAFETY: the CAS failed, so the state is DONE and the completion never read
                // `waiter`: it is still ours.
                drop(unsafe { (*self.waiter.get()).take() });
            }
        }
        // SAFETY: invariant 1: DONE was observed with Acquire, and the completion is finished.
        Some(unsafe { (*self.result.get()).take() }.expect("weft: join slot done without a result"))
    }

    /// Blocks the caller (parks its task, or its thread) until the result is in, and takes it.
    pub(crate) fn wait(
        &self,
        current: impl FnOnce() -> Waiter,
        park: impl Fn(),
    ) -> thread::Result<T> {
        let park = || {
            park();
            true
        };
        self.wait_timed(current, park)
            .expect("weft: an untimed join gave up")
    }
}

/// An owned permission to join a task, like `std::thread::JoinHandle`.
///
/// Dropping it detaches the task: it runs on, and its result is dropped.
///
/// ```
/// let (ok, failed) = weft::run(|| {
///     let ok = weft::spawn(|| 6 * 7);
///     let failed = weft::spawn(|| -> u32 { panic!("no answer") });
///     (ok.join(), failed.join())
/// });
/// assert_eq!(ok.unwrap(), 42);
/// // A panic comes back as `Err` with its payload; the runtime goes on.
/// assert_eq!(*failed.unwrap_err().downcast::<&str>().unwrap(), "no answer");
/// ```
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
    /// `Err` with the panic's payload, like `std::thread::JoinHandle::join`. A cancelled task
    /// (by [`cancel`](Self::cancel) or its runtime's shutdown) gives `Err` with a
    /// [`Cancelled`](super::Cancelled) payload: `payload.is::<weft::task::Cancelled>()` or
    /// [`is_cancelled`](crate::task::is_cancelled) tells a cancellation from a panic.
    ///
    /// From a task this parks only the task; from a plain OS thread it blocks the thread.
    pub fn join(self) -> thread::Result<T> {
        // sched/coop.rs invariant 2.
        crate::sched::coop::spend();
        // A joiner cancelled while it waits unwinds out of `wait` (unless the result came
        // first: then it returns it, sched/park.rs invariant 3): then `self` drops as usual and
        // detaches, so the task drops its result itself (invariant 4).
        let result = self.slot().wait(Waiter::current, || {
            crate::sched::park_current(crate::park::ParkReason::Join)
        });
        // The result is taken, so `Drop`'s detach step has nothing to do: skip it.
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never used or dropped again; its task reference is dropped once.
        drop(unsafe { std::ptr::read(&this.task) });
        result
    }

    /// Like [`join`](Self::join), but waits at most `timeout`: `Err(self)` if the task has
    /// not finished by then, so the caller may [`cancel`](Self::cancel) it, join again, or
    /// drop the handle (detaching the task).
    ///
    /// ```
    /// use std::time::Duration;
    /// weft::run(|| {
    ///     let h = weft::spawn(|| weft::time::sleep(Duration::from_secs(60)));
    ///     let h = h.join_timeout(Duration::from_millis(10)).unwrap_err();
    ///     h.cancel();
    ///     assert!(weft::task::is_cancelled(&*h.join().unwrap_err()));
    /// });
    /// ```
    ///
    /// # Errors
    /// The handle itself, when the deadline passed first.
    pub fn join_timeout(self, timeout: std::time::Duration) -> Result<thread::Result<T>, Self> {
        match std::time::Instant::now().checked_add(timeout) {
            Some(deadline) => self.join_deadline(deadline),
            None => Ok(self.join()),
        }
    }

    /// Like [`join_timeout`](Self::join_timeout), waiting until `deadline` at the latest.
    ///
    /// # Errors
    /// The handle itself, when the deadline passed first.
    pub fn join_deadline(self, deadline: std::time::Instant) -> Result<thread::Result<T>, Self> {
        crate::sched::coop::spend(); // sched/coop.rs invariant 2
        let park = || {
            if std::time::Instant::now() >= deadline {
                return false;
            }
            crate::sched::park_current_until(deadline, crate::park::ParkReason::Join);
            true
        };
        // A joiner cancelled while it waits unwinds out of `wait_timed` with its waiter
        // still registered: the handle's drop detaches, which the completion handles like a
        // waiter no one reads (it wakes a task that is gone: a stray token, harmless).
        match self.slot().wait_timed(Waiter::current, park) {
            Some(result) => {
                let this = std::mem::ManuallyDrop::new(self);
                // SAFETY: as in `join`.
                drop(unsafe { std::ptr::read(&this.task) });
                Ok(result)
            }
            None => Err(self),
        }
    }

    /// Cancels the task (see [`Task::cancel`]): it unwinds at its park, or at its next park
    /// if it is running, and [`join`](Self::join) returns `Err` with a
    /// [`Cancelled`](super::Cancelled) payload. A task that already finished keeps its
    /// result.
    pub fn cancel(&self) {
        self.task.cancel();
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
impl<T> Drop for JoinHandle<T> {
    /// Detaches the task (invariant 4): a result already in is dropped here, in the
    /// dropper's context; one still to come is dropped by the task itself.
    fn drop(&mut self) {
        // SAFETY: as in `slot`.
        let slot: &JoinSlot<T> = unsafe { super::cell::join_slot(self.task.as_ptr()) };
        drop(slot.detach());
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
