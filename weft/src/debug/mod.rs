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
//! Owns: [`Dump`] and its renderings; the trace session (`trace`). A dump with no argument,
//! like SIGQUIT's, sees every live runtime through the scheduler's registry (sched/stats.rs).
//!
//! Invariants:
//! 1. A dump never resumes a task to run it: each worker captures its own tasks between two
//!    tasks (sched/dump.rs, "Capturing a parked task"), so the tasks cannot tell.
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
//! may only be touched on its own thread (sched/task/mod.rs invariant 1), and a parked task is
//! switched out there anyway; Go's `goroutineProfileWithLabels` stops the world and walks
//! every goroutine, which weft's per-worker ownership makes unnecessary.

mod http;
mod render;
mod signal;
mod symbolize;
pub(crate) mod trace;

pub use crate::observe::backtrace::{Backtrace, Frame};
pub use crate::observe::report::TaskState;
pub use crate::observe::sigquit::SigquitAction;
pub use http::{serve, serve_with, DebugServer, EndpointLimits, MAX_REQUEST};
pub use signal::install_sigquit;
pub use trace::{is_tracing, trace, TraceSummary, MAX_EVENTS};

use std::panic::Location;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::observe::capture::{DumpRequest, DumpTarget, RunningTask, WorkerDump};
use crate::observe::report::{CancelledTask, UnfinishedTasks};
pub use crate::park::ParkReason;
use crate::sched::Shared;

/// How long a dump waits for a worker to take its request before reporting it as stuck in
/// its running task (invariant 2). A worker takes it within a few task runs.
pub const ANSWER_TIMEOUT: Duration = Duration::from_millis(500);

/// The live runtimes, in creation order, from the scheduler's registry (sched/stats.rs).
fn live_runtimes() -> Vec<Arc<Shared>> {
    // A runtime that is shutting down stops answering: its workers leave their loops.
    crate::sched::stats::runtimes()
        .into_iter()
        .filter(|shared| !shared.shutdown.load(std::sync::atomic::Ordering::Relaxed))
        .collect()
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
    let runtimes = live_runtimes();
    let targets: Vec<&dyn DumpTarget> = runtimes.iter().map(|r| &**r as &dyn DumpTarget).collect();
    let raw = collect(&targets, answer_timeout);
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

/// A message from a worker to a dump's requester.
enum Answer {
    /// The worker took the request (it is not stuck in a task).
    Started { slot: usize },
    /// Its tasks.
    Done { slot: usize, dump: Arc<WorkerDump> },
}

/// The request a dump queues on one worker (observe/capture.rs): `slot` says which.
struct Request {
    slot: usize,
    answer: crate::chan::Sender<Answer>,
}

impl DumpRequest for Request {
    fn started(&self) {
        // An unbounded send never parks; a requester that gave up dropped its receiver.
        let _ = self.answer.send(Answer::Started { slot: self.slot });
    }

    fn answer(self: Box<Self>, dump: Arc<WorkerDump>) {
        let _ = self.answer.send(Answer::Done {
            slot: self.slot,
            dump,
        });
    }
}

/// Asks every worker of `runtimes` for its tasks and gathers the answers (invariants 1, 2).
fn collect(runtimes: &[&dyn DumpTarget], answer_timeout: Duration) -> RawDump {
    let (tx, rx) = crate::chan::unbounded::<Answer>();
    let mut slots = Vec::new();
    let mut workers = Vec::new();
    let mut injected = 0;
    for (r, runtime) in runtimes.iter().enumerate() {
        workers.push(runtime.workers());
        injected += runtime.injected();
        for worker in 0..runtime.workers() {
            runtime.request_dump(
                worker,
                Box::new(Request {
                    slot: slots.len(),
                    answer: tx.clone(),
                }),
            );
            slots.push((r, worker, *runtime));
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
    for ((r, worker, runtime), answer) in slots.into_iter().zip(answers) {
        match answer {
            Some(dump) => raw.answers.push((r, worker, Some(dump))),
            None => {
                let running = runtime.running_task(worker);
                raw.stuck
                    .push((r, worker, running, runtime.live_tasks(worker)));
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
pub(crate) fn unfinished_tasks(runtime: &dyn DumpTarget, limit: usize) -> UnfinishedTasks {
    let raw = collect(&[runtime], ANSWER_TIMEOUT);
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
