//! The counters behind `weft::metrics::snapshot`: plain atomics that the scheduler writes and
//! the snapshot sums (through stats.rs). Nothing here calls anything.
//!
//! Owns:
//! - [`WorkerCounters`], one per worker (in its `Remote`): written only by that worker's
//!   thread, with a load and a store (no locked instruction), read by any thread.
//! - [`SiteCounts`], one per worker: tasks started per spawn site, same rule.
//! - [`OFF_WORKER`]: what threads that are not workers do (spawn from a `Handle`, wake a task
//!   from a plain thread), with `fetch_add`: those paths already take a lock or a syscall.
//! - [`RETIRED`]: the totals of the workers of dropped runtimes, folded in at their drop.
//! - the sampled stack depths per spawn site (`SAMPLES`), under one mutex, written only for
//!   sampled tasks.
//!
//! Invariants:
//! 1. A `WorkerCounters` or `SiteCounts` is written by one thread only (its worker's), so a
//!    load and a store never lose an increment; readers may see a value a moment old.
//! 2. A `SiteCounts` key, once published (Release), never changes; its count is written
//!    only after the key by the same thread.
//!
//! May call: nothing. Called by: the workers and the runtime, `stats.rs`, `profile.rs`, and
//! `metrics` (reading, and re-exporting its public types).
//!
//! Why per-worker counters and not one shared atomic per figure: a `fetch_add` on a line that
//! every worker writes costs a locked instruction and a cache-line transfer on each spawn,
//! park and wake; the spawn path is ≈400 ns and a ping-pong half trip ≈65 ns here. A worker's
//! own counters sit next to `Remote::live`, on a line that worker writes anyway.

use std::collections::{BTreeMap, HashMap};
use std::panic::Location;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::Mutex;

/// Adds one to a counter only this thread writes (invariant 1).
#[inline]
fn bump(counter: &AtomicU64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(1),
        Ordering::Relaxed,
    );
}

/// One worker's event counts (invariant 1).
#[derive(Debug, Default)]
pub(crate) struct WorkerCounters {
    /// Tasks spawned by code running on this worker.
    spawns: AtomicU64,
    /// Tasks this worker started (turned into coroutines).
    starts: AtomicU64,
    /// Parks published by this worker (the task is PARKED from then on).
    parks: AtomicU64,
    /// Parked tasks woken by code running on this worker (handed to a run queue).
    wakes: AtomicU64,
}

/// Sums of [`WorkerCounters`].
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Totals {
    pub(crate) spawns: u64,
    pub(crate) starts: u64,
    pub(crate) parks: u64,
    pub(crate) wakes: u64,
    /// Never-started tasks dropped (shutdown), which therefore never start.
    pub(crate) cancelled_unstarted: u64,
}

impl Totals {
    pub(crate) fn add(&mut self, other: Totals) {
        self.spawns = self.spawns.wrapping_add(other.spawns);
        self.starts = self.starts.wrapping_add(other.starts);
        self.parks = self.parks.wrapping_add(other.parks);
        self.wakes = self.wakes.wrapping_add(other.wakes);
        self.cancelled_unstarted = self
            .cancelled_unstarted
            .wrapping_add(other.cancelled_unstarted);
    }
}

impl WorkerCounters {
    /// The owning worker spawned a task.
    #[inline]
    pub(crate) fn spawned(&self) {
        bump(&self.spawns);
    }

    /// The owning worker started a task.
    #[inline]
    pub(crate) fn started(&self) {
        bump(&self.starts);
    }

    /// The owning worker published a park.
    #[inline]
    pub(crate) fn parked(&self) {
        bump(&self.parks);
    }

    /// Code on the owning worker woke a parked task.
    #[inline]
    pub(crate) fn woke(&self) {
        bump(&self.wakes);
    }

