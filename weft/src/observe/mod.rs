//! The seam between the runtime and its observers: what the scheduler and the layers below it
//! report to `debug` and `metrics` goes through here, and nothing below the observers names
//! them (lib.rs, "Layers").
//!
//! Owns: the reports' vocabulary — backtraces (`backtrace.rs`: a raw stack symbolized and
//! trimmed), which the monitor's and the overflow's reports carry and dumps are built from.
//!
//! Invariants:
//! 1. This layer names nothing above `park`: the runtime calls into it, the observers read
//!    from it.
//!
//! May call: `park` (a reason). Called by: `sched` (the monitor, the overflow report's
//! symbolizer), `debug`.
//!
//! Why a seam: the scheduler called the observers by name (the monitor symbolized with
//! `debug`, the worker counted into `metrics`), so a change to a dump's rendering could break
//! the scheduler's build, and no layer could be read or tested apart from the others. Go's
//! runtime funnels its tracing through a few `trace*` entry points; tokio's worker owns one
//! metrics batch the metrics API reads.

pub(crate) mod backtrace;
