//! `RuntimeBuilder::tokio_on_workers`: each weft worker drives a tokio runtime of its own.
//! Tokio's timers and sockets work from tasks with no tokio thread started; a tokio task that
//! lives on one worker serves tasks of every worker, also while its worker is busy; weft's
//! precise timers stay precise on a worker that sleeps in tokio's reactor; blocking inside a
//! tokio task that a worker runs fails with a message instead of stopping the worker; and the
//! runtime drops with futures in flight.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn runtime() -> weft::Runtime {
    weft::Runtime::builder()
        .workers(2)
        .tokio_on_workers(true)
        .build()
        .unwrap()
}

/// The names of this process's threads.
fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|name| name.trim().to_string())
        .collect()
}

#[test]
fn tokio_timers_and_sockets_work_without_a_tokio_thread() {
    let rt = runtime();
    let served = rt.block_on(|| {
        let listener = weft::tokio::block_on(async {
            tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap()
        });
        let addr = listener.local_addr().unwrap();
        // The server: a tokio task on this worker's runtime, a connection task per client.
        let server = weft::tokio::handle().spawn(async move {
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    loop {
                        let n = socket.read(&mut buf).await.unwrap_or(0);
                        if n == 0 || socket.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let clients: Vec<_> = (0..100u32)
            .map(|i| {
                weft::spawn(move || {
                    weft::tokio::block_on(async move {
                        tokio::time::sleep(Duration::from_millis(u64::from(i % 5))).await;
                        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
                        let mut buf = [0u8; 4];
                        for round in 0..5u32 {
                            s.write_all(&(i * 10 + round).to_le_bytes()).await.unwrap();
                            s.read_exact(&mut buf).await.unwrap();
                            assert_eq!(u32::from_le_bytes(buf), i * 10 + round);
                        }
                    });
                })
            })
            .collect();
        let n = clients.into_iter().map(|c| c.join().unwrap()).count();
        server.abort();
        n
    });
    assert_eq!(served, 100);
    let names = thread_names();
    assert!(
        !names.iter().any(|n| n.starts_with("weft-tokio")),
        "a tokio thread was started: {names:?}"
    );
}

/// A tokio task spawned on the worker of the first task serves 200 tasks spread over both
/// workers, while a task on its worker computes for 200 ms, yielding now and then: the busy
/// worker drives its runtime between tasks.
#[test]
fn a_tokio_task_of_one_worker_serves_tasks_of_all_workers_while_it_is_busy() {
    let rt = runtime();
    rt.block_on(|| {
        let (tx, mut rx) =
            tokio::sync::mpsc::unbounded_channel::<(u32, tokio::sync::oneshot::Sender<u32>)>();
        weft::tokio::block_on(async {
            tokio::spawn(async move {
                while let Some((n, reply)) = rx.recv().await {
                    let _ = reply.send(n * 2);
                }
            });
        });
        let busy = weft::spawn(|| {
            let start = Instant::now();
            let mut spins = 0u64;
            while start.elapsed() < Duration::from_millis(200) {
                spins = spins.wrapping_add(std::hint::black_box(1));
                if spins.is_multiple_of(1000) {
                    weft::task::yield_now();
                }
            }
        });
        let askers: Vec<_> = (0..200u32)
            .map(|i| {
                let tx = tx.clone();
                weft::spawn(move || {
                    for k in 0..10 {
                        let (reply, answer) = tokio::sync::oneshot::channel();
                        tx.send((i + k, reply)).unwrap();
                        let doubled = weft::tokio::block_on(answer).unwrap();
                        assert_eq!(doubled, (i + k) * 2);
                    }
                })
            })
            .collect();
        for a in askers {
            a.join().unwrap();
        }
        busy.join().unwrap();
    });
}

/// A weft precise sleep on a worker that sleeps in tokio's reactor ends within microseconds
/// of its deadline, not on tokio's millisecond ticks (the lateness of 50 sleeps of 300 µs:
/// the median, lenient for a busy machine, well under the 700 µs a tick would add).
#[test]
fn precise_sleeps_stay_precise_on_a_worker_that_sleeps_in_tokio() {
    let rt = weft::Runtime::builder()
        .workers(1)
        .tokio_on_workers(true)
        .build()
        .unwrap();
    let mut late = rt.block_on(|| {
        // The worker now has its runtime, and sleeps in it.
        weft::tokio::block_on(async { tokio::time::sleep(Duration::from_millis(1)).await });
        (0..50)
            .map(|_| {
                let deadline = Instant::now() + Duration::from_micros(300);
                weft::time::sleep_until_precise(deadline);
                Instant::now() - deadline
            })
            .collect::<Vec<_>>()
    });
    late.sort();
    let median = late[late.len() / 2];
    eprintln!(
        "precise sleeps on a tokio-driving worker: late p50 {median:?}, max {:?}",
        late[49]
    );
    assert!(
        median < Duration::from_micros(500),
        "late by {median:?} at the median"
    );
}

#[test]
fn blocking_in_a_tokio_task_run_by_a_worker_fails_with_a_message() {
    let rt = runtime();
    let message = rt.block_on(|| {
        let (_tx, rx) = weft::chan::bounded::<u32>(1);
        weft::tokio::block_on(async move {
            let blocked = tokio::spawn(async move { rx.recv() });
            match blocked.await {
                Ok(_) => String::from("the blocking receive returned"),
                Err(e) => {
                    let payload = e.into_panic();
                    payload
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default()
                }
            }
        })
    });
    assert!(
        message.contains("blocking wait in async code") && message.contains("tokio_on_workers"),
        "{message}"
    );
}

#[test]
fn the_runtime_drops_with_futures_in_flight() {
    let rt = runtime();
    let started = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    {
        let started = started.clone();
        rt.block_on(move || {
            for _ in 0..50 {
                let started = started.clone();
                weft::spawn(move || {
                    weft::tokio::block_on(async {
                        started.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_secs(3600)).await;
                    });
                });
            }
            while started.load(std::sync::atomic::Ordering::SeqCst) < 50 {
                weft::time::sleep(Duration::from_millis(1));
            }
        });
    }
    let start = Instant::now();
    drop(rt);
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
}
