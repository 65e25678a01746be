//! The channel core: one lock-protected state per channel, queues of waiting operations, and the
//! selector that lets one waiting party sit in many queues at once (Go's `hchan`, `sudog` and
//! `selectDone`).
//!
//! Owns: [`Chan`] — its buffer, its two wait queues (lists threaded through the entries,
//! `waitq.rs`) and its timer, all behind `Chan::state` (a short, never-parked-in lock); [`Selector`] — the state word and the waiter of one blocked
//! operation or `select!`, on the blocked party's stack; [`Entry`] — one arm of a blocked
//! operation queued in one channel, with the slot a value is handed over in: on the blocked
//! party's stack for a single operation (no allocation), boxed for a `select!` arm.
//!
//! ```text
//!   Selector state:  WAITING ──peer: claim (CAS)──► CLAIMED ──peer: slot, wake, store──► SELECTED+arm
//!                       └──────owner: abort (CAS)──► ABORTED
//! ```
//!
//! Invariants:
//! 1. An entry's slot is touched by its owner before it is queued (a send puts its value
//!    in), by the one peer whose CAS moved its selector WAITING → CLAIMED (until that peer
//!    stores SELECTED), and by its owner again after it saw SELECTED (Acquire) or after its own
//!    abort succeeded. These never overlap, so the slot needs no lock of its own. The peer's
//!    SELECTED store is its last touch of the entry and of the selector: it fills the slot
//!    under the channel lock, unlocks, wakes the owner, then stores SELECTED; an owner that
//!    sees CLAIMED spins instead of parking (the peer is running, never parked, in that
//!    window), so the owner's stack frame outlives every peer access.
//! 2. A selector leaves WAITING once: selected by exactly one peer (so a value is handed over
//!    at most once and to at most one arm), or aborted by its owner (then no peer touches any
//!    of its entries again; the owner takes a send value back).
//! 3. Entries are queued and claimed under their channel's lock; a claimer pops the entry it
//!    claimed. An entry whose selector is no longer WAITING is stale: anyone may drop it from a
//!    queue, and its owner removes whatever is left after its wait ends — also when the wait
//!    unwinds (a task cancelled at shutdown) — so a queue never points at a dead frame.
//! 4. A party publishes its entry under the lock after finding the operation not ready under
//!    the same lock, and then parks in a loop on its selector's state: a peer that arrives later
//!    finds the entry, so no wakeup is lost. A peer's wake that comes before the park leaves a
//!    token that makes the park return at once (park/state.rs, as `std::thread::park`), so
//!    a single operation parks before its first look at the state.
//! 5. A `select!` never completes an operation while registering (that would need its own
//!    selector and a peer's at once, the double claim Go avoids by locking every channel): it
//!    registers every arm, and if an arm turned ready meanwhile it aborts, unregisters and polls
//!    again (crossbeam-channel's approach). A `select!` that would end with nothing — its
//!    `default` arm, or a deadline passed before it registered — first polls again holding
//!    every one of its channels' locks at once, taken in address order (Go's `sellock`): so
//!    "nothing was ready" is true at one instant, not only arm by arm at different ones (a
//!    peer that fills one arm after it was looked at and empties another before it is would
//!    otherwise make `default` run although an arm was ready throughout).
//! 6. The buffer holds at most `cap` values; `cap == 0` is a rendezvous (values pass only from a
//!    sender entry to a receiver or the reverse), `usize::MAX` is unbounded.
//! 7. The selector of a single blocking operation (not a `select!`) has one entry in one
//!    channel, so every transition out of WAITING — a claim, or the owner's abort on timeout
//!    or unwind — happens under that channel's lock: they are plain loads and stores, not
//!    CAS. A `select!`'s selector is claimed from several channels' locks and uses CAS.
//! 8. Cancel safety: a blocked party's park never unwinds (sched/park.rs invariant 3); it says
//!    a cancellation is pending, and the party aborts its selector — under the channel lock
//!    for a single operation, by CAS for a `select!`. If the abort wins, no peer touched the
//!    entries (a send still holds its value) and the party reports `Cancelled`, so the caller
//!    unwinds with nothing handed to it; if a peer claimed it first, the party completes as
//!    usual with what it was handed, and the cancellation takes effect at its next wait. A
//!    value is never handed to a party that then drops it in an unwind.
//! 9. A probe is an entry of a `Select::ready` (or of a `Select` send operation) that only
//!    waits for its side of the channel to become ready: it is queued like any entry, and the
//!    peer that would claim it for a hand-off — a sender for a receive probe, a receiver for a
//!    send probe — completes it instead and goes on as if it were not there (no value moves);
//!    a close completes it too. It never counts as a peer for readiness.
//!
//! May call: `park` (reasons), `sched` (waiters, the current task, unparks). Called by: `chan`
//! (Sender, Receiver, select!), `time` (after, tick).
//!
//! Why one mutex per channel rather than a lock-free ring: Go's channels are one lock too, the
//! uncontended lock costs ≈ 2 atomic operations here, and every cross-thread step (queueing,
//! close, select registration and abort) stays small enough for loom to check exhaustively
//! (`src/tests/loom_chan.rs`). A woken party does not retake the lock: the peer hands the value
//! over through the entry's slot (invariant 1). Why entries on the stack: a park + wake round
//! trip is the ping-pong benchmark's whole cost, and two allocations and their reference
//! counts were a third of it; a task's stack never moves, so a pointer to it is stable. The
//! queues link the entries themselves for the same reason: a ring of pointers cost more to push
//! and pop than the list, and an abort had to search it.

