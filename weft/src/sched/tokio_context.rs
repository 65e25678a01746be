//! The tokio contexts entered on this thread by `weft::tokio::block_on`'s polls: one stack per
//! thread, kept by weft so that tokio's rule — its `EnterGuard`s are dropped in the reverse
//! order of their creation — holds although several tasks share the thread.
//!
//! Owns: `ENTERED`, a thread-local stack of `Entered` (a handle, and the tokio guard that
//! entered it), touched only by its own thread.
//!
//! Invariants:
//! 1. Every entry is made by a poll ([`poll_in`]) and removed by the same poll when it returns
//!    or unwinds; a `block_on` that parks leaves its own entries first and makes them again
//!    after the park ([`Suspended`]), so no guard of a task is held across a park of weft's
//!    `block_on`.
//! 2. tokio's guards are dropped top of the stack first. An entry removed from the middle (a
//!    poll that parked inside, in a blocking weft call of async code, while other tasks of the
//!    thread pushed their own) has the guards above it dropped first and made again after,
//!    bottom first: the stack stays the same, less the entry, and tokio's depth count agrees.
//! 3. An entry lives inside the [`poll_in`] call that made it: removed when that call ends,
//!    and left (a [`Suspended`]) only by a park nested inside it, which puts it back before
//!    returning. So the handle it borrows (a raw pointer) and the guard's `'static`
//!    lifetime (a borrow of that handle) both hold for the entry's whole life.
//!
//! May call: tokio (`Handle::enter`), the running task (worker.rs, to tell entries apart).
//! Called by: `weft::tokio` (`block_on`), `future` (around its parks).
//!
//! Why a stack of weft's own rather than a guard on the polling frame: tasks interleave on a
//! thread, so a task parked inside a poll would leave its guard under the guards of tasks that
//! ran after it, and its drop, out of order, would make tokio panic ("`EnterGuard` values
//! dropped out of order").

use std::cell::{Cell, RefCell};

use ::tokio::runtime::{EnterGuard, Handle};

/// One entered tokio context.
struct Entered {
    /// Unique on this thread, so the poll finds its entry wherever it ended up (invariant 2).
    id: u64,
    /// The task that entered it (its header's address), or 0 for a plain thread.
    owner: usize,
    /// `None` while it is left (invariant 2).
    guard: Option<EnterGuard<'static>>,
    /// The handle of the [`poll_in`] call that made the entry (invariant 3).
    handle: *const Handle,
}

impl Entered {
    fn enter(&mut self) {
        // SAFETY: invariant 3: the entry lives inside the `poll_in` call whose borrowed handle
        // this points at, so the handle is alive, and the guard, dropped with the entry at
        // the latest, does not outlive it.
        let guard: EnterGuard<'static> = unsafe { std::mem::transmute((*self.handle).enter()) };
        self.guard = Some(guard);
    }

    fn leave(&mut self) {
        self.guard = None;
    }
}

/// The thread's stack of entries, dropped top first; at thread exit its guards are forgotten
/// rather than dropped (tokio's own thread-locals may be gone by then).
struct Stack(Vec<Entered>);

impl Drop for Stack {
    fn drop(&mut self) {
        while let Some(mut entered) = self.0.pop() {
            std::mem::forget(entered.guard.take());
        }
    }
}

thread_local! {
    static ENTERED: RefCell<Stack> = const { RefCell::new(Stack(Vec::new())) };
    /// The next entry's id (invariant 2: unique on this thread is enough).
    static NEXT_ID: Cell<u64> = const { Cell::new(1) };
}

/// Who is polling: the running task, or 0 on a plain thread.
fn owner() -> usize {
    crate::sched::current_task_ptr().map_or(0, |p| p.as_ptr() as usize)
}

/// Runs `poll` with `handle`'s context entered (invariant 1).
pub(crate) fn poll_in<R>(handle: &Handle, poll: impl FnOnce() -> R) -> R {
    let id = push(handle);
    // Removed when the poll returns or unwinds (invariant 3).
    let _remove = Remove(id);
    poll()
}

