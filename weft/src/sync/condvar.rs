//! A condition variable for [`Mutex`](super::Mutex): wait for a predicate, parking the task.
//!
//! Owns: [`Condvar`] — its queue of waiting nodes, behind a short std lock never held across
//! a park.
//!
//! Invariants:
//! 1. A waiter queues its node before it unlocks the mutex, so a notify made by anyone who
//!    locks the mutex after that finds the node (no lost wakeup).
//! 2. A node is notified once, by the notifier that popped it; a waiter that timed out removes
//!    its node if still queued, and otherwise counts as notified.
//! 3. A waiter that unwinds out of its wait (a task cancelled at shutdown, parked here or in
//!    the relock) removes its node if still queued; if a notifier popped it, the notification
//!    passes to the next queued waiter, so a `notify_one` is never swallowed by a waiter that
//!    is gone. (Popped by `notify_all`, the pass-on is a spurious wakeup of a later waiter,
//!    which callers allow for already: they wait in a loop on their condition.)
//!
//! May call: `sync::mutex`, `sync::wait_queue`, `park`. Called by: users, `sync::barrier`.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use super::mutex::MutexGuard;
use super::wait_queue::{Ticket, WaitQueue};
use crate::park::ParkReason;
use crate::sched::Waiter;

struct Node {
    notified: AtomicBool,
    waiter: Waiter,
}

/// A condition variable for tasks, like Go's `sync.Cond` and std's `Condvar`. Spurious
/// wakeups are possible: wait in a loop on your condition, or use [`wait_while`](Self::wait_while).
#[derive(Default)]
pub struct Condvar {
    queue: StdMutex<WaitQueue<Arc<Node>>>,
}

/// Whether [`Condvar::wait_timeout`] returned because the time ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitTimeoutResult(bool);

impl WaitTimeoutResult {
    /// True if the wait ended by timing out.
    pub fn timed_out(&self) -> bool {
        self.0
    }
}

impl Condvar {
    /// A condition variable with no waiters.
    pub fn new() -> Self {
        Condvar::default()
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, WaitQueue<Arc<Node>>> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Unlocks the guard's mutex, parks until notified, and locks it again.
    pub fn wait<'a, T: ?Sized>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.wait_until(guard, None, ParkReason::Condvar).0
    }

    /// Waits until `condition` is false, re-checking after every wakeup.
    pub fn wait_while<'a, T: ?Sized>(
        &self,
        guard: MutexGuard<'a, T>,
        mut condition: impl FnMut(&mut T) -> bool,
    ) -> MutexGuard<'a, T> {
        self.wait_while_for(guard, &mut condition, ParkReason::Condvar)
    }

    /// [`wait_while`](Self::wait_while), parking with `reason` (park/reason.rs invariant 1:
    /// `Barrier` waits on its condvar under its own name).
    pub(crate) fn wait_while_for<'a, T: ?Sized>(
        &self,
        mut guard: MutexGuard<'a, T>,
        condition: &mut dyn FnMut(&mut T) -> bool,
        reason: ParkReason,
    ) -> MutexGuard<'a, T> {
        while condition(&mut *guard) {
            guard = self.wait_until(guard, None, reason).0;
        }
        guard
    }

    /// Like [`wait`](Self::wait), for at most `timeout`.
    pub fn wait_timeout<'a, T: ?Sized>(
        &self,
        guard: MutexGuard<'a, T>,
        timeout: Duration,
    ) -> (MutexGuard<'a, T>, WaitTimeoutResult) {
        self.wait_until(
            guard,
            Instant::now().checked_add(timeout),
            ParkReason::Condvar,
        )
    }

    fn wait_until<'a, T: ?Sized>(
        &self,
        guard: MutexGuard<'a, T>,
        deadline: Option<Instant>,
        reason: ParkReason,
    ) -> (MutexGuard<'a, T>, WaitTimeoutResult) {
        let node = Arc::new(Node {
            notified: AtomicBool::new(false),
            waiter: Waiter::current(),
        });
        // Invariant 1: queued before the mutex is unlocked.
        let ticket = self.queue().push_back(node.clone());
        // Invariant 3: until this wait returns, unwinding out of it undoes it.
        let mut leaving = Leave {
            condvar: self,
            ticket,
            pass_on: true,
        };
        let mutex = guard.mutex;
        drop(guard);
        let mut timed_out = false;
        // Acquire: pairs with the Release store in `notify` (invariant 2).
        while !node.notified.load(Ordering::Acquire) {
            match deadline {
                Some(deadline) if Instant::now() >= deadline => {
                    // Else a notifier popped it: it counts as notified (invariant 2).
                    timed_out = self.unqueue(ticket);
                    // Not notified: nothing to pass on if the relock below unwinds.
                    leaving.pass_on = !timed_out;
                    break;
                }
                Some(deadline) => crate::sched::park_current_until(deadline, reason),
                None => crate::sched::park_current(reason),
            }
        }
        let guard = mutex.lock();
        std::mem::forget(leaving);
        (guard, WaitTimeoutResult(timed_out))
    }

    /// Takes the node queued with `ticket` out of the queue; true if it was still there (no
    /// notifier popped it).
    fn unqueue(&self, ticket: Ticket) -> bool {
        self.queue().remove(ticket).is_some()
    }

    /// Wakes one waiter, if any.
    pub fn notify_one(&self) {
        let node = self.queue().pop_front();
        if let Some(node) = node {
            Self::notify(node);
        }
    }

    /// Wakes every waiter.
    pub fn notify_all(&self) {
        // Taken under the lock, notified after it.
        let nodes = self.queue().take_all();
        nodes.for_each(Self::notify);
    }

    fn notify(node: Arc<Node>) {
        // Release: pairs with the Acquire load in `wait_until`.
        node.notified.store(true, Ordering::Release);
        node.waiter.wake_by_ref();
    }
}

impl fmt::Debug for Condvar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Condvar").finish_non_exhaustive()
    }
}

/// Undoes a wait that unwinds (a task cancelled at shutdown, in its park or in the relock):
/// a node still queued leaves the queue, and a node a notifier popped passes its notification
/// on to the next waiter (invariant 3). Forgotten when the wait returns.
struct Leave<'a> {
    condvar: &'a Condvar,
    ticket: Ticket,
    /// False once the wait timed out and took its own node out: it holds no notification.
    pass_on: bool,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        if !self.condvar.unqueue(self.ticket) && self.pass_on {
            self.condvar.notify_one();
        }
    }
}
