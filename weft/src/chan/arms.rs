//! The `select!` loop of the channel core and its two kinds of arms.
//!
//! Owns: [`select`] (Go's `selectgo`), [`RecvArm`] and [`SendArm`] — one per arm of a
//! `select!`, each with a boxed entry while registered (core.rs invariant 5).
//!
//! May call: the rest of `chan::core`, through `super`. Called by: `chan::select` (the macro's
//! glue), the loom models.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::ptr;
use std::time::Instant;

use super::{
    earliest, finish, wait, Chan, Entry, Handoff, Selector, Side, TryRecv, TrySend, Waited,
};

/// One arm of a `select!`, type-erased.
pub trait SelectArm {
    /// Tries the operation without blocking; true if it completed (its result is stored).
    fn try_now(&mut self) -> bool;
    /// Queues the arm's entry under `sel`; true if the channel turned ready meanwhile.
    fn register(&mut self, sel: &Selector, arm: usize) -> bool;
    /// Removes the entry after the wait; `selected` if this arm is the one that completed.
    fn unregister(&mut self, selected: bool);
    /// When a timer channel behind this arm becomes ready, if it is one.
    fn deadline(&self) -> Option<Instant>;
    /// The address of the arm's channel: the locked poll takes the locks in this order, once
    /// per channel (core.rs invariant 5).
    fn chan_addr(&self) -> usize;
    /// Takes the channel's lock for the locked poll.
    fn lock(&self);
    /// Releases it.
    ///
    /// # Safety
    /// The lock is held through [`lock`](Self::lock).
    unsafe fn unlock(&self);
    /// [`try_now`](Self::try_now) with the lock held (by this arm's `lock` or another arm's on
    /// the same channel); a hand-off it made waits for [`finish`](Self::finish).
    ///
    /// # Safety
    /// The channel's lock is held through `lock`.
    unsafe fn try_held(&mut self) -> bool;
    /// After every lock of the locked poll is released: completes the hand-off of `try_held`.
    fn finish(&mut self);
}

/// The locked poll (core.rs invariant 5): every channel of `arms` locked at once, in address
/// order, then each arm tried in the poll order `perm`; the arm that completed, if any.
fn poll_locked<A: ArmSlot>(arms: &mut [A], perm: &[usize]) -> Option<usize> {
    let (mut stack, mut heap) = ([0usize; MAX_ARMS], Vec::new());
    let by_addr = scratch(arms.len(), &mut stack, &mut heap);
    for (i, slot) in by_addr.iter_mut().enumerate() {
        *slot = i;
    }
    by_addr.sort_unstable_by_key(|&i| arms[i].arm().chan_addr());
    // The arm that takes its channel's lock: the first of each channel in address order.
    let takes_lock = |arms: &mut [A], k: usize| {
        k == 0 || arms[by_addr[k - 1]].arm().chan_addr() != arms[by_addr[k]].arm().chan_addr()
    };
    for k in 0..by_addr.len() {
        if takes_lock(arms, k) {
            arms[by_addr[k]].arm().lock();
        }
    }
    // SAFETY: every arm's channel was locked above; the locks are released below.
    let chosen = perm
        .iter()
        .copied()
        .find(|&i| unsafe { arms[i].arm().try_held() });
    for k in 0..by_addr.len() {
        if takes_lock(arms, k) {
            // SAFETY: locked above, once per channel.
            unsafe { arms[by_addr[k]].arm().unlock() };
        }
    }
    if let Some(i) = chosen {
        arms[i].arm().finish();
    }
    chosen
}

/// Arms whose scratch lists (poll order, lock order) live on the stack; a select with more
/// takes them from the heap. Small, because the lists are zeroed at each select: at 64 the
/// zeroing was a third of a `select!` that finds nothing ready.
const MAX_ARMS: usize = 16;

/// A scratch list of `n` items: on the stack up to [`MAX_ARMS`], else in `heap`.
fn scratch<'s, T: Copy + Default>(
    n: usize,
    stack: &'s mut [T; MAX_ARMS],
    heap: &'s mut Vec<T>,
) -> &'s mut [T] {
    if n <= MAX_ARMS {
        &mut stack[..n]
    } else {
        heap.resize(n, T::default());
        heap
    }
}

