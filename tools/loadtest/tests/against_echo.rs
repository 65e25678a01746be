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
