//! The two text renderings of a [`Dump`], after Go's `goroutine?debug=1` (grouped, with
//! counts) and `debug=2` (every task, the SIGQUIT format).
//!
//! Owns: nothing. Called by: `Dump::grouped`, `Dump::full`.

use std::collections::HashMap;
use std::fmt::Write;
use std::time::Duration;

use super::{Backtrace, Dump, TaskDump, TaskState};

/// The summary line both renderings start with.
fn header(dump: &Dump, out: &mut String) {
    let runtimes = dump.workers.len();
    let workers: usize = dump.workers.iter().sum();
    let _ = writeln!(
        out,
        "weft task dump: {} tasks ({} running, {} runnable, {} parked), {} of them not started; \
         {runtimes} runtime(s), {workers} worker(s); taken in {:.1?}",
        dump.tasks.len() + dump.unstarted,
        dump.count(TaskState::Running),
        dump.count(TaskState::Runnable),
        dump.count(TaskState::Parked),
        dump.unstarted,
        dump.elapsed,
    );
    for stuck in &dump.stuck_workers {
        let _ = writeln!(
            out,
            "weft: runtime {} worker {} did not answer: it is running a task (shown as \
             running), and {} other task(s) living on it are not shown",
            stuck.runtime, stuck.worker, stuck.live_tasks
        );
    }
    out.push('\n');
}

/// `[parked: chan receive, 1.5s]`-style state label.
fn state_label(task: &TaskDump, waited: Option<Duration>) -> String {
    match (task.state, task.reason) {
        (TaskState::Parked, Some(reason)) => match waited {
            Some(waited) => format!("parked [{reason}, {}]", human_duration(waited)),
            None => format!("parked [{reason}]"),
        },
        (state, _) => state.as_str().to_string(),
    }
}

fn human_duration(d: Duration) -> String {
    let secs = d.as_secs_f64();
    if secs >= 120.0 {
        format!("{:.0} minutes", secs / 60.0)
    } else if secs >= 1.0 {
        format!("{secs:.1}s")
    } else {
        format!("{}ms", d.as_millis())
    }
}

fn human_bytes(bytes: usize) -> String {
    if bytes >= 1024 * 1024 {
        format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
    } else if bytes >= 1024 {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    } else {
        format!("{bytes} B")
    }
}

fn write_backtrace(out: &mut String, backtrace: Option<&Backtrace>, task: &TaskDump) {
    match backtrace {
        Some(backtrace) if !backtrace.frames.is_empty() => {
            let _ = write!(out, "{backtrace}");
        }
        Some(_) => {
            let _ = writeln!(out, "    (no frames: built without unwind info?)");
        }
        None if task.state == TaskState::Running && task.stack_in_use.is_none() => {
            let _ = writeln!(
                out,
                "    (no backtrace: the task holds its worker, which did not answer)"
            );
        }
        None => {
            let _ = writeln!(
                out,
                "    (no backtrace: too little stack left to walk it safely)"
            );
        }
    }
}

pub(crate) fn grouped(dump: &Dump) -> String {
    let mut out = String::new();
    header(dump, &mut out);
    // Group key: state, reason, spawn site, backtrace.
    type Key = (
        TaskState,
        Option<super::ParkReason>,
        (&'static str, u32, u32),
        Option<usize>,
    );
    struct Group {
        count: usize,
        first: usize,
        longest: Option<Duration>,
        most_stack: Option<usize>,
        names: Names,
    }
    let mut groups: HashMap<Key, Group> = HashMap::new();
    for (i, task) in dump.tasks.iter().enumerate() {
        let site = task.spawn_site;
        let key = (
            task.state,
            task.reason,
            (site.file(), site.line(), site.column()),
            task.backtrace,
        );
        let group = groups.entry(key).or_insert(Group {
            count: 0,
            first: i,
            longest: None,
            most_stack: None,
            names: Names::default(),
        });
        group.count += 1;
        if let Some(name) = &task.name {
            group.names.add(name);
        }
        group.longest = group.longest.max(task.waited);
        group.most_stack = group.most_stack.max(task.stack_in_use);
    }
    let mut groups: Vec<_> = groups.into_values().collect();
    groups.sort_by(|a, b| b.count.cmp(&a.count).then(a.first.cmp(&b.first)));
    for group in &groups {
        let task = &dump.tasks[group.first];
        let _ = write!(
            out,
            "{} task(s){}: {}, spawned at {}",
            group.count,
            group.names,
            state_label(task, None),
            task.spawn_site
        );
        if let Some(longest) = group.longest {
            let _ = write!(out, "; longest wait {}", human_duration(longest));
        }
        let stack = group
            .most_stack
            .map(|b| format!("; up to {}", human_bytes(b)));
        entry_tail(&mut out, dump, task, stack);
    }
    unstarted(&mut out, dump, "task(s): runnable, not started yet");
    out
}

/// The names of a group's tasks, as its line shows them: the first [`Names::SHOWN`] distinct
/// ones, then how many named tasks more (a million tasks named `conn-N` stay one line).
#[derive(Default)]
struct Names {
    shown: Vec<std::sync::Arc<str>>,
    more: usize,
}

impl Names {
    const SHOWN: usize = 3;

    fn add(&mut self, name: &std::sync::Arc<str>) {
        if self.shown.iter().any(|shown| shown == name) {
            return;
        }
        if self.shown.len() < Names::SHOWN {
            self.shown.push(name.clone());
        } else {
            self.more += 1;
        }
    }
}

impl std::fmt::Display for Names {
    /// ` "a", "b", "c" and 5 more named`, or nothing for unnamed tasks.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, name) in self.shown.iter().enumerate() {
            let sep = if i == 0 { " " } else { ", " };
            write!(f, "{sep}{name:?}")?;
        }
        if self.more > 0 {
            write!(f, " and {} more named", self.more)?;
        }
        Ok(())
    }
}

/// The end of one entry: stack use, then the backtrace and a blank line.
fn entry_tail(out: &mut String, dump: &Dump, task: &TaskDump, stack: Option<String>) {
    if let Some(stack) = stack {
        let _ = write!(out, "{stack} of stack in use");
    }
    out.push('\n');
    write_backtrace(out, dump.backtrace_of(task), task);
    out.push('\n');
}

/// The line for never-started tasks, if any.
fn unstarted(out: &mut String, dump: &Dump, what: &str) {
    if dump.unstarted > 0 {
        let _ = writeln!(out, "{} {what} (queued, no stack)", dump.unstarted);
    }
}

pub(crate) fn full(dump: &Dump) -> String {
    let mut out = String::with_capacity(dump.tasks.len() * 256);
    header(dump, &mut out);
    for task in &dump.tasks {
        let _ = write!(out, "task {}", task.id);
        if let Some(name) = &task.name {
            let _ = write!(out, " \"{name}\"");
        }
        let _ = write!(
            out,
            " [{}]: runtime {} worker {}, spawned at {}",
            state_label(task, task.waited),
            task.runtime,
            task.worker,
            task.spawn_site
        );
        let stack = task.stack_in_use.map(|b| format!(", {}", human_bytes(b)));
        entry_tail(&mut out, dump, task, stack);
    }
    unstarted(&mut out, dump, "more task(s) not started yet");
    out
}
