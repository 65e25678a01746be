//! Dropping a runtime cancels what is left: never-started tasks are dropped, parked tasks are
//! unwound (their destructors run), and every joiner gets `Err`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

struct CountDrop(Arc<AtomicUsize>);

impl Drop for CountDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn cancelled(result: std::thread::Result<()>) -> bool {
    match result {
        Ok(()) => false,
        Err(payload) => payload
            .downcast_ref::<weft::task::Cancelled>()
            .is_some_and(|c| c.by_shutdown()),
    }
}

#[test]
fn destructors_parked_tasks_are_unwound_and_joiners_told() {
    let drops = Arc::new(AtomicUsize::new(0));
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let handles: Vec<_> = (0..1000)
        .map(|_| {
            let guard = CountDrop(drops.clone());
            rt.spawn(move || {
                let _guard = guard;
                loop {
                    weft::task::park();
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    drop(rt);
    assert_eq!(drops.load(Ordering::SeqCst), 1000);
    assert!(handles.into_iter().all(|h| cancelled(h.join())));
}

#[test]
fn destructors_never_started_tasks_are_dropped_and_joiners_told() {
    let drops = Arc::new(AtomicUsize::new(0));
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    // Hold the only worker so the next spawns cannot start before the drop.
    let blocker = rt.spawn(|| std::thread::sleep(Duration::from_millis(200)));
    std::thread::sleep(Duration::from_millis(50));
    let handles: Vec<_> = (0..100)
        .map(|_| {
            let guard = CountDrop(drops.clone());
            rt.spawn(move || drop(guard))
        })
        .collect();
    drop(rt);
    blocker.join().unwrap();
    assert_eq!(drops.load(Ordering::SeqCst), 100);
    for h in handles {
        assert!(cancelled(h.join()));
    }
}

#[test]
fn a_task_that_parks_while_unwinding_is_woken_by_its_peer() {
    // Task A's destructor joins task B, which is also cancelled: both must finish.
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let b = rt.spawn(|| loop {
        weft::task::park();
    });
    struct JoinOnDrop(Option<weft::JoinHandle<()>>);
    impl Drop for JoinOnDrop {
        fn drop(&mut self) {
            if let Some(h) = self.0.take() {
                let _ = h.join();
            }
        }
    }
    let a = rt.spawn(move || {
        let _join = JoinOnDrop(Some(b));
        loop {
            weft::task::park();
        }
    });
    std::thread::sleep(Duration::from_millis(50));
    drop(rt);
    assert!(cancelled(a.join()));
}

#[test]
fn spawning_on_a_dropped_runtime_cancels_at_once() {
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    let handle = rt.handle();
    drop(rt);
    let joined = handle.spawn(|| 1).join();
    assert!(joined.is_err());
}

/// Each of these tasks spawns from its destructor while shutdown cancels it.
fn spawn_from_destructors(workers: usize, tasks: usize) -> Vec<weft::JoinHandle<u32>> {
    let spawned = Arc::new(std::sync::Mutex::new(Vec::new()));
    struct SpawnOnDrop(Arc<std::sync::Mutex<Vec<weft::JoinHandle<u32>>>>);
    impl Drop for SpawnOnDrop {
        fn drop(&mut self) {
            self.0.lock().unwrap().push(weft::spawn(|| 5));
        }
    }
    let rt = weft::Runtime::builder().workers(workers).build().unwrap();
    for _ in 0..tasks {
        let guard = SpawnOnDrop(spawned.clone());
        // Spread the tasks over the workers: placement moves spawns between them.
        rt.spawn(move || {
            let _guard = guard;
            loop {
                weft::task::park();
            }
        });
    }
    std::thread::sleep(Duration::from_millis(50));
    drop(rt);
    let spawned = std::mem::take(&mut *spawned.lock().unwrap());
    spawned
}

#[test]
fn a_task_spawned_during_shutdown_is_cancelled_not_stranded() {
    for workers in [1, 2, 4] {
        let spawned = spawn_from_destructors(workers, 40);
        assert_eq!(spawned.len(), 40);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for h in spawned {
                tx.send(h.join().is_err()).unwrap();
            }
        });
        for _ in 0..40 {
            let cancelled = rx
                .recv_timeout(Duration::from_secs(5))
                .expect("a task spawned during shutdown was never run nor cancelled");
            assert!(cancelled);
        }
    }
}

#[test]
fn spawn_blocking_works_in_a_destructor_during_shutdown() {
    let results = Arc::new(AtomicUsize::new(0));
    struct BlockingOnDrop(Arc<AtomicUsize>);
    impl Drop for BlockingOnDrop {
        fn drop(&mut self) {
            let n = weft::task::spawn_blocking(|| 3);
            self.0.fetch_add(n, Ordering::SeqCst);
        }
    }
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let handles: Vec<_> = (0..10)
        .map(|_| {
            let guard = BlockingOnDrop(results.clone());
            rt.spawn(move || {
                let _guard = guard;
                loop {
                    weft::task::park();
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(50));
    drop(rt);
    assert_eq!(results.load(Ordering::SeqCst), 30);
    assert!(handles.into_iter().all(|h| cancelled(h.join())));
}

#[test]
fn a_task_that_only_yields_is_cancelled_at_shutdown() {
    let drops = Arc::new(AtomicUsize::new(0));
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    let guard = CountDrop(drops.clone());
    let h = rt.spawn(move || {
        let _guard = guard;
        loop {
            weft::yield_now();
        }
    });
    std::thread::sleep(Duration::from_millis(20));
    drop(rt);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    assert!(cancelled(h.join()));
}
