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
//! Owns: [`TaskLocals`] — one per task that used a task-local or bound a context, reached
//! from its header's `locals` pointer; touched only by the task itself, on its thread
//! (task/mod.rs invariant 1). On a plain OS thread the same storage is a thread-local.
//!
//! Invariants:
//! 1. A value lives in its own box, and no entry is removed while the task runs: the `&T`
//!    that [`LocalKey::with`] lends stays valid while `f` runs, even if `f` makes other
//!    task-locals (which may grow the list).
//! 2. No borrow of the storage is held while user code runs (an initializer, `f`, a `Drop`).
//! 3. The storage is dropped by the task itself, on its own stack, when its closure has
//!    returned or unwound (task/cell.rs), before its joiner is woken; a destructor that
//!    makes task-locals again gets them dropped too. A task whose stack is leaked at
//!    shutdown leaks its storage (it may hold `!Send` values of that thread).
//!
//! May call: `sched` (the current task). Called by: users, `context` (bound scopes).
//!
//! Why a list searched by the key's address rather than a map or indices given out at
//! registration: a task uses a handful of task-locals, a scan of a few words is cheaper than
//! hashing, and statics need no registration step. Why allocated at first use: most tasks
//! never use one, and a million idle tasks should not pay for an empty list.

use std::any::Any;
use std::cell::RefCell;
use std::ptr::NonNull;
use std::sync::Arc;

use super::Header;

/// The task-local values and bound contexts of one task (or plain thread).
#[derive(Default)]
pub(crate) struct TaskLocals {
    /// (the key's address, its value) in order of first use.
    values: Vec<(usize, Box<dyn Any>)>,
    /// The contexts `Context::bind` bound this task to, outermost first (context.rs).
    pub(crate) scopes: Vec<Arc<crate::context::Inner>>,
    /// The address of the scope among `scopes` whose cancellation an interposed call reported
    /// as an error instead of unwinding (context.rs `cut_short`), or 0: its `bind` returns
    /// the context's error even though its closure returned.
    pub(crate) cut_short: usize,
}

thread_local! {
    /// The storage of a plain OS thread (outside tasks).
    static THREAD_LOCALS: RefCell<TaskLocals> = RefCell::default();
}

/// Calls `f` with the current task's storage (or the plain thread's). `f` must not run user
/// code (invariant 2).
pub(crate) fn with_locals<R>(f: impl FnOnce(&mut TaskLocals) -> R) -> R {
    match crate::sched::current_task_ptr() {
        Some(header) => {
            // SAFETY: the running task's header is alive for the whole resume, and we run in
            // that task.
            let header = unsafe { header.as_ref() };
            let mut locals = header.locals.get();
            if locals.is_null() {
                locals = Box::into_raw(Box::default());
                header.locals.set(locals);
            }
            // SAFETY: only this task touches its storage, on this thread (module doc), and no
            // other borrow of it is live: callers do not re-enter (invariant 2).
            f(unsafe { &mut *locals })
        }
        None => THREAD_LOCALS.with(|locals| f(&mut locals.borrow_mut())),
    }
}

/// Calls `f` with a plain thread's storage; `None` while the thread's thread-locals are being
/// destroyed (a park in a thread-local's destructor).
pub(crate) fn with_thread_locals<R>(f: impl FnOnce(&mut TaskLocals) -> R) -> Option<R> {
    THREAD_LOCALS
        .try_with(|locals| f(&mut locals.borrow_mut()))
        .ok()
}

/// Calls `f` with the storage of the task behind `header` if it has any; the task itself
/// calls this, from its park (context.rs).
pub(crate) fn with_header_locals<R>(
    header: &Header,
    f: impl FnOnce(Option<&mut TaskLocals>) -> R,
) -> R {
    let locals = header.locals.get();
    // SAFETY: as in `with_locals`: the caller is the task, on its thread.
    f(unsafe { locals.as_mut() })
}

/// Drops the storage of the task behind `header`; called by the task when its closure is
/// done (invariant 3).
pub(crate) fn drop_task_locals(header: &Header) {
    // A destructor may make new task-locals: go on until none is left, a bounded number of
    // rounds, as std does for thread-locals.
    for _ in 0..16 {
        let locals = header.locals.replace(std::ptr::null_mut());
        let Some(locals) = NonNull::new(locals) else {
            return;
        };
        // SAFETY: made by `Box::into_raw` in `with_locals`; the pointer is cleared, so this
        // is the only owner.
        let locals = unsafe { Box::from_raw(locals.as_ptr()) };
        // Values dropped one at a time, in reverse order of creation, with no borrow held
        // (invariant 2); a panicking `Drop` is caught as a task's panic is.
        let TaskLocals {
            mut values, scopes, ..
        } = *locals;
        drop(scopes);
        while let Some(value) = values.pop() {
            super::cell::drop_in_task(value);
        }
    }
    eprintln!("weft: task-local destructors keep making task-locals; leaking the rest");
    header.locals.set(std::ptr::null_mut());
}

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
