//! The join slot: where a task's result waits for its [`JoinHandle`].
//!
//! Owns: one `JoinSlot<T>` per task, shared by the handle and the task's [`Completion`].
//!
//! ```text
//!   EMPTY ──join, or a poll: waiter stored, CAS──► WAITING ──complete: swap──► DONE (wake the waiter)
//!                                        └──join timed out, or the next poll: CAS──► EMPTY (the joiner takes its waiter back)
//!     ├────────────────complete: swap──────────────────────────────► DONE (no one to wake)
//!     └──handle dropped: swap──► DETACHED ──complete: swap──► DONE (the task drops the result)
//!   WAITING ──handle dropped after a poll or a cancelled join: swap──► DETACHED (the dropper drops the waiter)
//!   DONE ──handle dropped: swap──► DETACHED (the dropper drops the result)
//!   DONE ──the joiner took the result: store──► TAKEN ──handle dropped: swap──► DETACHED
//!   DONE ──`complete` found DETACHED and handed the result back: store──► TAKEN
//! ```
//!
//! Invariants:
//! 1. `result` is written only by the completion, before its swap to DONE; read (moved out)
//!    once, by the joiner after it saw DONE, by the handle's drop that swapped DONE out, or
//!    by the completion that found DETACHED; a reader that leaves the state DONE stores
//!    TAKEN. So `result` holds a value exactly when the state is DONE (and the slot drops it
//!    then), which lets it be a `MaybeUninit` rather than an `Option`: 8 bytes less in every
//!    task's cell.
//! 2. `waiter` is written only by the joiner, before its CAS to WAITING; taken only by the
//!    completion after its swap saw WAITING, or by the joiner after its own CAS or swap took
//!    the state out of WAITING (a withdrawal, or the handle's drop: the completion then sees
//!    EMPTY or DETACHED and never reads it).
//! 3. The slot is completed exactly once, by the task's cell (cell.rs invariant 2):
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
//! 6. An awaited handle (`JoinFuture`, the handle's `IntoFuture`) is this same joiner, one poll at a
//!    time: each pending poll withdraws the waker it registered before (invariant 5) and
//!    registers the new one (a waker that `will_wake` the same task is kept), so the slot
//!    is an atomic waker; `JoinFuture::into_handle` withdraws before the handle can be
//!    joined (a `join` writes `waiter` only from EMPTY). A result is taken once: a poll after
//!    the one that returned it panics.
//!
//! May call: the parking of the caller (sched/park.rs), the cooperative budget. Called by:
//! `cell.rs` (completion), users through [`JoinHandle`] (re-exported by `task`).
//!
//! Checked by `src/tests/loom_join.rs`.

