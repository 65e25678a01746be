//! weft: goroutines for Rust.
//!
//! Write plain blocking code — one task per connection, `join`, `park`, `sleep` — and weft runs
//! a million such tasks on a handful of OS threads. Each task runs on its own stack: a slot of
//! reserved address space with a guard page, committed by the kernel page by page as the task
//! touches it, so a stack grows without ever being copied (see [`stack`]).
//!
//! ```
//! let sum = weft::run(|| {
//!     let handles: Vec<_> = (0..1000u64).map(|i| weft::spawn(move || i * 2)).collect();
//!     handles.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
//! });
//! assert_eq!(sum, 999_000);
//! ```
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
//! [`debug`] (task dumps, SIGQUIT, the debug endpoint) and [`metrics`] sit beside the top:
//! they read every layer and are called by none.
//! ```text
//!   chan (channels, select!) ─┐
//!   sync (Mutex, WaitGroup…)  ─┼─► park
//!   time (sleep, after, tick) ─┘
//!   context (Context, bind)   ──► chan, park, task
//!   future (block_on), tokio (feature: block_on, spawn_future) ──► park, task, sched
//!   task (spawn, JoinHandle, Builder) ─┐
//!   park (Waiter, park/wake protocol) ─┼─► sched (Runtime, workers, queues) ─► stack (slots, guards, overflow)
//!   metrics (snapshot, stack profile: sums what sched and stack count; its counters call nothing)
//! ```
//!
//! # Async code
//! [`future::block_on`] polls a future on a task's own stack and parks the task while it is
//! pending; with the `tokio` cargo feature, `weft::tokio::block_on` also enters a tokio
//! runtime around each poll, so reqwest, sqlx, tonic and `tokio::net` work in tasks. The other
//! way, a [`JoinHandle`] is a future (`IntoFuture`), so async code can hand blocking work to a
//! task and await it, and channels have `send_async`, `recv_async` and a stream
//! (docs/async.md).
//!
//! # Blocking code you did not write
//! With the `interpose` cargo feature, the blocking libc calls that std and sync crates make
//! (`std::net` sockets, `std::thread::sleep`, `ToSocketAddrs`) park the calling task instead of
//! blocking its worker; everywhere else they are libc's own (the `interpose` module, README).
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
//! thread (`sched/worker.rs`, "Parking while panicking").
//! Overflowing a stack hits its guard page: weft prints the task's id, name, spawn site and
//! stack size, then aborts the process — like Go's "fatal error: stack overflow".

#![warn(missing_docs)]
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
pub mod interpose;
#[cfg(loom)]
#[path = "task/join.rs"]
pub(crate) mod join;
#[cfg(not(loom))]
pub mod metrics;
#[cfg(not(loom))]
pub mod net;
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
pub mod stack;
#[cfg(not(loom))]
pub mod sync;
#[cfg(loom)]
#[path = "sync/sema.rs"]
pub(crate) mod sync_sema;
#[cfg(loom)]
#[path = "sync/waitgroup.rs"]
pub(crate) mod sync_waitgroup;
#[cfg(not(loom))]
pub mod task;
#[cfg(not(loom))]
pub mod time;
#[cfg(all(feature = "tokio", not(loom)))]
pub mod tokio;

#[cfg(not(loom))]
pub use sched::{EnterGuard, Handle, Runtime, RuntimeBuilder, DEFAULT_TIMER_SLACK};
#[cfg(not(loom))]
pub use task::{spawn, yield_now, JoinHandle};

/// Runs `f` as a task on a new runtime with the default settings, waits for it, and shuts the
/// runtime down: `weft::run(|| { ... })` is the whole `main` of a weft program.
///
/// # Panics
/// If the runtime cannot start, or with `f`'s own panic.
#[cfg(not(loom))]
#[track_caller]
pub fn run<F, T>(f: F) -> T
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let runtime = match Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => panic!("weft: cannot start a runtime: {e}"),
    };
    runtime.block_on(f)
}

#[cfg(test)]
mod tests;
