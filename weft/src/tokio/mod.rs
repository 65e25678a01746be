//! tokio-bound futures in tasks (cargo feature `tokio`): [`block_on`] polls a future on the
//! task's stack with a tokio runtime's context entered around each poll, so `tokio::net`,
//! `tokio::time` and what is built on them (reqwest, sqlx, tokio-postgres, tonic, hyper's
//! client) find their reactor; [`spawn_future`] runs a `Send` future on tokio itself and
//! parks the task until it ends.
//!
//! ```
//! // weft = { version = "0.1", features = ["tokio"] }
//! weft::run(|| {
//!     // A task awaits async Rust (reqwest, sqlx, tonic, tokio::net): only the task parks.
//!     let n = weft::tokio::block_on(async { tokio::spawn(async { 21 }).await.unwrap() });
//!     // Async Rust awaits a task: a JoinHandle is a future.
//!     let m = weft::future::block_on(async { weft::spawn(move || n * 2).await.unwrap() });
//!     assert_eq!(m, 42);
//! });
//! ```
//!
//! (`tokio::spawn` needs a tokio runtime's context: `block_on` entered one around the poll.)
//!
//! Build tokio values *inside* the future (an `async` block): tokio's constructors look for
//! the context at once (`tokio::time::sleep(d)` in the argument list of `block_on` panics with
//! "there is no reactor running", before `block_on` runs).
//!
//! Which runtime: the one handed over with
//! [`RuntimeBuilder::tokio_handle`](crate::RuntimeBuilder::tokio_handle), else a multi-thread
//! runtime weft starts at the first use ([`RuntimeBuilder::tokio_threads`](
//! crate::RuntimeBuilder::tokio_threads) threads; one per core, at most 4, by default) and shuts
//! down when the weft runtime drops — or, with [`RuntimeBuilder::tokio_on_workers`](
//! crate::RuntimeBuilder::tokio_on_workers), a current-thread runtime on each weft worker,
//! driven by the worker, so that a future's wakes stay on its task's thread
//! (sched/tokio_local.rs; docs/async.md has what it costs and changes). On a plain thread: the
//! tokio runtime whose context the thread is in, else one weft starts for the process.
//!
//! Owns: nothing of its own: the thread's stack of entered tokio contexts
//! (sched/tokio_context.rs) and which tokio runtime a weft runtime's tasks use
//! (sched/tokio_bridge.rs) are the scheduler's, since `future`'s park (below this layer)
//! leaves the contexts and a weft runtime owns its bridge.
//!
//! Invariants:
//! 1. A poll runs with the context entered and leaves it before returning; `block_on` leaves
//!    the contexts its own polls entered before it parks (sched/tokio_context.rs invariant
//!    1), so no `EnterGuard` of one task is held across its park while another task of the
//!    worker runs.
//! 2. Everything else is `future::block_on`'s (future.rs invariants): the waker holds a
//!    counted task reference, a cancellation drops the future at the park, `!Send` futures
//!    are fine because a started task never changes thread.
//! 3. A `spawn_future` whose task is cancelled (or whose `block_on` unwinds for any reason)
//!    aborts the tokio task: the future is dropped on tokio, at its next poll point.
//!
//! May call: `future`, `sched` (the runtime's bridge), tokio. Called by: users.
//!
//! Why inline polls for `block_on`, and `tokio::spawn` only for `spawn_future`: inline, a
//! request pays one cross-thread wake per wake of its future (tokio's reactor or timer thread
//! unparks the task) and nothing else; spawned, it pays a tokio spawn, tokio's own wakes and
//! one cross-thread wake at the end. Measured by `weft-bench bridge` (100 units back to back,
//! peers alternated in the same run, 2 vCPUs, medians of 5 runs, two runs): CPU per request
//! for one tokio timer, inline 1.93–1.96 µs against spawned 3.02–3.14 µs (a tokio task:
//! 0.68–0.73 µs); for one loopback TCP round trip, inline 4.09–5.41 µs against spawned
//! 5.19–5.37 µs (a tokio task: 2.04–2.43 µs), within this machine's noise. Inline is also the
//! only one of the two that takes `!Send` and borrowing futures.
//! A future woken many times by tokio's threads for one output (a long stream drained to
//! its end) keeps those wakes on tokio when spawned, which `spawn_future` is for (not
//! measured here). The gap to a tokio task is the cross-thread
//! wake, not this module's code (a `block_on` of a ready future: 0.21–0.34 µs, 0.06–0.15 µs
//! of it `future::block_on`'s): docs/async.md, "Which design, and what it costs".

