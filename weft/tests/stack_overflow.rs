//! A task that overflows its stack is reported — id, name, spawn site, stack size, then the
//! frames where it overflowed — and the process aborts. Checked in a child process: the test
//! binary runs itself with an env var.

use std::hint::black_box;
use std::process::Command;

const CHILD_ENV: &str = "WEFT_TEST_OVERFLOW_CHILD";

/// Recurses with 1 KiB frames until the guard page stops it.
#[inline(never)]
fn recurse(depth: u64) -> u64 {
    if black_box(depth) == u64::MAX {
        return 0;
    }
    let mut frame = [0u8; 1024];
    black_box(&mut frame);
    frame[0] = depth as u8;
    recurse(depth + 1) + black_box(&frame)[0] as u64
}

/// One frame far larger than the stack: stack probes must still hit the guard page rather
/// than jump over it into a neighbouring slot.
#[inline(never)]
fn huge_frame() -> u8 {
    let mut frame = [0u8; 256 << 10];
    black_box(&mut frame);
    black_box(&frame)[12345]
}

fn child(case: &str) {
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let case = case.to_owned();
    rt.block_on(move || {
        // Neighbours that must not be corrupted: they park before the overflow.
        let neighbours: Vec<_> = (0..100).map(|_| weft::spawn(weft::task::park)).collect();
        let handle = weft::task::Builder::new()
            .name("deep-thought")
            .stack_size(64 << 10)
            .spawn(move || {
                if case == "recurse" {
                    black_box(recurse(0));
                } else {
                    black_box(huge_frame());
                }
            })
            .unwrap();
        let _ = handle.join();
        drop(neighbours);
    });
    unreachable!("the overflow must abort the process");
}

fn run_child(case: &str) -> (Option<i32>, String) {
    let exe = std::env::current_exe().unwrap();
    let output = Command::new(exe)
        .args([
            "--exact",
            &format!("overflow_{case}"),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, case)
        .output()
        .unwrap();
    use std::os::unix::process::ExitStatusExt;
    (
        output.status.signal(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn check(case: &str, function: &str) {
    if let Ok(case) = std::env::var(CHILD_ENV) {
        child(&case);
    }
    let (signal, stderr) = run_child(case);
    assert_eq!(signal, Some(libc::SIGABRT), "stderr: {stderr}");
    let line = stderr
        .lines()
        .find(|l| l.contains("stack overflow"))
        .unwrap_or_else(|| panic!("no overflow report in: {stderr}"));
    assert!(
        line.starts_with("weft: fatal error: stack overflow in task "),
        "{line}"
    );
    assert!(line.contains("\"deep-thought\""), "{line}");
    assert!(line.contains("tests/stack_overflow.rs:"), "{line}");
    assert!(line.contains("stack 64 KiB"), "{line}");
    assert_eq!(
        stderr.matches("stack overflow").count(),
        1,
        "one line only: {stderr}"
    );
    // After that line, the backtrace: raw addresses first, then symbolized frames, the
    // innermost in the function that overflowed.
    let (_, after) = stderr.split_once(line).unwrap();
    assert!(
        after.contains("weft: the overflowing task's frames, raw: 0x"),
        "{stderr}"
    );
    let (_, frames) = after
        .split_once("weft: where the task overflowed:\n")
        .unwrap_or_else(|| panic!("no symbolized frames in: {stderr}"));
    // The innermost function frame, past libc's and a sanitizer's (scripts/asan.sh: the
    // frame's zeroing is a call to `__asan_memset` or `__memset_*` there), the `at
    // file:line` lines, and `core::hint::black_box`, inlined at the faulting store in
    // release builds.
    let first = frames
        .lines()
        .map(str::trim)
        .find(|l| !l.starts_with("at ") && !l.starts_with("__") && !l.starts_with("core::hint::"))
        .unwrap_or_default();
    assert!(
        first.starts_with(&format!("stack_overflow::{function}")),
        "innermost frame {first:?}: {stderr}"
    );
    assert!(frames.contains("tests/stack_overflow.rs:"), "{stderr}");
}

#[test]
fn overflow_recurse() {
    check("recurse", "recurse");
}

#[test]
fn overflow_huge_frame() {
    check("huge_frame", "huge_frame");
}
