//! Fairness on one worker: tasks whose channel operations always succeed (they never park)
//! must not starve the timers of their worker (sched/coop.rs).
//!
//! ```text
//! cargo run --release -p weft-bench --bin fairness -- [--seconds S]
//! ```
//!
//! 1. hub: one task fans lines out to 2,000 client tasks over buffered channels; a 5 ms
//!    sleeper on the same worker records how late each of its wakes is.
//! 2. pipeline: 8 stages joined by always-ready buffered channels, and a 100 ms ticker beside
//!    them counting the ticks it sees.
//!
//! Prints a table and a last JSON line; never asserts.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_bench::percentile;

const CLIENTS: usize = 2000;
const STAGES: usize = 8;

fn runtime() -> weft::Runtime {
    weft::Runtime::builder()
        .workers(1)
        .monitor_threshold(None)
        .build()
        .expect("runtime")
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

fn hub(run_for: Duration) -> (Vec<f64>, u64) {
    let rt = runtime();
    rt.block_on(move || {
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
    })
}

fn pipeline(run_for: Duration) -> (u64, u64, u64) {
    let rt = runtime();
    rt.block_on(move || {
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
    })
}

fn main() {
    let mut seconds = 2.0f64;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--seconds" => seconds = args.next().and_then(|s| s.parse().ok()).unwrap_or(2.0),
            other => {
                eprintln!("fairness: unknown argument {other:?} (use --seconds S)");
                std::process::exit(2);
            }
        }
    }
    let run_for = Duration::from_secs_f64(seconds);
    let (mut late, lines) = hub(run_for);
    late.sort_by(f64::total_cmp);
    let (p50, p99, max) = (
        percentile(&late, 50.0),
        percentile(&late, 99.0),
        percentile(&late, 100.0),
    );
    let (ticks, expected, moved) = pipeline(run_for);
    println!("weft fairness, one worker, {seconds} s per scenario");
    println!(
        "  hub ({CLIENTS} clients, {lines} lines): 5 ms sleeper late p50 {p50:.2} ms, p99 \
         {p99:.2} ms, max {max:.2} ms over {} sleeps",
        late.len()
    );
    println!(
        "  pipeline ({STAGES} stages, {moved} values): 100 ms ticker fired {ticks} of \
         {expected} ticks"
    );
    println!(
        "{{\"hub_sleeps\":{},\"hub_late_p50_ms\":{p50:.3},\"hub_late_p99_ms\":{p99:.3},\
         \"hub_late_max_ms\":{max:.3},\"hub_lines\":{lines},\"ticker_ticks\":{ticks},\
         \"ticker_expected\":{expected},\"pipeline_values\":{moved},\"commit\":\"{}\"}}",
        late.len(),
        weft_bench::commit()
    );
}
