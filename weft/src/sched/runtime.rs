//! The runtime object: building the workers, entering the runtime from other threads, and
//! shutting down.
//!
//! Shutdown, in order:
//! 0. Graceful only (`Runtime::shutdown_timeout`): `Shared::closing` is set, so new spawns
//!    are refused with an error, and the caller waits until every task has finished (no live
//!    task, nothing queued, every worker asleep) or the timeout passed; then `drop`.
//! 1. `Runtime::drop` sets `Shared::shutdown` and notifies every worker.
//! 2. Each worker stops starting tasks: never-started tasks it finds are dropped, so their
//!    joiners get `Err` ("task cancelled").
//! 3. Each worker marks its started tasks cancelled and unparks them; a cancelled task's next
//!    park unwinds its stack (destructors run), and its joiner gets `Err`.
//! 4. A task still running (a loop that never parks) holds its worker, and `drop` waits for it,
//!    as with tokio. A task that parks again while unwinding and is never woken is leaked after
//!    a grace period, with a warning.
//! 5. `drop` joins the worker threads, then closes the compute and blocking pools: until then
//!    a cancelled task's destructor may still use `compute` and `spawn_blocking`. A spawn during shutdown (from such a
//!    destructor) is cancelled at once: its joiner gets `Err`.

use std::io;
use std::panic::Location;
use std::path::PathBuf;
use std::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_deque::{Injector, Stealer};

use super::counters::{SiteCounts, WorkerCounters};
use super::idle::SleepFlags;
use super::monitor::Monitor;
use super::shutdown::ShutdownReport;
use super::spawn::{self, EnterToken};
use super::stats::SiteClasses;
use super::task::join::JoinHandle;
use super::task::Task;
use super::worker::{self, Worker};
use crate::observe::backtrace::report_backtrace;
use crate::observe::capture::DumpRequest;
use crate::observe::sigquit::{self, SigquitAction};
use crate::stack::{self, SizeClass};

/// State shared by all workers of one runtime.
pub(crate) struct Shared {
    pub(crate) injector: Injector<Task>,
    pub(crate) stealers: Vec<Stealer<Task>>,
    pub(crate) remotes: Vec<Arc<Remote>>,
    pub(crate) default_class: SizeClass,
    pub(crate) shutdown: AtomicBool,
    /// In the grace period of `Runtime::shutdown_timeout` (or after it): step 0.
    pub(crate) closing: AtomicBool,
    /// Workers looking for work without sleeping; spawners do not wake a sleeper while one
    /// spins, since the spinner will find the work.
    pub(crate) spinning: AtomicUsize,
    /// Threads for `task::spawn_blocking` (sched/blocking.rs).
    pub(crate) blocking: Arc<super::blocking::Pool>,
    /// The queue of `task::compute`'s threads (task/compute.rs), made at its first job.
    pub(crate) compute: super::pool_slot::PoolSlot,
    /// The monitor's deep sleep while every worker sleeps (monitor.rs, "Idle").
    pub(crate) monitor_rest: super::monitor::Rest,
    /// Whether this runtime runs a monitor thread (for `weft::metrics`).
    /// Stuck workers the monitor has seen, reported or not (its thread alone writes).
    pub(crate) monitor_warnings: AtomicU64,
    pub(crate) has_monitor: AtomicBool,
    /// Stack sizes per spawn site from a profile (`RuntimeBuilder::stack_profile`).
    pub(crate) site_classes: Option<SiteClasses>,
    /// Where the stack profile is written back when the runtime drops.
    pub(crate) profile_path: Option<PathBuf>,
    /// What workers do with parked tasks' stacks (stack/compact.rs).
    pub(crate) stack_policy: stack::StackPolicy,
    /// How late a timer may fire (`RuntimeBuilder::timer_slack`, sched/timers.rs).
    pub(crate) timer_slack: Duration,
    /// Stream reads go through each worker's io_uring (`RuntimeBuilder::io_uring`).
    pub(crate) io_uring: bool,
    /// The tokio runtime of `weft::tokio` (tokio_bridge.rs).
    #[cfg(feature = "tokio")]
    pub(crate) tokio: super::tokio_bridge::Bridge,
}