/// Enters `handle` on top of the thread's stack; returns the entry's id.
fn push(handle: &Handle) -> u64 {
    let id = NEXT_ID.with(|next| {
        let id = next.get();
        next.set(id + 1);
        id
    });
    let mut entered = Entered {
        id,
        owner: owner(),
        guard: None,
        handle,
    };
    entered.enter();
    ENTERED.with(|stack| stack.borrow_mut().0.push(entered));
    id
}

/// Removes entry `id` on drop (invariant 2).
struct Remove(u64);

impl Drop for Remove {
    fn drop(&mut self) {
        let id = self.0;
        let removed = ENTERED.with(|stack| {
            let mut stack = stack.borrow_mut();
            let entries = &mut stack.0;
            let at = entries.iter().rposition(|e| e.id == id)?;
            entries[at..].iter_mut().rev().for_each(Entered::leave);
            let removed = entries.remove(at);
            entries[at..].iter_mut().for_each(Entered::enter);
            Some(removed)
        });
        drop(removed); // its guard is gone already
    }
}

/// The entries of the running task, left for a park and entered again after it (invariant 1).
pub(crate) struct Suspended(Vec<Entered>);

impl Suspended {
    /// Leaves the running task's (or plain thread's) entries, if it has any.
    #[inline]
    pub(crate) fn leave() -> Option<Suspended> {
        // Cheap when nothing is entered, the common case: one thread-local read.
        if ENTERED.with(|stack| stack.borrow().0.is_empty()) {
            return None;
        }
        Self::leave_slow()
    }

    #[cold]
    fn leave_slow() -> Option<Suspended> {
        let owner = owner();
        ENTERED.with(|stack| {
            let mut stack = stack.borrow_mut();
            let entries = &mut stack.0;
            let lowest = entries.iter().position(|e| e.owner == owner)?;
            entries[lowest..].iter_mut().rev().for_each(Entered::leave);
            let mut mine = Vec::new();
            let mut others = Vec::new();
            for entered in entries.drain(lowest..) {
                if entered.owner == owner {
                    mine.push(entered);
                } else {
                    others.push(entered);
                }
            }
            for mut entered in others {
                entered.enter();
                entries.push(entered);
            }
            Some(Suspended(mine))
        })
    }
}

impl Drop for Suspended {
    /// Enters the entries again, in their order, on top of the stack.
    fn drop(&mut self) {
        let mine = std::mem::take(&mut self.0);
        ENTERED.with(|stack| {
            let mut stack = stack.borrow_mut();
            for mut entered in mine {
                entered.enter();
                stack.0.push(entered);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth() -> usize {
        ENTERED.with(|stack| stack.borrow().0.len())
    }

    #[test]
    fn an_entry_removed_from_the_middle_keeps_the_others_entered() {
        let rt = ::tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let handle = rt.handle().clone();
        // Three nested entries; remove the middle one first, as a poll that parked inside
        // would, then the others: tokio must not see guards dropped out of order.
        let a = Remove(push(&handle));
        let b = Remove(push(&handle));
        let c = Remove(push(&handle));
        assert_eq!(depth(), 3);
        drop(b);
        assert_eq!(depth(), 2);
        assert!(Handle::try_current().is_ok());
        drop(a);
        drop(c);
        assert_eq!(depth(), 0);
        assert!(Handle::try_current().is_err());
    }

    #[test]
    fn suspended_entries_come_back_on_top() {
        let rt = ::tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let handle = rt.handle().clone();
        poll_in(&handle, || {
            let left = Suspended::leave();
            assert!(left.is_some());
            assert_eq!(depth(), 0);
            assert!(Handle::try_current().is_err());
            drop(left);
            assert_eq!(depth(), 1);
            assert!(Handle::try_current().is_ok());
        });
        assert_eq!(depth(), 0);
    }
}
