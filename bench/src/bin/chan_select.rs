//! A select over a set of channels known only at run time — `weft::chan::Select` against
//! crossbeam-channel's `Select`, the API it follows — over 2, 16 and 1,000 receivers.
//! Prints ns per selected operation, median of 5 rounds alternated weft, crossbeam, weft, …
//! in one process, then one JSON line.
//!
//! Two loads, each for weft and crossbeam on plain OS threads, and for weft in tasks:
//! - `ready`: every channel holds values already; each select finds one ready (the cost of a
//!   select that does not wait: one shuffle and a poll);
//! - `fan-in`: one producer sends round-robin into channels of capacity 1 while the consumer
//!   selects, so the consumer often finds nothing ready and registers on every channel
//!   (the O(n) path), then is woken.
//!
//! Usage: cargo run --release -p weft-bench --bin chan_select [-- OPS]

#[path = "peers/mod.rs"]
mod peers;

use std::time::Instant;

use peers::median;

const ROUNDS: usize = 5;

/// Which implementation a round runs.
#[derive(Clone, Copy, PartialEq)]
enum Side {
    WeftThreads,
    Crossbeam,
    WeftTasks,
}

/// ns per operation of `ops` selects over `k` channels that all hold values.
fn ready(side: Side, k: usize, ops: usize) -> f64 {
    let per = ops.div_ceil(k);
    match side {
        Side::Crossbeam => {
            let chans: Vec<_> = (0..k).map(|_| crossbeam_channel::unbounded()).collect();
            for (tx, _) in &chans {
                for i in 0..per {
                    tx.send(i).unwrap();
                }
            }
            let mut sel = crossbeam_channel::Select::new();
            for (_, rx) in &chans {
                sel.recv(rx);
            }
            let start = Instant::now();
            for _ in 0..ops {
                let op = sel.select();
                let i = op.index();
                std::hint::black_box(op.recv(&chans[i].1).unwrap());
            }
            start.elapsed().as_nanos() as f64 / ops as f64
        }
        Side::WeftThreads | Side::WeftTasks => {
            let body = move || {
                let chans: Vec<_> = (0..k).map(|_| weft::chan::unbounded()).collect();
                for (tx, _) in &chans {
                    for i in 0..per {
                        tx.send(i).unwrap();
                    }
                }
                let mut sel = weft::chan::Select::new();
                for (_, rx) in &chans {
                    sel.recv(rx);
                }
                let start = Instant::now();
                for _ in 0..ops {
                    let op = sel.select();
                    let i = op.index();
                    std::hint::black_box(op.recv(&chans[i].1).unwrap());
                }
                start.elapsed().as_nanos() as f64 / ops as f64
            };
            if side == Side::WeftTasks {
                weft::Runtime::builder()
                    .workers(1)
                    .build()
                    .unwrap()
                    .block_on(body)
            } else {
                body()
            }
        }
    }
}

/// ns per operation of `ops` values sent round-robin over `k` channels of capacity 1 by one
/// producer and taken by one selecting consumer.
fn fan_in(side: Side, k: usize, ops: usize) -> f64 {
    match side {
        Side::Crossbeam => {
            let chans: Vec<_> = (0..k).map(|_| crossbeam_channel::bounded(1)).collect();
            let txs: Vec<_> = chans.iter().map(|(tx, _)| tx.clone()).collect();
            let start = Instant::now();
            let producer = std::thread::spawn(move || {
                for i in 0..ops {
                    txs[i % k].send(i).unwrap();
                }
            });
            let mut sel = crossbeam_channel::Select::new();
            for (_, rx) in &chans {
                sel.recv(rx);
            }
            for _ in 0..ops {
                let op = sel.select();
                let i = op.index();
                std::hint::black_box(op.recv(&chans[i].1).unwrap());
            }
            producer.join().unwrap();
            start.elapsed().as_nanos() as f64 / ops as f64
        }
        Side::WeftThreads | Side::WeftTasks => {
            let tasks = side == Side::WeftTasks;
            let body = move || {
                let chans: Vec<_> = (0..k).map(|_| weft::chan::bounded(1)).collect();
                let txs: Vec<_> = chans.iter().map(|(tx, _)| tx.clone()).collect();
                let start = Instant::now();
                let produce = move || {
                    for i in 0..ops {
                        txs[i % k].send(i).unwrap();
                    }
                };
                let producer: Box<dyn FnOnce()> = if tasks {
                    let h = weft::spawn(produce);
                    Box::new(move || h.join().unwrap())
                } else {
                    let h = std::thread::spawn(produce);
                    Box::new(move || h.join().unwrap())
                };
                let mut sel = weft::chan::Select::new();
                for (_, rx) in &chans {
                    sel.recv(rx);
                }
                for _ in 0..ops {
                    let op = sel.select();
                    let i = op.index();
                    std::hint::black_box(op.recv(&chans[i].1).unwrap());
                }
                producer();
                start.elapsed().as_nanos() as f64 / ops as f64
            };
            if tasks {
                weft::Runtime::builder()
                    .workers(2)
                    .build()
                    .unwrap()
                    .block_on(body)
            } else {
                body()
            }
        }
    }
}

fn main() {
    let ops: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200_000);
    println!(
        "Select over K receivers, ns per selected operation, median of {ROUNDS} alternated rounds"
    );
    println!(
        "{:>7} {:>6} {:>12} {:>12} {:>9} {:>11}",
        "load", "K", "weft thr ns", "crossbeam ns", "weft/cb", "weft task ns"
    );
    let mut json = Vec::new();
    type Load = fn(Side, usize, usize) -> f64;
    let loads: [(&str, Load); 2] = [("ready", ready), ("fan-in", fan_in)];
    for (name, load) in loads {
        for k in [2usize, 16, 1000] {
            // Fewer operations over 1,000 channels: each blocking select registers on all.
            let ops = if k >= 1000 { ops / 4 } else { ops };
            // Warm-up, then alternate.
            for side in [Side::WeftThreads, Side::Crossbeam, Side::WeftTasks] {
                load(side, k, ops / 10);
            }
            let (mut weft, mut cb, mut tasks) = (Vec::new(), Vec::new(), Vec::new());
            let mut ratios = Vec::new();
            for _ in 0..ROUNDS {
                let w = load(Side::WeftThreads, k, ops);
                let c = load(Side::Crossbeam, k, ops);
                ratios.push(w / c);
                weft.push(w);
                cb.push(c);
                tasks.push(load(Side::WeftTasks, k, ops));
            }
            let (w, c, t, r) = (median(weft), median(cb), median(tasks), median(ratios));
            println!("{name:>7} {k:>6} {w:>12.1} {c:>12.1} {r:>9.2} {t:>11.1}");
            json.push(format!(
                "{{\"load\":\"{name}\",\"k\":{k},\"ops\":{ops},\"weft_threads_ns\":{w:.1},\
                 \"crossbeam_ns\":{c:.1},\"weft_over_crossbeam\":{r:.3},\"weft_tasks_ns\":{t:.1}}}"
            ));
        }
    }
    println!(
        "{{\"bench\":\"chan_select\",\"rows\":[{}]}}",
        json.join(",")
    );
}
