//! A worker: one OS thread that runs tasks, one at a time, on their own stacks — its loop,
//! the resume of a task and what happens when it switches back, a task's start and end, and
//! shutdown.
//!
//! Owns: [`Worker`] — its queues, its warm stack slots, its list of live (started, unfinished)
//! tasks, its timers — all touched by its own thread only; and the thread-local `WORKER` (the
//! worker this thread is), through which the running task is found (`current_task_ptr`).
//!
//! The loop: take a task (queue.rs: the one the last task woke, `run_next`, when there is
//! one; else the local ready queue and new-task deque alternately, the remote woken queue,
//! the injector every 61 ticks and when local work runs out, then steal never-started tasks
//! from the others); resume it until it yields, parks or returns; handle that on the worker's
//! own stack. With nothing to do, spin for [`SPIN`] (waking a sleeping vCPU costs ≈35–40 µs
//! in this VM, so a short spin pays for itself under ping-pong loads; a worker with sockets
//! skips the spin and waits in epoll, see `idle`), then sleep in the poller.
//!
//! The rest of a worker's work has a file each: what runs on the task's own stack when it
//! parks or yields (park.rs), choosing the next task and queueing a woken one (queue.rs),
//! where a spawn goes (spawn.rs), timers (timers.rs), and answering a dump (dump.rs).
//!
//! Invariants: sched/mod.rs 1–3; sched/task/mod.rs 1–3. In particular `current` is non-null
//! exactly while a task runs on this worker, and `run_task` is never re-entered (a task cannot
//! run the worker loop).
//!
//! May call: the task core (task/), `stack` (slots, the switch, parked stacks), the reactor
//! (io.rs), the seam's trace events and clock. Called by: runtime.rs (a worker thread's
//! body), and the files above, which read the current worker.
//!
//! Why one OS thread per worker whose started tasks never leave it: sched/mod.rs (a started
//! task may hold thread-local addresses and `!Send` values).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::panic::Location;
use std::ptr::{self, NonNull};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use corosensei::CoroutineResult;

use super::runtime::{Remote, Shared};
use super::stats::{site_key, PrefillDepths, Sampler};
use super::task::{interrupt, Header, RunState, Suspend, Task, TaskCoroutine};
use crate::observe::capture::clock_now;
use crate::observe::trace;
use crate::stack::{self, LocalSlots};

/// How long an idle worker keeps looking for work before it sleeps.
const SPIN: Duration = Duration::from_micros(50);
/// Idle spins in a row that found no work, after which a worker sleeps without spinning.
const SPIN_MISSES: u32 = 4;
/// The longest wait for a deadline that an idle worker spends awake rather than asleep
/// (`Worker::await_close_deadline`).
const DEADLINE_SPIN: Duration = Duration::from_micros(12);
/// How long an idle worker may put off the stacks' housekeeping (a step of `trim_idle`,
/// `stack_step` or the task cells' trim, due every 1.25 ms after a burst) to do it at the
/// wake of a timer due by then, rather than wake for it on its own.
///
/// Why: a worker that woke for both, 100K sleepers over 1 s with the 1 ms timer slack
/// (`weft-bench sleepers --quick`), slept 3,135 times instead of ≈2,000, 40 % of its wakes
/// for a step between two timer windows; each sleep and wake costs 17–32 µs of CPU in this
/// VM. A step put off a millisecond or two gives memory back that much later, nothing more.
const HOUSEKEEPING_DEFER: Duration = Duration::from_millis(2);
/// How often (in tasks run) the injector is checked before local work, so that tasks spawned
/// from outside are not starved by a busy worker (Go checks its global queue every 61 ticks).
pub(super) const INJECTOR_INTERVAL: u32 = 61;
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
}

/// The worker of the current thread, if it is one.
#[inline]
pub(super) fn current_worker<'a>() -> Option<&'a Worker> {
    let worker = WORKER.with(Cell::get);
    // SAFETY: `WORKER` is set by `Worker::run` to a worker that lives on this thread's stack
    // until `run` returns, and reset to null before that.
    unsafe { worker.as_ref() }
}

/// The header of the task running on this thread, if any.
#[inline]
pub(super) fn current_header<'a>() -> Option<&'a Header> {
    let header = current_worker()?.current.get()?;
    // SAFETY: `current` points at the header of the task being resumed, which the worker keeps
    // alive (it holds the `Task`) for the whole resume, and we are inside that resume.
    Some(unsafe { header.as_ref() })
}

