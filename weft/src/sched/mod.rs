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
//! the monitor has seen the victim stuck in one task (queue.rs, `defers_to`).
//!
//! Invariants:
//! 1. Only never-started tasks are in a stealable queue (`new_tasks`, the injector); a woken or
//!    yielded task goes back to its home worker only (sched/task/mod.rs invariant 1).
//! 2. A worker runs at most one task at a time, and the worker thread's own code never runs
//!    on a task's stack.
//! 3. No wakeup is lost between a worker deciding to sleep and work arriving (idle.rs). A
//!    spawn onto the spawning worker's own deque is work for that worker, which is awake; it
//!    wakes another worker only to share it, once per burst (idle.rs, "Spawns").
//!
//! The task core is here too (task/: the header, the handle, the cell, the join slot), and
//! parking the caller (park.rs): a wake queues a task on its worker and a worker runs its
//! tasks through their headers, so they call each other, inside this one layer (lib.rs,
//! "Layers"). `task/`, one layer up, is the public API over them.
//!
//! May call: `stack`, `park`. Called by: `task` (spawn, park, yield, the pools), every layer
//! above (parking, waking, the reactor), the public API (`Runtime`, `Handle`).
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
mod buf_ring;
#[cfg(not(loom))]
pub(crate) mod coop;
#[cfg(not(loom))]
pub(crate) mod counters;
#[cfg(not(loom))]
mod dump;
#[cfg(not(loom))]
mod epoll;
mod idle;
pub(crate) mod inbox;
#[cfg(not(loom))]
pub(crate) mod io;
#[cfg(not(loom))]
mod monitor;
#[cfg(not(loom))]
mod monitor_sample;
#[cfg(not(loom))]
pub(crate) mod park;
#[cfg(not(loom))]
mod pool_slot;
#[cfg(not(loom))]
pub(crate) mod profile;
#[cfg(not(loom))]
mod queue;
#[cfg(not(loom))]
mod scoped;
#[cfg(not(loom))]
mod shutdown;
#[cfg(not(loom))]
mod spawn;
#[cfg(not(loom))]
pub(crate) mod stats;
#[cfg(not(loom))]
pub(crate) mod task;
#[cfg(not(loom))]
mod timers;
#[cfg(all(not(loom), feature = "tokio"))]
pub(crate) mod tokio_bridge;
#[cfg(all(not(loom), feature = "tokio"))]
pub(crate) mod tokio_context;
#[cfg(all(not(loom), feature = "tokio"))]
mod tokio_local;
#[cfg(not(loom))]
pub(crate) mod uring;
#[cfg(not(loom))]
pub(crate) mod wake_at;
#[cfg(not(loom))]
mod wheel;
#[cfg(not(loom))]
mod worker;

#[cfg(all(test, not(loom)))]
pub(crate) use park::futures_waiting_here;
#[cfg(not(loom))]
pub(crate) use park::suspend_current;
#[cfg(all(not(loom), feature = "interpose"))]
pub(crate) use park::Cancellation;
#[cfg(all(not(loom), feature = "interpose"))]
pub(crate) use park::{cancellation_as_error, caught_cancellation};
pub(crate) use park::{park_current, Waiter};
#[cfg(not(loom))]
pub(crate) use park::{
    park_current_cancellable, park_current_on_future, park_current_until, park_current_until_timer,
    unwind_if_cancelled,
};
#[cfg(not(loom))]
pub(crate) use pool_slot::PoolSlot;
#[cfg(not(loom))]
pub(crate) use spawn::spawn;
#[cfg(not(loom))]
pub(crate) use task::{interrupt, locals, unpark_ptr, Header, Suspend};
#[cfg(not(loom))]
pub(crate) use timers::Slack;
#[cfg(all(not(loom), feature = "tokio"))]
pub(crate) use worker::current_tokio_handle;
#[cfg(not(loom))]
pub(crate) use worker::{current_compute_slot, current_task, current_task_ptr, current_worker_of};

#[cfg(loom)]
pub(crate) use idle::{RestFlag, SleepFlags};

/// Under loom (src/tests/loom_*.rs), every waiter is a model thread and a park is the
/// model's: park.rs's protocol cores are modelled, not the scheduler around them.
#[cfg(loom)]
pub(crate) mod park {
    use crate::park::ParkReason;

    #[derive(Debug, Clone)]
    pub(crate) struct Waiter(loom::thread::Thread);

    impl Waiter {
        pub(crate) fn current() -> Waiter {
            Waiter(loom::thread::current())
        }

        pub(crate) fn wake(self) {
            self.0.unpark();
        }
    }

    /// The reason is not kept: no dump runs there.
    pub(crate) fn park_current(_reason: ParkReason) {
        loom::thread::park();
    }
}

#[cfg(not(loom))]
mod runtime;
#[cfg(not(loom))]
pub use monitor::{BlockedOn, MonitorReport, StuckActivity};
#[cfg(not(loom))]
pub(crate) use runtime::Shared;
#[cfg(not(loom))]
pub use runtime::{EnterGuard, Handle, Runtime, RuntimeBuilder, DEFAULT_TIMER_SLACK};
#[cfg(not(loom))]
pub use shutdown::{CancelledTask, ShutdownReport};