/// What lends the select loop an arm: `&mut dyn SelectArm` (the `select!` macro's, on its
/// stack) or an arm a `Select` keeps (chan/dynamic.rs), so neither builds a list per call.
pub(crate) trait ArmSlot {
    fn arm(&mut self) -> &mut dyn SelectArm;
}

impl ArmSlot for &mut dyn SelectArm {
    #[inline]
    fn arm(&mut self) -> &mut dyn SelectArm {
        &mut **self
    }
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
/// `park` returns true when a cancellation is pending; then, unless an arm completed first,
/// every arm is unregistered with nothing taken and the result is `None`: the caller unwinds
/// (core.rs invariant 8), or selects again if the cancellation turned out stale.
pub(crate) fn select<A: ArmSlot>(
    arms: &mut [A],
    deadline: Option<Instant>,
    default: bool,
    pick: &mut dyn FnMut(usize) -> usize,
    park: &mut dyn FnMut(Option<Instant>) -> bool,
) -> Option<Selected> {
    let (mut stack, mut heap) = ([0usize; MAX_ARMS], Vec::new());
    let perm = scratch(arms.len(), &mut stack, &mut heap);
    loop {
        // Poll in a fresh random order, drawn one place at a time (Fisher–Yates: place `s`
        // takes one of the arms not placed yet, `pick(n - s)` of them): of the ready arms each
        // is first equally often, and a select whose first draws find one ready draws no
        // further — over 1,000 channels the full shuffle was most of a ready select's cost.
        for (i, p) in perm.iter_mut().enumerate() {
            *p = i;
        }
        let mut place = |perm: &mut [usize], s: usize| {
            let left = perm.len() - s;
            if left > 1 {
                perm.swap(s, s + pick(left));
            }
            perm[s]
        };
        if default {
            for s in 0..perm.len() {
                place(perm, s);
            }
            // Invariant 5: with a `default` arm, only the locked poll — one lock per channel
            // either way, where a first unlocked look would double them when nothing is ready
            // (the common case of a `default` loop). Go's `selectgo` locks every channel too.
            return Some(match poll_locked(arms, perm) {
                Some(i) => Selected::Arm(i),
                None => Selected::Default,
            });
        }
        for s in 0..perm.len() {
            let i = place(perm, s);
            if arms[i].arm().try_now() {
                return Some(Selected::Arm(i));
            }
        }
        // Every place is drawn now: `perm` is the whole random order.
        let timed_out = deadline.is_some_and(|d| Instant::now() >= d);
        if timed_out {
            // Invariant 5: "nothing ready" only as seen under every lock at once.
            if let Some(i) = poll_locked(arms, perm) {
                return Some(Selected::Arm(i));
            }
            return Some(Selected::Timeout);
        }
        let sel = Selector::new();
        let mut registered = 0;
        let mut ready = false;
        for &i in perm.iter() {
            registered += 1;
            if arms[i].arm().register(&sel, i) {
                ready = true; // invariant 5: abort and poll again
                break;
            }
        }
        let wake_at = arms
            .iter_mut()
            .fold(deadline, |at, arm| earliest(at, arm.arm().deadline()));
        let mut cancelled = false;
        let waited = catch_unwind(AssertUnwindSafe(|| {
            if ready {
                return sel.abort().err();
            }
            match wait(&sel, wake_at, park) {
                Waited::Selected => sel.selected(),
                Waited::Aborted => None,
                Waited::Cancelled => {
                    cancelled = true;
                    None
                }
            }
        }));
        let chosen = match &waited {
            Ok(chosen) => *chosen,
            Err(_) => sel.abort().err(),
        };
        // Invariant 3: every entry leaves every queue before `sel` goes out of scope.
        for &i in &perm[..registered] {
            arms[i].arm().unregister(chosen == Some(i));
        }
        if let Err(payload) = waited {
            resume_unwind(payload);
        }
        if let Some(i) = chosen {
            return Some(Selected::Arm(i));
        }
        if cancelled {
            return None;
        }
    }
}

/// A `select!` receive arm over a channel core.
pub struct RecvArm<'a, T> {
    chan: &'a Chan<T>,
    /// The boxed entry while registered (a raw pointer: other threads reach it meanwhile).
    entry: *mut Entry<T>,
    /// `Some(Some(v))`: received; `Some(None)`: closed; `None`: not selected.
    result: Option<Option<T>>,
    /// A hand-off `try_held` made, finished once the locks are released.
    handoff: Option<Handoff>,
}

