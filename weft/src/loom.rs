//! The std/loom facade: every atomic and lock of a cross-thread protocol comes from here.
//!
//! Under `--cfg loom` the protocol modules (park state, join slot, worker sleep) are compiled
//! against loom's model types and checked exhaustively by the tests in `src/tests/loom_*.rs`;
//! the rest of the crate (stacks, context switches, the worker loop) is not built then, because
//! neither loom nor Miri can follow a stack switch.

#[cfg(loom)]
pub(crate) use loom::sync;

#[cfg(not(loom))]
pub(crate) use std::sync;

#[cfg(loom)]
pub(crate) use loom::thread;

#[cfg(not(loom))]
pub(crate) use std::thread;
