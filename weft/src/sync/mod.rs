//! Task-parking locks and barriers: Go's `sync` package.
//!
//! Every type here parks the calling *task* while it waits (its worker runs other tasks), or
//! blocks the calling OS thread outside a task, and every guard may be held across a park —
//! unlike a `std::sync::Mutex` held across a park, which would block a worker thread.
//!
//! Owns: nothing shared beyond its types: [`Mutex`], [`RwLock`] and [`Semaphore`] are built on
//! one semaphore core (`sema.rs`: a one-CAS fast path, then a FIFO queue with direct permit
//! handoff); [`Condvar`] queues waiters itself; [`WaitGroup`] counts with one atomic;
//! [`Barrier`] and [`Once`] are built from [`Mutex`] and [`Condvar`].
//!
//! Invariants: each file states its own; the shared rules are:
//! 1. sched/park.rs invariant 2 — every wait parks in a loop on its own "granted/notified/
//!    released" flag, set with Release by the one party that dequeued it (so spurious wakeups
//!    are harmless and wakeups are never lost).
//! 2. A waiter that leaves its wait other than through its flag — its park unwinds (a task
//!    cancelled at shutdown unwinds at its park) or it gives up — undoes the wait under the
//!    queue's lock, through a drop guard armed right after queueing and forgotten on the
//!    normal exit: a node still queued is removed (and whatever it held up is served); what a
//!    dequeuer already handed it is passed on — permits are released to the next waiter
//!    (sema.rs invariant 4), a notification goes to the next condvar waiter (condvar.rs
//!    invariant 3). So no queue ever holds a waiter that is gone, and no permit or
//!    `notify_one` is lost to one. [`Barrier`] and [`Once`] inherit the rule from the mutex
//!    and condvar they are built on (barrier.rs invariants 2–3: a cancelled barrier waiter
//!    stays counted as arrived; a `Once` whose initialiser unwinds stays incomplete and the
//!    next caller runs it). Channels follow the same rule (chan/core.rs invariant 3).
//! 3. Counts are checked before they change: a semaphore never holds more than
//!    `Semaphore::MAX_PERMITS` permits and refuses a request for more (a panic, never a hang);
//!    a `WaitGroup` count stays within `0..=isize::MAX`.
//!
//! May call: `park`. Called by: users.
//!
//! Why a waiter's node is an `Arc` on the heap rather than a node on the waiter's own stack
//! (as the channels' are): a waiter parked past the compaction age has its stack compacted,
//! and whoever wakes it would read and write a node there from another thread, each such
//! touch a fault served by the fault thread (stack/compact.rs), one trip per waiter. Tried
//! for `WaitGroup` on 2026-12-06: a million compacted waiters took ≈45 s to release instead of
//! ≈1 s, for 61 B a waiter saved. The node's 48 bytes are the price of a release that touches
//! no parked stack.
//!
//! Why not reuse `std::sync` types: they block the OS thread, which would stop every task of
//! that worker. Why no poisoning: Go has none, and a panicking holder releases its lock while
//! unwinding.

mod barrier;
mod condvar;
mod mutex;
mod rwlock;
pub(crate) mod sema;
mod semaphore;
mod wait_queue;
mod waitgroup;

pub use barrier::{Barrier, BarrierWaitResult, Once};
pub use condvar::{Condvar, WaitTimeoutResult};
pub use mutex::{Mutex, MutexGuard};
pub use rwlock::{RwLock, RwLockReadGuard, RwLockWriteGuard};
pub use semaphore::{Semaphore, SemaphorePermit};
pub use waitgroup::WaitGroup;
