//! Memory for the images of compacted stacks (`compact.rs`) and for task cells
//! (`cell_cache.rs`): two arenas, each packing its blocks end to end in runs that each thread
//! carves from a few large mappings, with a count per page, so that a page goes back to the
//! kernel as soon as the last block on it has been freed. The invariants below say "image";
//! a task cell is a block of the other arena, without a header.
//!
//! Owns: the two arenas' segments, page and run counts and frontiers (recycled runs
//! included), and each thread's current run in each and its list of emptied pages.
//!
//! ```text
//!   segment (64 MiB, MAP_NORESERVE): runs of 64 KiB, one thread carving each
//!   ┌─────────────── run of thread A ───────────────┬──── run of thread B ────┬───
//!   │[hdr|image][hdr|image][hdr|  image  ][hdr|im...│[hdr|image][...          │
//!   └───────────────────────────────────────────────┴─────────────────────────┴───
//!    page counts:  3       2         2        1+hold  2          1+hold
//! ```
//!
//! Invariants:
//! 1. A page's count is the number of live images that overlap it, plus one while it is the
//!    page a thread's run will carve its next image from (the *hold*).
//! 2. A run is carved front to back only, by its one thread, and is not carved again once
//!    left until it is recycled (invariant 4): a page behind every cursor gets no new image.
//!    So a page whose count falls to zero holds nothing live until then; exactly one thread —
//!    the one whose decrement reached zero — releases it.
//! 3. An image is written by the thread that allocated it before `compact.rs` publishes it
//!    (its invariant 3d, a Release store) and read by whoever restores it before [`free`];
//!    the decrement in `free` is AcqRel, so the reads are done before any release of the page.
//! 4. A run's count is the number of images that start in it, plus one while it is a
//!    thread's current run. A thread that empties pages puts the count of their images' run
//!    only after it has released those pages (`Cursor::pending_runs`), so the put that brings
//!    a run's count to zero finds every page of the run empty and released; that thread
//!    recycles the run (`Frontier::free`), and only then may it be carved again. Without it,
//!    a server whose tasks are compacted and restored over and over would carve address space
//!    without end and abort when the segments ran out.
//!
//! May call: `region.rs`, `page_count.rs`, libc. Called by: `compact.rs`, `cell_cache.rs`
//! (`alloc_cell`, `free_cell`: blocks of a size class, found in their segment by address).
//!
//! Why not the global allocator, measured here (`examples/million.rs`): compacting a million
//! parked tasks spent ≈13 % of its time growing glibc's per-thread heaps, an `mprotect` per
//! page under the process's mmap lock, which also stalled the other worker's userfaultfd
//! ioctls; and an image freed by a restore stayed in malloc's free lists, so an echo server
//! whose 10,000 connections had all just woken kept ≈800 B per connection of freed images.
//! Here an allocation is a pointer bump, and memory comes back page by page. The price: a page
//! is held by its longest-lived image (at worst a page per compacted task, what the task's
//! stack page cost before compaction). Task cells came from glibc's malloc for the same
//! reason and with the same cost: a million tasks spawned by one task made its thread's heap
//! grow an `mprotect` at a time, ≈64,000 of them under the mmap lock, while the other worker
//! compacted; from their own arena the million spawned and parked 19–27 % faster, and each
//! cell saves malloc's 16-byte chunk header.

use std::cell::RefCell;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::page_count::PageCount;
use super::region;

