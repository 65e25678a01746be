//! Reserved address space for stack slots, guard pages, and giving pages back to the kernel.
//!
//! Owns: the process-wide table of regions (read lock-free by the overflow handler), the choice
//! of guard mechanism, and the batch-release syscall.
//!
//! Invariants:
//! 1. A region, once published in [`REGIONS`], is never unmapped: slots point into it for the
//!    life of the process, and the signal handler reads the table without locks.
//! 2. Every slot handed out has its lowest page guarded before its first use: by a guard
//!    marker, or, for a slot carved once its region is registered where the registration
//!    guards (compact.rs invariant 8), by the registration alone. Carving is in address order
//!    under the pool's lock and a registration is for good, so a region's unmarked slots are
//!    exactly `[unmarked_from, carved_end)` (both kept in its entry).
//! 3. Where compaction may run, a region has a table of one pointer per slot (compact.rs
//!    invariant 2), published with the region and never freed. The region is registered
//!    with userfaultfd (whole, once: uffd.rs invariant 1) at its first compaction, before
//!    any of its slots is COMPACTED, and stays registered; until then its faults are the
//!    kernel's ordinary ones, so a burst of spawns into a fresh region costs what it did
//!    without compaction. (Registering regions when they are reserved was tried: a fresh
//!    slot in a registered region starts on pages the owner fills, the zero page mapped
//!    below its top one, and the first write to each of those is a copy-on-write fault
//!    whose TLB flush interrupts the other workers' CPUs. A million tasks that each touch
//!    8 KiB took 19–23 s to start instead of 15–16.)
//!
//! May call: libc. Called by: `stack/mod.rs`, `stack/overflow.rs`.
//!
//! Why a region per size class and not one `mmap` per stack: one mapping per stack plus one per
//! guard (`mprotect` splits the mapping) hits `vm.max_map_count` (65530) near 32K stacks.
//! `MADV_GUARD_INSTALL` (Linux 6.13) writes the guard as a page-table marker, so a million
//! guarded slots stay one mapping.

use std::io;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// `madvise` advice that installs guard markers (Linux 6.13+); not yet in every libc release.
pub(crate) const MADV_GUARD_INSTALL: libc::c_int = 102;
/// `madvise` advice that removes guard markers.
const MADV_GUARD_REMOVE: libc::c_int = 103;
/// Regions start on a 2 MiB boundary, the span of one page-table page (compact.rs, "Page
/// tables").
const REGION_ALIGN: usize = 2 << 20;

/// Bytes of address space reserved at once for one size class. `MAP_NORESERVE` makes this
/// free until touched; 32 GiB holds 131,072 slots of 256 KiB, so a million default tasks
/// need eight regions.
pub(crate) const REGION_BYTES: usize = 32 << 30;

/// Most regions a process may reserve: 4096 × 32 GiB = 128 TiB, the whole x86_64 user
/// address space.
const MAX_REGIONS: usize = 4096;

/// One published region; all fields are written before `REGION_COUNT` is bumped (Release) and
/// read after it is loaded (Acquire), which is why plain atomics with Relaxed suffice here.
struct RegionEntry {
    start: AtomicUsize,
    len: AtomicUsize,
    slot_size: AtomicUsize,
    /// The compaction table (invariant 3), or null.
    table: AtomicPtr<AtomicPtr<u8>>,
    /// Registered with userfaultfd (invariant 3); `REGISTER_FAILED` if that failed.
    registered: AtomicU8,
    /// The first slot carved without a guard marker (invariant 2); `usize::MAX` while every
    /// carved slot has one.
    unmarked_from: AtomicUsize,
    /// The end of the slots carved so far.
    carved_end: AtomicUsize,
}

/// `RegionEntry::registered`: not yet, done, failed for good.
const REGISTER_NOT_YET: u8 = 0;
const REGISTER_DONE: u8 = 1;
const REGISTER_FAILED: u8 = 2;

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY_ENTRY: RegionEntry = RegionEntry {
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    slot_size: AtomicUsize::new(0),
    table: AtomicPtr::new(std::ptr::null_mut()),
    registered: AtomicU8::new(REGISTER_NOT_YET),
    unmarked_from: AtomicUsize::new(usize::MAX),
    carved_end: AtomicUsize::new(0),
};
static REGIONS: [RegionEntry; MAX_REGIONS] = [EMPTY_ENTRY; MAX_REGIONS];
static REGION_COUNT: AtomicUsize = AtomicUsize::new(0);
static REGION_PUBLISH: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The system page size (4 KiB on x86_64; 4, 16 or 64 KiB on aarch64).
pub(crate) fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    // SAFETY: sysconf has no preconditions.
    *PAGE.get_or_init(|| unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize })
}

/// Reserves `REGION_BYTES` of address space for slots of `slot_size` bytes and publishes it
/// for the overflow handler. Returns the start address.
pub(crate) fn reserve(slot_size: usize) -> io::Result<usize> {
    let len = REGION_BYTES.max(slot_size);
    let start = map_aligned(len)?;
    let table = if super::mode::register_regions() {
        make_table(len, slot_size)
    } else {
        std::ptr::null_mut()
    };
    let _publish = REGION_PUBLISH.lock().unwrap_or_else(|e| e.into_inner());
    let index = REGION_COUNT.load(Ordering::Relaxed);
    if index == MAX_REGIONS {
        // SAFETY: the mapping was just created above and nothing else knows of it.
        unsafe { libc::munmap(start as *mut libc::c_void, len) };
        return Err(io::Error::new(
            io::ErrorKind::OutOfMemory,
            "weft: the address space for task stacks is exhausted",
        ));
    }
    let entry = &REGIONS[index];
    entry.start.store(start, Ordering::Relaxed);
    entry.len.store(len, Ordering::Relaxed);
    entry.slot_size.store(slot_size, Ordering::Relaxed);
    entry.table.store(table, Ordering::Relaxed);
    entry.registered.store(REGISTER_NOT_YET, Ordering::Relaxed);
    entry.unmarked_from.store(usize::MAX, Ordering::Relaxed);
    entry.carved_end.store(start, Ordering::Relaxed);
    // Release: pairs with the Acquire load in `guard_page_of`, so the handler sees the fields.
    REGION_COUNT.store(index + 1, Ordering::Release);
    Ok(start)
}

