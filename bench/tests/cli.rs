//! Every `weft-bench` subcommand at tiny sizes (seconds in all), so the CLI cannot rot.
//! The figures mean nothing at these sizes and nothing here asserts on a time: only that
//! every subcommand runs to its end and writes what it promises.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_weft-bench");

/// Runs `weft-bench ARGS`, killing it (and failing) past `limit`: no test may hang.
fn weft_bench(args: &[&str], env: &[(&str, &str)], limit: Duration) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start weft-bench");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "weft-bench {args:?} ran past {limit:?}; stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weft-bench-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn ok(out: &Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn have_go() -> bool {
    weft_bench::go_binary().is_ok()
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn every_subcommand_runs_at_tiny_sizes_and_writes_the_report() {
    if !have_go() {
        eprintln!("cli: Go parts skipped: no Go toolchain (scripts/install-go.sh installs one)");
    }
    let out = scratch("each");
    let out_s = out.to_str().unwrap();
    let limit = Duration::from_secs(240);
    // `all` runs them all again into its own folder, beside the single subcommands (the
    // figures mean nothing here, so sharing the CPUs costs nothing).
    let all = scratch("all");
    let all_s = all.to_str().unwrap().to_string();
    let all_run = std::thread::spawn(move || {
        weft_bench(
            &["all", "--tiny", "--out", &all_s],
            &[],
            Duration::from_secs(240),
        )
    });
    for sub in [
        "probe", "cost", "echo", "sleepers", "fairness", "wake", "bridge",
    ] {
        ok(
            &weft_bench(&[sub, "--tiny", "--out", out_s], &[], limit),
            sub,
        );
    }
    // --json: every line is JSON, the last one names the report.
    let stdout = ok(
        &weft_bench(&["growth", "--tiny", "--json", "--out", out_s], &[], limit),
        "growth --json",
    );
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(lines.len() > 3, "{stdout}");
    assert!(lines.last().unwrap()["report"].is_string(), "{stdout}");
    assert!(lines
        .iter()
        .any(|l| l["peer"] == "weft" && l["figures"]["requests_per_sec"].is_number()));

    let report = read(&out.join("report.md"));
    for title in [
        "Parked units",
        "Costs:",
        "spawn + join each handle",
        "first of the",
        "TCP echo",
        "Stack growth",
        "Sleepers:",
        "Fairness:",
        "Waking a compacted task",
        "kernel-fill",
        "the tokio bridge",
        "Raw JSON lines",
        "**weft commit**",
        "**kernel**",
    ] {
        assert!(report.contains(title), "the report lacks {title:?}");
    }
    for chart in [
        "probe-memory.svg",
        "cost-bars.svg",
        "echo.svg",
        "growth.svg",
        "sleepers.svg",
    ] {
        let svg = read(&out.join(chart));
        assert!(
            svg.contains("<svg") && svg.contains("weft"),
            "{chart} is not a chart"
        );
        assert!(
            report.contains(&format!("]({chart})")),
            "the report does not show {chart}"
        );
    }
    let raw = read(&out.join("report.jsonl"));
    for exp in [
        "probe", "cost", "echo", "growth", "sleepers", "fairness", "wake", "bridge",
    ] {
        assert!(
            raw.contains(&format!("\"experiment\":\"{exp}\"")),
            "no raw lines of {exp}"
        );
    }
    assert!(
        raw.contains("\"warmup\":true"),
        "the warm-up runs are not recorded"
    );
    if have_go() {
        assert!(
            report.contains("thread exhaustion"),
            "Go's thread limit is missing"
        );
        assert!(
            report.contains("stack growth"),
            "Go's stack-growth share is missing"
        );
        assert!(
            report.contains("| go, stack applied | ")
                && !report.contains("| go, stack applied | failed"),
            "the Go row with the starting stack applied is missing or failed"
        );
    } else {
        assert!(report.contains("skipped: no Go toolchain"));
    }

    ok(&all_run.join().unwrap(), "all");
    let all_report = read(&all.join("report.md"));
    for title in [
        "Stack growth",
        "Sleepers:",
        "Fairness:",
        "Waking a compacted task",
    ] {
        assert!(all_report.contains(title), "`all` did not run {title:?}");
    }

    // `docs` replaces the blocks between the markers in copies of docs/performance.md and the
    // README, twice alike.
    let page = out.join("performance.md");
    let readme = out.join("README.md");
    std::fs::copy(weft_bench::repo_root().join("docs/performance.md"), &page).unwrap();
    std::fs::copy(weft_bench::repo_root().join("README.md"), &readme).unwrap();
    let report_path = out.join("report.md");
    let args = [
        "docs",
        "--report",
        report_path.to_str().unwrap(),
        "--page",
        page.to_str().unwrap(),
        "--readme",
        readme.to_str().unwrap(),
    ];
    ok(&weft_bench(&args, &[], limit), "docs");
    let (page_once, readme_once) = (read(&page), read(&readme));
    assert!(
        page_once.contains("Measured by `weft-bench`"),
        "the performance page's block was not regenerated"
    );
    assert!(
        readme_once.contains("Medians measured by `weft-bench` on"),
        "the README's headline table was not regenerated"
    );
    ok(&weft_bench(&args, &[], limit), "docs again");
    assert_eq!(read(&page), page_once, "docs is not idempotent");
    assert_eq!(read(&readme), readme_once, "docs is not idempotent");
    let _ = std::fs::remove_dir_all(&out);
    let _ = std::fs::remove_dir_all(&all);
}

#[test]
fn echo_runs_chosen_loads_for_chosen_peers() {
    let out = scratch("echo-peers");
    let stdout = ok(
        &weft_bench(
            &[
                "echo",
                "--tiny",
                "--peers",
                "weft,go",
                "--loads",
                "8:3:0,16:2:1",
                "--out",
                out.to_str().unwrap(),
            ],
            &[],
            Duration::from_secs(120),
        ),
        "echo --peers --loads",
    );
    assert!(stdout.contains("C=8 × 3, burst"), "{stdout}");
    assert!(stdout.contains("C=16 × 2, staggered 1 ms"), "{stdout}");
    assert!(stdout.contains("skipped: left out (--peers)"), "{stdout}");
    assert!(
        !stdout.contains("C=50"),
        "the size's loads ran too: {stdout}"
    );
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn without_go_the_go_column_says_why() {
    let out = scratch("nogo");
    let stdout = ok(
        &weft_bench(
            &["growth", "--tiny", "--out", out.to_str().unwrap()],
            &[("WEFT_GO", "/nonexistent/go")],
            Duration::from_secs(120),
        ),
        "growth without Go",
    );
    assert!(stdout.contains("skipped: no Go toolchain"), "{stdout}");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn the_uring_floor_echoes_or_says_why_it_cannot() {
    let out = scratch("uring");
    let stdout = ok(
        &weft_bench(
            &[
                "echo",
                "--tiny",
                "--json",
                "--peers",
                "uring",
                "--loads",
                "8:3:0",
                "--out",
                out.to_str().unwrap(),
            ],
            &[],
            Duration::from_secs(120),
        ),
        "echo --peers uring",
    );
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let measured = lines
        .iter()
        .any(|l| l["peer"] == "uring" && l["figures"]["rtt_count"].as_f64() == Some(24.0));
    match weft_bench::cli::uring_echo::available() {
        Ok(()) => assert!(measured, "uring did not echo 8 × 3 pings:\n{stdout}"),
        Err(why) => {
            eprintln!("cli: uring skipped: {why}");
            let report = read(&out.join("report.md"));
            assert!(report.contains("skipped: io_uring unavailable"), "{report}");
        }
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn without_io_uring_the_uring_server_fails_and_its_row_says_why() {
    let off = [("WEFT_BENCH_URING", "off")];
    let server = weft_bench(
        &["peer", "echo-server", "--runtime", "uring"],
        &off,
        Duration::from_secs(30),
    );
    assert!(
        !server.status.success(),
        "the server started without io_uring"
    );
    let stderr = String::from_utf8_lossy(&server.stderr);
    assert!(stderr.contains("io_uring unavailable"), "{stderr}");
    assert!(!String::from_utf8_lossy(&server.stdout).contains("listening"));

    let out = scratch("nouring");
    let stdout = ok(
        &weft_bench(
            &[
                "echo",
                "--tiny",
                "--peers",
                "weft,uring",
                "--loads",
                "8:2:0",
                "--out",
                out.to_str().unwrap(),
            ],
            &off,
            Duration::from_secs(120),
        ),
        "echo without io_uring",
    );
    assert!(stdout.contains("skipped: io_uring unavailable"), "{stdout}");
    let _ = std::fs::remove_dir_all(&out);
}
