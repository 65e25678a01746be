//! Cancel safety of every hand-off (chan/mod.rs "Cancel safety", sched/park.rs invariant 3): a
//! value whose `send` returned `Ok` is received exactly once, never dropped by the unwind of a
//! receiver cancelled as it was handed over; a sender cancelled while it waits either
//! delivered its value or dropped it itself; lock and permit hand-overs to cancelled waiters
//! are passed on, so nothing stays taken.
//!
//! A randomized stress: waiters are cancelled (by `JoinHandle::cancel` or a bound `Context`)
//! at random moments while peers hand them values, on both stack policies (an eager
//! compaction makes a woken waiter's restore slow, which widened the window before the fix).
//! Every trial is bounded, so a regression fails instead of hanging.

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use common::within;
use weft::chan::{Receiver, Sender};
use weft::context::Context;
use weft::stack::StackPolicy;
use weft::Runtime;

/// Trials per scenario and policy: before the fix, 21 of 50 trials of the receiver scenarios
/// lost values, so 12 trials each fail it with near certainty across the scenarios.
const TRIALS: usize = 12;
const RECEIVERS: usize = 20;
const CANCELLED: usize = 15;
const VALUES: u64 = 3000;
const LIMIT: Duration = Duration::from_secs(60);

fn runtimes() -> Vec<(&'static str, Arc<Runtime>)> {
    let build = |policy: Option<StackPolicy>| {
        let mut b = Runtime::builder().workers(2);
        if let Some(policy) = policy {
            b = b.stack_policy(policy);
        }
        Arc::new(b.build().unwrap())
    };
    vec![
        ("default", build(None)),
        ("eager", build(Some(StackPolicy::eager()))),
    ]
}

/// How a receiver waits.
#[derive(Clone, Copy, Debug)]
enum Recv {
    Plain,
    Timeout,
    Select,
    SelectTwo,
}

/// How a waiter is cancelled.
#[derive(Clone, Copy, Debug)]
enum Cancel {
    Handle,
    Context,
}

/// One receiver's loop: until the channel closes, add what it receives to `got`.
fn receive_all(rx: &Receiver<u64>, other: &Receiver<u64>, how: Recv, got: &AtomicU64) {
    loop {
        let v = match how {
            Recv::Plain => rx.recv().ok(),
            Recv::Timeout => match rx.recv_timeout(Duration::from_micros(300)) {
                Ok(v) => Some(v),
                Err(weft::chan::RecvTimeoutError::Timeout) => continue,
                Err(_) => None,
            },
            Recv::Select => weft::select! {
                recv(rx) -> v => v.ok(),
                after(Duration::from_micros(300)) => continue,
            },
            Recv::SelectTwo => weft::select! {
                recv(rx) -> v => v.ok(),
                recv(other) -> v => match v { Ok(v) => Some(v), Err(_) => continue },
            },
        };
        match v {
            Some(v) => {
                got.fetch_add(v, SeqCst);
            }
            None => return,
        }
    }
}

/// Receivers, most of them cancelled while one sender sends `1..=VALUES`: what the sender saw
/// accepted equals what the receivers returned plus what is left in the channel.
fn receivers_cancelled(rt: &Runtime, cap: usize, how: Recv, cancel: Cancel) -> (u64, u64) {
    rt.block_on(move || {
        let (tx, rx) = weft::chan::bounded::<u64>(cap);
        // A second channel nobody sends on (the `SelectTwo` arm): closed at the end.
        let (other_tx, other_rx) = weft::chan::bounded::<u64>(0);
        let got = Arc::new(AtomicU64::new(0));
        let receivers: Vec<_> = (0..RECEIVERS)
            .map(|_| {
                let (rx, other, got) = (rx.clone(), other_rx.clone(), got.clone());
                let ctx = Context::new();
                let bound = ctx.clone();
                let handle = weft::spawn(move || {
                    let _ = bound.bind(|| receive_all(&rx, &other, how, &got));
                });
                (handle, ctx)
            })
            .collect();
        let sender = weft::spawn(move || (1..=VALUES).filter(|&i| tx.send(i).is_ok()).sum::<u64>());
        for (handle, ctx) in receivers.iter().take(CANCELLED) {
            weft::time::sleep(Duration::from_micros(700));
            match cancel {
                Cancel::Handle => handle.cancel(),
                Cancel::Context => ctx.cancel(),
            }
        }
        let sent = sender.join().unwrap();
        drop(other_tx);
        for (handle, _) in receivers {
            let _ = handle.join_timeout(Duration::from_secs(10));
        }
        while let Ok(v) = rx.try_recv() {
            got.fetch_add(v, SeqCst);
        }
        (sent, got.load(SeqCst))
    })
}

