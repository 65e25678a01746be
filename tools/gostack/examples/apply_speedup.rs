//! What `weft-gostack apply` buys: requests/s of a Go program before and after, alternated.
//!
//! Builds two stack-growth programs with the Go toolchain — the fixture service
//! (`testdata/service`: per-request goroutines recursing into a 24 KiB frame) and
//! `bench/go/growth` (a goroutine per request through 17.5 KB of frames) — each plain,
//! stripped (`-s -w`) and PIE. For each build it runs the original once with the CPU
//! profiler, applies the starting stack `analyze` recommends for that profile (the library
//! path of `apply --from-profile`), then runs original and copy alternately (one warm-up
//! each, then `--runs` pairs; the copy with `GODEBUG=adaptivestackstart=0,gcshrinkstackoff=1`,
//! or none with `--no-adaptive`). Every run writes a CPU profile; `analyze` reads each.
//!
//! Prints, per build: the size applied, the median requests/s of both, the median of the
//! per-pair ratios, and the share of CPU in stack growth (`runtime.newstack` and below, and
//! `newstack` entered for preemption) in the original's and the copy's profiles; then one
//! JSON line. It never asserts: the figures are for a person (and the issue's acceptance).
//!
//! ```text
//! cargo run --release -p weft-gostack --example apply_speedup [-- --runs 5 --no-adaptive]
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;
use weft_gostack::{analyze, apply, binary, godebug, pprof};

struct Program {
    name: &'static str,
    dir: PathBuf,
    /// `go build` in GOPATH mode (no go.mod).
    gopath_mode: bool,
}

struct Sample {
    requests_per_sec: f64,
    growth_share: f64,
}

