//! Parked tasks' memory once their stacks settled: spawns N tasks (optionally touching 8 or
//! 64 KiB of stack first), waits until all parked, then waits `--settle-ms` for reclaim and
//! compaction and measures again. Prints figures, never asserts.
//!
//! ```text
//! cargo run --release -p weft-bench --bin stack_settle -- [--tasks N] [--mode idle|8k|64k]
//!     [--settle-ms MS] [--policy default|never|eager]
//! ```

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct Gate {
    open: AtomicBool,
    parked: AtomicUsize,
    waiters: Mutex<Vec<weft::task::Task>>,
}

impl Gate {
    fn wait(&self) {
        {
            let mut waiters = self.waiters.lock().unwrap();
            if self.open.load(Ordering::Acquire) {
                return;
            }
            waiters.push(weft::task::current());
        }
        self.parked.fetch_add(1, Ordering::Release);
        while !self.open.load(Ordering::Acquire) {
            weft::task::park();
        }
    }

    fn open(&self) {
        let waiters = {
            let mut waiters = self.waiters.lock().unwrap();
            self.open.store(true, Ordering::Release);
            std::mem::take(&mut *waiters)
        };
        for task in waiters {
            task.unpark();
        }
    }
}

#[inline(never)]
fn use_stack<const N: usize>() -> u8 {
    let mut buf = [0u8; N];
    black_box(&mut buf);
    for i in (0..N).step_by(512) {
        buf[i] = i as u8;
    }
    black_box(&buf)[N - 1]
}

fn status() -> (u64, u64, u64) {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kb| kb.parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    (field("VmRSS:"), field("VmPTE:"), field("VmHWM:"))
}

/// Process CPU time (user + system) so far, in ms.
fn cpu_ms() -> f64 {
    // SAFETY: getrusage fills a struct we own.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let ms = |t: libc::timeval| t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3;
    ms(usage.ru_utime) + ms(usage.ru_stime)
}

fn main() {
    let mut tasks = 1_000_000usize;
    let mut mode = "idle".to_string();
    let mut settle_ms = 2000u64;
    let mut policy = "default".to_string();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().expect("missing value");
        match arg.as_str() {
            "--tasks" => tasks = value().replace('_', "").parse().expect("--tasks"),
            "--mode" => mode = value(),
            "--settle-ms" => settle_ms = value().parse().expect("--settle-ms"),
            "--policy" => policy = value(),
            other => panic!("unknown argument {other:?}"),
        }
    }
    let policy = match policy.as_str() {
        "never" => weft::stack::StackPolicy::never(),
        "eager" => weft::stack::StackPolicy::eager(),
        _ => weft::stack::StackPolicy::default(),
    };
    let runtime = weft::Runtime::builder()
        .stack_policy(policy)
        .build()
        .expect("runtime");
    let report = runtime.block_on(move || run(tasks, &mode, settle_ms, policy));
    println!("{report}");
}

fn run(tasks: usize, mode: &str, settle_ms: u64, policy: weft::stack::StackPolicy) -> String {
    let gate = Arc::new(Gate {
        open: AtomicBool::new(false),
        parked: AtomicUsize::new(0),
        waiters: Mutex::new(Vec::with_capacity(tasks)),
    });
    let mut handles = Vec::with_capacity(tasks);
    let before = status();
    let start = Instant::now();
    let touch = match mode {
        "8k" => 1,
        "64k" => 2,
        _ => 0,
    };
    for _ in 0..tasks {
        let gate = gate.clone();
        handles.push(weft::spawn(move || {
            match touch {
                1 => {
                    black_box(use_stack::<8192>());
                }
                2 => {
                    black_box(use_stack::<65536>());
                }
                _ => {}
            }
            gate.wait();
        }));
    }
    while gate.parked.load(Ordering::Acquire) < tasks {
        weft::time::sleep(Duration::from_millis(1));
    }
    let all_parked = start.elapsed();
    let spawn_cpu = cpu_ms();
    let parked = status();
    weft::time::sleep(Duration::from_millis(settle_ms));
    let settled = status();
    let counters = weft::stack::counters();
    let open_start = Instant::now();
    gate.open();
    for handle in handles {
        handle.join().expect("task panicked");
    }
    let joined = open_start.elapsed();
    let after_join = weft::stack::counters();
    let n = tasks.max(1) as f64;
    let per = |s: (u64, u64, u64)| {
        (
            s.0.saturating_sub(before.0) as f64 / n,
            s.1.saturating_sub(before.1) as f64 / n,
        )
    };
    let (prss, ppte) = per(parked);
    let (srss, spte) = per(settled);
    eprintln!(
        "stack_settle: {tasks} tasks, mode {mode}, stack mode: {}",
        weft::stack::mode()
    );
    eprintln!("  policy                     {policy:?}");
    eprintln!(
        "  spawned until all parked   {:>10.1} ms ({spawn_cpu:.0} ms CPU since start)",
        all_parked.as_secs_f64() * 1e3
    );
    eprintln!(
        "  parked:  RSS {prss:>8.0} B + PTE {ppte:>6.0} B = {:>8.0} B per task",
        prss + ppte
    );
    eprintln!(
        "  settled: RSS {srss:>8.0} B + PTE {spte:>6.0} B = {:>8.0} B per task (after {settle_ms} ms)",
        srss + spte
    );
    eprintln!(
        "  peak RSS                   {:>10.1} MiB",
        settled.2 as f64 / 1048576.0
    );
    eprintln!("  counters                   {counters:?}");
    eprintln!(
        "  gate open → all joined     {:>10.1} ms",
        joined.as_secs_f64() * 1e3
    );
    eprintln!("  counters after the joins   {after_join:?}");
    format!(
        "{{\"tasks\":{tasks},\"mode\":\"{mode}\",\"stack_mode\":\"{}\",\"spawn_ms\":{:.1},\"spawn_cpu_ms\":{spawn_cpu:.0},\
         \"parked_rss_bytes_per_task\":{prss:.0},\"parked_pte_bytes_per_task\":{ppte:.0},\
         \"settled_rss_bytes_per_task\":{srss:.0},\"settled_pte_bytes_per_task\":{spte:.0},\
         \"peak_rss_bytes\":{},\"join_ms\":{:.1}}}",
        weft::stack::mode(),
        all_parked.as_secs_f64() * 1e3,
        settled.2,
        joined.as_secs_f64() * 1e3
    )
}
