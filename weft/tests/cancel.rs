//! `JoinHandle::cancel` and `join_timeout`: a task parked in any blocking operation is
//! unwound at its park (its destructors run exactly once), its joiner is told it was
//! cancelled, and the structure it waited on stays usable with no value lost. A task that
//! computes is cancelled at its next park or yield.
//!
//! Every wait is bounded ([`LIMIT`]), so a regression fails instead of hanging.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::join_within;
use weft::sync::{Condvar, Mutex, RwLock, Semaphore, WaitGroup};
use weft::task::Cancelled;
use weft::Runtime;

const LIMIT: Duration = Duration::from_secs(10);

#[derive(Debug)]
struct CountDrop(Arc<AtomicUsize>);

impl Drop for CountDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn wait_for(flag: &AtomicBool, what: &str) {
    let start = Instant::now();
    while !flag.load(Ordering::SeqCst) {
        assert!(start.elapsed() < LIMIT, "{what}: never happened");
        thread::sleep(Duration::from_millis(1));
    }
}

/// Runs `block` in a task of `rt` that holds a counted value, waits until it is parked in
/// it, cancels it, and checks that the joiner is told and the value dropped once.
fn cancel_parked(rt: &Runtime, what: &'static str, block: impl FnOnce() + Send + 'static) {
    let drops = Arc::new(AtomicUsize::new(0));
    let ready = Arc::new(AtomicBool::new(false));
    let (d, r) = (drops.clone(), ready.clone());
    let handle = rt.spawn(move || {
        let _count = CountDrop(d);
        r.store(true, Ordering::SeqCst);
        block();
        panic!("{what}: the blocking call returned");
    });
    wait_for(&ready, what);
    thread::sleep(Duration::from_millis(30)); // reach the park
    assert!(!handle.is_finished(), "{what}: did not block");
    let start = Instant::now();
    handle.cancel();
    let payload = join_within(handle, LIMIT).expect_err(what);
    let took = start.elapsed();
    println!("{what}: cancelled and joined in {took:?}");
    let why = payload
        .downcast_ref::<Cancelled>()
        .unwrap_or_else(|| panic!("{what}: the join error is not a cancellation"));
    assert!(!why.by_shutdown(), "{what}: reported as a shutdown");
    assert_eq!(drops.load(Ordering::SeqCst), 1, "{what}: destructors");
    assert!(took < Duration::from_millis(500), "{what}: took {took:?}");
}

fn rt() -> Runtime {
    Runtime::builder().workers(2).build().unwrap()
}

#[test]
fn cancel_unwinds_a_task_parked_in_a_channel_send_and_loses_no_value() {
    let rt = rt();
    let (tx, rx) = weft::chan::bounded::<CountDrop>(0);
    let values = Arc::new(AtomicUsize::new(0));
    let v = values.clone();
    cancel_parked(&rt, "send", move || {
        let _ = tx.send(CountDrop(v));
    });
    // The value went down with the sender's frame, never into the channel.
    assert_eq!(values.load(Ordering::SeqCst), 1);
    assert!(rx.try_recv().is_err());
}

#[test]
fn cancel_unwinds_a_task_parked_in_a_channel_recv_and_the_next_value_reaches_another() {
    let rt = rt();
    let (tx, rx) = weft::chan::bounded::<u32>(1);
    let rx2 = rx.clone();
    cancel_parked(&rt, "recv", move || {
        let _ = rx.recv();
    });
    tx.send(7).unwrap();
    assert_eq!(
        rx2.recv_timeout(LIMIT),
        Ok(7),
        "the cancelled receiver took it"
    );
}

#[test]
fn cancel_unwinds_a_task_parked_in_a_select() {
    let rt = rt();
    let (tx, rx) = weft::chan::bounded::<u32>(0);
    let (tx2, rx2) = weft::chan::bounded::<u32>(0);
    cancel_parked(&rt, "select", move || {
        weft::select! {
            recv(rx) -> _ => {},
            send(tx2, 1) -> _ => {},
        }
    });
    drop(rx2);
    drop(tx);
}

#[test]
fn cancel_unwinds_a_task_parked_in_sleep() {
    let rt = rt();
    cancel_parked(&rt, "sleep", || {
        weft::time::sleep(Duration::from_secs(3600))
    });
}

#[test]
fn cancel_unwinds_a_task_parked_in_join() {
    let rt = rt();
    let (_tx, rx) = weft::chan::bounded::<()>(0);
    let forever = rt.spawn(move || {
        let _ = rx.recv();
    });
    cancel_parked(&rt, "join", move || {
        let _ = forever.join();
    });
}

