//! Task-local storage: [`task_local!`](crate::task_local) values, one per task, dropped when
//! the task ends — what a `thread_local!` is to a thread (a `thread_local!` in a task is
//! shared by every task of its worker).
//!
//! ```
//! use std::cell::Cell;
//! weft::task_local! {
//!     static REQUEST_ID: Cell<u64> = Cell::new(0);
//! }
//! weft::run(|| {
//!     let tasks: Vec<_> = (1..=3u64)
//!         .map(|id| {
//!             weft::spawn(move || {
//!                 REQUEST_ID.with(|r| r.set(id));
//!                 weft::yield_now(); // other tasks of this worker run and set theirs
//!                 REQUEST_ID.with(|r| r.get())
//!             })
//!         })
//!         .collect();
//!     let ids: Vec<u64> = tasks.into_iter().map(|t| t.join().unwrap()).collect();
//!     assert_eq!(ids, [1, 2, 3]);
//! });
//! ```
//!
//! Owns: [`LocalKey`], and the values in a task's storage (sched/locals.rs `TaskLocals`, one
//! per task that used a task-local or bound a context, touched only by the task itself, on
//! its thread; on a plain OS thread the same storage is a thread-local).
//!
//! Invariants:
//! 1. A value lives in its own box, and no entry is removed while the task runs: the `&T`
//!    that [`LocalKey::with`] lends stays valid while `f` runs, even if `f` makes other
//!    task-locals (which may grow the list).
//! 2. No borrow of the storage is held while user code runs (an initializer, `f`, a `Drop`):
//!    sched/locals.rs invariant 1.
//! 3. The storage is dropped by the task itself, on its own stack, when its closure has
//!    returned or unwound (sched/task/locals.rs `drop_task_locals`), before its joiner is woken; a destructor that
//!    makes task-locals again gets them dropped too. A task whose stack is leaked at
//!    shutdown leaks its storage (it may hold `!Send` values of that thread).
//!
//! May call: `sched` (the current task's storage). Called by: users.
//!
//! Why a list searched by the key's address rather than a map or indices given out at
//! registration: a task uses a handful of task-locals, a scan of a few words is cheaper than
//! hashing, and statics need no registration step. Why allocated at first use: most tasks
//! never use one, and a million idle tasks should not pay for an empty list.

use std::any::Any;
use std::ptr::NonNull;

use crate::sched::locals::with_locals;

/// A key for a task-local value, made by [`task_local!`](crate::task_local): each task (and
/// each plain OS thread) that uses it gets its own value, made by the initializer at first
/// use and dropped when the task ends.
pub struct LocalKey<T: 'static> {
    init: fn() -> T,
}

impl<T: 'static> LocalKey<T> {
    #[doc(hidden)]
    pub const fn __new(init: fn() -> T) -> LocalKey<T> {
        LocalKey { init }
    }

    /// Calls `f` with the current task's value, made first if this task has none yet.
    ///
    /// Reading costs a scan of the task's (usually few) task-locals. On a plain OS thread the
    /// value is that thread's.
    ///
    /// # Panics
    /// If the initializer or `f` panics; a task-local read from its own initializer makes a
    /// second value, as std's `thread_local!` would recurse.
    pub fn with<R>(&'static self, f: impl FnOnce(&T) -> R) -> R {
        let key = self as *const Self as usize;
        let found = with_locals(|locals| {
            locals
                .values
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, value)| value_ptr::<T>(value))
        });
        let value = match found {
            Some(value) => value,
            None => {
                // The initializer is user code: no borrow held (invariant 2).
                let boxed: Box<dyn Any> = Box::new((self.init)());
                let value = value_ptr::<T>(&boxed);
                with_locals(|locals| locals.values.push((key, boxed)));
                value
            }
        };
        // SAFETY: invariant 1: the value is boxed and stays in the storage until the task
        // ends, which cannot happen while `f` runs in it.
        f(unsafe { value.as_ref() })
    }
}

fn value_ptr<T: 'static>(value: &Box<dyn Any>) -> NonNull<T> {
    let value = value
        .downcast_ref::<T>()
        .expect("weft: task-local entry of another type");
    NonNull::from(value)
}

impl<T: 'static> std::fmt::Debug for LocalKey<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalKey").finish_non_exhaustive()
    }
}

/// Declares task-local values, like `std::thread_local!`: each task gets its own, made at its
/// first [`LocalKey::with`] and dropped when the task ends.
///
/// ```
/// weft::task_local! {
///     /// The user of the request this task serves.
///     pub static USER: std::cell::RefCell<String> = std::cell::RefCell::new(String::new());
///     static HITS: std::cell::Cell<u32> = std::cell::Cell::new(0);
/// }
/// weft::run(|| {
///     USER.with(|u| u.borrow_mut().push_str("ada"));
///     HITS.with(|h| h.set(h.get() + 1));
///     assert_eq!(weft::spawn(|| USER.with(|u| u.borrow().len())).join().unwrap(), 0);
/// });
/// ```
#[macro_export]
macro_rules! task_local {
    () => {};
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = $init:expr; $($rest:tt)*) => {
        $(#[$attr])*
        $vis static $name: $crate::task::LocalKey<$t> = $crate::task::LocalKey::__new({
            fn __weft_init() -> $t {
                $init
            }
            __weft_init
        });
        $crate::task_local!($($rest)*);
    };
    ($(#[$attr:meta])* $vis:vis static $name:ident: $t:ty = $init:expr) => {
        $crate::task_local!($(#[$attr])* $vis static $name: $t = $init;);
    };
}
