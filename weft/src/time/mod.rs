//! Time: sleeping tasks, deadlines of parked tasks, and timer channels (`after`, `tick`).
//!
//! Owns: the public sleep functions and timer channels. The timers of parked tasks live in
//! each worker (`sched`), because a task never leaves its worker: a sleeping task's deadline is
//! an entry in its home worker's timer map, fired by that worker without any lock or
//! cross-thread traffic. Channel operations with a deadline (`recv_timeout`, `send_timeout`,
//! `select!`'s `after`) park with that same deadline, so they cost one map entry while they wait.
//!
//! Invariants:
//! 1. A timer entry is removed when its task returns from the park it guarded, whether the
//!    deadline fired or something else woke it: waits that end early leave nothing behind.
//! 2. An idle worker sleeps in its poller with the next deadline as timeout, or waits awake
//!    for a deadline within 12 µs (cheaper than a sleep: sched/worker.rs
//!    `await_close_deadline`); a busy one checks its deadlines every 61 tasks and whenever it
//!    runs out of work. A sleep ends at or after its deadline, by up to the timer slack of
//!    the worker's thread (10 µs unless set with `RuntimeBuilder::timer_slack`;
//!    sched/epoll.rs invariant 2):
//!    deadlines that fall within it share one wake-up of the worker. An idle worker also
//!    restores the compacted stacks of tasks due within 500 µs, so their wakes do not wait
//!    for it (sched/worker.rs `restore_due_soon`).
//! 3. A timer channel ([`after`], [`tick`]) has no task and no entry of its own: its next
//!    firing time is stored in the channel, and a receiver that waits on it parks with that
//!    time as its deadline (chan/core.rs). An `after` nobody waits on costs one small
//!    allocation and nothing else, like Go's timers since 1.23 (collected when unreferenced).
//!
//! May call: `park`, `sched`, `chan`. Called by: users, `chan`, `sync`, `net` (deadlines).
//!
//! Why an ordered map (`BTreeMap<(deadline, sequence), Task>`) per worker rather than a timer
//! wheel: removal of a cancelled deadline must be exact (a `recv_timeout` loop that always
//! succeeds early would otherwise grow a heap without bound), a map gives insert, remove and
//! "earliest" in O(log n) with ≈40 B per entry, and n is per worker. A hierarchical wheel
//! would make insert O(1) at the price of coarser precision and much more code; measured
//! first (1M sleepers: `weft-bench sleepers`), the map is not the bottleneck.
//! Why timer channels without a timer task: a million `after`s would otherwise be a million
//! parked tasks (stacks) or a shared timer thread (a lock and a cross-thread wake per firing).

use std::time::{Duration, Instant};

/// Puts the current task to sleep for at least `duration`; its worker runs other tasks
/// meanwhile. On a plain OS thread it blocks the thread.
///
/// ```
/// use std::time::{Duration, Instant};
/// let slept = weft::run(|| {
///     let start = Instant::now();
///     weft::time::sleep(Duration::from_millis(10));
///     start.elapsed()
/// });
/// assert!(slept >= Duration::from_millis(10));
/// ```
pub fn sleep(duration: Duration) {
    match Instant::now().checked_add(duration) {
        Some(deadline) => sleep_until(deadline),
        None => loop {
            crate::park::park_current(crate::park::ParkReason::Sleep);
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
        // On a plain thread too a park (not `std::thread::sleep`), so that a cancelled
        // `Context` the thread is bound to ends the sleep.
        crate::park::park_current_until(deadline, crate::park::ParkReason::Sleep);
    }
}

/// A receiver that yields the current time once, after `duration` — Go's `time.After`. Use it
/// in [`select!`](crate::select) as `recv(weft::time::after(d)) -> t => ...`; after its one
/// value it stays empty forever (it never closes), as in Go.
///
/// ```
/// use std::time::Duration;
/// let (_tx, rx) = weft::chan::bounded::<()>(0);
/// weft::run(|| {
///     weft::select! {
///         recv(rx) -> _ => unreachable!(),
///         recv(weft::time::after(Duration::from_millis(5))) -> _ => {} // timed out
///     }
/// });
/// ```
pub fn after(duration: Duration) -> crate::chan::Receiver<Instant> {
    let at = Instant::now()
        .checked_add(duration)
        .unwrap_or_else(far_future);
    at_instant(at)
}

/// A receiver that yields once, at `deadline`.
pub fn at_instant(deadline: Instant) -> crate::chan::Receiver<Instant> {
    crate::chan::timer_receiver(deadline, None, |fired| fired.max(Instant::now()))
}

/// A receiver that yields the time every `period` — Go's `time.Tick`. Like Go's `Ticker`, it
/// holds at most one pending tick: ticks a slow receiver misses are dropped, and the next one
/// is one period after the late receive.
///
/// ```
/// use std::time::Duration;
/// weft::run(|| {
///     let ticks = weft::time::tick(Duration::from_millis(2));
///     for _ in 0..3 {
///         ticks.recv().unwrap();
///     }
/// });
/// ```
///
/// # Panics
/// If `period` is zero ("non-positive interval for tick", as in Go).
pub fn tick(period: Duration) -> crate::chan::Receiver<Instant> {
    assert!(!period.is_zero(), "non-positive interval for tick");
    let first = Instant::now()
        .checked_add(period)
        .unwrap_or_else(far_future);
    crate::chan::timer_receiver(first, Some(period), |fired| fired.max(Instant::now()))
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(86_400 * 365 * 30)
}
