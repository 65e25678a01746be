//! The edges of `weft::tokio`: wakers fired from tokio's threads, tokio futures polled without
//! the feature's function, nested `block_on`s and parks inside a poll on one worker, `!Send`
//! futures, `spawn_future` (output, panic, abort on cancel), a weft runtime dropped with
//! futures in flight, the handed-over tokio runtime shut down first, and weft tasks spawned and
//! awaited from tokio tasks.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LIMIT: Duration = Duration::from_secs(20);

fn runtime(workers: usize) -> weft::Runtime {
    weft::Runtime::builder().workers(workers).build().unwrap()
}

/// Counts its drops.
struct CountDrop(Arc<AtomicUsize>);

impl Drop for CountDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn wait_until(what: &str, done: impl Fn() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < LIMIT, "{what}: never happened");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn quiet_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let name = std::thread::current().name().unwrap_or("").to_string();
            let on_purpose = ["weft-worker", "weft-tokio", "panics-on-purpose"];
            if !on_purpose.iter().any(|p| name.starts_with(p)) {
                default(info);
            }
        }));
    });
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

#[test]
fn tokio_timers_and_sockets_work_in_tasks() {
    let rt = runtime(2);
    let sum = rt.block_on(|| {
        let tasks: Vec<_> = (0..200u64)
            .map(|i| {
                weft::spawn(move || {
                    weft::tokio::block_on(async move {
                        tokio::time::sleep(Duration::from_millis(i % 20)).await;
                        i
                    })
                })
            })
            .collect();
        tasks.into_iter().map(|t| t.join().unwrap()).sum::<u64>()
    });
    assert_eq!(sum, (0..200).sum::<u64>());

    // A loopback TCP echo: a tokio listener in one task, clients in others.
    let echoed = rt.block_on(|| {
        let listener = weft::tokio::block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        let server = weft::spawn(move || {
            for _ in 0..10 {
                let (mut conn, _) = weft::tokio::block_on(listener.accept()).unwrap();
                weft::spawn(move || {
                    weft::tokio::block_on(async move {
                        let mut buf = [0u8; 64];
                        let n = conn.read(&mut buf).await.unwrap();
                        conn.write_all(&buf[..n]).await.unwrap();
                    })
                });
            }
        });
        let clients: Vec<_> = (0..10)
            .map(|i| {
                weft::spawn(move || {
                    weft::tokio::block_on(async move {
                        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
                        s.write_all(format!("ping {i}").as_bytes()).await.unwrap();
                        let mut buf = vec![0u8; 64];
                        let n = s.read(&mut buf).await.unwrap();
                        String::from_utf8(buf[..n].to_vec()).unwrap()
                    })
                })
            })
            .collect();
        let got: Vec<_> = clients.into_iter().map(|c| c.join().unwrap()).collect();
        server.join().unwrap();
        got
    });
    assert_eq!(
        echoed,
        (0..10).map(|i| format!("ping {i}")).collect::<Vec<_>>()
    );
}

/// A future whose waker is handed to a tokio task, which fires it (twice) from a tokio worker.
#[test]
fn a_waker_fired_from_a_tokio_worker_unparks_the_task() {
    let tokio_rt = weft_async_tests::server_runtime(2);
    let rt = runtime(2);
    let handle = tokio_rt.handle().clone();
    let got = rt.block_on(move || {
        let slot: Arc<Mutex<(bool, Option<Waker>)>> = Arc::default();
        let fired = slot.clone();
        handle.spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(5)).await;
                let mut s = fired.lock().unwrap();
                if let Some(w) = s.1.take() {
                    s.0 = true;
                    w.wake_by_ref();
                    w.wake(); // twice
                    return;
                }
            }
        });
        weft::future::block_on(std::future::poll_fn(|cx| {
            let mut s = slot.lock().unwrap();
            if s.0 {
                return Poll::Ready("woken by tokio");
            }
            s.1 = Some(cx.waker().clone());
            Poll::Pending
        }))
    });
    assert_eq!(got, "woken by tokio");
}

