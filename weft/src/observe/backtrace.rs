//! Backtraces: a raw stack of instruction pointers turned into functions, files and lines,
//! with weft's own frames trimmed from both ends, so that a backtrace starts where a task
//! waits (or overflowed, or computes) and ends at its closure.
//!
//! Owns: [`Backtrace`] and [`Frame`] (re-exported by `weft::debug`, and in a
//! `sched::MonitorReport`), and the trimming lists.
//!
//! Invariants:
//! 1. The trimming lists name weft's own module paths (`weft::sched::park::`, the cell that
//!    runs a task's closure): a function moved to another module must be moved here too, or
//!    dumps show weft's frames (tests/debug_dump.rs checks both ends).
//!
//! May call: the `backtrace` crate. Called by: `debug` (a dump's stacks, off the workers),
//! the monitor (a stuck worker's task), the stack-overflow report (through the symbolizer the
//! runtime installs with the handler).
//!
//! Why here, in the seam, and not in `debug`: the scheduler's own reports — the monitor's, the
//! overflow's — carry backtraces, so the type and its symbolizer sit below the scheduler, and
//! `debug` builds its dumps from them.

use std::collections::HashMap;
use std::ffi::c_void;

/// Frames innermost first whose function starts with one of these are weft's capture and park
/// machinery, not where the task waits: dropped from the top of a backtrace.
const TOP_NOISE: &[&str] = &[
    "backtrace::",
    "weft::observe::capture::",
    "weft::sched::worker::",
    "weft::sched::park::",
    "weft::sched::dump::",
    "weft::chan::park",
    "weft::chan::select::park",
    "core::ops::function::Fn",
    "corosensei::",
];

/// The frame that runs a task's closure: it and everything below it are the runtime's.
const TASK_ROOT: &str = "weft::sched::task::cell::";

/// Frames just above the task root that only call the closure (catch_unwind and its shims).
const ROOT_NOISE: &[&str] = &[
    "std::panicking::",
    "std::panic::catch_unwind",
    "core::panic::unwind_safe::",
    "__rust_try",
    "core::ops::function::FnOnce::call_once",
    "std::panic::",
];

/// One frame of a [`Backtrace`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Frame {
    /// The function, demangled without its hash; `??` when unknown.
    pub function: String,
    /// Source file and line, when the binary has debug info.
    pub file: Option<String>,
    /// The line in `file`.
    pub line: Option<u32>,
    /// The column in `file`.
    pub column: Option<u32>,
}

/// A symbolized stack, innermost frame first, without weft's own capture frames.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Backtrace {
    /// The frames.
    pub frames: Vec<Frame>,
}

impl std::fmt::Display for Backtrace {
    /// One frame a line, `    function` then `        at file:line:column`, as in a dump.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for frame in &self.frames {
            writeln!(f, "    {}", frame.function)?;
            if let Some(file) = &frame.file {
                let (line, column) = (frame.line.unwrap_or(0), frame.column.unwrap_or(0));
                writeln!(f, "        at {file}:{line}:{column}")?;
            }
        }
        Ok(())
    }
}

/// Symbolizes the raw stack of a fatal report (stack overflow, stuck worker), innermost
/// first, with the same trimming as a dump's. `ips` are return addresses except the first
/// when `first_is_pc` (a faulting or interrupted instruction, not a call's return).
pub(crate) fn report_backtrace(ips: &[usize], first_is_pc: bool) -> Backtrace {
    let mut ips = ips.to_vec();
    if first_is_pc {
        if let Some(first) = ips.first_mut() {
            // `resolve` looks up the byte before its argument.
            *first += 1;
        }
    }
    symbolize(&ips, &mut HashMap::new())
}

