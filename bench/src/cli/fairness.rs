//! `weft-bench fairness`: on one worker, tasks whose channel operations always succeed
//! (they never park) must not starve the timers of their worker (`sched/coop.rs`).
//!
//! 1. hub: one task fans lines out to 2,000 client tasks over buffered channels (capacity
//!    64); a 5 ms sleeper on the same worker records how late each of its wakes is.
//! 2. pipeline: 8 stages joined by always-ready buffered channels (capacity 1024), and a
//!    100 ms ticker beside them counting the ticks it sees.
//!
//! weft only: the behaviour under test is weft's cooperative budget. Each scenario runs for
//! `--seconds` (2, 1 with `--quick`) in its own process, on a runtime of one worker with the
//! monitor off, so that nothing but the budget can hand the worker to the timers.
//!
//! Owns: the experiment and its peer (`weft-bench peer fairness`, [`PeerArgs`]).
//! May call: weft, `runner`, `report`. Called by: `cli/mod.rs`, `peer.rs`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::args;
use crate::cli::report::{table, Section};
use crate::cli::runner::{self, Cmd, Ctx, Outcome, Program};
use crate::cli::stats::cell;

const CLIENTS: usize = 2000;
const STAGES: usize = 8;

/// Which scenario a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    Hub,
    Pipeline,
}

/// One run, `weft-bench peer fairness …`.
#[derive(Debug, Clone, clap::Args)]
pub struct PeerArgs {
    #[arg(long, value_enum)]
    pub scenario: Scenario,
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
}

fn runtime() -> Result<weft::Runtime, String> {
    weft::Runtime::builder()
        .workers(1)
        .monitor_threshold(None)
        .build()
        .map_err(|e| format!("weft runtime: {e}"))
}

/// Lateness of a 5 ms sleep, in ms, repeated until `stop`.
fn sleeper(stop: Arc<AtomicBool>) -> Vec<f64> {
    let mut late = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let start = Instant::now();
        weft::time::sleep(Duration::from_millis(5));
        late.push((start.elapsed().as_secs_f64() - 0.005).max(0.0) * 1e3);
    }
    late
}

fn hub(run_for: Duration) -> Result<Value, String> {
    let (mut late, lines) = runtime()?.block_on(move || {
        let stop = Arc::new(AtomicBool::new(false));
        let mut senders = Vec::with_capacity(CLIENTS);
        let mut clients = Vec::with_capacity(CLIENTS);
        for _ in 0..CLIENTS {
            let (tx, rx) = weft::chan::bounded::<Arc<str>>(64);
            senders.push(tx);
            clients.push(weft::spawn(move || {
                rx.iter().map(|l| l.len() as u64).sum::<u64>()
            }));
        }
        let sleeper = {
            let stop = stop.clone();
            weft::spawn(move || sleeper(stop))
        };
        let line: Arc<str> = Arc::from("a line of chat, fanned out to every client\n");
        let start = Instant::now();
        let mut lines = 0u64;
        while start.elapsed() < run_for {
            for tx in &senders {
                tx.send(line.clone()).expect("client alive");
            }
            lines += 1;
        }
        stop.store(true, Ordering::Relaxed);
        drop(senders);
        for c in clients {
            c.join().expect("client");
        }
        (sleeper.join().expect("sleeper"), lines)
    });
    late.sort_by(f64::total_cmp);
    let pct = |p| crate::percentile(&late, p);
    Ok(json!({
        "sleeps": late.len(),
        "late_p50_ms": pct(50.0),
        "late_p99_ms": pct(99.0),
        "late_max_ms": pct(100.0),
        "lines_per_sec": lines as f64 / run_for.as_secs_f64(),
    }))
}

