//! What interposition costs on calls that do not block (run by hand, release build):
//! `cargo test --release -p weft --features interpose --test interpose_cost -- --ignored --nocapture`
#![cfg(feature = "interpose")]

use std::io::{Read, Write};
use std::time::{Duration, Instant};

const ROUNDS: u32 = 100_000;

/// Nanoseconds per round of `op`, median of 5.
fn per_round(mut op: impl FnMut()) -> f64 {
    let mut runs: Vec<Duration> = (0..5)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..ROUNDS {
                op();
            }
            start.elapsed()
        })
        .collect();
    runs.sort();
    runs[2].as_nanos() as f64 / f64::from(ROUNDS)
}

/// One task writes a byte to itself and reads it back, over std and over weft::net sockets.
fn measure() -> (f64, f64) {
    weft::Runtime::builder()
        .workers(1)
        .build()
        .unwrap()
        .block_on(|| {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let mut a = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (mut b, _) = listener.accept().unwrap();
            let std_ns = per_round(|| {
                a.write_all(b"x").unwrap();
                b.read_exact(&mut [0; 1]).unwrap();
            });
            let listener = weft::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let mut a = weft::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (mut b, _) = listener.accept().unwrap();
            let net_ns = per_round(|| {
                a.write_all(b"x").unwrap();
                b.read_exact(&mut [0; 1]).unwrap();
            });
            (std_ns, net_ns)
        })
}

#[test]
#[ignore = "a measurement: run by hand in release"]
fn cost_of_interposition_on_calls_that_do_not_block() {
    let fd = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let getfl_ns = per_round(|| {
        // SAFETY: F_GETFL on an open descriptor.
        std::hint::black_box(unsafe {
            libc::fcntl(std::os::fd::AsRawFd::as_raw_fd(&fd), libc::F_GETFL)
        });
    });
    // Alternated, three times each: the machine is noisy.
    let mut on = Vec::new();
    let mut off = Vec::new();
    for _ in 0..3 {
        on.push(measure());
        weft::interpose::set_enabled(false);
        off.push(measure());
        weft::interpose::set_enabled(true);
    }
    let median = |v: &mut Vec<(f64, f64)>, pick: fn(&(f64, f64)) -> f64| {
        let mut x: Vec<f64> = v.iter().map(pick).collect();
        x.sort_by(f64::total_cmp);
        x[1]
    };
    let (std_on, net_on) = (median(&mut on, |p| p.0), median(&mut on, |p| p.1));
    let (std_off, net_off) = (median(&mut off, |p| p.0), median(&mut off, |p| p.1));
    eprintln!(
        "write 1 byte + read it back in one task, ns per round (median of 5 x {ROUNDS}):\n\
         std::net:  interposed {std_on:.0}, off {std_off:.0}\n\
         weft::net: interposed {net_on:.0}, off {net_off:.0}\n\
         one fcntl(F_GETFL): {getfl_ns:.0}"
    );
}
