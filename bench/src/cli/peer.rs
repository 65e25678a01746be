//! The Rust peers: weft, tokio and std threads, one measurement per process.
//!
//! Owns: the hidden `weft-bench peer …` subcommands. Each runs one measurement in a fresh
//! process and prints one JSON line; the experiments ([`crate::cli::probe`] and the others)
//! start them through [`crate::cli::runner`], next to the Go peers under `bench/go/`, which
//! print the same fields. `sleepers`, `fairness`, `wake` and `bridge` keep their peers beside
//! their experiments (`sleepers.rs`, `fairness.rs`, `wake.rs`, `bridge.rs`); their variants
//! here only dispatch.
//!
//! May call: weft, tokio, std, weft-loadtest (the echo client), `uring_echo` (the io_uring
//! echo server). Called by: the CLI only.
//!
//! Why one process per measurement: memory is measured as the growth of this process's RSS
//! and page tables, which nothing else may have touched; and the runner alternates peers run
//! by run (see `runner.rs`).

use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use clap::{Subcommand, ValueEnum};
use serde_json::{json, Value};

/// A Rust peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Runtime {
    Weft,
    Tokio,
    Threads,
}

/// An echo server: the Rust peers, and `uring`, the io_uring floor with no runtime
/// (`uring_echo.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EchoRuntime {
    Weft,
    Tokio,
    Threads,
    Uring,
}

/// How much stack each parked unit used before it parked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    Idle,
    #[value(name = "8k")]
    Touch8k,
    #[value(name = "64k")]
    Touch64k,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Idle => "idle",
            Mode::Touch8k => "8k",
            Mode::Touch64k => "64k",
        }
    }
}

