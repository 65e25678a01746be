//! Seeing inside a running program: task dumps with backtraces (Go's
//! `/debug/pprof/goroutine?debug=1|2`), the SIGQUIT dump, scheduler traces for Perfetto
//! ([`trace`], Go's `runtime/trace`; its own module doc in debug/trace/mod.rs), and a debug HTTP
//! endpoint.
//!
//! ```
//! let text = weft::run(|| {
//!     let (tx, rx) = weft::chan::bounded::<()>(0);
//!     let waiter = weft::spawn(move || rx.recv());
//!     weft::time::sleep(std::time::Duration::from_millis(20));
//!     let text = weft::debug::dump().grouped();
//!     drop(tx);
//!     waiter.join().unwrap().unwrap_err();
//!     text
//! });
//! assert!(text.contains("parked [chan receive]"), "{text}");
//! ```
//!
//! Owns: the registry of live runtimes (so a dump with no argument, like SIGQUIT's, sees
//! them all), [`Dump`] and its renderings; the trace session (`trace`).
//!
//! Invariants:
//! 1. A dump never resumes a task to run it: each worker captures its own tasks between two
//!    tasks (sched/worker.rs, "Capturing a parked task"), so the tasks cannot tell.
//! 2. A dump never waits for a worker that is stuck in a task: a worker that has not taken
//!    the request within the answer timeout is reported with the task it runs (from its
//!    `Remote`), without that worker's other tasks.
//! 3. Symbolization (seconds the first time: the binary's debug info is parsed) and rendering
//!    run off the workers: on the blocking pool when the caller is a task.
//!
//! May call: `sched` (the runtimes' remotes), `chan` (answers), `task::spawn_blocking`,
//! `time::sleep` (a trace's recording).
//! Called by: users, the SIGQUIT thread (`signal`), the debug endpoint (`http`), and the
//! scheduler's event sites (`trace`, behind one flag).
//!
//! Why capture on the workers rather than stop the world from outside: a started task's stack
//! may only be touched on its own thread (task/mod.rs invariant 1), and a parked task is
//! switched out there anyway; Go's `goroutineProfileWithLabels` stops the world and walks
//! every goroutine, which weft's per-worker ownership makes unnecessary.

mod capture;
mod http;
mod render;
mod signal;
mod symbolize;
pub(crate) mod trace;

pub(crate) use capture::{
    answer, answer_started, clock_now, record, Capture, DumpRequest, ParkSite, WorkerDumpBuilder,
};
pub use http::{serve, serve_with, DebugServer, EndpointLimits, MAX_REQUEST};
pub(crate) use signal::action_from_env;
pub use signal::{install_sigquit, SigquitAction};
pub(crate) use symbolize::{release_symbolizer, report_backtrace};
pub use trace::{is_tracing, trace, TraceSummary, MAX_EVENTS};

use std::panic::Location;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

pub use crate::park::ParkReason;
use crate::sched::Shared;
use capture::{Answer, WorkerDump};

/// How long a dump waits for a worker to take its request before reporting it as stuck in
/// its running task (invariant 2). A worker takes it within a few task runs.
pub const ANSWER_TIMEOUT: Duration = Duration::from_millis(500);

/// Live runtimes, for a dump of the whole process.
static RUNTIMES: Mutex<Vec<Weak<Shared>>> = Mutex::new(Vec::new());

/// Records a new runtime (`RuntimeBuilder::build`).
pub(crate) fn register(shared: &Arc<Shared>) {
    let mut runtimes = RUNTIMES.lock().unwrap_or_else(|e| e.into_inner());
    runtimes.retain(|r| r.strong_count() > 0);
    runtimes.push(Arc::downgrade(shared));
}

fn live_runtimes() -> Vec<Arc<Shared>> {
    let mut runtimes = RUNTIMES.lock().unwrap_or_else(|e| e.into_inner());
    runtimes.retain(|r| r.strong_count() > 0);
    // A runtime that is shutting down stops answering: its workers leave their loops.
    runtimes
        .iter()
        .filter_map(Weak::upgrade)
        .filter(|shared| !shared.shutdown.load(std::sync::atomic::Ordering::Relaxed))
        .collect()
}

/// What a task was doing when the dump saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TaskState {
    /// Running on its worker: the task that called the dump, or the task a worker was
    /// running when it did not answer (a long computation, a blocking call, or a task that
    /// parked while panicking and so blocks its thread). No backtrace for the latter.
    Running,
    /// Ready to run: woken, yielded, or never started.
    Runnable,
    /// Parked, waiting for its [`TaskDump::reason`].
    Parked,
}

impl TaskState {
    /// The label: `running`, `runnable` or `parked`.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Running => "running",
            TaskState::Runnable => "runnable",
            TaskState::Parked => "parked",
        }
    }
}

