//! park/state.rs: no unpark is lost, a task is scheduled at most once per park, and the
//! unparker's writes are visible to the task once it runs again.

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

use crate::park::state::{ParkState, Unpark};

/// The task (and its worker's after-switch step, which runs on the same thread) parks until a
/// condition holds; `wakers` threads set it and unpark.
fn model(wakers: usize) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(move || {
        let state = Arc::new(ParkState::new());
        let condition = Arc::new(AtomicUsize::new(0));
        let scheduled = Arc::new(AtomicUsize::new(0));
        let task_thread = thread::current();
        let handles: Vec<_> = (0..wakers)
            .map(|_| {
                let (state, condition, scheduled) =
                    (state.clone(), condition.clone(), scheduled.clone());
                let task_thread = task_thread.clone();
                thread::spawn(move || {
                    // Relaxed: the protocol itself must carry the visibility.
                    condition.fetch_add(1, Ordering::Relaxed);
                    if state.unpark() == Unpark::Schedule {
                        // "Schedule": hand the task back to its worker.
                        scheduled.fetch_add(1, Ordering::Release);
                        task_thread.unpark();
                    }
                })
            })
            .collect();
        let mut runs = 0;
        while condition.load(Ordering::Relaxed) < wakers {
            // park(): a token makes it return at once.
            if state.take_token() {
                continue;
            }
            // Switched out; the worker publishes.
            if !state.publish_parked() {
                state.resumed(); // requeued: a token arrived during the switch
                continue;
            }
            // Parked: only a waker that saw PARKED may schedule it, exactly once.
            while scheduled.load(Ordering::Acquire) == runs {
                thread::park(); // a lost unpark deadlocks here, which loom reports
            }
            runs += 1;
            assert_eq!(scheduled.load(Ordering::Relaxed), runs, "scheduled twice");
            state.resumed();
        }
        for h in handles {
            h.join().unwrap();
        }
        assert!(scheduled.load(Ordering::Relaxed) <= runs + 1);
    });
}

#[test]
fn loom_park_one_waker_is_never_lost() {
    model(1);
}

#[test]
fn loom_park_two_wakers_schedule_at_most_once_per_park() {
    model(2);
}

#[test]
fn loom_park_token_before_park_returns_at_once() {
    loom::model(|| {
        let state = Arc::new(ParkState::new());
        let done = Arc::new(AtomicBool::new(false));
        let waker = {
            let (state, done) = (state.clone(), done.clone());
            thread::spawn(move || {
                done.store(true, Ordering::Relaxed);
                assert_eq!(
                    state.unpark(),
                    Unpark::Nothing,
                    "a running task must not be scheduled"
                );
            })
        };
        waker.join().unwrap();
        // The unpark came first: parking consumes the token without switching out.
        assert!(state.take_token());
        assert!(done.load(Ordering::Relaxed));
    });
}

/// A task that blocks its thread instead of switching out (it parks while panicking) is woken
/// by the one unpark that sees BLOCKED, whether it comes before or after the block.
#[test]
fn loom_park_blocked_thread_is_woken() {
    loom::model(|| {
        let state = Arc::new(ParkState::new());
        let done = Arc::new(AtomicBool::new(false));
        let task_thread = thread::current();
        let waker = {
            let (state, done) = (state.clone(), done.clone());
            thread::spawn(move || {
                done.store(true, Ordering::Relaxed);
                if state.unpark() == Unpark::WakeThread {
                    task_thread.unpark();
                }
            })
        };
        while !done.load(Ordering::Relaxed) {
            if state.take_token() {
                continue;
            }
            if state.block_thread() {
                thread::park(); // a lost wake deadlocks here, which loom reports
            }
            state.resumed();
        }
        waker.join().unwrap();
    });
}
