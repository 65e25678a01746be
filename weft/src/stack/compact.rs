//! Giving a parked task's stack memory back: *reclaim* (the pages below its stack pointer)
//! and *compaction* (its live bytes copied to an image, `arena.rs`, every page of its slot
//! released).
//!
//! Owns: the per-slot table of compacted images (one pointer per slot, kept next to each
//! region in `region.rs`), and the compaction of a run of slots (invariant 3). The contract
//! and the invariants below are the whole layer's, cited by the files that keep them:
//! `switch.rs` (the switch out and its calibrated margin, invariant 1), `restore.rs` (the
//! slot locks, restoring, stack growth, fork: invariants 2, 4–6, 8), `parked.rs` (each
//! parked task's record and each worker's queue, `ParkedStacks`), `mode.rs` (the process's
//! `StackMode`, the runtime's `StackPolicy`, the counters).
//!
//! ```text
//!   a parked task's slot               reclaimed               compacted
//!   ┌──────┬────────────┬──────┐  ┌──────┬────────┬──────┐  ┌──────────────────────┐
//!   │guard │ dead pages │ live │  │guard │ (none) │ live │  │ no page, no marker   │
//!   └──────┴────────────┴──────┘  └──────┴────────┴──────┘  └──────────────────────┘
//!                      ^ sp - margin                   image: [len][live bytes] ─┘
//! ```
//!
//! # The contract
//! Other threads may touch a parked task's stack at any time: weft's channel waiters live
//! there, and a scoped thread or a syscall may write into a local of a task that sleeps.
//! Every such access sees the bytes the task left and no write is lost, whatever the task's
//! state. Reclaim only drops memory below the task's stack pointer, which holds nothing live.
//! Compaction needs the kernel to hold any thread that touches a released page, in user or
//! kernel mode, until the page is filled again: userfaultfd with kernel-mode faults
//! (`StackMode::Compact`, mode.rs). Where only user-mode faults can be caught
//! (`vm.unprivileged_userfaultfd = 0` and no `CAP_SYS_PTRACE` or `/dev/userfaultfd`), a
//! `read(2)` into a compacted page would fail with EFAULT, so compaction stays off and
//! weft reclaims only (`StackMode::Reclaim`). `WEFT_STACK_COMPACTION=off` forces that.
//! Memory pressure changes nothing of this: a live page swapped out before compaction is
//! copied, its bytes brought back by the kernel's own swap-in (invariant 3c), and a restore
//! waits for memory rather than give up (invariant 4).
//! Not supported in any mode: a device writing by DMA into a parked task's stack (O_DIRECT
//! or io_uring with a buffer on the stack while the task parks): the kernel pins such pages
//! and a write-protect does not stop the device.
//!
//! Invariants (the soundness argument; code cites them):
//! 1. The stack pointer a task records in `switch_out`, minus `margin` (both switch.rs;
//!    measured once by `calibrate` for both ways this binary's switch can be compiled: with
//!    `Yielder::suspend` inlined, and through its one out-of-line copy), bounds every byte of
//!    the suspended task's stack from below: nothing below it is live while it is suspended.
//! 2. A slot's state — RESIDENT (its table entry is null) or COMPACTED (the entry points at
//!    its image) — changes only under the slot's lock. In COMPACTED state no page of the slot
//!    is present and no guard marker is installed; in RESIDENT state its live bytes are in
//!    its pages and its guard page is guarded (outside a compaction's locked section): by a
//!    marker, or, where invariant 8 holds, by the registration alone (once restored, or
//!    from the start for a slot carved after its region was registered).
//! 3. Compaction of a run of consecutive slots, whose tasks are suspended on the worker that
//!    compacts them, holds all their locks and: (a) removes their guard markers (only slots
//!    carved before their region's registration can have one); (b)
//!    write-protects the run with userfaultfd — after the ioctl returns no thread can write a
//!    present page of the run without faulting (the TLB shootdown is part of the ioctl), and
//!    a fault waits for the fault thread, which waits for the locks; (c) copies each task's
//!    live bytes into its image (a page with no page-table entry, told by `mincore` and, for
//!    the pages it calls not resident, `/proc/self/pagemap`, reads as zeros, as it would on
//!    first touch; a swapped-out page is read back by the kernel's own fault); (d) publishes
//!    the images; (e) releases every page of the run with one `MADV_DONTNEED`. No write is
//!    lost: a write before (b) is in the page that (c) copies; a write after (b) waits and,
//!    once (e) and the unlock are done, finds the slot COMPACTED, which the fault thread
//!    restores before waking it. Reads see the page or, after (e), the restored copy.
//!    (f) An image short enough to be encoded (template.rs) is published from the
//!    compacting thread's staging buffer, and once the locks are let go swapped, under its
//!    slot's lock and only where the slot still holds it, for an arena image that expands to
//!    the same bytes (`encode_staged`); a restore of a staged image leaves it where it is
//!    (it tells so under the lock), and the buffer is written again only once no slot points
//!    into it. So an image is encoded without allocating under a lock (invariant 6).
//! 4. A COMPACTED slot is restored — guard reinstalled (unless invariant 8 holds), image
//!    filled in with `UFFDIO_COPY` (atomic: a thread touching the page waits until it is
//!    full; where no memory can be charged the fill waits for some, as a page fault would,
//!    and never gives up: a RESIDENT slot's missing page would read as zeros, invariant 5),
//!    entry nulled — under its
//!    lock, by whichever comes first: its worker before resuming the task, the fault
//!    thread serving any access, or a thread about to touch the slot on purpose
//!    (restore.rs `restore_if_compacted`: a channel handing a value to the parked task). The
//!    task runs only after its worker saw RESIDENT. A restore also fills zeros below the
//!    image, down to the depth the slot had when compacted (restore.rs `RESTORE_DEPTH_MAX`):
//!    pages that were missing and hold nothing (invariant 1).
//! 5. A missing page of a RESIDENT slot holds nothing (never touched, or released below the
//!    stack pointer): the fault thread fills it and a few below it with zeros (stack growth).
//! 6. Nobody allocates or touches a registered page without an entry while holding a slot
//!    lock (a thread holding the allocator's lock may be the one waiting on a fault in that
//!    slot's shard); a present or swapped-out page faults, if at all, only in the kernel.
//! 7. A slot in a pool is RESIDENT: a task's slot is restored before the task can run, and a
//!    task returns to a pool only by running to its end.
//! 8. Where fault messages name the faulting thread (`UFFD_FEATURE_THREAD_ID`), a touch of
//!    the first page of a slot in a registered region — its guard page, which never holds a
//!    page — is an overflow in every state: the fault thread raises SIGSEGV on the faulting
//!    thread with the fault's address, as the kernel would for a marker, and the overflow
//!    handler (`overflow.rs`) reports the task and aborts. So a restore need not reinstall the
//!    marker (a `madvise` per wake, ≈0.6–1 µs of the ≈2.3 µs a restore costs here). A
//!    syscall that writes into a guard page then aborts the process instead of failing with
//!    EFAULT; a forked child, which has no registration, gets every marker back (see "fork").
//!    Slots carved once their region is registered get no marker at all: in a spawn storm
//!    installing markers and removing them again at compaction (a walk of every page-table
//!    entry of the run) was a fifth of the workers' CPU.
//!
//! # Page tables
//! A page-table page maps a 2 MiB window (8 default slots). The kernel frees it (Linux's
//! CONFIG_PT_RECLAIM) when one `MADV_DONTNEED` covers the whole window and the window holds
//! no page and no guard marker. Compaction removes the markers (invariant 2), releases runs
//! of consecutive slots at once, and releases a window again when its last slot is compacted
//! by another run. Regions are 2 MiB aligned for this.
//!
//! # Stack growth in a registered region
//! A region is registered at its first compaction (region.rs invariant 3). From then on
//! every first touch of a missing page in it goes to the fault thread (invariant 5), ≈5–60 µs
//! a trip here against ≈1.5 µs for the kernel's own fault: a fresh slot is filled before its
//! task starts as deep as the last compacted tasks of its spawn site were (restore.rs
//! `prefill`; a burst of 100K tasks each 64 KiB deep went from 6.4–6.8 s to 1.3 s, a million
//! 8 KiB deep from 14–15 s to 4.2–4.4 s), the thread fills restore.rs `GROW_PAGES` or more
//! real pages a trip (never the zero page: writing one is a TLB shootdown, see there), and
//! where compaction runs reclaim waits as long as compaction does, so that a task that wakes
//! often does not refill released pages at each wake.
//!
//! # What an idle task's bytes are
//! Measured on `examples/million` (a million tasks parked on a gate, settled), release build,
//! x86_64, 2026-12-06: 287–293 B of RSS each, plus 2 B of page tables (789 B before images
//! were stored as differences from a template, 359 B before the task cell shrank). The
//! image's live bytes were 480 when the frames in them were read with gdb at the park (each
//! frame's canonical frame address, from the slot's top down; 464 B since the task cell
//! shrank, which frame gave up its 16 B was not read again):
//!
//! | bytes | what |
//! |---|---|
//! | 16 | corosensei's initial stack words above its entry |
//! | 48 | corosensei's `coroutine_func` with the worker's task entry and `Task::run` inlined |
//! | 96 | `Cell::run`: `catch_unwind` and the user's closure inlined |
//! | 80 | the user's `Gate::wait` |
//! | 16 | `weft::task::park` → `park_current` (a return address and one push) |
//! | 80 | `park_current_task`, `park_task` and `suspend` inlined: registers, the park site |
//! | 144 | below the recorded stack pointer: the switch's calibrated margin (switch.rs) |
//!
//! The margin is the deepest write of the switch's two compiled forms (65–80 B: the
//! out-of-line `Yielder::suspend`'s return address, frame and pushes) plus 64 B of slack,
//! rounded to 16.
//!
//! Of those 58 words, a task's image differs from its template's (template.rs: an image of
//! its length from another task parked at the same gate) in 8 or 11, read by dumping them:
//! six pointers into the task's own cell (its header, its join slot; all at the two cells'
//! distance, so stored as one *shift*), a timestamp, the task's index (the closure's own
//! state), and, for a task on the other worker than the template's, three pointers into that
//! worker (at the two workers' distance: a second shift). Stored: the arena's header 8 B, the
//! encoding's head 8 B, its bitmap 8 B, one or two shifts and 2 words: 48 or 56 B, 51–56 B on
//! average (`image_bytes_per_task` of `weft::metrics`; 488 B as plain bytes). In 1 run of 3
//! the site's first image was an odd one (seven dead words holding other values); before
//! template.rs took a close template over the first that merely saved, every later image
//! paid for them (100 B a task).
//!
//! The rest is not the stack (sizes by `size_of`, capacities from the vectors' doubling):
//! the task cell, 192 B (`Header` 128 B + `JoinSlot<()>` 40 B + the closure 24 B, at
//! cell_cache's 64-byte granule); the worker's live list, a `slab::Slab<Task>`
//! entry of 16 B (≈16.8 B: each of two workers' slabs holds ≈500K at a capacity of 2^19);
//! this slot's entry in the compaction table, 8 B; and the example's own `JoinHandle` and gate
//! waiter, 8 B each (≈8.4 B each with their vectors' spare capacity).
//! 51–56 + 192 + 16.8 + 8 + 2 × 8.4 = 285–290 B against 287–293 measured.
//!
//! What is left: the cell (192 B) is two thirds of a task. `Header`'s rarely used fields (the
//! name, task-locals, a dump's capture) sit behind one pointer already; the 64-byte granule
//! keeps two tasks' atomics off one cache line, so the next step down (128 B) needs a header
//! of ≈64 B. The margin's slack (64 B of the image's live bytes) no longer costs memory: it
//! is the same in every image and lives in the template.
//!
//! # fork
//! A child process loses the userfaultfd registration and would read compacted stacks as
//! zeros. A `pthread_atfork` handler takes every slot lock before the fork (no compaction
//! is half done in the child), and the child writes every image back into its slot with
//! plain stores before it returns from `fork` (it costs a page fault per compacted task),
//! and puts a guard marker on every slot that has been compacted or was carved without one
//! (invariant 8: without the registration, a guard page without a marker would not be one):
//! a `madvise` per such slot, ≈1 s in a child of a process that compacted a million tasks.
//! The child then runs without compaction.
//!
//! May call: `uffd.rs`, `region.rs`, `arena.rs`, `restore.rs` (the locks), `switch.rs`
//! (`copy_stack_bytes`), `template.rs` (encoding an image), `mode.rs` (counters), libc. Called by: `parked.rs` (a worker's
//! stack step).
//!
//! Why not the alternatives, measured here: guard markers with a SIGSEGV handler are not
//! atomic (a third thread can fault in a zero page between the marker's removal and the copy)
//! and make syscalls fail with EFAULT; `UFFDIO_MOVE` per slot is atomic too but flushes the
//! TLB once per page: ≈1.6 µs a slot when the other CPU idles, ≈21 µs when another thread of
//! the process runs there, against one write-protect and one release per run of slots.

