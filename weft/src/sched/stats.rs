//! What the scheduler tells `weft::metrics`: the process's runtimes, their task counts, and
//! the sampled stack depth of tasks per spawn site.
//!
//! Owns: the registry of live runtimes (`RUNTIMES`, one mutex, touched at build, drop,
//! snapshot and dump), each worker's [`Sampler`] and [`PrefillDepths`] (its own thread only), and a
//! runtime's [`SiteClasses`] (read-only once built).
//!
//! Invariants:
//! 1. A runtime is in the registry from `register` (in `RuntimeBuilder::build`) until `retire`
//!    (in `Runtime::drop`, after its workers exited), which folds its workers' counters into
//!    `counters::RETIRED`: the sums over registry + retired + off-worker counters
//!    never go back when a runtime goes away.
//! 2. A task is sampled iff its bit is set in its worker's `Sampler`, indexed by its place in
//!    the worker's live list; the bit is set at `start` and cleared at `finish`.
//!
//! May call: `stack` (release and measure a sampled slot), `counters.rs`. Called by:
//! `sched/worker.rs`, `sched/runtime.rs`, `metrics::snapshot`, `debug` (the runtimes a dump
//! asks).
//!
//! # How the stack depth is sampled
//! A sampled task's slot has its pages below the top one given back to the kernel just
//! before the task starts on it (the top page holds the task's first frames anyway; usually
//! nothing is resident below it, and then only a `mincore` is made); when it finishes,
//! `mincore(2)` finds the lowest resident page of the slot, and the distance from the slot's
//! top to it is the deepest the task's stack went, rounded up to a page. Exact to a page,
//! whatever the task did (frames, `alloca`-like arrays, a signal on the stack), at two or
//! three syscalls and a few page faults per sampled task.
//!
//! Rejected: `mincore` alone on every finish: a warm reused slot keeps the pages of earlier,
//! deeper tasks, so it measures the deepest task that ever ran there, not this one. Painting a
//! canary pattern over the slot: it commits every page of the slot, which is what weft exists
//! not to do. Reading the stack pointer at parks: misses the deepest calls between parks.
//! For the stack layer's reclaim and compaction: they give back pages of parked tasks, after
//! which the lowest resident page of a sampled task's slot is no longer the deepest it went.
//! They must read a sampled task's depth before releasing its pages (`Slot::resident_depth`,
//! kept as the task's peak) or leave sampled tasks alone, or its samples read low.
//!
//! Sampling rate: every site's first [`SAMPLE_FIRST`] tasks on each worker (so a site that
//! spawns once is still seen), then one in [`SAMPLE_EVERY`]: the ≈3–5 µs a sample costs
//! (release, refaults, `mincore`) then adds ≈15 ns to an average spawn (spawn + join ≈400 ns).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io;
use std::panic::Location;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};

use super::counters::{self, SiteKey, Totals};
use super::runtime::Shared;
use crate::stack::{self, SizeClass, Slot};

/// Every site's first tasks on each worker are sampled.
pub(crate) const SAMPLE_FIRST: u64 = 4;
/// After the first ones, one task in this many per site and worker is sampled.
pub(crate) const SAMPLE_EVERY: u64 = 256;

static RUNTIMES: Mutex<Vec<Weak<Shared>>> = Mutex::new(Vec::new());

/// Adds a runtime to the registry (invariant 1).
pub(crate) fn register(shared: &Arc<Shared>) {
    let mut runtimes = RUNTIMES.lock().unwrap_or_else(|e| e.into_inner());
    runtimes.retain(|r| r.strong_count() > 0);
    runtimes.push(Arc::downgrade(shared));
}

/// The registered runtimes that are still alive, in creation order (for `metrics` and for a
/// dump of the whole process, `debug`).
pub(crate) fn runtimes() -> Vec<Arc<Shared>> {
    let mut runtimes = RUNTIMES.lock().unwrap_or_else(|e| e.into_inner());
    runtimes.retain(|r| r.strong_count() > 0);
    runtimes.iter().filter_map(Weak::upgrade).collect()
}

/// Removes a runtime whose workers have exited and folds its counters in (invariant 1).
pub(crate) fn retire(shared: &Arc<Shared>) {
    let mut runtimes = RUNTIMES.lock().unwrap_or_else(|e| e.into_inner());
    let Some(index) = runtimes
        .iter()
        .position(|r| std::ptr::eq(r.as_ptr(), Arc::as_ptr(shared)))
    else {
        return;
    };
    // `remove`, not `swap_remove`: a dump numbers runtimes in creation order.
    runtimes.remove(index);
    for remote in &shared.remotes {
        counters::RETIRED.retire(remote.counters.totals());
        counters::retire_sites(&remote.sites);
    }
}