use std::cell::UnsafeCell;
#[cfg(not(loom))]
use std::fmt;
use std::mem::MaybeUninit;
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
/// The result was moved out (invariant 1); only the one who moved it stores this.
const TAKEN: u8 = 4;

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
    /// Holds a value exactly when the state is DONE (invariant 1).
    result: UnsafeCell<MaybeUninit<thread::Result<T>>>,
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
            result: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }

    /// Moves the result out and marks it so (invariant 1).
    ///
    /// # Safety
    /// The state is DONE, seen with Acquire, and the caller is the one reader it allows.
    unsafe fn take_result(&self) -> thread::Result<T> {
        // SAFETY: the caller's contract: the completion wrote it and no one moved it yet.
        let result = unsafe { (*self.result.get()).assume_init_read() };
        // Relaxed: the state stays with this reader (the joiner, or the completion after the
        // handle left); whoever reads TAKEN later is ordered after it by the handle's or the
        // cell's own synchronisation.
        self.state.store(TAKEN, Ordering::Relaxed);
        result
    }

    /// Stores the result; returns the joiner to wake, or the result itself when the handle
    /// is gone. Called once (invariant 3).
    pub(crate) fn complete(&self, result: thread::Result<T>) -> Completion<T> {
        // SAFETY: invariant 1: the single completion writes before publishing DONE.
        unsafe { (*self.result.get()).write(result) };
        // AcqRel: Release publishes `result` (pairs with the joiner's Acquire loads and with
        // `detach`'s swap); Acquire pairs with the joiner's CAS to WAITING so its `waiter`
        // write is visible, and with `detach`'s swap.
        match self.state.swap(DONE, Ordering::AcqRel) {
            // SAFETY: invariant 2: the joiner wrote it before WAITING and no longer touches it.
            WAITING => Completion::Joined(unsafe { (*self.waiter.get()).take() }),
            // SAFETY: invariant 1 and 4: the handle is gone, so no joiner reads `result`; it
            // was written by this call, and the state is DONE by our swap.
            DETACHED => Completion::Detached(unsafe { self.take_result() }),
            _ => Completion::Joined(None),
        }
    }

    /// The handle is dropped without joining: returns the result if the task already
    /// completed (the caller drops it), else leaves it to the completion (invariant 4).
    pub(crate) fn detach(&self) -> Option<thread::Result<T>> {
        // AcqRel: Acquire pairs with the Release of `complete`'s swap, so a result it stored
        // is visible; Release pairs with its Acquire, so the completion sees DETACHED after
        // everything the handle did.
        match self.state.swap(DETACHED, Ordering::AcqRel) {
            // SAFETY: invariant 1: DONE was observed with Acquire; the completion is finished
            // and no joiner exists any more. Our swap left DETACHED: nothing left to drop.
            DONE => Some(unsafe { (*self.result.get()).assume_init_read() }),
            WAITING => {
                // SAFETY: invariant 2: our swap took the state out of WAITING, so the
                // completion will see DETACHED and never read `waiter`; the joiner that wrote
                // it is this handle, being dropped. (A waker registered by a poll, or a
                // cancelled join's waiter: dropped now rather than with the cell.)
                drop(unsafe { (*self.waiter.get()).take() });
                None
            }
            _ => None,
        }
    }

    /// Takes back a registered waiter (invariants 5, 6): a poll's, before a blocking join
    /// may register its own (`JoinFuture::into_handle`), or a timed join's at its deadline.
    /// Returns with the state EMPTY or DONE; true if it took a waiter back (EMPTY).
    pub(crate) fn withdraw(&self) -> bool {
        // Relaxed: only this joiner ever stores WAITING.
        if self.state.load(Ordering::Relaxed) != WAITING {
            return false;
        }
        // Acquire on failure: the state is DONE; pairs with `complete`'s swap. Relaxed on
        // success: the completion has not run and read nothing.
        if self
            .state
            .compare_exchange(WAITING, EMPTY, Ordering::Relaxed, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        // SAFETY: invariant 2: back in EMPTY by our CAS, the completion will not read
        // `waiter`; only this joiner writes it.
        drop(unsafe { (*self.waiter.get()).take() });
        true
    }

    /// The joiner as a future (invariant 6): the result if the task completed, else `None`
    /// with a waiter registered — `register` gets the slot's waiter (the one an earlier poll
    /// left, or `None`) to keep or replace.
    pub(crate) fn poll_wait(
        &self,
        register: impl FnOnce(&mut Option<Waiter>),
    ) -> Option<thread::Result<T>> {
        // Acquire: pairs with `complete`'s swap (invariant 1).
        match self.state.load(Ordering::Acquire) {
            DONE => return Some(self.take_polled()),
            TAKEN => panic!("weft: a JoinHandle polled after it returned its result"),
            // Withdraw the earlier poll's waiter (invariant 5). Acquire on failure: DONE.
            WAITING
                if self
                    .state
                    .compare_exchange(WAITING, EMPTY, Ordering::Relaxed, Ordering::Acquire)
                    .is_err() =>
            {
                return Some(self.take_polled());
            }
            _ => {}
        }
        // SAFETY: invariant 2: the state is EMPTY (this joiner is the handle, which exists, so
        // not DETACHED), so the completion does not read `waiter`; only this joiner writes it.
        register(unsafe { &mut *self.waiter.get() });
        // Release: publishes `waiter` (pairs with the AcqRel swap in `complete`). Acquire on
        // failure: the state is DONE; pairs with the Release of that swap.
        if self
            .state
            .compare_exchange(EMPTY, WAITING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // SAFETY: the CAS failed, so the state is DONE and the completion never read
            // `waiter`: it is still ours.
            drop(unsafe { (*self.waiter.get()).take() });
            return Some(self.take_polled());
        }
        None
    }

    /// The result, after the joiner saw DONE with Acquire (invariant 1), for a poll.
    fn take_polled(&self) -> thread::Result<T> {
        // SAFETY: invariant 1: DONE was observed with Acquire, and the completion is finished;
        // a poll after the one that took it panics above (the state is TAKEN then).
        unsafe { self.take_result() }
    }

    /// The task finished: its result is in, or was taken.
    pub(crate) fn is_done(&self) -> bool {
        matches!(self.state.load(Ordering::Acquire), DONE | TAKEN)
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
                    // Past the deadline: withdraw, unless the result came in meanwhile (then
                    // the state is DONE and the loop ends).
                    if !park() && self.withdraw() {
                        return None;
                    }
                }
            } else {
                // SAFETY: the CAS failed, so the state is DONE and the completion never read
                // `waiter`: it is still ours.
                drop(unsafe { (*self.waiter.get()).take() });
            }
        }
        // A join takes its handle by value: no earlier join of it took the result.
        assert_eq!(
            self.state.load(Ordering::Acquire),
            DONE,
            "weft: join slot done without a result"
        );
        // SAFETY: invariant 1: DONE was observed with Acquire, and the completion is finished.
        Some(unsafe { self.take_result() })
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