/// What other threads may touch of one worker.
#[allow(dead_code)] // `resumes` and `running_*` are for the stuck-worker monitor.
pub(crate) struct Remote {
    pub(crate) index: usize,
    /// Tasks handed to this worker by other threads (`push_woken`, `place`).
    pub(crate) inbox: Mutex<Inbox>,
    /// `inbox.placed.len()`, written under the inbox lock: lets thieves and idle checks skip
    /// the lock when nothing is placed.
    pub(crate) placed_len: AtomicUsize,
    /// The worker's OS thread, recorded before it runs a task: woken for a task that blocks
    /// it (park.rs, "Parking while panicking").
    pub(crate) thread: std::sync::OnceLock<thread::Thread>,
    pub(crate) flags: SleepFlags,
    /// Tasks resumed by this worker so far; a monitor that sees it unchanged for a while knows
    /// the worker is stuck in one task (Go's `schedtick`, read by `sysmon`).
    pub(crate) resumes: AtomicU64,
    /// Id and spawn site of the task being resumed (0 / null between tasks), for the monitor's
    /// warning. Written by the worker around each resume, Relaxed: a report may be a moment
    /// stale, never unsafe (a `Location` is `'static`).
    pub(crate) running_id: AtomicU64,
    pub(crate) running_site: AtomicPtr<Location<'static>>,
    /// The running task's name, for the monitor's report; written only around the resume of
    /// a named task (or the first unnamed one after it), so unnamed tasks cost nothing here.
    pub(crate) running_name: Mutex<Option<Arc<str>>>,
    /// The worker thread's kernel id, for the monitor to read what a stuck worker is doing
    /// (`/proc/self/task/TID/syscall`); 0 until the thread starts.
    pub(crate) tid: std::sync::atomic::AtomicI32,
    /// Started, unfinished tasks living on this worker (its live list's length), written by
    /// the worker only, Relaxed: spawners read it to place new tasks (spawn.rs, `Spawner`).
    pub(crate) live: AtomicUsize,
    /// Tasks of this worker parked while a future they poll is pending (park.rs,
    /// `park_current_on_future`): their wakes come from another thread's reactor, so the
    /// worker does not spin when it idles (worker.rs, `idle`). Written by the worker's thread
    /// only; Relaxed: a hint.
    pub(crate) futures_waiting: AtomicUsize,
    /// Set by the monitor while this worker is stuck in one task, cleared when it moves on:
    /// a thief with more live tasks steals this worker's new tasks only then (queue.rs,
    /// `defers_to`).
    pub(crate) stuck: AtomicBool,
    /// Task-dump requests waiting for this worker to answer them between tasks (dump.rs,
    /// "Capturing a parked task"); `dump_pending` says the list is not empty, so the worker
    /// looks at the lock only when there is something.
    pub(crate) dump_requests: Mutex<Vec<Box<dyn DumpRequest>>>,
    pub(crate) dump_pending: AtomicBool,
    /// Steals and busy time, for the debug endpoint (activity.rs).
    pub(crate) activity: super::activity::WorkerActivity,
    /// Spawns, starts, parks and wakes on this worker, for `weft::metrics` (written by the
    /// worker only, counters.rs invariant 1).
    pub(crate) counters: WorkerCounters,
    /// Tasks started here per spawn site (same rule).
    pub(crate) sites: SiteCounts,
    /// The worker's poller and the I/O sources registered with it (sched/io.rs).
    pub(crate) io: super::io::Reactor,
}

/// What other threads hand one worker.
#[derive(Default)]
pub(crate) struct Inbox {
    /// Started tasks of this worker, woken elsewhere (sched/mod.rs invariant 1).
    pub(crate) woken: Vec<Task>,
    /// Never-started tasks placed here by a busier worker's spawn (`Spawner::submit`); any
    /// worker may steal them, so a busy worker does not hold them up.
    pub(crate) placed: std::collections::VecDeque<Task>,
    /// The worker has left its loop for good (shutdown): nothing more is accepted, so nothing
    /// can be stranded here.
    pub(crate) closed: bool,
}

impl Remote {
    pub(crate) fn lock_inbox(&self) -> std::sync::MutexGuard<'_, Inbox> {
        self.inbox.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands a woken task to this (its home) worker from another thread. Dropped if the
    /// worker has closed: only a task leaked at shutdown can still be woken then.
    pub(crate) fn push_woken(&self, task: Task) {
        let mut inbox = self.lock_inbox();
        if inbox.closed {
            drop(inbox);
            drop(task);
            return;
        }
        inbox.woken.push(task);
        drop(inbox);
        // idle.rs step 1–2.
        if self.flags.work_pushed() {
            self.notify();
        }
    }

    /// Places a never-started task here; hands it back if the worker has closed.
    pub(crate) fn place(&self, task: Task) -> Result<(), Task> {
        let mut inbox = self.lock_inbox();
        if inbox.closed {
            return Err(task);
        }
        inbox.placed.push_back(task);
        self.placed_len.store(inbox.placed.len(), Ordering::Relaxed);
        drop(inbox);
        // idle.rs step 1–2.
        if self.flags.work_pushed() {
            self.notify();
        }
        Ok(())
    }

    /// Takes a placed task, for this worker or a thief.
    pub(crate) fn take_placed(&self) -> Option<Task> {
        if self.placed_len.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let mut inbox = self.lock_inbox();
        let task = inbox.placed.pop_front();
        self.placed_len.store(inbox.placed.len(), Ordering::Relaxed);
        task
    }

    /// Queues a dump request and wakes the worker as a wake does (idle.rs steps 1–2): it
    /// answers at its next look at its inbox.
    pub(crate) fn request_dump(&self, request: Box<dyn DumpRequest>) {
        self.dump_requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(request);
        self.dump_pending.store(true, Ordering::Relaxed);
        // Release: pairs with the Acquire fence in `dump_pending`, through `pushed`: a worker
        // that takes this push sees the flag.
        fence(Ordering::Release);
        if self.flags.work_pushed() {
            self.notify();
        }
    }

    /// Whether a dump request waits: the worker, right after `take_pushed` returned true.
    #[inline]
    pub(crate) fn dump_pending(&self) -> bool {
        // Acquire: pairs with the Release fence in `request_dump` (a compiler barrier only on
        // x86-64: no instruction on the wake path).
        fence(Ordering::Acquire);
        self.dump_pending.load(Ordering::Relaxed)
    }