/// Bytes of one segment: one mapping, 64 MiB of address space.
const SEGMENT_BYTES: usize = 64 << 20;
/// Segments at most (256 GiB of images); an allocation past them aborts like an OOM.
const MAX_SEGMENTS: usize = 4096;
const _: () = assert!(MAX_SEGMENTS <= 1 << SEGMENT_BITS);
/// Bytes of the run a thread carves its images from.
const RUN_BYTES: usize = 64 << 10;
/// An image larger than this gets a run of its own, whole pages.
const LARGE: usize = RUN_BYTES / 4;
/// Emptied pages a thread collects before it releases them in one call. A call costs ≈30 µs
/// plus ≈0.9 µs a page here, all of it a stall of the worker making it: 512 pages held a
/// worker ≈0.5 ms, a million sleepers waking over 4 s made ≈330 such calls, and the wakes'
/// 99th percentile lateness was that half millisecond. 128 pages hold it ≈0.15 ms, no more
/// than a step of [`super::TRIM_BATCH`] warm slots.
const RELEASE_BATCH: usize = 128;
/// A sleep at least this long releases the emptied pages (`release_emptied_before_sleep`).
const RELEASE_SLEEP: Duration = Duration::from_millis(1);
/// Emptied pages wait at most about this long for a long enough sleep.
const RELEASE_AGE: Duration = Duration::from_millis(100);
/// Bytes before an image's contents: its length (4 bytes, the top bit telling an encoded
/// image, [`set_encoded`]), then its segment (3 bytes) and the depth its slot had
/// ([`set_depth`], 1 byte) in one 4-byte word.
pub(super) const HEADER: usize = 8;
/// The bit of the header's first word that marks contents encoded (`template.rs`).
const ENCODED: u32 = 1 << 31;
/// The bit of the header's first word that marks an image in its compactor's staging buffer
/// (`compact.rs`, [`stage`]), outside the arena: never freed by a restore.
const STAGED: u32 = 1 << 30;
/// The length's bits of the header's first word.
const LEN_MASK: u32 = STAGED - 1;
/// The segment's bits of the header's second word ([`MAX_SEGMENTS`] fits).
const SEGMENT_BITS: u32 = 24;
const SEGMENT_MASK: u32 = (1 << SEGMENT_BITS) - 1;

struct Segment {
    base: usize,
    counts: Box<[PageCount]>,
    /// A count per [`RUN_BYTES`] of the segment, used at each run's first (invariant 4).
    runs: Box<[PageCount]>,
}

#[allow(clippy::declare_interior_mutable_const)]
const NO_SEGMENT: AtomicPtr<Segment> = AtomicPtr::new(ptr::null_mut());
/// One arena: its segments and its frontier.
struct Arena {
    /// Segments by index; an entry is set once, before any block in it exists, never freed.
    segments: [AtomicPtr<Segment>; MAX_SEGMENTS],
    frontier: Mutex<Frontier>,
    /// What its blocks are, for a fatal error.
    what: &'static str,
}

impl Arena {
    const fn new(what: &'static str) -> Arena {
        Arena {
            segments: [NO_SEGMENT; MAX_SEGMENTS],
            frontier: Mutex::new(Frontier {
                next: None,
                free: Vec::new(),
            }),
            what,
        }
    }
}

/// The images of compacted stacks.
static IMAGES: Arena = Arena::new("compacted stacks");
/// Task cells, for `cell_cache.rs` ([`alloc_cell`]).
static CELLS: Arena = Arena::new("task cells");

/// Where runs come from.
struct Frontier {
    /// Where the next new run starts: (segment index, offset in it); `None` before the first.
    next: Option<(u32, usize)>,
    /// Recycled runs (invariant 4) as (segment index, address), by length: entry `u - 1`
    /// holds runs of `u` × [`RUN_BYTES`].
    free: Vec<Vec<(u32, usize)>>,
}

