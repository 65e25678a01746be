//! `weft-bench wake`: what waking a compacted task costs against waking one whose stack is
//! resident — wake latency (unpark → the task runs, one wake at a time, p50/p99) and CPU per
//! wake (the rest woken at once, process CPU time ÷ tasks).
//!
//! Each run parks 2 × N tasks on one worker under one stack policy (`StackPolicy::never()`:
//! resident; `StackPolicy::eager()`: compacted, waited for through
//! `weft::stack::counters().compacted_tasks`), then wakes N of them one by one (200 µs apart,
//! so the worker goes idle between wakes as a sleeping server's would) and the other N at
//! once. Their CPU is read when the last has run, and again after `EXIT_CLEANUP` (600 ms).
//! The two policies alternate run by run, each in a fresh process. Where this process cannot
//! compact (`weft::stack::mode()` is not `compact`, e.g. `WEFT_STACK_COMPACTION=off` or no
//! userfaultfd), the compacted runs fail with the mode as their reason.
//!
//! A third program, `kernel-fill`, alternates with them and runs no weft at all: it does
//! what the kernel does for each restore — one `UFFDIO_COPY` of a page into the top page of
//! a 256 KiB slot whose page and page table were released as long before as the compacted
//! run's, slot after slot — and reports its CPU per fill. So the compacted wake's extra CPU
//! splits, in the same run, into the kernel's fill (which weft cannot make cheaper: the page
//! must be allocated, charged and copied, and one fill in eight allocates a page-table page)
//! and weft's own part.
//!
//! Owns: the experiment and its peer (`weft-bench peer wake`, [`PeerArgs`]).
//! May call: weft, `runner`, `report`. Called by: `cli/mod.rs`, `peer.rs`.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use weft::stack::StackPolicy;

use crate::args;
use crate::cli::report::{table, Section};
use crate::cli::runner::{self, Cmd, Ctx, Program};

/// The stack policy of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Policy {
    Resident,
    Compacted,
    /// No weft: the kernel's page fills alone (see the module doc).
    KernelFill,
}

/// One run, `weft-bench peer wake …`.
#[derive(Debug, Clone, clap::Args)]
pub struct PeerArgs {
    #[arg(long, value_enum)]
    pub policy: Policy,
    /// Tasks woken one by one; as many again are woken all at once.
    #[arg(long, default_value_t = 20_000)]
    pub tasks: usize,
}

struct Shared {
    tasks: Mutex<Vec<weft::task::Task>>,
    parked: AtomicUsize,
    woken: AtomicUsize,
    /// ns since `epoch` when the task last woken ran.
    ran_at: AtomicU64,
    epoch: Instant,
}