    /// Takes the waiting dump requests. The flag is cleared under the lock, so a request
    /// queued after this re-sets it.
    pub(crate) fn take_dump_requests(&self) -> Vec<Box<dyn DumpRequest>> {
        let mut requests = self.dump_requests.lock().unwrap_or_else(|e| e.into_inner());
        self.dump_pending.store(false, Ordering::Relaxed);
        std::mem::take(&mut *requests)
    }

    pub(crate) fn notify(&self) {
        self.io.notify();
    }
}

impl Shared {
    /// Cancels every never-started task left in the injector (shutdown step 2).
    fn cancel_injected(&self) {
        loop {
            match self.injector.steal() {
                crossbeam_deque::Steal::Success(task) => spawn::cancel_unstarted(&task),
                crossbeam_deque::Steal::Empty => return,
                crossbeam_deque::Steal::Retry => {}
            }
        }
    }

    /// Whether every task has finished, as far as other threads can see: no worker has a
    /// live (started, unfinished) task, nothing waits in a queue, and every worker sleeps — a
    /// worker that took a never-started task from a queue and is about to start it is awake.
    fn all_tasks_finished(&self) -> bool {
        self.injector.is_empty()
            && self.stealers.iter().all(Stealer::is_empty)
            && self.remotes.iter().all(|r| {
                r.live.load(Ordering::Relaxed) == 0
                    && r.placed_len.load(Ordering::Relaxed) == 0
                    && r.flags.is_sleeping()
            })
    }

    /// After new work was published in a stealable queue: wake one sleeping worker, unless one
    /// is already spinning (idle.rs).
    pub(crate) fn wake_idle_worker(&self, except: Option<usize>) {
        // SeqCst: the work's publication (a deque or injector push) must be ordered before we
        // read the `sleeping` flags; pairs with the worker's SeqCst flag store then re-check.
        fence(Ordering::SeqCst);
        if self.spinning.load(Ordering::SeqCst) > 0 {
            return;
        }
        for remote in &self.remotes {
            if Some(remote.index) != except && remote.flags.wake_if_sleeping() {
                remote.notify();
                return;
            }
        }
    }
}

/// Sets this thread's kernel timer slack for a runtime whose timers may be `slack` late
/// (`RuntimeBuilder::timer_slack`): the slack itself up to [`KERNEL_TIMER_SLACK`], at least
/// 1 ns (0 would mean "the default" to the kernel).
fn set_timer_slack(slack: Duration) {
    let ns = slack
        .min(KERNEL_TIMER_SLACK)
        .as_nanos()
        .clamp(1, libc::c_ulong::MAX as u128) as libc::c_ulong;
    // SAFETY: PR_SET_TIMERSLACK changes only this thread's timer slack.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns) };
}

/// The most kernel timer slack a worker thread asks for: the kernel may wake a sleeping
/// worker this late for its next timer. Weft's own slack (sched/timers.rs invariant 2) already
/// gathers the timers of a window into one expiry, so the kernel's adds only lateness; and
/// the precise timers a runtime with a large slack still has (`time::sleep_precise`) keep the
/// precision they had when this was the whole slack. 10 µs, a fifth of the kernel's default
/// of 50 µs: a million sleepers waking over 4 s (`weft-bench peer sleepers`, one wake of the
/// worker per distinct deadline) woke 16 µs late at the median with 10 µs, against 29–37 µs
/// with the kernel's 50 µs, for 6.2 µs of CPU per wake against 5.2–6.0; 5 µs gained nothing
/// at the median (13–14 µs) and cost 6.6–6.7 µs per wake.
pub(crate) const KERNEL_TIMER_SLACK: Duration = Duration::from_micros(10);

/// How late a timer may fire unless [`RuntimeBuilder::timer_slack`] says otherwise: 1 ms,
/// or a quarter of the wait when that is less (sched/timers.rs invariant 2), so that timers
/// due within the same millisecond fire in one wake of their worker — about what Go's and
/// tokio's timers give (Go's poller waits in whole milliseconds, tokio's wheel ticks in
/// them). 100K sleepers waking over 1 s (`weft-bench sleepers --quick`) cost 8.5–10.8 µs of
/// CPU per wake when each distinct deadline was a wake of its own (10 µs of slack), against
/// Go's 2.05 and tokio's 2.34. With this default, in one alternated run: 4.1–4.7 µs
/// (2.3–2.8 with `WEFT_STACK_COMPACTION=off`) against Go's 2.35–2.5, lateness p50 0.64 ms and
/// p99 1.2–1.4 ms against Go's 0.5 and 3.2–7.4 ms.
pub const DEFAULT_TIMER_SLACK: Duration = Duration::from_millis(1);

/// Configures and builds a [`Runtime`].
///
/// ```
/// use std::time::Duration;
/// let rt = weft::Runtime::builder()
///     .workers(4) // else WEFT_WORKERS, else one per CPU
///     .stack_size(64 * 1024) // per task, guard page included
///     .monitor_threshold(Some(Duration::from_millis(50))) // report a stuck worker after 50 ms
///     .build()?;
/// assert_eq!(rt.workers(), 4);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct RuntimeBuilder {
    workers: Option<usize>,
    stack_size: Option<usize>,
    monitor_threshold: Option<Option<Duration>>,
    monitor_report: Option<super::monitor::ReportHook>,
    max_threads: Option<usize>,
    stack_policy: Option<stack::StackPolicy>,
    sigquit: Option<SigquitAction>,
    stack_profile: Option<PathBuf>,
    timer_slack: Option<Duration>,
    io_uring: Option<bool>,
    #[cfg(feature = "tokio")]
    tokio: super::tokio_bridge::TokioConfig,
}

