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
//!   context     Context, bind
//!   time        sleep, after, tick, Timer
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
//! thread (`sched/park.rs`, "Parking while panicking").
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
#[cfg(all(feature = "interpose", not(loom)))]
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

#[cfg(not(loom))]
pub use sched::{EnterGuard, Handle, Runtime, RuntimeBuilder, DEFAULT_TIMER_SLACK};
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
    };
    &OBSERVERS
}

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
