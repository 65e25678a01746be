//! The FIFO of parked waiters the sync types keep under their short std lock, where a waiter
//! that leaves before it is served (a timeout, a cancellation) is taken out in O(1).
//!
//! Owns: [`WaitQueue`] — the entries, each a waiter's node or the tombstone of one that left,
//! and the ticket of the front entry. Touched only under its owner's lock.
//!
//! ```text
//!   slots:   [ a, -, -, b, c ]        first = 41: a has ticket 41, b 44, c 45
//!   remove(44) → [ a, -, -, -, c ]    (a tombstone; O(1): slot = ticket - first)
//!   pop_front() → a, then the tombstones before c go too: [ c ], first = 45
//! ```
//!
//! Invariants:
//! 1. Each push gets a ticket one past the last (never reused): a ticket below `first` was
//!    served or removed, so a stale one finds nothing.
//! 2. The front and the back slots hold waiters, never tombstones: every removal trims the
//!    ends. So the queue is empty exactly when `slots` is, and `front` is a waiter.
//!
//! May call: std. Called by: `sync/sema.rs`, `sync/condvar.rs`, `sync/waitgroup.rs`.
//!
//! Why tickets and tombstones rather than a search: the waiter that leaves found its node by a
//! scan of the queue, O(n) each, so n waiters timing out in random order took O(n²) (50,000 on
//! a `Condvar`: 0.65 s). Why not a linked list with the links in the waiters' nodes: a parked
//! waiter's stack may be compacted, and a releaser touching nodes there pays a fault each
//! (sync/mod.rs); a slab with links costs 32 bytes a waiter more than these 8.

use std::collections::VecDeque;

/// A waiter's place in a [`WaitQueue`], to leave it by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ticket(u64);

/// A FIFO of waiters with O(1) removal by ticket (module invariants 1–2).
#[derive(Debug)]
pub(crate) struct WaitQueue<T> {
    slots: VecDeque<Option<T>>,
    /// The ticket of `slots[0]`.
    first: u64,
}

impl<T> Default for WaitQueue<T> {
    fn default() -> Self {
        WaitQueue::new()
    }
}

impl<T> WaitQueue<T> {
    pub(crate) const fn new() -> Self {
        WaitQueue {
            slots: VecDeque::new(),
            first: 0,
        }
    }

    /// Whether no waiter is queued.
    pub(crate) fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Queues `waiter` at the back; its ticket.
    pub(crate) fn push_back(&mut self, waiter: T) -> Ticket {
        let ticket = Ticket(self.first + self.slots.len() as u64);
        self.slots.push_back(Some(waiter));
        ticket
    }

    /// The waiter at the front.
    pub(crate) fn front(&self) -> Option<&T> {
        // Invariant 2: the front slot is a waiter.
        self.slots.front().and_then(Option::as_ref)
    }

    /// Takes the waiter at the front.
    pub(crate) fn pop_front(&mut self) -> Option<T> {
        let waiter = self.slots.pop_front()?;
        self.first += 1;
        self.trim();
        waiter
    }

    /// Takes the waiter with `ticket` out of the queue; `None` if it is not queued any more
    /// (served, or removed before).
    pub(crate) fn remove(&mut self, ticket: Ticket) -> Option<T> {
        let index = usize::try_from(ticket.0.checked_sub(self.first)?).ok()?;
        let waiter = self.slots.get_mut(index)?.take()?;
        self.trim();
        Some(waiter)
    }

    /// Takes every waiter, in order.
    pub(crate) fn take_all(
        &mut self,
    ) -> std::iter::Flatten<std::collections::vec_deque::IntoIter<Option<T>>> {
        self.first += self.slots.len() as u64;
        std::mem::take(&mut self.slots).into_iter().flatten()
    }

    /// Drops the tombstones at both ends (invariant 2).
    fn trim(&mut self) {
        while let Some(None) = self.slots.front() {
            self.slots.pop_front();
            self.first += 1;
        }
        while let Some(None) = self.slots.back() {
            self.slots.pop_back();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiters_leave_from_anywhere_and_the_rest_keep_their_order() {
        let mut q = WaitQueue::new();
        let t: Vec<Ticket> = (0..6).map(|i| q.push_back(i)).collect();
        assert_eq!(q.remove(t[2]), Some(2));
        assert_eq!(q.remove(t[2]), None, "removed twice");
        assert_eq!(q.remove(t[5]), Some(5), "the back");
        assert_eq!(q.pop_front(), Some(0));
        assert_eq!(q.remove(t[0]), None, "served");
        assert_eq!(q.front(), Some(&1));
        assert_eq!(q.remove(t[1]), Some(1), "the front");
        // The tombstone of 2 went with the front: 3 is next.
        assert_eq!(q.front(), Some(&3));
        let t6 = q.push_back(6);
        assert_eq!(q.take_all().collect::<Vec<_>>(), [3, 4, 6]);
        assert!(q.is_empty());
        assert_eq!(q.remove(t6), None, "taken by take_all");
        let t7 = q.push_back(7);
        assert_eq!(q.remove(t[3]), None, "a stale ticket finds nothing");
        assert_eq!(q.remove(t7), Some(7));
        assert!(q.is_empty());
    }

    #[test]
    fn leaving_in_any_order_empties_the_queue() {
        let mut q = WaitQueue::new();
        let n = 1000u64;
        let tickets: Vec<Ticket> = (0..n).map(|i| q.push_back(i)).collect();
        // A fixed shuffle: every 7th, then the rest from the back.
        let mut order: Vec<usize> = (0..n as usize).step_by(7).collect();
        order.extend((0..n as usize).rev().filter(|i| i % 7 != 0));
        for i in order {
            assert_eq!(q.remove(tickets[i]), Some(i as u64));
        }
        assert!(q.is_empty());
        assert_eq!(q.pop_front(), None);
    }
}