#[test]
fn a_tokio_future_polled_by_weft_future_block_on_names_the_function_and_feature() {
    quiet_panics();
    // On a plain thread outside any tokio context.
    let payload = std::thread::Builder::new()
        .name("panics-on-purpose".into())
        .spawn(|| {
            weft::future::block_on(async { tokio::time::sleep(Duration::from_millis(1)).await })
        })
        .unwrap()
        .join()
        .unwrap_err();
    let message = panic_message(&*payload);
    println!("{message}");
    assert!(message.contains("weft::tokio::block_on"), "{message}");
    assert!(message.contains("feature `tokio`"), "{message}");
    assert!(
        message.contains("no reactor running"),
        "tokio's own words: {message}"
    );
    // In a task, with a socket and with tokio::spawn.
    let rt = runtime(1);
    let socket = rt.spawn(|| {
        weft::future::block_on(async { tokio::net::TcpListener::bind("127.0.0.1:0").await })
    });
    let message = panic_message(&*socket.join().unwrap_err());
    assert!(message.contains("weft::tokio::block_on"), "{message}");
    let spawn = rt.spawn(|| weft::future::block_on(async { tokio::spawn(async {}).await }));
    let message = panic_message(&*spawn.join().unwrap_err());
    assert!(message.contains("feature `tokio`"), "{message}");
}

/// Nested `block_on`s, and parks inside a poll (a weft sleep inside an async block), on one
/// worker shared by many tasks: tokio's context guards must never be dropped out of order.
#[test]
fn nested_block_ons_and_parks_inside_polls_share_one_worker() {
    let rt = runtime(1);
    let total = rt.block_on(|| {
        let tasks: Vec<_> = (0..50u64)
            .map(|i| {
                weft::spawn(move || {
                    weft::tokio::block_on(async move {
                        tokio::time::sleep(Duration::from_millis(i % 3)).await;
                        // A nested block_on, inside the outer poll.
                        let inner = weft::tokio::block_on(async move {
                            tokio::time::sleep(Duration::from_millis(i % 5)).await;
                            i
                        });
                        // A weft park inside the poll, with the tokio context entered.
                        weft::time::sleep(Duration::from_millis(i % 4));
                        assert!(tokio::runtime::Handle::try_current().is_ok());
                        // A plain weft::future::block_on inside, too.
                        let plain = weft::future::block_on(async { 1 });
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        inner + plain
                    })
                })
            })
            .collect();
        tasks.into_iter().map(|t| t.join().unwrap()).sum::<u64>()
    });
    assert_eq!(total, (0..50).sum::<u64>() + 50);
}

#[test]
fn a_not_send_future_is_polled_on_its_task() {
    let rt = runtime(2);
    let n = rt.block_on(|| {
        let local = std::rc::Rc::new(std::cell::Cell::new(1));
        let thread = std::thread::current().id();
        weft::tokio::block_on(async {
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_millis(1)).await;
                local.set(local.get() * 2);
                assert_eq!(
                    std::thread::current().id(),
                    thread,
                    "the task changed thread"
                );
            }
            local.get()
        })
    });
    assert_eq!(n, 32);
}

#[test]
fn spawn_future_returns_resumes_panics_and_is_aborted_by_a_cancel() {
    quiet_panics();
    let rt = runtime(2);
    let n = rt.block_on(|| {
        weft::tokio::spawn_future(async {
            tokio::time::sleep(Duration::from_millis(2)).await;
            40 + 2
        })
    });
    assert_eq!(n, 42);

    let panicked = rt.spawn(|| weft::tokio::spawn_future(async { panic!("on tokio") }));
    assert_eq!(panic_message(&*panicked.join().unwrap_err()), "on tokio");

    let drops = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let (d, s) = (drops.clone(), started.clone());
    let h = rt.spawn(move || {
        weft::tokio::spawn_future(async move {
            let _count = CountDrop(d);
            s.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_secs(3600)).await;
        })
    });
    wait_until("the tokio task started", || {
        started.load(Ordering::SeqCst) == 1
    });
    h.cancel();
    assert!(weft::task::is_cancelled(&*h.join().unwrap_err()));
    wait_until("the tokio task was aborted", || {
        drops.load(Ordering::SeqCst) == 1
    });
}