impl std::fmt::Debug for RuntimeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut f = f.debug_struct("RuntimeBuilder");
        f.field("workers", &self.workers)
            .field("stack_size", &self.stack_size)
            .field("monitor_threshold", &self.monitor_threshold)
            .field(
                "monitor_report",
                &self.monitor_report.as_ref().map(|_| "custom"),
            )
            .field("max_threads", &self.max_threads)
            .field("sigquit", &self.sigquit)
            .field("stack_profile", &self.stack_profile)
            .field("timer_slack", &self.timer_slack)
            .field("io_uring", &self.io_uring);
        #[cfg(feature = "tokio")]
        f.field("tokio", &self.tokio);
        f.finish()
    }
}

impl RuntimeBuilder {
    /// The number of worker threads. Default: `WEFT_WORKERS` from the environment (like
    /// `GOMAXPROCS`), else the available parallelism.
    pub fn workers(mut self, n: usize) -> Self {
        self.workers = Some(n);
        self
    }

    /// The default stack size of this runtime's tasks (see `weft::stack`); 256 KiB if unset.
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = Some(bytes);
        self
    }

    /// How long a worker may run one task without parking before the monitor moves the
    /// never-started tasks queued behind it to other workers and reports it, naming the task
    /// and its spawn site and saying whether it computes, blocks in a system call or waits on
    /// a futex (once per spawn site). Default 10 ms; `None` runs no monitor (then nothing moves
    /// the queued tasks either: to silence the report only, see
    /// [`monitor_report`](Self::monitor_report)).
    pub fn monitor_threshold(mut self, threshold: Option<Duration>) -> Self {
        self.monitor_threshold = Some(threshold);
        self
    }

    /// Where the monitor's reports go: by default each is printed to stderr (its `Display`),
    /// or, with weft's `log` feature and a logger installed (`log::max_level()` not `Off`),
    /// logged with `log::warn!` and target `weft::monitor`. A hook may log it otherwise,
    /// count it, or drop it; the monitor moves queued tasks off a stuck worker either way.
    /// The hook runs on the monitor's thread.
    pub fn monitor_report(
        mut self,
        hook: impl Fn(&super::monitor::MonitorReport) + Send + Sync + 'static,
    ) -> Self {
        self.monitor_report = Some(Arc::new(hook));
        self
    }

    /// The most OS threads the runtime may use: workers, monitor and blocking pool together
    /// (like Go's `debug.SetMaxThreads`). Default 10,000. Past it, `spawn_blocking` fails with
    /// a clear error instead of waiting.
    pub fn max_threads(mut self, n: usize) -> Self {
        self.max_threads = Some(n);
        self
    }

    /// What SIGQUIT does (`weft::debug`): by default, like Go, it prints the grouped task
    /// dump to stderr and exits with status 2. The `WEFT_SIGQUIT` environment variable
    /// (`exit`, `continue`, `full`, `off`), when set, wins over this, like `GOTRACEBACK`.
    pub fn sigquit(mut self, action: SigquitAction) -> Self {
        self.sigquit = Some(action);
        self
    }

    /// Sizes the stacks of each spawn site from a stack profile file, and writes the profile
    /// of this run back to it when the runtime drops (`weft::metrics::stack_profile`). A task
    /// spawned with its own `task::Builder::stack_size` keeps it; a site the file does not
    /// name gets the runtime's default. A missing file is a first run: nothing is sized from
    /// it. Default: the path in `WEFT_STACK_PROFILE`, if set. With a profile, a spawn without
    /// its own size looks its site up by line, then column and file; without one it costs
    /// nothing.
    ///
    /// Each site's size is the profile's recommended one (its deepest sampled task × 1.5,
    /// rounded up to a power of two): a later run whose tasks go deeper than any sampled one
    /// went can overflow where the default would not. Keep the file under review like code.
    pub fn stack_profile(mut self, path: impl Into<PathBuf>) -> Self {
        self.stack_profile = Some(path.into());
        self
    }

    /// What the workers do with the stacks of parked tasks: give back the pages below the
    /// stack pointer, and compact (copy the live bytes to the heap, release the slot) where
    /// [`crate::stack::mode`] allows. Default [`stack::StackPolicy::default`]: compact after
    /// 200 ms parked (where only reclaim runs, reclaim after 20 ms).
    pub fn stack_policy(mut self, policy: stack::StackPolicy) -> Self {
        self.stack_policy = Some(policy);
        self
    }

    /// How late a timer may fire, so that timers due close together fire in one wake of
    /// their worker: a sleep, a `park_timeout`, a channel operation's or a socket's deadline,
    /// `select!`'s `after`. Default [`DEFAULT_TIMER_SLACK`], 1 ms. A wait shorter than four
    /// times the slack gets a quarter of its length instead (a 100 µs sleep ends within
    /// 25 µs), and [`time::sleep_precise`](crate::time::sleep_precise) none. Each worker
    /// wake costs CPU (tens of microseconds in a VM), so a smaller slack costs more CPU when
    /// timers are dense; `Duration::ZERO` makes every timer precise, each distinct deadline a
    /// wake of its own. The workers' kernel timer slack (`prctl(PR_SET_TIMERSLACK)`) is this
    /// slack up to 10 µs, at least 1 ns. Whatever the slack, an idle worker whose next timer
    /// is within 12 µs waits for it awake instead of sleeping: a sleep costs more CPU than
    /// that, and ends later.
    pub fn timer_slack(mut self, slack: Duration) -> Self {
        self.timer_slack = Some(slack);
        self
    }

    /// Whether `weft::net::TcpStream` reads that would wait complete through each worker's
    /// io_uring (a recv into a buffer the kernel picks, submitted with the worker's other
    /// reads in one `io_uring_enter`) instead of waiting for readiness in epoll and then
    /// calling `recv`. Writes, accepts, connects and UDP stay on epoll. A worker whose ring
    /// cannot be set up (an old kernel, `kernel.io_uring_disabled`, a seccomp filter) reads
    /// through epoll and says so once on stderr. Default: off, or on where the environment
    /// has `WEFT_IO_URING=1`; docs/performance.md has the figures that decided the default.
    ///
    /// A recv cannot always be taken back: bytes it received after its task was cancelled (or
    /// its read timed out) wait in the stream's inbox, which every later read of that handle
    /// takes first, so a handle loses and reorders nothing. A handle made by
    /// [`TcpStream::try_clone`](crate::net::TcpStream::try_clone) has an inbox of its own:
    /// bytes waiting in one handle's are not seen by reads of the other, and go with the
    /// handle when it drops. With this option on, read each connection through one handle.
    pub fn io_uring(mut self, on: bool) -> Self {
        self.io_uring = Some(on);
        self
    }

    /// The tokio runtime whose context `weft::tokio::block_on` enters and on which
    /// `weft::tokio::spawn_future` runs futures, for this runtime's tasks (feature `tokio`).
    /// Without it, weft starts a multi-thread tokio runtime at the first use and shuts it
    /// down when this runtime drops. A runtime handed over stays the caller's: weft never
    /// shuts it down; if the caller does first, the futures waiting on it end with tokio's
    /// errors (or panics), and `spawn_future` panics.
    #[cfg(feature = "tokio")]
    pub fn tokio_handle(mut self, handle: ::tokio::runtime::Handle) -> Self {
        self.tokio.handle = Some(handle);
        self
    }

    /// The worker threads of the tokio runtime weft starts for this runtime (feature
    /// `tokio`; unused with [`tokio_handle`](Self::tokio_handle)). Default: one per core, at
    /// most 4 — futures polled by `weft::tokio::block_on` run on weft's workers, and tokio's
    /// threads mostly wait on its reactor and timers.
    #[cfg(feature = "tokio")]
    pub fn tokio_threads(mut self, n: usize) -> Self {
        self.tokio.threads = Some(n.max(1));
        self
    }

    /// Gives each worker a current-thread tokio runtime of its own, which the worker drives
    /// when it sleeps and now and then while busy, instead of one multi-thread runtime on
    /// tokio's own threads (feature `tokio`; unused with [`tokio_handle`](Self::tokio_handle)).
    /// The futures a task polls through `weft::tokio::block_on` are then woken on the task's
    /// own worker, without a wake crossing threads (docs/async.md has the figures). What a
    /// future creates there (a socket, a timer, a task it spawns, such as a connection pool's
    /// connection) belongs to that worker's runtime: used from a task of another worker it
    /// works, but is woken across threads, and waits while its worker runs a task that does
    /// not park. Default: off, or on where the environment has `WEFT_TOKIO_ON_WORKERS=1`.
    #[cfg(feature = "tokio")]
    pub fn tokio_on_workers(mut self, on: bool) -> Self {
        self.tokio.on_workers = Some(on);
        self
    }

    /// Starts the workers.
    ///
    /// # Errors
    /// An invalid worker count or stack size, a stack profile that cannot be read or parsed,
    /// or a failure to start a thread or a poller.
    pub fn build(self) -> io::Result<Runtime> {
        let observers = crate::observe::observers();
        (observers.init_interpose)();
        let workers = match self.workers {
            Some(n) => n,
            None => workers_from_env()?,
        };
        if workers == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "weft: a runtime needs at least one worker",
            ));
        }
        let max_threads = self.max_threads.unwrap_or(DEFAULT_MAX_THREADS);
        let monitor_threshold = self
            .monitor_threshold
            .unwrap_or(Some(super::monitor::DEFAULT_THRESHOLD));
        let own_threads = workers + usize::from(monitor_threshold.is_some());
        if own_threads > max_threads {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "weft: max_threads is {max_threads}, but the runtime needs {own_threads} \
                     threads for its workers and monitor"
                ),
            ));
        }
        let default_class =
            SizeClass::for_size(self.stack_size.unwrap_or(stack::DEFAULT_STACK_SIZE))?;
        let profile_path = self
            .stack_profile
            .or_else(|| std::env::var_os("WEFT_STACK_PROFILE").map(PathBuf::from));
        let site_classes = match &profile_path {
            Some(path) => SiteClasses::load(path)?,
            None => None,
        };
        stack::install_handler(|ips| report_backtrace(ips, true).to_string());
        stack::calibrate(super::task::Suspend::Park(crate::park::ParkReason::Park));
        (observers.install_sigquit)(sigquit::action_from_env(self.sigquit)?)?;

        let locals: Vec<_> = (0..workers)
            .map(|_| crossbeam_deque::Worker::new_fifo())
            .collect();
        let remotes = (0..workers)
            .map(|index| {
                let io = super::io::Reactor::new()?;
                Ok(Arc::new(Remote {
                    index,
                    inbox: Mutex::default(),
                    placed_len: AtomicUsize::new(0),
                    thread: std::sync::OnceLock::new(),
                    flags: SleepFlags::new(),
                    resumes: AtomicU64::new(0),
                    running_id: AtomicU64::new(0),
                    running_site: AtomicPtr::new(std::ptr::null_mut()),
                    running_name: Mutex::new(None),
                    tid: std::sync::atomic::AtomicI32::new(0),
                    live: AtomicUsize::new(0),
                    futures_waiting: AtomicUsize::new(0),
                    stuck: AtomicBool::new(false),
                    dump_requests: Mutex::new(Vec::new()),
                    dump_pending: AtomicBool::new(false),
                    activity: Default::default(),
                    counters: WorkerCounters::default(),
                    sites: SiteCounts::default(),
                    io,
                }))
            })
            .collect::<io::Result<Vec<_>>>()?;
        let shared = Arc::new(Shared {
            injector: Injector::new(),
            stealers: locals.iter().map(|w| w.stealer()).collect(),
            remotes,
            default_class,
            shutdown: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            spinning: AtomicUsize::new(0),
            monitor_rest: super::monitor::Rest::default(),
            compute: Default::default(),
            stack_policy: self.stack_policy.unwrap_or_default(),
            timer_slack: self.timer_slack.unwrap_or(DEFAULT_TIMER_SLACK),
            io_uring: self
                .io_uring
                .unwrap_or_else(|| std::env::var_os("WEFT_IO_URING").is_some_and(|v| v == "1")),
            blocking: Arc::new(super::blocking::Pool::new(
                max_threads - own_threads,
                max_threads,
            )),
            has_monitor: AtomicBool::new(false),
            monitor_warnings: AtomicU64::new(0),
            site_classes,
            profile_path,
            #[cfg(feature = "tokio")]
            tokio: super::tokio_bridge::Bridge::new(self.tokio),
        });
        super::stats::register(&shared);
        let timer_slack = shared.timer_slack;
        let mut threads = Vec::with_capacity(workers);
        for (index, local) in locals.into_iter().enumerate() {
            let worker_shared = shared.clone();
            let spawned = thread::Builder::new()
                .name(format!("weft-worker-{index}"))
                .spawn(move || {
                    set_timer_slack(timer_slack);
                    Worker::new(index, worker_shared, local).run()
                });
            match spawned {
                Ok(thread) => threads.push(thread),
                Err(e) => {
                    let runtime = Runtime {
                        shared,
                        threads,
                        monitor: None,
                    };
                    drop(runtime);
                    return Err(e);
                }
            }
        }
        let mut runtime = Runtime {
            shared,
            threads,
            monitor: None,
        };
        if let Some(threshold) = monitor_threshold {
            let report = self
                .monitor_report
                .unwrap_or_else(|| Arc::new(super::monitor::default_report));
            runtime.monitor = Some(Monitor::start(runtime.shared.clone(), threshold, report)?);
            runtime.shared.has_monitor.store(true, Ordering::Relaxed);
        }
        Ok(runtime)
    }
}

