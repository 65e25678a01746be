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
//! would have avoided it. A fourth peer, `go, stack applied`, runs the same Go binary after
//! `weft-gostack apply` (its library) wrote that recommendation into a copy of it (taken from
//! the Go peer's warm-up profile, or a calibration run where that profile is too short to
//! hold a growth sample), with the GODEBUG `apply` prints: what the recommendation buys a Go
//! service without a patched runtime.
//!
//! May call: `runner`, `weft_gostack` (its library), `chart`, `report`.
//!
//! Why a new unit per request: Go reuses a goroutine's stack only at its starting size, so a
//! fresh goroutine pays the growth again; this is the pattern (a goroutine per request or
//! connection with a deep handler) where golang/go#18138 found the copying cost.

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};

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
    let last_profile: RefCell<Option<PathBuf>> = RefCell::new(None);
    // One run of a Go binary with the CPU profiler; its figures carry `analyze`'s reading.
    let profiled = |exe: &Path,
                    label: &str,
                    env: &[(&str, String)],
                    requests: usize|
     -> Result<Value, String> {
        std::fs::create_dir_all(&profiles_dir)
            .map_err(|e| format!("{}: {e}", profiles_dir.display()))?;
        let profile = profiles_dir.join(format!("{label}-cpu-{}.pprof", round.get()));
        round.set(round.get() + 1);
        let mut cmd = Cmd::new(
            exe,
            &args![
                "-requests",
                requests,
                "-inflight",
                inflight,
                "-cpuprofile",
                profile.display()
            ],
        );
        cmd.env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        let mut v = run_json(&cmd)?;
        match analyze(exe, &profile) {
            Ok(a) => v["gostack"] = a,
            Err(e) => v["gostack_error"] = json!(e),
        }
        v["profile"] = json!(profile.display().to_string());
        Ok(v)
    };
    let go_run = go_exe.clone().map(|exe| {
        let (profiled, last_profile) = (&profiled, &last_profile);
        Box::new(move || {
            let v = profiled(&exe, "go", &[], n)?;
            *last_profile.borrow_mut() = v["profile"].as_str().map(PathBuf::from);
            Ok(v)
        }) as RunOnce<'_>
    });
    // The same binary with the starting stack `weft-gostack apply` writes: analyze's
    // recommendation for the Go peer's latest profile (its warm-up's, as the Go peer warms
    // up first), applied once to a copy, run with the GODEBUG `apply` prints. Where that
    // profile holds no growth sample (tiny sizes: a few milliseconds of profile), a
    // calibration run of the quick size gives one.
    let sized: RefCell<Option<(PathBuf, u64)>> = RefCell::new(None);
    let applied_run = go_exe.clone().map(|exe| {
        let (profiled, last_profile, sized) = (&profiled, &last_profile, &sized);
        Box::new(move || {
            if sized.borrow().is_none() {
                let from_last = last_profile
                    .borrow()
                    .as_deref()
                    .ok_or_else(|| "the Go peer did not run".to_string())
                    .and_then(|p| apply_stack(&exe, p));
                let applied = match from_last {
                    Ok(a) => a,
                    Err(_) => {
                        let calibration = profiled(&exe, "go-calibration", &[], 300_000)?;
                        let profile = calibration["profile"].as_str().unwrap_or_default();
                        apply_stack(&exe, Path::new(profile))?
                    }
                };
                *sized.borrow_mut() = Some(applied);
            }
            let (copy, start) = sized.borrow().clone().expect("set above");
            let godebug = weft_gostack::godebug::merge("", &weft_gostack::godebug::RUN_SETTINGS);
            let mut v = profiled(&copy, "go-applied", &[("GODEBUG", godebug)], n)?;
            v["start_bytes"] = json!(start);
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
        Program {
            peer: APPLIED,
            run: applied_run,
        },
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
    let applied_text = applied_text(&outs[3], go);
    markdown += &format!("\n{applied_text}\n");
    if let (Ok(exe), Some(_)) = (&go_exe, gostack("growth_share")) {
        if let Ok(text) = analyze_text(exe, std::path::Path::new(&profile)) {
            markdown += &format!(
                "\n<details><summary>weft-gostack analyze of the first measured Go run</summary>\n\n\
                 ```text\n{text}```\n\n</details>\n"
            );
        }
    }
    let summary = table(&head, &rows) + &format!("\n{growth_text}\n\n{applied_text}\n");

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

/// The peer that runs the Go binary with the starting stack `weft-gostack apply` wrote.
const APPLIED: &str = "go, stack applied";

/// Writes analyze's recommended starting stack for `profile` into a copy of `exe`, as
/// `weft-gostack apply --from-profile` does: returns the copy and the size.
fn apply_stack(exe: &Path, profile: &Path) -> Result<(PathBuf, u64), String> {
    use weft_gostack::{analyze, apply, binary, pprof};
    let b = binary::load(exe).map_err(|e| e.to_string())?;
    let p = pprof::load(profile).map_err(|e| e.to_string())?;
    let a = analyze::analyze(&b, &p, &analyze::Options::default())
        .map_err(|e| format!("{}: {e}", profile.display()))?;
    let size = a
        .recommendation
        .map(|r| r.size)
        .ok_or_else(|| format!("{}: no stack growth to size for", profile.display()))?;
    let data = std::fs::read(exe).map_err(|e| format!("{}: {e}", exe.display()))?;
    let applied =
        apply::apply(&data, size, false).map_err(|p| p.in_file(exe.display()).to_string())?;
    let copy = exe.with_extension("sized");
    apply::write_new(exe, &copy, &applied.bytes).map_err(|e| e.to_string())?;
    Ok((copy, size))
}

/// The sentence under the table about the applied stack: its size, its requests/s against
/// the plain Go binary's (per neighbouring pair), and what is left of stack growth.
fn applied_text(applied: &crate::cli::runner::Outcome, go: &crate::cli::runner::Outcome) -> String {
    let Some(rps) = applied.summary("requests_per_sec") else {
        return format!("Go with the stack applied: {}", applied.missing());
    };
    let first = |key: &str| {
        applied
            .runs
            .iter()
            .flatten()
            .find_map(|r| r.get(key)?.as_f64())
    };
    let growth: Vec<f64> = applied
        .runs
        .iter()
        .flatten()
        .filter_map(|r| r.get("gostack")?.get("growth_share")?.as_f64())
        .collect();
    let growth = Summary::of(&growth).map_or("unknown".into(), |s| {
        format!("{}%", cell(Some(scale(s, 100.0))))
    });
    format!(
        "`{APPLIED}`: the same Go binary after `weft-gostack apply` wrote the recommended \
         starting stack ({} KiB, analyze's recommendation from a profile of the plain Go binary) \
         into a copy, run with \
         `GODEBUG=adaptivestackstart=0,gcshrinkstackoff=1`: {} requests/s, {} the plain Go \
         binary's; its CPU in stack growth: **{growth}**.",
        num(first("start_bytes").unwrap_or(0.0) / 1024.0),
        cell(Some(rps)),
        ratio_cell(Summary::of_ratios(
            &applied.field("requests_per_sec"),
            &go.field("requests_per_sec"),
        ))
    )
}

fn scale(s: Summary, k: f64) -> Summary {
    Summary {
        median: s.median * k,
        min: s.min * k,
        max: s.max * k,
        runs: s.runs,
    }
}
