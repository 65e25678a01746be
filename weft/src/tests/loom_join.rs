//! task/join.rs: the result reaches the joiner exactly once, whether the joiner or the
//! completion comes first, and a dropped completion reports cancellation.

use loom::thread;

use crate::join::{pair, CANCELLED};
use crate::park::{park_current, Waiter};

#[test]
fn loom_join_result_reaches_the_joiner() {
    loom::model(|| {
        let (slot, completion) = pair::<usize>();
        let task = thread::spawn(move || {
            if let Some(waiter) = completion.complete(Ok(42)) {
                waiter.wake();
            }
        });
        let value = slot.wait(Waiter::current, park_current).unwrap();
        assert_eq!(value, 42);
        task.join().unwrap();
    });
}

#[test]
fn loom_join_dropped_completion_is_cancelled() {
    loom::model(|| {
        let (slot, completion) = pair::<usize>();
        let task = thread::spawn(move || drop(completion));
        let payload = slot.wait(Waiter::current, park_current).unwrap_err();
        assert_eq!(payload.downcast_ref::<&str>(), Some(&CANCELLED));
        task.join().unwrap();
    });
}
