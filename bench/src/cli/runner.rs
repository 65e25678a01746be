//! Running peers fairly: every program once unmeasured, then A B A B … rounds.
//!
//! Owns: [`Program`] (a peer and how to run it once), [`Outcome`] (what its rounds gave),
//! [`Ctx`] (sizes, output folder, progress bars and the raw JSON lines of this invocation),
//! and running a child process with a time limit ([`run_json`]).
//!
//! Invariants:
//! 1. Each program runs once as a warm-up before any measured run of any program of the
//!    same case; the warm-up's figures are recorded as raw lines marked `"warmup":true` and
//!    never enter a table.
//! 2. Measured round *i* runs every program once, in the order given, before round *i+1*
//!    starts: the *i*-th runs of two peers are neighbours in time, which is what
//!    [`crate::cli::stats::Summary::of_ratios`] pairs.
//! 3. Every child process has a time limit; past it the child is killed and the run counts
//!    as failed. A failed run leaves a hole (`None`), never a made-up figure.
//! 4. A program that `--peers` leaves out ([`Ctx::wants`]) never runs, warm-up included; it
//!    counts as skipped, with that reason in its cells.
//!
//! Why a fresh process per run: memory figures need a process that has touched nothing
//! else, and a warm-up process is how fresh memory gets backed by the hypervisor before the
//! measured runs (on a machine that has just started, the first side to touch memory paid
//! 3–4× for the same spawn loop; shared/FACTS.md).

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};

/// How big the runs are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Size {
    /// The published sizes, 5 measured runs of each program.
    Full,
    /// Smaller loads, 3 measured runs: `all --quick` ends in under 10 minutes on 2 vCPUs.
    Quick,
    /// Seconds in all, 1 measured run: for the test that keeps the CLI from rotting.
    Tiny,
}

impl Size {
    /// Measured runs per program.
    pub fn runs(self) -> usize {
        match self {
            Size::Full => 5,
            Size::Quick => 3,
            Size::Tiny => 1,
        }
    }

    /// Picks the value for this size.
    pub fn pick<T>(self, full: T, quick: T, tiny: T) -> T {
        match self {
            Size::Full => full,
            Size::Quick => quick,
            Size::Tiny => tiny,
        }
    }
}

/// One invocation's settings and what it recorded.
pub struct Ctx {
    pub size: Size,
    pub runs: usize,
    pub out: PathBuf,
    pub json: bool,
    /// `--peers`: run only these (see [`Ctx::wants`]); `None`: every peer.
    pub peers: Option<Vec<String>>,
    /// `echo --loads`: the echo loads instead of the size's.
    pub echo_loads: Option<Vec<crate::cli::echo::Load>>,
    /// Every run's figures as they came, in order (the report's raw JSON lines).
    pub raw: Vec<Value>,
}

impl Ctx {
    /// Whether `--peers` asks for `peer`: a name matches itself and the variants named after
    /// it (`weft` matches `weft, compaction off`).
    pub fn wants(&self, peer: &str) -> bool {
        self.peers.as_ref().is_none_or(|names| {
            names.iter().any(|n| {
                peer == n
                    || peer
                        .strip_prefix(n.as_str())
                        .is_some_and(|rest| rest.starts_with(','))
            })
        })
    }
}

/// Runs a program once and returns its figures.
pub type RunOnce<'a> = Box<dyn FnMut() -> Result<Value, String> + 'a>;

/// A peer in one case: how to run it once, or why it is skipped.
pub struct Program<'a> {
    pub peer: &'static str,
    pub run: Result<RunOnce<'a>, String>,
}

