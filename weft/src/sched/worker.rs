//! A worker: one OS thread that runs tasks, one at a time, on their own stacks.
//!
//! Owns: [`Worker`] — its queues, its warm stack slots, its list of live (started, unfinished)
//! tasks — all touched by its own thread only; and the thread-locals `WORKER` (the worker this
//! thread is) and `ENTERED` (the runtime a plain thread entered).
//!
//! The loop: take a task (the one the last task woke, `run_next`, when there is one — see
//! `push_ready_from`; else the local ready queue and new-task deque alternately, the remote woken
//! queue, the injector every 61 ticks and when local work runs out, then steal never-started
//! tasks from the others); resume it until it yields, parks or returns; handle that on the
//! worker's own stack. With nothing to do, spin for [`SPIN`] (waking a sleeping vCPU costs
//! ≈35–40 µs in this VM, so a short spin pays for itself under ping-pong loads; a worker with
//! sockets skips the spin and waits in epoll, see `idle`), then sleep in
//! the poller.
//!
//! Invariants: sched/mod.rs 1–3; task/mod.rs 1–3. In particular `current` is non-null exactly
//! while a task runs on this worker, and `run_task` is never re-entered (a task cannot run the
//! worker loop).
//!
//! # Capturing a parked task
//! A task dump (`weft::debug`) needs each task's backtrace, which only the task's own stack
//! holds, and a started task never leaves its worker's thread (task/mod.rs invariant 1). So a
//! dump request goes to every worker (`Remote::request_dump`, a flag and a notify, like a wake);
//! the worker answers it between tasks (`answer_dump`), where every task in its live list is
//! switched out, either parked or in a ready queue:
//! 1. The worker takes a snapshot of the task's park state (PARKED or not), sets the task's
//!    `Header::capture` to its capture buffer, resumes the coroutine, and clears it again.
//! 2. The task is inside `suspend` (a park or a yield): it sees the capture, records its
//!    instruction pointers, stack pointer and — for a park — the `ParkReason` (a constant of
//!    the park site, passed to this cold path only) and the park time its parking frame holds
//!    (`debug::record`), and suspends again with the same `Suspend`.
//!    It does not return from `suspend`, so `ParkState::resumed`, the cancellation check and
//!    the caller's re-check never run: the wake is invisible to it.
//! 3. The worker does not call `publish_parked` after a capture: the park state was never
//!    touched, so a PARKED task is still PARKED (its parked reference, task/mod.rs invariant 4,
//!    still held by the park state), and a task an `unpark` moved to NOTIFIED meanwhile — from
//!    another thread, since this one is busy — was queued by that `unpark` as usual and runs
//!    later with an ordinary resume.
//!
//! A task that blocks its thread while panicking ("Parking while panicking") holds its worker,
//! so the worker cannot answer: the dump reports that worker's running task from its `Remote`
//! without resuming anything, as it does for a task that computes without parking.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::panic::Location;
use std::ptr::{self, NonNull};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use corosensei::CoroutineResult;
use crossbeam_deque::Steal;

use super::runtime::{Handle, Remote, Shared};
use super::stats::{site_key, PrefillDepths, Sampler};
use crate::debug::{trace, ParkSite};
use crate::metrics::counters;
use crate::park::ParkReason;
use crate::stack::{self, LocalSlots, SizeClass, Slot};
use crate::task::{interrupt, Cancelled, Header, RunState, Suspend, Task, TaskCoroutine};

/// How long an idle worker keeps looking for work before it sleeps.
const SPIN: Duration = Duration::from_micros(50);
/// Idle spins in a row that found no work, after which a worker sleeps without spinning.
const SPIN_MISSES: u32 = 4;
/// The longest wait for a deadline that an idle worker spends awake rather than asleep
/// (`Worker::await_close_deadline`).
const DEADLINE_SPIN: Duration = Duration::from_micros(12);
/// How far ahead an idle worker restores the compacted stacks of tasks its timers will wake
/// (`Worker::restore_due_soon`), and how many at most per idle.
const PRE_RESTORE: Duration = Duration::from_micros(500);
const PRE_RESTORE_MAX: usize = 64;
/// How often (in tasks run) the injector is checked before local work, so that tasks spawned
/// from outside are not starved by a busy worker (Go checks its global queue every 61 ticks).
const INJECTOR_INTERVAL: u32 = 61;
/// A task woken by the running one runs next (`Worker::push_ready_from`) except at every this
/// many picks, when the worker takes from its queues instead.
const RUN_NEXT_TURNS: u32 = 16;
/// Loop turns between two stack steps of a busy worker (an idle one steps before sleeping).
/// A step handles up to `StackPolicy::batch` (256) tasks, so a worker that starts a task per
/// turn — a spawn storm of tasks that park — still compacts as fast as it parks them: at 1024
/// turns 100K tasks in mode 8k peaked at 1.56 GiB, at 256 at 0.69 GiB.
const STACK_STEP_TICKS: u32 = 256;
/// How long shutdown waits for cancelled tasks that parked again while unwinding.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

thread_local! {
    /// The worker this thread is, or null.
    static WORKER: Cell<*const Worker> = const { Cell::new(ptr::null()) };
    /// The runtimes this plain thread entered with `Handle::enter`, oldest first; the last
    /// is the one it spawns onto.
    static ENTERED: RefCell<Vec<Handle>> = const { RefCell::new(Vec::new()) };
}

/// The worker of the current thread, if it is one.
#[inline]
fn current_worker<'a>() -> Option<&'a Worker> {
    let worker = WORKER.with(Cell::get);
    // SAFETY: `WORKER` is set by `Worker::run` to a worker that lives on this thread's stack
    // until `run` returns, and reset to null before that.
    unsafe { worker.as_ref() }
}

/// The header of the task running on this thread, if any.
#[inline]
fn current_header<'a>() -> Option<&'a Header> {
    let header = current_worker()?.current.get()?;
    // SAFETY: `current` points at the header of the task being resumed, which the worker keeps
    // alive (it holds the `Task`) for the whole resume, and we are inside that resume.
    Some(unsafe { header.as_ref() })
}

/// The running task, as a pointer, without touching its reference count: for waiters that
/// only need it while the task is blocked (its worker's live list keeps it alive then,
/// task/mod.rs invariant 3). Turn it back into a `Task` with `Task::clone_from_ptr`.
#[inline]
pub(crate) fn current_task_ptr() -> Option<NonNull<Header>> {
    current_worker()?.current.get()
}

pub(crate) fn current_task() -> Option<Task> {
    let header = current_worker()?.current.get()?;
    // SAFETY: as in `current_header`: the task is alive for the whole resume.
    Some(unsafe { Task::clone_from_ptr(header) })
}

/// Switches from the running task back to its worker; false if not in a task.
///
/// A yield while the thread is panicking does not switch (see "Parking while panicking").
#[inline]
pub(crate) fn suspend_current(reason: Suspend) -> bool {
    let Some(header) = current_header() else {
        return false;
    };
    if std::thread::panicking() && !shutting_down() {
        std::thread::yield_now();
    } else {
        // A yield is a cancellation point like a park: a loop that only yields still ends
        // at shutdown.
        header.unwinding.set(std::thread::panicking());
        unwind_if_cancelled(header);
        suspend(header, reason, None);
        unwind_if_cancelled(header);
    }
    true
}