/// The hidden `peer` subcommands.
#[derive(Debug, Subcommand)]
pub enum Peer {
    /// N units parked: memory when all are parked and after settling.
    Probe {
        #[arg(long, value_enum)]
        runtime: Runtime,
        #[arg(long)]
        tasks: usize,
        #[arg(long, value_enum)]
        mode: Mode,
        /// How long the units stay parked before the second reading.
        #[arg(long, default_value_t = 200)]
        settle_ms: u64,
    },
    /// Rounds of N spawns in one runtime: detached units that bump a counter, the last one
    /// waking the spawner (`complete`), or N units each joined by its handle (`join`).
    Spawn {
        #[arg(long, value_enum)]
        runtime: Runtime,
        #[arg(long)]
        n: usize,
        #[arg(long, value_enum, default_value_t = SpawnCase::Complete)]
        case: SpawnCase,
        /// Rounds in this process; `ns` is their median, `first_ns` the first one's figure.
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// Workers (default: the runtime's).
        #[arg(long)]
        workers: Option<usize>,
    },
    /// Send then receive on one unit, capacity 1.
    Sendrecv {
        #[arg(long, value_enum)]
        runtime: Runtime,
        #[arg(long)]
        n: u64,
    },
    /// Two units bounce a value over rendezvous channels.
    Pingpong {
        #[arg(long, value_enum)]
        runtime: Runtime,
        #[arg(long)]
        workers: usize,
        #[arg(long)]
        n: u64,
    },
    /// weft's `max_threads`: more blocking calls than threads allowed.
    Threadlimit {
        #[arg(long, default_value_t = 10)]
        limit: usize,
    },
    /// An echo server on `addr` (port 0: any); prints `echo: listening on ADDR`.
    EchoServer {
        #[arg(long, value_enum)]
        runtime: EchoRuntime,
        #[arg(long, default_value = "127.0.0.1:0")]
        addr: String,
        /// `uring` only: its threads, each with its own ring and listener (default: one
        /// per CPU).
        #[arg(long)]
        threads: Option<usize>,
    },
    /// The echo load client (weft-loadtest's library), with its arguments.
    Loadtest {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// N units sleeping until random deadlines (`sleepers.rs`).
    Sleepers(crate::cli::sleepers::PeerArgs),
    /// One fairness scenario on one worker (`fairness.rs`).
    Fairness(crate::cli::fairness::PeerArgs),
    /// Wakes of resident or compacted tasks (`wake.rs`).
    Wake(crate::cli::wake::PeerArgs),
    /// Requests through the tokio bridge and its peers (`bridge.rs`).
    Bridge(crate::cli::bridge::PeerArgs),
    /// Every request a new task running the growth chain.
    Growth {
        #[arg(long, value_enum)]
        runtime: Runtime,
        #[arg(long)]
        requests: usize,
        #[arg(long, default_value_t = 64)]
        inflight: usize,
    },
}

/// Runs a peer subcommand; prints its JSON line.
pub fn main(peer: Peer) -> Result<(), String> {
    let line = match peer {
        Peer::Probe {
            runtime,
            tasks,
            mode,
            settle_ms,
        } => probe(runtime, tasks, mode, Duration::from_millis(settle_ms)),
        Peer::Spawn {
            runtime,
            n,
            case,
            rounds,
            workers,
        } => spawn_rounds(runtime, case, n.max(1), rounds.max(1), workers),
        Peer::Sendrecv { runtime, n } => json!({"ns": sendrecv(runtime, n.max(1))}),
        Peer::Pingpong {
            runtime,
            workers,
            n,
        } => json!({"ns": pingpong(runtime, workers, n.max(1)), "workers": workers}),
        Peer::Threadlimit { limit } => threadlimit(limit),
        Peer::EchoServer {
            runtime,
            addr,
            threads,
        } => return echo_server(runtime, &addr, threads),
        Peer::Loadtest { args } => return loadtest(args),
        Peer::Growth {
            runtime,
            requests,
            inflight,
        } => growth(runtime, requests.max(1), inflight.max(1)),
        Peer::Sleepers(a) => crate::cli::sleepers::peer(a)?,
        Peer::Fairness(a) => crate::cli::fairness::peer(a)?,
        Peer::Wake(a) => crate::cli::wake::peer(a)?,
        Peer::Bridge(a) => crate::cli::bridge::peer(a)?,
    };
    println!("{line}");
    Ok(())
}

fn weft_runtime(workers: Option<usize>) -> weft::Runtime {
    let mut b = weft::Runtime::builder();
    if let Some(w) = workers {
        b = b.workers(w);
    }
    b.build().expect("weft runtime")
}

fn tokio_runtime(workers: Option<usize>) -> tokio::runtime::Runtime {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    if let Some(w) = workers {
        b.worker_threads(w);
    }
    b.enable_all().build().expect("tokio runtime")
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

fn touch(mode: Mode) {
    match mode {
        Mode::Idle => {}
        Mode::Touch8k => {
            black_box(use_stack::<8192>());
        }
        Mode::Touch64k => {
            black_box(use_stack::<65536>());
        }
    }
}

#[derive(Clone, Copy)]
struct Mem {
    rss: f64,
    pte: f64,
}

fn mem() -> Mem {
    Mem {
        rss: crate::status_bytes("VmRSS") as f64,
        pte: crate::status_bytes("VmPTE") as f64,
    }
}

fn probe_line(
    n: usize,
    mode: Mode,
    spawn: Duration,
    before: Mem,
    parked: Mem,
    settled: Mem,
) -> Value {
    let n = n.max(1) as f64;
    json!({
        "tasks": n,
        "mode": mode.name(),
        "spawn_ms": spawn.as_secs_f64() * 1e3,
        "rss_bytes_per_task": (parked.rss - before.rss) / n,
        "pte_bytes_per_task": (parked.pte - before.pte) / n,
        "settled_rss_bytes_per_task": (settled.rss - before.rss) / n,
        "settled_pte_bytes_per_task": (settled.pte - before.pte) / n,
        "peak_rss_bytes": crate::status_bytes("VmHWM"),
    })
}

fn probe(runtime: Runtime, n: usize, mode: Mode, settle: Duration) -> Value {
    match runtime {
        Runtime::Weft => weft_runtime(None).block_on(move || {
            let gate = Arc::new(weft::sync::WaitGroup::new());
            gate.add(1);
            let parked = Arc::new(AtomicUsize::new(0));
            let mut handles = Vec::with_capacity(n);
            let before = mem();
            let start = Instant::now();
            for _ in 0..n {
                let (gate, parked) = (gate.clone(), parked.clone());
                handles.push(weft::spawn(move || {
                    touch(mode);
                    parked.fetch_add(1, Ordering::Release);
                    gate.wait();
                }));
            }
            while parked.load(Ordering::Acquire) < n {
                weft::time::sleep(Duration::from_millis(1));
            }
            let spawn = start.elapsed();
            let at_parked = mem();
            weft::time::sleep(settle);
            let settled = mem();
            gate.done();
            for h in handles {
                h.join().expect("task");
            }
            probe_line(n, mode, spawn, before, at_parked, settled)
        }),
        Runtime::Tokio => tokio_runtime(None).block_on(async move {
            let (tx, rx) = tokio::sync::watch::channel(false);
            let parked = Arc::new(AtomicUsize::new(0));
            let mut handles = Vec::with_capacity(n);
            let before = mem();
            let start = Instant::now();
            for _ in 0..n {
                let (mut rx, parked) = (rx.clone(), parked.clone());
                handles.push(tokio::spawn(async move {
                    // A future keeps what it holds across an await: the buffer is its state.
                    let held: Option<Box<[u8]>> = match mode {
                        Mode::Idle => None,
                        Mode::Touch8k => Some(black_box(vec![1u8; 8192]).into()),
                        Mode::Touch64k => Some(black_box(vec![1u8; 65536]).into()),
                    };
                    parked.fetch_add(1, Ordering::Release);
                    let _ = rx.changed().await;
                    black_box(held);
                }));
            }
            while parked.load(Ordering::Acquire) < n {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let spawn = start.elapsed();
            let at_parked = mem();
            tokio::time::sleep(settle).await;
            let settled = mem();
            let _ = tx.send(true);
            for h in handles {
                h.await.expect("task");
            }
            probe_line(n, mode, spawn, before, at_parked, settled)
        }),
        Runtime::Threads => {
            let gate = Arc::new((Mutex::new(false), Condvar::new()));
            let parked = Arc::new(AtomicUsize::new(0));
            let mut handles = Vec::with_capacity(n);
            let before = mem();
            let start = Instant::now();
            for _ in 0..n {
                let (gate, parked) = (gate.clone(), parked.clone());
                handles.push(std::thread::spawn(move || {
                    touch(mode);
                    parked.fetch_add(1, Ordering::Release);
                    let (lock, cv) = &*gate;
                    let mut open = lock.lock().unwrap();
                    while !*open {
                        open = cv.wait(open).unwrap();
                    }
                }));
            }
            while parked.load(Ordering::Acquire) < n {
                std::thread::sleep(Duration::from_millis(1));
            }
            let spawn = start.elapsed();
            let at_parked = mem();
            std::thread::sleep(settle);
            let settled = mem();
            *gate.0.lock().unwrap() = true;
            gate.1.notify_all();
            for h in handles {
                h.join().expect("thread");
            }
            probe_line(n, mode, spawn, before, at_parked, settled)
        }
    }
}

/// What a spawn round waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SpawnCase {
    /// Detached units that bump a counter; the last one wakes the spawner.
    Complete,
    /// Every unit's handle joined, in spawn order.
    Join,
    /// Detached units that each hold a clone of one channel `Sender` and drop it; the
    /// spawner's receive ends when the last is gone (Go: `go func(){ wg.Done() }()`).
    Sender,
}

/// `rounds` rounds of `n` spawns in one runtime (threads: `n` threads spawned and joined
/// in either case), like the spawn programs the figures were first published from: `ns` is
/// the median round, `first_ns` the first round of this fresh process, whose units are the
/// first to touch the runtime's stacks and task memory.
fn spawn_rounds(
    runtime: Runtime,
    case: SpawnCase,
    n: usize,
    rounds: usize,
    workers: Option<usize>,
) -> Value {
    let per = move |d: Duration| d.as_nanos() as f64 / n as f64;
    let all: Vec<f64> = match runtime {
        Runtime::Weft => weft_runtime(workers).block_on(move || {
            (0..rounds)
                .map(|_| per(weft_spawn_round(case, n)))
                .collect()
        }),
        Runtime::Tokio => tokio_runtime(workers).block_on(async move {
            let mut all = Vec::with_capacity(rounds);
            for _ in 0..rounds {
                all.push(per(tokio_spawn_round(case, n).await));
            }
            all
        }),
        Runtime::Threads => (0..rounds).map(|_| per(threads_spawn_round(n))).collect(),
    };
    let first = all[0];
    let mut sorted = all.clone();
    json!({
        "ns": crate::median(&mut sorted),
        "first_ns": first,
        "rounds_ns": all,
        "case": format!("{case:?}").to_lowercase(),
    })
}

fn weft_spawn_round(case: SpawnCase, n: usize) -> Duration {
    let start = Instant::now();
    match case {
        SpawnCase::Join => {
            let handles: Vec<_> = (0..n).map(|_| weft::spawn(|| {})).collect();
            for h in handles {
                h.join().expect("task");
            }
        }
        SpawnCase::Complete => {
            let count = Arc::new(AtomicUsize::new(0));
            let me = weft::task::current();
            for _ in 0..n {
                let (count, me) = (count.clone(), me.clone());
                // Detached: the handle is dropped at once.
                weft::spawn(move || {
                    if count.fetch_add(1, Ordering::AcqRel) + 1 == n {
                        me.unpark();
                    }
                });
            }
            while count.load(Ordering::Acquire) < n {
                weft::task::park();
            }
        }
        SpawnCase::Sender => {
            let (tx, rx) = weft::chan::bounded::<()>(0);
            for _ in 0..n {
                let tx = tx.clone();
                weft::spawn(move || drop(tx));
            }
            drop(tx);
            assert!(rx.recv().is_err(), "nothing is sent");
        }
    }
    start.elapsed()
}

async fn tokio_spawn_round(case: SpawnCase, n: usize) -> Duration {
    let start = Instant::now();
    match case {
        SpawnCase::Join => {
            let handles: Vec<_> = (0..n).map(|_| tokio::spawn(async {})).collect();
            for h in handles {
                h.await.expect("task");
            }
        }
        SpawnCase::Complete => {
            let count = Arc::new(AtomicUsize::new(0));
            let done = Arc::new(tokio::sync::Notify::new());
            for _ in 0..n {
                let (count, done) = (count.clone(), done.clone());
                tokio::spawn(async move {
                    if count.fetch_add(1, Ordering::AcqRel) + 1 == n {
                        done.notify_one();
                    }
                });
            }
            done.notified().await;
        }
        SpawnCase::Sender => {
            let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
            for _ in 0..n {
                let tx = tx.clone();
                tokio::spawn(async move { drop(tx) });
            }
            drop(tx);
            assert!(rx.recv().await.is_none(), "nothing is sent");
        }
    }
    start.elapsed()
}

fn threads_spawn_round(n: usize) -> Duration {
    let count = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let count = count.clone();
            std::thread::spawn(move || {
                count.fetch_add(1, Ordering::AcqRel);
            })
        })
        .collect();
    for h in handles {
        h.join().expect("thread");
    }
    start.elapsed()
}

