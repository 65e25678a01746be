//! Contexts: Go's `context.Context` — a cancellation signal with an optional deadline,
//! passed down a tree of work, that every blocking operation of weft can be bound to.
//!
//! ```
//! use std::time::Duration;
//! use weft::context::{Context, ContextError};
//! weft::run(|| {
//!     let ctx = Context::new();
//!     let (_tx, rx) = weft::chan::bounded::<u32>(0);
//!     // A worker tree: every blocking call inside `bind` ends when `ctx` is cancelled.
//!     let worker = ctx.child().spawn(move || rx.recv());
//!     weft::time::sleep(Duration::from_millis(5));
//!     ctx.cancel();
//!     assert_eq!(worker.join().unwrap(), Err(ContextError::Cancelled));
//!
//!     // A deadline cancels by itself; `select!` waits on `done()` like Go's `<-ctx.Done()`.
//!     let ctx = Context::with_timeout(Duration::from_millis(5));
//!     weft::select! {
//!         recv(ctx.done()) -> _ => assert_eq!(ctx.err(), Some(ContextError::DeadlineExceeded)),
//!         after(Duration::from_secs(5)) => unreachable!(),
//!     }
//! });
//! ```
//!
//! Binding: [`Context::bind`] runs a closure with the current task (or plain thread) bound
//! to the context. When the context is cancelled — by [`Context::cancel`], an ancestor's cancel, or
//! its deadline — the bound task is woken from whatever it is parked in (a channel send,
//! receive or `select!`, `sleep`, a `join`, a socket read, write, accept or connect, a
//! `Mutex`, `RwLock`, `Condvar`, `WaitGroup`, `Semaphore` or `Barrier` wait) and unwinds to
//! the `bind` call, running the destructors on the way, which returns
//! `Err(ContextError)`. A task computing without parking notices at its next park or
//! [`yield_now`](crate::yield_now). A plain OS thread is woken the same way from channel,
//! `select!`, sync, `sleep` and `join` waits, not from socket waits (it waits in `poll(2)`
//! on the descriptor, not in a park). The error is the context's own, distinct from the
//! timeouts of the operations inside (`recv_timeout` still returns its own timeout error).
//! What an operation cut short does to its data is what a cancelled task's unwind does
//! ([`Task::cancel`](crate::task::Task::cancel) says it): an operation that completed before
//! the cancel returns its result (a value handed to a receiver is never dropped), a value
//! being sent is either delivered or dropped with the frame that owned it, and a lock or
//! semaphore wait leaves its queue (passing on what it was granted).
//!
//! A blocking libc call that the `interpose` feature parks (a sync crate's socket read, a
//! `std::thread::sleep`, a name lookup) cannot be unwound through: it fails instead, with
//! `ETIMEDOUT` when the deadline passed and `ECANCELED` for a cancel (a sleep returns early),
//! as do the task's later such calls inside the scope; the scope is *cut short*, and `bind`
//! returns the context's error once the closure returns, whatever it returned.
//!
//! Owns: [`Context`] (a reference to an `Inner`), [`ContextError`], the deadline thread.
//! An `Inner`'s `state` is an atomic anyone reads; its `links` (the done channel's sender,
//! the children, the bound tasks) are behind a mutex held only for short, non-blocking steps.
//!
//! Invariants:
//! 1. `state` leaves ACTIVE once, by the CAS in `cancel_with`; only that caller then takes
//!    the links, so every bound waiter is interrupted and every child cancelled exactly once.
//! 2. `bind` and `child` register under the links lock after seeing ACTIVE under it; a
//!    cancel takes the links under the same lock after its CAS, so a registration either is
//!    seen by the cancel or sees the cancel (and fails at once). After the cancel no entry is
//!    added, so a slab key removed later (`Scope::drop`, a child's drop) was never reused.
//! 3. A bound task's scopes (sched/task/locals.rs `TaskLocals::scopes`) are pushed and popped by
//!    the task itself, in nesting order; its park unwinds with a `ScopeUnwind` naming the
//!    outermost cancelled scope, which only that scope's `bind` catches (sched/task/locals.rs
//!    invariant 2).
//!
//! May call: `chan`, `task`, `sched` (the task's storage, waiters). Called by: users; a park
//! that sees the `SCOPE` interrupt bit, or a plain thread's park, asks each bound `Inner`
//! whether it ended, as a `Scope` (sched/task/locals.rs).
//!
//! Why unwinding rather than an error from each operation: weft's blocking calls already
//! return their own error types, and tasks already unwind at a park when cancelled (at
//! shutdown, with `Task::cancel`), which every primitive handles without losing data (the
//! chan and sync robustness tests check it); one mechanism covers every operation, the
//! ones in user libraries that park through weft too. The price: the cancelled work's result
//! is gone, as with Go's `ctx.Err()` after which the caller gives up anyway. Why a thread for
//! deadlines: a context is not tied to a runtime or worker; one sleeping thread per process
//! serves every deadline (started at the first one) and wakes only when one passes.

