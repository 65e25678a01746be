//! The monitor: one thread per runtime that notices a worker stuck in one task (Go's
//! `sysmon`), gets the never-started tasks queued behind it running elsewhere, and names the
//! offending task.
//!
//! Owns: [`Monitor`] (the thread's handle and stop flag) and, on its own thread, the last
//! sample of each worker's `Remote::resumes` and the set of spawn sites already warned about.
//!
//! Every `threshold / 2` it reads each worker's `resumes` and `running_id`. A worker whose
//! count has not moved for `threshold` while one task runs is stuck:
//! 1. It marks the worker `Remote::stuck` (cleared once its count moves), which lets thieves
//!    with more live tasks than it steal its never-started tasks too (queue.rs,
//!    `defers_to`), and if its `new_tasks` deque holds some, it wakes a sleeping worker
//!    (`Shared::wake_idle_worker`), whose search steals them (sched/mod.rs invariant 1: only
//!    never-started tasks move; the stuck worker's woken, started tasks stay — moving them
//!    would be unsound).
//! 2. The first time a spawn site stalls a worker, it reports it (once per site, so a hot loop
//!    cannot flood the log), at a tick in which its thread had the CPU at least half the time
//!    (`/proc/self/task/TID/schedstat`): a stall spent mostly waiting for a CPU is the
//!    machine's shortage, not the task's doing (seen on a loaded CI host: a connection task
//!    reported "computing" for 10 ms inside a `send`). The report is a [`MonitorReport`]
//!    naming the task's id, name and spawn site and saying what the worker is doing, read from
//!    the kernel (`/proc/self/task/TID/syscall`): computing, blocked in a named system call,
//!    or waiting on a futex; for a computing task, where it is (`monitor_sample.rs`: a signal
//!    makes the worker's thread copy its stack).
//! 3. Every [`CATCH_BLOCKING_EVERY_TICKS`] ticks it reads what each busy worker's thread is
//!    doing: one found asleep in a socket call or a sleep while it runs a task blocks its
//!    worker however short the call (a sync client's reads, each under the threshold, can
//!    hold a worker most of the time and never trip step 2); its site is reported the same
//!    way, with [`MonitorReport::caught_blocking`] set.
//!
//!    The report goes to the runtime's hook ([`crate::RuntimeBuilder::monitor_report`]), by
//!    default stderr (with the `log` feature and a logger installed, `log::warn!` with target
//!    `weft::monitor`); a hook that drops it changes nothing in step 1.
//!
//! # Idle
//! With every worker asleep there is nothing to watch, and ticking every 5 ms cost ≈4 ms of CPU
//! a second with a million parked tasks. After [`IDLE_TICKS_BEFORE_REST`] ticks with every
//! worker asleep the monitor rests (parks), and the first worker to wake unparks it — Go's
//! `sysmon` does the same. The handshake, as in sched/idle.rs:
//! 1. The monitor sets `Rest::resting`, issues a SeqCst fence, then reads every worker's
//!    `sleeping` flag; if one is awake it does not rest.
//! 2. A worker leaving its sleep clears its `sleeping` flag, issues a SeqCst fence, then reads
//!    `resting`; if set (and its swap wins) it unparks the monitor.
//!
//! Either the monitor sees the worker awake or the worker sees the monitor resting (sched/idle.rs
//! `RestFlag`, checked by loom). The monitor looks again every [`MAX_REST`] anyway, and rests
//! on if every worker still sleeps.
//!
//! May call: `sched` (Shared, Remote; `monitor_sample` for a computing task's frames). Called by: `sched/runtime.rs` (start, stop),
//! `sched/worker.rs` (`Rest::worker_awake`).
//!
//! Why a thread of its own: a stuck worker cannot report itself, and the other workers may all
//! be asleep in their pollers.

use std::collections::HashSet;
use std::io;
use std::panic::Location;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::idle::RestFlag;
use super::runtime::{Remote, Shared};

/// Where the monitor's reports go: the runtime's hook.
pub(crate) type ReportHook = Arc<dyn Fn(&MonitorReport) + Send + Sync>;

