//! Time: sleeping tasks, and the deadlines of parked tasks.
//!
//! Owns: the public sleep functions. The timers themselves live in each worker (`sched`),
//! because a task never leaves its worker: a sleeping task's deadline is an entry in its home
//! worker's timer map, fired by that worker without any lock or cross-thread traffic.
//!
//! Invariants:
//! 1. A timer entry is removed when its task returns from the park it guarded, whether the
//!    deadline fired or something else woke it: waits that end early leave nothing behind.
//! 2. An idle worker sleeps in its poller with the next deadline as timeout; a busy one checks
//!    its deadlines every 61 tasks and whenever it runs out of work.
//!
//! May call: `park`, `sched`. Called by: users, `chan`, `sync`, `net` (deadlines).
//!
//! Why an ordered map (`BTreeMap<(deadline, sequence), Task>`) per worker rather than a timer
//! wheel: removal of a cancelled deadline must be exact (a `recv_timeout` loop that always
//! succeeds early would otherwise grow a heap without bound), a map gives insert, remove and
//! "earliest" in O(log n) with ≈40 B per entry, and n is per worker. A hierarchical wheel
//! would make insert O(1) at the price of coarser precision and much more code; measured
//! first (1M sleepers), the map is not the bottleneck.

use std::time::{Duration, Instant};

/// Puts the current task to sleep for at least `duration`; its worker runs other tasks
/// meanwhile. On a plain OS thread this is `std::thread::sleep`.
pub fn sleep(duration: Duration) {
    match Instant::now().checked_add(duration) {
        Some(deadline) => sleep_until(deadline),
        None => loop {
            crate::park::park_current();
        },
    }
}

/// Puts the current task to sleep until `deadline`.
pub fn sleep_until(deadline: Instant) {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return;
        }
        if crate::sched::current_task().is_none() {
            std::thread::sleep(deadline - now);
            continue;
        }
        crate::park::park_current_until(deadline);
    }
}
