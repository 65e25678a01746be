//! `weft::task_local!`: each task has its own value, made at first use and dropped when the
//! task ends (also when it is cancelled), before its joiner hears of the end.

mod common;

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::join_within;

static DROPS: AtomicUsize = AtomicUsize::new(0);

struct Counted(#[allow(dead_code)] u64);

impl Drop for Counted {
    fn drop(&mut self) {
        DROPS.fetch_add(1, Ordering::SeqCst);
    }
}

weft::task_local! {
    static ID: Cell<u64> = Cell::new(0);
    static COUNTED: RefCell<Option<Counted>> = RefCell::new(None);
}

weft::task_local! {
    static OTHER: RefCell<Vec<u64>> = RefCell::new(Vec::new());
}

#[test]
fn task_locals_are_per_task_across_parks_on_one_worker() {
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    let ids = rt.block_on(|| {
        let tasks: Vec<_> = (1..=50u64)
            .map(|id| {
                weft::spawn(move || {
                    assert_eq!(ID.with(Cell::get), 0, "a fresh task sees the initial value");
                    ID.with(|v| v.set(id));
                    OTHER.with(|v| v.borrow_mut().push(id));
                    for _ in 0..3 {
                        weft::yield_now(); // the other tasks of this worker set theirs
                        weft::time::sleep(Duration::from_millis(1));
                    }
                    assert_eq!(*OTHER.with(|v| v.borrow().clone()), [id]);
                    ID.with(Cell::get)
                })
            })
            .collect();
        tasks
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect::<Vec<_>>()
    });
    assert_eq!(ids, (1..=50).collect::<Vec<_>>());
}

#[test]
fn task_locals_are_dropped_when_the_task_ends_or_is_cancelled() {
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let before = DROPS.load(Ordering::SeqCst);
    let done: Vec<_> = (0..10)
        .map(|i| rt.spawn(move || COUNTED.with(|c| *c.borrow_mut() = Some(Counted(i)))))
        .collect();
    for h in done {
        join_within(h, Duration::from_secs(10)).unwrap();
    }
    // Dropped before the join returned.
    assert_eq!(DROPS.load(Ordering::SeqCst) - before, 10);

    let parked = rt.spawn(|| {
        COUNTED.with(|c| *c.borrow_mut() = Some(Counted(99)));
        weft::time::sleep(Duration::from_secs(3600));
    });
    std::thread::sleep(Duration::from_millis(20));
    parked.cancel();
    assert!(join_within(parked, Duration::from_secs(10)).is_err());
    assert_eq!(DROPS.load(Ordering::SeqCst) - before, 11);
}

#[test]
fn a_task_local_destructor_may_use_task_locals() {
    struct UsesOther;
    impl Drop for UsesOther {
        fn drop(&mut self) {
            OTHER.with(|v| v.borrow_mut().push(1));
            ID.with(|v| v.set(5));
        }
    }
    weft::task_local! {
        static USES: RefCell<Option<UsesOther>> = RefCell::new(None);
    }
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    let h = rt.spawn(|| USES.with(|u| *u.borrow_mut() = Some(UsesOther)));
    join_within(h, Duration::from_secs(10)).unwrap();
}

#[test]
fn on_a_plain_thread_task_locals_are_per_thread() {
    ID.with(|v| v.set(3));
    let other = std::thread::spawn(|| ID.with(Cell::get)).join().unwrap();
    assert_eq!(other, 0);
    assert_eq!(ID.with(Cell::get), 3);
}

#[test]
fn a_cancelled_task_s_task_local_destructor_may_park() {
    static FINISHED: AtomicUsize = AtomicUsize::new(0);
    struct SleepsOnDrop;
    impl Drop for SleepsOnDrop {
        fn drop(&mut self) {
            weft::time::sleep(Duration::from_millis(2));
            FINISHED.fetch_add(1, Ordering::SeqCst);
        }
    }
    weft::task_local! {
        static SLEEPER: RefCell<Option<SleepsOnDrop>> = RefCell::new(None);
    }
    static SET: AtomicUsize = AtomicUsize::new(0);
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    let h = rt.spawn(|| {
        SLEEPER.with(|s| *s.borrow_mut() = Some(SleepsOnDrop));
        SET.store(1, Ordering::SeqCst);
        weft::time::sleep(Duration::from_secs(3600));
    });
    // Cancelled only once the local is set: on a loaded machine a fixed wait could cancel
    // the task before it ran at all, and then there is no destructor to run.
    while SET.load(Ordering::SeqCst) == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(5));
    h.cancel();
    assert!(join_within(h, Duration::from_secs(10)).is_err());
    assert_eq!(
        FINISHED.load(Ordering::SeqCst),
        1,
        "the destructor was cut short"
    );
}
