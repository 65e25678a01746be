//! `weft-bench echo`: the goroutine-per-connection echo experiment.
//!
//! Each run starts one server fresh (weft's `echo` example, Go's standard-library server in
//! `bench/go/echo`, a tokio server, a thread-per-connection server; one unit per connection,
//! 16 KiB buffer, TCP_NODELAY) on 127.0.0.1 with a port the kernel picks, then runs the load
//! client (weft-loadtest's library, in its own process) against it: C connections dialled in
//! batches of 64 every 15 ms, then R rounds of 32-byte pings, all at once (burst) or each
//! delayed by up to 2 ms (staggered). Figures: dial and RTT percentiles, round trips/s,
//! Little's law (throughput × mean RTT next to the in-flight count sampled every ms), the
//! server's CPU time (user + system, accepts included, read with `wait4` when the server is
//! reaped, or where the client's hold began) per round trip, its peak RSS growth and page
//! tables per connection, and its RSS per connection once they have idled 1.5 s (the client
//! holds them open after the rounds).
//! `echo --loads C:R:S,…` replaces the size's loads, and with `--peers weft,go` it is the
//! quick weft-against-Go check `bench/echo-compare.sh` used to be.
//!
//! `weft, io_uring` is weft's `echo` example with `WEFT_IO_URING=1`: its reads through the
//! workers' io_uring (`RuntimeBuilder::io_uring`, weft's sched/uring.rs); skipped, like
//! `uring`, where io_uring cannot be set up.
//!
//! `uring` is the floor: io_uring with no runtime, not a runtime peer (`uring_echo.rs`: one
//! thread per CPU, each with its own ring and `SO_REUSEPORT` listener, multishot accept and
//! recv into provided buffers, one `io_uring_enter` per loop). It says what any runtime's
//! io_uring backend could at best reach here; where io_uring cannot be set up its row says
//! why it was skipped. One thread per CPU, like the runtimes' workers: a single thread
//! (`peer echo-server --runtime uring --threads 1`) took 10–15 % less CPU per round trip on
//! 2 vCPUs, but so would a single-threaded tokio.
//!
//! Owns: the server processes of one run (`Server`: killed and reaped when done).
//! May call: `runner` (the client is `weft-bench peer loadtest`), `/proc/PID/*`.
//!
//! Why a fresh server per run: a server that has served a load keeps its grown heap, stack
//! pool and descriptor table, so the next load would measure a warm server against cold
//! peers. The client shares the CPUs with the server: round trips/s measure both together,
//! which is why CPU per round trip is reported next to them.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{json, Value};

use crate::args;
use crate::cli::chart::{self, LinePanel, Series};
use crate::cli::report::{table, Section};
use crate::cli::runner::{self, go_program, run_json, Cmd, Ctx, Outcome, Program};
use crate::cli::stats::num;

/// A load: connections, rounds, stagger in ms.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    pub conns: usize,
    pub rounds: usize,
    pub stagger_ms: u64,
}

impl Load {
    /// `CONNS:ROUNDS:STAGGER_MS`, as `echo --loads` takes it.
    pub fn parse(text: &str) -> Result<Load, String> {
        let f: Vec<&str> = text.trim().split(':').collect();
        let num = |s: &str| {
            s.replace('_', "")
                .parse::<usize>()
                .map_err(|_| format!("not a number in load {text:?}: {s:?}"))
        };
        match f[..] {
            [c, r, st] => Ok(Load {
                conns: num(c)?.max(1),
                rounds: num(r)?.max(1),
                stagger_ms: num(st)? as u64,
            }),
            _ => Err(format!(
                "load {text:?} is not CONNS:ROUNDS:STAGGER_MS (e.g. 2000:5:0)"
            )),
        }
    }

    fn label(self) -> String {
        format!(
            "C={} × {}{}",
            num(self.conns as f64),
            self.rounds,
            if self.stagger_ms > 0 {
                format!(", staggered {} ms", self.stagger_ms)
            } else {
                ", burst".into()
            }
        )
    }
}

fn loads(size: crate::cli::runner::Size) -> Vec<Load> {
    let l = |conns, rounds, stagger_ms| Load {
        conns,
        rounds,
        stagger_ms,
    };
    let published = vec![l(8, 200, 0), l(2000, 5, 0), l(2000, 5, 2), l(10_000, 5, 0)];
    size.pick(
        published.clone(),
        published,
        vec![l(8, 20, 0), l(50, 2, 0), l(50, 2, 2)],
    )
}

/// A server process, killed when dropped (also the `bridge` experiment's echo server).
pub(crate) struct Server {
    child: Child,
    addr: String,
    reaped: bool,
}

