//! `weft-bench cost`: the cost table — memory per blocked unit, spawn + run to completion,
//! one channel send + receive, a switch round trip with 1 and 2 workers, OS threads for
//! contrast, and what happens at the thread limit.
//!
//! - spawn: rounds of N spawns in one process (5, 3 with `--quick`), ns per unit: detached
//!   units that each bump a counter, the last one waking the spawner ("run to
//!   completion"), or units each joined by its handle ("join"; Go: a `WaitGroup` per
//!   goroutine), or detached units that each hold a clone of one channel `Sender`, with 2
//!   workers ("each holding a `Sender`"; Go: one shared `WaitGroup`, `go func(){
//!   wg.Done() }()`); threads spawn and join N threads in each. The row is the median round, as
//!   in the spawn programs the figures were first published from; the first round of the
//!   fresh process gets a row of its own, since it alone pays for touching the runtime's
//!   stacks and task memory for the first time.
//! - send + receive: one unit sends then receives on a channel of capacity 1 (no parking).
//! - switch round trip: two units bounce a value over rendezvous channels (tokio: mpsc of
//!   capacity 1; threads: `sync_channel(0)`, both pinned to one CPU for "1 worker").
//! - thread limit: Go with `debug.SetMaxThreads(10)` and 40 goroutines that lock an OS
//!   thread each dies ("fatal error: thread exhaustion"); weft with `max_threads(10)` and 40
//!   concurrent `try_spawn_blocking` calls returns an error to the calls past the limit.
//!
//! May call: `runner`, `probe` (its programs, for the memory row), `chart`, `report`.
//!
//! Why each operation in its own process and round: a figure of a few hundred nanoseconds
//! moves with the other work on the machine, and the runner's alternation pairs each weft
//! run with a peer run next to it in time.

use serde_json::json;

use crate::args;
use crate::cli::chart::{self, BarPanel};
use crate::cli::report::{table, Section};
use crate::cli::runner::{self, go_program, run_capture, Cmd, Ctx, Outcome, Program};
use crate::cli::stats::{cell, ratio_cell, Summary};

struct Row {
    label: String,
    /// The chart panel's title.
    short: String,
    key: &'static str,
    outcomes: Vec<Outcome>,
}

/// One operation of the table: `what` is the Go peer's `-what`; the Rust peers' `peer`
/// subcommand is `spawn` for both spawn cases.
struct Op {
    what: &'static str,
    n: usize,
    threads_n: usize,
    workers: Option<usize>,
    /// In-process rounds of the spawn cases (`None`: one measurement per process).
    rounds: Option<usize>,
}

impl Op {
    fn peer_cmd(&self, rt: &str, n: usize) -> Result<Cmd, String> {
        let mut a = match self.what {
            "spawn" | "spawnjoin" | "spawnwg" => {
                let case = match self.what {
                    "spawn" => "complete",
                    "spawnjoin" => "join",
                    _ => "sender",
                };
                args!["spawn", "--runtime", rt, "--n", n, "--case", case].to_vec()
            }
            what => args![what, "--runtime", rt, "--n", n].to_vec(),
        };
        if let Some(w) = self.workers {
            a.extend(args!["--workers", w]);
        }
        if let Some(r) = self.rounds {
            a.extend(args!["--rounds", r]);
        }
        Cmd::me(&a)
    }

    fn go_cmd(&self) -> Result<Cmd, String> {
        go_program("cost").map(|exe| {
            let mut a = args![
                "-what",
                self.what,
                "-n",
                self.n,
                "-procs",
                self.workers.unwrap_or(0)
            ]
            .to_vec();
            if let Some(r) = self.rounds {
                a.extend(args!["-rounds", r]);
            }
            Cmd::new(exe, &a)
        })
    }

    /// weft, Go, tokio and threads (with their own count `threads_n`).
    fn programs<'a>(&self) -> Vec<Program<'a>> {
        vec![
            Program::command("weft", self.peer_cmd("weft", self.n)),
            Program::command("go", self.go_cmd()),
            Program::command("tokio", self.peer_cmd("tokio", self.n)),
            Program::command("threads", self.peer_cmd("threads", self.threads_n)),
        ]
    }
}

