//! weft::sync when a waiter leaves its wait early: a task parked in a lock, a semaphore, a
//! condition variable, a barrier or a `Once` is cancelled by runtime shutdown (its park
//! unwinds), and the structure must stay usable by the plain threads left; and the limits of
//! the semaphore's and the wait group's counts.
//!
//! Every wait that could hang on a broken structure runs under [`bounded`], so a regression is
//! a test failure, not a stuck CI job.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use weft::sync::{Barrier, Condvar, Mutex, Once, RwLock, Semaphore};
use weft::{JoinHandle, Runtime};

/// How long a wait that should end at once may take before the test fails.
const LIMIT: Duration = Duration::from_secs(10);

fn rt() -> Runtime {
    Runtime::builder().workers(1).build().unwrap()
}

/// Runs `f` on a thread of its own; fails the test if it has not returned within [`LIMIT`].
fn bounded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(catch_unwind(AssertUnwindSafe(f)));
    });
    match rx.recv_timeout(LIMIT) {
        Ok(Ok(value)) => value,
        Ok(Err(payload)) => resume_unwind(payload),
        Err(_) => panic!("{what}: still waiting after {LIMIT:?}"),
    }
}

/// Waits (bounded) until `flag` is set.
fn wait_for(flag: &AtomicBool, what: &str) {
    let start = std::time::Instant::now();
    while !flag.load(Ordering::SeqCst) {
        assert!(start.elapsed() < LIMIT, "{what}: never happened");
        thread::sleep(Duration::from_millis(1));
    }
}

/// Time for a task (or thread) that announced it is about to wait to reach its park.
fn settle() {
    thread::sleep(Duration::from_millis(50));
}

struct CountDrop(Arc<AtomicUsize>);

impl Drop for CountDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Spawns `f` on `rt` as a task that first sets a flag, and waits for the flag: the task has
/// started (so shutdown unwinds it at its park rather than dropping it unstarted). The task
/// holds a [`CountDrop`] on `drops`.
fn spawn_started(
    rt: &Runtime,
    drops: &Arc<AtomicUsize>,
    f: impl FnOnce() + Send + 'static,
) -> JoinHandle<()> {
    let started = Arc::new(AtomicBool::new(false));
    let (flag, counted) = (started.clone(), CountDrop(drops.clone()));
    let handle = rt.spawn(move || {
        let _counted = counted;
        flag.store(true, Ordering::SeqCst);
        f();
    });
    wait_for(&started, "task start");
    settle();
    handle
}

/// Occupies the one worker of `rt` with a task that blocks its thread (it never parks) until
/// the runtime's shutdown has begun, so that tasks woken meanwhile wait in its ready queue and
/// run only once shutdown has marked them cancelled. Returns once the worker is occupied.
fn occupy_worker_until_shutdown(rt: &Runtime) {
    let running = Arc::new(AtomicBool::new(false));
    let shutting_down = Arc::new(AtomicBool::new(false));
    let (flag, seen) = (running.clone(), shutting_down.clone());
    rt.spawn(move || {
        flag.store(true, Ordering::SeqCst);
        wait_for(&seen, "shutdown");
    });
    wait_for(&running, "worker occupied");
    // A spawn through a handle is cancelled at once when the runtime is shutting down; before
    // that, each probe waits unstarted behind the occupied worker.
    let handle = rt.handle();
    thread::spawn(move || {
        let start = std::time::Instant::now();
        while start.elapsed() < LIMIT {
            if handle.spawn(|| ()).is_finished() {
                shutting_down.store(true, Ordering::SeqCst);
                return;
            }
            thread::sleep(Duration::from_millis(1));
        }
    });
}

fn cancelled(handle: JoinHandle<()>) -> bool {
    match handle.join() {
        Ok(()) => false,
        Err(payload) => payload
            .downcast_ref::<weft::task::Cancelled>()
            .is_some_and(|c| c.by_shutdown()),
    }
}

