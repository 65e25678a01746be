//! Time: sleeping tasks, deadlines of parked tasks, and timer channels (`after`, `tick`).
//!
//! Owns: the public sleep functions and timer channels. The timers of parked tasks live in
//! each worker (`sched`), because a task never leaves its worker: a sleeping task's deadline is
//! an entry in its home worker's timing wheel, fired by that worker without any lock or
//! cross-thread traffic. Channel operations with a deadline (`recv_timeout`, `send_timeout`,
//! `select!`'s `after`) park with that same deadline, so they cost one wheel entry while they
//! wait.
//!
//! Invariants:
//! 1. A timer entry is removed when its task returns from the park it guarded, whether the
//!    deadline fired or something else woke it: waits that end early leave nothing behind.
//! 2. A wait ends at or after its deadline, and its timer fires no later than its slack after
//!    it: the runtime's timer slack (`RuntimeBuilder::timer_slack`, 1 ms by default), or a
//!    quarter of the wait when that is less, or none for [`sleep_precise`] and
//!    [`sleep_until_precise`] (sched/timers.rs invariant 2). Deadlines that fall in one
//!    window of the slack share one wake of the worker. To that the worker's wake-up adds a
//!    little: an idle worker sleeps in its poller with the next expiry as timeout (the
//!    kernel may wake it up to 10 µs late, sched/runtime.rs `KERNEL_TIMER_SLACK`), or waits
//!    awake for one within 12 µs (cheaper than a sleep: sched/worker.rs
//!    `await_close_deadline`); a busy one checks its timers every 61 tasks and whenever it
//!    runs out of work. An idle worker also restores the compacted stacks of tasks due
//!    within 500 µs, so their wakes do not wait for it (sched/timers.rs `restore_due_soon`).
//! 3. A timer channel ([`after`], [`tick`]) has no task and no entry of its own: its next
//!    firing time is stored in the channel, and a receiver that waits on it parks with that
//!    time as its deadline (chan/core.rs). An `after` nobody waits on costs one small
//!    allocation and nothing else, like Go's timers since 1.23 (collected when unreferenced).
//!
//! May call: `park`, `sched`, `chan`. Called by: users, `chan`, `sync`, `net` (deadlines).
//!
//! Why a slack by default, and a hierarchical wheel rather than the ordered map
//! (`BTreeMap<(deadline, sequence), Task>`) weft had: sched/timers.rs and sched/wheel.rs.
//! Why per-call precision (`sleep_precise`) rather than only a runtime-wide setting: the
//! few waits whose timing matters (a rate limiter, a protocol's retransmit) can have it
//! without making every other timer of the program a wake of its own.
//! Why timer channels without a timer task: a million `after`s would otherwise be a million
//! parked tasks (stacks) or a shared timer thread (a lock and a cross-thread wake per firing).

use std::time::{Duration, Instant};

use crate::sched::Slack;

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
    sleep_for(duration, Slack::Runtime);
}

/// Puts the current task to sleep until `deadline`.
pub fn sleep_until(deadline: Instant) {
    sleep_until_with(deadline, Slack::Runtime);
}

/// Like [`sleep`], but ends as soon after `duration` as the worker can wake for it, without
/// the runtime's timer slack ([`RuntimeBuilder::timer_slack`](crate::RuntimeBuilder::timer_slack),
/// 1 ms by default, or a quarter of a shorter wait): for the waits whose precision matters,
/// at the price of a wake of the worker for this one timer. In this VM a worker wakes
/// ≈15–50 µs after such a deadline.
///
/// ```
/// use std::time::{Duration, Instant};
/// weft::run(|| {
///     let start = Instant::now();
///     weft::time::sleep_precise(Duration::from_millis(2));
///     assert!(start.elapsed() >= Duration::from_millis(2));
/// });
/// ```
pub fn sleep_precise(duration: Duration) {
    sleep_for(duration, Slack::Precise);
}

/// Like [`sleep_until`], without the runtime's timer slack (see [`sleep_precise`]).
pub fn sleep_until_precise(deadline: Instant) {
    sleep_until_with(deadline, Slack::Precise);
}

/// A sleep reads the clock once: for the deadline, or to check it when it is given; not
/// again when its timer fires (a fired timer's deadline has passed, sched/timers.rs
/// invariant 2), only after an early wake.
fn sleep_for(duration: Duration, slack: Slack) {
    if duration.is_zero() {
        return;
    }
    let now = Instant::now();
    match now.checked_add(duration) {
        Some(deadline) => {
            if park_until(deadline, slack, now) {
                return;
            }
            sleep_until_with(deadline, slack);
        }
        None => loop {
            crate::sched::park_current(crate::park::ParkReason::Sleep);
        },
    }
}

fn sleep_until_with(deadline: Instant, slack: Slack) {
    loop {
        let now = Instant::now();
        if now >= deadline || park_until(deadline, slack, now) {
            return;
        }
    }
}

/// Parks until `deadline`; true if the timer fired. `now` is the caller's clock read, from
/// which the wait's length (a short one's slack) is measured. On a plain thread too a park
/// (not `std::thread::sleep`), so that a cancelled `Context` the thread is bound to ends the
/// sleep.
fn park_until(deadline: Instant, slack: Slack, now: Instant) -> bool {
    crate::sched::park_current_until_timer(
        deadline,
        crate::park::ParkReason::Sleep,
        slack,
        Some(now),
    )
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