impl<'a> Program<'a> {
    /// A program that runs a child process and reads its last JSON line.
    pub fn command(peer: &'static str, cmd: Result<Cmd, String>) -> Program<'a> {
        Program {
            peer,
            run: cmd.map(|cmd| Box::new(move || run_json(&cmd)) as RunOnce<'a>),
        }
    }
}

/// What one program's measured rounds gave.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub peer: &'static str,
    /// One entry per measured round: `None` where the run failed or was skipped.
    pub runs: Vec<Option<Value>>,
    /// Why the program did not run at all.
    pub skipped: Option<String>,
    /// Why runs failed (first few).
    pub failures: Vec<String>,
}

impl Outcome {
    /// A number field of each round's figures.
    pub fn field(&self, key: &str) -> Vec<Option<f64>> {
        self.runs
            .iter()
            .map(|r| r.as_ref().and_then(|v| v.get(key)?.as_f64()))
            .collect()
    }

    /// The summary of a number field over the rounds.
    pub fn summary(&self, key: &str) -> Option<crate::cli::stats::Summary> {
        let v: Vec<f64> = self.field(key).into_iter().flatten().collect();
        crate::cli::stats::Summary::of(&v)
    }

    /// Table cells for `keys`: each a median with its range; a program without figures says
    /// why once, in the first of them.
    pub fn cells<'k>(&self, keys: impl IntoIterator<Item = &'k str>) -> Vec<String> {
        keys.into_iter()
            .enumerate()
            .map(|(i, key)| match self.summary(key) {
                Some(s) => crate::cli::stats::cell(Some(s)),
                None if i == 0 => self.missing(),
                None => "-".into(),
            })
            .collect()
    }

    /// The median of `key` alone, or why there is none.
    pub fn median_cell(&self, key: &str) -> String {
        self.summary(key)
            .map_or_else(|| self.missing(), |s| crate::cli::stats::num(s.median))
    }

    /// The per-pair ratio `self / base` of `key` for a table; empty for `base` itself.
    pub fn ratio_cell(&self, base: &Outcome, key: &str) -> String {
        if self.peer == base.peer {
            return String::new();
        }
        crate::cli::stats::ratio_cell(crate::cli::stats::Summary::of_ratios(
            &self.field(key),
            &base.field(key),
        ))
    }

    /// What a table cell says when there is no figure.
    pub fn missing(&self) -> String {
        match (&self.skipped, self.failures.first()) {
            (Some(why), _) => format!("skipped: {why}"),
            (None, Some(why)) => format!("failed: {}", short(why)),
            (None, None) => "-".into(),
        }
    }
}

fn short(s: &str) -> String {
    let line = s.lines().next().unwrap_or("").trim();
    if line.chars().count() > 80 {
        line.chars().take(77).collect::<String>() + "..."
    } else {
        line.to_string()
    }
}

