//! `std::thread::panicking()`, std's lock poisoning and the panic hook's re-entrancy guard are
//! per OS thread; a task that parks in the middle of its unwind must not lend them to the
//! other tasks of its worker (sched/worker.rs, "Parking while panicking").

mod common;

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{join_within, quiet_panics, within};

const CHILD_ENV: &str = "WEFT_TEST_PANIC_ISOLATION_CHILD";

#[test]
fn a_task_parked_while_another_unwinds_sees_no_panic_and_poisons_nothing() {
    quiet_panics();
    static SHARED: std::sync::Mutex<u32> = std::sync::Mutex::new(0);
    struct SlowCleanup(weft::chan::Sender<()>);
    impl Drop for SlowCleanup {
        fn drop(&mut self) {
            let _ = self.0.send(());
            weft::time::sleep(Duration::from_millis(50));
        }
    }
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    let (tx, rx) = weft::chan::bounded::<()>(1);
    let b = rt.spawn(move || {
        let guard = SHARED.lock().unwrap();
        rx.recv().unwrap();
        let panicking = std::thread::panicking();
        drop(guard);
        panicking
    });
    std::thread::sleep(Duration::from_millis(20));
    let a = rt.spawn(move || {
        let _cleanup = SlowCleanup(tx);
        panic!("fails on purpose")
    });
    let b_saw_panicking = join_within(b, Duration::from_secs(5)).unwrap();
    assert!(!b_saw_panicking, "B saw panicking() = true");
    assert!(!SHARED.is_poisoned(), "B's guard poisoned the mutex");
    assert!(join_within(a, Duration::from_secs(5)).is_err());
}

/// A panic hook that parks, and a second task panicking on the same worker meanwhile, used to
/// abort the process ("thread panicked while processing panic").
fn child_hook_parks_then_another_panics() {
    std::panic::set_hook(Box::new(|_| {
        if weft::task::try_current().is_some() {
            weft::time::sleep(Duration::from_millis(30));
        }
    }));
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    let handles: Vec<_> = (0..4)
        .map(|i| rt.spawn(move || panic!("provoked {i}")))
        .collect();
    let failed = handles.into_iter().filter_map(|h| h.join().err()).count();
    println!("panicked tasks joined: {failed}");
}

#[test]
fn a_panic_hook_that_parks_does_not_abort_another_tasks_panic() {
    if std::env::var(CHILD_ENV).as_deref() == Ok("hook") {
        child_hook_parks_then_another_panics();
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args([
            "--exact",
            "a_panic_hook_that_parks_does_not_abort_another_tasks_panic",
            "--nocapture",
        ])
        .env(CHILD_ENV, "hook")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "child failed: {:?}\nstdout: {stdout}\nstderr: {stderr}",
        out.status
    );
    assert!(stdout.contains("panicked tasks joined: 4"), "{stdout}");
}

#[test]
fn shutdown_cancels_a_task_resumed_while_another_unwinds() {
    struct Count(Arc<AtomicUsize>);
    impl Drop for Count {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    struct SleepOnDrop;
    impl Drop for SleepOnDrop {
        fn drop(&mut self) {
            weft::time::sleep(Duration::from_millis(50));
        }
    }
    let drops = Arc::new(AtomicUsize::new(0));
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    let parked: Vec<_> = (0..10)
        .map(|_| {
            let count = Count(drops.clone());
            rt.spawn(move || {
                let _count = count;
                let _sleeps = SleepOnDrop;
                loop {
                    weft::task::park();
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(50));
    within(Duration::from_secs(10), move || drop(rt));
    assert_eq!(drops.load(Ordering::SeqCst), 10);
    for h in parked {
        let err = join_within(h, Duration::from_secs(5)).unwrap_err();
        assert!(
            err.downcast_ref::<weft::task::Cancelled>()
                .is_some_and(|c| c.by_shutdown()),
            "not reported as cancelled"
        );
    }
}

#[test]
fn at_shutdown_a_destructor_may_join_a_task_of_the_same_worker() {
    struct JoinOnDrop(Option<weft::JoinHandle<()>>);
    impl Drop for JoinOnDrop {
        fn drop(&mut self) {
            if let Some(h) = self.0.take() {
                let _ = h.join();
            }
        }
    }
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    let parent = rt.spawn(|| {
        let child = weft::spawn(|| loop {
            weft::task::park();
        });
        let _join = JoinOnDrop(Some(child));
        loop {
            weft::task::park();
        }
    });
    std::thread::sleep(Duration::from_millis(50));
    within(Duration::from_secs(10), move || drop(rt));
    assert!(join_within(parent, Duration::from_secs(5)).is_err());
}
