//! A spawn that a busy worker places on a less loaded one (to spread long-lived tasks) is not
//! held up when that worker then computes: never-started tasks placed there can be stolen by
//! any idle worker (sched/mod.rs invariant 1).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[test]
fn a_task_placed_on_a_computing_worker_is_run_by_an_idle_one() {
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let started_after = rt.block_on(|| {
        let here = std::thread::current().id();
        // A task that computes on the other worker for up to 3 s.
        let stop = Arc::new(AtomicBool::new(false));
        let computing = Arc::new(AtomicBool::new(false));
        let computer = {
            let (stop, computing) = (stop.clone(), computing.clone());
            weft::spawn(move || {
                let on = std::thread::current().id();
                computing.store(true, Ordering::SeqCst);
                let until = Instant::now() + Duration::from_secs(3);
                while !stop.load(Ordering::Relaxed) && Instant::now() < until {
                    std::hint::spin_loop();
                }
                on
            })
        };
        // Hold this worker (no park) until the other one has taken the computer.
        while !computing.load(Ordering::SeqCst) {
            std::hint::spin_loop();
        }
        // Forty tasks that live on this worker: more than the placement slack.
        let parked: Vec<_> = (0..40)
            .map(|_| {
                weft::spawn(|| {
                    weft::task::park();
                })
            })
            .collect();
        weft::time::sleep(Duration::from_millis(50));
        // This spawn is placed on the computing worker; this worker goes idle at the join.
        let spawned = Instant::now();
        let placed = weft::spawn(move || spawned.elapsed());
        let started_after = placed.join().unwrap();
        stop.store(true, Ordering::Relaxed);
        assert_ne!(
            computer.join().unwrap(),
            here,
            "the computer ran on this worker"
        );
        for h in &parked {
            h.task().unpark();
        }
        for h in parked {
            h.join().unwrap();
        }
        started_after
    });
    assert!(
        started_after < Duration::from_millis(500),
        "the placed task waited {started_after:?} for the computing worker"
    );
}

/// A task that spawns a burst of long-lived tasks keeps its worker busy, so idle workers
/// steal and start most of the burst; without a rule the split is lasting (a million sleepers
/// split 55 : 45), since started tasks never move. A thief with more live tasks leaves the
/// spawner's worker its spawns, which it starts between the spawner's yields, so the split
/// comes out even. Here the spawner works a little between spawns, so that the other worker,
/// idle, could start every one of them.
#[test]
fn a_burst_spawned_by_one_task_splits_evenly_between_workers() {
    const TASKS: usize = 20_000;
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let (on_first, parked) = rt.block_on(|| {
        let first = Arc::new(std::sync::Mutex::new(None));
        let on_first = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let parked_count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let spawner = {
            let (first, on_first, parked_count) =
                (first.clone(), on_first.clone(), parked_count.clone());
            weft::spawn(move || {
                (0..TASKS)
                    .map(|_| {
                        let work = Instant::now();
                        while work.elapsed() < Duration::from_micros(2) {
                            std::hint::spin_loop();
                        }
                        let (first, on_first, parked_count) =
                            (first.clone(), on_first.clone(), parked_count.clone());
                        weft::spawn(move || {
                            let me = std::thread::current().id();
                            let is_first = *first.lock().unwrap().get_or_insert(me) == me;
                            if is_first {
                                on_first.fetch_add(1, Ordering::Relaxed);
                            }
                            parked_count.fetch_add(1, Ordering::Release);
                            weft::task::park();
                        })
                    })
                    .collect::<Vec<_>>()
            })
        };
        let handles = spawner.join().unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while parked_count.load(Ordering::Acquire) < TASKS {
            assert!(
                Instant::now() < deadline,
                "the burst did not park within 60 s"
            );
            weft::time::sleep(Duration::from_millis(1));
        }
        let on_first = on_first.load(Ordering::Relaxed);
        for h in &handles {
            h.task().unpark();
        }
        for h in handles {
            h.join().unwrap();
        }
        (on_first, TASKS)
    });
    let share = on_first as f64 / parked as f64;
    println!(
        "{on_first} of {parked} tasks on one worker ({:.1} %)",
        share * 100.0
    );
    assert!(
        (0.4..=0.6).contains(&share),
        "{on_first} of {parked} tasks started on one worker"
    );
}