use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::ptr;
use std::time::{Duration, Instant};

#[cfg(not(loom))]
use super::spin_lock::{Mutex, MutexGuard};
#[cfg(loom)]
use crate::chan_spin_lock::{Mutex, MutexGuard};
use crate::loom::sync::atomic::{AtomicUsize, Ordering};
#[cfg(loom)]
use crate::sched::Waiter;

#[path = "arms.rs"]
mod arms;
#[cfg(not(loom))]
#[path = "async_ops.rs"]
mod async_ops;
#[path = "waitq.rs"]
mod waitq;
pub(crate) use arms::{select, ArmSlot};
pub use arms::{ProbeArm, RecvArm, SelectArm, Selected, SendArm};
#[cfg(not(loom))]
pub(crate) use async_ops::{RecvWait, SendWait};
use waitq::{Links, WaitQueue};

/// Nobody has completed this operation yet; peers may claim it, the owner may abort it.
const WAITING: usize = 0;
/// The owner gave up (timeout, or a `select!` that polls again); no peer may claim it.
const ABORTED: usize = 1;
/// A peer won the claim and is handing over the value; SELECTED follows shortly.
const CLAIMED: usize = 2;
/// `SELECTED + arm`: the operation of arm `arm` completed (or its channel closed).
const SELECTED: usize = 3;

/// One blocked operation or `select!`: who to wake, and whether and how it completed. Lives on
/// the blocked party's stack (invariant 1).
#[derive(Debug)]
#[doc(hidden)]
pub struct Selector {
    state: AtomicUsize,
    waiter: SelectorWaiter,
    /// One entry in one channel (a plain blocking send or recv): claims and aborts both
    /// happen under that channel's lock, so they need no CAS (invariant 7).
    single: bool,
}

impl Selector {
    /// A selector for a `select!`, whose entries sit in several channels.
    pub(crate) fn new() -> Selector {
        Selector {
            single: false,
            state: AtomicUsize::new(WAITING),
            waiter: SelectorWaiter::current(),
        }
    }

    /// A selector for one blocking operation on one channel (invariant 7).
    #[inline]
    fn new_single() -> Selector {
        Selector {
            single: true,
            state: AtomicUsize::new(WAITING),
            waiter: SelectorWaiter::current(),
        }
    }

