//! weft::sync: locks that park tasks, usable from plain threads too.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use weft::sync::{Barrier, Condvar, Mutex, Once, RwLock, Semaphore, WaitGroup};

fn rt(workers: usize) -> weft::Runtime {
    weft::Runtime::builder().workers(workers).build().unwrap()
}

#[test]
fn mutex_guard_held_across_park_keeps_exclusion() {
    rt(2).block_on(|| {
        let m = Arc::new(Mutex::new(0u64));
        let inside = Arc::new(AtomicUsize::new(0));
        let hs: Vec<_> = (0..200)
            .map(|_| {
                let (m, inside) = (m.clone(), inside.clone());
                weft::spawn(move || {
                    let mut g = m.lock();
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0);
                    weft::yield_now();
                    *g += 1;
                    inside.fetch_sub(1, Ordering::SeqCst);
                })
            })
            .collect();
        hs.into_iter().for_each(|h| h.join().unwrap());
        assert_eq!(*m.lock(), 200);
    });
}

#[test]
fn mutex_one_worker_does_not_deadlock_when_holder_sleeps() {
    rt(1).block_on(|| {
        let m = Arc::new(Mutex::new(Vec::new()));
        let m2 = m.clone();
        let g = m.lock();
        let waiter = weft::spawn(move || m2.lock().push(2));
        weft::time::sleep(Duration::from_millis(10));
        assert!(m.try_lock().is_none());
        drop(g);
        waiter.join().unwrap();
        assert_eq!(*m.lock(), vec![2]);
    });
}

#[test]
fn mutex_between_threads_and_tasks() {
    let rt = rt(2);
    let m = Arc::new(Mutex::new(0u64));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let m = m.clone();
            std::thread::spawn(move || {
                for _ in 0..1000 {
                    *m.lock() += 1;
                }
            })
        })
        .collect();
    let m2 = m.clone();
    rt.block_on(move || {
        let hs: Vec<_> = (0..4)
            .map(|_| {
                let m = m2.clone();
                weft::spawn(move || {
                    for _ in 0..1000 {
                        *m.lock() += 1;
                    }
                })
            })
            .collect();
        hs.into_iter().for_each(|h| h.join().unwrap());
    });
    threads.into_iter().for_each(|t| t.join().unwrap());
    assert_eq!(*m.lock(), 8000);
}

#[test]
fn rwlock_readers_share_writer_excludes() {
    rt(2).block_on(|| {
        let l = Arc::new(RwLock::new(0));
        let r1 = l.read();
        let r2 = l.try_read().unwrap();
        assert!(l.try_write().is_none());
        let l2 = l.clone();
        let writer = weft::spawn(move || *l2.write() = 5);
        weft::time::sleep(Duration::from_millis(5));
        // A queued writer blocks new readers (FIFO), so no starvation.
        assert!(l.try_read().is_none());
        drop((r1, r2));
        writer.join().unwrap();
        assert_eq!(*l.read(), 5);
    });
}

#[test]
fn condvar_wakes_waiter() {
    rt(2).block_on(|| {
        let pair = Arc::new((Mutex::new(false), Condvar::new()));
        let p2 = pair.clone();
        let waiter = weft::spawn(move || {
            let (m, c) = &*p2;
            let g = c.wait_while(m.lock(), |ready| !*ready);
            assert!(*g);
        });
        weft::time::sleep(Duration::from_millis(5));
        *pair.0.lock() = true;
        pair.1.notify_all();
        waiter.join().unwrap();
        let (g, res) = pair.1.wait_timeout(pair.0.lock(), Duration::from_millis(5));
        assert!(res.timed_out());
        drop(g);
    });
}

#[test]
fn waitgroup_waits_for_all() {
    rt(2).block_on(|| {
        let wg = Arc::new(WaitGroup::new());
        let count = Arc::new(AtomicUsize::new(0));
        for _ in 0..100 {
            wg.add(1);
            let (wg, count) = (wg.clone(), count.clone());
            weft::spawn(move || {
                weft::time::sleep(Duration::from_millis(1));
                count.fetch_add(1, Ordering::SeqCst);
                wg.done();
            });
        }
        wg.wait();
        assert_eq!(count.load(Ordering::SeqCst), 100);
        wg.wait(); // zero: returns at once
    });
}

#[test]
#[should_panic(expected = "sync: negative WaitGroup counter")]
fn waitgroup_negative_panics() {
    WaitGroup::new().done();
}

#[test]
fn semaphore_limits_concurrency() {
    rt(2).block_on(|| {
        let sem = Arc::new(Semaphore::new(3));
        let inside = Arc::new(AtomicUsize::new(0));
        let max = Arc::new(AtomicUsize::new(0));
        let hs: Vec<_> = (0..50)
            .map(|_| {
                let (sem, inside, max) = (sem.clone(), inside.clone(), max.clone());
                weft::spawn(move || {
                    let _p = sem.acquire();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    max.fetch_max(now, Ordering::SeqCst);
                    weft::time::sleep(Duration::from_micros(200));
                    inside.fetch_sub(1, Ordering::SeqCst);
                })
            })
            .collect();
        hs.into_iter().for_each(|h| h.join().unwrap());
        assert!(max.load(Ordering::SeqCst) <= 3);
        assert_eq!(sem.available_permits(), 3);
    });
}

#[test]
fn barrier_releases_generations() {
    rt(2).block_on(|| {
        let b = Arc::new(Barrier::new(5));
        let leaders = Arc::new(AtomicUsize::new(0));
        let hs: Vec<_> = (0..10)
            .map(|_| {
                let (b, leaders) = (b.clone(), leaders.clone());
                weft::spawn(move || {
                    if b.wait().is_leader() {
                        leaders.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        hs.into_iter().for_each(|h| h.join().unwrap());
        assert_eq!(leaders.load(Ordering::SeqCst), 2);
    });
}

#[test]
fn once_runs_once() {
    rt(2).block_on(|| {
        let once = Arc::new(Once::new());
        let runs = Arc::new(AtomicUsize::new(0));
        let hs: Vec<_> = (0..20)
            .map(|_| {
                let (once, runs) = (once.clone(), runs.clone());
                weft::spawn(move || {
                    once.call_once(|| {
                        weft::time::sleep(Duration::from_millis(2));
                        runs.fetch_add(1, Ordering::SeqCst);
                    });
                    assert!(once.is_completed());
                })
            })
            .collect();
        hs.into_iter().for_each(|h| h.join().unwrap());
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    });
}
