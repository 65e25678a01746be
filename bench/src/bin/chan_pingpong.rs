//! Ping-pong over two rendezvous channels: one task sends on `ping` and waits on `pong`, the
//! other echoes. Prints ns per round trip with 1 and 2 workers for weft, tokio (mpsc of
//! capacity 1, tokio has no rendezvous channel) and Go (unbuffered channels), median of 5
//! rounds, then one JSON line. The measurements are `weft-bench`'s (`weft_bench::cli::peer`,
//! `bench/go/cost`).
//!
//! Usage: cargo run --release -p weft-bench --bin chan_pingpong [-- ROUND_TRIPS]

#[path = "peers/mod.rs"]
mod peers;

use peers::{median, opt, ratio};
use weft_bench::cli::peer::{pingpong, Runtime};

const ROUNDS: usize = 5;

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200_000);
    // WEFT_BENCH_ONLY=weft skips the peers (for profiling).
    let only_weft = std::env::var("WEFT_BENCH_ONLY").is_ok_and(|v| v == "weft");
    let go_reason = if only_weft {
        Some("WEFT_BENCH_ONLY=weft".to_string())
    } else {
        weft_bench::go_binary().err()
    };
    if let Some(reason) = &go_reason {
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
        let weft = median(
            (0..ROUNDS)
                .map(|_| pingpong(Runtime::Weft, workers, n))
                .collect(),
        );
        let tokio = if only_weft {
            f64::NAN
        } else {
            median(
                (0..ROUNDS)
                    .map(|_| pingpong(Runtime::Tokio, workers, n))
                    .collect(),
            )
        };
        let go_ns = if go_reason.is_some() {
            None
        } else {
            let (n, procs) = (n.to_string(), workers.to_string());
            peers::go_cost_ns(&["-what", "pingpong", "-n", &n, "-procs", &procs], ROUNDS)
                .map_err(|e| println!("go: failed: {e}"))
                .ok()
        };
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
