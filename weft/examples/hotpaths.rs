//! Hot paths for instruction counts: `pingpong N` round trips on a rendezvous channel pair,
//! or `spawn N` spawn-and-join, on one worker; `--serve` also runs the debug endpoint, which
//! nothing scrapes; `--trace` records a `weft::debug::trace` (to a temporary file) for the
//! whole loop. The loop's time per operation goes to stderr.
//!
//! ```text
//! cargo build --release --example hotpaths
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/hotpaths pingpong 60000 [--serve]
//! target/release/examples/hotpaths pingpong 200000 [--trace]
//! ```
//!
//! Per operation: (instructions at N=60000 − at N=20000) / 40000, which cancels start-up.
//! With `--trace`, keep N under ≈800,000 round trips (≈5 events each), or the trace's event
//! budget (`weft::debug::MAX_EVENTS`) runs out and the rest go uncounted, which is cheaper.
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args[1].clone();
    let n: u64 = args[2].parse().unwrap();
    let serve = args.iter().any(|a| a == "--serve");
    let trace = args.iter().any(|a| a == "--trace");
    let rt = weft::Runtime::builder()
        .workers(1)
        .monitor_threshold(None)
        .build()
        .unwrap();
    let tracer = trace.then(|| {
        // A plain thread records while the loop runs; it ends a while after the loop.
        let path = std::env::temp_dir().join(format!("hotpaths-{}.json", std::process::id()));
        let tracer = std::thread::spawn(move || {
            let summary = weft::debug::trace(std::time::Duration::from_secs(3), &path).unwrap();
            std::fs::remove_file(&path).unwrap();
            summary
        });
        while !weft::debug::is_tracing() {
            std::thread::yield_now();
        }
        tracer
    });
    let started = std::time::Instant::now();
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
    report(started, n);
    if let Some(tracer) = tracer {
        let still_tracing = weft::debug::is_tracing();
        let summary = tracer.join().unwrap();
        assert!(
            still_tracing,
            "the trace ended before the loop did: use a smaller N"
        );
        eprintln!("{summary:?}");
    }
}

fn report(started: std::time::Instant, n: u64) {
    let elapsed = started.elapsed();
    eprintln!(
        "{n} operations in {elapsed:?}: {:.1} ns each",
        elapsed.as_nanos() as f64 / n as f64
    );
}

fn serve_endpoint() -> weft::debug::DebugServer {
    weft::debug::serve("127.0.0.1:0").unwrap()
}