use std::sync::atomic::Ordering;

use std::cell::Cell;

use super::arena::{
    alloc as image_alloc, depth as image_depth, free as image_free, parts as image_parts,
    set_depth as image_set_depth, set_encoded as image_set_encoded, stage as image_stage, HEADER,
};
use super::mode::{
    add, sub, COMPACTED_LIVE_BYTES, COMPACTIONS, COMPACTION_RELEASED_BYTES, IMAGE_BYTES,
};
use super::parked::{ParkedStack, COMPACTED};
use super::restore::{lock, lock_index, unlock, RESTORE_DEPTH_MAX};
use super::switch::copy_stack_bytes;
use super::template::{self, TEMPLATE_LEN_MAX};
use super::{region, uffd};

/// Largest live stack that is compacted (a bigger one is only reclaimed): its restore would
/// cost more than a few microseconds.
pub(super) const MAX_COMPACT: usize = 64 << 10;

/// A task to compact.
pub(super) struct Candidate<'a> {
    pub(super) stack: &'a ParkedStack,
    pub(super) slot: usize,
    pub(super) size: usize,
    pub(super) lo: usize,
    pub(super) key: usize,
}

impl Candidate<'_> {
    /// Its live bytes: from `lo` to the top of its slot, the image's length.
    fn live(&self) -> usize {
        self.slot + self.size - self.lo
    }
}