#[test]
fn cancel_unwinds_tasks_parked_in_each_sync_primitive() {
    let rt = rt();

    let mutex = Arc::new(Mutex::new(0));
    let guard = mutex.lock();
    let m = mutex.clone();
    cancel_parked(&rt, "mutex", move || drop(m.lock()));
    drop(guard);
    drop(mutex.try_lock().expect("the mutex is left locked"));

    let lock = Arc::new(RwLock::new(0));
    let reader = lock.read();
    let l = lock.clone();
    cancel_parked(&rt, "rwlock", move || drop(l.write()));
    drop(reader);
    drop(lock.try_write().expect("the rwlock is left locked"));

    let pair = Arc::new((Mutex::new(false), Condvar::new()));
    let p = pair.clone();
    cancel_parked(&rt, "condvar", move || {
        let (lock, cond) = &*p;
        let mut ready = lock.lock();
        while !*ready {
            ready = cond.wait(ready);
        }
    });
    drop(
        pair.0
            .try_lock()
            .expect("the condvar's mutex is left locked"),
    );

    let group = Arc::new(WaitGroup::new());
    group.add(1);
    let g = group.clone();
    cancel_parked(&rt, "waitgroup", move || g.wait());
    group.done();

    let sem = Arc::new(Semaphore::new(0));
    let s = sem.clone();
    cancel_parked(&rt, "semaphore", move || drop(s.acquire()));
    sem.add_permits(1);
    assert_eq!(
        sem.available_permits(),
        1,
        "the cancelled waiter took the permit"
    );
}

#[test]
fn cancel_stops_a_computing_task_at_its_next_yield() {
    // No monitor: its warning about the computing task is noise here.
    let rt = Runtime::builder()
        .workers(2)
        .monitor_threshold(None)
        .build()
        .unwrap();
    let drops = Arc::new(AtomicUsize::new(0));
    let computing = Arc::new(AtomicBool::new(false));
    let go_on = Arc::new(AtomicBool::new(false));
    let past_yield = Arc::new(AtomicBool::new(false));
    let (d, c, g, p) = (
        drops.clone(),
        computing.clone(),
        go_on.clone(),
        past_yield.clone(),
    );
    let handle = rt.spawn(move || {
        let _count = CountDrop(d);
        c.store(true, Ordering::SeqCst);
        let start = Instant::now();
        while !g.load(Ordering::SeqCst) && start.elapsed() < LIMIT {
            std::hint::spin_loop(); // computing: no park, no yield
        }
        weft::yield_now();
        p.store(true, Ordering::SeqCst);
    });
    wait_for(&computing, "compute");
    handle.cancel();
    thread::sleep(Duration::from_millis(20));
    assert!(!handle.is_finished(), "cancelled before its next park");
    go_on.store(true, Ordering::SeqCst);
    let payload = join_within(handle, LIMIT).unwrap_err();
    assert!(payload.is::<Cancelled>());
    assert!(!past_yield.load(Ordering::SeqCst), "ran past its yield");
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn cancel_before_start_drops_the_closure_without_running_it() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let drops = Arc::new(AtomicUsize::new(0));
    let ran = Arc::new(AtomicBool::new(false));
    let (d, r) = (drops.clone(), ran.clone());
    let result = rt.block_on(move || {
        let count = CountDrop(d);
        // One worker, busy with this task: the spawned one cannot start before the cancel.
        let h = weft::spawn(move || {
            let _count = count;
            r.store(true, Ordering::SeqCst);
        });
        h.cancel();
        h.join()
    });
    assert!(result.unwrap_err().is::<Cancelled>());
    assert!(!ran.load(Ordering::SeqCst));
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}

#[test]
fn cancel_after_the_task_finished_keeps_its_result() {
    let rt = rt();
    let h = rt.spawn(|| 5);
    while !h.is_finished() {
        thread::sleep(Duration::from_millis(1));
    }
    h.cancel();
    assert_eq!(h.join().unwrap(), 5);
}

