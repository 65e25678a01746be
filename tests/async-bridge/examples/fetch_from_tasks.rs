//! reqwest's async client from a thousand weft tasks against a local hyper server, with a
//! 5 ms ticker on the same runtime to show that no worker is blocked meanwhile.
//!
//! `cargo run --release -p weft-async-tests --example fetch_from_tasks [-- TASKS]`
//!
//! Each task is plain blocking code: it calls `weft::tokio::block_on` around the async
//! request and parks while the response is on its way; its worker runs the other tasks.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::Response;
use weft_async_tests::{serve_http, server_runtime, Ticker};

fn main() {
    let tasks: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000);
    let servers = server_runtime(1);
    let listener = servers
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("cannot listen");
    let addr = listener.local_addr().unwrap();
    servers.spawn(serve_http(listener, |req| async move {
        Response::new(Full::new(Bytes::from(format!(
            "hello {}",
            req.uri().path()
        ))))
    }));

    let rt = weft::Runtime::new().expect("weft runtime");
    let ticker = Ticker::start(&rt.handle());
    let start = Instant::now();
    let fetched = rt.block_on(move || {
        let client = weft::tokio::block_on(async { reqwest::Client::new() });
        let handles: Vec<_> = (0..tasks)
            .map(|i| {
                let client = client.clone();
                weft::spawn(move || {
                    weft::time::sleep(Duration::from_millis(i as u64 % 1000));
                    let url = format!("http://{addr}/{i}");
                    weft::tokio::block_on(async { client.get(&url).send().await?.text().await })
                })
            })
            .collect();
        let mut fetched = 0;
        for h in handles {
            let body = h.join().expect("task panicked").expect("request failed");
            fetched += usize::from(body.starts_with("hello /"));
        }
        fetched
    });
    let lateness = ticker.stop();
    println!(
        "{fetched} responses from {tasks} tasks in {:?}; a 5 ms ticker on the same runtime was \
         late by p50 {:?}, p99 {:?}, max {:?}",
        start.elapsed(),
        lateness.p50,
        lateness.p99,
        lateness.max
    );
}
