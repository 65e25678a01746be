//! Go's `sync.WaitGroup`: wait for a counter of outstanding jobs to reach zero.
//!
//! Owns: [`WaitGroup`] — `count` (any thread, atomically) and `waiters` (behind a short std
//! lock, never held across a park): the addresses of waiting nodes, each on its waiter's own
//! stack.
//!
//! Invariants:
//! 1. A waiter re-checks `count` under the `waiters` lock before queueing, and whoever brings
//!    `count` to zero takes the same lock after doing so: either the waiter sees zero or the
//!    one that reached zero sees the waiter (no lost wakeup).
//! 2. Each queued node is released once, by the one that drained it, under the `waiters`
//!    lock; the drainer reads the node (its waiter) before it stores `released` and never
//!    after, because a waiter that sees `released` returns and its node is gone with its
//!    frame. A node is in `waiters` exactly while it is unreleased, and its `index` (kept
//!    under the lock) is its place there.
//! 3. `count` never goes below zero (a misuse that panics, as in Go) nor past `isize::MAX`
//!    (panics too): `add` checks before it changes the count.
//! 4. A waiter that unwinds out of its park (a task cancelled at shutdown) takes its node out
//!    of `waiters` if no `add` drained it yet, so the list holds no waiter that is gone: by its
//!    `index`, in O(1) (a million waiters cancelled at once do not scan the list a million
//!    times), moving the last node into its place.
//!
//! May call: `park`. Called by: users. Checked by `src/tests/loom_sync.rs`.
//!
//! Why Go's `add`/`done` API rather than crossbeam's clone-per-job handle: ported Go code
//! reads the same, and a `WaitGroup` in an `Arc` (or a `static`) is shared like Go's. Why
//! nodes on the waiters' stacks rather than one `Arc` each: a parked waiter then costs its
//! queue entry alone (8 B) instead of a 48-byte allocation besides, and its node's words are
//! slot-relative, which a compacted stack's template absorbs (stack/template.rs): 1M tasks
//! parked on a `WaitGroup` settle ≈60 B lighter. Other threads reading and writing a parked
//! task's stack is allowed by stack compaction's contract (stack/compact.rs).

use crate::loom::sync::atomic::{AtomicBool, AtomicIsize, AtomicUsize, Ordering};
use crate::loom::sync::{Mutex, MutexGuard};
use crate::sched::Waiter;

/// A waiter's entry, on its own stack for the length of its wait.
struct Node {
    released: AtomicBool,
    waiter: Waiter,
    /// Its place in `waiters` while queued; read and written under the `waiters` lock only
    /// (Relaxed: the lock orders them).
    index: AtomicUsize,
}

/// A queued node's address (invariant 2: valid while the node is in the list).
struct NodeRef(*const Node);

// SAFETY: a `NodeRef` is only dereferenced under the `waiters` lock while its node is queued
// (invariant 2), and a `Node`'s fields are all shareable (`Waiter` is `Send + Sync`).
unsafe impl Send for NodeRef {}

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
    waiters: Mutex<Vec<NodeRef>>,
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
            let mut waiters = self.waiters();
            let woken: Vec<Waiter> = waiters
                .drain(..)
                .map(|NodeRef(node)| {
                    // SAFETY: invariant 2: queued, so not released, so its waiter is still in
                    // its wait and the node on its stack. Through the pointer, no reference
                    // kept: after the store the node may be gone.
                    unsafe {
                        let waiter = (*node).waiter.clone();
                        // Release: pairs with the Acquire load in `wait` (invariant 2).
                        (*node).released.store(true, Ordering::Release);
                        waiter
                    }
                })
                .collect();
            drop(waiters);
            woken.into_iter().for_each(Waiter::wake);
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
        self.wait_or_leave(|| {
            park();
            true
        });
    }

    /// Parks with `park` until released; or, where `park` returns false, gives the wait up
    /// and returns false: its node leaves the list as an unwinding waiter's does (invariant
    /// 4; the loom model's stand-in for an unwinding park).
    pub(crate) fn wait_or_leave(&self, mut park: impl FnMut() -> bool) -> bool {
        // Acquire: pairs with the AcqRel of the `add` that reached zero.
        if self.count.load(Ordering::Acquire) == 0 {
            return true;
        }
        let mut waiters = self.waiters();
        // Invariant 1: re-checked under the lock.
        if self.count.load(Ordering::Acquire) == 0 {
            return true;
        }
        let node = Node {
            released: AtomicBool::new(false),
            waiter: Waiter::current(),
            index: AtomicUsize::new(waiters.len()),
        };
        // The node stays where it is until the wait returns or unwinds: `leaving` borrows it.
        waiters.push(NodeRef(&node));
        drop(waiters);
        // Invariant 4: until the release is seen, unwinding takes the node out again.
        let leaving = Leave {
            wait_group: self,
            node: &node,
        };
        // Acquire: pairs with the Release store in `add`.
        while !node.released.load(Ordering::Acquire) {
            if !park() {
                drop(leaving);
                return false;
            }
        }
        std::mem::forget(leaving);
        true
    }

    fn waiters(&self) -> MutexGuard<'_, Vec<NodeRef>> {
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
    node: &'a Node,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        let mut waiters = self.wait_group.waiters();
        // Invariant 2: `released` is stored under this lock, so unreleased here means queued,
        // at `index`. Relaxed: the lock orders it.
        if !self.node.released.load(Ordering::Relaxed) {
            let i = self.node.index.load(Ordering::Relaxed);
            debug_assert!(std::ptr::eq(waiters[i].0, self.node));
            waiters.swap_remove(i);
            if let Some(moved) = waiters.get(i) {
                // SAFETY: invariant 2: queued, so its node is alive; we hold the lock.
                unsafe { &*moved.0 }.index.store(i, Ordering::Relaxed);
            }
        }
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

    /// Waiters cancelled out of the middle of the list (each moves the last node into its
    /// place, invariant 4): the rest are all released, the cancelled ones unwind.
    #[test]
    fn waitgroup_waiters_cancelled_in_any_order_leave_the_rest_released() {
        let runtime = crate::Runtime::builder().workers(2).build().unwrap();
        let wg = Arc::new(WaitGroup::new());
        wg.add(1);
        let handles: Vec<_> = (0..300)
            .map(|_| {
                let wg = wg.clone();
                runtime.spawn(move || wg.wait())
            })
            .collect();
        let start = Instant::now();
        while wg.waiters().len() < handles.len() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "never all queued"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        for (i, handle) in handles.iter().enumerate() {
            if i % 3 != 1 {
                handle.cancel();
            }
        }
        while wg.waiters().len() > 100 {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "cancelled nodes stayed"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        wg.done();
        for (i, handle) in handles.into_iter().enumerate() {
            assert_eq!(handle.join().is_ok(), i % 3 == 1, "waiter {i}");
        }
        assert!(wg.waiters().is_empty());
    }
}