/// A fresh private anonymous mapping of `len` bytes, readable and writable (`MAP_NORESERVE`:
/// address space, committed a page at a time on first touch); `None` if the kernel refuses.
pub(crate) fn map_anonymous(len: usize) -> Option<*mut libc::c_void> {
    // SAFETY: an anonymous private mapping at an address of the kernel's choosing touches no
    // existing memory.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    (ptr != libc::MAP_FAILED).then_some(ptr)
}

/// Maps `len` bytes of address space, [`REGION_ALIGN`]-aligned.
fn map_aligned(len: usize) -> io::Result<usize> {
    let padded = len + REGION_ALIGN;
    let Some(ptr) = map_anonymous(padded) else {
        let err = io::Error::last_os_error();
        return Err(io::Error::new(
            err.kind(),
            format!("weft: cannot reserve {len} bytes of address space for task stacks: {err}"),
        ));
    };
    let raw = ptr as usize;
    let start = raw.next_multiple_of(REGION_ALIGN);
    // SAFETY: both pieces lie in the mapping just made, outside `[start, start + len)`.
    unsafe {
        if start > raw {
            libc::munmap(raw as *mut libc::c_void, start - raw);
        }
        let end = start + len;
        if raw + padded > end {
            libc::munmap(end as *mut libc::c_void, raw + padded - end);
        }
    }
    Ok(start)
}

/// Maps the region's compaction table; null if that fails (then the region is never
/// compacted).
fn make_table(len: usize, slot_size: usize) -> *mut AtomicPtr<u8> {
    let bytes = (len / slot_size) * std::mem::size_of::<AtomicPtr<u8>>();
    // Zero pages read as null pointers.
    map_anonymous(bytes).map_or(std::ptr::null_mut(), |table| table.cast())
}

fn entry_of(addr: usize) -> Option<&'static RegionEntry> {
    // Acquire: pairs with the Release store in `reserve`.
    let count = REGION_COUNT.load(Ordering::Acquire);
    REGIONS[..count].iter().find(|entry| {
        let start = entry.start.load(Ordering::Relaxed);
        addr >= start && addr < start + entry.len.load(Ordering::Relaxed)
    })
}

/// Whether the region holding `addr` is registered with userfaultfd (invariant 3).
pub(crate) fn registered(addr: usize) -> bool {
    // Acquire: pairs with the Release store in `ensure_registered`.
    entry_of(addr).is_some_and(|e| e.registered.load(Ordering::Acquire) == REGISTER_DONE)
}

/// Registers the region holding `addr` with userfaultfd unless it is already (invariant 3);
/// false if it cannot be (then nothing in it is compacted).
pub(crate) fn ensure_registered(addr: usize) -> bool {
    let Some(entry) = entry_of(addr) else {
        return false;
    };
    // Acquire: pairs with the Release store below.
    match entry.registered.load(Ordering::Acquire) {
        REGISTER_DONE => return true,
        REGISTER_FAILED => return false,
        _ => {}
    }
    if entry.table.load(Ordering::Relaxed).is_null() {
        return false;
    }
    let _publish = REGION_PUBLISH.lock().unwrap_or_else(|e| e.into_inner());
    if entry.registered.load(Ordering::Relaxed) == REGISTER_NOT_YET {
        let start = entry.start.load(Ordering::Relaxed);
        let len = entry.len.load(Ordering::Relaxed);
        let state = if super::uffd::register(start, len) {
            REGISTER_DONE
        } else {
            REGISTER_FAILED
        };
        // Release: pairs with the Acquire loads above and in `registered`.
        entry.registered.store(state, Ordering::Release);
    }
    entry.registered.load(Ordering::Relaxed) == REGISTER_DONE
}

/// The region holding `addr`: (start, slot size, table).
fn region_of(addr: usize) -> Option<(usize, usize, *mut AtomicPtr<u8>)> {
    // Acquire: pairs with the Release store in `reserve`.
    let count = REGION_COUNT.load(Ordering::Acquire);
    REGIONS[..count].iter().find_map(|entry| {
        let start = entry.start.load(Ordering::Relaxed);
        let len = entry.len.load(Ordering::Relaxed);
        (addr >= start && addr < start + len).then(|| {
            (
                start,
                entry.slot_size.load(Ordering::Relaxed),
                entry.table.load(Ordering::Relaxed),
            )
        })
    })
}

/// The slot holding `addr`, as (start, size, image), if it lies in a stack region and that
/// slot is compacted now (its table entry holds an image; a hint, read without the slot's
/// lock). Cheaper than [`slot_of`] then [`table_entry`]: one pass over the regions, and a
/// shift for the slot's index (slot sizes are powers of two) where those divide; a channel
/// asks it at every hand-off to a parked task (`chan/waitq.rs`), a timer at every wake.
#[inline]
pub(crate) fn compacted_slot_of(addr: usize) -> Option<(usize, usize, *mut u8)> {
    let (slot, size, entry) = slot_entry(addr)?;
    let image = entry.load(Ordering::Relaxed);
    (!image.is_null()).then_some((slot, size, image))
}

