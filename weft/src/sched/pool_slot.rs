//! A runtime's slot for its compute pool, which the task layer runs (task/compute.rs): what
//! the slot holds is that layer's (the pool's queue, made at its first job); the runtime only
//! closes it at shutdown, which drops what it holds.
//!
//! Owns: [`PoolSlot`], one per runtime (`Shared::compute`), behind a mutex that submitters and
//! the runtime's drop take for short, non-blocking steps.
//!
//! Invariants:
//! 1. Once closed, a slot stays closed and empty: `shut_down` drops its value, and a user
//!    of the slot checks `closed` under the same lock before it stores one.
//!
//! May call: nothing. Called by: task/compute.rs (through `current_compute_slot`), and
//! runtime.rs (shutdown step 5).
//!
//! Why opaque: the pool's queue is a weft channel, and the channels sit above the scheduler
//! (lib.rs, "Layers"); the runtime owns the pool's lifetime, not its workings.

use std::any::Any;
use std::sync::{Mutex, MutexGuard};

/// The compute pool's slot of one runtime.
#[derive(Default)]
pub(crate) struct PoolSlot {
    state: Mutex<SlotState>,
}

/// What the slot holds (invariant 1).
#[derive(Default)]
pub(crate) struct SlotState {
    /// The pool's own state, made by its first user.
    pub(crate) value: Option<Box<dyn Any + Send>>,
    /// Set at shutdown.
    pub(crate) closed: bool,
}

impl PoolSlot {
    /// The slot's state, locked.
    pub(crate) fn lock(&self) -> MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runtime shutdown: closes the slot and drops its value, outside the lock (invariant 1).
    pub(crate) fn shut_down(&self) {
        let mut state = self.lock();
        state.closed = true;
        let value = state.value.take();
        drop(state);
        drop(value);
    }
}
