//! `weft-bench`: weft next to Go, tokio and std threads in the Go community's goroutine
//! experiments, with a report and charts.
//!
//! Owns: the command line ([`Cli`]) and running the experiments it names.
//!
//! ```text
//! weft-bench probe | cost | echo | growth    one experiment; adds its section to the report
//! weft-bench sleepers | fairness | wake      (timers, weft's fairness, compacted wakes)
//! weft-bench bridge                          async Rust from tasks (weft::tokio) vs tokio
//! weft-bench all [--quick]                   all eight (--quick: under 10 minutes on 2 vCPUs)
//! weft-bench docs [--report R] [--page P] [--readme R]   regenerate docs/performance.md's tables
//!                                                         and the README's headline figures
//! ```
//!
//! Every experiment runs each program once unmeasured, then alternates the peers run by run
//! (`runner.rs`), and writes `target/weft-bench/report.md` (with `report.jsonl` and SVG
//! charts). Layers: `mod.rs` (this) → `probe`/`cost`/`echo`/`growth`/`sleepers`/`fairness`/
//! `wake`/`bridge` (one experiment each; the last four hold their own peers)
//! → `runner` (processes, rounds), `stats`, `chart`, `report`; `peer` is the hidden
//! `weft-bench peer …` the experiments start for the Rust peers, and `uring_echo` the echo
//! experiment's io_uring floor.
//!
//! Why one binary: the experiments' Rust peers, the echo servers and the load client are this
//! same executable re-run with `peer …`, so `cargo build --release -p weft-bench` is the
//! whole set-up besides `scripts/install-go.sh`.

pub mod bridge;
pub mod chart;
pub mod cost;
pub mod echo;
pub mod fairness;
pub mod growth;
pub mod peer;
pub mod probe;
pub mod report;
pub mod runner;
pub mod sleepers;
pub mod stats;
pub mod uring_echo;
pub mod wake;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use runner::{Ctx, Size};

#[derive(Debug, Parser)]
#[command(
    name = "weft-bench",
    version,
    about = "weft next to Go, tokio and std threads: the goroutine experiments, a report and charts"
)]
pub struct Cli {
    #[command(subcommand)]
    cmd: Command,
}

#[derive(Debug, Args, Clone)]
struct Common {
    /// Smaller loads and 3 measured runs per figure (`all --quick`: under 10 minutes).
    #[arg(long, global = true)]
    quick: bool,
    /// Tiny loads, 1 measured run: seconds in all, for tests; the figures mean nothing.
    #[arg(long, global = true, hide = true)]
    tiny: bool,
    /// Measured runs per figure (default 5, 3 with --quick).
    #[arg(long, global = true)]
    runs: Option<usize>,
    /// Output folder for the report and charts.
    #[arg(long, global = true)]
    out: Option<PathBuf>,
    /// Print JSON lines (every run, then the report's path) instead of tables.
    #[arg(long, global = true)]
    json: bool,
    /// Run only these peers, e.g. `--peers weft,go` (names as in the tables; `weft` also
    /// selects `weft, compaction off`); the others' cells say they were left out.
    #[arg(long, global = true, value_delimiter = ',')]
    peers: Option<Vec<String>>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// N units parked (idle / 8k / 64k of stack used first): memory per unit, all parked and
    /// after settling (Go: six forced GCs, StackInuse ÷ goroutines).
    Probe(Wrap),
    /// Memory per blocked unit, spawn, channel send+recv, switch round trip (1 and 2 workers),
    /// OS threads for contrast, and the thread limit.
    Cost(Wrap),
    /// Goroutine-per-connection echo: fresh servers on loopback, C = 8, 2000, 10000.
    Echo(EchoWrap),
    /// A new unit per request running ~17 KiB of frames: requests/s, CPU per request, Go's
    /// stack-growth share by `weft-gostack analyze`.
    Growth(Wrap),
    /// N units sleeping until random deadlines (1M, 1–5 s): wake lateness, CPU while all
    /// sleep, CPU per wake, memory.
    Sleepers(Wrap),
    /// weft on one worker: timers beside tasks that never park (a chat hub, a pipeline).
    Fairness(Wrap),
    /// weft: wake latency and CPU of compacted tasks against resident ones.
    Wake(Wrap),
    /// A request awaiting a tokio timer or a loopback TCP round trip, made by weft tasks
    /// through `weft::tokio`, by tokio tasks, and by threads with `Handle::block_on`:
    /// requests/s, p99, CPU per request; memory of 10,000 units awaiting a tokio sleep.
    Bridge(Wrap),
    /// Every experiment above, then the report.
    All(Wrap),
    /// Rewrite docs/performance.md's tables and README.md's headline figures from a report's
    /// summary block (`readme` is its old name).
    #[command(alias = "readme")]
    Docs {
        /// The report (default: target/weft-bench/report.md).
        #[arg(long)]
        report: Option<PathBuf>,
        /// The performance page to rewrite (default: the repository's docs/performance.md).
        #[arg(long)]
        page: Option<PathBuf>,
        /// The README whose headline table to rewrite (default: the repository's README.md).
        #[arg(long)]
        readme: Option<PathBuf>,
    },
    /// One measurement of a Rust peer (used by the experiments).
    #[command(subcommand, hide = true)]
    Peer(peer::Peer),
}

