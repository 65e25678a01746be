//! An HTTP/1.1 server: one task per connection, keep-alive, requests parsed with `httparse`.
//!
//! ```text
//! cargo run --release --example http -- 127.0.0.1:8080
//! curl http://127.0.0.1:8080/            # hello
//! curl http://127.0.0.1:8080/deep?kb=64  # a handler that uses 64 KiB of its task's stack
//! ```
//!
//! `GET /` answers `hello, world`; `GET /deep?kb=N` (N ≤ 200) recurses through N frames of
//! 1 KiB each before it answers `deep N`, to show that a handler may use a deep stack (the
//! default task stack is 256 KiB). Anything else is a 404; a malformed request is a 400 and
//! closes the connection. Connections stay open between requests (HTTP/1.1 keep-alive)
//! unless the client sends `Connection: close`. `tests/interpose_ureq.rs` runs [`serve`] in
//! the same runtime as its `ureq` clients.
//!
//! On SIGINT or SIGTERM it stops accepting (the accept loop is bound to a [`Context`] that
//! the signal cancels), answers the requests in flight, each with `Connection: close` (as
//! Go's `Server.Shutdown` turns keep-alive off), gives the open connections [`GRACE`] to
//! finish (`Runtime::shutdown_timeout`), cancels those still open then (idle keep-alive
//! ones wait that long), and exits 0 with its report on stderr.

use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use weft::context::Context;
use weft::net::{TcpListener, TcpStream};
use weft::signal::{Signals, SIGINT, SIGTERM};

/// The largest request head accepted.
const MAX_HEAD: usize = 16 * 1024;
/// The deepest `/deep` accepted, in KiB.
pub const MAX_DEEP_KB: usize = 200;
/// How long the open connections get to finish after SIGINT or SIGTERM.
const GRACE: Duration = Duration::from_secs(5);

/// Set at SIGINT or SIGTERM: every response from then on closes its connection.
static DRAINING: AtomicBool = AtomicBool::new(false);

#[allow(dead_code)] // used as a module by tests/interpose_ureq.rs, where `main` is unused
fn main() {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8080".to_string());
    let runtime = weft::Runtime::new().unwrap_or_else(|e| fail(&format!("cannot start: {e}")));
    // Before the listener exists, so that a signal sent once it listens is caught.
    let signals = Signals::new(&[SIGINT, SIGTERM])
        .unwrap_or_else(|e| fail(&format!("cannot catch SIGINT and SIGTERM: {e}")));
    let listener =
        TcpListener::bind(&addr).unwrap_or_else(|e| fail(&format!("cannot listen on {addr}: {e}")));
    let local = listener.local_addr().expect("listener address");
    println!("http: listening on {local}");
    let _ = io::stdout().flush();
    let stop = Context::new();
    let accepting = stop.clone();
    // Cancelling `stop` unwinds the parked `accept` out of `serve`.
    let server = runtime.spawn(move || accepting.bind(|| serve(listener)));
    signals.recv();
    DRAINING.store(true, Ordering::Relaxed);
    stop.cancel();
    let _ = server.join();
    let report = runtime.shutdown_timeout(GRACE);
    eprintln!("http: stopped; {report}");
}

fn fail(message: &str) -> ! {
    eprintln!("http: {message}");
    std::process::exit(1);
}

/// Accepts connections forever, one task each.
pub fn serve(listener: TcpListener) {
    for stream in listener.incoming() {
        match stream {
            Ok(stream) => {
                weft::spawn(move || {
                    let _ = connection(stream);
                });
            }
            // Out of descriptors or memory: keep the connections we have.
            Err(_) => weft::time::sleep(std::time::Duration::from_millis(5)),
        }
    }
}

/// Serves requests on one connection until the client closes it or asks to.
fn connection(stream: TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let mut buf = vec![0; 4096];
    let mut filled = 0;
    let mut out = Vec::with_capacity(256);
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut request = httparse::Request::new(&mut headers);
        let parsed = request.parse(&buf[..filled]);
        match parsed {
            Ok(httparse::Status::Complete(head)) => {
                let close = wants_close(&request) || DRAINING.load(Ordering::Relaxed);
                let (status, body) = route(request.method, request.path);
                let body_len = content_length(&request);
                respond(&mut out, status, &body, close);
                (&stream).write_all(&out)?;
                if close {
                    return Ok(());
                }
                // A request body (unused here) is skipped.
                let consumed = (head + body_len).min(filled);
                let skip_more = head + body_len - consumed;
                buf.copy_within(consumed..filled, 0);
                filled -= consumed;
                skip(&stream, skip_more)?;
            }
            Ok(httparse::Status::Partial) => {
                if filled == buf.len() {
                    if buf.len() >= MAX_HEAD {
                        respond(&mut out, "431 Request Header Fields Too Large", b"", true);
                        return (&stream).write_all(&out);
                    }
                    buf.resize(buf.len() * 2, 0);
                }
                match (&stream).read(&mut buf[filled..])? {
                    0 => return Ok(()),
                    n => filled += n,
                }
            }
            Err(_) => {
                respond(&mut out, "400 Bad Request", b"bad request\n", true);
                return (&stream).write_all(&out);
            }
        }
    }
}

/// The status and body for a request.
fn route(method: Option<&str>, path: Option<&str>) -> (&'static str, Vec<u8>) {
    let path = path.unwrap_or("");
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    match (method, path) {
        (Some("GET"), "/") => ("200 OK", b"hello, world\n".to_vec()),
        (Some("GET"), "/deep") => {
            let kb = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("kb="))
                .and_then(|n| n.parse::<usize>().ok());
            match kb {
                Some(kb) if kb <= MAX_DEEP_KB => {
                    let depth = deep(kb);
                    ("200 OK", format!("deep {depth}\n").into_bytes())
                }
                _ => ("400 Bad Request", b"kb must be 0..=200\n".to_vec()),
            }
        }
        (Some("GET"), _) => ("404 Not Found", b"not found\n".to_vec()),
        _ => ("405 Method Not Allowed", b"only GET\n".to_vec()),
    }
}

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

fn wants_close(request: &httparse::Request<'_, '_>) -> bool {
    let header = request
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("connection"));
    match header {
        Some(h) => h.value.eq_ignore_ascii_case(b"close"),
        // HTTP/1.0 closes by default.
        None => request.version == Some(0),
    }
}

fn content_length(request: &httparse::Request<'_, '_>) -> usize {
    request
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok())
        .unwrap_or(0)
}

fn respond(out: &mut Vec<u8>, status: &str, body: &[u8], close: bool) {
    out.clear();
    let connection = if close { "close" } else { "keep-alive" };
    let _ = write!(
        out,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: {connection}\r\n\r\n",
        body.len()
    );
    out.extend_from_slice(body);
}

/// Reads and drops `n` bytes (an unused request body).
fn skip(mut stream: &TcpStream, mut n: usize) -> io::Result<()> {
    let mut sink = [0; 1024];
    while n > 0 {
        let want = n.min(sink.len());
        match stream.read(&mut sink[..want])? {
            0 => return Ok(()),
            got => n -= got,
        }
    }
    Ok(())
}