#[test]
fn a_value_handed_to_a_cancelled_receiver_is_never_lost() {
    common::quiet_panics();
    let mut failures = Vec::new();
    for (policy, rt) in runtimes() {
        for cap in [0, 4] {
            for how in [Recv::Plain, Recv::Timeout, Recv::Select, Recv::SelectTwo] {
                for cancel in [Cancel::Handle, Cancel::Context] {
                    for trial in 0..TRIALS / 2 {
                        let rt = rt.clone();
                        let (sent, got) =
                            within(LIMIT, move || receivers_cancelled(&rt, cap, how, cancel));
                        if sent != got {
                            failures.push(format!(
                                "{policy} cap {cap} {how:?} {cancel:?} trial {trial}: \
                                 sent {sent}, received {got} ({} lost)",
                                sent as i64 - got as i64
                            ));
                        }
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "values lost:\n{}", failures.join("\n"));
}

/// A value that counts itself: which ones a receiver got, and which were dropped.
struct Tracked {
    id: u64,
    dropped: Arc<StdMutex<Vec<u64>>>,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.dropped.lock().unwrap().push(self.id);
    }
}

/// Senders, most of them cancelled while they wait (plain `send`, `send_timeout` or a
/// `select!` send arm): every value whose send returned `Ok` was received, every value a
/// receiver got was acknowledged by its sender, and no value was received twice.
#[test]
fn a_cancelled_sender_delivers_its_value_or_keeps_it() {
    common::quiet_panics();
    for (policy, rt) in runtimes() {
        for cap in [0, 2] {
            for arm in 0..3 {
                for _ in 0..TRIALS / 3 {
                    let rt = rt.clone();
                    let (acked, received) = within(LIMIT, move || {
                        rt.block_on(move || senders_cancelled(cap, arm))
                    });
                    let unique: HashSet<u64> = received.iter().copied().collect();
                    assert_eq!(unique.len(), received.len(), "{policy}: a value came twice");
                    assert_eq!(
                        unique, acked,
                        "{policy} cap {cap} arm {arm}: acknowledged and received differ"
                    );
                }
            }
        }
    }
}

fn senders_cancelled(cap: usize, arm: usize) -> (HashSet<u64>, Vec<u64>) {
    let (tx, rx) = weft::chan::bounded::<Tracked>(cap);
    let dropped = Arc::new(StdMutex::new(Vec::new()));
    let acked = Arc::new(StdMutex::new(HashSet::new()));
    let senders: Vec<_> = (0..RECEIVERS as u64)
        .map(|s| {
            let (tx, dropped, acked): (Sender<Tracked>, _, _) =
                (tx.clone(), dropped.clone(), acked.clone());
            weft::spawn(move || {
                for i in 0..200u64 {
                    let id = s * 1000 + i;
                    let mut value = Tracked {
                        id,
                        dropped: dropped.clone(),
                    };
                    let ok = match arm {
                        0 => tx.send(value).is_ok(),
                        1 => loop {
                            match tx.send_timeout(value, Duration::from_micros(200)) {
                                Ok(()) => break true,
                                Err(weft::chan::SendTimeoutError::Timeout(back)) => value = back,
                                Err(_) => break false,
                            }
                        },
                        _ => weft::select! {
                            send(tx, value) -> r => r.is_ok(),
                            after(Duration::from_secs(30)) => false,
                        },
                    };
                    if !ok {
                        return;
                    }
                    acked.lock().unwrap().insert(id);
                }
            })
        })
        .collect();
    drop(tx);
    let receiver = weft::spawn(move || {
        let mut got = Vec::new();
        while let Ok(v) = rx.recv() {
            got.push(v.id);
            weft::yield_now();
        }
        got
    });
    for handle in senders.iter().take(CANCELLED) {
        weft::time::sleep(Duration::from_micros(500));
        handle.cancel();
    }
    for handle in senders {
        let _ = handle.join_timeout(Duration::from_secs(10));
    }
    let received = receiver.join().unwrap();
    let acked = acked.lock().unwrap().clone();
    (acked, received)
}

/// Lock and permit hand-overs to waiters cancelled as they are granted: afterwards every
/// permit is back and the locks can be taken, so nothing was handed to a waiter that is gone.
#[test]
fn lock_and_permit_handovers_to_cancelled_waiters_are_passed_on() {
    common::quiet_panics();
    for (policy, rt) in runtimes() {
        for _ in 0..TRIALS / 2 {
            let rt = rt.clone();
            within(LIMIT, move || {
                rt.block_on(move || {
                    let mutex = Arc::new(weft::sync::Mutex::new(0u64));
                    let rwlock = Arc::new(weft::sync::RwLock::new(0u64));
                    let sema = Arc::new(weft::sync::Semaphore::new(3));
                    let done = Arc::new(AtomicUsize::new(0));
                    let waiters: Vec<_> = (0..RECEIVERS)
                        .map(|i| {
                            let (mutex, rwlock, sema, done) =
                                (mutex.clone(), rwlock.clone(), sema.clone(), done.clone());
                            weft::spawn(move || {
                                for _ in 0..200 {
                                    match i % 3 {
                                        0 => *mutex.lock() += 1,
                                        1 => *rwlock.write() += 1,
                                        _ => drop(sema.acquire_many(2)),
                                    }
                                    weft::yield_now();
                                }
                                done.fetch_add(1, SeqCst);
                            })
                        })
                        .collect();
                    for handle in waiters.iter().take(CANCELLED) {
                        weft::time::sleep(Duration::from_micros(300));
                        handle.cancel();
                    }
                    for handle in waiters {
                        let _ = handle.join_timeout(Duration::from_secs(10));
                    }
                    assert_eq!(sema.available_permits(), 3, "{policy}: permits lost");
                    assert!(
                        mutex.try_lock().is_some(),
                        "{policy}: the mutex stayed locked"
                    );
                    assert!(
                        rwlock.try_write().is_some(),
                        "{policy}: the rwlock stayed locked"
                    );
                });
            });
        }
    }
}

/// A joiner cancelled as the task it joins finishes: the task's result is dropped exactly
/// once — by the joiner's `join` returning it, or by the handle's drop — never twice or never.
#[test]
fn a_cancelled_joiner_drops_the_result_once() {
    common::quiet_panics();
    for (policy, rt) in runtimes() {
        let dropped = Arc::new(StdMutex::new(Vec::new()));
        // The children that exist: a joiner cancelled before it ran spawned none.
        let made = Arc::new(StdMutex::new(Vec::new()));
        within(LIMIT, {
            let (rt, dropped, made) = (rt.clone(), dropped.clone(), made.clone());
            move || {
                rt.block_on(move || {
                    let joiners: Vec<_> = (0..200u64)
                        .map(|id| {
                            let (dropped, made) = (dropped.clone(), made.clone());
                            weft::spawn(move || {
                                let child = weft::spawn(move || {
                                    weft::time::sleep(Duration::from_micros(id % 7 * 100));
                                    Tracked { id, dropped }
                                });
                                made.lock().unwrap().push(id);
                                drop(child.join());
                            })
                        })
                        .collect();
                    for (i, handle) in joiners.iter().enumerate() {
                        if i % 4 != 0 {
                            handle.cancel();
                        }
                        if i % 16 == 0 {
                            weft::time::sleep(Duration::from_micros(200));
                        }
                    }
                    for handle in joiners {
                        let _ = handle.join_timeout(Duration::from_secs(10));
                    }
                    // Children outlive cancelled joiners: let every one that exists finish.
                    let start = std::time::Instant::now();
                    while dropped.lock().unwrap().len() < made.lock().unwrap().len()
                        && start.elapsed() < Duration::from_secs(10)
                    {
                        weft::time::sleep(Duration::from_millis(5));
                    }
                })
            }
        });
        // A last look after a pause: a result dropped twice would show up late.
        std::thread::sleep(Duration::from_millis(20));
        let mut dropped = dropped.lock().unwrap().clone();
        dropped.sort_unstable();
        let mut expected = made.lock().unwrap().clone();
        expected.sort_unstable();
        assert!(
            expected.len() >= 50,
            "{policy}: only {} joiners ran",
            expected.len()
        );
        assert_eq!(
            dropped, expected,
            "{policy}: a result dropped twice or never"
        );
    }
}