    pub(crate) fn totals(&self) -> Totals {
        Totals {
            spawns: self.spawns.load(Ordering::Relaxed),
            starts: self.starts.load(Ordering::Relaxed),
            parks: self.parks.load(Ordering::Relaxed),
            wakes: self.wakes.load(Ordering::Relaxed),
            cancelled_unstarted: 0,
        }
    }
}

/// Counts of events on threads that are not workers, and of dropped runtimes' workers: any
/// thread may add to them, with `fetch_add`.
#[derive(Debug, Default)]
pub(crate) struct SharedCounters {
    spawns: AtomicU64,
    starts: AtomicU64,
    parks: AtomicU64,
    wakes: AtomicU64,
    cancelled_unstarted: AtomicU64,
}

impl SharedCounters {
    const fn new() -> SharedCounters {
        SharedCounters {
            spawns: AtomicU64::new(0),
            starts: AtomicU64::new(0),
            parks: AtomicU64::new(0),
            wakes: AtomicU64::new(0),
            cancelled_unstarted: AtomicU64::new(0),
        }
    }

    /// A task spawned from a plain thread (through a `Handle`).
    pub(crate) fn spawned(&self) {
        self.spawns.fetch_add(1, Ordering::Relaxed);
    }

    /// A parked task woken by a plain thread.
    pub(crate) fn woke(&self) {
        self.wakes.fetch_add(1, Ordering::Relaxed);
    }

    /// A never-started task dropped at shutdown.
    pub(crate) fn cancelled_unstarted(&self) {
        self.cancelled_unstarted.fetch_add(1, Ordering::Relaxed);
    }

    /// Folds in a dropped worker's totals.
    pub(crate) fn retire(&self, totals: Totals) {
        self.spawns.fetch_add(totals.spawns, Ordering::Relaxed);
        self.starts.fetch_add(totals.starts, Ordering::Relaxed);
        self.parks.fetch_add(totals.parks, Ordering::Relaxed);
        self.wakes.fetch_add(totals.wakes, Ordering::Relaxed);
    }

    pub(crate) fn totals(&self) -> Totals {
        Totals {
            spawns: self.spawns.load(Ordering::Relaxed),
            starts: self.starts.load(Ordering::Relaxed),
            parks: self.parks.load(Ordering::Relaxed),
            wakes: self.wakes.load(Ordering::Relaxed),
            cancelled_unstarted: self.cancelled_unstarted.load(Ordering::Relaxed),
        }
    }
}

/// Events on threads that are not workers.
pub(crate) static OFF_WORKER: SharedCounters = SharedCounters::new();
/// The totals of the workers of runtimes already dropped: without them a task spawned on one
/// runtime's worker and started by another's would be counted as never started once the first
/// runtime is gone.
pub(crate) static RETIRED: SharedCounters = SharedCounters::new();

/// When the pages below a parked task's stack pointer are given back to the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReclaimPolicy {
    /// Never: a parked task keeps every page it touched.
    Never = 0,
    /// After the task has been parked for a while.
    AfterAge = 1,
    /// As soon as the task parks.
    Eager = 2,
}

impl ReclaimPolicy {
    /// The name used in reports and in the Prometheus label.
    pub fn name(self) -> &'static str {
        match self {
            ReclaimPolicy::Never => "never",
            ReclaimPolicy::AfterAge => "after-age",
            ReclaimPolicy::Eager => "eager",
        }
    }
}

/// Whether long-parked tasks have their stacks copied out, and how faults on them are caught.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompactionMode {
    /// No compaction.
    Off = 0,
    /// userfaultfd handling user- and kernel-mode faults.
    Userfaultfd = 1,
    /// userfaultfd with user-mode faults only: a syscall that writes into a compacted stack
    /// from another thread fails with EFAULT.
    UserModeOnly = 2,
}

impl CompactionMode {
    /// The name used in reports and in the Prometheus label.
    pub fn name(self) -> &'static str {
        match self {
            CompactionMode::Off => "off",
            CompactionMode::Userfaultfd => "userfaultfd",
            CompactionMode::UserModeOnly => "userfaultfd-user-mode-only",
        }
    }
}