#[test]
fn a_weft_runtime_dropped_with_tokio_futures_in_flight_drops_them_all() {
    quiet_panics();
    let rt = runtime(2);
    let drops = Arc::new(AtomicUsize::new(0));
    let polled = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for i in 0..100 {
        let (d, p) = (drops.clone(), polled.clone());
        handles.push(rt.spawn(move || {
            let count = CountDrop(d);
            if i % 2 == 0 {
                weft::tokio::block_on(async move {
                    let _count = count;
                    p.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                })
            } else {
                weft::tokio::spawn_future(async move {
                    let _count = count;
                    p.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                })
            }
        }));
    }
    wait_until("every future polled", || {
        polled.load(Ordering::SeqCst) == 100
    });
    let start = Instant::now();
    drop(rt);
    println!("weft runtime dropped in {:?}", start.elapsed());
    assert!(start.elapsed() < LIMIT);
    // Inline futures are dropped by their tasks' unwinds; spawned ones by the abort (on
    // tokio's threads) or the shutdown of weft's tokio runtime.
    wait_until("every future dropped", || {
        drops.load(Ordering::SeqCst) == 100
    });
    for h in handles {
        assert!(weft::task::is_cancelled(&*h.join().unwrap_err()));
    }
}

#[test]
fn the_handed_over_tokio_runtime_shut_down_first_ends_the_waits_without_a_hang() {
    quiet_panics();
    let tokio_rt = weft_async_tests::server_runtime(2);
    let rt = weft::Runtime::builder()
        .workers(2)
        .tokio_handle(tokio_rt.handle().clone())
        .build()
        .unwrap();
    let listener = tokio_rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let polled = Arc::new(AtomicUsize::new(0));
    let p = polled.clone();
    let sleeper = rt.spawn(move || {
        weft::tokio::block_on(async move {
            p.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_secs(3600)).await;
        })
    });
    let p = polled.clone();
    let reader = rt.spawn(move || {
        weft::tokio::block_on(async move {
            let mut s = tokio::net::TcpStream::connect(addr).await?;
            p.fetch_add(1, Ordering::SeqCst);
            let mut buf = [0u8; 8];
            s.read(&mut buf).await
        })
    });
    let p = polled.clone();
    let spawned = rt.spawn(move || {
        weft::tokio::spawn_future(async move {
            p.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_secs(3600)).await;
        })
    });
    wait_until("every future polled", || polled.load(Ordering::SeqCst) == 3);
    let (_conn, _) = tokio_rt.block_on(listener.accept()).unwrap();
    tokio_rt.shutdown_timeout(Duration::from_secs(5));

    // tokio's timer and socket report their shutdown (a panic for a sleep, an error for a
    // read); spawn_future says the runtime shut down. None hangs.
    let sleeper = sleeper.join_timeout(LIMIT).expect("the sleeper hung");
    println!(
        "sleeper: {:?}",
        sleeper.as_ref().map_err(|p| panic_message(&**p))
    );
    assert!(sleeper.is_err());
    let reader = reader.join_timeout(LIMIT).expect("the reader hung");
    match &reader {
        Ok(read) => println!("reader: {read:?}"),
        Err(p) => println!("reader panicked: {}", panic_message(&**p)),
    }
    assert!(!matches!(reader, Ok(Ok(n)) if n > 0));
    let spawned = spawned.join_timeout(LIMIT).expect("spawn_future hung");
    let message = panic_message(&*spawned.unwrap_err());
    assert!(message.contains("shut down"), "{message}");
    // New calls fail the same way, and the weft runtime still works and drops cleanly.
    let later = rt.spawn(|| weft::tokio::spawn_future(async { 1 }));
    assert!(later.join_timeout(LIMIT).expect("hung").is_err());
    assert_eq!(rt.block_on(|| 5), 5);
    drop(rt);
}

