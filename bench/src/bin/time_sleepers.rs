//! A million tasks each sleeping a random 1–5 s: wake lateness (p50/p99/max), CPU time used
//! while they all wait, CPU per wake, and memory — for weft, tokio and Go (each in its own
//! process, one after the other), then one JSON line.
//!
//! Each side: pick a base time far enough ahead that every task has been spawned and started
//! by then (`3 s + 6 µs × tasks`: starting a million tasks takes seconds in every runtime);
//! each task sleeps until `base + 1–5 s` (uniform) and records how late it woke. "Idle CPU"
//! is the CPU time per second of wall time from when every task is asleep until just before
//! the first deadline; "CPU per wake" is the CPU time of the wake phase divided by the tasks.
//! (A gate that releases every task at once was tried first: the million simultaneous wakes
//! then delayed the first timers in every runtime, measuring the stampede, not the timers.)
//!
//! Usage: cargo run --release -p weft-bench --bin time_sleepers [-- TASKS]
//! (`--peer weft|tokio TASKS` runs one side and prints its `sleepers key=value` line;
//! `WEFT_BENCH_WINDOWS=1` adds the lateness of each 100 ms window of sleep lengths on stderr.)

#[path = "peers/mod.rs"]
mod peers;

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Sleeps are drawn from [MIN_SLEEP, MIN_SLEEP + SPREAD).
const MIN_SLEEP: Duration = Duration::from_secs(1);
const SPREAD_US: u64 = 4_000_000;