/// ns per send + receive on one unit over a channel of capacity 1.
pub fn sendrecv(runtime: Runtime, n: u64) -> f64 {
    let per = move |d: Duration| d.as_nanos() as f64 / n as f64;
    match runtime {
        Runtime::Weft => weft_runtime(Some(1)).block_on(move || {
            let (tx, rx) = weft::chan::bounded::<u64>(1);
            let start = Instant::now();
            for i in 0..n {
                tx.send(i).unwrap();
                black_box(rx.recv().unwrap());
            }
            per(start.elapsed())
        }),
        Runtime::Tokio => tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("tokio runtime")
            .block_on(async move {
                let (tx, mut rx) = tokio::sync::mpsc::channel::<u64>(1);
                let start = Instant::now();
                for i in 0..n {
                    tx.send(i).await.unwrap();
                    black_box(rx.recv().await.unwrap());
                }
                per(start.elapsed())
            }),
        Runtime::Threads => {
            let (tx, rx) = std::sync::mpsc::sync_channel::<u64>(1);
            let start = Instant::now();
            for i in 0..n {
                tx.send(i).unwrap();
                black_box(rx.recv().unwrap());
            }
            per(start.elapsed())
        }
    }
}

/// Pins the calling thread to CPU 0 (threads' "1 worker" ping-pong).
fn pin_to_cpu0() {
    // SAFETY: the set is a plain bit mask on this stack; sched_setaffinity only reads it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// ns per round trip of two units over rendezvous channels, on `workers` workers.
pub fn pingpong(runtime: Runtime, workers: usize, n: u64) -> f64 {
    let per = move |d: Duration| d.as_nanos() as f64 / n as f64;
    match runtime {
        Runtime::Weft => weft_runtime(Some(workers)).block_on(move || {
            let (ping_tx, ping_rx) = weft::chan::bounded::<u64>(0);
            let (pong_tx, pong_rx) = weft::chan::bounded::<u64>(0);
            let echo = weft::spawn(move || {
                for v in ping_rx.iter() {
                    pong_tx.send(v).unwrap();
                }
            });
            for i in 0..1000 {
                ping_tx.send(i).unwrap();
                pong_rx.recv().unwrap();
            }
            let start = Instant::now();
            for i in 0..n {
                ping_tx.send(i).unwrap();
                pong_rx.recv().unwrap();
            }
            let ns = per(start.elapsed());
            drop(ping_tx);
            echo.join().unwrap();
            ns
        }),
        Runtime::Tokio => tokio_runtime(Some(workers)).block_on(async move {
            // tokio has no rendezvous channel: mpsc of capacity 1 is the closest.
            tokio::spawn(async move {
                let (ping_tx, mut ping_rx) = tokio::sync::mpsc::channel::<u64>(1);
                let (pong_tx, mut pong_rx) = tokio::sync::mpsc::channel::<u64>(1);
                let echo = tokio::spawn(async move {
                    while let Some(v) = ping_rx.recv().await {
                        pong_tx.send(v).await.unwrap();
                    }
                });
                for i in 0..1000 {
                    ping_tx.send(i).await.unwrap();
                    pong_rx.recv().await.unwrap();
                }
                let start = Instant::now();
                for i in 0..n {
                    ping_tx.send(i).await.unwrap();
                    pong_rx.recv().await.unwrap();
                }
                let ns = per(start.elapsed());
                drop(ping_tx);
                echo.await.unwrap();
                ns
            })
            .await
            .unwrap()
        }),
        Runtime::Threads => {
            if workers == 1 {
                pin_to_cpu0();
            }
            let (ping_tx, ping_rx) = std::sync::mpsc::sync_channel::<u64>(0);
            let (pong_tx, pong_rx) = std::sync::mpsc::sync_channel::<u64>(0);
            let echo = std::thread::spawn(move || {
                if workers == 1 {
                    pin_to_cpu0();
                }
                for v in ping_rx.iter() {
                    pong_tx.send(v).unwrap();
                }
            });
            for i in 0..100 {
                ping_tx.send(i).unwrap();
                pong_rx.recv().unwrap();
            }
            let start = Instant::now();
            for i in 0..n {
                ping_tx.send(i).unwrap();
                pong_rx.recv().unwrap();
            }
            let ns = per(start.elapsed());
            drop(ping_tx);
            echo.join().unwrap();
            ns
        }
    }
}

/// `4 × limit` tasks each ask for a blocking thread at once on a runtime of `limit` threads:
/// the ones past the limit get `max_threads`'s error, and the program goes on.
fn threadlimit(limit: usize) -> Value {
    let rt = weft::Runtime::builder()
        .workers(1)
        .max_threads(limit)
        .build()
        .expect("weft runtime");
    rt.block_on(move || {
        let handles: Vec<_> = (0..4 * limit)
            .map(|_| {
                weft::spawn(|| {
                    weft::task::try_spawn_blocking(|| {
                        std::thread::sleep(Duration::from_millis(200))
                    })
                })
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let error = results
            .iter()
            .find_map(|r| r.as_ref().err())
            .map(|e| e.to_string());
        json!({
            "limit": limit,
            "calls": results.len(),
            "ok": results.iter().filter(|r| r.is_ok()).count(),
            "failed": results.iter().filter(|r| r.is_err()).count(),
            "error": error,
            "survived": true,
        })
    })
}

/// weft's echo server is the `echo` example itself (its `main` is unused here).
#[allow(dead_code)]
#[path = "../../../weft/examples/echo.rs"]
mod weft_echo;

fn echo_server(runtime: EchoRuntime, addr: &str, threads: Option<usize>) -> Result<(), String> {
    match runtime {
        EchoRuntime::Weft => {
            weft_echo::run(addr);
            Ok(())
        }
        EchoRuntime::Uring => crate::cli::uring_echo::serve(addr, threads),
        EchoRuntime::Tokio => {
            weft_loadtest::prepare_fds(1 << 16);
            tokio_runtime(None).block_on(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let listener = tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(|e| format!("echo: cannot listen on {addr}: {e}"))?;
                println!("echo: listening on {}", listener.local_addr().unwrap());
                loop {
                    let Ok((mut stream, _)) = listener.accept().await else {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        continue;
                    };
                    tokio::spawn(async move {
                        let _ = stream.set_nodelay(true);
                        let mut buf = vec![0u8; 16 * 1024];
                        loop {
                            match stream.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => {
                                    if stream.write_all(&buf[..n]).await.is_err() {
                                        return;
                                    }
                                }
                            }
                        }
                    });
                }
            })
        }
        EchoRuntime::Threads => {
            use std::io::{Read, Write};
            weft_loadtest::prepare_fds(1 << 16);
            let listener = std::net::TcpListener::bind(addr)
                .map_err(|e| format!("echo: cannot listen on {addr}: {e}"))?;
            println!("echo: listening on {}", listener.local_addr().unwrap());
            loop {
                let Ok((mut stream, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                std::thread::spawn(move || {
                    let _ = stream.set_nodelay(true);
                    let mut buf = vec![0u8; 16 * 1024];
                    loop {
                        match stream.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                if stream.write_all(&buf[..n]).is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        }
    }
}

fn loadtest(args: Vec<String>) -> Result<(), String> {
    let config = weft_loadtest::parse_args(args)?;
    // weft-loadtest's 32 KiB stacks; a debug build (the tests) needs more.
    let stack = if cfg!(debug_assertions) { 256 } else { 32 } * 1024;
    let report = weft_loadtest::run_bounded(config, stack)?;
    println!("{}", report.text());
    println!("{}", report.json());
    Ok(())
}

/// The growth chain: seven non-inlined frames with 128, 512, 1024, 2600, 4096, 6144 and
/// 3000 bytes of locals (17,504 B), each written and read through `black_box`, like the
/// Go peer's `handle` → `f2` … `f7`.
pub mod chain {
    use std::hint::black_box;

    macro_rules! frame {
        ($name:ident, $size:expr, $next:expr) => {
            #[inline(never)]
            pub fn $name(i: usize) -> usize {
                let mut buf = [0u8; $size];
                black_box(&mut buf);
                buf[i % $size] = i as u8;
                let rest = $next(i + 1);
                rest + black_box(&buf)[(i * 7) % $size] as usize
            }
        };
    }

    #[inline(never)]
    pub fn f7(i: usize) -> usize {
        let mut buf = [0u8; 3000];
        black_box(&mut buf);
        buf[i % 3000] = i as u8;
        black_box(&buf)[(i * 7) % 3000] as usize + 1
    }
    frame!(f6, 6144, f7);
    frame!(f5, 4096, f6);
    frame!(f4, 2600, f5);
    frame!(f3, 1024, f4);
    frame!(f2, 512, f3);
    frame!(handle, 128, f2);
}

fn cpu_seconds() -> f64 {
    crate::cpu_time().as_secs_f64()
}

fn growth_line(n: usize, inflight: usize, elapsed: Duration, cpu: f64, sum: usize) -> Value {
    json!({
        "requests": n,
        "inflight": inflight,
        "seconds": elapsed.as_secs_f64(),
        "requests_per_sec": n as f64 / elapsed.as_secs_f64(),
        "cpu_ns_per_request": cpu * 1e9 / n as f64,
        "checksum": sum,
    })
}

/// `inflight` requests at a time, each a new task that runs the chain and answers on a
/// channel; a new one starts as each answer arrives.
fn growth(runtime: Runtime, n: usize, inflight: usize) -> Value {
    match runtime {
        Runtime::Weft => weft_runtime(None).block_on(move || {
            let (tx, rx) = weft::chan::bounded::<usize>(inflight);
            let serve = |i: usize, tx: weft::chan::Sender<usize>| {
                weft::spawn(move || {
                    let _ = tx.send(chain::handle(i));
                });
            };
            let cpu0 = cpu_seconds();
            let start = Instant::now();
            let mut started = 0;
            while started < inflight.min(n) {
                serve(started, tx.clone());
                started += 1;
            }
            let mut sum = 0;
            for _ in 0..n {
                sum += rx.recv().unwrap();
                if started < n {
                    serve(started, tx.clone());
                    started += 1;
                }
            }
            growth_line(n, inflight, start.elapsed(), cpu_seconds() - cpu0, sum)
        }),
        Runtime::Tokio => tokio_runtime(None).block_on(async move {
            let (tx, mut rx) = tokio::sync::mpsc::channel::<usize>(inflight);
            let serve = |i: usize, tx: tokio::sync::mpsc::Sender<usize>| {
                tokio::spawn(async move {
                    let _ = tx.send(chain::handle(i)).await;
                });
            };
            let cpu0 = cpu_seconds();
            let start = Instant::now();
            let mut started = 0;
            while started < inflight.min(n) {
                serve(started, tx.clone());
                started += 1;
            }
            let mut sum = 0;
            for _ in 0..n {
                sum += rx.recv().await.unwrap();
                if started < n {
                    serve(started, tx.clone());
                    started += 1;
                }
            }
            growth_line(n, inflight, start.elapsed(), cpu_seconds() - cpu0, sum)
        }),
        Runtime::Threads => json!({"error": "no threads peer for growth"}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_growth_chain_answers_like_the_go_peer() {
        // As Go's handle(i): each frame reads back a zero byte unless 6i is a multiple of
        // its size, and f7 adds 1.
        let sum: usize = (0..4).map(chain::handle).sum();
        assert_eq!(sum, 4);
    }
}
