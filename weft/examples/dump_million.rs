//! What a task dump of a million parked tasks costs: time and size of both renderings.
//!
//! ```text
//! cargo run --release --example dump_million -- [TASKS]
//! ```
//!
//! Spawns TASKS tasks (default 1,000,000): half park on a channel receive, a quarter sleep,
//! a quarter in `task::park`, from three spawn sites. Then it takes the grouped dump twice
//! (the first one parses the binary's debug info) and the full one once, and prints the
//! times and sizes; the last line is one JSON object.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[inline(never)]
fn wait_for_message(rx: weft::chan::Receiver<()>, parked: &AtomicUsize) {
    parked.fetch_add(1, Ordering::Relaxed);
    let _ = rx.recv();
}

#[inline(never)]
fn sleep_long(parked: &AtomicUsize) {
    parked.fetch_add(1, Ordering::Relaxed);
    weft::time::sleep(Duration::from_secs(3600));
}

#[inline(never)]
fn park_forever(parked: &AtomicUsize) {
    parked.fetch_add(1, Ordering::Relaxed);
    loop {
        weft::task::park();
    }
}

fn main() {
    let tasks: usize = std::env::args()
        .nth(1)
        .map_or(1_000_000, |a| a.parse().expect("TASKS is a number"));
    let rt = weft::Runtime::builder()
        .stack_size(32 * 1024)
        .build()
        .unwrap();
    let parked = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = weft::chan::bounded::<()>(0);
    let spawn_start = Instant::now();
    {
        let parked = parked.clone();
        rt.block_on(move || {
            for i in 0..tasks {
                let parked = parked.clone();
                match i % 4 {
                    0 | 1 => {
                        let rx = rx.clone();
                        weft::spawn(move || wait_for_message(rx, &parked));
                    }
                    2 => {
                        weft::spawn(move || sleep_long(&parked));
                    }
                    _ => {
                        weft::spawn(move || park_forever(&parked));
                    }
                }
            }
        });
    }
    while parked.load(Ordering::Relaxed) < tasks {
        std::thread::sleep(Duration::from_millis(10));
    }
    // Let the last ones switch out.
    std::thread::sleep(Duration::from_millis(100));
    let spawn_ms = spawn_start.elapsed().as_millis();

    let start = Instant::now();
    let dump = weft::debug::dump();
    let first_ms = start.elapsed().as_secs_f64() * 1e3;
    let grouped = dump.grouped();
    let grouped_first_ms = start.elapsed().as_secs_f64() * 1e3;

    let start = Instant::now();
    let dump = weft::debug::dump();
    let capture_ms = start.elapsed().as_secs_f64() * 1e3;
    let grouped = {
        let _ = grouped;
        dump.grouped()
    };
    let grouped_ms = start.elapsed().as_secs_f64() * 1e3;

    let start = Instant::now();
    let full = dump.full();
    let full_render_ms = start.elapsed().as_secs_f64() * 1e3;

    print!("{grouped}");
    println!(
        "{} tasks: first grouped dump {:.0} ms (capture + symbolize {:.0} ms), second {:.0} ms \
         (capture + symbolize {:.0} ms), {} bytes; full text rendered in {:.0} ms, {} bytes",
        dump.tasks.len(),
        grouped_first_ms,
        first_ms,
        grouped_ms,
        capture_ms,
        grouped.len(),
        full_render_ms,
        full.len()
    );
    println!(
        "{{\"tasks\":{},\"spawn_ms\":{spawn_ms},\"grouped_first_ms\":{grouped_first_ms:.0},\
         \"grouped_ms\":{grouped_ms:.0},\"grouped_bytes\":{},\"full_render_ms\":{full_render_ms:.0},\
         \"full_bytes\":{}}}",
        dump.tasks.len(),
        grouped.len(),
        full.len()
    );
    drop(tx);
    // Skip the shutdown of a million tasks (≈1.6 µs each to unwind): not what is measured.
    std::process::exit(0);
}