impl<'a, T> RecvArm<'a, T> {
    pub(crate) fn new(chan: &'a Chan<T>) -> Self {
        RecvArm {
            chan,
            entry: ptr::null_mut(),
            result: None,
            handoff: None,
        }
    }

    /// The arm's result if it was selected: `Some(None)` means the channel is closed.
    pub(crate) fn take(&mut self) -> Option<Option<T>> {
        self.result.take()
    }
}

impl<T> RecvArm<'_, T> {
    fn store(&mut self, outcome: TryRecv<T>) -> bool {
        match outcome {
            TryRecv::Got(value) => self.result = Some(Some(value)),
            TryRecv::Disconnected => self.result = Some(None),
            TryRecv::Empty => return false,
        }
        true
    }
}

impl<T> SelectArm for RecvArm<'_, T> {
    fn try_now(&mut self) -> bool {
        let outcome = self.chan.try_recv();
        self.store(outcome)
    }

    fn chan_addr(&self) -> usize {
        ptr::from_ref(self.chan) as usize
    }

    fn lock(&self) {
        self.chan.lock_raw();
    }

    unsafe fn unlock(&self) {
        // SAFETY: the caller's contract.
        unsafe { self.chan.unlock_raw() }
    }

    unsafe fn try_held(&mut self) -> bool {
        // SAFETY: the caller's contract.
        let (outcome, handoff) = unsafe { self.chan.try_recv_held() };
        self.handoff = handoff;
        self.store(outcome)
    }

    fn finish(&mut self) {
        finish(self.handoff.take());
    }

    fn register(&mut self, sel: &Selector, arm: usize) -> bool {
        self.entry = Box::into_raw(Box::new(Entry::new(sel, arm, None)));
        self.chan.register_recv(self.entry, sel)
    }

    fn unregister(&mut self, selected: bool) {
        if self.entry.is_null() {
            return;
        }
        self.chan.unqueue(Side::Receivers, self.entry);
        // SAFETY: the box came from `register` and has left the queue (invariant 3).
        let entry = unsafe { Box::from_raw(std::mem::replace(&mut self.entry, ptr::null_mut())) };
        if selected {
            // SAFETY: invariant 1: this arm was selected (seen with Acquire by `wait` or
            // `abort`), so the claimer is done with the slot.
            self.result = Some(unsafe { entry.take() });
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
    /// The boxed entry while registered (a raw pointer: other threads reach it meanwhile).
    entry: *mut Entry<T>,
    /// `Some(None)`: sent; `Some(Some(v))`: disconnected, `v` given back; `None`: not selected.
    result: Option<Option<T>>,
    /// A hand-off `try_held` made, finished once the locks are released.
    handoff: Option<Handoff>,
}

impl<'a, T> SendArm<'a, T> {
    pub(crate) fn new(chan: &'a Chan<T>, value: T) -> Self {
        SendArm {
            chan,
            value: Some(value),
            entry: ptr::null_mut(),
            result: None,
            handoff: None,
        }
    }

    /// The arm's result if it was selected: `Some(Some(v))` means disconnected.
    pub(crate) fn take(&mut self) -> Option<Option<T>> {
        self.result.take()
    }
}

impl<T> SendArm<'_, T> {
    fn store(&mut self, outcome: TrySend<T>) -> bool {
        match outcome {
            TrySend::Sent => self.result = Some(None),
            TrySend::Disconnected(value) => self.result = Some(Some(value)),
            TrySend::Full(value) => {
                self.value = Some(value);
                return false;
            }
        }
        true
    }
}

