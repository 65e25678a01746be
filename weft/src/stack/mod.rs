//! Task stacks: fixed-size slots of reserved address space, each with a guard page.
//!
//! Owns: the size classes, the process-wide pool of slots of each class (warm, cold, and the
//! batch waiting to be released), the stack-overflow handler (`overflow.rs`), and the
//! shrinking of parked tasks' stacks (`compact.rs`, on `uffd.rs`, images in `arena.rs`),
//! and the page-counted arena task cells are carved from (`arena.rs`), with per-thread
//! caches of its blocks by size class (`cell_cache.rs`).
//!
//! ```text
//!   one region (mmap, MAP_NORESERVE, 32 GiB) per size class, carved into slots:
//!   ┌───────┬──────────────────────────┬───────┬──────────────────────────┬────
//!   │ guard │ stack grows down  ◄── top│ guard │ stack grows down  ◄── top│ ...
//!   └───────┴──────────────────────────┴───────┴──────────────────────────┴────
//!   ^ slot.start (limit)              ^ slot.start + size (base)
//! ```
//!
//! A slot's size is its task's maximum stack, guard page included. The kernel commits a page
//! on first touch, so a stack grows without ever moving or being copied (Go's `copystack` is
//! what weft exists to avoid). An overflow lands in the guard page of the slot itself — slots
//! are laid out so that the page below every stack is its own guard — and the handler in
//! `overflow.rs` reports the task and aborts.
//!
//! Invariants:
//! 1. A [`Slot`] is owned by exactly one place: a pool, a task that has not started, or a
//!    running coroutine. Dropping it returns it to its class's pool.
//! 2. A slot in a pool holds no live frames; its pages may still be committed ("warm"); it
//!    is never compacted (compact.rs invariant 7).
//!
//! May call: `region.rs`, `compact.rs`, libc; nothing of weft above this layer (lib.rs,
//! "Layers"): it builds, and its tests run, as a crate of its own (tests/stack_alone.rs).
//! Called by: `sched` (the task's slot at its start, worker caches, parked stacks, the
//! switch, the stack depth samples of `weft::metrics`), `task` (cell memory), `chan`
//! (restoring a compacted waiter), `metrics` (`usage`).
//!
//! # The default size: 256 KiB
//! An overflow aborts the whole process, so the default is chosen for the user's safety, not
//! for a memory figure. Rust frames are larger than Go's (no split stacks, large locals and
//! inlined generics), and Go's own limit is 1 GB; std threads get 2 MiB. 256 KiB holds typical
//! blocking-I/O code with a 16 KiB buffer and a few layers of a protocol crate with room to
//! spare, while its cost is address space, which is free, plus page tables: one 4 KiB
//! page-table page maps 2 MiB, i.e. 8 slots, so ≈512 B per task once every slot is in use.
//! Raise it per runtime ([`crate::RuntimeBuilder::stack_size`]) or per spawn
//! ([`crate::task::Builder::stack_size`]); sizes round up to a power of two from
//! [`MIN_STACK_SIZE`] to [`MAX_STACK_SIZE`].
//!
//! # Warm slots
//! A finished task's slot keeps its pages: the next spawn on it touches no new page (a first
//! touch costs ≈1.4–2 µs here, a whole spawn+join ≈0.75 µs). Each worker keeps up to
//! [`WORKER_WARM_SLOTS`] of them last-in-first-out (the most recently used pages are the
//! likeliest in cache); beyond that they go to the shared pool, which keeps
//! [`SHARED_WARM_SLOTS`] for good. More are kept only for a while, like Go's scavenger returns
//! memory: every [`TRIM_INTERVAL`] at most [`TRIM_BATCH`] of the least recently used excess
//! slots are released with one `process_madvise` call, by a worker that returns a slot or, when
//! all are idle, by one that wakes up for it. Releasing at each exit instead made every burst
//! of 100K spawns fault again (5.1 µs against 1.1 µs per spawn+join, measured here); releasing
//! a large excess at once held one worker for tens of milliseconds and made a million sleepers
//! wake up to 200 ms late.
//!
//! A *wake storm* is the exception: when compacted tasks are restored faster than that (the
//! join of `examples/million`: a million restores in ≈1.3 s), each restore takes a fresh page
//! while the finished tasks' pages wait warm, and resident stack pages followed the woken
//! tasks, not the running ones (the whole run peaked at 3.4–3.5 GiB against Go's 2.6). So a
//! trim that owes more than `STORM_SLACK` restores (since its pool last had no excess)
//! releases up to `STORM_BATCH` slots, batch by batch while the batches merge into few
//! ranges (cheap: the exits of tasks woken in spawn order are neighbours), and the whole
//! run's peak stays the spawn's (1.1 GiB).
//!
//! # Parked stacks give their memory back
//! A parked task needs only its live frames: a few hundred bytes at the top of its slot. Its
//! worker gives the rest back in steps between tasks, as [`StackPolicy`] says: *reclaim*
//! drops the pages below the task's stack pointer; *compaction* copies the live bytes into an
//! image (`arena.rs`), stored as its difference from the image of another task parked at the
//! same place (`template.rs`), and releases the whole slot, guard marker included, so that
//! whole 2 MiB windows of parked slots also give back their page-table page. Measured here
//! (`examples/million.rs --settle-ms`): a million idle tasks settle from 4,850 to 288–295 B each
//! (RSS + page tables), 291 B once they had used 8 KiB of stack, 317 B (100K) 64 KiB. Compaction is
//! sound only where the kernel holds *every* access to a released page until it is filled
//! again — other threads may write into a parked task's locals, weft's own channel waiters
//! live there — which is what [`mode`] reports; the argument is in `compact.rs`. On kernels
//! or permissions without it, weft reclaims only.
//!
//! # What may live on a parked stack
//! Anything the task's closure owns: the task never leaves the OS thread it started on, so
//! `!Send` values (an `Rc`, a `std::sync::MutexGuard`) and thread-local borrows stay on their
//! thread across a park. What may not: a borrow of another task's stack.

