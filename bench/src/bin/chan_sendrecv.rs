//! Send then receive on one task over a channel of capacity 1: the uncontended path, no
//! parking. Prints ns per send+recv pair for weft, tokio (mpsc, try_recv) and Go, median of
//! 5 rounds, then one JSON line. The measurements are `weft-bench`'s (`weft_bench::cli::peer`,
//! `bench/go/cost`).
//!
//! Usage: cargo run --release -p weft-bench --bin chan_sendrecv [-- PAIRS]

#[path = "peers/mod.rs"]
mod peers;

use peers::{median, opt, ratio};
use weft_bench::cli::peer::{sendrecv, Runtime};

const ROUNDS: usize = 5;

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5_000_000);
    let go = peers::go_cost_ns(&["-what", "sendrecv", "-n", &n.to_string()], ROUNDS);
    if let Err(reason) = &go {
        println!("go: skipped: {reason}");
    }
    let go_ns = go.ok();
    let weft = median((0..ROUNDS).map(|_| sendrecv(Runtime::Weft, n)).collect());
    let tokio = median((0..ROUNDS).map(|_| sendrecv(Runtime::Tokio, n)).collect());
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
