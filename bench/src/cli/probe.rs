//! `weft-bench probe`: N units parked, and what they cost in memory.
//!
//! The experiment: spawn N units (weft tasks, goroutines, tokio tasks, std threads — threads
//! at 10K and less only), each first using nothing, 8 KiB or 64 KiB of stack (mode idle / 8k
//! / 64k), then parking on one gate. Memory is the growth of the process's RSS plus page
//! tables per unit, read once all are parked and again after settling: Go forces six GCs
//! there (as the original goroutine experiment did) and also reports `StackInuse` ÷
//! goroutines; every peer first stays parked for a settling time (1 s; weft compacts a
//! stack parked 200 ms, `stack/compact.rs`). tokio has no stack: in modes 8k/64k its task holds a
//! buffer of that size across its await, the nearest equivalent.
//!
//! May call: `runner` (each unit count and mode in fresh processes), `chart`, `report`.
//!
//! Why RSS plus page tables: `VmRSS` leaves page tables out (shared/FACTS.md), and a stack
//! that touches one page per slot pays for page tables too; and why both readings: Go
//! gives memory back only at a GC, so "all parked" and "settled" answer different questions.

use serde_json::{json, Value};

use crate::args;
use crate::cli::chart::{self, LinePanel, Series};
use crate::cli::report::{table, Section};
use crate::cli::runner::{self, go_program, Cmd, Ctx, Outcome, Program, Size};
use crate::cli::stats::{cell, num, ratio_cell, Summary};

/// (mode, N) pairs for a size.
fn cases(size: Size) -> Vec<(&'static str, usize)> {
    let full: &[(&str, &[usize])] = &[
        ("idle", &[10_000, 100_000, 1_000_000]),
        ("8k", &[10_000, 100_000, 1_000_000]),
        ("64k", &[10_000, 100_000]),
    ];
    let quick: &[(&str, &[usize])] = &[
        ("idle", &[10_000, 100_000, 1_000_000]),
        ("8k", &[10_000, 100_000]),
        ("64k", &[10_000, 100_000]),
    ];
    let tiny: &[(&str, &[usize])] = &[("idle", &[1000]), ("8k", &[1000]), ("64k", &[1000])];
    size.pick(full, quick, tiny)
        .iter()
        .flat_map(|(m, ns)| ns.iter().map(move |n| (*m, *n)))
        .collect()
}

/// How long the Rust peers stay parked before the second reading.
pub fn settle_ms(size: Size) -> u64 {
    // weft compacts a stack parked 200 ms (stack/compact.rs): give it time to finish.
    size.pick(1000, 1000, 20)
}

/// Threads only at this many units and below.
const THREADS_MAX: usize = 10_000;

pub const PEERS: [&str; 4] = ["weft", "go", "tokio", "threads"];

/// The programs for one (mode, N).
pub fn programs<'a>(size: Size, mode: &str, n: usize) -> Vec<Program<'a>> {
    let settle = settle_ms(size);
    let rust = |rt: &str| {
        Cmd::me(&args![
            "probe",
            "--runtime",
            rt,
            "--tasks",
            n,
            "--mode",
            mode,
            "--settle-ms",
            settle
        ])
    };
    let go = go_program("probe").map(|exe| {
        Cmd::new(
            exe,
            &args!["-tasks", n, "-mode", mode, "-settle-ms", settle],
        )
    });
    let mut p = vec![
        Program::command("weft", rust("weft")),
        Program::command("go", go),
        Program::command("tokio", rust("tokio")),
    ];
    if n <= THREADS_MAX {
        p.push(Program::command("threads", rust("threads")));
    }
    p
}

/// RSS + page tables per unit, `settled` or at all-parked. Go's settled figure is the one
/// after its six forced GCs (`gc_*`), which follow the settling time.
pub fn per_unit(v: &Value, settled: bool) -> Option<f64> {
    let (rss, pte) = if settled && v.get("gc_rss_bytes_per_task").is_some() {
        ("gc_rss_bytes_per_task", "gc_pte_bytes_per_task")
    } else if settled {
        ("settled_rss_bytes_per_task", "settled_pte_bytes_per_task")
    } else {
        ("rss_bytes_per_task", "pte_bytes_per_task")
    };
    Some(v.get(rss)?.as_f64()? + v.get(pte)?.as_f64()?)
}

fn column(o: &Outcome, f: impl Fn(&Value) -> Option<f64>) -> Vec<Option<f64>> {
    o.runs.iter().map(|r| r.as_ref().and_then(&f)).collect()
}

fn summary_of(v: &[Option<f64>]) -> Option<Summary> {
    Summary::of(&v.iter().flatten().copied().collect::<Vec<_>>())
}