/// Go's default `debug.SetMaxThreads`.
const DEFAULT_MAX_THREADS: usize = 10_000;

fn workers_from_env() -> io::Result<usize> {
    parse_workers(std::env::var("WEFT_WORKERS").ok())
}

/// `WEFT_WORKERS`, or the available parallelism when it is unset.
fn parse_workers(value: Option<String>) -> io::Result<usize> {
    match value {
        Some(value) => value.trim().parse().map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("weft: WEFT_WORKERS={value:?} is not a number of workers"),
            )
        }),
        None => Ok(thread::available_parallelism().map_or(1, |n| n.get())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weft_workers_overrides_the_parallelism() {
        assert_eq!(parse_workers(Some(" 3 ".into())).unwrap(), 3);
        assert!(parse_workers(None).unwrap() >= 1);
        let err = parse_workers(Some("many".into())).unwrap_err();
        assert!(err.to_string().contains("WEFT_WORKERS"), "{err}");
    }

    #[test]
    fn zero_workers_is_an_error() {
        let err = Runtime::builder().workers(0).build().unwrap_err();
        assert!(err.to_string().contains("at least one worker"), "{err}");
    }
}

/// A weft runtime: worker threads that run tasks. Dropping it shuts it down (see the
/// module-level shutdown steps): tasks not finished are cancelled and their stacks unwound.
///
/// ```
/// let rt = weft::Runtime::builder().workers(2).build()?;
/// let handle = rt.spawn(|| "from a task");
/// assert_eq!(handle.join().unwrap(), "from a task");
/// let local = vec![1, 2, 3];
/// assert_eq!(rt.block_on(|| local.iter().sum::<i32>()), 6); // may borrow
/// drop(rt); // cancels what is left; `shutdown_timeout` gives tasks time first
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Runtime {
    shared: Arc<Shared>,
    threads: Vec<thread::JoinHandle<()>>,
    monitor: Option<Monitor>,
}

