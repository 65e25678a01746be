//! Parking: how anything that waits — a join, a lock, a channel — blocks the caller, whether
//! the caller is a task (only the task parks; its worker runs others) or a plain OS thread
//! (the thread blocks).
//!
//! Owns: `Waiter`, the thing a waiting party leaves behind to be woken by, and [`ParkReason`],
//! what a parked task waits for.
//!
//! Invariants:
//! 1. A waiter is woken at most once per registration by the code that took it out of the
//!    waiting party's structure; waking costs one atomic swap when the task is not parked yet.
//! 2. Park may return spuriously: every caller parks in a loop that re-checks its condition.
//! 3. Cancellation (`Task::cancel`, shutdown, a bound `Context`) takes effect at a park,
//!    *before* it parks, never as it returns: a wait that completed while the caller was
//!    parked returns its result, and a wake by the cancellation alone makes the caller's
//!    loop park again, which unwinds (sched/worker.rs "Cancellation at a park"). A wait that
//!    hands values over (the channels) uses `park_current_cancellable`, which never
//!    unwinds: it aborts its wait under its own lock and unwinds only if no peer completed
//!    it, so no value handed to a cancelled waiter is dropped by its unwind.
//!
//! May call: `task`, `sched`. Called by: `task::join`, and later `sync`, `chan`, `time`, `net`.

mod reason;
pub(crate) mod state;

pub use reason::ParkReason;

#[cfg(not(loom))]
use crate::task::Task;

/// Whoever waits: a task, a plain OS thread, or a future (an awaited `JoinHandle`).
#[cfg(not(loom))]
#[derive(Debug, Clone)]
pub(crate) enum Waiter {
    Task(Task),
    Thread(std::thread::Thread),
    /// Only where a wait is polled as a future (task/join.rs); `Waiter::current` never
    /// makes one. Boxed so that a `Waiter` stays two words (it is in every task's join slot).
    Waker(Box<std::task::Waker>),
}

#[cfg(not(loom))]
impl Waiter {
    /// The caller, as something that can be woken.
    pub(crate) fn current() -> Waiter {
        match crate::sched::current_task() {
            Some(task) => Waiter::Task(task),
            None => Waiter::Thread(std::thread::current()),
        }
    }

    /// Wakes it: `Task::unpark` or `Thread::unpark`.
    pub(crate) fn wake(self) {
        self.wake_by_ref();
    }

    /// Wakes it without giving up the handle.
    pub(crate) fn wake_by_ref(&self) {
        match self {
            Waiter::Task(task) => task.unpark(),
            Waiter::Thread(thread) => thread.unpark(),
            Waiter::Waker(waker) => waker.wake_by_ref(),
        }
    }
}

/// Parks the caller: the current task, or else the current thread (invariant 2). `reason`
/// is what a task dump shows while the task waits (park/reason.rs). A pending cancellation
/// unwinds the caller here, before it parks (invariant 3).
#[cfg(not(loom))]
#[inline]
pub(crate) fn park_current(reason: ParkReason) {
    if !crate::sched::park_current_task(reason) {
        park_thread(None);
    }
}

/// A plain thread's park: like a task's, it is where a cancelled `Context` the thread is
/// bound to unwinds it (context.rs), before it parks (invariant 3).
#[cfg(not(loom))]
#[cold]
fn park_thread(deadline: Option<std::time::Instant>) {
    crate::context::unwind_if_thread_scope_cancelled();
    park_thread_now(deadline);
}

#[cfg(not(loom))]
fn park_thread_now(deadline: Option<std::time::Instant>) {
    match deadline {
        Some(deadline) => {
            std::thread::park_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
        }
        None => std::thread::park(),
    }
}

/// Parks the caller until woken or until `deadline` (invariant 2: callers re-check both their
/// condition and the clock).
#[cfg(not(loom))]
pub(crate) fn park_current_until(deadline: std::time::Instant, reason: ParkReason) {
    if !crate::sched::park_current_task_until(deadline, reason) {
        park_thread(Some(deadline));
    }
}

/// Parks the caller (until `deadline`, if any) like [`park_current`], except that a pending
/// cancellation does not unwind: true means "a cancellation is pending" — returned at once
/// if it was pending before the park, or when it wakes the caller. The caller then ends its
/// wait under its own protocol (keeping a result that was handed over meanwhile) and, if the
/// wait did not complete, calls [`unwind_if_cancelled`] (invariant 3).
#[cfg(not(loom))]
#[inline]
pub(crate) fn park_current_cancellable(
    deadline: Option<std::time::Instant>,
    reason: ParkReason,
) -> bool {
    if let Some(cancelled) = crate::sched::park_current_task_cancellable(deadline, reason) {
        return cancelled;
    }
    park_thread_cancellable(deadline)
}

#[cfg(not(loom))]
#[cold]
fn park_thread_cancellable(deadline: Option<std::time::Instant>) -> bool {
    if crate::context::thread_scope_cancelled() {
        return true;
    }
    park_thread_now(deadline);
    crate::context::thread_scope_cancelled()
}

/// Unwinds the caller if a cancellation is pending (after a [`park_current_cancellable`]
/// that said so, once the wait is given up); returns if there is none after all (the
/// `Context` that asked was left meanwhile), and the caller retries its operation.
#[cfg(not(loom))]
pub(crate) fn unwind_if_cancelled() {
    crate::sched::unwind_if_cancelled_now();
}

#[cfg(feature = "interpose")]
/// A cancellation a call reports as an error instead of unwinding (`interpose`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cancellation {
    /// The task itself: `Task::cancel`, or its runtime shutting down.
    Task,
    /// A `Context` the task is bound to ended for this reason.
    Context(crate::context::ContextError),
}

/// Under loom, every waiter is a model thread.
#[cfg(loom)]
#[derive(Debug, Clone)]
pub(crate) struct Waiter(loom::thread::Thread);

#[cfg(loom)]
impl Waiter {
    pub(crate) fn current() -> Waiter {
        Waiter(loom::thread::current())
    }

    pub(crate) fn wake(self) {
        self.0.unpark();
    }
}

/// Under loom the reason is not kept: no dump runs there.
#[cfg(loom)]
pub(crate) fn park_current(_reason: ParkReason) {
    loom::thread::park();
}
