//! `Runtime::block_on` and `weft::run` take closures that borrow from the caller, and never
//! return (nor unwind) while the task still runs: on success, on a panic in the closure, from
//! a task of the same runtime (the closure runs in place), from a task of another runtime, and
//! when the caller is cancelled while it waits (the task is cancelled and waited for).

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weft::context::{Context, ContextError};

const LIMIT: Duration = Duration::from_secs(20);

#[test]
fn the_closure_borrows_and_mutates_the_callers_locals() {
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let text = String::from("hello borrowed world");
    let mut seen = Vec::new();
    // Returns a value that borrows `text`, and pushes into `seen` through `&mut`.
    let first: &str = rt.block_on(|| {
        seen.push(weft::task::current().id());
        text.split(' ').next().unwrap()
    });
    assert_eq!(first, "hello");
    assert_eq!(seen.len(), 1);
    // weft::run too, with a nested weft::run inside it.
    let total = weft::run(|| {
        let inner = weft::run(|| text.len());
        inner + seen.len()
    });
    assert_eq!(total, text.len() + 1);
}

struct CountDrop<'a>(&'a AtomicUsize);

impl Drop for CountDrop<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn a_panic_in_the_closure_resumes_on_the_caller_after_the_task_ended() {
    common::quiet_panics();
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let dropped = AtomicUsize::new(0);
    let guard = CountDrop(&dropped);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.block_on(|| {
            let _guard = guard; // a borrowing capture, dropped by the task's unwind
            weft::time::sleep(Duration::from_millis(5));
            panic!("boom in block_on");
        })
    }));
    let payload = caught.expect_err("the panic did not reach the caller");
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"boom in block_on"));
    // The capture was dropped on the task before the panic came back.
    assert_eq!(dropped.load(Ordering::SeqCst), 1);
    // The runtime goes on.
    assert_eq!(rt.block_on(|| 7), 7);
}

#[test]
fn from_a_task_of_the_same_runtime_the_closure_runs_in_that_task() {
    let rt = Arc::new(weft::Runtime::builder().workers(2).build().unwrap());
    let inner = rt.clone();
    let (outer_id, inner_id, sum) = rt.block_on(|| {
        let values = [1, 2, 3];
        let outer_id = weft::task::current().id();
        let (inner_id, sum) =
            inner.block_on(|| (weft::task::current().id(), values.iter().sum::<i32>()));
        (outer_id, inner_id, sum)
    });
    assert_eq!(outer_id, inner_id);
    assert_eq!(sum, 6);
}

/// A caller cancelled while it waits must not leave its frame before the task it waits for
/// ended: the caller's local checks, in its destructor, that the task's own guard ran.
struct MustOutlive<'a> {
    task_ended: &'a AtomicBool,
    checked: Arc<AtomicBool>,
}

impl Drop for MustOutlive<'_> {
    fn drop(&mut self) {
        assert!(
            self.task_ended.load(Ordering::SeqCst),
            "the caller unwound before its block_on task ended"
        );
        self.checked.store(true, Ordering::SeqCst);
    }
}

struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        // Slow on purpose: a caller that did not wait would be long gone.
        std::thread::sleep(Duration::from_millis(50));
        self.0.store(true, Ordering::SeqCst);
    }
}

#[test]
fn a_task_caller_cancelled_while_it_waits_cancels_the_task_and_waits_for_it() {
    common::quiet_panics();
    let outer = weft::Runtime::builder().workers(1).build().unwrap();
    let inner = Arc::new(weft::Runtime::builder().workers(1).build().unwrap());
    let checked = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicBool::new(false));
    let (inner2, checked2, started2) = (inner.clone(), checked.clone(), started.clone());
    let caller = outer.spawn(move || {
        let task_ended = AtomicBool::new(false);
        let _check = MustOutlive {
            task_ended: &task_ended,
            checked: checked2,
        };
        inner2.block_on(|| {
            let _set = SetOnDrop(&task_ended);
            started2.store(true, Ordering::SeqCst);
            weft::time::sleep(Duration::from_secs(3600));
        });
        unreachable!("the sleep was cancelled");
    });
    let deadline = Instant::now() + LIMIT;
    while !started.load(Ordering::SeqCst) {
        assert!(Instant::now() < deadline, "the block_on task never started");
        std::thread::sleep(Duration::from_millis(1));
    }
    caller.cancel();
    let result = common::join_within(caller, LIMIT);
    assert!(weft::task::is_cancelled(&*result.unwrap_err()));
    assert!(
        checked.load(Ordering::SeqCst),
        "the caller's local was not dropped"
    );
    // Both runtimes go on.
    assert_eq!(inner.block_on(|| 1) + outer.block_on(|| 1), 2);
}

#[test]
fn a_thread_caller_whose_context_ends_cancels_the_task_and_waits_for_it() {
    common::quiet_panics();
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    let task_ended = AtomicBool::new(false);
    let checked = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let result = Context::with_timeout(Duration::from_millis(50)).bind(|| {
        let _check = MustOutlive {
            task_ended: &task_ended,
            checked: checked.clone(),
        };
        rt.block_on(|| {
            let _set = SetOnDrop(&task_ended);
            weft::time::sleep(Duration::from_secs(3600));
        })
    });
    assert_eq!(result, Err(ContextError::DeadlineExceeded));
    assert!(checked.load(Ordering::SeqCst));
    assert!(start.elapsed() < LIMIT, "took {:?}", start.elapsed());
}
