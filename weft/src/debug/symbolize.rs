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

use super::{Backtrace, Dump, Frame, RawDump, StuckWorker, TaskDump, TaskState};
use crate::observe::backtrace::symbolize;

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