impl Runtime {
    /// A builder with the defaults.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    /// A runtime with the defaults.
    ///
    /// # Errors
    /// As [`RuntimeBuilder::build`].
    pub fn new() -> io::Result<Runtime> {
        Runtime::builder().build()
    }

    /// Runs `f` as a task on this runtime, waits until it has ended, and returns its result.
    ///
    /// `f` may borrow from the caller, as a closure given to `std::thread::scope` may: the call
    /// returns (or unwinds) only after the task has ended, so nothing it borrows can go away
    /// while the task runs.
    ///
    /// ```
    /// let rt = weft::Runtime::new()?;
    /// let names = vec!["ann".to_string(), "bob".to_string()];
    /// let total = rt.block_on(|| {
    ///     // Borrowed by the task; each child gets its own copy.
    ///     let handles: Vec<_> = names.iter().cloned().map(|n| weft::spawn(move || n.len())).collect();
    ///     handles.into_iter().map(|h| h.join().unwrap()).sum::<usize>()
    /// });
    /// assert_eq!(total, 6);
    /// assert_eq!(names.len(), 2); // still ours
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// From a plain thread it blocks the thread; from a task of another runtime it parks that
    /// task. From one of this runtime's own tasks `f` simply runs there, in the calling task
    /// (with its stack and task-locals): waiting for a task of its own would change nothing.
    ///
    /// # Panics
    /// A panic in `f` unwinds `f`'s frames on the task's stack (its captures are dropped
    /// there), then resumes on the caller with the same payload, as
    /// `std::thread::scope` re-raises a scoped thread's panic; the runtime goes on.
    /// If the caller is cancelled while it waits (a task of another runtime, or a plain thread
    /// inside [`Context::bind`](crate::context::Context::bind)), the task is cancelled too,
    /// and the caller's unwind goes on once the task has ended; meanwhile the caller's OS
    /// thread blocks. Also panics when no stack can be had for the task (see
    /// [`crate::task::Builder::spawn`]).
    #[track_caller]
    pub fn block_on<F, T>(&self, f: F) -> T
    where
        F: FnOnce() -> T + Send,
        T: Send,
    {
        if worker::on_worker_of(&self.shared) {
            // User code runs in tasks only, so the caller is one of this runtime's tasks.
            return f();
        }
        super::scoped::spawn_and_wait(&self.handle(), f)
    }

