//! Cell memory: per-thread caches of task-cell blocks by size class, over the cell arena.
//!
//! ```text
//!   allocate(class c): this thread's loaded list ─empty─► its spare list ─empty─► a batch
//!                      from the depot ─empty─► the cell arena (stack/arena.rs)
//!   free(block of c):  this thread's loaded list ─full (BATCH)─► it becomes the spare; a full
//!                      spare goes to the depot ─depot full─► the arena, block by block
//!   a free block:  ┌ next ─┬──────── unused ────────┐   (class c: (c + 1) × GRANULE bytes)
//!                  └───────┴────────────────────────┘
//! ```
//!
//! Owns: the thread-local `CACHE` (per class, two free lists of at most [`BATCH`] blocks, for
//! the thread it belongs to) and the process-wide `DEPOT` (per class, a locked list of full
//! lists, and its length `DEPOT_LEN`).
//!
//! Invariants:
//! 1. Every block of class `c` — in use, in a cache or in the depot — was carved by
//!    `stack::alloc_cell` with the size of `class_layout(c)`, whichever thread did it; so any
//!    thread may reuse it, and any may give it back with `stack::free_cell` and that size.
//! 2. A block in a free list holds no live value and is owned by that list alone; its first
//!    word is the link to the next block of the list (null at the end).
//! 3. A thread's `CACHE` is touched only by that thread; the depot only under its lock, which
//!    also orders a block's last use on the thread that freed it before its reuse on another.
//!    `DEPOT_LEN` is a hint (written under the lock, read without it).
//! 4. A thread's cache holds at most `2 × BATCH` blocks per class, the depot at most
//!    `DEPOT_BATCHES` batches per class: more is given back to the arena. What the depot
//!    holds over `DEPOT_KEEP` batches goes back too, step by step, when workers go idle
//!    ([`trim_idle`]).
//!
//! May call: `arena.rs` (the cell arena), `std::alloc` (layouts it does not cache). Called by:
//! `sched/task/cell.rs` (allocate and free a cell), `sched/worker.rs` (`trim_idle`, when a worker
//! goes idle).
//!
//! Why: a task's cell is allocated by the thread that spawns it and freed by the thread that
//! drops its last reference — often another worker, which ran the task. Through glibc's malloc
//! each such free went to the allocating thread's arena under its lock, and the spawner's next
//! malloc found its thread cache empty and took that lock again: `__lll_lock_wait_private`
//! and `_int_free` led a profile of the spawn benchmark, and malloc plus free were ≈420
//! instructions of a spawn (callgrind). Here a block freed on another worker simply joins that
//! worker's list, and lists are rebalanced through the depot a batch at a time — one lock per
//! [`BATCH`] cells on each side. This is Go's scheme for dead goroutines (per-P `gFree` lists
//! over a global one, moved in batches), not mimalloc's (blocks go back to the thread that
//! owns their page): cells have few sizes and any thread may reuse any of them, so there is
//! no owner to send a remote free to. A library cannot set the global allocator; cells above
//! [`MAX_CACHED`] bytes or aligned above [`ALIGN`] go straight to it, the others come from
//! the cell arena (stack/arena.rs, which says why not from malloc). Memory goes back to the
//! arena only past the bounds of invariant 4, and when a thread exits its cache moves to the
//! depot (or the arena); the arena gives a page back to the kernel once no block on it is
//! left.

use std::alloc::Layout;
use std::cell::RefCell;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Class sizes are multiples of this.
const GRANULE: usize = 64;
/// Number of classes: blocks of 64, 128, … , `MAX_CACHED` bytes.
const CLASSES: usize = 16;
/// The largest cached block.
pub(crate) const MAX_CACHED: usize = GRANULE * CLASSES;
/// Alignment of every cached block: the cell arena carves blocks of whole [`GRANULE`]s from
/// 64 KiB-aligned runs (stack/arena.rs, `alloc_cell`), so a cell aligned to a cache line (a
/// task returning or capturing a `#[repr(align(64))]` value) is cached too.
pub(crate) const ALIGN: usize = GRANULE;
/// Blocks moved between a thread's list and the depot at once.
pub(crate) const BATCH: usize = 32;
/// Batches the depot keeps per class for good (8K blocks, 2 MiB of 256-byte cells).
const DEPOT_KEEP: usize = 256;
/// Batches the depot holds per class at most (128K blocks, 32 MiB of 256-byte cells): the
/// excess over [`DEPOT_KEEP`] is kept only until the workers go idle (`trim_idle`), so that the
/// next burst of that size reuses it. Capping at `DEPOT_KEEP` instead sent every burst of
/// more than 8K live tasks (a spawn loop, then joins) through malloc and free: 22 % of the
/// instructions of the spawn benchmark on one worker.
const DEPOT_BATCHES: usize = 4096;
/// Excess batches `trim_idle` gives back per class and call: 1,024 frees, tens of µs.
const TRIM_STEP: usize = 32;

