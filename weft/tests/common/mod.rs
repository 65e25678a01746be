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

/// Runs the test `child` of this test binary in a subprocess, alone, with `env` set to "1"
/// (the child test does its work only then); asserts it succeeded and returns what follows
/// `RESULT ` on its output, with its stderr.
pub fn child_result(child: &str, env: &str) -> (String, String) {
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", child, "--nocapture", "--test-threads=1"])
        .env(env, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let result = stdout
        .lines()
        .find_map(|l| Some(l[l.find("RESULT ")? + 7..].to_owned()))
        .unwrap_or_else(|| panic!("no result: {stdout}\n{stderr}"));
    (result, stderr)
}
