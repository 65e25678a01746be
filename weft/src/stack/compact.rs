//! Giving a parked task's stack memory back: *reclaim* (the pages below its stack pointer)
//! and *compaction* (its live bytes copied to an image, `arena.rs`, every page of its slot
//! released).
//!
//! Owns: the per-slot table of compacted images (one pointer per slot, kept next to each
//! region in `region.rs`), the slot locks, the calibrated switch margin, the process's
//! [`StackMode`], the counters, and each worker's queue of parked tasks ([`ParkedStacks`]).
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
//! ([`StackMode::Compact`]). Where only user-mode faults can be caught
//! (`vm.unprivileged_userfaultfd = 0` and no `CAP_SYS_PTRACE` or `/dev/userfaultfd`), a
//! `read(2)` into a compacted page would fail with EFAULT, so compaction stays off and
//! weft reclaims only ([`StackMode::Reclaim`]). `WEFT_STACK_COMPACTION=off` forces that.
//! Memory pressure changes nothing of this: a live page swapped out before compaction is
//! copied, its bytes brought back by the kernel's own swap-in (invariant 3c), and a restore
//! waits for memory rather than give up (invariant 4).
//! Not supported in any mode: a device writing by DMA into a parked task's stack (O_DIRECT
//! or io_uring with a buffer on the stack while the task parks): the kernel pins such pages
//! and a write-protect does not stop the device.
//!
//! Invariants (the soundness argument; code cites them):
//! 1. The stack pointer a task records in [`switch_out`], minus [`margin`] (measured once
//!    by [`calibrate`] for both ways this binary's switch can be compiled: with
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
//! 4. A COMPACTED slot is restored — guard reinstalled (unless invariant 8 holds), image
//!    filled in with `UFFDIO_COPY` (atomic: a thread touching the page waits until it is
//!    full; where no memory can be charged the fill waits for some, as a page fault would,
//!    and never gives up: a RESIDENT slot's missing page would read as zeros, invariant 5),
//!    entry nulled — under its
//!    lock, by whichever comes first: its worker before resuming the task, the fault
//!    thread serving any access, or a thread about to touch the slot on purpose
//!    ([`restore_if_compacted`]: a channel handing a value to the parked task). The task runs
//!    only after its worker saw RESIDENT. A restore also fills zeros below the image, down to
//!    the depth the slot had when compacted ([`RESTORE_DEPTH_MAX`]): pages that were missing
//!    and hold nothing (invariant 1).
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
//! task starts as deep as the last compacted tasks of its spawn site were ([`prefill`]; a
//! burst of 100K tasks each 64 KiB deep went from 6.4–6.8 s to 1.3 s, a million 8 KiB deep
//! from 14–15 s to 4.2–4.4 s), the thread fills [`GROW_PAGES`] or more real pages a trip
//! (never the zero page: writing one is a TLB shootdown, see [`GROW_PAGES`]), and where compaction
//! runs reclaim waits as long as compaction does, so that a task that wakes often does not
//! refill released pages at each wake.
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
//! May call: `uffd.rs`, `region.rs`, `arena.rs`, libc. Called by: `sched` (worker hooks), `task`.
//!
//! Why not the alternatives, measured here: guard markers with a SIGSEGV handler are not
//! atomic (a third thread can fault in a zero page between the marker's removal and the copy)
//! and make syscalls fail with EFAULT; `UFFDIO_MOVE` per slot is atomic too but flushes the
//! TLB once per page: ≈1.6 µs a slot when the other CPU idles, ≈21 µs when another thread of
//! the process runs there, against one write-protect and one release per run of slots.

use std::alloc::{self, Layout};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use super::region::prefetch_line;
use super::{region, uffd};

/// Which of reclaim and compaction this process can do: see the module doc, "The contract".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StackMode {
    /// Parked tasks are reclaimed and compacted; every access to a compacted stack, by any
    /// thread, in user or kernel mode, is served by userfaultfd.
    Compact,
    /// Pages below a parked task's stack pointer are given back; nothing is compacted, for
    /// the reason given.
    Reclaim(&'static str),
    /// Stacks are never shrunk, for the reason given.
    Off(&'static str),
}

impl std::fmt::Display for StackMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StackMode::Compact => f.write_str("compact (userfaultfd, kernel-mode faults served)"),
            StackMode::Reclaim(why) => write!(f, "reclaim only: {why}"),
            StackMode::Off(why) => write!(f, "off: {why}"),
        }
    }
}

