//! The switch out of a suspended task and its margin: the stack pointer a task records as it
//! switches out, and how far below it the switch itself writes (compact.rs invariant 1, the
//! bound everything below rests on).
//!
//! Owns: the calibrated margin (`MARGIN`, set once per process by [`calibrate`]).
//!
//! Invariants:
//! 1. The margin covers both ways this binary's switch can be compiled — `Yielder::suspend`
//!    inlined, and its out-of-line copy — with two fill patterns each; a calibration that
//!    cannot bound them (or measures more than `MAX_MARGIN`) leaves the margin unset, and
//!    then nothing is reclaimed or compacted (mode.rs).
//!
//! May call: corosensei (a scratch coroutine for the probe), libc. Called by: the scheduler
//! (`switch_out` at every park and yield, `calibrate` at a runtime's build), `parked.rs`
//! and `compact.rs` (the margin), `restore.rs` and `compact.rs` (`copy_stack_bytes`), the
//! monitor (`copy_stack_bytes`).
//!
//! Why measured rather than assumed: what the switch pushes below the recorded pointer
//! depends on the compiler, the target and the build (≈100 B in a release build, ≈3 KB under
//! AddressSanitizer), and a margin too small would release live bytes.

use std::cell::Cell;
use std::sync::OnceLock;

use super::parked::ParkedStack;
use super::region;

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
pub(super) static MARGIN: OnceLock<Option<usize>> = OnceLock::new();

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
