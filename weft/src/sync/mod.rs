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
//! Invariants: each file states its own; the shared rule is park/mod.rs invariant 2 — every
//! wait parks in a loop on its own "granted/notified/released" flag, set with Release by the
//! one party that dequeued it (so spurious wakeups are harmless and wakeups are never lost).
//!
//! May call: `park`. Called by: users.
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
mod waitgroup;

pub use barrier::{Barrier, BarrierWaitResult, Once};
pub use condvar::{Condvar, WaitTimeoutResult};
pub use mutex::{Mutex, MutexGuard};
pub use rwlock::{RwLock, RwLockReadGuard, RwLockWriteGuard};
pub use semaphore::{Semaphore, SemaphorePermit};
pub use waitgroup::WaitGroup;
