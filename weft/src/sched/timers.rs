//! A worker's timers: the deadlines of its parked tasks (a map, time/mod.rs says why), fired
//! in batches, and the compacted stacks of the tasks due soon, restored while it idles.
//!
//! Owns: nothing of its own: `Worker::timers` and `timer_seq` are the worker's, touched by its
//! thread only; a parked task's entry is removed by the [`TimerEntry`] in its parking frame.
//!
//! Invariants:
//! 1. An entry leaves the map only from its front (`fire_timers`) or when its park returns or
//!    unwinds (`TimerEntry::drop`): a cancelled sleeper does not keep its task alive until
//!    its deadline.
//!
//! May call: `Task::unpark`, `stack` (prefetches, restores). Called by: worker.rs (the loop,
//! `idle`), park.rs (`park_task_until`), queue.rs (the periodic look).
//!
//! Why batches and restores ahead of the deadline: the measurements are in `fire_timers`
//! (cache and TLB misses at a million sleepers' wakes) and `restore_due_soon`.

use std::time::{Duration, Instant};

use super::queue::prefetch_header;
use super::task::Task;
use super::worker::Worker;

/// How far ahead an idle worker restores the compacted stacks of tasks its timers will wake
/// (`Worker::restore_due_soon`), and how many at most per idle.
const PRE_RESTORE: Duration = Duration::from_micros(500);

const PRE_RESTORE_MAX: usize = 64;

/// Timers [`Worker::fire_timers`] takes out of the map before it unparks them.
const FIRE_BATCH: usize = 16;

/// A parked task's entry in its worker's timer map, removed on drop.
pub(super) struct TimerEntry<'a> {
    pub(super) worker: &'a Worker,
    pub(super) key: (Instant, u64),
}

impl Drop for TimerEntry<'_> {
    fn drop(&mut self) {
        let mut timers = self.worker.timers.borrow_mut();
        // Entries leave the map only from its front (`fire_timers`) or here: a key below the
        // earliest one left was fired and removed already. Skipping the search then saves a
        // walk through cold nodes on every timer wake (1M sleepers: most of the map is cold).
        if timers
            .first_key_value()
            .is_some_and(|(first, _)| *first <= self.key)
        {
            timers.remove(&self.key);
        }
    }
}

impl Worker {
    /// Unparks the tasks whose deadline passed; returns the next deadline, if any.
    ///
    /// In batches of [`FIRE_BATCH`]: a batch's headers are prefetched as they leave the map,
    /// then its tasks are unparked (which reads and writes their headers). One by one, each
    /// header was a cache and TLB miss of its own, taken in turn: ≈11 % of the workers' CPU
    /// at a million sleepers' wakes. What their resumes read is `prefetch_ahead`'s.
    pub(super) fn fire_timers(&self) -> Option<Instant> {
        if self.timers.borrow().is_empty() {
            return None;
        }
        let now = Instant::now();
        loop {
            // Nothing due (the common call): return before setting up a batch.
            match self.timers.borrow().first_key_value() {
                None => return None,
                Some((&(deadline, _), _)) if deadline > now => return Some(deadline),
                Some(_) => {}
            }
            let mut batch: [Option<Task>; FIRE_BATCH] = Default::default();
            let mut taken = 0;
            // `None`: the batch filled, more may be due.
            let next = {
                let mut timers = self.timers.borrow_mut();
                loop {
                    if taken == FIRE_BATCH {
                        break None;
                    }
                    let Some(entry) = timers.first_entry() else {
                        break Some(None);
                    };
                    if entry.key().0 > now {
                        break Some(Some(entry.key().0));
                    }
                    let task = entry.remove();
                    prefetch_header(&task);
                    batch[taken] = Some(task);
                    taken += 1;
                }
            };
            for task in batch[..taken].iter_mut() {
                if let Some(task) = task.take() {
                    task.unpark();
                }
            }
            if let Some(next) = next {
                return next;
            }
        }
    }

    /// Restores now, while this worker is idle, the compacted stacks of tasks whose timers
    /// fire within [`PRE_RESTORE`] (at most [`PRE_RESTORE_MAX`] a time): their wakes then run
    /// at once instead of each paying its restore (≈2–4 µs) on the timer's critical path,
    /// where a million sleepers waking over 4 s queued up behind one another's restores.
    /// Sound as any restore by the owner (stack/compact.rs invariant 4): the task is parked
    /// (nothing runs while its worker is idle) and lives on this worker; restoring earlier
    /// than its resume only holds its page a moment longer, and it is not compacted again
    /// before its next park (the restore clears its flags).
    pub(super) fn restore_due_soon(&self) {
        if !self.stacks.borrow().compacts() {
            return;
        }
        let horizon = Instant::now() + PRE_RESTORE;
        let timers = self.timers.borrow();
        let due = || {
            timers
                .iter()
                .take(PRE_RESTORE_MAX)
                .take_while(|(&(deadline, _), _)| deadline <= horizon)
        };
        // In stages, each reading what the one before pulled in (as `prefetch_ahead`):
        // headers, then the images' table entries, then the images, then the restores.
        for (_, task) in due() {
            prefetch_header(task);
        }
        for (_, task) in due() {
            task.header().stack.prefetch_early();
        }
        for (_, task) in due() {
            task.header().stack.prefetch();
        }
        for (_, task) in due() {
            let header = task.header();
            header.stack.before_resume(header.class.bytes());
        }
    }

    /// The earliest deadline of this worker's timers.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.timers
            .borrow()
            .first_key_value()
            .map(|(&(at, _), _)| at)
    }
}