mod arena;
pub(crate) mod cell_cache;
mod compact;
mod mode;
mod overflow;
mod page_count;
mod parked;
mod region;
mod restore;
mod switch;
mod template;
mod uffd;
pub(crate) mod write_once;

pub(crate) use arena::{alloc_cell, free_cell};
pub use mode::{counters, mode, Counters, StackMode, StackPolicy, DEFAULT_STACK_BATCH};
pub use region::guards_are_markers;
#[allow(unused_imports)] // used by `weft::metrics`
pub(crate) use region::regions;

pub(crate) use parked::{LiveStack, ParkedStack, ParkedStacks};
pub(crate) use restore::{restore_if_compacted, PREFILL_PAGES_MAX};
pub(crate) use switch::{calibrate, copy_stack_bytes, switch_out};

pub(crate) use overflow::{context_pc_sp, install_handler, set_running, AltStack, DescribeTask};
pub(crate) use region::{page_size, prefetch_line, slot_of};

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The default slot size, guard page included: see the module doc.
pub const DEFAULT_STACK_SIZE: usize = 256 << 10;
/// The smallest slot: a guard page plus room for the task's first frames and for std's
/// default panic hook, which captures and symbolizes a backtrace under `RUST_BACKTRACE` and
/// overflowed a 16 KiB slot (`tests/small_stack_panic.rs`).
pub const MIN_STACK_SIZE: usize = 32 << 10;
/// The largest slot, Go's limit.
pub const MAX_STACK_SIZE: usize = 1 << 30;
/// Warm slots each worker keeps for its next spawns.
pub const WORKER_WARM_SLOTS: usize = 256;
/// Warm slots the shared pool keeps per size class for good; more are kept only for a while
/// (see "Warm slots" above).
pub const SHARED_WARM_SLOTS: usize = 4096;
/// How often excess warm slots are given back, [`TRIM_BATCH`] at a time.
pub const TRIM_INTERVAL: Duration = Duration::from_micros(1250);
/// Most slots given back in one step, so that the worker doing it delays its other tasks by
/// little: a step costs 1–2 µs a slot here while the other workers run (the unmapping
/// interrupts them too), so 128 slots hold a worker 0.1–0.3 ms. Steps of 1024 held it for
/// 0.75–2.25 ms and were the whole 99th percentile of a million sleepers' wake lateness
/// (2.2–3.4 ms → 0.25–1.2 ms). 128 slots per 1.25 ms is 100K slots a second.
pub const TRIM_BATCH: usize = 128;
/// Most warm slots one trim gives back during a wake storm — while restores of compacted
/// tasks take fresh pages and the finished tasks' slots pile up warm (the end of
/// `examples/million`: a million tasks restored and joined) — [`TRIM_BATCH`] at a time, as
/// long as each batch goes back as at most `TRIM_BATCH / STORM_MERGE` ranges: the exits of
/// tasks woken in spawn order return neighbouring slots, a range of which costs the kernel
/// about what one slot does. So resident stack pages stay near the running tasks plus the
/// warm caches, not the woken tasks: the whole run of a million peaked at 3.4–3.5 GiB before,
/// its join restoring a page per task faster than the trim gave them back (100K slots a
/// second). Exits in random order (sleepers waking at random deadlines) merge into no
/// ranges, and their trim keeps its pace, whose CPU falls outside the wakes; so does a
/// burst of spawns and joins without restores, whose next burst reuses the warm slots.
const STORM_BATCH: usize = 16 * TRIM_BATCH;
/// A storm's trim batch goes on only where its slots merged into this many times fewer
/// ranges.
const STORM_MERGE: usize = 8;
/// Restores a pool may owe before its trim speeds up (see [`STORM_BATCH`]): the stack pages
/// a storm may hold beyond the running tasks and the warm caches (128 MiB of 4 KiB pages).
/// A smaller storm is trimmed at the ordinary pace after its wakes, as before: speeding up
/// moves the releases' CPU into the wakes (measured here, 20,000 compacted tasks woken at
/// once, `weft-bench wake`: +10–20 % CPU per wake until the last ran, the same with the
/// exits' cleanup).
const STORM_SLACK: u64 = 8 * SHARED_WARM_SLOTS as u64;
/// Slots a worker takes from the shared pool at once when its cache is empty: one lock and
/// one guard-installing syscall for all of them. As many as the cache holds, because a
/// worker's consecutive slots become one run when their tasks are compacted, and a run pays
/// its write-protect, `mincore` and release once (compact.rs): with 64, two workers spawning
/// a million tasks interleaved their slots in blocks of 64 and compacted them in 23,815 runs;
/// with 256, in 15,763, with half the `madvise` and `process_madvise` calls. Spawned until
/// all parked (`examples/million`, alternated ×8): 3,412 ms against 3,888 (medians; median
/// ratio ×0.91), settled memory unchanged (791–799 B against 791–795).
pub const LOCAL_REFILL: usize = WORKER_WARM_SLOTS;
/// Slots a worker hands back to the shared pool at once when its cache is full.
pub const LOCAL_SPILL: usize = 64;
/// log2 sizes of the classes: MIN_STACK_SIZE..=MAX_STACK_SIZE.
const MIN_SHIFT: u32 = MIN_STACK_SIZE.trailing_zeros();
const CLASSES: usize = (MAX_STACK_SIZE.trailing_zeros() - MIN_SHIFT + 1) as usize;

