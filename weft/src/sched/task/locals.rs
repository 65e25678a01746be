//! What a task carries for the layers above its core: its task-local values and the context
//! scopes it is bound to — and how a park finds that one of those scopes was cancelled.
//!
//! Owns: [`TaskLocals`] — one per task that used a task-local or bound a context, reached from
//! its header's `locals` pointer, touched only by the task itself, on its thread
//! (sched/task/mod.rs invariant 1); on a plain OS thread the same storage is a thread-local
//! — and the unwind a cancelled scope makes ([`ScopeUnwind`]). What a task-local is
//! (`LocalKey`) is task/local.rs's, and what a scope is (`Context`) context.rs's: here a
//! scope is the [`Scope`] it implements, so that a park can look at it without naming the
//! context layer.
//!
//! Invariants:
//! 1. No borrow of the storage is held while user code runs (an initializer, a `Drop`): the
//!    `with_*` functions take closures that run none (task/local.rs invariants 1 and 3 build
//!    on this).
//! 2. A bound task's scopes are pushed and popped by the task itself, in nesting order
//!    (context.rs `bind`); its park unwinds with a [`ScopeUnwind`] naming the outermost
//!    cancelled scope, which only that scope's `bind` catches.
//!
//! May call: the current task (`worker.rs`), each bound [`Scope`] (its state and deadline).
//! Called by: `park.rs` and `worker.rs` (the parks), `task/local.rs` (task-locals),
//! `context` (binding), `interpose` through `park.rs` (a cancellation as an error).
//!
//! Why a trait for scopes: the context layer sits above the scheduler (it needs channels for
//! `done`), yet a park must see a bound context's cancellation; a scope's two questions are
//! asked only at a park that found the `SCOPE` interrupt bit, or on a plain thread bound to a
//! context, so the dynamic call costs nothing on the ordinary park.

use std::any::Any;
use std::cell::RefCell;
use std::fmt;
use std::panic::resume_unwind;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{interrupt, Header};

/// A context a task or thread is bound to, as a park sees it (context.rs `Inner`).
pub(crate) trait Scope: Send + Sync {
    /// Cancels the scope if its deadline passed (the deadline thread may be a moment late).
    fn poll_deadline(&self);
    /// Why the scope ended, if it did.
    fn error(&self) -> Option<ContextError>;
}

/// Why a context ended: Go's `context.Canceled` and `context.DeadlineExceeded`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ContextError {
    /// [`Context::cancel`](crate::context::Context::cancel) was called on it or an ancestor.
    Cancelled,
    /// Its deadline, or an ancestor's, passed.
    DeadlineExceeded,
}

impl fmt::Display for ContextError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ContextError::Cancelled => "context cancelled",
            ContextError::DeadlineExceeded => "context deadline exceeded",
        })
    }
}

impl std::error::Error for ContextError {}

impl From<ContextError> for std::io::Error {
    /// `Interrupted` for a cancel, `TimedOut` for a deadline; the message says which.
    fn from(e: ContextError) -> std::io::Error {
        let kind = match e {
            ContextError::Cancelled => std::io::ErrorKind::Interrupted,
            ContextError::DeadlineExceeded => std::io::ErrorKind::TimedOut,
        };
        std::io::Error::new(kind, e)
    }
}

/// The task-local values and bound contexts of one task (or plain thread).
#[derive(Default)]
pub(crate) struct TaskLocals {
    /// (the key's address, its value) in order of first use (task/local.rs `LocalKey`).
    pub(crate) values: Vec<(usize, Box<dyn Any>)>,
    /// The contexts `Context::bind` bound this task to, outermost first (context.rs).
    pub(crate) scopes: Vec<Arc<dyn Scope>>,
    /// The address of the scope among `scopes` whose cancellation an interposed call reported
    /// as an error instead of unwinding ([`cut_short`]), or 0: its `bind` returns the
    /// context's error even though its closure returned.
    pub(crate) cut_short: usize,
}

thread_local! {
    /// The storage of a plain OS thread (outside tasks).
    static THREAD_LOCALS: RefCell<TaskLocals> = RefCell::default();
}