#[test]
fn join_timeout_returns_at_its_deadline_and_hands_the_handle_back() {
    let rt = rt();
    rt.block_on(|| {
        let h = weft::spawn(|| weft::time::sleep(Duration::from_secs(3600)));
        let start = Instant::now();
        let h = h
            .join_timeout(Duration::from_millis(30))
            .expect_err("joined a sleeping task");
        let took = start.elapsed();
        println!("join_timeout(30 ms) returned after {took:?}");
        assert!(
            took >= Duration::from_millis(30),
            "returned early: {took:?}"
        );
        assert!(took < Duration::from_millis(130), "returned late: {took:?}");
        h.cancel();
        assert!(h.join().unwrap_err().is::<Cancelled>());

        let quick = weft::spawn(|| {
            weft::time::sleep(Duration::from_millis(5));
            9
        });
        assert_eq!(quick.join_timeout(LIMIT).ok().unwrap().unwrap(), 9);
    });
    // From a plain thread too.
    let h = rt.spawn(|| weft::time::sleep(Duration::from_secs(3600)));
    let start = Instant::now();
    let h = h
        .join_deadline(start + Duration::from_millis(20))
        .unwrap_err();
    assert!(start.elapsed() >= Duration::from_millis(20));
    h.cancel();
    assert!(join_within(h, LIMIT).unwrap_err().is::<Cancelled>());
}

#[test]
fn a_joiner_that_timed_out_leaves_the_result_to_a_later_join() {
    let rt = rt();
    let drops = Arc::new(AtomicUsize::new(0));
    let d = drops.clone();
    let h = rt.spawn(move || {
        weft::time::sleep(Duration::from_millis(40));
        CountDrop(d)
    });
    let h = h.join_timeout(Duration::from_millis(1)).unwrap_err();
    let value = join_within(h, LIMIT).unwrap();
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    drop(value);
    // And a handle dropped after a timed-out join detaches as usual: the task drops it.
    let d = drops.clone();
    let h = rt.spawn(move || {
        weft::time::sleep(Duration::from_millis(20));
        CountDrop(d)
    });
    drop(h.join_timeout(Duration::from_millis(1)).unwrap_err());
    let start = Instant::now();
    while drops.load(Ordering::SeqCst) < 2 {
        assert!(
            start.elapsed() < LIMIT,
            "the detached result was never dropped"
        );
        thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_cancelled_task_leaves_no_timer_behind() {
    let rt = Runtime::builder().workers(1).build().unwrap();
    let drops = Arc::new(AtomicUsize::new(0));
    let d = drops.clone();
    let h = rt.spawn(move || {
        let _count = CountDrop(d);
        weft::time::sleep(Duration::from_secs(3600));
    });
    thread::sleep(Duration::from_millis(20));
    let task = h.task();
    h.cancel();
    assert!(join_within(h, LIMIT).is_err());
    // The timer entry held a reference to the task; with it removed, the last handle is
    // this one (and the live list's, released at finish).
    drop(task);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    drop(rt);
}

#[test]
fn cancel_unwinds_tasks_parked_in_socket_accept_and_read() {
    use std::io::{Read, Write};
    let rt = rt();
    let listener = Arc::new(weft::net::TcpListener::bind("127.0.0.1:0").unwrap());
    let addr = listener.local_addr().unwrap();
    let l = listener.clone();
    cancel_parked(&rt, "accept", move || drop(l.accept()));

    let mut client = std::net::TcpStream::connect(addr).unwrap();
    let (server, _) = listener.accept().unwrap();
    let server = Arc::new(server);
    let s = server.clone();
    cancel_parked(&rt, "read", move || {
        let mut buf = [0u8; 16];
        let _ = (&*s).read(&mut buf);
    });
    // The socket works on: what the client sends now is read by the next reader.
    client.write_all(b"ping").unwrap();
    let s = server.clone();
    let got = rt.block_on(move || {
        let mut buf = [0u8; 4];
        (&*s).read_exact(&mut buf).map(|()| buf)
    });
    assert_eq!(&got.unwrap(), b"ping");
}

#[test]
fn cancel_unwinds_a_task_waiting_for_a_compute_job_and_the_job_runs_on() {
    let rt = rt();
    let results = Arc::new(AtomicUsize::new(0));
    let release = Arc::new(AtomicBool::new(false));
    let (r, go) = (results.clone(), release.clone());
    cancel_parked(&rt, "compute", move || {
        let _ = weft::task::compute(move || {
            let start = Instant::now();
            while !go.load(Ordering::SeqCst) && start.elapsed() < LIMIT {
                thread::sleep(Duration::from_millis(1));
            }
            CountDrop(r)
        });
    });
    release.store(true, Ordering::SeqCst);
    // The job finished on its pool thread, which dropped the result no one waits for.
    let start = Instant::now();
    while results.load(Ordering::SeqCst) == 0 {
        assert!(
            start.elapsed() < LIMIT,
            "the job's result was never dropped"
        );
        thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(rt.block_on(|| weft::task::compute(|| 4)), 4);
}