#[test]
fn mutex_unlocks_for_a_thread_after_a_queued_task_is_cancelled() {
    let m = Arc::new(Mutex::new(0u32));
    let drops = Arc::new(AtomicUsize::new(0));
    let guard = m.lock();
    let rt = rt();
    let m2 = m.clone();
    let task = spawn_started(&rt, &drops, move || *m2.lock() += 1);
    drop(rt);
    assert!(cancelled(task));
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "the task's frames were unwound"
    );
    drop(guard);
    assert!(m.try_lock().is_some(), "try_lock after the unlock");
    let m2 = m.clone();
    bounded("lock after the unlock", move || *m2.lock() += 1);
    assert_eq!(*m.lock(), 1);
}

#[test]
fn rwlock_serves_threads_after_a_queued_writer_and_reader_are_cancelled() {
    let lock = Arc::new(RwLock::new(0u32));
    let drops = Arc::new(AtomicUsize::new(0));
    let read = lock.read();
    let rt = rt();
    let l2 = lock.clone();
    let writer = spawn_started(&rt, &drops, move || *l2.write() += 1);
    let l2 = lock.clone();
    let reader = spawn_started(&rt, &drops, move || assert_eq!(*l2.read(), 1));
    drop(rt);
    assert!(cancelled(writer) && cancelled(reader));
    assert_eq!(drops.load(Ordering::SeqCst), 2);
    assert!(lock.try_read().is_some(), "no one waits any more");
    drop(read);
    assert!(
        lock.try_write().is_some(),
        "try_write after the last reader left"
    );
    let l2 = lock.clone();
    bounded("write after the last reader left", move || *l2.write() += 1);
    let l2 = lock.clone();
    bounded("read after the writer left", move || {
        assert_eq!(*l2.read(), 1)
    });
}

#[test]
fn rwlock_reader_queued_behind_a_cancelled_writer_gets_in() {
    let lock = Arc::new(RwLock::new(()));
    let drops = Arc::new(AtomicUsize::new(0));
    let read = lock.read();
    let rt = rt();
    let l2 = lock.clone();
    let writer = spawn_started(&rt, &drops, move || drop(l2.write()));
    // A second reader queues behind the writer (FIFO), though the lock is only read-held.
    let (tx, rx) = mpsc::channel();
    let l2 = lock.clone();
    thread::spawn(move || {
        let _read = l2.read();
        let _ = tx.send(());
    });
    settle();
    assert!(rx.try_recv().is_err(), "the reader waits behind the writer");
    drop(rt);
    assert!(cancelled(writer));
    rx.recv_timeout(LIMIT)
        .expect("the reader behind a cancelled writer never got in");
    drop(read);
}

#[test]
fn semaphore_serves_threads_after_a_queued_task_is_cancelled() {
    let sem = Arc::new(Semaphore::new(1));
    let drops = Arc::new(AtomicUsize::new(0));
    let permit = sem.acquire();
    let rt = rt();
    let s2 = sem.clone();
    let task = spawn_started(&rt, &drops, move || drop(s2.acquire()));
    drop(rt);
    assert!(cancelled(task));
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    drop(permit);
    assert_eq!(sem.available_permits(), 1);
    assert!(sem.try_acquire().is_some());
    let s2 = sem.clone();
    bounded("acquire after the release", move || drop(s2.acquire()));
}

#[test]
fn semaphore_waiter_behind_a_cancelled_large_request_gets_in() {
    let sem = Arc::new(Semaphore::new(1));
    let drops = Arc::new(AtomicUsize::new(0));
    let rt = rt();
    let s2 = sem.clone();
    // Two permits cannot be had from one: the request waits at the head of the queue...
    let big = spawn_started(&rt, &drops, move || drop(s2.acquire_many(2)));
    // ...and, FIFO, so does a one-permit request behind it.
    let (tx, rx) = mpsc::channel();
    let s2 = sem.clone();
    thread::spawn(move || {
        let _permit = s2.acquire();
        let _ = tx.send(());
    });
    settle();
    assert!(
        rx.try_recv().is_err(),
        "the small request waits behind the big one"
    );
    drop(rt);
    assert!(cancelled(big));
    rx.recv_timeout(LIMIT)
        .expect("the request behind a cancelled one never got its permit");
}

