//! The channel core: one lock-protected state per channel, queues of waiting operations, and the
//! selector that lets one waiting party sit in many queues at once (Go's `hchan`, `sudog` and
//! `selectDone`).
//!
//! Owns: [`Chan`] — its buffer, its two wait queues and its timer, all behind `Chan::state`
//! (a short, never-parked-in lock); [`Selector`] — the state word and the waiter of one blocked
//! operation or `select!`; [`Entry`] — one arm of a blocked operation queued in one channel,
//! with the slot a value is handed over in.
//!
//! ```text
//!   Selector state:  WAITING ──peer: claim (CAS)──► CLAIMED ──peer: write slot, store──► SELECTED+arm
//!                       └──────owner: abort (CAS)──► ABORTED
//! ```
//!
//! Invariants:
//! 1. An entry's slot is touched by its owner before it is queued (a send puts its value
//!    in), by the one peer whose CAS moved its selector WAITING → CLAIMED (until that peer
//!    stores SELECTED), and by its owner again after it saw SELECTED (Acquire) or after its own
//!    abort succeeded. These never overlap, so the slot needs no lock of its own.
//! 2. A selector leaves WAITING once: selected by exactly one peer (so a value is handed over
//!    at most once and to at most one arm), or aborted by its owner (then no peer touches any
//!    of its entries again; the owner takes a send value back).
//! 3. Entries are queued and claimed under their channel's lock; a claimer pops the entry it
//!    claimed. An entry whose selector is no longer WAITING is stale: anyone may drop it from a
//!    queue, and its owner removes whatever is left after its wait ends.
//! 4. A party publishes its entry under the lock after finding the operation not ready under
//!    the same lock, and then parks in a loop on its selector's state: a peer that arrives later
//!    finds the entry, so no wakeup is lost.
//! 5. A `select!` never completes an operation while registering (that would need its own
//!    selector and a peer's at once, the double claim Go avoids by locking every channel): it
//!    registers every arm, and if an arm turned ready meanwhile it aborts, unregisters and polls
//!    again (crossbeam-channel's approach).
//! 6. The buffer holds at most `cap` values; `cap == 0` is a rendezvous (values pass only from a
//!    sender entry to a receiver or the reverse), `usize::MAX` is unbounded.
//!
//! May call: `park`. Called by: `chan` (Sender, Receiver, select!), `time` (after, tick).
//!
//! Why one mutex per channel rather than a lock-free ring: Go's channels are one lock too, the
//! uncontended lock costs ≈ 2 atomic operations here, and every cross-thread step (queueing,
//! close, select registration and abort) stays small enough for loom to check exhaustively
//! (`src/tests/loom_chan.rs`). A woken party does not retake the lock: the peer hands the value
//! over through the entry's slot (invariant 1).

use std::cell::UnsafeCell;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::loom::sync::atomic::{AtomicUsize, Ordering};
use crate::loom::sync::{Arc, Mutex, MutexGuard};
use crate::park::Waiter;

/// Nobody has completed this operation yet; peers may claim it, the owner may abort it.
const WAITING: usize = 0;
/// The owner gave up (timeout, or a `select!` that polls again); no peer may claim it.
const ABORTED: usize = 1;
/// A peer won the claim and is handing over the value; SELECTED follows shortly.
const CLAIMED: usize = 2;
/// `SELECTED + arm`: the operation of arm `arm` completed (or its channel closed).
const SELECTED: usize = 3;

/// One blocked operation or `select!`: who to wake, and whether and how it completed.
#[derive(Debug)]
#[doc(hidden)]
pub struct Selector {
    state: AtomicUsize,
    waiter: Waiter,
}

impl Selector {
    pub(crate) fn new() -> Arc<Selector> {
        Arc::new(Selector {
            state: AtomicUsize::new(WAITING),
            waiter: Waiter::current(),
        })
    }