/// The slot holding `addr` in a region that has a table, as (start, size, its table
/// entry): one pass over the regions, and shifts (slot sizes are powers of two).
#[inline]
fn slot_entry(addr: usize) -> Option<(usize, usize, &'static AtomicPtr<u8>)> {
    let (start, size, table) = region_of(addr)?;
    if table.is_null() {
        return None;
    }
    debug_assert!(size.is_power_of_two());
    let index = (addr - start) >> size.trailing_zeros();
    // SAFETY: invariant 3: the table has one entry per slot of the region and is never freed.
    let entry = unsafe { &*table.add(index) };
    Some((start + (index << size.trailing_zeros()), size, entry))
}

/// A hint to load the cache line at `at`; nothing on targets without one here.
#[inline(always)]
pub(crate) fn prefetch_line(at: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing architecturally and never faults, whatever `at` is.
    unsafe {
        std::arch::x86_64::_mm_prefetch(at.cast::<i8>(), std::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

/// Where the image entry of the slot holding `addr` lies, without reading it: for a prefetch.
#[inline]
pub(crate) fn compacted_entry_addr(addr: usize) -> Option<*const u8> {
    slot_entry(addr).map(|(_, _, entry)| std::ptr::from_ref(entry).cast())
}

/// Every stack region reserved so far, as (start, length, slot size): for `weft::metrics`,
/// which matches them against `/proc/self/smaps` to measure committed stack memory.
#[allow(dead_code)] // used by `weft::metrics`
pub(crate) fn regions() -> Vec<(usize, usize, usize)> {
    // Acquire: pairs with the Release store in `reserve`.
    let count = REGION_COUNT.load(Ordering::Acquire);
    REGIONS[..count]
        .iter()
        .map(|e| {
            (
                e.start.load(Ordering::Relaxed),
                e.len.load(Ordering::Relaxed),
                e.slot_size.load(Ordering::Relaxed),
            )
        })
        .collect()
}

/// The slot holding `addr`, as (start, size), if it lies in a stack region.
pub(crate) fn slot_of(addr: usize) -> Option<(usize, usize)> {
    let (start, size, _) = region_of(addr)?;
    Some((start + (addr - start) / size * size, size))
}

/// The compaction table entry of the slot starting at `slot`; `None` outside a region that
/// has a table (invariant 3).
pub(crate) fn table_entry(slot: usize) -> Option<&'static AtomicPtr<u8>> {
    slot_entry(slot).map(|(_, _, entry)| entry)
}

/// Calls `f(slot, size, entry)` for every slot of every registered region whose table page
/// is in use ([`table_page_in_use`]; the others are all null). For a forked child: no locks,
/// no allocation.
pub(crate) fn for_each_table_entry(mut f: impl FnMut(usize, usize, &AtomicPtr<u8>)) {
    let count = REGION_COUNT.load(Ordering::Acquire);
    for entry in &REGIONS[..count] {
        let table = entry.table.load(Ordering::Relaxed);
        if table.is_null() {
            continue;
        }
        let start = entry.start.load(Ordering::Relaxed);
        let size = entry.slot_size.load(Ordering::Relaxed);
        let slots = entry.len.load(Ordering::Relaxed) / size;
        let per_page = page_size() / std::mem::size_of::<AtomicPtr<u8>>();
        for first in (0..slots).step_by(per_page) {
            // SAFETY: the table's pages.
            if !table_page_in_use(unsafe { table.add(first) } as usize) {
                continue;
            }
            for i in first..(first + per_page).min(slots) {
                // SAFETY: invariant 3.
                f(start + i * size, size, unsafe { &*table.add(i) });
            }
        }
    }
}

/// Whether the compaction-table page at `page` may hold a non-null entry: it has a
/// page-table entry, present or swapped out ([`page_has_entry`]; `mincore` alone would call
/// a swapped-out page untouched), or pagemap cannot tell. A page without one was never
/// written: all its entries are null. The table is not in a registered region, so reading a
/// page this calls in use never waits on a userfault (an untouched one reads as zeros).
/// The two walks of a forked child split the table by this one test.
fn table_page_in_use(page: usize) -> bool {
    let mut resident = 0u8;
    // SAFETY: one byte out for one page in; mincore only reads the page tables.
    let rc = unsafe { libc::mincore(page as *mut libc::c_void, 1, &mut resident) };
    (rc == 0 && resident & 1 != 0) || page_has_entry(page) != Some(false)
}

/// Whether `madvise(MADV_GUARD_INSTALL)` works here: tried on a scratch mapping.
pub(crate) fn guard_markers_supported() -> bool {
    let page = page_size();
    let Some(ptr) = map_anonymous(2 * page) else {
        return false;
    };
    // SAFETY: the scratch mapping just made, unmapped right after.
    unsafe {
        let ok = libc::madvise(ptr, page, MADV_GUARD_INSTALL) == 0;
        libc::munmap(ptr, 2 * page);
        ok
    }
}

/// Whether a userfaultfd registration with write-protection works: tried on a scratch
/// mapping (unmapping it ends the registration).
pub(crate) fn probe_registration() -> bool {
    let page = page_size();
    let Some(ptr) = map_anonymous(page) else {
        return false;
    };
    let ok = super::uffd::register(ptr as usize, page);
    // SAFETY: the scratch mapping just made.
    unsafe { libc::munmap(ptr, page) };
    ok
}

/// Removes the guard markers of the slots at `starts` (their first pages); false on error.
/// One `process_madvise` per [`MADVISE_BATCH`] slots where the kernel allows it: a range
/// `madvise` over a run of slots walks every page-table entry of the run (64 a default slot),
/// one indirect call each, which was a tenth of a million-task compaction's CPU.
pub(crate) fn remove_guards(starts: &[usize]) -> bool {
    // SAFETY: the first pages of slots whose tasks are suspended and locked (compact.rs
    // invariant 3); removing a marker only makes the page fault like a missing one.
    let rest = unsafe { advise_first_pages(starts, MADV_GUARD_REMOVE) };
    rest.iter().all(|&slot| {
        // SAFETY: as above.
        unsafe { libc::madvise(slot as *mut libc::c_void, page_size(), MADV_GUARD_REMOVE) == 0 }
    })
}

/// Gives `advice` to the first page of each slot at `starts`, [`MADVISE_BATCH`] slots per
/// `process_madvise` call; returns the slots it could not advise that way (all of them where
/// the kernel has no `process_madvise`), for the caller to advise one by one.
///
/// # Safety
/// The advice must be harmless to each of those pages.
unsafe fn advise_first_pages(starts: &[usize], advice: libc::c_int) -> &[usize] {
    let mut rest = starts;
    if let Some(pidfd) = self_pidfd() {
        while !rest.is_empty() {
            let n = rest.len().min(MADVISE_BATCH);
            // SAFETY: the caller's contract.
            if unsafe { process_madvise(pidfd, &rest[..n], 0, page_size(), advice) }.is_err() {
                break;
            }
            rest = &rest[n..];
        }
    }
    rest
}

/// Which pages of `[start, start + len)` are resident, one byte per page (bit 0); false on
/// error.
pub(crate) fn resident_pages(start: usize, len: usize, out: &mut [u8]) -> bool {
    assert!(
        out.len() >= len.div_ceil(page_size()),
        "mincore vector too short"
    );
    // SAFETY: `out` holds a byte per page of the range.
    unsafe { libc::mincore(start as *mut libc::c_void, len, out.as_mut_ptr()) == 0 }
}

/// Drops every page of `[start, start + len)` (`MADV_DONTNEED`).
pub(crate) fn release_range(start: usize, len: usize) {
    // SAFETY: the callers hold the slots' locks and the range holds nothing live
    // (compact.rs invariants 3 and 2).
    unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_DONTNEED) };
}

