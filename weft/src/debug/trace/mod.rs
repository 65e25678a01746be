//! Scheduler tracing: [`trace`] records what the scheduler does for a while — every run of a
//! task on a worker and how it ended, spawns, wakes, steals, blocking-pool hand-offs — and
//! writes it as Chrome trace-event JSON, which <https://ui.perfetto.dev> and
//! `chrome://tracing` open: one track per thread, run slices named by task.
//!
//! Owns: the one recording session (`SESSION`), the recorder the scheduler's events reach
//! (`RECORDER`, installed in the seam, observe/trace.rs), and one event log per thread that
//! recorded something in the session (`LOCAL`, registered in the session at its first
//! event). A log's events are written by its own thread only; the session's owner reads them
//! once recording has stopped.
//!
//! Invariants:
//! 1. Off, an event site costs one load of a flag and a branch not taken: everything else is
//!    behind it, in `#[cold]` functions of the seam that reach the recorder here (observe/
//!    trace.rs invariant 1). No allocation, lock or thread-local access happens while off. On
//!    a worker the flag is the worker's copy of the seam's `ON` (`Worker::tracing`, refreshed
//!    with its coarse clock every 61 picks and at each wake: a byte of a struct the site
//!    holds in a register, where `ON` is a load through the GOT from the scheduler's codegen
//!    unit); elsewhere (plain threads, the blocking pool) it is `ON` itself. The run
//!    slice's test sits before the whole run (sched/worker.rs `run_task`), so nothing is kept
//!    across the resume for it. The park reason a run slice shows costs nothing either: it
//!    travels in the `Suspend` value a park switches out with (a constant of the park site).
//! 2. A thread appends only to its own log, under the log's mutex, which nobody else takes
//!    until recording has stopped: uncontended while it records. An event recorded after the
//!    owner took a log (a thread that saw `ON` just before it went off) stays unread.
//! 3. A session holds at most [`MAX_EVENTS`] events: logs reserve them from a shared budget
//!    [`CHUNK`] at a time, so the budget is touched once per chunk, not per event. An event
//!    beyond it is counted as dropped (the output's `otherData.dropped_events`); recording
//!    never waits or grows without bound.
//! 4. One session at a time: `SESSION` is `Some` from the start of a [`trace`] until it has
//!    stopped recording (also when its caller unwinds: `Recording`'s drop). A second call in
//!    between fails with [`io::ErrorKind::AlreadyExists`].
//! 5. Times are [`ticks`], taken on the thread the event happens on: the TSC where the kernel
//!    itself keeps time with it (x86_64, clocksource `tsc`: invariant and synchronised across
//!    CPUs, or the kernel would not use it; 10.5 ns a read in this VM against 24 ns for
//!    `clock_gettime`, and a traced ping-pong round trip reads six), else `CLOCK_MONOTONIC`
//!    nanoseconds. They are mapped to nanoseconds since the session's start linearly, by the
//!    `CLOCK_MONOTONIC` and tick readings at its start and end (`Timebase`), and written in
//!    microseconds with three decimals. The mapping is monotonic, so each track, written
//!    sorted by time, stays in order, and a worker's run slices — its thread runs one task at
//!    a time — never overlap.
//!
//! The file itself is written by `json.rs`.
//!
//! May call: `sched` (which worker this thread is, the running task), `time::sleep`,
//! `task::try_spawn_blocking`, the seam (installing its recorder, turning events on and off).
//! Called by: the scheduler's event sites through the seam (observe/trace.rs: runs, spawns,
//! wakes, steals, blocking-pool hand-offs and calls), users, the debug endpoint
//! (`/debug/trace`).
//!
//! Why per-thread logs behind a mutex, not per-worker buffers or a shared ring: wakes and
//! spawns also come from plain threads and the blocking pool, which have no worker struct; a
//! shared ring would make every worker write the same cache lines. The mutex of a log only its
//! thread takes costs two uncontended atomics per event. Recording costs ≈35 ns an event in
//! all (a traced ping-pong round trip, 4 events, went from ≈80 to ≈222 ns; with
//! `clock_gettime` for every time it was ≈338 ns).
//! Why a task's name and spawn site are kept once per thread and task (`LogInner::tasks`)
//! rather than in each event: an `Arc<str>` clone per run slice is an atomic on a shared
//! line and 16 bytes more per event. Why the whole recording is kept in memory and written at
//! the end, rather than streamed as Go's `runtime/trace` does: the file's writer would be one
//! more thread in the trace, and a bounded trace of a few seconds fits in memory
//! (`MAX_EVENTS` × 40 bytes = 160 MiB at most).

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::File;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::{self, BufWriter, Write};
use std::panic::Location;
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use crate::observe::capture::clock_now;
use crate::observe::trace::{self as observe, Ended};
use crate::observe::TaskView;
use crate::park::ParkReason;