/// The size class of a requested stack size: the slot size it rounds up to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SizeClass(u8);

impl SizeClass {
    /// The class of slots that hold `size` bytes, guard page included.
    pub fn for_size(size: usize) -> io::Result<SizeClass> {
        if size > MAX_STACK_SIZE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("weft: stack size {size} is above the limit of {MAX_STACK_SIZE} bytes"),
            ));
        }
        let min = MIN_STACK_SIZE.max(4 * region::page_size());
        let slot = size.max(min).next_power_of_two();
        Ok(SizeClass((slot.trailing_zeros() - MIN_SHIFT) as u8))
    }

    /// The slot size in bytes.
    pub fn bytes(self) -> usize {
        1 << (self.0 as u32 + MIN_SHIFT)
    }

    fn index(self) -> usize {
        self.0 as usize
    }
}

/// One task stack: `[start, start + size)`, the first page a guard.
#[derive(Debug)]
pub struct Slot {
    start: usize,
    class: SizeClass,
    /// Its pages were never touched or were given back (carved, or taken from the cold list).
    fresh: bool,
}

impl Slot {
    /// Takes a slot of `class` from the shared pool (warm first), carving and guarding a new
    /// one when the pool is empty.
    pub(crate) fn take(class: SizeClass) -> io::Result<Slot> {
        pool(class).take()
    }

    /// The slot's size class.
    pub fn class(&self) -> SizeClass {
        self.class
    }

    /// The slot size in bytes, guard page included.
    pub fn size(&self) -> usize {
        self.class.bytes()
    }

    /// The lowest address of the slot (its guard page).
    pub fn start(&self) -> usize {
        self.start
    }