    /// A peer, under the channel lock: takes the right to complete this selector (invariant 2).
    fn claim(&self) -> bool {
        // Acquire: pairs with the owner's queueing under the lock (already ordered by it) and
        // with nothing else; the slot write that follows is published by `complete`'s Release.
        self.state
            .compare_exchange(WAITING, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// The claimer, after handing over: arm `arm` completed.
    fn complete(&self, arm: usize) {
        // Release: publishes the claimer's slot write; pairs with the Acquire in `selected`.
        self.state.store(SELECTED + arm, Ordering::Release);
    }

    fn is_waiting(&self) -> bool {
        self.state.load(Ordering::Relaxed) == WAITING
    }

    /// The owner: which arm completed, if one has.
    pub(crate) fn selected(&self) -> Option<usize> {
        // Acquire: pairs with the Release in `complete` (invariant 1: the slot is ours now).
        let state = self.state.load(Ordering::Acquire);
        state.checked_sub(SELECTED)
    }

    /// The owner: gives up waiting. `Ok` if no peer can complete it any more; `Err(arm)` if a
    /// peer already did (the owner must then take that arm's result).
    pub(crate) fn abort(&self) -> Result<(), usize> {
        loop {
            // Acquire on failure: pairs with `complete`'s Release when we read SELECTED.
            match self.state.compare_exchange(
                WAITING,
                ABORTED,
                Ordering::Relaxed,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(()),
                Err(CLAIMED) => spin(), // the claimer holds a lock and never parks there
                Err(state) => return Err(state - SELECTED),
            }
        }
    }

    fn wake(&self) {
        #[cfg(not(loom))]
        self.waiter.wake_by_ref();
        #[cfg(loom)]
        self.waiter.clone().wake();
    }
}

#[cfg(not(loom))]
fn spin() {
    std::hint::spin_loop();
}

#[cfg(loom)]
fn spin() {
    loom::thread::yield_now();
}

/// One arm of a blocked operation, queued in one channel.
pub(crate) struct Entry<T> {
    sel: Arc<Selector>,
    arm: usize,
    /// A send's value until taken; a receive's value once handed over (invariant 1).
    slot: UnsafeCell<Option<T>>,
}

// SAFETY: the slot is handed between threads by the selector protocol (invariant 1): one
// party touches it at a time, and the hand-overs are Release/Acquire pairs or lock handovers.
// `T: Send` because the value moves between threads.
unsafe impl<T: Send> Sync for Entry<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for Entry<T> {}

impl<T> Entry<T> {
    pub(crate) fn new(sel: &Arc<Selector>, arm: usize, value: Option<T>) -> Arc<Entry<T>> {
        Arc::new(Entry {
            sel: sel.clone(),
            arm,
            slot: UnsafeCell::new(value),
        })
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

/// What a timer channel (`time::after`, `time::tick`) produces, and when.
pub(crate) struct Timer<T> {
    next: Instant,
    period: Option<Duration>,
    make: fn(Instant) -> T,
}

struct State<T> {
    buf: VecDeque<T>,
    cap: usize,
    senders: VecDeque<Arc<Entry<T>>>,
    receivers: VecDeque<Arc<Entry<T>>>,
    /// Every sender is gone: receivers drain the buffer, then see the channel closed.
    tx_gone: bool,
    /// Every receiver is gone: sends give their value back.
    rx_gone: bool,
    timer: Option<Timer<T>>,
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
}

/// Result of a receive that may time out.
pub(crate) enum RecvOutcome<T> {
    Got(T),
    Disconnected,
    Timeout,
}

/// Pops the first entry of `queue` that can be claimed, skipping `me`'s own entries and
/// dropping stale ones (invariant 3). The returned entry is CLAIMED: finish with `complete`.
fn claim_peer<T>(
    queue: &mut VecDeque<Arc<Entry<T>>>,
    me: Option<&Arc<Selector>>,
) -> Option<Arc<Entry<T>>> {
    let mut i = 0;
    while i < queue.len() {
        let entry = &queue[i];
        if me.is_some_and(|me| Arc::ptr_eq(me, &entry.sel)) {
            i += 1;
            continue;
        }
        let claimed = entry.sel.claim();
        let entry = queue.remove(i).expect("index is in bounds");
        if claimed {
            return Some(entry);
        }
    }
    None
}

/// True if `queue` holds an entry of another party that is still waiting.
fn has_peer<T>(queue: &VecDeque<Arc<Entry<T>>>, me: &Arc<Selector>) -> bool {
    queue
        .iter()
        .any(|e| !Arc::ptr_eq(me, &e.sel) && e.sel.is_waiting())
}

fn remove_entry<T>(queue: &mut VecDeque<Arc<Entry<T>>>, entry: &Arc<Entry<T>>) {
    if let Some(i) = queue.iter().position(|e| Arc::ptr_eq(e, entry)) {
        queue.remove(i);
    }
}

impl<T> State<T> {
    fn try_send(
        &mut self,
        value: T,
        me: Option<&Arc<Selector>>,
    ) -> (TrySend<T>, Option<Arc<Entry<T>>>) {
        if self.rx_gone {
            return (TrySend::Disconnected(value), None);
        }
        if let Some(peer) = claim_peer(&mut self.receivers, me) {
            // SAFETY: invariant 1: we claimed `peer`, so its slot is ours until `complete`.
            unsafe { *peer.slot.get() = Some(value) };
            peer.sel.complete(peer.arm);
            return (TrySend::Sent, Some(peer));
        }
        if self.buf.len() < self.cap {
            self.buf.push_back(value);
            return (TrySend::Sent, None);
        }
        (TrySend::Full(value), None)
    }

    fn try_recv(&mut self, me: Option<&Arc<Selector>>) -> (TryRecv<T>, Option<Arc<Entry<T>>>) {
        if let Some(value) = self.buf.pop_front() {
            // A slot freed up: move one blocked sender's value into the buffer (Go does too).
            let peer = claim_peer(&mut self.senders, me);
            if let Some(peer) = &peer {
                // SAFETY: invariant 1: claimed, so the slot is ours until `complete`.
                let moved = unsafe { (*peer.slot.get()).take() };
                self.buf.extend(moved);
                peer.sel.complete(peer.arm);
            }
            return (TryRecv::Got(value), peer);
        }
        if let Some(peer) = claim_peer(&mut self.senders, me) {
            // SAFETY: invariant 1: claimed, so the slot is ours until `complete`.
            let value = unsafe { (*peer.slot.get()).take() };
            peer.sel.complete(peer.arm);
            let value = value.expect("weft: a blocked sender's entry held no value");
            return (TryRecv::Got(value), Some(peer));
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

    fn recv_ready(&self, me: &Arc<Selector>) -> bool {
        !self.buf.is_empty()
            || has_peer(&self.senders, me)
            || self.tx_gone
            || self
                .timer
                .as_ref()
                .is_some_and(|t| t.next <= Instant::now())
    }

    fn send_ready(&self, me: &Arc<Selector>) -> bool {
        self.rx_gone || self.buf.len() < self.cap || has_peer(&self.receivers, me)
    }
}

/// Wakes the peer an operation completed, after the lock is released.
fn wake<T>(peer: Option<Arc<Entry<T>>>) {
    if let Some(peer) = peer {
        peer.sel.wake();
    }
}

impl<T> Chan<T> {
    /// A channel with one sender and one receiver counted.
    pub(crate) fn new(cap: usize) -> Chan<T> {
        Chan {
            state: Mutex::new(State {
                buf: VecDeque::new(),
                cap,
                senders: VecDeque::new(),
                receivers: VecDeque::new(),
                tx_gone: false,
                rx_gone: false,
                timer: None,
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
        chan.lock().timer = Some(Timer {
            next: first,
            period,
            make,
        });
        chan
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // A panic never happens while the lock is held (no user code runs under it), so a
        // poisoned lock is still consistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn capacity(&self) -> usize {
        self.lock().cap
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().buf.len()
    }

    pub(crate) fn try_send(&self, value: T) -> TrySend<T> {
        let (result, peer) = self.lock().try_send(value, None);
        wake(peer);
        result
    }

    pub(crate) fn try_recv(&self) -> TryRecv<T> {
        let (result, peer) = self.lock().try_recv(None);
        wake(peer);
        result
    }

    /// Sends, parking with `park(deadline)` while the channel is full, until `deadline`.
    pub(crate) fn send(
        &self,
        value: T,
        deadline: Option<Instant>,
        park: &mut dyn FnMut(Option<Instant>),
    ) -> SendOutcome<T> {
        let mut state = self.lock();
        let (value, peer) = state.try_send(value, None);
        let value = match value {
            TrySend::Sent => {
                drop(state);
                wake(peer);
                return SendOutcome::Sent;
            }
            TrySend::Disconnected(value) => return SendOutcome::Disconnected(value),
            TrySend::Full(value) => value,
        };
        // Invariant 4: queued under the lock that saw the channel full.
        let sel = Selector::new();
        let entry = Entry::new(&sel, 0, Some(value));
        state.senders.push_back(entry.clone());
        drop(state);
        let selected = wait(&sel, deadline, park);
        if !selected {
            self.lock().senders.retain(|e| !Arc::ptr_eq(e, &entry));
        }
        // SAFETY: invariant 1: selected (seen with Acquire in `wait`) or aborted and dequeued.
        match unsafe { entry.take() } {
            None => SendOutcome::Sent,
            Some(value) if selected => SendOutcome::Disconnected(value),
            Some(value) => SendOutcome::Timeout(value),
        }
    }

    /// Receives, parking with `park(deadline)` while the channel is empty, until `deadline`.
    pub(crate) fn recv(
        &self,
        deadline: Option<Instant>,
        park: &mut dyn FnMut(Option<Instant>),
    ) -> RecvOutcome<T> {
        loop {
            let mut state = self.lock();
            let (result, peer) = state.try_recv(None);
            match result {
                TryRecv::Got(value) => {
                    drop(state);
                    wake(peer);
                    return RecvOutcome::Got(value);
                }
                TryRecv::Disconnected => return RecvOutcome::Disconnected,
                TryRecv::Empty => {}
            }
            let sel = Selector::new();
            let entry = Entry::new(&sel, 0, None);
            state.receivers.push_back(entry.clone());
            // A timer channel is its own waker: wake up at its next tick.
            let wake_at = earliest(deadline, state.timer.as_ref().map(|t| t.next));
            drop(state);
            let selected = wait(&sel, wake_at, park);
            if !selected {
                remove_entry(&mut self.lock().receivers, &entry);
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return RecvOutcome::Timeout;
                }
                continue; // the timer is due
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
        let woken = close_queue(&mut state.receivers);
        drop(state);
        woken.into_iter().for_each(|e| e.sel.wake());
    }

    /// Every receiver is gone: wake every blocked sender (they get their value back).
    pub(crate) fn disconnect_receivers(&self) {
        let mut state = self.lock();
        state.rx_gone = true;
        let woken = close_queue(&mut state.senders);
        drop(state);
        woken.into_iter().for_each(|e| e.sel.wake());
    }

    /// `select!`: registers a receive arm; true if the channel turned ready (invariant 5).
    pub(crate) fn register_recv(&self, sel: &Arc<Selector>, arm: usize) -> (Arc<Entry<T>>, bool) {
        let entry = Entry::new(sel, arm, None);
        let mut state = self.lock();
        state.receivers.push_back(entry.clone());
        let ready = state.recv_ready(sel);
        (entry, ready)
    }

    /// `select!`: registers a send arm holding `value`; true if the channel turned ready.
    pub(crate) fn register_send(
        &self,
        sel: &Arc<Selector>,
        arm: usize,
        value: T,
    ) -> (Arc<Entry<T>>, bool) {
        let entry = Entry::new(sel, arm, Some(value));
        let mut state = self.lock();
        state.senders.push_back(entry.clone());
        let ready = state.send_ready(sel);
        (entry, ready)
    }

    /// `select!`: removes a receive arm's entry after its wait ended.
    pub(crate) fn unregister_recv(&self, entry: &Arc<Entry<T>>) {
        remove_entry(&mut self.lock().receivers, entry);
    }

    /// `select!`: removes a send arm's entry after its wait ended.
    pub(crate) fn unregister_send(&self, entry: &Arc<Entry<T>>) {
        remove_entry(&mut self.lock().senders, entry);
    }

    /// The next time a timer channel yields a value, if it is one.
    pub(crate) fn timer_deadline(&self) -> Option<Instant> {
        self.lock().timer.as_ref().map(|t| t.next)
    }
}

/// Claims every waiting entry of a queue being closed; the caller wakes them after unlocking.
/// The slots are left as they are: a receiver finds none (closed), a sender its value.
fn close_queue<T>(queue: &mut VecDeque<Arc<Entry<T>>>) -> Vec<Arc<Entry<T>>> {
    queue
        .drain(..)
        .filter(|entry| {
            let claimed = entry.sel.claim();
            if claimed {
                entry.sel.complete(entry.arm);
            }
            claimed
        })
        .collect()
}

pub(crate) fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Parks until `sel` is selected or `deadline` passes; then aborts. True if selected (the
/// owner may read its entries' slots: invariant 1), false if aborted (no peer will).
pub(crate) fn wait(
    sel: &Selector,
    deadline: Option<Instant>,
    park: &mut dyn FnMut(Option<Instant>),
) -> bool {
    loop {
        if sel.selected().is_some() {
            return true;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return sel.abort().is_err();
        }
        park(deadline);
    }
}

/// One arm of a `select!`, type-erased.
pub trait SelectArm {
    /// Tries the operation without blocking; true if it completed (its result is stored).
    fn try_now(&mut self) -> bool;
    /// Queues the arm's entry under `sel`; true if the channel turned ready meanwhile.
    fn register(&mut self, sel: &Arc<Selector>, arm: usize) -> bool;
    /// Removes the entry after the wait; `selected` if this arm is the one that completed.
    fn unregister(&mut self, selected: bool);
    /// When a timer channel behind this arm becomes ready, if it is one.
    fn deadline(&self) -> Option<Instant>;
}

/// What a `select!` picked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Selected {
    /// The arm with this index completed.
    Arm(usize),
    /// The `after` deadline passed first.
    Timeout,
    /// Nothing was ready and there is a `default` arm.
    Default,
}

/// Go's `selectgo`: poll every arm in a random order, else register on all and park.
pub(crate) fn select(
    arms: &mut [&mut dyn SelectArm],
    deadline: Option<Instant>,
    default: bool,
    order: &mut dyn FnMut(&mut [usize]),
    park: &mut dyn FnMut(Option<Instant>),
) -> Selected {
    const MAX_ARMS: usize = 64;
    assert!(
        arms.len() <= MAX_ARMS,
        "weft: select! with more than 64 arms"
    );
    let mut perm = [0usize; MAX_ARMS];
    let perm = &mut perm[..arms.len()];
    loop {
        // Poll in a fresh random order: of the ready arms, each is first equally often.
        for (i, p) in perm.iter_mut().enumerate() {
            *p = i;
        }
        order(perm);
        for &i in perm.iter() {
            if arms[i].try_now() {
                return Selected::Arm(i);
            }
        }
        if default {
            return Selected::Default;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Selected::Timeout;
        }
        let sel = Selector::new();
        let mut registered = 0;
        let mut ready = false;
        for &i in perm.iter() {
            registered += 1;
            if arms[i].register(&sel, i) {
                ready = true; // invariant 5: abort and poll again
                break;
            }
        }
        let wake_at = arms
            .iter()
            .fold(deadline, |at, arm| earliest(at, arm.deadline()));
        let chosen = if ready {
            sel.abort().err()
        } else if wait(&sel, wake_at, park) {
            sel.selected()
        } else {
            None
        };
        for &i in &perm[..registered] {
            arms[i].unregister(chosen == Some(i));
        }
        if let Some(i) = chosen {
            return Selected::Arm(i);
        }
    }
}

/// A `select!` receive arm over a channel core.
pub struct RecvArm<'a, T> {
    chan: &'a Chan<T>,
    entry: Option<Arc<Entry<T>>>,
    /// `Some(Some(v))`: received; `Some(None)`: closed; `None`: not selected.
    result: Option<Option<T>>,
}

impl<'a, T> RecvArm<'a, T> {
    pub(crate) fn new(chan: &'a Chan<T>) -> Self {
        RecvArm {
            chan,
            entry: None,
            result: None,
        }
    }

    /// The arm's result if it was selected: `Some(None)` means the channel is closed.
    pub(crate) fn take(&mut self) -> Option<Option<T>> {
        self.result.take()
    }
}

impl<T> SelectArm for RecvArm<'_, T> {
    fn try_now(&mut self) -> bool {
        match self.chan.try_recv() {
            TryRecv::Got(value) => self.result = Some(Some(value)),
            TryRecv::Disconnected => self.result = Some(None),
            TryRecv::Empty => return false,
        }
        true
    }

    fn register(&mut self, sel: &Arc<Selector>, arm: usize) -> bool {
        let (entry, ready) = self.chan.register_recv(sel, arm);
        self.entry = Some(entry);
        ready
    }

    fn unregister(&mut self, selected: bool) {
        if let Some(entry) = self.entry.take() {
            self.chan.unregister_recv(&entry);
            if selected {
                // SAFETY: invariant 1: this arm was selected (seen with Acquire by `wait` or
                // `abort`), so the claimer is done with the slot.
                self.result = Some(unsafe { entry.take() });
            }
        }
    }

    fn deadline(&self) -> Option<Instant> {
        self.chan.timer_deadline()
    }
}

/// A `select!` send arm over a channel core.
pub struct SendArm<'a, T> {
    chan: &'a Chan<T>,
    value: Option<T>,
    entry: Option<Arc<Entry<T>>>,
    /// `Some(None)`: sent; `Some(Some(v))`: disconnected, `v` given back; `None`: not selected.
    result: Option<Option<T>>,
}

impl<'a, T> SendArm<'a, T> {
    pub(crate) fn new(chan: &'a Chan<T>, value: T) -> Self {
        SendArm {
            chan,
            value: Some(value),
            entry: None,
            result: None,
        }
    }

    /// The arm's result if it was selected: `Some(Some(v))` means disconnected.
    pub(crate) fn take(&mut self) -> Option<Option<T>> {
        self.result.take()
    }
}

impl<T> SelectArm for SendArm<'_, T> {
    fn try_now(&mut self) -> bool {
        let Some(value) = self.value.take() else {
            return false;
        };
        match self.chan.try_send(value) {
            TrySend::Sent => self.result = Some(None),
            TrySend::Disconnected(value) => self.result = Some(Some(value)),
            TrySend::Full(value) => {
                self.value = Some(value);
                return false;
            }
        }
        true
    }

    fn register(&mut self, sel: &Arc<Selector>, arm: usize) -> bool {
        let value = self
            .value
            .take()
            .expect("weft: select! send arm without a value");
        let (entry, ready) = self.chan.register_send(sel, arm, value);
        self.entry = Some(entry);
        ready
    }

    fn unregister(&mut self, selected: bool) {
        if let Some(entry) = self.entry.take() {
            self.chan.unregister_send(&entry);
            // SAFETY: invariant 1: selected (seen with Acquire) or aborted, and dequeued.
            let left = unsafe { entry.take() };
            if selected {
                self.result = Some(left);
            } else {
                self.value = left; // not sent: keep it for the next poll
            }
        }
    }

    fn deadline(&self) -> Option<Instant> {
        None
    }
}
