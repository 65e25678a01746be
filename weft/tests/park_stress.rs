//! Stress of the real park/wake path across workers and plain threads: loom checks the
//! protocol, these check the code around the stack switch. Every test is bounded in time.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A ring of tasks passes a token around: each parks until it holds it, then unparks the
/// next. Lost or doubled wakeups show up as a hang or a wrong count.
#[test]
fn stress_token_ring_across_workers() {
    const TASKS: usize = 64;
    const LAPS: usize = 200;
    let rt = weft::Runtime::builder().workers(3).build().unwrap();
    let holder = Arc::new(AtomicUsize::new(0));
    let passes = Arc::new(AtomicUsize::new(0));
    let tasks: Arc<Mutex<Vec<weft::task::Task>>> = Arc::new(Mutex::new(Vec::new()));
    let handles: Vec<_> = (0..TASKS)
        .map(|i| {
            let (holder, passes, tasks) = (holder.clone(), passes.clone(), tasks.clone());
            rt.spawn(move || {
                // Start only once the ring is published, so that no unpark is skipped.
                while tasks.lock().unwrap().len() < TASKS {
                    weft::task::park_timeout(Duration::from_millis(1));
                }
                for _ in 0..LAPS {
                    while holder.load(Ordering::Acquire) != i {
                        weft::task::park();
                    }
                    passes.fetch_add(1, Ordering::Relaxed);
                    let next = (i + 1) % TASKS;
                    holder.store(next, Ordering::Release);
                    let ring = tasks.lock().unwrap();
                    if let Some(task) = ring.get(next) {
                        task.unpark();
                    }
                }
            })
        })
        .collect();
    *tasks.lock().unwrap() = handles.iter().map(|h| h.task()).collect();
    // No nudges: a lost wakeup stalls the ring and fails here.
    let deadline = Instant::now() + Duration::from_secs(60);
    while passes.load(Ordering::Relaxed) < TASKS * LAPS {
        let stalled = passes.load(Ordering::Relaxed);
        assert!(
            Instant::now() < deadline,
            "ring stalled at {stalled} passes"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    for h in handles {
        h.join().unwrap();
    }
}

/// Tasks park with deadlines while other tasks and plain threads unpark them at random:
/// every task finishes, whichever comes first.
#[test]
fn stress_unpark_races_with_deadlines_and_yields() {
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let done = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..500)
        .map(|i| {
            let done = done.clone();
            rt.spawn(move || {
                for round in 0..20 {
                    match (i + round) % 3 {
                        0 => weft::task::park_timeout(Duration::from_micros(200)),
                        1 => weft::yield_now(),
                        _ => weft::time::sleep(Duration::from_micros(100)),
                    }
                }
                done.fetch_add(1, Ordering::Relaxed);
            })
        })
        .collect();
    let tasks: Vec<_> = handles.iter().map(|h| h.task()).collect();
    let tasks = Arc::new(tasks);
    let unparkers: Vec<_> = (0..2)
        .map(|t| {
            let tasks = tasks.clone();
            std::thread::spawn(move || {
                let start = Instant::now();
                let mut i = t;
                while start.elapsed() < Duration::from_millis(300) {
                    tasks[i % tasks.len()].unpark();
                    i += 7;
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    for u in unparkers {
        u.join().unwrap();
    }
    assert_eq!(done.load(Ordering::Relaxed), 500);
}

/// Joins across workers, with the joined task finishing before, during and after the join.
#[test]
fn stress_join_races() {
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let total = rt.block_on(|| {
        let mut total = 0u64;
        for round in 0..2000u64 {
            let h = weft::spawn(move || {
                if round % 2 == 0 {
                    weft::yield_now();
                }
                round
            });
            if round % 3 == 0 {
                weft::yield_now();
            }
            total += h.join().unwrap();
        }
        total
    });
    assert_eq!(total, (0..2000u64).sum());
}