fn main() {
    let mut runs = 5usize;
    let mut neutralise = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--runs" => runs = args.next().and_then(|n| n.parse().ok()).unwrap_or(runs),
            "--no-adaptive" => neutralise = true,
            other => {
                eprintln!("apply_speedup: unknown argument {other} (--runs N, --no-adaptive)");
                std::process::exit(2);
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let Some(go) = find_go(&root) else {
        println!("skipped: no Go toolchain (run scripts/install-go.sh)");
        return;
    };
    let out = root.join("target/gostack-speedup");
    std::fs::create_dir_all(&out).expect("target/gostack-speedup");
    let programs = [
        Program {
            name: "service",
            dir: root.join("tools/gostack/testdata/service"),
            gopath_mode: false,
        },
        Program {
            name: "growth",
            dir: root.join("bench/go/growth"),
            gopath_mode: true,
        },
    ];
    let modes: [(&str, &[&str]); 3] = [
        ("plain", &[]),
        ("stripped", &["-ldflags=-s -w"]),
        ("pie", &["-buildmode=pie"]),
    ];
    println!(
        "{} measured pairs per build after one warm-up each; the copy runs with {}",
        runs,
        if neutralise {
            "no GODEBUG (--no-adaptive)".to_string()
        } else {
            format!("GODEBUG={}", godebug::merge("", &godebug::RUN_SETTINGS))
        }
    );
    println!(
        "{:<8} {:<9} {:>8} {:>14} {:>14} {:>7} {:>11} {:>11}",
        "program",
        "build",
        "size",
        "original/s",
        "applied/s",
        "ratio",
        "growth% was",
        "growth% now"
    );
    let mut json = Vec::new();
    for p in &programs {
        for (mode, flags) in modes {
            let bin = out.join(format!("{}.{mode}", p.name));
            if let Err(e) = build(&go, p, flags, &bin) {
                println!("{:<8} {mode:<9} build failed: {e}", p.name);
                continue;
            }
            match measure(p, &bin, runs, neutralise) {
                Ok(row) => {
                    println!(
                        "{:<8} {mode:<9} {:>8} {:>14.0} {:>14.0} {:>6.2}× {:>10.1}% {:>10.1}%",
                        p.name,
                        format!("{} KiB", row.size / 1024),
                        row.original.0,
                        row.applied.0,
                        row.ratio,
                        row.original.1 * 100.0,
                        row.applied.1 * 100.0
                    );
                    json.push(format!(
                        "{{\"program\":\"{}\",\"build\":\"{mode}\",\"size\":{},\"original_rps\":{:.0},\
                         \"applied_rps\":{:.0},\"ratio\":{:.3},\"original_growth_share\":{:.4},\
                         \"applied_growth_share\":{:.4}}}",
                        p.name, row.size, row.original.0, row.applied.0, row.ratio, row.original.1, row.applied.1
                    ));
                }
                Err(e) => println!("{:<8} {mode:<9} failed: {e}", p.name),
            }
        }
    }
    println!("[{}]", json.join(","));
}

struct Row {
    size: u64,
    /// Median requests/s and median growth share.
    original: (f64, f64),
    applied: (f64, f64),
    /// Median of applied/original per pair.
    ratio: f64,
}

fn measure(p: &Program, bin: &Path, runs: usize, neutralise: bool) -> Result<Row, String> {
    // The recommendation comes from a profile of the original, as `apply --from-profile`.
    run(p, bin, "", &bin.with_extension("warmup.pprof"))?;
    let b = binary::load(bin).map_err(|e| e.to_string())?;
    let prof = pprof::load(&bin.with_extension("warmup.pprof")).map_err(|e| e.to_string())?;
    let a = analyze::analyze(&b, &prof, &analyze::Options::default()).map_err(|e| e.to_string())?;
    let size = a
        .recommendation
        .map(|r| r.size)
        .ok_or("the original's profile shows no stack growth")?;
    let data = std::fs::read(bin).map_err(|e| e.to_string())?;
    let applied = apply::apply(&data, size, neutralise).map_err(|e| e.to_string())?;
    let sized = bin.with_extension("sized");
    apply::write_new(bin, &sized, &applied.bytes).map_err(|e| e.to_string())?;
    let env = if neutralise {
        String::new()
    } else {
        godebug::merge("", &godebug::RUN_SETTINGS)
    };
    run(p, &sized, &env, &sized.with_extension("warmup.pprof"))?;
    let (mut orig, mut appl, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..runs {
        let o = run(p, bin, "", &bin.with_extension(format!("{i}.pprof")))?;
        let s = run(p, &sized, &env, &sized.with_extension(format!("{i}.pprof")))?;
        ratios.push(s.requests_per_sec / o.requests_per_sec);
        orig.push(o);
        appl.push(s);
    }
    let med = |v: Vec<f64>| median(v);
    Ok(Row {
        size,
        original: (
            med(orig.iter().map(|s| s.requests_per_sec).collect()),
            med(orig.iter().map(|s| s.growth_share).collect()),
        ),
        applied: (
            med(appl.iter().map(|s| s.requests_per_sec).collect()),
            med(appl.iter().map(|s| s.growth_share).collect()),
        ),
        ratio: med(ratios),
    })
}

/// Runs a build once with the CPU profiler and returns its requests/s and the share of its
/// CPU in `runtime.newstack` (growth and preemption).
fn run(p: &Program, bin: &Path, godebug: &str, profile: &Path) -> Result<Sample, String> {
    let mut cmd = Command::new(bin);
    // The fixture service re-executes itself with GODEBUG=adaptivestackstart=0 appended
    // when its GODEBUG lacks it; an empty GODEBUG left in front would be read first and
    // loop. Unset means the Go defaults.
    if godebug.is_empty() {
        cmd.env_remove("GODEBUG");
    } else {
        cmd.env("GODEBUG", godebug);
    }
    const SERVICE_SECONDS: f64 = 2.0;
    match p.name {
        "service" => cmd.args(["-duration", "2s", "-cpuprofile"]),
        _ => cmd.args(["-requests", "300000", "-cpuprofile"]),
    };
    let out = cmd
        .arg(profile)
        .output()
        .map_err(|e| format!("{}: {e}", bin.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed: {}",
            bin.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let requests_per_sec = match p.name {
        "service" => {
            let handled: f64 = value(&text, "handled=").ok_or("no handled= in the output")?;
            handled / SERVICE_SECONDS
        }
        _ => value(&text, "\"requests_per_sec\":").ok_or("no requests_per_sec in the output")?,
    };
    let b = binary::load(bin).map_err(|e| e.to_string())?;
    let prof = pprof::load(profile).map_err(|e| e.to_string())?;
    let a = analyze::analyze(&b, &prof, &analyze::Options::default()).map_err(|e| e.to_string())?;
    Ok(Sample {
        requests_per_sec,
        growth_share: a.growth.share + a.preempt.share,
    })
}

fn value(text: &str, key: &str) -> Option<f64> {
    let rest = &text[text.find(key)? + key.len()..];
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn build(go: &Path, p: &Program, flags: &[&str], out: &Path) -> Result<(), String> {
    let st = Command::new(go)
        .current_dir(&p.dir)
        .env("GOTOOLCHAIN", "local")
        .env("GOPROXY", "off")
        .env("GOFLAGS", "")
        .env("CGO_ENABLED", "0")
        .env("GO111MODULE", if p.gopath_mode { "off" } else { "on" })
        .arg("build")
        .args(if p.gopath_mode {
            &[][..]
        } else {
            &["-trimpath", "-buildvcs=false"][..]
        })
        .args(flags)
        .arg("-o")
        .arg(out)
        .arg(".")
        .status()
        .map_err(|e| e.to_string())?;
    st.success()
        .then_some(())
        .ok_or_else(|| format!("go build: {st}"))
}

/// `$GOSTACK_GO`, else `.venv-go/bin/go` at the workspace root, else `go` on PATH.
fn find_go(root: &Path) -> Option<PathBuf> {
    let candidates = match std::env::var_os("GOSTACK_GO") {
        Some(go) => vec![PathBuf::from(go)],
        None => vec![root.join(".venv-go/bin/go"), PathBuf::from("go")],
    };
    candidates.into_iter().find(|go| {
        Command::new(go)
            .arg("version")
            .output()
            .is_ok_and(|o| o.status.success())
    })
}
