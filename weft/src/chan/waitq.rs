//! A channel's wait queue: an intrusive doubly linked list threaded through the entries
//! themselves (Go's `waitq` of `sudog`s), so queueing allocates nothing and taking an entry out
//! of the middle (an abort, a `select!` unregistering) costs no search.
//!
//! Owns: the head and tail of one queue, and the [`Links`] inside every entry queued in it.
//!
//! Invariants (core.rs invariant 3 is the rest):
//! 1. An entry's links are read and written only through its queue, and a queue only under its
//!    channel's lock (it lives in the locked state): `&mut WaitQueue` means the lock is held.
//! 2. An entry is in at most one queue, once; `queued` says whether it is, so removing an entry
//!    that a claimer already popped is a no-op.
//! 3. A queued entry is alive: its owner removes it (or sees it popped) before its frame or box
//!    goes away (core.rs invariant 3).
//! 4. The head's `prev` means nothing (it may name an entry popped since): the head is told
//!    by `head`, never by a null `prev`. So taking the oldest entry out writes nothing into
//!    the next one, which lives on another parked task's stack — one that may be compacted,
//!    and a write there would wait on the fault thread (≈30 µs) for every hand-off of a
//!    queue of compacted receivers.
//!
//! May call: `stack` (to restore a compacted entry's stack before touching it). Called by:
//! `chan::core`.

use std::cell::UnsafeCell;
use std::ptr;

use super::Entry;

/// An entry's place in its queue (invariant 1).
pub(super) struct Links<T> {
    prev: *const Entry<T>,
    next: *const Entry<T>,
    queued: bool,
}

impl<T> Links<T> {
    /// The links of an entry in no queue.
    pub(super) fn new() -> UnsafeCell<Links<T>> {
        UnsafeCell::new(Links {
            prev: ptr::null(),
            next: ptr::null(),
            queued: false,
        })
    }
}

/// One wait queue of a channel: senders or receivers, oldest first.
pub(super) struct WaitQueue<T> {
    head: *const Entry<T>,
    tail: *const Entry<T>,
}

// SAFETY: the queue is only used under its channel's lock (invariant 1) and reaches only live
// entries (invariant 3); the values they carry move between threads, hence `T: Send`.
unsafe impl<T: Send> Send for WaitQueue<T> {}

/// The links of a queued entry.
///
/// # Safety
/// `entry` is alive (invariant 3) and the caller holds its channel's lock: no other access to
/// the links exists (invariant 1).
unsafe fn links_of<'a, T>(entry: *const Entry<T>) -> &'a mut Links<T> {
    // SAFETY: the caller's contract.
    unsafe { &mut *(*entry).links.get() }
}

impl<T> WaitQueue<T> {
    pub(super) const fn new() -> Self {
        WaitQueue {
            head: ptr::null(),
            tail: ptr::null(),
        }
    }

    /// Appends `entry`.
    ///
    /// # Safety
    /// `entry` is in no queue, and stays alive until it leaves this one (invariant 3).
    pub(super) unsafe fn push_back(&mut self, entry: *const Entry<T>) {
        // SAFETY: alive (the caller's contract), and `&mut self` holds the lock (invariant 1).
        let links = unsafe { links_of(entry) };
        debug_assert!(!links.queued, "weft: an entry queued twice");
        links.prev = self.tail;
        links.next = ptr::null();
        links.queued = true;
        if self.tail.is_null() {
            self.head = entry;
        } else {
            // SAFETY: the tail is queued, so alive (invariant 3); we hold the lock.
            unsafe { links_of(self.tail) }.next = entry;
        }
        self.tail = entry;
    }

    /// Takes the oldest entry out.
    pub(super) fn pop_front(&mut self) -> Option<*const Entry<T>> {
        let entry = self.head;
        if entry.is_null() {
            return None;
        }
        // The entry is usually on its parked owner's stack, which may be compacted: restore
        // it here rather than through a fault on the first touch below. (Loom models have
        // no stacks of weft's.)
        #[cfg(not(loom))]
        crate::stack::restore_if_compacted(entry as usize);
        // SAFETY: queued, so alive (invariant 3); `&mut self` holds the lock (invariant 1).
        let links = unsafe { links_of(entry) };
        self.head = links.next;
        if self.head.is_null() {
            self.tail = ptr::null();
        }
        // The new head's `prev` still names `entry`: left as it is (invariant 4).
        links.queued = false;
        Some(entry)
    }

    /// Takes `entry` out if it is still queued here (invariant 2).
    ///
    /// # Safety
    /// `entry` is alive, and if it is queued, it is queued in this queue.
    pub(super) unsafe fn remove(&mut self, entry: *const Entry<T>) {
        // SAFETY: alive (the caller's contract), and we hold the lock.
        let links = unsafe { links_of(entry) };
        if !links.queued {
            return;
        }
        let (prev, next) = (links.prev, links.next);
        links.queued = false;
        // Invariant 4: only a non-head entry's `prev` names a queued neighbour.
        let is_head = ptr::eq(self.head, entry);
        if is_head {
            self.head = next;
        } else {
            // SAFETY: a neighbour in the queue is queued, so alive (invariant 3).
            unsafe { links_of(prev) }.next = next;
        }
        if next.is_null() {
            self.tail = if is_head { ptr::null() } else { prev };
        } else if !is_head {
            // SAFETY: as above. (A new head's `prev` is left as it is, invariant 4.)
            unsafe { links_of(next) }.prev = prev;
        }
    }

    /// The queued entries, oldest first.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Entry<T>> + '_ {
        let mut at = self.head;
        std::iter::from_fn(move || {
            // SAFETY: queued entries are alive (invariant 3), and `&self` borrows the locked
            // state, so no link changes meanwhile (invariant 1).
            let entry = unsafe { at.as_ref() }?;
            // SAFETY: as above; a shared read of the links.
            at = unsafe { &*entry.links.get() }.next;
            Some(entry)
        })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::super::Selector;
    use super::*;

    /// Random pushes, pops and removes (of the head, the tail, one in the middle, one not
    /// queued) against a `VecDeque` model: a stale head `prev` (invariant 4) must never
    /// mislead a later operation.
    #[test]
    fn pops_and_removes_agree_with_a_model() {
        let sel = Selector::new();
        let entries: Vec<Entry<u32>> = (0..16).map(|i| Entry::new(&sel, i, None)).collect();
        let mut queue = WaitQueue::new();
        let mut model: std::collections::VecDeque<usize> = std::collections::VecDeque::new();
        let mut seed = 0x9e37_79b9_u64;
        for _ in 0..20_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let i = (seed >> 8) as usize % entries.len();
            let entry: *const Entry<u32> = &entries[i];
            match seed % 4 {
                0 | 1 if !model.contains(&i) => {
                    // SAFETY: not queued (the model says), and alive for the whole test.
                    unsafe { queue.push_back(entry) };
                    model.push_back(i);
                }
                2 => {
                    let popped = queue.pop_front();
                    let expected = model.pop_front();
                    assert_eq!(popped, expected.map(|j| &entries[j] as *const Entry<u32>));
                }
                _ => {
                    // SAFETY: alive; queued here if anywhere.
                    unsafe { queue.remove(entry) };
                    model.retain(|&j| j != i);
                }
            }
            let seen: Vec<usize> = queue.iter().map(|e| e.arm).collect();
            assert_eq!(seen, Vec::from(model.clone()));
            let tail = model
                .back()
                .map_or(ptr::null(), |&j| &entries[j] as *const _);
            assert!(ptr::eq(queue.tail, tail), "tail out of step");
        }
    }
}
