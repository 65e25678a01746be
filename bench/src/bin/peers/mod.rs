//! Shared by the chan_*/time_* bench programs: finding and running the Go peer, medians,
//! CPU time and memory of this process.

#![allow(dead_code)]

/// Builds `bench/go/<name>` (standard library only, no downloads) and runs it with `args`;
/// returns its stdout, or why it was skipped.
pub fn run_go(name: &str, args: &[String]) -> Result<String, String> {
    let bin = weft_bench::build_go(name)?;
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    weft_bench::run_go_output(&bin, &args)
}

/// The median over `rounds` runs of `bench/go/cost` with `args`, its `ns` figure.
pub fn go_cost_ns(args: &[&str], rounds: usize) -> Result<f64, String> {
    let bin = weft_bench::build_go("cost")?;
    let runs = (0..rounds)
        .map(|_| {
            let line = weft_bench::run_go(&bin, args)?;
            weft_bench::json_number(&line, "ns").ok_or(format!("unexpected Go output: {line}"))
        })
        .collect::<Result<Vec<f64>, String>>()?;
    Ok(median(runs))
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
    weft_bench::median(&mut v)
}

/// A field of /proc/self/status in KiB (VmRSS, VmHWM, VmPTE).
pub fn status_kib(field: &str) -> u64 {
    weft_bench::status_bytes(field) / 1024
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