/// What a stuck worker is doing, as the kernel tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StuckActivity {
    /// Running (or ready to run) in user mode: a computation that does not park.
    Computing,
    /// Blocked in a system call other than `futex`, e.g. a `std::net` read or a
    /// `std::thread::sleep`; `name` is known for the common ones.
    Syscall {
        /// The system call's number on this architecture.
        number: i64,
        /// Its name, like `read` or `clock_nanosleep`.
        name: Option<&'static str>,
        /// What the call waits on, as far as its arguments tell.
        waits_on: BlockedOn,
    },
    /// Waiting on a futex: a std `Mutex`, `RwLock`, `Condvar`, a `thread::park`, or another
    /// thread's join.
    Futex,
    /// The kernel's answer could not be read.
    Unknown,
}

/// What a system call that blocks a worker waits on: it decides the advice in a
/// [`MonitorReport`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BlockedOn {
    /// A socket: a socket call (`connect`, `recvfrom`, …), a `read`/`write` whose descriptor
    /// is a socket, or a `poll`/`select` over descriptors (how sync clients wait for theirs).
    Socket,
    /// A sleep: `nanosleep`/`clock_nanosleep` (`std::thread::sleep`).
    Sleep,
    /// Anything else: a file, a pipe, a child process, memory.
    Other,
}

/// The monitor's report on a worker that has run one task for longer than the runtime's
/// `monitor_threshold` without parking. Its `Display` is the message weft prints by default.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct MonitorReport {
    /// The stuck worker's index.
    pub worker: usize,
    /// The task it runs, by id.
    pub task_id: u64,
    /// The task's name, if it was given one.
    pub task_name: Option<Arc<str>>,
    /// Where the task was spawned, when known.
    pub spawn_site: Option<&'static Location<'static>>,
    /// How long the task has held the worker so far.
    pub stuck_for: Duration,
    /// What the worker's thread is doing.
    pub activity: StuckActivity,
    /// True when the monitor caught the task in a blocking socket call or sleep at one of its
    /// periodic looks, before `monitor_threshold` passed: calls shorter than the threshold that
    /// block the worker again and again (a sync client's socket reads) are reported this way.
    pub caught_blocking: bool,
    /// Where the task is, for a computing one: the interrupted function first, then callers
    /// found by scanning its stack for return addresses (best effort: a stale return address
    /// of a dead frame can show up among them). `None` when no sample was taken.
    pub backtrace: Option<crate::observe::backtrace::Backtrace>,
}

