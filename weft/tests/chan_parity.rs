//! `weft::chan` at parity with crossbeam-channel where weft follows it: the behaviours its
//! suite found missing or different, and the API it lacked (`Select`, `never`,
//! `select_biased!`, `is_full`, `same_channel`, `default(timeout)`, trailing commas), each run
//! on plain OS threads and inside weft tasks. Written for weft, not copied.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::within;
use weft::chan::{bounded, never, unbounded, Select};

const LIMIT: Duration = Duration::from_secs(60);

/// Runs `body` on a plain thread, then in a task of a two-worker runtime.
fn on_threads_and_in_tasks(body: fn()) {
    within(LIMIT, body);
    within(LIMIT, move || {
        let rt = weft::Runtime::builder().workers(2).build().unwrap();
        rt.block_on(move || weft::spawn(body).join().unwrap());
    });
}

/// Starts `f` as a thread, or as a task when called in one.
fn start(f: impl FnOnce() + Send + 'static) -> Box<dyn FnOnce() + Send> {
    if weft::task::try_current().is_some() {
        let h = weft::spawn(f);
        Box::new(move || h.join().unwrap())
    } else {
        let h = std::thread::spawn(f);
        Box::new(move || h.join().unwrap())
    }
}

/// Item 0: one of `r1`, `r2` holds a value at every instant (the peer fills `r2` before it
/// empties `r1`), so a `select!` with `default` must never take `default`.
fn default_linearizable() {
    const ROUNDS: usize = 20_000;
    let (s1, r1) = bounded::<i32>(1);
    let (s2, r2) = bounded::<i32>(1);
    let (start_s, start_r) = bounded::<()>(0);
    let (end_s, end_r) = bounded::<()>(0);
    let (r1b, r2b) = (r1.clone(), r2.clone());
    let peer = start(move || {
        for _ in 0..ROUNDS {
            start_r.recv().unwrap();
            s2.send(1).unwrap();
            let _ = r1b.try_recv();
            end_r.recv().unwrap();
        }
    });
    let mut defaults = 0;
    for _ in 0..ROUNDS {
        start_s.send(()).unwrap();
        s1.send(1).unwrap();
        weft::select! {
            recv(r1) -> _ => {}
            recv(r2) -> _ => {}
            default => defaults += 1,
        }
        end_s.send(()).unwrap();
        let _ = r2b.try_recv();
        let _ = r1.try_recv();
    }
    peer();
    assert_eq!(
        defaults, 0,
        "default taken although an arm was ready throughout"
    );
}

#[test]
fn select_default_is_linearizable() {
    on_threads_and_in_tasks(default_linearizable);
}

/// The same for an `after` deadline that has passed when the select starts.
#[test]
fn select_with_a_passed_deadline_takes_a_ready_arm() {
    on_threads_and_in_tasks(|| {
        let (tx, rx) = bounded::<u8>(1);
        tx.send(7).unwrap();
        let got = weft::select! {
            recv(rx) -> v => v.unwrap(),
            after(Duration::ZERO) => 0,
        };
        assert_eq!(got, 7);
    });
}

/// Item 1.
#[test]
fn buffered_values_are_dropped_with_the_last_receiver() {
    on_threads_and_in_tasks(|| {
        let (tx, rx) = bounded::<Arc<()>>(2);
        let msg = Arc::new(());
        let weak = Arc::downgrade(&msg);
        tx.send(msg).unwrap();
        let rx2 = rx.clone();
        drop(rx);
        assert!(weak.upgrade().is_some(), "a receiver is left");
        drop(rx2);
        assert!(
            weak.upgrade().is_none(),
            "the value outlived the last receiver"
        );
        assert!(tx.send(Arc::new(())).is_err());
    });
}

struct PanicOnDrop(Arc<AtomicUsize>);

impl Drop for PanicOnDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, SeqCst);
        panic!("a value's drop panics");
    }
}

/// Item 2: the first panicking drop comes out of the handle's drop; the rest are leaked,
/// never dropped during that unwind (which would abort the process).
#[test]
fn panicking_drops_of_buffered_values_do_not_abort() {
    common::quiet_panics();
    on_threads_and_in_tasks(|| {
        for receiver_last in [true, false] {
            let drops = Arc::new(AtomicUsize::new(0));
            let (tx, rx) = unbounded::<PanicOnDrop>();
            for _ in 0..3 {
                tx.send(PanicOnDrop(drops.clone())).unwrap();
            }
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                if receiver_last {
                    drop(tx);
                    drop(rx);
                } else {
                    drop(rx);
                    drop(tx);
                }
            }));
            assert!(outcome.is_err(), "the first drop's panic comes out");
            assert_eq!(drops.load(SeqCst), 1, "the rest are leaked, not dropped");
        }
    });
}