/// Releases the resident pages of each range `(start, len)`, which hold nothing live, in
/// batches of one `process_madvise` call; returns the bytes released. The ranges are page
/// aligned and sorted by address (a worker's step sorts them).
///
/// Ranges no more than [`MINCORE_GAP`] apart — the reclaimable parts of neighbouring slots,
/// which only their live top pages and a guard page separate — are looked up with one
/// `mincore` over their whole span: a million idle tasks parked in reclaim-only mode made a
/// `mincore` each, and its entry, VMA lookup and page walk set-up were ≈6 % of the spawn
/// storm's CPU beside the PTE walk itself.
pub(crate) fn release_resident(ranges: &[(usize, usize)]) -> usize {
    let mut released = 0;
    let mut batch: Vec<(usize, usize)> = Vec::with_capacity(ranges.len().min(MADVISE_BATCH));
    let mut vec = Vec::new();
    let mut rest = ranges;
    while !rest.is_empty() {
        // The group: ranges that follow on within MINCORE_GAP, up to MINCORE_SPAN in all.
        let first = rest[0].0;
        let mut n = 1;
        while let Some(&(start, len)) = rest.get(n) {
            let end = rest[n - 1].0 + rest[n - 1].1;
            if start < end || start - end > MINCORE_GAP || start + len - first > MINCORE_SPAN {
                break;
            }
            n += 1;
        }
        let (group, next) = rest.split_at(n);
        rest = next;
        if !queue_resident(group, &mut vec, &mut batch, &mut released) && n > 1 {
            // A hole in the span (two regions that are not adjacent): one range at a time.
            for range in group.chunks(1) {
                queue_resident(range, &mut vec, &mut batch, &mut released);
            }
        }
    }
    // SAFETY: dead stack pages (compact.rs invariant 1).
    unsafe { release_ranges(&batch) };
    released
}

/// Looks up the pages of `group` (sorted ranges) with one `mincore` over its span and puts
/// those with a resident page in `batch`, releasing it when full; false if `mincore` failed.
fn queue_resident(
    group: &[(usize, usize)],
    vec: &mut Vec<u8>,
    batch: &mut Vec<(usize, usize)>,
    released: &mut usize,
) -> bool {
    let page = page_size();
    let (first, last) = (group[0], group[group.len() - 1]);
    let span = last.0 + last.1 - first.0;
    vec.clear();
    vec.resize(span.div_ceil(page), 0u8);
    if !resident_pages(first.0, span, vec) {
        return false;
    }
    for &(start, len) in group {
        let at = (start - first.0) / page;
        let resident = vec[at..at + len.div_ceil(page)]
            .iter()
            .filter(|&&r| r & 1 != 0)
            .count();
        if resident == 0 {
            continue;
        }
        *released += resident * page;
        batch.push((start, len));
        if batch.len() == MADVISE_BATCH {
            // SAFETY: dead stack pages (compact.rs invariant 1).
            unsafe { release_ranges(batch) };
            batch.clear();
        }
    }
    true
}

/// Ranges this close (bytes between one's end and the next's start) share a `mincore` in
/// [`release_resident`]: a slot's live top pages and the next slot's guard page.
const MINCORE_GAP: usize = 64 << 10;
/// The most one shared `mincore` spans (a byte of its vector per page: 4 KiB).
const MINCORE_SPAN: usize = 16 << 20;

