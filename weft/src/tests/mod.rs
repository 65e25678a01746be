//! Model checks (loom) and unit tests of cross-module protocols.

#[cfg(loom)]
mod loom_chan;
#[cfg(loom)]
mod loom_sync;
