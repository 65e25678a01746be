//! Metrics: what weft's tasks and stacks cost now, and how deep each spawn site's stacks go.
//!
//! ```
//! use std::time::Duration;
//!
//! let snapshot = weft::run(|| {
//!     let (tx, rx) = weft::chan::bounded::<()>(0);
//!     let waiter = weft::spawn(move || rx.recv().ok());
//!     let mut snapshot = weft::metrics::snapshot();
//!     for _ in 0..1000 {
//!         if snapshot.tasks_parked == 1 {
//!             break; // the waiter parked in `recv`
//!         }
//!         weft::time::sleep(Duration::from_millis(5));
//!         snapshot = weft::metrics::snapshot();
//!     }
//!     tx.send(()).unwrap();
//!     waiter.join().unwrap();
//!     snapshot
//! });
//! // This task, running, and the waiter, parked.
//! assert_eq!((snapshot.tasks, snapshot.tasks_running, snapshot.tasks_parked), (2, 1, 1));
//! assert!(snapshot.stack_committed_bytes > 0);
//! assert!(snapshot.to_prometheus().contains("\nweft_tasks 2\n"));
//! ```
//!
//! [`snapshot`] sums the process's runtimes: tasks by state, workers and threads, stack
//! slots, the stack memory the kernel has committed, page tables, and the counters of the
//! stack layer's reclaim and compaction. [`Snapshot::to_prometheus`] writes it in the
//! Prometheus text format. [`stack_profile`] gives, per spawn site, the sampled peak stack
//! use of its tasks, a recommended stack size and a warning for sites near their limit;
//! [`crate::RuntimeBuilder::stack_profile`] (or `WEFT_STACK_PROFILE=path`) applies a profile
//! written by an earlier run.
//!
//! Owns: the reads of `/proc` (`kernel.rs`) and the Prometheus writer (`prometheus.rs`). The
//! counters it sums are the scheduler's (sched/counters.rs: each worker writes its own), and
//! so are the sampled depths and the profile file (sched/profile.rs), which the runtime both
//! reads at its build and writes at its drop.
//!
//! Invariants:
//! 1. Counting costs the hot paths no locked instruction: spawn, start, park and wake each
//!    add one to a counter of the worker they run on with a load and a store
//!    (sched/counters.rs invariant 1); only [`snapshot`] sums.
//! 2. A snapshot is not atomic: its counts are read one after another while tasks run, so
//!    they may disagree by the tasks that changed state meanwhile; none is ever negative.
//!
//! May call: `sched` (`stats::collect`, the counters, the profile), `stack` (`usage`) — the
//! one place the lower layers' figures are gathered. Called by: the public API, `debug` (the
//! endpoint).
//!
//! # Task states
//! - *live* ([`Snapshot::tasks`]): spawned and not finished; each holds a stack slot. A task
//!   leaves this count when its worker has taken its stack back, a moment after its result
//!   is published: a snapshot taken just after [`JoinHandle::join`](crate::JoinHandle::join)
//!   returns may still count it (as runnable), and the next one a few microseconds later
//!   does not.
//! - *running*: on a worker now (at most one per worker).
//! - *parked*: switched out in `park` and not woken yet. A woken task is runnable from the
//!   moment its waker queues it.
//! - *runnable*: the rest — never started, yielded, or woken and queued.
//! - *compacted*: parked tasks whose stack the stack layer copied out (a subset of parked).
//!
//! Why committed stack bytes are measured, not estimated: slots' pages are committed by the
//! kernel on first touch and stay until given back; only the kernel knows which are there
//! (`kernel.rs` says how they are read: `PAGEMAP_SCAN`, else `smaps`).

mod kernel;
mod prometheus;

pub use crate::sched::counters::{CompactionMode, ReclaimPolicy, SiteKey};
pub use crate::sched::profile::{SiteProfile, StackProfile};

use std::time::{Duration, Instant};

use crate::sched::stats;
use crate::stack;

/// One stack region: reserved address space carved into slots of one size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StackRegion {
    /// The region's first address.
    pub start: usize,
    /// Its length in bytes (reserved, not committed).
    pub len: usize,
    /// The size of its slots, guard page included.
    pub slot_bytes: usize,
    /// Bytes from `start` carved into slots so far; the pages of slots are in
    /// `[start, start + carved_bytes)`.
    pub carved_bytes: usize,
}

