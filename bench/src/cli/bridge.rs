//! `weft-bench bridge`: what calling async Rust from weft tasks costs (`weft::tokio`), next to
//! the same requests made by tokio tasks and by plain threads with tokio's `Handle::block_on`.
//!
//! A request awaits one tokio timer (`tokio::time::sleep(1 ms)`) or one loopback TCP round trip
//! (32 bytes written, 32 read back, on a connection per unit, against a tokio echo server in
//! its own process). `UNITS` units make requests back to back for `--seconds` after a warm-up;
//! each peer runs in a fresh process, alternated run by run:
//! - `weft`: weft tasks, each request through `weft::tokio::block_on` (the future polled on
//!   the task's stack, the task parked while it waits);
//! - `weft-spawn`: weft tasks, each request a `weft::tokio::spawn_future` (the future runs as a
//!   tokio task, the weft task parks until it ends) — the design `block_on` did not take;
//! - `tokio`: tokio tasks on a 2-worker runtime;
//! - `thread`: one OS thread per unit, each request a `Handle::block_on`.
//!
//! Figures: requests/s, latency p99, CPU per request (the process's user + system time over
//! the measured window ÷ requests; the echo server's CPU is not counted). The bridge's own
//! cost per `block_on` is the `weft` CPU per request less the `tokio` one, pair by pair.
//! A third case parks `SLEEPERS` units each awaiting a one-hour tokio sleep and reports their
//! memory (RSS + page tables) once settled, weft (compacted stacks) next to tokio.
//!
//! Owns: the experiment and its peer (`weft-bench peer bridge`, [`PeerArgs`]).
//! May call: weft (feature `tokio`), tokio, `runner`, `report`, `echo` (its server process).
//! Called by: `cli/mod.rs`, `peer.rs`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::args;
use crate::cli::report::{table, Section};
use crate::cli::runner::{self, Cmd, Ctx, Outcome, Program};
use crate::cli::stats::{num, Summary};

/// Units making requests at once.
pub const UNITS: usize = 100;
/// Units parked in the memory case.
pub const SLEEPERS: usize = 10_000;
const PAYLOAD: usize = 32;

/// Who makes the requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Who {
    Weft,
    WeftLocal,
    WeftSpawn,
    Tokio,
    Thread,
}

impl Who {
    fn name(self) -> &'static str {
        match self {
            Who::Weft => "weft",
            Who::WeftLocal => "weft-local",
            Who::WeftSpawn => "weft-spawn",
            Who::Tokio => "tokio",
            Who::Thread => "thread",
        }
    }
}

/// What one request awaits, or the memory case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Request {
    Timer,
    Tcp,
    Sleepers,
}

/// One run, `weft-bench peer bridge …`.
#[derive(Debug, Clone, clap::Args)]
pub struct PeerArgs {
    #[arg(long, value_enum)]
    pub who: Who,
    #[arg(long, value_enum)]
    pub request: Request,
    #[arg(long, default_value_t = UNITS)]
    pub units: usize,
    #[arg(long, default_value_t = 2.0)]
    pub seconds: f64,
    /// The echo server (`tcp`).
    #[arg(long)]
    pub addr: Option<String>,
    /// Threads of weft's tokio runtime (`RuntimeBuilder::tokio_threads`).
    #[arg(long, default_value_t = 2)]
    pub tokio_threads: usize,
}

/// The measured window every unit shares.
struct Window {
    measuring: AtomicBool,
    stop: AtomicBool,
}

impl Window {
    fn new() -> Arc<Window> {
        Arc::new(Window {
            measuring: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        })
    }

    /// Warms up, then measures for `seconds`: returns (CPU, wall) of the window.
    fn run(&self, seconds: f64) -> (Duration, Duration) {
        std::thread::sleep(Duration::from_millis(300));
        let cpu = crate::cpu_time();
        let start = Instant::now();
        self.measuring.store(true, Ordering::SeqCst);
        std::thread::sleep(Duration::from_secs_f64(seconds));
        self.measuring.store(false, Ordering::SeqCst);
        let (cpu, wall) = (crate::cpu_time() - cpu, start.elapsed());
        self.stop.store(true, Ordering::SeqCst);
        (cpu, wall)
    }
}

