//! `Sender::send_async`, `Receiver::recv_async` and `RecvStream`: async code and tasks share
//! channels; no value is lost or duplicated, a dropped `recv_async` takes nothing, a dropped
//! `send_async` drops its value unless a receiver took it, closing wakes async waiters, and a
//! timer channel's `recv_async` completes at its tick.

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::time::{Duration, Instant};

use common::{join_within, within};
use weft::chan;
use weft::Runtime;

const LIMIT: Duration = Duration::from_secs(10);

fn runtime() -> Runtime {
    Runtime::builder().workers(2).build().unwrap()
}

/// A waker that counts its wakes.
struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn counting_waker() -> (Arc<Count>, Waker) {
    let count = Arc::new(Count(AtomicUsize::new(0)));
    (count.clone(), Waker::from(count))
}

fn poll_once<F: Future + Unpin>(f: &mut F, waker: &Waker) -> Poll<F::Output> {
    Pin::new(f).poll(&mut Context::from_waker(waker))
}

#[test]
fn async_senders_and_blocking_receivers_move_every_value_once() {
    for cap in [0, 1, 16] {
        let rt = runtime();
        let (tx, rx) = chan::bounded::<u64>(cap);
        let receivers: Vec<_> = (0..4)
            .map(|_| {
                let rx = rx.clone();
                rt.spawn(move || rx.iter().sum::<u64>())
            })
            .collect();
        drop(rx);
        let senders: Vec<_> = (0..4u64)
            .map(|k| {
                let tx = tx.clone();
                thread::spawn(move || {
                    weft::future::block_on(async move {
                        for i in 0..1000 {
                            tx.send_async(k * 1000 + i).await.unwrap();
                        }
                    })
                })
            })
            .collect();
        drop(tx);
        for s in senders {
            s.join().unwrap();
        }
        let total: u64 = receivers
            .into_iter()
            .map(|r| join_within(r, LIMIT).unwrap())
            .sum();
        assert_eq!(total, (0..4000).sum::<u64>(), "cap {cap}");
    }
}

#[test]
fn async_receivers_and_async_senders_meet_on_a_rendezvous_channel() {
    let rt = runtime();
    let (tx, rx) = chan::bounded::<u64>(0);
    // Both sides async, in tasks: a receive probe and a send entry must meet (no livelock).
    let receivers: Vec<_> = (0..3)
        .map(|_| {
            let rx = rx.clone();
            rt.spawn(move || {
                weft::future::block_on(async move {
                    let mut sum = 0;
                    while let Ok(v) = rx.recv_async().await {
                        sum += v;
                    }
                    sum
                })
            })
        })
        .collect();
    drop(rx);
    let senders: Vec<_> = (0..3u64)
        .map(|k| {
            let tx = tx.clone();
            rt.spawn(move || {
                weft::future::block_on(async move {
                    for i in 0..500 {
                        tx.send_async(k * 500 + i).await.unwrap();
                    }
                })
            })
        })
        .collect();
    drop(tx);
    for s in senders {
        join_within(s, LIMIT).unwrap();
    }
    let total: u64 = receivers
        .into_iter()
        .map(|r| join_within(r, LIMIT).unwrap())
        .sum();
    assert_eq!(total, (0..1500).sum::<u64>());
}

#[test]
fn a_dropped_recv_future_takes_nothing_from_the_channel() {
    let (tx, rx) = chan::bounded::<u32>(0);
    let (wakes, waker) = counting_waker();
    let mut fut = rx.recv_async();
    assert!(poll_once(&mut fut, &waker).is_pending());
    // A blocked sender passes the probe over (waking it) and waits for a real receiver.
    let sender = thread::spawn(move || tx.send(9));
    let start = Instant::now();
    while wakes.0.load(Ordering::SeqCst) == 0 {
        assert!(
            start.elapsed() < LIMIT,
            "the receive future was never woken"
        );
        thread::sleep(Duration::from_millis(1));
    }
    drop(fut); // woken, never polled again: like a losing select! branch
    assert_eq!(rx.recv_timeout(LIMIT), Ok(9), "the value is still there");
    sender.join().unwrap().unwrap();
}

