//! Channel operations as futures, for async code that talks to tasks without blocking its
//! executor's thread: the waits behind `Sender::send_async`, `Receiver::recv_async` and
//! `RecvStream`.
//!
//! Owns: `AsyncWait`, a boxed single-entry wait (its selector wakes a `Waker`), and the two
//! state machines over it, [`SendWait`] and [`RecvWait`].
//!
//! Invariants (core.rs invariants 1, 3, 4, 7 and 9 are the rest):
//! 1. An `AsyncWait` is reached through a raw pointer from its `Box::into_raw` until it is
//!    freed, and only through shared references: its state is an atomic and its slot and
//!    links are cells, so the pointers a queue holds stay valid while the owner polls.
//! 2. A receive registers a *probe* (core.rs invariant 9), never an entry a value is handed
//!    to: a sender passes it over, waking it, and the receiver takes the value itself at its
//!    next poll. So dropping a pending `recv_async` (a losing branch of a `select!`) loses no
//!    value: `recv_async` is cancel safe, as tokio's `mpsc::Receiver::recv` is.
//! 3. A send registers a full entry holding its value: a receiver takes the value from it
//!    and wakes the sender. Dropping a pending `send_async` drops the value with the entry if
//!    no receiver took it; if one did, the send happened.
//! 4. The owner touches the wait only under the channel lock while it may be queued, frees it
//!    only once it is out of every queue and not CLAIMED (a closing channel claims under the
//!    lock and completes after it: the owner waits that window out, as `Selector::selected`
//!    does), and makes, clones and drops wakers outside the lock (they run the executor's
//!    code; spin_lock.rs invariant 1). A waker that changes between polls gets a new wait.
//! 5. A timer channel (`time::after`, `tick`) has no sender to pass its probe over: a pending
//!    receive on one asks `sched::wake_at` to wake it at the timer's next tick.
//!
//! May call: `chan::core`, `sched::wake_at` (a timer channel's wake). Called by: `chan` (the
//! public futures).
//!
//! Why a probe for receives: a value handed to a future that is then dropped unpolled would be
//! lost, and async code drops futures routinely; the probe costs the woken receiver one more
//! lock to take the value, which a blocking `recv` (on its own stack, never dropped while
//! waiting) does not pay.

use std::ptr::NonNull;
use std::task::{Context, Poll, Waker};

use super::{
    finish, Chan, Entry, Links, Selector, SelectorWaiter, Side, TryRecv, TrySend, ABORTED, CLAIMED,
    WAITING,
};
use crate::loom::sync::atomic::{AtomicUsize, Ordering};

/// A single-entry wait of an async operation, at a stable heap address (invariant 1).
struct AsyncWait<T> {
    sel: Selector,
    entry: Entry<T>,
}

impl<T> AsyncWait<T> {
    /// A fresh wait, not queued: a probe (a receive) or an entry (a send, whose value the
    /// owner puts in before queueing it).
    fn new(waker: Waker, probe: bool) -> NonNull<AsyncWait<T>> {
        let wait = Box::new(AsyncWait {
            sel: Selector {
                state: AtomicUsize::new(WAITING),
                waiter: SelectorWaiter::Waker(Box::new(waker)),
                single: true, // one entry in one channel (core.rs invariant 7)
            },
            entry: Entry {
                sel: std::ptr::null(),
                arm: 0,
                probe,
                slot: std::cell::UnsafeCell::new(None),
                links: Links::new(),
            },
        });
        let wait = NonNull::from(Box::leak(wait));
        // SAFETY: just leaked, so this is the only pointer; the entry points at its own
        // selector, which lives as long as it does.
        unsafe { (*wait.as_ptr()).entry.sel = &(*wait.as_ptr()).sel };
        wait
    }

    /// Whether this wait's waker wakes the same task as `waker`.
    fn wakes(&self, waker: &Waker) -> bool {
        // A shared read: peers only read the waiter too (invariant 4).
        matches!(&self.sel.waiter, SelectorWaiter::Waker(w) if w.will_wake(waker))
    }
}

/// The wait behind `wait` (invariant 1).
///
/// # Safety
/// `wait` came from `AsyncWait::new` and was not freed.
unsafe fn wait_ref<'a, T>(wait: NonNull<AsyncWait<T>>) -> &'a AsyncWait<T> {
    // SAFETY: the caller's contract; shared access only (invariant 1).
    unsafe { wait.as_ref() }
}

/// Frees a wait that is out of every queue and not CLAIMED (invariant 4): its waker and any
/// value still in its slot are dropped here, outside the lock.
///
/// # Safety
/// As [`wait_ref`], and no queue nor claimer can reach it any more.
unsafe fn free<T>(wait: NonNull<AsyncWait<T>>) {
    // SAFETY: the caller's contract; it was made by `Box::leak`.
    drop(unsafe { Box::from_raw(wait.as_ptr()) });
}

