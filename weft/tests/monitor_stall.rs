//! The monitor: a task that blocks its worker in `std::thread::sleep` does not stall tasks
//! that have not started yet, and the monitor's warning names it. The scenario runs in a
//! subprocess so that the warning on stderr can be read.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

mod common;

const CHILD_ENV: &str = "WEFT_TEST_MONITOR_CHILD";

/// The subprocess half of `sleeping_task_does_not_delay_a_ping_pong_pair`.
#[test]
fn monitor_child() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    rt.block_on(|| {
        let listener = weft::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let site_line = line!() + 2;
        let start = Instant::now();
        let sleeper = weft::spawn(|| std::thread::sleep(Duration::from_millis(200)));
        let pong = weft::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0; 8];
            while s.read_exact(&mut buf).is_ok() {
                s.write_all(&buf).unwrap();
            }
        });
        let ping = weft::spawn(move || {
            let mut s = weft::net::TcpStream::connect(addr).unwrap();
            s.set_nodelay(true).unwrap();
            let mut worst = Duration::ZERO;
            for i in 0..200u64 {
                let t = Instant::now();
                s.write_all(&i.to_le_bytes()).unwrap();
                let mut buf = [0; 8];
                s.read_exact(&mut buf).unwrap();
                worst = worst.max(t.elapsed());
            }
            (worst, start.elapsed())
        });
        let (worst, done_at) = ping.join().unwrap();
        pong.join().unwrap();
        sleeper.join().unwrap();
        println!(
            "RESULT site_line={site_line} worst_rtt_us={} pair_done_ms={}",
            worst.as_micros(),
            done_at.as_millis()
        );
    });
}

#[test]
fn sleeping_task_does_not_delay_a_ping_pong_pair() {
    let (result, stderr) = common::child_result("monitor_child", CHILD_ENV);
    let field = |name: &str| -> u64 {
        result
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .unwrap()
            .parse()
            .unwrap()
    };
    eprintln!("monitor_stall: {result}");
    // The pair ran on the other worker while the sleeper held its own: its worst round trip is
    // milliseconds (a stall would be ≈200 ms) and it finished long before the sleeper.
    assert!(field("worst_rtt_us") < 30_000, "{result}");
    assert!(field("pair_done_ms") < 150, "{result}");
    let site = format!("monitor_stall.rs:{}", field("site_line"));
    let warning = stderr
        .lines()
        .find(|l| l.starts_with("weft: worker"))
        .unwrap_or_else(|| panic!("no monitor warning: {stderr}"));
    assert!(
        warning.contains(&site),
        "warning does not name {site}: {warning}"
    );
    assert!(warning.contains("without parking"), "{warning}");
    // Once per site.
    assert_eq!(stderr.matches(&site).count(), 1, "{stderr}");
}