/// What a runtime's workers do with the stacks of their parked tasks.
///
/// A task parked for `reclaim_after` gives back the pages below its stack pointer; one
/// parked for `compact_after` (where [`mode`] is [`StackMode::Compact`]) has its live bytes
/// copied to the heap and its whole slot released. Each worker handles at most `batch`
/// tasks per step, between running tasks, so a wake waits for one step at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StackPolicy {
    /// Parked age after which pages below the stack pointer are released; `None`: never.
    pub reclaim_after: Option<Duration>,
    /// Parked age after which the stack is compacted; `None`: never.
    pub compact_after: Option<Duration>,
    /// Most tasks one worker reclaims or compacts in one step.
    pub batch: usize,
}

/// Tasks one step handles by default: a step of 256 compactions costs ≈0.1–0.3 ms here.
pub const DEFAULT_STACK_BATCH: usize = 256;

impl StackPolicy {
    /// Stacks are never shrunk.
    pub const fn never() -> StackPolicy {
        StackPolicy {
            reclaim_after: None,
            compact_after: None,
            batch: DEFAULT_STACK_BATCH,
        }
    }

    /// Reclaim and compact at the first step after a task parks.
    pub const fn eager() -> StackPolicy {
        StackPolicy::after(Duration::ZERO, Duration::ZERO)
    }

    /// Reclaim after `reclaim`, compact after `compact` of being parked.
    pub const fn after(reclaim: Duration, compact: Duration) -> StackPolicy {
        StackPolicy {
            reclaim_after: Some(reclaim),
            compact_after: Some(compact),
            batch: DEFAULT_STACK_BATCH,
        }
    }
}

impl Default for StackPolicy {
    /// Compact after 200 ms parked: a task that sleeps that long pays ≈2 µs to be restored
    /// when it wakes, 1 % of its sleep at most. Reclaim after 200 ms too where compaction
    /// runs (there a page released below the stack pointer is refilled through the fault
    /// thread when the task grows again, ≈5–60 µs), after 20 ms where only reclaim runs
    /// (refilled by an ordinary ≈1.5 µs page fault).
    fn default() -> StackPolicy {
        let compact = Duration::from_millis(200);
        // Not `mode()`: that is final only once a runtime is built, and a policy is often
        // made before.
        let reclaim = if registration().is_ok() && !FORKED.load(Ordering::Relaxed) {
            compact
        } else {
            Duration::from_millis(20)
        };
        StackPolicy::after(reclaim, compact)
    }
}

// ---------------------------------------------------------------------------------------
// Counters (for `weft::metrics`): Relaxed, each a plain tally, each on its own cache line
// (both workers update them at every compaction and restore).

static RECLAIMED_BYTES: CachePadded<AtomicU64> = CachePadded::new(AtomicU64::new(0));
static COMPACTED_LIVE_BYTES: CachePadded<AtomicU64> = CachePadded::new(AtomicU64::new(0));
static COMPACTIONS: CachePadded<AtomicU64> = CachePadded::new(AtomicU64::new(0));
static COMPACTION_RELEASED_BYTES: CachePadded<AtomicU64> = CachePadded::new(AtomicU64::new(0));
static RESTORES: CachePadded<AtomicU64> = CachePadded::new(AtomicU64::new(0));
static FAULT_RESTORES: CachePadded<AtomicU64> = CachePadded::new(AtomicU64::new(0));
static ZERO_FILLS: CachePadded<AtomicU64> = CachePadded::new(AtomicU64::new(0));

/// A snapshot of the stack-shrinking counters, process-wide; cheap (eight Relaxed loads).
/// Released bytes count the pages that were mapped (`mincore`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Bytes of resident pages released below parked tasks' stack pointers, in total.
    pub reclaimed_bytes: u64,
    /// Live stack bytes now held in heap images of compacted tasks.
    pub compacted_live_bytes: u64,
    /// Tasks compacted now.
    pub compacted_tasks: u64,
    /// Compactions so far.
    pub compactions: u64,
    /// Bytes of resident pages released by compactions, in total.
    pub compaction_released_bytes: u64,
    /// Restores so far, by a worker or the fault thread.
    pub restores: u64,
    /// Of those, restores made by the fault thread (another thread touched the stack).
    pub fault_restores: u64,
    /// Missing pages of resident slots the fault thread filled with zeros (stack growth).
    pub zero_fills: u64,
}

