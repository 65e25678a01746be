//! Turning the workers' raw stacks into a [`Dump`]: instruction pointers to functions, files
//! and lines, once per distinct address, and the frames of weft's own park and capture path
//! trimmed so a backtrace starts where the task waits and ends at its closure.
//!
//! Owns: nothing beyond one call. Called by: `debug` (off the workers, its invariant 3).
//!
//! Why symbolize here and not on the worker: the first lookup parses the binary's debug info
//! (hundreds of milliseconds for a test binary), and a million tasks share a handful of
//! distinct stacks: the workers send addresses, interned, and this runs once per address.

use std::collections::HashMap;
use std::ffi::c_void;

use super::{Backtrace, Dump, Frame, RawDump, StuckWorker, TaskDump, TaskState};

/// Frames innermost first whose function starts with one of these are weft's capture and park
/// machinery, not where the task waits: dropped from the top of a backtrace.
const TOP_NOISE: &[&str] = &[
    "backtrace::",
    "weft::debug::capture::",
    "weft::sched::worker::",
    "weft::park::",
    "weft::chan::park",
    "weft::chan::select::park",
    "core::ops::function::Fn",
    "corosensei::",
];

/// The frame that runs a task's closure: it and everything below it are the runtime's.
const TASK_ROOT: &str = "weft::task::cell::";

/// Frames just above the task root that only call the closure (catch_unwind and its shims).
const ROOT_NOISE: &[&str] = &[
    "std::panicking::",
    "std::panic::catch_unwind",
    "core::panic::unwind_safe::",
    "<core::panic::unwind_safe::",
    "__rust_try",
    "core::ops::function::FnOnce::call_once",
    "std::panic::",
];

pub(crate) fn build(raw: RawDump, caller: Option<u64>) -> Dump {
    let mut dump = Dump {
        workers: raw.workers,
        unstarted: raw.injected,
        ..Dump::default()
    };
    let mut symbols: HashMap<usize, Vec<Frame>> = HashMap::new();
    let mut by_raw: HashMap<&[usize], Option<usize>> = HashMap::new();
    let mut by_backtrace: HashMap<Backtrace, usize> = HashMap::new();
    for (runtime, worker, answer) in &raw.answers {
        let Some(answer) = answer else { continue };
        dump.unstarted += answer.unstarted;
        let mut local: Vec<Option<usize>> = Vec::with_capacity(answer.stacks.len());
        for ips in &answer.stacks {
            let index = *by_raw.entry(&ips[..]).or_insert_with(|| {
                let backtrace = symbolize(ips, &mut symbols);
                let next = by_backtrace.len();
                let index = *by_backtrace.entry(backtrace).or_insert(next);
                Some(index)
            });
            local.push(index);
        }
        dump.tasks.reserve(answer.tasks.len());
        for task in &answer.tasks {
            let state = if Some(task.id) == caller {
                TaskState::Running
            } else if task.parked {
                TaskState::Parked
            } else {
                TaskState::Runnable
            };
            let parked = state == TaskState::Parked;
            dump.tasks.push(TaskDump {
                id: task.id,
                name: task.name.clone(),
                state,
                reason: task.reason.filter(|_| parked),
                waited: task
                    .since
                    .filter(|_| parked)
                    .map(|since| answer.taken_at.saturating_duration_since(since)),
                runtime: *runtime,
                worker: *worker,
                spawn_site: task.spawn_site,
                stack_in_use: Some(task.in_use),
                backtrace: task.stack.and_then(|s| local[s as usize]),
            });
        }
    }
    let mut backtraces = vec![Backtrace::default(); by_backtrace.len()];
    for (backtrace, index) in by_backtrace {
        backtraces[index] = backtrace;
    }
    dump.backtraces = backtraces;
    for (runtime, worker, running, live) in raw.stuck {
        if let Some(running) = &running {
            dump.tasks.push(TaskDump {
                id: running.id,
                name: running.name.clone(),
                state: TaskState::Running,
                reason: None,
                waited: None,
                runtime,
                worker,
                spawn_site: running.site,
                stack_in_use: None,
                backtrace: None,
            });
        }
        dump.stuck_workers.push(StuckWorker {
            runtime,
            worker,
            live_tasks: live.saturating_sub(usize::from(running.is_some())),
        });
    }
    dump
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
fn symbolize(ips: &[usize], symbols: &mut HashMap<usize, Vec<Frame>>) -> Backtrace {
    let mut frames = Vec::new();
    for &ip in ips {
        let resolved = symbols.entry(ip).or_insert_with(|| resolve(ip));
        frames.extend(resolved.iter().cloned());
    }
    let skip = frames
        .iter()
        .take_while(|f| TOP_NOISE.iter().any(|p| f.function.starts_with(p)))
        .count();
    frames.drain(..skip);
    if let Some(root) = frames
        .iter()
        .position(|f| f.function.starts_with(TASK_ROOT))
    {
        frames.truncate(root);
        while frames
            .last()
            .is_some_and(|f| ROOT_NOISE.iter().any(|p| f.function.starts_with(p)))
        {
            frames.pop();
        }
    }
    Backtrace { frames }
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