/// Item 3.
#[test]
fn timer_channels_have_capacity_one_and_hold_a_due_value() {
    on_threads_and_in_tasks(|| {
        let rx = weft::time::after(Duration::from_millis(20));
        assert_eq!(rx.capacity(), Some(1));
        assert_eq!(rx.len(), 0);
        weft::time::sleep(Duration::from_millis(40));
        assert_eq!(rx.len(), 1);
        assert!(rx.is_full());
        rx.recv().unwrap();
        assert_eq!((rx.len(), rx.capacity()), (0, Some(1)));
        let tick = weft::time::tick(Duration::from_millis(5));
        assert_eq!(tick.capacity(), Some(1));
    });
}

/// Item 4: loops over `try_recv`, `try_send` and a `select!` with `default` spend the
/// cooperative budget, so they let a sleeper on their worker wake.
#[test]
fn loops_of_try_operations_and_default_selects_yield() {
    within(LIMIT, || {
        let rt = weft::Runtime::builder().workers(2).build().unwrap();
        rt.block_on(|| {
            let stop = Arc::new(AtomicBool::new(false));
            let (tx, rx) = bounded::<u8>(0);
            let spinners: Vec<_> = (0..3)
                .map(|kind| {
                    let (stop, tx, rx) = (stop.clone(), tx.clone(), rx.clone());
                    weft::spawn(move || {
                        while !stop.load(SeqCst) {
                            match kind {
                                0 => drop(rx.try_recv()),
                                1 => drop(tx.try_send(1)),
                                _ => weft::select! {
                                    recv(rx) -> _ => {}
                                    default => {}
                                },
                            }
                        }
                    })
                })
                .collect();
            let start = Instant::now();
            weft::time::sleep(Duration::from_millis(200));
            let slept = start.elapsed();
            stop.store(true, SeqCst);
            for s in spinners {
                s.join().unwrap();
            }
            assert!(
                slept < Duration::from_secs(5),
                "the sleeper waited {slept:?}"
            );
        });
    });
}

#[test]
fn never_never_receives_and_never_closes() {
    on_threads_and_in_tasks(|| {
        let off = never::<u32>();
        assert!(off.try_recv().is_err());
        assert_eq!(
            off.recv_timeout(Duration::from_millis(10)),
            Err(weft::chan::RecvTimeoutError::Timeout)
        );
        let (tx, rx) = bounded::<u32>(1);
        tx.send(3).unwrap();
        let on = false;
        let got = weft::select! {
            recv(if on { &rx } else { &off }) -> _ => 0,
            recv(rx) -> v => v.unwrap(),
        };
        assert_eq!(got, 3);
    });
}

#[test]
fn select_biased_takes_the_first_ready_arm() {
    on_threads_and_in_tasks(|| {
        let (a_tx, a) = bounded::<u8>(1);
        let (b_tx, b) = bounded::<u8>(1);
        for _ in 0..200 {
            a_tx.send(1).unwrap();
            b_tx.send(2).unwrap();
            let got = weft::select_biased! {
                recv(b) -> v => v.unwrap(),
                recv(a) -> v => v.unwrap(),
            };
            assert_eq!(got, 2);
            a.recv().unwrap();
        }
    });
}

#[test]
fn is_full_same_channel_trailing_commas_and_default_timeout() {
    on_threads_and_in_tasks(|| {
        let (tx, rx) = bounded::<u8>(1);
        assert!(!tx.is_full() && !rx.is_full());
        tx.send(1).unwrap();
        assert!(tx.is_full() && rx.is_full());
        let (tx0, _rx0) = bounded::<u8>(0);
        assert!(tx0.is_full());
        let (utx, _urx) = unbounded::<u8>();
        assert!(!utx.is_full());
        assert!(tx.same_channel(&tx.clone()) && !tx.same_channel(&tx0));
        assert!(rx.same_channel(&rx.clone()));
        let got = weft::select! {
            recv(rx,) -> v => v.unwrap(),
            send(tx0, 9,) -> _ => 0,
        };
        assert_eq!(got, 1);
        let start = Instant::now();
        let timed_out = weft::select! {
            recv(rx) -> _ => false,
            default(Duration::from_millis(20)) => true,
        };
        assert!(timed_out && start.elapsed() >= Duration::from_millis(20));
    });
}