/// What weft's tasks and stacks cost at one moment, for the whole process (all runtimes).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Snapshot {
    /// Live tasks: spawned, not finished (module doc, "Task states").
    pub tasks: u64,
    /// Tasks running on a worker now.
    pub tasks_running: u64,
    /// Tasks ready to run: never started, yielded, or woken and queued.
    pub tasks_runnable: u64,
    /// Tasks parked and not yet woken.
    pub tasks_parked: u64,
    /// Parked tasks whose stacks are compacted (fed by the stack layer; 0 without compaction).
    pub tasks_compacted: u64,
    /// Tasks spawned since the process started.
    pub spawns: u64,
    /// Runtimes alive.
    pub runtimes: u64,
    /// Worker threads.
    pub workers: u64,
    /// OS threads of the runtimes: workers, monitors and blocking-pool threads.
    pub os_threads: u64,
    /// The blocking-pool threads among them.
    pub blocking_threads: u64,
    /// Stack slots held by live tasks.
    pub stack_slots_in_use: u64,
    /// Stack slots carved and held by no task: in the pools, warm or released.
    pub stack_slots_cached: u64,
    /// Address space reserved for stacks (free until touched).
    pub stack_reserved_bytes: u64,
    /// Stack memory the kernel has committed: the present pages of the slots, measured from
    /// the page tables (`PAGEMAP_SCAN`, else `/proc/self/smaps`; module doc).
    pub stack_committed_bytes: u64,
    /// Page tables of the whole process (`VmPTE`): mostly the stack regions' when many tasks
    /// live (one 4 KiB page-table page per 2 MiB of touched slots).
    pub page_table_bytes: u64,
    /// Resident memory of the whole process (`VmRSS`; page tables not included).
    pub rss_bytes: u64,
    /// The most resident memory the process has had (`VmHWM`).
    pub peak_rss_bytes: u64,
    /// Bytes of parked tasks' stacks given back to the kernel since the start (stack layer).
    pub stack_reclaimed_bytes: u64,
    /// Live stack bytes held in heap buffers by compacted tasks now (stack layer).
    pub stack_compacted_bytes: u64,
    /// Bytes the compacted tasks' stack images take in their arena now, each image's 8-byte
    /// header included: the live bytes (`stack_compacted_bytes`), or for an image stored as
    /// its difference from a template of its parking place, that difference (stack layer).
    pub stack_image_bytes: u64,
    /// Stack-image templates made so far: one image per place where tasks park, shared by
    /// every image stored as a difference from it; never freed (stack layer).
    pub stack_templates: u64,
    /// Bytes the stack-image templates hold (at most 4 MiB; stack layer).
    pub stack_template_bytes: u64,
    /// Compactions since the start (stack layer).
    pub compactions: u64,
    /// Restores of compacted stacks since the start (stack layer).
    pub restores: u64,
    /// When parked tasks' unused stack pages are given back.
    pub reclaim_policy: ReclaimPolicy,
    /// Whether and how parked tasks' stacks are compacted.
    pub compaction_mode: CompactionMode,
    /// The stack regions, for tools that measure them themselves.
    pub stack_regions: Vec<StackRegion>,
}

impl Snapshot {
    /// Committed stack bytes per live task: the figure Go users watch as stack bytes ÷
    /// goroutines. 0 with no task.
    pub fn stack_bytes_per_task(&self) -> f64 {
        if self.tasks == 0 {
            return 0.0;
        }
        self.stack_committed_bytes as f64 / self.tasks as f64
    }

    /// Image bytes per compacted task: what a parked task's stack costs once compacted
    /// (its slot holds no page then). 0 with no compacted task.
    pub fn image_bytes_per_task(&self) -> f64 {
        if self.tasks_compacted == 0 {
            return 0.0;
        }
        self.stack_image_bytes as f64 / self.tasks_compacted as f64
    }

    /// The snapshot in the Prometheus text exposition format (version 0.0.4): one `# HELP`
    /// and `# TYPE` line per metric, names prefixed `weft_` with their unit.
    pub fn to_prometheus(&self) -> String {
        prometheus::write(self)
    }

    /// A one-line description of the stack policy in force, e.g. `reclaim: never,
    /// compaction: off`.
    pub fn stack_policy(&self) -> String {
        format!(
            "reclaim: {}, compaction: {}",
            self.reclaim_policy.name(),
            self.compaction_mode.name()
        )
    }
}

/// How long a task taking a [`snapshot`] walks page tables before it yields.
const WALK_SLICE: Duration = Duration::from_millis(1);