/// The scheduler's part of a snapshot.
#[derive(Debug, Default)]
pub(crate) struct Figures {
    pub(crate) runtimes: u64,
    pub(crate) workers: u64,
    pub(crate) monitors: u64,
    pub(crate) blocking_threads: u64,
    /// Started, unfinished tasks.
    pub(crate) started: u64,
    /// Workers running a task now.
    pub(crate) running: u64,
    /// Counters summed over live runtimes, dropped ones and plain threads.
    pub(crate) totals: Totals,
    /// Tasks started per site on live runtimes' workers (sites may repeat).
    pub(crate) sites: Vec<(&'static Location<'static>, u64)>,
    /// Starts that found a worker's site table full.
    pub(crate) sites_overflow: u64,
}

/// Sums what every live runtime's workers counted.
pub(crate) fn collect(with_sites: bool) -> Figures {
    let runtimes = runtimes();
    let mut figures = Figures {
        runtimes: runtimes.len() as u64,
        ..Figures::default()
    };
    figures.totals.add(counters::RETIRED.totals());
    figures.totals.add(counters::OFF_WORKER.totals());
    for shared in &runtimes {
        figures.workers += shared.remotes.len() as u64;
        figures.monitors += u64::from(shared.has_monitor.load(Ordering::Relaxed));
        figures.blocking_threads += shared.blocking.threads() as u64;
        for remote in &shared.remotes {
            figures.started += remote.live.load(Ordering::Relaxed) as u64;
            figures.running += u64::from(remote.running_id.load(Ordering::Relaxed) != 0);
            figures.totals.add(remote.counters.totals());
            if with_sites {
                remote
                    .sites
                    .for_each(|site, count| figures.sites.push((site, count)));
                figures.sites_overflow += remote.sites.overflow();
            }
        }
    }
    figures
}

/// One worker's record of which of its live tasks are sampled (invariant 2).
#[derive(Default)]
pub(crate) struct Sampler {
    /// Sampled tasks alive: with none, a finish costs one load and a branch.
    in_flight: Cell<usize>,
    /// One bit per entry of the worker's live list.
    bits: RefCell<Vec<u64>>,
}

impl Sampler {
    /// Whether to sample a task that is its site's `nth` start on this worker.
    #[inline]
    pub(crate) fn wants(nth: u64) -> bool {
        nth <= SAMPLE_FIRST || nth.is_multiple_of(SAMPLE_EVERY)
    }

    /// A sampled task is about to start on `slot` as live entry `live`: clears the slot's
    /// pages and marks the entry (invariant 2).
    #[cold]
    pub(crate) fn start(&self, live: usize, slot: &Slot) {
        slot.release_pages();
        let mut bits = self.bits.borrow_mut();
        let word = live / 64;
        if bits.len() <= word {
            bits.resize(word + 1, 0);
        }
        bits[word] |= 1 << (live % 64);
        self.in_flight.set(self.in_flight.get() + 1);
    }

    /// The task at live entry `live`, of `site`, finished on `slot`: records its depth if it
    /// was sampled.
    #[inline]
    pub(crate) fn finish(&self, live: usize, site: &'static Location<'static>, slot: &Slot) {
        if self.in_flight.get() == 0 {
            return;
        }
        let mut bits = self.bits.borrow_mut();
        let Some(word) = bits.get_mut(live / 64) else {
            return;
        };
        let bit = 1 << (live % 64);
        if *word & bit == 0 {
            return;
        }
        *word &= !bit;
        drop(bits);
        self.in_flight.set(self.in_flight.get() - 1);
        record(site, slot);
    }
}

#[cold]
fn record(site: &'static Location<'static>, slot: &Slot) {
    let depth = slot.resident_depth();
    counters::record_peak(site, slot.size() as u64, depth as u64);
}

/// How deep a worker prefills a fresh slot (`Slot::prepare`) for a task of a given spawn site
/// (keyed by [`site_key`]): the shallower of the depths in pages that the last two
/// compactions of tasks of that kind found resident, so that in a burst of tasks that each
/// run 64 KiB deep the first growth faults are not a few trips to the fault thread each
/// (measured: 100K such tasks spawned until parked took 6.2–6.6 s, three trips a task). The
/// shallower of two, not the last: one task that once ran deep (say 250 KiB, in its setup)
/// must not make every fresh slot of a burst of shallow ones take 250 KiB. Touched by its
/// worker only. A direct-mapped table: two kinds that share an entry take turns, and a miss
/// prefills one page, as without it.
#[derive(Debug)]
pub(crate) struct PrefillDepths {
    /// (key, last depth, the one before it; 0: none yet).
    entries: Box<[(usize, u8, u8)]>,
}