    /// Before its task first runs, on the worker that runs it: fills the top pages of a fresh
    /// slot in a region registered with userfaultfd, as many as `pages()` says (asked only
    /// then; at least one), so that the task's first frames do not fault through the fault
    /// thread (compact.rs, "Stack growth in a registered region"). Done here and not when the
    /// slot is taken: a burst of spawns takes slots long before their tasks run, and the
    /// region may be registered meanwhile.
    pub(crate) fn prepare(&mut self, pages: impl FnOnce() -> usize) {
        if std::mem::take(&mut self.fresh) {
            restore::prefill(self.start, self.size(), pages());
        }
    }
}

impl Slot {
    /// Gives the slot's pages below its top page back to the kernel, for a task whose stack
    /// depth `weft::metrics` samples: afterwards the resident pages below the top are the next
    /// task's alone ([`Slot::resident_depth`]); the top page holds its first frames anyway.
    /// A slot whose earlier tasks stayed on their top page (most) has nothing below it, and
    /// then no `madvise` is made: each is a TLB shootdown of the other workers' CPUs, an
    /// inter-processor interrupt that cost spawn + complete ≈12 % of its CPU in this VM at one
    /// sampled task in 256, where `mincore` only reads page tables. The slot must hold no live
    /// frames (invariant 2).
    pub(crate) fn release_pages(&self) {
        let page = region::page_size();
        let (below, len) = (self.start + page, self.size() - 2 * page);
        if let Some(low) = region::lowest_resident_page(below, len) {
            // SAFETY: `[low, top page)` is inside this slot, which holds no live frames (the
            // caller's contract), and is mapped (a region).
            unsafe { region::release_ranges(&[(low, below + len - low)]) };
        }
    }

    /// Bytes from the top of the slot down to its lowest resident page: the deepest the
    /// stacks run on it since its pages were last released reached, rounded up to a page.
    pub(crate) fn resident_depth(&self) -> usize {
        let page = region::page_size();
        region::lowest_resident_page(self.start + page, self.size() - page)
            .map_or(0, |low| self.start + self.size() - low)
    }
}

/// The slots of one size class, for `weft::metrics`.
#[derive(Debug, Clone)]
pub(crate) struct ClassUsage {
    /// The slot size, guard page included.
    pub(crate) slot_bytes: usize,
    /// The class's regions as `(start, len, carved_end)`: slots were carved from
    /// `[start, carved_end)` so far.
    pub(crate) regions: Vec<(usize, usize, usize)>,
    /// Slots carved so far.
    pub(crate) carved_slots: usize,
}

/// Every size class that has slots, with the ranges carved from its regions.
pub(crate) fn usage() -> Vec<ClassUsage> {
    let Some(pools) = POOLS.get() else {
        return Vec::new();
    };
    let regions = region::regions();
    let mut out = Vec::new();
    for pool in pools {
        let next = pool.inner.lock().unwrap_or_else(|e| e.into_inner()).next;
        let size = pool.class.bytes();
        let mut usage = ClassUsage {
            slot_bytes: size,
            regions: Vec::new(),
            carved_slots: 0,
        };
        for &(start, len, slot_size) in &regions {
            if slot_size != size {
                continue;
            }
            // The current region is carved up to `next`; earlier ones were carved whole
            // before the next was reserved (`SlotPool::carve`).
            let end = if (start..=start + len).contains(&next) {
                next
            } else {
                start + len / size * size
            };
            usage.regions.push((start, len, end));
            usage.carved_slots += (end - start) / size;
        }
        if !usage.regions.is_empty() {
            out.push(usage);
        }
    }
    out
}

impl Drop for Slot {
    fn drop(&mut self) {
        // Invariant 1: a slot dropped anywhere goes back to its pool.
        pool(self.class).put(Slot {
            start: self.start,
            class: self.class,
            fresh: false,
        });
    }
}

// SAFETY: 1. `base` and `limit` bound memory that this module mapped readable and writable and
// that no one else uses (invariant 1); 2. `limit` is the slot's start, which includes the guard
// page that `SlotPool::carve` installed before handing the slot out (region.rs invariant 2);
// 3. a slot is at least MIN_STACK_SIZE (32 KiB) so ≥ 4096 usable bytes remain above the guard;
// 4. both addresses are multiples of the page size, so 16-byte aligned.
unsafe impl corosensei::stack::Stack for Slot {
    fn base(&self) -> corosensei::stack::StackPointer {
        corosensei::stack::StackPointer::new(self.start + self.size()).expect("slot at address 0")
    }

    fn limit(&self) -> corosensei::stack::StackPointer {
        corosensei::stack::StackPointer::new(self.start).expect("slot at address 0")
    }
}

/// The shared pool of one size class.
struct SlotPool {
    class: SizeClass,
    inner: Mutex<PoolInner>,
}

