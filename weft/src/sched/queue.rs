//! Which task a worker runs next, and how a woken task gets there: the `run_next` slot and
//! ready queue a wake fills, the new-task deque thieves steal from, the remote inbox, the
//! injector; stealing, and the balance of lasting load between workers.
//!
//! Owns: nothing of its own: `Worker::run_next`, `ready` and `new_tasks` are the worker's
//! (worker.rs), touched by its thread only (`new_tasks` is stolen from through its
//! `Stealer`); the inbox is its `Remote`'s (runtime.rs).
//!
//! Invariants:
//! 1. Only never-started tasks are stolen (sched/mod.rs invariant 1): from a deque, the
//!    injector, or a `Remote`'s placed tasks; a woken task is queued on its home worker.
//! 2. A task woken by the running one or by its worker's timers runs next
//!    (`push_ready_from`), except at every [`RUN_NEXT_TURNS`]-th pick, when the queues,
//!    timers, I/O and injector go first.
//!
//! May call: the worker's queues, `Remote`, `stack` (prefetches of a parked stack), the
//! seam's trace events, dump.rs (a request found between tasks). Called by: worker.rs (the
//! loop, `idle`), task/mod.rs (a wake, a fired timer's among them: `schedule_woken_by`).
//!
//! Why: started tasks are never stolen (sched/mod.rs says why); the measurements behind
//! `run_next`, the prefetch pipeline and the lasting-load rules are in the functions' docs.

use std::collections::VecDeque;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crossbeam_deque::Steal;

use super::counters;
use super::runtime::Remote;
use super::task::{Header, Task};
use super::worker::{current_worker, Worker, INJECTOR_INTERVAL};
use crate::observe::capture::clock_now;
use crate::observe::trace;
use crate::stack::{self};

/// A task woken by the running one runs next (`Worker::push_ready_from`) except at every this
/// many picks, when the worker takes from its queues instead.
const RUN_NEXT_TURNS: u32 = 16;

/// A software pipeline over the front of a ready queue, run at each pop: the header of the
/// third task, then what the second's resume will read first (`ParkedStack::prefetch_early`),
/// then the first's compacted image (`ParkedStack::prefetch`), each read from lines the
/// stage before pulled in. So the misses of a task (its header, its stack or its image's
/// entry, then the image: each on a page of its own, a TLB miss too) overlap the runs of the
/// two before it.
///
/// Measured (`weft-bench wake`, compacted tasks woken all at once): 4.2 µs of CPU a wake
/// against 4.7–4.9 without it; at a million sleepers' wakes (compaction on) the header,
/// table-entry and image misses went from ≈20 % of the workers' CPU to ≈5 %, and the wakes'
/// p99 lateness from 28–259 ms to 2.3–13.6 ms (alternated ×4, twice; the workers were
/// saturated).
/// Every task here is this worker's to run (invariant 1), so its `ParkedStack` is ours to read.
#[inline]
fn prefetch_ahead(ready: &VecDeque<Task>) {
    if ready.len() < 2 {
        return;
    }
    if let Some(task) = ready.get(2) {
        prefetch_header(task.as_ptr());
    }
    ready[1].header().stack.prefetch_early();
    ready[0].header().stack.prefetch();
}

/// Pulls a task's header into the cache: a hint, it never faults.
#[inline]
pub(super) fn prefetch_header(header: NonNull<Header>) {
    let at = header.as_ptr() as *const u8;
    for line in (0..std::mem::size_of::<Header>()).step_by(64) {
        stack::prefetch_line(at.wrapping_add(line));
    }
}

/// Who woke a task, for where it queues on its worker (invariant 2).
#[derive(Clone, Copy)]
pub(super) enum WokenBy {
    /// Whatever runs: a task, a thread, the reactor.
    Task,
    /// The worker's own timers.
    Timer,
}

/// Queues a woken task on its home worker (sched/mod.rs invariant 1); on its own worker,
/// one woken by the running task or by a timer runs next.
#[inline]
pub(super) fn schedule_woken_by(task: Task, by: WokenBy) {
    let home = task
        .header()
        .home()
        .expect("weft: woke a task that never started");
    if let Some(worker) = current_worker() {
        if worker.tracing.get() {
            trace::woke(task.header());
        }
        worker.remote.counters.woke();
        // Compared by address: no reference count is touched on this, the ping-pong path.
        if Arc::ptr_eq(&worker.remote, home) {
            worker.push_ready_from(task, by);
            return;
        }
    } else {
        if trace::on() {
            trace::woke(task.header());
        }
        counters::OFF_WORKER.woke();
    }
    let home = home.clone();
    home.push_woken(task);
}

/// How many more live tasks than another worker a worker must have before its spawns go to
/// that worker: a slack, so that short-lived tasks (spawn, run, finish) stay local and cheap.
pub(super) const BALANCE_SLACK: usize = 32;

