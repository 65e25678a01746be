//! weft-gostack: profile-guided goroutine stack sizing for Go services.
//!
//! * [`binary`] and [`pclntab`] read every function's frame size from a Go binary's
//!   pclntab (the runtime's own SP-delta tables, not disassembly); [`buildinfo`] reads its
//!   Go version and build settings.
//! * [`pprof`] decodes a CPU profile.
//! * [`analyze`] finds the samples that grew goroutine stacks, computes each growing call
//!   chain's stack need from the frame sizes, and recommends a starting stack size.
//! * [`apply`] writes a starting stack size into a copy of a linux Go executable and reads
//!   it back, finding the runtime's variable through [`codescan`] (per-architecture code
//!   patterns); [`godebug`] merges the GODEBUG settings the copy runs with.
//! * [`report`] renders results as text for people and JSON for machines.

pub mod analyze;
pub mod apply;
pub mod binary;
pub mod buildinfo;
pub mod codescan;
pub mod error;
pub mod godebug;
pub mod pclntab;
pub mod pprof;
pub mod report;

pub use error::{Error, Problem};
