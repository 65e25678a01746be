//! Model checks (loom) and unit tests of cross-module protocols.