impl std::fmt::Display for MonitorReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "weft: worker {} has run task {}",
            self.worker, self.task_id
        )?;
        if let Some(name) = &self.task_name {
            write!(f, " \"{name}\"")?;
        }
        match self.spawn_site {
            Some(site) => write!(f, " (spawned at {site})")?,
            None => write!(f, " (spawned at an unknown site)")?,
        }
        if self.caught_blocking {
            write!(f, " and caught it in a blocking call, without parking")?;
        } else {
            write!(f, " for {} ms without parking", self.stuck_for.as_millis())?;
        }
        match &self.activity {
            StuckActivity::Computing => write!(
                f,
                ": it is computing. Call weft::yield_now() in long loops, or run the \
                 computation through weft::task::compute (a pool of one thread per core)"
            )?,
            StuckActivity::Syscall {
                number,
                name,
                waits_on,
            } => {
                match name {
                    Some(name) => write!(f, ": it is blocked in the kernel in {name}(2)")?,
                    None => write!(f, ": it is blocked in the kernel in system call {number}")?,
                }
                let advice = match waits_on {
                    BlockedOn::Socket => Some(
                        "a blocking socket call (std::net, or a sync client crate): use \
                         weft::net, or let std and sync crates park instead",
                    ),
                    BlockedOn::Sleep => Some(
                        "std::thread::sleep: use weft::time::sleep, or let std and sync crates \
                         park instead",
                    ),
                    BlockedOn::Other => None,
                };
                if let Some(advice) = advice {
                    write!(f, ", and every task of that worker with it. It is {advice}")?;
                    if cfg!(feature = "interpose") {
                        // The feature is on, so this call went around it: a raw system call,
                        // or a descriptor the interposer does not own.
                        write!(
                            f,
                            ": the `interpose` feature is on but this call bypassed it (a raw \
                             system call, or a statically linked libc), so make it through \
                             weft::task::spawn_blocking"
                        )?
                    } else {
                        write!(
                            f,
                            " with weft's `interpose` cargo feature (features = \
                             [\"interpose\"])"
                        )?
                    }
                } else if name.is_some_and(is_memory_call) {
                    // Not a call that waits for the world: the allocator growing its heap or
                    // weft giving stack memory back, slow when the machine is.
                    write!(
                        f,
                        ", managing memory; on a loaded machine this can take milliseconds \
                         and is not a blocking call of the task's"
                    )?
                } else {
                    write!(
                        f,
                        ", and every task of that worker with it. Make such calls (files, \
                         pipes, a blocking C library) through weft::task::spawn_blocking"
                    )?
                }
            }
            StuckActivity::Futex => write!(
                f,
                ": it is waiting on a futex (a std Mutex, RwLock or Condvar, a thread park or \
                 join), which blocks every task of that worker. A std::sync::Mutex held across \
                 a park by another task of the same worker deadlocks it: use weft::sync"
            )?,
            StuckActivity::Unknown => {}
        }
        write!(
            f,
            ". Tasks queued behind it that have not started move to other workers"
        )?;
        if let Some(backtrace) = self.backtrace.as_ref().filter(|b| !b.frames.is_empty()) {
            let text = backtrace.to_string();
            write!(
                f,
                "\nweft: where the task is (its stack, scanned):\n{}",
                text.trim_end()
            )?;
        }
        Ok(())
    }
}

/// The target of the monitor's `log` records (feature `log`).
#[cfg(feature = "log")]
const LOG_TARGET: &str = "weft::monitor";

/// The default hook: with the `log` feature and a logger installed, a `warn!` record of
/// target `weft::monitor` (the logger's filters apply); else the report on stderr.
///
/// "A logger installed" is `log::max_level()` above `Off`: it is `Off` until the program
/// sets it, which every logger's setup does (`env_logger::init`, `simple_logger`), and with
/// no logger `log` drops every record, which would silence the report.
pub(crate) fn default_report(report: &MonitorReport) {
    #[cfg(feature = "log")]
    if log::max_level() != log::LevelFilter::Off {
        log::warn!(target: LOG_TARGET, "{report}");
        return;
    }
    eprintln!("{report}");
}

/// What the worker behind `remote` is doing now, from `/proc/self/task/TID/syscall`: the
/// first field is "running" in user mode, else the number of the system call it is in.
fn read_activity(remote: &Remote) -> StuckActivity {
    let tid = remote.tid.load(Ordering::Relaxed);
    if tid == 0 {
        return StuckActivity::Unknown;
    }
    let Ok(text) = std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")) else {
        return StuckActivity::Unknown;
    };
    parse_activity(&text, &|fd| {
        std::fs::read_link(format!("/proc/self/fd/{fd}"))
            .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"))
    })
}

/// Parses `/proc/self/task/TID/syscall` ("NUMBER ARG1 ARG2 …" in hex, or "running");
/// `is_socket` tells whether a descriptor of this process is a socket.
fn parse_activity(text: &str, is_socket: &dyn Fn(i32) -> bool) -> StuckActivity {
    let mut fields = text.split_whitespace();
    match fields.next() {
        Some("running") => StuckActivity::Computing,
        Some(first) => match first.parse::<i64>() {
            Ok(libc::SYS_futex) => StuckActivity::Futex,
            Ok(number) if number >= 0 => {
                let name = syscall_name(number);
                let first_arg = fields
                    .next()
                    .and_then(|a| i64::from_str_radix(a.trim_start_matches("0x"), 16).ok());
                StuckActivity::Syscall {
                    number,
                    name,
                    waits_on: blocked_on(name, first_arg, is_socket),
                }
            }
            // -1: blocked, but not in a system call (a page fault, say).
            _ => StuckActivity::Unknown,
        },
        None => StuckActivity::Unknown,
    }
}