    /// A peer, under the channel lock: takes the right to complete this selector (invariant 2).
    #[inline]
    fn claim(&self) -> bool {
        if self.single {
            // Invariant 7: the claimer and the owner's abort both hold the channel lock.
            if self.state.load(Ordering::Relaxed) != WAITING {
                return false;
            }
            self.state.store(CLAIMED, Ordering::Relaxed);
            return true;
        }
        // Relaxed is enough: the entry was published to us by the channel lock, and what we
        // hand over is published by `complete`'s Release.
        self.state
            .compare_exchange(WAITING, CLAIMED, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// The claimer, after filling the slot and unlocking the channel: wakes the owner, then
    /// marks arm `arm` completed. The store is the claimer's last touch of the selector
    /// (invariant 1).
    #[inline]
    fn complete(&self, arm: usize) {
        wake_by_ref(&self.waiter);
        // Release: publishes the claimer's slot write; pairs with the Acquire in `selected`
        // and in `abort`.
        self.state.store(SELECTED + arm, Ordering::Release);
    }

    fn is_waiting(&self) -> bool {
        self.state.load(Ordering::Relaxed) == WAITING
    }

    /// The owner: `Some(arm)` if arm `arm` completed; `None` if still waiting. Spins through
    /// the short CLAIMED window (invariant 1).
    #[inline]
    pub(crate) fn selected(&self) -> Option<usize> {
        let mut spins = 0;
        loop {
            // Acquire: pairs with the Release in `complete` (invariant 1: the slot is ours).
            match self.state.load(Ordering::Acquire) {
                WAITING | ABORTED => return None,
                CLAIMED => spin(&mut spins),
                state => return Some(state - SELECTED),
            }
        }
    }

    /// The owner: gives up waiting. `Ok` if no peer can complete it any more; `Err(arm)` if a
    /// peer already did (the owner must then take that arm's result).
    pub(crate) fn abort(&self) -> Result<(), usize> {
        let mut spins = 0;
        loop {
            // Acquire on failure: pairs with `complete`'s Release when we read SELECTED.
            match self.state.compare_exchange(
                WAITING,
                ABORTED,
                Ordering::Relaxed,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(()),
                Err(CLAIMED) => spin(&mut spins), // the claimer is running (invariant 1)
                Err(state) => return Err(state - SELECTED),
            }
        }
    }
}

/// Who a selector wakes: the blocked task, by a borrowed pointer to its header (no reference
/// count is touched unless the wake has to schedule it), a plain OS thread, or the waker of
/// an async operation (async_ops.rs; its wait is boxed, not on a stack).
#[cfg(not(loom))]
#[derive(Debug)]
enum SelectorWaiter {
    Task(std::ptr::NonNull<crate::sched::Header>),
    Thread(std::thread::Thread),
    /// Boxed so that a selector, on the stack of every blocked operation, stays two words.
    Waker(Box<std::task::Waker>),
}

#[cfg(not(loom))]
impl SelectorWaiter {
    #[inline]
    fn current() -> Self {
        match crate::sched::current_task_ptr() {
            Some(task) => SelectorWaiter::Task(task),
            None => SelectorWaiter::Thread(std::thread::current()),
        }
    }
}

#[cfg(loom)]
type SelectorWaiter = Waiter;

#[cfg(not(loom))]
#[inline]
fn wake_by_ref(waiter: &SelectorWaiter) {
    match waiter {
        SelectorWaiter::Task(task) => {
            // SAFETY: the task is blocked on this selector, so it is Started and its worker's
            // live list holds a reference (sched/task/mod.rs invariant 3): the header is alive.
            unsafe { crate::sched::unpark_ptr(*task) }
        }
        SelectorWaiter::Thread(thread) => thread.unpark(),
        // The executor's wake: it schedules the future's task. For a probe it runs under the
        // channel lock (`claim_peer`), like a task's unpark; executors' wakes only queue
        // work, and none re-enters a channel.
        SelectorWaiter::Waker(waker) => waker.wake_by_ref(),
    }
}

#[cfg(loom)]
fn wake_by_ref(waiter: &Waiter) {
    waiter.clone().wake();
}

/// Waits out a CLAIMED window: the claimer is running (invariant 1), but its OS thread may
/// have been preempted, so after a while give the CPU away.
#[cfg(not(loom))]
#[cold]
fn spin(spins: &mut u32) {
    *spins += 1;
    if *spins < 100 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

#[cfg(loom)]
fn spin(_: &mut u32) {
    loom::thread::yield_now();
}

/// One arm of a blocked operation, queued in one channel.
pub(crate) struct Entry<T> {
    sel: *const Selector,
    arm: usize,
    /// A probe (invariant 9): waits for its side to become ready, takes and gives nothing.
    probe: bool,
    /// A send's value until taken; a receive's value once handed over (invariant 1).
    slot: UnsafeCell<Option<T>>,
    /// Its place in its channel's wait queue, under the channel lock (waitq.rs).
    links: UnsafeCell<Links<T>>,
}

impl<T> Entry<T> {
    pub(crate) fn new(sel: &Selector, arm: usize, value: Option<T>) -> Entry<T> {
        Entry {
            sel,
            arm,
            probe: false,
            slot: UnsafeCell::new(value),
            links: Links::new(),
        }
    }

    /// A probe entry (invariant 9) of arm `arm` of `sel`.
    pub(crate) fn probe(sel: &Selector, arm: usize) -> Entry<T> {
        Entry {
            probe: true,
            ..Entry::new(sel, arm, None)
        }
    }

    fn handoff(&self) -> Handoff {
        Handoff {
            sel: self.sel,
            arm: self.arm,
        }
    }

    fn sel(&self) -> &Selector {
        // SAFETY: the selector outlives its entries: both live in the owner's frame (or the
        // entries in boxes it frees) until every entry has left every queue (invariant 3).
        unsafe { &*self.sel }
    }

    /// The owner takes the slot's content.
    ///
    /// # Safety
    /// Only the owner, after its selector was SELECTED (seen with Acquire) or aborted, and
    /// the entry is no longer reachable by a claimer (invariant 1).
    pub(crate) unsafe fn take(&self) -> Option<T> {
        // SAFETY: exclusive access is the caller's contract.
        unsafe { (*self.slot.get()).take() }
    }
}

/// A claimed entry whose owner still has to be told: done after the channel lock is released,
/// so the owner never wakes into a lock its waker holds.
#[must_use = "a claimed entry must be completed, or its owner waits forever"]
struct Handoff {
    sel: *const Selector,
    arm: usize,
}

impl Handoff {
    #[inline]
    fn finish(self) {
        // SAFETY: invariant 1: the owner of a CLAIMED selector waits (spinning) for this
        // completion, so its frame is alive.
        unsafe { &*self.sel }.complete(self.arm);
    }
}

#[inline]
fn finish(handoff: Option<Handoff>) {
    if let Some(handoff) = handoff {
        handoff.finish();
    }
}

/// What a timer channel (`time::after`, `time::tick`) produces, and when.
pub(crate) struct Timer<T> {
    next: Instant,
    period: Option<Duration>,
    make: fn(Instant) -> T,
}

struct State<T> {
    buf: VecDeque<T>,
    cap: usize,
    senders: WaitQueue<T>,
    receivers: WaitQueue<T>,
    /// Every sender is gone: receivers drain the buffer, then see the channel closed.
    tx_gone: bool,
    /// Every receiver is gone: sends give their value back.
    rx_gone: bool,
    timer: Option<Timer<T>>,
    /// A timer channel (`time::after`, `tick`): its capacity is one, as crossbeam-channel's,
    /// and its length one while a value is due, also after a one-shot timer is gone.
    timed: bool,
}

/// A channel: the state every `Sender` and `Receiver` of it shares.
pub(crate) struct Chan<T> {
    state: Mutex<State<T>>,
    pub(crate) senders: AtomicUsize,
    pub(crate) receivers: AtomicUsize,
}

/// Result of a non-blocking send.
pub(crate) enum TrySend<T> {
    Sent,
    Full(T),
    Disconnected(T),
}

/// Result of a non-blocking receive.
pub(crate) enum TryRecv<T> {
    Got(T),
    Empty,
    Disconnected,
}

/// Result of a send that may time out.
pub(crate) enum SendOutcome<T> {
    Sent,
    Disconnected(T),
    Timeout(T),
    /// The park said a cancellation is pending and no receiver took the value (invariant 8):
    /// the caller unwinds, or retries if the cancellation turned out stale.
    Cancelled(T),
}

/// Result of a receive that may time out.
pub(crate) enum RecvOutcome<T> {
    Got(T),
    Disconnected,
    Timeout,
    /// As [`SendOutcome::Cancelled`]: nothing was handed to this receiver.
    Cancelled,
}

/// How a single-entry wait ended.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waited {
    /// A peer claimed the entry: its slot holds the outcome.
    Selected,
    /// Its deadline (or a timer channel's tick) passed first; the entry is out of the queue.
    Aborted,
    /// A cancellation is pending and no peer claimed the entry, which is out of the queue.
    Cancelled,
}

impl Waited {
    /// `Selected` if `abort_one` found the entry claimed, else `otherwise`.
    fn after_abort(claimed: bool, otherwise: Waited) -> Waited {
        if claimed {
            Waited::Selected
        } else {
            otherwise
        }
    }
}

/// Pops the first entry of `queue` that can be claimed, dropping stale ones (invariant 3). The
/// returned entry is CLAIMED: fill its slot, then finish its handoff after unlocking.
///
/// The caller never has an entry of its own queued here: a blocking operation polls before it
/// queues, and a `select!` polls only while none of its arms is registered (invariant 5).
fn claim_peer<T>(queue: &mut WaitQueue<T>) -> Option<&Entry<T>> {
    while let Some(entry) = queue.pop_front() {
        // SAFETY: invariant 3: a queued entry is alive, and invariant 1: a claimed one stays
        // alive until its SELECTED store.
        let entry = unsafe { &*entry };
        if entry.sel().claim() {
            if entry.probe {
                // Invariant 9: told "ready" and passed over. Completed here, under the lock,
                // rather than after it: probes are rare, and the list of handoffs stays one.
                entry.handoff().finish();
                continue;
            }
            return Some(entry);
        }
    }
    None
}

/// True if `queue` holds an entry of another party that is still waiting (a probe is none:
/// it has nothing to give or take).
fn has_peer<T>(queue: &WaitQueue<T>, me: *const Selector) -> bool {
    queue
        .iter()
        .any(|entry| !entry.probe && !ptr::eq(entry.sel, me) && entry.sel().is_waiting())
}

impl<T> State<T> {
    fn try_send(&mut self, value: T) -> (TrySend<T>, Option<Handoff>) {
        if self.rx_gone {
            return (TrySend::Disconnected(value), None);
        }
        if let Some(peer) = claim_peer(&mut self.receivers) {
            // SAFETY: invariant 1: we claimed `peer`, so its slot is ours until the handoff.
            unsafe { *peer.slot.get() = Some(value) };
            return (TrySend::Sent, Some(peer.handoff()));
        }
        if self.buf.len() < self.cap {
            self.buf.push_back(value);
            return (TrySend::Sent, None);
        }
        (TrySend::Full(value), None)
    }

    fn try_recv(&mut self) -> (TryRecv<T>, Option<Handoff>) {
        if let Some(value) = self.buf.pop_front() {
            // A slot freed up: move one blocked sender's value into the buffer (Go does too).
            let handoff = claim_peer(&mut self.senders).map(|peer| {
                // SAFETY: invariant 1: claimed, so the slot is ours until the handoff.
                let moved = unsafe { (*peer.slot.get()).take() };
                self.buf.extend(moved);
                peer.handoff()
            });
            return (TryRecv::Got(value), handoff);
        }
        if let Some(peer) = claim_peer(&mut self.senders) {
            // SAFETY: invariant 1: claimed, so the slot is ours until the handoff.
            let value = unsafe { (*peer.slot.get()).take() };
            let value = value.expect("weft: a blocked sender's entry held no value");
            return (TryRecv::Got(value), Some(peer.handoff()));
        }
        if let Some(value) = self.fire_timer() {
            return (TryRecv::Got(value), None);
        }
        if self.tx_gone {
            return (TryRecv::Disconnected, None);
        }
        (TryRecv::Empty, None)
    }

    fn fire_timer(&mut self) -> Option<T> {
        let timer = self.timer.as_mut()?;
        let now = Instant::now();
        if now < timer.next {
            return None;
        }
        let fired = timer.next;
        let value = (timer.make)(fired);
        match timer.period {
            Some(period) => {
                // Like Go's Ticker, ticks a slow receiver missed are dropped.
                timer.next += period;
                if timer.next <= now {
                    timer.next = now + period;
                }
            }
            None => self.timer = None,
        }
        Some(value)
    }

    fn recv_ready(&self, me: *const Selector) -> bool {
        !self.buf.is_empty()
            || has_peer(&self.senders, me)
            || self.tx_gone
            || self
                .timer
                .as_ref()
                .is_some_and(|t| t.next <= Instant::now())
    }

    fn send_ready(&self, me: *const Selector) -> bool {
        self.rx_gone || self.buf.len() < self.cap || has_peer(&self.receivers, me)
    }

    /// Takes the caller's own `entry` out of the `side` queue, if it is still there.
    fn remove_entry(&mut self, side: Side, entry: *const Entry<T>) {
        let queue = match side {
            Side::Senders => &mut self.senders,
            Side::Receivers => &mut self.receivers,
        };
        // SAFETY: the caller's entry is alive, and it is only ever queued on `side` of this
        // channel.
        unsafe { queue.remove(entry) };
    }
}

/// Takes a single-entry wait out of its queue if its park unwinds (a task cancelled at
/// shutdown), so the queue never points at a dead frame (invariant 3); forgotten when the wait
/// ends normally.
struct AbortOnUnwind<'a, T> {
    chan: &'a Chan<T>,
    sel: &'a Selector,
    side: Side,
    entry: &'a Entry<T>,
}

impl<T> Drop for AbortOnUnwind<'_, T> {
    fn drop(&mut self) {
        self.chan.abort_one(self.sel, self.side, self.entry);
    }
}