impl<T> SelectArm for SendArm<'_, T> {
    fn try_now(&mut self) -> bool {
        let Some(value) = self.value.take() else {
            return false;
        };
        let outcome = self.chan.try_send(value);
        self.store(outcome)
    }

    fn chan_addr(&self) -> usize {
        ptr::from_ref(self.chan) as usize
    }

    fn lock(&self) {
        self.chan.lock_raw();
    }

    unsafe fn unlock(&self) {
        // SAFETY: the caller's contract.
        unsafe { self.chan.unlock_raw() }
    }

    unsafe fn try_held(&mut self) -> bool {
        let Some(value) = self.value.take() else {
            return false;
        };
        // SAFETY: the caller's contract.
        let (outcome, handoff) = unsafe { self.chan.try_send_held(value) };
        self.handoff = handoff;
        self.store(outcome)
    }

    fn finish(&mut self) {
        finish(self.handoff.take());
    }

    fn register(&mut self, sel: &Selector, arm: usize) -> bool {
        let value = self.value.take();
        self.entry = Box::into_raw(Box::new(Entry::new(sel, arm, value)));
        self.chan.register_send(self.entry, sel)
    }

    fn unregister(&mut self, selected: bool) {
        if self.entry.is_null() {
            return;
        }
        self.chan.unqueue(Side::Senders, self.entry);
        // SAFETY: the box came from `register` and has left the queue (invariant 3).
        let entry = unsafe { Box::from_raw(std::mem::replace(&mut self.entry, ptr::null_mut())) };
        // SAFETY: invariant 1: selected (seen with Acquire) or aborted, and dequeued.
        let left = unsafe { entry.take() };
        if selected {
            self.result = Some(left);
        } else {
            self.value = left; // not sent: keep it for the next poll
        }
    }

    fn deadline(&self) -> Option<Instant> {
        None
    }
}

/// A probe arm (core.rs invariant 9): selected when its side of the channel is ready — a
/// receive would complete, or a send would — and neither takes nor gives a value. The arms of
/// `Select::ready`, and the send operations of a `Select`.
pub struct ProbeArm<'a, T> {
    chan: &'a Chan<T>,
    side: Side,
    /// The boxed probe entry while registered.
    entry: *mut Entry<T>,
    /// Seen ready (by a poll, or selected).
    ready: bool,
}

impl<'a, T> ProbeArm<'a, T> {
    /// A probe of the receiving side (`recv` would complete) or, with `send`, the sending one.
    pub(crate) fn new(chan: &'a Chan<T>, send: bool) -> Self {
        ProbeArm {
            chan,
            side: if send { Side::Senders } else { Side::Receivers },
            entry: ptr::null_mut(),
            ready: false,
        }
    }

    /// Whether the arm was seen ready; clears it for the next select.
    pub(crate) fn take(&mut self) -> bool {
        std::mem::take(&mut self.ready)
    }
}

impl<T> SelectArm for ProbeArm<'_, T> {
    fn try_now(&mut self) -> bool {
        self.ready = match self.side {
            Side::Receivers => self.chan.recv_ready_now(),
            Side::Senders => self.chan.send_ready_now(),
        };
        self.ready
    }

    fn register(&mut self, sel: &Selector, arm: usize) -> bool {
        self.entry = Box::into_raw(Box::new(Entry::probe(sel, arm)));
        match self.side {
            Side::Receivers => self.chan.register_recv(self.entry, sel),
            Side::Senders => self.chan.register_send(self.entry, sel),
        }
    }

    fn unregister(&mut self, selected: bool) {
        if self.entry.is_null() {
            return;
        }
        self.chan.unqueue(self.side, self.entry);
        // SAFETY: the box came from `register` and has left the queue (invariant 3).
        drop(unsafe { Box::from_raw(std::mem::replace(&mut self.entry, ptr::null_mut())) });
        self.ready = selected;
    }

    fn deadline(&self) -> Option<Instant> {
        match self.side {
            Side::Receivers => self.chan.timer_deadline(),
            Side::Senders => None,
        }
    }

    fn chan_addr(&self) -> usize {
        ptr::from_ref(self.chan) as usize
    }

    fn lock(&self) {
        self.chan.lock_raw();
    }

    unsafe fn unlock(&self) {
        // SAFETY: the caller's contract.
        unsafe { self.chan.unlock_raw() }
    }

    unsafe fn try_held(&mut self) -> bool {
        // SAFETY: the caller's contract, for both.
        self.ready = unsafe {
            match self.side {
                Side::Receivers => self.chan.recv_ready_held(),
                Side::Senders => self.chan.send_ready_held(),
            }
        };
        self.ready
    }

    fn finish(&mut self) {}
}
