//! Shared pieces of weft's benchmark programs: statistics, process figures, and running the
//! Go peer programs kept under `bench/go/`.
//!
//! Benchmarks print figures (a table for people, a last JSON line for machines) and never
//! assert: the machines are shared and noisy, so every program measures its peers in the same
//! run and quotes ratios.

pub mod cli;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The median of `samples` (sorted in place).
pub fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    match samples.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => samples[n / 2],
        n => (samples[n / 2 - 1] + samples[n / 2]) / 2.0,
    }
}

/// The `p`-th percentile (0–100) of sorted `samples`, nearest rank.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// User + system CPU time of this process so far.
pub fn cpu_time() -> Duration {
    // SAFETY: getrusage only writes the struct we pass.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// A field of /proc/self/status in bytes (`VmRSS`, `VmPTE`, `VmHWM`).
pub fn status_bytes(field: &str) -> u64 {
    // kB × 1024 as f64 is exact far past any process's memory.
    weft_loadtest::process_status_bytes(std::process::id(), field) as u64
}

/// The repository root (this crate lives in `bench/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The Go toolchain: `$WEFT_GO`, else `.venv-go/bin/go` at the repository root (installed by
/// `scripts/install-go.sh`), else `go` on PATH. `Err` says why there is none.
pub fn go_binary() -> Result<PathBuf, String> {
    let works = |go: &Path| {
        Command::new(go)
            .arg("version")
            .output()
            .is_ok_and(|out| out.status.success())
    };
    if let Some(go) = std::env::var_os("WEFT_GO") {
        let go = PathBuf::from(go);
        return if works(&go) {
            Ok(go)
        } else {
            Err(format!(
                "no Go toolchain ($WEFT_GO={} does not run)",
                go.display()
            ))
        };
    }
    let local = repo_root().join(".venv-go/bin/go");
    [local, PathBuf::from("go")]
        .into_iter()
        .find(|go| works(go))
        .ok_or_else(|| "no Go toolchain (run scripts/install-go.sh)".into())
}

/// Builds the Go program in `bench/go/<name>` (standard library only) and returns the path of
/// the binary, under `target/go/`.
pub fn build_go(name: &str) -> Result<PathBuf, String> {
    let go = go_binary()?;
    let root = repo_root();
    let out = root.join("target/go").join(name);
    std::fs::create_dir_all(root.join("target/go")).map_err(|e| format!("target/go: {e}"))?;
    let status = Command::new(go)
        .current_dir(root.join("bench/go").join(name))
        .env("GOTOOLCHAIN", "local")
        .env("GOPROXY", "off")
        .env("GO111MODULE", "off")
        .args(["build", "-o"])
        .arg(&out)
        .arg(".")
        .status()
        .map_err(|e| format!("go build {name}: {e}"))?;
    if !status.success() {
        return Err(format!("go build {name} failed: {status}"));
    }
    Ok(out)
}

/// Runs a built Go program and returns everything it printed on stdout.
pub fn run_go_output(binary: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new(binary)
        .args(args)
        .output()
        .map_err(|e| format!("{}: {e}", binary.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed: {}",
            binary.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs a built Go program and returns the last line of its output (its JSON summary).
pub fn run_go(binary: &Path, args: &[&str]) -> Result<String, String> {
    run_go_output(binary, args)?
        .lines()
        .last()
        .map(str::to_owned)
        .ok_or_else(|| format!("{} printed nothing", binary.display()))
}

/// Reads a number field from a flat JSON object line (the Go programs print those).
pub fn json_number(line: &str, key: &str) -> Option<f64> {
    let at = line.find(&format!("\"{key}\":"))? + key.len() + 3;
    let rest = &line[at..];
    let end = rest.find([',', '}']).unwrap_or(rest.len());
    rest[..end].trim().parse().ok()
}

/// The current commit, for the header of a report.
pub fn commit() -> String {
    Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(repo_root())
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}