/// Takes `wait` out of `side`'s queue of `chan` for good: waits out a CLAIMED window, aborts
/// and unqueues a WAITING one. True if a peer completed it first.
///
/// # Safety
/// As [`wait_ref`]; `wait` is queued, if anywhere, on `side` of `chan`.
unsafe fn withdraw<T>(chan: &Chan<T>, side: Side, wait: NonNull<AsyncWait<T>>) -> bool {
    // SAFETY: the caller's contract.
    let wait = unsafe { wait_ref(wait) };
    let mut state = chan.lock();
    // Single mode (core.rs invariant 7): claims move WAITING → CLAIMED under this lock.
    if wait.sel.state.load(Ordering::Relaxed) == WAITING {
        wait.sel.state.store(ABORTED, Ordering::Relaxed);
        state.remove_entry(side, &wait.entry);
        return false;
    }
    drop(state);
    // Claimed: the claimer completes it after its unlock (a close), or has (a hand-off).
    wait.sel.selected().is_some()
}

/// The state of a pending receive: a probe while registered (invariant 2).
pub(crate) struct RecvWait<T> {
    wait: Option<NonNull<AsyncWait<T>>>,
}

// SAFETY: the probe is reached by other threads only under the channel lock or as the
// claimer of invariant 1 of core.rs; it holds no value (a probe's slot stays empty), and its
// waker is `Send + Sync`.
unsafe impl<T: Send> Send for RecvWait<T> {}
// SAFETY: `&RecvWait` gives access to nothing.
unsafe impl<T: Send> Sync for RecvWait<T> {}

impl<T> RecvWait<T> {
    pub(crate) const fn new() -> Self {
        RecvWait { wait: None }
    }

    /// Receives from `chan` if a value is ready; else registers the probe with `cx`'s waker.
    pub(crate) fn poll_recv(&mut self, chan: &Chan<T>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        // A new waker: a new probe, made before the lock (invariant 4).
        let mut fresh = match self.wait {
            // SAFETY: ours and not freed.
            Some(wait) if unsafe { wait_ref(wait) }.wakes(cx.waker()) => None,
            _ => Some(AsyncWait::new(cx.waker().clone(), true)),
        };
        let mut stale = None;
        let result = loop {
            let mut state = chan.lock();
            if let Some(wait) = self.wait {
                // SAFETY: ours and not freed.
                let w = unsafe { wait_ref(wait) };
                match w.sel.state.load(Ordering::Acquire) {
                    // Still queued (single mode: claims happen under this lock).
                    WAITING => state.remove_entry(Side::Receivers, &w.entry),
                    CLAIMED => {
                        // A close claimed it and completes it after its unlock.
                        drop(state);
                        w.sel.selected();
                        continue;
                    }
                    _ => {} // completed and popped, or aborted and unqueued
                }
            }
            let (outcome, handoff) = state.try_recv();
            match outcome {
                TryRecv::Got(value) => {
                    drop(state);
                    finish(handoff);
                    break Poll::Ready(Some(value));
                }
                TryRecv::Disconnected => break Poll::Ready(None),
                TryRecv::Empty => {}
            }
            // Core.rs invariant 4: queued under the lock that found the channel empty.
            if let Some(new) = fresh.take() {
                stale = self.wait.replace(new);
            }
            let wait = self.wait.expect("weft: a receive future lost its probe");
            // SAFETY: ours; out of every queue (removed above or completed) and not CLAIMED.
            let w = unsafe { wait_ref(wait) };
            w.sel.state.store(WAITING, Ordering::Relaxed);
            // SAFETY: not queued (above), and alive until `release` unqueued it (invariant 4).
            unsafe { state.receivers.push_back(&w.entry) };
            let tick = state.timer.as_ref().map(|t| t.next);
            drop(state);
            if let Some(tick) = tick {
                crate::sched::wake_at::wake_at(tick, cx.waker().clone()); // invariant 5
            }
            break Poll::Pending;
        };
        if let Some(unused) = fresh {
            // SAFETY: never queued.
            unsafe { free(unused) };
        }
        if let Some(stale) = stale {
            // SAFETY: the replaced probe was taken out of the queue (or completed) above.
            unsafe { free(stale) };
        }
        result
    }

    /// Unregisters the probe, if any (the future or stream is dropped).
    pub(crate) fn release(&mut self, chan: &Chan<T>) {
        if let Some(wait) = self.wait.take() {
            // SAFETY: ours, queued only on the receiving side of `chan`.
            unsafe { withdraw(chan, Side::Receivers, wait) };
            // SAFETY: out of the queue and not CLAIMED (`withdraw`).
            unsafe { free(wait) };
        }
    }
}

/// The state of a send: the value until it is queued, then the entry holding it (invariant 3).
pub(crate) struct SendWait<T> {
    value: Option<T>,
    wait: Option<NonNull<AsyncWait<T>>>,
}

// SAFETY: the entry (and the value in its slot) is reached by other threads only under the
// channel lock or as its claimer (core.rs invariant 1), which moves the value to a receiver:
// hence `T: Send`.
unsafe impl<T: Send> Send for SendWait<T> {}
// SAFETY: `&SendWait` gives access to nothing.
unsafe impl<T: Send> Sync for SendWait<T> {}

