//! `weft-bench growth`: the cost Go pays growing stacks, next to a runtime that never copies
//! one.
//!
//! Every request is a new unit (weft task, goroutine, tokio task) whose handler calls
//! through seven non-inlined frames with 128, 512, 1024, 2600, 4096, 6144 and 3000 bytes of
//! locals (17,504 B; `peer::chain`, `bench/go/growth`) before it answers on a channel; 64
//! requests are in flight at a time. A goroutine starts small and grows its stack by copying
//! it (`runtime.newstack` → `copystack`) on the way down; a weft task's stack is reserved
//! whole and its pages stay warm in a reused slot; tokio runs the chain on its worker's
//! thread stack. Figures: requests/s and CPU per request. The Go peer writes a CPU profile of
//! every measured run, and `weft-gostack analyze` (its library: the same code) reads each
//! with the Go binary: the share of CPU in stack growth and the starting stack size that
//! would have avoided it.
//!
//! May call: `runner`, `weft_gostack` (its library), `chart`, `report`.
//!
//! Why a new unit per request: Go reuses a goroutine's stack only at its starting size, so a
//! fresh goroutine pays the growth again; this is the pattern (a goroutine per request or
//! connection with a deep handler) where golang/go#18138 found the copying cost.

use std::cell::Cell;
use std::path::PathBuf;

use serde_json::{json, Value};

use crate::args;
use crate::cli::chart::{self, BarPanel};
use crate::cli::report::{table, Section};
use crate::cli::runner::{self, go_program, run_json, Cmd, Ctx, Program, RunOnce};
use crate::cli::stats::{cell, num, ratio_cell, Summary};

/// What `weft-gostack analyze` says about one profile.
fn analyze(binary: &std::path::Path, profile: &std::path::Path) -> Result<Value, String> {
    use weft_gostack::{analyze, binary, pprof};
    let b = binary::load(binary).map_err(|e| e.to_string())?;
    let p = pprof::load(profile).map_err(|e| e.to_string())?;
    let opts = analyze::Options {
        coverage: 0.99,
        guard: analyze::DEFAULT_GUARD,
    };
    let a = analyze::analyze(&b, &p, &opts).map_err(|e| format!("{}: {e}", profile.display()))?;
    Ok(json!({
        "growth_share": a.growth.share,
        "growth_samples": a.growth.samples,
        "samples": a.inputs.samples,
        "recommended_start_bytes": a.recommendation.map(|r| r.size),
        "removes_growth_share": a.recommendation.map(|r| r.removes_growth_share),
        "need_p99_bytes": a.need.map(|d| d.p99),
    }))
}

/// `weft-gostack analyze`'s text report of one profile (its top 5 chains and hogs).
fn analyze_text(binary: &std::path::Path, profile: &std::path::Path) -> Result<String, String> {
    use weft_gostack::{analyze, binary, pprof, report};
    let b = binary::load(binary).map_err(|e| e.to_string())?;
    let p = pprof::load(profile).map_err(|e| e.to_string())?;
    let opts = analyze::Options {
        coverage: 0.99,
        guard: analyze::DEFAULT_GUARD,
    };
    let a = analyze::analyze(&b, &p, &opts).map_err(|e| e.to_string())?;
    Ok(report::analysis(&a, 5, false))
}