#[derive(Default)]
struct PoolInner {
    /// Slots whose pages may still be committed, most recently used last.
    warm: VecDeque<usize>,
    /// Slots whose pages were given back; guards still installed.
    cold: Vec<usize>,
    /// Next never-used slot of the current region, and the region's end.
    next: usize,
    end: usize,
    /// When excess warm slots were last released.
    last_trim: Option<Instant>,
    /// `mode::counters().restores` as of the last look (see [`STORM_BATCH`]): the restores
    /// since then are the storm's debt.
    restores_seen: u64,
    /// Slots returned since the clock was last read: `trim` reads it once per
    /// [`TRIM_CHECK_EVERY`] returns, not at each (a clock read is ≈25 ns).
    puts: u32,
}

/// Slots each pool's warm and cold lists have room for before they first grow: 8 MiB of
/// address space each, committed a page per 512 slots as they fill (glibc maps blocks this
/// large on their own, so untouched pages cost nothing).
const LIST_RESERVE: usize = 1 << 20;

/// Returns between two looks at the trim clock.
const TRIM_CHECK_EVERY: u32 = 64;

static POOLS: OnceLock<Vec<SlotPool>> = OnceLock::new();

/// A hint, bit `i` for class `i`: that pool may hold more than [`SHARED_WARM_SLOTS`] warm
/// slots. Set under the pool's lock when it goes over, cleared under it when a trim finds no
/// excess; read without it by [`trim_idle`], which a worker calls each time it is about to
/// sleep: locking every class's pool there (16 locks on lines that both workers write) was
/// 5 % of an echo server's CPU (perf). A stale clear bit delays a trim to the next idle worker
/// or the next return of a slot, both of which trim too.
static EXCESS: AtomicU32 = AtomicU32::new(0);
const _: () = assert!(CLASSES <= 32, "a class without a bit in EXCESS");

fn pool(class: SizeClass) -> &'static SlotPool {
    &POOLS.get_or_init(|| {
        (0..CLASSES)
            .map(|i| SlotPool {
                class: SizeClass(i as u8),
                inner: Mutex::new(PoolInner::default()),
            })
            .collect()
    })[class.index()]
}

impl SlotPool {
    fn take(&self) -> io::Result<Slot> {
        let mut batch = Vec::with_capacity(1);
        self.take_batch(1, &mut batch)?;
        Ok(batch.pop().expect("take_batch gave no slot"))
    }

    /// Moves up to `n` slots (at least one) into `out`: warm ones first, then released ones,
    /// then never-used ones, carved and guarded together.
    fn take_batch(&self, n: usize, out: &mut Vec<Slot>) -> io::Result<()> {
        let class = self.class;
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let before = out.len();
        while out.len() - before < n {
            if let Some(start) = inner.warm.pop_back() {
                out.push(Slot {
                    start,
                    class,
                    fresh: false,
                });
                continue;
            }
            let Some(start) = inner.cold.pop() else {
                break;
            };
            // A released slot: its top page is missing again.
            out.push(Slot {
                start,
                class,
                fresh: true,
            });
        }
        if out.len() == before {
            let starts = self.carve(&mut inner, n)?;
            out.extend(starts.into_iter().map(|start| Slot {
                start,
                class,
                fresh: true,
            }));
        }
        Ok(())
    }

    /// Cuts up to `n` never-used slots from the current region (reserving a new one when it is
    /// full) and guards their first pages (region.rs invariant 2).
    fn carve(&self, inner: &mut PoolInner, n: usize) -> io::Result<Vec<usize>> {
        let size = self.class.bytes();
        if inner.next + size > inner.end {
            let start = region::reserve(size)?;
            inner.next = start;
            inner.end = start + region::REGION_BYTES.max(size);
            if inner.warm.capacity() == 0 {
                // Address space for the lists up front, touched only as they fill: growing
                // them by doubling copied megabytes and faulted in fresh pages under the pool
                // lock while a million tasks exited, stalling both workers for milliseconds.
                inner.warm.reserve_exact(LIST_RESERVE);
                inner.cold.reserve_exact(LIST_RESERVE);
            }
        }
        let n = n.min((inner.end - inner.next) / size).max(1);
        let starts: Vec<usize> = (0..n).map(|i| inner.next + i * size).collect();
        region::guard_carved(&starts, size)?;
        inner.next += n * size;
        Ok(starts)
    }

