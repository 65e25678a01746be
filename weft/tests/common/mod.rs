//! Helpers shared by the integration tests: bounded waits, so that a regression fails a test
//! instead of hanging CI, a quiet panic hook for tests that panic on purpose, and the metrics
//! tests' watchdog and stack user.

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

/// A monitor report, as collected by [`runtime_with_reports`].
#[derive(Debug, Clone)]
pub struct Report {
    /// The worker was blocked (in a system call or on a futex), not computing.
    pub blocked: bool,
    pub text: String,
}

/// A runtime of `workers` whose monitor reports are collected in the returned list.
pub fn runtime_with_reports(
    workers: usize,
) -> (weft::Runtime, std::sync::Arc<std::sync::Mutex<Vec<Report>>>) {
    let reports = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = reports.clone();
    let runtime = weft::Runtime::builder()
        .workers(workers)
        .monitor_report(move |report| {
            let blocked = !matches!(report.activity, weft::sched::StuckActivity::Computing);
            let text = report.to_string();
            sink.lock().unwrap().push(Report { blocked, text });
        })
        .build()
        .unwrap();
    (runtime, reports)
}

/// Panics if any collected report says a worker was blocked; prints the others (a worker
/// computing for 10 ms happens on a loaded machine: first-touch page faults of fresh stacks).
pub fn assert_never_blocked(reports: &std::sync::Mutex<Vec<Report>>) {
    let reports = reports.lock().unwrap();
    for report in reports.iter().filter(|r| !r.blocked) {
        eprintln!("(not a blocked worker) {}", report.text);
    }
    let blocked: Vec<_> = reports.iter().filter(|r| r.blocked).collect();
    assert!(
        blocked.is_empty(),
        "the monitor reported blocked workers: {blocked:#?}"
    );
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

/// Lets this process open a few thousand sockets, and grows its descriptor table once, up
/// front: Linux doubles the table as it fills, and in a multi-threaded process each doubling
/// waits for an RCU grace period inside the `socket(2)` or `accept(2)` that needed it
/// (FACTS.md), which the monitor rightly reports as a worker blocked in the kernel.
pub fn prepare_descriptors() {
    weft::net::raise_fd_limit().expect("raise the descriptor limit");
    weft::net::reserve_descriptors(4096).expect("grow the descriptor table");
}

/// A runtime of `workers` workers that compacts at its first step after a park; `None` (the
/// test skips, with the reason printed) where this process cannot compact.
pub fn eager_runtime(workers: usize) -> Option<weft::Runtime> {
    let rt = weft::Runtime::builder()
        .workers(workers)
        .stack_policy(weft::stack::StackPolicy::eager())
        .build()
        .unwrap();
    let mode = weft::stack::mode();
    if mode != weft::stack::StackMode::Compact {
        eprintln!("skipped: stack mode is {mode}");
        return None;
    }
    Some(rt)
}