/// Compacts `candidates`, grouped into runs of consecutive slots; `observe` as in
/// [`ParkedStacks::step`].
pub(super) fn compact_all(candidates: &mut [Candidate<'_>], mut observe: impl FnMut(usize, usize)) {
    candidates.sort_unstable_by_key(|c| c.slot);
    let mut rest = &candidates[..];
    while !rest.is_empty() {
        let mut n = 1;
        while n < rest.len()
            && rest[n].size == rest[0].size
            && rest[n].slot == rest[n - 1].slot + rest[0].size
        {
            n += 1;
        }
        compact_run(&rest[..n], &mut observe);
        rest = &rest[n..];
    }
}

/// Marks in `resident` (one byte per page from `start`, as `mincore` fills it) the pages of
/// the runs' live bytes that `mincore` calls not resident but that are swapped out, whose
/// bytes 3c must copy, not take for zeros: a page swapped out under memory pressure has
/// left the swap cache, which `mincore` looks in, at once with zswap or zram. Only such pages
/// are looked up in pagemap, a `pread` each: a live page is otherwise resident (the task
/// ran there). False where pagemap cannot be read: the run is then not compacted.
fn swapped_live_pages_marked(
    run: &[Candidate<'_>],
    start: usize,
    size: usize,
    resident: &mut [u8],
) -> bool {
    let page = region::page_size();
    for c in run {
        let top = c.slot + size;
        for at in (c.lo / page * page..top).step_by(page) {
            let bit = &mut resident[(at - start) / page];
            if *bit & 1 == 0 {
                match region::page_has_entry(at) {
                    Some(true) => *bit |= 1,
                    Some(false) => {}
                    None => return false,
                }
            }
        }
    }
    true
}

/// Compacts a run of consecutive slots (invariant 3).
fn compact_run(run: &[Candidate<'_>], observe: &mut impl FnMut(usize, usize)) {
    let page = region::page_size();
    let size = run[0].size;
    let start = run[0].slot;
    let end = run[run.len() - 1].slot + size;
    let len = end - start;
    if !region::ensure_registered(start) {
        return; // region.rs invariant 3: no compaction without the registration
    }
    // Everything allocated before the locks (invariant 6). An image short enough to be
    // encoded (template.rs) is staged first: published from this thread's staging buffer,
    // then swapped for its encoding once the locks are let go (`encode_staged`).
    let staged_bytes: usize = run
        .iter()
        .map(Candidate::live)
        .filter(|&n| n <= TEMPLATE_LEN_MAX)
        .map(|n| HEADER + n)
        .sum();
    let mut staging = staging_buffer(staged_bytes);
    let images: Vec<*mut u8> = run
        .iter()
        .map(|c| {
            let n = c.live();
            // mode.rs `Counters::image_bytes` counts no padding.
            debug_assert_eq!(n % 16, 0, "an image of odd length");
            if n <= TEMPLATE_LEN_MAX {
                // SAFETY: `staging_buffer` holds `staged_bytes`, 8-aligned; each staged image
                // takes its own `HEADER + n` of them.
                unsafe {
                    let image = image_stage(staging, n);
                    staging = staging.add(HEADER + n);
                    image
                }
            } else {
                image_alloc(n)
            }
        })
        .collect();
    let mut resident = vec![0u8; len / page];
    let starts: Vec<usize> = run.iter().map(|c| c.slot).collect();
    let mut locks: Vec<usize> = starts.iter().map(|&s| lock_index(s, size)).collect();
    locks.sort_unstable();
    locks.dedup();
    for &index in &locks {
        lock(index);
    }
    // 3a, 3b. Only slots carved before the region was registered may carry a marker
    // (region.rs invariant 2).
    let marked = starts.partition_point(|&s| region::may_have_marker(s));
    let ok = region::remove_guards(&starts[..marked]) && uffd::write_protect(start, len, true);
    let ok = ok
        && region::resident_pages(start, len, &mut resident)
        && swapped_live_pages_marked(run, start, size, &mut resident);
    if !ok {
        uffd::write_protect(start, len, false);
        region::install_guards(&starts[..marked]).ok();
        for &index in &locks {
            unlock(index);
        }
        for (c, image) in run.iter().zip(images) {
            if c.live() > TEMPLATE_LEN_MAX {
                // SAFETY: never published.
                unsafe { image_free(image) };
            }
        }
        return;
    }
    let mut released = 0u64;
    let mut live_bytes = 0u64;
    for (c, &image) in run.iter().zip(&images) {
        let top = c.slot + size;
        // SAFETY: allocated above for this candidate.
        let (n, bytes) = unsafe { image_parts(image) };
        // 3c: page by page; a page without an entry reads as zeros.
        let mut at = c.lo;
        while at < top {
            let page_end = (at / page + 1) * page;
            let to = page_end.min(top);
            let offset = at - c.lo;
            // SAFETY: `[at, to)` is in the slot; the page has an entry per `mincore` and
            // pagemap, present or swapped out (and keeps one: the slot is locked and
            // write-protected, invariant 3; a swap-in is the kernel's own fault), or it has
            // none and we write zeros; the image holds `n` bytes from `c.lo`.
            unsafe {
                if resident[(at - start) / page] & 1 != 0 {
                    copy_stack_bytes(bytes.add(offset), at, to - at);
                } else {
                    std::ptr::write_bytes(bytes.add(offset), 0, to - at);
                }
            }
            at = to;
        }
        let slot_pages = &resident[(c.slot - start) / page..(top - start) / page];
        released += slot_pages.iter().filter(|&&r| r & 1 != 0).count() as u64 * page as u64;
        if let Some(lowest) = slot_pages.iter().position(|&r| r & 1 != 0) {
            let depth = slot_pages.len() - lowest;
            // SAFETY: allocated above for this candidate, not yet published.
            unsafe { image_set_depth(image, depth.min(RESTORE_DEPTH_MAX)) };
            observe(c.key, depth);
        }
        live_bytes += n as u64;
        // 3d.
        let entry = region::table_entry(c.slot).expect("slot in a registered region");
        entry.store(image, Ordering::Release);
        c.stack.flags.set(c.stack.flags.get() | COMPACTED);
    }
    // 3e.
    region::release_range(start, len);
    // Counted before the unlocks: a restore, which takes a slot's lock first, subtracts
    // what this adds, and must never find the counters without it (they would wrap).
    add(&COMPACTIONS, run.len() as u64);
    add(&COMPACTED_LIVE_BYTES, live_bytes);
    add(&IMAGE_BYTES, live_bytes + (HEADER * run.len()) as u64);
    add(&COMPACTION_RELEASED_BYTES, released);
    for &index in &locks {
        unlock(index);
    }
    if size < WINDOW {
        release_window_if_empty(start / WINDOW * WINDOW, size);
        release_window_if_empty((end - 1) / WINDOW * WINDOW, size);
    }
    encode_staged(run, &images, size);
}

thread_local! {
    /// This thread's staging buffer (`compact_run`): its start and its length in bytes.
    static STAGING: Cell<(*mut u64, usize)> = const { Cell::new((std::ptr::null_mut(), 0)) };
}

/// This thread's staging buffer, at least `bytes` long; called before the locks (it may
/// allocate, invariant 6). No image is staged in it between two runs (`encode_staged`
/// unstages every one), but an outgrown buffer is leaked rather than freed: were a run ever
/// to stop between its publication and its unstaging, its slots would still point there.
fn staging_buffer(bytes: usize) -> *mut u8 {
    STAGING.with(|staging| {
        let (at, len) = staging.get();
        if len >= bytes {
            return at as *mut u8;
        }
        let len = bytes.next_power_of_two().max(16 << 10);
        let at = Box::leak(vec![0u64; len / 8].into_boxed_slice()).as_mut_ptr();
        staging.set((at, len));
        at as *mut u8
    })
}

/// Swaps every staged image of `run` (`images`, as published) for an arena image: its
/// encoding against a template (template.rs) where that is smaller, its plain bytes
/// otherwise. Called with no lock held (it allocates, invariant 6); each swap under the slot's
/// lock, and only where the slot still holds the staged image: a slot restored meanwhile (by
/// the fault thread or another task's `restore_if_compacted`) has nothing to swap, and only
/// this worker, busy here, can compact the slot again, so a staged image is never mistaken
/// for a new one. After it, no slot points into the staging buffer.
fn encode_staged(run: &[Candidate<'_>], images: &[*mut u8], size: usize) {
    let mut encoded: Vec<u64> = Vec::new();
    for (c, &staged) in run.iter().zip(images) {
        let n = c.live();
        if n > TEMPLATE_LEN_MAX {
            continue;
        }
        // SAFETY: staged by `compact_run` with `n` live bytes, 8-aligned; only this thread
        // writes the staging buffer, and not before every image in it is unstaged.
        let raw = unsafe {
            let (_, bytes) = image_parts(staged);
            std::slice::from_raw_parts(bytes as *const u64, n / 8)
        };
        let image = if template::encode(raw, c.slot, size, &mut encoded) {
            let image = image_alloc(encoded.len() * 8);
            // SAFETY: allocated above with room for the encoding; not published yet.
            unsafe {
                let (_, bytes) = image_parts(image);
                std::ptr::copy_nonoverlapping(
                    encoded.as_ptr() as *const u8,
                    bytes,
                    encoded.len() * 8,
                );
                image_set_encoded(image);
            }
            image
        } else {
            let image = image_alloc(n);
            // SAFETY: as above, `n` bytes.
            unsafe {
                let (_, bytes) = image_parts(image);
                std::ptr::copy_nonoverlapping(raw.as_ptr() as *const u8, bytes, n);
            }
            image
        };
        // SAFETY: from `image_alloc`.
        let (len, _) = unsafe { image_parts(image) };
        let index = lock_index(c.slot, size);
        lock(index);
        let entry = region::table_entry(c.slot).expect("slot in a registered region");
        let swapped = entry.load(Ordering::Relaxed) == staged;
        if swapped {
            // SAFETY: `image` is not published yet; the staged one is the slot's (locked).
            unsafe { image_set_depth(image, image_depth(staged)) };
            // Release: the new image's bytes before its publication, as invariant 3d.
            entry.store(image, Ordering::Release);
            sub(&IMAGE_BYTES, (n - len) as u64);
        }
        unlock(index);
        if !swapped {
            // SAFETY: never published.
            unsafe { image_free(image) };
        }
    }
}

/// The span of one page-table page.
const WINDOW: usize = 2 << 20;

/// Releases the 2 MiB window at `window` again if every slot in it is compacted, so that the
/// kernel frees its page-table page (see "Page tables").
fn release_window_if_empty(window: usize, size: usize) {
    let slots: Vec<usize> = (0..WINDOW / size).map(|i| window + i * size).collect();
    if slots.iter().any(|&s| region::table_entry(s).is_none()) {
        return;
    }
    let mut locks: Vec<usize> = slots.iter().map(|&s| lock_index(s, size)).collect();
    locks.sort_unstable();
    locks.dedup();
    for &index in &locks {
        lock(index);
    }
    let empty = slots
        .iter()
        .all(|&s| region::table_entry(s).is_some_and(|e| !e.load(Ordering::Relaxed).is_null()));
    if empty {
        // Invariant 2: every slot is COMPACTED and locked, so no page of the window is
        // present and none can be filled meanwhile.
        region::release_range(window, WINDOW);
    }
    for &index in &locks {
        unlock(index);
    }
}
