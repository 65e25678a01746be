//! The load tester against an in-process weft echo server.

use std::io::{Read, Write};

#[test]
fn small_run_counts_every_round_trip() {
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let report = rt.block_on(|| {
        let listener = weft::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        weft::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { break };
                weft::spawn(move || {
                    let mut buf = [0; 1024];
                    while let Ok(n @ 1..) = s.read(&mut buf) {
                        if s.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        let config = weft_loadtest::parse_args(
            format!("--addr {addr} --conns 100 --rounds 3 --batch 16 --gap-ms 1")
                .split(' ')
                .map(String::from),
        )
        .unwrap();
        weft_loadtest::run(&config)
    });
    assert_eq!(report.conns_ok, 100, "{report:?}");
    assert_eq!(report.conns_failed, 0);
    assert_eq!(report.rtt_count, 300);
    assert!(report.rtt_p50_us <= report.rtt_p99_us && report.rtt_p99_us <= report.rtt_max_us);
    assert!(report.round_trips_per_sec > 0.0);
    assert!(report.json().starts_with("{\"conns_ok\":100,"));
}

/// `--hold-ms` keeps the connections open after the rounds (the server sees none closed
/// before the hold ends), and `--watch-pid` reads the watched process's memory and CPU.
#[test]
fn a_hold_keeps_connections_open_and_reads_the_watched_process() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let closed = Arc::new(AtomicUsize::new(0));
    let closed_in_server = closed.clone();
    // 150 ms in, the rounds (a few ms) are over and the 300 ms hold is not: no connection
    // may have closed yet.
    let closed_early = {
        let closed = closed.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(150));
            closed.load(Ordering::Relaxed)
        })
    };
    let (report, took) = rt.block_on(move || {
        let listener = weft::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        weft::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { break };
                let closed = closed_in_server.clone();
                weft::spawn(move || {
                    let mut buf = [0; 1024];
                    while let Ok(n @ 1..) = s.read(&mut buf) {
                        if s.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    closed.fetch_add(1, Ordering::Relaxed);
                });
            }
        });
        let config = weft_loadtest::parse_args(
            format!(
                "--addr {addr} --conns 20 --rounds 2 --batch 20 --gap-ms 1 --hold-ms 300 \
                 --watch-pid {}",
                std::process::id()
            )
            .split_whitespace()
            .map(String::from),
        )
        .unwrap();
        let start = Instant::now();
        let report = weft_loadtest::run(&config);
        (report, start.elapsed())
    });
    assert_eq!(report.rtt_count, 40, "{report:?}");
    assert!(took >= Duration::from_millis(300), "no hold: {took:?}");
    assert_eq!(
        closed_early.join().unwrap(),
        0,
        "connections closed during the hold"
    );
    let start = Instant::now();
    while closed.load(Ordering::Relaxed) < 20 && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(closed.load(Ordering::Relaxed), 20);
    assert!(
        report.held_rss_bytes > 0 && report.held_pte_bytes > 0,
        "{report:?}"
    );
    assert!(report.watched_cpu_s >= 0.0);
    assert!(report.json().contains("\"held_rss_bytes\":"));
}
