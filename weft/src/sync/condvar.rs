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
//!
//! May call: `sync::mutex`, `park`. Called by: users, `sync::barrier`.

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use super::mutex::MutexGuard;
use crate::park::Waiter;

struct Node {
    notified: AtomicBool,
    waiter: Waiter,
}

/// A condition variable for tasks, like Go's `sync.Cond` and std's `Condvar`. Spurious
/// wakeups are possible: wait in a loop on your condition, or use [`wait_while`](Self::wait_while).
#[derive(Default)]
pub struct Condvar {
    queue: StdMutex<VecDeque<Arc<Node>>>,
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

    fn queue(&self) -> std::sync::MutexGuard<'_, VecDeque<Arc<Node>>> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Unlocks the guard's mutex, parks until notified, and locks it again.
    pub fn wait<'a, T: ?Sized>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.wait_until(guard, None).0
    }

    /// Waits until `condition` is false, re-checking after every wakeup.
    pub fn wait_while<'a, T: ?Sized>(
        &self,
        mut guard: MutexGuard<'a, T>,
        mut condition: impl FnMut(&mut T) -> bool,
    ) -> MutexGuard<'a, T> {
        while condition(&mut *guard) {
            guard = self.wait(guard);
        }
        guard
    }

    /// Like [`wait`](Self::wait), for at most `timeout`.
    pub fn wait_timeout<'a, T: ?Sized>(
        &self,
        guard: MutexGuard<'a, T>,
        timeout: Duration,
    ) -> (MutexGuard<'a, T>, WaitTimeoutResult) {
        self.wait_until(guard, Instant::now().checked_add(timeout))
    }

    fn wait_until<'a, T: ?Sized>(
        &self,
        guard: MutexGuard<'a, T>,
        deadline: Option<Instant>,
    ) -> (MutexGuard<'a, T>, WaitTimeoutResult) {
        let node = Arc::new(Node {
            notified: AtomicBool::new(false),
            waiter: Waiter::current(),
        });
        // Invariant 1: queued before the mutex is unlocked.
        self.queue().push_back(node.clone());
        let mutex = guard.mutex;
        drop(guard);
        let mut timed_out = false;
        // Acquire: pairs with the Release store in `notify_*` (invariant 2).
        while !node.notified.load(Ordering::Acquire) {
            match deadline {
                Some(deadline) if Instant::now() >= deadline => {
                    let mut queue = self.queue();
                    if let Some(i) = queue.iter().position(|n| Arc::ptr_eq(n, &node)) {
                        queue.remove(i);
                        timed_out = true;
                    }
                    // Else a notifier popped it: it counts as notified (invariant 2).
                    break;
                }
                Some(deadline) => crate::park::park_current_until(deadline),
                None => crate::park::park_current(),
            }
        }
        (mutex.lock(), WaitTimeoutResult(timed_out))
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
        let nodes = std::mem::take(&mut *self.queue());
        nodes.into_iter().for_each(Self::notify);
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
