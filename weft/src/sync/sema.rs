//! The semaphore core every weft lock is built on: a permit count with a fast path, and a FIFO
//! queue of parked waiters that releases hand permits to directly.
//!
//! Owns: [`RawSemaphore`] — `state` (permits and the WAITERS bit; any thread, atomically) and
//! `queue` (the waiters, behind a short std lock that is never held across a park).
//!
//! ```text
//!   state = permits << 1 | WAITERS
//!   acquire: WAITERS clear and enough permits ──CAS──► taken (no lock, no syscall)
//!            else, under the queue lock: set WAITERS, queue a node, park until granted
//!   release: WAITERS clear ──CAS──► permits added
//!            else, under the queue lock: serve queued nodes in order, store what is left
//! ```
//!
//! Invariants:
//! 1. The WAITERS bit is set and cleared only under the queue lock, and is set exactly while
//!    the queue is non-empty (set before the first node is queued, cleared when the last one
//!    is served).
//! 2. While WAITERS is set no fast path succeeds, so `state` changes only under the queue lock:
//!    permits are handed to the queue head in FIFO order, and a writer waiting for every
//!    permit of an `RwLock` is not starved by readers arriving after it.
//! 3. A node is granted once, by the releaser that popped it, after the permits it needs were
//!    taken for it; its owner parks in a loop until it sees `granted` (Acquire).
//! 4. A waiter that leaves without seeing its grant — its park unwound (a task cancelled at
//!    shutdown) or gave up — undoes its wait under the queue lock (`Leave`): a node still
//!    queued is removed, and the nodes behind it that the permits now cover are served; a node
//!    already popped had its permits taken for it, so they are released on. No releaser hands
//!    permits to a waiter that is gone, and no permit is lost.
//! 5. The permits available never exceed [`MAX_PERMITS`]: `acquire` of more panics before
//!    queueing (it could never be granted, and FIFO it would block everyone behind it), and a
//!    release that would pass the limit panics before changing `state`.
//!
//! May call: `park`, `sync::wait_queue`. Called by: `sync` (Mutex, RwLock, Semaphore). Checked by
//! `src/tests/loom_sync.rs`.
//!
//! Why handoff instead of Go's barging mutex with a starvation mode: handoff is fair by
//! construction and needs no timer; the price is a lock convoy under heavy contention, where
//! each unlock waits for the next owner to be scheduled. Uncontended, both are one CAS.

use super::wait_queue::{Ticket, WaitQueue};
use crate::loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use crate::loom::sync::{Arc, Mutex};
use crate::sched::Waiter;

/// Some waiter is queued: fast paths are closed (invariant 1).
const WAITERS: usize = 1;
/// The largest permit count: `state` keeps one bit for WAITERS.
pub(crate) const MAX_PERMITS: usize = usize::MAX >> 3;

struct Node {
    needed: usize,
    granted: AtomicBool,
    waiter: Waiter,
}

/// A counting semaphore that parks tasks (or blocks threads).
pub(crate) struct RawSemaphore {
    state: AtomicUsize,
    queue: Mutex<WaitQueue<Arc<Node>>>,
}

impl RawSemaphore {
    pub(crate) fn new(permits: usize) -> Self {
        assert!(
            permits <= MAX_PERMITS,
            "semaphore: {permits} permits exceed MAX_PERMITS ({MAX_PERMITS})"
        );
        RawSemaphore {
            state: AtomicUsize::new(permits << 1),
            queue: Mutex::new(WaitQueue::new()),
        }
    }

    /// Takes `n` permits if available now and no one is queued.
    pub(crate) fn try_acquire(&self, n: usize) -> bool {
        let mut state = self.state.load(Ordering::Relaxed);
        loop {
            if state & WAITERS != 0 || state >> 1 < n {
                return false;
            }
            // Acquire: pairs with the Release of the `release` that gave the permits back, so
            // the protected data written before it is visible.
            match self.state.compare_exchange_weak(
                state,
                state - (n << 1),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(actual) => state = actual,
            }
        }
    }

    /// Takes `n` permits, parking with `park` until they are granted.
    ///
    /// # Panics
    /// If `n` exceeds [`MAX_PERMITS`]: no release could ever grant it, and, FIFO, it would
    /// block every later acquirer.
    pub(crate) fn acquire(&self, n: usize, park: impl Fn()) {
        let granted = self.acquire_or_give_up(n, || {
            park();
            true
        });
        debug_assert!(granted, "a wait that never gives up was given up");
    }

