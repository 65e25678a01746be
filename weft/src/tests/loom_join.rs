//! task/join.rs: the result reaches the joiner exactly once, whether the joiner or the
//! completion comes first, and a cancellation reaches it the same way.

use loom::sync::Arc;
use loom::thread;

use crate::join::{JoinSlot, CANCELLED};
use crate::park::{park_current, Waiter};

fn model(result: fn() -> std::thread::Result<usize>, check: fn(std::thread::Result<usize>)) {
    loom::model(move || {
        let slot = Arc::new(JoinSlot::new());
        let task = {
            let slot = slot.clone();
            thread::spawn(move || {
                if let Some(waiter) = slot.complete(result()) {
                    waiter.wake();
                }
            })
        };
        check(slot.wait(Waiter::current, park_current));
        task.join().unwrap();
    });
}

#[test]
fn loom_join_result_reaches_the_joiner() {
    model(|| Ok(42), |r| assert_eq!(r.unwrap(), 42));
}

#[test]
fn loom_join_cancellation_reaches_the_joiner() {
    model(
        || Err(Box::new(CANCELLED)),
        |r| assert_eq!(r.unwrap_err().downcast_ref::<&str>(), Some(&CANCELLED)),
    );
}