/// One task in a [`Dump`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TaskDump {
    /// Its [`crate::task::TaskId`], as a number.
    pub id: u64,
    /// Its name, if it was given one.
    pub name: Option<Arc<str>>,
    /// Running, runnable or parked.
    pub state: TaskState,
    /// What it waits for, when it parked (a runnable task that was woken keeps none).
    pub reason: Option<ParkReason>,
    /// How long it has been parked (to within a few task runs of its worker).
    pub waited: Option<Duration>,
    /// Which runtime (in creation order among the live ones) and worker it lives on.
    pub runtime: usize,
    /// The index of its worker.
    pub worker: usize,
    /// Where it was spawned.
    pub spawn_site: &'static Location<'static>,
    /// Bytes of its stack between the top and where it is suspended.
    pub stack_in_use: Option<usize>,
    /// Index into [`Dump::backtraces`], when one was taken.
    pub backtrace: Option<usize>,
}

/// One frame of a [`Backtrace`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Frame {
    /// The function, demangled without its hash; `??` when unknown.
    pub function: String,
    /// Source file and line, when the binary has debug info.
    pub file: Option<String>,
    /// The line in `file`.
    pub line: Option<u32>,
    /// The column in `file`.
    pub column: Option<u32>,
}

/// A symbolized stack, innermost frame first, without weft's own capture frames.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Backtrace {
    /// The frames.
    pub frames: Vec<Frame>,
}

/// A worker that did not answer in time (invariant 2), and what it was running.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StuckWorker {
    /// The runtime's index.
    pub runtime: usize,
    /// The worker's index.
    pub worker: usize,
    /// Tasks living on it that could not be shown.
    pub live_tasks: usize,
}

/// Every task of every live runtime, as [`dump`] found them.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Dump {
    /// The tasks, by runtime and worker.
    pub tasks: Vec<TaskDump>,
    /// Distinct backtraces, shared by the tasks that parked the same way.
    pub backtraces: Vec<Backtrace>,
    /// Never-started tasks (queued, no stack yet), counted only.
    pub unstarted: usize,
    /// Workers that did not answer.
    pub stuck_workers: Vec<StuckWorker>,
    /// Runtimes and their worker counts.
    pub workers: Vec<usize>,
    /// How long capturing and symbolizing took.
    pub elapsed: Duration,
}

impl std::fmt::Display for Backtrace {
    /// One frame a line, `    function` then `        at file:line:column`, as in a dump.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for frame in &self.frames {
            writeln!(f, "    {}", frame.function)?;
            if let Some(file) = &frame.file {
                let (line, column) = (frame.line.unwrap_or(0), frame.column.unwrap_or(0));
                writeln!(f, "        at {file}:{line}:{column}")?;
            }
        }
        Ok(())
    }
}

impl Dump {
    /// How many tasks are in `state` (never-started ones count as runnable).
    pub fn count(&self, state: TaskState) -> usize {
        let extra = if state == TaskState::Runnable {
            self.unstarted
        } else {
            0
        };
        self.tasks.iter().filter(|t| t.state == state).count() + extra
    }

    /// The tasks with the same state, reason, spawn site and backtrace, grouped with counts,
    /// largest group first: Go's `goroutine?debug=1`.
    pub fn grouped(&self) -> String {
        render::grouped(self)
    }

    /// Every task with its own backtrace: Go's `goroutine?debug=2` (and SIGQUIT's format).
    pub fn full(&self) -> String {
        render::full(self)
    }

    /// The backtrace of `task`, if one was taken.
    pub fn backtrace_of(&self, task: &TaskDump) -> Option<&Backtrace> {
        task.backtrace.and_then(|i| self.backtraces.get(i))
    }
}

/// Dumps every task of every live runtime in this process (invariant 1). Callable from a
/// task (it parks while the workers answer; its own worker answers once it has parked) or
/// from a plain thread (it blocks).
///
/// ```
/// let text = weft::run(|| weft::debug::dump().full());
/// assert!(text.starts_with("weft task dump: "));
/// ```
pub fn dump() -> Dump {
    dump_with_timeout(ANSWER_TIMEOUT)
}

/// [`dump`] with another answer timeout (invariant 2).
pub fn dump_with_timeout(answer_timeout: Duration) -> Dump {
    let started = Instant::now();
    let caller = crate::task::try_current().map(|t| t.id().as_u64());
    let raw = collect(live_runtimes(), answer_timeout);
    let mut dump = if crate::sched::current_task().is_some() {
        // Invariant 3: symbolizing may parse debug info for a second or more.
        match crate::task::try_spawn_blocking(move || symbolize::build(raw, caller)) {
            Ok(dump) => dump,
            Err(e) => {
                eprintln!("weft: debug: cannot symbolize off the worker: {e}");
                Dump::default()
            }
        }
    } else {
        symbolize::build(raw, caller)
    };
    dump.elapsed = started.elapsed();
    dump
}

/// What the workers sent, not yet symbolized.
pub(crate) struct RawDump {
    workers: Vec<usize>,
    /// Per slot (runtime, worker): the answer, or what the worker was running.
    answers: Vec<(usize, usize, Option<Arc<WorkerDump>>)>,
    /// For workers that did not answer: id, name, site of the running task, and live count.
    stuck: Vec<(usize, usize, Option<RunningTask>, usize)>,
    injected: usize,
}