    /// Spawns a task on this runtime from any thread or task (see [`Handle::spawn`]).
    #[track_caller]
    pub fn spawn<F, T>(&self, f: F) -> JoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.handle().spawn(f)
    }

    /// A handle for spawning onto this runtime from other threads.
    pub fn handle(&self) -> Handle {
        Handle {
            shared: self.shared.clone(),
        }
    }

    /// The number of worker threads.
    pub fn workers(&self) -> usize {
        self.threads.len()
    }

    /// Shuts the runtime down gracefully: new spawns are refused from now on (with an error
    /// from [`crate::task::Builder::spawn`]; `weft::spawn` and [`Handle::spawn`] panic with
    /// it), the tasks already spawned get until `timeout` to finish, and those still there
    /// then are cancelled as when the runtime is dropped (their parks unwind). Returns as
    /// soon as every task has finished, with a [`ShutdownReport`]: whether they all finished
    /// in time, and if not how many were cancelled, with the names and spawn sites of up to
    /// [`ShutdownReport::MAX_LISTED`] of them.
    ///
    /// A server stops accepting first (cancel the accept loop's
    /// [`Context`](crate::context::Context), or close its listener), then calls this so that
    /// the requests in flight can complete:
    ///
    /// ```
    /// use std::time::Duration;
    /// let rt = weft::Runtime::new().unwrap();
    /// let request = rt.spawn(|| weft::time::sleep(Duration::from_millis(20)));
    /// let stuck = weft::task::Builder::new()
    ///     .name("stuck")
    ///     .spawn_on(&rt.handle(), || weft::time::sleep(Duration::from_secs(3600)))
    ///     .unwrap();
    /// let report = rt.shutdown_timeout(Duration::from_millis(200));
    /// assert!(!report.finished_in_time());
    /// assert_eq!(report.cancelled(), 1);
    /// assert_eq!(report.cancelled_tasks()[0].name.as_deref(), Some("stuck"));
    /// assert!(request.join().is_ok()); // finished in the grace period
    /// assert!(weft::task::is_cancelled(&*stuck.join().unwrap_err()));
    /// ```
    ///
    /// # A background loop holds the whole grace period
    /// The grace period ends early only when *every* task has finished, so a loop that never
    /// ends (a stats ticker, a reconnect loop) makes every shutdown wait `timeout` out, and the
    /// report names it. Bind such loops to the [`Context`](crate::context::Context) the server
    /// cancels when it stops accepting, so that they end with it:
    ///
    /// ```
    /// use std::time::Duration;
    /// use weft::context::Context;
    /// let rt = weft::Runtime::new().unwrap();
    /// let stop = Context::new();
    /// let ticker = stop.clone();
    /// rt.spawn(move || {
    ///     // Ends with Err(ContextError::Cancelled) once `stop` is cancelled.
    ///     let _ = ticker.bind(|| loop {
    ///         weft::time::sleep(Duration::from_millis(10)); // report stats here
    ///     });
    /// });
    /// stop.cancel();
    /// let report = rt.shutdown_timeout(Duration::from_secs(5));
    /// assert!(report.finished_in_time(), "{report}");
    /// assert!(report.waited() < Duration::from_secs(5));
    /// ```
    ///
    /// # Panics
    /// When called from one of the runtime's own tasks, like dropping it.
    pub fn shutdown_timeout(self, timeout: Duration) -> ShutdownReport {
        if worker::on_worker_of(&self.shared) {
            panic!("weft: a runtime cannot be shut down from one of its own tasks");
        }
        let started = Instant::now();
        // SeqCst, like `shutdown`'s store: spawners check it before queueing.
        self.shared.closing.store(true, Ordering::SeqCst);
        let deadline = started.checked_add(timeout);
        let mut finished_once = false;
        let finished = loop {
            // Seen twice in a row, a poll apart: a task in hand between two queues shows.
            if self.shared.all_tasks_finished() {
                if finished_once {
                    break true;
                }
                finished_once = true;
            } else {
                finished_once = false;
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                break false;
            }
            let left = deadline.map_or(GRACE_POLL, |d| d - now);
            thread::sleep(left.min(GRACE_POLL));
        };
        let waited = started.elapsed();
        let mut report = ShutdownReport {
            finished: true,
            grace: timeout,
            waited,
            cancelled: 0,
            unstarted: 0,
            tasks: Vec::new(),
        };
        if !finished {
            // shutdown.rs invariant 1: the tasks left now are the ones `drop` cancels.
            let (tasks, started, unstarted) = (crate::observe::observers().unfinished_tasks)(
                &*self.shared,
                ShutdownReport::MAX_LISTED,
            );
            report.finished = false;
            report.tasks = tasks;
            report.unstarted = unstarted;
            report.cancelled = started + unstarted;
        }
        drop(self);
        report
    }
}

