//! A runtime holding parked tasks uses (almost) no CPU: its workers sleep in their pollers.

use std::time::Duration;

fn cpu_time() -> Duration {
    // SAFETY: getrusage fills the struct we pass.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

#[test]
fn idle_workers_sleep_with_parked_tasks() {
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let handles: Vec<_> = (0..10_000).map(|_| rt.spawn(weft::task::park)).collect();
    // Let every task start and park, and the workers give the parked stacks' memory back
    // (compaction starts 200 ms after a park and takes tens of ms of CPU for 10,000 tasks,
    // longer on a loaded machine): measure once that work has stopped.
    std::thread::sleep(Duration::from_millis(300));
    let housekeeping = || {
        let m = weft::metrics::snapshot();
        (m.compactions, m.stack_reclaimed_bytes)
    };
    let mut last = housekeeping();
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(100));
        let now = housekeeping();
        if now == last {
            break;
        }
        last = now;
    }
    let before = cpu_time();
    std::thread::sleep(Duration::from_secs(1));
    let used = cpu_time() - before;
    eprintln!("cpu time over 1 s with 10,000 parked tasks: {used:?}");
    assert!(
        used < Duration::from_millis(20),
        "idle runtime used {used:?} of CPU in 1 s"
    );
    for h in &handles {
        h.task().unpark();
    }
    for h in handles {
        h.join().unwrap();
    }
}
