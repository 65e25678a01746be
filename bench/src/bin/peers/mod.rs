//! Shared by the chan_*/time_* bench programs: finding and running the Go peer, medians,
//! CPU time and memory of this process.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The repository root (the bench crate's parent).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("bench crate has a parent")
        .to_path_buf()
}

/// The `go` binary: `$WEFT_GO`, else `.venv-go/bin/go` (scripts/install-go.sh), else `go`.
fn go_binary() -> Result<PathBuf, String> {
    if let Some(go) = std::env::var_os("WEFT_GO") {
        return Ok(PathBuf::from(go));
    }
    let venv = repo_root().join(".venv-go/bin/go");
    if venv.exists() {
        return Ok(venv);
    }
    let found = Command::new("go").arg("version").output();
    match found {
        Ok(out) if out.status.success() => Ok(PathBuf::from("go")),
        _ => Err("no Go toolchain (run scripts/install-go.sh or set WEFT_GO)".to_string()),
    }
}

/// Builds `bench/go/<name>/main.go` (standard library only, no downloads) and runs it with
/// `args`; returns its stdout, or why it was skipped.
pub fn run_go(name: &str, args: &[String]) -> Result<String, String> {
    let go = go_binary()?;
    let src = repo_root().join("bench/go").join(name).join("main.go");
    let out_dir = repo_root().join("target/go");
    std::fs::create_dir_all(&out_dir).map_err(|e| format!("cannot create {out_dir:?}: {e}"))?;
    let bin = out_dir.join(name);
    let build = Command::new(&go)
        .arg("build")
        .arg("-o")
        .arg(&bin)
        .arg(&src)
        .env("GOTOOLCHAIN", "local")
        .env("GOPROXY", "off")
        .env("GOFLAGS", "")
        .env("GO111MODULE", "off")
        .output()
        .map_err(|e| format!("cannot run {go:?}: {e}"))?;
    if !build.status.success() {
        return Err(format!(
            "go build failed: {}",
            String::from_utf8_lossy(&build.stderr).trim()
        ));
    }
    let run = Command::new(&bin)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {bin:?}: {e}"))?;
    if !run.status.success() {
        return Err(format!(
            "go program failed: {}",
            String::from_utf8_lossy(&run.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&run.stdout).into_owned())
}

/// Finds `key=value` in the Go peer's output (lines of `key=value` pairs).
pub fn go_value(output: &str, line_tag: &str, key: &str) -> Option<f64> {
    output
        .lines()
        .filter(|l| l.split_whitespace().next() == Some(line_tag))
        .flat_map(|l| l.split_whitespace())
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// User + system CPU time of this process so far.
pub fn cpu_time() -> Duration {
    // SAFETY: getrusage writes into the zeroed struct we pass; RUSAGE_SELF is valid.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// A field of /proc/self/status in KiB (VmRSS, VmHWM, VmPTE).
pub fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| {
            let rest = l.strip_prefix(field)?.strip_prefix(':')?;
            rest.split_whitespace().next()?.parse().ok()
        })
        .unwrap_or(0)
}

/// Formats an optional ratio `a / b`.
pub fn ratio(a: f64, b: Option<f64>) -> String {
    match b {
        Some(b) if b > 0.0 => format!("{:.2}", a / b),
        _ => "-".to_string(),
    }
}

pub fn opt(v: Option<f64>) -> String {
    v.map_or("null".to_string(), |v| format!("{v:.1}"))
}