/// The class of blocks that hold `layout`, or `None` when it is not cached.
pub(crate) const fn class_of(layout: Layout) -> Option<usize> {
    if layout.size() == 0 || layout.size() > MAX_CACHED || layout.align() > ALIGN {
        return None;
    }
    Some((layout.size() - 1) / GRANULE)
}

/// The layout every block of `class` is allocated and freed with (invariant 1).
fn class_layout(class: usize) -> Layout {
    match Layout::from_size_align((class + 1) * GRANULE, ALIGN) {
        Ok(layout) => layout,
        Err(_) => unreachable!("class layouts are small and aligned to a power of two"),
    }
}

/// A free block's link (invariant 2).
struct FreeBlock {
    next: *mut FreeBlock,
}

/// A list of free blocks of one class.
struct List {
    head: *mut FreeBlock,
    len: usize,
}

impl List {
    const EMPTY: List = List {
        head: ptr::null_mut(),
        len: 0,
    };

    /// # Safety
    /// `block` is a free block of this list's class, owned by the caller (invariant 2).
    unsafe fn push(&mut self, block: NonNull<u8>) {
        let block = block.cast::<FreeBlock>();
        // SAFETY: the caller's contract: the block is ours, at least GRANULE bytes and aligned.
        unsafe {
            block.as_ptr().write(FreeBlock { next: self.head });
        }
        self.head = block.as_ptr();
        self.len += 1;
    }

    fn pop(&mut self) -> Option<NonNull<u8>> {
        let block = NonNull::new(self.head)?;
        // SAFETY: invariant 2: a block in the list is owned by it and starts with its link.
        self.head = unsafe { block.as_ref().next };
        self.len -= 1;
        Some(block.cast())
    }

    /// Gives every block back to the arena.
    fn release(mut self, class: usize) {
        while let Some(block) = self.pop() {
            // SAFETY: invariant 1: a block of this class; the list owned it.
            unsafe { free_block(block, class) };
        }
    }
}

// SAFETY: a list owns its blocks exclusively (invariant 2); moving it to another thread moves
// that ownership, and the depot's lock orders the handover (invariant 3).
unsafe impl Send for List {}

/// One thread's blocks of one class: two lists of at most [`BATCH`] blocks (Bonwick's
/// "magazines"), so that moving a batch to or from the depot is a swap, never a walk.
struct Magazines {
    /// Allocations pop and frees push here.
    loaded: List,
    /// A full list kept back, or empty.
    spare: List,
}

/// One thread's magazines, by class (invariant 3).
struct Cache {
    classes: [Magazines; CLASSES],
}

impl Drop for Cache {
    fn drop(&mut self) {
        // The thread exits: its blocks go to the depot, for the threads that go on.
        for (class, magazines) in self.classes.iter_mut().enumerate() {
            for list in [&mut magazines.loaded, &mut magazines.spare] {
                let list = std::mem::replace(list, List::EMPTY);
                if list.len > 0 {
                    depot_put(class, list);
                }
            }
        }
    }
}

thread_local! {
    static CACHE: RefCell<Cache> = const {
        RefCell::new(Cache {
            classes: [const {
                Magazines {
                    loaded: List::EMPTY,
                    spare: List::EMPTY,
                }
            }; CLASSES],
        })
    };
}

/// Per class, batches of free blocks for any thread (invariant 3).
static DEPOT: [Mutex<Vec<List>>; CLASSES] = [const { Mutex::new(Vec::new()) }; CLASSES];
/// Per class, the depot's length, written under its lock: lets an allocation skip the lock
/// when the depot is empty (a stale value only costs a needless lock, or a block taken from
/// the allocator that the depot could have given).
static DEPOT_LEN: [AtomicUsize; CLASSES] = [const { AtomicUsize::new(0) }; CLASSES];