/// Switches from the running task, whose header is `header`, back to its worker, until it is
/// resumed to run: the resumes of a dump in between do not return from here ("Capturing a
/// parked task" step 2). `site` is what a park waits on and since when; `None` for a yield.
#[inline]
fn suspend(header: &Header, reason: Suspend, site: Option<(ParkReason, &ParkSite)>) {
    let yielder = header.yielder.get();
    // SAFETY: `header` is the running task's (callers got it from `current_header`), and its
    // yielder lives at the root of this task's stack, the stack we run on now.
    stack::switch_out(unsafe { &*yielder }, reason, &header.stack);
    // One load of a header line the park already touched, on every resume. Nothing else
    // lives across the switch for it: the cold path reloads the yielder from the header,
    // `site`'s clock is a slot of the parking frame, and its reason a constant of the park
    // site (park_task is inlined into each), materialised only on the cold path.
    if header.capture.get().is_some() {
        answer_captures(header, reason, site);
    }
}

/// "Capturing a parked task" step 2: records, then switches out again, as long as the worker
/// resumes this task for captures; returns at the first resume to run.
#[cold]
#[inline(never)]
fn answer_captures(header: &Header, reason: Suspend, site: Option<(ParkReason, &ParkSite)>) {
    // SAFETY: as in `suspend`: the running task's yielder, at the root of this stack.
    let yielder = unsafe { &*header.yielder.get() };
    while let Some(capture) = header.capture.get() {
        crate::debug::record(capture, site);
        // Through `switch_out`, so that the stack pointer the stack layer keeps is this
        // deeper one: what lies below the first switch's is live now (stack/compact.rs
        // invariant 1).
        stack::switch_out(yielder, reason, &header.stack);
    }
}

/// Parks the running task (park/state.rs) for `reason`; false if not in a task. A pending
/// cancellation unwinds before the park ("Cancellation at a park").
#[inline]
pub(crate) fn park_current_task(reason: ParkReason) -> bool {
    let Some(worker) = current_worker() else {
        return false;
    };
    let Some(header) = worker.current.get() else {
        return false;
    };
    // SAFETY: as in `current_header`.
    let header = unsafe { header.as_ref() };
    park_task::<false>(worker, header, None, reason);
    true
}

/// Parks the running task like [`park_current_task`] (until `deadline`, if any), but a
/// pending cancellation does not unwind: the park returns at once, or as soon as the
/// cancellation arrives, with `Some(true)`. The caller gives its wait up first (an operation
/// that completed meanwhile keeps its result) and then unwinds with
/// [`unwind_if_cancelled_now`] ("Cancellation at a park"). `None` if not in a task.
#[inline]
pub(crate) fn park_current_task_cancellable(
    deadline: Option<Instant>,
    reason: ParkReason,
) -> Option<bool> {
    let worker = current_worker()?;
    let header = current_header()?;
    Some(match deadline {
        None => park_task::<true>(worker, header, None, reason),
        Some(deadline) => park_task_until::<true>(worker, header, deadline, reason),
    })
}

/// Unwinds the running task if a cancellation is pending, as a park would; returns if there
/// is none (a `Context` the task left already). On a plain thread: its cancelled `Context`.
///
/// Called right after a cancellable park, whose `unwinding` flag it keeps: the thread's panic
/// state may be another task's by now (at shutdown, see `park_task`).
pub(crate) fn unwind_if_cancelled_now() {
    match current_header() {
        Some(header) => unwind_if_cancelled(header),
        None => crate::context::unwind_if_thread_scope_cancelled(),
    }
}

#[cfg(feature = "interpose")]
/// The running task's pending cancellation, for a call that reports it as an error instead
/// of unwinding (interpose/mod.rs invariant 3): the task's own (`Task::cancel`, shutdown), or
/// the outermost cancelled `Context` it is bound to, whose `bind` then returns its error
/// (context.rs `cut_short`). `None` outside a task.
pub(crate) fn cancellation_as_error() -> Option<crate::park::Cancellation> {
    let header = current_header()?;
    // Acquire: pairs with the Release `fetch_or` of `Task::interrupt`.
    let bits = header.interrupt.load(Ordering::Acquire);
    if bits == 0 {
        return None;
    }
    if bits & (interrupt::SHUTDOWN | interrupt::CANCEL) != 0 {
        return Some(crate::park::Cancellation::Task);
    }
    crate::context::cut_short(header).map(crate::park::Cancellation::Context)
}

/// A cancellation's unwind caught by a call that reports it as an error instead
/// (interpose/mod.rs invariant 3); `None` if `payload` is no cancellation's (or outside a
/// task). A context's scope is marked cut short, as in [`cancellation_as_error`].
#[cfg(feature = "interpose")]
pub(crate) fn caught_cancellation(
    payload: &(dyn std::any::Any + Send),
) -> Option<crate::park::Cancellation> {
    if payload.is::<Cancelled>() {
        return Some(crate::park::Cancellation::Task);
    }
    let header = current_header()?;
    crate::context::caught_scope_unwind(header, payload).map(crate::park::Cancellation::Context)
}

/// "Cancellation at a park": what a park does with a cancellation request.
///
/// A cancelled task unwinds *before* it parks, never right after it resumes: a wait whose
/// operation completed while the task was parked — a channel value handed over, a lock or
/// permits granted, a joined task's result — returns that result, and the cancellation takes
/// effect at the task's next wait (every wait parks in a loop that re-checks its condition,
/// park/mod.rs invariant 2, so a wake by the cancel alone parks again and unwinds there).
/// A park that follows a hand-off protocol (`CANCELLABLE`, the channels) does not unwind at
/// all: it returns true, so that its caller aborts its wait under its own lock first and
/// unwinds only if no peer completed it — otherwise a value handed over between the caller's
/// last look and this park's unwind would be dropped by the unwind.
///
/// The one exception is shutdown: a task resumed while its runtime shuts down unwinds at
/// the resume, whatever its wait was handed (the runtime and its tasks are ending; a value
/// handed over at that moment is dropped with the task that held it).
#[inline(always)]
fn park_task<const CANCELLABLE: bool>(
    worker: &Worker,
    header: &Header,
    deadline: Option<Instant>,
    reason: ParkReason,
) -> bool {
    // Whether this task is unwinding, for the checks after it resumes: only now is the
    // thread's panic state surely its own ("Parking while panicking").
    let panicking = std::thread::panicking();
    header.unwinding.set(panicking);
    if CANCELLABLE {
        if cancel_pending(header) {
            return true;
        }
    } else {
        unwind_if_cancelled(header);
    }
    if header.park.take_token() {
        return CANCELLABLE && cancel_pending(header);
    }
    if panicking && !shutting_down() {
        block_thread(header, deadline);
    } else {
        // Kept in this frame for a dump to read ("Capturing a parked task"); the clock is
        // the worker's coarse one (`Worker::clock`), not a clock read per park.
        let site = ParkSite::new(worker.clock.get());
        suspend(header, Suspend::Park(reason), Some((reason, &site)));
    }
    header.park.resumed();
    // At shutdown a resumed task unwinds at once, as the unwind it continues or starts is
    // decided by the `unwinding` flag taken at this park: a later park could not tell, since
    // another task of this worker may be switched out in the middle of its own unwind then,
    // which makes the thread look panicking ("Parking while panicking").
    unwind_if_shut_down(header);
    CANCELLABLE && cancel_pending(header)
}

/// The shutdown part of [`unwind_if_cancelled`], for a task that just resumed.
#[inline]
fn unwind_if_shut_down(header: &Header) {
    if header.interrupt.load(Ordering::Relaxed) & interrupt::SHUTDOWN != 0
        && !header.unwinding.get()
    {
        interrupted(header);
    }
}

