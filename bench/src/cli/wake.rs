//! `weft-bench wake`: what waking a compacted task costs against waking one whose stack is
//! resident — wake latency (unpark → the task runs, one wake at a time, p50/p99) and CPU per
//! wake (the rest woken at once, process CPU time ÷ tasks).
//!
//! Each run parks 2 × N tasks on one worker under one stack policy (`StackPolicy::never()`:
//! resident; `StackPolicy::eager()`: compacted, waited for through
//! `weft::stack::counters().compacted_tasks`), then wakes N of them one by one (200 µs apart,
//! so the worker goes idle between wakes as a sleeping server's would) and the other N at
//! once. The two policies alternate run by run, each in a fresh process. Where this process
//! cannot compact (`weft::stack::mode()` is not `compact`, e.g. `WEFT_STACK_COMPACTION=off`
//! or no userfaultfd), the compacted runs fail with the mode as their reason.
//!
//! Owns: the experiment and its peer (`weft-bench peer wake`, [`PeerArgs`]).
//! May call: weft, `runner`, `report`. Called by: `cli/mod.rs`, `peer.rs`.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use weft::stack::StackPolicy;

use crate::args;
use crate::cli::report::{table, Section};
use crate::cli::runner::{self, Cmd, Ctx, Program};

/// The stack policy of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Policy {
    Resident,
    Compacted,
}

/// One run, `weft-bench peer wake …`.
#[derive(Debug, Clone, clap::Args)]
pub struct PeerArgs {
    #[arg(long, value_enum)]
    pub policy: Policy,
    /// Tasks woken one by one; as many again are woken all at once.
    #[arg(long, default_value_t = 20_000)]
    pub tasks: usize,
}

struct Shared {
    tasks: Mutex<Vec<weft::task::Task>>,
    parked: AtomicUsize,
    woken: AtomicUsize,
    /// ns since `epoch` when the task last woken ran.
    ran_at: AtomicU64,
    epoch: Instant,
}