/// Which wait queue of a channel.
#[derive(Clone, Copy)]
enum Side {
    Senders,
    Receivers,
}

impl<T> Chan<T> {
    /// A channel with one sender and one receiver counted.
    pub(crate) fn new(cap: usize) -> Chan<T> {
        Chan {
            state: Mutex::new(State {
                buf: VecDeque::new(),
                cap,
                senders: WaitQueue::new(),
                receivers: WaitQueue::new(),
                tx_gone: false,
                rx_gone: false,
                timer: None,
                timed: false,
            }),
            senders: AtomicUsize::new(1),
            receivers: AtomicUsize::new(1),
        }
    }

    /// A channel with no sender that yields `make(t)` at each time `t` of the timer; never
    /// closes from the sending side.
    pub(crate) fn with_timer(
        first: Instant,
        period: Option<Duration>,
        make: fn(Instant) -> T,
    ) -> Chan<T> {
        let chan = Chan::new(0);
        let mut state = chan.lock();
        state.timer = Some(Timer {
            next: first,
            period,
            make,
        });
        state.timed = true;
        drop(state);
        chan
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock()
    }

    pub(crate) fn capacity(&self) -> usize {
        let state = self.lock();
        if state.timed {
            1
        } else {
            state.cap
        }
    }

    pub(crate) fn len(&self) -> usize {
        let state = self.lock();
        let due = state
            .timer
            .as_ref()
            .is_some_and(|t| t.next <= Instant::now());
        state.buf.len() + usize::from(due)
    }