/// Calls `f` with the current task's storage (or the plain thread's). `f` must not run user
/// code (invariant 1).
pub(crate) fn with_locals<R>(f: impl FnOnce(&mut TaskLocals) -> R) -> R {
    match crate::sched::current_task_ptr() {
        Some(header) => {
            // SAFETY: the running task's header is alive for the whole resume, and we run in
            // that task.
            let header = unsafe { header.as_ref() };
            let mut locals = header.locals();
            if locals.is_null() {
                locals = Box::into_raw(Box::default());
                header.set_locals(locals);
            }
            // SAFETY: only this task touches its storage, on this thread (module doc), and no
            // other borrow of it is live: callers do not re-enter (invariant 1).
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
/// calls this, from its park.
pub(crate) fn with_header_locals<R>(
    header: &Header,
    f: impl FnOnce(Option<&mut TaskLocals>) -> R,
) -> R {
    let locals = header.locals();
    // SAFETY: as in `with_locals`: the caller is the task, on its thread.
    f(unsafe { locals.as_mut() })
}

/// Drops the storage of the task behind `header`; called by the task when its closure is
/// done (task/local.rs invariant 3).
pub(crate) fn drop_task_locals(header: &Header) {
    // A destructor may make new task-locals: go on until none is left, a bounded number of
    // rounds, as std does for thread-locals.
    for _ in 0..16 {
        let locals = header.locals();
        header.set_locals(std::ptr::null_mut());
        let Some(locals) = NonNull::new(locals) else {
            return;
        };
        // SAFETY: made by `Box::into_raw` in `with_locals`; the pointer is cleared, so this
        // is the only owner.
        let locals = unsafe { Box::from_raw(locals.as_ptr()) };
        // Values dropped one at a time, in reverse order of creation, with no borrow held
        // (invariant 1); a panicking `Drop` is caught as a task's panic is.
        let TaskLocals {
            mut values, scopes, ..
        } = *locals;
        drop(scopes);
        while let Some(value) = values.pop() {
            super::cell::drop_in_task(value);
        }
    }
    eprintln!("weft: task-local destructors keep making task-locals; leaking the rest");
    header.set_locals(std::ptr::null_mut());
}

/// The unwind payload of a park in a cancelled scope: the address of that scope (its
/// `Arc`'s data), which only that scope's `bind` catches (invariant 2).
pub(crate) struct ScopeUnwind(pub(crate) usize);

/// Whether `payload` is a context's unwind (for `task::is_cancelled`).
pub(crate) fn is_scope_unwind(payload: &(dyn Any + Send)) -> bool {
    payload.is::<ScopeUnwind>()
}

/// The running task saw its `SCOPE` interrupt bit at a park: unwinds to the outermost
/// cancelled scope it is bound to, if any (invariant 2).
#[cold]
pub(crate) fn unwind_if_scope_cancelled(header: &Header) {
    // Cleared before the look, so a cancel after the look sets it again for the next park.
    // Acquire: pairs with the Release `fetch_or` of `Task::interrupt`.
    header
        .interrupt
        .fetch_and(!interrupt::SCOPE, Ordering::Acquire);
    let target = with_header_locals(header, |locals| {
        locals.and_then(|l| outermost_cancelled(&l.scopes))
    });
    if let Some(target) = target {
        resume_unwind(Box::new(ScopeUnwind(target)));
    }
}

#[cfg(feature = "interpose")]
/// For a call that reports cancellation as an error instead of unwinding (interpose): the
/// error of the outermost cancelled scope the running task is bound to, which is marked cut
/// short so that its `bind` returns that error once its closure returns. Clears a stale
/// `SCOPE` bit, as a park does.
pub(crate) fn cut_short(header: &Header) -> Option<ContextError> {
    let found = with_header_locals(header, |locals| {
        let locals = locals?;
        let target = outermost_cancelled(&locals.scopes)?;
        mark_cut_short(locals, target)
    });
    if found.is_none() {
        header
            .interrupt
            .fetch_and(!interrupt::SCOPE, Ordering::Relaxed);
    }
    found
}

#[cfg(feature = "interpose")]
/// A context's unwind caught by a call that reports it as an error (interpose): marks the
/// scope cut short, as [`cut_short`] does, and sets the `SCOPE` bit again (the unwind
/// cleared it) so the task's next park unwinds to that scope. `None` if `payload` is not a
/// context's unwind.
pub(crate) fn caught_scope_unwind(
    header: &Header,
    payload: &(dyn Any + Send),
) -> Option<ContextError> {
    let target = payload.downcast_ref::<ScopeUnwind>()?.0;
    header
        .interrupt
        .fetch_or(interrupt::SCOPE, Ordering::Relaxed);
    with_header_locals(header, |locals| mark_cut_short(locals?, target))
}

#[cfg(feature = "interpose")]
/// Marks the scope at address `target` (one of `locals.scopes`) cut short; its error.
fn mark_cut_short(locals: &mut TaskLocals, target: usize) -> Option<ContextError> {
    locals.cut_short = target;
    locals
        .scopes
        .iter()
        .find(|s| scope_address(s) == target)
        .and_then(|s| s.error())
}

/// Whether a plain thread is bound to a cancelled scope (a cancellable park's check).
pub(crate) fn thread_scope_cancelled() -> bool {
    !std::thread::panicking()
        && with_thread_locals(|l| outermost_cancelled(&l.scopes))
            .flatten()
            .is_some()
}

/// The same for a plain OS thread, around its parks (park.rs).
pub(crate) fn unwind_if_thread_scope_cancelled() {
    if std::thread::panicking() {
        return;
    }
    let target = with_thread_locals(|l| outermost_cancelled(&l.scopes));
    if let Some(Some(target)) = target {
        resume_unwind(Box::new(ScopeUnwind(target)));
    }
}

fn outermost_cancelled(scopes: &[Arc<dyn Scope>]) -> Option<usize> {
    scopes
        .iter()
        .find(|s| {
            s.poll_deadline();
            s.error().is_some()
        })
        .map(scope_address)
}

/// A scope's address, as [`ScopeUnwind`] and `cut_short` name it.
pub(crate) fn scope_address(scope: &Arc<dyn Scope>) -> usize {
    Arc::as_ptr(scope).cast::<()>() as usize
}