/// Runs the experiment and returns its section.
pub fn run(ctx: &mut Ctx) -> Result<Section, String> {
    let s = ctx.size;
    let mem_n = s.pick(100_000, 100_000, 1000);
    let spawn_n = s.pick(100_000, 100_000, 1000);
    let chan_n = s.pick(5_000_000, 2_000_000, 10_000);
    let pp_n = s.pick(200_000, 100_000, 1000);
    let pb = runner::bar(ctx, "cost", 7 * 4 * (ctx.runs + 1));
    let mut rows = Vec::new();

    let mut mem = crate::cli::probe::programs(s, "idle", mem_n);
    let threads_mem = mem_n.min(10_000);
    if mem.len() == 3 {
        mem.push(Program::command(
            "threads",
            Cmd::me(&args![
                "probe",
                "--runtime",
                "threads",
                "--tasks",
                threads_mem,
                "--mode",
                "idle",
                "--settle-ms",
                crate::cli::probe::settle_ms(s)
            ]),
        ));
    }
    let outcomes = runner::alternate(
        ctx,
        &pb,
        "cost",
        json!({"what": "memory", "tasks": mem_n}),
        mem,
    );
    let mut mem_row = Row {
        label: format!(
            "memory per blocked unit, B (RSS + page tables after {} ms parked, Go after six \
             GCs; {} units, threads {})",
            crate::cli::probe::settle_ms(s),
            crate::cli::stats::num(mem_n as f64),
            crate::cli::stats::num(threads_mem as f64)
        ),
        short: String::new(),
        key: "",
        outcomes,
    };
    for o in &mut mem_row.outcomes {
        for r in o.runs.iter_mut().flatten() {
            let b = crate::cli::probe::per_unit(r, true);
            r["bytes_per_unit"] = json!(b);
        }
    }
    mem_row.key = "bytes_per_unit";
    rows.push(mem_row);

    let threads_spawn = s.pick(5000, 2000, 100);
    let spawn_rounds = s.pick(5, 3, 2);
    let rounds = Some(spawn_rounds);
    let spawn = |what, label: &str, short: &str, workers| {
        (
            label.to_string(),
            short.to_string(),
            Op {
                what,
                n: spawn_n,
                threads_n: threads_spawn,
                workers,
                rounds,
            },
        )
    };
    let plain = |what, label: &str, short: &str, n, threads_n, workers| {
        (
            label.to_string(),
            short.to_string(),
            Op {
                what,
                n,
                threads_n,
                workers,
                rounds: None,
            },
        )
    };
    let cases = [
        spawn(
            "spawn",
            "spawn + run to completion, ns per unit",
            "spawn + run to completion",
            None,
        ),
        spawn(
            "spawnjoin",
            "spawn + join each handle, ns per unit",
            "spawn + join",
            None,
        ),
        spawn(
            "spawnwg",
            "spawn + run to completion, each unit holding a channel `Sender` (Go: one \
             `WaitGroup`), 2 workers, ns per unit",
            "spawn + complete, Sender each",
            Some(2),
        ),
        plain(
            "sendrecv",
            "channel send + receive (capacity 1), ns",
            "send + receive, capacity 1",
            chan_n,
            chan_n,
            None,
        ),
        plain(
            "pingpong",
            "switch round trip, 1 worker, ns",
            "switch round trip, 1 worker",
            pp_n,
            s.pick(20_000, 10_000, 100),
            Some(1),
        ),
        plain(
            "pingpong",
            "switch round trip, 2 workers, ns",
            "switch round trip, 2 workers",
            pp_n,
            s.pick(5000, 2000, 100),
            Some(2),
        ),
    ];
    for (label, short, op) in cases {
        let case = json!({"what": op.what, "n": op.n, "workers": op.workers, "rounds": op.rounds});
        let outcomes = runner::alternate(ctx, &pb, "cost", case, op.programs());
        if op.what == "spawn" {
            // The same runs' first rounds: what a fresh process pays.
            rows.push(Row {
                label: format!(
                    "spawn + run to completion, first of the {} rounds in a fresh process, ns \
                     per unit",
                    spawn_rounds
                ),
                short: "spawn + complete, first round".into(),
                key: "first_ns",
                outcomes: outcomes.clone(),
            });
        }
        rows.push(Row {
            label,
            short,
            key: "ns",
            outcomes,
        });
    }
    // The steady figure first, then the first round, as the table reads.
    rows.swap(1, 2);
    pb.finish_and_clear();

    let mut md_rows = Vec::new();
    for r in &rows {
        let weft = r.outcomes[0].field(r.key);
        let mut cells = vec![r.label.clone()];
        for o in &r.outcomes {
            cells.push(match o.summary(r.key) {
                Some(s) => cell(Some(s)),
                None => o.missing(),
            });
        }
        for peer in ["go", "tokio", "threads"] {
            let o = r.outcomes.iter().find(|o| o.peer == peer);
            cells.push(ratio_cell(
                o.and_then(|o| Summary::of_ratios(&weft, &o.field(r.key))),
            ));
        }
        md_rows.push(cells);
    }
    let head = [
        "",
        "weft",
        "Go",
        "tokio",
        "std threads",
        "weft / Go",
        "weft / tokio",
        "weft / threads",
    ];
    let mut markdown = table(&head, &md_rows);
    let limit = thread_limit(ctx);
    markdown += &format!(
        "\nThread limit, 10 threads, 40 units that each need one:\n\n{}",
        table(&["peer", "what happens"], &limit)
    );
    let summary = table(
        &head[..6],
        &md_rows.iter().map(|r| r[..6].to_vec()).collect::<Vec<_>>(),
    ) + &format!(
        "\nAt the thread limit: Go {}; weft {}.\n",
        limit.first().map_or("-", |r| r[1].as_str()),
        limit.get(1).map_or("-", |r| r[1].as_str())
    );

    let chart_name = "cost-bars.svg";
    let panels: Vec<BarPanel> = rows[1..]
        .iter()
        .map(|r| BarPanel {
            title: r.short.clone(),
            y_label: "ns (log scale)".into(),
            y_log: true,
            bars: r
                .outcomes
                .iter()
                .map(|o| (o.peer.to_string(), chart::colour(o.peer), o.summary(r.key)))
                .collect(),
        })
        .collect();
    chart::bars(
        &ctx.out.join(chart_name),
        "Spawn, channel and switch costs (ns, lower is better)",
        &panels,
    )?;
    Ok(Section {
        name: "cost".into(),
        title: "Costs: memory, spawn, channel, switch, thread limit".into(),
        ran: String::new(),
        markdown,
        summary,
        charts: vec![chart_name.into()],
        raw: Vec::new(),
    })
}

