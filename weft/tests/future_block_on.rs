//! `weft::future::block_on` in tasks and on plain threads: the waker unparks the task from
//! anywhere, any number of times, before or after the park, after the task was cancelled or
//! ended; a nested `block_on` loses no wake of the outer one; panics, cancellation, timeouts
//! and a runtime dropped with futures in flight. Awaiting a `JoinHandle`.
//!
//! Every wait is bounded, so a regression fails instead of hanging.

mod common;

use std::future::{poll_fn, Future, IntoFuture};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::thread;
use std::time::{Duration, Instant};

use common::{join_within, quiet_panics, within};
use weft::Runtime;

const LIMIT: Duration = Duration::from_secs(10);

fn runtime(workers: usize) -> Runtime {
    Runtime::builder().workers(workers).build().unwrap()
}

/// A future that is ready once `ready` is set, and hands its latest waker out.
#[derive(Clone, Default)]
struct Gate {
    ready: Arc<AtomicBool>,
    waker: Arc<Mutex<Option<Waker>>>,
    polls: Arc<AtomicUsize>,
    drops: Arc<AtomicUsize>,
}

impl Gate {
    fn wait(&self) -> GateFuture {
        GateFuture(self.clone())
    }

    fn open(&self) {
        self.ready.store(true, Ordering::SeqCst);
        self.wake();
    }

