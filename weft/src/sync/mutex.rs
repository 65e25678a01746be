//! A mutual-exclusion lock that parks the task, not its worker.
//!
//! Owns: [`Mutex`] — a one-permit [`RawSemaphore`](super::sema::RawSemaphore) and the data;
//! the data is touched only by the holder of the permit (invariant 1).
//!
//! Invariants:
//! 1. A [`MutexGuard`] exists exactly while its holder owns the permit; the data is reached
//!    only through a guard.
//! 2. A guard may be held across a park (a channel operation, a sleep, another lock): the
//!    waiters park too. It is `!Send` like std's, so it is released on the thread that locked.
//!
//! May call: `sync::sema`, `park`. Called by: users, `sync::condvar`, `sync::barrier` (Barrier, Once).
//!
//! Why no poisoning: a panicking holder releases the lock while unwinding and the data is as
//! it left it, as with `parking_lot`; Go's mutex has no poisoning either.

use std::cell::UnsafeCell;
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

use super::sema::RawSemaphore;

/// A mutual-exclusion lock for tasks, like Go's `sync.Mutex` holding its data like std's.
///
/// ```
/// use std::sync::Arc;
/// weft::run(|| {
///     let count = Arc::new(weft::sync::Mutex::new(0));
///     let handles: Vec<_> = (0..10).map(|_| {
///         let count = count.clone();
///         weft::spawn(move || {
///             let mut n = count.lock();
///             weft::yield_now(); // a guard may be held across a park
///             *n += 1;
///         })
///     }).collect();
///     handles.into_iter().for_each(|h| h.join().unwrap());
///     assert_eq!(*count.lock(), 10);
/// });
/// ```
pub struct Mutex<T: ?Sized> {
    sema: RawSemaphore,
    data: UnsafeCell<T>,
}

// SAFETY: invariant 1: the data is reached by one guard holder at a time, so sharing the
// mutex only moves `T` between threads (hence `T: Send`), never shares it.
unsafe impl<T: ?Sized + Send> Sync for Mutex<T> {}
// SAFETY: the mutex owns its `T`.
unsafe impl<T: ?Sized + Send> Send for Mutex<T> {}

/// Access to a [`Mutex`]'s data; unlocks when dropped.
#[must_use = "if unused the Mutex will immediately unlock"]
pub struct MutexGuard<'a, T: ?Sized> {
    pub(crate) mutex: &'a Mutex<T>,
    /// `!Send`, like std's guard (invariant 2).
    _not_send: PhantomData<*const ()>,
}

// SAFETY: a shared guard only gives `&T`, which is fine to share when `T: Sync`.
unsafe impl<T: ?Sized + Sync> Sync for MutexGuard<'_, T> {}

impl<T> Mutex<T> {
    /// A new unlocked mutex holding `value`.
    pub fn new(value: T) -> Self {
        Mutex {
            sema: RawSemaphore::new(1),
            data: UnsafeCell::new(value),
        }
    }

    /// Consumes the mutex, returning its data.
    pub fn into_inner(self) -> T {
        self.data.into_inner()
    }
}

impl<T: ?Sized> Mutex<T> {
    /// Locks, parking the task (or blocking the thread) while another holder has it.
    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.lock_for(crate::park::ParkReason::Mutex)
    }

    /// [`lock`](Self::lock), parking with `reason` (park/reason.rs invariant 1: `Once` waits
    /// on its mutex under its own name).
    pub(crate) fn lock_for(&self, reason: crate::park::ParkReason) -> MutexGuard<'_, T> {
        crate::sched::coop::spend(); // sched/coop.rs invariant 2
        self.sema.acquire(1, || crate::sched::park_current(reason));
        MutexGuard {
            mutex: self,
            _not_send: PhantomData,
        }
    }

    /// Locks if that can be done without waiting.
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        self.sema.try_acquire(1).then(|| MutexGuard {
            mutex: self,
            _not_send: PhantomData,
        })
    }

    /// The data, through a unique borrow: no locking needed.
    pub fn get_mut(&mut self) -> &mut T {
        self.data.get_mut()
    }
}

impl<T: ?Sized> Drop for MutexGuard<'_, T> {
    fn drop(&mut self) {
        self.mutex.sema.release(1);
    }
}

impl<T: ?Sized> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: invariant 1: the guard holds the only permit.
        unsafe { &*self.mutex.data.get() }
    }
}

impl<T: ?Sized> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: invariant 1: the guard holds the only permit, and `&mut self` is unique.
        unsafe { &mut *self.mutex.data.get() }
    }
}

impl<T: Default> Default for Mutex<T> {
    fn default() -> Self {
        Mutex::new(T::default())
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.try_lock() {
            Some(guard) => f.debug_struct("Mutex").field("data", &&*guard).finish(),
            None => f.debug_struct("Mutex").field("data", &"<locked>").finish(),
        }
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for MutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}
