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
//! 3. `count` never goes below zero: that is a misuse and panics, as in Go.
//!
//! May call: `park`. Called by: users. Checked by `src/tests/loom_sync.rs`.
//!
//! Why Go's `add`/`done` API rather than crossbeam's clone-per-job handle: ported Go code
//! reads the same, and a `WaitGroup` in an `Arc` (or a `static`) is shared like Go's.

use crate::loom::sync::atomic::{AtomicBool, AtomicIsize, Ordering};
use crate::loom::sync::{Arc, Mutex};
use crate::park::Waiter;

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
    waiters: Mutex<Vec<Arc<Node>>>,
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
            waiters: Mutex::new(Vec::new()),
        }
    }

    /// Adds `delta` (which may be negative) to the count; at zero, releases every waiter.
    ///
    /// # Panics
    /// If the count goes negative ("sync: negative WaitGroup counter", as in Go).
    pub fn add(&self, delta: isize) {
        // AcqRel: Release publishes the job's work to the waiter (pairs with the Acquire loads
        // in `wait`); Acquire makes the zeroing `add` see every earlier job's work too.
        let count = self.count.fetch_add(delta, Ordering::AcqRel) + delta;
        assert!(count >= 0, "sync: negative WaitGroup counter");
        if count == 0 && delta != 0 {
            // Invariant 1: the lock after the decrement.
            let released =
                std::mem::take(&mut *self.waiters.lock().unwrap_or_else(|e| e.into_inner()));
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
        self.wait_with(crate::park::park_current);
    }

    pub(crate) fn wait_with(&self, park: impl Fn()) {
        // Acquire: pairs with the AcqRel of the `add` that reached zero.
        if self.count.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut waiters = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
        // Invariant 1: re-checked under the lock.
        if self.count.load(Ordering::Acquire) == 0 {
            return;
        }
        let node = Arc::new(Node {
            released: AtomicBool::new(false),
            waiter: Waiter::current(),
        });
        waiters.push(node.clone());
        drop(waiters);
        // Acquire: pairs with the Release store in `add`.
        while !node.released.load(Ordering::Acquire) {
            park();
        }
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