/// Runs one policy and returns its figures.
pub fn peer(a: PeerArgs) -> Result<Value, String> {
    let n = a.tasks.max(1);
    let compacted = a.policy == Policy::Compacted;
    let policy = if compacted {
        StackPolicy::eager()
    } else {
        StackPolicy::never()
    };
    let rt = weft::Runtime::builder()
        .workers(1)
        .stack_policy(policy)
        .build()
        .map_err(|e| format!("weft runtime: {e}"))?;
    let mode = weft::stack::mode();
    if compacted && !matches!(mode, weft::stack::StackMode::Compact) {
        return Err(format!("cannot compact: stack mode is {mode}"));
    }
    let shared = Arc::new(Shared {
        tasks: Mutex::new(Vec::new()),
        parked: AtomicUsize::new(0),
        woken: AtomicUsize::new(0),
        ran_at: AtomicU64::new(0),
        epoch: Instant::now(),
    });
    let base = weft::stack::counters().compacted_tasks;
    let handles: Vec<_> = (0..2 * n)
        .map(|_| {
            let shared = shared.clone();
            rt.spawn(move || {
                let mut local = [1u64; 16];
                std::hint::black_box(&mut local);
                shared.tasks.lock().unwrap().push(weft::task::current());
                shared.parked.fetch_add(1, Ordering::Release);
                while shared.woken.load(Ordering::Acquire) == 0 {
                    weft::task::park();
                }
                let ran = shared.epoch.elapsed().as_nanos() as u64;
                shared.ran_at.store(ran, Ordering::Release);
                shared.woken.fetch_add(1, Ordering::AcqRel);
                std::hint::black_box(local)[0]
            })
        })
        .collect();
    while shared.parked.load(Ordering::Acquire) < 2 * n {
        std::thread::sleep(Duration::from_millis(1));
    }
    let start = Instant::now();
    if compacted {
        while weft::stack::counters().compacted_tasks < base + 2 * n as u64 {
            if start.elapsed() > Duration::from_secs(30) {
                // The tasks stay parked: leave without unwinding them.
                eprintln!("weft-bench: wake: the tasks were not compacted within 30 s");
                std::process::exit(1);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    } else {
        std::thread::sleep(Duration::from_millis(50));
    }
    let settle_ms = start.elapsed().as_secs_f64() * 1e3;
    let tasks = std::mem::take(&mut *shared.tasks.lock().unwrap());
    let (one_by_one, all_at_once) = tasks.split_at(n);
    shared.woken.store(1, Ordering::Release);
    let mut latencies = Vec::with_capacity(n);
    for (i, task) in one_by_one.iter().enumerate() {
        let at = shared.epoch.elapsed().as_nanos() as u64;
        task.unpark();
        while shared.woken.load(Ordering::Acquire) < i + 2 {
            std::hint::spin_loop();
        }
        let ran = shared.ran_at.load(Ordering::Acquire);
        latencies.push(ran.saturating_sub(at) as f64);
        let pause = Instant::now();
        while pause.elapsed() < Duration::from_micros(200) {
            std::hint::spin_loop();
        }
    }
    let cpu0 = crate::cpu_time();
    for task in all_at_once {
        task.unpark();
    }
    while shared.woken.load(Ordering::Acquire) < 2 * n + 1 {
        std::thread::sleep(Duration::from_micros(100));
    }
    let cpu = (crate::cpu_time() - cpu0).as_nanos() as f64 / n as f64;
    for h in handles {
        h.join().map_err(|_| "a woken task panicked".to_string())?;
    }
    latencies.sort_by(f64::total_cmp);
    Ok(json!({
        "tasks": n,
        "policy": if compacted { "compacted" } else { "resident" },
        "stack_mode": mode.to_string(),
        "settle_ms": settle_ms,
        "p50_ns": crate::percentile(&latencies, 50.0),
        "p99_ns": crate::percentile(&latencies, 99.0),
        "cpu_ns_per_wake": cpu,
    }))
}

const COLUMNS: [(&str, &str); 3] = [
    ("p50_ns", "wake latency p50 ns"),
    ("p99_ns", "wake latency p99 ns"),
    ("cpu_ns_per_wake", "CPU per wake ns (all at once)"),
];

/// Runs the experiment and returns its section.
pub fn run(ctx: &mut Ctx) -> Result<Section, String> {
    let n = ctx.size.pick(20_000, 5000, 200);
    let pb = runner::bar(ctx, "wake", 2 * (ctx.runs + 1));
    let me = |policy: &str| Cmd::me(&args!["wake", "--policy", policy, "--tasks", n]);
    let programs = vec![
        Program::command("resident", me("resident")),
        Program::command("compacted", me("compacted")),
    ];
    let outcomes = runner::alternate(ctx, &pb, "wake", json!({"tasks": n}), programs);
    pb.finish_and_clear();
    let resident = &outcomes[0];
    let mut head = vec!["stack of the woken task"];
    head.extend(COLUMNS.iter().map(|(_, h)| *h));
    head.extend(["compacted / resident: p50", "compacted / resident: CPU"]);
    let rows: Vec<Vec<String>> = outcomes
        .iter()
        .map(|o| {
            let mut r = vec![o.peer.to_string()];
            r.extend(o.cells(COLUMNS.iter().map(|(key, _)| *key)));
            for key in ["p50_ns", "cpu_ns_per_wake"] {
                r.push(o.ratio_cell(resident, key));
            }
            r
        })
        .collect();
    let intro = format!(
        "weft alone, one worker: {n} tasks woken one at a time (200 µs apart), {n} more all \
         at once; resident (`StackPolicy::never()`) and compacted (`StackPolicy::eager()`) \
         alternate run by run.\n\n"
    );
    let markdown = intro + &table(&head, &rows);
    Ok(Section {
        name: "wake".into(),
        title: "Waking a compacted task".into(),
        ran: String::new(),
        markdown: markdown.clone(),
        summary: markdown,
        charts: Vec::new(),
        raw: Vec::new(),
    })
}
