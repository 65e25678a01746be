//! `weft::metrics::snapshot`: task counts by state, threads, and the Prometheus output.
//!
//! The counts are process-wide, so the tests of this file take turns (`SERIAL`).

use std::sync::Mutex;
use std::time::{Duration, Instant};

mod common;

use common::watchdog;

static SERIAL: Mutex<()> = Mutex::new(());

/// Polls `f` until it is true, for at most 10 s.
fn eventually(mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if f() {
            return true;
        }
        weft::time::sleep(Duration::from_millis(2));
    }
    false
}

#[test]
fn task_counts_follow_spawn_park_wake_and_finish() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _done = watchdog("task_counts_follow_spawn_park_wake_and_finish", 60);
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let before = weft::metrics::snapshot();
    let (counts, after) = rt.block_on(|| {
        const N: u64 = 100;
        let (tx, rx) = weft::chan::bounded::<()>(0);
        let handles: Vec<_> = (0..N)
            .map(|_| {
                let rx = rx.clone();
                weft::spawn(move || rx.recv().unwrap())
            })
            .collect();
        let mut parked = None;
        assert!(
            eventually(|| {
                let s = weft::metrics::snapshot();
                let done = s.tasks_parked == N;
                parked = Some(s);
                done
            }),
            "the tasks never all parked: {parked:?}"
        );
        let parked = parked.unwrap();
        for _ in 0..N {
            tx.send(()).unwrap();
        }
        for h in handles {
            h.join().unwrap();
        }
        // A joined task leaves the count once its worker has taken its stack back, a moment
        // after join returns (module doc of weft::metrics, "Task states").
        let mut after = None;
        eventually(|| {
            let s = weft::metrics::snapshot();
            let done = s.tasks == 1;
            after = Some(s);
            done
        });
        (parked, after.unwrap())
    });
    // 100 parked receivers plus this task, running.
    assert_eq!(counts.tasks, 101, "{counts:?}");
    assert_eq!(counts.tasks_running, 1, "{counts:?}");
    assert_eq!(counts.tasks_runnable, 0, "{counts:?}");
    assert_eq!(counts.tasks_compacted, 0, "{counts:?}");
    assert!(counts.stack_slots_in_use >= 101, "{counts:?}");
    assert_eq!(counts.workers, 2, "{counts:?}");
    // Two workers and the monitor.
    assert!(counts.os_threads >= 3, "{counts:?}");
    assert!(counts.spawns >= before.spawns + 101, "{counts:?}");
    // Back to the block_on task alone.
    assert_eq!(
        (after.tasks, after.tasks_parked, after.tasks_running),
        (1, 0, 1),
        "{after:?}"
    );
    drop(rt);
    let gone = weft::metrics::snapshot();
    assert_eq!(
        (gone.tasks, gone.workers, gone.runtimes),
        (0, 0, 0),
        "{gone:?}"
    );
}

#[test]
fn tasks_spawned_from_a_plain_thread_and_woken_by_one_are_counted() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _done = watchdog(
        "tasks_spawned_from_a_plain_thread_and_woken_by_one_are_counted",
        60,
    );
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    let handle = rt.spawn(weft::task::park);
    let task = handle.task();
    let start = Instant::now();
    while weft::metrics::snapshot().tasks_parked != 1 {
        assert!(start.elapsed() < Duration::from_secs(10), "never parked");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(weft::metrics::snapshot().tasks, 1);
    // A wake from this plain thread makes it runnable, then it finishes.
    task.unpark();
    handle.join().unwrap();
    // As above: the count follows the join a moment later.
    let start = Instant::now();
    let mut s = weft::metrics::snapshot();
    while s.tasks != 0 && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(1));
        s = weft::metrics::snapshot();
    }
    assert_eq!(
        (s.tasks, s.tasks_parked, s.tasks_runnable),
        (0, 0, 0),
        "{s:?}"
    );
}

#[test]
fn prometheus_output_parses_with_a_real_parser() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _done = watchdog("prometheus_output_parses_with_a_real_parser", 60);
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let snapshot = rt.block_on(|| {
        let sleepers: Vec<_> = (0..10)
            .map(|_| weft::spawn(|| weft::time::sleep(Duration::from_millis(200))))
            .collect();
        assert!(eventually(|| weft::metrics::snapshot().tasks_parked == 10));
        let snapshot = weft::metrics::snapshot();
        for s in sleepers {
            s.join().unwrap();
        }
        snapshot
    });
    let text = snapshot.to_prometheus();
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned())))
        .expect("the parser rejected the output");
    let value = |name: &str| -> f64 {
        let sample = scrape
            .samples
            .iter()
            .find(|s| s.metric == name)
            .unwrap_or_else(|| panic!("no sample {name} in\n{text}"));
        match sample.value {
            prometheus_parse::Value::Gauge(v) | prometheus_parse::Value::Counter(v) => v,
            ref other => panic!("{name} is {other:?}, not a gauge or counter"),
        }
    };
    assert_eq!(value("weft_tasks"), snapshot.tasks as f64);
    assert_eq!(value("weft_tasks_parked"), 10.0);
    assert_eq!(value("weft_workers"), 2.0);
    assert_eq!(
        value("weft_stack_committed_bytes"),
        snapshot.stack_committed_bytes as f64
    );
    assert!(value("weft_stack_committed_bytes_per_task") > 0.0);
    assert_eq!(
        value("weft_stack_compactions_total"),
        snapshot.compactions as f64
    );
    let info = scrape
        .samples
        .iter()
        .find(|s| s.metric == "weft_stack_policy_info")
        .expect("no policy info");
    // The labels follow the process's stack mode (weft::stack::mode()).
    assert_eq!(
        info.labels.get("reclaim"),
        Some(snapshot.reclaim_policy.name())
    );
    assert_eq!(
        info.labels.get("compaction"),
        Some(snapshot.compaction_mode.name())
    );
    // Every sample has its HELP and TYPE, named `weft_*`, before it.
    let mut documented = std::collections::HashSet::new();
    let mut typed = std::collections::HashSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            documented.insert(rest.split(' ').next().unwrap().to_owned());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut words = rest.split(' ');
            typed.insert(words.next().unwrap().to_owned());
            assert!(matches!(words.next(), Some("gauge" | "counter")), "{line}");
        } else {
            let name = line.split(['{', ' ']).next().unwrap();
            assert!(name.starts_with("weft_"), "{line}");
            assert!(documented.contains(name) && typed.contains(name), "{line}");
            if name.ends_with("_total") {
                assert!(text.contains(&format!("# TYPE {name} counter")), "{line}");
            }
        }
    }
    assert_eq!(scrape.samples.len(), typed.len());
}