#[test]
fn semaphore_permits_granted_to_a_cancelled_task_are_given_back() {
    let sem = Arc::new(Semaphore::new(1));
    let drops = Arc::new(AtomicUsize::new(0));
    let permit = sem.acquire();
    let rt = rt();
    let s2 = sem.clone();
    let task = spawn_started(&rt, &drops, move || {
        let _permit = s2.acquire();
        unreachable!("the task runs again only after shutdown has cancelled it");
    });
    occupy_worker_until_shutdown(&rt);
    // Hands the permit to the queued task, which cannot run: its worker is occupied.
    drop(permit);
    assert_eq!(sem.available_permits(), 0);
    drop(rt);
    assert!(cancelled(task));
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    assert_eq!(sem.available_permits(), 1, "the granted permit was lost");
    assert!(sem.try_acquire().is_some());
}

/// A flag `go` and a flag "a thread waits", under one mutex, and a condvar.
type Signal = Arc<(Mutex<(bool, bool)>, Condvar)>;

fn wait_for_go(signal: &Signal) {
    let (m, cv) = &**signal;
    drop(cv.wait_while(m.lock(), |(go, _)| !*go));
}

/// A plain thread waits for `go`; it sends on the returned channel when it got it. Returns
/// once its node is queued: it set its flag under the lock and unlocked only in `wait`, after
/// queueing (condvar.rs invariant 1).
fn thread_waits_for_go(signal: &Signal) -> mpsc::Receiver<()> {
    let (tx, rx) = mpsc::channel();
    let s2 = signal.clone();
    thread::spawn(move || {
        let (m, cv) = &*s2;
        let mut state = m.lock();
        state.1 = true;
        drop(cv.wait_while(state, |(go, _)| !*go));
        let _ = tx.send(());
    });
    let start = std::time::Instant::now();
    while !signal.0.lock().1 {
        assert!(start.elapsed() < LIMIT, "the thread never waited");
        thread::sleep(Duration::from_millis(1));
    }
    rx
}

fn notify_one_go(signal: &Signal) {
    let (m, cv) = &**signal;
    m.lock().0 = true;
    cv.notify_one();
}

#[test]
fn condvar_notify_one_reaches_a_thread_after_a_waiting_task_is_cancelled() {
    let signal = Signal::default();
    let drops = Arc::new(AtomicUsize::new(0));
    let rt = rt();
    let s2 = signal.clone();
    let task = spawn_started(&rt, &drops, move || wait_for_go(&s2));
    drop(rt);
    assert!(cancelled(task));
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    let done = thread_waits_for_go(&signal);
    notify_one_go(&signal);
    done.recv_timeout(LIMIT)
        .expect("notify_one never reached the thread waiter");
}

#[test]
fn condvar_notification_taken_by_a_cancelled_task_is_passed_on() {
    let signal = Signal::default();
    let drops = Arc::new(AtomicUsize::new(0));
    let rt = rt();
    let s2 = signal.clone();
    let task = spawn_started(&rt, &drops, move || wait_for_go(&s2));
    let done = thread_waits_for_go(&signal);
    occupy_worker_until_shutdown(&rt);
    // FIFO: the notification goes to the task, which cannot run before shutdown.
    notify_one_go(&signal);
    drop(rt);
    assert!(cancelled(task));
    done.recv_timeout(LIMIT)
        .expect("the notification a cancelled task took was swallowed");
}

#[test]
fn once_runs_for_a_thread_after_its_running_and_queued_tasks_are_cancelled() {
    let once = Arc::new(Once::new());
    let drops = Arc::new(AtomicUsize::new(0));
    let rt = rt();
    let o2 = once.clone();
    // Parks inside the initialiser, holding the `Once`.
    let running = spawn_started(&rt, &drops, move || {
        o2.call_once(|| weft::time::sleep(Duration::from_secs(3600)))
    });
    let o2 = once.clone();
    let queued = spawn_started(&rt, &drops, move || o2.call_once(|| {}));
    let ran = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let (o2, r2) = (once.clone(), ran.clone());
    thread::spawn(move || {
        o2.call_once(|| r2.store(true, Ordering::SeqCst));
        let _ = tx.send(());
    });
    settle();
    drop(rt);
    assert!(cancelled(running) && cancelled(queued));
    assert_eq!(drops.load(Ordering::SeqCst), 2);
    rx.recv_timeout(LIMIT)
        .expect("a thread waiting on a Once whose tasks were cancelled never returned");
    assert!(ran.load(Ordering::SeqCst), "the thread ran the initialiser");
    assert!(once.is_completed());
}

