//! User code that weft used to run on a worker between tasks — the drop of a detached task's
//! result or panic payload, the closure of a task cancelled before it ran — now runs inside a
//! task: a panic there is caught like a task's panic and the worker lives on; a blocking call
//! there parks the task. And no task is ever resumed, unwound or dropped on another thread than
//! the one it started on.

mod common;

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::Duration;

use common::{join_within, quiet_panics};

thread_local! {
    static BUF: RefCell<Vec<u64>> = RefCell::new(vec![1; 4096]);
}

/// Panics when dropped.
struct Bomb;

impl Drop for Bomb {
    fn drop(&mut self) {
        panic!("Bomb::drop");
    }
}

/// Spawns `f` and drops its handle before it can finish, so the task itself drops the result
/// (a handle dropped after the task finished drops it where it is dropped, as with std).
fn detached<T: Send + 'static>(rt: &weft::Runtime, f: impl FnOnce() -> T + Send + 'static) {
    let (gate_tx, gate_rx) = weft::chan::bounded::<()>(0);
    drop(rt.spawn(move || {
        let _ = gate_rx.recv();
        f()
    }));
    drop(gate_tx);
}

#[test]
fn a_panicking_result_drop_keeps_the_worker_and_its_tasks_on_their_thread() {
    quiet_panics();
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    let dropped_on = Arc::new(Mutex::new(None::<ThreadId>));
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let looper = {
        let dropped_on = dropped_on.clone();
        rt.spawn(move || {
            struct Record<'a>(
                std::cell::RefMut<'a, Vec<u64>>,
                Arc<Mutex<Option<ThreadId>>>,
            );
            impl Drop for Record<'_> {
                fn drop(&mut self) {
                    self.0.fill(0xdead);
                    *self.1.lock().unwrap() = Some(std::thread::current().id());
                }
            }
            started_tx.send(std::thread::current().id()).unwrap();
            BUF.with(|b| {
                let _borrow = Record(b.borrow_mut(), dropped_on);
                loop {
                    weft::yield_now();
                }
            })
        })
    };
    let worker_thread = started_rx.recv().unwrap();
    // The result's Drop panics; before, this unwound the worker loop and ended the thread.
    detached(&rt, || Bomb);
    std::thread::sleep(Duration::from_millis(100));
    // The only worker still runs tasks.
    let alive = rt.spawn(|| 7);
    assert_eq!(join_within(alive, Duration::from_secs(5)).unwrap(), 7);
    drop(looper);
    // Shutdown cancels the looping task at its yield, on its own thread.
    drop(rt);
    assert_eq!(*dropped_on.lock().unwrap(), Some(worker_thread));
}

#[test]
fn a_panic_payload_whose_drop_panics_keeps_the_worker() {
    quiet_panics();
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    detached(&rt, || std::panic::panic_any(Bomb));
    // Joined, the payload's drop is the joiner's business, as with std.
    let joined = rt.spawn(|| std::panic::panic_any(Bomb)).join();
    let payload = joined.unwrap_err();
    assert!(payload.is::<Bomb>());
    std::mem::forget(payload);
    let alive = rt.spawn(|| 8);
    assert_eq!(join_within(alive, Duration::from_secs(5)).unwrap(), 8);
}

#[test]
fn a_result_drop_that_blocks_parks_its_task() {
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    let (tx, rx) = weft::chan::bounded::<u32>(0);
    struct SendOnDrop(weft::chan::Sender<u32>);
    impl Drop for SendOnDrop {
        fn drop(&mut self) {
            let _ = self.0.send(1);
        }
    }
    // Detached: the result is dropped by the task itself, whose send parks until the
    // receiver, on the same and only worker, takes the value.
    detached(&rt, move || SendOnDrop(tx));
    std::thread::sleep(Duration::from_millis(50));
    let receiver = rt.spawn(move || rx.recv_timeout(Duration::from_secs(5)));
    assert_eq!(
        join_within(receiver, Duration::from_secs(10)).unwrap(),
        Ok(1)
    );
}

