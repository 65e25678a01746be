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
