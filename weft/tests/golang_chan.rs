//! Go's channel tests, ported to weft.
//!
//! Credit: the Go Authors (BSD-style license): `test/chan/doubleselect.go`,
//! `test/chan/sieve1.go`, `test/chan/fifo.go`, `test/chan/nonblock.go` and `TestSelfSelect`
//! in `src/runtime/chan_test.go` of https://github.com/golang/go. The ports keep each test's
//! idea and structure; Go's `close(c)` is dropping the last sender, and `v, ok := <-c` is
//! `recv()` returning `Err` once closed.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use weft::chan::{bounded, Receiver, Sender, TryRecvError, TrySendError};

fn rt() -> weft::Runtime {
    weft::Runtime::builder().workers(2).build().unwrap()
}

/// doubleselect.go: two arms of one select must never both run — a value sent by a select
/// over four channels arrives exactly once.
#[test]
fn doubleselect_never_runs_two_arms() {
    const N: usize = 20_000;
    rt().block_on(|| {
        let (c1, r1) = bounded::<usize>(0);
        let (c2, r2) = bounded::<usize>(0);
        let (c3, r3) = bounded::<usize>(0);
        let (c4, r4) = bounded::<usize>(0);
        let (cmux, rmux) = bounded::<usize>(0);
        weft::spawn(move || {
            for i in 0..N {
                weft::select! {
                    send(c1, i) -> r => r.unwrap(),
                    send(c2, i) -> r => r.unwrap(),
                    send(c3, i) -> r => r.unwrap(),
                    send(c4, i) -> r => r.unwrap(),
                }
            }
        });
        fn mux(out: Sender<usize>, input: Receiver<usize>) {
            for v in input.iter() {
                out.send(v).unwrap();
            }
        }
        for r in [r1, r2, r3, r4] {
            let out = cmux.clone();
            weft::spawn(move || mux(out, r));
        }
        drop(cmux);
        let mut seen = HashSet::new();
        for v in rmux.iter() {
            assert!(seen.insert(v), "got duplicate value: {v}");
        }
        assert_eq!(seen.len(), N);
    });
}

/// sieve1.go: a daisy chain of filter tasks computes the primes below 100.
#[test]
fn sieve_finds_primes() {
    rt().block_on(|| {
        let (primes_tx, primes) = bounded::<u32>(0);
        weft::spawn(move || {
            let (tx, mut ch) = bounded::<u32>(0);
            weft::spawn(move || {
                for i in 2.. {
                    if tx.send(i).is_err() {
                        return;
                    }
                }
            });
            loop {
                let Ok(prime) = ch.recv() else { return };
                if primes_tx.send(prime).is_err() {
                    return;
                }
                let (tx1, ch1) = bounded::<u32>(0);
                let input = ch;
                weft::spawn(move || {
                    for i in input.iter() {
                        if i % prime != 0 && tx1.send(i).is_err() {
                            return;
                        }
                    }
                });
                ch = ch1;
            }
        });
        let want = [
            2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79, 83,
            89, 97,
        ];
        for w in want {
            assert_eq!(primes.recv().unwrap(), w);
        }
        // Dropping `primes` unwinds the chain: each stage's send fails in turn.
    });
}

/// fifo.go: a buffered channel is a FIFO, and so is an unbuffered one read by a daisy chain
/// of tasks that take turns.
#[test]
fn fifo_async_and_sync() {
    const N: u32 = 10;
    rt().block_on(|| {
        let (tx, rx) = bounded(N as usize);
        for i in 0..N {
            tx.send(i).unwrap();
        }
        for i in 0..N {
            assert_eq!(rx.recv().unwrap(), i, "bad receive");
        }

        let (ch_tx, ch) = bounded::<u32>(0);
        let ch = Arc::new(ch);
        let (start, mut input) = bounded::<u32>(0);
        for i in 0..N {
            let (out_tx, out) = bounded::<u32>(0);
            let ch = ch.clone();
            weft::spawn(move || {
                input.recv().unwrap();
                assert_eq!(ch.recv().unwrap(), i);
                out_tx.send(1).unwrap();
            });
            input = out;
        }
        start.send(0).unwrap();
        for i in 0..N {
            ch_tx.send(i).unwrap();
        }
        input.recv().unwrap();
    });
}

/// nonblock.go: non-blocking operations on unbuffered and buffered channels only succeed when
/// a partner is already waiting or there is room.
#[test]
fn nonblock_operations() {
    rt().block_on(|| {
        let (tx, rx) = bounded::<i32>(0);
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
        assert_eq!(tx.try_send(1), Err(TrySendError::Full(1)));

        // A receiver parked on an unbuffered channel makes a non-blocking send succeed.
        let receiver = weft::spawn(move || rx.recv().unwrap());
        let mut sent = false;
        for _ in 0..1000 {
            if tx.try_send(7).is_ok() {
                sent = true;
                break;
            }
            weft::time::sleep(Duration::from_millis(1));
        }
        assert!(sent, "non-blocking send never met the parked receiver");
        assert_eq!(receiver.join().unwrap(), 7);

        // And a parked sender makes a non-blocking receive succeed.
        let (tx, rx) = bounded::<i32>(0);
        let sender = weft::spawn(move || tx.send(8).unwrap());
        let mut got = None;
        for _ in 0..1000 {
            if let Ok(v) = rx.try_recv() {
                got = Some(v);
                break;
            }
            weft::time::sleep(Duration::from_millis(1));
        }
        assert_eq!(got, Some(8));
        sender.join().unwrap();

        for cap in [1usize, 8] {
            let (tx, rx) = bounded::<usize>(cap);
            for i in 0..cap {
                tx.try_send(i).unwrap();
            }
            assert!(matches!(tx.try_send(99), Err(TrySendError::Full(99))));
            for i in 0..cap {
                assert_eq!(rx.try_recv(), Ok(i));
            }
            assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
        }
    });
}

/// runtime TestSelfSelect: two tasks each select on send and receive over the same channel;
/// a select must never pair with itself, and they must not deadlock.
#[test]
fn self_select_pairs_only_with_the_other_task() {
    for cap in [0usize, 10] {
        rt().block_on(move || {
            let (tx, rx) = bounded::<usize>(cap);
            let handles: Vec<_> = (0..2usize)
                .map(|p| {
                    let (tx, rx) = (tx.clone(), rx.clone());
                    weft::spawn(move || {
                        for i in 0..1000 {
                            if p == 0 || i % 2 == 0 {
                                weft::select! {
                                    send(tx, p) -> r => r.unwrap(),
                                    recv(rx) -> v => {
                                        let v = v.unwrap();
                                        if cap == 0 {
                                            assert_ne!(v, p, "self receive");
                                        }
                                    }
                                }
                            } else {
                                weft::select! {
                                    recv(rx) -> v => {
                                        let v = v.unwrap();
                                        if cap == 0 {
                                            assert_ne!(v, p, "self receive");
                                        }
                                    }
                                    send(tx, p) -> r => r.unwrap(),
                                }
                            }
                        }
                    })
                })
                .collect();
            for h in handles {
                h.join().unwrap();
            }
        });
    }
}