/// Entries of one worker's [`SiteCounts`]; a program with more spawn sites on one worker
/// counts the rest in `overflow`.
pub(crate) const SITE_SLOTS: usize = 1024;
/// Entries a start looks at before it counts itself as overflow.
const SITE_PROBES: usize = 16;

/// The home entry of a spawn site, by the address `site` of its `Location`, in a table of
/// `entries` entries (a power of two): locations are statics, 8-aligned, so the low bits are
/// dropped and the rest mixed (Fibonacci hashing).
#[inline]
pub(crate) fn site_index(site: usize, entries: usize) -> usize {
    debug_assert!(entries.is_power_of_two());
    ((site >> 3).wrapping_mul(0x9E37_79B9_7F4A_7C15_u64 as usize))
        >> (usize::BITS - entries.trailing_zeros())
}

/// Tasks started per spawn site on one worker: an open-addressed table that only its worker
/// writes (invariants 1–2), so counting a start is a hash, a probe and a store.
pub(crate) struct SiteCounts {
    keys: Box<[AtomicPtr<Location<'static>>]>,
    counts: Box<[AtomicU64]>,
    /// Starts at sites that found no free entry.
    overflow: AtomicU64,
}

impl Default for SiteCounts {
    fn default() -> SiteCounts {
        SiteCounts {
            keys: (0..SITE_SLOTS)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            counts: (0..SITE_SLOTS).map(|_| AtomicU64::new(0)).collect(),
            overflow: AtomicU64::new(0),
        }
    }
}

impl std::fmt::Debug for SiteCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SiteCounts").finish_non_exhaustive()
    }
}

impl SiteCounts {
    /// Counts a start at `site` (owning worker only); returns the site's count on this worker,
    /// this start included, or 0 when the table is full.
    #[inline]
    pub(crate) fn count(&self, site: &'static Location<'static>) -> u64 {
        let key: *const Location<'static> = site;
        let key = key.cast_mut();
        let hash = site_index(key as usize, SITE_SLOTS);
        for probe in 0..SITE_PROBES {
            let i = (hash + probe) & (SITE_SLOTS - 1);
            let current = self.keys[i].load(Ordering::Relaxed);
            if current == key {
                let n = self.counts[i].load(Ordering::Relaxed) + 1;
                self.counts[i].store(n, Ordering::Relaxed);
                return n;
            }
            if current.is_null() {
                self.counts[i].store(1, Ordering::Relaxed);
                // Release: pairs with the Acquire in `for_each`, so a reader that sees the
                // key sees its first count (invariant 2).
                self.keys[i].store(key, Ordering::Release);
                return 1;
            }
        }
        bump(&self.overflow);
        0
    }

    /// Calls `f` with each site and its count (any thread).
    pub(crate) fn for_each(&self, mut f: impl FnMut(&'static Location<'static>, u64)) {
        for (key, count) in self.keys.iter().zip(self.counts.iter()) {
            // Acquire: pairs with the Release in `count`.
            let key = key.load(Ordering::Acquire);
            // SAFETY: a non-null key is a `&'static Location` stored by `count`.
            if let Some(site) = unsafe { key.as_ref() } {
                f(site, count.load(Ordering::Relaxed));
            }
        }
    }

    /// Starts that found the table full.
    pub(crate) fn overflow(&self) -> u64 {
        self.overflow.load(Ordering::Relaxed)
    }
}

/// A spawn site as `file:line:column`, the key of profiles: two `Location` statics for one
/// source position (a generic spawner instantiated in two crates) are one site.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SiteKey {
    /// The source file, as `Location::file` gives it.
    pub file: String,
    /// The line, from 1.
    pub line: u32,
    /// The column, from 1.
    pub column: u32,
}

impl SiteKey {
    pub(crate) fn of(site: &Location<'_>) -> SiteKey {
        SiteKey {
            file: site.file().to_owned(),
            line: site.line(),
            column: site.column(),
        }
    }