/// Runs one policy and returns its figures.
pub fn peer(a: PeerArgs) -> Result<Value, String> {
    let n = a.tasks.max(1);
    if a.policy == Policy::KernelFill {
        return kernel_fill(n);
    }
    let compacted = a.policy == Policy::Compacted;
    let policy = if compacted {
        StackPolicy::eager()
    } else {
        StackPolicy::never()
    };
    let rt = weft::Runtime::builder()
        .workers(1)
        .stack_policy(policy)
        .build()
        .map_err(|e| format!("weft runtime: {e}"))?;
    let mode = weft::stack::mode();
    if compacted && !matches!(mode, weft::stack::StackMode::Compact) {
        return Err(format!("cannot compact: stack mode is {mode}"));
    }
    let shared = Arc::new(Shared {
        tasks: Mutex::new(Vec::new()),
        parked: AtomicUsize::new(0),
        woken: AtomicUsize::new(0),
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
            if start.elapsed() > Duration::from_secs(30) {
                // The tasks stay parked: leave without unwinding them.
                eprintln!("weft-bench: wake: the tasks were not compacted within 30 s");
                std::process::exit(1);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    } else {
        std::thread::sleep(Duration::from_millis(50));
    }
    let settle_ms = start.elapsed().as_secs_f64() * 1e3;
    let tasks = std::mem::take(&mut *shared.tasks.lock().unwrap());
    let (one_by_one, all_at_once) = tasks.split_at(n);
    shared.woken.store(1, Ordering::Release);
    let mut latencies = Vec::with_capacity(n);
    for (i, task) in one_by_one.iter().enumerate() {
        let at = shared.epoch.elapsed().as_nanos() as u64;
        task.unpark();
        while shared.woken.load(Ordering::Acquire) < i + 2 {
            std::hint::spin_loop();
        }
        let ran = shared.ran_at.load(Ordering::Acquire);
        latencies.push(ran.saturating_sub(at) as f64);
        let pause = Instant::now();
        while pause.elapsed() < Duration::from_micros(200) {
            std::hint::spin_loop();
        }
    }
    let cpu0 = crate::cpu_time();
    for task in all_at_once {
        task.unpark();
    }
    while shared.woken.load(Ordering::Acquire) < 2 * n + 1 {
        std::thread::sleep(Duration::from_micros(100));
    }
    let cpu = (crate::cpu_time() - cpu0).as_nanos() as f64 / n as f64;
    std::thread::sleep(EXIT_CLEANUP);
    let cpu_with_cleanup = (crate::cpu_time() - cpu0).as_nanos() as f64 / n as f64;
    for h in handles {
        h.join().map_err(|_| "a woken task panicked".to_string())?;
    }
    latencies.sort_by(f64::total_cmp);
    Ok(json!({
        "tasks": n,
        "policy": if compacted { "compacted" } else { "resident" },
        "stack_mode": mode.to_string(),
        "settle_ms": settle_ms,
        "p50_ns": crate::percentile(&latencies, 50.0),
        "p99_ns": crate::percentile(&latencies, 99.0),
        "cpu_ns_per_wake": cpu,
        "cpu_ns_per_wake_with_cleanup": cpu_with_cleanup,
    }))
}

/// How long a run goes on measuring CPU after its last woken task ran, so that both policies'
/// figures include the cleanup after their tasks' exits: the finished tasks' warm slots go
/// back to the kernel 128 every 1.25 ms (stack/mod.rs, "Warm slots"), 20,000 in ≈0.2 s, and
/// a run that took longer to wake its tasks has done more of it by their last wake. Measured
/// here, ×3 each: resident runs 0.7–1.0 µs a wake until the last ran, 2.3–2.7 µs with the
/// cleanup; compacted runs 2.5–3.9 µs, 3.4–5.0 µs.
const EXIT_CLEANUP: Duration = Duration::from_millis(600);

/// `linux/userfaultfd.h`, x86_64 and aarch64 alike (the ioctl numbers encode the sizes).
const UFFDIO_API: libc::c_ulong = 0xc018_aa3f;
const UFFDIO_REGISTER: libc::c_ulong = 0xc020_aa00;
const UFFDIO_COPY: libc::c_ulong = 0xc028_aa03;
const UFFD_API: u64 = 0xaa;
const UFFD_FEATURE_PAGEFAULT_FLAG_WP: u64 = 1;
const UFFDIO_REGISTER_MODE_MISSING: u64 = 1;
const UFFDIO_REGISTER_MODE_WP: u64 = 2;

/// The kernel's part of `n` restores, without weft: a region of `n` slots of the default
/// size, registered with a userfaultfd as weft's are (missing pages, and write-protection
/// where the kernel has it); each slot's top page filled once, as a spawn leaves it; the
/// whole region released, page tables included, as compactions leave it; then one
/// `UFFDIO_COPY` of a hot source page into each slot's top page, in slot order, timed.
fn kernel_fill(n: usize) -> Result<Value, String> {
    let os_err = |what: &str| format!("{what}: {}", std::io::Error::last_os_error());
    let slot = weft::stack::DEFAULT_STACK_SIZE;
    let window = 2usize << 20;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let len = n * slot;
    // SAFETY: a new private anonymous mapping; nothing else refers to it.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len + window,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if map == libc::MAP_FAILED {
        return Err(os_err("mmap"));
    }
    // Slots start on a page-table boundary, as weft's regions do.
    let base = (map as usize).next_multiple_of(window);
    // A page-aligned source page, hot in cache as a restore's scratch buffer is.
    let buffer = vec![0x5au8; 2 * page];
    let source = (buffer.as_ptr() as usize).next_multiple_of(page);
    // SAFETY: plain syscall; the descriptor is closed below.
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | libc::O_NONBLOCK) }
        as libc::c_int;
    if fd < 0 {
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(map, len + window) };
        return Err(os_err("userfaultfd"));
    }
    let result = (|| {
        let ioctl = |request: libc::c_ulong, arg: *mut u64| {
            // SAFETY: each request's argument is the `u64` array of its struct, built below.
            (unsafe { libc::ioctl(fd, request, arg) } == 0)
        };
        let mut api = [UFFD_API, UFFD_FEATURE_PAGEFAULT_FLAG_WP, 0];
        if !ioctl(UFFDIO_API, api.as_mut_ptr()) {
            return Err(os_err("UFFDIO_API"));
        }
        let both = UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP;
        let mut register = [base as u64, len as u64, both, 0];
        if !ioctl(UFFDIO_REGISTER, register.as_mut_ptr()) {
            register = [base as u64, len as u64, UFFDIO_REGISTER_MODE_MISSING, 0];
            if !ioctl(UFFDIO_REGISTER, register.as_mut_ptr()) {
                return Err(os_err("UFFDIO_REGISTER"));
            }
        }
        let top = |i: usize| base + (i + 1) * slot - page;
        let fill = |i: usize| {
            let mut copy = [top(i) as u64, source as u64, page as u64, 0, 0];
            if ioctl(UFFDIO_COPY, copy.as_mut_ptr()) {
                Ok(())
            } else {
                Err(os_err("UFFDIO_COPY"))
            }
        };
        for i in 0..n {
            fill(i)?;
        }
        // SAFETY: the region made above; only its contents go.
        if unsafe { libc::madvise(base as *mut libc::c_void, len, libc::MADV_DONTNEED) } != 0 {
            return Err(os_err("madvise"));
        }
        // As long as a compacted run's tasks stay released before their all-at-once wake
        // (its one-by-one phase, 200 µs a task at least): in a VM that reports free pages to
        // its host, pages freed seconds ago are the host's again and cost more to fill
        // (measured here: ≈2.0 µs a fill after 5 s, ≈1.35 µs at once).
        std::thread::sleep(Duration::from_micros(200) * n as u32);
        // CPU only: there is no wake to time.
        let cpu0 = crate::cpu_time();
        for i in 0..n {
            fill(i)?;
        }
        let cpu = (crate::cpu_time() - cpu0).as_nanos() as f64 / n as f64;
        Ok(json!({
            "tasks": n,
            "policy": KERNEL_FILL,
            "cpu_ns_per_wake": cpu,
            "cpu_ns_per_wake_with_cleanup": cpu,
        }))
    })();
    // SAFETY: our descriptor and mapping, used by nothing else now.
    unsafe {
        libc::close(fd);
        libc::munmap(map, len + window);
    }
    result
}