/// Whether a cancellation would unwind this task at a park now (`unwind_if_cancelled`).
#[inline]
fn cancel_pending(header: &Header) -> bool {
    header.interrupt.load(Ordering::Relaxed) != 0 && !header.unwinding.get()
}

/// Whether the runtime of the current worker is shutting down.
fn shutting_down() -> bool {
    current_worker().is_some_and(|w| w.shared.shutdown.load(Ordering::Relaxed))
}

/// "Parking while panicking": the task does not switch out but parks its worker's OS thread
/// until its unpark (park/state.rs invariant 4) or its deadline.
///
/// Why: `std::thread::panicking()`, the poisoning of std locks and the panic hook's
/// re-entrancy guard are per OS thread. A task that switched out in the middle of an unwind
/// (a destructor that sends or sleeps) would leave them set for every task its worker ran
/// meanwhile: their std `MutexGuard`s were poisoned, a panic among them while the first task's
/// panic hook was parked aborted the process, and shutdown did not recognise them as
/// cancelled. So for as long as a task is panicking it keeps its thread, as a panicking std
/// thread does. The price: the worker's other tasks wait until the unwind ends, and a
/// destructor that waits, during an unwind, for another task of the same worker waits for
/// good (the monitor reports the worker as stuck) — until shutdown.
///
/// At shutdown every task is being cancelled, so an unwinding task switches out as usual and
/// the worker resumes only tasks that unwind too (a destructor may join a child task that is
/// itself cancelled): each such task's `unwinding` flag, taken when it parked, says whether it
/// continues an unwind or starts one (`unwind_if_cancelled`). `Runtime::drop` unparks the
/// worker threads, so a task blocking one re-parks in that mode.
#[cold]
fn block_thread(header: &Header, deadline: Option<Instant>) {
    if header.park.block_thread() {
        match deadline {
            Some(deadline) => {
                std::thread::park_timeout(deadline.saturating_duration_since(Instant::now()))
            }
            None => std::thread::park(),
        }
    }
}

/// Parks the running task until unparked or until `deadline`; false if not in a task.
pub(crate) fn park_current_task_until(deadline: Instant, reason: ParkReason) -> bool {
    let Some(worker) = current_worker() else {
        return false;
    };
    let Some(header) = current_header() else {
        return false;
    };
    park_task_until::<false>(worker, header, deadline, reason);
    true
}

/// [`park_task`] until `deadline` at the latest.
///
/// The deadline is an entry in the home worker's timer map, removed again when the task
/// returns (so a wait that ends early leaves nothing behind).
#[inline]
fn park_task_until<const CANCELLABLE: bool>(
    worker: &Worker,
    header: &Header,
    deadline: Instant,
    reason: ParkReason,
) -> bool {
    if std::thread::panicking() && !shutting_down() {
        // The task keeps its thread ("Parking while panicking"): no timer entry, the thread's
        // own park times out.
        return park_task::<CANCELLABLE>(worker, header, Some(deadline), reason);
    }
    // SAFETY: `header` is the running task's: alive for the whole resume.
    let task = unsafe { Task::clone_from_ptr(NonNull::from(header)) };
    let seq = worker.timer_seq.get().wrapping_add(1);
    worker.timer_seq.set(seq);
    let key = (deadline, seq);
    worker.timers.borrow_mut().insert(key, task);
    // Removed when the park returns or unwinds (a cancelled sleeper must not keep its task
    // alive until the deadline).
    let _entry = TimerEntry { worker, key };
    park_task::<CANCELLABLE>(worker, header, None, reason)
}

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
        prefetch_header(task);
    }
    ready[1].header().stack.prefetch_early();
    ready[0].header().stack.prefetch();
}

/// Pulls a task's header into the cache: a hint, it never faults.
#[inline]
fn prefetch_header(task: &Task) {
    let at = task.as_ptr().as_ptr() as *const u8;
    for line in (0..std::mem::size_of::<Header>()).step_by(64) {
        stack::prefetch_line(at.wrapping_add(line));
    }
}

/// Timers [`Worker::fire_timers`] takes out of the map before it unparks them.
const FIRE_BATCH: usize = 16;

/// A parked task's entry in its worker's timer map, removed on drop.
struct TimerEntry<'a> {
    worker: &'a Worker,
    key: (Instant, u64),
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

/// A cancelled task unwinds at its park (unless it is already unwinding): cancelled by
/// shutdown, by `Task::cancel`, or by a `Context` it is bound to (task/mod.rs `interrupt`).
/// With no request pending this is one plain load.
#[inline]
fn unwind_if_cancelled(header: &Header) {
    if header.interrupt.load(Ordering::Relaxed) != 0 && !header.unwinding.get() {
        interrupted(header);
    }
}

#[cold]
fn interrupted(header: &Header) {
    // Acquire: pairs with the Release `fetch_or` of `Task::interrupt`.
    let bits = header.interrupt.load(Ordering::Acquire);
    if bits & interrupt::SHUTDOWN != 0 {
        std::panic::resume_unwind(Box::new(Cancelled::SHUTDOWN));
    }
    if bits & interrupt::CANCEL != 0 {
        std::panic::resume_unwind(Box::new(Cancelled::REQUESTED));
    }
    crate::context::unwind_if_scope_cancelled(header);
}

/// Wakes the OS thread of a task that blocks it (park/state.rs invariant 4).
#[cold]
pub(crate) fn wake_blocked(header: &Header) {
    let home = header
        .home()
        .expect("weft: a task blocked its thread before it started");
    home.thread
        .get()
        .expect("weft: a worker's thread is recorded before its tasks run")
        .unpark();
}

