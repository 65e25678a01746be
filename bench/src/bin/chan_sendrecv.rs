//! Send then receive on one task over a channel of capacity 1: the uncontended path, no
//! parking. Prints ns per send+recv pair for weft, tokio (mpsc, try_recv) and Go, median of
//! 5 rounds, then one JSON line.
//!
//! Usage: cargo run --release -p weft-bench --bin chan_sendrecv [-- PAIRS]

#[path = "peers/mod.rs"]
mod peers;

use std::time::Instant;

use peers::{median, opt, ratio};

const ROUNDS: usize = 5;

fn weft_round(n: u64) -> f64 {
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    rt.block_on(move || {
        let (tx, rx) = weft::chan::bounded::<u64>(1);
        let start = Instant::now();
        for i in 0..n {
            tx.send(i).unwrap();
            std::hint::black_box(rx.recv().unwrap());
        }
        start.elapsed().as_nanos() as f64 / n as f64
    })
}

fn tokio_round(n: u64) -> f64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async move {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<u64>(1);
        let start = Instant::now();
        for i in 0..n {
            tx.send(i).await.unwrap();
            std::hint::black_box(rx.recv().await.unwrap());
        }
        start.elapsed().as_nanos() as f64 / n as f64
    })
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5_000_000);
    let go = peers::run_go(
        "chan_sendrecv",
        &[format!("-n={n}"), format!("-rounds={ROUNDS}")],
    );
    if let Err(reason) = &go {
        println!("go: skipped: {reason}");
    }
    let go_ns = go
        .as_ref()
        .ok()
        .and_then(|out| peers::go_value(out, "sendrecv", "ns"));
    let weft = median((0..ROUNDS).map(|_| weft_round(n)).collect());
    let tokio = median((0..ROUNDS).map(|_| tokio_round(n)).collect());
    println!("send then recv on one task, capacity 1, {n} pairs, median of {ROUNDS}");
    println!(
        "{:>10} {:>10} {:>10} {:>9} {:>9}",
        "weft ns", "tokio ns", "go ns", "weft/go", "weft/tok"
    );
    println!(
        "{weft:>10.1} {tokio:>10.1} {:>10} {:>9} {:>9}",
        opt(go_ns),
        ratio(weft, go_ns),
        ratio(weft, Some(tokio))
    );
    println!(
        "{{\"bench\":\"chan_sendrecv\",\"pairs\":{n},\"weft_ns\":{weft:.2},\"tokio_ns\":{tokio:.2},\"go_ns\":{}}}",
        opt(go_ns)
    );
}
