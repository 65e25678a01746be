//! Spawning in batches between sleeps, tasks that sleep then park: once hung about 1 run in
//! 70 (an idle worker could sleep past a timer that fired during its own idle check). A
//! watchdog turns a hang into a failure.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn one_run() {
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    rt.block_on(|| {
        let started = Arc::new(AtomicUsize::new(0));
        let go = Arc::new(AtomicBool::new(false));
        let waiting: Arc<Mutex<Vec<weft::task::Task>>> = Arc::default();
        let mut handles = Vec::new();
        for _batch in 0..8 {
            for _ in 0..64 {
                let (started, go, waiting) = (started.clone(), go.clone(), waiting.clone());
                handles.push(weft::spawn(move || {
                    weft::time::sleep(Duration::from_micros(50));
                    waiting.lock().unwrap().push(weft::task::current());
                    started.fetch_add(1, Ordering::AcqRel);
                    while !go.load(Ordering::Acquire) {
                        weft::task::park();
                    }
                }));
            }
            weft::time::sleep(Duration::from_millis(2));
        }
        while started.load(Ordering::Acquire) < handles.len() {
            weft::time::sleep(Duration::from_millis(1));
        }
        go.store(true, Ordering::Release);
        for task in waiting.lock().unwrap().drain(..) {
            task.unpark();
        }
        for h in handles {
            h.join().unwrap();
        }
    });
}

#[test]
fn stress_batches_of_sleepers_never_hang() {
    let done = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let done = done.clone();
        std::thread::spawn(move || {
            let start = Instant::now();
            while !done.load(Ordering::Acquire) {
                if start.elapsed() > Duration::from_secs(120) {
                    eprintln!("stress_batches_of_sleepers_never_hang: hung");
                    std::process::abort();
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    for _ in 0..40 {
        one_run();
    }
    done.store(true, Ordering::Release);
    watchdog.join().unwrap();
}