/// The stack-shrinking counters now (see [`Counters`]).
pub fn counters() -> Counters {
    let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
    Counters {
        reclaimed_bytes: r(&RECLAIMED_BYTES),
        compacted_live_bytes: r(&COMPACTED_LIVE_BYTES),
        // Restores are read first: a compaction counted meanwhile only makes this larger,
        // never wrap below zero.
        compacted_tasks: {
            let restores = r(&RESTORES);
            r(&COMPACTIONS).saturating_sub(restores)
        },
        compactions: r(&COMPACTIONS),
        compaction_released_bytes: r(&COMPACTION_RELEASED_BYTES),
        restores: r(&RESTORES),
        fault_restores: r(&FAULT_RESTORES),
        zero_fills: r(&ZERO_FILLS),
    }
}

fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

fn sub(counter: &AtomicU64, n: u64) {
    counter.fetch_sub(n, Ordering::Relaxed);
}

// ---------------------------------------------------------------------------------------
// The stack pointer of a suspended task (invariant 1).

/// Reads the stack pointer.
#[inline(always)]
fn current_sp() -> usize {
    let sp: usize;
    #[cfg(target_arch = "x86_64")]
    // SAFETY: reads a register, touches no memory.
    unsafe {
        std::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags))
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: as above.
    unsafe {
        std::arch::asm!("mov {}, sp", out(reg) sp, options(nomem, nostack, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        sp = 0;
    }
    sp
}

/// The one place a task switches out to its worker: records the stack pointer, then
/// suspends. Inlined, like corosensei's switch (an out-of-line frame around the switch cost
/// ≈30 ns per ping-pong round trip here: the return-address predictor no longer pairs the
/// switch's calls and returns). Below the recorded pointer there is then only
/// `Yielder::suspend`: inlined (the switch's three pushes) or its one out-of-line copy (a
/// return address, its frame, the pushes); [`calibrate`] measures both.
#[inline(always)]
pub(crate) fn switch_out<I, Y>(
    yielder: &corosensei::Yielder<I, Y>,
    value: Y,
    stack: &ParkedStack,
) -> I {
    stack.sp.set(current_sp());
    yielder.suspend(value)
}

/// Bytes below the recorded stack pointer that the switch uses, plus slack; `None` when the
/// calibration failed or has not run. Set once, by [`calibrate`].
static MARGIN: OnceLock<Option<usize>> = OnceLock::new();

/// Most bytes of switch frames the calibration accepts. Well inside the probe's poisoned
/// span ([`PROBE_POISON`]), so that a switch reaching deeper than the span — which the probe
/// could only under-measure — fails the calibration instead. A release build measures
/// ≈100 B; an AddressSanitizer build (scripts/asan.sh) ≈3 KB, whose images are that much
/// larger.
const MAX_MARGIN: usize = PROBE_POISON - 512;
/// Bytes below its stack pointer that a calibration probe fills with its pattern.
const PROBE_POISON: usize = 4096;
/// The two patterns of the probes: a byte that happens to equal one is seen with the other.
const PROBE_PATTERNS: [u8; 2] = [0x5a, 0xa5];
/// Slack added to the measured depth.
const MARGIN_SLACK: usize = 64;

/// The calibrated margin (invariant 1).
pub(crate) fn margin() -> Option<usize> {
    MARGIN.get().copied().flatten()
}

/// Measures, once per process, how deep below the pointer [`switch_out`] records the switch
/// writes: a coroutine on a scratch stack fills the memory below its stack pointer with a
/// pattern, switches out, and the parent finds the lowest byte that changed — with
/// `Yielder::suspend` inlined and with its out-of-line copy (called through a pointer), and
/// with two patterns, so that a byte that happens to equal one pattern is still seen.
pub(crate) fn calibrate<Y: Copy + 'static>(value: Y) {
    MARGIN.get_or_init(|| {
        if !cfg!(any(target_arch = "x86_64", target_arch = "aarch64")) {
            return None;
        }
        let mut deepest = 0usize;
        for pattern in PROBE_PATTERNS {
            for out_of_line in [false, true] {
                deepest = deepest.max(probe_depth(value, pattern, out_of_line)?);
            }
        }
        let margin = (deepest + MARGIN_SLACK).next_multiple_of(16);
        (margin <= MAX_MARGIN).then_some(margin)
    });
}

