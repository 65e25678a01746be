//! Loom models of the sync wake paths: the semaphore core under `Mutex` (fast path, queueing,
//! handoff) and `WaitGroup`'s zero-count wakeup.

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

use crate::sync_sema::RawSemaphore;
use crate::sync_waitgroup::WaitGroup;

#[test]
fn loom_mutex_excludes_and_hands_off() {
    loom::model(|| {
        let sema = Arc::new(RawSemaphore::new(1));
        let inside = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (sema, inside) = (sema.clone(), inside.clone());
                thread::spawn(move || {
                    sema.acquire(1, thread::park);
                    assert_eq!(inside.fetch_add(1, Ordering::Relaxed), 0);
                    inside.fetch_sub(1, Ordering::Relaxed);
                    sema.release(1);
                })
            })
            .collect();
        sema.acquire(1, thread::park);
        assert_eq!(inside.fetch_add(1, Ordering::Relaxed), 0);
        inside.fetch_sub(1, Ordering::Relaxed);
        sema.release(1);
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(sema.available(), 1);
    });
}

#[test]
fn loom_semaphore_grants_large_request_after_releases() {
    loom::model(|| {
        let sema = Arc::new(RawSemaphore::new(2));
        sema.acquire(1, thread::park);
        let s2 = sema.clone();
        let t = thread::spawn(move || {
            s2.acquire(2, thread::park);
            s2.release(2);
        });
        sema.release(1);
        t.join().unwrap();
        assert_eq!(sema.available(), 2);
    });
}

#[test]
fn loom_waitgroup_wait_sees_done_work() {
    loom::model(|| {
        let wg = Arc::new(WaitGroup::new());
        let work = Arc::new(AtomicUsize::new(0));
        wg.add(2);
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let (wg, work) = (wg.clone(), work.clone());
                thread::spawn(move || {
                    work.fetch_add(1, Ordering::Relaxed);
                    wg.done();
                })
            })
            .collect();
        wg.wait_with(thread::park);
        assert_eq!(work.load(Ordering::Relaxed), 2);
        threads.into_iter().for_each(|t| t.join().unwrap());
    });
}

/// Two releasers race a queued waiter: one may serve the last waiter and clear WAITERS while
/// the other, which saw WAITERS, waits for the queue lock; no permit may be lost or invented.
#[test]
fn loom_semaphore_racing_releases_keep_the_count() {
    loom::model(|| {
        let sema = Arc::new(RawSemaphore::new(2));
        sema.acquire(2, thread::park);
        let waiter = {
            let sema = sema.clone();
            thread::spawn(move || {
                sema.acquire(1, thread::park);
                sema.release(1);
            })
        };
        let releaser = {
            let sema = sema.clone();
            thread::spawn(move || sema.release(1))
        };
        sema.release(1);
        releaser.join().unwrap();
        waiter.join().unwrap();
        assert_eq!(sema.available(), 2);
    });
}