    fn wake(&self) {
        let waker = self.waker.lock().unwrap().clone();
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    fn has_waker(&self) -> bool {
        self.waker.lock().unwrap().is_some()
    }

    fn wait_for_waker(&self) {
        let start = Instant::now();
        while !self.has_waker() {
            assert!(start.elapsed() < LIMIT, "the future was never polled");
            thread::sleep(Duration::from_millis(1));
        }
    }
}

struct GateFuture(Gate);

impl Future for GateFuture {
    type Output = u32;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<u32> {
        self.0.polls.fetch_add(1, Ordering::SeqCst);
        *self.0.waker.lock().unwrap() = Some(cx.waker().clone());
        if self.0.ready.load(Ordering::SeqCst) {
            Poll::Ready(7)
        } else {
            Poll::Pending
        }
    }
}

impl Drop for GateFuture {
    fn drop(&mut self) {
        self.0.drops.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn a_waker_fired_from_another_thread_unparks_the_task() {
    let rt = runtime(2);
    let gate = Gate::default();
    let g = gate.clone();
    let h = rt.spawn(move || weft::future::block_on(g.wait()));
    gate.wait_for_waker();
    thread::sleep(Duration::from_millis(20));
    assert!(!h.is_finished());
    gate.open();
    assert_eq!(join_within(h, LIMIT).unwrap(), 7);
    assert_eq!(gate.drops.load(Ordering::SeqCst), 1);
}

#[test]
fn a_waker_fired_during_the_poll_before_the_park_is_not_lost() {
    let rt = runtime(1);
    let n = within(LIMIT, move || {
        rt.block_on(|| {
            let mut polls = 0;
            weft::future::block_on(poll_fn(|cx| {
                polls += 1;
                if polls < 1000 {
                    cx.waker().wake_by_ref(); // before the park: it must not park for good
                    Poll::Pending
                } else {
                    Poll::Ready(polls)
                }
            }))
        })
    });
    assert_eq!(n, 1000);
}

#[test]
fn a_waker_fired_twice_and_cloned_many_times_polls_again_and_finishes() {
    let rt = runtime(2);
    let gate = Gate::default();
    let g = gate.clone();
    let h = rt.spawn(move || weft::future::block_on(g.wait()));
    gate.wait_for_waker();
    let waker = gate.waker.lock().unwrap().clone().unwrap();
    let clones: Vec<Waker> = (0..100).map(|_| waker.clone()).collect();
    waker.wake_by_ref();
    waker.wake_by_ref();
    for c in clones {
        c.wake();
    }
    gate.open();
    gate.wake();
    assert_eq!(join_within(h, LIMIT).unwrap(), 7);
    // Woken many times, but polled only as often as it was woken while it waited.
    let polls = gate.polls.load(Ordering::SeqCst);
    assert!((2..=200).contains(&polls), "{polls} polls");
    waker.wake(); // after the end: harmless
}

#[test]
fn a_waker_fired_after_the_task_ended_is_harmless() {
    let rt = runtime(2);
    let gate = Gate::default();
    gate.ready.store(true, Ordering::SeqCst);
    let g = gate.clone();
    let h = rt.spawn(move || weft::future::block_on(g.wait()));
    assert_eq!(join_within(h, LIMIT).unwrap(), 7);
    // The waker outlives its task (it holds a counted reference, not a borrowed pointer),
    // and the runtime.
    let waker = gate.waker.lock().unwrap().take().unwrap();
    for _ in 0..10 {
        waker.wake_by_ref();
    }
    // The same waker fired while another task of the runtime runs.
    let other = rt.spawn(|| (0..100).sum::<u32>());
    waker.wake_by_ref();
    assert_eq!(join_within(other, LIMIT).unwrap(), 4950);
    drop(rt);
    waker.wake();
}

#[test]
fn a_waker_fired_after_the_task_was_cancelled_is_harmless_and_the_future_is_dropped() {
    quiet_panics();
    let rt = runtime(2);
    let gate = Gate::default();
    let g = gate.clone();
    let h = rt.spawn(move || weft::future::block_on(g.wait()));
    gate.wait_for_waker();
    h.cancel();
    let payload = join_within(h, LIMIT).unwrap_err();
    assert!(weft::task::is_cancelled(&*payload));
    assert_eq!(
        gate.drops.load(Ordering::SeqCst),
        1,
        "the future was dropped once"
    );
    for _ in 0..3 {
        gate.wake();
    }
    gate.open();
    // The runtime goes on.
    assert_eq!(join_within(rt.spawn(|| 1), LIMIT).unwrap(), 1);
}

#[test]
fn a_future_that_panics_fails_its_task_and_the_runtime_goes_on() {
    quiet_panics();
    let rt = runtime(1);
    let h = rt.spawn(|| {
        weft::future::block_on(async {
            weft::time::sleep(Duration::from_millis(1));
            panic!("boom in a future");
        })
    });
    let payload = join_within(h, LIMIT).unwrap_err();
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"boom in a future"));
    assert_eq!(join_within(rt.spawn(|| 2), LIMIT).unwrap(), 2);
}

/// The outer future's waker fires while its task is parked in an inner `block_on` (whose park
/// takes the task's token): the outer `block_on` must still poll again, not park for good.
#[test]
fn block_on_inside_block_on_loses_no_wake_of_the_outer_one() {
    let rt = runtime(2);
    let outer = Gate::default();
    let inner = Gate::default();
    let (o, i) = (outer.clone(), inner.clone());
    let h = rt.spawn(move || {
        let mut first = true;
        let mut outer_wait = o.wait();
        weft::future::block_on(poll_fn(move |cx| {
            if Pin::new(&mut outer_wait).poll(cx).is_ready() {
                return Poll::Ready(1);
            }
            if first {
                first = false;
                // A nested block_on, inside the outer poll.
                return Poll::Ready(weft::future::block_on(i.wait()) + 100);
            }
            Poll::Pending
        }))
    });
    inner.wait_for_waker();
    outer.wait_for_waker();
    thread::sleep(Duration::from_millis(10));
    // Ready the outer first, while the task parks in the inner block_on; then the inner.
    outer.open();
    thread::sleep(Duration::from_millis(10));
    inner.open();
    // The inner one returns 107 and ends the outer poll.
    assert_eq!(join_within(h, LIMIT).unwrap(), 107);

    // Now the case where the inner returns and the outer must wait for its own wake that
    // came during the inner park.
    let outer = Gate::default();
    let inner = Gate::default();
    let (o, i) = (outer.clone(), inner.clone());
    let h = rt.spawn(move || {
        let mut nested = false;
        let mut outer_wait = o.wait();
        weft::future::block_on(poll_fn(move |cx| {
            if let Poll::Ready(v) = Pin::new(&mut outer_wait).poll(cx) {
                return Poll::Ready(v);
            }
            if !nested {
                nested = true;
                weft::future::block_on(i.wait());
            }
            Poll::Pending
        }))
    });
    inner.wait_for_waker();
    // The outer's wake arrives while the task parks in the inner block_on.
    outer.open();
    thread::sleep(Duration::from_millis(10));
    inner.open();
    assert_eq!(join_within(h, LIMIT).unwrap(), 7);
}

#[test]
fn a_future_woken_before_a_cancel_keeps_its_result() {
    // One worker: the waking task runs while the waiting one is queued, so the wake and the
    // cancel both land before the waiter resumes.
    let rt = runtime(1);
    let gate = Gate::default();
    let g = gate.clone();
    let waiter = rt.spawn(move || weft::future::block_on(g.wait()));
    gate.wait_for_waker();
    let task = waiter.task();
    let g = gate.clone();
    let waker_task = rt.spawn(move || {
        g.open();
        task.cancel();
    });
    join_within(waker_task, LIMIT).unwrap();
    assert_eq!(
        join_within(waiter, LIMIT).unwrap(),
        7,
        "completed, so not cancelled"
    );
}

#[test]
fn block_on_timeout_drops_the_future_and_says_elapsed() {
    let rt = runtime(1);
    let gate = Gate::default();
    let g = gate.clone();
    let h = rt.spawn(move || {
        let start = Instant::now();
        let r = weft::future::block_on_timeout(g.wait(), Duration::from_millis(30));
        (r, start.elapsed())
    });
    let (r, took) = join_within(h, LIMIT).unwrap();
    assert!(r.is_err());
    assert!(took >= Duration::from_millis(30), "{took:?}");
    assert_eq!(gate.drops.load(Ordering::SeqCst), 1);
    // On a plain thread too.
    let gate = Gate::default();
    let r = weft::future::block_on_timeout(gate.wait(), Duration::from_millis(10));
    assert_eq!(
        r.unwrap_err().to_string(),
        "deadline has elapsed before the future completed"
    );
}

#[test]
fn the_runtime_dropped_with_futures_in_flight_drops_every_future() {
    quiet_panics();
    let rt = runtime(2);
    let gate = Gate::default();
    let handles: Vec<_> = (0..100)
        .map(|_| {
            let g = gate.clone();
            rt.spawn(move || weft::future::block_on(g.wait()))
        })
        .collect();
    let start = Instant::now();
    while gate.polls.load(Ordering::SeqCst) < 100 {
        assert!(start.elapsed() < LIMIT);
        thread::sleep(Duration::from_millis(1));
    }
    within(LIMIT, move || drop(rt));
    assert_eq!(gate.drops.load(Ordering::SeqCst), 100);
    for h in handles {
        assert!(weft::task::is_cancelled(&*h.join().unwrap_err()));
    }
    gate.open(); // wakers of tasks of a dropped runtime: harmless
}

#[test]
fn many_tasks_woken_from_many_threads_all_finish() {
    let rt = runtime(2);
    let gates: Vec<Gate> = (0..1000).map(|_| Gate::default()).collect();
    let handles: Vec<_> = gates
        .iter()
        .map(|g| {
            let g = g.clone();
            rt.spawn(move || weft::future::block_on(g.wait()))
        })
        .collect();
    for g in &gates {
        g.wait_for_waker();
    }
    let gates = Arc::new(gates);
    let wakers: Vec<_> = (0..4)
        .map(|k| {
            let gates = gates.clone();
            thread::spawn(move || {
                for (i, g) in gates.iter().enumerate() {
                    if i % 4 == k {
                        g.open();
                    } else {
                        g.wake(); // a stray wake from another thread
                    }
                }
            })
        })
        .collect();
    for w in wakers {
        w.join().unwrap();
    }
    for h in handles {
        assert_eq!(join_within(h, LIMIT).unwrap(), 7);
    }
}

#[test]
fn a_join_handle_awaited_gives_what_join_gives() {
    quiet_panics();
    let rt = runtime(2);
    let handle = rt.handle();
    // From a plain thread's block_on.
    let ok = weft::future::block_on(handle.spawn(|| {
        weft::time::sleep(Duration::from_millis(5));
        5
    }));
    assert_eq!(ok.unwrap(), 5);
    let panicked = weft::future::block_on(handle.spawn(|| panic!("in the task")));
    assert_eq!(
        panicked.unwrap_err().downcast_ref::<&str>(),
        Some(&"in the task")
    );
    // From another task, many at once.
    let sum = rt.block_on(|| {
        weft::future::block_on(async {
            let hs: Vec<_> = (0..100u64)
                .map(|i| {
                    weft::spawn(move || {
                        weft::time::sleep(Duration::from_millis(i % 7));
                        i
                    })
                })
                .collect();
            let mut sum = 0;
            for h in hs {
                sum += h.await.unwrap();
            }
            sum
        })
    });
    assert_eq!(sum, 4950);
}

/// A handle polled with one waker, then another, then joined or dropped: the slot keeps one
/// registered waker at a time and drops the ones it replaced.
#[test]
fn a_join_handle_polled_then_joined_or_dropped_keeps_no_stale_waker() {
    let rt = runtime(1);
    let gate = Gate::default();
    let counter = Arc::new(());
    let waker_of = |counter: &Arc<()>| {
        struct W(#[allow(dead_code)] Arc<()>);
        impl std::task::Wake for W {
            fn wake(self: Arc<Self>) {}
        }
        Waker::from(Arc::new(W(counter.clone())))
    };
    let g = gate.clone();
    let mut h = rt
        .spawn(move || weft::future::block_on(g.wait()))
        .into_future();
    for _ in 0..5 {
        let w = waker_of(&counter);
        assert!(Pin::new(&mut h)
            .poll(&mut Context::from_waker(&w))
            .is_pending());
    }
    // One waker registered (the last), plus the strong count itself.
    assert_eq!(Arc::strong_count(&counter), 2);
    gate.wait_for_waker();
    gate.open();
    assert_eq!(join_within(h.into_handle(), LIMIT).unwrap(), 7);
    assert_eq!(
        Arc::strong_count(&counter),
        1,
        "join withdrew the registered waker"
    );

    let gate = Gate::default();
    let g = gate.clone();
    let mut h = rt
        .spawn(move || weft::future::block_on(g.wait()))
        .into_future();
    let w = waker_of(&counter);
    assert!(Pin::new(&mut h)
        .poll(&mut Context::from_waker(&w))
        .is_pending());
    drop(w);
    assert_eq!(Arc::strong_count(&counter), 2);
    drop(h); // detaches, and drops the registered waker now
    assert_eq!(Arc::strong_count(&counter), 1);
    gate.wait_for_waker();
    gate.open();
}

#[test]
fn a_tokio_future_without_a_runtime_says_which_function_and_feature_to_use() {
    quiet_panics();
    // tokio's own panic inside a poll, as tokio 1.x words it (tokio itself is tested in
    // tests/async-bridge, which depends on it).
    let rt = runtime(1);
    let h = rt.spawn(|| {
        weft::future::block_on(async {
            panic!("there is no reactor running, must be called from the context of a Tokio 1.x runtime");
        })
    });
    let payload = join_within(h, LIMIT).unwrap_err();
    let message = payload.downcast_ref::<String>().unwrap();
    assert!(message.contains("weft::tokio::block_on"), "{message}");
    assert!(message.contains("feature `tokio`"), "{message}");
}
