//! `weft-bench sleepers`: N units each sleeping until its own random deadline — how late
//! they wake, the CPU spent while all of them sleep, the CPU per wake, and memory.
//!
//! Each run (weft, Go's `bench/go/time_sleepers`, tokio; one process each) picks a base time
//! far enough ahead that every unit has started by then (`lead + 6 µs × N`: starting a
//! million units takes seconds in every runtime); unit *i* sleeps until `base + min +
//! spread × u_i` (u_i uniform, the same xorshift sequence on every side) and records how
//! late it woke. Idle CPU: CPU time per second of wall time from when every unit is asleep
//! until just before the first deadline (20 ms margins, left out when that window is under
//! 100 ms). CPU per wake: the wake phase's CPU time ÷ N. Published size: 1M units, 1–5 s,
//! lead 3 s; `--quick`: 100K units, 0.5–1.5 s, lead 1 s. weft runs twice, as it comes and
//! with `WEFT_STACK_COMPACTION=off`: compacting the stacks of the units that just parked is
//! work done in the very window the idle CPU is read from. So weft's runs also give the idle
//! CPU of the rest of the window once compaction has settled (its count of compacted tasks
//! still for 100 ms) and when that was: the runtime's own cost while everything sleeps,
//! apart from the one-time work of compacting.
//!
//! Owns: the experiment and its Rust peers (`weft-bench peer sleepers`, [`PeerArgs`]).
//! May call: weft, tokio, `runner`, `chart`, `report`. Called by: `cli/mod.rs`, `peer.rs`.
//!
//! Why deadlines after a base, not a gate that releases every unit at once: a million
//! simultaneous wakes delayed the first timers in every runtime, which measures the
//! stampede, not the timers.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::args;
use crate::cli::chart::{self, BarPanel};
use crate::cli::peer::Runtime;
use crate::cli::report::{table, Section};
use crate::cli::runner::{self, go_program, Cmd, Ctx, Program};
use crate::cli::stats::num;

/// One side's run, `weft-bench peer sleepers …`.
#[derive(Debug, Clone, clap::Args)]
pub struct PeerArgs {
    #[arg(long, value_enum)]
    pub runtime: Runtime,
    #[arg(long, default_value_t = 1_000_000)]
    pub tasks: usize,
    /// The shortest sleep after the base, ms.
    #[arg(long, default_value_t = 1000)]
    pub min_ms: u64,
    /// Sleeps are drawn from [min, min + spread), ms.
    #[arg(long, default_value_t = 4000)]
    pub spread_ms: u64,
    /// The base is `lead + 6 µs × tasks` after the start, ms.
    #[arg(long, default_value_t = 3000)]
    pub lead_ms: u64,
    /// Also print the lateness of each 100 ms window of sleep lengths on stderr.
    #[arg(long)]
    pub windows: bool,
    /// weft: the workers' timer slack, µs (`RuntimeBuilder::timer_slack`; default: weft's).
    #[arg(long)]
    pub timer_slack_us: Option<u64>,
    /// weft: sleep with `time::sleep_until_precise`, without the runtime's timer slack.
    #[arg(long)]
    pub precise: bool,
}