/// Releases every range `(start, len)` with `MADV_DONTNEED`, [`MADVISE_BATCH`] ranges per
/// `process_madvise` call (one `madvise` each where that fails).
///
/// # Safety
/// Nothing live is in the ranges: they read as zeros afterwards.
pub(crate) unsafe fn release_ranges(ranges: &[(usize, usize)]) {
    for batch in ranges.chunks(MADVISE_BATCH) {
        let done = self_pidfd().is_some_and(|pidfd| {
            // SAFETY: the caller's contract.
            unsafe { process_madvise_ranges(pidfd, batch.iter().copied(), libc::MADV_DONTNEED) }
                .is_ok()
        });
        if !done {
            for &(start, len) in batch {
                // SAFETY: as above.
                unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_DONTNEED) };
            }
        }
    }
}

/// One `process_madvise(2)` call over at most [`MADVISE_BATCH`] ranges `(start, len)`.
///
/// The iovec array is on the caller's stack, not the heap: this runs on a worker going idle
/// after a burst of task exits, and a malloc there made glibc sort every chunk those exits
/// freed in one go. Measured by `weft-bench sleepers` (a million tasks waking over 4 s): a
/// `Vec` of iovecs here held a worker 2–5 ms inside `_int_malloc` several times a second,
/// and those stalls were the wakes' 99th percentile lateness.
///
/// # Safety
/// The advice must be harmless to every range (no live data the advice would destroy).
unsafe fn process_madvise_ranges(
    pidfd: libc::c_int,
    ranges: impl ExactSizeIterator<Item = (usize, usize)>,
    advice: libc::c_int,
) -> io::Result<()> {
    let n = ranges.len();
    assert!(n <= MADVISE_BATCH, "process_madvise batch too long");
    let empty = libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    };
    let mut iov = [empty; MADVISE_BATCH];
    let mut total = 0;
    for (iov, (start, len)) in iov.iter_mut().zip(ranges) {
        iov.iov_base = start as *mut libc::c_void;
        iov.iov_len = len;
        total += len;
    }
    // SAFETY: the first `n` iovecs are initialized and live for the call; the advice's
    // harmlessness is the caller's contract.
    let rc = unsafe { libc::syscall(libc::SYS_process_madvise, pidfd, iov.as_ptr(), n, advice, 0) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    if rc as usize != total {
        return Err(io::Error::other(
            "process_madvise advised part of the ranges",
        ));
    }
    Ok(())
}

/// If `addr` lies in the guard page of some slot, returns that slot's start and size.
///
/// Async-signal-safe: reads atomics only (invariant 1).
pub(crate) fn guard_page_of(addr: usize) -> Option<(usize, usize)> {
    // Acquire: pairs with the Release store in `reserve`.
    let count = REGION_COUNT.load(Ordering::Acquire);
    let page = page_size_for_signal();
    for entry in &REGIONS[..count] {
        let start = entry.start.load(Ordering::Relaxed);
        let len = entry.len.load(Ordering::Relaxed);
        if addr >= start && addr < start + len {
            let slot_size = entry.slot_size.load(Ordering::Relaxed);
            let slot_start = start + (addr - start) / slot_size * slot_size;
            return (addr - slot_start < page).then_some((slot_start, slot_size));
        }
    }
    None
}

/// The lowest resident page of `[start, start + len)`, by `mincore(2)`, if any; the range
/// must lie inside one region and be page-aligned. Asks for 512 pages at a time into a buffer
/// on this stack: no allocation on the worker (see `process_madvise`).
pub(crate) fn lowest_resident_page(start: usize, len: usize) -> Option<usize> {
    let page = page_size();
    let mut vec = [0u8; 512];
    let mut at = start;
    while at < start + len {
        let chunk = (start + len - at).min(vec.len() * page);
        // SAFETY: `vec` has a byte for each of the ≤ 512 pages of `[at, at + chunk)` for the
        // kernel to fill; mincore only reads the page tables of that range, which is mapped
        // (a region, invariant 1).
        let rc = unsafe { libc::mincore(at as *mut libc::c_void, chunk, vec.as_mut_ptr()) };
        if rc != 0 {
            return None;
        }
        if let Some(i) = vec[..chunk / page].iter().position(|v| v & 1 != 0) {
            return Some(at + i * page);
        }
        at += chunk;
    }
    None
}

/// The page size without touching a `OnceLock` (which a signal handler must not initialise).
fn page_size_for_signal() -> usize {
    static CACHED: AtomicUsize = AtomicUsize::new(0);
    match CACHED.load(Ordering::Relaxed) {
        0 => {
            // SAFETY: sysconf(_SC_PAGESIZE) is async-signal-safe in practice (reads auxv).
            let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize };
            CACHED.store(page, Ordering::Relaxed);
            page
        }
        page => page,
    }
}

/// Which guard mechanism this kernel supports, decided at the first guard installed.
static GUARD_MODE: AtomicU8 = AtomicU8::new(GUARD_UNKNOWN);
/// Not yet tried.
const GUARD_UNKNOWN: u8 = 0;
/// `madvise(MADV_GUARD_INSTALL)`: a page-table marker, no extra mapping.
const GUARD_MADVISE: u8 = 1;
/// `mprotect(PROT_NONE)`: splits the mapping, two mappings per slot.
const GUARD_MPROTECT: u8 = 2;

/// Guards slots just carved, `starts` (consecutive, in address order, all in one region of
/// `size`-byte slots; invariant 2): nothing to install where the region is registered and the
/// registration guards (compact.rs invariant 8), guard markers otherwise. Called under the
/// pool's lock, which orders carves.
pub(crate) fn guard_carved(starts: &[usize], size: usize) -> io::Result<()> {
    let (Some(&first), Some(&last)) = (starts.first(), starts.last()) else {
        return Ok(());
    };
    let entry = entry_of(first);
    // Acquire: pairs with the Release store in `ensure_registered`.
    let registered = entry.is_some_and(|e| e.registered.load(Ordering::Acquire) == REGISTER_DONE);
    match entry {
        Some(entry) if registered && super::mode::registration_guards() => {
            if entry.unmarked_from.load(Ordering::Relaxed) == usize::MAX {
                entry.unmarked_from.store(first, Ordering::Relaxed);
            }
        }
        _ => install_guards(starts)?,
    }
    if let Some(entry) = entry {
        entry.carved_end.store(last + size, Ordering::Relaxed);
    }
    Ok(())
}