#[derive(Debug, Args)]
struct Wrap {
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, Args)]
struct EchoWrap {
    #[command(flatten)]
    common: Common,
    /// The loads instead of the size's: CONNS:ROUNDS:STAGGER_MS, comma-separated
    /// (e.g. `2000:5:0,10000:5:0`).
    #[arg(long, value_delimiter = ',', value_parser = echo::Load::parse)]
    loads: Option<Vec<echo::Load>>,
}

/// The default output folder: `target/weft-bench` in the workspace.
pub fn default_out() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::repo_root().join("target"))
        .join("weft-bench")
}

type Experiment = fn(&mut Ctx) -> Result<report::Section, String>;

fn experiments(name: &str) -> Vec<(&'static str, Experiment)> {
    let all: [(&'static str, Experiment); 8] = [
        ("probe", probe::run),
        ("cost", cost::run),
        ("echo", echo::run),
        ("growth", growth::run),
        ("sleepers", sleepers::run),
        ("fairness", fairness::run),
        ("wake", wake::run),
        ("bridge", bridge::run),
    ];
    all.into_iter()
        .filter(|(n, _)| name == "all" || *n == name)
        .collect()
}

fn run_experiments(name: &str, c: Common) -> Result<(), String> {
    run_with(name, c, None)
}

fn run_with(name: &str, c: Common, loads: Option<Vec<echo::Load>>) -> Result<(), String> {
    let size = if c.tiny {
        Size::Tiny
    } else if c.quick {
        Size::Quick
    } else {
        Size::Full
    };
    let mut ctx = Ctx {
        size,
        runs: c.runs.unwrap_or(size.runs()).max(1),
        out: c.out.unwrap_or_else(default_out),
        json: c.json,
        peers: c.peers,
        echo_loads: loads,
        raw: Vec::new(),
    };
    std::fs::create_dir_all(&ctx.out).map_err(|e| format!("{}: {e}", ctx.out.display()))?;
    if crate::go_binary().is_err() && !ctx.json {
        eprintln!("weft-bench: go: skipped: no Go toolchain (run scripts/install-go.sh)");
    }
    for (exp, f) in experiments(name) {
        let start = ctx.raw.len();
        let begun = report::now_utc();
        let mut section = f(&mut ctx)?;
        section.ran = format!(
            "{begun}, {} measured run{} per figure after one warm-up per program, size {:?}",
            ctx.runs,
            if ctx.runs == 1 { "" } else { "s" },
            size
        );
        section.raw = ctx.raw[start..].to_vec();
        section.save(&ctx.out)?;
        if !ctx.json {
            println!(
                "## {} (`weft-bench {exp}`)\n\n{}",
                section.title, section.markdown
            );
        }
    }
    let path = report::write(&ctx.out)?;
    if ctx.json {
        for line in &ctx.raw {
            println!("{line}");
        }
        println!(
            "{}",
            serde_json::json!({"report": path.display().to_string()})
        );
    } else {
        println!("report: {}", path.display());
    }
    Ok(())
}

/// Runs the command line.
pub fn main(cli: Cli) -> Result<(), String> {
    match cli.cmd {
        Command::Probe(w) => run_experiments("probe", w.common),
        Command::Cost(w) => run_experiments("cost", w.common),
        Command::Echo(w) => run_with("echo", w.common, w.loads),
        Command::Growth(w) => run_experiments("growth", w.common),
        Command::Sleepers(w) => run_experiments("sleepers", w.common),
        Command::Fairness(w) => run_experiments("fairness", w.common),
        Command::Wake(w) => run_experiments("wake", w.common),
        Command::Bridge(w) => run_experiments("bridge", w.common),
        Command::All(w) => run_experiments("all", w.common),
        Command::Docs {
            report,
            page,
            readme,
        } => {
            let report = report.unwrap_or_else(|| default_out().join("report.md"));
            let page = page.unwrap_or_else(|| crate::repo_root().join("docs/performance.md"));
            let readme = readme.unwrap_or_else(|| crate::repo_root().join("README.md"));
            report::docs(&report, &page, &readme)?;
            println!(
                "{} and {}'s headline figures regenerated from {}",
                page.display(),
                readme.display(),
                report.display()
            );
            Ok(())
        }
        Command::Peer(p) => peer::main(p),
    }
}