    fn put(&self, slot: Slot) {
        self.put_all(std::iter::once(slot));
    }

    /// Returns slots, oldest first, under one lock.
    fn put_all(&self, slots: impl IntoIterator<Item = Slot>) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let before = inner.puts;
        for slot in slots {
            inner.warm.push_back(slot.start());
            std::mem::forget(slot);
            inner.puts = inner.puts.wrapping_add(1);
        }
        if inner.warm.len() <= SHARED_WARM_SLOTS {
            // No excess: the restores so far needed fresh pages that no finished task held.
            inner.restores_seen = mode::restores();
        } else {
            EXCESS.fetch_or(self.class_bit(), Ordering::Relaxed);
            // A look at the trim (a clock read) when this call's returns reach a multiple of
            // TRIM_CHECK_EVERY: a local spill's always do, single returns one in 64.
            if inner.puts / TRIM_CHECK_EVERY != before / TRIM_CHECK_EVERY {
                self.trim(inner);
            }
        }
    }

    /// Releases up to [`TRIM_BATCH`] excess warm slots if the last release was long enough ago
    /// — up to [`STORM_BATCH`] during a wake storm, one for each restore (of any class: the
    /// counter is process-wide) past [`STORM_SLACK`] since the pool last had no excess.
    /// Returns when to call again, or `None` when there is no excess.
    fn trim<'a>(&'a self, inner: std::sync::MutexGuard<'a, PoolInner>) -> Option<Duration> {
        let excess = inner.warm.len().saturating_sub(SHARED_WARM_SLOTS);
        if excess == 0 {
            EXCESS.fetch_and(!self.class_bit(), Ordering::Relaxed);
            return None;
        }
        if let Some(last) = inner.last_trim {
            let since = last.elapsed();
            if since < TRIM_INTERVAL {
                return Some(TRIM_INTERVAL - since);
            }
        }
        // A wake storm: restores took fresh pages since the last look while finished tasks'
        // slots sat warm here. Those may go back faster, as long as they go cheaply.
        let restores = mode::restores();
        let debt = restores
            .saturating_sub(inner.restores_seen)
            .saturating_sub(STORM_SLACK) as usize;
        let storm = debt.min(excess).min(STORM_BATCH);
        let n = excess.min(TRIM_BATCH.max(storm));
        let storm_restores = (storm > 0).then_some(restores);
        let released = self.release_oldest(inner, n, SHARED_WARM_SLOTS, storm_restores);
        (released < excess).then_some(TRIM_INTERVAL)
    }

    /// This class's bit in [`EXCESS`].
    fn class_bit(&self) -> u32 {
        1 << self.class.index()
    }

    /// Gives the pages of up to `n` least recently used warm slots back to the kernel,
    /// [`TRIM_BATCH`] at a time, leaving at least `keep` warm (spawns may take warm slots
    /// while a batch is released outside the lock); past the first batch only in a storm
    /// (`storm_restores`: the restore count its debt was taken at) and while each batch
    /// went as few ranges (its slots were mostly neighbours: see [`STORM_BATCH`]). Returns
    /// how many went.
    fn release_oldest<'a>(
        &'a self,
        mut inner: std::sync::MutexGuard<'a, PoolInner>,
        n: usize,
        keep: usize,
        storm_restores: Option<u64>,
    ) -> usize {
        inner.last_trim = Some(Instant::now());
        let mut released = 0;
        loop {
            // On this thread's stack, not the heap (region::process_madvise says why).
            let mut batch = [0usize; TRIM_BATCH];
            let k = (n - released)
                .min(TRIM_BATCH)
                .min(inner.warm.len().saturating_sub(keep));
            for (to, from) in batch.iter_mut().zip(inner.warm.drain(..k)) {
                *to = from;
            }
            // Release outside the lock: ≈225 ns a slot.
            drop(inner);
            let ranges = region::release_slots(&batch[..k], self.class.bytes());
            inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            inner.cold.extend_from_slice(&batch[..k]);
            released += k;
            let Some(restores) = storm_restores else {
                return released;
            };
            if released >= n || k == 0 || ranges > k / STORM_MERGE {
                // The debt paid, under the lock `put_all` resets it under, and never back
                // below a newer reset.
                let paid = (inner.restores_seen + released as u64).min(restores);
                inner.restores_seen = inner.restores_seen.max(paid);
                return released;
            }
        }
    }
}

