//! The scheduler: the runtime, its workers, their queues, and how a task is spawned, run,
//! parked and woken.
//!
//! Owns: [`Runtime`] and its builder, [`Handle`], the state every worker shares (`Shared`),
//! each worker's `Remote` (what other threads may touch of it), and the thread-locals that
//! say which worker and which task the current code runs on.
//!
//! ```text
//!   spawn on a worker ──► its `new_tasks` deque ◄── other workers steal (never-started tasks only)
//!   spawn elsewhere   ──► shared injector      ◄── every worker takes batches
//!   wake on the home worker  ──► its `ready` queue (not stealable)
//!   wake from another thread ──► the home worker's `Remote::woken`, then notify if it sleeps
//! ```
//!
//! Lasting load (started tasks never move) is kept even by where never-started tasks start:
//! a spawn on a worker with more live tasks than another goes to that one's inbox, and a
//! thief with more live tasks than its victim leaves the victim's new tasks to it, unless
//! the monitor has seen the victim stuck in one task (worker.rs, `defers_to`).
//!
//! Invariants:
//! 1. Only never-started tasks are in a stealable queue (`new_tasks`, the injector); a woken or
//!    yielded task goes back to its home worker only (task/mod.rs invariant 1).
//! 2. A worker runs at most one task at a time, and the worker thread's own code never runs
//!    on a task's stack.
//! 3. No wakeup is lost between a worker deciding to sleep and work arriving (idle.rs). A
//!    spawn onto the spawning worker's own deque is work for that worker, which is awake; it
//!    wakes another worker only to share it, once per burst (idle.rs, "Spawns").
//!
//! May call: `task`, `stack`, `park`. Called by: `task` (spawn, park, yield), the public API.
//!
//! Why per-worker `ready` queues that cannot be stolen from: a started task holds the addresses
//! of its thread's thread-locals in registers and on its stack (rust-lang/rust#136044), and
//! possibly `!Send` values; moving it is unsound. The price is that a worker stuck in a long
//! computation delays the tasks that live on it; the work-stealing of never-started tasks keeps
//! new work flowing to every core.

#[cfg(not(loom))]
pub(crate) mod activity;
#[cfg(not(loom))]
pub(crate) mod blocking;
#[cfg(not(loom))]
pub(crate) mod compute;
#[cfg(not(loom))]
pub(crate) mod coop;
#[cfg(not(loom))]
mod epoll;
mod idle;
#[cfg(not(loom))]
pub(crate) mod io;
#[cfg(not(loom))]
mod monitor;
#[cfg(not(loom))]
mod monitor_sample;
#[cfg(not(loom))]
mod scoped;
#[cfg(not(loom))]
mod shutdown;
#[cfg(not(loom))]
pub(crate) mod stats;
#[cfg(not(loom))]
mod worker;

#[cfg(all(not(loom), feature = "tokio"))]
pub(crate) use worker::current_tokio_bridge;
#[cfg(all(not(loom), feature = "interpose"))]
pub(crate) use worker::{cancellation_as_error, caught_cancellation};
#[cfg(not(loom))]
pub(crate) use worker::{
    current_task, current_task_ptr, current_worker_of, park_current_task,
    park_current_task_cancellable, park_current_task_until, schedule_woken, suspend_current,
    unwind_if_cancelled_now, wake_blocked, with_spawner,
};

#[cfg(loom)]
pub(crate) use idle::{RestFlag, SleepFlags};

#[cfg(not(loom))]
mod runtime;
#[cfg(not(loom))]
pub use monitor::{BlockedOn, MonitorReport, StuckActivity};
#[cfg(not(loom))]
pub use runtime::{EnterGuard, Handle, Runtime, RuntimeBuilder, DEFAULT_TIMER_SLACK};
#[cfg(not(loom))]
pub(crate) use runtime::{Remote, Shared};
#[cfg(not(loom))]
pub use shutdown::{CancelledTask, ShutdownReport};