use std::future::{Future, IntoFuture};
use std::pin::{pin, Pin};
use std::task::{Context, Poll};

use ::tokio::runtime::Handle;

use crate::park::ParkReason;
use crate::sched::tokio_context;

/// Polls `future` to completion on the calling task's stack, with the tokio runtime's context
/// entered around each poll, parking the task while it is pending; on a plain thread it blocks
/// the thread. Everything [`crate::future::block_on`] says holds: the future may be `!Send`
/// and borrow, a cancelled task drops it at the park and unwinds, a panic in it comes out here.
///
/// # Panics
/// With the future's panic, or when weft cannot start its tokio runtime.
#[track_caller]
pub fn block_on<F: IntoFuture>(future: F) -> F::Output {
    let handle = current();
    let future = pin!(future.into_future());
    let entered = pin!(InContext {
        handle: &handle,
        future,
    });
    match crate::future::run(entered, None, ParkReason::TokioFuture) {
        Some(output) => output,
        None => unreachable!("weft: block_on without a deadline timed out"),
    }
}

/// Runs `future` as a tokio task (`Handle::spawn`) and parks the calling task (or blocks the
/// plain thread) until it ends; returns its output. Cancelling the weft task aborts the tokio
/// task. For a future that is `Send + 'static` and wakes many times on tokio's threads (a
/// stream consumed to its end): its wakes stay on tokio, and the weft task is woken once.
///
/// # Panics
/// With the future's own panic (resumed here), when the tokio runtime shut down before the
/// future ended, or when weft cannot start its tokio runtime.
#[track_caller]
pub fn spawn_future<F>(future: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handle = current();
    let join = pin!(AbortOnDrop(handle.spawn(future)));
    match crate::future::run(join, None, ParkReason::TokioTask) {
        Some(Ok(output)) => output,
        Some(Err(e)) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Some(Err(e)) => panic!(
            "weft: tokio::spawn_future: the tokio runtime shut down before the future ended \
             ({e})"
        ),
        None => unreachable!("weft: spawn_future without a deadline timed out"),
    }
}

/// The tokio runtime weft uses for the caller: its task's runtime's, or on a plain thread the
/// one whose context the thread is in, else the process's (module doc).
///
/// # Panics
/// When weft cannot start its tokio runtime.
pub fn handle() -> Handle {
    Handle::clone(&current())
}

/// The handle for the caller (module doc, "Which runtime"): a task's is borrowed from its
/// runtime (no reference count touched), a plain thread's owned.
fn current() -> Current {
    if let Some(handle) = crate::sched::current_tokio_handle() {
        return Current::Runtime(handle);
    }
    match Handle::try_current() {
        Ok(handle) => Current::Thread(handle),
        Err(_) => Current::Runtime(crate::sched::tokio_bridge::fallback().handle()),
    }
}

/// A handle from [`current`].
enum Current {
    /// A bridge's: a task's runtime outlives its every run (its worker holds it), the
    /// process's fallback is never dropped.
    Runtime(&'static Handle),
    /// The tokio context the plain thread is in.
    Thread(Handle),
}

impl std::ops::Deref for Current {
    type Target = Handle;
    fn deref(&self) -> &Handle {
        match self {
            Current::Runtime(handle) => handle,
            Current::Thread(handle) => handle,
        }
    }
}

/// A future polled with `handle`'s context entered (invariant 1).
struct InContext<'a, F> {
    handle: &'a Handle,
    future: Pin<&'a mut F>,
}

impl<F: Future> Future for InContext<'_, F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        tokio_context::poll_in(this.handle, || this.future.as_mut().poll(cx))
    }
}

/// A tokio task's join handle that aborts the task when dropped unfinished (invariant 3).
struct AbortOnDrop<T>(::tokio::task::JoinHandle<T>);

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, ::tokio::task::JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort(); // a no-op once the task ended
    }
}