/// Most never-started tasks a thief leaves queued on a worker with fewer live tasks
/// (`Worker::defers_to`): what a spawning task queues between two of its cooperative yields,
/// twice over.
const DEFER_MAX_QUEUED: usize = 2 * super::coop::COOP_BUDGET as usize;

/// A worker's live tasks plus those placed with it and not yet started: what will live there.
fn lasting_load(remote: &Remote) -> usize {
    remote.live.load(Ordering::Relaxed) + remote.placed_len.load(Ordering::Relaxed)
}

impl Worker {
    /// Queues a task woken on this worker. One woken by the running task goes to `run_next`:
    /// the running task is usually about to park (a send handing over to a waiting receiver,
    /// then a receive), and the woken one then runs at once without a trip through the ready
    /// queue — a rendezvous ping-pong's every half trip. So does one whose timer fired, as
    /// Go's timers ready a goroutine into `runnext`: it is already late by the time since
    /// the wheel's last look (up to `INJECTOR_INTERVAL` picks on a busy worker) and would
    /// otherwise wait behind the whole ready queue too — a 5 ms ticker among a thousand
    /// tasks woken by their sockets. Whatever held `run_next` goes to the back of the ready
    /// queue, so of a batch of timers the last runs first and the rest in their order.
    #[inline]
    fn push_ready_from(&self, task: Task, by: WokenBy) {
        let by_timer = matches!(by, WokenBy::Timer);
        if by_timer || self.current.get().is_some() {
            self.run_next_by_timer.set(by_timer);
            if let Some(previous) = self.run_next.replace(Some(task)) {
                self.ready.borrow_mut().push_back(previous);
            }
        } else {
            self.ready.borrow_mut().push_back(task);
        }
    }

    /// Whether a woken or yielded task waits to run here.
    pub(super) fn has_ready(&self) -> bool {
        let next = self.run_next.take();
        let has = next.is_some();
        self.run_next.set(next);
        has || !self.ready.borrow().is_empty()
    }

    /// The next task to run. The `run_next` case is kept small enough to inline into the
    /// loop; the rest is `next_task_from_queues`.
    #[inline(always)]
    pub(super) fn next_task(&self) -> Option<Task> {
        let tick = self.tick.get().wrapping_add(1);
        self.tick.set(tick);
        if let Some(task) = self.run_next.take() {
            // Fairness: every RUN_NEXT_TURNS-th pick goes through the queues, behind which
            // `run_next` waits its turn (two tasks that keep waking each other would otherwise
            // starve the rest), and so does the periodic look at timers, I/O and the injector.
            if !tick.is_multiple_of(RUN_NEXT_TURNS) && !tick.is_multiple_of(INJECTOR_INTERVAL) {
                return Some(task);
            }
            // One a timer put there is no pair that keeps waking each other: it keeps its
            // place at the head.
            if self.run_next_by_timer.get() {
                self.ready.borrow_mut().push_front(task);
            } else {
                self.ready.borrow_mut().push_back(task);
            }
        }
        self.next_task_from_queues(tick)
    }

    #[inline(never)]
    fn next_task_from_queues(&self, tick: u32) -> Option<Task> {
        if tick.is_multiple_of(INJECTOR_INTERVAL) {
            let clock = clock_now();
            self.clock.set(clock);
            self.tracing.set(trace::on());
            // The timers' look at the same clock read, not a second one.
            let timers_now = {
                let timers = self.timers.borrow();
                (!timers.is_empty()).then(|| timers.instant_at(clock))
            };
            if let Some(now) = timers_now {
                self.fire_timers_at(now);
            }
            self.poll_io();
            self.turn_tokio();
            if let Some(task) = self.steal_from_injector() {
                return Some(task);
            }
        }
        if self.remote.flags.take_pushed() {
            if self.remote.dump_pending() {
                self.answer_dump();
            }
            let mut inbox = self.remote.lock_inbox();
            self.ready.borrow_mut().extend(inbox.woken.drain(..));
            // Placed tasks join this worker's own deque, where thieves can still reach them.
            for task in inbox.placed.drain(..) {
                self.new_tasks.push(task);
            }
            self.remote.placed_len.store(0, Ordering::Relaxed);
        }
        // Alternate which local queue goes first, so that a task that keeps yielding cannot
        // starve never-started tasks, nor a spawning loop the tasks it woke; never-started
        // tasks first while this worker is behind another in live tasks (`defers_to`).
        let ready_first =
            tick.is_multiple_of(2) && (self.new_tasks.is_empty() || !self.behind_another_worker());
        let mut ready = self.ready.borrow_mut();
        let task = if ready_first {
            ready.pop_front().or_else(|| self.new_tasks.pop())
        } else {
            self.new_tasks.pop().or_else(|| ready.pop_front())
        };
        prefetch_ahead(&ready);
        drop(ready);
        task.or_else(|| self.steal_from_injector())
            .or_else(|| self.steal_from_workers())
            .or_else(|| {
                // Out of work: expired timers and I/O events may make some. A worker with
                // sockets leaves its I/O to the wait it is about to make (`Worker::idle`),
                // which returns at once with whatever is ready: a poll here first was a
                // second `epoll_wait`, mostly empty, before every sleep.
                self.fire_timers();
                if !super::io::has_sources(&self.remote) {
                    self.poll_io();
                }
                self.ready.borrow_mut().pop_front()
            })
    }

