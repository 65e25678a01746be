//! Which of reclaim and compaction this process does (compact.rs, "The contract", says why
//! that depends on the kernel), how a runtime tunes them ([`StackPolicy`]), and what they
//! have done so far ([`Counters`]).
//!
//! Owns: the decision (made once, at the first region or the first `mode` call), the
//! forked-child flag, and the process-wide counters: Relaxed tallies, each on its own cache
//! line (both workers update them at every compaction and restore).
//!
//! Invariants:
//! 1. [`mode`] is the one place the mode is decided; it is final once a runtime is built
//!    (the switch margin is calibrated then, switch.rs).
//! 2. A forked child neither compacts nor registers a region (compact.rs, "fork").
//!
//! May call: `uffd.rs` and `region.rs` (what the kernel offers), `switch.rs` (the margin),
//! `restore.rs` (the fork handlers it registers). Called by: `region.rs` (a new region),
//! `parked.rs`, `compact.rs` and `restore.rs` (the counters), `weft::metrics`, the runtime.
//!
//! Why one decision per process: a region registered with userfaultfd stays registered and
//! its compacted slots are restored through it, so the mode cannot change under parked
//! stacks.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use crossbeam_utils::CachePadded;

use super::restore::{fork_child, fork_parent, fork_prepare};
use super::switch::{margin, MARGIN};
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

pub(super) static RECLAIMED_BYTES: CachePadded<AtomicU64> = CachePadded::new(AtomicU64::new(0));
pub(super) static COMPACTED_LIVE_BYTES: CachePadded<AtomicU64> =
    CachePadded::new(AtomicU64::new(0));
pub(super) static COMPACTIONS: CachePadded<AtomicU64> = CachePadded::new(AtomicU64::new(0));
pub(super) static COMPACTION_RELEASED_BYTES: CachePadded<AtomicU64> =
    CachePadded::new(AtomicU64::new(0));
pub(super) static RESTORES: CachePadded<AtomicU64> = CachePadded::new(AtomicU64::new(0));
pub(super) static FAULT_RESTORES: CachePadded<AtomicU64> = CachePadded::new(AtomicU64::new(0));
pub(super) static ZERO_FILLS: CachePadded<AtomicU64> = CachePadded::new(AtomicU64::new(0));
/// Bytes of the compacted tasks' images in their arena, headers included (`arena.rs`):
/// added at a compaction, lowered when `compact.rs` swaps an image for its encoding
/// (`template.rs`), subtracted at the restore.
pub(super) static IMAGE_BYTES: CachePadded<AtomicU64> = CachePadded::new(AtomicU64::new(0));
/// Templates made (`template.rs`), and the bytes they hold; neither ever falls.
pub(super) static TEMPLATES: CachePadded<AtomicU64> = CachePadded::new(AtomicU64::new(0));
pub(super) static TEMPLATE_BYTES: CachePadded<AtomicU64> = CachePadded::new(AtomicU64::new(0));

/// A snapshot of the stack-shrinking counters, process-wide; cheap (Relaxed loads).
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
    /// Bytes the images of the compacted tasks take now in their arena, each image's 8-byte
    /// header included: the live bytes, or, for an image stored as its difference from a
    /// template of the same parking place, that difference. Divided by `compacted_tasks`, an
    /// image's cost per task.
    pub image_bytes: u64,
    /// Templates made so far: an image per place where tasks park, shared by the images of
    /// every task parked there (never freed).
    pub templates: u64,
    /// Bytes the templates hold (at most 4 MiB).
    pub template_bytes: u64,
}

/// The stack-shrinking counters now (see [`Counters`]).
pub fn counters() -> Counters {
    let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
    // Restores are read first: a compaction counted meanwhile only makes this larger,
    // never wrap below zero.
    let restores = r(&RESTORES);
    let compactions = r(&COMPACTIONS);
    let compacted_tasks = compactions.saturating_sub(restores);
    let compacted_live_bytes = r(&COMPACTED_LIVE_BYTES);
    Counters {
        reclaimed_bytes: r(&RECLAIMED_BYTES),
        compacted_live_bytes,
        compacted_tasks,
        compactions,
        compaction_released_bytes: r(&COMPACTION_RELEASED_BYTES),
        restores,
        fault_restores: r(&FAULT_RESTORES),
        zero_fills: r(&ZERO_FILLS),
        image_bytes: r(&IMAGE_BYTES),
        templates: r(&TEMPLATES),
        template_bytes: r(&TEMPLATE_BYTES),
    }
}

/// Restores so far (one Relaxed load): the slot pools' wake-storm trim (stack/mod.rs,
/// `STORM_BATCH`).
pub(super) fn restores() -> u64 {
    RESTORES.load(Ordering::Relaxed)
}

pub(super) fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

pub(super) fn sub(counter: &AtomicU64, n: u64) {
    counter.fetch_sub(n, Ordering::Relaxed);
}

// ---------------------------------------------------------------------------------------
// The mode.

/// Set in a forked child: no registration, no compaction.
pub(super) static FORKED: AtomicBool = AtomicBool::new(false);

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
