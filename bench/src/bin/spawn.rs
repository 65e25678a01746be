//! Spawn benchmarks, weft next to Go and tokio in the same run.
//!
//! ```text
//! cargo run --release -p weft-bench --bin spawn -- [--tasks 100000] [--rounds 5]
//! ```
//!
//! - spawn+join: spawn N empty tasks, then join each handle; ns per task.
//! - spawn+complete: spawn N tasks that bump an atomic; the last one wakes the spawner.
//!
//! Each figure is the median over the rounds. Go's program is `bench/go/spawn`, built when a
//! Go toolchain is present (scripts/install-go.sh). Prints a table, then one JSON line.
//!
//! `WEFT_BENCH_ONLY=weft` runs weft alone (for callgrind and perf), and with it
//! `WEFT_BENCH_CASE=join` or `complete` only that case: instructions per task are the
//! difference of two `--tasks` sizes divided by `rounds × ΔN` (bench/README.md).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use weft_bench::{build_go, commit, json_number, median, run_go};

fn args() -> (usize, usize) {
    let mut tasks = 100_000;
    let mut rounds = 5;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let value = it.next().and_then(|v| v.replace('_', "").parse().ok());
        match (a.as_str(), value) {
            ("--tasks", Some(v)) => tasks = v,
            ("--rounds", Some(v)) => rounds = v,
            _ => {
                eprintln!("usage: spawn [--tasks N] [--rounds R]");
                std::process::exit(2);
            }
        }
    }
    (tasks, rounds)
}

/// Which of weft's cases to run (`WEFT_BENCH_CASE`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Case {
    Both,
    Join,
    Complete,
}

fn weft_figures(n: usize, rounds: usize, case: Case) -> (f64, f64) {
    let rt = weft::Runtime::new().expect("runtime");
    rt.block_on(move || {
        let (mut join, mut complete) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            if case != Case::Complete {
                let start = Instant::now();
                let handles: Vec<_> = (0..n).map(|_| weft::spawn(|| {})).collect();
                for h in handles {
                    h.join().unwrap();
                }
                join.push(start.elapsed().as_nanos() as f64 / n as f64);
            }
            if case == Case::Join {
                continue;
            }

            let count = Arc::new(AtomicUsize::new(0));
            let me = weft::task::current();
            let start = Instant::now();
            for _ in 0..n {
                let (count, me) = (count.clone(), me.clone());
                // Detached: the handle is dropped at once.
                weft::spawn(move || {
                    if count.fetch_add(1, Ordering::AcqRel) + 1 == n {
                        me.unpark();
                    }
                });
            }
            while count.load(Ordering::Acquire) < n {
                weft::task::park();
            }
            complete.push(start.elapsed().as_nanos() as f64 / n as f64);
        }
        (median(&mut join), median(&mut complete))
    })
}

fn tokio_figures(n: usize, rounds: usize) -> (f64, f64) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .build()
        .expect("tokio runtime");
    rt.block_on(async move {
        let (mut join, mut complete) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let start = Instant::now();
            let handles: Vec<_> = (0..n).map(|_| tokio::spawn(async {})).collect();
            for h in handles {
                h.await.unwrap();
            }
            join.push(start.elapsed().as_nanos() as f64 / n as f64);

            let count = Arc::new(AtomicUsize::new(0));
            let done = Arc::new(tokio::sync::Notify::new());
            let start = Instant::now();
            for _ in 0..n {
                let (count, done) = (count.clone(), done.clone());
                tokio::spawn(async move {
                    if count.fetch_add(1, Ordering::AcqRel) + 1 == n {
                        done.notify_one();
                    }
                });
            }
            done.notified().await;
            complete.push(start.elapsed().as_nanos() as f64 / n as f64);
        }
        (median(&mut join), median(&mut complete))
    })
}

fn main() {
    let (n, rounds) = args();
    let workers = std::thread::available_parallelism().map_or(1, |p| p.get());
    println!(
        "spawn benchmarks: {n} tasks × {rounds} rounds, {workers} workers, commit {}",
        commit()
    );
    let only_weft = std::env::var("WEFT_BENCH_ONLY").is_ok_and(|v| v == "weft");
    let case = match std::env::var("WEFT_BENCH_CASE").as_deref() {
        Ok("join") => Case::Join,
        Ok("complete") => Case::Complete,
        _ => Case::Both,
    };
    let weft = weft_figures(n, rounds, case);
    if only_weft {
        println!(
            "weft only: spawn + join {:.0} ns, spawn + complete {:.0} ns",
            weft.0, weft.1
        );
        println!(
            "{{\"tasks\":{n},\"rounds\":{rounds},\"workers\":{workers},\
             \"weft_spawn_join_ns\":{:.1},\"weft_spawn_complete_ns\":{:.1}}}",
            weft.0, weft.1
        );
        return;
    }
    let tokio = tokio_figures(n, rounds);
    let go = build_go("spawn").and_then(|bin| {
        let line = run_go(
            &bin,
            &["-n", &n.to_string(), "-rounds", &rounds.to_string()],
        )?;
        match (
            json_number(&line, "spawn_join_ns"),
            json_number(&line, "spawn_complete_ns"),
        ) {
            (Some(j), Some(c)) => Ok((j, c)),
            _ => Err(format!("unexpected Go output: {line}")),
        }
    });
    println!(
        "{:<22} {:>10} {:>10} {:>10} {:>12} {:>12}",
        "ns per task", "weft", "tokio", "Go", "weft/tokio", "weft/Go"
    );
    let row = |name: &str, w: f64, t: f64, g: Option<f64>| {
        let g_text = g.map_or("-".into(), |g| format!("{g:.0}"));
        let ratio = g.map_or("-".into(), |g| format!("{:.2}", w / g));
        println!(
            "{name:<22} {w:>10.0} {t:>10.0} {g_text:>10} {:>12.2} {ratio:>12}",
            w / t
        );
    };
    let go_ok = go.as_ref().ok().copied();
    row("spawn + join", weft.0, tokio.0, go_ok.map(|g| g.0));
    row("spawn + complete", weft.1, tokio.1, go_ok.map(|g| g.1));
    if let Err(reason) = &go {
        println!("go: skipped: {reason}");
    }
    let go_json = |v: Option<f64>| v.map_or("null".into(), |v| format!("{v:.1}"));
    println!(
        "{{\"tasks\":{n},\"rounds\":{rounds},\"workers\":{workers},\
         \"weft_spawn_join_ns\":{:.1},\"weft_spawn_complete_ns\":{:.1},\
         \"tokio_spawn_join_ns\":{:.1},\"tokio_spawn_complete_ns\":{:.1},\
         \"go_spawn_join_ns\":{},\"go_spawn_complete_ns\":{}}}",
        weft.0,
        weft.1,
        tokio.0,
        tokio.1,
        go_json(go_ok.map(|g| g.0)),
        go_json(go_ok.map(|g| g.1))
    );
}