use std::fmt;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

use crate::chan::{Receiver, Sender};
use crate::sched::interrupt;
pub use crate::sched::locals::ContextError;
use crate::sched::locals::{self, ScopeUnwind};
use crate::sched::Waiter;
use crate::task::JoinHandle;

/// Not cancelled.
const ACTIVE: u8 = 0;
/// Cancelled by `cancel` (or an ancestor's).
const CANCELLED: u8 = 1;
/// Cancelled because its deadline (or an ancestor's) passed.
const DEADLINE: u8 = 2;

/// A cancellation signal with an optional deadline, shared by clones and passed to children
/// (module doc). Dropping every clone does not cancel it, as in Go; call [`cancel`].
///
/// [`cancel`]: Context::cancel
///
/// ```
/// use std::time::Duration;
/// use weft::context::{Context, ContextError};
/// weft::run(|| {
///     // A request with a deadline, and a child for one step of it with a shorter one.
///     let request = Context::with_timeout(Duration::from_secs(5));
///     let step = request.child_with_timeout(Duration::from_millis(10));
///     let (_tx, rx) = weft::chan::bounded::<u32>(0);
///     assert_eq!(step.bind(|| rx.recv()), Err(ContextError::DeadlineExceeded));
///     assert_eq!(request.err(), None); // the parent goes on
/// });
/// ```
#[derive(Clone)]
pub struct Context {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    state: AtomicU8,
    deadline: Option<Instant>,
    /// The parent and this context's key in its children (for removal on drop).
    parent: Option<(Arc<Inner>, usize)>,
    links: Mutex<Links>,
    /// Closed (its only sender dropped) when the context is cancelled.
    done: Receiver<()>,
}

#[derive(Default)]
struct Links {
    done: Option<Sender<()>>,
    children: slab::Slab<Weak<Inner>>,
    /// The tasks and threads in a `bind` of this context.
    bound: slab::Slab<Waiter>,
    /// Its entry in the deadline thread's map, while there.
    timer: Option<deadline_thread::Key>,
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Links> {
        self.links.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn error(&self) -> Option<ContextError> {
        // Acquire: pairs with the Release CAS in `cancel_with`.
        match self.state.load(Ordering::Acquire) {
            ACTIVE => None,
            CANCELLED => Some(ContextError::Cancelled),
            _ => Some(ContextError::DeadlineExceeded),
        }
    }

    /// Invariant 1.
    fn cancel_with(&self, why: u8) {
        // Release: publishes the cancel to readers of `state` (`error`).
        if self
            .state
            .compare_exchange(ACTIVE, why, Ordering::Release, Ordering::Relaxed)
            .is_err()
        {
            return;
        }
        let links = std::mem::take(&mut *self.lock());
        if let Some(key) = links.timer {
            deadline_thread::remove(key);
        }
        // The done channel closes: every `recv(ctx.done())` is ready.
        drop(links.done);
        for (_, waiter) in links.bound {
            match waiter {
                Waiter::Task(task) => task.interrupt(interrupt::SCOPE),
                Waiter::Thread(thread) => thread.unpark(),
                Waiter::Waker(waker) => (*waker).wake(),
            }
        }
        for (_, child) in links.children {
            if let Some(child) = child.upgrade() {
                child.cancel_with(why);
            }
        }
    }

    /// Cancels it if its deadline passed (the deadline thread may be a moment late).
    fn poll_deadline(&self) {
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            self.cancel_with(DEADLINE);
        }
    }
}

/// What a park asks of a bound context (sched/task/locals.rs).
impl locals::Scope for Inner {
    fn poll_deadline(&self) {
        Inner::poll_deadline(self);
    }

    fn error(&self) -> Option<ContextError> {
        Inner::error(self)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let links = self.links.get_mut().unwrap_or_else(|e| e.into_inner());
        if let Some(key) = links.timer.take() {
            deadline_thread::remove(key);
        }
        if let Some((parent, key)) = &self.parent {
            // Invariant 2: the key was not reused.
            parent.lock().children.try_remove(*key);
        }
    }
}

impl Context {
    /// A new root context: cancelled only by [`cancel`](Self::cancel).
    pub fn new() -> Context {
        Context::make(None, None)
    }

    /// A new root context cancelled by itself `timeout` from now.
    pub fn with_timeout(timeout: Duration) -> Context {
        Context::make(None, Instant::now().checked_add(timeout))
    }

    /// A new root context cancelled by itself at `deadline`.
    pub fn with_deadline(deadline: Instant) -> Context {
        Context::make(None, Some(deadline))
    }

