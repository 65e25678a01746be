//! Loom models of the sync wake paths: the semaphore core under `Mutex` (fast path, queueing,
//! handoff), a semaphore waiter that leaves early (sema.rs invariant 4: modelled as a waiter
//! that gives up, which takes the same path as one whose park unwinds at shutdown), and
//! `WaitGroup`'s zero-count wakeup.

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

/// Main holds the one permit; a quitter waits for it with `park`, giving up when `park`
/// returns false, and another thread waits behind or ahead of it; then main releases. The
/// other thread must get the permit whichever way the quitter left, and the count must be
/// whole at the end.
fn quitter_and_waiter_share_one_permit(park: fn() -> bool) {
    loom::model(move || {
        let sema = Arc::new(RawSemaphore::new(1));
        sema.acquire(1, thread::park);
        let quitter = {
            let sema = sema.clone();
            thread::spawn(move || {
                if sema.acquire_or_give_up(1, park) {
                    sema.release(1);
                }
            })
        };
        let waiter = {
            let sema = sema.clone();
            thread::spawn(move || {
                sema.acquire(1, thread::park);
                sema.release(1);
            })
        };
        sema.release(1);
        quitter.join().unwrap();
        waiter.join().unwrap();
        assert_eq!(sema.available(), 1);
    });
}

/// The quitter gives up at its first park, racing the release that would grant it: either it
/// is still queued and leaves, or the releaser popped it and it releases the permit on.
#[test]
fn loom_semaphore_waiter_that_gives_up_loses_no_permit() {
    quitter_and_waiter_share_one_permit(|| false);
}

/// The quitter gives up only once woken, so always after its grant: the permit it was handed
/// goes on to the next waiter (the granted-then-cancelled case).
#[test]
fn loom_semaphore_granted_waiter_that_gives_up_passes_the_permit_on() {
    quitter_and_waiter_share_one_permit(|| {
        thread::park();
        false
    });
}

/// A request that cannot be granted heads the queue and gives up: the smaller request queued
/// behind it is served from the permits already there (no release comes to do it).
#[test]
fn loom_semaphore_head_that_gives_up_serves_the_next() {
    loom::model(|| {
        let sema = Arc::new(RawSemaphore::new(1));
        let quitter = {
            let sema = sema.clone();
            thread::spawn(move || assert!(!sema.acquire_or_give_up(2, || false)))
        };
        sema.acquire(1, thread::park);
        sema.release(1);
        quitter.join().unwrap();
        assert_eq!(sema.available(), 1);
    });
}