/// A step of giving back the warm slots of a past burst, for a worker about to sleep: returns
/// how long it may sleep before the next step, or `None` when nothing is left to give back.
pub(crate) fn trim_idle() -> Option<Duration> {
    let excess = EXCESS.load(Ordering::Relaxed);
    if excess == 0 {
        return None;
    }
    let pools = POOLS.get()?;
    pools
        .iter()
        .filter(|pool| excess & pool.class_bit() != 0)
        .filter_map(|pool| pool.trim(pool.inner.lock().unwrap_or_else(|e| e.into_inner())))
        .min()
}

/// For a worker about to sleep for `sleep` (`None`: until woken): gives back the pages of
/// compacted stacks' images that restores emptied, unless the sleep is short and they are
/// few and recent (arena.rs, `release_emptied_before_sleep`).
pub(crate) fn release_emptied_images(sleep: Option<Duration>) {
    arena::release_emptied_before_sleep(sleep);
}

/// A worker's own last-in-first-out cache of warm slots, touched by that worker only.
#[derive(Default)]
pub(crate) struct LocalSlots {
    by_class: Vec<Vec<Slot>>,
}

impl LocalSlots {
    /// A slot of `class`, from this cache when it has one.
    pub(crate) fn take(&mut self, class: SizeClass) -> io::Result<Slot> {
        let index = class.index();
        if self.by_class.len() <= index {
            self.by_class.resize_with(index + 1, Vec::new);
        }
        let cache = &mut self.by_class[index];
        if cache.is_empty() {
            pool(class).take_batch(LOCAL_REFILL, cache)?;
        }
        Ok(cache.pop().expect("refill gave no slot"))
    }

