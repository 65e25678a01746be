//! A fresh slot is prefilled as deep as the last compacted task of its spawn site went
//! (stack/mod.rs, `PrefillDepths`): once a task that runs 40 KiB deep has been compacted,
//! the next tasks of its site start on slots whose pages are there, and their growth takes
//! no trip to the fault thread.
//!
//! A file of its own: the stack counters are process-wide, and another test's tasks would
//! move them.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weft::stack::{StackMode, StackPolicy};

mod common;

use common::watchdog;

/// Waits (in a task) until `f` holds, for at most 10 s.
fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < Duration::from_secs(10), "never: {what}");
        weft::time::sleep(Duration::from_millis(2));
    }
}

#[inline(never)]
fn use_40k_then_park(gate: &AtomicBool) {
    let mut buf = [0u8; 40 << 10];
    black_box(&mut buf);
    for i in (0..buf.len()).step_by(1024) {
        buf[i] = i as u8;
    }
    black_box(&buf);
    while !gate.load(Ordering::Acquire) {
        weft::task::park();
    }
}

/// `n` tasks, all of one spawn site, that each run 40 KiB deep and park until `gate` opens.
fn spawn_deep(n: usize, gate: &Arc<AtomicBool>) -> Vec<weft::JoinHandle<()>> {
    (0..n)
        .map(|_| {
            let gate = gate.clone();
            weft::spawn(move || use_40k_then_park(&gate))
        })
        .collect()
}

fn open(gate: &AtomicBool, tasks: Vec<weft::JoinHandle<()>>) {
    gate.store(true, Ordering::Release);
    for task in tasks {
        task.task().unpark();
        task.join().unwrap();
    }
}

#[test]
fn deep_tasks_start_prefilled_once_one_of_their_site_was_compacted() {
    let _done = watchdog("deep_tasks_start_prefilled", 60);
    let rt = weft::Runtime::builder()
        .workers(1)
        .stack_policy(StackPolicy::eager())
        .build()
        .unwrap();
    let mode = weft::stack::mode();
    if mode != StackMode::Compact {
        eprintln!("skipped: stack mode is {mode}");
        return;
    }
    rt.block_on(|| {
        // Register the slots' region: one task parked and compacted. It stays parked, so
        // that its slot is not a warm one for the tasks below (only fresh ones are filled).
        let registrar_gate = Arc::new(AtomicBool::new(false));
        let before = weft::stack::counters();
        let registrar = {
            let gate = registrar_gate.clone();
            vec![weft::spawn(move || {
                while !gate.load(Ordering::Acquire) {
                    weft::task::park();
                }
            })]
        };
        wait_until("the first compaction", || {
            weft::stack::counters().compactions > before.compactions
        });

        const N: usize = 40;
        let first_gate = Arc::new(AtomicBool::new(false));
        let before_first = weft::stack::counters();
        let first = spawn_deep(N, &first_gate);
        wait_until("the first tasks' compactions", || {
            weft::stack::counters().compactions >= before_first.compactions + N as u64
        });
        let after_first = weft::stack::counters();

        let second_gate = Arc::new(AtomicBool::new(false));
        let second = spawn_deep(N, &second_gate);
        wait_until("the second tasks' compactions", || {
            weft::stack::counters().compactions >= after_first.compactions + N as u64
        });
        let after_second = weft::stack::counters();

        let first_trips = after_first.zero_fills - before_first.zero_fills;
        let second_trips = after_second.zero_fills - after_first.zero_fills;
        println!(
            "growth trips to the fault thread: {first_trips} for the first {N} tasks, \
             {second_trips} for the next {N}"
        );
        // Each of the first runs 10 pages deep on a slot filled one page deep: two trips.
        assert!(
            first_trips >= N as u64,
            "{first_trips} trips: {after_first:?}"
        );
        // None of the second does. This task, compacted while it waits (the policy is
        // eager) and restored one page deep, may take a trip or two when it next runs deeper.
        assert!(second_trips <= 3, "{second_trips} trips: {after_second:?}");
        open(&first_gate, first);
        open(&second_gate, second);
        open(&registrar_gate, registrar);
    });
}