/// The name of the `kernel-fill` program in the table (it has no ratio to the resident runs).
const KERNEL_FILL: &str = "kernel-fill";

const COLUMNS: [(&str, &str); 4] = [
    ("p50_ns", "wake latency p50 ns"),
    ("p99_ns", "wake latency p99 ns"),
    (
        "cpu_ns_per_wake",
        "CPU per wake ns (all at once), until the last ran",
    ),
    (
        "cpu_ns_per_wake_with_cleanup",
        "the same with the exits' cleanup",
    ),
];

/// Runs the experiment and returns its section.
pub fn run(ctx: &mut Ctx) -> Result<Section, String> {
    let n = ctx.size.pick(20_000, 5000, 200);
    let pb = runner::bar(ctx, "wake", 3 * (ctx.runs + 1));
    let me = |policy: &str| Cmd::me(&args!["wake", "--policy", policy, "--tasks", n]);
    let programs = vec![
        Program::command("resident", me("resident")),
        Program::command("compacted", me("compacted")),
        Program::command(KERNEL_FILL, me(KERNEL_FILL)),
    ];
    let outcomes = runner::alternate(ctx, &pb, "wake", json!({"tasks": n}), programs);
    pb.finish_and_clear();
    let resident = &outcomes[0];
    let mut head = vec!["stack of the woken task"];
    head.extend(COLUMNS.iter().map(|(_, h)| *h));
    head.extend([
        "compacted / resident: p50",
        "compacted / resident: CPU with the cleanup",
    ]);
    let rows: Vec<Vec<String>> = outcomes
        .iter()
        .map(|o| {
            let mut r = vec![o.peer.to_string()];
            r.extend(o.cells(COLUMNS.iter().map(|(key, _)| *key)));
            for key in ["p50_ns", "cpu_ns_per_wake_with_cleanup"] {
                r.push(if o.peer == KERNEL_FILL {
                    String::new()
                } else {
                    o.ratio_cell(resident, key)
                });
            }
            r
        })
        .collect();
    let intro = format!(
        "weft alone, one worker: {n} tasks woken one at a time (200 µs apart), {n} more all \
         at once; resident (`StackPolicy::never()`) and compacted (`StackPolicy::eager()`) \
         alternate run by run with `kernel-fill`: no weft, one `UFFDIO_COPY` of a page into \
         each of {n} released 256 KiB slots, the kernel's part of a restore.\n\n"
    );
    let median = |o: &runner::Outcome| o.summary("cpu_ns_per_wake_with_cleanup").map(|s| s.median);
    let split = match (
        median(&outcomes[0]),
        median(&outcomes[1]),
        median(&outcomes[2]),
    ) {
        (Some(resident), Some(compacted), Some(fill)) => {
            let own = compacted - resident - fill;
            // A difference of three medians: below zero it is only the runs' noise.
            let own = if own < 0.0 {
                format!("within the runs' noise ({own:.0} ns)")
            } else {
                format!("{own:.0} ns")
            };
            format!(
                "\n\nExtra CPU of a compacted wake (medians with the exits' cleanup, compacted \
                 − resident): {:.0} ns; the kernel's page fill alone: {fill:.0} ns; weft's own \
                 part: {own}.\n",
                compacted - resident,
            )
        }
        _ => String::new(),
    };
    let markdown = intro + &table(&head, &rows) + &split;
    Ok(Section {
        name: "wake".into(),
        title: "Waking a compacted task".into(),
        ran: String::new(),
        markdown: markdown.clone(),
        summary: markdown,
        charts: Vec::new(),
        raw: Vec::new(),
    })
}