    pub(crate) fn try_send(&self, value: T) -> TrySend<T> {
        let (result, handoff) = self.lock().try_send(value);
        finish(handoff);
        result
    }

    pub(crate) fn try_recv(&self) -> TryRecv<T> {
        let (result, handoff) = self.lock().try_recv();
        finish(handoff);
        result
    }

    /// The locked poll of a `select!` (invariant 5, arms.rs): takes the lock with no guard.
    fn lock_raw(&self) {
        self.state.lock_raw();
    }

    /// Releases a lock taken with [`lock_raw`](Self::lock_raw).
    ///
    /// # Safety
    /// The caller holds it through `lock_raw`.
    unsafe fn unlock_raw(&self) {
        // SAFETY: the caller's contract.
        unsafe { self.state.unlock_raw() }
    }

    /// `try_recv` with the lock held through `lock_raw`; the handoff is finished after
    /// unlocking.
    ///
    /// # Safety
    /// The caller holds the lock through `lock_raw`.
    unsafe fn try_recv_held(&self) -> (TryRecv<T>, Option<Handoff>) {
        // SAFETY: the caller's contract; the borrow ends here.
        unsafe { self.state.get_held() }.try_recv()
    }

    /// `try_send` with the lock held through `lock_raw`.
    ///
    /// # Safety
    /// As [`try_recv_held`](Self::try_recv_held).
    unsafe fn try_send_held(&self, value: T) -> (TrySend<T>, Option<Handoff>) {
        // SAFETY: the caller's contract; the borrow ends here.
        unsafe { self.state.get_held() }.try_send(value)
    }