    /// A child: cancelled with this context (and with its deadline), or on its own by its
    /// [`cancel`](Self::cancel), which does not touch the parent.
    pub fn child(&self) -> Context {
        Context::make(Some(&self.inner), None)
    }

    /// A child that is also cancelled `timeout` from now.
    pub fn child_with_timeout(&self, timeout: Duration) -> Context {
        Context::make(Some(&self.inner), Instant::now().checked_add(timeout))
    }

    /// A child that is also cancelled at `deadline`.
    pub fn child_with_deadline(&self, deadline: Instant) -> Context {
        Context::make(Some(&self.inner), Some(deadline))
    }

    fn make(parent: Option<&Arc<Inner>>, deadline: Option<Instant>) -> Context {
        let deadline = match (parent.and_then(|p| p.deadline), deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let (tx, rx) = crate::chan::bounded(0);
        let inner = Arc::new_cyclic(|me: &Weak<Inner>| {
            let parent = parent.map(|parent| {
                let key = parent.lock().children.insert(me.clone());
                (parent.clone(), key)
            });
            Inner {
                state: AtomicU8::new(ACTIVE),
                deadline,
                parent,
                links: Mutex::new(Links {
                    done: Some(tx),
                    ..Links::default()
                }),
                done: rx,
            }
        });
        // Invariant 2: a parent cancelled before the child was in its list.
        if let Some(why) = parent.and_then(|p| p.state_now()) {
            inner.cancel_with(why);
        }
        if let Some(deadline) = deadline {
            let mut links = inner.lock();
            // Not if a cancelled parent ended it already (its links are taken for good).
            if inner.error().is_none() {
                links.timer = Some(deadline_thread::add(deadline, Arc::downgrade(&inner)));
            }
        }
        Context { inner }
    }

    /// Cancels the context and all its descendants: every task bound to one of them unwinds
    /// to its `bind`, which returns [`ContextError::Cancelled`]; `done()` closes. Callable
    /// from any thread; a second call does nothing.
    pub fn cancel(&self) {
        self.inner.cancel_with(CANCELLED);
    }

    /// Whether it was cancelled (or its deadline passed).
    pub fn is_cancelled(&self) -> bool {
        self.err().is_some()
    }

    /// Why it ended, or `None` while it is active: Go's `ctx.Err()`.
    pub fn err(&self) -> Option<ContextError> {
        self.inner.poll_deadline();
        self.inner.error()
    }

    /// Its deadline: its own or its nearest ancestor's, whichever comes first.
    pub fn deadline(&self) -> Option<Instant> {
        self.inner.deadline
    }

    /// A receiver that becomes ready (closed: `recv` returns `Err`) when the context ends —
    /// Go's `ctx.Done()`, for [`select!`](crate::select): `recv(ctx.done()) -> _ => ...`.
    pub fn done(&self) -> &Receiver<()> {
        &self.inner.done
    }

    /// Runs `f` with the current task (or plain thread) bound to this context: if the
    /// context is cancelled meanwhile, the blocking operation `f` is parked in (or its next
    /// one) unwinds back to here and `bind` returns the context's error (module doc); an
    /// interposed libc call it cut short fails instead, and `bind` returns the error when `f`
    /// returns. Runs nothing and returns the error at once if the context has already ended.
    /// A panic in `f` passes through; binds nest.
    ///
    /// # Errors
    /// [`ContextError::Cancelled`] or [`ContextError::DeadlineExceeded`] when the context
    /// ended before `f` returned.
    pub fn bind<T>(&self, f: impl FnOnce() -> T) -> Result<T, ContextError> {
        if let Some(e) = self.err() {
            return Err(e);
        }
        let scope = {
            let mut links = self.inner.lock();
            // Invariant 2: registered under the lock that the cancel takes.
            if let Some(e) = self.inner.error() {
                return Err(e);
            }
            let key = links.bound.insert(Waiter::current());
            drop(links);
            locals::with_locals(|l| l.scopes.push(self.inner.clone()));
            Scope {
                inner: &self.inner,
                key,
            }
        };
        let outcome = catch_unwind(AssertUnwindSafe(f));
        // An interposed call inside `f` reported this scope's cancellation as an error
        // (`cut_short`): `f` returned, but what it returned is the fallout of that error.
        let me = Arc::as_ptr(&self.inner) as usize;
        let cut_short = locals::with_locals(|l| std::mem::replace(&mut l.cut_short, 0) == me);
        drop(scope);
        match outcome {
            Ok(_) if cut_short => Err(self
                .inner
                .error()
                .expect("weft: a context scope was cut short while active")),
            Ok(value) => Ok(value),
            Err(payload) => match payload.downcast_ref::<ScopeUnwind>() {
                Some(unwind) if unwind.0 == Arc::as_ptr(&self.inner) as usize => Err(self
                    .inner
                    .error()
                    .expect("weft: a context scope unwound while active")),
                _ => resume_unwind(payload),
            },
        }
    }

    /// Spawns `f` as a task bound to this context ([`bind`](Self::bind)): its result is
    /// `Err` when the context ended before `f` returned.
    #[track_caller]
    pub fn spawn<F, T>(&self, f: F) -> JoinHandle<Result<T, ContextError>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let ctx = self.clone();
        crate::spawn(move || ctx.bind(f))
    }
}