/// Whether the slot at `slot` may carry a guard marker: it was carved before its region's
/// first unmarked slot (invariant 2). The caller reached the slot through the task that
/// runs on it, after its carve.
pub(crate) fn may_have_marker(slot: usize) -> bool {
    entry_of(slot).is_none_or(|e| slot < e.unmarked_from.load(Ordering::Relaxed))
}

/// Calls `f(slot)` for every slot carved without a guard marker (invariant 2) that
/// [`for_each_table_entry`] does not visit (its table page is not in use: no task on it
/// was ever compacted or resumed), for a forked child, which has no registration to guard
/// them: no locks, no allocation.
pub(crate) fn for_each_unmarked_slot(mut f: impl FnMut(usize)) {
    let count = REGION_COUNT.load(Ordering::Acquire);
    let per_page = page_size() / std::mem::size_of::<AtomicPtr<u8>>();
    for entry in &REGIONS[..count] {
        let table = entry.table.load(Ordering::Relaxed);
        let start = entry.start.load(Ordering::Relaxed);
        let from = entry.unmarked_from.load(Ordering::Relaxed);
        let end = entry.carved_end.load(Ordering::Relaxed);
        let size = entry.slot_size.load(Ordering::Relaxed);
        if table.is_null() || from >= end {
            continue;
        }
        let mut index = (from - start) / size;
        let last = (end - start) / size;
        while index < last {
            let page_end = ((index / per_page + 1) * per_page).min(last);
            // SAFETY: the table's page holding entry `index` (invariant 3).
            let page = unsafe { table.add(index / per_page * per_page) } as usize;
            if !table_page_in_use(page) {
                for i in index..page_end {
                    f(start + i * size);
                }
            }
            index = page_end;
        }
    }
}

/// Makes the first page at each address in `starts` fault on any access (region.rs
/// invariant 2). Markers go in with one `process_madvise` call per 1024 pages where the kernel
/// allows it (measured here: ≈0.45 µs a guard against ≈0.65–0.95 µs for one `madvise` each).
pub(crate) fn install_guards(starts: &[usize]) -> io::Result<()> {
    if starts.is_empty() {
        return Ok(());
    }
    let rest = if GUARD_MODE.load(Ordering::Relaxed) == GUARD_MADVISE {
        // SAFETY: every address is the first page of a slot inside a region this module
        // mapped, and no task runs on those slots yet (invariant 2).
        unsafe { advise_first_pages(starts, MADV_GUARD_INSTALL) }
    } else {
        starts
    };
    for &addr in rest {
        install_guard(addr)?;
    }
    Ok(())
}

/// Reinstalls the guard marker of a slot whose marker was removed (compact.rs invariant 4):
/// one plain `madvise`, cheaper for one page than a `process_madvise` batch.
pub(crate) fn install_guard_marker(slot: usize) {
    // SAFETY: the slot's first page, which holds nothing (its task is not running).
    unsafe { libc::madvise(slot as *mut libc::c_void, page_size(), MADV_GUARD_INSTALL) };
}

/// Guards one page: `madvise(MADV_GUARD_INSTALL)`, else `mprotect(PROT_NONE)`.
fn install_guard(addr: usize) -> io::Result<()> {
    let page = page_size();
    if GUARD_MODE.load(Ordering::Relaxed) != GUARD_MPROTECT {
        // SAFETY: `addr` is the first page of a slot inside a region this module mapped, and
        // no task runs on that slot yet (invariant 2).
        let rc = unsafe { libc::madvise(addr as *mut libc::c_void, page, MADV_GUARD_INSTALL) };
        if rc == 0 {
            GUARD_MODE.store(GUARD_MADVISE, Ordering::Relaxed);
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINVAL) {
            return Err(err);
        }
        // EINVAL: the kernel predates MADV_GUARD_INSTALL; fall back for good.
        GUARD_MODE.store(GUARD_MPROTECT, Ordering::Relaxed);
    }
    // SAFETY: as above; PROT_NONE on a page no one uses yet.
    let rc = unsafe { libc::mprotect(addr as *mut libc::c_void, page, libc::PROT_NONE) };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::ENOMEM) {
        return Err(map_count_error());
    }
    Err(err)
}

/// The error for a full mapping table, naming the knob.
fn map_count_error() -> io::Error {
    let limit = std::fs::read_to_string("/proc/sys/vm/max_map_count")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "?".into());
    io::Error::new(
        io::ErrorKind::OutOfMemory,
        format!(
            "weft: cannot guard another task stack: the process reached vm.max_map_count \
             ({limit} mappings); this kernel lacks MADV_GUARD_INSTALL (Linux 6.13+), so each \
             stack costs two mappings; raise the limit (sysctl vm.max_map_count=...) or run \
             fewer tasks"
        ),
    )
}

/// A pidfd for this process, for `process_madvise`; `None` where the kernel has none.
///
/// Opened per process: a forked child inherits the parent's pidfd, through which its advice
/// would go to the parent's pages (the kernel refuses the destructive advice to another
/// process, so the child's calls would fail and fall back, but nothing here should name the
/// parent); see [`per_process_fd`].
fn self_pidfd() -> Option<libc::c_int> {
    static PIDFD: AtomicU64 = AtomicU64::new(0);
    per_process_fd(&PIDFD, |pid| {
        // SAFETY: pidfd_open on our own pid has no memory effects.
        unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) as libc::c_int }
    })
}

