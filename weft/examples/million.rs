//! A million parked tasks and what they cost: weft's main job in one program.
//!
//! ```text
//! cargo run --release --example million -- [--tasks N] [--mode idle|8k|64k] [--settle-ms MS]
//! ```
//!
//! Spawns N tasks. In mode 8k/64k each first calls a function that really uses 8/64 KiB of
//! stack; then every task parks on a shared gate. Memory is measured from /proc/self/status
//! just before the spawn loop, once all tasks are parked, and again after they have stayed
//! parked for `--settle-ms` (default 1000: time for whatever gives parked tasks' memory back);
//! then the gate opens and every task is joined. The table names the stack policy that ran
//! (`weft::metrics`); the last line is one JSON object for machines.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Tasks park here until the gate opens.
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
        // A million wakes take a while: yield now and then, as the monitor advises any long
        // loop, so that the tasks woken onto this worker run meanwhile.
        for (i, task) in waiters.into_iter().enumerate() {
            task.unpark();
            if i % 1024 == 1023 {
                weft::yield_now();
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Mode {
    Idle,
    Touch8k,
    Touch64k,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Idle => "idle",
            Mode::Touch8k => "8k",
            Mode::Touch64k => "64k",
        }
    }
}

/// Really uses `N` bytes of stack: the array is written and read through `black_box`.
#[inline(never)]
fn use_stack<const N: usize>() -> u8 {
    let mut buf = [0u8; N];
    black_box(&mut buf);
    for i in (0..N).step_by(512) {
        buf[i] = i as u8;
    }
    black_box(&buf)[N - 1]
}

#[derive(Clone, Copy, Default)]
struct Status {
    rss: u64,
    pte: u64,
    hwm: u64,
}

fn status() -> Status {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kb| kb.parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    };
    Status {
        rss: field("VmRSS:"),
        pte: field("VmPTE:"),
        hwm: field("VmHWM:"),
    }
}

fn mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps").map_or(0, |m| m.lines().count())
}

struct Args {
    tasks: usize,
    mode: Mode,
    settle: Duration,
}

fn parse_args() -> Result<Args, String> {
    let mut tasks = 1_000_000;
    let mut mode = Mode::Idle;
    let mut settle = Duration::from_millis(1000);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--tasks" => {
                let value = args.next().ok_or("--tasks needs a number")?;
                tasks = value
                    .replace('_', "")
                    .parse()
                    .map_err(|_| format!("bad --tasks {value:?}"))?;
            }
            "--mode" => {
                mode = match args.next().as_deref() {
                    Some("idle") => Mode::Idle,
                    Some("8k") => Mode::Touch8k,
                    Some("64k") => Mode::Touch64k,
                    other => return Err(format!("--mode takes idle, 8k or 64k, not {other:?}")),
                }
            }
            "--settle-ms" => {
                let value = args.next().ok_or("--settle-ms needs a number")?;
                let ms = value
                    .parse()
                    .map_err(|_| format!("bad --settle-ms {value:?}"))?;
                settle = Duration::from_millis(ms);
            }
            "-h" | "--help" => {
                return Err(
                    "usage: million [--tasks N] [--mode idle|8k|64k] [--settle-ms MS]".into(),
                );
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Args {
        tasks,
        mode,
        settle,
    })
}

fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("million: {e}");
            std::process::exit(2);
        }
    };
    let runtime = weft::Runtime::new().expect("weft runtime");
    let report = runtime.block_on(move || run(args));
    println!("{report}");
}

