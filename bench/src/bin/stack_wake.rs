//! What waking a compacted task costs against waking one whose stack is resident: wake
//! latency (unpark → the task runs; p50/p99, one wake at a time) and CPU per wake (all tasks
//! woken at once, process CPU time ÷ tasks). Prints figures, never asserts.
//!
//! ```text
//! cargo run --release -p weft-bench --bin stack_wake -- [TASKS]
//! ```

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weft::stack::StackPolicy;

fn cpu_ns() -> u64 {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: fills a struct we own.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

struct Shared {
    tasks: Mutex<Vec<weft::task::Task>>,
    parked: AtomicUsize,
    woken: AtomicUsize,
    /// ns since `epoch` when the last unpark was issued, and when the task ran.
    unparked_at: AtomicU64,
    ran_at: AtomicU64,
    epoch: Instant,
}

/// Parks `n` tasks under `policy`, waits until they are settled, then wakes them: one at a
/// time (latencies), then the rest all at once (CPU per wake).
fn measure(policy: StackPolicy, n: usize, compacted: bool) -> (Vec<f64>, f64) {
    let rt = weft::Runtime::builder()
        .workers(1)
        .stack_policy(policy)
        .build()
        .unwrap();
    let shared = Arc::new(Shared {
        tasks: Mutex::new(Vec::new()),
        parked: AtomicUsize::new(0),
        woken: AtomicUsize::new(0),
        unparked_at: AtomicU64::new(0),
        ran_at: AtomicU64::new(0),
        epoch: Instant::now(),
    });
    let base = weft::stack::counters().compacted_tasks;
    let handles: Vec<_> = (0..2 * n)
        .map(|_| {
            let shared = shared.clone();
            rt.spawn(move || {
                let mut local = [1u64; 16];
                std::hint::black_box(&mut local);
                shared.tasks.lock().unwrap().push(weft::task::current());
                shared.parked.fetch_add(1, Ordering::Release);
                while shared.woken.load(Ordering::Acquire) == 0 {
                    weft::task::park();
                }
                let ran = shared.epoch.elapsed().as_nanos() as u64;
                shared.ran_at.store(ran, Ordering::Release);
                shared.woken.fetch_add(1, Ordering::AcqRel);
                std::hint::black_box(local)[0]
            })
        })
        .collect();
    while shared.parked.load(Ordering::Acquire) < 2 * n {
        std::thread::sleep(Duration::from_millis(1));
    }
    let start = Instant::now();
    if compacted {
        while weft::stack::counters().compacted_tasks < base + 2 * n as u64 {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "tasks never compacted"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    } else {
        std::thread::sleep(Duration::from_millis(50));
    }
    let tasks = std::mem::take(&mut *shared.tasks.lock().unwrap());
    let (one_by_one, all_at_once) = tasks.split_at(n);
    shared.woken.store(1, Ordering::Release);
    let mut latencies = Vec::with_capacity(n);
    for (i, task) in one_by_one.iter().enumerate() {
        let at = shared.epoch.elapsed().as_nanos() as u64;
        shared.unparked_at.store(at, Ordering::Release);
        task.unpark();
        while shared.woken.load(Ordering::Acquire) < i + 2 {
            std::hint::spin_loop();
        }
        let ran = shared.ran_at.load(Ordering::Acquire);
        latencies.push(ran.saturating_sub(at) as f64);
        // Let the worker go idle between wakes, as a sleeping server's would.
        let pause = Instant::now();
        while pause.elapsed() < Duration::from_micros(200) {
            std::hint::spin_loop();
        }
    }
    let cpu_before = cpu_ns();
    let wall = Instant::now();
    for task in all_at_once {
        task.unpark();
    }
    while shared.woken.load(Ordering::Acquire) < 2 * n + 1 {
        std::thread::sleep(Duration::from_micros(100));
    }
    let cpu = (cpu_ns() - cpu_before) as f64 / n as f64;
    let _ = wall;
    for handle in handles {
        handle.join().unwrap();
    }
    latencies.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (latencies, cpu)
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p) as usize]
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map_or(20_000, |a| a.replace('_', "").parse().expect("TASKS"));
    let resident_policy = StackPolicy::never();
    let compact_policy = StackPolicy::eager();
    let mut rows = Vec::new();
    for round in 0..2 {
        for (name, policy, compacted) in [
            ("resident", resident_policy, false),
            ("compacted", compact_policy, true),
        ] {
            let (lat, cpu) = measure(policy, n, compacted);
            eprintln!(
                "round {round} {name:>9}: wake latency p50 {:>7.0} ns p99 {:>7.0} ns; CPU per wake {cpu:>6.0} ns",
                pct(&lat, 0.5),
                pct(&lat, 0.99)
            );
            rows.push((name, pct(&lat, 0.5), pct(&lat, 0.99), cpu));
        }
    }
    let avg = |name: &str, f: fn(&(&str, f64, f64, f64)) -> f64| {
        let v: Vec<f64> = rows.iter().filter(|r| r.0 == name).map(f).collect();
        v.iter().sum::<f64>() / v.len() as f64
    };
    let extra_cpu = avg("compacted", |r| r.3) - avg("resident", |r| r.3);
    eprintln!(
        "stack_wake: {n} tasks per case, stack mode: {}; compacted costs {extra_cpu:.0} ns more CPU per wake",
        weft::stack::mode()
    );
    println!(
        "{{\"tasks\":{n},\"resident_p50_ns\":{:.0},\"resident_p99_ns\":{:.0},\"compacted_p50_ns\":{:.0},\
         \"compacted_p99_ns\":{:.0},\"resident_cpu_ns\":{:.0},\"compacted_cpu_ns\":{:.0},\"extra_cpu_ns\":{extra_cpu:.0}}}",
        avg("resident", |r| r.1),
        avg("resident", |r| r.2),
        avg("compacted", |r| r.1),
        avg("compacted", |r| r.2),
        avg("resident", |r| r.3),
        avg("compacted", |r| r.3),
    )
}
