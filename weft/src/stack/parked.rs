//! What a worker keeps of each parked task's stack ([`ParkedStack`], in the task's header) and
//! its queue of parked tasks to shrink ([`ParkedStacks`]): which to reclaim, which to
//! compact, and when (the runtime's [`StackPolicy`]).
//!
//! Owns: a task's `ParkedStack` (touched by its worker's thread only; the task records `sp`
//! itself, on that thread) and each worker's `ParkedStacks`.
//!
//! Invariants:
//! 1. A task is in its worker's queue at most once: its `QUEUED` flag is set while an entry
//!    for it is there.
//! 2. A task's stack is restored before it runs again (compact.rs invariant 4):
//!    [`ParkedStack::before_resume`] is the worker's last step before every resume.
//!
//! May call: `compact.rs` (runs to compact), `restore.rs`, `switch.rs` (the margin),
//! `region.rs`, `mode.rs` (counters). Called by: the scheduler (a park, a resume, a
//! capture, a worker's stack step), `mod.rs` (`Slot`).
//!
//! Why a queue per worker: only a task's own worker may touch its stack while the task is
//! switched out (sched/task/mod.rs invariant 1), so each worker shrinks its own parked tasks,
//! a batch at each of its stack steps, rather than anyone scanning every task.

use std::cell::Cell;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::compact::{compact_all, Candidate, MAX_COMPACT};
use super::mode::{add, mode, StackMode, StackPolicy, RECLAIMED_BYTES};
use super::region;
use super::region::prefetch_line;
use super::restore::restore;
use super::switch::margin;

// ---------------------------------------------------------------------------------------
// The per-task record and the per-worker queue.

/// Set while an entry for the task is in its worker's queue.
pub(super) const QUEUED: u8 = 1;
/// Pages below the stack pointer were released at this park.
pub(super) const RECLAIMED: u8 = 2;
/// The slot was compacted at this park (it may have been restored by the fault thread since).
pub(super) const COMPACTED: u8 = 4;

/// What a task's worker knows of its stack: in the task's header, touched by that worker's
/// thread only (the task records `sp` itself, on that thread).
#[derive(Debug, Default)]
pub(crate) struct ParkedStack {
    /// The stack pointer recorded at the last switch out (invariant 1); it also tells the
    /// slot, so that this record adds only 16 bytes to every task's header.
    pub(super) sp: Cell<usize>,
    /// The worker's clock, in ms, at the last park.
    parked_at: Cell<u32>,
    pub(super) flags: Cell<u8>,
}

impl ParkedStack {
    /// The task will be resumed soon (it is next but one in its worker's ready queue, or its
    /// timer fires within the pre-restore horizon): if its slot is compacted, pulls the
    /// start of its image into the cache. Images lie scattered over an arena of up to
    /// gigabytes, and in a million sleepers' wake storm the first load of each was most of
    /// a restore's own CPU (a cache and TLB miss); prefetched a task ahead, it overlaps the
    /// run of the task before. Prefetched when the timer fired instead, it was evicted again
    /// by the restores of the tasks woken with it. Only a hint: the entry is read without
    /// the slot's lock, and a prefetch never faults.
    #[inline]
    pub(crate) fn prefetch(&self) {
        if self.flags.get() & COMPACTED == 0 {
            return;
        }
        if let Some((_, _, image)) = region::compacted_slot_of(self.sp.get()) {
            for offset in (0..PREFETCH_BYTES).step_by(64) {
                prefetch_line(image.wrapping_add(offset));
            }
            super::arena::prefetch_free(image);
        }
    }

    /// The stage before [`prefetch`](Self::prefetch) in a worker's pipeline over its ready
    /// queue (`sched/queue.rs`, `prefetch_ahead`): for a compacted slot, pulls in its
    /// image's entry in the region table (which `prefetch` reads); for a resident one, the
    /// lines its resume reads first (the switch's saved registers, just below the recorded
    /// stack pointer). Only a hint.
    #[inline]
    pub(crate) fn prefetch_early(&self) {
        let sp = self.sp.get();
        if self.flags.get() & COMPACTED != 0 {
            if let Some(entry) = region::compacted_entry_addr(sp) {
                prefetch_line(entry);
            }
            return;
        }
        prefetch_line(sp.wrapping_sub(64) as *const u8);
        prefetch_line(sp as *const u8);
    }

    /// Before the task is resumed: restores a compacted slot (invariant 4).
    #[inline]
    pub(crate) fn before_resume(&self, size: usize) {
        let flags = self.flags.get();
        if flags & (RECLAIMED | COMPACTED) != 0 {
            if flags & COMPACTED != 0 {
                if let Some((slot, _)) = region::slot_of(self.sp.get()) {
                    restore(slot, size);
                }
            }
            self.flags.set(flags & QUEUED);
        }
    }
}

/// Bytes of an image [`ParkedStack::prefetch`] pulls in: an idle task's whole image
/// (≈700 B of frames and the header).
const PREFETCH_BYTES: usize = 1024;

/// What the worker tells a step about one live task.
pub(crate) struct LiveStack<'a> {
    pub(crate) stack: &'a ParkedStack,
    pub(crate) size: usize,
    /// Whether the task is parked now (not woken, not running).
    pub(crate) parked: bool,
    /// The caller's key for the task's kind (its spawn site), handed back with the depth a
    /// compaction found (`step`'s `observe`).
    pub(crate) key: usize,
}

/// One worker's queue of parked tasks to shrink, in the order they parked.
pub(crate) struct ParkedStacks {
    policy: StackPolicy,
    compact: bool,
    /// (index in the worker's live list, clock in ms when queued).
    queue: VecDeque<(u32, u32)>,
    start: Instant,
    now_ms: u32,
    /// Ages in ms; u32::MAX for never.
    reclaim_ms: u32,
    compact_ms: u32,
    margin: usize,
}