/// Go's and weft's behaviour at a thread limit of 10, one run each (a behaviour, not a
/// figure: no repeats).
fn thread_limit(ctx: &mut Ctx) -> Vec<Vec<String>> {
    let go = go_program("cost").and_then(|exe| {
        let f = run_capture(&Cmd::new(exe, &args!["-what", "threadlimit", "-limit", 10]))?;
        let lines: Vec<&str> = f
            .stderr
            .lines()
            .filter(|l| l.starts_with("runtime:") || l.starts_with("fatal error"))
            .take(2)
            .collect();
        Ok(if f.success {
            "survived (no thread exhaustion)".to_string()
        } else {
            format!("the process dies ({}): `{}`", f.status, lines.join(" / "))
        })
    });
    let weft = Cmd::me(&args!["threadlimit", "--limit", 10]).and_then(|c| runner::run_json(&c)).map(|v| {
        ctx.raw.push(json!({"experiment": "cost", "case": {"what": "threadlimit"}, "peer": "weft", "figures": v}));
        format!(
            "{} of {} calls ran, {} got `Err(\"{}\")`; the program goes on",
            v["ok"],
            v["calls"],
            v["failed"],
            v["error"].as_str().unwrap_or("none")
        )
    });
    let show = |r: Result<String, String>| r.unwrap_or_else(|e| format!("skipped: {e}"));
    vec![
        vec!["Go `debug.SetMaxThreads(10)`".into(), show(go)],
        vec!["weft `max_threads(10)`".into(), show(weft)],
    ]
}
