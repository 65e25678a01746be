//! Helpers shared by the integration tests: bounded waits, so that a regression fails a test
//! instead of hanging CI, a quiet panic hook for tests that panic on purpose, and the metrics
//! tests' watchdog and stack user.

#![allow(dead_code)] // each test binary uses some of them

use std::hint::black_box;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

/// Joins `handle` from a helper thread; panics if it takes longer than `limit`.
pub fn join_within<T: Send + 'static>(
    handle: weft::JoinHandle<T>,
    limit: Duration,
) -> std::thread::Result<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(handle.join());
    });
    match rx.recv_timeout(limit) {
        Ok(result) => result,
        Err(_) => panic!("join did not return within {limit:?}"),
    }
}

/// Runs `f` on a helper thread; panics if it takes longer than `limit`.
pub fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(value) => value,
        Err(_) => panic!("did not finish within {limit:?}"),
    }
}

/// Silences panic messages on weft's worker threads, where the tests panic on purpose (the
/// default hook's output is noise there); panics elsewhere, such as a failed assertion in
/// the test itself, still print.
pub fn quiet_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let on_worker = std::thread::current()
                .name()
                .is_some_and(|n| n.starts_with("weft-worker"));
            if !on_worker {
                default(info);
            }
        }));
    });
}

/// Aborts the test binary with a message if the returned sender is neither used nor dropped
/// within `secs` seconds: a hung test fails instead of hanging CI.
pub fn watchdog(what: &'static str, secs: u64) -> mpsc::Sender<()> {
    let (done, wait) = mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(RecvTimeoutError::Timeout) = wait.recv_timeout(Duration::from_secs(secs)) {
            eprintln!("{what}: timed out after {secs} s");
            std::process::abort();
        }
    });
    done
}

/// Really uses `N` bytes of stack: the array is written and read through `black_box`.
#[inline(never)]
pub fn use_stack<const N: usize>() -> u8 {
    let mut buf = [0u8; N];
    black_box(&mut buf);
    for i in (0..N).step_by(512) {
        buf[i] = i as u8;
    }
    black_box(&buf)[N - 1]
}

/// GETs `path` from `addr` with a plain std socket (HTTP/1.1, the server closes); returns
/// the status line and the body.
pub fn http_get(addr: std::net::SocketAddr, path: &str) -> (String, String) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").expect("no header end");
    let status = head.lines().next().unwrap_or("").to_string();
    (status, body.to_string())
}