impl Drop for Server {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Server {
    pub(crate) fn start(cmd: &Cmd) -> Result<Server, String> {
        let mut child = Command::new(&cmd.exe)
            .args(&cmd.args)
            .envs(cmd.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("{}: {e}", cmd.exe.display()))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(line)) = lines.next() {
                let _ = tx.send(line);
            }
            // Keep reading so the server never blocks on a full pipe.
            for _ in lines {}
        });
        let mut server = Server {
            child,
            addr: String::new(),
            reaped: false,
        };
        let line = rx
            .recv_timeout(Duration::from_secs(10))
            .map_err(|_| "the server did not say where it listens within 10 s".to_string())?;
        server.addr = line
            .rsplit("listening on ")
            .next()
            .filter(|_| line.contains("listening on "))
            .ok_or_else(|| format!("unexpected first line from the server: {line}"))?
            .trim()
            .to_string();
        Ok(server)
    }

    /// Where it listens.
    pub(crate) fn addr(&self) -> &str {
        &self.addr
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills the server and returns the user + system CPU seconds of its whole life, to the
    /// microsecond (the kernel's account of a reaped child, threads that ended included).
    fn finish(mut self) -> Result<f64, String> {
        let _ = self.child.kill();
        let pid = self.child.id() as libc::pid_t;
        let mut status = 0;
        // SAFETY: `usage` is a plain struct on this stack that wait4 fills in; `pid` is our
        // own child, not reaped yet (`reaped` is false until here).
        let (got, usage) = unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            let got = libc::wait4(pid, &mut status, 0, &mut usage);
            (got, usage)
        };
        if got != pid {
            return Err(format!("wait4: {}", std::io::Error::last_os_error()));
        }
        self.reaped = true;
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        Ok(tv(usage.ru_utime) + tv(usage.ru_stime))
    }
}