fn segment(arena: &'static Arena, index: u32) -> &'static Segment {
    let segment = arena.segments[index as usize].load(Ordering::Acquire);
    assert!(!segment.is_null(), "a block in an unknown segment");
    // SAFETY: set once to a leaked Box, never freed.
    unsafe { &*segment }
}

/// Takes a run of `units` × [`RUN_BYTES`] (at most a segment): a recycled one if there is
/// one of that length, else the frontier's next.
fn take_run(arena: &'static Arena, units: usize) -> (u32, usize) {
    let len = units * RUN_BYTES;
    let mut frontier = arena.frontier.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(run) = frontier.free.get_mut(units - 1).and_then(Vec::pop) {
        return run;
    }
    let (index, offset) = match frontier.next {
        Some((index, offset)) if offset + len <= SEGMENT_BYTES => (index, offset),
        previous => {
            let index = previous.map_or(0, |(index, _)| index + 1);
            if index as usize >= MAX_SEGMENTS {
                eprintln!("weft: fatal error: out of address space for {}", arena.what);
                std::process::abort();
            }
            let Some(base) = region::map_anonymous(SEGMENT_BYTES) else {
                eprintln!("weft: fatal error: cannot map memory for {}", arena.what);
                std::process::abort();
            };
            let pages = SEGMENT_BYTES / region::page_size();
            let segment = Box::new(Segment {
                base: base as usize,
                counts: (0..pages).map(|_| PageCount::default()).collect(),
                runs: (0..SEGMENT_BYTES / RUN_BYTES)
                    .map(|_| PageCount::default())
                    .collect(),
            });
            arena.segments[index as usize].store(Box::into_raw(segment), Ordering::Release);
            (index, 0)
        }
    };
    frontier.next = Some((index, offset + len));
    (index, segment(arena, index).base + offset)
}

/// The length in [`RUN_BYTES`] units of the run a block of `need` bytes lies in: a large one
/// has a run of its own, the others share one-unit runs.
fn run_units(need: usize) -> usize {
    if need > LARGE {
        need.div_ceil(RUN_BYTES)
    } else {
        1
    }
}

/// The count of the run that `addr` (an image's start) lies in (invariant 4).
fn run_count(segment: &Segment, addr: usize) -> &PageCount {
    &segment.runs[(addr - segment.base) / RUN_BYTES]
}

/// One count less on the run of the image at `addr`; the put that leaves it at zero recycles
/// it (invariant 4: its pages are all empty and released by then).
fn put_run(arena: &'static Arena, index: u32, addr: usize, units: usize) {
    let segment = segment(arena, index);
    if run_count(segment, addr).put() {
        let start = segment.base + (addr - segment.base) / RUN_BYTES * RUN_BYTES;
        let mut frontier = arena.frontier.lock().unwrap_or_else(|e| e.into_inner());
        if frontier.free.len() < units {
            frontier.free.resize_with(units, Vec::new);
        }
        frontier.free[units - 1].push((index, start));
    }
}

/// This thread's run in one arena, and its emptied pages.
struct Cursor {
    arena: &'static Arena,
    segment: u32,
    at: usize,
    end: usize,
    /// The held page (invariant 1), 0 for none.
    held: usize,
    emptied: Vec<(usize, usize)>,
    /// When `emptied` last went from empty to not: how long its oldest page has waited.
    emptied_since: Option<Instant>,
    /// Run counts to put once `emptied` is released (invariant 4): (segment index, address
    /// in the run, its length in units).
    pending_runs: Vec<(u32, usize, usize)>,
}

impl Cursor {
    const fn new(arena: &'static Arena) -> Cursor {
        Cursor {
            arena,
            segment: 0,
            at: 0,
            end: 0,
            held: 0,
            emptied: Vec::new(),
            emptied_since: None,
            pending_runs: Vec::new(),
        }
    }

    /// Lets go of the current run, if any: its held page, then its run count (invariant 4).
    fn leave_run(&mut self) {
        if self.end == 0 {
            return;
        }
        let (segment, run) = (self.segment, self.end - RUN_BYTES);
        let mut emptied = false;
        if self.held != 0 {
            let held = self.held;
            self.held = 0;
            emptied = unhold(self.arena, segment, held, &mut self.emptied);
        }
        self.at = 0;
        self.end = 0;
        self.put_run_after_release(segment, run, 1, emptied);
    }

    /// Puts a run count now, or after the next release when the caller emptied pages of it.
    fn put_run_after_release(&mut self, segment: u32, addr: usize, units: usize, emptied: bool) {
        if emptied {
            self.pending_runs.push((segment, addr, units));
        } else {
            put_run(self.arena, segment, addr, units);
        }
    }

    /// Releases the emptied pages, then puts the run counts that waited for it.
    fn release(&mut self) {
        release(&mut self.emptied);
        // Drained, not taken: the vector keeps its room, so that the next batch's pushes do
        // not realloc on the restore path (see `free_range`).
        let arena = self.arena;
        for (segment, addr, units) in self.pending_runs.drain(..) {
            put_run(arena, segment, addr, units);
        }
    }
}

impl Drop for Cursor {
    fn drop(&mut self) {
        self.leave_run();
        self.release();
    }
}

thread_local! {
    static CURSOR: RefCell<Cursor> = const { RefCell::new(Cursor::new(&IMAGES)) };
    static CELL_CURSOR: RefCell<Cursor> = const { RefCell::new(Cursor::new(&CELLS)) };
}

fn count(segment: &Segment, page_addr: usize) -> &PageCount {
    &segment.counts[(page_addr - segment.base) / region::page_size()]
}

/// The pages `[start, end)` overlaps, by address.
fn pages(start: usize, end: usize) -> impl Iterator<Item = usize> {
    let page = region::page_size();
    (start / page * page..end).step_by(page)
}

/// One count less for each page of `[start, end)`; pages that reach zero go to `emptied`.
/// True if any did.
fn put(
    arena: &'static Arena,
    index: u32,
    start: usize,
    end: usize,
    emptied: &mut Vec<(usize, usize)>,
) -> bool {
    let segment = segment(arena, index);
    let page = region::page_size();
    let mut any = false;
    for at in pages(start, end) {
        // The reads of whoever freed before us are done before the release (3).
        if count(segment, at).put() {
            any = true;
            match emptied.last_mut() {
                Some((start, len)) if *start + *len == at => *len += page,
                _ => emptied.push((at, page)),
            }
        }
    }
    any
}

fn unhold(
    arena: &'static Arena,
    index: u32,
    page_addr: usize,
    emptied: &mut Vec<(usize, usize)>,
) -> bool {
    put(arena, index, page_addr, page_addr + 1, emptied)
}

fn release(emptied: &mut Vec<(usize, usize)>) {
    if !emptied.is_empty() {
        // SAFETY: every page's count reached zero: nothing live is there or will be (2).
        unsafe { region::release_ranges(emptied) };
        emptied.clear();
    }
}

/// Memory for an image of `len` bytes: returns the image, whose contents start
/// [`HEADER`] bytes in (see [`parts`]).
pub(crate) fn alloc(len: usize) -> *mut u8 {
    let need = (HEADER + len).next_multiple_of(8);
    let (index, at) = if need > LARGE {
        // A run of its own: one count on each of its pages and on the run, no hold.
        let (index, start) = take_run(&IMAGES, run_units(need));
        let segment = segment(&IMAGES, index);
        run_count(segment, start).take();
        for at in pages(start, start + need) {
            count(segment, at).take();
        }
        (index, start)
    } else {
        CURSOR.with(|cursor| carve(&mut cursor.borrow_mut(), need))
    };
    let image = at as *mut u8;
    // SAFETY: `[at, at + need)` is ours alone (invariant 2), in a mapped segment, 8-aligned.
    unsafe {
        let len = u32::try_from(len).ok().filter(|&l| l & !LEN_MASK == 0);
        (image as *mut u32).write(len.expect("stack image size"));
        (image.add(4) as *mut u32).write(index);
    }
    image
}

/// Carves `need` bytes from this thread's run, taking a new run when it is full.
fn carve(cursor: &mut Cursor, need: usize) -> (u32, usize) {
    if cursor.at + need > cursor.end {
        cursor.leave_run();
        let (index, start) = take_run(cursor.arena, 1);
        cursor.segment = index;
        cursor.at = start;
        cursor.end = start + RUN_BYTES;
        let segment = segment(cursor.arena, index);
        run_count(segment, start).take();
        count(segment, start).take();
        cursor.held = start;
    }
    let segment = segment(cursor.arena, cursor.segment);
    let start = cursor.at;
    let end = start + need;
    run_count(segment, start).take();
    for at in pages(start, end) {
        count(segment, at).take();
    }
    cursor.at = end;
    let page = region::page_size();
    let next = if end < cursor.end {
        end / page * page
    } else {
        0
    };
    if next != cursor.held {
        // The image just carved overlaps the old held page, so letting go of the hold never
        // empties it here.
        if next != 0 {
            count(segment, next).take();
        }
        let old = cursor.held;
        cursor.held = next;
        if old != 0 {
            let emptied = count(segment, old).put();
            debug_assert!(!emptied, "a hold let go of under the image just carved");
        }
    }
    (cursor.segment, start)
}

/// The length and contents of an image.
///
/// # Safety
/// `image` came from [`alloc`] and has not been freed.
pub(crate) unsafe fn parts(image: *mut u8) -> (usize, *mut u8) {
    // SAFETY: the caller's contract; the header is the first 8 bytes.
    unsafe {
        (
            ((image as *const u32).read() & LEN_MASK) as usize,
            image.add(HEADER),
        )
    }
}

/// Marks an image's contents as encoded against a template (`template.rs`), not its live
/// bytes as they are.
///
/// # Safety
/// As [`set_depth`].
pub(crate) unsafe fn set_encoded(image: *mut u8) {
    // SAFETY: the caller's contract; the first header word.
    unsafe { (image as *mut u32).write((image as *const u32).read() | ENCODED) }
}

/// Makes an image of `len` bytes at `at`, [`HEADER`]` + len` bytes of a compactor's staging
/// buffer (8-aligned), not of the arena: read as any image, never given to [`free`].
///
/// # Safety
/// `[at, at + HEADER + len)` is the caller's to write, 8-aligned.
pub(crate) unsafe fn stage(at: *mut u8, len: usize) -> *mut u8 {
    let len = u32::try_from(len).ok().filter(|&l| l & !LEN_MASK == 0);
    // SAFETY: the caller's contract.
    unsafe {
        (at as *mut u32).write(len.expect("stack image size") | STAGED);
        (at.add(4) as *mut u32).write(0);
    }
    at
}

/// Whether the image is in a staging buffer ([`stage`]).
///
/// # Safety
/// As [`parts`].
pub(crate) unsafe fn staged(image: *mut u8) -> bool {
    // SAFETY: the caller's contract; the first header word.
    unsafe { (image as *const u32).read() & STAGED != 0 }
}

/// Whether [`set_encoded`] marked the image.
///
/// # Safety
/// As [`parts`].
pub(crate) unsafe fn encoded(image: *mut u8) -> bool {
    // SAFETY: the caller's contract; the first header word.
    unsafe { (image as *const u32).read() & ENCODED != 0 }
}

/// Records in an image's header how deep, in pages (at most 255), its slot was resident when
/// it was compacted: how deep a restore fills it (restore.rs `RESTORE_DEPTH_MAX`).
///
/// # Safety
/// As [`parts`], and the image is not published yet (its writer is the only one to touch it).
pub(crate) unsafe fn set_depth(image: *mut u8, pages: usize) {
    // SAFETY: the caller's contract; the second header word.
    unsafe {
        let word = image.add(4) as *mut u32;
        let segment = word.read() & SEGMENT_MASK;
        word.write(segment | (pages.min(255) as u32) << SEGMENT_BITS);
    }
}

/// The depth [`set_depth`] recorded, 0 if none.
///
/// # Safety
/// As [`parts`].
pub(crate) unsafe fn depth(image: *mut u8) -> usize {
    // SAFETY: the caller's contract; the second header word.
    unsafe { ((image.add(4) as *const u32).read() >> SEGMENT_BITS) as usize }
}

/// Frees an image; a page left without images goes back to the kernel (in batches).
///
/// # Safety
/// As [`parts`]; the image is not used afterwards.
pub(crate) unsafe fn free(image: *mut u8) {
    debug_assert!(
        // SAFETY: the caller's contract.
        !unsafe { staged(image) },
        "a staged image given to the arena"
    );
    // SAFETY: the caller's contract.
    let (len, index) = unsafe {
        (
            ((image as *const u32).read() & LEN_MASK) as usize,
            (image.add(4) as *const u32).read() & SEGMENT_MASK,
        )
    };
    let start = image as usize;
    let need = (HEADER + len).next_multiple_of(8);
    free_range(
        &IMAGES,
        &CURSOR,
        index,
        start,
        start + need,
        run_units(need),
    );
}

/// Gives back `[start, end)`, a block of segment `index` of `arena` that starts a run of
/// `units` or lies in a one-unit run: one count less on its pages and its run (invariant 4),
/// through this thread's cursor of that arena, `key`.
fn free_range(
    arena: &'static Arena,
    key: &'static std::thread::LocalKey<RefCell<Cursor>>,
    index: u32,
    start: usize,
    end: usize,
    units: usize,
) {
    let freed = key.try_with(|cursor| {
        let Ok(mut cursor) = cursor.try_borrow_mut() else {
            return false;
        };
        debug_assert!(
            std::ptr::eq(cursor.arena, arena),
            "free_range: the cursor belongs to another arena"
        );
        if cursor.emptied.capacity() == 0 {
            // A whole batch's room at once: growing it by doubling mallocs on the restore
            // path, and a malloc after a burst of exits can stall for milliseconds (glibc
            // sorts every chunk they freed; region.rs, `process_madvise_ranges`).
            cursor.emptied.reserve_exact(2 * RELEASE_BATCH);
            cursor.pending_runs.reserve_exact(2 * RELEASE_BATCH);
        }
        let was_empty = cursor.emptied.is_empty();
        let emptied = put(arena, index, start, end, &mut cursor.emptied);
        cursor.put_run_after_release(index, start, units, emptied);
        if was_empty && !cursor.emptied.is_empty() {
            cursor.emptied_since = Some(Instant::now());
        }
        if cursor.emptied.len() >= RELEASE_BATCH {
            cursor.release();
        }
        true
    });
    if freed == Ok(true) {
        return;
    }
    // This thread's cursor is gone (it is exiting) or busy: release at once.
    let mut emptied = Vec::new();
    put(arena, index, start, end, &mut emptied);
    release(&mut emptied);
    put_run(arena, index, start, units);
}

/// A block of `size` bytes (a multiple of 64, at most [`LARGE`]) for a task cell: 64-aligned,
/// carved from this thread's run of the cell arena. Give it back with [`free_cell`].
pub(crate) fn alloc_cell(size: usize) -> NonNull<u8> {
    debug_assert!(size.is_multiple_of(64) && size > 0 && size <= LARGE);
    let carved = CELL_CURSOR
        .try_with(|cursor| {
            let mut cursor = cursor.try_borrow_mut().ok()?;
            Some(carve(&mut cursor, size))
        })
        .ok()
        .flatten();
    let (_, at) = carved.unwrap_or_else(|| {
        // This thread's cursor is gone or busy: a run for this block alone, left at once
        // (the block keeps it counted).
        let mut cursor = Cursor::new(&CELLS);
        carve(&mut cursor, size)
    });
    match NonNull::new(at as *mut u8) {
        Some(block) => block,
        None => unreachable!("a segment is never at address 0"),
    }
}

/// Gives back a block from [`alloc_cell`].
///
/// # Safety
/// `block` came from `alloc_cell(size)` with this `size` and is not used afterwards.
pub(crate) unsafe fn free_cell(block: NonNull<u8>, size: usize) {
    let start = block.as_ptr() as usize;
    let index = segment_containing(&CELLS, start);
    free_range(
        &CELLS,
        &CELL_CURSOR,
        index,
        start,
        start + size,
        run_units(size),
    );
}

/// Pulls into the cache the counts [`free`] of the image at `image` will take one from (its
/// first page's and its run's; `compact.rs`, a task about to be restored), found from its
/// address alone: the image itself may be freed meanwhile. Only a hint.
pub(crate) fn prefetch_free(image: *const u8) {
    let addr = image as usize;
    if let Some((_, segment)) = find_segment(&IMAGES, addr) {
        region::prefetch_line(ptr::from_ref(count(segment, addr)).cast());
        region::prefetch_line(ptr::from_ref(run_count(segment, addr)).cast());
    }
}

/// `arena`'s segment that holds `addr`, with its index; `None` if none does.
fn find_segment(arena: &'static Arena, addr: usize) -> Option<(u32, &'static Segment)> {
    for (index, entry) in arena.segments.iter().enumerate() {
        let segment = entry.load(Ordering::Acquire);
        if segment.is_null() {
            return None; // segments are set in order
        }
        // SAFETY: set once to a leaked Box, never freed.
        let segment = unsafe { &*segment };
        if (segment.base..segment.base + SEGMENT_BYTES).contains(&addr) {
            return Some((index as u32, segment));
        }
    }
    None
}

/// The index of `arena`'s segment that holds `addr`, which one does.
fn segment_containing(arena: &'static Arena, addr: usize) -> u32 {
    match find_segment(arena, addr) {
        Some((index, _)) => index,
        None => unreachable!("a block outside its arena"),
    }
}

/// Releases the pages this thread emptied and has not released yet.
pub(crate) fn release_emptied() {
    for cursor in [&CURSOR, &CELL_CURSOR] {
        let _ = cursor.try_with(|cursor| {
            if let Ok(mut cursor) = cursor.try_borrow_mut() {
                cursor.release();
            }
        });
    }
}

/// A worker about to sleep for `sleep` (`None`: until woken) releases the pages it emptied
/// if it will sleep at least [`RELEASE_SLEEP`] or its oldest has waited [`RELEASE_AGE`];
/// otherwise they wait for a longer sleep or a full batch.
///
/// Why not at every sleep: each call is a TLB shootdown that interrupts the other workers
/// (≈30–50 µs here). A million sleepers waking over 4 s made their workers go idle between
/// wakes 19K times, each releasing a handful of pages: ≈0.7 µs of CPU per wake, against
/// ≈0.05 µs in batches of [`RELEASE_BATCH`]. What waits is at most a batch, 512 KiB a worker.
pub(crate) fn release_emptied_before_sleep(sleep: Option<Duration>) {
    for cursor in [&CURSOR, &CELL_CURSOR] {
        let _ = cursor.try_with(|cursor| {
            let Ok(mut cursor) = cursor.try_borrow_mut() else {
                return;
            };
            if cursor.emptied.is_empty() {
                return;
            }
            // Pages a new run's hold let go of (`unhold`) start their wait here.
            let since = *cursor.emptied_since.get_or_insert_with(Instant::now);
            if sleep.is_none_or(|s| s >= RELEASE_SLEEP) || since.elapsed() >= RELEASE_AGE {
                cursor.release();
                cursor.emptied_since = None;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resident(addr: usize) -> bool {
        let page = region::page_size();
        let mut v = 0u8;
        // SAFETY: mincore reads page tables only; the page is in a segment of ours.
        let rc = unsafe { libc::mincore((addr / page * page) as *mut libc::c_void, 1, &mut v) };
        assert_eq!(rc, 0);
        v & 1 != 0
    }

    #[test]
    fn images_hold_their_length_and_bytes_and_do_not_overlap() {
        let sizes = [1usize, 7, 100, 736, 4090, 5000, LARGE + 1, 40 << 10];
        let images: Vec<*mut u8> = sizes.iter().map(|&n| alloc(n)).collect();
        for (i, (&image, &n)) in images.iter().zip(&sizes).enumerate() {
            // SAFETY: just allocated, `n` bytes of contents.
            unsafe {
                let (len, bytes) = parts(image);
                assert_eq!(len, n);
                assert_eq!(bytes as usize % 8, 0);
                std::ptr::write_bytes(bytes, i as u8 + 1, n);
            }
        }
        for (i, (&image, &n)) in images.iter().zip(&sizes).enumerate() {
            // SAFETY: as above; each image still holds what was written into it.
            unsafe {
                let (_, bytes) = parts(image);
                let all = std::slice::from_raw_parts(bytes, n);
                assert!(
                    all.iter().all(|&b| b == i as u8 + 1),
                    "image {i} overwritten"
                );
                free(image);
            }
        }
    }

    /// Images of 700 bytes until the first page is no longer the cursor's: returns them and
    /// the first page's address.
    fn fill_past_a_page() -> (Vec<*mut u8>, usize) {
        let page = region::page_size();
        let mut images = Vec::new();
        while images.len() < 3
            || images[0] as usize / page == images[images.len() - 1] as usize / page
        {
            let image = alloc(700);
            // SAFETY: just allocated.
            unsafe { std::ptr::write_bytes(parts(image).1, 0xab, 700) };
            images.push(image);
        }
        let first_page = images[0] as usize / page * page;
        (images, first_page)
    }

    /// Fills past a page, then frees every image on that first page, checking it stays
    /// until the last is freed; returns the page and the images not on it.
    fn empty_first_page() -> (usize, Vec<*mut u8>) {
        let page = region::page_size();
        let (images, first_page) = fill_past_a_page();
        let (mut on_first, others): (Vec<*mut u8>, Vec<*mut u8>) = images
            .into_iter()
            .partition(|&i| i as usize / page * page == first_page);
        let last = on_first.pop().unwrap();
        for image in on_first {
            // SAFETY: allocated by `fill_past_a_page`, freed once.
            unsafe { free(image) };
            release_emptied();
            assert!(resident(first_page), "released with images still on it");
        }
        // SAFETY: as above. The page is no longer held: the cursor is past it.
        unsafe { free(last) };
        (first_page, others)
    }

    fn free_each(images: Vec<*mut u8>) {
        for image in images {
            // SAFETY: allocated by `fill_past_a_page`, freed once.
            unsafe { free(image) };
        }
    }

    /// Where the frontier stands, in bytes carved from the start of the first segment.
    fn frontier_bytes() -> usize {
        let frontier = IMAGES.frontier.lock().unwrap();
        frontier
            .next
            .map_or(0, |(index, offset)| index as usize * SEGMENT_BYTES + offset)
    }

    #[test]
    fn address_space_of_freed_images_is_carved_again() {
        // A server whose tasks are compacted and restored over and over carves images without
        // end; runs whose images are all gone must be reused, or the segments run out and the
        // process aborts (4096 segments: ≈10 hours of 10,000 compactions a second).
        std::thread::spawn(|| {
            let before = frontier_bytes();
            let mut carved = 0usize;
            for round in 0..40 {
                let sizes = [700usize, 1500, 300, LARGE + 100];
                let images: Vec<*mut u8> = (0..2_000).map(|i| alloc(sizes[i % 4])).collect();
                for (i, &image) in images.iter().enumerate() {
                    // SAFETY: just allocated with this many bytes of contents.
                    unsafe { std::ptr::write_bytes(parts(image).1, round as u8, sizes[i % 4]) };
                    carved += sizes[i % 4];
                }
                free_each(images);
                release_emptied();
            }
            // Other tests carve meanwhile (the frontier is shared): allow them a few MiB.
            let grown = frontier_bytes() - before;
            assert!(
                grown < carved / 8,
                "the frontier grew by {grown} bytes for {carved} carved and freed"
            );
        })
        .join()
        .unwrap();
    }

    #[test]
    fn cells_are_aligned_and_apart_and_their_pages_go_back() {
        std::thread::spawn(|| {
            let page = region::page_size();
            let cells: Vec<NonNull<u8>> = (0..1_000).map(|_| alloc_cell(256)).collect();
            for (i, cell) in cells.iter().enumerate() {
                assert_eq!(cell.as_ptr() as usize % 64, 0);
                // SAFETY: a fresh block of 256 bytes, ours.
                unsafe { std::ptr::write_bytes(cell.as_ptr(), i as u8, 256) };
            }
            for (i, cell) in cells.iter().enumerate() {
                // SAFETY: as above; nothing else wrote into it.
                let bytes = unsafe { std::slice::from_raw_parts(cell.as_ptr(), 256) };
                assert!(bytes.iter().all(|&b| b == i as u8), "cell {i} overwritten");
            }
            let first_page = cells[0].as_ptr() as usize / page * page;
            for cell in cells {
                // SAFETY: from `alloc_cell(256)`, freed once.
                unsafe { free_cell(cell, 256) };
            }
            release_emptied();
            assert!(!resident(first_page), "a page of freed cells stayed");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_release_leaves_the_cursor_its_room() {
        // Frees on the restore path push onto the cursor's vectors; had a release left them
        // without room, the next batch would realloc there (a malloc after a burst of exits
        // can stall for milliseconds).
        std::thread::spawn(|| {
            let (_, others) = empty_first_page();
            release_emptied();
            free_each(others);
            release_emptied();
            CURSOR.with(|cursor| {
                let cursor = cursor.borrow();
                assert!(cursor.emptied.capacity() >= 2 * RELEASE_BATCH);
                assert!(cursor.pending_runs.capacity() >= 2 * RELEASE_BATCH);
            });
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_page_goes_back_once_its_last_image_is_freed() {
        // On a thread of its own, so that its run and counts are this test's alone.
        std::thread::spawn(|| {
            let (first_page, others) = empty_first_page();
            release_emptied();
            assert!(!resident(first_page), "the emptied page stayed");
            free_each(others);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn an_emptied_page_waits_for_a_long_sleep_or_its_age() {
        std::thread::spawn(|| {
            let short = Some(Duration::from_micros(50));
            // Each case: whether it waits past a short sleep, then what releases it.
            let cases: [(&str, fn()); 3] = [
                ("a long sleep", || {
                    release_emptied_before_sleep(Some(RELEASE_SLEEP))
                }),
                ("a sleep until woken", || release_emptied_before_sleep(None)),
                ("its age", || {
                    std::thread::sleep(RELEASE_AGE);
                    release_emptied_before_sleep(Some(Duration::from_micros(50)));
                }),
            ];
            for (what, release) in cases {
                let start = Instant::now();
                let (first_page, others) = empty_first_page();
                release_emptied_before_sleep(short);
                // Only if this thread was not held off the CPU past the page's age.
                if start.elapsed() < RELEASE_AGE {
                    assert!(resident(first_page), "released before a short sleep");
                }
                release();
                assert!(!resident(first_page), "kept through {what}");
                free_each(others);
            }
        })
        .join()
        .unwrap();
    }
}
