//! A counting semaphore that parks tasks: at most N holders at once.
//!
//! Owns: [`Semaphore`] — a [`RawSemaphore`](super::sema::RawSemaphore).
//!
//! Invariants:
//! 1. A [`SemaphorePermit`] returns its permits when dropped, unless forgotten with
//!    [`SemaphorePermit::forget`].
//! 2. Waiters are served in FIFO order (sema.rs invariant 2): a large request is not starved.
//! 3. The permits available never exceed [`Semaphore::MAX_PERMITS`] (sema.rs invariant 5):
//!    asking for more panics rather than waiting forever, adding past it panics.
//!
//! May call: `sync::sema`, `park`. Called by: users.

use std::fmt;

use super::sema::{RawSemaphore, MAX_PERMITS};

/// A counting semaphore for tasks (Go: `golang.org/x/sync/semaphore.Weighted`).
///
/// ```
/// use std::sync::Arc;
/// weft::run(|| {
///     let sem = Arc::new(weft::sync::Semaphore::new(2));
///     let permit = sem.acquire();
///     assert_eq!(sem.available_permits(), 1);
///     drop(permit);
///     assert_eq!(sem.available_permits(), 2);
/// });
/// ```
pub struct Semaphore {
    raw: RawSemaphore,
}

/// Permits held from a [`Semaphore`]; returned when dropped.
#[must_use = "if unused the permits are released at once"]
pub struct SemaphorePermit<'a> {
    sem: &'a Semaphore,
    permits: usize,
}

impl Semaphore {
    /// The largest number of permits a semaphore can hold.
    pub const MAX_PERMITS: usize = MAX_PERMITS;

    /// A semaphore with `permits` permits.
    ///
    /// # Panics
    /// If `permits` exceeds [`Semaphore::MAX_PERMITS`].
    pub fn new(permits: usize) -> Self {
        Semaphore {
            raw: RawSemaphore::new(permits),
        }
    }

    /// Takes one permit, parking until one is available.
    ///
    /// If the waiting task is cancelled (its runtime shuts down), it leaves the queue as if it
    /// had never waited, and a permit already handed to it goes on to the next waiter.
    pub fn acquire(&self) -> SemaphorePermit<'_> {
        self.acquire_many(1)
    }

    /// Takes `n` permits at once, parking until they are available. Waiters are served in
    /// order, so a large request is not starved, and requests behind it wait for it.
    ///
    /// # Panics
    /// If `n` exceeds [`Semaphore::MAX_PERMITS`]: no semaphore can hold that many, so the
    /// request could never be granted (and would hold up every later one). It panics at once,
    /// having queued nothing.
    pub fn acquire_many(&self, n: usize) -> SemaphorePermit<'_> {
        crate::sched::coop::spend(); // sched/coop.rs invariant 2
        self.raw.acquire(n, || {
            crate::sched::park_current(crate::park::ParkReason::Semaphore)
        });
        SemaphorePermit {
            sem: self,
            permits: n,
        }
    }

    /// Takes one permit if one is available now and no one waits.
    pub fn try_acquire(&self) -> Option<SemaphorePermit<'_>> {
        self.try_acquire_many(1)
    }

    /// Takes `n` permits if available now and no one waits; `None` otherwise, also for an
    /// `n` beyond [`Semaphore::MAX_PERMITS`].
    pub fn try_acquire_many(&self, n: usize) -> Option<SemaphorePermit<'_>> {
        self.raw.try_acquire(n).then(|| SemaphorePermit {
            sem: self,
            permits: n,
        })
    }

    /// Adds `n` permits (waking waiters they satisfy).
    ///
    /// # Panics
    /// If the permits available would exceed [`Semaphore::MAX_PERMITS`]; the count is left as
    /// it was. (As with tokio, permits held by [`SemaphorePermit`]s are not counted, so a
    /// permit returned on drop to a semaphore filled to the limit meanwhile panics too.)
    pub fn add_permits(&self, n: usize) {
        self.raw.release(n);
    }

    /// The number of permits available now (a snapshot).
    pub fn available_permits(&self) -> usize {
        self.raw.available()
    }
}

impl SemaphorePermit<'_> {
    /// Keeps the permits taken: they are not returned on drop.
    pub fn forget(mut self) {
        self.permits = 0;
    }

    /// How many permits this holds.
    pub fn num_permits(&self) -> usize {
        self.permits
    }
}

impl Drop for SemaphorePermit<'_> {
    fn drop(&mut self) {
        if self.permits > 0 {
            self.sem.raw.release(self.permits);
        }
    }
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("available_permits", &self.available_permits())
            .finish()
    }
}

impl fmt::Debug for SemaphorePermit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphorePermit")
            .field("permits", &self.permits)
            .finish()
    }
}