/// Runs the experiment and returns its section.
pub fn run(ctx: &mut Ctx) -> Result<Section, String> {
    let n = ctx.size.pick(1_000_000, 300_000, 2000);
    let inflight = 64;
    let pb = runner::bar(ctx, "growth", 3 * (ctx.runs + 1));
    let me = |rt: &str| {
        Cmd::me(&args![
            "growth",
            "--runtime",
            rt,
            "--requests",
            n,
            "--inflight",
            inflight
        ])
    };
    let go_exe = go_program("growth");
    let profiles_dir = ctx.out.join("growth-profiles");
    let round = Cell::new(0usize);
    let go_run = go_exe.clone().map(|exe| {
        let dir = profiles_dir.clone();
        let round = &round;
        Box::new(move || {
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let profile: PathBuf = dir.join(format!("go-cpu-{}.pprof", round.get()));
            round.set(round.get() + 1);
            let cmd = Cmd::new(
                &exe,
                &args![
                    "-requests",
                    n,
                    "-inflight",
                    inflight,
                    "-cpuprofile",
                    profile.display()
                ],
            );
            let mut v = run_json(&cmd)?;
            match analyze(&exe, &profile) {
                Ok(a) => v["gostack"] = a,
                Err(e) => v["gostack_error"] = json!(e),
            }
            v["profile"] = json!(profile.display().to_string());
            Ok(v)
        }) as RunOnce<'_>
    });
    let programs = vec![
        Program::command("weft", me("weft")),
        Program {
            peer: "go",
            run: go_run,
        },
        Program::command("tokio", me("tokio")),
    ];
    let case = json!({"requests": n, "inflight": inflight, "frames": [128, 512, 1024, 2600, 4096, 6144, 3000]});
    let outs = runner::alternate(ctx, &pb, "growth", case, programs);
    pb.finish_and_clear();

    let weft = &outs[0];
    let mut rows = Vec::new();
    for o in &outs {
        let show = |key: &str| {
            o.summary(key)
                .map_or_else(|| o.missing(), |s| cell(Some(s)))
        };
        let cpu = o
            .summary("cpu_ns_per_request")
            .map_or_else(|| o.missing(), |s| cell(Some(scale(s, 1e-3))));
        let ratio = if o.peer == "weft" {
            String::new()
        } else {
            ratio_cell(Summary::of_ratios(
                &weft.field("requests_per_sec"),
                &o.field("requests_per_sec"),
            ))
        };
        rows.push(vec![
            o.peer.to_string(),
            show("requests_per_sec"),
            cpu,
            ratio,
        ]);
    }
    let head = [
        "peer",
        "requests/s",
        "CPU µs per request",
        "weft / peer requests/s",
    ];
    let mut markdown = format!(
        "{} requests, {inflight} in flight, each a new unit running a 7-frame chain of \
         17,504 B of locals. The Go runs carry the CPU profiler (100 Hz) that the analysis \
         reads.\n\n",
        num(n as f64)
    ) + &table(&head, &rows);

    let go = &outs[1];
    let gostack = |key: &str| -> Option<Summary> {
        let v: Vec<f64> = go
            .runs
            .iter()
            .flatten()
            .filter_map(|r| r.get("gostack")?.get(key)?.as_f64())
            .collect();
        Summary::of(&v)
    };
    let profile = go
        .runs
        .iter()
        .flatten()
        .find_map(|r| r.get("profile")?.as_str().map(str::to_owned))
        .unwrap_or_else(|| "PROFILE".into());
    let go_bin = go_exe
        .as_ref()
        .map_or("GO-BINARY".into(), |p| p.display().to_string());
    let growth_text = match (gostack("growth_share"), gostack("recommended_start_bytes")) {
        (Some(share), start) => {
            let pct = scale(share, 100.0);
            let start = start.map_or("none (no growth sample)".into(), |s| {
                format!("{} KiB", num(s.median / 1024.0))
            });
            let removes = gostack("removes_growth_share").map_or(String::new(), |s| {
                format!(", which would remove {:.0}% of it", s.median * 100.0)
            });
            format!(
                "Go's CPU in stack growth (`runtime.morestack`/`newstack`/`copystack` and below): \
                 **{}%** of its CPU; recommended starting stack: **{start}**{removes}. \
                 Computed by `weft-gostack analyze` on each measured run's CPU profile \
                 (`weft-gostack analyze --binary {go_bin} --profile {profile}` shows the \
                 first in full).",
                cell(Some(pct))
            )
        }
        _ => format!("Go's stack-growth share: {}", go.missing()),
    };
    markdown += &format!("\n{growth_text}\n");
    if let (Ok(exe), Some(_)) = (&go_exe, gostack("growth_share")) {
        if let Ok(text) = analyze_text(exe, std::path::Path::new(&profile)) {
            markdown += &format!(
                "\n<details><summary>weft-gostack analyze of the first measured Go run</summary>\n\n\
                 ```text\n{text}```\n\n</details>\n"
            );
        }
    }
    let summary = table(&head, &rows) + &format!("\n{growth_text}\n");

    let chart_name = "growth.svg";
    chart::bars(
        &ctx.out.join(chart_name),
        "Growth chain: requests/s (higher is better)",
        &[BarPanel {
            title: format!("{} requests, 17.5 KB of frames each", num(n as f64)),
            y_label: "requests/s".into(),
            y_log: false,
            bars: outs
                .iter()
                .map(|o| {
                    (
                        o.peer.to_string(),
                        chart::colour(o.peer),
                        o.summary("requests_per_sec"),
                    )
                })
                .collect(),
        }],
    )?;
    Ok(Section {
        name: "growth".into(),
        title: "Stack growth: a deep handler per request".into(),
        ran: String::new(),
        markdown,
        summary,
        charts: vec![chart_name.into()],
        raw: Vec::new(),
    })
}

fn scale(s: Summary, k: f64) -> Summary {
    Summary {
        median: s.median * k,
        min: s.min * k,
        max: s.max * k,
        runs: s.runs,
    }
}