/// A progress bar for `len` runs (drawn on stderr when it is a terminal).
pub fn bar(ctx: &Ctx, name: &str, len: usize) -> ProgressBar {
    let pb = if ctx.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(len as u64)
    };
    pb.set_style(
        ProgressStyle::with_template("{prefix:>8} [{bar:30}] {pos}/{len} runs, {elapsed} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb.set_prefix(name.to_string());
    pb
}

/// Runs every program of one case: each once unmeasured (invariant 1), then `ctx.runs`
/// rounds of all of them in turn (invariant 2). `case` tags the raw lines.
pub fn alternate(
    ctx: &mut Ctx,
    pb: &ProgressBar,
    experiment: &str,
    case: Value,
    programs: Vec<Program<'_>>,
) -> Vec<Outcome> {
    let runs = ctx.runs;
    let programs: Vec<Program<'_>> = programs
        .into_iter()
        .map(|p| {
            if ctx.wants(p.peer) {
                p
            } else {
                Program {
                    peer: p.peer,
                    run: Err("left out (--peers)".into()),
                }
            }
        })
        .collect();
    let mut outcomes: Vec<Outcome> = programs
        .iter()
        .map(|p| Outcome {
            peer: p.peer,
            runs: vec![None; runs],
            skipped: p.run.as_ref().err().cloned(),
            failures: Vec::new(),
        })
        .collect();
    let mut runners: Vec<Option<RunOnce<'_>>> = programs.into_iter().map(|p| p.run.ok()).collect();
    for round in 0..=runs {
        for (i, runner) in runners.iter_mut().enumerate() {
            let Some(run) = runner else { continue };
            let peer = outcomes[i].peer;
            pb.set_message(format!("{case} {peer}"));
            let result = run();
            pb.inc(1);
            let warmup = round == 0;
            let mut line = json!({
                "experiment": experiment,
                "case": case,
                "peer": peer,
                "round": round,
                "warmup": warmup,
            });
            match result {
                Ok(v) => {
                    line["figures"] = v.clone();
                    if !warmup {
                        outcomes[i].runs[round - 1] = Some(v);
                    }
                }
                Err(e) => {
                    line["error"] = Value::String(e.clone());
                    if outcomes[i].failures.len() < 3 {
                        outcomes[i].failures.push(e);
                    }
                }
            }
            ctx.raw.push(line);
        }
    }
    outcomes
}

/// A child process to run: program, arguments, environment and a time limit.
#[derive(Debug, Clone)]
pub struct Cmd {
    pub exe: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub limit: Duration,
}

impl Cmd {
    pub fn new(exe: impl Into<PathBuf>, args: &[String]) -> Cmd {
        Cmd {
            exe: exe.into(),
            args: args.to_vec(),
            env: Vec::new(),
            // Past every size's longest run (a million parked units: seconds) with room to
            // spare on a loaded machine; a hung peer costs two minutes, not the whole run.
            limit: Duration::from_secs(120),
        }
    }

    /// This program's hidden `peer` subcommand with `args`.
    pub fn me(args: &[String]) -> Result<Cmd, String> {
        let exe = std::env::current_exe().map_err(|e| format!("cannot find myself: {e}"))?;
        let mut all = vec!["peer".to_string()];
        all.extend_from_slice(args);
        Ok(Cmd::new(exe, &all))
    }
}

/// Strings from anything printable, for argument lists.
#[macro_export]
macro_rules! args {
    ($($a:expr),* $(,)?) => { [$($a.to_string()),*] };
}

/// What a child printed and how it ended.
pub struct Finished {
    pub stdout: String,
    pub stderr: String,
    pub success: bool,
    pub status: String,
}

/// Runs `cmd` to its end, or kills it at its time limit (invariant 3).
pub fn run_capture(cmd: &Cmd) -> Result<Finished, String> {
    let mut child = Command::new(&cmd.exe)
        .args(&cmd.args)
        .envs(cmd.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e}", cmd.exe.display()))?;
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut r) = r {
                let _ = r.read_to_string(&mut text);
            }
            text
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + cmd.limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break Err(format!("killed after {:?}", cmd.limit));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => break Err(format!("wait: {e}")),
        }
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    let status = status.map_err(|e| format!("{}: {e}", name(&cmd.exe)))?;
    Ok(Finished {
        stdout,
        stderr,
        success: status.success(),
        status: status.to_string(),
    })
}

fn name(exe: &Path) -> String {
    exe.file_name()
        .map_or_else(|| exe.display().to_string(), |n| n.to_string_lossy().into())
}

/// Runs `cmd` and parses the last line of its stdout that is a JSON object.
pub fn run_json(cmd: &Cmd) -> Result<Value, String> {
    let f = run_capture(cmd)?;
    if !f.success {
        return Err(format!(
            "{} {}: {}: {}",
            name(&cmd.exe),
            cmd.args.join(" "),
            f.status,
            f.stderr.trim().lines().last().unwrap_or("")
        ));
    }
    last_json(&f.stdout).ok_or_else(|| format!("{} printed no JSON line", name(&cmd.exe)))
}

/// The last line of `text` that parses as a JSON object.
pub fn last_json(text: &str) -> Option<Value> {
    text.lines()
        .rev()
        .filter(|l| l.trim_start().starts_with('{'))
        .find_map(|l| serde_json::from_str::<Value>(l).ok())
}