/// What the system call `name`, whose first argument is `first_arg`, waits on.
fn blocked_on(
    name: Option<&str>,
    first_arg: Option<i64>,
    is_socket: &dyn Fn(i32) -> bool,
) -> BlockedOn {
    let fd_is_socket = || {
        first_arg
            .and_then(|fd| i32::try_from(fd).ok())
            .is_some_and(is_socket)
    };
    match name {
        Some(
            "connect" | "accept" | "accept4" | "recvfrom" | "recvmsg" | "sendto" | "sendmsg"
            | "poll" | "ppoll" | "select" | "pselect6",
        ) => BlockedOn::Socket,
        Some("read" | "write" | "readv" | "writev") if fd_is_socket() => BlockedOn::Socket,
        Some("nanosleep" | "clock_nanosleep") => BlockedOn::Sleep,
        _ => BlockedOn::Other,
    }
}

/// System calls that manage this process's memory (the allocator, weft's stacks), which a
/// worker is seen in while the kernel is slow, not because its task blocks.
fn is_memory_call(name: &str) -> bool {
    matches!(name, "mmap" | "munmap" | "mprotect" | "madvise" | "brk")
}

/// Names of the system calls a task is likely to block a worker in.
fn syscall_name(number: i64) -> Option<&'static str> {
    const NAMES: &[(i64, &str)] = &[
        (libc::SYS_read, "read"),
        (libc::SYS_write, "write"),
        (libc::SYS_readv, "readv"),
        (libc::SYS_writev, "writev"),
        (libc::SYS_pread64, "pread64"),
        (libc::SYS_pwrite64, "pwrite64"),
        (libc::SYS_openat, "openat"),
        (libc::SYS_fsync, "fsync"),
        (libc::SYS_fdatasync, "fdatasync"),
        (libc::SYS_connect, "connect"),
        (libc::SYS_accept, "accept"),
        (libc::SYS_accept4, "accept4"),
        (libc::SYS_recvfrom, "recvfrom"),
        (libc::SYS_recvmsg, "recvmsg"),
        (libc::SYS_sendto, "sendto"),
        (libc::SYS_sendmsg, "sendmsg"),
        (libc::SYS_ppoll, "ppoll"),
        (libc::SYS_pselect6, "pselect6"),
        (libc::SYS_epoll_pwait, "epoll_pwait"),
        (libc::SYS_clock_nanosleep, "clock_nanosleep"),
        (libc::SYS_nanosleep, "nanosleep"),
        (libc::SYS_wait4, "wait4"),
        (libc::SYS_flock, "flock"),
        (libc::SYS_fcntl, "fcntl"),
        (libc::SYS_mmap, "mmap"),
        (libc::SYS_munmap, "munmap"),
        (libc::SYS_mprotect, "mprotect"),
        (libc::SYS_madvise, "madvise"),
        (libc::SYS_brk, "brk"),
        (libc::SYS_ioctl, "ioctl"),
        #[cfg(target_arch = "x86_64")]
        (libc::SYS_poll, "poll"),
        #[cfg(target_arch = "x86_64")]
        (libc::SYS_select, "select"),
        #[cfg(target_arch = "x86_64")]
        (libc::SYS_epoll_wait, "epoll_wait"),
    ];
    NAMES
        .iter()
        .find(|(n, _)| *n == number)
        .map(|(_, name)| *name)
}

/// Default time a worker may spend in one task before the monitor steps in (Go preempts at
/// 10 ms too).
pub(crate) const DEFAULT_THRESHOLD: Duration = Duration::from_millis(10);

/// Every this many ticks the monitor looks at what each busy worker's thread is doing, to
/// catch blocking calls shorter than the threshold (module doc, step 3): one read of
/// `/proc/self/task/TID/syscall` per worker every 100 ms at the default threshold.
const CATCH_BLOCKING_EVERY_TICKS: u32 = 20;

/// Ticks with every worker asleep after which the monitor rests.
const IDLE_TICKS_BEFORE_REST: u32 = 20;
/// The longest rest: a bound on how late a missed wake could make the monitor.
const MAX_REST: Duration = Duration::from_secs(1);