impl Inner {
    fn state_now(&self) -> Option<u8> {
        match self.state.load(Ordering::Acquire) {
            ACTIVE => None,
            why => Some(why),
        }
    }
}

impl Default for Context {
    fn default() -> Context {
        Context::new()
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("err", &self.inner.error())
            .field("deadline", &self.inner.deadline)
            .finish()
    }
}

/// One `bind` in progress: undone when it ends, however it ends (invariant 3).
struct Scope<'a> {
    inner: &'a Arc<Inner>,
    key: usize,
}

impl Scope<'_> {
    /// The scope's address, as the task's storage and a `ScopeUnwind` name it.
    fn address(&self) -> usize {
        Arc::as_ptr(self.inner) as usize
    }
}

impl Drop for Scope<'_> {
    fn drop(&mut self) {
        let popped = locals::with_locals(|l| l.scopes.pop());
        debug_assert!(popped.is_some_and(|p| locals::scope_address(&p) == self.address()));
        // Invariant 2: gone already if the cancel took the list.
        let waiter = self.inner.lock().bound.try_remove(self.key);
        drop(waiter);
    }
}

/// The process's deadline thread: cancels contexts whose deadline passed. An entry leaves the
/// map when it fires, or when its context is cancelled or dropped first, so contexts with long
/// deadlines that end early (a request that finished) cost nothing after they end.
mod deadline_thread {
    use super::*;
    use std::collections::BTreeMap;

    /// A deadline's key: (deadline, sequence), unique.
    pub(super) type Key = (Instant, u64);

    #[derive(Default)]
    struct Timers {
        map: Mutex<(BTreeMap<Key, Weak<Inner>>, u64)>,
        cond: Condvar,
    }

    fn timers() -> &'static Timers {
        static TIMERS: OnceLock<&'static Timers> = OnceLock::new();
        TIMERS.get_or_init(|| {
            let timers: &'static Timers = Box::leak(Box::default());
            std::thread::Builder::new()
                .name("weft-deadlines".into())
                .spawn(move || run(timers))
                .expect("weft: cannot start the context deadline thread");
            timers
        })
    }

    /// Entries in the map (for the tests).
    #[cfg(test)]
    pub(super) fn len() -> usize {
        lock(timers()).0.len()
    }

    fn lock(timers: &Timers) -> MutexGuard<'_, (BTreeMap<Key, Weak<Inner>>, u64)> {
        timers.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn add(at: Instant, ctx: Weak<Inner>) -> Key {
        let timers = timers();
        let mut map = lock(timers);
        map.1 += 1;
        let key = (at, map.1);
        let first = map.0.first_key_value().is_none_or(|(k, _)| key < *k);
        map.0.insert(key, ctx);
        drop(map);
        if first {
            timers.cond.notify_one();
        }
        key
    }

    pub(super) fn remove(key: Key) {
        let entry = lock(timers()).0.remove(&key);
        drop(entry);
    }

    fn run(timers: &'static Timers) {
        let mut map = lock(timers);
        loop {
            let now = Instant::now();
            let next = map.0.first_key_value().map(|(k, _)| k.0);
            match next {
                Some(at) if at <= now => {
                    let (_, ctx) = map.0.pop_first().expect("the first entry is there");
                    drop(map);
                    if let Some(ctx) = ctx.upgrade() {
                        ctx.cancel_with(DEADLINE);
                    }
                    map = lock(timers);
                }
                Some(at) => {
                    map = match timers.cond.wait_timeout(map, at - now) {
                        Ok((map, _)) => map,
                        Err(e) => e.into_inner().0,
                    }
                }
                None => map = timers.cond.wait(map).unwrap_or_else(|e| e.into_inner()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_that_ends_early_leaves_no_entry_behind() {
        let before = deadline_thread::len();
        let contexts: Vec<_> = (0..1000)
            .map(|_| Context::with_timeout(Duration::from_secs(3600)))
            .collect();
        let children: Vec<_> = contexts
            .iter()
            .map(|c| c.child_with_timeout(Duration::from_secs(60)))
            .collect();
        assert_eq!(deadline_thread::len(), before + 2000);
        // Half cancelled, half dropped (cancelling a parent ends its child's entry too).
        for c in &contexts[..500] {
            c.cancel();
        }
        drop(children);
        drop(contexts);
        assert_eq!(deadline_thread::len(), before);
    }
}