/// What a stuck worker's `Remote` says it runs.
pub(crate) struct RunningTask {
    id: u64,
    name: Option<Arc<str>>,
    site: &'static Location<'static>,
}

fn collect(runtimes: Vec<Arc<Shared>>, answer_timeout: Duration) -> RawDump {
    let (tx, rx) = crate::chan::unbounded::<Answer>();
    let mut slots = Vec::new();
    let mut workers = Vec::new();
    let mut injected = 0;
    for (r, shared) in runtimes.iter().enumerate() {
        workers.push(shared.remotes.len());
        injected += shared.injector.len();
        for remote in &shared.remotes {
            remote.request_dump(DumpRequest {
                slot: slots.len(),
                answer: tx.clone(),
            });
            slots.push((r, remote.clone()));
        }
    }
    let mut taken = vec![false; slots.len()];
    let mut answers: Vec<Option<Arc<WorkerDump>>> = vec![None; slots.len()];
    let give_up = Instant::now() + answer_timeout;
    // A worker that took the request gets this long to finish (a million tasks take ≈1 s).
    let hard_limit = give_up + Duration::from_secs(60);
    loop {
        let now = Instant::now();
        let missing = |i: usize| answers[i].is_none();
        if !(0..slots.len()).any(|i| missing(i) && (taken[i] || now < give_up)) {
            break;
        }
        let untaken = now < give_up && (0..slots.len()).any(|i| missing(i) && !taken[i]);
        let until = if untaken { give_up } else { hard_limit };
        match rx.recv_deadline(until) {
            Ok(Answer::Started { slot }) => taken[slot] = true,
            Ok(Answer::Done { slot, dump }) => {
                taken[slot] = true;
                answers[slot] = Some(dump);
            }
            Err(crate::chan::RecvTimeoutError::Timeout) if Instant::now() < hard_limit => {}
            Err(_) => break,
        }
    }
    drop(tx);
    let mut raw = RawDump {
        workers,
        answers: Vec::new(),
        stuck: Vec::new(),
        injected,
    };
    for ((r, remote), answer) in slots.into_iter().zip(answers) {
        match answer {
            Some(dump) => raw.answers.push((r, remote.index, Some(dump))),
            None => {
                let running = remote.running_task();
                let live = remote.live.load(std::sync::atomic::Ordering::Relaxed);
                raw.stuck.push((r, remote.index, running, live));
            }
        }
    }
    raw
}

/// The unfinished tasks of one runtime, for [`Runtime::shutdown_timeout`]'s report
/// (sched/shutdown.rs invariant 1): at most `limit` started tasks with their names, spawn sites
/// and states, how many started tasks there were in all, and how many never started. A dump's
/// capture without its symbolizing (nothing here needs a backtrace).
///
/// [`Runtime::shutdown_timeout`]: crate::Runtime::shutdown_timeout
pub(crate) fn unfinished_tasks(
    shared: &Arc<Shared>,
    limit: usize,
) -> (Vec<crate::sched::CancelledTask>, usize, usize) {
    use crate::sched::CancelledTask;
    let raw = collect(vec![shared.clone()], ANSWER_TIMEOUT);
    let mut listed = Vec::new();
    let mut started = 0;
    let mut unstarted = raw.injected;
    for (_, _, answer) in &raw.answers {
        let Some(answer) = answer else { continue };
        unstarted += answer.unstarted;
        started += answer.tasks.len();
        for task in answer.tasks.iter().take(limit.saturating_sub(listed.len())) {
            let state = if task.parked {
                TaskState::Parked
            } else {
                TaskState::Runnable
            };
            listed.push(CancelledTask {
                id: task.id,
                name: task.name.clone(),
                spawn_site: task.spawn_site,
                state,
                reason: task.reason.filter(|_| task.parked),
            });
        }
    }
    for (_, _, running, live) in raw.stuck {
        started += live.max(usize::from(running.is_some()));
        if let Some(running) = running.filter(|_| listed.len() < limit) {
            listed.push(CancelledTask {
                id: running.id,
                name: running.name,
                spawn_site: running.site,
                state: TaskState::Running,
                reason: None,
            });
        }
    }
    (listed, started, unstarted)
}

impl crate::sched::Remote {
    /// The task this worker is resuming now, as its monitor fields say (a moment stale).
    fn running_task(&self) -> Option<RunningTask> {
        use std::sync::atomic::Ordering;
        let id = self.running_id.load(Ordering::Relaxed);
        let site = self.running_site.load(Ordering::Relaxed);
        if id == 0 || site.is_null() {
            return None;
        }
        // SAFETY: `running_site` only ever holds a `&'static Location` (runtime.rs).
        let site: &'static Location<'static> = unsafe { &*site };
        let name = self
            .running_name
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        Some(RunningTask { id, name, site })
    }
}
