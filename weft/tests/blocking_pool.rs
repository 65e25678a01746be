//! `spawn_blocking`: the caller parks, its worker runs on; panics travel back; the thread
//! limit is an error, never a hang.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[test]
fn blocking_call_parks_only_the_caller() {
    // One worker: if the blocking call held it, the counter task could not run meanwhile, and
    // the blocking call would give up after 5 s.
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    rt.block_on(|| {
        let ticks = Arc::new(AtomicUsize::new(0));
        let counter_ticks = ticks.clone();
        let counter = weft::spawn(move || {
            for _ in 0..10 {
                weft::time::sleep(Duration::from_millis(5));
                counter_ticks.fetch_add(1, Ordering::Relaxed);
            }
        });
        let (counted, thread) = weft::task::spawn_blocking(move || {
            let start = Instant::now();
            while ticks.load(Ordering::Relaxed) < 10 && start.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(1));
            }
            let name = std::thread::current().name().map(str::to_owned);
            (ticks.load(Ordering::Relaxed), name)
        });
        assert_eq!(counted, 10, "the worker was blocked");
        assert_eq!(thread.as_deref(), Some("weft-blocking"));
        counter.join().unwrap();
    });
}

#[test]
fn panic_in_blocking_call_resumes_in_the_caller() {
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    let err = rt.block_on(|| {
        weft::spawn(|| weft::task::spawn_blocking(|| -> u8 { panic!("boom in the pool") }))
            .join()
            .unwrap_err()
    });
    assert_eq!(err.downcast_ref::<&str>(), Some(&"boom in the pool"));
}

#[test]
fn thread_limit_is_an_error_not_a_hang() {
    // 1 worker + 1 monitor + 1 pool thread.
    let rt = weft::Runtime::builder()
        .workers(1)
        .max_threads(3)
        .build()
        .unwrap();
    rt.block_on(|| {
        let started = Arc::new(AtomicBool::new(false));
        let release = Arc::new(AtomicBool::new(false));
        let (job_started, job_release) = (started.clone(), release.clone());
        let busy = weft::spawn(move || {
            weft::task::spawn_blocking(move || {
                job_started.store(true, Ordering::Release);
                let start = Instant::now();
                while !job_release.load(Ordering::Acquire)
                    && start.elapsed() < Duration::from_secs(5)
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        });
        while !started.load(Ordering::Acquire) {
            weft::time::sleep(Duration::from_millis(1));
        }
        let err = weft::task::try_spawn_blocking(|| 1).unwrap_err();
        let message = err.to_string();
        assert!(message.contains("limit of 3 OS threads"), "{message}");
        release.store(true, Ordering::Release);
        busy.join().unwrap();
        // Once the thread is free again, the pool works.
        assert_eq!(weft::task::spawn_blocking(|| 7), 7);
    });
    let too_few = weft::Runtime::builder().workers(4).max_threads(4).build();
    assert!(too_few.unwrap_err().to_string().contains("max_threads"));
}

#[test]
fn blocking_call_on_a_plain_thread_runs_in_place() {
    let here = std::thread::current().id();
    assert!(weft::task::spawn_blocking(move || std::thread::current()
        .id()
        == here));
}

#[test]
fn many_blocking_calls_share_a_few_threads() {
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let sum = rt.block_on(|| {
        let handles: Vec<_> = (0..200u64)
            .map(|i| weft::spawn(move || weft::task::spawn_blocking(move || i * 2)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
    });
    assert_eq!(sum, 199 * 200);
}
