//! A [`Snapshot`] in the Prometheus text exposition format (version 0.0.4).
//!
//! Owns: the metric names. Each is `weft_` + what it measures + its unit (`_bytes`), and
//! counters end in `_total`; every metric has one `# HELP` and one `# TYPE` line before its
//! sample. Gauges are values now, counters only grow for the life of the process.
//!
//! May call: nothing. Called by: `Snapshot::to_prometheus`.

use std::fmt::Write as _;

use super::Snapshot;

enum Kind {
    Gauge,
    Counter,
}

/// Writes one metric without labels.
fn metric(out: &mut String, name: &str, kind: Kind, help: &str, value: f64) {
    let kind = match kind {
        Kind::Gauge => "gauge",
        Kind::Counter => "counter",
    };
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    let _ = writeln!(out, "{name} {value}");
}

pub(crate) fn write(s: &Snapshot) -> String {
    use Kind::{Counter, Gauge};
    let mut out = String::with_capacity(4096);
    let o = &mut out;
    metric(
        o,
        "weft_tasks",
        Gauge,
        "Live tasks: spawned and not finished.",
        s.tasks as f64,
    );
    metric(
        o,
        "weft_tasks_running",
        Gauge,
        "Tasks running on a worker.",
        s.tasks_running as f64,
    );
    metric(
        o,
        "weft_tasks_runnable",
        Gauge,
        "Tasks ready to run: never started, yielded, or woken and queued.",
        s.tasks_runnable as f64,
    );
    metric(
        o,
        "weft_tasks_parked",
        Gauge,
        "Tasks parked and not yet woken.",
        s.tasks_parked as f64,
    );
    metric(
        o,
        "weft_tasks_compacted",
        Gauge,
        "Parked tasks whose stack is compacted into a heap buffer.",
        s.tasks_compacted as f64,
    );
    metric(
        o,
        "weft_spawns_total",
        Counter,
        "Tasks spawned since the process started.",
        s.spawns as f64,
    );
    metric(
        o,
        "weft_runtimes",
        Gauge,
        "Runtimes alive.",
        s.runtimes as f64,
    );
    metric(
        o,
        "weft_workers",
        Gauge,
        "Worker threads.",
        s.workers as f64,
    );
    metric(
        o,
        "weft_os_threads",
        Gauge,
        "OS threads of the runtimes: workers, monitors and blocking-pool threads.",
        s.os_threads as f64,
    );
    metric(
        o,
        "weft_blocking_threads",
        Gauge,
        "Blocking-pool threads.",
        s.blocking_threads as f64,
    );
    metric(
        o,
        "weft_stack_slots_in_use",
        Gauge,
        "Stack slots held by live tasks.",
        s.stack_slots_in_use as f64,
    );
    metric(
        o,
        "weft_stack_slots_cached",
        Gauge,
        "Stack slots held by no task, kept in the pools.",
        s.stack_slots_cached as f64,
    );
    metric(
        o,
        "weft_stack_reserved_bytes",
        Gauge,
        "Address space reserved for task stacks (free until touched).",
        s.stack_reserved_bytes as f64,
    );
    metric(
        o,
        "weft_stack_committed_bytes",
        Gauge,
        "Present pages of the task stack slots, from the page tables.",
        s.stack_committed_bytes as f64,
    );
    metric(
        o,
        "weft_stack_committed_bytes_per_task",
        Gauge,
        "Committed stack bytes divided by live tasks.",
        s.stack_bytes_per_task(),
    );
    metric(
        o,
        "weft_page_table_bytes",
        Gauge,
        "Page tables of the process (VmPTE).",
        s.page_table_bytes as f64,
    );
    metric(
        o,
        "weft_resident_bytes",
        Gauge,
        "Resident memory of the process (VmRSS), page tables not included.",
        s.rss_bytes as f64,
    );
    metric(
        o,
        "weft_resident_peak_bytes",
        Gauge,
        "The most resident memory the process has had (VmHWM).",
        s.peak_rss_bytes as f64,
    );
    metric(
        o,
        "weft_stack_reclaimed_bytes_total",
        Counter,
        "Bytes of parked tasks' stacks given back to the kernel.",
        s.stack_reclaimed_bytes as f64,
    );
    metric(
        o,
        "weft_stack_compacted_bytes",
        Gauge,
        "Live stack bytes held in heap buffers by compacted tasks.",
        s.stack_compacted_bytes as f64,
    );
    metric(
        o,
        "weft_stack_image_bytes",
        Gauge,
        "Arena bytes of compacted tasks' stack images, headers included.",
        s.stack_image_bytes as f64,
    );
    metric(
        o,
        "weft_stack_image_bytes_per_task",
        Gauge,
        "Stack image bytes divided by compacted tasks.",
        s.image_bytes_per_task(),
    );
    metric(
        o,
        "weft_stack_templates",
        Gauge,
        "Stack-image templates, shared by the images of tasks parked at one place.",
        s.stack_templates as f64,
    );
    metric(
        o,
        "weft_stack_template_bytes",
        Gauge,
        "Bytes held by stack-image templates.",
        s.stack_template_bytes as f64,
    );
    metric(
        o,
        "weft_stack_compactions_total",
        Counter,
        "Stacks compacted.",
        s.compactions as f64,
    );
    metric(
        o,
        "weft_stack_restores_total",
        Counter,
        "Compacted stacks restored.",
        s.restores as f64,
    );
    let _ = writeln!(
        o,
        "# HELP weft_stack_policy_info The stack policy in force."
    );
    let _ = writeln!(o, "# TYPE weft_stack_policy_info gauge");
    let _ = writeln!(
        o,
        "weft_stack_policy_info{{reclaim=\"{}\",compaction=\"{}\"}} 1",
        s.reclaim_policy.name(),
        s.compaction_mode.name()
    );
    out
}
