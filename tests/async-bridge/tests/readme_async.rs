//! The README's tour snippet "calling async code" (also the `weft::tokio` module's doc test),
//! and its variant with reqwest against a local hyper server: a weft task calls async Rust
//! through `weft::tokio::block_on`, and async code awaits a weft task's `JoinHandle`.

use bytes::Bytes;
use http_body_util::Full;
use hyper::Response;
use weft_async_tests::{serve_http, server_runtime};

/// Stands for any blocking code written for weft (here: it parks its task for 1 ms).
fn count_words_blocking(text: &str) -> usize {
    weft::time::sleep(std::time::Duration::from_millis(1));
    text.split_whitespace().count()
}

#[test]
fn the_readme_snippet_runs() {
    // --- README: calling async code ---
    // weft = { version = "0.1", features = ["tokio"] }
    weft::run(|| {
        // A task awaits async Rust (reqwest, sqlx, tonic, tokio::net): only the task parks.
        let n = weft::tokio::block_on(async { tokio::spawn(async { 21 }).await.unwrap() });
        // Async Rust awaits a task: a JoinHandle is a future.
        let m = weft::future::block_on(async { weft::spawn(move || n * 2).await.unwrap() });
        assert_eq!(m, 42);
    });
    // --- end ---
}

#[test]
fn the_reqwest_variant_runs() {
    let servers = server_runtime(1);
    let listener = servers
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    servers.spawn(serve_http(listener, |_| async {
        Response::new(Full::new(Bytes::from("calling async code from weft")))
    }));

    let words = weft::run(
        move || -> Result<usize, Box<dyn std::error::Error + Send + Sync>> {
            // A weft task calls async Rust (weft feature `tokio`): the task parks, not its worker.
            let body = weft::tokio::block_on(async { reqwest::get(&url).await?.text().await })?;

            // Async Rust awaits weft tasks: a `JoinHandle` is a future.
            let words = weft::future::block_on(async move {
                weft::spawn(move || count_words_blocking(&body)).await
            });
            Ok(words.map_err(|_| "the task panicked")?)
        },
    )
    .unwrap();
    assert_eq!(words, 5);
}
