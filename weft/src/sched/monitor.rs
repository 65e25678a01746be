//! The monitor: one thread per runtime that notices a worker stuck in one task (Go's
//! `sysmon`), gets the never-started tasks queued behind it running elsewhere, and names the
//! offending task.
//!
//! Owns: [`Monitor`] (the thread's handle and stop flag) and, on its own thread, the last
//! sample of each worker's `Remote::resumes` and the set of spawn sites already warned about.
//!
//! Every `threshold / 2` it reads each worker's `resumes` and `running_id`. A worker whose
//! count has not moved for `threshold` while one task runs is stuck:
//! 1. If its `new_tasks` deque holds never-started tasks, it wakes a sleeping worker
//!    (`Shared::wake_idle_worker`), whose search steals them (sched/mod.rs invariant 1: only
//!    never-started tasks move; the stuck worker's woken, started tasks stay — moving them
//!    would be unsound).
//! 2. The first time a spawn site stalls a worker, it prints a warning naming the task's id
//!    and spawn site (once per site, so a hot loop cannot flood stderr).
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
//! May call: `sched` (Shared, Remote). Called by: `sched/runtime.rs` (start, stop),
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
use super::runtime::Shared;

/// Default time a worker may spend in one task before the monitor steps in (Go preempts at
/// 10 ms too).
pub(crate) const DEFAULT_THRESHOLD: Duration = Duration::from_millis(10);

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
    pub(crate) fn start(shared: Arc<Shared>, threshold: Duration) -> io::Result<Monitor> {
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = stop.clone();
        let thread = thread::Builder::new()
            .name("weft-monitor".into())
            .spawn(move || watch(&shared, threshold, &thread_stop))?;
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
}

/// True the first time a spawn site is reported in this process: the warning is once per
/// site for the whole process, not per runtime (a program that builds runtimes in a loop would
/// otherwise repeat it).
fn first_warning_for(site: usize) -> bool {
    static WARNED: std::sync::Mutex<Option<HashSet<usize>>> = std::sync::Mutex::new(None);
    let mut warned = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    warned.get_or_insert_with(HashSet::new).insert(site)
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

fn watch(shared: &Shared, threshold: Duration, stop: &AtomicBool) {
    let _ = shared.monitor_rest.monitor.set(thread::current());
    let tick = (threshold / 2).clamp(Duration::from_millis(1), Duration::from_millis(50));
    let mut idle_ticks = 0u32;
    let now = Instant::now();
    let mut samples: Vec<Sample> = shared
        .remotes
        .iter()
        .map(|_| Sample {
            resumes: 0,
            since: now,
            handled: false,
        })
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
        for (remote, sample) in shared.remotes.iter().zip(&mut samples) {
            let resumes = remote.resumes.load(Ordering::Relaxed);
            let running = remote.running_id.load(Ordering::Relaxed);
            if resumes != sample.resumes || running == 0 {
                *sample = Sample {
                    resumes,
                    since: now,
                    handled: false,
                };
                continue;
            }
            let stuck_for = now - sample.since;
            if stuck_for < threshold {
                continue;
            }
            // Step 1, again at every tick while it stays stuck: new work keeps arriving.
            if !shared.stealers[remote.index].is_empty()
                || remote.placed_len.load(Ordering::Relaxed) > 0
            {
                shared.wake_idle_worker(Some(remote.index));
            }
            if sample.handled {
                continue;
            }
            sample.handled = true;
            let site = remote.running_site.load(Ordering::Relaxed);
            if first_warning_for(site as usize) {
                // SAFETY: the worker stores only `&'static Location` pointers (or null).
                let site: Option<&'static Location<'static>> = unsafe { site.as_ref() };
                let site = site.map_or_else(|| "an unknown site".to_string(), |s| s.to_string());
                eprintln!(
                    "weft: worker {} has run task {running} (spawned at {site}) for {} ms \
                     without parking; tasks queued behind it that have not started move to \
                     other workers. Make blocking calls through weft::task::spawn_blocking",
                    remote.index,
                    stuck_for.as_millis()
                );
            }
        }
    }
}