fn depot_put(class: usize, list: List) {
    let mut depot = DEPOT[class].lock().unwrap_or_else(|e| e.into_inner());
    if depot.len() < DEPOT_BATCHES {
        depot.push(list);
        DEPOT_LEN[class].store(depot.len(), Ordering::Relaxed);
        return;
    }
    drop(depot);
    list.release(class);
}

fn depot_take(class: usize) -> Option<List> {
    if DEPOT_LEN[class].load(Ordering::Relaxed) == 0 {
        return None;
    }
    let mut depot = DEPOT[class].lock().unwrap_or_else(|e| e.into_inner());
    let list = depot.pop();
    DEPOT_LEN[class].store(depot.len(), Ordering::Relaxed);
    list
}

/// A step of giving back the depot's excess over `DEPOT_KEEP` batches (invariant 4), for a
/// worker about to sleep: true when excess is left for a later step.
pub(crate) fn trim_idle() -> bool {
    let mut more = false;
    for class in 0..CLASSES {
        if DEPOT_LEN[class].load(Ordering::Relaxed) <= DEPOT_KEEP {
            continue;
        }
        let excess: Vec<List> = {
            let mut depot = DEPOT[class].lock().unwrap_or_else(|e| e.into_inner());
            let n = depot.len().saturating_sub(DEPOT_KEEP).min(TRIM_STEP);
            let start = depot.len() - n;
            let excess = depot.split_off(start);
            DEPOT_LEN[class].store(depot.len(), Ordering::Relaxed);
            more |= depot.len() > DEPOT_KEEP;
            excess
        };
        // Outside the lock: the frees take a while.
        for list in excess {
            list.release(class);
        }
    }
    more
}

/// A block for `layout`: of its class when it has one (free it with [`free`] and the same
/// layout), else straight from the global allocator. Inlined, so that a cell's constant
/// layout picks its class at compile time; the rest is `allocate_slow`.
#[inline]
pub(crate) fn allocate(layout: Layout) -> NonNull<u8> {
    let Some(class) = class_of(layout) else {
        return system_alloc(layout);
    };
    let hit = CACHE
        .try_with(|cache| cache.try_borrow_mut().ok()?.classes[class].loaded.pop())
        .ok()
        .flatten();
    match hit {
        Some(block) => block,
        None => allocate_slow(class),
    }
}

/// `allocate` when the loaded list is empty: the spare list, a batch from the depot, or the
/// cell arena.
#[inline(never)]
fn allocate_slow(class: usize) -> NonNull<u8> {
    let cached = CACHE
        .try_with(|cache| {
            // Never re-entered in practice (nothing here calls out); a failed borrow, like a
            // thread whose cache is gone, just uses the allocator.
            let mut cache = cache.try_borrow_mut().ok()?;
            let magazines = &mut cache.classes[class];
            if let Some(block) = magazines.loaded.pop() {
                return Some(block); // not empty after all: never overwrite a list with blocks
            }
            magazines.loaded = if magazines.spare.len > 0 {
                std::mem::replace(&mut magazines.spare, List::EMPTY)
            } else {
                depot_take(class)?
            };
            magazines.loaded.pop()
        })
        .ok()
        .flatten();
    cached.unwrap_or_else(|| new_block(class))
}

/// Frees a block from [`allocate`]; inlined like it, the rest is `free_slow`.
///
/// # Safety
/// `block` came from `allocate(layout)` with this `layout`, and nothing uses it any more.
#[inline]
pub(crate) unsafe fn free(block: NonNull<u8>, layout: Layout) {
    let Some(class) = class_of(layout) else {
        // SAFETY: the caller's contract: `allocate` took it from the allocator with `layout`.
        unsafe { std::alloc::dealloc(block.as_ptr(), layout) };
        return;
    };
    let kept = CACHE.try_with(|cache| {
        let Ok(mut cache) = cache.try_borrow_mut() else {
            return false;
        };
        let loaded = &mut cache.classes[class].loaded;
        if loaded.len == BATCH {
            return false;
        }
        // SAFETY: the caller's contract: the block is of this class and no longer used.
        unsafe { loaded.push(block) };
        true
    });
    if kept != Ok(true) {
        // SAFETY: the caller's contract.
        unsafe { free_slow(block, class) };
    }
}

