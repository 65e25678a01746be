//! A worker's timers: the deadlines of its parked tasks in a timing wheel (wheel.rs), each
//! rounded up within its slack so that timers due close together fire in one wake of the
//! worker; fired in batches; and the compacted stacks of the tasks due soon, restored while
//! the worker idles.
//!
//! Owns: [`Timers`] (`Worker::timers`), touched by the worker's thread only; a parked task's
//! entry is removed by the [`TimerEntry`] in its parking frame.
//!
//! Invariants:
//! 1. An entry leaves the wheel only when its park returns or unwinds (`TimerEntry`'s drop or
//!    `close`); firing only takes its task out: a cancelled sleeper does not keep its entry
//!    until its deadline, and a key is never reused while its owner may still remove it.
//! 2. A timer fires no earlier than its deadline and no later than its slack after it (plus
//!    the worker's wake-up: the kernel's timer slack of the thread, and the time to reach
//!    it): the slack of a wait is the runtime's (`RuntimeBuilder::timer_slack`, 1 ms by
//!    default) or a quarter of the wait when that is less, and none for a precise one
//!    (`time::sleep_precise`). A timer's expiry is its deadline rounded up to a multiple of
//!    its slack (a power of two for the quarter), counted from the wheel's origin: the
//!    timers of one such window share one expiry, so one wake.
//! 3. The entry holds the task's header without a reference count: the task is parked in
//!    the frame that owns the entry, and a started task stays alive in its worker's live list
//!    (sched/task/mod.rs invariant 3) until it returns, which it cannot do before the frame
//!    removes the entry.
//!
//! May call: `Task::unpark`, `stack` (prefetches, restores), the wheel. Called by: worker.rs
//! (the loop, `idle`), park.rs (`park_task_until`), queue.rs (the periodic look).
//!
//! Why a slack by default: a worker that sleeps and wakes for each distinct deadline paid
//! 8.5–10.8 µs of CPU per timer wake with 100K sleepers over 1 s (`weft-bench sleepers
//! --quick`), against Go's 2.05 and tokio's 2.34, whose timers fire up to a millisecond late
//! (Go's poller waits in whole milliseconds, tokio's wheel ticks in them); most of it was the
//! sleep and wake itself (a timed `epoll_pwait2` costs 17–32 µs of CPU in this VM). Why a
//! quarter of a short wait: so that a 100 µs sleep is not ten times late, as a millisecond
//! grid would make it; a short wait pays for its precision with a wake of its own. Why
//! batches and restores ahead of the deadline: the measurements are in `fire_timers_at`
//! (cache and TLB misses at a million sleepers' wakes) and `restore_due_soon`.

use std::ptr::NonNull;
use std::time::{Duration, Instant};

use super::queue::prefetch_header;
use super::queue::WokenBy;
use super::task::{unpark_ptr_by, Header};
use super::wheel::{Wheel, TICK_SHIFT};
use super::worker::Worker;

/// How far ahead an idle worker restores the compacted stacks of tasks its timers will wake
/// (`Worker::restore_due_soon`), and how many at most per idle.
const PRE_RESTORE: Duration = Duration::from_micros(500);

const PRE_RESTORE_MAX: usize = 64;

/// Timers [`Worker::fire_timers_at`] takes out of the wheel before it unparks them.
const FIRE_BATCH: usize = 16;

/// "No timer" for [`Timers::due`]: a year after the wheel's origin, then never again
/// reached without a timer armed (the wheel has none then, and the look returns before it).
const FAR: Duration = Duration::from_secs(365 * 86_400);

/// A wait gets at most this fraction of its length as slack, as a shift (invariant 2).
const SHORT_WAIT_SHIFT: u32 = 2;

/// How late a timer may fire (invariant 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slack {
    /// The runtime's timer slack, or a quarter of the wait when that is less.
    Runtime,
    /// None of weft's own: only the wake-up of the worker.
    Precise,
}

