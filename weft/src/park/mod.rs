//! Parking: how anything that waits — a join, a lock, a channel — blocks the caller, whether
//! the caller is a task (only the task parks; its worker runs others) or a plain OS thread
//! (the thread blocks).
//!
//! Owns: `Waiter`, the thing a waiting party leaves behind to be woken by.
//!
//! Invariants:
//! 1. A waiter is woken at most once per registration by the code that took it out of the
//!    waiting party's structure; waking costs one atomic swap when the task is not parked yet.
//! 2. Park may return spuriously: every caller parks in a loop that re-checks its condition.
//!
//! May call: `task`, `sched`. Called by: `task::join`, and later `sync`, `chan`, `time`, `net`.

pub(crate) mod state;

#[cfg(not(loom))]
use crate::task::Task;

/// Whoever waits: a task, or a plain OS thread.
#[cfg(not(loom))]
#[derive(Debug, Clone)]
pub(crate) enum Waiter {
    Task(Task),
    Thread(std::thread::Thread),
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
        }
    }
}

/// Parks the caller: the current task, or else the current thread (invariant 2).
#[cfg(not(loom))]
#[inline]
pub(crate) fn park_current() {
    if !crate::sched::park_current_task() {
        park_thread(None);
    }
}

/// A plain thread's park: like a task's, it is where a cancelled `Context` the thread is
/// bound to unwinds it (context.rs).
#[cfg(not(loom))]
#[cold]
fn park_thread(deadline: Option<std::time::Instant>) {
    crate::context::unwind_if_thread_scope_cancelled();
    match deadline {
        Some(deadline) => {
            std::thread::park_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
        }
        None => std::thread::park(),
    }
    crate::context::unwind_if_thread_scope_cancelled();
}

/// Parks the caller until woken or until `deadline` (invariant 2: callers re-check both their
/// condition and the clock).
#[cfg(not(loom))]
pub(crate) fn park_current_until(deadline: std::time::Instant) {
    if !crate::sched::park_current_task_until(deadline) {
        park_thread(Some(deadline));
    }
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

#[cfg(loom)]
pub(crate) fn park_current() {
    loom::thread::park();
}
