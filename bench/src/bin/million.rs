//! weft's million example next to Go's goroutines, in the same run.
//!
//! ```text
//! cargo build --release --example million
//! cargo run --release -p weft-bench --bin million -- [--tasks N] [--mode idle|8k|64k] [--settle-ms MS]
//! ```
//!
//! Runs `target/release/examples/million` and `bench/go/probe` (built when a Go toolchain
//! is present) with the same arguments, and prints both JSON figures with ratios.

use std::process::Command;

use weft_bench::{build_go, commit, json_number, repo_root, run_go};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let example = repo_root().join("target/release/examples/million");
    let weft_line = Command::new(&example)
        .args(&args)
        .output()
        .map_err(|e| {
            format!(
                "{}: {e} (build it: cargo build --release --example million)",
                example.display()
            )
        })
        .and_then(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .last()
                .map(str::to_owned)
                .ok_or_else(|| "the weft example printed nothing".to_string())
        });
    let go_args: Vec<String> = arg_refs
        .chunks(2)
        .flat_map(|pair| pair.iter().map(|a| a.replacen("--", "-", 1)))
        .collect();
    let go_line = build_go("probe").and_then(|bin| {
        run_go(
            &bin,
            &go_args.iter().map(String::as_str).collect::<Vec<_>>(),
        )
    });
    println!(
        "million: weft vs Go goroutines, args {args:?}, commit {}",
        commit()
    );
    let fields = [
        "spawn_ms",
        "rss_bytes_per_task",
        "pte_bytes_per_task",
        "settled_rss_bytes_per_task",
        "settled_pte_bytes_per_task",
        "peak_rss_bytes",
    ];
    if let Some(policy) = weft_line
        .as_ref()
        .ok()
        .and_then(|l| l.split("\"stack_policy\":\"").nth(1))
        .and_then(|rest| rest.split('"').next())
    {
        println!("weft stack policy: {policy}");
    }
    println!("{:<26} {:>14} {:>14} {:>10}", "", "weft", "Go", "weft/Go");
    for field in fields {
        let w = weft_line.as_ref().ok().and_then(|l| json_number(l, field));
        let g = go_line.as_ref().ok().and_then(|l| json_number(l, field));
        let show = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
        let ratio = match (w, g) {
            (Some(w), Some(g)) if g != 0.0 => format!("{:.2}", w / g),
            _ => "-".into(),
        };
        println!("{field:<26} {:>14} {:>14} {ratio:>10}", show(w), show(g));
    }
    if let Err(e) = &weft_line {
        println!("weft: failed: {e}");
    }
    if let Err(e) = &go_line {
        println!("go: skipped: {e}");
    }
    println!(
        "{{\"weft\":{},\"go\":{}}}",
        weft_line.as_deref().unwrap_or("null"),
        go_line.as_deref().unwrap_or("null")
    );
}