    /// Whether this is the position of `site`, without allocating.
    pub(crate) fn is(&self, site: &Location<'_>) -> bool {
        self.line == site.line() && self.column == site.column() && self.file == site.file()
    }
}

impl std::fmt::Display for SiteKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

/// The sampled peaks of one spawn site (one `Location` static).
#[derive(Debug, Clone)]
pub(crate) struct SiteSamples {
    pub(crate) site: &'static Location<'static>,
    /// Peak stack use in bytes (page-rounded) → number of samples.
    pub(crate) peaks: BTreeMap<u64, u64>,
    /// The largest slot size a sampled task of this site had.
    pub(crate) slot_bytes: u64,
    /// Starts of this site on the workers of dropped runtimes.
    pub(crate) retired_tasks: u64,
}

impl SiteSamples {
    pub(crate) fn new(site: &'static Location<'static>) -> SiteSamples {
        SiteSamples {
            site,
            peaks: BTreeMap::new(),
            slot_bytes: 0,
            retired_tasks: 0,
        }
    }
}

/// Sampled peaks and the task counts of dropped runtimes, by `Location` address: recording
/// a sample allocates nothing once its site and depth were seen (it runs on a worker right
/// after a task exit, where a malloc can set glibc consolidating the chunks that burst of exits
/// freed — region.rs, `process_madvise`). Sites are merged by position when a profile is built.
pub(crate) static SAMPLES: Mutex<Option<HashMap<usize, SiteSamples>>> = Mutex::new(None);

/// Records one sampled task of `site`: it ran on a slot of `slot_bytes` and its stack reached
/// `peak` bytes below the top.
pub(crate) fn record_peak(site: &'static Location<'static>, slot_bytes: u64, peak: u64) {
    let mut samples = SAMPLES.lock().unwrap_or_else(|e| e.into_inner());
    let key: *const Location<'static> = site;
    let entry = samples
        .get_or_insert_with(HashMap::new)
        .entry(key as usize)
        .or_insert_with(|| SiteSamples::new(site));
    *entry.peaks.entry(peak).or_insert(0) += 1;
    entry.slot_bytes = entry.slot_bytes.max(slot_bytes);
}

/// Folds a dropped worker's per-site task counts in.
pub(crate) fn retire_sites(sites: &SiteCounts) {
    let mut samples = SAMPLES.lock().unwrap_or_else(|e| e.into_inner());
    let samples = samples.get_or_insert_with(HashMap::new);
    sites.for_each(|site, count| {
        let key: *const Location<'static> = site;
        samples
            .entry(key as usize)
            .or_insert_with(|| SiteSamples::new(site))
            .retired_tasks += count;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn site_counts_count_each_site_apart() {
        let sites = SiteCounts::default();
        let a = Location::caller();
        let b = Location::caller();
        assert_eq!(sites.count(a), 1);
        assert_eq!(sites.count(a), 2);
        assert_eq!(sites.count(b), 1);
        let mut seen = Vec::new();
        sites.for_each(|site, n| seen.push((site.line(), n)));
        seen.sort();
        assert_eq!(seen, vec![(a.line(), 2), (b.line(), 1)]);
        assert_eq!(sites.overflow(), 0);
    }

    #[test]
    fn a_full_site_table_counts_the_rest_as_overflow() {
        let sites = SiteCounts::default();
        // More distinct sites than entries: leaked copies of one location have distinct
        // addresses.
        let n = SITE_SLOTS as u64 + 3;
        for _ in 0..n {
            let site: &'static Location<'static> = Box::leak(Box::new(*Location::caller()));
            sites.count(site);
        }
        let mut counted = 0;
        sites.for_each(|_, count| counted += count);
        assert!(sites.overflow() >= 3, "{}", sites.overflow());
        assert_eq!(counted + sites.overflow(), n);
    }
}
