//! Where a spawn starts must not turn the std-blocking habits that work with two workers into
//! deadlocks. A worker with fewer live tasks than another keeps its spawns (the other leaves
//! them to it unless it is stuck: sched/worker.rs `defers_to`); a rule that ran the new task
//! at once would run it while the spawner holds what it holds, and one that kept it out of
//! thieves' reach would strand it behind a spawner that blocks its thread. These tests put
//! the spawning task's worker far behind first, then block its OS thread in the two ways a
//! user might:
//! - holding a `std::sync::Mutex` across a spawn whose task takes the same mutex;
//! - waiting on a `std::sync::mpsc` receiver for the task it just spawned.
//!
//! Both block a worker thread (README, "Pitfalls"), and both work with a second worker to run
//! the new task. A watchdog aborts the process if either hangs.

mod common;

use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

/// From a task: leaves this task's worker with far fewer live tasks than the other worker.
/// Spawns tasks that park, then ends those that started on this worker; returns the rest.
/// Where the other worker took few of a round (it was kept off a CPU: CI builds alongside),
/// spawns another round, up to ten.
fn fall_behind() -> Vec<weft::JoinHandle<()>> {
    let here = std::thread::current().id();
    let mut theirs = Vec::new();
    for _ in 0..10 {
        let placed: Vec<_> = (0..2000)
            .map(|_| {
                let on = Arc::new(Mutex::new(None));
                let handle = {
                    let on = on.clone();
                    weft::spawn(move || {
                        *on.lock().unwrap() = Some(std::thread::current().id());
                        weft::task::park();
                    })
                };
                (handle, on)
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(30);
        while placed.iter().any(|(_, on)| on.lock().unwrap().is_none()) {
            assert!(
                Instant::now() < deadline,
                "the tasks did not start within 30 s"
            );
            weft::time::sleep(Duration::from_millis(1));
        }
        let (mine, other): (Vec<_>, Vec<_>) = placed
            .into_iter()
            .partition(|(_, on)| *on.lock().unwrap() == Some(here));
        release(mine.into_iter().map(|(h, _)| h).collect());
        theirs.extend(other.into_iter().map(|(h, _)| h));
        if theirs.len() >= 200 {
            break;
        }
    }
    assert!(
        theirs.len() >= 200,
        "only {} tasks started on the other worker",
        theirs.len()
    );
    theirs
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
    let _done = common::watchdog(what, 60);
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    rt.block_on(|| {
        let handles = fall_behind();
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
        let spawned = Instant::now();
        let child = weft::spawn(move || tx.send(7u32).unwrap());
        // Blocks this worker's thread until the child has run: on the other worker, once the
        // monitor has seen this one stuck (10 ms by default).
        assert_eq!(rx.recv_timeout(Duration::from_secs(50)), Ok(7));
        println!("the child ran after {:?}", spawned.elapsed());
        child.join().unwrap();
    });
}