#[test]
fn a_dropped_send_future_drops_its_value_unless_it_was_taken() {
    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let drops = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = chan::bounded::<Counted>(0);
    let (_, waker) = counting_waker();
    // Not taken: dropped with the future.
    let mut fut = tx.send_async(Counted(drops.clone()));
    assert!(poll_once(&mut fut, &waker).is_pending());
    drop(fut);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    assert!(rx.try_recv().is_err(), "nothing reached the channel");
    // Taken: the send happened although the future was never polled again.
    let mut fut = tx.send_async(Counted(drops.clone()));
    assert!(poll_once(&mut fut, &waker).is_pending());
    let got = rx.recv_timeout(LIMIT).unwrap();
    drop(fut);
    assert_eq!(drops.load(Ordering::SeqCst), 1);
    drop(got);
    assert_eq!(drops.load(Ordering::SeqCst), 2);
}

#[test]
fn closing_a_channel_wakes_async_waiters() {
    let (tx, rx) = chan::bounded::<u32>(0);
    let r = thread::spawn(move || weft::future::block_on(rx.recv_async()));
    thread::sleep(Duration::from_millis(20));
    drop(tx);
    assert_eq!(r.join().unwrap(), Err(chan::RecvError));

    let (tx, rx) = chan::bounded::<u32>(0);
    let s = thread::spawn(move || weft::future::block_on(tx.send_async(3)));
    thread::sleep(Duration::from_millis(20));
    drop(rx);
    assert_eq!(s.join().unwrap().unwrap_err().into_inner(), 3);
}

#[test]
fn a_changed_waker_is_the_one_woken() {
    let (tx, rx) = chan::bounded::<u32>(0);
    let (first, w1) = counting_waker();
    let (second, w2) = counting_waker();
    let mut fut = rx.recv_async();
    assert!(poll_once(&mut fut, &w1).is_pending());
    assert!(poll_once(&mut fut, &w2).is_pending());
    assert_eq!(
        tx.try_send(1).unwrap_err().into_inner(),
        1,
        "no real receiver waits"
    );
    assert_eq!(first.0.load(Ordering::SeqCst), 0);
    assert_eq!(second.0.load(Ordering::SeqCst), 1);
    drop(fut);

    // The same for a queued send, whose value moves to the new entry.
    let mut fut = tx.send_async(5);
    assert!(poll_once(&mut fut, &w1).is_pending());
    assert!(poll_once(&mut fut, &w2).is_pending());
    assert_eq!(rx.try_recv(), Ok(5));
    assert_eq!(second.0.load(Ordering::SeqCst), 2);
    assert!(poll_once(&mut fut, &w2).is_ready());
}

#[test]
fn a_timer_channel_completes_an_async_receive_at_its_tick() {
    let start = Instant::now();
    let at = within(LIMIT, || {
        weft::future::block_on(weft::time::after(Duration::from_millis(30)).recv_async())
    });
    assert!(at.is_ok());
    assert!(start.elapsed() >= Duration::from_millis(30));
    let ticks = within(LIMIT, || {
        let tick = weft::time::tick(Duration::from_millis(5));
        weft::future::block_on(async move {
            let mut n = 0;
            for _ in 0..3 {
                tick.recv_async().await.unwrap();
                n += 1;
            }
            n
        })
    });
    assert_eq!(ticks, 3);
}

#[test]
fn a_stream_yields_every_value_then_ends() {
    let rt = runtime();
    let (tx, rx) = chan::bounded::<u32>(4);
    rt.spawn(move || {
        for i in 0..100 {
            tx.send(i).unwrap();
        }
    });
    let mut stream = rx.into_stream();
    let got = within(LIMIT, move || {
        weft::future::block_on(async move {
            let mut got = Vec::new();
            while let Some(v) = stream.recv().await {
                got.push(v);
            }
            got
        })
    });
    assert_eq!(got, (0..100).collect::<Vec<_>>());
}