    /// Takes `n` permits, parking with `park` until they are granted or `park` returns false;
    /// true if they were taken. A wait that ends without them — `park` gave up, or unwound (a
    /// task cancelled at shutdown) — leaves as if it had never queued (invariant 4).
    ///
    /// # Panics
    /// As [`acquire`](Self::acquire).
    pub(crate) fn acquire_or_give_up(&self, n: usize, mut park: impl FnMut() -> bool) -> bool {
        assert!(
            n <= MAX_PERMITS,
            "semaphore: acquire of {n} permits, more than MAX_PERMITS ({MAX_PERMITS})"
        );
        if self.try_acquire(n) {
            return true;
        }
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let mut state = self.state.load(Ordering::Relaxed);
        let (node, ticket) = loop {
            if state & WAITERS == 0 && state >> 1 >= n {
                // Acquire: as in `try_acquire`.
                match self.state.compare_exchange_weak(
                    state,
                    state - (n << 1),
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return true,
                    Err(actual) => state = actual,
                }
                continue;
            }
            // Invariant 1: set under the lock, before queueing. Relaxed: the queue lock orders
            // this with the releaser that will read it under the same lock; a fast-path
            // releaser that races us makes this CAS fail and we look again.
            match self.state.compare_exchange_weak(
                state,
                state | WAITERS,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    let node = Arc::new(Node {
                        needed: n,
                        granted: AtomicBool::new(false),
                        waiter: Waiter::current(),
                    });
                    let ticket = queue.push_back(node.clone());
                    break (node, ticket);
                }
                Err(actual) => state = actual,
            }
        };
        drop(queue);
        // Invariant 4: from here until the grant is seen, leaving undoes the wait.
        let leaving = Leave {
            sema: self,
            node: &node,
            ticket,
        };
        loop {
            // Acquire: pairs with the Release store of `granted` in `wake` (invariant 3).
            if node.granted.load(Ordering::Acquire) {
                std::mem::forget(leaving);
                return true;
            }
            if !park() {
                drop(leaving);
                return false;
            }
        }
    }

    /// Undoes the wait of `node`, queued with `ticket`, whose owner leaves without seeing its
    /// grant (invariant 4).
    fn leave(&self, node: &Arc<Node>, ticket: Ticket) {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if queue.remove(ticket).is_some() {
            // The node may have been the head that the permits could not satisfy, holding up
            // smaller requests behind it (invariant 2): serve them now. WAITERS is set (our
            // node was queued, invariant 1), so `state` is ours under the lock.
            let granted = self.serve_locked(&mut queue, 0);
            drop(queue);
            wake(granted);
        } else {
            drop(queue);
            // A releaser popped it under the lock, taking its permits for it (invariant 3):
            // they are ours, and go to whoever is next.
            self.release(node.needed);
        }
    }

    /// Adds `n` permits with a CAS unless WAITERS is set; true if it did.
    ///
    /// # Panics
    /// If the permits would exceed [`MAX_PERMITS`] (invariant 5).
    fn add_if_no_waiters(&self, n: usize) -> bool {
        let mut state = self.state.load(Ordering::Relaxed);
        while state & WAITERS == 0 {
            check_add(state >> 1, n);
            // Release: publishes the protected data to the next acquirer (pairs with the
            // Acquire CAS in `try_acquire`).
            match self.state.compare_exchange_weak(
                state,
                state + (n << 1),
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(actual) => state = actual,
            }
        }
        false
    }

    /// Gives `n` permits back, handing them to queued waiters first.
    ///
    /// # Panics
    /// If the permits available would exceed [`MAX_PERMITS`]; nothing changes then
    /// (invariant 5).
    pub(crate) fn release(&self, n: usize) {
        if self.add_if_no_waiters(n) {
            return;
        }
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        // Another releaser may have served the last waiter and cleared WAITERS before we got
        // the lock; then fast paths run again and `state` is not ours to overwrite.
        if self.add_if_no_waiters(n) {
            return;
        }
        // Invariant 5, before `state` changes. A panic here poisons the queue lock, which every
        // lock site takes as it is: nothing under it was changed.
        check_add(self.state.load(Ordering::Relaxed) >> 1, n);
        let granted = self.serve_locked(&mut queue, n);
        drop(queue);
        wake(granted);
    }

    /// Under the queue lock with WAITERS set (invariant 2: only lock holders change `state`):
    /// adds `n` to the permits, pops the nodes at the front that they now cover, and stores
    /// what is left; returns the popped nodes, to be woken once the lock is dropped. The
    /// caller checked that the sum stays within [`MAX_PERMITS`].
    fn serve_locked(&self, queue: &mut WaitQueue<Arc<Node>>, n: usize) -> Vec<Arc<Node>> {
        let mut permits = (self.state.load(Ordering::Relaxed) >> 1) + n;
        let mut granted = Vec::new();
        while let Some(front) = queue.front() {
            if front.needed > permits {
                break;
            }
            permits -= front.needed;
            granted.extend(queue.pop_front());
        }
        let waiters = if queue.is_empty() { 0 } else { WAITERS };
        // Release: pairs with the Acquire of a later fast-path acquirer.
        self.state.store(permits << 1 | waiters, Ordering::Release);
        granted
    }

    /// The permits available now (a snapshot).
    pub(crate) fn available(&self) -> usize {
        self.state.load(Ordering::Relaxed) >> 1
    }
}

/// Panics unless `available + n` permits fit in [`MAX_PERMITS`] (invariant 5).
#[inline]
fn check_add(available: usize, n: usize) {
    if n > MAX_PERMITS - available {
        panic!(
            "semaphore: adding {n} permits to {available} would exceed MAX_PERMITS \
             ({MAX_PERMITS})"
        );
    }
}

/// Tells the nodes `serve_locked` popped that they hold their permits (invariant 3).
fn wake(granted: Vec<Arc<Node>>) {
    for node in granted {
        // Release: pairs with the Acquire load in `acquire_or_give_up` (invariant 3).
        node.granted.store(true, Ordering::Release);
        node.waiter.clone().wake();
    }
}

/// Undoes a queued wait whose owner leaves without its grant: by unwinding out of `park` (a
/// task cancelled at shutdown) or by giving up (invariant 4). Forgotten once the grant is seen.
struct Leave<'a> {
    sema: &'a RawSemaphore,
    node: &'a Arc<Node>,
    ticket: Ticket,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.sema.leave(self.node, self.ticket);
    }
}