/// One calibration run: bytes between the recorded pointer and the lowest changed byte.
fn probe_depth<Y: Copy + 'static>(value: Y, pattern: u8, out_of_line: bool) -> Option<usize> {
    const POISON: usize = PROBE_POISON;
    let stack = ProbeStack::new()?;
    let record = ParkedStack::default();
    let record_ptr: *const ParkedStack = &record;
    let poisoned_from = Cell::new(0usize);
    let poisoned_ptr: *const Cell<usize> = &poisoned_from;
    let mut coroutine =
        corosensei::Coroutine::<(), Y, (), ProbeStack>::with_stack(stack, move |yielder, ()| {
            let here = current_sp();
            let low = here - POISON;
            // SAFETY: `[low, here - 64)` lies in this coroutine's own scratch stack (64 KiB,
            // we are at its top), below the stack pointer: no live data is there, and the fill
            // itself uses no stack (see `fill_below_sp`).
            unsafe { fill_below_sp(low, POISON - 64, pattern) };
            // SAFETY: both cells outlive the coroutine, which finishes before they drop.
            let (poisoned, record) = unsafe { (&*poisoned_ptr, &*record_ptr) };
            poisoned.set(low);
            if out_of_line {
                let suspend: fn(&corosensei::Yielder<(), Y>, Y) =
                    std::hint::black_box(corosensei::Yielder::suspend);
                record.sp.set(current_sp());
                suspend(yielder, std::hint::black_box(value));
            } else {
                switch_out(yielder, std::hint::black_box(value), record);
            }
        });
    let suspended = matches!(coroutine.resume(()), corosensei::CoroutineResult::Yield(_));
    let low = poisoned_from.get();
    let sp = record.sp.get();
    let mut depth = None;
    if suspended && low != 0 && sp > low {
        let mut addr = low;
        while addr < sp {
            // SAFETY: `[low, sp)` is inside the suspended coroutine's stack, which nobody runs.
            if unsafe { *(addr as *const u8) } != pattern {
                depth = Some(sp - addr);
                break;
            }
            addr += 1;
        }
    }
    if suspended {
        let _ = coroutine.resume(());
    }
    depth
}

/// Writes `len` (at most [`PROBE_POISON`]) bytes of `pattern` (one of [`PROBE_PATTERNS`])
/// from `start`, below the caller's stack pointer, without touching the stack: a `memset` call
/// would put its own frames there (AddressSanitizer's interceptor did, and overwrote its
/// return address with the pattern), so the bytes are copied from a static buffer by
/// [`copy_stack_bytes`], which uses no stack.
///
/// # Safety
/// `[start, start + len)` is writable and holds nothing live.
#[inline(always)]
unsafe fn fill_below_sp(start: usize, len: usize, pattern: u8) {
    static FILLS: [[u8; PROBE_POISON]; 2] = [
        [PROBE_PATTERNS[0]; PROBE_POISON],
        [PROBE_PATTERNS[1]; PROBE_POISON],
    ];
    let fill = &FILLS[usize::from(pattern == PROBE_PATTERNS[1])];
    debug_assert!(len <= fill.len() && fill[0] == pattern);
    // SAFETY: the caller's contract; the static buffer holds `len` readable bytes.
    unsafe { copy_stack_bytes(start as *mut u8, fill.as_ptr() as usize, len) };
}