    /// Removes `entry` from one of the queues, if a claimer did not pop it (invariant 3).
    fn unqueue(&self, side: Side, entry: *const Entry<T>) {
        self.lock().remove_entry(side, entry);
    }

    /// Waits for the single entry `entry` of `sel`, queued on `side` under the lock just
    /// released. Always leaves the entry out of the queue, also when the park unwinds
    /// (invariant 3).
    #[inline(always)]
    fn wait_one(
        &self,
        sel: &Selector,
        side: Side,
        entry: &Entry<T>,
        wake_at: Option<Instant>,
        park: &mut impl FnMut(Option<Instant>) -> bool,
    ) -> Waited {
        let unwinding = AbortOnUnwind {
            chan: self,
            sel,
            side,
            entry,
        };
        // Park before the first look at the state: the entry was queued only now, and a claim
        // since then has woken us, which makes this park return at once (invariant 4).
        let waited = loop {
            if wake_at.is_some_and(|d| Instant::now() >= d) {
                break Waited::after_abort(self.abort_one(sel, side, entry), Waited::Aborted);
            }
            if park(wake_at) {
                // Invariant 8: a claim that came first keeps its value.
                break Waited::after_abort(self.abort_one(sel, side, entry), Waited::Cancelled);
            }
            if sel.selected().is_some() {
                break Waited::Selected; // the claimer popped it
            }
        };
        std::mem::forget(unwinding);
        waited
    }

