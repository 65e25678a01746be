//! A reader-writer lock that parks tasks: many readers or one writer.
//!
//! Owns: [`RwLock`] — a [`RawSemaphore`](super::sema::RawSemaphore) of `MAX_PERMITS` permits
//! and the data. A reader holds one permit, a writer all of them (tokio's design).
//!
//! Invariants:
//! 1. A read guard holds one permit, a write guard every permit; so a writer excludes
//!    everyone and readers exclude only writers.
//! 2. Waiters are served in FIFO order (sema.rs invariant 2): a queued writer is not starved by
//!    readers arriving after it, and readers queued behind it wait for it.
//!
//! May call: `sync::sema`, `park`. Called by: users.

use std::cell::UnsafeCell;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

use super::sema::{RawSemaphore, MAX_PERMITS};

/// A reader-writer lock for tasks, like Go's `sync.RWMutex` holding its data like std's.
pub struct RwLock<T: ?Sized> {
    sema: RawSemaphore,
    data: UnsafeCell<T>,
}

// SAFETY: invariant 1: readers share `&T` (so `T: Sync`), a writer gets `&mut T` from any
// thread (so `T: Send`).
unsafe impl<T: ?Sized + Send + Sync> Sync for RwLock<T> {}
// SAFETY: the lock owns its `T`.
unsafe impl<T: ?Sized + Send> Send for RwLock<T> {}

/// Shared access to an [`RwLock`]'s data.
#[must_use = "if unused the RwLock will immediately unlock"]
pub struct RwLockReadGuard<'a, T: ?Sized> {
    lock: &'a RwLock<T>,
    _not_send: PhantomData<*const ()>,
}

/// Exclusive access to an [`RwLock`]'s data.
#[must_use = "if unused the RwLock will immediately unlock"]
pub struct RwLockWriteGuard<'a, T: ?Sized> {
    lock: &'a RwLock<T>,
    _not_send: PhantomData<*const ()>,
}

// SAFETY: a shared guard gives only `&T`.
unsafe impl<T: ?Sized + Sync> Sync for RwLockReadGuard<'_, T> {}
// SAFETY: a shared guard gives only `&T`.
unsafe impl<T: ?Sized + Sync> Sync for RwLockWriteGuard<'_, T> {}

impl<T> RwLock<T> {
    /// A new unlocked lock holding `value`.
    pub fn new(value: T) -> Self {
        RwLock {
            sema: RawSemaphore::new(MAX_PERMITS),
            data: UnsafeCell::new(value),
        }
    }

    /// Consumes the lock, returning its data.
    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }
}

impl<T: ?Sized> RwLock<T> {
    /// Locks for reading, parking while a writer holds or waits for the lock.
    pub fn read(&self) -> RwLockReadGuard<'_, T> {
        crate::sched::coop::spend(); // sched/coop.rs invariant 2
        self.sema.acquire(1, || {
            crate::sched::park_current(crate::park::ParkReason::RwLockRead)
        });
        RwLockReadGuard {
            lock: self,
            _not_send: PhantomData,
        }
    }

    /// Locks for writing, parking while anyone holds the lock.
    pub fn write(&self) -> RwLockWriteGuard<'_, T> {
        crate::sched::coop::spend(); // sched/coop.rs invariant 2
        self.sema.acquire(MAX_PERMITS, || {
            crate::sched::park_current(crate::park::ParkReason::RwLockWrite)
        });
        RwLockWriteGuard {
            lock: self,
            _not_send: PhantomData,
        }
    }

    /// Locks for reading if that can be done without waiting.
    pub fn try_read(&self) -> Option<RwLockReadGuard<'_, T>> {
        self.sema.try_acquire(1).then(|| RwLockReadGuard {
            lock: self,
            _not_send: PhantomData,
        })
    }

    /// Locks for writing if that can be done without waiting.
    pub fn try_write(&self) -> Option<RwLockWriteGuard<'_, T>> {
        self.sema
            .try_acquire(MAX_PERMITS)
            .then(|| RwLockWriteGuard {
                lock: self,
                _not_send: PhantomData,
            })
    }

    /// The data, through a unique borrow: no locking needed.
    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_mut()
    }
}

impl<T: ?Sized> Drop for RwLockReadGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.sema.release(1);
    }
}

impl<T: ?Sized> Drop for RwLockWriteGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.sema.release(MAX_PERMITS);
    }
}

impl<T: ?Sized> Deref for RwLockReadGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: invariant 1: a read permit excludes writers.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T: ?Sized> Deref for RwLockWriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: invariant 1: the write guard holds every permit.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T: ?Sized> DerefMut for RwLockWriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: invariant 1: the write guard holds every permit, and `&mut self` is unique.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T: Default> Default for RwLock<T> {
    fn default() -> Self {
        RwLock::new(T::default())
    }
}

impl<T: ?Sized> fmt::Debug for RwLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLock").finish_non_exhaustive()
    }
}