/// `free` when the loaded list is full (or the cache is gone): the full list becomes the
/// spare, a full spare goes to the depot, and the block starts a new list.
///
/// # Safety
/// As [`free`]; `class` is the block's.
#[inline(never)]
unsafe fn free_slow(block: NonNull<u8>, class: usize) {
    let kept = CACHE.try_with(|cache| {
        let Ok(mut cache) = cache.try_borrow_mut() else {
            return false;
        };
        let magazines = &mut cache.classes[class];
        let mut full = None;
        if magazines.loaded.len == BATCH {
            let loaded = std::mem::replace(&mut magazines.loaded, List::EMPTY);
            let spare = std::mem::replace(&mut magazines.spare, loaded);
            full = (spare.len > 0).then_some(spare);
        }
        // SAFETY: the caller's contract: the block is of this class and no longer used.
        unsafe { magazines.loaded.push(block) };
        drop(cache);
        if let Some(full) = full {
            depot_put(class, full);
        }
        true
    });
    if kept != Ok(true) {
        // SAFETY: the caller's contract: a block of this class, no longer used.
        unsafe { free_block(block, class) };
    }
}

/// A new block of `class` from the cell arena (invariant 1).
fn new_block(class: usize) -> NonNull<u8> {
    crate::stack::alloc_cell(class_layout(class).size())
}

/// Gives a block of `class` back to the cell arena.
///
/// # Safety
/// `block` is a block of `class` (invariant 1) that nothing uses any more.
unsafe fn free_block(block: NonNull<u8>, class: usize) {
    // SAFETY: the caller's contract; invariant 1: the arena gave it with the class size.
    unsafe { crate::stack::free_cell(block, class_layout(class).size()) };
}

