//! Where a spawn starts must not turn the std-blocking habits that work with two workers into
//! deadlocks. A task that spawns a burst of long-lived tasks leaves its own worker behind the
//! other (which steals and starts most of them), and a placement rule that made the spawner's
//! worker start its spawns itself, at once, would run the new task while the spawner holds
//! what it holds. These tests put the spawning task's worker behind first, then block its OS
//! thread in the two ways a user might:
//! - holding a `std::sync::Mutex` across a spawn whose task takes the same mutex;
//! - waiting on a `std::sync::mpsc` receiver for the task it just spawned.
//!
//! Both block a worker thread (README, "Pitfalls"), and both work with a second worker to run
//! the new task. A watchdog aborts the process if either hangs.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// Aborts the process with `what` if it still runs in 60 s.
fn watchdog(what: &'static str) {
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(60));
        eprintln!("placement_std_blocking: {what} hung for 60 s");
        std::process::abort();
    });
}

/// From a task: spawns long-lived tasks, working between spawns so that the other worker
/// (idle) starts them, until this worker is well behind; returns their handles and count.
fn fall_behind() -> (Vec<weft::JoinHandle<()>>, Arc<AtomicUsize>) {
    let here = std::thread::current().id();
    let elsewhere = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for _ in 0..2000 {
        let work = Instant::now();
        while work.elapsed() < Duration::from_micros(2) {
            std::hint::spin_loop();
        }
        let elsewhere = elsewhere.clone();
        handles.push(weft::spawn(move || {
            if std::thread::current().id() != here {
                elsewhere.fetch_add(1, Ordering::Relaxed);
            }
            weft::task::park();
        }));
    }
    (handles, elsewhere)
}

fn release(handles: Vec<weft::JoinHandle<()>>) {
    for h in &handles {
        h.task().unpark();
    }
    for h in handles {
        h.join().unwrap();
    }
}

/// Runs `f` in a task whose worker is behind the other (`fall_behind`), under a watchdog.
fn on_a_worker_that_is_behind(what: &'static str, f: impl FnOnce() + Send + 'static) {
    watchdog(what);
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    rt.block_on(|| {
        let (handles, _) = fall_behind();
        f();
        release(handles);
    });
}

#[test]
fn a_std_mutex_held_across_a_spawn_on_a_worker_that_is_behind() {
    on_a_worker_that_is_behind("a std mutex held across a spawn", || {
        let shared = Arc::new(Mutex::new(0u32));
        let guard = shared.lock().unwrap();
        let child = {
            let shared = shared.clone();
            weft::spawn(move || *shared.lock().unwrap() += 1)
        };
        // Holds the std mutex a while, without parking, then lets it go.
        let until = Instant::now() + Duration::from_millis(5);
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        drop(guard);
        child.join().unwrap();
        assert_eq!(*shared.lock().unwrap(), 1);
    });
}

#[test]
fn a_std_channel_waited_on_for_a_task_spawned_on_a_worker_that_is_behind() {
    on_a_worker_that_is_behind("a std channel waited on for a spawned task", || {
        let (tx, rx) = mpsc::channel();
        let child = weft::spawn(move || tx.send(7u32).unwrap());
        // Blocks this worker's thread until the child has run (on the other worker).
        assert_eq!(rx.recv_timeout(Duration::from_secs(50)), Ok(7));
        child.join().unwrap();
    });
}
