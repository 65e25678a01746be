//! sched/task/join.rs: the result reaches the joiner exactly once, whether the joiner or the
//! completion comes first, and a cancellation reaches it the same way.

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

use crate::join::{Completion, JoinSlot};
use crate::park::ParkReason;
use crate::sched::{park_current, Waiter};

fn model(result: fn() -> std::thread::Result<usize>, check: fn(std::thread::Result<usize>)) {
    loom::model(move || {
        let slot = Arc::new(JoinSlot::new());
        let task = {
            let slot = slot.clone();
            thread::spawn(move || {
                if let Completion::Joined(Some(waiter)) = slot.complete(result()) {
                    waiter.wake();
                }
            })
        };
        check(slot.wait(Waiter::current, || park_current(ParkReason::Join)));
        task.join().unwrap();
    });
}

#[test]
fn loom_join_result_reaches_the_joiner() {
    model(|| Ok(42), |r| assert_eq!(r.unwrap(), 42));
}

/// Stands for the `Cancelled` payload, which lives outside the loom build.
const CANCELLED: &str = "cancelled";

#[test]
fn loom_join_cancellation_reaches_the_joiner() {
    model(
        || Err(Box::new(CANCELLED)),
        |r| assert_eq!(r.unwrap_err().downcast_ref::<&str>(), Some(&CANCELLED)),
    );
}

/// A result that counts its drops.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// Every result is dropped exactly once, whoever ends up with it — the joiner (then the
/// handle's drop finds it TAKEN), the handle's drop, or a completion that found the handle
/// gone (join.rs invariant 4) — and none is left in the slot when it is freed (join.rs invariant 1: the result is
/// a `MaybeUninit` that holds a value exactly in state DONE).
#[test]
fn loom_join_every_result_is_dropped_once_whoever_takes_it() {
    for joiner_polls in [false, true] {
        loom::model(move || {
            let drops = Arc::new(AtomicUsize::new(0));
            let slot = Arc::new(JoinSlot::<Counted>::new());
            let task = {
                let (slot, drops) = (slot.clone(), drops.clone());
                thread::spawn(move || match slot.complete(Ok(Counted(drops))) {
                    Completion::Detached(result) => drop(result),
                    Completion::Joined(waiter) => assert!(waiter.is_none()),
                })
            };
            if joiner_polls {
                // A poll that may find the result, then the handle's drop.
                drop(slot.poll_wait(|waiter| *waiter = None));
            }
            drop(slot.detach());
            task.join().unwrap();
            drop(slot);
            assert_eq!(drops.load(Ordering::Relaxed), 1);
        });
    }
}

/// A joiner that gives up (join_timeout) while the completion runs: either it takes the
/// result, or it withdraws its waiter and a later join takes it (join.rs invariant 5).
#[test]
fn loom_join_timeout_races_the_completion() {
    loom::model(|| {
        let slot = Arc::new(JoinSlot::<usize>::new());
        let task = {
            let slot = slot.clone();
            thread::spawn(move || {
                if let Completion::Joined(Some(waiter)) = slot.complete(Ok(7)) {
                    waiter.wake();
                }
            })
        };
        // A wait that "times out" at once after registering: one call of `park`.
        let first = slot.wait_timed(Waiter::current, || false);
        task.join().unwrap();
        let result = match first {
            Some(result) => result,
            None => slot.wait(Waiter::current, || park_current(ParkReason::Join)),
        };
        assert_eq!(result.unwrap(), 7);
    });
}

/// A handle awaited as a future (join.rs invariant 6): two pending polls (the second
/// replacing the first's waiter) race the completion, then a blocking join takes over. The
/// result comes out once, and the waiter the completion wakes is the registered one or none.
#[test]
fn loom_join_polls_race_the_completion_then_a_join_takes_over() {
    loom::model(|| {
        let slot = Arc::new(JoinSlot::<usize>::new());
        let task = {
            let slot = slot.clone();
            thread::spawn(move || {
                if let Completion::Joined(Some(waiter)) = slot.complete(Ok(7)) {
                    waiter.wake();
                }
            })
        };
        let mut result = None;
        for _ in 0..2 {
            if result.is_none() {
                result = slot.poll_wait(|waiter| *waiter = Some(Waiter::current()));
            }
        }
        let result = match result {
            Some(result) => result,
            None => {
                slot.withdraw(); // JoinFuture::into_handle
                slot.wait(Waiter::current, || park_current(ParkReason::Join))
            }
        };
        assert_eq!(result.unwrap(), 7);
        task.join().unwrap();
    });
}

/// A handle dropped after a pending poll: the completion never reads the waiter the drop
/// took back, and the result is dropped once.
#[test]
fn loom_join_dropped_after_a_poll_races_the_completion() {
    loom::model(|| {
        let slot = Arc::new(JoinSlot::<usize>::new());
        let task = {
            let slot = slot.clone();
            thread::spawn(move || match slot.complete(Ok(7)) {
                Completion::Joined(Some(waiter)) => waiter.wake(),
                Completion::Joined(None) | Completion::Detached(_) => {}
            })
        };
        if slot
            .poll_wait(|waiter| *waiter = Some(Waiter::current()))
            .is_none()
        {
            drop(slot.detach());
        }
        task.join().unwrap();
    });
}
