//! weft: goroutines for Rust.
//!
//! Write plain blocking code — one task per connection, `join`, channels, `sleep` — and weft runs
//! a million such tasks on a handful of OS threads. Each task runs on its own stack: a slot of
//! reserved address space with a guard page, committed by the kernel page by page as the task
//! touches it, so a stack grows without ever being copied, and is compacted to its live bytes
//! while the task waits (see [`stack`]).
//!
//! ```
//! let sum = weft::run(|| {
//!     let handles: Vec<_> = (0..1000u64).map(|i| weft::spawn(move || i * 2)).collect();
//!     handles.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
//! });
//! assert_eq!(sum, 999_000);
//! ```
//!
//! # A tour
//!
//! **Tasks.** [`spawn`] starts a task and returns a [`JoinHandle`]; [`task::Builder`] names
//! it (the name shows in dumps and reports) or sizes its stack; [`yield_now`] lets the worker's
//! other tasks run. [`task::spawn_blocking`] runs a call that cannot park (a file read) on a
//! pool of threads, [`task::compute`] runs a long computation on a pool of one thread per
//! core, and [`task_local!`] is what a thread has in `thread_local!`.
//!
//! **Runtimes.** [`run`] is a whole `main`. A [`Runtime`] (built by [`RuntimeBuilder`]: workers,
//! stack size, monitor, stack policy) runs tasks until dropped; [`Runtime::block_on`] runs a
//! closure that may borrow from the caller; [`Runtime::shutdown_timeout`] stops gracefully
//! and returns a [`ShutdownReport`] naming the tasks it had to cancel.
//!
//! **Channels and `select!`.** Go's channels: [`chan::bounded`] (capacity 0 is a rendezvous),
//! [`chan::unbounded`], and [`select!`] over sends, receives, timeouts and a default:
//!
//! ```
//! use std::time::Duration;
//! weft::run(|| {
//!     let (tx, rx) = weft::chan::bounded::<&str>(1);
//!     weft::spawn(move || tx.send("ready").unwrap());
//!     let got = weft::select! {
//!         recv(rx) -> msg => msg.unwrap(),
//!         after(Duration::from_secs(5)) => "timed out",
//!     };
//!     assert_eq!(got, "ready");
//! });
//! ```
//!
//! **Time.** [`time::sleep`], and channels that fire: [`time::after`], [`time::tick`].
//!
//! **Cancellation and deadlines.** [`context::Context`] is Go's `context.Context`:
//! [`Context::bind`](context::Context::bind) makes every wait inside it — channels, `sleep`,
//! `join`, locks, sockets — end with an error when the context is cancelled or its deadline
//! passes; [`JoinHandle::cancel`] cancels one task. A cancelled task unwinds at its wait, its
//! destructors run ([`task::Cancelled`]).
//!
//! ```
//! use std::time::Duration;
//! use weft::context::{Context, ContextError};
//! let waited = weft::run(|| {
//!     let ctx = Context::with_timeout(Duration::from_millis(10));
//!     ctx.bind(|| weft::time::sleep(Duration::from_secs(60)))
//! });
//! assert_eq!(waited, Err(ContextError::DeadlineExceeded));
//! ```
//!
//! **Locks and friends.** [`sync`]: `Mutex`, `RwLock`, `Condvar`, `WaitGroup`, `Semaphore`,
//! `Barrier`, `Once`, whose waits park the task, not the thread.
//!
//! **Networking.** [`net`]: `TcpListener`, `TcpStream` and `UdpSocket` with std's blocking
//! API, each wait a park on the worker's epoll; `close()` from another task ends a parked
//! `accept` or `read`.
//!
//! **Signals.** [`signal::wait`] parks until SIGINT, SIGTERM or any listed signal arrives;
//! [`signal::Signals`] is Go's `signal.Notify`.
//!
//! **Blocking code you did not write.** With the `interpose` cargo feature, the blocking libc
//! calls that std and sync crates make (`std::net` sockets, `std::thread::sleep`,
//! `ToSocketAddrs`) park the calling task instead of blocking its worker; everywhere else they
//! are libc's own (the `interpose` module).
//!
//! **Calling async code.** [`future::block_on`] polls a future on the task's own stack and
//! parks the task while it is pending; with the `tokio` cargo feature, `weft::tokio::block_on`
//! also enters a tokio runtime around each poll, so reqwest, sqlx, tonic and `tokio::net` work
//! in tasks. The other way, a [`JoinHandle`] is a future (`IntoFuture`): async code hands
//! blocking work to a task and awaits it; channels have `send_async`, `recv_async` and a
//! stream (docs/async.md).
//!
//! **Seeing inside.** [`metrics::snapshot`] counts tasks by state, stack memory and page
//! tables (with [`metrics::Snapshot::to_prometheus`]); [`metrics::stack_profile`] measures each
//! spawn site's stack use. [`debug::dump`] lists every task with what it waits for, its name,
//! spawn site and backtrace (Go's `goroutine?debug=1|2`; also on SIGQUIT);
//! [`debug::serve`] serves `/metrics`, the dumps and a live page; [`debug::trace`] records a
//! scheduler trace for Perfetto.
//!
//! ```
//! use std::time::Duration;
//! weft::run(|| {
//!     let (_tx, rx) = weft::chan::bounded::<()>(0);
//!     weft::task::Builder::new().name("listener").spawn(move || rx.recv()).unwrap();
//!     weft::time::sleep(Duration::from_millis(20));
//!     assert!(weft::metrics::snapshot().tasks_parked >= 1);
//!     let dump = weft::debug::dump().grouped();
//!     assert!(dump.contains("\"listener\": parked [chan receive]"), "{dump}");
//! });
//! ```
//!
//! **Stacks.** [`stack`]: sizes (256 KiB by default, 32 KiB to 1 GiB), guard pages, and the
//! [`stack::StackPolicy`] that reclaims and compacts parked stacks.
//!
//! # Cargo features
//! - `interpose` (off): blocking libc calls park tasks (above). Linux, glibc, x86_64 and
//!   aarch64.
//! - `log` (off): the monitor's reports go to the `log` crate (target `weft::monitor`) when no
//!   [`RuntimeBuilder::monitor_report`] hook is set.
//! - `asan` (off): tells AddressSanitizer about stack switches, for `scripts/asan.sh`.
//! - `tokio` (off): `weft::tokio`, tokio-bound futures in tasks (above), and
//!   [`RuntimeBuilder`]'s `tokio_handle` and `tokio_threads`.
//! - `futures` (off): [`chan::RecvStream`] implements `futures_core::Stream`.
//!
//! # Glossary (weft term = Go term)
//! - **Task** = G, a goroutine: a closure with its own stack ([`task`]).
//! - **Worker** = M bound to a P: an OS thread that runs tasks one at a time ([`sched`]).
//!   weft has no separate P: each worker owns its queues, and its count is fixed at build
//!   time ([`RuntimeBuilder::workers`], `WEFT_WORKERS` like `GOMAXPROCS`).
//! - **Park / unpark** = `gopark` / `goready`: a task blocks without blocking its worker.
//! - **Slot** = a goroutine stack: fixed-size, never moved.
//! - **Context** = `context.Context` ([`context::Context`]): cancellation and deadlines for a
//!   tree of work; [`Context::bind`](context::Context::bind) makes every blocking call inside
//!   it end when the context does. [`JoinHandle::cancel`] cancels one task.
//! - **Task-local** = what a goroutine does not have and a thread has in `thread_local!`
//!   ([`task_local!`]).
//! - **Channel** = `chan` ([`chan::bounded`], [`chan::unbounded`]); [`select!`] = `select`.
//! - **Selector / entry** = `selectDone` / `sudog`: a blocked channel operation, one entry per
//!   channel it waits on ([`chan`]).
//!
//! # Layers
//! Each folder of `src/` is a layer, and so is each file beside this one. A layer names only
//! itself and the layers below it in this list, top first — every `crate::` path counts,
//! tests included — so no import cycle spans two layers. This list is the one place the
//! directions are written: `tests/layering.rs` checks every path of `src/` against it, and
//! `tests/stack_alone.rs` builds the bottom layer and runs its tests without the rest.
//! ```text
//!   debug       task dumps, SIGQUIT, traces, the debug endpoint      ┐ the observers: they
//!   metrics     snapshot, stack profile                              ┘ read every layer
//!   net         TcpListener, TcpStream, UdpSocket, name resolution
//!   interpose   the blocking libc calls of std and sync crates (feature `interpose`)
//!   tokio       tokio-bound futures in tasks (feature `tokio`)
//!   future      block_on: a future polled on the task's own stack
//!   context     Context, bind
//!   time        sleep, after, tick, Timer
//!   signal      Unix signals a task waits for (ctrl_c, wait, Signals)
//!   sync        Mutex, RwLock, Condvar, WaitGroup, Semaphore, Barrier
//!   task        spawn, Builder, JoinHandle, task-locals, spawn_blocking, compute
//!   chan        channels, select!
//!   sched       Runtime, workers and queues, the task core (header, handle, cell, join
//!               slot), parking and waking, the reactor, the blocking pool, the monitor
//!   observe     the seam to the observers: trace events, dump captures, backtraces
//!   park        the park protocol: ParkState, ParkReason
//!   stack       slots, guards, reclaim, compaction, the image and cell arenas, overflow
//!   loom        std's or loom's atomics and locks
//! ```
//! Upward, the runtime reaches its observers only through the seam, `observe`: its trace
//! events are `#[cold]` functions behind one flag that call the recorder a trace installs, a
//! worker answers a dump through the request's own trait object, and what a runtime's build
//! sets off above it (the SIGQUIT dump, the interposed libc calls) comes from a table this
//! crate root defines (`observers` below). Where two parts call each other — a wake queues a
//! task on its worker, a worker runs its tasks through their headers — they share a layer:
//! the task core lives in `sched/`, and `task/` is the public API over it.
//!
//! # Safety model
//! A task that has started runs on the OS thread of its first worker until it ends: only
//! never-started tasks are stolen by idle workers. So thread-locals, `Rc`s shared with them and
//! std `MutexGuard`s may be held across a park (Rust lets the compiler keep a thread-local's
//! address across a function call: rust-lang/rust#136044, which makes moving a started stack
//! unsound). A parked task becomes wakeable only after it has switched out completely.
//! User code runs only inside tasks: a detached task's result and panic payload, and the
//! closure of a task cancelled before it ran, are dropped on the task's own stack. A task that
//! parks while it is panicking keeps its OS thread until woken, since Rust's panic state is per
//! thread (`sched/park.rs`, "Parking while panicking").
//! Overflowing a stack hits its guard page: weft prints the task's id, name, spawn site and
//! stack size, then aborts the process — like Go's "fatal error: stack overflow".