/// A worker's timers (invariants 1–3).
pub(super) struct Timers {
    wheel: Wheel<NonNull<Header>>,
    /// The runtime's timer slack, ns; 0: every timer precise.
    slack: u64,
    /// `capture::clock_now` at the wheel's origin, read just after it: the worker's coarse
    /// clock (`Worker::clock`) maps onto the wheel's time by a subtraction, a few tens of
    /// nanoseconds ahead of it at most.
    origin_clock: u64,
    /// The instant of the wheel's `hint`, or far ahead: before it nothing is due, which a
    /// look at the timers (every yield and every 61 picks of a busy worker) learns from one
    /// comparison, without turning `now` into ticks or a tick back into an instant.
    due: Instant,
}

impl Timers {
    pub(super) fn new(slack: Duration) -> Timers {
        let origin = Instant::now();
        Timers {
            due: origin + FAR,
            wheel: Wheel::new(origin),
            slack: slack.as_nanos().min(u64::MAX as u128) as u64,
            origin_clock: crate::observe::capture::clock_now(),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.wheel.is_empty()
    }

    /// The expiry tick of a timer due at `deadline` (invariant 2). How long the wait is (the
    /// slack of a short one) is counted from `now` when the caller read it (a sleep does), else
    /// from the worker's coarse clock `clock`, which may lag by a busy stretch: such a wait
    /// looks longer, and its slack may exceed a quarter of it (never the runtime's slack).
    fn expiry(&self, deadline: Instant, slack: Slack, now: Option<Instant>, clock: u64) -> u64 {
        let due = self.wheel.nanos(deadline);
        let grid = match slack {
            Slack::Precise => 1,
            Slack::Runtime if self.slack <= 1 => 1,
            Slack::Runtime => {
                let now = match now {
                    Some(now) => self.wheel.nanos(now),
                    None => (self.wheel.elapsed() << TICK_SHIFT)
                        .max(clock.saturating_sub(self.origin_clock)),
                };
                let quarter = due.saturating_sub(now) >> SHORT_WAIT_SHIFT;
                if quarter < self.slack {
                    // A power of two, so that short waits of similar lengths share windows.
                    1u64 << quarter.max(1).ilog2()
                } else {
                    self.slack
                }
            }
        };
        Wheel::<NonNull<Header>>::tick_at_or_after(
            due.checked_next_multiple_of(grid).unwrap_or(due),
        )
    }

    /// Sets `due` from the wheel's hint.
    fn update_due(&mut self) {
        let hint = self.wheel.hint();
        self.due = if hint == u64::MAX {
            self.wheel.instant_of(0) + FAR
        } else {
            self.wheel.instant_of(hint)
        };
    }

    /// The instant of a reading `clock` of the worker's coarse clock, without reading the
    /// clock again: at most the few tens of nanoseconds by which `origin_clock` was read
    /// after the wheel's origin early, so a timer looked at with it fires no earlier.
    pub(super) fn instant_at(&self, clock: u64) -> Instant {
        self.wheel.at_nanos(clock.saturating_sub(self.origin_clock))
    }

    /// The worker's coarse clock (`capture::clock_now`) at `now`, without reading it again.
    pub(super) fn clock_at(&self, now: Instant) -> u64 {
        self.origin_clock.wrapping_add(self.wheel.nanos(now))
    }
}

/// A parked task's entry in its worker's timers, removed on drop (invariant 1).
pub(super) struct TimerEntry<'a> {
    worker: &'a Worker,
    key: u32,
}

impl<'a> TimerEntry<'a> {
    /// Arms a timer that wakes the task of `header` at `deadline`, within `slack`; `now`, if
    /// the caller read the clock, measures the wait (`Timers::expiry`).
    ///
    /// # Safety
    ///
    /// Invariant 3: `header` is the current task's, on `worker`, and it parks in the
    /// caller's frame, which holds the returned entry until the park returns or unwinds and
    /// then drops or closes it (never forgets it): the wheel dereferences `header` when the
    /// timer fires.
    pub(super) unsafe fn new(
        worker: &'a Worker,
        header: NonNull<Header>,
        deadline: Instant,
        slack: Slack,
        now: Option<Instant>,
    ) -> TimerEntry<'a> {
        let mut timers = worker.timers.borrow_mut();
        let expiry = timers.expiry(deadline, slack, now, worker.clock.get());
        let hint = timers.wheel.hint();
        let key = timers.wheel.insert(expiry, header);
        if timers.wheel.hint() != hint {
            timers.update_due();
        }
        TimerEntry { worker, key }
    }

    /// Removes the entry; true if its timer fired, so that its deadline has passed.
    pub(super) fn close(self) -> bool {
        let fired = self
            .worker
            .timers
            .borrow_mut()
            .wheel
            .remove(self.key)
            .is_none();
        std::mem::forget(self);
        fired
    }
}

