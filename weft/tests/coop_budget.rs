//! The cooperative budget (sched/coop.rs): a task whose channel and lock operations always
//! succeed without parking still yields now and then, so a sleeper on its worker wakes on
//! time.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::join_within;

/// Runs `busy` (which loops while `go` says so) beside a 5 ms sleeper on one worker, and
/// returns how late the sleeper woke. The loop also ends after 3 s, so that without a budget
/// the test fails instead of hanging.
fn sleeper_lateness(busy: impl FnOnce(&dyn Fn() -> bool) + Send + 'static) -> Duration {
    let rt = weft::Runtime::builder()
        .workers(1)
        .monitor_threshold(None)
        .build()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let busy = {
        let stop = stop.clone();
        rt.spawn(move || {
            let start = Instant::now();
            busy(&|| !stop.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(3))
        })
    };
    // Measured from the spawn: without a budget the sleeper does not even start.
    let start = Instant::now();
    let sleeper = rt.spawn(move || {
        weft::time::sleep(Duration::from_millis(5));
        let late = start.elapsed().saturating_sub(Duration::from_millis(5));
        stop.store(true, Ordering::Relaxed);
        late
    });
    let late = join_within(sleeper, Duration::from_secs(10)).unwrap();
    join_within(busy, Duration::from_secs(10)).unwrap();
    late
}

#[test]
fn a_task_looping_on_an_always_ready_channel_yields() {
    let late = sleeper_lateness(|go| {
        let (tx, rx) = weft::chan::bounded::<u64>(16);
        let mut n = 0u64;
        while go() {
            tx.send(n).unwrap();
            n = n.wrapping_add(rx.recv().unwrap());
        }
    });
    eprintln!("sleeper beside a channel loop woke {late:?} late");
    assert!(late < Duration::from_millis(200), "woke {late:?} late");
}

#[test]
fn a_task_looping_on_an_uncontended_lock_yields() {
    let late = sleeper_lateness(|go| {
        let lock = weft::sync::Mutex::new(0u64);
        while go() {
            *lock.lock() += 1;
        }
    });
    eprintln!("sleeper beside a lock loop woke {late:?} late");
    assert!(late < Duration::from_millis(200), "woke {late:?} late");
}

#[test]
fn a_plain_thread_never_runs_out_of_budget() {
    // Off a runtime the budget never runs out: a million operations, no yield, no panic.
    let (tx, rx) = weft::chan::bounded::<u32>(1);
    for i in 0..1_000_000 {
        tx.send(i).unwrap();
        assert_eq!(rx.recv().unwrap(), i);
    }
}

#[test]
fn a_task_reading_an_always_ready_socket_yields() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let writer_stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = writer_stop.clone();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let chunk = [7u8; 1 << 16];
            while !stop.load(Ordering::Relaxed) && s.write_all(&chunk).is_ok() {}
        })
    };
    let late = sleeper_lateness(move |go| {
        // The writer keeps the receive queue full, so reads succeed without parking.
        let mut s = weft::net::TcpStream::connect(addr).unwrap();
        let mut buf = [0u8; 64];
        while go() {
            s.read_exact(&mut buf).unwrap();
        }
    });
    writer_stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    eprintln!("sleeper beside a socket-reading loop woke {late:?} late");
    assert!(late < Duration::from_millis(200), "woke {late:?} late");
}