    /// Gives up a single-entry wait under the channel lock (invariant 7); true if a claimer
    /// got there first (then the entry's slot holds the outcome).
    fn abort_one(&self, sel: &Selector, side: Side, entry: &Entry<T>) -> bool {
        let mut state = self.lock();
        if sel.state.load(Ordering::Relaxed) == WAITING {
            sel.state.store(ABORTED, Ordering::Relaxed);
            state.remove_entry(side, entry);
            return false;
        }
        drop(state);
        // Claimed (popped already): wait out the CLAIMED window for the handoff.
        sel.selected().is_some()
    }

    /// Sends, parking with `park(deadline)` while the channel is full, until `deadline`.
    /// `park` returns true when a cancellation is pending (invariant 8).
    pub(crate) fn send(
        &self,
        value: T,
        deadline: Option<Instant>,
        park: &mut impl FnMut(Option<Instant>) -> bool,
    ) -> SendOutcome<T> {
        let mut state = self.lock();
        let value = match state.try_send(value) {
            (TrySend::Sent, handoff) => {
                drop(state);
                finish(handoff);
                return SendOutcome::Sent;
            }
            (TrySend::Disconnected(value), _) => return SendOutcome::Disconnected(value),
            (TrySend::Full(value), _) => value,
        };
        // Invariant 4: queued under the lock that saw the channel full.
        let sel = Selector::new_single();
        let entry = Entry::new(&sel, 0, Some(value));
        // SAFETY: a fresh entry; `wait_one` keeps it alive until it left the queue, also on
        // unwind (invariant 3).
        unsafe { state.senders.push_back(&entry) };
        drop(state);
        let waited = self.wait_one(&sel, Side::Senders, &entry, deadline, park);
        // SAFETY: invariant 1: selected (seen with Acquire in `wait`) or aborted and dequeued.
        match (unsafe { entry.take() }, waited) {
            (None, _) => SendOutcome::Sent,
            (Some(value), Waited::Selected) => SendOutcome::Disconnected(value),
            (Some(value), Waited::Aborted) => SendOutcome::Timeout(value),
            (Some(value), Waited::Cancelled) => SendOutcome::Cancelled(value),
        }
    }

    /// Receives, parking with `park(deadline)` while the channel is empty, until `deadline`.
    /// `park` returns true when a cancellation is pending (invariant 8).
    pub(crate) fn recv(
        &self,
        deadline: Option<Instant>,
        park: &mut impl FnMut(Option<Instant>) -> bool,
    ) -> RecvOutcome<T> {
        loop {
            let mut state = self.lock();
            match state.try_recv() {
                (TryRecv::Got(value), handoff) => {
                    drop(state);
                    finish(handoff);
                    return RecvOutcome::Got(value);
                }
                (TryRecv::Disconnected, _) => return RecvOutcome::Disconnected,
                (TryRecv::Empty, _) => {}
            }
            let sel = Selector::new_single();
            let entry = Entry::new(&sel, 0, None);
            // SAFETY: as in `send`.
            unsafe { state.receivers.push_back(&entry) };
            // A timer channel is its own waker: wake up at its next tick.
            let wake_at = earliest(deadline, state.timer.as_ref().map(|t| t.next));
            drop(state);
            match self.wait_one(&sel, Side::Receivers, &entry, wake_at, park) {
                Waited::Selected => {}
                Waited::Cancelled => return RecvOutcome::Cancelled,
                Waited::Aborted if deadline.is_some_and(|d| Instant::now() >= d) => {
                    return RecvOutcome::Timeout
                }
                Waited::Aborted => continue, // the timer is due
            }
            // SAFETY: invariant 1: selected, seen with Acquire in `wait`.
            return match unsafe { entry.take() } {
                Some(value) => RecvOutcome::Got(value),
                None => RecvOutcome::Disconnected,
            };
        }
    }

    /// Every sender is gone: wake every blocked receiver (they see the channel closed).
    pub(crate) fn disconnect_senders(&self) {
        let mut state = self.lock();
        state.tx_gone = true;
        let handoffs = close_queue(&mut state.receivers);
        drop(state);
        handoffs.into_iter().for_each(Handoff::finish);
    }