    fn steal_from_injector(&self) -> Option<Task> {
        loop {
            match self.shared.injector.steal_batch_and_pop(&self.new_tasks) {
                Steal::Success(task) => {
                    if self.tracing.get() {
                        trace::stole(task.header(), None);
                    }
                    return Some(task);
                }
                Steal::Empty => return None,
                Steal::Retry => {}
            }
        }
    }

    /// Steals never-started tasks (sched/mod.rs invariant 1: only those are in deques and
    /// in inboxes' `placed`).
    fn steal_from_workers(&self) -> Option<Task> {
        let stealers = &self.shared.stealers;
        let start = self.tick.get() as usize;
        for i in 0..stealers.len() {
            let victim = (start + i) % stealers.len();
            if victim == self.index || self.defers_to(&self.shared.remotes[victim]) {
                continue;
            }
            // Placed there by a spawn, not yet taken by that worker (it may be busy).
            if let Some(task) = self.shared.remotes[victim].take_placed() {
                self.remote.activity.stole();
                if self.tracing.get() {
                    trace::stole(task.header(), Some(victim));
                }
                return Some(task);
            }
            loop {
                match stealers[victim].steal_batch_and_pop(&self.new_tasks) {
                    Steal::Success(task) => {
                        self.remote.activity.stole();
                        if self.tracing.get() {
                            trace::stole(task.header(), Some(victim));
                        }
                        return Some(task);
                    }
                    Steal::Empty => break,
                    Steal::Retry => {}
                }
            }
        }
        None
    }

    /// Whether this worker, looking for work, leaves `victim`'s never-started tasks to it:
    /// this worker has [`BALANCE_SLACK`] more live tasks than `victim`, and `victim` is not
    /// stuck in one task (the monitor says so, `Remote::stuck`; without a monitor, never).
    ///
    /// Why: a task that spawns a burst of long-lived tasks keeps its own worker busy, so an
    /// idle thief started most of them, and since started tasks never move the split lasted:
    /// a million sleepers spawned by one task split 55 : 45, and at their wakes the fuller
    /// worker ran out of time first (`weft-bench sleepers`: 100 % busy where the p99 lateness
    /// reached tens of ms, the other worker at 65–88 %). The spawner's worker starts them
    /// instead, between the spawner's yields ([`Self::behind_another_worker`]). It runs
    /// nothing at once and keeps nothing out of reach: a spawner that blocks its thread (a
    /// `std` lock or channel) is stuck, and then thieves take its spawns as before
    /// (tests/placement_std_blocking.rs). Nor does a thief leave more than
    /// [`DEFER_MAX_QUEUED`] waiting there: live tasks are not CPU load, and a victim with that
    /// many new tasks queued is short of time, whatever it hosts.
    pub(super) fn defers_to(&self, victim: &Remote) -> bool {
        if !self.shared.has_monitor.load(Ordering::Relaxed) || victim.stuck.load(Ordering::Relaxed)
        {
            return false;
        }
        let queued =
            self.shared.stealers[victim.index].len() + victim.placed_len.load(Ordering::Relaxed);
        queued <= DEFER_MAX_QUEUED
            && lasting_load(victim) + BALANCE_SLACK < lasting_load(&self.remote)
    }

    /// Whether another worker (a different one each time) has [`BALANCE_SLACK`] more live
    /// tasks than this one: then this worker starts its own never-started tasks before it
    /// resumes the tasks that yielded, so that a spawning task's worker keeps its share of
    /// what it spawns ([`Self::defers_to`]).
    fn behind_another_worker(&self) -> bool {
        self.another_worker()
            .is_some_and(|other| lasting_load(&self.remote) + BALANCE_SLACK < lasting_load(other))
    }

    /// Another worker than this one, a different one each tick; `None` if there is none.
    pub(super) fn another_worker(&self) -> Option<&Arc<Remote>> {
        let remotes = &self.shared.remotes;
        if remotes.len() < 2 {
            return None;
        }
        let offset = 1 + self.tick.get() as usize % (remotes.len() - 1);
        Some(&remotes[(self.index + offset) % remotes.len()])
    }
}