/// The running task, as a pointer, without touching its reference count: for waiters that
/// only need it while the task is blocked (its worker's live list keeps it alive then,
/// sched/task/mod.rs invariant 3). Turn it back into a `Task` with `Task::clone_from_ptr`.
#[inline]
pub(crate) fn current_task_ptr() -> Option<NonNull<Header>> {
    current_worker()?.current.get()
}

pub(crate) fn current_task() -> Option<Task> {
    let header = current_worker()?.current.get()?;
    // SAFETY: as in `current_header`: the task is alive for the whole resume.
    Some(unsafe { Task::clone_from_ptr(header) })
}

/// Records the run slice of `header`'s task that began at `started` and ended in `result`.
fn trace_run_ended(
    header: &Header,
    started: u64,
    result: &CoroutineResult<Suspend, Option<super::park::Waiter>>,
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

/// The compute pool's slot of the runtime the running task belongs to; `None` on a plain
/// thread.
pub(crate) fn current_compute_slot<'a>() -> Option<&'a super::pool_slot::PoolSlot> {
    current_header()?;
    Some(&current_worker()?.shared.compute)
}

/// The tokio bridge of the runtime the running task belongs to (`weft::tokio`); `None` on a
/// plain thread. Borrowed like `current_compute_slot`: the worker holds its runtime's state
/// for as long as any of its tasks can run.
#[cfg(feature = "tokio")]
pub(crate) fn current_tokio_handle<'a>() -> Option<&'a ::tokio::runtime::Handle> {
    current_header()?;
    let worker = current_worker()?;
    let bridge = &worker.shared.tokio;
    if !bridge.on_workers() {
        return Some(bridge.handle());
    }
    let local = worker.tokio_local.get_or_init(|| {
        super::tokio_local::LocalTokio::new(&worker.remote)
            .unwrap_or_else(|e| panic!("weft: cannot start the worker's tokio runtime: {e}"))
    });
    Some(local.handle())
}

/// True if this thread is a worker of the runtime behind `shared`.
pub(crate) fn on_worker_of(shared: &Arc<Shared>) -> bool {
    current_worker().is_some_and(|w| Arc::ptr_eq(&w.shared, shared))
}

/// Started, unfinished tasks of one worker (sched/task/mod.rs invariant 3).
///
/// A `slab::Slab` chains its free entries through the vacant entries themselves: the free
/// indices used to be a `Vec` of their own that grew while tasks finished, and a doubling of
/// it at half a million entries (a copy and fresh pages, about a millisecond) stalled the
/// worker in the middle of a burst of wakes; the pool lists in stack/mod.rs had the same
/// problem, measured there.
pub(super) type Live = slab::Slab<Task>;

pub(crate) struct Worker {
    pub(super) index: usize,
    pub(super) shared: Arc<Shared>,
    pub(super) remote: Arc<Remote>,
    /// Never-started tasks spawned here; others steal from its other end.
    pub(super) new_tasks: crossbeam_deque::Worker<Task>,
    /// Woken and yielded tasks of this worker; never stolen.
    pub(super) ready: RefCell<VecDeque<Task>>,
    /// The task the running task woke last, run next (Go's `runnext`); see `push_ready_from`.
    pub(super) run_next: Cell<Option<Task>>,
    /// `run_next` was filled by a fired timer (queue.rs, `next_task`).
    pub(super) run_next_by_timer: Cell<bool>,
    pub(super) slots: RefCell<LocalSlots>,
    /// Parked tasks whose stacks are to be reclaimed or compacted (stack/compact.rs).
    pub(super) stacks: RefCell<stack::ParkedStacks>,
    /// How deep to prefill a fresh slot, by spawn site, from what compaction found.
    pub(super) prefill: RefCell<PrefillDepths>,
    pub(super) live: RefCell<Live>,
    /// The header of the task being resumed, if any.
    pub(super) current: Cell<Option<NonNull<Header>>>,
    pub(super) tick: Cell<u32>,
    /// Deadlines of this worker's parked tasks (timers.rs).
    pub(super) timers: RefCell<super::timers::Timers>,
    /// Idle spins in a row that found nothing (see `idle`).
    spin_misses: Cell<u32>,
    /// When the next idle stack step is due, on `clock`'s scale; 0: at the next idle
    /// (`idle_stack_step`).
    step_due: Cell<u64>,
    /// Spawns onto `new_tasks` since the running task was resumed (see `Spawner::submit`).
    pub(super) spawns_this_resume: Cell<u32>,
    /// `remote.running_name` holds a name (see there).
    named_running: Cell<bool>,
    /// A coarse clock for the park time a dump shows (a `capture::clock_now` word): refreshed after each sleep and every
    /// `INJECTOR_INTERVAL` picks, so a park costs a load instead of a clock read (≈25–40 ns in
    /// this VM, a fifth of a ping-pong round trip). A park's time may read early by up to
    /// that many task runs.
    pub(super) clock: Cell<u64>,
    /// `observe::trace::on()`, refreshed with `clock`: what this worker's event sites test
    /// (observe/trace.rs invariant 1). A field of the worker the site holds anyway, where the
    /// global flag is a load through the GOT from another codegen unit (two instructions
    /// more at each of the four sites of a ping-pong round trip). A trace starts on a
    /// worker within `INJECTOR_INTERVAL` picks or at its next wake.
    pub(super) tracing: Cell<bool>,
    /// Which live tasks have their stack depth sampled (stats.rs).
    sampler: Sampler,
    /// The worker's own tokio runtime, started by its tasks' first use of it
    /// (sched/tokio_local.rs).
    #[cfg(feature = "tokio")]
    pub(super) tokio_local: std::cell::OnceCell<super::tokio_local::LocalTokio>,
    /// The worker's io_uring for stream reads, made when the worker starts if the runtime
    /// has `io_uring` on; `None` inside if it could not be set up (sched/uring.rs).
    uring: std::cell::OnceCell<Option<super::uring::Uring>>,
}

impl Worker {
    pub(crate) fn new(
        index: usize,
        shared: Arc<Shared>,
        new_tasks: crossbeam_deque::Worker<Task>,
    ) -> Worker {
        let policy = shared.stack_policy;
        let timers = super::timers::Timers::new(shared.timer_slack);
        Worker {
            index,
            remote: shared.remotes[index].clone(),
            shared,
            new_tasks,
            ready: RefCell::new(VecDeque::new()),
            run_next: Cell::new(None),
            run_next_by_timer: Cell::new(false),
            slots: RefCell::new(LocalSlots::default()),
            stacks: RefCell::new(stack::ParkedStacks::new(policy)),
            prefill: RefCell::new(PrefillDepths::default()),
            live: RefCell::new(Live::default()),
            current: Cell::new(None),
            tick: Cell::new(0),
            timers: RefCell::new(timers),
            spin_misses: Cell::new(0),
            step_due: Cell::new(0),
            spawns_this_resume: Cell::new(0),
            named_running: Cell::new(false),
            clock: Cell::new(clock_now()),
            tracing: Cell::new(trace::on()),
            sampler: Sampler::default(),
            #[cfg(feature = "tokio")]
            tokio_local: std::cell::OnceCell::new(),
            uring: std::cell::OnceCell::new(),
        }
    }

    /// The worker thread's body.
    ///
    /// User code runs only inside tasks, each under its own `catch_unwind` (sched/task/cell.rs), so
    /// a panic that reaches this loop is weft's own bug. It aborts: unwinding would end the
    /// thread, destroy its thread-locals, and leave its suspended tasks to be dropped on
    /// another thread (sched/task/mod.rs invariant 1).
    pub(crate) fn run(self) {
        let _alt_stack = stack::AltStack::install();
        let _ = self.remote.thread.set(std::thread::current());
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        self.remote.tid.store(tid, Ordering::Relaxed);
        self.remote.activity.start();
        WORKER.with(|w| w.set(&self));
        // A runtime that reads through io_uring has a ring on every worker from the start
        // (and says at once where it cannot).
        let _ = self.uring();
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
            if self.tick.get().is_multiple_of(STACK_STEP_TICKS) {
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

    /// [`Self::stack_step`] for a worker about to sleep, skipped until the last step's
    /// answer is due by the worker's coarse clock (`clock`, refreshed after each sleep); then
    /// it returns what is left of that wait, which the sleep does not overrun by more than the
    /// clock's lag. A step reads the clock twice, and a socket worker goes to sleep tens of
    /// thousands of times a second (perf put 6 % of an echo server's CPU on those reads,
    /// though in this VM a sleep's wake-up may be smeared onto the reads near it).
    fn idle_stack_step(&self) -> Option<Duration> {
        let now = self.clock.get();
        let due = self.step_due.get();
        if due != 0 && now < due {
            return Some(Duration::from_nanos(due - now));
        }
        let next = self.stack_step();
        // 0: run the next time too (a step with nothing queued reads no clock).
        let due = next.map_or(0, |d| {
            now.saturating_add(d.as_nanos().min(u64::MAX as u128) as u64)
                .max(1)
        });
        self.step_due.set(due);
        next
    }

    /// Whether `next_task` would find something: the final check before a sleep (idle.rs
    /// step 3) and the spin's test.
    ///
    /// In the final check (`leave_deferred`), another worker's never-started tasks count only
    /// if this worker would take them (`defers_to`): counted regardless, they kept a worker
    /// that leaves them to their own worker going round its loop without sleeping — an echo
    /// server's accepts, spawned on one worker and left there by the other, made that one
    /// call `idle` 13 times per connection, a third of the server's CPU. Left to their
    /// worker, they do not strand it: the spawner wakes an idle worker at its first spawn and
    /// every `WAKE_CHECK_EVERY` (spawn.rs), and the monitor does when it finds their worker
    /// stuck, so this one re-checks as their number or their worker's state changes.
    ///
    /// The spin's test counts them all, as before: a worker without sockets that spins
    /// while another spawns and joins stays awake, so the spawner's wakes find nobody asleep
    /// (leaving them out there made `weft-bench cost`'s spawn + join 15 % slower: the idle
    /// worker slept, and each spawn woke it). A worker with sockets does not spin (`idle`).
    fn has_work(&self, leave_deferred: bool) -> bool {
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
                    i != self.index
                        && (!s.is_empty() || r.placed_len.load(Ordering::Relaxed) > 0)
                        && !(leave_deferred && self.defers_to(r))
                })
            || self.shared.shutdown.load(Ordering::Relaxed)
    }

    /// Waits awake, rather than asleep, for a timer due within [`DEADLINE_SPIN`] of `now`;
    /// true if it waited (the deadline passed, and its timers fired, or work arrived).
    ///
    /// Why: a sleep costs more than such a wait. In this VM a timed `epoll_pwait2` costs
    /// 17–32 µs of CPU and ends 30–50 µs late whatever its timeout, and a million sleepers
    /// waking over 4 s put their workers to sleep ≈46,000 times. Waiting awake for the
    /// closest of them nearly halved the sleepers' median lateness (8–16 µs against 15–27 in
    /// 13 alternated runs) at the same CPU per wake; a limit of 50 µs cost 1.2 µs more CPU
    /// per wake, one set by the measured CPU cost of this thread's sleeps 0.4–1.0 µs more.
    fn await_close_deadline(&self, now: Instant) -> bool {
        let Some(deadline) = self.next_deadline() else {
            return false;
        };
        if deadline.saturating_duration_since(now) > DEADLINE_SPIN {
            return false;
        }
        // Counted as spinning, as in `idle`: a waker then leaves its work to this worker,
        // which sees it here, or at the latest in the final check of its next `idle`
        // (idle.rs step 3, after this decrement).
        self.shared.spinning.fetch_add(1, Ordering::SeqCst);
        let mut at = now;
        'wait: while at < deadline {
            for _ in 0..32 {
                if self.has_work(true) {
                    break 'wait;
                }
                std::hint::spin_loop();
            }
            at = Instant::now();
        }
        self.shared.spinning.fetch_sub(1, Ordering::SeqCst);
        self.remote
            .activity
            .idled(at.saturating_duration_since(now));
        self.fire_timers_at(at);
        true
    }

    /// Spins, then sleeps in the poller until work arrives (idle.rs protocol).
    ///
    /// The spin is skipped after [`SPIN_MISSES`] spins in a row found nothing (a worker that
    /// only wakes for its timers would otherwise burn up to `SPIN` of CPU per wake), and
    /// re-enabled as soon as a notify ends a sleep within `SPIN` of its start — work arrived
    /// from another thread that a spin would have caught (ping-pong across workers).
    ///
    /// The clock is read once per look at the timers and passed on (a read costs ≈25–40 ns
    /// in this VM): before the sleep, for the timers due and the timeout, and after it, for
    /// the timers it waited for and the worker's coarse clock.
    ///
    /// Out of line: inlined into the loop, this cold path (and the poller's wait it pulled in)
    /// cost the busy loop 10 instructions a ping-pong round trip in spills (callgrind).
    #[inline(never)]
    pub(super) fn idle(&self) {
        // A worker with sockets waits for them in epoll instead of spinning: its next work
        // usually comes from the network, which a spin cannot see without a syscall per turn,
        // and spinning takes the CPU from the peer process on a small machine (an echo server
        // and its load client on 2 vCPUs ran 2x faster without it). So does one whose tasks
        // wait on futures (`futures_waiting`): their wakes come from another thread's reactor
        // (tokio's), which the spin would keep off a CPU (`weft-bench bridge`, a loopback
        // round trip through `weft::tokio::block_on`: 6.4–6.6 µs of CPU a request spinning,
        // 5.6–5.7 without; tokio's own tasks 4.65).
        // Reads in flight on the io_uring count as sources: their completions come from the
        // network too, and the queued ones go in only with the next poll.
        let spin = self.spin_misses.get() < SPIN_MISSES
            && !super::io::has_sources(&self.remote)
            && self.remote.futures_waiting.load(Ordering::Relaxed) == 0
            && !self
                .uring_if_started()
                .is_some_and(super::uring::Uring::busy);
        if spin {
            self.shared.spinning.fetch_add(1, Ordering::SeqCst);
            let start = Instant::now();
            let mut now = start;
            let mut found = false;
            // The clock is read once per 32 turns: a read costs ≈25–40 ns in this VM, more
            // than a look at the queues.
            let mut timers_only = false;
            'spin: while now.saturating_duration_since(start) < SPIN {
                self.fire_timers_at(now);
                if self.has_ready() {
                    // A deadline passed: work, but not the cross-thread kind a spin exists
                    // to catch; do not let timers alone keep this worker spinning.
                    timers_only = true;
                    break 'spin;
                }
                for _ in 0..32 {
                    if self.has_work(false) {
                        found = true;
                        break 'spin;
                    }
                    std::hint::spin_loop();
                }
                now = Instant::now();
            }
            self.shared.spinning.fetch_sub(1, Ordering::SeqCst);
            self.remote
                .activity
                .idled(now.saturating_duration_since(start));
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
        // give back the task cells of a past burst (stack/cell_cache.rs invariant 4).
        let trim_due = match (stack::trim_idle(), self.idle_stack_step()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let trim_due = match (trim_due, stack::cell_cache::trim_idle()) {
            (Some(due), true) => Some(due.min(stack::TRIM_INTERVAL)),
            (due, cells) => due.or(cells.then_some(stack::TRIM_INTERVAL)),
        };
        let mut now = Instant::now();
        if self.restore_due_soon(now) {
            now = Instant::now();
        }
        if self.await_close_deadline(now) {
            return;
        }
        // The reads queued on the io_uring go in, and what completed wakes its tasks, before
        // the look for work; a completion after this ends the sleep (sched/uring.rs, why
        // `COOP_TASKRUN`).
        if let Some(uring) = self.uring_if_started() {
            uring.poll();
            if uring.work_pending() {
                // Completion work the polls did not finish: run the tasks it woke, then poll
                // again, rather than sleep on it.
                return;
            }
        }
        // idle.rs step 3 (the fence is inside).
        self.remote.flags.prepare_sleep();
        let mut woke_at = None;
        if !self.has_work(true) {
            let timer_due = self
                .fire_timers_at(now)
                .map(|deadline| deadline.saturating_duration_since(now));
            let timeout = match (timer_due, trim_due) {
                // The stacks' housekeeping rides on a timer wake soon after it is due.
                (Some(a), Some(b)) if a <= b + HOUSEKEEPING_DEFER => Some(a),
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            // A timer that expired since `has_work` put its task in `ready`: run it rather than
            // sleep (until the next deadline, or forever if that was the last timer).
            let fired = self.has_ready();
            if !fired && timeout != Some(Duration::ZERO) {
                stack::release_emptied_images(timeout);
                let woken = self.wait_io(timeout);
                if let Some(uring) = self.uring_if_started() {
                    uring.poll();
                }
                let after = Instant::now();
                // Woken early by a notify or I/O (not by the timeout: timers alone never
                // justify spinning) soon after sleeping.
                let slept = after.saturating_duration_since(now);
                self.remote.activity.idled(slept);
                if woken && slept < SPIN {
                    self.spin_misses.set(0);
                }
                self.fire_timers_at(after);
                woke_at = Some(after);
            }
        }
        self.remote.flags.end_sleep();
        let clock = match woke_at {
            Some(at) => self.timers.borrow().clock_at(at),
            None => clock_now(),
        };
        self.clock.set(clock);
        self.tracing.set(trace::on());
        // monitor.rs "Idle" step 2.
        self.shared.monitor_rest.worker_awake();
    }

    /// Collects I/O events without blocking, when this worker has I/O sources: a busy worker
    /// must still see its sockets become ready. Also submits and reaps its io_uring reads.
    pub(super) fn poll_io(&self) {
        if super::io::has_sources(&self.remote) {
            super::io::poll_now(&self.remote);
        }
        if let Some(uring) = self.uring_if_started() {
            uring.poll();
        }
    }

    /// The worker's io_uring if the runtime reads through io_uring (made when the worker
    /// starts, sched/uring.rs); `None` otherwise, or if it cannot be set up (the reads then
    /// wait through epoll; the first failure is said on stderr).
    pub(crate) fn uring(&self) -> Option<&super::uring::Uring> {
        if !self.shared.io_uring {
            return None;
        }
        self.uring
            .get_or_init(|| match super::uring::Uring::new(&self.remote) {
                Ok(uring) => Some(uring),
                Err(e) => {
                    static SAID: std::sync::Once = std::sync::Once::new();
                    SAID.call_once(|| {
                        eprintln!(
                            "weft: io_uring requested but unavailable ({e}); reads wait through epoll"
                        )
                    });
                    None
                }
            })
            .as_ref()
    }

    /// The worker's io_uring if it has one, without making it.
    pub(crate) fn uring_if_started(&self) -> Option<&super::uring::Uring> {
        self.uring.get().and_then(Option::as_ref)
    }

    /// A busy worker's turn of its tokio runtime, if it has one (sched/tokio_local.rs
    /// invariant 1), after `clock` was refreshed. Not before a sleep: the sleep is in that
    /// runtime.
    #[inline]
    pub(super) fn turn_tokio(&self) {
        #[cfg(feature = "tokio")]
        if let Some(local) = self.tokio_local.get() {
            local.turn(self.clock.get());
        }
    }

    /// Resumes `task` until it yields, parks or returns (sched/task/mod.rs invariant 1).
    ///
    /// observe/trace.rs invariant 1: off, this one test of a worker field is all a trace
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
        let name = header.name();
        if name.is_some() || self.named_running.get() {
            *remote
                .running_name
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = name.cloned();
            self.named_running.set(name.is_some());
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
                    task.into_parked(); // sched/task/mod.rs invariant 4
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

    /// Turns a never-started task into a coroutine on this worker, on a slot from this
    /// worker's warm ones unless the spawn took one (`Spawner::take_slot`). A task that can
    /// get no stack does not run: its joiner gets the reason as the error (`Builder::spawn`).
    pub(super) fn start(&self, task: &Task, state: &mut RunState) {
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
        // SAFETY: the task has not run yet and this worker owns it (sched/task/mod.rs invariant 2).
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
    pub(super) fn finish(&self, task: &Task, state: &mut RunState) {
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
    pub(super) fn shut_down(&self) {
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
                // own stack (sched/task/cell.rs), and tell its joiner. Started ones unwind.
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
            self.wait_io(Some(Duration::from_millis(10)));
        }
    }

    /// Whether this worker's own thread queued work here: a woken task or a spawn.
    #[cfg(feature = "tokio")]
    pub(super) fn has_local_work(&self) -> bool {
        self.has_ready() || !self.new_tasks.is_empty()
    }

    /// Whether this worker runs a tokio runtime of its own (sched/tokio_local.rs).
    #[cfg(feature = "tokio")]
    pub(super) fn drives_tokio(&self) -> bool {
        self.tokio_local.get().is_some()
    }

    /// Sleeps until I/O, a notify or `timeout` (`io::wait`), in the worker's tokio runtime
    /// where it has one (sched/tokio_local.rs invariant 2).
    fn wait_io(&self, timeout: Option<Duration>) -> bool {
        #[cfg(feature = "tokio")]
        if let Some(local) = self.tokio_local.get() {
            return local.wait(&self.remote, timeout);
        }
        super::io::wait(&self.remote, timeout)
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