/// This process's `/proc/self/pagemap`, opened once per process (as [`self_pidfd`]: a
/// forked child's inherited descriptor would read its parent's page tables).
fn self_pagemap() -> Option<libc::c_int> {
    static PAGEMAP: AtomicU64 = AtomicU64::new(0);
    per_process_fd(&PAGEMAP, |_| {
        // SAFETY: a NUL-terminated path; open has no memory effects.
        unsafe {
            libc::open(
                c"/proc/self/pagemap".as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            )
        }
    })
}

/// A descriptor `open` made for this process, kept in `cell` as (pid, fd or -1 for none)
/// packed, 0 before the first call. The pid is checked at each call, a system call; a forked
/// child opens its own and leaves the inherited one open (its number may have been reused by
/// the child since).
fn per_process_fd(cell: &AtomicU64, open: impl FnOnce(u32) -> libc::c_int) -> Option<libc::c_int> {
    // SAFETY: getpid has no memory effects.
    let pid = unsafe { libc::getpid() } as u32;
    let packed = cell.load(Ordering::Relaxed);
    if packed != 0 && (packed >> 32) as u32 == pid {
        let fd = packed as u32 as i32;
        return (fd >= 0).then_some(fd);
    }
    let fd = open(pid).max(-1);
    let mine = (u64::from(pid) << 32) | u64::from(fd as u32);
    if let Err(other) = cell.compare_exchange(packed, mine, Ordering::Relaxed, Ordering::Relaxed) {
        // Another thread of this process opened one first: use it, close ours.
        if fd >= 0 {
            // SAFETY: ours, never handed out.
            unsafe { libc::close(fd) };
        }
        let theirs = other as u32 as i32;
        return ((other >> 32) as u32 == pid && theirs >= 0).then_some(theirs);
    }
    (fd >= 0).then_some(fd)
}

/// Whether the page holding `addr` has a page-table entry, from `/proc/self/pagemap`:
/// present, or swapped out (`PM_SWAP`: its bytes are in swap, and a read brings them back
/// through the kernel's own fault, never a userfault, which is only for empty entries).
/// `mincore` cannot tell: it calls a swapped-out page not resident once the page has left
/// the swap cache, at once with zswap or zram. `None` where pagemap cannot be read.
pub(crate) fn page_has_entry(addr: usize) -> Option<bool> {
    const PM_PRESENT: u64 = 1 << 63;
    const PM_SWAP: u64 = 1 << 62;
    let fd = self_pagemap()?;
    let mut entry = 0u64;
    let offset = (addr / page_size() * size_of::<u64>()) as libc::off_t;
    // SAFETY: `entry` is 8 writable bytes on a stack no userfault can hold: a worker's own
    // (compaction), or any in a forked child, which has no registration.
    let n = unsafe { libc::pread(fd, (&raw mut entry).cast(), size_of::<u64>(), offset) };
    (n == size_of::<u64>() as isize).then_some(entry & (PM_PRESENT | PM_SWAP) != 0)
}

/// Ranges per `process_madvise(2)` call (the kernel's `UIO_MAXIOV`).
const MADVISE_BATCH: usize = 1024;

/// One `process_madvise(2)` call over the ranges `[start + offset, start + offset + len)` of
/// this process, for at most [`MADVISE_BATCH`] starts.
///
/// # Safety
/// As [`process_madvise_ranges`].
unsafe fn process_madvise(
    pidfd: libc::c_int,
    starts: &[usize],
    offset: usize,
    len: usize,
    advice: libc::c_int,
) -> io::Result<()> {
    let ranges = starts.iter().map(|&start| (start + offset, len));
    // SAFETY: the caller's contract.
    unsafe { process_madvise_ranges(pidfd, ranges, advice) }
}

/// Whether guards are page-table markers (true) or `mprotect`ed pages (false); `None` before
/// the first guard.
pub fn guards_are_markers() -> Option<bool> {
    match GUARD_MODE.load(Ordering::Relaxed) {
        GUARD_MADVISE => Some(true),
        GUARD_MPROTECT => Some(false),
        _ => None,
    }
}

/// Gives the pages of the slots at `starts`, each `size` bytes, back to the kernel
/// (`MADV_DONTNEED`), all but the guard page: the next touch faults in a zero page.
///
/// Where guards are page-table markers, neighbouring slots go as one range, their guard
/// pages included: a marker survives `MADV_DONTNEED`, and a guard page without one holds no
/// page (nothing runs on it), so the range drops nothing a slot's own release would not.
/// What one range saves is the kernel's fixed cost per range: 128 slots of 256 KiB with one
/// page each took 0.78–0.81 µs a slot as one range each and 0.15–0.20 µs as one range in
/// all (a C program here). The exits of tasks woken in spawn order return their slots in
/// order, so a trim's batch is mostly neighbours. An `mprotect` guard is its own mapping and
/// is left out of every range.
///
/// Uses one `process_madvise` call per [`MADVISE_BATCH`] ranges where the kernel allows it
/// on its own process (measured here: 225 ns per page against 1.3 µs for one `madvise`
/// each), and falls back to `madvise` per range (`release_ranges`). Returns the ranges used.
pub(crate) fn release_slots(starts: &[usize], size: usize) -> usize {
    let page = page_size();
    let mut total = 0;
    let merge = guards_are_markers() == Some(true);
    // On this thread's stack, not the heap (`process_madvise_ranges` says why).
    let mut sorted = [0usize; RELEASE_CHUNK];
    let mut ranges = [(0usize, 0usize); RELEASE_CHUNK];
    for chunk in starts.chunks(RELEASE_CHUNK) {
        let sorted = &mut sorted[..chunk.len()];
        sorted.copy_from_slice(chunk);
        sorted.sort_unstable();
        let n = slot_ranges(sorted, size, page, merge, &mut ranges);
        // SAFETY: every start is a whole slot of one of our regions whose task has ended
        // (stack/mod.rs invariant 2), and a merged range adds only guard pages, which hold no
        // page and keep their markers (above); DONTNEED only drops the pages' contents.
        unsafe { release_ranges(&ranges[..n]) };
        total += n;
    }
    total
}

