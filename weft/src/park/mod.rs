//! The park protocol: the state a park and its unpark race on (`state.rs`, `ParkState`), and
//! why a parked task waits ([`ParkReason`]). Parking the caller — the waiter a waiting party
//! leaves behind, and the park itself — is the scheduler's (sched/park.rs), since only a
//! worker can switch a task out; this layer names nothing above it.
//!
//! Owns: nothing but its two types; `ParkState` lives in each task's header.
//!
//! Invariants: those of state.rs (the protocol) and reason.rs (a reason per park site).
//!
//! May call: `loom`. Called by: `sched` (every park and wake), `observe` (a reason in a
//! trace or dump), everything above that parks.
//!
//! Why the protocol alone: it is what a park and its unpark race on, shared by the
//! scheduler, every waker and the loom models (src/tests/loom_park.rs), and it names nothing
//! above it, so it is model-checked as it is.

mod reason;
pub(crate) mod state;

pub use reason::ParkReason;