/// A tokio program: its tasks spawn weft tasks through a weft `Handle` (no blocking) and await
/// their `JoinHandle`s; `weft::spawn` works on tokio's threads once they entered the runtime.
#[test]
fn tokio_tasks_spawn_and_await_weft_tasks() {
    let weft_rt = runtime(2);
    let handle = weft_rt.handle();
    let entered = handle.clone();
    let tokio_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .on_thread_start(move || std::mem::forget(entered.enter()))
        .build()
        .unwrap();
    let sum = tokio_rt.block_on(async move {
        let mut joins = Vec::new();
        for i in 0..100u64 {
            let handle = handle.clone();
            joins.push(tokio::spawn(async move {
                let a = handle.spawn(move || {
                    weft::time::sleep(Duration::from_millis(i % 10)); // parks the weft task
                    i
                });
                let b = weft::spawn(move || i); // the entered runtime
                a.await.unwrap() + b.await.unwrap()
            }));
        }
        let mut sum = 0;
        for j in joins {
            sum += j.await.unwrap();
        }
        sum
    });
    assert_eq!(sum, 2 * (0..100).sum::<u64>());
}

/// A future that is woken once by another thread before it is ready, for the counts below.
struct Once {
    woken: Arc<AtomicUsize>,
}

impl Future for Once {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.woken.fetch_add(1, Ordering::SeqCst) > 0 {
            return Poll::Ready(());
        }
        let waker = cx.waker().clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            waker.wake();
        });
        Poll::Pending
    }
}

#[test]
fn a_waker_kept_by_tokio_after_the_task_ended_is_harmless() {
    let rt = runtime(2);
    let kept: Arc<Mutex<Option<Waker>>> = Arc::default();
    let k = kept.clone();
    let woken = Arc::new(AtomicUsize::new(0));
    let w = woken.clone();
    rt.block_on(move || {
        weft::tokio::block_on(async move {
            Once { woken: w }.await;
            std::future::poll_fn(|cx| {
                *k.lock().unwrap() = Some(cx.waker().clone());
                Poll::Ready(())
            })
            .await;
        })
    });
    assert_eq!(woken.load(Ordering::SeqCst), 2);
    let waker = kept.lock().unwrap().take().unwrap();
    let tokio_rt = weft_async_tests::server_runtime(1);
    tokio_rt.block_on(async move {
        tokio::spawn(async move {
            waker.wake_by_ref();
            waker.wake();
        })
        .await
        .unwrap();
    });
    drop(rt);
}

/// A channel's `RecvStream` as a `futures_core::Stream` (weft feature `futures`), consumed by a
/// tokio task while weft tasks send.
#[test]
fn a_receiver_is_a_futures_stream_for_tokio_code() {
    use futures_core::Stream;
    let rt = runtime(2);
    let (tx, rx) = weft::chan::bounded::<u64>(8);
    for k in 0..4u64 {
        let tx = tx.clone();
        rt.spawn(move || {
            for i in 0..250 {
                tx.send(k * 250 + i).unwrap();
            }
        });
    }
    drop(tx);
    let tokio_rt = weft_async_tests::server_runtime(1);
    let sum = tokio_rt.block_on(async move {
        let mut stream = rx.into_stream();
        let mut sum = 0;
        while let Some(v) =
            std::future::poll_fn(|cx| Stream::poll_next(Pin::new(&mut stream), cx)).await
        {
            sum += v;
        }
        sum
    });
    assert_eq!(sum, (0..1000).sum::<u64>());
}