/// Queues a woken task on its home worker (sched/mod.rs invariant 1).
#[inline]
pub(crate) fn schedule_woken(task: Task) {
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
            worker.push_ready_from(task);
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

/// Records the run slice of `header`'s task that began at `started` and ended in `result`.
fn trace_run_ended(
    header: &Header,
    started: u64,
    result: &CoroutineResult<Suspend, Option<crate::park::Waiter>>,
) {
    let ended = match result {
        CoroutineResult::Yield(Suspend::Yield) => trace::Ended::Yield,
        CoroutineResult::Yield(Suspend::Park(reason)) => trace::Ended::Park(*reason),
        CoroutineResult::Return(_) => trace::Ended::Return,
    };
    trace::run_ended(header, started, ended);
}

/// The runtime (its `Shared`, as an address) and index of the worker this thread is, if it is
/// one: how a trace names the thread's track.
pub(crate) fn current_worker_of() -> Option<(*const Shared, usize)> {
    current_worker().map(|w| (Arc::as_ptr(&w.shared), w.index))
}

/// The blocking pool of the runtime the running task belongs to; `None` on a plain thread
/// (entered or not: a plain thread may block itself).
pub(crate) fn current_blocking_pool() -> Option<Arc<super::blocking::Pool>> {
    current_header()?;
    Some(current_worker()?.shared.blocking.clone())
}

/// The compute pool of the runtime the running task belongs to; `None` on a plain thread.
pub(crate) fn current_compute_pool<'a>() -> Option<&'a super::compute::Pool> {
    current_header()?;
    Some(&current_worker()?.shared.compute)
}

/// The tokio bridge of the runtime the running task belongs to (`weft::tokio`); `None` on a
/// plain thread. Borrowed like `current_compute_pool`: the worker holds its runtime's state
/// for as long as any of its tasks can run.
#[cfg(feature = "tokio")]
pub(crate) fn current_tokio_bridge<'a>() -> Option<&'a crate::tokio::Bridge> {
    current_header()?;
    Some(&current_worker()?.shared.tokio)
}

/// Drops the closure of a task that never started and tells its joiner; a no-op for a task
/// that did start. The caller holds `task` exclusively: it popped it from a queue.
pub(crate) fn cancel_unstarted(task: &Task) {
    // SAFETY: task/mod.rs invariant 1: a never-started task is in one queue at a time, and the
    // caller took it out.
    let state = unsafe { task.header().run_state() };
    if let RunState::New { .. } = state {
        *state = RunState::Done;
        counters::OFF_WORKER.cancelled_unstarted();
        task.drop_unstarted();
    }
}

/// True if this thread is a worker of the runtime behind `shared`.
pub(crate) fn on_worker_of(shared: &Arc<Shared>) -> bool {
    current_worker().is_some_and(|w| Arc::ptr_eq(&w.shared, shared))
}

/// What `enter` recorded, for `exit`: the guard's place in the thread's stack of entered
/// runtimes.
pub(crate) struct EnterToken {
    depth: usize,
}

/// Makes `handle` the runtime a plain thread spawns onto (`Handle::enter`); `None` in a task,
/// where `weft::spawn` always spawns onto the task's own runtime and entering changes
/// nothing: tasks share their worker's thread, so a thread-local "entered" runtime set by one
/// task would leak to the others.
pub(crate) fn enter(handle: Handle) -> Option<EnterToken> {
    if current_header().is_some() {
        return None;
    }
    let depth = ENTERED.with(|entered| {
        let mut entered = entered.borrow_mut();
        entered.push(handle);
        entered.len()
    });
    Some(EnterToken { depth })
}

/// Undoes `enter`: the thread is left in the runtime it was in before that guard's `enter`.
///
/// # Panics
/// When a guard is dropped while guards entered after it are live (unless already
/// panicking); those are undone too, so the thread is never left in the wrong runtime, and
/// their own drops later do nothing.
pub(crate) fn exit(token: EnterToken) {
    let in_order = ENTERED.with(|entered| {
        let mut entered = entered.borrow_mut();
        // Shorter: an older guard dropped out of order undid this one already (and panicked).
        let in_order = entered.len() <= token.depth;
        entered.truncate(token.depth - 1);
        in_order
    });
    if !in_order && !std::thread::panicking() {
        panic!(
            "weft: EnterGuard values dropped out of order: guards from Handle::enter must be \
             dropped in the reverse order of their creation"
        );
    }
}

/// Where a spawn goes: the current worker's deque, or an entered runtime's injector.
pub(crate) enum Spawner<'a> {
    Worker(&'a Worker),
    Handle(&'a Handle),
}

impl Spawner<'_> {
    /// Whether the runtime is in the grace period of `Runtime::shutdown_timeout`, when new
    /// spawns are refused. (After it, during the cancellation, a spawn is cancelled at once
    /// instead, so a destructor that spawns does not fail.)
    pub(crate) fn refuses_spawns(&self) -> bool {
        let shared = match self {
            Spawner::Worker(w) => &w.shared,
            Spawner::Handle(h) => &h.shared,
        };
        shared.closing.load(Ordering::Relaxed) && !shared.shutdown.load(Ordering::Relaxed)
    }

    /// The stack size of a task spawned at `site` without one of its own: the runtime's
    /// stack profile's for that site if it has one (`RuntimeBuilder::stack_profile`), else
    /// the runtime's default.
    #[inline]
    pub(crate) fn class_for(&self, site: &'static Location<'static>) -> SizeClass {
        let shared = match self {
            Spawner::Worker(w) => &w.shared,
            Spawner::Handle(h) => &h.shared,
        };
        match &shared.site_classes {
            Some(sites) => sites.class_for(site).unwrap_or(shared.default_class),
            None => shared.default_class,
        }
    }

    /// The slot a new task of `class` takes at spawn: none where guards are page-table
    /// markers, for then the worker that starts the task takes one from its own warm slots
    /// (`Worker::start`). A burst of short tasks then cycles through a few warm stacks on
    /// the workers that run them; taken here, every task queued at once held its own slot,
    /// and a burst of 100K spawns touched tens of thousands of fresh or trimmed stacks (0.28
    /// page faults per spawn in the spawn benchmark). Where guards are `mprotect`ed pages
    /// each slot costs kernel mappings, and the spawn takes it, so that running out of
    /// them is the spawn's error (README, "Supported targets").
    pub(crate) fn take_slot(&self, class: SizeClass) -> std::io::Result<Option<Slot>> {
        if stack::guards_are_markers() == Some(true) {
            return Ok(None);
        }
        match self {
            Spawner::Worker(w) => w.slots.borrow_mut().take(class).map(Some),
            Spawner::Handle(_) => Slot::take(class).map(Some),
        }
    }

    pub(crate) fn submit(&self, task: Task) {
        match self {
            Spawner::Worker(w) => {
                if w.tracing.get() {
                    trace::spawned(task.header());
                }
                w.remote.counters.spawned();
                if w.shared.shutdown.load(Ordering::Relaxed) {
                    // A spawn during shutdown (a cancelled task's destructor) is cancelled
                    // at once, in the spawner's context: workers are stopping, and one that
                    // already left its loop would never run or cancel it.
                    cancel_unstarted(&task);
                    return;
                }
                if let Some(other) = w.less_loaded_worker() {
                    // sched/mod.rs invariant 1 holds: the task has not started. A worker
                    // that closed meanwhile (shutdown) hands it back: cancel it.
                    if let Err(task) = other.place(task) {
                        cancel_unstarted(&task);
                    }
                    return;
                }
                w.new_tasks.push(task);
                // Wake-ups for a burst: the first spawn of a resume, and every
                // WAKE_CHECK_EVERY-th after it, look for an idle worker to wake; the others
                // skip the fence and the look (a fence per spawn was 5 % of a spawn's time).
                // Nothing is stranded by the skip: this worker is awake and looks at its own
                // deque before it sleeps (sched/idle.rs, "Spawns"); at most the next
                // WAKE_CHECK_EVERY − 1 tasks wait for a thief that a later spawn, the
                // thieves' own spinning or the monitor brings.
                let spawns = w.spawns_this_resume.get();
                w.spawns_this_resume.set(spawns.wrapping_add(1));
                if spawns % WAKE_CHECK_EVERY == 0 {
                    w.shared.wake_idle_worker(Some(w.index));
                }
            }
            Spawner::Handle(h) => {
                if trace::on() {
                    trace::spawned(task.header());
                }
                counters::OFF_WORKER.spawned();
                h.submit(task);
            }
        }
    }
}

/// Within one resume of a task, one spawn in this many looks for an idle worker to wake
/// (`Spawner::submit`).
const WAKE_CHECK_EVERY: u32 = 16;

/// How many more live tasks than another worker a worker must have before its spawns go to
/// that worker: a slack, so that short-lived tasks (spawn, run, finish) stay local and cheap.
const BALANCE_SLACK: usize = 32;

/// Most never-started tasks a thief leaves queued on a worker with fewer live tasks
/// (`Worker::defers_to`): what a spawning task queues between two of its cooperative yields,
/// twice over.
const DEFER_MAX_QUEUED: usize = 2 * super::coop::COOP_BUDGET as usize;

/// A worker's live tasks plus those placed with it and not yet started: what will live there.
fn lasting_load(remote: &Remote) -> usize {
    remote.live.load(Ordering::Relaxed) + remote.placed_len.load(Ordering::Relaxed)
}

/// Calls `f` with the spawner of `target`, or of the current runtime when `target` is `None`:
/// the running task's runtime, else the one this plain thread entered.
///
/// A spawn aimed at a runtime (`Runtime::spawn`, `Handle::spawn`, `block_on`) goes to that
/// runtime even from a task of another one: to its injector, with its stack size.
///
/// # Panics
/// Outside a runtime, when `target` is `None`.
pub(crate) fn with_spawner<R>(
    site: &'static Location<'static>,
    target: Option<&Handle>,
    f: impl FnOnce(&Spawner<'_>) -> R,
) -> R {
    if let Some(worker) = current_worker() {
        if target.is_none_or(|h| Arc::ptr_eq(&h.shared, &worker.shared)) {
            return f(&Spawner::Worker(worker));
        }
    }
    if let Some(handle) = target {
        return f(&Spawner::Handle(handle));
    }
    let handle = ENTERED.with(|entered| entered.borrow().last().cloned());
    match handle {
        Some(handle) => f(&Spawner::Handle(&handle)),
        None => panic!(
            "weft: spawn called outside a weft runtime at {site}: call it from a task, from \
             Runtime::block_on or Runtime::spawn, or on a thread that holds Handle::enter"
        ),
    }
}

/// Started, unfinished tasks of one worker (task/mod.rs invariant 3).
///
/// A `slab::Slab` chains its free entries through the vacant entries themselves: the free
/// indices used to be a `Vec` of their own that grew while tasks finished, and a doubling of
/// it at half a million entries (a copy and fresh pages, about a millisecond) stalled the
/// worker in the middle of a burst of wakes; the pool lists in stack/mod.rs had the same
/// problem, measured there.
type Live = slab::Slab<Task>;

pub(crate) struct Worker {
    index: usize,
    shared: Arc<Shared>,
    remote: Arc<Remote>,
    /// Never-started tasks spawned here; others steal from its other end.
    new_tasks: crossbeam_deque::Worker<Task>,
    /// Woken and yielded tasks of this worker; never stolen.
    ready: RefCell<VecDeque<Task>>,
    /// The task the running task woke last, run next (Go's `runnext`); see `push_ready_from`.
    run_next: Cell<Option<Task>>,
    slots: RefCell<LocalSlots>,
    /// Parked tasks whose stacks are to be reclaimed or compacted (stack/compact.rs).
    stacks: RefCell<stack::ParkedStacks>,
    /// How deep to prefill a fresh slot, by spawn site, from what compaction found.
    prefill: RefCell<PrefillDepths>,
    live: RefCell<Live>,
    /// The header of the task being resumed, if any.
    current: Cell<Option<NonNull<Header>>>,
    tick: Cell<u32>,
    /// Deadlines of this worker's parked tasks (time/mod.rs explains the choice of map).
    timers: RefCell<BTreeMap<(Instant, u64), Task>>,
    timer_seq: Cell<u64>,
    /// Idle spins in a row that found nothing (see `idle`).
    spin_misses: Cell<u32>,
    /// Spawns onto `new_tasks` since the running task was resumed (see `Spawner::submit`).
    spawns_this_resume: Cell<u32>,
    /// `remote.running_name` holds a name (see there).
    named_running: Cell<bool>,
    /// A coarse clock for the park time a dump shows (a `debug::clock_now` word): refreshed after each sleep and every
    /// `INJECTOR_INTERVAL` picks, so a park costs a load instead of a clock read (≈25–40 ns in
    /// this VM, a fifth of a ping-pong round trip). A park's time may read early by up to
    /// that many task runs.
    clock: Cell<u64>,
    /// `debug::trace::on()`, refreshed with `clock`: what this worker's event sites test
    /// (debug/trace/mod.rs invariant 1). A field of the worker the site holds anyway, where the
    /// global flag is a load through the GOT from another codegen unit (two instructions
    /// more at each of the four sites of a ping-pong round trip). A trace starts on a
    /// worker within `INJECTOR_INTERVAL` picks or at its next wake.
    tracing: Cell<bool>,
    /// Which live tasks have their stack depth sampled (stats.rs).
    sampler: Sampler,
}

impl Worker {
    pub(crate) fn new(
        index: usize,
        shared: Arc<Shared>,
        new_tasks: crossbeam_deque::Worker<Task>,
    ) -> Worker {
        let policy = shared.stack_policy;
        Worker {
            index,
            remote: shared.remotes[index].clone(),
            shared,
            new_tasks,
            ready: RefCell::new(VecDeque::new()),
            run_next: Cell::new(None),
            slots: RefCell::new(LocalSlots::default()),
            stacks: RefCell::new(stack::ParkedStacks::new(policy)),
            prefill: RefCell::new(PrefillDepths::default()),
            live: RefCell::new(Live::default()),
            current: Cell::new(None),
            tick: Cell::new(0),
            timers: RefCell::new(BTreeMap::new()),
            timer_seq: Cell::new(0),
            spin_misses: Cell::new(0),
            spawns_this_resume: Cell::new(0),
            named_running: Cell::new(false),
            clock: Cell::new(crate::debug::clock_now()),
            tracing: Cell::new(trace::on()),
            sampler: Sampler::default(),
        }
    }

    /// The worker thread's body.
    ///
    /// User code runs only inside tasks, each under its own `catch_unwind` (task/cell.rs), so
    /// a panic that reaches this loop is weft's own bug. It aborts: unwinding would end the
    /// thread, destroy its thread-locals, and leave its suspended tasks to be dropped on
    /// another thread (task/mod.rs invariant 1).
    pub(crate) fn run(self) {
        let _alt_stack = stack::AltStack::install();
        let _ = self.remote.thread.set(std::thread::current());
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        self.remote.tid.store(tid, Ordering::Relaxed);
        self.remote.activity.start();
        WORKER.with(|w| w.set(&self));
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.main_loop();
            self.shut_down();
        }));
        if let Err(payload) = outcome {
            let message = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("a non-string payload");
            eprintln!(
                "weft: worker {}: panic outside any task: {message}",
                self.index
            );
            eprintln!("weft: fatal error: worker loop panicked");
            std::process::abort();
        }
        WORKER.with(|w| w.set(ptr::null()));
    }

    fn main_loop(&self) {
        while !self.shared.shutdown.load(Ordering::Relaxed) {
            match self.next_task() {
                Some(task) => self.run_task(task),
                None => self.idle(),
            }
            if self.tick.get() % STACK_STEP_TICKS == 0 {
                self.stack_step();
            }
        }
    }

    /// A step of shrinking the stacks of long-parked tasks (stack/compact.rs); returns when
    /// the next is due.
    fn stack_step(&self) -> Option<Duration> {
        let live = self.live.borrow();
        let mut prefill = self.prefill.borrow_mut();
        self.stacks.borrow_mut().step(
            |index| {
                let task = live.get(index)?;
                let header = task.header();
                Some(stack::LiveStack {
                    stack: &header.stack,
                    size: header.class.bytes(),
                    parked: header.park.is_parked(),
                    key: site_key(header.spawn_site),
                })
            },
            |site, pages| prefill.observe(site, pages),
        )
    }

    /// Queues a task woken on this worker. One woken by the running task goes to `run_next`:
    /// the running task is usually about to park (a send handing over to a waiting receiver,
    /// then a receive), and the woken one then runs at once without a trip through the ready
    /// queue — a rendezvous ping-pong's every half trip. Whatever held `run_next` goes to the
    /// back of the ready queue.
    #[inline]
    fn push_ready_from(&self, task: Task) {
        if self.current.get().is_some() {
            if let Some(previous) = self.run_next.replace(Some(task)) {
                self.ready.borrow_mut().push_back(previous);
            }
        } else {
            self.ready.borrow_mut().push_back(task);
        }
    }

    /// Whether a woken or yielded task waits to run here.
    fn has_ready(&self) -> bool {
        let next = self.run_next.take();
        let has = next.is_some();
        self.run_next.set(next);
        has || !self.ready.borrow().is_empty()
    }

    /// The next task to run. The `run_next` case is kept small enough to inline into the
    /// loop; the rest is `next_task_from_queues`.
    #[inline(always)]
    fn next_task(&self) -> Option<Task> {
        let tick = self.tick.get().wrapping_add(1);
        self.tick.set(tick);
        if let Some(task) = self.run_next.take() {
            // Fairness: every RUN_NEXT_TURNS-th pick goes through the queues, behind which
            // `run_next` waits its turn (two tasks that keep waking each other would otherwise
            // starve the rest), and so does the periodic look at timers, I/O and the injector.
            if tick % RUN_NEXT_TURNS != 0 && tick % INJECTOR_INTERVAL != 0 {
                return Some(task);
            }
            self.ready.borrow_mut().push_back(task);
        }
        self.next_task_from_queues(tick)
    }

    #[inline(never)]
    fn next_task_from_queues(&self, tick: u32) -> Option<Task> {
        if tick % INJECTOR_INTERVAL == 0 {
            self.clock.set(crate::debug::clock_now());
            self.tracing.set(trace::on());
            self.fire_timers();
            self.poll_io();
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
            tick % 2 == 0 && (self.new_tasks.is_empty() || !self.behind_another_worker());
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
                // Out of work: expired timers and I/O events may make some.
                self.fire_timers();
                self.poll_io();
                self.ready.borrow_mut().pop_front()
            })
    }

    /// Unparks the tasks whose deadline passed; returns the next deadline, if any.
    ///
    /// In batches of [`FIRE_BATCH`]: a batch's headers are prefetched as they leave the map,
    /// then its tasks are unparked (which reads and writes their headers). One by one, each
    /// header was a cache and TLB miss of its own, taken in turn: ≈11 % of the workers' CPU
    /// at a million sleepers' wakes. What their resumes read is `prefetch_ahead`'s.
    fn fire_timers(&self) -> Option<Instant> {
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
    fn defers_to(&self, victim: &Remote) -> bool {
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
    fn another_worker(&self) -> Option<&Arc<Remote>> {
        let remotes = &self.shared.remotes;
        if remotes.len() < 2 {
            return None;
        }
        let offset = 1 + self.tick.get() as usize % (remotes.len() - 1);
        Some(&remotes[(self.index + offset) % remotes.len()])
    }

    /// Another worker with [`BALANCE_SLACK`] fewer live tasks than this one, if the one this
    /// spawn looks at (a different one each time) is such.
    ///
    /// Why: a started task never changes worker, so a worker that starts most of a server's
    /// long-lived connections keeps their load for good while another idles (measured on the
    /// echo server: 64 against 18 CPU ticks). Stealing only balances momentary load; placing
    /// new tasks by the number already living on each worker balances the lasting kind. Go
    /// needs no such rule because its scheduler moves goroutines at any time.
    fn less_loaded_worker(&self) -> Option<&Arc<Remote>> {
        let mine = self.remote.live.load(Ordering::Relaxed);
        if mine < BALANCE_SLACK {
            return None;
        }
        let other = self.another_worker()?;
        (other.live.load(Ordering::Relaxed) + BALANCE_SLACK < mine).then_some(other)
    }

    fn has_work(&self) -> bool {
        self.has_ready()
            || self.remote.flags.pushed_pending()
            || !self.new_tasks.is_empty()
            || !self.shared.injector.is_empty()
            || self
                .shared
                .stealers
                .iter()
                .zip(&self.shared.remotes)
                .enumerate()
                .any(|(i, (s, r))| {
                    i != self.index && (!s.is_empty() || r.placed_len.load(Ordering::Relaxed) > 0)
                })
            || self.shared.shutdown.load(Ordering::Relaxed)
    }

    /// Restores now, while this worker is idle, the compacted stacks of tasks whose timers
    /// fire within [`PRE_RESTORE`] (at most [`PRE_RESTORE_MAX`] a time): their wakes then run
    /// at once instead of each paying its restore (≈2–4 µs) on the timer's critical path,
    /// where a million sleepers waking over 4 s queued up behind one another's restores.
    /// Sound as any restore by the owner (stack/compact.rs invariant 4): the task is parked
    /// (nothing runs while its worker is idle) and lives on this worker; restoring earlier
    /// than its resume only holds its page a moment longer, and it is not compacted again
    /// before its next park (the restore clears its flags).
    fn restore_due_soon(&self) {
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

    /// Waits awake, rather than asleep, for a timer due within [`DEADLINE_SPIN`]; true if it
    /// waited (the deadline passed or work arrived).
    ///
    /// Why: a sleep costs more than such a wait. In this VM a timed `epoll_pwait2` costs
    /// 17–32 µs of CPU and ends 30–50 µs late whatever its timeout, and a million sleepers
    /// waking over 4 s put their workers to sleep ≈46,000 times. Waiting awake for the
    /// closest of them nearly halved the sleepers' median lateness (8–16 µs against 15–27 in
    /// 13 alternated runs) at the same CPU per wake; a limit of 50 µs cost 1.2 µs more CPU
    /// per wake, one set by the measured CPU cost of this thread's sleeps 0.4–1.0 µs more.
    fn await_close_deadline(&self) -> bool {
        let Some(deadline) = self.next_deadline() else {
            return false;
        };
        if deadline.saturating_duration_since(Instant::now()) > DEADLINE_SPIN {
            return false;
        }
        // Counted as spinning, as in `idle`: a waker then leaves its work to this worker,
        // which sees it here, or at the latest in the final check of its next `idle`
        // (idle.rs step 3, after this decrement).
        self.shared.spinning.fetch_add(1, Ordering::SeqCst);
        let start = Instant::now();
        'wait: while Instant::now() < deadline {
            for _ in 0..32 {
                if self.has_work() {
                    break 'wait;
                }
                std::hint::spin_loop();
            }
        }
        self.shared.spinning.fetch_sub(1, Ordering::SeqCst);
        self.remote.activity.idled(start.elapsed());
        true
    }

    /// The earliest deadline of this worker's timers.
    fn next_deadline(&self) -> Option<Instant> {
        self.timers
            .borrow()
            .first_key_value()
            .map(|(&(at, _), _)| at)
    }

    /// Spins, then sleeps in the poller until work arrives (idle.rs protocol).
    ///
    /// The spin is skipped after [`SPIN_MISSES`] spins in a row found nothing (a worker that
    /// only wakes for its timers would otherwise burn up to `SPIN` of CPU per wake), and
    /// re-enabled as soon as a notify ends a sleep within `SPIN` of its start — work arrived
    /// from another thread that a spin would have caught (ping-pong across workers).
    fn idle(&self) {
        // A worker with sockets waits for them in epoll instead of spinning: its next work
        // usually comes from the network, which a spin cannot see without a syscall per turn,
        // and spinning takes the CPU from the peer process on a small machine (an echo server
        // and its load client on 2 vCPUs ran 2x faster without it).
        let spin = self.spin_misses.get() < SPIN_MISSES && !super::io::has_sources(&self.remote);
        if spin {
            self.shared.spinning.fetch_add(1, Ordering::SeqCst);
            let start = Instant::now();
            let mut found = false;
            // The clock is read once per 32 turns: a read costs ≈25–40 ns in this VM, more
            // than a look at the queues.
            let mut timers_only = false;
            'spin: while start.elapsed() < SPIN {
                self.fire_timers();
                if self.has_ready() {
                    // A deadline passed: work, but not the cross-thread kind a spin exists
                    // to catch; do not let timers alone keep this worker spinning.
                    timers_only = true;
                    break 'spin;
                }
                for _ in 0..32 {
                    if self.has_work() {
                        found = true;
                        break 'spin;
                    }
                    std::hint::spin_loop();
                }
            }
            self.shared.spinning.fetch_sub(1, Ordering::SeqCst);
            self.remote.activity.idled(start.elapsed());
            if found {
                self.spin_misses.set(0);
                return;
            }
            self.spin_misses.set(self.spin_misses.get() + 1);
            if timers_only {
                return;
            }
        }
        // Going to sleep: give back the stack memory of a past burst, step by step, waking up
        // for the next step (stack/mod.rs, "Warm slots"), shrink parked tasks' stacks, and
        // give back the task cells of a past burst (task/alloc.rs invariant 4).
        let trim_due = match (stack::trim_idle(), self.stack_step()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let trim_due = match (trim_due, crate::task::trim_cells_idle()) {
            (Some(due), true) => Some(due.min(stack::TRIM_INTERVAL)),
            (due, cells) => due.or(cells.then_some(stack::TRIM_INTERVAL)),
        };
        self.restore_due_soon();
        if self.await_close_deadline() {
            return;
        }
        // idle.rs step 3 (the fence is inside).
        self.remote.flags.prepare_sleep();
        if !self.has_work() {
            let timer_due = self
                .fire_timers()
                .map(|deadline| deadline.saturating_duration_since(Instant::now()));
            let timeout = match (timer_due, trim_due) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            // A timer that expired since `has_work` put its task in `ready`: run it rather than
            // sleep (until the next deadline, or forever if that was the last timer).
            let fired = self.has_ready();
            if !fired && timeout != Some(Duration::ZERO) {
                stack::release_emptied_images(timeout);
                let slept = Instant::now();
                let woken = super::io::wait(&self.remote, timeout);
                // Woken early by a notify or I/O (not by the timeout: timers alone never
                // justify spinning) soon after sleeping.
                let slept = slept.elapsed();
                self.remote.activity.idled(slept);
                if woken && slept < SPIN {
                    self.spin_misses.set(0);
                }
            }
        }
        self.remote.flags.end_sleep();
        self.clock.set(crate::debug::clock_now());
        self.tracing.set(trace::on());
        // monitor.rs "Idle" step 2.
        self.shared.monitor_rest.worker_awake();
    }

    /// Collects I/O events without blocking, when this worker has I/O sources: a busy worker
    /// must still see its sockets become ready.
    fn poll_io(&self) {
        if super::io::has_sources(&self.remote) {
            super::io::poll_now(&self.remote);
        }
    }

    /// Resumes `task` until it yields, parks or returns (task/mod.rs invariant 1).
    ///
    /// debug/trace/mod.rs invariant 1: off, this one test of a worker field is all a trace
    /// costs here. The traced run is a copy of its own, so that the untraced one carries
    /// nothing across the resume (a branch around the resume alone cost ≈9 instructions per
    /// run: the result went through memory to merge the two paths).
    #[inline(always)]
    fn run_task(&self, task: Task) {
        if self.tracing.get() {
            self.run_task_traced(task);
        } else {
            self.resume_task::<false>(task);
        }
    }

    #[cold]
    #[inline(never)]
    fn run_task_traced(&self, task: Task) {
        self.resume_task::<true>(task);
    }

    /// `run_task`, recording a run slice when `TRACED`.
    #[inline(always)]
    fn resume_task<const TRACED: bool>(&self, task: Task) {
        let header: &Header = task.header();
        // SAFETY: this worker popped `task` from a queue, so it is the only one touching its run
        // state now: a New task is in one queue at a time, and a Started one is only ever
        // queued on this worker (invariant 1); `run_task` is not re-entered.
        let state = unsafe { header.run_state() };
        if let RunState::New { .. } = state {
            self.start(&task, state);
        }
        let RunState::Started { coroutine, live } = state else {
            return; // Done: a stale wake of a finished task.
        };
        let live = *live;
        // stack/compact.rs invariant 4: restored before it runs.
        header.stack.before_resume(header.class.bytes());
        self.current.set(Some(task.as_ptr()));
        stack::set_running(Some(
            header as *const Header as *const dyn stack::DescribeTask,
        ));
        let remote = &self.remote;
        // Only this worker writes `resumes`: a load and a store, not a locked `fetch_add`.
        let resumes = remote.resumes.load(Ordering::Relaxed);
        remote
            .resumes
            .store(resumes.wrapping_add(1), Ordering::Relaxed);
        remote
            .running_id
            .store(header.id.as_u64(), Ordering::Relaxed);
        let site: *const Location<'static> = header.spawn_site;
        remote
            .running_site
            .store(site.cast_mut(), Ordering::Relaxed);
        if header.name.is_some() || self.named_running.get() {
            *remote
                .running_name
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = header.name.clone();
            self.named_running.set(header.name.is_some());
        }
        super::coop::reset(); // coop.rs invariant 1
        self.spawns_this_resume.set(0);
        let started = if TRACED { trace::run_started() } else { 0 };
        let result = coroutine.resume(());
        if TRACED {
            trace_run_ended(header, started, &result);
        }
        remote.running_id.store(0, Ordering::Relaxed);
        stack::set_running(None);
        self.current.set(None);
        match result {
            CoroutineResult::Yield(Suspend::Yield) => {
                self.ready.borrow_mut().push_back(task);
                // A task that yields (often: out of budget, sched/coop.rs) may be one that
                // never parks; its worker's due timers must not wait for the periodic look
                // every INJECTOR_INTERVAL picks, which can be 61 budgets away.
                self.fire_timers();
            }
            CoroutineResult::Yield(Suspend::Park(_)) => {
                // park/state.rs invariant 2: published only now, off the task's stack.
                if header.park.publish_parked() {
                    remote.counters.parked();
                    self.stacks.borrow_mut().parked(&header.stack, live);
                    task.into_parked(); // task/mod.rs invariant 4
                } else {
                    self.ready.borrow_mut().push_back(task);
                }
            }
            CoroutineResult::Return(joiner) => {
                self.finish(&task, state);
                if let Some(joiner) = joiner {
                    joiner.wake();
                }
            }
        }
    }

    /// Answers the dump requests queued on this worker ("Capturing a parked task"): captures
    /// every live task, and sends the result to each requester.
    #[cold]
    #[inline(never)]
    fn answer_dump(&self) {
        let requests = self.remote.take_dump_requests();
        if requests.is_empty() {
            return;
        }
        crate::debug::answer_started(&requests, self.index);
        let unstarted = self.new_tasks.len() + self.remote.placed_len.load(Ordering::Relaxed);
        let mut builder = crate::debug::WorkerDumpBuilder::new(unstarted);
        let mut capture = Box::new(crate::debug::Capture::new());
        let live = self.live.borrow();
        for (index, task) in live.iter() {
            let header = task.header();
            // SAFETY: this worker is between tasks, so it alone touches the run state of its
            // started tasks (task/mod.rs invariant 1), and `run_task` is not running.
            let state = unsafe { header.run_state() };
            let RunState::Started { coroutine, .. } = state else {
                continue;
            };
            // Step 1: a snapshot; an unpark from another thread may follow at once.
            let parked = header.park.is_parked();
            capture.prepare(header.yielder.get() as usize, header.class.bytes());
            stack::set_running(Some(
                header as *const Header as *const dyn stack::DescribeTask,
            ));
            // stack/compact.rs invariant 4: a compacted stack is restored before anything
            // runs on it, a capture included.
            header.stack.before_resume(header.class.bytes());
            header.capture.set(Some(NonNull::from(&mut *capture)));
            let result = coroutine.resume(());
            header.capture.set(None);
            stack::set_running(None);
            // Step 3: no `publish_parked`, no requeue: the park state is as the task left it.
            if !matches!(result, CoroutineResult::Yield(_)) {
                eprintln!(
                    "weft: worker {}: task {} did not answer a capture",
                    self.index, header.id
                );
                eprintln!("weft: fatal error: capture resumed a running task");
                std::process::abort();
            }
            if parked {
                // The capture restored a compacted stack: queue it to be shrunk again.
                self.stacks.borrow_mut().parked(&header.stack, index);
            }
            builder.push(header, parked, &capture);
        }
        drop(live);
        crate::debug::answer(requests, builder.finish());
    }

    /// Turns a never-started task into a coroutine on this worker, on a slot from this
    /// worker's warm ones unless the spawn took one (`Spawner::take_slot`). A task that can
    /// get no stack does not run: its joiner gets the reason as the error (`Builder::spawn`).
    fn start(&self, task: &Task, state: &mut RunState) {
        let RunState::New { slot } = std::mem::replace(state, RunState::Done) else {
            unreachable!("start of a task that is not new");
        };
        let mut slot = match slot {
            Some(slot) => slot,
            None => match self.slots.borrow_mut().take(task.header().class) {
                Ok(slot) => slot,
                Err(e) => return self.fail_to_start(task, e),
            },
        };
        let remote = &self.remote;
        remote.counters.started();
        let sampled = Sampler::wants(remote.sites.count(task.header().spawn_site));
        slot.prepare(|| {
            if sampled {
                return 1; // its pages below the top are released for the measurement
            }
            self.prefill
                .borrow()
                .pages(site_key(task.header().spawn_site))
        });
        if sampled {
            // The live entry this task is about to get (stats.rs invariant 2).
            self.sampler.start(self.live.borrow().vacant_key(), &slot);
        }
        let coroutine = TaskCoroutine::with_stack(slot, move |yielder, ()| {
            // The body runs on the task's stack; park finds its yielder through the header.
            let worker = current_worker().expect("weft: task started off its worker");
            let header = worker
                .current
                .get()
                .expect("weft: task started without a header");
            // SAFETY: the worker keeps the task alive while it is resumed (current_header).
            let task = unsafe { Task::borrow_ptr(header) };
            task.header().yielder.set(yielder);
            task.run()
        });
        // SAFETY: the task has not run yet and this worker owns it (invariant 2 of task/mod.rs).
        unsafe { task.header().set_home(self.remote.clone()) };
        let live = self.live.borrow_mut().insert(task.clone());
        self.set_live_count(1);
        *state = RunState::Started { coroutine, live };
    }

    /// A task that got no stack at its start: reported, and cancelled with the reason. Its
    /// closure is dropped here, on the worker's stack, as there is no stack of its own to
    /// drop it on (a panic in that drop is caught; a drop that parks blocks the worker).
    #[cold]
    fn fail_to_start(&self, task: &Task, error: std::io::Error) {
        let mut who = String::new();
        let _ = stack::DescribeTask::describe(task.header(), &mut who);
        let message = format!("weft: cannot start {who}): no stack: {error}");
        eprintln!("{message}");
        task.drop_unstarted_with(Box::new(message));
    }

    /// Publishes the live list's length for spawners (`less_loaded_worker`). This worker is
    /// the only writer, so a load and a store do, without a locked instruction on the start
    /// and finish of every task.
    fn set_live_count(&self, delta: isize) {
        let live = self.remote.live.load(Ordering::Relaxed);
        self.remote
            .live
            .store(live.wrapping_add_signed(delta), Ordering::Relaxed);
    }

    /// Recycles a returned task's slot and forgets it.
    fn finish(&self, task: &Task, state: &mut RunState) {
        let RunState::Started { coroutine, live } = std::mem::replace(state, RunState::Done) else {
            unreachable!("finish of a task that did not start");
        };
        let slot = coroutine.into_stack();
        self.sampler.finish(live, task.header().spawn_site, &slot);
        self.slots.borrow_mut().put(slot);
        let removed = self.live.borrow_mut().try_remove(live);
        self.set_live_count(-1);
        debug_assert!(removed.is_some_and(|t| t.ptr_eq(task)));
    }

    /// Shutdown steps 2–4 (runtime.rs) for this worker.
    fn shut_down(&self) {
        let live: Vec<Task> = self
            .live
            .borrow()
            .iter()
            .map(|(_, task)| task.clone())
            .collect();
        for task in live {
            task.header()
                .interrupt
                .fetch_or(interrupt::SHUTDOWN, Ordering::Relaxed);
            task.unpark();
        }
        let mut last_progress = Instant::now();
        loop {
            if let Some(task) = self.next_task() {
                // Step 2 for a never-started task: it runs only to drop its closure, on its
                // own stack (task/cell.rs), and tell its joiner. Started ones unwind.
                task.header()
                    .interrupt
                    .fetch_or(interrupt::SHUTDOWN, Ordering::Relaxed);
                self.run_task(task);
                last_progress = Instant::now();
                continue;
            }
            if self.live.borrow().is_empty() {
                // Close the inbox, then take what arrived before it closed; after that,
                // placers and wakers keep their tasks (`Remote::place`, `push_woken`).
                let mut inbox = self.remote.lock_inbox();
                inbox.closed = true;
                let placed: Vec<Task> = inbox.placed.drain(..).collect();
                self.remote.placed_len.store(0, Ordering::Relaxed);
                let woken = std::mem::take(&mut inbox.woken);
                drop(inbox);
                drop(woken);
                if placed.is_empty() {
                    break;
                }
                for task in placed {
                    task.header()
                        .interrupt
                        .fetch_or(interrupt::SHUTDOWN, Ordering::Relaxed);
                    self.run_task(task);
                }
                continue;
            }
            if last_progress.elapsed() > SHUTDOWN_GRACE {
                self.leak_live_tasks();
                break;
            }
            super::io::wait(&self.remote, Some(Duration::from_millis(10)));
        }
    }

    /// Step 4: tasks that parked again while unwinding and were never woken. Their stacks
    /// still hold frames, so their slots can never be reused: leak them.
    fn leak_live_tasks(&self) {
        let mut live = self.live.borrow_mut();
        let count = live.len();
        for task in live.drain() {
            // SAFETY: shutdown runs on the home worker after every resume returned.
            let state = unsafe { task.header().run_state() };
            if let RunState::Started { coroutine, .. } = std::mem::replace(state, RunState::Done) {
                std::mem::forget(coroutine);
                task.abandon();
            }
        }
        eprintln!(
            "weft: worker {}: {count} task(s) parked while unwinding at shutdown and were never \
             woken; their stacks are leaked and their joins return an error",
            self.index
        );
    }
}