fn pipeline(run_for: Duration) -> Result<Value, String> {
    let (ticks, expected, moved) = runtime()?.block_on(move || {
        let stop = Arc::new(AtomicBool::new(false));
        let (first_tx, mut rx) = weft::chan::bounded::<u64>(1024);
        let mut stages = Vec::new();
        for _ in 0..STAGES {
            let (tx, next_rx) = weft::chan::bounded::<u64>(1024);
            let input = std::mem::replace(&mut rx, next_rx);
            stages.push(weft::spawn(move || {
                for v in input.iter() {
                    if tx.send(v + 1).is_err() {
                        break;
                    }
                }
            }));
        }
        let sink = weft::spawn(move || rx.iter().count() as u64);
        let ticker = {
            let stop = stop.clone();
            weft::spawn(move || {
                let ticks = weft::time::tick(Duration::from_millis(100));
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    ticks.recv().expect("ticker");
                    n += 1;
                }
                n
            })
        };
        let start = Instant::now();
        let mut v = 0u64;
        while start.elapsed() < run_for {
            first_tx.send(v).expect("stage alive");
            v += 1;
        }
        let expected = run_for.as_millis() as u64 / 100;
        stop.store(true, Ordering::Relaxed);
        drop(first_tx);
        for s in stages {
            s.join().expect("stage");
        }
        let moved = sink.join().expect("sink");
        (ticker.join().expect("ticker"), expected, moved)
    });
    Ok(json!({
        "ticks": ticks,
        "ticks_expected": expected,
        "ticks_share": ticks as f64 / expected.max(1) as f64,
        "values_per_sec": moved as f64 / run_for.as_secs_f64(),
    }))
}

/// Runs one scenario and returns its figures.
pub fn peer(a: PeerArgs) -> Result<Value, String> {
    let run_for = Duration::from_secs_f64(a.seconds.max(0.01));
    match a.scenario {
        Scenario::Hub => hub(run_for),
        Scenario::Pipeline => pipeline(run_for),
    }
}

/// Runs the experiment and returns its section.
pub fn run(ctx: &mut Ctx) -> Result<Section, String> {
    let seconds = ctx.size.pick(2.0, 1.0, 0.2);
    let pb = runner::bar(ctx, "fairness", 2 * (ctx.runs + 1));
    let mut outs: Vec<(Scenario, Outcome)> = Vec::new();
    for scenario in [Scenario::Hub, Scenario::Pipeline] {
        let name = if scenario == Scenario::Hub {
            "hub"
        } else {
            "pipeline"
        };
        let cmd = Cmd::me(&args!["fairness", "--scenario", name, "--seconds", seconds]);
        let case = json!({"scenario": name, "seconds": seconds});
        let mut o = runner::alternate(
            ctx,
            &pb,
            "fairness",
            case,
            vec![Program::command("weft", cmd)],
        );
        outs.push((scenario, o.remove(0)));
    }
    pb.finish_and_clear();
    let fig = |o: &Outcome, key: &str| {
        o.summary(key)
            .map_or_else(|| o.missing(), |s| cell(Some(s)))
    };
    let mut rows = Vec::new();
    for (scenario, o) in &outs {
        match scenario {
            Scenario::Hub => rows.push(vec![
                format!("hub: 1 task → {CLIENTS} clients (channels of 64)"),
                format!("{} lines/s fanned out", fig(o, "lines_per_sec")),
                format!(
                    "5 ms sleeper late by p50 {} / p99 {} / max {} ms",
                    fig(o, "late_p50_ms"),
                    fig(o, "late_p99_ms"),
                    fig(o, "late_max_ms")
                ),
            ]),
            Scenario::Pipeline => rows.push(vec![
                format!("pipeline: {STAGES} stages (channels of 1024)"),
                format!("{} values/s through it", fig(o, "values_per_sec")),
                format!(
                    "100 ms ticker saw {} of {} ticks",
                    fig(o, "ticks"),
                    fig(o, "ticks_expected")
                ),
            ]),
        }
    }
    let intro = format!(
        "weft alone, one worker, monitor off, {seconds} s per scenario per run: tasks whose \
         channel operations never park must still let the worker's timers run.\n\n"
    );
    let markdown = intro.clone() + &table(&["scenario", "work done", "the timer beside it"], &rows);
    Ok(Section {
        name: "fairness".into(),
        title: "Fairness: timers beside tasks that never park".into(),
        ran: String::new(),
        markdown: markdown.clone(),
        summary: markdown,
        charts: Vec::new(),
        raw: Vec::new(),
    })
}
