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

use super::{earliest, wait, Chan, Entry, Selector, Side, TryRecv, TrySend, Waited};

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
pub(crate) fn select(
    arms: &mut [&mut dyn SelectArm],
    deadline: Option<Instant>,
    default: bool,
    order: &mut dyn FnMut(&mut [usize]),
    park: &mut dyn FnMut(Option<Instant>) -> bool,
) -> Option<Selected> {
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
                return Some(Selected::Arm(i));
            }
        }
        if default {
            return Some(Selected::Default);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Some(Selected::Timeout);
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
            arms[i].unregister(chosen == Some(i));
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
}

impl<'a, T> RecvArm<'a, T> {
    pub(crate) fn new(chan: &'a Chan<T>) -> Self {
        RecvArm {
            chan,
            entry: ptr::null_mut(),
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
}

impl<'a, T> SendArm<'a, T> {
    pub(crate) fn new(chan: &'a Chan<T>, value: T) -> Self {
        SendArm {
            chan,
            value: Some(value),
            entry: ptr::null_mut(),
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