/// Gives back the memory symbolizing took: the symbolizer's caches of parsed debug info and
/// mapped debug files, then the allocator's free pages (glibc keeps freed memory otherwise).
pub(crate) fn release_symbolizer() {
    backtrace::clear_symbol_cache();
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory of the allocator's arenas to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Symbolizes one raw stack and trims weft's frames from both ends.
pub(crate) fn symbolize(ips: &[usize], symbols: &mut HashMap<usize, Vec<Frame>>) -> Backtrace {
    let mut frames = Vec::new();
    for &ip in ips {
        let resolved = symbols.entry(ip).or_insert_with(|| resolve(ip));
        frames.extend(resolved.iter().cloned());
    }
    Backtrace {
        frames: trim(frames),
    }
}

/// Drops weft's frames above where the task waits and the runtime's below its closure.
fn trim(mut frames: Vec<Frame>) -> Vec<Frame> {
    let skip = frames
        .iter()
        .take_while(|f| TOP_NOISE.iter().any(|p| path_of(f).starts_with(p)))
        .count();
    frames.drain(..skip);
    if let Some(root) = frames
        .iter()
        .position(|f| path_of(f).starts_with(TASK_ROOT))
    {
        frames.truncate(root);
        while frames
            .last()
            .is_some_and(|f| ROOT_NOISE.iter().any(|p| path_of(f).starts_with(p)))
        {
            frames.pop();
        }
    }
    frames
}

/// A frame's function as a path the trimming lists can match: the legacy mangling demangles a
/// method as `weft::m::Type<T>::f`, the v0 mangling (nightly's default) as `<weft::m::Type<T>>::f`,
/// and a trait method either way as `<weft::m::f as FnMut<..>>::call_mut`.
fn path_of(frame: &Frame) -> &str {
    frame.function.trim_start_matches('<')
}

/// The frames (inlined ones first) at a return address.
fn resolve(ip: usize) -> Vec<Frame> {
    let mut frames = Vec::new();
    // `resolve` looks up the address before `ip` (the call), as a return address needs.
    backtrace::resolve(ip as *mut c_void, |symbol| {
        frames.push(Frame {
            function: symbol
                .name()
                .map_or_else(|| "??".to_string(), |n| format!("{n:#}")),
            file: symbol.filename().map(|p| p.display().to_string()),
            line: symbol.lineno(),
            column: symbol.colno(),
        });
    });
    if frames.is_empty() {
        frames.push(Frame {
            function: format!("?? {ip:#x}"),
            file: None,
            line: None,
            column: None,
        });
    }
    frames
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(names: &[&str]) -> Vec<Frame> {
        names
            .iter()
            .map(|name| Frame {
                function: name.to_string(),
                file: None,
                line: None,
                column: None,
            })
            .collect()
    }

    /// Both manglings' names of the same stack trim to the user's frames (nightly's v0
    /// mangling writes inherent methods and trait shims as `<path>::f`).
    #[test]
    fn trimming_matches_legacy_and_v0_names() {
        let legacy = frames(&[
            "weft::sched::park::park_current",
            "weft::chan::park_recv",
            "weft::chan::core::Chan<T>::wait_one",
            "app::wait",
            "app::main::{{closure}}",
            "std::panicking::try::do_call",
            "__rust_try",
            "weft::sched::task::cell::Cell<F,T>::run",
            "corosensei::coroutine::on_stack",
        ]);
        let v0 = frames(&[
            "<weft::sched::park::Parker>::park_current",
            "<weft::chan::park_recv as core::ops::function::FnMut<(Option<Instant>,)>>::call_mut",
            "<weft::chan::core::Chan<()>>::wait_one::<weft::chan::park_recv>",
            "app::wait",
            "app::main::{closure#0}",
            "<core::panic::unwind_safe::AssertUnwindSafe<app::main::{closure#0}>>::call_once",
            "std::panicking::catch_unwind::do_call::<..>",
            "__rust_try",
            "<weft::sched::task::cell::Cell<app::main::{closure#0}, ()>>::run",
            "<corosensei::coroutine::Coroutine<_, _, _, _>>::with_stack_unchecked",
        ]);
        let names = |f: Vec<Frame>| f.into_iter().map(|f| f.function).collect::<Vec<_>>();
        assert_eq!(
            names(trim(legacy)),
            [
                "weft::chan::core::Chan<T>::wait_one",
                "app::wait",
                "app::main::{{closure}}"
            ]
        );
        assert_eq!(
            names(trim(v0)),
            [
                "<weft::chan::core::Chan<()>>::wait_one::<weft::chan::park_recv>",
                "app::wait",
                "app::main::{closure#0}"
            ]
        );
    }
}