/// The monitor's rest, shared with the workers (module doc, "Idle").
#[derive(Default)]
pub(crate) struct Rest {
    flag: RestFlag,
    monitor: std::sync::OnceLock<thread::Thread>,
}

impl Rest {
    /// A worker that just left its sleep (step 2): wakes a resting monitor.
    pub(crate) fn worker_awake(&self) {
        if self.flag.worker_awake() {
            if let Some(monitor) = self.monitor.get() {
                monitor.unpark();
            }
        }
    }
}

pub(crate) struct Monitor {
    stop: Arc<AtomicBool>,
    thread: thread::JoinHandle<()>,
}

impl Monitor {
    pub(crate) fn start(
        shared: Arc<Shared>,
        threshold: Duration,
        report: ReportHook,
    ) -> io::Result<Monitor> {
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = stop.clone();
        let thread = thread::Builder::new()
            .name("weft-monitor".into())
            .spawn(move || watch(&shared, threshold, &thread_stop, &*report))?;
        Ok(Monitor { stop, thread })
    }

    pub(crate) fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.thread().unpark();
        let _ = self.thread.join();
    }
}

struct Sample {
    resumes: u64,
    since: Instant,
    handled: bool,
    /// When the worker's thread was last read while in the same task across ticks, and its
    /// time waiting for a CPU then ([`runqueue_wait`]).
    waited_before: Option<(Instant, Duration)>,
}

impl Sample {
    /// A worker seen at `resumes` resumes at `now`, in a task not looked at yet.
    fn fresh(resumes: u64, now: Instant) -> Sample {
        Sample {
            resumes,
            since: now,
            handled: false,
            waited_before: None,
        }
    }
}

/// How long the thread `tid` of this process has waited on a run queue, runnable but not
/// running, in its life: the second field of `/proc/self/task/TID/schedstat`. `None` where
/// the kernel does not say (no CONFIG_SCHED_INFO).
fn runqueue_wait(tid: i32) -> Option<Duration> {
    if tid == 0 {
        return None;
    }
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    parse_runqueue_wait(&text)
}

