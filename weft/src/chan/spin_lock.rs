//! The channel lock: a test-and-test-and-set spin lock.
//!
//! Owns: one flag and the channel state it guards.
//!
//! Invariants:
//! 1. Held only for a few hundred instructions: no user code, no allocation in the common
//!    case, never across a park (chan/core.rs invariant 4 queues entries, then unlocks, then
//!    parks).
//!
//! Why not `std::sync::Mutex`: its unlock is a locked `swap` (it must learn whether to wake a
//! sleeper), this one's is a plain Release store; at two lock sections per channel operation
//! that is a measurable share of a ping-pong round trip. A holder preempted by the OS costs
//! spinners a `yield_now` each, which the short critical section makes rare. Under loom the
//! flag is a loom atomic and a spinner yields to the model, so the models check this lock
//! too.
//!
//! Besides the guard, the lock can be held without one (`lock_raw`, `unlock_raw`,
//! `get_held`): a `select!` that concludes "nothing is ready" holds the locks of all its
//! channels at once (chan/arms.rs), and their states have different types.
//!
//! May call: nothing. Called by: `chan::core`.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};

use crate::loom::sync::atomic::{AtomicBool, Ordering};

pub(crate) struct Mutex<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the flag gives one guard at a time access to the value (invariant 1), so sharing
// the lock only moves `T` between threads.
unsafe impl<T: Send> Sync for Mutex<T> {}
// SAFETY: the lock owns its value.
unsafe impl<T: Send> Send for Mutex<T> {}

pub(crate) struct MutexGuard<'a, T> {
    lock: &'a Mutex<T>,
}

impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        Mutex {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        let mut spins = 0u32;
        loop {
            // Acquire: pairs with the Release store in `MutexGuard::drop`, so the previous
            // holder's writes are visible.
            if self
                .locked
                .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return MutexGuard { lock: self };
            }
            while self.locked.load(Ordering::Relaxed) {
                spins += 1;
                if cfg!(loom) {
                    // The model must run the holder: a spinner yields to it at once.
                    crate::loom::thread::yield_now();
                } else if spins < 64 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }
}

impl<T> Mutex<T> {
    /// Takes the lock with no guard: the caller releases it with [`unlock_raw`](Self::unlock_raw).
    pub(crate) fn lock_raw(&self) {
        std::mem::forget(self.lock());
    }

    /// Releases a lock taken with [`lock_raw`](Self::lock_raw).
    ///
    /// # Safety
    /// The caller holds the lock through `lock_raw`, and no `get_held` borrow outlives this.
    pub(crate) unsafe fn unlock_raw(&self) {
        // Release: as in `MutexGuard::drop`.
        self.locked.store(false, Ordering::Release);
    }

    /// The value, while the caller holds the lock through `lock_raw`.
    ///
    /// # Safety
    /// The caller holds the lock through `lock_raw`, and no other borrow of the value is live
    /// (invariant 1).
    #[allow(clippy::mut_from_ref)] // the lock is the exclusivity, as in `MutexGuard`
    pub(crate) unsafe fn get_held(&self) -> &mut T {
        // SAFETY: the caller's contract.
        unsafe { &mut *self.value.get() }
    }
}

impl<T> Drop for MutexGuard<'_, T> {
    fn drop(&mut self) {
        // Release: pairs with the Acquire CAS in `lock`.
        self.lock.locked.store(false, Ordering::Release);
    }
}

impl<T> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard holds the flag: no other access exists (invariant 1).
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard holds the flag, and `&mut self` is unique.
        unsafe { &mut *self.lock.value.get() }
    }
}
