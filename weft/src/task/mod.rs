//! Tasks, the public API: spawning ([`spawn`], [`Builder`]), joining ([`JoinHandle`]), the
//! [`Task`] handle, parking and yielding, task-locals ([`task_local!`](crate::task_local)),
//! and handing work to the runtime's blocking and compute pools.
//!
//! Owns: [`Builder`], the task-local keys (`local.rs`) and the compute pool's queue
//! (`compute.rs`). A task itself — its header and handle, its cell with the closure and the
//! join slot, its task-local storage — is the scheduler's task core (sched/task/), whose
//! invariants this layer relies on; [`Task`], [`TaskId`], [`JoinHandle`] and [`Cancelled`]
//! are re-exported from there.
//!
//! Invariants: those of the core (sched/task/mod.rs) and of its pools (sched/blocking.rs,
//! compute.rs); this layer keeps no state a task shares.
//!
//! May call: `sched` (spawning, the current task, parking, the pools), `park` (reasons),
//! `chan` (the compute pool's queue). Called by: users, and every layer above.
//!
//! Why the core is not here: a wake queues a task on its home worker, and a worker resumes,
//! finishes and frees its tasks through their headers and cells, so the two call each other;
//! as in tokio (`runtime::task` under its `task` API), the cycle stays inside the
//! scheduler's folder, and this API names only the layers below it (lib.rs, "Layers").

mod compute;
pub(crate) mod local;

pub use crate::sched::task::join::{JoinFuture, JoinHandle};
pub use crate::sched::task::{Cancelled, Task, TaskId};
pub use local::LocalKey;

use std::io;
use std::panic::Location;

use crate::park::ParkReason;
use crate::sched::{self, Suspend};

/// True if `payload` — a join error, or an unwind caught with `catch_unwind` — says the task
/// was cancelled ([`Cancelled`], or a cancelled [`Context`](crate::context::Context) bound
/// with `bind`), not that it panicked.
pub fn is_cancelled(payload: &(dyn std::any::Any + Send)) -> bool {
    payload.is::<Cancelled>() || sched::locals::is_scope_unwind(payload)
}

/// The task this code runs in.
///
/// # Panics
/// Outside a task (on a plain OS thread, or a worker between tasks): use [`try_current`].
pub fn current() -> Task {
    try_current().expect("weft::task::current() called outside a weft task")
}

/// The task this code runs in, or `None` on a plain OS thread.
pub fn try_current() -> Option<Task> {
    sched::current_task()
}

/// Blocks the current task until its [`Task::unpark`] is called, like `std::thread::park`.
///
/// Only the task parks: its worker runs other tasks meanwhile. As with std, a wakeup may be
/// spurious: call it in a loop that checks a condition. On a plain OS thread this is
/// `std::thread::park`.
pub fn park() {
    sched::park_current(ParkReason::Park);
}

/// Like [`park`], but returns after `timeout` at the latest, like
/// `std::thread::park_timeout`.
pub fn park_timeout(timeout: std::time::Duration) {
    match std::time::Instant::now().checked_add(timeout) {
        Some(deadline) => sched::park_current_until(deadline, ParkReason::ParkTimeout),
        None => sched::park_current(ParkReason::ParkTimeout),
    }
}

/// Lets the worker run other ready tasks before this one continues. On a plain OS thread this
/// is `std::thread::yield_now`.
pub fn yield_now() {
    if !sched::suspend_current(Suspend::Yield) {
        std::thread::yield_now();
    }
}

/// Task factory, like `std::thread::Builder`: a name and a stack size for one spawn.
///
/// ```
/// weft::run(|| {
///     let handle = weft::task::Builder::new()
///         .name("resolver") // shown in dumps, monitor reports and shutdown reports
///         .stack_size(1 << 20) // a deep task: 1 MiB
///         .spawn(|| weft::task::current().name().map(str::to_owned))
///         .unwrap();
///     assert_eq!(handle.join().unwrap().as_deref(), Some("resolver"));
/// });
/// ```
#[derive(Debug, Default, Clone)]
pub struct Builder {
    name: Option<String>,
    stack_size: Option<usize>,
}

impl Builder {
    /// A builder with the runtime's defaults.
    pub fn new() -> Builder {
        Builder::default()
    }

    /// Names the task: shown in the stack-overflow report and by [`Task::name`].
    pub fn name(mut self, name: impl Into<String>) -> Builder {
        self.name = Some(name.into());
        self
    }

    /// The task's stack size in bytes, guard page included; rounded up to a power of two of at
    /// least 32 KiB (see `weft::stack`). Default: the runtime's, 256 KiB unless set.
    pub fn stack_size(mut self, bytes: usize) -> Builder {
        self.stack_size = Some(bytes);
        self
    }