fn parse_runqueue_wait(schedstat: &str) -> Option<Duration> {
    let ns = schedstat.split_whitespace().nth(1)?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// True the first time a spawn site is reported in this process: the warning is once per
/// site for the whole process, not per runtime (a program that builds runtimes in a loop would
/// otherwise repeat it).
fn first_warning_for(site: usize) -> bool {
    warned_sites(|warned| warned.insert(site))
}

/// Whether a spawn site was reported already (the sample is taken only for a report).
fn warned_before(site: usize) -> bool {
    warned_sites(|warned| warned.contains(&site))
}

fn warned_sites<R>(f: impl FnOnce(&mut HashSet<usize>) -> R) -> R {
    static WARNED: std::sync::Mutex<Option<HashSet<usize>>> = std::sync::Mutex::new(None);
    let mut warned = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    f(warned.get_or_insert_with(HashSet::new))
}

/// Step 1 of the rest handshake: rests if every worker sleeps, and returns once woken.
fn rest_if_all_asleep(shared: &Shared, stop: &AtomicBool) -> bool {
    let rest = &shared.monitor_rest.flag;
    let all_asleep = || shared.remotes.iter().all(|r| r.flags.is_sleeping());
    if !rest.try_rest(all_asleep) {
        return false;
    }
    let mut start = Instant::now();
    while rest.resting() && !stop.load(Ordering::Relaxed) {
        if start.elapsed() >= MAX_REST {
            // A rest that ran out with every worker still asleep goes on at once: waking for
            // IDLE_TICKS_BEFORE_REST ticks after each was 21 wake-ups a second, 0.5 ms of CPU
            // a second for a million sleeping tasks. `resting` is still set, so step 1 holds.
            if !rest.still_all_asleep(all_asleep) {
                break;
            }
            start = Instant::now();
        }
        thread::park_timeout(MAX_REST);
    }
    rest.end_rest();
    true
}

fn watch(
    shared: &Shared,
    threshold: Duration,
    stop: &AtomicBool,
    report: &(dyn Fn(&MonitorReport) + Send + Sync),
) {
    let _ = shared.monitor_rest.monitor.set(thread::current());
    let tick = (threshold / 2).clamp(Duration::from_millis(1), Duration::from_millis(50));
    let mut idle_ticks = 0u32;
    let mut ticks = 0u32;
    let now = Instant::now();
    let mut samples: Vec<Sample> = shared
        .remotes
        .iter()
        .map(|_| Sample::fresh(0, now))
        .collect();
    while !stop.load(Ordering::Relaxed) {
        thread::park_timeout(tick);
        if shared.remotes.iter().all(|r| r.flags.is_sleeping()) {
            idle_ticks += 1;
            if idle_ticks >= IDLE_TICKS_BEFORE_REST && rest_if_all_asleep(shared, stop) {
                idle_ticks = 0;
                // Time spent resting is no worker's fault: start the samples afresh.
                let now = Instant::now();
                for sample in &mut samples {
                    sample.since = now;
                }
                continue;
            }
        } else {
            idle_ticks = 0;
        }
        let now = Instant::now();
        ticks = ticks.wrapping_add(1);
        if ticks.is_multiple_of(CATCH_BLOCKING_EVERY_TICKS) {
            catch_blocking_calls(shared, report);
        }
        for (remote, sample) in shared.remotes.iter().zip(&mut samples) {
            let resumes = remote.resumes.load(Ordering::Relaxed);
            let running = remote.running_id.load(Ordering::Relaxed);
            if resumes != sample.resumes || running == 0 {
                *sample = Sample::fresh(resumes, now);
                remote.stuck.store(false, Ordering::Relaxed);
                continue;
            }
            if sample.waited_before.is_none() {
                // Read only once a task has run across a tick, which few do.
                sample.waited_before =
                    runqueue_wait(remote.tid.load(Ordering::Relaxed)).map(|waited| (now, waited));
            }
            let stuck_for = now - sample.since;
            if stuck_for < threshold {
                continue;
            }
            remote.stuck.store(true, Ordering::Relaxed);
            // Step 1, again at every tick while it stays stuck: new work keeps arriving.
            if !shared.stealers[remote.index].is_empty()
                || remote.placed_len.load(Ordering::Relaxed) > 0
            {
                shared.wake_idle_worker(Some(remote.index));
            }
            if sample.handled {
                continue;
            }
            // A thread that spent most of the last tick waiting for a CPU was not computing:
            // the machine is short of CPUs (other processes, a loaded CI host). Step 1 is
            // done; the report waits for a tick in which the task had the CPU most of the time.
            if let Some((at, waited)) = sample.waited_before {
                if let Some(now_waited) = runqueue_wait(remote.tid.load(Ordering::Relaxed)) {
                    sample.waited_before = Some((now, now_waited));
                    if now_waited.saturating_sub(waited) * 2 > now - at {
                        continue;
                    }
                }
            }
            sample.handled = true;
            let site = remote.running_site.load(Ordering::Relaxed);
            let task_name = remote
                .running_name
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            let activity = read_activity(remote);
            let frames = match activity {
                StuckActivity::Computing if !warned_before(site as usize) => {
                    super::monitor_sample::sample(remote.tid.load(Ordering::Relaxed))
                }
                _ => None,
            };
            // The worker may have moved on while we read: report only a task still stuck.
            if remote.resumes.load(Ordering::Relaxed) != resumes {
                continue;
            }
            shared.monitor_warnings.fetch_add(1, Ordering::Relaxed);
            if first_warning_for(site as usize) {
                // Symbolized only now, for the report: a sample of a task that moved on, or
                // of a site reported before, is dropped unnamed (naming one costs up to
                // seconds of this thread's CPU, which an echo server under a burst of
                // connections paid at every stall of its accept loop).
                let backtrace = frames.as_deref().map(super::monitor_sample::symbolize);
                // SAFETY: the worker stores only `&'static Location` pointers (or null).
                let spawn_site: Option<&'static Location<'static>> = unsafe { site.as_ref() };
                report(&MonitorReport {
                    worker: remote.index,
                    task_id: running,
                    task_name,
                    spawn_site,
                    stuck_for,
                    activity,
                    caught_blocking: false,
                    backtrace,
                });
            }
        }
    }
}

/// Step 3: a worker's thread found asleep in the kernel in a socket call or a sleep while it
/// runs a task is blocking every task of that worker, however short the call: weft's own
/// sockets never sleep in the kernel (they are non-blocking and park the task), nor do
/// interposed calls. A thread on a CPU reads as "running", so a non-blocking call in
/// progress is never taken for one. Reported once per spawn site, as in step 2.
fn catch_blocking_calls(shared: &Shared, report: &(dyn Fn(&MonitorReport) + Send + Sync)) {
    for remote in shared.remotes.iter() {
        let running = remote.running_id.load(Ordering::Relaxed);
        if running == 0 || remote.flags.is_sleeping() {
            continue;
        }
        let site = remote.running_site.load(Ordering::Relaxed);
        if warned_before(site as usize) {
            continue;
        }
        let resumes = remote.resumes.load(Ordering::Relaxed);
        let activity = read_activity(remote);
        let StuckActivity::Syscall {
            waits_on: BlockedOn::Socket | BlockedOn::Sleep,
            ..
        } = activity
        else {
            continue;
        };
        // Still the same run of the same task: the call was that task's.
        if remote.resumes.load(Ordering::Relaxed) != resumes
            || remote.running_id.load(Ordering::Relaxed) != running
            || !first_warning_for(site as usize)
        {
            continue;
        }
        let task_name = remote
            .running_name
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        report(&MonitorReport {
            worker: remote.index,
            task_id: running,
            task_name,
            // SAFETY: the worker stores only `&'static Location` pointers (or null).
            spawn_site: unsafe { site.as_ref() },
            stuck_for: Duration::ZERO,
            activity,
            caught_blocking: true,
            backtrace: None,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_answer_tells_computing_from_blocking() {
        let fd3_is_a_socket = |fd: i32| fd == 3;
        let parse = |text: &str| parse_activity(text, &fd3_is_a_socket);
        assert_eq!(parse("running\n"), StuckActivity::Computing);
        let futex = format!("{} 0x7f 0x80 0x0 0x0", libc::SYS_futex);
        assert_eq!(parse(&futex), StuckActivity::Futex);
        let read = format!("{} 0x3 0x7f 0x4000", libc::SYS_read);
        assert_eq!(
            parse(&read),
            StuckActivity::Syscall {
                number: libc::SYS_read,
                name: Some("read"),
                waits_on: BlockedOn::Socket,
            }
        );
        let file_read = format!("{} 0x4 0x7f 0x4000", libc::SYS_read);
        assert!(matches!(
            parse(&file_read),
            StuckActivity::Syscall {
                waits_on: BlockedOn::Other,
                ..
            }
        ));
        let sleep = format!("{} 0x0 0x0 0x7ffd 0x7ffd", libc::SYS_clock_nanosleep);
        assert!(matches!(
            parse(&sleep),
            StuckActivity::Syscall {
                waits_on: BlockedOn::Sleep,
                ..
            }
        ));
        assert_eq!(parse("-1 0x7ffd 0x55"), StuckActivity::Unknown);
        assert_eq!(parse(""), StuckActivity::Unknown);
    }

    #[test]
    fn schedstat_gives_the_time_spent_waiting_for_a_cpu() {
        assert_eq!(
            parse_runqueue_wait("840532741 176326412 2002\n"),
            Some(Duration::from_nanos(176_326_412))
        );
        assert_eq!(parse_runqueue_wait("840532741"), None);
        assert_eq!(parse_runqueue_wait(""), None);
        // This process's own threads have the file.
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as i32;
        if std::path::Path::new(&format!("/proc/self/task/{tid}/schedstat")).exists() {
            assert!(
                runqueue_wait(tid).is_some(),
                "schedstat unread for this thread"
            );
        }
    }
}
