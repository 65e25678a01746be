//! A spawn wakes a sleeping worker to share the work: the first spawn of each resume of the
//! spawning task looks for one (sched/worker.rs, `Spawner::submit`), so a task spawned just
//! before its spawner computes without parking runs at once on the idle worker.

use std::time::{Duration, Instant};

#[test]
fn a_task_spawned_before_its_spawner_computes_runs_on_the_idle_worker() {
    // No monitor: nothing but the spawn's own wake-up may bring the other worker.
    let rt = weft::Runtime::builder()
        .workers(2)
        .monitor_threshold(None)
        .build()
        .unwrap();
    let waited = rt.block_on(|| {
        // Long enough for the other worker to stop spinning and sleep in its poller.
        weft::time::sleep(Duration::from_millis(100));
        let spawned = Instant::now();
        let child = weft::spawn(move || spawned.elapsed());
        let until = Instant::now() + Duration::from_millis(500);
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        child.join().unwrap()
    });
    assert!(
        waited < Duration::from_millis(250),
        "the child waited {waited:?} for its computing spawner's worker"
    );
}
