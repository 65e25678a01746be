//! Hot paths for instruction counts: `pingpong N` round trips on a rendezvous channel pair,
//! or `spawn N` spawn-and-join, on one worker; `--serve` also runs the debug endpoint, which
//! nothing scrapes.
//!
//! ```text
//! cargo build --release --example hotpaths
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/hotpaths pingpong 60000 [--serve]
//! ```
//!
//! Per operation: (instructions at N=60000 − at N=20000) / 40000, which cancels start-up.
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args[1].clone();
    let n: u64 = args[2].parse().unwrap();
    let serve = args.iter().any(|a| a == "--serve");
    let rt = weft::Runtime::builder()
        .workers(1)
        .monitor_threshold(None)
        .build()
        .unwrap();
    rt.block_on(move || {
        let _server = if serve { Some(serve_endpoint()) } else { None };
        match mode.as_str() {
            "pingpong" => {
                let (ping_tx, ping_rx) = weft::chan::bounded::<u64>(0);
                let (pong_tx, pong_rx) = weft::chan::bounded::<u64>(0);
                let echo = weft::spawn(move || {
                    for v in ping_rx.iter() {
                        pong_tx.send(v).unwrap();
                    }
                });
                for i in 0..n {
                    ping_tx.send(i).unwrap();
                    pong_rx.recv().unwrap();
                }
                drop(ping_tx);
                echo.join().unwrap();
            }
            _ => {
                for i in 0..n {
                    weft::spawn(move || i).join().unwrap();
                }
            }
        }
    });
}

fn serve_endpoint() -> weft::debug::DebugServer {
    weft::debug::serve("127.0.0.1:0").unwrap()
}