/// One run: a fresh server, one load, the server's CPU and memory around it.
fn one_run(server: &Cmd, load: Load) -> Result<Value, String> {
    let s = Server::start(server)?;
    let pid = s.pid();
    let rss0 = weft_loadtest::process_status_bytes(pid, "VmRSS");
    let pte0 = weft_loadtest::process_status_bytes(pid, "VmPTE");
    let cpu0 = weft_loadtest::process_cpu_seconds(pid);
    let done = AtomicBool::new(false);
    let pte_max = AtomicU64::new(pte0 as u64);
    let mut client = Cmd::me(&args![
        "loadtest",
        "--addr",
        s.addr,
        "--conns",
        load.conns,
        "--rounds",
        load.rounds,
        "--stagger-ms",
        load.stagger_ms,
        "--hold-ms",
        HOLD_MS,
        "--watch-pid",
        pid
    ])?;
    client.limit = Duration::from_secs(180);
    let result = std::thread::scope(|scope| {
        scope.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                pte_max.fetch_max(
                    weft_loadtest::process_status_bytes(pid, "VmPTE") as u64,
                    Ordering::Relaxed,
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let r = run_json(&client);
        done.store(true, Ordering::Relaxed);
        r
    })?;
    let hwm = weft_loadtest::process_status_bytes(pid, "VmHWM");
    // The start-up's CPU (before the load) is read in clock ticks: 0 or 1 as a rule. The
    // load's CPU ends where the hold begins (the client read it then); what a server does
    // with idle connections (weft compacts their stacks) is not a round trip's.
    let at_exit = s.finish()?;
    let mut v = result;
    let at_hold = v["watched_cpu_s"].as_f64().filter(|&c| c > 0.0);
    let cpu = at_hold.unwrap_or(at_exit) - cpu0;
    let rtts = v["rtt_count"].as_f64().unwrap_or(0.0).max(1.0);
    let conns = load.conns as f64;
    v["server_cpu_us_per_rt"] = json!(cpu * 1e6 / rtts);
    v["rss_per_conn"] = json!((hwm - rss0) / conns);
    v["pte_per_conn"] = json!((pte_max.load(Ordering::Relaxed) as f64 - pte0) / conns);
    let held = v["held_rss_bytes"].as_f64().unwrap_or(0.0);
    v["idle_rss_per_conn"] = json!(((held - rss0) / conns).max(0.0));
    Ok(v)
}

fn servers() -> Vec<(&'static str, Result<Cmd, String>)> {
    let me = |rt: &str| {
        Cmd::me(&args![
            "echo-server",
            "--runtime",
            rt,
            "--addr",
            "127.0.0.1:0"
        ])
    };
    vec![
        ("weft", me("weft")),
        // weft with its io_uring read path (`RuntimeBuilder::io_uring`, sched/uring.rs).
        (
            "weft, io_uring",
            crate::cli::uring_echo::available().and_then(|()| {
                me("weft").map(|mut cmd| {
                    cmd.env.push(("WEFT_IO_URING".into(), "1".into()));
                    cmd
                })
            }),
        ),
        (
            "go",
            go_program("echo").map(|exe| Cmd::new(exe, &args!["127.0.0.1:0"])),
        ),
        ("tokio", me("tokio")),
        ("threads", me("threads")),
        (
            "uring",
            crate::cli::uring_echo::available().and_then(|()| me("uring")),
        ),
    ]
}

/// How long the client keeps every connection open and idle after its rounds, ms: long
/// enough for weft's stack compaction (after 200 ms parked) to have settled at 10,000.
const HOLD_MS: u64 = 1500;

/// The figures of the table, (key, heading).
const COLUMNS: [(&str, &str); 12] = [
    ("round_trips_per_sec", "round trips/s"),
    ("rtt_p50_us", "RTT p50 µs"),
    ("rtt_p99_us", "RTT p99 µs"),
    ("dial_p50_us", "dial p50 µs"),
    ("dial_p99_us", "dial p99 µs"),
    ("little_in_flight", "Little: tput × mean RTT"),
    ("sampled_in_flight", "sampled in flight"),
    ("server_cpu_us_per_rt", "server CPU µs / round trip"),
    ("rss_per_conn", "server RSS B / conn"),
    ("idle_rss_per_conn", "server RSS B / conn, idle"),
    ("pte_per_conn", "server page tables B / conn"),
    ("conns_failed", "failed dials"),
];

/// Runs the experiment and returns its section.
pub fn run(ctx: &mut Ctx) -> Result<Section, String> {
    let loads = ctx.echo_loads.clone().unwrap_or_else(|| loads(ctx.size));
    let servers = servers();
    let pb = runner::bar(ctx, "echo", loads.len() * servers.len() * (ctx.runs + 1));
    let mut results: Vec<(Load, Vec<Outcome>)> = Vec::new();
    for load in &loads {
        let programs = servers
            .iter()
            .map(|(peer, cmd)| Program {
                peer,
                run: cmd
                    .clone()
                    .map(|cmd| Box::new(move || one_run(&cmd, *load)) as runner::RunOnce<'_>),
            })
            .collect();
        let case =
            json!({"conns": load.conns, "rounds": load.rounds, "stagger_ms": load.stagger_ms});
        results.push((*load, runner::alternate(ctx, &pb, "echo", case, programs)));
    }
    pb.finish_and_clear();

    let mut head = vec!["load", "server"];
    head.extend(COLUMNS.iter().map(|(_, h)| *h));
    head.extend([
        "weft / peer: round trips/s",
        "weft / peer: CPU per round trip",
    ]);
    let mut rows = Vec::new();
    let mut short = Vec::new();
    for (load, outs) in &results {
        let weft = &outs[0];
        for o in outs {
            let mut r = vec![load.label(), o.peer.to_string()];
            r.extend(o.cells(COLUMNS.iter().map(|(key, _)| *key)));
            let ratio = |key: &str| weft.ratio_cell(o, key);
            r.push(ratio("round_trips_per_sec"));
            r.push(ratio("server_cpu_us_per_rt"));
            let med = |key: &str| o.median_cell(key);
            short.push(vec![
                load.label(),
                o.peer.to_string(),
                med("round_trips_per_sec"),
                med("rtt_p99_us"),
                med("server_cpu_us_per_rt"),
                med("rss_per_conn"),
                med("idle_rss_per_conn"),
                ratio("round_trips_per_sec"),
            ]);
            rows.push(r);
        }
    }
    let markdown = table(&head, &rows)
        + "\nServer CPU per round trip counts the whole load (dials and accepts included). \
           RSS per connection is the server's peak RSS growth over its RSS at start; idle, \
           its RSS growth with every connection open and idle 1.5 s after the rounds (the \
           client holds them, and the load's CPU ends where the hold begins); page tables \
           per connection the peak of its VmPTE (sampled every 50 ms) over the start.\n";
    let summary = table(
        &[
            "load",
            "server",
            "round trips/s",
            "RTT p99 µs",
            "server CPU µs / rt",
            "RSS B / conn",
            "idle RSS B / conn",
            "weft / peer rt/s",
        ],
        &short,
    );

    let ticks: Vec<(f64, String)> = results
        .iter()
        .enumerate()
        .map(|(i, (l, _))| {
            let t = if l.stagger_ms > 0 {
                format!("{} stag.", chart::short(l.conns as f64))
            } else {
                chart::short(l.conns as f64)
            };
            (i as f64, t)
        })
        .collect();
    let panel = |key: &str, title: &str, y: &str| LinePanel {
        title: title.into(),
        x_label: "connections (load)".into(),
        y_label: y.into(),
        x_log: false,
        x_ticks: Some(ticks.clone()),
        series: ["weft", "go", "tokio", "threads", "uring"]
            .iter()
            .map(|peer| Series {
                name: peer.to_string(),
                colour: chart::colour(peer),
                points: results
                    .iter()
                    .enumerate()
                    .filter_map(|(i, (_, outs))| {
                        Some((
                            i as f64,
                            outs.iter().find(|o| o.peer == *peer)?.summary(key)?,
                        ))
                    })
                    .collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect(),
        legend: plotters::prelude::SeriesLabelPosition::UpperRight,
    };
    let chart_name = "echo.svg";
    chart::lines(
        &ctx.out.join(chart_name),
        "TCP echo, one unit per connection",
        &[
            panel(
                "round_trips_per_sec",
                "throughput (higher is better)",
                "round trips/s",
            ),
            panel("rtt_p99_us", "RTT p99 (lower is better)", "µs"),
        ],
    )?;
    Ok(Section {
        name: "echo".into(),
        title: "TCP echo, one unit per connection".into(),
        ran: String::new(),
        markdown,
        summary,
        charts: vec![chart_name.into()],
        raw: Vec::new(),
    })
}