#[test]
fn handles_are_unwind_safe() {
    fn unwind_safe<T: std::panic::UnwindSafe + std::panic::RefUnwindSafe>(_: &T) {}
    let (tx, rx) = bounded::<u8>(1);
    unwind_safe(&tx);
    unwind_safe(&rx);
    let r = catch_unwind(|| tx.send(1).is_ok() && rx.recv().is_ok());
    assert!(r.unwrap());
}

/// `Select` over a thousand receivers, fed by a thousand senders: every value arrives once.
#[test]
fn select_fans_in_a_thousand_receivers() {
    on_threads_and_in_tasks(|| {
        const N: usize = 1000;
        let channels: Vec<_> = (0..N).map(|_| bounded::<usize>(0)).collect();
        let senders: Vec<_> = channels
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 10 == 0)
            .map(|(i, (tx, _))| {
                let tx = tx.clone();
                start(move || {
                    for k in 0..10 {
                        tx.send(i * 100 + k).unwrap();
                    }
                })
            })
            .collect();
        let mut sel = Select::new();
        for (_, rx) in &channels {
            sel.recv(rx);
        }
        let mut got = Vec::new();
        for _ in 0..N {
            let oper = sel.select();
            let i = oper.index();
            got.push(oper.recv(&channels[i].1).unwrap());
        }
        for s in senders {
            s();
        }
        got.sort_unstable();
        let want: Vec<usize> = (0..N)
            .filter(|i| i % 10 == 0)
            .flat_map(|i| (0..10).map(move |k| i * 100 + k))
            .collect();
        assert_eq!(got, want);
    });
}

#[test]
fn select_sends_and_tries_and_times_out() {
    on_threads_and_in_tasks(|| {
        let (tx, rx) = bounded::<u8>(1);
        let (_keep, empty) = bounded::<u8>(1);
        let mut sel = Select::new();
        let recv_empty = sel.recv(&empty);
        let send_tx = sel.send(&tx);
        let oper = sel.try_select().unwrap();
        assert_eq!(oper.index(), send_tx);
        oper.send(&tx, 5).unwrap();
        assert_eq!(rx.recv(), Ok(5));
        tx.send(6).unwrap(); // full now: nothing is ready
        assert!(sel.try_select().is_err());
        assert!(sel.try_ready().is_err());
        let began = Instant::now();
        assert!(sel.select_timeout(Duration::from_millis(20)).is_err());
        assert!(sel.ready_timeout(Duration::from_millis(20)).is_err());
        assert!(began.elapsed() >= Duration::from_millis(40));
        sel.remove(recv_empty);
        // A receiver makes room from elsewhere: the send becomes ready.
        let rx2 = rx.clone();
        let taker = start(move || {
            weft::time::sleep(Duration::from_millis(10));
            assert_eq!(rx2.recv(), Ok(6));
        });
        assert_eq!(sel.ready(), send_tx);
        taker();
        assert_eq!(rx.len(), 0, "ready takes nothing");
    });
}

#[test]
fn select_reports_a_closed_channel_and_misuse() {
    common::quiet_panics();
    on_threads_and_in_tasks(|| {
        let (tx, rx) = bounded::<u8>(1);
        let (_tx2, rx2) = bounded::<u8>(1);
        drop(tx);
        let mut sel = Select::new();
        sel.recv(&rx);
        sel.recv(&rx2);
        let oper = sel.select();
        assert_eq!(oper.index(), 0);
        assert!(
            oper.recv(&rx).is_err(),
            "a closed channel is ready, with Err"
        );
        let wrong = catch_unwind(AssertUnwindSafe(|| {
            let oper = sel.select();
            let _ = oper.recv(&rx2);
        }));
        assert!(wrong.is_err(), "passing the wrong receiver panics");
        let dropped = catch_unwind(AssertUnwindSafe(|| drop(sel.select())));
        assert!(dropped.is_err(), "dropping an uncompleted operation panics");
    });
}