mod json;

/// Most events one session keeps (invariant 3): at ≈4 events per ping-pong round trip, a
/// fraction of a second of the busiest load, seconds of a typical one.
pub const MAX_EVENTS: usize = 4 << 20;

/// Events a log reserves from the session's budget at a time (invariant 3).
const CHUNK: usize = 8192;

/// What the seam's events reach (observe/trace.rs `Sink`): installed at the first session,
/// and the events are turned on after the session is in `SESSION`, off before its logs are
/// read.
static RECORDER: Recorder = Recorder;

/// The recording session, while there is one (invariant 4).
static SESSION: Mutex<Option<Session>> = Mutex::new(None);

/// The id of the latest session, so that a thread knows whether its log belongs to it.
static SESSION_ID: AtomicU64 = AtomicU64::new(0);

/// Events left in the session's budget (invariant 3).
static BUDGET: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's log and the session it belongs to; replaced at the first event of a
    /// later session.
    static LOCAL: RefCell<Option<(u64, Arc<ThreadLog>)>> = const { RefCell::new(None) };
}

/// Whether [`ticks`] reads the TSC (invariant 5); decided once, before the first session.
static TSC: OnceLock<bool> = OnceLock::new();

/// Decides [`TSC`] (reads sysfs: call it off the workers, `off_worker`).
fn choose_clock() {
    TSC.get_or_init(|| {
        cfg!(target_arch = "x86_64")
            && std::fs::read_to_string(
                "/sys/devices/system/clocksource/clocksource0/current_clocksource",
            )
            .is_ok_and(|source| source.trim() == "tsc")
    });
}

/// An event's time (invariant 5): TSC ticks or `CLOCK_MONOTONIC` nanoseconds.
#[inline]
fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    if TSC.get() == Some(&true) {
        // SAFETY: `rdtsc` has no preconditions; the TSC exists on every x86_64 CPU.
        return unsafe { core::arch::x86_64::_rdtsc() };
    }
    clock_now()
}

/// Maps [`ticks`] to nanoseconds since a session's start (invariant 5).
#[derive(Debug, Clone, Copy)]
struct Timebase {
    start_tick: u64,
    /// Nanoseconds per tick, in 32.32 fixed point.
    ns_per_tick: u128,
}

impl Timebase {
    fn new(start: (u64, u64), end: (u64, u64)) -> Timebase {
        let ns = u128::from(end.0.saturating_sub(start.0));
        let ticks = u128::from(end.1.saturating_sub(start.1));
        let ns_per_tick = if ns == 0 || ticks == 0 {
            1 << 32
        } else {
            (ns << 32) / ticks
        };
        Timebase {
            start_tick: start.1,
            ns_per_tick,
        }
    }

    /// Nanoseconds from the session's start to `tick`.
    fn ns(&self, tick: u64) -> u64 {
        ((u128::from(tick.saturating_sub(self.start_tick)) * self.ns_per_tick) >> 32) as u64
    }
}

/// Whether a [`trace`] is recording now.
pub fn is_tracing() -> bool {
    observe::on()
}

/// The trace's encoding of how a run slice ended (`Event::detail`).
impl Ended {
    fn code(self) -> u8 {
        match self {
            Ended::Yield => 0,
            Ended::Return => 1,
            Ended::Park(reason) => 2 + reason as u8,
        }
    }

    fn from_code(code: u8) -> (&'static str, Option<&'static str>) {
        match code {
            0 => ("yield", None),
            1 => ("return", None),
            n => (
                "park",
                ParkReason::ALL.get(usize::from(n - 2)).map(|r| r.as_str()),
            ),
        }
    }
}

/// What an event records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    /// A task ran on this worker from `at` to `end`; `detail` is how it ended (`Ended::code`).
    Run,
    /// `task` was spawned; `other` is the spawning task (0: a plain thread).
    Spawn,
    /// `task` was woken; `other` is the waking task (0: a plain thread).
    Wake,
    /// This worker stole the never-started `task`; `other` is the worker it came from, or
    /// `FROM_INJECTOR`.
    Steal,
    /// `task` handed a call to the blocking pool and parks until it returns.
    HandOff,
    /// A blocking-pool thread ran `task`'s call from `at` to `end`.
    BlockingCall,
}

/// `Event::other` of a steal from the runtime's injector (spawns from outside the workers).
const FROM_INJECTOR: u64 = u64::MAX;