/// How often `shutdown_timeout` looks whether every task has finished.
const GRACE_POLL: Duration = Duration::from_millis(1);

impl Drop for Runtime {
    fn drop(&mut self) {
        if worker::on_worker_of(&self.shared) {
            // Joining our own thread would deadlock.
            panic!("weft: a runtime cannot be dropped from one of its own tasks");
        }
        if let Some(monitor) = self.monitor.take() {
            monitor.stop();
        }
        self.shared.shutdown.store(true, Ordering::SeqCst);
        for remote in &self.shared.remotes {
            remote.notify();
            // A task that blocks its worker's thread while panicking re-parks in the
            // shutdown mode (park.rs, "Parking while panicking").
            if let Some(thread) = remote.thread.get() {
                thread.unpark();
            }
        }
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
        self.shared.cancel_injected();
        self.shared.has_monitor.store(false, Ordering::Relaxed);
        super::stats::retire(&self.shared);
        if let Some(path) = &self.shared.profile_path {
            let profile = super::profile::stack_profile();
            let earlier = self
                .shared
                .site_classes
                .as_ref()
                .map_or(&[][..], |s| s.entries());
            let merged = profile.merged_with(earlier);
            if let Err(e) = merged.write_to(path) {
                eprintln!(
                    "weft: cannot write the stack profile {}: {e}",
                    path.display()
                );
            }
        }
        // Last: destructors of cancelled tasks may still call `spawn_blocking` or
        // `compute` (step 3).
        self.shared.compute.shut_down();
        self.shared.blocking.shut_down();
    }
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("workers", &self.threads.len())
            .finish()
    }
}

/// A cloneable handle to a runtime: spawn on it from any thread, or [`enter`](Handle::enter)
/// it so that `weft::spawn` works on a plain thread.
#[derive(Clone)]
pub struct Handle {
    pub(crate) shared: Arc<Shared>,
}

impl Handle {
    /// Makes `weft::spawn` on this plain thread spawn onto this runtime until the guard drops.
    ///
    /// In a task it changes nothing: `weft::spawn` there always spawns onto the task's own
    /// runtime (use [`Handle::spawn`] for another one). Guards must be dropped in the reverse
    /// order of their creation, on the thread that made them (the guard is not `Send`).
    pub fn enter(&self) -> EnterGuard {
        EnterGuard {
            token: spawn::enter(self.clone()),
            _not_send: std::marker::PhantomData,
        }
    }

    /// Spawns a task on this runtime, from any thread or task, with this runtime's default
    /// stack size.
    ///
    /// # Panics
    /// When no stack can be had (see [`crate::task::Builder::spawn`]).
    #[track_caller]
    pub fn spawn<F, T>(&self, f: F) -> JoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        match spawn::spawn(Some(self), None, None, Location::caller(), f) {
            Ok(handle) => handle,
            Err(e) => panic!("weft: failed to spawn task: {e}"),
        }
    }

    pub(crate) fn submit(&self, task: Task) {
        self.shared.injector.push(task);
        if self.shared.shutdown.load(Ordering::SeqCst) {
            // The runtime is shutting down or gone: no worker may take it. Whoever drains
            // first (here or in `Runtime::drop`) cancels it, so its joiner is told.
            self.shared.cancel_injected();
            return;
        }
        self.shared.wake_idle_worker(None);
    }
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle").finish_non_exhaustive()
    }
}

/// Returned by [`Handle::enter`]; restores the previous runtime on drop.
///
/// Not `Send`: it undoes a change to its own thread.
///
/// ```compile_fail
/// fn must_be_send<T: Send>(_: T) {}
/// let runtime = weft::Runtime::new().unwrap();
/// must_be_send(runtime.handle().enter());
/// ```
pub struct EnterGuard {
    /// `None` when entered from a task (a no-op there).
    token: Option<EnterToken>,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for EnterGuard {
    fn drop(&mut self) {
        if let Some(token) = self.token.take() {
            spawn::exit(token);
        }
    }
}

impl std::fmt::Debug for EnterGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnterGuard").finish_non_exhaustive()
    }
}