/// A unit's loop: `request` back to back until stopped; latencies (µs) of the measured ones.
fn unit_loop(window: &Window, mut request: impl FnMut()) -> Vec<f64> {
    let mut lat = Vec::new();
    while !window.stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        request();
        if window.measuring.load(Ordering::Relaxed) {
            lat.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    lat
}

/// The async form of [`unit_loop`].
async fn unit_loop_async<F, Fut>(window: Arc<Window>, mut request: F) -> Vec<f64>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut lat = Vec::new();
    while !window.stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        request().await;
        if window.measuring.load(Ordering::Relaxed) {
            lat.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    lat
}

/// One timer request.
async fn timer() {
    tokio::time::sleep(Duration::from_millis(1)).await;
}

/// One TCP round trip on `s`.
async fn round_trip(s: &mut tokio::net::TcpStream, buf: &mut [u8; PAYLOAD]) {
    s.write_all(&buf[..]).await.expect("echo write");
    s.read_exact(&mut buf[..]).await.expect("echo read");
}

async fn connect(addr: &str) -> tokio::net::TcpStream {
    let s = tokio::net::TcpStream::connect(addr)
        .await
        .expect("cannot connect to the echo server");
    s.set_nodelay(true).expect("nodelay");
    s
}

/// weft on 2 workers, its tokio runtime on `tokio_threads`, or one on each worker
/// (`weft-local`: `RuntimeBuilder::tokio_on_workers`).
fn weft_runtime(who: Who, tokio_threads: usize) -> Result<weft::Runtime, String> {
    weft::Runtime::builder()
        .workers(2)
        .tokio_threads(tokio_threads)
        .tokio_on_workers(who == Who::WeftLocal)
        .build()
        .map_err(|e| format!("weft runtime: {e}"))
}

fn tokio_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn figures(mut lat: Vec<f64>, cpu: Duration, wall: Duration) -> Value {
    lat.sort_by(f64::total_cmp);
    let n = lat.len().max(1) as f64;
    json!({
        "requests": lat.len(),
        "requests_per_sec": lat.len() as f64 / wall.as_secs_f64(),
        "p50_us": crate::percentile(&lat, 50.0),
        "p99_us": crate::percentile(&lat, 99.0),
        "cpu_ns_per_request": cpu.as_secs_f64() * 1e9 / n,
    })
}

/// Runs one peer and returns its figures.
pub fn peer(a: PeerArgs) -> Result<Value, String> {
    let units = a.units.max(1);
    if a.request == Request::Sleepers {
        return sleepers(a.who, units);
    }
    let addr = a.addr.clone().unwrap_or_default();
    if a.request == Request::Tcp && addr.is_empty() {
        return Err("bridge: tcp needs --addr".into());
    }
    let window = Window::new();
    let tcp = a.request == Request::Tcp;
    let lats: Vec<Vec<f64>>;
    let (cpu, wall);
    match a.who {
        Who::Weft | Who::WeftLocal | Who::WeftSpawn => {
            let rt = weft_runtime(a.who, a.tokio_threads)?;
            let spawn = a.who == Who::WeftSpawn;
            let handles: Vec<_> = (0..units)
                .map(|_| {
                    let (window, addr) = (window.clone(), addr.clone());
                    rt.spawn(move || {
                        if !tcp {
                            return unit_loop(&window, || {
                                if spawn {
                                    weft::tokio::spawn_future(timer())
                                } else {
                                    weft::tokio::block_on(timer())
                                }
                            });
                        }
                        let mut stream = Some(weft::tokio::block_on(connect(&addr)));
                        let mut buf = [7u8; PAYLOAD];
                        unit_loop(&window, || {
                            if spawn {
                                let mut s = stream.take().expect("stream");
                                stream = Some(weft::tokio::spawn_future(async move {
                                    let mut buf = [7u8; PAYLOAD];
                                    round_trip(&mut s, &mut buf).await;
                                    s
                                }));
                            } else {
                                let s = stream.as_mut().expect("stream");
                                weft::tokio::block_on(round_trip(s, &mut buf));
                            }
                        })
                    })
                })
                .collect();
            (cpu, wall) = window.run(a.seconds);
            lats = handles
                .into_iter()
                .map(|h| h.join().expect("unit"))
                .collect();
        }
        Who::Tokio => {
            let rt = tokio_runtime();
            let handles: Vec<_> = (0..units)
                .map(|_| {
                    let (window, addr) = (window.clone(), addr.clone());
                    rt.spawn(async move {
                        if !tcp {
                            return unit_loop_async(window, timer).await;
                        }
                        let mut stream = connect(&addr).await;
                        let mut buf = [7u8; PAYLOAD];
                        let mut lat = Vec::new();
                        while !window.stop.load(Ordering::Relaxed) {
                            let t = Instant::now();
                            round_trip(&mut stream, &mut buf).await;
                            if window.measuring.load(Ordering::Relaxed) {
                                lat.push(t.elapsed().as_secs_f64() * 1e6);
                            }
                        }
                        lat
                    })
                })
                .collect();
            (cpu, wall) = window.run(a.seconds);
            lats = rt.block_on(async move {
                let mut all = Vec::new();
                for h in handles {
                    all.push(h.await.expect("unit"));
                }
                all
            });
        }
        Who::Thread => {
            let rt = tokio_runtime();
            let handles: Vec<_> = (0..units)
                .map(|_| {
                    let (window, addr, handle) =
                        (window.clone(), addr.clone(), rt.handle().clone());
                    std::thread::spawn(move || {
                        if !tcp {
                            return unit_loop(&window, || handle.block_on(timer()));
                        }
                        let mut stream = handle.block_on(connect(&addr));
                        let mut buf = [7u8; PAYLOAD];
                        unit_loop(&window, || {
                            handle.block_on(round_trip(&mut stream, &mut buf))
                        })
                    })
                })
                .collect();
            (cpu, wall) = window.run(a.seconds);
            lats = handles
                .into_iter()
                .map(|h| h.join().expect("unit"))
                .collect();
        }
    }
    Ok(figures(lats.concat(), cpu, wall))
}

/// The memory case: `n` units each awaiting a one-hour tokio sleep.
fn sleepers(who: Who, n: usize) -> Result<Value, String> {
    let parked = Arc::new(AtomicUsize::new(0));
    // Each unit's future: marks itself parked once its sleep is made, then awaits it.
    let unit = |parked: Arc<AtomicUsize>| async move {
        let sleep = tokio::time::sleep(Duration::from_secs(3600));
        parked.fetch_add(1, Ordering::Release);
        sleep.await;
    };
    let figures = match who {
        Who::Weft | Who::WeftLocal | Who::WeftSpawn => {
            let rt = weft_runtime(who, 2)?;
            // The tokio runtime starts at its first use: before the baseline.
            rt.block_on(|| weft::tokio::block_on(async {}));
            let figures = measure_parked(n, &parked, || {
                for _ in 0..n {
                    let future = unit(parked.clone());
                    rt.spawn(move || weft::tokio::block_on(future));
                }
            });
            std::mem::forget(rt); // the process ends here: no need to cancel them all
            figures
        }
        Who::Tokio | Who::Thread => {
            let rt = tokio_runtime();
            let figures = measure_parked(n, &parked, || {
                for _ in 0..n {
                    rt.spawn(unit(parked.clone()));
                }
            });
            std::mem::forget(rt);
            figures
        }
    };
    Ok(figures)
}

/// Memory per unit (RSS + page tables) of the `n` units `start` makes, once all said so in
/// `parked`, and again after they settled (weft compacts a stack parked 200 ms).
fn measure_parked(n: usize, parked: &AtomicUsize, start: impl FnOnce()) -> Value {
    let mem = || {
        (
            crate::status_bytes("VmRSS") as f64,
            crate::status_bytes("VmPTE") as f64,
        )
    };
    let before = mem();
    start();
    while parked.load(Ordering::Acquire) < n {
        std::thread::sleep(Duration::from_millis(1));
    }
    let at_parked = mem();
    std::thread::sleep(Duration::from_millis(1500));
    let settled = mem();
    let per = |m: (f64, f64)| (m.0 - before.0 + m.1 - before.1) / n as f64;
    json!({
        "units": n,
        "bytes_per_unit_parked": per(at_parked),
        "bytes_per_unit_settled": per(settled),
        "settled_pte_bytes_per_unit": (settled.1 - before.1) / n as f64,
    })
}

/// Median of the per-pair differences `a[i] - b[i]`.
fn difference(a: &Outcome, b: &Outcome, key: &str) -> Option<Summary> {
    let d: Vec<f64> = a
        .field(key)
        .iter()
        .zip(b.field(key))
        .filter_map(|(a, b)| Some((*a)? - b?))
        .collect();
    Summary::of(&d)
}

/// Runs the experiment and returns its section.
pub fn run(ctx: &mut Ctx) -> Result<Section, String> {
    let seconds = ctx.size.pick(2.0, 1.0, 0.3);
    let units = ctx.size.pick(UNITS, UNITS, 8);
    let sleepers_n = ctx.size.pick(SLEEPERS, SLEEPERS, 500);
    let peers = [
        Who::Weft,
        Who::WeftLocal,
        Who::WeftSpawn,
        Who::Tokio,
        Who::Thread,
    ];
    let pb = runner::bar(ctx, "bridge", (2 * peers.len() + 3) * (ctx.runs + 1));
    let server = crate::cli::echo::Server::start(&Cmd::me(&args![
        "echo-server",
        "--runtime",
        "tokio",
        "--addr",
        "127.0.0.1:0"
    ])?)?;
    let mut rows = Vec::new();
    let mut overhead = Vec::new();
    for (request, label) in [
        (Request::Timer, "one tokio timer (sleep 1 ms)"),
        (Request::Tcp, "one loopback TCP round trip (32 B)"),
    ] {
        let req = if request == Request::Timer {
            "timer"
        } else {
            "tcp"
        };
        let programs = peers
            .iter()
            .map(|&who| {
                let mut a = args![
                    "bridge",
                    "--who",
                    who.name(),
                    "--request",
                    req,
                    "--units",
                    units,
                    "--seconds",
                    seconds
                ]
                .to_vec();
                if request == Request::Tcp {
                    a.extend(args!["--addr", server.addr()]);
                }
                Program::command(who.name(), Cmd::me(&a))
            })
            .collect();
        let case = json!({"request": req, "units": units, "seconds": seconds});
        let outs = runner::alternate(ctx, &pb, "bridge", case, programs);
        let tokio = outs
            .iter()
            .find(|o| o.peer == "tokio")
            .expect("tokio")
            .clone();
        for o in &outs {
            let mut row = vec![label.to_string(), o.peer.to_string()];
            row.extend(o.cells(["requests_per_sec", "p99_us", "cpu_ns_per_request"]));
            row.push(o.ratio_cell(&tokio, "cpu_ns_per_request"));
            row.push(o.ratio_cell(&tokio, "p99_us"));
            rows.push(row);
        }
        for who in ["weft", "weft-local", "weft-spawn"] {
            if let Some(o) = outs.iter().find(|o| o.peer == who) {
                let d = difference(o, &tokio, "cpu_ns_per_request");
                overhead.push(format!(
                    "- {label}, `{who}` − `tokio` CPU per request: **{} ns** (median of per-run \
                     differences, min–max {}–{})",
                    d.map_or("-".into(), |s| num(s.median)),
                    d.map_or("-".into(), |s| num(s.min)),
                    d.map_or("-".into(), |s| num(s.max)),
                ));
            }
        }
    }
    drop(server);
    let mem_programs = [Who::Weft, Who::WeftLocal, Who::Tokio]
        .iter()
        .map(|&who| {
            let a = args![
                "bridge",
                "--who",
                who.name(),
                "--request",
                "sleepers",
                "--units",
                sleepers_n
            ];
            Program::command(who.name(), Cmd::me(&a))
        })
        .collect();
    let case = json!({"request": "sleepers", "units": sleepers_n});
    let mem = runner::alternate(ctx, &pb, "bridge", case, mem_programs);
    pb.finish_and_clear();
    let mem_rows: Vec<Vec<String>> = mem
        .iter()
        .map(|o| {
            let mut row = vec![o.peer.to_string()];
            row.extend(o.cells(["bytes_per_unit_parked", "bytes_per_unit_settled"]));
            row.push(o.ratio_cell(&mem[2], "bytes_per_unit_settled"));
            row
        })
        .collect();
    let intro = format!(
        "{units} units, each making requests back to back for {seconds} s after a 0.3 s \
         warm-up; each peer in its own process, a tokio echo server in another. `weft`: weft \
         tasks through `weft::tokio::block_on`; `weft-local`: the same with a tokio runtime \
         on each weft worker (`RuntimeBuilder::tokio_on_workers`); `weft-spawn`: through \
         `weft::tokio::spawn_future`; `tokio`: tokio tasks (2 workers); `thread`: a thread per \
         unit with `Handle::block_on`. weft runs 2 workers and its tokio runtime 2 threads. CPU \
         per request: the process's user + system time over the window ÷ requests.\n\n"
    );
    let requests = table(
        &[
            "request",
            "peer",
            "requests/s",
            "p99 µs",
            "CPU ns / request",
            "CPU / tokio's",
            "p99 / tokio's",
        ],
        &rows,
    );
    let memory = table(
        &[
            "peer",
            "B per unit parked",
            "B per unit settled",
            "weft / tokio settled",
        ],
        &mem_rows,
    );
    let markdown = format!(
        "{intro}{requests}\nThe bridge's own cost per request, above tokio's:\n\n{}\n\n\
         {sleepers_n} units each awaiting a one-hour tokio sleep, memory per unit (RSS + page \
         tables; settled: after 1.5 s, when weft has compacted the parked stacks):\n\n{memory}",
        overhead.join("\n")
    );
    // The README's generated block: the tables alone.
    let summary = format!(
        "{units} units, requests back to back (`weft`: through `weft::tokio::block_on`):\n\n\
         {requests}\n{sleepers_n} units each awaiting a tokio sleep, memory per unit:\n\n\
         {memory}"
    );
    Ok(Section {
        name: "bridge".into(),
        title: "Async Rust from weft tasks: the tokio bridge".into(),
        ran: String::new(),
        markdown,
        summary,
        charts: Vec::new(),
        raw: Vec::new(),
    })
}
