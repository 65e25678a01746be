//! Helpers shared by the metrics tests (`mod common;` in each).

#![allow(dead_code)] // each test binary uses part of it

use std::hint::black_box;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

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