/// Copies `len` bytes of a stack that is not the caller's own (a suspended or interrupted
/// task's) to `dst`, without the compiler's instrumentation: AddressSanitizer marks the
/// redzones between another stack's frames as poisoned and would report this legitimate read
/// of whole frames (scripts/asan.sh). A loop of loads and stores in inline assembly; no stack,
/// no call, so it is also safe in a signal handler.
///
/// # Safety
/// `[src, src + len)` is readable, `[dst, dst + len)` writable, and they do not overlap.
#[inline]
pub(crate) unsafe fn copy_stack_bytes(dst: *mut u8, src: usize, len: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller's contract; `rep movsb` copies `rcx` bytes from `rsi` to `rdi`.
    unsafe {
        std::arch::asm!(
            "rep movsb",
            inout("rdi") dst => _,
            inout("rsi") src => _,
            inout("rcx") len => _,
            options(nostack, preserves_flags)
        )
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: the caller's contract; a loop of byte loads and stores that uses no stack.
    unsafe {
        if len > 0 {
            std::arch::asm!(
                "2:",
                "ldrb {b:w}, [{from}], #1",
                "strb {b:w}, [{to}], #1",
                "subs {n}, {n}, #1",
                "b.ne 2b",
                from = inout(reg) src => _,
                to = inout(reg) dst => _,
                n = inout(reg) len => _,
                b = out(reg) _,
                options(nostack)
            )
        }
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    // SAFETY: the caller's contract (no compaction or sampling runs on other targets).
    unsafe {
        std::ptr::copy_nonoverlapping(src as *const u8, dst, len)
    };
}

/// A scratch stack for [`calibrate`]: 64 KiB with a `PROT_NONE` guard page.
struct ProbeStack {
    start: usize,
    len: usize,
}

impl ProbeStack {
    fn new() -> Option<ProbeStack> {
        let len = 64 << 10;
        let ptr = region::map_anonymous(len)?;
        // SAFETY: the first page of the mapping just made.
        unsafe { libc::mprotect(ptr, region::page_size(), libc::PROT_NONE) };
        Some(ProbeStack {
            start: ptr as usize,
            len,
        })
    }
}

impl Drop for ProbeStack {
    fn drop(&mut self) {
        // SAFETY: our mapping; the coroutine that used it has finished.
        unsafe { libc::munmap(self.start as *mut libc::c_void, self.len) };
    }
}

// SAFETY: `[start, start + len)` is a private mapping with a guard page at `start`, 64 KiB
// long, page (so 16-byte) aligned.
unsafe impl corosensei::stack::Stack for ProbeStack {
    fn base(&self) -> corosensei::stack::StackPointer {
        corosensei::stack::StackPointer::new(self.start + self.len).expect("probe stack at 0")
    }

    fn limit(&self) -> corosensei::stack::StackPointer {
        corosensei::stack::StackPointer::new(self.start).expect("probe stack at 0")
    }
}

// ---------------------------------------------------------------------------------------
// The mode.

/// Set in a forked child: no registration, no compaction.
static FORKED: AtomicBool = AtomicBool::new(false);

/// Whether the registration alone guards the slots of a registered region (invariant 8):
/// fault messages name the faulting thread, and this is not a forked child (which has no
/// registration).
pub(crate) fn registration_guards() -> bool {
    uffd::knows_faulting_threads() && !FORKED.load(Ordering::Relaxed)
}

/// Whether stack regions are registered with userfaultfd: decided at the first region.
fn registration() -> Result<(), &'static str> {
    static DECIDED: OnceLock<Result<(), &'static str>> = OnceLock::new();
    *DECIDED.get_or_init(|| {
        if std::env::var("WEFT_STACK_COMPACTION").is_ok_and(|v| v.trim() == "off") {
            return Err("compaction disabled by WEFT_STACK_COMPACTION=off");
        }
        if !region::guard_markers_supported() {
            return Err("this kernel has no guard markers (MADV_GUARD_INSTALL, Linux 6.13)");
        }
        match uffd::open() {
            uffd::Access::Full => {}
            uffd::Access::UserModeOnly => {
                return Err("userfaultfd here serves user-mode faults only \
                    (vm.unprivileged_userfaultfd = 0, no CAP_SYS_PTRACE, no access to \
                    /dev/userfaultfd): a syscall writing into a compacted stack would fail \
                    with EFAULT")
            }
            uffd::Access::None => return Err("userfaultfd is not available"),
        }
        if !region::probe_registration() {
            return Err("userfaultfd cannot write-protect anonymous memory on this kernel");
        }
        // SAFETY: the handlers are plain functions that only take and release slot locks
        // and, in the child, write images back (see "fork" in the module doc).
        unsafe { libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child)) };
        Ok(())
    })
}

/// Whether new regions get a compaction table, to be registered with userfaultfd at their
/// first compaction (region.rs invariant 3).
pub(crate) fn register_regions() -> bool {
    !FORKED.load(Ordering::Relaxed) && MARGIN.get() != Some(&None) && registration().is_ok()
}

/// Which stack mode this process runs in: the one place it is decided (see the module doc).
/// Final once a runtime has been built.
pub fn mode() -> StackMode {
    if margin().is_none() {
        return StackMode::Off(if MARGIN.get().is_none() {
            "no runtime built yet"
        } else {
            "the stack pointer of a suspended task could not be bounded on this build"
        });
    }
    if FORKED.load(Ordering::Relaxed) {
        return StackMode::Reclaim("a forked child process has no userfaultfd registration");
    }
    match registration() {
        Ok(()) => StackMode::Compact,
        Err(why) => StackMode::Reclaim(why),
    }
}

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

fn lock_index(slot: usize, size: usize) -> usize {
    (slot / size) % LOCKS
}

