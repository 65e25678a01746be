//! With the `interpose` feature, `std::thread::sleep` (libc `nanosleep`) and friends park the
//! calling task on its worker's timers instead of blocking the worker.
#![cfg(feature = "interpose")]

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::within;

/// The switch is process-wide, and some tests measure the workers: one test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn runtime(workers: usize) -> (weft::Runtime, Arc<Mutex<Vec<common::Report>>>) {
    common::runtime_with_reports(workers)
}

#[test]
fn std_sleep_in_10000_tasks_takes_about_one_second_with_the_workers_free() {
    let _serial = serial();
    let (runtime, reports) = runtime(2);
    let (elapsed, ticks) = within(Duration::from_secs(30), move || {
        runtime.block_on(|| {
            let start = Instant::now();
            // A ticker on the same workers: it must keep ticking while the sleepers sleep.
            let ticker = weft::spawn(move || {
                let mut ticks = 0;
                while start.elapsed() < Duration::from_millis(900) {
                    weft::time::sleep(Duration::from_millis(10));
                    ticks += 1;
                }
                ticks
            });
            let sleepers: Vec<_> = (0..10_000)
                .map(|i| {
                    if i % 100 == 0 {
                        weft::yield_now(); // the spawner itself must not hog a worker
                    }
                    weft::task::Builder::new()
                        .name("sleeper")
                        .spawn(|| std::thread::sleep(Duration::from_secs(1)))
                        .unwrap()
                })
                .collect();
            for sleeper in sleepers {
                sleeper.join().unwrap();
            }
            (start.elapsed(), ticker.join().unwrap())
        })
    });
    eprintln!("10,000 tasks in std::thread::sleep(1 s): {elapsed:?}, ticker ticked {ticks} times");
    assert!(elapsed >= Duration::from_secs(1), "slept only {elapsed:?}");
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?}");
    assert!(
        ticks >= 30,
        "the ticker ticked only {ticks} times in 900 ms"
    );
    common::assert_never_blocked(&reports);
}

/// On one worker: while one task is in `std::thread::sleep`, another runs.
fn other_task_runs_during_std_sleep() -> bool {
    let (runtime, _reports) = runtime(1);
    within(Duration::from_secs(10), move || {
        runtime.block_on(|| {
            let start = Instant::now();
            let sleeper = weft::spawn(|| std::thread::sleep(Duration::from_millis(300)));
            let other = weft::spawn(move || start.elapsed());
            let ran_at = other.join().unwrap();
            sleeper.join().unwrap();
            assert!(start.elapsed() >= Duration::from_millis(300));
            ran_at < Duration::from_millis(150)
        })
    })
}

#[test]
fn std_sleep_parks_the_task_not_the_worker() {
    let _serial = serial();
    assert!(other_task_runs_during_std_sleep());
}

#[test]
fn switched_off_std_sleep_blocks_the_worker() {
    let _serial = serial();
    weft::interpose::set_enabled(false);
    let parked = other_task_runs_during_std_sleep();
    weft::interpose::set_enabled(true);
    assert!(
        !parked,
        "with interposition off the other task ran during the sleep"
    );
}

/// One way to sleep.
type Sleep = Box<dyn Fn() + Send>;

#[test]
fn libc_sleeps_park_and_keep_their_length() {
    let _serial = serial();
    let (runtime, reports) = runtime(1);
    within(Duration::from_secs(10), move || {
        runtime.block_on(|| {
            let cases: Vec<(&str, Sleep)> = vec![
                (
                    "usleep",
                    Box::new(|| {
                        // SAFETY: plain call.
                        assert_eq!(unsafe { libc::usleep(200_000) }, 0);
                    }),
                ),
                (
                    "clock_nanosleep relative",
                    Box::new(|| {
                        let ts = libc::timespec {
                            tv_sec: 0,
                            tv_nsec: 200_000_000,
                        };
                        // SAFETY: a live timespec.
                        let r = unsafe {
                            libc::clock_nanosleep(
                                libc::CLOCK_MONOTONIC,
                                0,
                                &ts,
                                std::ptr::null_mut(),
                            )
                        };
                        assert_eq!(r, 0);
                    }),
                ),
                (
                    "clock_nanosleep absolute",
                    Box::new(|| {
                        let mut ts = libc::timespec {
                            tv_sec: 0,
                            tv_nsec: 0,
                        };
                        // SAFETY: a live timespec.
                        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
                        ts.tv_nsec += 200_000_000;
                        if ts.tv_nsec >= 1_000_000_000 {
                            ts.tv_nsec -= 1_000_000_000;
                            ts.tv_sec += 1;
                        }
                        // SAFETY: a live timespec.
                        let r = unsafe {
                            libc::clock_nanosleep(
                                libc::CLOCK_MONOTONIC,
                                libc::TIMER_ABSTIME,
                                &ts,
                                std::ptr::null_mut(),
                            )
                        };
                        assert_eq!(r, 0);
                    }),
                ),
                (
                    "poll with no descriptors",
                    Box::new(|| {
                        // SAFETY: no descriptors.
                        assert_eq!(unsafe { libc::poll(std::ptr::null_mut(), 0, 200) }, 0);
                    }),
                ),
            ];
            for (name, sleep) in cases {
                let start = Instant::now();
                let sleeper = weft::spawn(sleep);
                let other = weft::spawn(move || start.elapsed());
                let ran_at = other.join().unwrap();
                sleeper.join().unwrap();
                let slept = start.elapsed();
                assert!(
                    slept >= Duration::from_millis(200),
                    "{name}: slept {slept:?}"
                );
                assert!(
                    ran_at < Duration::from_millis(100),
                    "{name}: blocked the worker"
                );
            }
        })
    });
    common::assert_never_blocked(&reports);
}

#[test]
fn an_invalid_sleep_fails_as_in_libc() {
    let _serial = serial();
    let runtime = weft::Runtime::builder().workers(1).build().unwrap();
    let (in_task, on_thread) = within(Duration::from_secs(10), move || {
        let invalid = || {
            let ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 2_000_000_000,
            };
            // SAFETY: a live timespec.
            let r = unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
            (r, std::io::Error::last_os_error().raw_os_error())
        };
        (runtime.block_on(invalid), invalid())
    });
    assert_eq!(in_task, (-1, Some(libc::EINVAL)));
    assert_eq!(in_task, on_thread);
}
