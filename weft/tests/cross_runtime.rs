//! A spawn aimed at a runtime — `Runtime::spawn`, `Handle::spawn`, `block_on`, a nested
//! `weft::run` — goes to that runtime even when called from a task of another one, and
//! `Handle::enter`'s guard restores exactly what it changed.

mod common;

use std::time::Duration;

use common::join_within;

#[test]
fn runtime_spawn_from_another_runtimes_task_runs_on_that_runtime() {
    let small = weft::Runtime::builder()
        .workers(1)
        .stack_size(64 << 10)
        .build()
        .unwrap();
    let big = weft::Runtime::builder()
        .workers(1)
        .stack_size(8 << 20)
        .build()
        .unwrap();
    let big_handle = big.handle();
    let (size, same_thread) = small.block_on(move || {
        let caller = std::thread::current().id();
        let h = big_handle.spawn(move || {
            (
                weft::task::current().stack_size(),
                std::thread::current().id() == caller,
            )
        });
        h.join().unwrap()
    });
    assert_eq!(
        size,
        8 << 20,
        "the task got the caller's runtime's stack size"
    );
    assert!(!same_thread, "the task ran on the caller's runtime");
}

#[test]
fn the_target_runtimes_shutdown_cancels_what_was_spawned_from_elsewhere() {
    let a = weft::Runtime::builder().workers(1).build().unwrap();
    let b = weft::Runtime::builder().workers(1).build().unwrap();
    let b_handle = b.handle();
    let parked = a.block_on(move || {
        b_handle.spawn(|| loop {
            weft::task::park();
        })
    });
    std::thread::sleep(Duration::from_millis(20));
    drop(b);
    assert!(join_within(parked, Duration::from_secs(5)).is_err());
    drop(a);
}

#[test]
fn block_on_and_nested_run_from_a_task_use_their_own_runtime() {
    let outer = weft::Runtime::builder().workers(1).build().unwrap();
    let inner = weft::Runtime::builder()
        .workers(1)
        .stack_size(1 << 20)
        .build()
        .unwrap();
    let inner = std::sync::Arc::new(inner);
    let inner2 = inner.clone();
    let size = outer.block_on(move || inner2.block_on(|| weft::task::current().stack_size()));
    assert_eq!(size, 1 << 20);
    let nested = outer.block_on(|| {
        let outer_thread = std::thread::current().id();
        weft::run(move || std::thread::current().id() != outer_thread)
    });
    assert!(nested, "a nested weft::run ran on the outer runtime");
}

#[test]
fn enter_guards_dropped_out_of_order_panic_and_leave_the_thread_clean() {
    let a = weft::Runtime::builder().workers(1).build().unwrap();
    let b = weft::Runtime::builder().workers(1).build().unwrap();
    let ga = a.handle().enter();
    let gb = b.handle().enter();
    let out_of_order = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(ga)));
    assert!(out_of_order.is_err());
    drop(gb);
    // Nothing is left entered: a spawn here is outside any runtime.
    let spawned = std::panic::catch_unwind(|| weft::spawn(|| ()));
    assert!(spawned.is_err());
    // In order, the previous runtime comes back.
    let ga = a.handle().enter();
    {
        let _gb = b.handle().enter();
    }
    assert!(weft::spawn(|| 1).join().is_ok());
    drop(ga);
}

#[test]
fn entering_in_a_task_changes_nothing_for_its_worker() {
    let a = weft::Runtime::builder().workers(1).build().unwrap();
    let b = weft::Runtime::builder()
        .workers(1)
        .stack_size(1 << 20)
        .build()
        .unwrap();
    let b_handle = b.handle();
    let (first, other) = a.block_on(move || {
        let guard = b_handle.enter();
        // Another task of the same worker runs while this one holds the guard.
        let other = weft::spawn(|| weft::task::current().stack_size());
        weft::yield_now();
        let first = weft::spawn(|| weft::task::current().stack_size())
            .join()
            .unwrap();
        drop(guard);
        (first, other.join().unwrap())
    });
    assert_eq!(first, weft::stack::DEFAULT_STACK_SIZE);
    assert_eq!(other, weft::stack::DEFAULT_STACK_SIZE);
}
