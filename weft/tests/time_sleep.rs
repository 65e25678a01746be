//! Sleeping tasks and park deadlines.

use std::time::{Duration, Instant};

#[test]
fn sleep_parks_the_task_not_the_worker() {
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    let (slept, other) = rt.block_on(|| {
        let sleeper = weft::spawn(|| {
            let start = Instant::now();
            weft::time::sleep(Duration::from_millis(50));
            start.elapsed()
        });
        // On the one worker, this runs while the sleeper sleeps.
        let other = weft::spawn(Instant::now);
        (sleeper.join().unwrap(), other.join().unwrap())
    });
    assert!(slept >= Duration::from_millis(50), "{slept:?}");
    assert!(slept < Duration::from_secs(2), "{slept:?}");
    let _ = other;
}

#[test]
fn many_sleepers_wake_in_deadline_order() {
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    rt.block_on(|| {
        let start = Instant::now();
        let handles: Vec<_> = (0..1000u64)
            .map(|i| {
                weft::spawn(move || {
                    let deadline = start + Duration::from_millis(i % 50);
                    weft::time::sleep_until(deadline);
                    Instant::now().duration_since(deadline)
                })
            })
            .collect();
        for h in handles {
            let late = h.join().unwrap();
            assert!(late < Duration::from_millis(500), "woke {late:?} late");
        }
    });
}

#[test]
fn park_timeout_returns_and_leaves_no_timer_behind() {
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    rt.block_on(|| {
        let start = Instant::now();
        weft::task::park_timeout(Duration::from_millis(20));
        assert!(start.elapsed() >= Duration::from_millis(20));
        // Early wake: unpark first, then a long timeout returns at once.
        weft::task::current().unpark();
        let start = Instant::now();
        weft::task::park_timeout(Duration::from_secs(30));
        assert!(start.elapsed() < Duration::from_secs(1));
    });
}

#[test]
fn sleep_on_a_plain_thread_sleeps_the_thread() {
    let start = Instant::now();
    weft::time::sleep(Duration::from_millis(10));
    assert!(start.elapsed() >= Duration::from_millis(10));
}

/// `RuntimeBuilder::timer_slack` sets the workers' kernel timer slack, up to 10 µs, as the
/// kernel reads it back.
#[test]
fn timer_slack_is_the_workers_slack() {
    let slack_here = || {
        // SAFETY: PR_GET_TIMERSLACK reads this thread's slack and touches no memory.
        unsafe { libc::prctl(libc::PR_GET_TIMERSLACK) as u64 }
    };
    let rt = weft::Runtime::builder()
        .workers(2)
        .timer_slack(Duration::from_micros(3))
        .build()
        .unwrap();
    assert_eq!(rt.block_on(slack_here), 3_000);
    let default = weft::Runtime::builder().workers(1).build().unwrap();
    assert_eq!(
        default.block_on(slack_here),
        10_000,
        "10 µs: weft's, not the kernel's default of 50 µs"
    );
    let zero = weft::Runtime::builder()
        .workers(1)
        .timer_slack(Duration::ZERO)
        .build()
        .unwrap();
    assert_eq!(zero.block_on(slack_here), 1, "at least 1 ns");
}

/// This thread's voluntary context switches so far (`/proc/thread-self/status`).
fn voluntary_switches() -> u64 {
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    status
        .lines()
        .find_map(|line| line.strip_prefix("voluntary_ctxt_switches:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn a_worker_waits_awake_for_a_deadline_a_few_microseconds_away() {
    // A sleep in the poller costs more than such a wait (sched/worker.rs,
    // `await_close_deadline`): the worker must not block for each of these.
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    let switches = rt.block_on(|| {
        weft::spawn(|| {
            let before = voluntary_switches();
            for _ in 0..1000 {
                let start = Instant::now();
                weft::time::sleep(Duration::from_micros(3));
                assert!(start.elapsed() >= Duration::from_micros(3));
            }
            voluntary_switches() - before
        })
        .join()
        .unwrap()
    });
    assert!(
        switches < 100,
        "the worker blocked {switches} times for 1000 sleeps of 3 µs"
    );
}

/// Every timer of a sleeper, however slack, fires at or after its deadline; precise ones
/// too.
#[test]
fn sleeps_never_end_early() {
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    rt.block_on(|| {
        let handles: Vec<_> = (0..400u64)
            .map(|i| {
                weft::spawn(move || {
                    let wait = Duration::from_micros(37 * (i % 100));
                    let start = Instant::now();
                    match i % 4 {
                        0 => weft::time::sleep(wait),
                        1 => weft::time::sleep_precise(wait),
                        2 => weft::time::sleep_until(start + wait),
                        _ => weft::time::sleep_until_precise(start + wait),
                    }
                    assert!(start.elapsed() >= wait, "sleeper {i} woke early");
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    });
}

/// The workers' timer slack (1 ms by default) lets timers due close together fire in one
/// wake of their worker: 200 sleepers due 50 µs apart, over 10 ms, wake their one worker
/// about ten times, not 200.
#[test]
fn timers_within_the_slack_share_a_wake_of_their_worker() {
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    let switches = rt.block_on(|| {
        let base = Instant::now() + Duration::from_millis(30);
        let before = voluntary_switches();
        let handles: Vec<_> = (0..200u32)
            .map(|i| {
                weft::spawn(move || {
                    let deadline = base + Duration::from_micros(50) * i;
                    weft::time::sleep_until(deadline);
                    assert!(Instant::now() >= deadline);
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        voluntary_switches() - before
    });
    assert!(
        switches < 60,
        "the worker slept {switches} times for 200 timers over 10 ms"
    );
}

/// A task whose timer fires on a busy worker runs next (Go's `runnext`), not behind every
/// task already queued: on one worker with 400 tasks that keep yielding, it waits for the
/// worker's next look at its timers (every 61 picks) and then one pick, where the back of
/// the ready queue would be 400 picks further.
#[test]
fn a_timer_woken_task_runs_before_the_ready_queue() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    const YIELDERS: u64 = 400;
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    let picks_late = rt.block_on(|| {
        let picks = Arc::new(AtomicU64::new(0));
        // The pick count when a yielder first saw the deadline passed.
        let at_deadline = Arc::new(AtomicU64::new(u64::MAX));
        let done = Arc::new(AtomicBool::new(false));
        let deadline = Instant::now() + Duration::from_millis(30);
        let ticker = {
            let picks = picks.clone();
            let done = done.clone();
            weft::spawn(move || {
                weft::time::sleep_until_precise(deadline);
                let woke = picks.load(Ordering::Relaxed);
                done.store(true, Ordering::Relaxed);
                woke
            })
        };
        let yielders: Vec<_> = (0..YIELDERS)
            .map(|_| {
                let (picks, at_deadline, done) = (picks.clone(), at_deadline.clone(), done.clone());
                weft::spawn(move || {
                    while !done.load(Ordering::Relaxed) {
                        let n = picks.fetch_add(1, Ordering::Relaxed);
                        if Instant::now() >= deadline {
                            at_deadline.fetch_min(n, Ordering::Relaxed);
                        }
                        weft::task::yield_now();
                    }
                })
            })
            .collect();
        let woke = ticker.join().unwrap();
        for y in yielders {
            y.join().unwrap();
        }
        woke.saturating_sub(at_deadline.load(Ordering::Relaxed))
    });
    assert!(
        picks_late < YIELDERS / 2,
        "the timer-woken task ran {picks_late} picks after its deadline"
    );
}