/// One recorded event: 40 bytes. `at` and `end` are [`ticks`].
#[derive(Debug, Clone, Copy)]
struct Event {
    at: u64,
    end: u64,
    task: u64,
    other: u64,
    kind: Kind,
    detail: u8,
}

/// A task's name and spawn site, kept once per thread and task.
#[derive(Debug, Clone)]
struct TaskInfo {
    name: Option<Arc<str>>,
    site: &'static Location<'static>,
}

/// Task ids are distinct counters: a multiply spreads them well enough for a hash map.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type TaskMap = HashMap<u64, TaskInfo, BuildHasherDefault<IdHasher>>;

/// One thread's recording (invariant 2).
struct ThreadLog {
    /// The OS thread id: the track's `tid`.
    tid: i32,
    /// The track's name.
    label: String,
    /// Where the track goes in the viewer: workers first, by runtime and index.
    sort_index: u64,
    /// Whether the thread is a worker.
    worker: bool,
    inner: Mutex<LogInner>,
}

#[derive(Default)]
struct LogInner {
    /// Full chunks and the one being filled, each at most `CHUNK` events (invariant 3).
    chunks: Vec<Vec<Event>>,
    tasks: TaskMap,
    dropped: u64,
}

impl LogInner {
    fn push(&mut self, event: Event) {
        if let Some(chunk) = self.chunks.last_mut() {
            if chunk.len() < CHUNK {
                chunk.push(event);
                return;
            }
        }
        // Invariant 3: the budget is touched once per chunk.
        let reserved = BUDGET
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                left.checked_sub(CHUNK)
            })
            .is_ok();
        if reserved {
            let mut chunk = Vec::with_capacity(CHUNK);
            chunk.push(event);
            self.chunks.push(chunk);
        } else {
            self.dropped += 1;
        }
    }

    fn note_task(&mut self, task: &dyn TaskView) {
        self.tasks.entry(task.id()).or_insert_with(|| TaskInfo {
            name: task.name().cloned(),
            site: task.spawn_site(),
        });
    }
}

