//! Go's `sync.WaitGroup`: wait for a counter of outstanding jobs to reach zero.
//!
//! Owns: [`WaitGroup`] — `count` (any thread, atomically) and `waiters` (behind a short std
//! lock, never held across a park).
//!
//! Invariants:
//! 1. A waiter re-checks `count` under the `waiters` lock before queueing, and whoever brings
//!    `count` to zero takes the same lock after doing so: either the waiter sees zero or the
//!    one that reached zero sees the waiter (no lost wakeup).
//! 2. Each queued node is released once, by the one that drained it.
//! 3. `count` never goes below zero (a misuse that panics, as in Go) nor past `isize::MAX`
//!    (panics too): `add` checks before it changes the count.
//! 4. A waiter that unwinds out of its park (a task cancelled at shutdown) takes its node out
//!    of `waiters` if no `add` drained it yet, so the list holds no waiter that is gone.
//!
//! May call: `park`, `sync::wait_queue`. Called by: users. Checked by `src/tests/loom_sync.rs`.
//!
//! Why Go's `add`/`done` API rather than crossbeam's clone-per-job handle: ported Go code
//! reads the same, and a `WaitGroup` in an `Arc` (or a `static`) is shared like Go's.

use super::wait_queue::{Ticket, WaitQueue};
use crate::loom::sync::atomic::{AtomicBool, AtomicIsize, Ordering};
use crate::loom::sync::{Arc, Mutex, MutexGuard};
use crate::sched::Waiter;

struct Node {
    released: AtomicBool,
    waiter: Waiter,
}

/// Waits for a collection of tasks to finish, like Go's `sync.WaitGroup`.
///
/// ```
/// use std::sync::Arc;
/// weft::run(|| {
///     let wg = Arc::new(weft::sync::WaitGroup::new());
///     for _ in 0..10 {
///         wg.add(1);
///         let wg = wg.clone();
///         weft::spawn(move || wg.done());
///     }
///     wg.wait();
/// });
/// ```
pub struct WaitGroup {
    count: AtomicIsize,
    waiters: Mutex<WaitQueue<Arc<Node>>>,
}

impl Default for WaitGroup {
    fn default() -> Self {
        Self::new()
    }
}

impl WaitGroup {
    /// A wait group with a count of zero.
    pub fn new() -> Self {
        WaitGroup {
            count: AtomicIsize::new(0),
            waiters: Mutex::new(WaitQueue::new()),
        }
    }

    /// Adds `delta` (which may be negative) to the count; at zero, releases every waiter.
    ///
    /// # Panics
    /// If the count would go negative ("sync: negative WaitGroup counter", as in Go) or past
    /// `isize::MAX`; the count is left as it was.
    pub fn add(&self, delta: isize) {
        let mut count = self.count.load(Ordering::Relaxed);
        let count = loop {
            // Invariant 3: checked before the count changes.
            let Some(new) = count.checked_add(delta) else {
                panic!("sync: WaitGroup counter overflow");
            };
            assert!(new >= 0, "sync: negative WaitGroup counter");
            // AcqRel: Release publishes the job's work to the waiter (pairs with the Acquire
            // loads in `wait`); Acquire makes the zeroing `add` see every earlier job's work
            // too.
            match self
                .count
                .compare_exchange_weak(count, new, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => break new,
                Err(actual) => count = actual,
            }
        };
        if count == 0 && delta != 0 {
            // Invariant 1: the lock after the decrement.
            let released = self.waiters().take_all();
            for node in released {
                // Release: pairs with the Acquire load in `wait` (invariant 2).
                node.released.store(true, Ordering::Release);
                node.waiter.clone().wake();
            }
        }
    }

    /// Decrements the count by one.
    pub fn done(&self) {
        self.add(-1);
    }

    /// Parks until the count is zero.
    pub fn wait(&self) {
        self.wait_with(|| crate::sched::park_current(crate::park::ParkReason::WaitGroup));
    }

    pub(crate) fn wait_with(&self, park: impl Fn()) {
        // Acquire: pairs with the AcqRel of the `add` that reached zero.
        if self.count.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut waiters = self.waiters();
        // Invariant 1: re-checked under the lock.
        if self.count.load(Ordering::Acquire) == 0 {
            return;
        }
        let node = Arc::new(Node {
            released: AtomicBool::new(false),
            waiter: Waiter::current(),
        });
        let ticket = waiters.push_back(node.clone());
        drop(waiters);
        // Invariant 4: until the release is seen, unwinding takes the node out again.
        let leaving = Leave {
            wait_group: self,
            ticket,
        };
        // Acquire: pairs with the Release store in `add`.
        while !node.released.load(Ordering::Acquire) {
            park();
        }
        std::mem::forget(leaving);
    }

    fn waiters(&self) -> MutexGuard<'_, WaitQueue<Arc<Node>>> {
        self.waiters.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The current count (a snapshot).
    pub fn count(&self) -> isize {
        self.count.load(Ordering::Relaxed)
    }
}

impl std::fmt::Debug for WaitGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitGroup")
            .field("count", &self.count())
            .finish_non_exhaustive()
    }
}

/// Takes the node of a wait that unwinds out of `waiters` (invariant 4); forgotten when the
/// wait ends normally.
struct Leave<'a> {
    wait_group: &'a WaitGroup,
    ticket: Ticket,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        // Released meanwhile (drained by an `add`): nothing to take out.
        let node = self.wait_group.waiters().remove(self.ticket);
        drop(node);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::WaitGroup;

    #[test]
    fn waitgroup_waiter_cancelled_at_shutdown_leaves_no_node() {
        let wg = Arc::new(WaitGroup::new());
        wg.add(1);
        let runtime = crate::Runtime::builder().workers(1).build().unwrap();
        let started = Arc::new(AtomicBool::new(false));
        let (wg2, flag) = (wg.clone(), started.clone());
        let task = runtime.spawn(move || {
            flag.store(true, Ordering::SeqCst);
            wg2.wait();
        });
        let start = Instant::now();
        while !started.load(Ordering::SeqCst) {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the task never started"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(50)); // to its park
        drop(runtime);
        assert!(task.join().is_err(), "the waiting task was cancelled");
        assert!(
            wg.waiters().is_empty(),
            "the cancelled waiter's node was left queued"
        );
        wg.done();
    }
}
