//! A TCP echo server: one task per connection, plain blocking reads and writes.
//!
//! ```text
//! cargo run --release --example echo -- 127.0.0.1:7000
//! ```
//!
//! Each connection gets a task and TCP_NODELAY, and a 16 KiB buffer for each message; it
//! echoes until the peer closes or the connection fails. When `accept` fails for lack of
//! descriptors (EMFILE, ENFILE) or memory, the accept loop backs off (5 ms doubling to 1 s,
//! like Go's `http.Server`) and keeps serving the connections it has.
//!
//! On SIGINT or SIGTERM it stops accepting (the accept loop is bound to a [`Context`] that
//! the signal cancels), gives the open connections [`GRACE`] to finish
//! (`Runtime::shutdown_timeout`), cancels those still open then, and exits 0 with its report on
//! stderr. A connection is not bound to the context: its request in flight is answered.

use std::io::{self, Write};
use std::time::Duration;

use weft::context::Context;
use weft::net::{TcpListener, TcpStream};
use weft::signal::{Signals, SIGINT, SIGTERM};

const BUFFER: usize = 16 * 1024;
/// How long the open connections get to finish after SIGINT or SIGTERM.
const GRACE: Duration = Duration::from_secs(5);

fn main() {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:7000".to_string());
    run(&addr);
}

/// Serves `addr` until SIGINT or SIGTERM, then shuts down gracefully (module doc); also the
/// entry point of the EMFILE test (tests/net_faults.rs) and the SIGTERM test
/// (tests/graceful_sigterm.rs).
pub fn run(addr: &str) {
    // From here on SIGINT and SIGTERM no longer end the process: they queue for `signals`.
    let signals = Signals::new(&[SIGINT, SIGTERM])
        .unwrap_or_else(|e| fail(&format!("cannot handle SIGINT and SIGTERM: {e}")));
    // A server holds one descriptor per connection: soft RLIMIT_NOFILE up to the hard one.
    let _ = weft::net::raise_fd_limit();
    // And a table for 16K of them now, not by doubling under load (net::reserve_descriptors).
    let _ = weft::net::reserve_descriptors(16 << 10);
    // Small stacks: a connection task needs little, and page tables cost slot_size / 512.
    let runtime = weft::Runtime::builder()
        .stack_size(32 * 1024)
        .build()
        .unwrap_or_else(|e| fail(&format!("cannot start the runtime: {e}")));
    let stop = Context::new();
    let accepting = stop.clone();
    let addr = addr.to_string();
    // Cancelling `stop` unwinds the parked `accept` (or backoff sleep) out of `serve`.
    let server = runtime.spawn(move || accepting.bind(|| serve(&addr)));
    signals.recv();
    stop.cancel();
    let _ = server.join();
    let report = runtime.shutdown_timeout(GRACE);
    eprintln!("echo: stopped; {report}");
}

fn serve(addr: &str) {
    let listener =
        TcpListener::bind(addr).unwrap_or_else(|e| fail(&format!("cannot listen on {addr}: {e}")));
    let local = listener.local_addr().expect("listener address");
    println!("echo: listening on {local}");
    let _ = io::stdout().flush();
    let mut backoff = Duration::ZERO;
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                backoff = Duration::ZERO;
                weft::spawn(move || echo(stream));
            }
            Err(e) if is_temporary(&e) => {
                backoff = if backoff.is_zero() {
                    Duration::from_millis(5)
                } else {
                    (backoff * 2).min(Duration::from_secs(1))
                };
                eprintln!("echo: accept: {e}; retrying in {backoff:?}");
                weft::time::sleep(backoff);
            }
            Err(e) => fail(&format!("accept: {e}")),
        }
    }
}

fn echo(mut stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    // Waits for data holding no buffer, so an idle connection costs its (compacted) stack
    // and its socket; the buffer is taken per message and never zeroed: only the pages the
    // read reaches are touched (one, for small messages).
    while stream.readable().is_ok() {
        let mut buf: Vec<u8> = Vec::with_capacity(BUFFER);
        match stream.read_buf(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                if stream.write_all(&buf).is_err() {
                    return;
                }
            }
        }
    }
}

/// Accept errors that pass: out of descriptors or memory, or a connection that died in the
/// backlog.
fn is_temporary(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM | libc::ECONNABORTED)
    ) || e.kind() == io::ErrorKind::Interrupted
}

fn fail(message: &str) -> ! {
    eprintln!("echo: {message}");
    std::process::exit(1);
}
