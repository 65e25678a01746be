//! Bringing a compacted stack back (compact.rs invariant 4) — by its worker before the task
//! runs, by the fault thread for any other access, by a thread about to touch the stack on
//! purpose — and filling the missing pages of resident slots (invariant 5, stack growth);
//! the slot locks all of it runs under (invariant 2), and the fork handlers that take them.
//!
//! Owns: the slot locks (`SLOT_LOCKS`, a spin flag per slot index modulo `LOCKS`), and each
//! fault thread's [`Scratch`].
//!
//! Invariants: compact.rs 2, 4, 5, 6 and 8 are kept here; in particular a restore waits for
//! memory rather than give up, and nothing here allocates while it holds a slot lock.
//!
//! May call: `arena.rs` (images), `template.rs` (expanding an encoded image), `uffd.rs` (the
//! fills), `region.rs`, `switch.rs` (`copy_stack_bytes`), `mode.rs` (counters, the forked
//! flag). Called by: `parked.rs` (a
//! worker's restore before a resume), `uffd.rs` (the fault thread), `mod.rs` (the prefill
//! of a fresh slot), `compact.rs` (the locks), `chan` (`restore_if_compacted`), the fork
//! handlers `mode.rs` registers.
//!
//! Why `UFFDIO_COPY` and not plain writes, and why per-slot spin locks: compact.rs ("Why not
//! the alternatives") and `LOCKS` (the contention measured with fewer locks).

use std::alloc::{self, Layout};
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};

use super::arena::{
    depth as image_depth, encoded as image_encoded, free as image_free, parts as image_parts,
    staged as image_staged, HEADER,
};
use super::mode::{
    add, register_regions, sub, COMPACTED_LIVE_BYTES, COMPACTIONS, FAULT_RESTORES, FORKED,
    IMAGE_BYTES, RESTORES, ZERO_FILLS,
};
use super::switch::copy_stack_bytes;
use super::template;
use super::{region, uffd};

// ---------------------------------------------------------------------------------------
// Slot locks (invariant 2).

/// Slot locks, by slot index modulo this. A compaction holds the locks of a whole run, up to
/// `StackPolicy::batch` (256) consecutive slots, for ≈0.1–0.5 ms; with 1024 locks a run held a
/// quarter of them, so the other worker's compactions and restores and the fault thread
/// waited on it at random: a million idle tasks spawned until parked made 434,000 yields of
/// this lock's spin (below), 2,700 with 65,536 locks (64 KiB, touched as slots are used).
const LOCKS: usize = 1 << 16;

/// A spin lock: held for microseconds by a restore or the fault thread, for a run's
/// compaction by a worker; a plain flag so that a forked child can release what its parent's
/// `fork_prepare` took.
struct SlotLock(AtomicBool);

#[allow(clippy::declare_interior_mutable_const)]
const UNLOCKED: SlotLock = SlotLock(AtomicBool::new(false));
static SLOT_LOCKS: [SlotLock; LOCKS] = [UNLOCKED; LOCKS];

pub(super) fn lock_index(slot: usize, size: usize) -> usize {
    (slot / size) % LOCKS
}

