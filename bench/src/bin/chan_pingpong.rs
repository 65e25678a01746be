//! Ping-pong over two rendezvous channels: one task sends on `ping` and waits on `pong`, the
//! other echoes. Prints ns per round trip with 1 and 2 workers for weft, tokio (mpsc of
//! capacity 1, tokio has no rendezvous channel) and Go (unbuffered channels), median of 5
//! rounds, then one JSON line.
//!
//! Usage: cargo run --release -p weft-bench --bin chan_pingpong [-- ROUND_TRIPS]

#[path = "peers/mod.rs"]
mod peers;

use std::time::Instant;

use peers::{median, opt, ratio};

const ROUNDS: usize = 5;

fn weft_round(workers: usize, n: u64) -> f64 {
    let rt = weft::Runtime::builder().workers(workers).build().unwrap();
    rt.block_on(move || {
        let (ping_tx, ping_rx) = weft::chan::bounded::<u64>(0);
        let (pong_tx, pong_rx) = weft::chan::bounded::<u64>(0);
        let echo = weft::spawn(move || {
            for v in ping_rx.iter() {
                pong_tx.send(v).unwrap();
            }
        });
        for i in 0..1000 {
            ping_tx.send(i).unwrap();
            pong_rx.recv().unwrap();
        }
        let start = Instant::now();
        for i in 0..n {
            ping_tx.send(i).unwrap();
            pong_rx.recv().unwrap();
        }
        let ns = start.elapsed().as_nanos() as f64 / n as f64;
        drop(ping_tx);
        echo.join().unwrap();
        ns
    })
}

fn tokio_round(workers: usize, n: u64) -> f64 {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .build()
        .unwrap();
    rt.block_on(async move {
        tokio::spawn(async move {
            let (ping_tx, mut ping_rx) = tokio::sync::mpsc::channel::<u64>(1);
            let (pong_tx, mut pong_rx) = tokio::sync::mpsc::channel::<u64>(1);
            let echo = tokio::spawn(async move {
                while let Some(v) = ping_rx.recv().await {
                    pong_tx.send(v).await.unwrap();
                }
            });
            for i in 0..1000 {
                ping_tx.send(i).await.unwrap();
                pong_rx.recv().await.unwrap();
            }
            let start = Instant::now();
            for i in 0..n {
                ping_tx.send(i).await.unwrap();
                pong_rx.recv().await.unwrap();
            }
            let ns = start.elapsed().as_nanos() as f64 / n as f64;
            drop(ping_tx);
            echo.await.unwrap();
            ns
        })
        .await
        .unwrap()
    })
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200_000);
    // WEFT_BENCH_ONLY=weft skips the peers (for profiling).
    let only_weft = std::env::var("WEFT_BENCH_ONLY").is_ok_and(|v| v == "weft");
    let go = if only_weft {
        Err("WEFT_BENCH_ONLY=weft".to_string())
    } else {
        peers::run_go(
            "chan_pingpong",
            &[format!("-n={n}"), format!("-rounds={ROUNDS}")],
        )
    };
    if let Err(reason) = &go {
        println!("go: skipped: {reason}");
    }
    println!("ping-pong over two rendezvous channels, {n} round trips, median of {ROUNDS}");
    println!(
        "{:>8} {:>10} {:>10} {:>10} {:>9} {:>9}",
        "workers", "weft ns", "tokio ns", "go ns", "weft/go", "weft/tok"
    );
    let mut json = Vec::new();
    // WEFT_BENCH_WORKERS=1 (or 2) runs only that row (for profiling).
    let rows: Vec<usize> = match std::env::var("WEFT_BENCH_WORKERS")
        .ok()
        .and_then(|w| w.parse().ok())
    {
        Some(w) => vec![w],
        None => vec![1, 2],
    };
    for workers in rows {
        let weft = median((0..ROUNDS).map(|_| weft_round(workers, n)).collect());
        let tokio = if only_weft {
            f64::NAN
        } else {
            median((0..ROUNDS).map(|_| tokio_round(workers, n)).collect())
        };
        let go_ns = go
            .as_ref()
            .ok()
            .and_then(|out| peers::go_value(out, "pingpong", &format!("procs={workers} ns")))
            .or_else(|| {
                go.as_ref().ok().and_then(|out| {
                    out.lines()
                        .find(|l| l.contains(&format!("procs={workers} ")))
                        .and_then(|l| peers::go_value(l, "pingpong", "ns"))
                })
            });
        println!(
            "{workers:>8} {weft:>10.1} {tokio:>10.1} {:>10} {:>9} {:>9}",
            opt(go_ns),
            ratio(weft, go_ns),
            ratio(weft, Some(tokio))
        );
        json.push(format!(
            "{{\"workers\":{workers},\"weft_ns\":{weft:.1},\"tokio_ns\":{tokio:.1},\"go_ns\":{}}}",
            opt(go_ns)
        ));
    }
    println!(
        "{{\"bench\":\"chan_pingpong\",\"round_trips\":{n},\"results\":[{}]}}",
        json.join(",")
    );
}
