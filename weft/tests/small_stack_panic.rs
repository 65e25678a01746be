//! An ordinary panic in a task with the smallest stack weft allows, with `RUST_BACKTRACE` set,
//! is reported and joined like any other: std's default panic hook, which captures and
//! symbolizes a backtrace, fits in [`weft::stack::MIN_STACK_SIZE`]. Checked in a child process,
//! since an overflow aborts.

use std::process::Command;

const CHILD_ENV: &str = "WEFT_TEST_SMALL_STACK_CHILD";

fn child(stack_size: usize) {
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    let joined = rt.block_on(move || {
        weft::task::Builder::new()
            .stack_size(stack_size)
            .spawn(|| -> () { panic!("provoked on a small stack") })
            .unwrap()
            .join()
    });
    assert!(joined.is_err());
    println!("small-stack panic joined");
}

fn run_child(stack_size: usize, backtrace: &str) -> std::process::Output {
    let exe = std::env::current_exe().unwrap();
    Command::new(exe)
        .args([
            "--exact",
            "a_panic_with_a_backtrace_fits_the_smallest_stack",
            "--nocapture",
        ])
        .env(CHILD_ENV, stack_size.to_string())
        .env("RUST_BACKTRACE", backtrace)
        .output()
        .unwrap()
}

#[test]
fn a_panic_with_a_backtrace_fits_the_smallest_stack() {
    if let Ok(size) = std::env::var(CHILD_ENV) {
        child(size.parse().unwrap());
        return;
    }
    for backtrace in ["1", "full"] {
        let out = run_child(weft::stack::MIN_STACK_SIZE, backtrace);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stdout.contains("small-stack panic joined"),
            "RUST_BACKTRACE={backtrace}: {:?}\nstdout: {stdout}\nstderr: {stderr}",
            out.status
        );
        assert!(stderr.contains("provoked on a small stack"), "{stderr}");
    }
}