// The value is moved in and out, never pinned: a send future may move.
impl<T> Unpin for SendWait<T> {}

/// How a send ended: `Ok`, or the value back when every receiver is gone.
pub(crate) type SendResult<T> = Result<(), T>;

impl<T> SendWait<T> {
    pub(crate) const fn new(value: T) -> Self {
        SendWait {
            value: Some(value),
            wait: None,
        }
    }

    /// Sends into `chan` if there is room or a receiver; else queues the value in an entry
    /// woken through `cx`'s waker, and reports when a receiver took it.
    pub(crate) fn poll_send(
        &mut self,
        chan: &Chan<T>,
        cx: &mut Context<'_>,
    ) -> Poll<SendResult<T>> {
        if let Some(wait) = self.wait {
            return self.poll_queued(chan, wait, cx);
        }
        let value = self
            .value
            .take()
            .expect("weft: a send future polled after it completed");
        // The fast path allocates nothing: a plain attempt first.
        let value = match chan.try_send(value) {
            TrySend::Sent => return Poll::Ready(Ok(())),
            TrySend::Disconnected(value) => return Poll::Ready(Err(value)),
            TrySend::Full(value) => value,
        };
        let wait = AsyncWait::new(cx.waker().clone(), false);
        let mut state = chan.lock();
        match state.try_send(value) {
            (TrySend::Sent, handoff) => {
                drop(state);
                finish(handoff);
                // SAFETY: never queued.
                unsafe { free(wait) };
                Poll::Ready(Ok(()))
            }
            (TrySend::Disconnected(value), _) => {
                drop(state);
                // SAFETY: never queued.
                unsafe { free(wait) };
                Poll::Ready(Err(value))
            }
            (TrySend::Full(value), _) => {
                // SAFETY: ours, not queued yet: no one else touches the slot.
                let w = unsafe { wait_ref(wait) };
                // SAFETY: as above.
                unsafe { *w.entry.slot.get() = Some(value) };
                // Core.rs invariant 4: queued under the lock that found the channel full.
                // SAFETY: alive until `release` or completion took it out (invariant 4).
                unsafe { state.senders.push_back(&w.entry) };
                drop(state);
                self.wait = Some(wait);
                Poll::Pending
            }
        }
    }

    /// A later poll: done if a receiver (or a close) completed the entry; else the waker is
    /// brought up to date.
    fn poll_queued(
        &mut self,
        chan: &Chan<T>,
        wait: NonNull<AsyncWait<T>>,
        cx: &mut Context<'_>,
    ) -> Poll<SendResult<T>> {
        // SAFETY: ours and not freed.
        let w = unsafe { wait_ref(wait) };
        // Acquire (in `selected`): pairs with the claimer's SELECTED store, so its take of
        // the slot (or its leaving the value, on a close) is visible.
        if w.sel.selected().is_some() {
            return Poll::Ready(self.finish_completed(wait));
        }
        if w.wakes(cx.waker()) {
            return Poll::Pending;
        }
        // A new waker: move the value to a new entry (invariant 4).
        let new = AsyncWait::new(cx.waker().clone(), false);
        let mut state = chan.lock();
        if w.sel.state.load(Ordering::Relaxed) != WAITING {
            // Claimed meanwhile: it completes without us.
            drop(state);
            // SAFETY: never queued.
            unsafe { free(new) };
            w.sel.selected();
            return Poll::Ready(self.finish_completed(wait));
        }
        w.sel.state.store(ABORTED, Ordering::Relaxed);
        state.remove_entry(Side::Senders, &w.entry);
        // SAFETY: unqueued under the lock, so no claimer reaches the old slot; the new entry
        // is ours and not queued yet.
        unsafe { *wait_ref(new).entry.slot.get() = (*w.entry.slot.get()).take() };
        // SAFETY: as in `poll_send`.
        unsafe { state.senders.push_back(&wait_ref(new).entry) };
        drop(state);
        self.wait = Some(new);
        // SAFETY: the old entry is out of the queue, its value moved.
        unsafe { free(wait) };
        Poll::Pending
    }

    /// The entry was completed: `Ok` if its value was taken, else the value (a close).
    fn finish_completed(&mut self, wait: NonNull<AsyncWait<T>>) -> SendResult<T> {
        self.wait = None;
        // SAFETY: SELECTED was seen with Acquire: the claimer is done with the entry (core.rs
        // invariant 1) and popped it.
        let value = unsafe { wait_ref(wait).entry.take() };
        // SAFETY: out of every queue, not CLAIMED.
        unsafe { free(wait) };
        match value {
            None => Ok(()),
            Some(value) => Err(value),
        }
    }

    /// Unqueues the entry, if any (the future is dropped): its value, if no receiver took
    /// it, is dropped with it (invariant 3).
    pub(crate) fn release(&mut self, chan: &Chan<T>) {
        if let Some(wait) = self.wait.take() {
            // SAFETY: ours, queued only on the sending side of `chan`.
            unsafe { withdraw(chan, Side::Senders, wait) };
            // SAFETY: out of the queue and not CLAIMED (`withdraw`).
            unsafe { free(wait) };
        }
    }
}