#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]
// Under loom only the protocol cores are built; the rest of their modules is unused there.
#![cfg_attr(loom, allow(dead_code, unused_imports))]

pub(crate) mod loom;

#[cfg(not(loom))]
pub mod chan;
#[cfg(loom)]
#[path = "chan/core.rs"]
pub(crate) mod chan_core;
#[cfg(loom)]
#[path = "chan/spin_lock.rs"]
pub(crate) mod chan_spin_lock;
#[cfg(not(loom))]
pub mod context;
#[cfg(not(loom))]
pub mod debug;
#[cfg(not(loom))]
pub mod future;
#[cfg(all(feature = "interpose", not(loom)))]
#[cfg_attr(docsrs, doc(cfg(feature = "interpose")))]
pub mod interpose;
#[cfg(loom)]
#[path = "sched/task/join.rs"]
pub(crate) mod join;
#[cfg(not(loom))]
pub mod metrics;
#[cfg(not(loom))]
pub mod net;
#[cfg(not(loom))]
pub(crate) mod observe;
#[cfg(loom)]
#[path = "stack/page_count.rs"]
pub(crate) mod page_count;
#[cfg(not(loom))]
pub mod park;
#[cfg(loom)]
pub(crate) mod park;
#[cfg(not(loom))]
pub mod sched;
#[cfg(loom)]
pub(crate) mod sched;
#[cfg(not(loom))]
pub mod signal;
#[cfg(not(loom))]
pub mod stack;
#[cfg(not(loom))]
pub mod sync;
#[cfg(loom)]
#[path = "sync/sema.rs"]
pub(crate) mod sync_sema;
#[cfg(loom)]
#[path = "sync/waitgroup.rs"]
pub(crate) mod sync_waitgroup;
// `super::wait_queue` of the two above, as in `sync`.
#[cfg(not(loom))]
pub mod task;
#[cfg(not(loom))]
pub mod time;
#[cfg(all(feature = "tokio", not(loom)))]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub mod tokio;
#[cfg(loom)]
#[path = "sync/wait_queue.rs"]
pub(crate) mod wait_queue;
#[cfg(loom)]
#[path = "stack/write_once.rs"]
pub(crate) mod write_once;

