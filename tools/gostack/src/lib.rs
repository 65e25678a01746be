//! weft-gostack: profile-guided goroutine stack sizing for Go services.
//!
//! * [`binary`] and [`pclntab`] read every function's frame size from a Go binary's
//!   pclntab (the runtime's own SP-delta tables, not disassembly); [`buildinfo`] reads its
//!   Go version and build settings.
//! * [`pprof`] decodes a CPU profile.
//! * [`analyze`] finds the samples that grew goroutine stacks, computes each growing call
//!   chain's stack need from the frame sizes, and recommends a starting stack size.
//! * [`report`] renders results as text for people and JSON for machines.

pub mod analyze;
pub mod binary;
pub mod buildinfo;
pub mod error;
pub mod pclntab;
pub mod pprof;
pub mod report;

pub use error::{Error, Problem};