fn system_alloc(layout: Layout) -> NonNull<u8> {
    // SAFETY: callers pass non-zero sizes (`class_of` refuses zero; cells hold a header).
    let block = unsafe { std::alloc::alloc(layout) };
    match NonNull::new(block) {
        Some(block) => block,
        None => std::alloc::handle_alloc_error(layout),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(size: usize) -> Layout {
        Layout::from_size_align(size, 8).unwrap()
    }

    /// Blocks held in this thread's list of `class`.
    fn cached(class: usize) -> usize {
        CACHE.with(|cache| {
            let magazines = &cache.borrow().classes[class];
            magazines.loaded.len + magazines.spare.len
        })
    }

    #[test]
    fn sizes_map_to_classes_and_large_or_overaligned_layouts_bypass() {
        assert_eq!(class_of(layout(1)), Some(0));
        assert_eq!(class_of(layout(64)), Some(0));
        assert_eq!(class_of(layout(65)), Some(1));
        assert_eq!(class_of(layout(MAX_CACHED)), Some(CLASSES - 1));
        assert_eq!(class_of(layout(MAX_CACHED + 1)), None);
        assert_eq!(class_of(Layout::from_size_align(64, 128).unwrap()), None);
        assert_eq!(class_of(layout(0)), None);
        // A cache-line-aligned cell is cached, and its block is aligned so.
        let line = Layout::from_size_align(100, 64).unwrap();
        assert_eq!(class_of(line), Some(1));
        let blocks: Vec<_> = (0..3 * BATCH).map(|_| allocate(line)).collect();
        for &block in &blocks {
            assert_eq!(block.as_ptr() as usize % 64, 0);
        }
        for block in blocks {
            // SAFETY: from `allocate(line)`, unused.
            unsafe { free(block, line) };
        }
        // Bypassing layouts still allocate and free.
        let big = Layout::from_size_align(4096, 64).unwrap();
        let block = allocate(big);
        assert_eq!(block.as_ptr() as usize % 64, 0);
        // SAFETY: from `allocate(big)`, unused.
        unsafe { free(block, big) };
    }

    #[test]
    fn a_freed_block_is_reused_by_the_same_thread_first() {
        let l = layout(200);
        let a = allocate(l);
        // SAFETY: from `allocate(l)`, unused.
        unsafe { free(a, l) };
        let b = allocate(layout(150)); // another class: leaves this one's list alone
        let c = allocate(l);
        assert_eq!(
            c, a,
            "the last block freed in a class is the next one handed out"
        );
        // SAFETY: from `allocate` with these layouts, unused.
        unsafe {
            free(b, layout(150));
            free(c, l);
        }
    }

    #[test]
    fn a_full_list_spills_a_batch_and_stays_bounded() {
        let l = layout(800);
        let class = class_of(l).unwrap();
        let blocks: Vec<_> = (0..5 * BATCH).map(|_| allocate(l)).collect();
        for block in blocks {
            // SAFETY: from `allocate(l)`, unused.
            unsafe { free(block, l) };
            assert!(cached(class) <= 2 * BATCH, "invariant 4");
        }
        assert!(cached(class) >= BATCH);
    }

    /// One thread allocates and fills blocks, another checks and frees them, in both
    /// directions at once: every block is handed out to one owner at a time, and its contents
    /// survive the trip (a block given out twice, or a link written over live data, breaks the
    /// pattern).
    #[test]
    fn blocks_freed_on_other_threads_stress() {
        use std::sync::mpsc;
        const PER_THREAD: usize = 20_000;
        const SIZES: [usize; 5] = [24, 100, 256, 700, 800];
        let run =
            |seed: usize, tx: mpsc::Sender<(usize, usize)>, rx: mpsc::Receiver<(usize, usize)>| {
                let mut received = 0;
                for i in 0..PER_THREAD {
                    let size = SIZES[(i + seed) % SIZES.len()];
                    let block = allocate(layout(size));
                    let tag = (seed << 32) | i;
                    // SAFETY: a fresh block of at least `size` bytes, 8-aligned, ours.
                    unsafe {
                        let words = block.as_ptr().cast::<usize>();
                        for w in 0..size / 8 {
                            words.add(w).write(tag ^ w);
                        }
                    }
                    tx.send((block.as_ptr() as usize, (size << 40) | tag))
                        .unwrap();
                    // Free what the other thread sent, interleaved with our allocations.
                    while let Ok((addr, meta)) = rx.try_recv() {
                        check_and_free(addr, meta);
                        received += 1;
                    }
                }
                drop(tx);
                for (addr, meta) in rx {
                    check_and_free(addr, meta);
                    received += 1;
                }
                assert_eq!(received, PER_THREAD);
            };
        fn check_and_free(addr: usize, meta: usize) {
            let (size, tag) = (meta >> 40, meta & ((1 << 40) - 1));
            let block = NonNull::new(addr as *mut u8).unwrap();
            // SAFETY: the sender allocated it with this size, filled it and gave it up.
            unsafe {
                let words = block.as_ptr().cast::<usize>();
                for w in 0..size / 8 {
                    assert_eq!(words.add(w).read(), tag ^ w, "block corrupted or shared");
                }
                free(block, layout(size));
            }
        }
        let (tx_a, rx_b) = mpsc::channel();
        let (tx_b, rx_a) = mpsc::channel();
        let a = std::thread::spawn(move || run(1, tx_a, rx_a));
        let b = std::thread::spawn(move || run(2, tx_b, rx_b));
        a.join().unwrap();
        b.join().unwrap();
    }

    #[test]
    fn idle_trimming_gives_back_the_depot_excess_step_by_step() {
        // A class of its own (blocks of 897..=960 bytes), so other tests do not interfere.
        let l = layout(900);
        let class = class_of(l).unwrap();
        let depot_len = || DEPOT[class].lock().unwrap().len();
        let lists = DEPOT_KEEP + TRIM_STEP + 3;
        for _ in 0..lists {
            let mut list = List::EMPTY;
            for _ in 0..BATCH {
                // SAFETY: a fresh block of this class, ours.
                unsafe { list.push(new_block(class)) };
            }
            depot_put(class, list);
        }
        assert_eq!(depot_len(), lists);
        assert!(trim_idle(), "excess is left after one step");
        assert_eq!(depot_len(), DEPOT_KEEP + 3);
        trim_idle();
        assert_eq!(depot_len(), DEPOT_KEEP, "what is kept for good stays");
        trim_idle();
        assert_eq!(depot_len(), DEPOT_KEEP);
    }

    #[test]
    fn an_exiting_thread_leaves_its_blocks_to_the_depot() {
        let l = layout(MAX_CACHED - 10);
        let class = class_of(l).unwrap();
        let depot_len = || DEPOT[class].lock().unwrap().len();
        let before = depot_len();
        std::thread::spawn(move || {
            let blocks: Vec<_> = (0..BATCH).map(|_| allocate(l)).collect();
            for block in blocks {
                // SAFETY: from `allocate(l)`, unused.
                unsafe { free(block, l) };
            }
            assert_eq!(cached(class), BATCH);
        })
        .join()
        .unwrap();
        // Other tests may move batches meanwhile, but this class (blocks above 960 bytes) is
        // used by this test alone.
        assert_eq!(depot_len(), before + 1);
    }
}
