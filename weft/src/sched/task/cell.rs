//! The one allocation of a task: its header, its join slot and its closure, side by side.
//!
//! ```text
//!   Cell<F, T>  (repr(C): the header first, so a pointer to the cell is one to its header)
//!   ┌────────────┬──────────────┬────────────────────┐
//!   │ Header     │ JoinSlot<T>  │ Option<F> (body)   │
//!   └────────────┴──────────────┴────────────────────┘
//!   reached by the scheduler and by handles as a thin `NonNull<Header>`; the typed operations
//!   go through the header's `CellVtable`, the join slot is found by its offset (`join_slot`)
//! ```
//!
//! Owns: [`Cell`] and the instances of its `CellVtable` (the type is mod.rs's, so that the
//! header names no closure type).
//!
//! Invariants:
//! 1. `body` is taken once: by `run` on the worker that starts the task, or by `cancel` on
//!    the worker (or runtime) that drops a never-started task — both hold the task exclusively
//!    then, having popped it from a queue (mod.rs invariant 1).
//! 2. The join slot is completed exactly once: by `run` (the result, a panic, or the
//!    cancellation unwind) or by `cancel`.
//! 3. A cell is freed once, by whoever drops its last reference (mod.rs invariant 5).
//!
//! May call: `join.rs` (completing the slot), `locals.rs` (dropping the task's storage at its
//! end), stack/cell_cache.rs (the memory). Called by: mod.rs (`spawn` allocates; a header's
//! vtable runs, cancels and frees), `join.rs` (`join_slot`).
//!
//! Why one allocation: the spawn path allocated the header, the join slot and the boxed closure
//! separately; glibc's malloc and free, with frees on another thread than the allocation, were
//! 37% of the instructions of the million example (callgrind). The allocation itself comes from
//! per-thread caches by size class (stack/cell_cache.rs), since the cell is usually freed on
//! another worker than the one that spawned it.
//!
//! Why a vtable and a thin pointer rather than `Arc<dyn TaskCell>`: every wake and park passes
//! the task around; a fat pointer made each one recompute where the header sits inside the
//! `Arc` from the vtable's alignment, and `Arc` kept a weak count no one uses.

use std::alloc::Layout;
use std::any::Any;
use std::cell::UnsafeCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;

use std::sync::atomic::Ordering;

use super::join::{Completion, JoinSlot};
use super::{interrupt, Cancelled, CellVtable, Header};
use crate::sched::Waiter;
use crate::stack::cell_cache;

#[repr(C)]
struct Cell<F, T> {
    /// First, so that the cell's address is the header's (module doc).
    header: Header,
    join: JoinSlot<T>,
    body: UnsafeCell<Option<F>>,
}

