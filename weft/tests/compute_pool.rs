//! `task::compute`: CPU jobs run on one thread per core, whatever their number; a panic
//! comes back to the caller; the workers' timers keep firing meanwhile.
//!
//! One test function: the thread count of the process is the measurement, so no other test
//! of this binary may start threads meanwhile.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn threads_now() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

fn spin_for(d: Duration) -> u64 {
    let start = Instant::now();
    let mut x = 0u64;
    while start.elapsed() < d {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
    }
    x
}

#[test]
fn two_hundred_cpu_jobs_use_no_more_threads_than_cores_and_panics_come_back() {
    let cores = std::thread::available_parallelism().unwrap().get();
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    // Let the runtime's own threads settle, then count.
    rt.block_on(|| weft::time::sleep(Duration::from_millis(10)));
    let baseline = threads_now();
    let peak = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, stop) = (peak.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                peak.fetch_max(threads_now(), Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let start = Instant::now();
    let (sum, worst_tick) = common::within(Duration::from_secs(60), move || {
        rt.block_on(|| {
            // A task whose 5 ms sleeps must keep waking while the jobs run.
            let ticking = Arc::new(AtomicBool::new(true));
            let t = ticking.clone();
            let ticker = weft::spawn(move || {
                let mut worst = Duration::ZERO;
                while t.load(Ordering::SeqCst) {
                    let at = Instant::now();
                    weft::time::sleep(Duration::from_millis(5));
                    worst = worst.max(at.elapsed());
                }
                worst
            });
            let jobs: Vec<_> = (0..200u64)
                .map(|i| {
                    weft::spawn(move || {
                        weft::task::compute(move || {
                            spin_for(Duration::from_micros(500));
                            i
                        })
                    })
                })
                .collect();
            let sum: u64 = jobs.into_iter().map(|j| j.join().unwrap()).sum();
            ticking.store(false, Ordering::SeqCst);
            (sum, ticker.join().unwrap())
        })
    });
    stop.store(true, Ordering::SeqCst);
    sampler.join().unwrap();
    let peak = peak.load(Ordering::SeqCst);
    println!(
        "200 compute jobs of 0.5 ms: {:?}, threads {baseline} before, {peak} at the peak \
         ({cores} cores); a 5 ms sleep took at most {worst_tick:?} meanwhile",
        start.elapsed()
    );
    assert_eq!(sum, 199 * 100);
    // +2: the sampler thread itself and `within`'s helper thread.
    assert!(
        peak <= baseline + cores + 2,
        "{peak} threads at the peak, {baseline} before, {cores} cores"
    );
    assert!(
        worst_tick < Duration::from_secs(1),
        "timers starved: {worst_tick:?}"
    );

    a_panic_in_a_compute_job_resumes_in_the_caller();
    compute_on_a_plain_thread_runs_in_place();
}

fn a_panic_in_a_compute_job_resumes_in_the_caller() {
    common::quiet_panics();
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    let r = rt.block_on(|| {
        let h = weft::spawn(|| weft::task::compute(|| panic!("boom in compute")));
        h.join()
    });
    let payload = r.unwrap_err();
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"boom in compute"));
    // The pool goes on.
    assert_eq!(rt.block_on(|| weft::task::compute(|| 3)), 3);
}

fn compute_on_a_plain_thread_runs_in_place() {
    let here = std::thread::current().id();
    assert!(weft::task::compute(
        move || std::thread::current().id() == here
    ));
}