/// The ranges that release the slots at `sorted` (ascending), each `size` bytes: a slot
/// without its guard page, or with `merge`, a run of neighbours as one range from the first
/// one's second page to the last one's end. Fills `out` (room for one range per slot) and
/// returns how many.
fn slot_ranges(
    sorted: &[usize],
    size: usize,
    page: usize,
    merge: bool,
    out: &mut [(usize, usize)],
) -> usize {
    let mut n = 0usize;
    for &start in sorted {
        match n.checked_sub(1).map(|last| &mut out[last]) {
            // The last range ends where this slot's guard page begins.
            Some((from, len)) if merge && *from + *len == start => *len += size,
            _ => {
                out[n] = (start + page, size - page);
                n += 1;
            }
        }
    }
    n
}

/// Slots [`release_slots`] sorts and merges at a time: the largest batch its caller gives
/// (stack/mod.rs, `TRIM_BATCH`), 3 KiB of stack.
const RELEASE_CHUNK: usize = 128;

#[cfg(test)]
mod tests {
    use super::*;

    /// A byte per page of `[start, start + pages × page)`: whether it is resident.
    fn residency(start: usize, pages: usize) -> Vec<bool> {
        let mut vec = vec![0u8; pages];
        assert!(resident_pages(start, pages * page_size(), &mut vec));
        vec.iter().map(|&r| r & 1 != 0).collect()
    }

    #[test]
    fn neighbouring_slots_make_one_range_where_guards_are_markers() {
        let (size, page) = (64 << 10, 4096);
        let starts = [0x10_0000, 0x11_0000, 0x12_0000, 0x14_0000];
        let mut out = [(0, 0); 4];
        let n = slot_ranges(&starts, size, page, true, &mut out);
        assert_eq!(
            &out[..n],
            &[(0x10_1000, 3 * size - page), (0x14_1000, size - page)],
            "three neighbours and one after a gap"
        );
        let n = slot_ranges(&starts, size, page, false, &mut out);
        let apart: Vec<_> = starts.iter().map(|&s| (s + page, size - page)).collect();
        assert_eq!(&out[..n], &apart[..], "mprotect guards: a range per slot");
    }

    #[test]
    fn neighbouring_reclaim_ranges_share_a_lookup_and_a_hole_splits_them() {
        let page = page_size();
        let pages = 64;
        let base = map_anonymous(pages * page).expect("mmap") as usize;
        for i in 0..pages {
            // SAFETY: the mapping made above, ours alone.
            unsafe { ((base + i * page) as *mut u8).write_volatile(1) };
        }
        // A hole as the fourth gap: the span of all ranges is no longer one mapping.
        // SAFETY: pages 38..40 of our own mapping, unused.
        let unmapped = unsafe { libc::munmap((base + 38 * page) as *mut _, 2 * page) };
        assert_eq!(unmapped, 0);
        // Ranges of 8 pages with gaps of 2 (a slot's top page and the next guard page).
        let ranges: Vec<(usize, usize)> =
            (0..5).map(|i| (base + i * 10 * page, 8 * page)).collect();
        let released = release_resident(&ranges);
        assert_eq!(released, 5 * 8 * page);
        let after = residency(base, 38);
        for (i, resident) in after.iter().enumerate() {
            let in_gap = i % 10 >= 8;
            assert_eq!(*resident, in_gap, "page {i}: only the gaps stay resident");
        }
        assert!(
            residency(base + 40 * page, 8).iter().all(|&r| !r),
            "the range past the hole"
        );
        assert!(
            residency(base + 48 * page, 2).iter().all(|&r| r),
            "and its gap stays"
        );
        // SAFETY: our own mapping, around the hole.
        unsafe {
            libc::munmap(base as *mut _, 38 * page);
            libc::munmap((base + 40 * page) as *mut _, (pages - 40) * page);
        }
    }

    #[test]
    fn a_table_page_is_in_use_once_written_even_when_swapped_out() {
        const PAGEOUT: libc::c_int = 21; // MADV_PAGEOUT
        let page = page_size();
        let base = map_anonymous(3 * page).expect("mmap") as usize;
        assert!(!table_page_in_use(base), "a never-touched page");
        // SAFETY: the mapping made above, ours alone.
        unsafe { ((base + page) as *mut u64).write_volatile(1) };
        assert!(table_page_in_use(base + page), "a written page");
        // Swapped out where swap is on (else a no-op): still in use, though mincore would
        // say it is not resident once it leaves the swap cache.
        // SAFETY: a hint; the contents are kept.
        unsafe { libc::madvise((base + page) as *mut libc::c_void, page, PAGEOUT) };
        assert!(
            table_page_in_use(base + page),
            "a written page after a pageout"
        );
        assert_eq!(page_has_entry(base + 2 * page), Some(false));
        // SAFETY: as above; the value came back from swap if it went there.
        assert_eq!(unsafe { ((base + page) as *const u64).read_volatile() }, 1);
        // SAFETY: the mapping made above, no longer used.
        unsafe { libc::munmap(base as *mut libc::c_void, 3 * page) };
    }
}