impl<F, T> Cell<F, T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    const VTABLE: CellVtable = CellVtable {
        run: Self::run,
        cancel: Self::cancel,
        abandon: Self::abandon,
        free: Self::free,
    };

    /// The cell behind a header.
    ///
    /// # Safety
    /// `header` must be the header of a live `Cell<F, T>`.
    unsafe fn from_header<'a>(header: NonNull<Header>) -> &'a Self {
        // SAFETY: the caller's contract; repr(C) puts the header at the cell's address.
        unsafe { header.cast::<Self>().as_ref() }
    }

    fn take_body(&self) -> Option<F> {
        // SAFETY: invariant 1: the caller holds the task exclusively.
        unsafe { (*self.body.get()).take() }
    }

    /// # Safety
    /// As [`CellVtable::run`]: `header` is this cell type's, and the caller starts the task.
    unsafe fn run(header: NonNull<Header>) -> Option<Waiter> {
        // SAFETY: the caller's contract.
        let cell = unsafe { Self::from_header(header) };
        let body = cell.take_body().expect("weft: task body run twice");
        // Acquire: pairs with the Release `fetch_or` of `Task::interrupt`.
        let bits = cell.header.interrupt.load(Ordering::Acquire);
        let result = if bits & (interrupt::SHUTDOWN | interrupt::CANCEL) != 0 {
            // Cancelled before it ever ran (shutdown step 2, or `Task::cancel`): the closure
            // is dropped here, on the task's own stack, like any of its destructors.
            drop_in_task(body);
            let why = if bits & interrupt::SHUTDOWN != 0 {
                Cancelled::SHUTDOWN
            } else {
                Cancelled::REQUESTED
            };
            Err(Box::new(why) as Box<dyn Any + Send>)
        } else {
            // A cancelled task unwound at a park: its frames are gone, and the payload (a
            // `Cancelled`) tells the joiner.
            catch_unwind(AssertUnwindSafe(body))
        };
        // A cancel is spent once the closure has ended: the destructors below (task-locals,
        // a detached result) may park as usual. A shutdown's bit stays: its parks unwind on.
        if cell.header.interrupt.load(Ordering::Relaxed) & !interrupt::SHUTDOWN != 0 {
            cell.header
                .interrupt
                .fetch_and(interrupt::SHUTDOWN, Ordering::Relaxed);
        }
        // The task's task-locals go with it, before its joiner hears of the end.
        super::locals::drop_task_locals(&cell.header);
        match cell.join.complete(result) {
            Completion::Joined(joiner) => joiner,
            // No handle: the result (or panic payload) is dropped here, still in the task
            // (join.rs invariant 4).
            Completion::Detached(result) => {
                drop_in_task(result);
                None
            }
        }
    }

    /// # Safety
    /// As [`CellVtable::cancel`].
    unsafe fn cancel(header: NonNull<Header>, why: Box<dyn Any + Send>) {
        // SAFETY: the caller's contract.
        let cell = unsafe { Self::from_header(header) };
        drop_in_task(cell.take_body());
        cell.complete_without_result(why);
    }

    /// # Safety
    /// As [`CellVtable::abandon`]: the caller is the task's worker, and the task's coroutine
    /// is forgotten, so it never completes the join slot itself.
    unsafe fn abandon(header: NonNull<Header>) {
        // SAFETY: the caller's contract.
        let cell = unsafe { Self::from_header(header) };
        cell.complete_without_result(Box::new(Cancelled::LEAKED));
    }

    /// Completes the join slot with an error payload and wakes the joiner.
    fn complete_without_result(&self, why: Box<dyn Any + Send>) {
        match self.join.complete(Err(why)) {
            Completion::Joined(Some(joiner)) => joiner.wake(),
            Completion::Joined(None) | Completion::Detached(_) => {}
        }
    }

    /// # Safety
    /// As [`CellVtable::free`]: the last reference is gone (invariant 3).
    unsafe fn free(header: NonNull<Header>) {
        let cell = header.cast::<Self>().as_ptr();
        // SAFETY: the caller's contract: nothing can reach the cell any more; `allocate` made
        // it with this layout from stack/cell_cache.rs.
        unsafe {
            cell.drop_in_place();
            cell_cache::free(header.cast(), Layout::new::<Self>());
        }
    }
}

/// Drops `value`, catching a panic of its `Drop` as a task's panic is caught: the panic hook
/// has reported it, and the worker goes on. A payload whose own `Drop` panics too is leaked
/// with a message rather than dropped again.
///
/// Called on the task's stack for a result or closure no one else will drop (join.rs
/// invariant 4), and by `cancel` for a closure that never ran.
pub(crate) fn drop_in_task<V>(value: V) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(move || drop(value))) {
        if let Err(again) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
            eprintln!("weft: a panic payload panicked when dropped; leaking it");
            std::mem::forget(again);
        }
    }
}

/// Allocates a task's cell around `body` and the header `header` makes from this cell
/// type's vtable: the vtable is always the cell's own, so its operations match its type.
pub(crate) fn allocate<F, T>(
    header: impl FnOnce(&'static CellVtable) -> Header,
    body: F,
) -> NonNull<Header>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let header = header(&Cell::<F, T>::VTABLE);
    // The layout is not zero-sized: it holds a header.
    let memory = cell_cache::allocate(Layout::new::<Cell<F, T>>()).cast::<Cell<F, T>>();
    let cell = Cell {
        header,
        join: JoinSlot::new(),
        body: UnsafeCell::new(Some(body)),
    };
    // SAFETY: fresh memory of the cell's layout.
    unsafe { memory.as_ptr().write(cell) };
    memory.cast()
}

/// The join slot of the cell behind `header`, whatever the cell's closure type: in a
/// `repr(C)` cell its offset depends only on `Header` and `T`.
///
/// # Safety
/// `header` must be the header of a live cell whose result type is `T`.
pub(crate) unsafe fn join_slot<'a, T>(header: NonNull<Header>) -> &'a JoinSlot<T> {
    let offset = std::mem::offset_of!(Cell<fn() -> T, T>, join);
    // SAFETY: the caller's contract; the offset is the same for every closure type (above).
    unsafe {
        header
            .cast::<u8>()
            .add(offset)
            .cast::<JoinSlot<T>>()
            .as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_join_slot_offset_does_not_depend_on_the_closure() {
        type Big = [u64; 100];
        let small = std::mem::offset_of!(Cell<fn() -> u8, u8>, join);
        let big = std::mem::offset_of!(Cell<Big, u8>, join);
        assert_eq!(small, big);
        let small = std::mem::offset_of!(Cell<fn() -> Big, Big>, join);
        let big = std::mem::offset_of!(Cell<(u8, String), Big>, join);
        assert_eq!(small, big);
    }
}