impl Drop for TimerEntry<'_> {
    fn drop(&mut self) {
        self.worker.timers.borrow_mut().wheel.remove(self.key);
    }
}

impl Worker {
    /// Unparks the tasks whose timers are due; returns the next expiry, if any. Reads the
    /// clock only when there are timers.
    pub(super) fn fire_timers(&self) -> Option<Instant> {
        if self.timers.borrow().is_empty() {
            return None;
        }
        self.fire_timers_at(Instant::now())
    }

    /// Unparks the tasks whose timers are due by `now` (the caller's reading of the clock,
    /// a moment old at most: a timer then fires a moment later, never early); returns the
    /// next expiry, if any.
    ///
    /// In batches of [`FIRE_BATCH`]: a batch's headers are prefetched as they leave the
    /// wheel, then its tasks are unparked (which reads and writes their headers). One by one,
    /// each header was a cache and TLB miss of its own, taken in turn: ≈11 % of the workers'
    /// CPU at a million sleepers' wakes. What their resumes read is `prefetch_ahead`'s.
    pub(super) fn fire_timers_at(&self, now: Instant) -> Option<Instant> {
        let mut timers = self.timers.borrow_mut();
        if timers.is_empty() {
            return None;
        }
        if now < timers.due {
            return Some(timers.due);
        }
        let now_tick = timers.wheel.now_tick(now);
        loop {
            let mut batch = [None; FIRE_BATCH];
            let mut taken = 0;
            while taken < FIRE_BATCH {
                let Some(header) = timers.wheel.poll(now_tick) else {
                    break;
                };
                prefetch_header(header);
                batch[taken] = Some(header);
                taken += 1;
            }
            if taken == 0 {
                // The poll that found nothing more due set the wheel's hint, exact: `due`
                // is the next expiry.
                timers.update_due();
                return (!timers.is_empty()).then_some(timers.due);
            }
            // An unpark queues the task on this worker (or wakes the thread it blocks): it
            // touches no timer, but the borrow is let go around it all the same.
            drop(timers);
            for header in batch[..taken].iter().flatten() {
                // SAFETY: invariant 3: the task is alive while its entry is in the wheel,
                // and it was until this poll took it out, on this thread, just now.
                unsafe { unpark_ptr_by(*header, WokenBy::Timer) };
            }
            timers = self.timers.borrow_mut();
        }
    }

    /// Restores now, while this worker is idle, the compacted stacks of tasks whose timers
    /// fire within [`PRE_RESTORE`] of `now` (at most [`PRE_RESTORE_MAX`] a time): their wakes
    /// then run at once instead of each paying its restore (≈2–4 µs) on the timer's critical
    /// path, where a million sleepers waking over 4 s queued up behind one another's
    /// restores. Sound as any restore by the owner (stack/compact.rs invariant 4): the task
    /// is parked (nothing runs while its worker is idle) and lives on this worker; restoring
    /// earlier than its resume only holds its page a moment longer, and it is not compacted
    /// again before its next park (the restore clears its flags).
    ///
    /// Returns whether it restored anything (then time passed since `now`).
    pub(super) fn restore_due_soon(&self, now: Instant) -> bool {
        if !self.stacks.borrow().compacts() {
            return false;
        }
        let timers = self.timers.borrow();
        if timers.is_empty() {
            return false;
        }
        let horizon = timers.wheel.now_tick(now + PRE_RESTORE);
        let mut due = [NonNull::dangling(); PRE_RESTORE_MAX];
        let mut len = 0;
        timers.wheel.peek_due(horizon, PRE_RESTORE_MAX, |header| {
            due[len] = header;
            len += 1;
        });
        drop(timers);
        // SAFETY: invariant 3: each is a parked task whose entry is in the wheel, and nothing
        // runs on this worker meanwhile to take it out.
        let headers = || due[..len].iter().map(|h| unsafe { h.as_ref() });
        // In stages, each reading what the one before pulled in (as `prefetch_ahead`):
        // headers, then the images' table entries, then the images, then the restores.
        for header in &due[..len] {
            prefetch_header(*header);
        }
        for header in headers() {
            header.stack.prefetch_early();
        }
        for header in headers() {
            header.stack.prefetch();
        }
        for header in headers() {
            header.stack.before_resume(header.class.bytes());
        }
        len > 0
    }

