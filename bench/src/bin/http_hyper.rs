//! The hyper-on-tokio peer of weft's HTTP example for `bench/http-compare.sh`: hyper 1's
//! HTTP/1.1 server (keep-alive) on tokio's multi-thread runtime, one tokio task per
//! connection, with the same routes: `GET /` answers `hello, world`; `GET /deep?kb=N`
//! (N ≤ 200) recurses through N frames of 1 KiB each before it answers `deep N`.
//!
//! ```text
//! cargo run --release -p weft-bench --bin http_hyper -- 127.0.0.1:8080
//! ```

use std::convert::Infallible;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

/// The deepest `/deep` accepted, in KiB (as in weft's example).
const MAX_DEEP_KB: usize = 200;

/// Recurses through `kb` frames of 1 KiB each; returns `kb`.
#[inline(never)]
fn deep(kb: usize) -> usize {
    let frame = std::hint::black_box([kb as u8; 1024]);
    if kb == 0 {
        return 0;
    }
    let below = deep(kb - 1);
    std::hint::black_box(&frame);
    below + 1
}

fn reply(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert("content-type", "text/plain".parse().unwrap());
    response
}

async fn route(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    if request.method() != hyper::Method::GET {
        return Ok(reply(StatusCode::METHOD_NOT_ALLOWED, "only GET\n"));
    }
    Ok(match request.uri().path() {
        "/" => reply(StatusCode::OK, "hello, world\n"),
        "/deep" => {
            let kb = request
                .uri()
                .query()
                .unwrap_or("")
                .split('&')
                .find_map(|kv| kv.strip_prefix("kb="))
                .and_then(|n| n.parse::<usize>().ok());
            match kb {
                // On tokio a handler that needs a deep stack runs on the blocking pool or on
                // the worker's own stack; the worker's 2 MiB stack holds 200 KiB.
                Some(kb) if kb <= MAX_DEEP_KB => {
                    reply(StatusCode::OK, format!("deep {}\n", deep(kb)))
                }
                _ => reply(StatusCode::BAD_REQUEST, "kb must be 0..=200\n"),
            }
        }
        _ => reply(StatusCode::NOT_FOUND, "not found\n"),
    })
}

#[tokio::main]
async fn main() {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8080".to_string());
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .unwrap_or_else(|e| panic!("cannot listen on {addr}: {e}"));
    println!("http: listening on {}", listener.local_addr().unwrap());
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            // Out of descriptors, say: back off a little, as Go's server does.
            Err(_) => {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), hyper::service::service_fn(route))
                .await;
        });
    }
}