/// Tasks handled per step, and the scratch vectors of one step, are bounded by the batch.
impl ParkedStacks {
    pub(crate) fn new(policy: StackPolicy) -> ParkedStacks {
        let ms = |d: Option<Duration>| d.map_or(u32::MAX, |d| d.as_millis().min(1 << 30) as u32);
        let margin = margin();
        let compact = mode() == StackMode::Compact && policy.compact_after.is_some();
        let reclaim = margin.is_some() && policy.reclaim_after.is_some();
        ParkedStacks {
            policy,
            compact,
            queue: VecDeque::new(),
            start: Instant::now(),
            now_ms: 0,
            reclaim_ms: if reclaim || compact {
                ms(policy.reclaim_after)
            } else {
                u32::MAX
            },
            compact_ms: if compact {
                ms(policy.compact_after)
            } else {
                u32::MAX
            },
            margin: margin.unwrap_or(0),
        }
    }

    fn enabled(&self) -> bool {
        self.reclaim_ms != u32::MAX || self.compact_ms != u32::MAX
    }

    /// Whether this worker compacts parked tasks' stacks (so that some may need a restore).
    pub(crate) fn compacts(&self) -> bool {
        self.compact_ms != u32::MAX
    }

    fn first_due_ms(&self) -> u32 {
        self.reclaim_ms.min(self.compact_ms)
    }

    /// The worker, after a task's park was published: notes it (one store, and a push the
    /// first time).
    #[inline]
    pub(crate) fn parked(&mut self, stack: &ParkedStack, live: usize) {
        if !self.enabled() {
            return;
        }
        stack.parked_at.set(self.now_ms);
        let flags = stack.flags.get();
        if flags & QUEUED == 0 {
            stack.flags.set(flags | QUEUED);
            self.queue.push_back((live as u32, self.now_ms));
        }
    }

    /// Whether a step has work now, and when it will next (the worker may sleep until then).
    pub(crate) fn due(&mut self) -> Option<Duration> {
        let &(_, queued) = self.queue.front()?;
        self.tick();
        let age = self.now_ms.wrapping_sub(queued);
        let due = self.first_due_ms();
        Some(Duration::from_millis(due.saturating_sub(age) as u64))
    }

    fn tick(&mut self) {
        self.now_ms = self.start.elapsed().as_millis() as u32;
    }

    /// One step: reclaims or compacts up to `batch` tasks parked long enough. `resolve`
    /// gives the live task at an index of the worker's live list; `observe` gets the key and
    /// the depth in pages (from the top of the slot down to its lowest resident page) of
    /// each task compacted. The worker calls it between tasks (none of its tasks runs);
    /// returns when to call again.
    pub(crate) fn step<'a>(
        &mut self,
        resolve: impl Fn(usize) -> Option<LiveStack<'a>>,
        observe: impl FnMut(usize, usize),
    ) -> Option<Duration> {
        if self.queue.is_empty() {
            return None;
        }
        self.tick();
        let now = self.now_ms;
        let page = region::page_size();
        let mut reclaim: Vec<(usize, usize)> = Vec::new();
        let mut compact: Vec<Candidate<'a>> = Vec::new();
        let mut requeue: Vec<u32> = Vec::new();
        let mut handled = 0;
        while handled < self.policy.batch.max(1) {
            let Some(&(index, queued)) = self.queue.front() else {
                break;
            };
            if now.wrapping_sub(queued) < self.first_due_ms() {
                break;
            }
            self.queue.pop_front();
            let Some(live) = resolve(index as usize) else {
                continue;
            };
            let stack = live.stack;
            let flags = stack.flags.get();
            if flags & QUEUED == 0 {
                continue; // a stale entry for the task now at this index
            }
            if !live.parked {
                stack.flags.set(flags & !QUEUED); // requeued at its next park
                continue;
            }
            handled += 1;
            let age = now.wrapping_sub(stack.parked_at.get());
            let Some((slot, _)) = region::slot_of(stack.sp.get()) else {
                stack.flags.set(flags & !QUEUED);
                continue;
            };
            let top = slot + live.size;
            // Invariant 1.
            let lo = stack.sp.get().saturating_sub(self.margin) & !15;
            if lo <= slot + page || lo > top {
                stack.flags.set(flags & !QUEUED);
                continue;
            }
            if flags & COMPACTED != 0 {
                stack.flags.set(flags & !QUEUED);
                continue;
            }
            if self.compact && age >= self.compact_ms && top - lo <= MAX_COMPACT {
                compact.push(Candidate {
                    stack,
                    slot,
                    size: live.size,
                    lo,
                    key: live.key,
                });
                stack.flags.set(flags & !QUEUED);
            } else {
                if flags & RECLAIMED == 0 && age >= self.reclaim_ms {
                    let below = lo / page * page;
                    if below > slot + page {
                        reclaim.push((slot + page, below - slot - page));
                    }
                    stack.flags.set(flags | RECLAIMED);
                }
                if self.compact && top - lo <= MAX_COMPACT {
                    requeue.push(index);
                } else {
                    stack.flags.set(stack.flags.get() & !QUEUED);
                }
            }
        }
        for index in requeue {
            self.queue.push_back((index, now));
        }
        if !reclaim.is_empty() {
            reclaim.sort_unstable();
            let released = region::release_resident(&reclaim);
            add(&RECLAIMED_BYTES, released as u64);
        }
        if !compact.is_empty() {
            compact_all(&mut compact, observe);
        }
        self.due()
    }
}
