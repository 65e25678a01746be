//! reqwest's async client from 1,000 weft tasks, through `weft::tokio::block_on`, against a
//! local hyper server: every response right, and a 5 ms ticker on the same weft runtime stays
//! on time while the requests are in flight (no worker blocked).

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::Response;
use weft_async_tests::{serve_http, server_runtime, Ticker};

const TASKS: usize = 1000;
const REQUESTS: usize = 3;

#[test]
fn reqwest_from_a_thousand_tasks_against_hyper() {
    let _alone = weft_async_tests::one_at_a_time();
    let servers = server_runtime(1);
    let listener = servers
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    servers.spawn(serve_http(listener, |req| async move {
        let body = format!("hello {}", req.uri().path());
        Response::new(Full::new(Bytes::from(body)))
    }));

    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let ticker = Ticker::start(&rt.handle());
    let start = Instant::now();
    let cpu = weft_async_tests::process_cpu();
    let checked = rt.block_on(move || {
        // One client for all tasks, as reqwest advises (a pool of keep-alive connections).
        let client = weft::tokio::block_on(async { reqwest::Client::new() });
        let tasks: Vec<_> = (0..TASKS)
            .map(|i| {
                let client = client.clone();
                weft::spawn(move || {
                    // Starts spread over a second, and a pause after each request: the load
                    // stays well below what the 2 CPUs can take, so that a late tick means a
                    // blocked worker, not a saturated machine (all 1,000 overlap throughout).
                    weft::time::sleep(Duration::from_millis(i as u64 % 1000));
                    for r in 0..REQUESTS {
                        let url = format!("http://{addr}/task/{i}/{r}");
                        let body = weft::tokio::block_on(async {
                            client.get(&url).send().await?.text().await
                        })
                        .expect("request failed");
                        assert_eq!(body, format!("hello /task/{i}/{r}"));
                        weft::time::sleep(Duration::from_millis(100));
                    }
                    REQUESTS
                })
            })
            .collect();
        tasks.into_iter().map(|t| t.join().unwrap()).sum::<usize>()
    });
    let took = start.elapsed();
    let cpu = weft_async_tests::process_cpu() - cpu;
    let lateness = ticker.stop();
    assert_eq!(checked, TASKS * REQUESTS);
    println!(
        "reqwest: {} requests from {TASKS} tasks in {took:?}, CPU {cpu:?} ({:?} a request, \
         client and server)",
        TASKS * REQUESTS,
        cpu / (TASKS * REQUESTS) as u32
    );
    lateness.check("reqwest");
}