/// The key of a spawn site in a [`PrefillDepths`] (and in the stack layer's `LiveStack`,
/// which hands it back): the address of its `Location`.
pub(crate) fn site_key(site: &'static Location<'static>) -> usize {
    let site: *const Location<'static> = site;
    site as usize
}

/// Entries of a [`PrefillDepths`] (a power of two).
const PREFILL_ENTRIES: usize = 256;

impl Default for PrefillDepths {
    fn default() -> PrefillDepths {
        PrefillDepths {
            entries: vec![(0, 0, 0); PREFILL_ENTRIES].into_boxed_slice(),
        }
    }
}

impl PrefillDepths {
    fn index(key: usize) -> usize {
        counters::site_index(key, PREFILL_ENTRIES)
    }

    /// Pages to prefill for a fresh slot of a task of kind `key`: 1 until two depths are
    /// known.
    pub(crate) fn pages(&self, key: usize) -> usize {
        match self.entries[Self::index(key)] {
            (k, last, before) if k == key && before != 0 => last.min(before) as usize,
            _ => 1,
        }
    }

    /// A compaction found a task of kind `key` `pages` deep.
    pub(crate) fn observe(&mut self, key: usize, pages: usize) {
        let pages = pages.clamp(1, stack::PREFILL_PAGES_MAX) as u8;
        let entry = &mut self.entries[Self::index(key)];
        *entry = if entry.0 == key {
            (key, pages, entry.1)
        } else {
            (key, pages, 0)
        };
    }
}

/// Stack sizes per spawn site, from a profile file (`RuntimeBuilder::stack_profile`).
#[derive(Debug)]
pub(crate) struct SiteClasses {
    /// By line, then column and file: finding a site compares two numbers before any string.
    by_line: HashMap<u32, Vec<(u32, String, SizeClass)>>,
    /// The file's entries, written back for sites a run does not measure.
    entries: Vec<(SiteKey, u64)>,
}

impl SiteClasses {
    /// Loads the profile at `path`; `None` when there is no such file (a first run).
    ///
    /// # Errors
    /// A file that cannot be read or parsed, or a size outside the stack limits.
    pub(crate) fn load(path: &Path) -> io::Result<Option<SiteClasses>> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(profile_error(path, e)),
        };
        let entries = super::profile::parse_profile(&text).map_err(|e| profile_error(path, e))?;
        let mut by_line: HashMap<u32, Vec<(u32, String, SizeClass)>> = HashMap::new();
        for (site, bytes) in &entries {
            let class = SizeClass::for_size(*bytes as usize).map_err(|e| profile_error(path, e))?;
            by_line
                .entry(site.line)
                .or_default()
                .push((site.column, site.file.clone(), class));
        }
        Ok(Some(SiteClasses { by_line, entries }))
    }

    /// The size for tasks spawned at `site`, if the profile names it.
    #[inline]
    pub(crate) fn class_for(&self, site: &Location<'_>) -> Option<SizeClass> {
        self.by_line
            .get(&site.line())?
            .iter()
            .find(|(column, file, _)| *column == site.column() && file == site.file())
            .map(|&(_, _, class)| class)
    }

    pub(crate) fn entries(&self) -> &[(SiteKey, u64)] {
        &self.entries
    }
}

fn profile_error(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(
        e.kind(),
        format!("weft: stack profile {}: {e}", path.display()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefill_depths_take_the_shallower_of_the_last_two_depths_of_each_kind() {
        static A: u64 = 0;
        static B: u64 = 0;
        let (a, b) = (&A as *const u64 as usize, &B as *const u64 as usize);
        let mut depths = PrefillDepths::default();
        assert_eq!(depths.pages(a), 1, "an unknown kind gets one page");
        depths.observe(a, 10);
        assert_eq!(depths.pages(a), 1, "one depth is not enough to go by");
        depths.observe(a, 10);
        assert_eq!((depths.pages(a), depths.pages(b)), (10, 1));
        depths.observe(a, 60);
        assert_eq!(depths.pages(a), 10, "one deep task does not deepen it");
        depths.observe(a, 3);
        assert_eq!(depths.pages(a), 3, "one shallow one makes it shallow");
        depths.observe(b, 1000);
        depths.observe(b, 1000);
        assert_eq!(depths.pages(b), stack::PREFILL_PAGES_MAX);
        depths.observe(b, 0);
        assert_eq!(depths.pages(b), 1);
        assert_eq!(depths.pages(0), 1);
    }
}