/// Runs the experiment and returns its section.
pub fn run(ctx: &mut Ctx) -> Result<Section, String> {
    let cases = cases(ctx.size);
    let total: usize = cases
        .iter()
        .map(|(_, n)| (ctx.runs + 1) * if *n <= THREADS_MAX { 4 } else { 3 })
        .sum();
    let pb = runner::bar(ctx, "probe", total);
    let mut results = Vec::new();
    for (mode, n) in &cases {
        let case = json!({"mode": mode, "tasks": n});
        let out = runner::alternate(ctx, &pb, "probe", case, programs(ctx.size, mode, *n));
        results.push((*mode, *n, out));
    }
    pb.finish_and_clear();

    let mut rows = Vec::new();
    let mut short_rows = Vec::new();
    for (mode, n, outs) in &results {
        let weft = column(&outs[0], |v| per_unit(v, false));
        for o in outs {
            let parked = column(o, |v| per_unit(v, false));
            let settled = column(o, |v| per_unit(v, true));
            let missing = o.missing();
            let show = |s: Option<Summary>| {
                if s.is_some() {
                    cell(s)
                } else {
                    missing.clone()
                }
            };
            let ratio = if o.peer == "weft" {
                String::new()
            } else {
                ratio_cell(Summary::of_ratios(&weft, &parked))
            };
            let stack = o
                .summary("stack_inuse_per_goroutine")
                .map_or(String::new(), |s| cell(Some(s)));
            rows.push(vec![
                mode.to_string(),
                num(*n as f64),
                o.peer.to_string(),
                show(o.summary("spawn_ms")),
                show(summary_of(&parked)),
                show(summary_of(&settled)),
                stack,
                ratio.clone(),
            ]);
            if *n == cases_max(&results, mode) {
                short_rows.push(vec![
                    format!("{mode}, {}", num(*n as f64)),
                    o.peer.to_string(),
                    summary_of(&parked).map_or(missing.clone(), |s| num(s.median)),
                    summary_of(&settled).map_or(missing.clone(), |s| num(s.median)),
                    ratio,
                ]);
            }
        }
    }
    let markdown = table(
        &[
            "mode",
            "N",
            "peer",
            "spawned until all parked, ms",
            "B per unit, all parked (RSS + page tables)",
            "B per unit, settled",
            "Go StackInuse ÷ goroutines, B",
            "weft / peer (all parked)",
        ],
        &rows,
    ) + &format!(
        "\nSettled: after {} ms parked (weft compacts a stack parked 200 ms); Go then also \
         forces six GCs. tokio in 8k/64k holds a buffer of that size across its await (it has \
         no stack).\n",
        settle_ms(ctx.size)
    );
    let summary = table(
        &[
            "units",
            "peer",
            "B per unit parked",
            "after settling",
            "weft / peer",
        ],
        &short_rows,
    );

    let chart_name = "probe-memory.svg";
    let panels: Vec<LinePanel> = ["idle", "8k", "64k"]
        .iter()
        .filter(|m| results.iter().any(|(mode, _, _)| mode == *m))
        .map(|m| LinePanel {
            title: format!("mode {m}: all parked"),
            x_label: "units parked (N)".into(),
            y_label: "bytes per unit (RSS + page tables)".into(),
            x_log: true,
            x_ticks: None,
            series: PEERS
                .iter()
                .map(|peer| Series {
                    name: peer.to_string(),
                    colour: chart::colour(peer),
                    points: results
                        .iter()
                        .filter(|(mode, _, _)| mode == m)
                        .filter_map(|(_, n, outs)| {
                            let o = outs.iter().find(|o| o.peer == *peer)?;
                            Some((*n as f64, summary_of(&column(o, |v| per_unit(v, false)))?))
                        })
                        .collect(),
                })
                .filter(|s| !s.points.is_empty())
                .collect(),
            legend: plotters::prelude::SeriesLabelPosition::UpperRight,
        })
        .collect();
    chart::lines(
        &ctx.out.join(chart_name),
        "Memory per parked unit vs N",
        &panels,
    )?;
    Ok(Section {
        name: "probe".into(),
        title: "Parked units: memory per unit".into(),
        ran: String::new(),
        markdown,
        summary,
        charts: vec![chart_name.into()],
        raw: Vec::new(),
    })
}

fn cases_max(results: &[(&str, usize, Vec<Outcome>)], mode: &str) -> usize {
    results
        .iter()
        .filter(|(m, _, _)| *m == mode)
        .map(|(_, n, _)| *n)
        .max()
        .unwrap_or(0)
}