pub(super) fn lock(index: usize) {
    let flag = &SLOT_LOCKS[index].0;
    let mut spins = 0u32;
    // Acquire: pairs with the Release in `unlock`; everything the last holder did to the
    // slot (its state, its pages) is seen by the next.
    while flag
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        spins += 1;
        if spins < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

pub(super) fn unlock(index: usize) {
    // Release: pairs with the Acquire in `lock`.
    SLOT_LOCKS[index].0.store(false, Ordering::Release);
}

pub(super) extern "C" fn fork_prepare() {
    // The forking thread may run on a task's stack in a registered region: touch the stack
    // this handler and `fork` itself will use before taking the locks, since a fault on a
    // missing page would wait for the fault thread, which would wait for a lock (invariant 6).
    let mut room = [0u8; 8 << 10];
    std::hint::black_box(&mut room);
    for index in 0..LOCKS {
        lock(index);
    }
}

pub(super) extern "C" fn fork_parent() {
    for index in 0..LOCKS {
        unlock(index);
    }
}

/// Where the forked child expands an encoded image (`fork_child`).
struct ForkExpanded([u64; template::TEMPLATE_LEN_MAX / 8]);
static mut FORK_EXPANDED: ForkExpanded = ForkExpanded([0; template::TEMPLATE_LEN_MAX / 8]);

pub(super) extern "C" fn fork_child() {
    FORKED.store(true, Ordering::Relaxed);
    region::for_each_table_entry(|slot, size, entry| {
        let image = entry.load(Ordering::Relaxed);
        if image.is_null() {
            // Resident, perhaps restored without its marker (invariant 8).
            // SAFETY: the slot's first page, its guard page, which holds nothing.
            unsafe {
                libc::madvise(
                    slot as *mut libc::c_void,
                    region::page_size(),
                    region::MADV_GUARD_INSTALL,
                )
            };
            return;
        }
        // SAFETY: a published image (invariant 3d) of a slot that is COMPACTED; the child
        // is single-threaded and unregistered, so the slot's pages fill in on first touch.
        unsafe {
            let (stored, bytes) = image_parts(image);
            if image_encoded(image) {
                // Expanded into a buffer first, then copied as any image: the copy is the one
                // that may write into a stack (`copy_stack_bytes`, which AddressSanitizer
                // knows of). A static buffer: the child runs this alone.
                let len = template::live_len(bytes);
                let buffer = &raw mut FORK_EXPANDED.0;
                template::expand(bytes, slot, buffer as *mut u8);
                copy_stack_bytes((slot + size - len) as *mut u8, buffer as usize, len);
                sub(&COMPACTED_LIVE_BYTES, len as u64);
            } else {
                copy_stack_bytes((slot + size - stored) as *mut u8, bytes as usize, stored);
                sub(&COMPACTED_LIVE_BYTES, stored as u64);
            }
            sub(&IMAGE_BYTES, (HEADER + stored) as u64);
        }
        add(&RESTORES, 1);
        // Plain madvise: the cached pidfd for `process_madvise` names the parent.
        // SAFETY: the slot's first page, which held the guard before compaction.
        unsafe {
            libc::madvise(
                slot as *mut libc::c_void,
                region::page_size(),
                region::MADV_GUARD_INSTALL,
            )
        };
        entry.store(std::ptr::null_mut(), Ordering::Relaxed);
    });
    // Slots carved with no marker because the registration guarded them (region.rs
    // invariant 2) and not visited above (never run, e.g. in a pool): the child has no
    // registration.
    region::for_each_unmarked_slot(|slot| {
        // SAFETY: the slot's first page, its guard page, which holds nothing.
        unsafe {
            libc::madvise(
                slot as *mut libc::c_void,
                region::page_size(),
                region::MADV_GUARD_INSTALL,
            )
        };
    });
    for index in 0..LOCKS {
        unlock(index);
    }
}

// ---------------------------------------------------------------------------------------
// Restoring (invariant 4).

/// A page-aligned buffer to assemble pages in for `UFFDIO_COPY`, and zeros for stack growth.
pub(crate) struct Scratch {
    /// All zeros between fills: a restore copies the image's bytes in, fills, and zeros
    /// those bytes again (≈700 B for an idle task), rather than zeroing the rest of the
    /// page before each fill (≈3.3 KB).
    buf: *mut u8,
    zeros: *mut u8,
    /// Restores made through it that may probe (wrapping; see [`RESTORE_PROBE_EXTRA`]):
    /// every [`RESTORE_PROBE_EVERY`]th fills only the image.
    restores: u32,
}

/// Pages a [`Scratch`] holds; restores of more live bytes go through it in pieces.
const SCRATCH_PAGES: usize = 16;
// One piece: a restore fills at most [`RESTORE_DEPTH_MAX`] pages or the image's (at most
// `MAX_COMPACT`, 16 pages of 4 KiB or fewer larger ones), so an encoded image is expanded
// straight into the scratch buffer, whole.
const _: () = assert!(
    RESTORE_DEPTH_MAX <= SCRATCH_PAGES && super::compact::MAX_COMPACT <= SCRATCH_PAGES * 4096
);
/// The most pages [`prefill`] fills (256 KiB, a default slot), one `UFFDIO_COPY` from the
/// zeros of a [`Scratch`] per [`SCRATCH_PAGES`].
pub(crate) const PREFILL_PAGES_MAX: usize = 64;
/// Pages the fault thread fills with zeros at a fault of stack growth, at least: the
/// faulting one and the ones below it (a growing stack touches them next; each fault served
/// by the thread costs ≈6–70 µs here, against ≈1 µs a page to fill). A deeper stack gets as
/// many as it already has, up to [`SCRATCH_PAGES`] (`serve_fault`).
///
/// Real pages, never the shared zero page (`UFFDIO_ZEROPAGE`), below a fresh top page or
/// over the rest of a slot: the first write to a zero-mapped page is a copy-on-write fault,
/// and replacing a present entry flushes the TLB of every CPU that runs the process, an IPI
/// to the other workers (`do_wp_page` → `ptep_clear_flush`: 62 % of the CPU of a million
/// tasks each touching 8 KiB). Without it that storm took 22–23 s of CPU instead of 31–36,
/// at a peak of 1.9–2.0 GB instead of 1.5–1.6, and 100K tasks using 64 KiB 8.3–10.9 s
/// instead of 17.7–22.6 (old and new alternated ×2; an earlier measurement on 30K such
/// tasks had found zero-mapping slightly cheaper).
const GROW_PAGES: usize = 4;
/// The deepest a restore fills a slot, in pages from its top: a restore of that many costs
/// ≈8 µs more than one of a page.
///
/// A restore fills the image's pages and, below them, zeros down to the depth the slot had
/// when it was compacted, so that a task that wakes and runs as deep as before (a handler
/// deeper than the read it parked in) does not take trips to the fault thread: a task that
/// woke and ran 16 KiB deep cost 75–86 µs of CPU per wake, two trips, against 10–12 µs with
/// compaction off. A page costs ≈0.5 µs, so a task that stays shallow (an idle one, the
/// timers' sleepers) is filled one page deep as before. Where the depth is
/// [`RESTORE_PROBE_EXTRA`] pages or more below the image, every [`RESTORE_PROBE_EVERY`]th
/// restore fills only the image: the filled pages are resident whether the task touches
/// them or not, and without that probe a task that ran deep once would be filled deep at
/// every wake.
pub(super) const RESTORE_DEPTH_MAX: usize = 16;
/// One restore in this many (by the same thread) of a slot at least [`RESTORE_PROBE_EXTRA`]
/// pages deeper than its image fills only the image (see [`RESTORE_DEPTH_MAX`]).
const RESTORE_PROBE_EVERY: u32 = 8;
/// Pages below the image from which a restore may probe: a probe that finds the task still
/// needs them costs it a trip to the fault thread or two (≈30 µs), one in
/// [`RESTORE_PROBE_EVERY`], so it pays only where filling them at every restore costs more
/// (≈0.5 µs a page).
const RESTORE_PROBE_EXTRA: usize = 8;

impl Scratch {
    pub(crate) fn new() -> Scratch {
        let page = region::page_size();
        let layout = Layout::from_size_align(SCRATCH_PAGES * page, page).expect("scratch");
        // SAFETY: non-zero sizes.
        let (buf, zeros) = unsafe { (alloc::alloc_zeroed(layout), alloc::alloc_zeroed(layout)) };
        if buf.is_null() || zeros.is_null() {
            alloc::handle_alloc_error(layout);
        }
        Scratch {
            buf,
            zeros,
            restores: 0,
        }
    }
}

thread_local! {
    static WORKER_SCRATCH: RefCell<Option<Scratch>> = const { RefCell::new(None) };
}

/// Restores the COMPACTED slot `[slot, slot + size)` from `image`, as deep as the slot was
/// when compacted (zeros below the image; see [`RESTORE_DEPTH_MAX`]); the caller holds its
/// lock and, where this returns true, frees the image after unlocking (invariant 6). False
/// for an image in its compactor's staging buffer (compact.rs `encode_staged`), told here
/// under the lock: once the lock is let go that buffer may be written again.
///
/// # Safety
/// Invariant 2: the caller holds the slot's lock and `image` is its published image.
#[must_use]
unsafe fn restore_locked(slot: usize, size: usize, image: *mut u8, scratch: &mut Scratch) -> bool {
    let page = region::page_size();
    // SAFETY: the caller's contract.
    let (stored, bytes) = unsafe { image_parts(image) };
    // SAFETY: the caller's contract.
    let encoded = unsafe { image_encoded(image) };
    let len = if encoded {
        // SAFETY: an encoded image's contents, as template.rs wrote them.
        unsafe { template::live_len(bytes) }
    } else {
        stored
    };
    let top = slot + size;
    let lo = top - len;
    // SAFETY: the caller's contract.
    let mut depth = unsafe { image_depth(image) };
    if depth.saturating_sub((top - lo / page * page) / page) >= RESTORE_PROBE_EXTRA {
        scratch.restores = scratch.restores.wrapping_add(1);
        if scratch.restores.is_multiple_of(RESTORE_PROBE_EVERY) {
            depth = 0;
        }
    }
    let first = (lo / page * page)
        .min(top.saturating_sub(depth.min(RESTORE_DEPTH_MAX) * page))
        .max(slot + page);
    if !uffd::knows_faulting_threads() {
        region::install_guard_marker(slot);
    }
    // Fill `[first, top)` from the bottom up, a scratch buffer at a time.
    let mut at = first;
    while at < top {
        let end = (at + SCRATCH_PAGES * page).min(top);
        let n = end - at;
        // SAFETY: the scratch buffer holds SCRATCH_PAGES pages; the image holds
        // `[lo, top)`; the two do not overlap.
        unsafe {
            // The buffer is zeros (`Scratch::buf`): below the image they stay.
            let from = at.max(lo).min(end);
            if from < end && encoded {
                // The fill is one piece ("One piece" above): the image lies in it, whole.
                debug_assert_eq!(from, lo);
                template::expand(bytes, slot, scratch.buf.add(from - at));
            } else if from < end {
                std::ptr::copy_nonoverlapping(
                    bytes.add(from - lo),
                    scratch.buf.add(from - at),
                    end - from,
                );
            }
            // SAFETY: the slot is COMPACTED and locked: its pages are missing and ours to
            // fill (invariant 2). Not given up on: the slot turns RESIDENT below, and a
            // missing page of a RESIDENT slot is filled with zeros (invariant 5).
            uffd::fill_waiting_for_memory(at, scratch.buf, n);
            std::ptr::write_bytes(scratch.buf.add(from - at), 0, end - from);
            debug_assert!(
                std::slice::from_raw_parts(scratch.buf, n)
                    .iter()
                    .all(|&b| b == 0),
                "a restore left bytes in its scratch buffer"
            );
        }
        at = end;
    }
    let entry = region::table_entry(slot).expect("compacted slot outside a region");
    entry.store(std::ptr::null_mut(), Ordering::Release);
    sub(&COMPACTED_LIVE_BYTES, len as u64);
    sub(&IMAGE_BYTES, (HEADER + stored) as u64);
    add(&RESTORES, 1);
    // SAFETY: the caller's contract; read under its lock.
    !unsafe { image_staged(image) }
}

/// Restores the slot `[slot, slot + size)` if it is still COMPACTED; its task's worker, before
/// resuming it (invariant 4).
pub(crate) fn restore(slot: usize, size: usize) {
    let Some(entry) = region::table_entry(slot) else {
        return;
    };
    let index = lock_index(slot, size);
    WORKER_SCRATCH.with(|scratch| {
        let mut scratch = scratch.borrow_mut();
        let scratch = scratch.get_or_insert_with(Scratch::new);
        lock(index);
        let image = entry.load(Ordering::Acquire);
        // SAFETY: locked, and the entry is the published image (invariant 2).
        let free = !image.is_null() && unsafe { restore_locked(slot, size, image, scratch) };
        unlock(index);
        if free {
            // SAFETY: unpublished above; nobody else holds it (invariant 4).
            unsafe { image_free(image) };
        }
    });
}

/// If `addr` lies in a compacted slot, restores that slot now, on this thread: for code about
/// to touch a parked task's stack from another task (a channel handing a value to a parked
/// receiver reads and writes the receiver's entry, which lives on its stack). Without it the
/// touch itself restores the slot, through a trip to the fault thread that the toucher waits
/// out: a compacted receiver woken by a send cost its sender ≈30 µs. Sound as the fault
/// thread's restore is: under the slot's lock (invariant 2), of a parked task (a compacted
/// one is, invariant 4); its worker finds the slot restored and skips its own restore.
#[inline]
pub(crate) fn restore_if_compacted(addr: usize) {
    // A process that never compacted pays one load; the rest stays out of its callers' code.
    if COMPACTIONS.load(Ordering::Relaxed) != 0 {
        restore_if_compacted_slot(addr);
    }
}

#[inline(never)]
fn restore_if_compacted_slot(addr: usize) {
    if let Some((slot, size, _)) = region::compacted_slot_of(addr) {
        restore(slot, size);
    }
}

/// The fault thread: serves a fault at `addr` by thread `tid` (invariants 4, 5 and 8).
pub(crate) fn serve_fault(addr: usize, write_protected: bool, tid: u32, scratch: &mut Scratch) {
    let page = region::page_size();
    let at = addr / page * page;
    let Some((slot, size)) = region::slot_of(addr) else {
        // In a region but not in a carved slot: nothing lives there.
        // SAFETY: a missing page of a registered region that holds nothing.
        unsafe { uffd::fill_waiting_for_memory(at, scratch.zeros, page) };
        return;
    };
    if at == slot {
        // A guard page, which never holds a page: an overflow, in every state. Invariant 8:
        // the faulting thread stays held (nothing wakes it) until the signal interrupts its
        // fault and its handler aborts the process. Without thread ids (the marker is put
        // back at each restore, so only a marker that failed to go in lets a touch reach
        // here) the process aborts from this thread: filling the page would let the
        // overflow run on into the slot below, another task's stack.
        if !uffd::knows_faulting_threads() || !uffd::raise_fault(tid, addr) {
            eprintln!(
                "weft: fatal error: stack overflow (the guard page of the stack at {slot:#x} \
                 was touched at {addr:#x} by thread {tid}, which could not be signalled)"
            );
            std::process::abort();
        }
        return;
    }
    let index = lock_index(slot, size);
    lock(index);
    let entry = region::table_entry(slot).expect("slot outside a region");
    let image = entry.load(Ordering::Acquire);
    let mut free = false;
    if !image.is_null() {
        // SAFETY: locked; the entry is the slot's image.
        free = unsafe { restore_locked(slot, size, image, scratch) };
        add(&FAULT_RESTORES, 1);
    }
    if write_protected {
        // A write that waited on a compaction: the page is restored or missing now;
        // unprotecting wakes the writer, which retries.
        uffd::write_protect(at, page, false);
    } else {
        // Invariant 5: a missing page of a resident slot holds nothing. The stack grows
        // by what it already has above the fault, at least GROW_PAGES and at most the
        // zeros buffer: a task that runs deep takes a few trips here, not one per
        // GROW_PAGES, and holds at most twice what it touched.
        let above = (slot + size).saturating_sub(at + page) / page;
        let below = above.clamp(GROW_PAGES - 1, SCRATCH_PAGES - 1);
        let low = at.saturating_sub(below * page).max(slot + page).min(at);
        // SAFETY: zeros for missing pages only (`fill` skips present ones). Waiting for
        // memory rather than waking the faulting thread to fault again at once.
        unsafe { uffd::fill_waiting_for_memory(low, scratch.zeros, at + page - low) };
        uffd::wake(at, page);
        add(&ZERO_FILLS, 1);
    }
    unlock(index);
    if free {
        // SAFETY: unpublished by `restore_locked`.
        unsafe { image_free(image) };
        super::arena::release_emptied();
    }
}

/// Fills the top `pages` pages (1 to [`PREFILL_PAGES_MAX`], never the guard page) of a fresh
/// slot in a registered region with zeros, so that a task's first frames do not fault
/// through the fault thread (≈5–60 µs a trip here; one `UFFDIO_COPY` costs the same ≈1 µs as
/// the kernel's first touch, and ≈0.5 µs more a page). The caller says how deep: from the
/// last compacted tasks of the same spawn site (`sched/stats.rs`, `PrefillDepths`), else one
/// page. Filling four pages for every task instead took 16 KiB and four page allocations for
/// every idle task and doubled the time to start a million sleepers; without a depth to go
/// by, a deeper task's first growth fault fills [`GROW_PAGES`].
pub(crate) fn prefill(slot: usize, size: usize, pages: usize) {
    if !register_regions() || !region::registered(slot) {
        return;
    }
    let page = region::page_size();
    // Never the guard page.
    let pages = pages.clamp(1, PREFILL_PAGES_MAX).min(size / page - 1);
    WORKER_SCRATCH.with(|scratch| {
        let mut scratch = scratch.borrow_mut();
        let scratch = scratch.get_or_insert_with(Scratch::new);
        let top = slot + size;
        let mut at = top - pages * page;
        while at < top {
            let n = (top - at).min(SCRATCH_PAGES * page);
            // SAFETY: the slot is in a pool (RESIDENT, invariant 7) and holds nothing, and
            // `[at, at + n)` is in it above its guard page; `fill` leaves a present page alone.
            // A failed fill (no memory) leaves the pages to the task's first touch, which
            // the fault thread serves (invariant 5).
            let _ = unsafe { uffd::fill(at, scratch.zeros, n) };
            at += n;
        }
    });
}