fn xorshift(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// Every unit's sleep after the base (Go's peer draws the same sequence).
fn sleeps(a: &PeerArgs) -> Vec<Duration> {
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let spread_us = (a.spread_ms * 1000).max(1);
    (0..a.tasks)
        .map(|_| {
            Duration::from_millis(a.min_ms) + Duration::from_micros(xorshift(&mut seed) % spread_us)
        })
        .collect()
}

/// Counters the units and the observer share.
#[derive(Default)]
struct Progress {
    asleep: AtomicUsize,
    woken: AtomicUsize,
}

fn wait_for(counter: &AtomicUsize, n: usize) {
    while counter.load(Ordering::Acquire) < n {
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn record(lateness: &[AtomicU32], i: usize, deadline: Instant) {
    let late = Instant::now().saturating_duration_since(deadline);
    lateness[i].store(
        late.as_micros().min(u32::MAX as u128) as u32,
        Ordering::Relaxed,
    );
}

/// The observer (this thread, outside the runtime): waits until every unit sleeps,
/// measures idle CPU until just before the first deadline, then the wake phase.
///
/// `background`, where the runtime does work of its own after its tasks park (weft's stack
/// compaction), is a counter of that work: once it has not moved for [`SETTLE_QUIET`], the
/// rest of the window is also measured on its own, as the idle CPU of the settled runtime.
fn observe(
    a: &PeerArgs,
    progress: &Progress,
    start: Instant,
    base: Instant,
    background: Option<&dyn Fn() -> u64>,
) -> Value {
    let n = a.tasks;
    wait_for(&progress.asleep, n);
    let spawn = start.elapsed();
    let first_deadline = base + Duration::from_millis(a.min_ms);
    let window_start = Instant::now() + Duration::from_millis(20);
    let window_end = first_deadline
        .checked_sub(Duration::from_millis(20))
        .unwrap_or(first_deadline);
    let mut idle = None;
    let mut settled = None;
    if window_end > window_start + Duration::from_millis(100) {
        std::thread::sleep(window_start.saturating_duration_since(Instant::now()));
        let cpu0 = crate::cpu_time();
        let w0 = Instant::now();
        let settled_at = background.and_then(|count| settle(count, window_end));
        std::thread::sleep(window_end.saturating_duration_since(Instant::now()));
        let cpu1 = crate::cpu_time();
        idle = Some((cpu1 - cpu0).as_secs_f64() * 1e3 / w0.elapsed().as_secs_f64());
        if let Some((at, cpu)) = settled_at {
            let span = at.elapsed();
            if span >= Duration::from_millis(100) {
                settled = Some((
                    (cpu1 - cpu).as_secs_f64() * 1e3 / span.as_secs_f64(),
                    (at - w0).as_secs_f64() * 1e3,
                ));
            }
        }
    }
    let rss = crate::status_bytes("VmRSS") as f64;
    let pte = crate::status_bytes("VmPTE") as f64;
    std::thread::sleep(window_end.saturating_duration_since(Instant::now()));
    let cpu0 = crate::cpu_time();
    wait_for(&progress.woken, n);
    let wake_cpu = crate::cpu_time() - cpu0;
    let mut v = json!({
        "tasks": n,
        "spawn_ms": spawn.as_secs_f64() * 1e3,
        "idle_cpu_ms_per_s": idle,
        "cpu_per_wake_us": wake_cpu.as_secs_f64() * 1e6 / n.max(1) as f64,
        "rss_mib": rss / (1 << 20) as f64,
        "pte_mib": pte / (1 << 20) as f64,
    });
    if let Some((cpu, after_ms)) = settled {
        v["settled_idle_cpu_ms_per_s"] = json!(cpu);
        v["settled_after_ms"] = json!(after_ms);
    }
    v
}

/// Waits until `count` (the runtime's background work) has not moved for [`SETTLE_QUIET`],
/// polling it every [`SETTLE_POLL`]; returns when that was and the process's CPU time then,
/// or `None` if it still moved at `until`.
fn settle(count: &dyn Fn() -> u64, until: Instant) -> Option<(Instant, Duration)> {
    let (mut since, mut last) = (Instant::now(), count());
    while Instant::now() + SETTLE_POLL < until {
        std::thread::sleep(SETTLE_POLL);
        let now = count();
        if now != last {
            (since, last) = (Instant::now(), now);
        } else if since.elapsed() >= SETTLE_QUIET {
            return Some((Instant::now(), crate::cpu_time()));
        }
    }
    None
}

/// How often `observe` looks at the runtime's background work.
const SETTLE_POLL: Duration = Duration::from_millis(20);
/// How long the background work must stay still to count as settled.
const SETTLE_QUIET: Duration = Duration::from_millis(100);

/// Lateness percentiles into `v`; with `windows`, per 100 ms window of sleep length on
/// stderr (a tail from a few long stalls shows as a few bad windows, steady queueing as a
/// high p99 in every one).
fn lateness_figures(a: &PeerArgs, lateness: &[AtomicU32], v: &mut Value) {
    let mut late: Vec<u32> = lateness.iter().map(|l| l.load(Ordering::Relaxed)).collect();
    if a.windows {
        let count = (a.spread_ms / 100).max(1) as usize;
        let mut windows: Vec<Vec<u32>> = vec![Vec::new(); count];
        for (l, sleep) in late.iter().zip(sleeps(a)) {
            let w = ((sleep.as_millis() as u64).saturating_sub(a.min_ms) / 100) as usize;
            windows[w.min(count - 1)].push(*l);
        }
        for (i, w) in windows.iter_mut().enumerate() {
            w.sort_unstable();
            if let (Some(max), n) = (w.last(), w.len()) {
                eprintln!(
                    "window {:>4} ms: n={n} p50_us={} p99_us={} max_us={max}",
                    i * 100,
                    w[n / 2],
                    w[n * 99 / 100]
                );
            }
        }
    }
    late.sort_unstable();
    let n = late.len();
    let pct = |p: f64| late[((n as f64 * p) as usize).min(n - 1)];
    v["p50_us"] = json!(pct(0.50));
    v["p99_us"] = json!(pct(0.99));
    v["max_us"] = json!(late[n - 1]);
}

/// Runs one side and returns its figures.
pub fn peer(mut a: PeerArgs) -> Result<Value, String> {
    a.tasks = a.tasks.max(1);
    let n = a.tasks;
    let lateness: Arc<Vec<AtomicU32>> = Arc::new((0..n).map(|_| AtomicU32::new(0)).collect());
    let progress = Arc::new(Progress::default());
    let start = Instant::now();
    let base = start + Duration::from_millis(a.lead_ms) + Duration::from_micros(6) * n as u32;
    let all = sleeps(&a);
    let mut v = match a.runtime {
        Runtime::Weft => {
            let mut builder = weft::Runtime::builder().stack_size(32 * 1024);
            if let Some(us) = a.timer_slack_us {
                builder = builder.timer_slack(Duration::from_micros(us));
            }
            let rt = builder.build().map_err(|e| format!("weft runtime: {e}"))?;
            let (l, p) = (lateness.clone(), progress.clone());
            let sleep_until = if a.precise {
                weft::time::sleep_until_precise
            } else {
                weft::time::sleep_until
            };
            rt.spawn(move || {
                let (lateness, progress) = (l, p);
                for (i, sleep) in all.into_iter().enumerate() {
                    let (lateness, progress) = (lateness.clone(), progress.clone());
                    weft::spawn(move || {
                        let deadline = base + sleep;
                        progress.asleep.fetch_add(1, Ordering::Release);
                        sleep_until(deadline);
                        record(&lateness, i, deadline);
                        progress.woken.fetch_add(1, Ordering::Release);
                    });
                }
            });
            let compactions = || weft::stack::counters().compacted_tasks;
            let mut v = observe(&a, &progress, start, base, Some(&compactions));
            v["stack_mode"] = json!(weft::stack::mode().to_string());
            v
        }
        Runtime::Tokio => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_time()
                .build()
                .map_err(|e| format!("tokio runtime: {e}"))?;
            let (l, p) = (lateness.clone(), progress.clone());
            rt.spawn(async move {
                let (lateness, progress) = (l, p);
                for (i, sleep) in all.into_iter().enumerate() {
                    let (lateness, progress) = (lateness.clone(), progress.clone());
                    tokio::spawn(async move {
                        let deadline = base + sleep;
                        progress.asleep.fetch_add(1, Ordering::Release);
                        tokio::time::sleep_until(deadline.into()).await;
                        record(&lateness, i, deadline);
                        progress.woken.fetch_add(1, Ordering::Release);
                    });
                }
            });
            observe(&a, &progress, start, base, None)
        }
        Runtime::Threads => return Err("no threads peer for sleepers".into()),
    };
    lateness_figures(&a, &lateness, &mut v);
    Ok(v)
}

/// The figures of the table, (key, heading).
const COLUMNS: [(&str, &str); 9] = [
    ("p50_us", "lateness p50 µs"),
    ("p99_us", "lateness p99 µs"),
    ("max_us", "lateness max µs"),
    ("idle_cpu_ms_per_s", "CPU while all sleep, ms/s"),
    (
        "settled_idle_cpu_ms_per_s",
        "same, once compaction has settled, ms/s",
    ),
    ("cpu_per_wake_us", "CPU per wake µs"),
    ("rss_mib", "RSS MiB"),
    ("pte_mib", "page tables MiB"),
    ("spawn_ms", "until all asleep, ms"),
];

/// Runs the experiment and returns its section.
pub fn run(ctx: &mut Ctx) -> Result<Section, String> {
    let s = ctx.size;
    let tasks = s.pick(1_000_000, 100_000, 2000);
    let (min_ms, spread_ms, lead_ms) =
        s.pick((1000, 4000, 3000), (500, 1000, 1000), (200, 100, 100));
    let pb = runner::bar(ctx, "sleepers", 4 * (ctx.runs + 1));
    let me = |rt: &str| {
        let mut c = Cmd::me(&args![
            "sleepers",
            "--runtime",
            rt,
            "--tasks",
            tasks,
            "--min-ms",
            min_ms,
            "--spread-ms",
            spread_ms,
            "--lead-ms",
            lead_ms
        ]);
        if let Ok(c) = &mut c {
            c.limit = Duration::from_secs(180);
        }
        c
    };
    let go = go_program("time_sleepers").map(|exe| {
        let mut c = Cmd::new(
            exe,
            &args![
                "-n",
                tasks,
                "-min-ms",
                min_ms,
                "-spread-ms",
                spread_ms,
                "-lead-ms",
                lead_ms
            ],
        );
        c.limit = Duration::from_secs(180);
        c
    });
    // weft again with compaction off: what compacting the parked stacks costs the timers.
    let no_compaction = me("weft").map(|mut c| {
        c.env.push(("WEFT_STACK_COMPACTION".into(), "off".into()));
        c
    });
    let programs = vec![
        Program::command("weft", me("weft")),
        Program::command("go", go),
        Program::command("tokio", me("tokio")),
        Program::command("weft, compaction off", no_compaction),
    ];
    let case =
        json!({"tasks": tasks, "min_ms": min_ms, "spread_ms": spread_ms, "lead_ms": lead_ms});
    let outcomes = runner::alternate(ctx, &pb, "sleepers", case, programs);
    pb.finish_and_clear();

    let weft = &outcomes[0];
    let mut head = vec!["peer"];
    head.extend(COLUMNS.iter().map(|(_, h)| *h));
    head.extend(["weft / peer: p99", "weft / peer: CPU per wake"]);
    let mut rows = Vec::new();
    let mut short = Vec::new();
    for o in &outcomes {
        let mut r = vec![o.peer.to_string()];
        r.extend(o.cells(COLUMNS.iter().map(|(key, _)| *key)));
        let ratio = |key: &str| weft.ratio_cell(o, key);
        r.push(ratio("p99_us"));
        r.push(ratio("cpu_per_wake_us"));
        let med = |key: &str| o.median_cell(key);
        short.push(vec![
            o.peer.to_string(),
            med("p50_us"),
            med("p99_us"),
            med("idle_cpu_ms_per_s"),
            med("cpu_per_wake_us"),
            ratio("p99_us"),
        ]);
        rows.push(r);
    }
    let mode = weft
        .runs
        .iter()
        .flatten()
        .find_map(|v| v["stack_mode"].as_str());
    let what = format!(
        "{} units, each sleeping until base + {}–{} s (base: {} ms + 6 µs × units after the \
         start); each side in its own process. weft's stack mode: {}; the last row is weft \
         with `WEFT_STACK_COMPACTION=off`.\n\n",
        num(tasks as f64),
        num(min_ms as f64 / 1e3),
        num((min_ms + spread_ms) as f64 / 1e3),
        num(lead_ms as f64),
        mode.unwrap_or("unknown")
    );
    let markdown = what.clone()
        + &table(&head, &rows)
        + "\nCPU while all sleep is left out (-) when the window before the first deadline is \
           under 100 ms.\n";
    let summary = what
        + &table(
            &[
                "peer",
                "lateness p50 µs",
                "lateness p99 µs",
                "CPU while all sleep, ms/s",
                "CPU per wake µs",
                "weft / peer p99",
            ],
            &short,
        );
    let panel = |key: &str, title: &str, y: &str| BarPanel {
        title: title.into(),
        y_label: y.into(),
        y_log: true,
        bars: outcomes
            .iter()
            .map(|o| {
                let name = o.peer.replace("weft, compaction off", "no compaction");
                (name, chart::colour(o.peer), o.summary(key))
            })
            .collect(),
    };
    let chart_name = "sleepers.svg";
    chart::bars(
        &ctx.out.join(chart_name),
        "Sleepers (lower is better; \"no compaction\": weft with WEFT_STACK_COMPACTION=off)",
        &[
            panel("p50_us", "wake lateness p50", "µs (log scale)"),
            panel("p99_us", "wake lateness p99", "µs (log scale)"),
            panel(
                "idle_cpu_ms_per_s",
                "CPU while all sleep",
                "ms per s (log scale)",
            ),
        ],
    )?;
    Ok(Section {
        name: "sleepers".into(),
        title: "Sleepers: timer lateness and idle CPU".into(),
        ran: String::new(),
        markdown,
        summary,
        charts: vec![chart_name.into()],
        raw: Vec::new(),
    })
}