fn xorshift(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// What one side measured.
struct Report {
    lateness_us: Vec<u32>,
    spawn: Duration,
    /// CPU time per second of wall time while every task slept (before the first deadline).
    idle_cpu_ms_per_s: Option<f64>,
    /// CPU time from the first deadline until the last task woke, per wake.
    cpu_per_wake_us: f64,
    rss_mib: f64,
    pte_mib: f64,
}

impl Report {
    fn line(mut self, name: &str) -> String {
        if std::env::var("WEFT_BENCH_WINDOWS").is_ok() {
            self.print_windows();
        }
        self.lateness_us.sort_unstable();
        let n = self.lateness_us.len();
        let pct = |p: f64| self.lateness_us[((n as f64 * p) as usize).min(n - 1)];
        format!(
            "sleepers impl={name} tasks={n} spawn_ms={:.0} p50_us={} p99_us={} max_us={} \
             idle_cpu_ms_per_s={} cpu_per_wake_us={:.2} rss_mib={:.0} pte_mib={:.0}",
            self.spawn.as_secs_f64() * 1e3,
            pct(0.50),
            pct(0.99),
            self.lateness_us[n - 1],
            self.idle_cpu_ms_per_s
                .map_or("null".to_string(), |v| format!("{v:.2}")),
            self.cpu_per_wake_us,
            self.rss_mib,
            self.pte_mib,
        )
    }
}

impl Report {
    /// Lateness by 100 ms window of sleep length on stderr: a tail from a few long stalls shows
    /// up as a few bad windows, steady queueing as a high p99 in every one.
    fn print_windows(&self) {
        let sleeps = sleeps(self.lateness_us.len());
        let count = (SPREAD_US / 100_000) as usize;
        let mut windows: Vec<Vec<u32>> = vec![Vec::new(); count];
        for (late, sleep) in self.lateness_us.iter().zip(sleeps) {
            let window = ((sleep - MIN_SLEEP).as_millis() / 100) as usize;
            windows[window.min(count - 1)].push(*late);
        }
        for (i, window) in windows.iter_mut().enumerate() {
            window.sort_unstable();
            let n = window.len();
            if n > 0 {
                eprintln!(
                    "window {:>4} ms: n={n} p50_us={} p99_us={} max_us={}",
                    i * 100,
                    window[n / 2],
                    window[n * 99 / 100],
                    window[n - 1]
                );
            }
        }
    }
}

/// Counters the tasks and the observer share.
#[derive(Default)]
struct Progress {
    asleep: AtomicUsize,
    woken: AtomicUsize,
}

fn wait_for(counter: &AtomicUsize, n: usize) {
    while counter.load(Ordering::Acquire) < n {
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The observer's side: waits for every task to be asleep, measures idle CPU until just
/// before the first deadline, then the wake phase.
fn observe(
    tasks: usize,
    progress: &Progress,
    start: Instant,
    base: Instant,
) -> (Duration, Option<f64>, f64, f64, f64) {
    wait_for(&progress.asleep, tasks);
    let spawn = start.elapsed();
    let first_deadline = base + MIN_SLEEP;
    let window_start = Instant::now() + Duration::from_millis(20);
    let window_end = first_deadline - Duration::from_millis(20);
    let idle = if window_end > window_start + Duration::from_millis(100) {
        std::thread::sleep(window_start.saturating_duration_since(Instant::now()));
        let cpu0 = weft_bench::cpu_time();
        let w0 = Instant::now();
        std::thread::sleep(window_end.saturating_duration_since(Instant::now()));
        let cpu = weft_bench::cpu_time() - cpu0;
        Some(cpu.as_secs_f64() * 1e3 / w0.elapsed().as_secs_f64())
    } else {
        None
    };
    let rss = peers::status_kib("VmRSS") as f64 / 1024.0;
    let pte = peers::status_kib("VmPTE") as f64 / 1024.0;
    std::thread::sleep(window_end.saturating_duration_since(Instant::now()));
    let cpu0 = weft_bench::cpu_time();
    wait_for(&progress.woken, tasks);
    let wake_cpu = weft_bench::cpu_time() - cpu0;
    (
        spawn,
        idle,
        wake_cpu.as_secs_f64() * 1e6 / tasks as f64,
        rss,
        pte,
    )
}

/// When the sleeps start counting: after every task has surely started.
fn base_after(start: Instant, tasks: usize) -> Instant {
    start + Duration::from_secs(3) + Duration::from_micros(6) * tasks as u32
}

fn sleeps(tasks: usize) -> Vec<Duration> {
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    (0..tasks)
        .map(|_| MIN_SLEEP + Duration::from_micros(xorshift(&mut seed) % SPREAD_US))
        .collect()
}

fn record(lateness: &[AtomicU32], i: usize, deadline: Instant) {
    let late = Instant::now().saturating_duration_since(deadline);
    lateness[i].store(
        late.as_micros().min(u32::MAX as u128) as u32,
        Ordering::Relaxed,
    );
}

fn run_weft(tasks: usize) -> Report {
    let rt = weft::Runtime::builder()
        .stack_size(32 * 1024)
        .build()
        .unwrap();
    let lateness: Arc<Vec<AtomicU32>> = Arc::new((0..tasks).map(|_| AtomicU32::new(0)).collect());
    let progress = Arc::new(Progress::default());
    let start = Instant::now();
    let base = base_after(start, tasks);
    {
        let (lateness, progress) = (lateness.clone(), progress.clone());
        rt.spawn(move || {
            for (i, sleep) in sleeps(tasks).into_iter().enumerate() {
                let (lateness, progress) = (lateness.clone(), progress.clone());
                weft::spawn(move || {
                    let deadline = base + sleep;
                    progress.asleep.fetch_add(1, Ordering::Release);
                    weft::time::sleep_until(deadline);
                    record(&lateness, i, deadline);
                    progress.woken.fetch_add(1, Ordering::Release);
                });
            }
        });
    }
    let (spawn, idle, per_wake, rss, pte) = observe(tasks, &progress, start, base);
    let lateness_us = lateness.iter().map(|l| l.load(Ordering::Relaxed)).collect();
    Report {
        lateness_us,
        spawn,
        idle_cpu_ms_per_s: idle,
        cpu_per_wake_us: per_wake,
        rss_mib: rss,
        pte_mib: pte,
    }
}

fn run_tokio(tasks: usize) -> Report {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_time()
        .build()
        .unwrap();
    let lateness: Arc<Vec<AtomicU32>> = Arc::new((0..tasks).map(|_| AtomicU32::new(0)).collect());
    let progress = Arc::new(Progress::default());
    let start = Instant::now();
    let base = base_after(start, tasks);
    {
        let (lateness, progress) = (lateness.clone(), progress.clone());
        rt.spawn(async move {
            for (i, sleep) in sleeps(tasks).into_iter().enumerate() {
                let (lateness, progress) = (lateness.clone(), progress.clone());
                tokio::spawn(async move {
                    let deadline = base + sleep;
                    progress.asleep.fetch_add(1, Ordering::Release);
                    tokio::time::sleep_until(deadline.into()).await;
                    record(&lateness, i, deadline);
                    progress.woken.fetch_add(1, Ordering::Release);
                });
            }
        });
    }
    let (spawn, idle, per_wake, rss, pte) = observe(tasks, &progress, start, base);
    let lateness_us = lateness.iter().map(|l| l.load(Ordering::Relaxed)).collect();
    Report {
        lateness_us,
        spawn,
        idle_cpu_ms_per_s: idle,
        cpu_per_wake_us: per_wake,
        rss_mib: rss,
        pte_mib: pte,
    }
}

/// Runs one side in a child process (so CPU and memory are its own).
fn child(side: &str, tasks: usize) -> Result<String, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = std::process::Command::new(exe)
        .args(["--peer", side, &tasks.to_string()])
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "{side} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--peer") {
        let tasks = args
            .get(3)
            .and_then(|a| a.parse().ok())
            .unwrap_or(1_000_000);
        let report = match args[2].as_str() {
            "weft" => run_weft(tasks),
            "tokio" => run_tokio(tasks),
            other => panic!("unknown side {other}"),
        };
        println!("{}", report.line(&args[2]));
        return;
    }
    let tasks: usize = args
        .get(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    println!("{tasks} tasks each sleeping a random 1-5 s (weft, tokio, go run one after another)");
    let mut lines = Vec::new();
    for side in ["weft", "tokio"] {
        match child(side, tasks) {
            Ok(out) => lines.push(out.trim().to_string()),
            Err(e) => println!("{side}: failed: {e}"),
        }
    }
    match peers::run_go("time_sleepers", &[format!("-n={tasks}")]) {
        Ok(out) => lines.push(out.trim().to_string()),
        Err(reason) => println!("go: skipped: {reason}"),
    }
    let keys = [
        "p50_us",
        "p99_us",
        "max_us",
        "idle_cpu_ms_per_s",
        "cpu_per_wake_us",
        "rss_mib",
        "pte_mib",
        "spawn_ms",
    ];
    println!(
        "{:>6} {:>8} {:>8} {:>8} {:>12} {:>11} {:>8} {:>8} {:>9}",
        "impl",
        "p50 us",
        "p99 us",
        "max us",
        "idle cpu ms/s",
        "cpu/wake us",
        "rss MiB",
        "pte MiB",
        "spawn ms"
    );
    let mut json = Vec::new();
    for line in &lines {
        let name = line
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix("impl="))
            .unwrap_or("?");
        let vals: Vec<String> = keys
            .iter()
            .map(|k| {
                line.split_whitespace()
                    .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('='))
                    .unwrap_or("null")
                    .to_string()
            })
            .collect();
        println!(
            "{name:>6} {:>8} {:>8} {:>8} {:>12} {:>11} {:>8} {:>8} {:>9}",
            vals[0], vals[1], vals[2], vals[3], vals[4], vals[5], vals[6], vals[7]
        );
        let fields: Vec<String> = keys
            .iter()
            .zip(&vals)
            .map(|(k, v)| format!("\"{k}\":{v}"))
            .collect();
        json.push(format!("{{\"impl\":\"{name}\",{}}}", fields.join(",")));
    }
    println!(
        "{{\"bench\":\"time_sleepers\",\"tasks\":{tasks},\"results\":[{}]}}",
        json.join(",")
    );
}