struct Session {
    id: u64,
    /// `clock_now` and `ticks` when recording started.
    start: (u64, u64),
    logs: Vec<Arc<ThreadLog>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` on this thread's log of the current session, registering one at the thread's
/// first event in it; does nothing when recording has stopped or the thread is exiting.
fn with_log(f: impl FnOnce(&mut LogInner)) {
    if !observe::on() {
        return;
    }
    // Acquire: pairs with the Release store of `ON` (observe/trace.rs `start`, called by
    // `Recording::start`), so that the id
    // read next is the session's that turned it on (or a later one's).
    std::sync::atomic::fence(Ordering::Acquire);
    let session = SESSION_ID.load(Ordering::Relaxed);
    let _ = LOCAL.try_with(|local| {
        let registered =
            matches!(local.try_borrow().as_deref(), Ok(Some((id, _))) if *id == session);
        if !registered {
            // Outside any borrow of `LOCAL`: `register` takes locks and drops runtime handles,
            // and whatever that sets off must not find it borrowed.
            let log = register(session);
            let Ok(mut slot) = local.try_borrow_mut() else {
                return;
            };
            *slot = log.map(|log| (session, log));
        }
        // A borrow that fails is an event recorded from inside another's recording: dropped.
        let Ok(slot) = local.try_borrow() else {
            return;
        };
        if let Some((_, log)) = slot.as_ref() {
            f(&mut lock(&log.inner));
        }
    });
}

/// A log for this thread in session `id`, if that session still records.
#[cold]
fn register(id: u64) -> Option<Arc<ThreadLog>> {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    let (label, sort_index, worker) = match crate::sched::current_worker_of() {
        Some((shared, index)) => {
            let runtime = super::live_runtimes()
                .iter()
                .position(|r| Arc::as_ptr(r) == shared)
                .unwrap_or(0);
            let label = if runtime == 0 {
                format!("weft worker {index}")
            } else {
                format!("weft runtime {runtime} worker {index}")
            };
            (label, ((runtime as u64) << 16) | index as u64, true)
        }
        None => {
            let label = match std::thread::current().name() {
                Some("weft-blocking") => "weft blocking pool".to_string(),
                Some(name) => name.to_string(),
                None => format!("thread {tid}"),
            };
            (label, (1 << 40) | u64::from(tid as u32), false)
        }
    };
    let log = Arc::new(ThreadLog {
        tid,
        label,
        sort_index,
        worker,
        inner: Mutex::default(),
    });
    let mut session = lock(&SESSION);
    let session = session.as_mut().filter(|s| s.id == id)?;
    session.logs.push(log.clone());
    Some(log)
}

/// The id of the task running on this thread, or 0.
fn current_task_id() -> u64 {
    crate::sched::current_task_ptr().map_or(0, |header| {
        // SAFETY: the running task's header lives for the whole resume we are in
        // (sched/worker.rs `current_task_ptr`).
        unsafe { header.as_ref() }.id.as_u64()
    })
}

/// The recorder of the scheduler's events (observe/trace.rs): each appends to this thread's
/// log (invariant 2).
struct Recorder;

impl observe::Sink for Recorder {
    fn ticks(&self) -> u64 {
        ticks()
    }

    fn run_ended(&self, task: &dyn TaskView, started: u64, ended: Ended) {
        let end = ticks();
        with_log(|log| {
            log.note_task(task);
            log.push(Event {
                at: started,
                end,
                task: task.id(),
                other: 0,
                kind: Kind::Run,
                detail: ended.code(),
            });
        });
    }

    fn spawned(&self, task: &dyn TaskView) {
        instant(Kind::Spawn, task.id(), current_task_id(), Some(task));
    }

    fn woke(&self, task: &dyn TaskView) {
        instant(Kind::Wake, task.id(), current_task_id(), None);
    }

    fn stole(&self, task: &dyn TaskView, from: Option<usize>) {
        let from = from.map_or(FROM_INJECTOR, |w| w as u64);
        instant(Kind::Steal, task.id(), from, Some(task));
    }

    fn handed_off(&self) {
        instant(Kind::HandOff, current_task_id(), 0, None);
    }

    fn blocking_call_ended(&self, task: u64, started: u64) {
        let end = ticks();
        with_log(|log| {
            log.push(Event {
                at: started,
                end,
                task,
                other: 0,
                kind: Kind::BlockingCall,
                detail: 0,
            })
        });
    }
}

fn instant(kind: Kind, task: u64, other: u64, named: Option<&dyn TaskView>) {
    let at = ticks();
    with_log(|log| {
        if let Some(named) = named {
            log.note_task(named);
        }
        log.push(Event {
            at,
            end: at,
            task,
            other,
            kind,
            detail: 0,
        });
    });
}

/// What a [`trace`] recorded and wrote.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct TraceSummary {
    /// Events written: run slices, spawns, wakes, steals, hand-offs and blocking calls (not
    /// the track names or the flow arrows).
    pub events: u64,
    /// Events not recorded because the session's [`MAX_EVENTS`] were used up.
    pub dropped: u64,
    /// Worker tracks (workers that recorded something).
    pub workers: usize,
    /// Tracks in all, workers included.
    pub threads: usize,
    /// Distinct tasks that ran or were spawned, woken or stolen.
    pub tasks: usize,
    /// How long it recorded.
    pub recorded: Duration,
    /// Bytes of JSON written.
    pub bytes: u64,
}

/// A session that records until stopped or dropped (invariant 4).
struct Recording {
    id: u64,
    stopped: bool,
}

impl Recording {
    fn start() -> io::Result<Recording> {
        let mut session = lock(&SESSION);
        if session.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "weft: debug::trace: a trace is already recording (one at a time)",
            ));
        }
        let id = SESSION_ID.load(Ordering::Relaxed).wrapping_add(1);
        SESSION_ID.store(id, Ordering::Relaxed);
        BUDGET.store(MAX_EVENTS, Ordering::Relaxed);
        choose_clock();
        *session = Some(Session {
            id,
            start: (clock_now(), ticks()),
            logs: Vec::new(),
        });
        drop(session);
        // Release: pairs with the Acquire fence in `with_log`, which then reads this
        // session's id; the session itself is read under `SESSION`'s mutex (`register`).
        observe::start(&RECORDER);
        Ok(Recording { id, stopped: false })
    }

    /// Stops recording and takes what every thread recorded.
    fn stop(mut self) -> Recorded {
        self.stopped = true;
        observe::stop();
        let end = (clock_now(), ticks());
        let session = lock(&SESSION)
            .take()
            .filter(|s| s.id == self.id)
            .expect("weft: debug::trace: the session vanished while recording");
        let mut tracks = Vec::new();
        for log in &session.logs {
            // Invariant 2: a late event after this lands in the emptied log, unread.
            let inner = std::mem::take(&mut *lock(&log.inner));
            tracks.push((log.clone(), inner));
        }
        Recorded {
            start: session.start,
            end,
            tracks,
        }
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        if !self.stopped {
            observe::stop();
            let mut session = lock(&SESSION);
            if session.as_ref().is_some_and(|s| s.id == self.id) {
                *session = None;
            }
        }
    }
}

/// A stopped session's logs, ready to write.
struct Recorded {
    /// `clock_now` and `ticks` at the session's start and end.
    start: (u64, u64),
    end: (u64, u64),
    tracks: Vec<(Arc<ThreadLog>, LogInner)>,
}

/// Records for `duration`, then writes the Chrome trace-event JSON to `path`; returns what it
/// recorded. Callable from a task (it sleeps with [`crate::time::sleep`], so its worker runs
/// the others, and writes the file on the blocking pool) or from a plain thread (it blocks).
///
/// The file has one track per thread that did something: `weft worker N` for each worker
/// (`weft runtime R worker N` for the other live runtimes), `weft blocking pool` for its
/// threads, and the plain threads that spawned or woke tasks by their names. On a worker's
/// track each run of a task is a slice named by the task's name (or `task <id>`), with its
/// id, spawn site and how it ended (`yield`, `park` with the reason a dump shows, or
/// `return`) in its args; spawns, wakes, steals and blocking hand-offs are instant events
/// with the task id, and an arrow joins each spawn or wake to the task's next run.
/// Open it at <https://ui.perfetto.dev> or in `chrome://tracing`.
///
/// Off, tracing costs each event site one load (the module doc of `debug/trace/mod.rs`); on, a
/// clock read and an append to the thread's log per event.
///
/// ```no_run
/// weft::run(|| {
///     let summary = weft::debug::trace(std::time::Duration::from_secs(2), "weft.trace.json")
///         .unwrap();
///     println!("{} events, {} dropped", summary.events, summary.dropped);
/// });
/// ```
///
/// # Errors
/// [`io::ErrorKind::AlreadyExists`] while another trace records (one runs at a time); the
/// file's errors; the blocking pool's when called from a task.
pub fn trace(duration: Duration, path: impl AsRef<Path>) -> io::Result<TraceSummary> {
    let path = path.as_ref().to_path_buf();
    let file = off_worker(move || {
        choose_clock();
        File::create(path)
    })?;
    let recorded = record(duration)?;
    off_worker(move || {
        let mut out = BufWriter::with_capacity(1 << 20, file);
        let summary = recorded.write_json(&mut out)?;
        out.flush()?;
        Ok(summary)
    })
}

/// [`trace`] into memory, for the debug endpoint's `/debug/trace`.
pub(crate) fn trace_json(duration: Duration) -> io::Result<Vec<u8>> {
    off_worker(|| {
        choose_clock();
        Ok(())
    })?;
    let recorded = record(duration)?;
    off_worker(move || {
        let mut out = Vec::new();
        recorded.write_json(&mut out)?;
        Ok(out)
    })
}

fn record(duration: Duration) -> io::Result<Recorded> {
    let recording = Recording::start()?;
    // Parks a task (its worker runs the others) or the plain thread; a cancelled caller
    // unwinds here, and `Recording`'s drop ends the session.
    crate::time::sleep(duration);
    Ok(recording.stop())
}

/// Runs `f` on the blocking pool when called from a task, else right here.
fn off_worker<T: Send + 'static>(
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    if crate::sched::current_task().is_some() {
        crate::task::try_spawn_blocking(f)?
    } else {
        f()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ended_codes_round_trip_every_reason() {
        assert_eq!(Ended::from_code(Ended::Yield.code()), ("yield", None));
        assert_eq!(Ended::from_code(Ended::Return.code()), ("return", None));
        for reason in ParkReason::ALL {
            let code = Ended::Park(reason).code();
            assert_eq!(Ended::from_code(code), ("park", Some(reason.as_str())));
        }
    }

    #[test]
    fn the_timebase_maps_ticks_linearly_onto_the_session() {
        // 3 ticks a nanosecond, the session 1 ms long.
        let time = Timebase::new((5_000, 900), (1_005_000, 3_000_900));
        assert_eq!(time.ns(900), 0);
        assert!(time.ns(300_900).abs_diff(100_000) <= 1);
        assert!(time.ns(3_000_900).abs_diff(1_000_000) <= 1);
        assert_eq!(time.ns(0), 0, "before the start saturates");
        // Nanosecond ticks map onto themselves.
        let same = Timebase::new((100, 100), (2_100, 2_100));
        assert_eq!(same.ns(1_337), 1_237);
    }

    #[test]
    fn an_event_is_forty_bytes() {
        assert_eq!(std::mem::size_of::<Event>(), 40);
    }
}
