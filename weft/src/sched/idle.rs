//! The sleep handshake between a worker and whoever hands it work: no wakeup is lost, and a
//! busy worker is never sent a syscall.
//!
//! Owns: two flags per worker.
//!
//! The race it closes (numbered as the code cites them):
//! 1. The waker publishes its work (queue push), sets `pushed`, then issues a SeqCst fence.
//! 2. The waker then reads `sleeping`; if it is true and its swap to false succeeds, it
//!    notifies the worker's poller, whose notification is sticky (a notify before the wait
//!    makes the wait return at once).
//! 3. The worker about to sleep sets `sleeping`, issues a SeqCst fence, then re-checks
//!    `pushed` and every queue; only if all are empty does it wait.
//!
//! Each side stores, fences, then loads what the other side stored: by the fences' total
//! order, either the worker sees the work in step 3 or the waker sees `sleeping` in step 2.
//!
//! Spawns: a task spawned onto its own worker's deque is work for that worker first, and the
//! worker is awake (it runs the spawning task) and checks its deque before it sleeps, so no
//! handshake is needed for the task to run; steps 1–2 (`Shared::wake_idle_worker`) only bring
//! another worker to share the work. So a burst of spawns in one resume does them for its
//! first spawn and one in every `WAKE_CHECK_EVERY` after it (sched/spawn.rs,
//! `Spawner::submit`), not per spawn. Work handed to another worker (`push_woken`, `place`)
//! and spawns from outside (the injector) always do the handshake.
//! Fences rather than SeqCst loads and stores, because loom checks fences exactly (it found a
//! lost wakeup in a version whose pre-check load was Relaxed). Checked by
//! `src/tests/loom_idle.rs`.

use crate::loom::sync::atomic::{fence, AtomicBool, Ordering};

#[derive(Debug, Default)]
pub(crate) struct SleepFlags {
    /// The worker is (about to be) blocked in its poller.
    sleeping: AtomicBool,
    /// Work was pushed to the worker's remote queue since it last drained it.
    pushed: AtomicBool,
}

impl SleepFlags {
    pub(crate) fn new() -> Self {
        SleepFlags {
            sleeping: AtomicBool::new(false),
            pushed: AtomicBool::new(false),
        }
    }

    /// Waker, after pushing work (steps 1–2): true if the caller must notify the worker.
    pub(crate) fn work_pushed(&self) -> bool {
        self.pushed.store(true, Ordering::Relaxed);
        // Step 1's fence: pairs with the one in `prepare_sleep`.
        fence(Ordering::SeqCst);
        self.wake_if_sleeping()
    }

    /// Step 2 alone, for work published elsewhere (a shared queue) and followed by the
    /// caller's own SeqCst fence: true if the caller must notify the worker.
    pub(crate) fn wake_if_sleeping(&self) -> bool {
        // The plain load keeps a busy worker's cache line shared (no write while it is
        // awake); the swap makes exactly one waker notify.
        self.sleeping.load(Ordering::Relaxed) && self.sleeping.swap(false, Ordering::AcqRel)
    }

    /// Worker: takes the "work was pushed" mark; true if it should drain its remote queue.
    /// (The queue's own lock orders the items; the flag only says where to look.)
    pub(crate) fn take_pushed(&self) -> bool {
        self.pushed.load(Ordering::Relaxed) && self.pushed.swap(false, Ordering::Relaxed)
    }

    /// Worker, before its final check (step 3): every check after this call sees work that
    /// was pushed before a waker read `sleeping` as false.
    pub(crate) fn prepare_sleep(&self) {
        self.sleeping.store(true, Ordering::Relaxed);
        // Step 3's fence: pairs with the one in `work_pushed` or `Shared::wake_idle_worker`.
        fence(Ordering::SeqCst);
    }

    /// Worker, in its final check (step 3): was work pushed meanwhile?
    pub(crate) fn pushed_pending(&self) -> bool {
        self.pushed.load(Ordering::Relaxed)
    }

    /// Whether the worker is (about to be) asleep; for the monitor's rest (monitor.rs).
    pub(crate) fn is_sleeping(&self) -> bool {
        self.sleeping.load(Ordering::Relaxed)
    }

    /// Worker, awake again (after the wait, or when the final check found work).
    pub(crate) fn end_sleep(&self) {
        self.sleeping.store(false, Ordering::Relaxed);
    }
}

/// The monitor's rest (sched/monitor.rs, "Idle"): the monitor stops ticking while every worker
/// sleeps, and the first worker to wake up ends the rest. The same store, fence, load on both
/// sides as the handshake above:
/// - the monitor stores `resting`, fences, then reads every worker's `sleeping`
///   ([`RestFlag::try_rest`], and [`RestFlag::still_all_asleep`] after a rest timed out);
/// - a waking worker stores `sleeping = false` ([`SleepFlags::end_sleep`]), fences, then reads
///   `resting` ([`RestFlag::worker_awake`]).
///
/// Either the monitor sees the worker awake, or the worker sees the rest and ends it. Checked
/// by `src/tests/loom_idle.rs`.
#[derive(Debug, Default)]
pub(crate) struct RestFlag {
    resting: AtomicBool,
}

impl RestFlag {
    /// Monitor: announces a rest, then asks `all_asleep`; false (and no rest) if a worker is
    /// awake.
    pub(crate) fn try_rest(&self, all_asleep: impl Fn() -> bool) -> bool {
        self.resting.store(true, Ordering::Relaxed);
        if self.still_all_asleep(all_asleep) {
            return true;
        }
        self.resting.store(false, Ordering::Relaxed);
        false
    }

    /// Monitor, resting (after `try_rest`, or after a rest timed out with `resting` still
    /// set): whether every worker still sleeps; if so, a worker that wakes will end the rest.
    pub(crate) fn still_all_asleep(&self, all_asleep: impl Fn() -> bool) -> bool {
        // Pairs with the fence in `worker_awake`.
        fence(Ordering::SeqCst);
        all_asleep()
    }

    /// Monitor: whether the rest goes on (no worker ended it).
    pub(crate) fn resting(&self) -> bool {
        self.resting.load(Ordering::Acquire)
    }

    /// Monitor: the rest is over.
    pub(crate) fn end_rest(&self) {
        self.resting.store(false, Ordering::Relaxed);
    }

    /// Worker, after `SleepFlags::end_sleep`: true if it ended a rest and must unpark the
    /// monitor.
    pub(crate) fn worker_awake(&self) -> bool {
        // Pairs with the fence in `still_all_asleep`.
        fence(Ordering::SeqCst);
        self.resting.load(Ordering::Relaxed) && self.resting.swap(false, Ordering::AcqRel)
    }
}
