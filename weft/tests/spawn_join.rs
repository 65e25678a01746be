//! Spawning and joining: from tasks, from plain threads, many at once, with panics.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn runtime(workers: usize) -> weft::Runtime {
    weft::Runtime::builder().workers(workers).build().unwrap()
}

#[test]
fn smoke() {
    assert_eq!(weft::run(|| 6 * 7), 42);
}

#[test]
fn stampede_100k_spawned_and_joined() {
    let rt = runtime(2);
    let sum = rt.block_on(|| {
        let handles: Vec<_> = (0..100_000u64).map(|i| weft::spawn(move || i)).collect();
        handles.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
    });
    assert_eq!(sum, 100_000 * 99_999 / 2);
}

#[test]
fn panics_come_back_as_err_and_the_runtime_keeps_running() {
    let rt = runtime(2);
    let result = rt.block_on(|| weft::spawn(|| panic!("boom {}", 7)).join());
    let payload = result.unwrap_err();
    let message = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()));
    assert_eq!(message.as_deref(), Some("boom 7"));
    assert_eq!(rt.block_on(|| weft::spawn(|| 1).join().unwrap()), 1);
}

#[test]
fn tasks_spawning_tasks() {
    fn tree(depth: u32) -> u64 {
        if depth == 0 {
            return 1;
        }
        let left = weft::spawn(move || tree(depth - 1));
        let right = weft::spawn(move || tree(depth - 1));
        left.join().unwrap() + right.join().unwrap()
    }
    let rt = runtime(2);
    assert_eq!(rt.block_on(|| tree(12)), 4096);
}

#[test]
fn spawn_and_join_from_plain_threads() {
    let rt = runtime(2);
    let handle = rt.handle();
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let handle = handle.clone();
            std::thread::spawn(move || {
                let _enter = handle.enter();
                let tasks: Vec<_> = (0..1000u64)
                    .map(|i| weft::spawn(move || t * 1000 + i))
                    .collect();
                tasks.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
            })
        })
        .collect();
    let total: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(total, (0..4000u64).sum());
    // A task's handle joined on a plain thread blocks that thread.
    let h = rt.spawn(|| {
        weft::yield_now();
        5
    });
    assert_eq!(h.join().unwrap(), 5);
}

#[test]
#[should_panic(expected = "outside a weft runtime")]
fn spawn_outside_a_runtime_panics() {
    let _ = weft::spawn(|| ());
}

#[test]
fn park_and_unpark_between_tasks() {
    let rt = runtime(2);
    let counter = Arc::new(AtomicUsize::new(0));
    let c = counter.clone();
    rt.block_on(move || {
        let waiter = weft::spawn({
            let c = c.clone();
            move || {
                while c.load(Ordering::Acquire) == 0 {
                    weft::task::park();
                }
            }
        });
        let task = waiter.task().clone();
        weft::spawn(move || {
            c.store(1, Ordering::Release);
            task.unpark();
        })
        .join()
        .unwrap();
        waiter.join().unwrap();
    });
    assert_eq!(counter.load(Ordering::Relaxed), 1);
}

#[test]
fn current_task_has_its_name_and_id() {
    let rt = runtime(1);
    rt.block_on(|| {
        let h = weft::task::Builder::new()
            .name("worker-of-the-month")
            .spawn(|| {
                let me = weft::task::current();
                (me.name().map(str::to_owned), me.id())
            })
            .unwrap();
        let id = h.id();
        let (name, seen_id) = h.join().unwrap();
        assert_eq!(name.as_deref(), Some("worker-of-the-month"));
        assert_eq!(id, seen_id);
    });
    assert!(weft::task::try_current().is_none());
}
