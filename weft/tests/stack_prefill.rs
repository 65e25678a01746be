//! Stacks are filled ahead of their tasks, so that growth in a region under userfaultfd does
//! not take trips to the fault thread: a fresh slot as deep as the last compacted tasks of its
//! spawn site went (stack/mod.rs, `PrefillDepths`), and a restored one as deep as it was when
//! compacted (stack/compact.rs, `RESTORE_DEPTH_MAX`). And a channel send to a compacted
//! receiver restores the receiver's stack itself rather than through a fault on its entry
//! (`restore_if_compacted`).
//!
//! A file of its own, its tests taking turns (`SERIAL`): the stack counters are process-wide,
//! and another test's tasks would move them.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

use common::watchdog;

fn eager_runtime() -> Option<weft::Runtime> {
    common::eager_runtime(1)
}

static SERIAL: Mutex<()> = Mutex::new(());

/// Waits (in a task) until `f` holds, for at most 10 s.
fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < Duration::from_secs(10), "never: {what}");
        weft::time::sleep(Duration::from_millis(2));
    }
}

#[inline(never)]
fn use_40k() {
    use_stack::<{ 40 << 10 }>();
}

#[inline(never)]
fn use_stack<const BYTES: usize>() {
    let mut buf = [0u8; BYTES];
    black_box(&mut buf);
    for i in (0..buf.len()).step_by(1024) {
        buf[i] = i as u8;
    }
    black_box(&buf);
}

fn use_40k_then_park(gate: &AtomicBool) {
    use_40k();
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
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _done = watchdog("deep_tasks_start_prefilled", 60);
    let Some(rt) = eager_runtime() else {
        return;
    };
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

/// How deep the woken tasks below run at each wake. Under ASan their frames (redzones, the
/// debug build's copies) take the 40 KiB run past the 16 pages a restore fills at most, so
/// that build runs half as deep: the test is about restoring as deep as compacted, not a size.
#[cfg(not(feature = "asan"))]
const WOKEN_DEPTH: usize = 40 << 10;
#[cfg(feature = "asan")]
const WOKEN_DEPTH: usize = 20 << 10;

#[test]
fn a_restored_task_that_runs_as_deep_as_before_takes_no_trips() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _done = watchdog("a_restored_task_that_runs_as_deep_as_before", 60);
    let Some(rt) = eager_runtime() else {
        return;
    };
    rt.block_on(|| {
        const N: usize = 40;
        // Each task parks shallow first, then at each wake runs WOKEN_DEPTH deep and parks again.
        let round = Arc::new(AtomicU32::new(0));
        let ran = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..N)
            .map(|_| {
                let (round, ran) = (round.clone(), ran.clone());
                // Slots of a size of their own: not warm ones the other test's tasks left.
                weft::task::Builder::new()
                    .stack_size(128 << 10)
                    .spawn(move || {
                        let mut seen = 0;
                        loop {
                            while round.load(Ordering::Acquire) == seen {
                                weft::task::park();
                            }
                            seen = round.load(Ordering::Acquire);
                            if seen == u32::MAX {
                                return;
                            }
                            use_stack::<WOKEN_DEPTH>();
                            ran.fetch_add(1, Ordering::AcqRel);
                        }
                    })
                    .unwrap()
            })
            .collect();
        // One round: all compacted, then all woken once; returns the growth trips it took.
        let wake_all = |n: u32| {
            let compacted = weft::stack::counters().compactions;
            wait_until("the tasks' compactions", || {
                weft::stack::counters().compactions >= compacted + N as u64
            });
            let before = weft::stack::counters();
            round.store(n, Ordering::Release);
            for task in &tasks {
                task.task().unpark();
            }
            wait_until("the tasks' runs", || {
                ran.load(Ordering::Acquire) >= n as usize * N
            });
            let after = weft::stack::counters();
            assert_eq!(after.fault_restores, before.fault_restores, "{after:?}");
            after.zero_fills - before.zero_fills
        };
        let first = wake_all(1);
        assert!(first >= N as u64, "{first} trips");
        let second = wake_all(2);
        let third = wake_all(3);
        println!("growth trips of {N} woken tasks: {first}, then {second}, then {third}");
        // The first round's tasks were compacted one page deep. In the later ones each was
        // compacted 10 pages deep and is restored as deep: no trip, but one restore in 8
        // fills only the image (this task's own restores count in that 8), and such a task
        // takes two trips. Restored one page deep, each would take two: 160 in all.
        assert!(second + third <= N as u64, "{second} + {third} trips");
        round.store(u32::MAX, Ordering::Release);
        for task in tasks {
            task.task().unpark();
            task.join().unwrap();
        }
    });
}

#[test]
fn a_send_to_a_compacted_receiver_restores_it_without_the_fault_thread() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _done = watchdog("a_send_to_a_compacted_receiver", 60);
    let Some(rt) = eager_runtime() else {
        return;
    };
    rt.block_on(|| {
        const N: usize = 20;
        let parked = Arc::new(AtomicUsize::new(0));
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..N)
            .map(|i| {
                let (tx, rx) = weft::chan::bounded::<usize>(0);
                let parked = parked.clone();
                let receiver = weft::task::Builder::new()
                    .stack_size(64 << 10)
                    .spawn(move || {
                        let marker = [i; 8];
                        parked.fetch_add(1, Ordering::AcqRel);
                        // The entry this receive queues lives on this (compacted) stack.
                        let got = rx.recv().unwrap();
                        assert_eq!(black_box(marker), [i; 8]);
                        got
                    })
                    .unwrap();
                (tx, receiver)
            })
            .unzip();
        wait_until("the receivers' starts", || {
            parked.load(Ordering::Acquire) == N
        });
        let before = weft::stack::counters();
        wait_until("the receivers' compactions", || {
            weft::stack::counters().compactions >= before.compactions + N as u64
        });
        let before = weft::stack::counters();
        for (i, tx) in senders.iter().enumerate() {
            tx.send(i * 3).unwrap();
        }
        for (i, receiver) in receivers.into_iter().enumerate() {
            assert_eq!(receiver.join().unwrap(), i * 3);
        }
        let after = weft::stack::counters();
        assert!(after.restores >= before.restores + N as u64, "{after:?}");
        assert_eq!(after.fault_restores, before.fault_restores, "{after:?}");
    });
}
