//! Shared by the chan_* bench programs: running the Go peer (`bench/go/cost`), medians and
//! ratios.

#![allow(dead_code)]

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

pub fn median(mut v: Vec<f64>) -> f64 {
    weft_bench::median(&mut v)
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