#[cfg(not(loom))]
pub use sched::{EnterGuard, Handle, Runtime, RuntimeBuilder, ShutdownReport, DEFAULT_TIMER_SLACK};
#[cfg(not(loom))]
pub use task::{spawn, yield_now, JoinHandle};

/// The observers a runtime's build sets off (observe/mod.rs `Observers`, invariant 2): the
/// crate root alone names both the runtime's seam and the layers above it.
#[cfg(not(loom))]
#[export_name = "__weft_0_1_observers"]
fn observers() -> &'static observe::Observers {
    static OBSERVERS: observe::Observers = observe::Observers {
        install_sigquit: debug::install_sigquit,
        #[cfg(feature = "interpose")]
        init_interpose: interpose::init,
        #[cfg(not(feature = "interpose"))]
        init_interpose: || {},
        unfinished_tasks: debug::unfinished_tasks,
    };
    &OBSERVERS
}

/// Runs `f` as a task on a new runtime with the default settings, waits for it, and shuts the
/// runtime down: `weft::run(|| { ... })` is the whole `main` of a weft program.
///
/// `f` may borrow from the caller (see [`Runtime::block_on`]):
///
/// ```
/// let words = vec!["weft", "runs", "tasks"];
/// let lengths = weft::run(|| {
///     // `words` is borrowed; the tasks spawned inside still own what they capture.
///     let handles: Vec<_> = words.iter().map(|&w| weft::spawn(move || w.len())).collect();
///     handles.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
/// });
/// assert_eq!(lengths, [4, 4, 5]);
/// ```
///
/// Called inside a task, it starts a runtime of its own and parks the task until `f` ends.
///
/// # Panics
/// If the runtime cannot start, or with `f`'s own panic (its payload, after the task has
/// ended; see [`Runtime::block_on`]).
#[cfg(not(loom))]
#[track_caller]
pub fn run<F, T>(f: F) -> T
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    let runtime = match Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => panic!("weft: cannot start a runtime: {e}"),
    };
    runtime.block_on(f)
}

/// The README's snippets, compiled and run as doc tests: `cargo test -p weft --features
/// interpose,tokio --doc ReadmeDoctests` (scripts/test.sh). Its "Calling async code" snippet
/// needs the `tokio` feature.
#[cfg(all(doctest, feature = "tokio"))]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;

#[cfg(test)]
mod tests;