/// The Go peer `bench/go/<name>`, built once per invocation; `Err` says why it is skipped.
pub fn go_program(name: &str) -> Result<PathBuf, String> {
    static BUILT: OnceLock<Mutex<HashMap<String, Result<PathBuf, String>>>> = OnceLock::new();
    let mut built = BUILT.get_or_init(Mutex::default).lock().unwrap();
    built
        .entry(name.to_string())
        .or_insert_with(|| {
            crate::go_binary().map_err(|_| "no Go toolchain".to_string())?;
            crate::build_go(name)
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    fn ctx(runs: usize) -> Ctx {
        Ctx {
            size: Size::Tiny,
            runs,
            out: std::env::temp_dir(),
            json: true,
            peers: None,
            echo_loads: None,
            raw: Vec::new(),
        }
    }

    #[test]
    fn peers_alternate_after_one_warm_up_each() {
        let order = RefCell::new(Vec::new());
        let order = &order;
        let program = |peer: &'static str| Program {
            peer,
            run: Ok(Box::new(move || {
                order.borrow_mut().push(peer);
                Ok(json!({"n": order.borrow().len()}))
            }) as RunOnce<'_>),
        };
        let skipped = Program {
            peer: "go",
            run: Err("no Go toolchain".into()),
        };
        let mut c = ctx(2);
        let pb = ProgressBar::hidden();
        let out = alternate(
            &mut c,
            &pb,
            "t",
            json!({}),
            vec![program("weft"), skipped, program("tokio")],
        );
        assert_eq!(
            *order.borrow(),
            ["weft", "tokio", "weft", "tokio", "weft", "tokio"]
        );
        // The warm-ups (runs 1 and 2) are recorded but never measured.
        assert_eq!(out[0].field("n"), [Some(3.0), Some(5.0)]);
        assert_eq!(out[2].field("n"), [Some(4.0), Some(6.0)]);
        assert_eq!(out[1].missing(), "skipped: no Go toolchain");
        assert_eq!(c.raw.len(), 6);
        assert_eq!(c.raw.iter().filter(|l| l["warmup"] == true).count(), 2);
    }

    #[test]
    fn peers_left_out_by_the_peers_option_never_run() {
        let ran = RefCell::new(Vec::new());
        let ran = &ran;
        let program = |peer: &'static str| Program {
            peer,
            run: Ok(Box::new(move || {
                ran.borrow_mut().push(peer);
                Ok(json!({}))
            }) as RunOnce<'_>),
        };
        let mut c = ctx(1);
        c.peers = Some(vec!["weft".into(), "go".into()]);
        let out = alternate(
            &mut c,
            &ProgressBar::hidden(),
            "t",
            json!({}),
            vec![
                program("weft"),
                program("tokio"),
                program("go"),
                program("weft, compaction off"),
                program("weftish"),
            ],
        );
        assert_eq!(
            *ran.borrow(),
            [
                "weft",
                "go",
                "weft, compaction off",
                "weft",
                "go",
                "weft, compaction off"
            ]
        );
        assert_eq!(out[1].missing(), "skipped: left out (--peers)");
        assert_eq!(out[4].missing(), "skipped: left out (--peers)");
    }

    #[test]
    fn a_failed_run_leaves_a_hole_not_a_figure() {
        let calls = RefCell::new(0);
        let flaky = Program {
            peer: "weft",
            run: Ok(Box::new(|| {
                *calls.borrow_mut() += 1;
                match *calls.borrow() {
                    2 => Err("crashed".to_string()),
                    n => Ok(json!({"n": n})),
                }
            }) as RunOnce<'_>),
        };
        let mut c = ctx(2);
        let out = alternate(&mut c, &ProgressBar::hidden(), "t", json!({}), vec![flaky]);
        assert_eq!(out[0].field("n"), [None, Some(3.0)]);
        assert_eq!(out[0].failures, ["crashed"]);
    }

    #[test]
    fn a_child_past_its_limit_is_killed() {
        let mut cmd = Cmd::new("sleep", &["10".to_string()]);
        cmd.limit = Duration::from_millis(200);
        let start = Instant::now();
        let err = run_json(&cmd).unwrap_err();
        assert!(err.contains("killed after"), "{err}");
        assert!(start.elapsed() < Duration::from_secs(5));
    }
}