    /// The earliest expiry of this worker's timers (at most: wheel.rs invariant 3).
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        let timers = self.timers.borrow();
        let next = timers.wheel.next_expiry()?;
        Some(timers.wheel.instant_of(next))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expiry_after(timers: &Timers, wait: Duration, slack: Slack) -> Duration {
        let now = Instant::now();
        let clock = timers.clock_at(now);
        let tick = timers.expiry(now + wait, slack, None, clock);
        timers.wheel.instant_of(tick) - now
    }

    /// A short sleep after a busy stretch, when the worker's coarse clock lags by 2 ms: the
    /// sleep's own clock read measures the wait, so its slack stays a quarter of it.
    #[test]
    fn a_wait_is_measured_from_the_callers_clock_read() {
        let timers = Timers::new(Duration::from_millis(1));
        let tick = Duration::from_nanos(super::super::wheel::TICK_NS);
        std::thread::sleep(Duration::from_millis(3));
        let now = Instant::now();
        let stale = timers.clock_at(now - Duration::from_millis(2));
        let wait = Duration::from_micros(200);
        let tick_at = timers.expiry(now + wait, Slack::Runtime, Some(now), stale);
        let at = timers.wheel.instant_of(tick_at) - now;
        assert!(at >= wait, "fires early at {at:?}");
        assert!(at <= wait + wait / 4 + tick, "late by {:?}", at - wait);
    }

    #[test]
    fn slack_is_the_runtimes_or_a_quarter_of_a_short_wait() {
        let timers = Timers::new(Duration::from_millis(1));
        let tick = Duration::from_nanos(super::super::wheel::TICK_NS);
        for (wait, most) in [
            (Duration::from_secs(1), Duration::from_millis(1)),
            (Duration::from_millis(2), Duration::from_micros(500)),
            (Duration::from_micros(100), Duration::from_micros(25)),
        ] {
            let at = expiry_after(&timers, wait, Slack::Runtime);
            assert!(at >= wait, "{wait:?}: fires early at {at:?}");
            assert!(
                at <= wait + most + tick,
                "{wait:?}: late by {:?}",
                at - wait
            );
            let precise = expiry_after(&timers, wait, Slack::Precise);
            assert!(
                precise >= wait && precise <= wait + tick,
                "{wait:?}: {precise:?}"
            );
        }
        let none = Timers::new(Duration::ZERO);
        let at = expiry_after(&none, Duration::from_secs(1), Slack::Runtime);
        assert!(at <= Duration::from_secs(1) + tick);
    }

    #[test]
    fn timers_within_the_slack_share_an_expiry() {
        let timers = Timers::new(Duration::from_millis(1));
        let now = Instant::now();
        let clock = timers.clock_at(now);
        let base = now + Duration::from_secs(1);
        let ticks: std::collections::BTreeSet<u64> = (0..1000)
            .map(|i| {
                timers.expiry(
                    base + Duration::from_micros(i * 3),
                    Slack::Runtime,
                    None,
                    clock,
                )
            })
            .collect();
        // 3 ms of deadlines: three or four windows of 1 ms.
        assert!(ticks.len() <= 4, "{} distinct expiries", ticks.len());
    }
}
