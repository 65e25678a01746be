//! I/O readiness: the bridge between a worker's poller and the tasks waiting on sockets.
//!
//! Owns: nothing yet. `weft::net` registers sources with the poller of the worker whose task
//! first waits on them and fills this in; the worker calls [`dispatch`] with every batch of
//! events it collects, and [`has_sources`] to decide whether a busy worker should poll.
//!
//! May call: `park`. Called by: `sched/worker.rs`.

use super::runtime::Remote;

/// Wakes the tasks waiting on the sources in `events`.
pub(crate) fn dispatch(_remote: &Remote, _events: &polling::Events) {}

/// Whether `remote`'s poller has I/O sources registered.
pub(crate) fn has_sources(_remote: &Remote) -> bool {
    false
}