/// The documented choice (sync/barrier.rs): an arrival stays counted when its waiter is
/// cancelled, so the others are not left waiting for a task that will never come back.
#[test]
fn barrier_counts_the_arrival_of_a_cancelled_task() {
    let barrier = Arc::new(Barrier::new(2));
    let drops = Arc::new(AtomicUsize::new(0));
    let rt = rt();
    let b2 = barrier.clone();
    let task = spawn_started(&rt, &drops, move || {
        b2.wait();
    });
    drop(rt);
    assert!(cancelled(task));
    let b2 = barrier.clone();
    assert!(bounded("barrier wait", move || b2.wait().is_leader()));
    // The next generation starts from zero.
    let b2 = barrier.clone();
    let other = thread::spawn(move || b2.wait().is_leader());
    let leader = bounded("second generation", {
        let b2 = barrier.clone();
        move || b2.wait().is_leader()
    });
    assert!(leader ^ other.join().unwrap(), "one leader per generation");
}

#[test]
fn semaphore_acquire_many_beyond_max_panics_instead_of_hanging() {
    let sem = Arc::new(Semaphore::new(1));
    let s2 = sem.clone();
    let result = bounded("acquire_many(MAX_PERMITS + 1)", move || {
        catch_unwind(AssertUnwindSafe(|| {
            drop(s2.acquire_many(Semaphore::MAX_PERMITS + 1))
        }))
    });
    let payload = result.expect_err("acquire_many(MAX_PERMITS + 1) returned");
    let message = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or_default();
    assert!(message.contains("MAX_PERMITS"), "message: {message}");
    // Nothing was queued: later requests are not blocked behind it.
    assert!(sem.try_acquire_many(Semaphore::MAX_PERMITS + 1).is_none());
    let s2 = sem.clone();
    bounded("acquire after the refused request", move || {
        drop(s2.acquire())
    });
    assert_eq!(sem.available_permits(), 1);
}

#[test]
fn semaphore_add_permits_past_max_panics_and_keeps_the_count() {
    for n in [Semaphore::MAX_PERMITS, usize::MAX] {
        let sem = Semaphore::new(1);
        let result = catch_unwind(AssertUnwindSafe(|| sem.add_permits(n)));
        assert!(
            result.is_err(),
            "add_permits({n}) on 1 permit did not panic"
        );
        assert_eq!(sem.available_permits(), 1);
    }
    // Up to the limit is fine, also with a waiter queued (the slow path).
    let sem = Arc::new(Semaphore::new(0));
    let (tx, rx) = mpsc::channel();
    let s2 = sem.clone();
    thread::spawn(move || {
        s2.acquire().forget();
        let _ = tx.send(());
    });
    settle();
    let result = catch_unwind(AssertUnwindSafe(|| sem.add_permits(usize::MAX)));
    assert!(
        result.is_err(),
        "add_permits(usize::MAX) with a waiter did not panic"
    );
    assert_eq!(sem.available_permits(), 0);
    sem.add_permits(Semaphore::MAX_PERMITS);
    rx.recv_timeout(LIMIT).expect("the waiter was not served");
    assert_eq!(sem.available_permits(), Semaphore::MAX_PERMITS - 1);
}

#[test]
fn waitgroup_add_past_the_max_panics_and_keeps_the_count() {
    let wg = weft::sync::WaitGroup::new();
    wg.add(isize::MAX);
    let result = catch_unwind(AssertUnwindSafe(|| wg.add(1)));
    let payload = result.expect_err("add past isize::MAX did not panic");
    let message = payload.downcast_ref::<&str>().copied().unwrap_or_default();
    assert_eq!(message, "sync: WaitGroup counter overflow");
    assert_eq!(wg.count(), isize::MAX);
    // A negative count is refused the same way, leaving the count as it was.
    let result = catch_unwind(AssertUnwindSafe(|| wg.add(isize::MIN)));
    assert!(result.is_err());
    assert_eq!(wg.count(), isize::MAX);
    wg.add(-isize::MAX);
    assert_eq!(wg.count(), 0);
}
