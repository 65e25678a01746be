//! With the `log` feature, the monitor's reports go to the `log` crate (`warn!`, target
//! `weft::monitor`) when no hook is set and a logger is installed, and to stderr when none is.
#![cfg(feature = "log")]

use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A record the test logger kept: its level, target and message.
type Kept = (log::Level, String, String);

/// Keeps every record it is given.
struct Capture(Mutex<Vec<Kept>>);

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        let kept = (
            record.level(),
            record.target().to_string(),
            record.args().to_string(),
        );
        self.0.lock().unwrap().push(kept);
    }

    fn flush(&self) {}
}

static CAPTURE: Capture = Capture(Mutex::new(Vec::new()));

const CHILD_ENV: &str = "WEFT_TEST_MONITOR_LOG_CHILD";

/// Runs a task that computes for 300 ms on a one-worker runtime whose monitor has no hook.
fn stall_a_worker() {
    let rt = weft::Runtime::builder()
        .workers(1)
        .monitor_threshold(Some(Duration::from_millis(20)))
        .build()
        .unwrap();
    rt.spawn(|| {
        let until = Instant::now() + Duration::from_millis(300);
        let mut x = 0u64;
        while Instant::now() < until {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
    })
    .join()
    .unwrap();
}

#[test]
fn with_a_logger_installed_the_report_is_a_warning_of_target_weft_monitor() {
    log::set_logger(&CAPTURE).unwrap();
    log::set_max_level(log::LevelFilter::Warn);
    stall_a_worker();
    let kept = CAPTURE.0.lock().unwrap().clone();
    let reports: Vec<_> = kept
        .iter()
        .filter(|(_, target, _)| target == "weft::monitor")
        .collect();
    assert_eq!(reports.len(), 1, "{kept:?}");
    let (level, _, message) = reports[0];
    assert_eq!(*level, log::Level::Warn);
    assert!(
        message.starts_with("weft: worker 0 has run task") && message.contains("computing"),
        "{message}"
    );
}

/// The subprocess half of `without_a_logger_the_report_goes_to_stderr`: no logger installed.
#[test]
fn stall_without_a_logger() {
    if std::env::var_os(CHILD_ENV).is_some() {
        stall_a_worker();
    }
}

#[test]
fn without_a_logger_the_report_goes_to_stderr() {
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "stall_without_a_logger",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("weft: worker 0 has run task") && stderr.contains("computing"),
        "{stderr}"
    );
}