/// Takes a [`Snapshot`]. It stops no worker: it sums their counters, locks each stack pool
/// and the runtime registry for a moment, reads `/proc/self/status`, and has the kernel walk
/// the page tables of the carved slots. That walk is the cost: ≈0.1 µs per 256 KiB slot
/// carved (64 page-table entries), 100 ms for a million parked default tasks here, 0.2 ms for
/// a thousand. Scrape it every few seconds, not per request.
///
/// Called by a task, it yields every millisecond of that walk (the only long part), so the
/// other tasks of its worker run meanwhile; like [`crate::yield_now`], each yield is a point
/// where a cancelled task unwinds.
///
/// ```
/// let m = weft::run(weft::metrics::snapshot);
/// assert!(m.tasks >= 1); // the task that took it
/// println!("{:.0} B of stack per task", m.stack_bytes_per_task());
/// assert!(m.to_prometheus().contains("weft_tasks "));
/// ```
pub fn snapshot() -> Snapshot {
    let figures = stats::collect(false);
    let totals = figures.totals;
    let unstarted = totals
        .spawns
        .saturating_sub(totals.starts)
        .saturating_sub(totals.cancelled_unstarted);
    let tasks = figures.started + unstarted;
    let parked = totals
        .parks
        .saturating_sub(totals.wakes)
        .min(figures.started);
    let running = figures.running.min(figures.started - parked);
    let runnable = tasks - parked - running;

    let usage = stack::usage();
    let mut regions = Vec::new();
    let mut carved_slots = 0u64;
    for class in &usage {
        carved_slots += class.carved_slots as u64;
        for &(start, len, carved_end) in &class.regions {
            regions.push(StackRegion {
                start,
                len,
                slot_bytes: class.slot_bytes,
                carved_bytes: carved_end - start,
            });
        }
    }
    let spans: Vec<(usize, usize)> = regions.iter().map(|r| (r.start, r.start + r.len)).collect();
    let carved: Vec<(usize, usize)> = regions
        .iter()
        .map(|r| (r.start, r.start + r.carved_bytes))
        .collect();
    // Taken by a task, the walk lets its worker's other tasks run every millisecond: at a
    // million parked tasks it takes ≈100 ms, which would hold them all that long (and draw
    // the monitor's "computing" report about the caller).
    let mut walked_since = Instant::now();
    let mut between_walks = || {
        if walked_since.elapsed() >= WALK_SLICE {
            crate::sched::suspend_current(crate::sched::Suspend::Yield);
            walked_since = Instant::now();
        }
    };
    let committed = kernel::stack_resident_bytes(&spans, &carved, &mut between_walks);
    let status = kernel::status();
    let in_use = tasks.min(carved_slots);
    // The stack layer's own counters (stack/compact.rs) and the process's mode.
    let shrink = stack::counters();
    let (reclaim_policy, compaction_mode) = match stack::mode() {
        stack::StackMode::Compact => (ReclaimPolicy::AfterAge, CompactionMode::Userfaultfd),
        stack::StackMode::Reclaim(_) => (ReclaimPolicy::AfterAge, CompactionMode::Off),
        stack::StackMode::Off(_) => (ReclaimPolicy::Never, CompactionMode::Off),
    };
    Snapshot {
        tasks,
        tasks_running: running,
        tasks_runnable: runnable,
        tasks_parked: parked,
        tasks_compacted: shrink.compacted_tasks,
        spawns: totals.spawns,
        runtimes: figures.runtimes,
        workers: figures.workers,
        os_threads: figures.workers + figures.monitors + figures.blocking_threads,
        blocking_threads: figures.blocking_threads,
        stack_slots_in_use: in_use,
        stack_slots_cached: carved_slots - in_use,
        stack_reserved_bytes: regions.iter().map(|r| r.len as u64).sum(),
        stack_committed_bytes: committed,
        page_table_bytes: status.pte,
        rss_bytes: status.rss,
        peak_rss_bytes: status.hwm,
        stack_reclaimed_bytes: shrink.reclaimed_bytes,
        stack_compacted_bytes: shrink.compacted_live_bytes,
        stack_image_bytes: shrink.image_bytes,
        stack_templates: shrink.templates,
        stack_template_bytes: shrink.template_bytes,
        compactions: shrink.compactions,
        restores: shrink.restores,
        reclaim_policy,
        compaction_mode,
        stack_regions: regions,
    }
}

/// The stack profile of every spawn site so far (finished tasks only: a task's depth is
/// measured when it returns). See [`SiteProfile`] for what each figure means.
pub fn stack_profile() -> StackProfile {
    crate::sched::profile::stack_profile()
}