fn lock(index: usize) {
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

fn unlock(index: usize) {
    // Release: pairs with the Acquire in `lock`.
    SLOT_LOCKS[index].0.store(false, Ordering::Release);
}

extern "C" fn fork_prepare() {
    // The forking thread may run on a task's stack in a registered region: touch the stack
    // this handler and `fork` itself will use before taking the locks, since a fault on a
    // missing page would wait for the fault thread, which would wait for a lock (invariant 6).
    let mut room = [0u8; 8 << 10];
    std::hint::black_box(&mut room);
    for index in 0..LOCKS {
        lock(index);
    }
}

extern "C" fn fork_parent() {
    for index in 0..LOCKS {
        unlock(index);
    }
}

extern "C" fn fork_child() {
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
            let (len, bytes) = image_parts(image);
            copy_stack_bytes((slot + size - len) as *mut u8, bytes as usize, len);
            sub(&COMPACTED_LIVE_BYTES, len as u64);
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
// Images: one per compacted task, in `arena.rs`.

use super::arena::{
    alloc as image_alloc, depth as image_depth, free as image_free, parts as image_parts,
    set_depth as image_set_depth,
};

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
const RESTORE_DEPTH_MAX: usize = 16;
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
/// lock and frees the image after unlocking (invariant 6).
///
/// # Safety
/// Invariant 2: the caller holds the slot's lock and `image` is its published image.
unsafe fn restore_locked(slot: usize, size: usize, image: *mut u8, scratch: &mut Scratch) {
    let page = region::page_size();
    // SAFETY: the caller's contract.
    let (len, bytes) = unsafe { image_parts(image) };
    let top = slot + size;
    let lo = top - len;
    // SAFETY: the caller's contract.
    let mut depth = unsafe { image_depth(image) };
    if depth.saturating_sub((top - lo / page * page) / page) >= RESTORE_PROBE_EXTRA {
        scratch.restores = scratch.restores.wrapping_add(1);
        if scratch.restores % RESTORE_PROBE_EVERY == 0 {
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
            if from < end {
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
    add(&RESTORES, 1);
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
        if !image.is_null() {
            // SAFETY: locked, and the entry is the published image (invariant 2).
            unsafe { restore_locked(slot, size, image, scratch) };
        }
        unlock(index);
        if !image.is_null() {
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
    if !image.is_null() {
        // SAFETY: locked; the entry is the slot's image.
        unsafe { restore_locked(slot, size, image, scratch) };
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
    if !image.is_null() {
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

// ---------------------------------------------------------------------------------------
// The per-task record and the per-worker queue.

/// Set while an entry for the task is in its worker's queue.
const QUEUED: u8 = 1;
/// Pages below the stack pointer were released at this park.
const RECLAIMED: u8 = 2;
/// The slot was compacted at this park (it may have been restored by the fault thread since).
const COMPACTED: u8 = 4;

/// What a task's worker knows of its stack: in the task's header, touched by that worker's
/// thread only (the task records `sp` itself, on that thread).
#[derive(Debug, Default)]
pub(crate) struct ParkedStack {
    /// The stack pointer recorded at the last switch out (invariant 1); it also tells the
    /// slot, so that this record adds only 16 bytes to every task's header.
    sp: Cell<usize>,
    /// The worker's clock, in ms, at the last park.
    parked_at: Cell<u32>,
    flags: Cell<u8>,
}

impl ParkedStack {
    /// The task will be resumed soon (it is next but one in its worker's ready queue, or its
    /// timer fires within the pre-restore horizon): if its slot is compacted, pulls the
    /// start of its image into the cache. Images lie scattered over an arena of up to
    /// gigabytes, and in a million sleepers' wake storm the first load of each was most of
    /// a restore's own CPU (a cache and TLB miss); prefetched a task ahead, it overlaps the
    /// run of the task before. Prefetched when the timer fired instead, it was evicted again
    /// by the restores of the tasks woken with it. Only a hint: the entry is read without
    /// the slot's lock, and a prefetch never faults.
    #[inline]
    pub(crate) fn prefetch(&self) {
        if self.flags.get() & COMPACTED == 0 {
            return;
        }
        if let Some((_, _, image)) = region::compacted_slot_of(self.sp.get()) {
            for offset in (0..PREFETCH_BYTES).step_by(64) {
                prefetch_line(image.wrapping_add(offset));
            }
            super::arena::prefetch_free(image);
        }
    }

    /// The stage before [`prefetch`](Self::prefetch) in a worker's pipeline over its ready
    /// queue (`sched/worker.rs`, `prefetch_ahead`): for a compacted slot, pulls in its
    /// image's entry in the region table (which `prefetch` reads); for a resident one, the
    /// lines its resume reads first (the switch's saved registers, just below the recorded
    /// stack pointer). Only a hint.
    #[inline]
    pub(crate) fn prefetch_early(&self) {
        let sp = self.sp.get();
        if self.flags.get() & COMPACTED != 0 {
            if let Some(entry) = region::compacted_entry_addr(sp) {
                prefetch_line(entry);
            }
            return;
        }
        prefetch_line(sp.wrapping_sub(64) as *const u8);
        prefetch_line(sp as *const u8);
    }

    /// Before the task is resumed: restores a compacted slot (invariant 4).
    #[inline]
    pub(crate) fn before_resume(&self, size: usize) {
        let flags = self.flags.get();
        if flags & (RECLAIMED | COMPACTED) != 0 {
            if flags & COMPACTED != 0 {
                if let Some((slot, _)) = region::slot_of(self.sp.get()) {
                    restore(slot, size);
                }
            }
            self.flags.set(flags & QUEUED);
        }
    }
}

/// Bytes of an image [`ParkedStack::prefetch`] pulls in: an idle task's whole image
/// (≈700 B of frames and the header).
const PREFETCH_BYTES: usize = 1024;

/// What the worker tells a step about one live task.
pub(crate) struct LiveStack<'a> {
    pub(crate) stack: &'a ParkedStack,
    pub(crate) size: usize,
    /// Whether the task is parked now (not woken, not running).
    pub(crate) parked: bool,
    /// The caller's key for the task's kind (its spawn site), handed back with the depth a
    /// compaction found (`step`'s `observe`).
    pub(crate) key: usize,
}

/// One worker's queue of parked tasks to shrink, in the order they parked.
pub(crate) struct ParkedStacks {
    policy: StackPolicy,
    compact: bool,
    /// (index in the worker's live list, clock in ms when queued).
    queue: VecDeque<(u32, u32)>,
    start: Instant,
    now_ms: u32,
    /// Ages in ms; u32::MAX for never.
    reclaim_ms: u32,
    compact_ms: u32,
    margin: usize,
}

/// Tasks handled per step, and the scratch vectors of one step, are bounded by the batch.
impl ParkedStacks {
    pub(crate) fn new(policy: StackPolicy) -> ParkedStacks {
        let ms = |d: Option<Duration>| d.map_or(u32::MAX, |d| d.as_millis().min(1 << 30) as u32);
        let margin = margin();
        let compact = mode() == StackMode::Compact && policy.compact_after.is_some();
        let reclaim = margin.is_some() && policy.reclaim_after.is_some();
        ParkedStacks {
            policy,
            compact,
            queue: VecDeque::new(),
            start: Instant::now(),
            now_ms: 0,
            reclaim_ms: if reclaim || compact {
                ms(policy.reclaim_after)
            } else {
                u32::MAX
            },
            compact_ms: if compact {
                ms(policy.compact_after)
            } else {
                u32::MAX
            },
            margin: margin.unwrap_or(0),
        }
    }

    fn enabled(&self) -> bool {
        self.reclaim_ms != u32::MAX || self.compact_ms != u32::MAX
    }

    /// Whether this worker compacts parked tasks' stacks (so that some may need a restore).
    pub(crate) fn compacts(&self) -> bool {
        self.compact_ms != u32::MAX
    }

    fn first_due_ms(&self) -> u32 {
        self.reclaim_ms.min(self.compact_ms)
    }

    /// The worker, after a task's park was published: notes it (one store, and a push the
    /// first time).
    #[inline]
    pub(crate) fn parked(&mut self, stack: &ParkedStack, live: usize) {
        if !self.enabled() {
            return;
        }
        stack.parked_at.set(self.now_ms);
        let flags = stack.flags.get();
        if flags & QUEUED == 0 {
            stack.flags.set(flags | QUEUED);
            self.queue.push_back((live as u32, self.now_ms));
        }
    }

    /// Whether a step has work now, and when it will next (the worker may sleep until then).
    pub(crate) fn due(&mut self) -> Option<Duration> {
        let &(_, queued) = self.queue.front()?;
        self.tick();
        let age = self.now_ms.wrapping_sub(queued);
        let due = self.first_due_ms();
        Some(Duration::from_millis(due.saturating_sub(age) as u64))
    }

    fn tick(&mut self) {
        self.now_ms = self.start.elapsed().as_millis() as u32;
    }

    /// One step: reclaims or compacts up to `batch` tasks parked long enough. `resolve`
    /// gives the live task at an index of the worker's live list; `observe` gets the key and
    /// the depth in pages (from the top of the slot down to its lowest resident page) of
    /// each task compacted. The worker calls it between tasks (none of its tasks runs);
    /// returns when to call again.
    pub(crate) fn step<'a>(
        &mut self,
        resolve: impl Fn(usize) -> Option<LiveStack<'a>>,
        observe: impl FnMut(usize, usize),
    ) -> Option<Duration> {
        if self.queue.is_empty() {
            return None;
        }
        self.tick();
        let now = self.now_ms;
        let page = region::page_size();
        let mut reclaim: Vec<(usize, usize)> = Vec::new();
        let mut compact: Vec<Candidate<'a>> = Vec::new();
        let mut requeue: Vec<u32> = Vec::new();
        let mut handled = 0;
        while handled < self.policy.batch.max(1) {
            let Some(&(index, queued)) = self.queue.front() else {
                break;
            };
            if now.wrapping_sub(queued) < self.first_due_ms() {
                break;
            }
            self.queue.pop_front();
            let Some(live) = resolve(index as usize) else {
                continue;
            };
            let stack = live.stack;
            let flags = stack.flags.get();
            if flags & QUEUED == 0 {
                continue; // a stale entry for the task now at this index
            }
            if !live.parked {
                stack.flags.set(flags & !QUEUED); // requeued at its next park
                continue;
            }
            handled += 1;
            let age = now.wrapping_sub(stack.parked_at.get());
            let Some((slot, _)) = region::slot_of(stack.sp.get()) else {
                stack.flags.set(flags & !QUEUED);
                continue;
            };
            let top = slot + live.size;
            // Invariant 1.
            let lo = stack.sp.get().saturating_sub(self.margin) & !15;
            if lo <= slot + page || lo > top {
                stack.flags.set(flags & !QUEUED);
                continue;
            }
            if flags & COMPACTED != 0 {
                stack.flags.set(flags & !QUEUED);
                continue;
            }
            if self.compact && age >= self.compact_ms && top - lo <= MAX_COMPACT {
                compact.push(Candidate {
                    stack,
                    slot,
                    size: live.size,
                    lo,
                    key: live.key,
                });
                stack.flags.set(flags & !QUEUED);
            } else {
                if flags & RECLAIMED == 0 && age >= self.reclaim_ms {
                    let below = lo / page * page;
                    if below > slot + page {
                        reclaim.push((slot + page, below - slot - page));
                    }
                    stack.flags.set(flags | RECLAIMED);
                }
                if self.compact && top - lo <= MAX_COMPACT {
                    requeue.push(index);
                } else {
                    stack.flags.set(stack.flags.get() & !QUEUED);
                }
            }
        }
        for index in requeue {
            self.queue.push_back((index, now));
        }
        if !reclaim.is_empty() {
            reclaim.sort_unstable();
            let released = region::release_resident(&reclaim);
            add(&RECLAIMED_BYTES, released as u64);
        }
        if !compact.is_empty() {
            compact_all(&mut compact, observe);
        }
        self.due()
    }
}

/// Largest live stack that is compacted (a bigger one is only reclaimed): its restore would
/// cost more than a few microseconds.
const MAX_COMPACT: usize = 64 << 10;

/// A task to compact.
struct Candidate<'a> {
    stack: &'a ParkedStack,
    slot: usize,
    size: usize,
    lo: usize,
    key: usize,
}

/// Compacts `candidates`, grouped into runs of consecutive slots; `observe` as in
/// [`ParkedStacks::step`].
fn compact_all(candidates: &mut [Candidate<'_>], mut observe: impl FnMut(usize, usize)) {
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
    // Everything allocated before the locks (invariant 6).
    let images: Vec<*mut u8> = run
        .iter()
        .map(|c| image_alloc(c.slot + size - c.lo))
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
        for image in images {
            // SAFETY: never published.
            unsafe { image_free(image) };
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
    for &index in &locks {
        unlock(index);
    }
    add(&COMPACTIONS, run.len() as u64);
    add(&COMPACTED_LIVE_BYTES, live_bytes);
    add(&COMPACTION_RELEASED_BYTES, released);
    if size < WINDOW {
        release_window_if_empty(start / WINDOW * WINDOW, size);
        release_window_if_empty((end - 1) / WINDOW * WINDOW, size);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibration_bounds_the_switch_frames() {
        /// Shaped like the scheduler's suspend value (a unit variant and one with a byte).
        #[derive(Clone, Copy)]
        #[allow(dead_code)]
        enum Suspend {
            Yield,
            Park(u8),
        }
        calibrate(Suspend::Park(0));
        let margin = margin().expect("calibration failed on a supported target");
        // The switch pushes three words below the recorded pointer at least.
        assert!((24..=MAX_MARGIN).contains(&margin), "margin {margin}");
        assert_eq!(margin % 16, 0);
    }
}