    /// Every receiver is gone: wake every blocked sender (they get their value back), and
    /// drop the buffered values, which nothing can receive any more (crossbeam-channel does
    /// the same), outside the lock: their destructors are user code.
    pub(crate) fn disconnect_receivers(&self) {
        let mut state = self.lock();
        state.rx_gone = true;
        let handoffs = close_queue(&mut state.senders);
        let buffered = std::mem::take(&mut state.buf);
        drop(state);
        handoffs.into_iter().for_each(Handoff::finish);
        drop_values(buffered);
    }

    /// `select!`: queues a receive arm's entry; true if the channel turned ready (invariant 5).
    fn register_recv(&self, entry: *const Entry<T>, sel: &Selector) -> bool {
        let mut state = self.lock();
        // SAFETY: a fresh box, freed only after `unqueue` (arms.rs; invariant 3).
        unsafe { state.receivers.push_back(entry) };
        state.recv_ready(sel)
    }

    /// `select!`: queues a send arm's entry; true if the channel turned ready.
    fn register_send(&self, entry: *const Entry<T>, sel: &Selector) -> bool {
        let mut state = self.lock();
        // SAFETY: as in `register_recv`.
        unsafe { state.senders.push_back(entry) };
        state.send_ready(sel)
    }

    /// Whether a receive would complete now (a probe's poll, invariant 9).
    pub(crate) fn recv_ready_now(&self) -> bool {
        self.lock().recv_ready(ptr::null())
    }

    /// Whether a send would complete now.
    pub(crate) fn send_ready_now(&self) -> bool {
        self.lock().send_ready(ptr::null())
    }

    /// [`recv_ready_now`](Self::recv_ready_now) with the lock held through `lock_raw`.
    ///
    /// # Safety
    /// The caller holds the lock through `lock_raw`.
    unsafe fn recv_ready_held(&self) -> bool {
        // SAFETY: the caller's contract; the borrow ends here.
        unsafe { self.state.get_held() }.recv_ready(ptr::null())
    }

    /// [`send_ready_now`](Self::send_ready_now) with the lock held through `lock_raw`.
    ///
    /// # Safety
    /// The caller holds the lock through `lock_raw`.
    unsafe fn send_ready_held(&self) -> bool {
        // SAFETY: the caller's contract; the borrow ends here.
        unsafe { self.state.get_held() }.send_ready(ptr::null())
    }

    /// The next time a timer channel yields a value, if it is one.
    pub(crate) fn timer_deadline(&self) -> Option<Instant> {
        self.lock().timer.as_ref().map(|t| t.next)
    }
}

/// Claims every waiting entry of a queue being closed; the caller finishes the handoffs after
/// unlocking. The slots are left as they are: a receiver finds none (closed), a sender its
/// value.
fn close_queue<T>(queue: &mut WaitQueue<T>) -> Vec<Handoff> {
    std::iter::from_fn(|| queue.pop_front())
        .filter_map(|entry| {
            // SAFETY: invariant 3: a queued entry is alive while we hold the lock.
            let entry = unsafe { &*entry };
            entry.sel().claim().then(|| entry.handoff())
        })
        .collect()
}

/// Drops `values` in order. If one's `Drop` panics, the rest are leaked and that panic goes
/// on (crossbeam-channel's choice): dropping them during the unwind would abort the process
/// at the next panicking `Drop` ("panic in a destructor during cleanup").
fn drop_values<T>(mut values: VecDeque<T>) {
    while let Some(value) = values.pop_front() {
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| drop(value))) {
            std::mem::forget(values);
            resume_unwind(payload);
        }
    }
}

impl<T> Drop for State<T> {
    fn drop(&mut self) {
        drop_values(std::mem::take(&mut self.buf));
    }
}

#[inline]
pub(crate) fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Parks until `sel` is selected, `deadline` passes or `park` says a cancellation is
/// pending; then aborts. `Selected` if selected (the owner may read its entries' slots:
/// invariant 1), else `Aborted` or `Cancelled` (no peer will touch them).
pub(crate) fn wait(
    sel: &Selector,
    deadline: Option<Instant>,
    park: &mut dyn FnMut(Option<Instant>) -> bool,
) -> Waited {
    loop {
        if sel.selected().is_some() {
            return Waited::Selected;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Waited::after_abort(sel.abort().is_err(), Waited::Aborted);
        }
        if park(deadline) {
            // Invariant 8: an arm a peer completed first keeps its value.
            return Waited::after_abort(sel.abort().is_err(), Waited::Cancelled);
        }
    }
}
