//! Helpers shared by the integration tests: bounded waits, so that a regression fails a test
//! instead of hanging CI, and a quiet panic hook for tests that panic on purpose.

#![allow(dead_code)] // each test binary uses some of them

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
pub fn watchdog(what: &'static str, secs: u64) -> std::sync::mpsc::Sender<()> {
    let (done, wait) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
            wait.recv_timeout(Duration::from_secs(secs))
        {
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
    std::hint::black_box(&mut buf);
    for i in (0..N).step_by(512) {
        buf[i] = i as u8;
    }
    std::hint::black_box(&buf)[N - 1]
}
