//! The debug page in a real browser: headless Chromium loads `/`, lets it poll for a few
//! seconds, and the rendered DOM shows the task count `/metrics` reports and a spawn site whose
//! tasks all still run as such (not as "max 0 B"). Skipped, with a
//! printed reason, where Chromium is missing (`scripts/install-chromium.sh` installs it).

mod common;

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn chromium() -> Option<String> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|name| {
            Command::new(name)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        })
        .map(str::to_string)
}

/// Runs `command`, killing it after `limit`; returns its stdout.
fn run_bounded(mut command: Command, limit: Duration) -> String {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("cannot start chromium");
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        let _ = stdout.read_to_string(&mut out);
        out
    });
    let deadline = Instant::now() + limit;
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    reader.join().unwrap()
}

fn headless(browser: &str, url: &str) -> Command {
    let mut command = Command::new(browser);
    command.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--window-size=1280,1100",
        "--virtual-time-budget=6000",
    ]);
    command.arg(url);
    command
}

/// The number in `<b id="ID">N</b>`.
fn dom_number(dom: &str, id: &str) -> Option<u64> {
    let start = dom.find(&format!("id=\"{id}\">"))? + id.len() + 6;
    let end = start + dom[start..].find('<')?;
    dom[start..end].trim().parse().ok()
}

fn metric(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
}

#[test]
fn the_page_in_headless_chromium_shows_the_task_count_of_metrics() {
    let Some(browser) = chromium() else {
        println!("skipped: no chromium on PATH (scripts/install-chromium.sh installs it)");
        return;
    };
    common::within(Duration::from_secs(150), move || {
        let rt = weft::Runtime::builder().workers(2).build().unwrap();
        let (tx, rx) = weft::chan::bounded::<()>(0);
        for i in 0..40 {
            let rx = rx.clone();
            rt.spawn(move || {
                // Some stack in use, so the per-site chart has bars.
                let buf = std::hint::black_box([i as u8; 2048]);
                let _ = rx.recv();
                std::hint::black_box(buf);
            });
        }
        let server = rt.block_on(|| weft::debug::serve("127.0.0.1:0").unwrap());
        let addr = server.local_addr();
        std::thread::sleep(Duration::from_millis(200));
        let url = format!("http://{addr}/");

        let mut dump = headless(&browser, &url);
        dump.arg("--dump-dom");
        let dom = run_bounded(dump, Duration::from_secs(60));
        let (_, metrics) = common::http_get(addr, "/metrics");
        let shown = dom_number(&dom, "tasks").unwrap_or_else(|| panic!("no task count:\n{dom}"));
        let samples = dom_number(&dom, "samples").unwrap_or(0);
        let reported = metric(&metrics, "weft_tasks").expect("weft_tasks missing");
        // Both counts include the server's accept task and the connection serving them.
        assert!(
            shown.abs_diff(reported) <= 2,
            "the page shows {shown} tasks, /metrics reports {reported}"
        );
        assert!(shown >= 40, "{shown}");
        assert!(samples >= 2, "the page polled only {samples} time(s)");
        // The 40 tasks' site: none has ended, so it has no sampled figure yet, and says so
        // instead of "max 0 B".
        assert!(
            dom.contains("still running: measured as each one ends"),
            "no running site in the per-site panel:\n{dom}"
        );
        assert!(!dom.contains("max 0 B"), "{dom}");

        let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("debug-page.png");
        let mut screenshot = headless(&browser, &url);
        screenshot.arg(format!("--screenshot={}", shot.display()));
        run_bounded(screenshot, Duration::from_secs(60));
        println!("screenshot: {}", shot.display());
        assert!(shot.exists(), "chromium wrote no screenshot");
        drop(tx);
        server.stop();
        drop(rt);
    });
}