    /// Spawns `f` as a new task on the current runtime and returns its handle.
    ///
    /// # Errors
    /// An invalid stack size; on kernels without `MADV_GUARD_INSTALL`, also when no stack can
    /// be had: exhausted address space or the `vm.max_map_count` limit (the error names it).
    /// Elsewhere the task takes its stack when it starts, from its worker's warm slots (so a
    /// burst of short tasks reuses a few stacks instead of touching fresh ones); if none can
    /// be had then, the task does not run, its `join` returns an error that says why, and
    /// the reason is printed on stderr.
    /// When the runtime is in the grace period of [`crate::Runtime::shutdown_timeout`]: new
    /// tasks are refused then (the error says so).
    ///
    /// # Panics
    /// Outside a runtime: in a task, in [`crate::Runtime::block_on`], or under
    /// [`crate::Handle::enter`].
    #[track_caller]
    pub fn spawn<F, T>(self, f: F) -> io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        sched::spawn(None, self.name, self.stack_size, Location::caller(), f)
    }

    /// Like [`Builder::spawn`], but onto the runtime behind `handle`, whatever runtime (if
    /// any) the caller runs in; the default stack size is that runtime's.
    ///
    /// # Errors
    /// As [`Builder::spawn`].
    #[track_caller]
    pub fn spawn_on<F, T>(self, handle: &crate::Handle, f: F) -> io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        sched::spawn(
            Some(handle),
            self.name,
            self.stack_size,
            Location::caller(),
            f,
        )
    }
}

/// Spawns `f` as a new task on the current runtime, like `std::thread::spawn`.
///
/// The closure must be `Send`: a task that has not started may be stolen by any worker. Once
/// started, it stays on its worker's thread, so it may hold `!Send` values across parks:
///
/// ```
/// let n = weft::run(|| {
///     weft::spawn(|| {
///         let shared = std::rc::Rc::new(5); // not Send, held across a yield
///         weft::yield_now();
///         *shared
///     })
///     .join()
///     .unwrap()
/// });
/// assert_eq!(n, 5);
/// ```
///
/// ```compile_fail
/// let shared = std::rc::Rc::new(5);
/// weft::run(move || weft::spawn(move || *shared).join().unwrap());
/// ```
///
/// # Panics
/// Outside a runtime (see [`Builder::spawn`]), or when no stack can be had.
#[track_caller]
pub fn spawn<F, T>(f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    match Builder::new().spawn(f) {
        Ok(handle) => handle,
        Err(e) => panic!("weft: failed to spawn task: {e}"),
    }
}

/// Runs `f` on the runtime's pool of blocking threads while the calling task parks, and
/// returns its result: the way to make a call that blocks its OS thread (`getaddrinfo`, file
/// I/O, a blocking C library) without stalling the worker. For computation use [`compute`]:
/// the blocking pool starts a thread for every call in flight, which suits calls that wait,
/// not ones that keep a core busy. A panic in `f`
/// resumes in the caller. On a plain OS thread, `f` runs right there.
///
/// Usable until the runtime's shutdown has finished, so the destructors of tasks cancelled at
/// shutdown may call it too.
///
/// ```
/// let size = weft::run(|| {
///     // A file read cannot park: it runs on a pool thread while this task parks.
///     weft::task::spawn_blocking(|| std::fs::metadata(".").map(|m| m.len()))
/// });
/// assert!(size.is_ok());
/// ```
///
/// # Panics
/// With `f`'s panic, or when the runtime is out of OS threads
/// ([`crate::RuntimeBuilder::max_threads`]) or cannot start one; [`try_spawn_blocking`]
/// returns those as errors.
#[track_caller]
pub fn spawn_blocking<F, T>(f: F) -> T
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    match try_spawn_blocking(f) {
        Ok(value) => value,
        Err(e) => panic!("{e}"),
    }
}

/// Like [`spawn_blocking`], but running out of OS threads is an error, not a panic.
///
/// # Errors
/// When the runtime reached its `max_threads` or cannot start a thread.
pub fn try_spawn_blocking<F, T>(f: F) -> io::Result<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    sched::blocking::run(f)
}

/// Runs the CPU-heavy `f` on the runtime's compute pool — one thread per core, fed by a
/// bounded queue — while the calling task parks, and returns its result. A panic in `f`
/// resumes in the caller. On a plain OS thread, `f` runs right there.
///
/// Which to use:
/// - a short computation (microseconds): call it in the task;
/// - a long one (hashing a file's bytes, compressing, an image filter): `compute`, so the
///   worker goes on running other tasks and their timers, and a burst of jobs shares the
///   cores instead of each getting a thread;
/// - a call that *waits* (a blocking syscall or C library, `getaddrinfo`, file I/O):
///   [`spawn_blocking`], whose threads are many because they mostly sleep.
///
/// Back-pressure: when every pool thread is busy and the queue (two jobs per thread) is
/// full, the caller parks until a slot frees up. A caller cancelled while it waits for the
/// result does not stop the job (a thread cannot be interrupted mid-computation); its
/// result is dropped on the pool thread.
///
/// ```
/// let sum = weft::run(|| {
///     let jobs: Vec<_> = (0..8u64)
///         .map(|i| weft::spawn(move || weft::task::compute(move || (0..100_000 * i).sum::<u64>())))
///         .collect();
///     jobs.into_iter().map(|j| j.join().unwrap()).sum::<u64>()
/// });
/// assert!(sum > 0);
/// ```
///
/// # Panics
/// With `f`'s panic, or when the runtime is shutting down or cannot start its pool threads;
/// [`try_compute`] returns those as errors.
#[track_caller]
pub fn compute<F, T>(f: F) -> T
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    match try_compute(f) {
        Ok(value) => value,
        Err(e) => panic!("{e}"),
    }
}

/// Like [`compute`], but a pool that cannot take the job is an error, not a panic.
///
/// # Errors
/// When the runtime is shutting down, or a pool thread cannot be started.
pub fn try_compute<F, T>(f: F) -> io::Result<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    compute::run(f)
}
