//! A task that may borrow from its caller: what [`Runtime::block_on`](super::Runtime::block_on)
//! and `weft::run` spawn, and how they wait for it, as `std::thread::scope` does for threads.
//!
//! Owns: for one call, the caller's slots for the closure and its result (on the caller's
//! stack), and the `Ended` flag the task sets when it is done with them.
//!
//! Invariants:
//! 1. The task reaches the caller's data only through two pointers, into `f` (the closure,
//!    taken by the task when it starts) and `out` (its result, written by the task once the
//!    closure returned). The spawned body holds nothing else that borrows: dropped without
//!    running (its spawn found no stack), it drops no user code.
//! 2. The body's `Ended` guard is its first local, so it drops last: after the closure's
//!    captures are gone and the result is written, or after the closure's unwind. Once it is
//!    set, the task touches neither pointer again.
//! 3. The caller leaves its frame only after the task's `Ended` was set: on the way out by
//!    `join` (the join slot completes after the body has returned), and on an unwind of the
//!    caller itself (its `Context` or its task was cancelled while it waited) through the
//!    wait guard, which cancels the task and blocks until `Ended` before the unwind goes on.
//!
//! May call: `task` (spawn, join, cancel). Called by: `Runtime::block_on`.
//!
//! Why a flag of its own and not the join slot alone: a caller that unwinds out of its join
//! must not park again (a cancelled task would unwind at once; one that parks while panicking
//! keeps its thread, sched/worker.rs "Parking while panicking"), so it waits with a plain
//! `Condvar` instead, on a flag the task sets however it ends. Why not run `f` in place when
//! the caller is a task of another runtime: it would run on the wrong runtime's worker, and
//! `weft::spawn` inside it would spawn there.

use std::sync::{Arc, Condvar, Mutex};

use super::Handle;
use crate::task::{Builder, Task};

/// Set by the task when it is done with the caller's data (invariant 2).
#[derive(Default)]
struct Ended {
    done: Mutex<bool>,
    cond: Condvar,
}

impl Ended {
    fn is_set(&self) -> bool {
        *self.done.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait(&self) {
        let mut done = self.done.lock().unwrap_or_else(|e| e.into_inner());
        while !*done {
            done = self.cond.wait(done).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Sets `Ended` when dropped: the body's first local (invariant 2).
struct SetOnDrop(Arc<Ended>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        *self.0.done.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.0.cond.notify_all();
    }
}

/// A pointer into the caller's frame, sent to the task (invariant 1).
struct CallerSlot<S>(*mut S);

// SAFETY: what the slot holds (`Option<F>` or `Option<T>`, both `Send` by the bounds of
// `spawn_and_wait`) moves to the task's thread and back; invariant 3 keeps the slot alive while
// the task uses it, and the caller does not touch it meanwhile.
unsafe impl<S: Send> Send for CallerSlot<S> {}

impl<S> CallerSlot<S> {
    fn get(&self) -> *mut S {
        self.0
    }
}

/// Cancels the task and waits for its `Ended` if the caller leaves before it (invariant 3).
struct WaitGuard {
    task: Task,
    ended: Arc<Ended>,
}

impl Drop for WaitGuard {
    fn drop(&mut self) {
        if !self.ended.is_set() {
            // Only on an unwind of the caller: `join` returned after the body ended.
            self.task.cancel();
            self.ended.wait();
        }
    }
}

/// Runs `f` as a task on `handle`'s runtime and waits for it (invariant 3); a panic in `f`
/// resumes on the caller with its payload, after the task has ended. The task's spawn site
/// is the caller's (`#[track_caller]` through to `Builder::spawn_on`).
#[track_caller]
pub(crate) fn spawn_and_wait<'a, F, T>(handle: &Handle, f: F) -> T
where
    F: FnOnce() -> T + Send + 'a,
    T: Send + 'a,
{
    // Declared before the guard, so they outlive its wait on an unwind (invariant 3).
    let mut f = Some(f);
    let mut out: Option<T> = None;
    let ended = Arc::new(Ended::default());
    let f_slot = CallerSlot(&mut f as *mut Option<F>);
    let out_slot = CallerSlot(&mut out as *mut Option<T>);
    let set_on_drop = SetOnDrop(ended.clone());
    let body: Box<dyn FnOnce() + Send + 'a> = Box::new(move || {
        // Invariant 2: the first local, dropped last.
        let _ended = set_on_drop;
        // SAFETY: invariant 3: the caller's frame is alive until `_ended` drops, and only this
        // task touches `f` meanwhile (the caller waits).
        let f = unsafe { (*f_slot.get()).take() }.expect("weft: block_on's closure taken twice");
        let value = f();
        // SAFETY: as above, for `out`; the caller reads it only after `join` returned, which
        // the join slot orders after this write.
        unsafe { *out_slot.get() = Some(value) };
    });
    // SAFETY: the body borrows `'a` only through the two slots, and `spawn_and_wait` does not
    // return or unwind past them before the task has set `ended` (invariant 3): the erased
    // lifetime is never outlived. Dropped unrun, the body drops no borrowed data (invariant 1).
    let body: Box<dyn FnOnce() + Send + 'static> = unsafe { std::mem::transmute(body) };
    let join = match Builder::new().spawn_on(handle, body) {
        Ok(join) => join,
        Err(e) => panic!("weft: failed to spawn task: {e}"),
    };
    let guard = WaitGuard {
        task: join.task(),
        ended,
    };
    // A caller cancelled here unwinds out of `join`; `guard` then waits (invariant 3).
    let result = join.join();
    drop(guard);
    match result {
        Ok(()) => out
            .take()
            .expect("weft: block_on's task ended without a result"),
        Err(payload) => std::panic::resume_unwind(payload),
    }
}