fn run(
    Args {
        tasks,
        mode,
        settle,
    }: Args,
) -> String {
    let gate = Arc::new(Gate {
        open: AtomicBool::new(false),
        parked: AtomicUsize::new(0),
        waiters: Mutex::new(Vec::with_capacity(tasks)),
    });
    let mut handles = Vec::with_capacity(tasks);
    let maps_before = mappings();
    let before = status();
    let start = Instant::now();
    for _ in 0..tasks {
        let gate = gate.clone();
        handles.push(weft::spawn(move || {
            match mode {
                Mode::Idle => {}
                Mode::Touch8k => {
                    black_box(use_stack::<8192>());
                }
                Mode::Touch64k => {
                    black_box(use_stack::<65536>());
                }
            }
            gate.wait();
        }));
    }
    let spawn_loop = start.elapsed();
    while gate.parked.load(Ordering::Acquire) < tasks {
        weft::time::sleep(Duration::from_millis(1));
    }
    let all_parked = start.elapsed();
    let after = status();
    let maps_after = mappings();
    weft::time::sleep(settle);
    let settled = status();
    let snapshot_start = Instant::now();
    let metrics = weft::metrics::snapshot();
    let snapshot_took = snapshot_start.elapsed();

    let open_start = Instant::now();
    gate.open();
    for handle in handles {
        handle.join().expect("task panicked");
    }
    let joined = open_start.elapsed();
    // VmHWM now covers the whole run: the spawn, the parked tasks, and the wake storm of
    // the join, when every compacted task is restored.
    let end = status();

    let n = tasks.max(1) as f64;
    let rss_per_task = after.rss.saturating_sub(before.rss) as f64 / n;
    let pte_per_task = after.pte.saturating_sub(before.pte) as f64 / n;
    let settled_rss = settled.rss.saturating_sub(before.rss) as f64 / n;
    let settled_pte = settled.pte.saturating_sub(before.pte) as f64 / n;
    let guards = match weft::stack::guards_are_markers() {
        Some(true) => "MADV_GUARD_INSTALL markers",
        Some(false) => "mprotect pages",
        None => "none yet",
    };
    eprintln!("weft million: {tasks} tasks, mode {}", mode.name());
    eprintln!(
        "  stack slot                 {:>12} KiB",
        weft::stack::DEFAULT_STACK_SIZE >> 10
    );
    eprintln!("  guard pages                {guards:>12}");
    eprintln!(
        "  stack policy               {:>12}",
        metrics.stack_policy()
    );
    eprintln!(
        "  spawn loop                 {:>12.1} ms",
        spawn_loop.as_secs_f64() * 1e3
    );
    eprintln!(
        "  spawned until all parked   {:>12.1} ms",
        all_parked.as_secs_f64() * 1e3
    );
    eprintln!("  RSS per parked task        {rss_per_task:>12.0} B");
    eprintln!("  page tables per task       {pte_per_task:>12.0} B");
    eprintln!(
        "  RSS + page tables per task {:>12.0} B",
        rss_per_task + pte_per_task
    );
    eprintln!(
        "  settled {:>5} ms: RSS      {settled_rss:>12.0} B",
        settle.as_millis()
    );
    eprintln!("  settled: page tables       {settled_pte:>12.0} B");
    eprintln!(
        "  settled: RSS + page tables {:>12.0} B",
        settled_rss + settled_pte
    );
    eprintln!(
        "  settled: stack bytes/task  {:>12.0} B  (weft::metrics, committed stack ÷ tasks)",
        metrics.stack_bytes_per_task()
    );
    eprintln!(
        "  weft::metrics::snapshot()  {:>12.1} ms",
        snapshot_took.as_secs_f64() * 1e3
    );
    eprintln!(
        "  settled: image bytes/task  {:>12.0} B  (weft::metrics, compacted images ÷ compacted)",
        metrics.image_bytes_per_task()
    );
    eprintln!(
        "  peak RSS, before the join  {:>12.1} MiB",
        settled.hwm as f64 / 1048576.0
    );
    eprintln!("  kernel mappings            {maps_before:>6} → {maps_after}");
    eprintln!(
        "  gate open → all joined     {:>12.1} ms",
        joined.as_secs_f64() * 1e3
    );
    eprintln!(
        "  peak RSS, whole run        {:>12.1} MiB",
        end.hwm as f64 / 1048576.0
    );
    format!(
        "{{\"tasks\":{tasks},\"mode\":\"{}\",\"spawn_ms\":{:.1},\"spawn_loop_ms\":{:.1},\
         \"rss_bytes_per_task\":{rss_per_task:.0},\"pte_bytes_per_task\":{pte_per_task:.0},\
         \"settle_ms\":{},\"settled_rss_bytes_per_task\":{settled_rss:.0},\
         \"settled_pte_bytes_per_task\":{settled_pte:.0},\"stack_bytes_per_task\":{:.0},\
         \"stack_policy\":\"{}\",\"peak_rss_bytes\":{},\"mappings_before\":{maps_before},\
         \"mappings_after\":{maps_after},\"join_ms\":{:.1},\
         \"image_bytes_per_task\":{:.0},\"peak_rss_whole_run_bytes\":{}}}",
        mode.name(),
        all_parked.as_secs_f64() * 1e3,
        spawn_loop.as_secs_f64() * 1e3,
        settle.as_millis(),
        metrics.stack_bytes_per_task(),
        metrics.stack_policy(),
        settled.hwm,
        joined.as_secs_f64() * 1e3,
        metrics.image_bytes_per_task(),
        end.hwm
    )
}
