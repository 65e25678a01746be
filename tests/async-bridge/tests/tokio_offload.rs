//! The other direction: tokio programs hand blocking code to weft tasks and await it.
//! - a hyper server on tokio whose handlers run their blocking part on weft tasks (1,000
//!   requests in flight), with a 5 ms ticker on the weft runtime staying on time;
//! - a thousand blocking calls offloaded from tokio tasks at once, on a handful of OS threads
//!   where `spawn_blocking` would need a thread per call.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::Response;
use weft_async_tests::{serve_http, server_runtime, Ticker};

/// Blocking code, written for weft: it parks its task, never a thread.
fn blocking_lookup(key: u64) -> String {
    weft::time::sleep(Duration::from_millis(2 + key % 5));
    format!("value of {key}")
}

#[test]
fn hyper_handlers_await_weft_tasks() {
    let _alone = weft_async_tests::one_at_a_time();
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let weft = rt.handle();
    let servers = server_runtime(1);
    let listener = servers
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    servers.spawn(serve_http(listener, move |req| {
        let weft = weft.clone();
        async move {
            let key: u64 = req.uri().path()[1..].parse().unwrap_or(0);
            // The handler awaits a weft task: tokio's worker is free meanwhile.
            let value = weft.spawn(move || blocking_lookup(key)).await.unwrap();
            Response::new(Full::new(Bytes::from(value)))
        }
    }));

    let ticker = Ticker::start(&rt.handle());
    let clients = server_runtime(1);
    let start = Instant::now();
    let answered = clients.block_on(async move {
        let client = reqwest::Client::new();
        let mut joins = Vec::new();
        for key in 0..1000u64 {
            let client = client.clone();
            joins.push(tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(key % 500)).await;
                let body = client
                    .get(format!("http://{addr}/{key}"))
                    .send()
                    .await
                    .unwrap()
                    .text()
                    .await
                    .unwrap();
                assert_eq!(body, format!("value of {key}"));
            }));
        }
        let n = joins.len();
        for j in joins {
            j.await.unwrap();
        }
        n
    });
    let lateness = ticker.stop();
    assert_eq!(answered, 1000);
    println!(
        "hyper: 1000 requests, each awaiting a weft task, in {:?}",
        start.elapsed()
    );
    lateness.check("hyper handlers on weft tasks");
}

/// The process's OS threads now (`/proc/self/status`).
fn threads() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap()
}

#[test]
fn a_thousand_blocking_calls_from_tokio_on_a_few_threads() {
    let _alone = weft_async_tests::one_at_a_time();
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let weft = rt.handle();
    let tokio_rt = server_runtime(2);
    let before = threads();
    let start = Instant::now();
    let (sum, peak) = tokio_rt.block_on(async move {
        let mut joins = Vec::new();
        for i in 0..1000u64 {
            let weft = weft.clone();
            joins.push(tokio::spawn(async move {
                // Each call blocks for 100 ms (as a weft task: it parks).
                weft.spawn(move || {
                    weft::time::sleep(Duration::from_millis(100));
                    i
                })
                .await
                .unwrap()
            }));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let peak = threads(); // all thousand calls in flight now
        let mut sum = 0;
        for j in joins {
            sum += j.await.unwrap();
        }
        (sum, peak)
    });
    let took = start.elapsed();
    assert_eq!(sum, (0..1000).sum::<u64>());
    println!(
        "1000 blocking calls of 100 ms from tokio tasks: {took:?}, OS threads {before} before, \
         {peak} while in flight"
    );
    // spawn_blocking would run them on up to 512 threads (tokio's default), in two rounds.
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert!(
        peak <= before + 4,
        "{peak} threads in flight, {before} before"
    );
}
