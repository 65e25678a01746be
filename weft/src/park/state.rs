//! The park/wake handshake of one task: a token, like `std::thread::park`, plus the rule that a
//! task is published as parked only after it has fully switched out.
//!
//! Owns: one `AtomicU32` per task.
//!
//! ```text
//!            park(): token? ──yes──► RUNNING (return at once)
//!   RUNNING ───────────────────────────────────────────────────────────┐
//!      │ park(): no token → switch to the worker                        │ unpark()
//!      ▼                                                                ▼
//!   (switched out; still RUNNING) ── worker: publish_parked ──► PARKED  NOTIFIED
//!      │                                 fails if NOTIFIED:             │
//!      │                                 the worker requeues the task   │
//!      ▼                                                                │
//!   PARKED ── unpark(): swap to NOTIFIED, sees PARKED ──► schedule (exactly one waker does)
//!   resumed in park(): swap back to RUNNING (consumes the token)
//!
//!   RUNNING ── park() while panicking: block_thread ──► BLOCKED (the task's worker thread
//!   sleeps in `std::thread::park`; no switch) ── unpark(): swap to NOTIFIED, sees BLOCKED ──►
//!   unpark that OS thread; the task swaps back to RUNNING (`resumed`)
//! ```
//!
//! Invariants:
//! 1. Only the task itself moves NOTIFIED → RUNNING (`take_token`, `resumed`).
//! 2. Only the task's worker, after the switch, moves RUNNING → PARKED (`publish_parked`): the
//!    task's stack is never resumed by a waker while it is still executing on it.
//! 3. Exactly one `unpark` observes PARKED and schedules the task.
//! 4. Only the task itself, on its own thread, moves RUNNING → BLOCKED (`block_thread`); the
//!    one `unpark` that observes BLOCKED unparks the task's OS thread, which is then parked in
//!    `std::thread::park` or about to be (its token is sticky).
//!
//! Why: this is Go's `gopark` unlock step (the waiter list is told "parked" from the scheduler's
//! stack, after the switch) folded into one atomic, as `may` does with its "subscribe on the
//! scheduler stack" step. Checked by `src/tests/loom_park.rs`.

use crate::loom::sync::atomic::{AtomicU32, Ordering};

/// Running (or runnable), no token.
const RUNNING: u32 = 0;
/// An unpark arrived while the task was not parked: its next park returns at once.
const NOTIFIED: u32 = 1;
/// Switched out and waiting; the next unpark schedules it.
const PARKED: u32 = 2;
/// Not switched out: the task blocks its OS thread (it parked while panicking, see
/// sched/park.rs "Parking while panicking"); the next unpark unparks that thread.
const BLOCKED: u32 = 3;

/// What the caller of [`ParkState::unpark`] must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub(crate) enum Unpark {
    /// The task was running or already notified: the token is enough.
    Nothing,
    /// The task was parked: schedule it on its worker (invariant 3).
    Schedule,
    /// The task blocks its OS thread: unpark that thread (invariant 4).
    WakeThread,
}

/// The park/wake state of one task.
#[derive(Debug)]
pub(crate) struct ParkState(AtomicU32);

impl ParkState {
    pub(crate) fn new() -> Self {
        ParkState(AtomicU32::new(RUNNING))
    }

    /// The task, before switching out: consumes a pending token; true if there was one.
    #[inline]
    pub(crate) fn take_token(&self) -> bool {
        // A plain load first: a park with no token pending (the common case) then costs no
        // locked instruction. Missing a token that arrives right after is fine: the task
        // switches out and `publish_parked` sees NOTIFIED and requeues it.
        if self.0.load(Ordering::Relaxed) != NOTIFIED {
            return false;
        }
        // Acquire: pairs with the AcqRel swap in `unpark`, so what the unparker wrote before
        // unparking is visible to the task.
        self.0
            .compare_exchange(NOTIFIED, RUNNING, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// The worker, after the task switched out to park: true if the task is now parked (a
    /// later `unpark` will schedule it); false if a token arrived meanwhile, in which case the
    /// worker must requeue the task (invariant 2).
    #[inline]
    pub(crate) fn publish_parked(&self) -> bool {
        // Release: pairs with the Acquire in `unpark`, so the waker that schedules the task
        // sees everything the worker did with it (its home, its queue links) before parking.
        self.0
            .compare_exchange(RUNNING, PARKED, Ordering::Release, Ordering::Relaxed)
            .is_ok()
    }

    /// The task, back from the switch: consumes the token that woke (or kept) it.
    #[inline]
    pub(crate) fn resumed(&self) {
        // Acquire: pairs with the unparker's AcqRel swap (invariant 1).
        self.0.swap(RUNNING, Ordering::Acquire);
    }

    /// Whether the task is parked now: a hint (Relaxed) for the worker's stack upkeep, which
    /// only skips tasks that look woken, and a snapshot for a task dump (an unpark may come
    /// at any moment). Never used to decide anything that needs it exact.
    #[inline]
    pub(crate) fn is_parked(&self) -> bool {
        self.0.load(Ordering::Relaxed) == PARKED
    }

    /// The task, instead of switching out while its thread is panicking: true if it is now
    /// BLOCKED and must park its thread; false if a token arrived (the caller consumes it with
    /// `resumed`). Invariant 4.
    pub(crate) fn block_thread(&self) -> bool {
        // Release: pairs with the Acquire in `unpark`, so the waker that sees BLOCKED sees the
        // task's home (written before the task first ran) and everything it did before.
        self.0
            .compare_exchange(RUNNING, BLOCKED, Ordering::Release, Ordering::Relaxed)
            .is_ok()
    }

    /// Any thread: delivers a token, and says what else the caller must do (invariants 3, 4).
    #[inline]
    pub(crate) fn unpark(&self) -> Unpark {
        // AcqRel: Release publishes the unparker's writes to the task (pairs with `take_token`
        // and `resumed`); Acquire pairs with `publish_parked` and `block_thread`.
        match self.0.swap(NOTIFIED, Ordering::AcqRel) {
            PARKED => Unpark::Schedule,
            BLOCKED => Unpark::WakeThread,
            _ => Unpark::Nothing,
        }
    }
}