    /// Keeps `slot` warm here, or hands it to the shared pool when this cache is full.
    pub(crate) fn put(&mut self, slot: Slot) {
        let index = slot.class.index();
        if self.by_class.len() <= index {
            self.by_class.resize_with(index + 1, Vec::new);
        }
        let cache = &mut self.by_class[index];
        if cache.len() == WORKER_WARM_SLOTS {
            // Full: hand the least recently used to the shared pool in one lock, not one lock
            // per finished task (two workers returning 125K slots a second each contended).
            pool(slot.class).put_all(cache.drain(..LOCAL_SPILL));
        }
        cache.push(slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes_round_up_to_powers_of_two() {
        assert_eq!(SizeClass::for_size(0).unwrap().bytes(), MIN_STACK_SIZE);
        assert_eq!(SizeClass::for_size(256 << 10).unwrap().bytes(), 256 << 10);
        assert_eq!(
            SizeClass::for_size((256 << 10) + 1).unwrap().bytes(),
            512 << 10
        );
        assert_eq!(
            SizeClass::for_size(MAX_STACK_SIZE).unwrap().bytes(),
            MAX_STACK_SIZE
        );
        let err = SizeClass::for_size(MAX_STACK_SIZE + 1).unwrap_err();
        assert!(err.to_string().contains("above the limit"), "{err}");
    }

    #[test]
    fn slots_are_reused_last_in_first_out() {
        let class = SizeClass::for_size(64 << 10).unwrap();
        let mut local = LocalSlots::default();
        let a = local.take(class).unwrap();
        let b = local.take(class).unwrap();
        let (a_start, b_start) = (a.start(), b.start());
        assert_ne!(a_start, b_start);
        local.put(a);
        local.put(b);
        assert_eq!(local.take(class).unwrap().start(), b_start);
    }

    #[test]
    fn regions_list_the_region_of_every_slot() {
        let class = SizeClass::for_size(64 << 10).unwrap();
        let slot = Slot::take(class).unwrap();
        let found = regions().into_iter().any(|(start, len, size)| {
            size == slot.size() && slot.start() >= start && slot.start() < start + len
        });
        assert!(found, "slot {:#x} in no listed region", slot.start());
    }

    #[test]
    fn a_trim_releases_neighbouring_slots_whole_and_leaves_their_guards() {
        // A class no other test here uses: its slots are fresh, carved one after another.
        let class = SizeClass::for_size(8 << 20).unwrap();
        let size = class.bytes();
        let page = region::page_size();
        let slots: Vec<Slot> = (0..3).map(|_| Slot::take(class).unwrap()).collect();
        let starts: Vec<usize> = slots.iter().map(Slot::start).collect();
        assert_eq!(starts[1], starts[0] + size, "not neighbours: {starts:x?}");
        assert_eq!(starts[2], starts[1] + size, "not neighbours: {starts:x?}");
        for &start in &starts {
            for at in [start + page, start + size / 2, start + size - 1] {
                // SAFETY: inside a slot this test owns, above its guard page.
                unsafe { (at as *mut u8).write(1) };
            }
        }
        region::release_slots(&[starts[2], starts[0], starts[1]], size);
        let mut pipe = [0; 2];
        // SAFETY: plain syscall; the descriptors are closed below.
        assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
        for &start in &starts {
            assert_eq!(
                region::lowest_resident_page(start + page, size - page),
                None,
                "slot {start:#x} kept a page"
            );
            // A guard page still refuses access: a syscall reading it fails with EFAULT
            // instead of faulting in a page.
            // SAFETY: write(2) only reads the byte, and reports a fault instead of raising it.
            let rc = unsafe { libc::write(pipe[1], start as *const libc::c_void, 1) };
            let err = std::io::Error::last_os_error();
            assert_eq!(rc, -1, "the guard page of {start:#x} was readable");
            assert_eq!(err.raw_os_error(), Some(libc::EFAULT), "{err}");
        }
        // SAFETY: the pipe made above.
        unsafe {
            libc::close(pipe[0]);
            libc::close(pipe[1]);
        }
    }

    /// A pool of its own (not the process's), holding `n` warm neighbouring slots, each
    /// with its top page touched: the finished tasks' slots of a wake storm.
    fn pool_with_warm_neighbours(class: SizeClass, n: usize) -> SlotPool {
        let pool = SlotPool {
            class,
            inner: Mutex::new(PoolInner::default()),
        };
        let mut inner = pool.inner.lock().unwrap();
        let mut starts = Vec::new();
        while starts.len() < n {
            let more = pool.carve(&mut inner, n - starts.len()).unwrap();
            starts.extend(more);
        }
        for &start in &starts {
            // SAFETY: the top byte of a slot this test carved and owns, above its guard.
            unsafe { ((start + class.bytes() - 1) as *mut u8).write(1) };
        }
        inner.warm.extend(starts);
        drop(inner);
        pool
    }

    #[test]
    fn a_storm_trim_releases_neighbours_past_one_batch_and_scattered_slots_one_batch() {
        let class = SizeClass::for_size(16 << 10).unwrap();
        let size = class.bytes();
        let page = region::page_size();
        let n = 4 * TRIM_BATCH;

        let pool = pool_with_warm_neighbours(class, n);
        let inner = pool.inner.lock().unwrap();
        let released = pool.release_oldest(inner, n, 0, Some(u64::MAX));
        let merged = region::guards_are_markers() == Some(true);
        // Neighbours merge into ranges only where guards are markers (region.rs).
        assert_eq!(released, if merged { n } else { TRIM_BATCH });
        let inner = pool.inner.lock().unwrap();
        assert_eq!(
            (inner.cold.len(), inner.warm.len()),
            (released, n - released)
        );
        for &start in &inner.cold {
            assert_eq!(
                region::lowest_resident_page(start + page, size - page),
                None,
                "released slot {start:#x} kept its page"
            );
        }
        drop(inner);

        // Without a storm, one batch at a time, whatever the order.
        let pool = pool_with_warm_neighbours(class, n);
        let inner = pool.inner.lock().unwrap();
        assert_eq!(pool.release_oldest(inner, n, 0, None), TRIM_BATCH);

        // Every other slot: no two neighbours, no ranges to merge: the storm stops after one
        // batch, as the ordinary trim's pace.
        let pool = pool_with_warm_neighbours(class, 2 * n);
        let mut inner = pool.inner.lock().unwrap();
        let scattered: VecDeque<usize> = inner.warm.iter().copied().step_by(2).collect();
        inner.warm = scattered;
        assert_eq!(pool.release_oldest(inner, n, 0, Some(u64::MAX)), TRIM_BATCH);
    }

    #[test]
    fn slot_memory_is_usable_above_the_guard() {
        let class = SizeClass::for_size(32 << 10).unwrap();
        let slot = Slot::take(class).unwrap();
        let page = region::page_size();
        let top = (slot.start() + slot.size()) as *mut u8;
        let low = (slot.start() + page) as *mut u8;
        // SAFETY: both addresses are inside the slot, above its guard page, and the slot is
        // owned by this test.
        unsafe {
            top.sub(1).write(7);
            low.write(9);
            assert_eq!(top.sub(1).read() + low.read(), 16);
        }
        assert!(region::guard_page_of(slot.start()).is_some());
        assert!(region::guard_page_of(slot.start() + page).is_none());
    }
}