impl<T> Drop for JoinSlot<T> {
    fn drop(&mut self) {
        // Relaxed: `&mut self`, whoever frees the cell is ordered after every user of it.
        if self.state.load(Ordering::Relaxed) == DONE {
            // SAFETY: invariant 1: DONE means the result is in and was never moved out.
            unsafe { self.result.get_mut().assume_init_drop() };
        }
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
    /// The join handle of `task`.
    ///
    /// # Safety
    ///
    /// `task`'s cell was allocated for a closure whose result type is `T` (`slot` reads the
    /// cell's join slot as a `JoinSlot<T>`), and `task` is a reference the handle may own.
    pub(crate) unsafe fn new(task: Task) -> Self {
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
        // still registered: the handle's drop detaches, which takes the waiter back and
        // drops it (invariant 2).
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

/// Awaiting a handle is [`join`](JoinHandle::join) without blocking: `handle.await` gives
/// what `join` returns, and the task's completion wakes the awaiting future's waker
/// (sched/task/join.rs invariant 6). So async code (a tokio task) can hand blocking work to a weft
/// task and await it:
///
/// ```
/// let rt = weft::Runtime::new().unwrap();
/// let handle = rt.handle();
/// // Any executor; here a plain thread with weft's own `block_on`.
/// let n = weft::future::block_on(async move {
///     let h = handle.spawn(|| {
///         weft::time::sleep(std::time::Duration::from_millis(5)); // parks only the task
///         21
///     });
///     h.await.unwrap() * 2
/// });
/// assert_eq!(n, 42);
/// ```
///
/// `IntoFuture` rather than `Future` on the handle itself, so that `let _ = weft::spawn(..)`
/// stays a plain detach (clippy flags an unused future).
#[cfg(not(loom))]
impl<T: 'static> std::future::IntoFuture for JoinHandle<T> {
    type Output = thread::Result<T>;
    type IntoFuture = JoinFuture<T>;

    fn into_future(self) -> JoinFuture<T> {
        JoinFuture { handle: self }
    }
}

/// A [`JoinHandle`] being awaited (its `IntoFuture`): ready with what
/// [`join`](JoinHandle::join) returns.
///
/// Dropping it detaches the task, as dropping the handle does; it does not cancel it
/// ([`handle`](Self::handle)`().cancel()` does).
///
/// # Panics
/// When polled again after it returned its output.
#[cfg(not(loom))]
#[must_use = "futures do nothing unless awaited"]
pub struct JoinFuture<T> {
    handle: JoinHandle<T>,
}

#[cfg(not(loom))]
impl<T: 'static> JoinFuture<T> {
    /// The handle being awaited: to cancel the task, or look whether it finished.
    pub fn handle(&self) -> &JoinHandle<T> {
        &self.handle
    }

    /// The handle back, to [`join`](JoinHandle::join) it after all; the waker a pending poll
    /// registered is taken back first.
    pub fn into_handle(self) -> JoinHandle<T> {
        self.handle.slot().withdraw();
        self.handle
    }
}

#[cfg(not(loom))]
impl<T: 'static> std::future::Future for JoinFuture<T> {
    type Output = thread::Result<T>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<thread::Result<T>> {
        let waker = cx.waker();
        let registered = self.handle.slot().poll_wait(|waiter| match waiter {
            Some(Waiter::Waker(old)) if old.will_wake(waker) => {}
            _ => *waiter = Some(Waiter::Waker(Box::new(waker.clone()))),
        });
        match registered {
            Some(result) => std::task::Poll::Ready(result),
            None => std::task::Poll::Pending,
        }
    }
}

#[cfg(not(loom))]
impl<T: 'static> fmt::Debug for JoinFuture<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JoinFuture")
            .field("task", &self.handle.task())
            .finish()
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