#[test]
fn a_result_dropped_after_completion_is_dropped_by_the_handle() {
    let drops = Arc::new(AtomicUsize::new(0));
    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    let handle = {
        let drops = drops.clone();
        rt.spawn(move || Counted(drops))
    };
    while !handle.is_finished() {
        std::thread::yield_now();
    }
    assert_eq!(drops.load(Ordering::SeqCst), 0);
    drop(handle);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    // Detached before it finishes: dropped once, by the task.
    let (gate_tx, gate_rx) = weft::chan::bounded::<()>(0);
    drop({
        let drops = drops.clone();
        rt.spawn(move || {
            let _ = gate_rx.recv();
            Counted(drops)
        })
    });
    drop(gate_tx);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while drops.load(Ordering::SeqCst) < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "detached result never dropped"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(rt);
    assert_eq!(drops.load(Ordering::SeqCst), 2);
}

/// What a destructor ran, the thread its value was made on, and the thread it ran on.
type Entry = (&'static str, ThreadId, ThreadId);

/// Records the thread a task started on and the thread of each of its destructors.
#[derive(Clone, Default)]
struct Ledger(Arc<Mutex<Vec<Entry>>>);

struct Witness {
    ledger: Ledger,
    what: &'static str,
    started_on: ThreadId,
}

impl Witness {
    fn new(ledger: &Ledger, what: &'static str) -> Witness {
        Witness {
            ledger: ledger.clone(),
            what,
            started_on: std::thread::current().id(),
        }
    }
}

impl Drop for Witness {
    fn drop(&mut self) {
        let now = std::thread::current().id();
        self.ledger
            .0
            .lock()
            .unwrap()
            .push((self.what, self.started_on, now));
    }
}

#[test]
fn no_task_is_resumed_unwound_or_dropped_on_another_thread() {
    quiet_panics();
    let ledger = Ledger::default();
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let mut expected = 0;
    // A result whose drop panics, detached.
    for _ in 0..20 {
        let l = ledger.clone();
        detached(&rt, move || {
            let _w = Witness::new(&l, "result-drop-panics");
            weft::yield_now();
            (Witness::new(&l, "result"), Bomb)
        });
        expected += 2;
    }
    // A panic whose payload panics when dropped, detached.
    for _ in 0..20 {
        let l = ledger.clone();
        detached(&rt, move || {
            let _w = Witness::new(&l, "payload-panics");
            weft::yield_now();
            std::panic::panic_any(Bomb)
        });
        expected += 1;
    }
    // Parked at shutdown, some in the middle of an unwind whose destructor sleeps.
    let mut joins = Vec::new();
    for i in 0..40 {
        let l = ledger.clone();
        joins.push(rt.spawn(move || {
            let _w = Witness::new(&l, "cancelled");
            if i % 2 == 0 {
                struct SleepOnDrop {
                    _witness: Witness,
                }
                impl Drop for SleepOnDrop {
                    fn drop(&mut self) {
                        weft::time::sleep(Duration::from_millis(5));
                    }
                }
                let _s = SleepOnDrop {
                    _witness: Witness::new(&l, "sleeps-while-unwinding"),
                };
                panic!("fails, then sleeps while unwinding");
            }
            loop {
                weft::task::park();
            }
        }));
        expected += if i % 2 == 0 { 2 } else { 1 };
    }
    std::thread::sleep(Duration::from_millis(200));
    drop(rt);
    for j in joins {
        assert!(j.join().is_err());
    }
    let ledger = ledger.0.lock().unwrap();
    assert_eq!(ledger.len(), expected, "{ledger:?}");
    for (what, started, dropped) in ledger.iter() {
        assert_eq!(started, dropped, "{what}: dropped on another thread");
    }
}

#[test]
fn a_joiner_cancelled_while_it_waits_leaves_the_result_to_the_task() {
    let drops = Arc::new(AtomicUsize::new(0));
    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let other = weft::Runtime::builder().workers(1).build().unwrap();
    let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
    let slow = {
        let drops = drops.clone();
        other.spawn(move || {
            weft::task::spawn_blocking(move || gate_rx.recv().ok());
            Counted(drops)
        })
    };
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    let joiner = rt.spawn(move || slow.join().is_ok());
    std::thread::sleep(Duration::from_millis(50));
    // The joiner is cancelled while it waits on a task of the other runtime.
    drop(rt);
    assert!(joiner.join().is_err());
    gate_tx.send(()).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while drops.load(Ordering::SeqCst) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the result was never dropped"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(other);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
}
