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
//! (`Runtime::shutdown_timeout`), cancels those still open then, and exits 0 with one line on
//! stderr. A connection is not bound to the context: its request in flight is answered.

use std::io::{self, Write};
use std::time::Duration;

use weft::context::Context;
use weft::net::{TcpListener, TcpStream};

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
    // Before the runtime starts its threads, so that they inherit the mask (a thread the
    // caller started earlier does not: a process-directed signal may end the process there).
    let stop_signals = block_stop_signals();
    // A server holds one descriptor per connection: soft RLIMIT_NOFILE up to the hard one.
    let _ = weft::net::raise_fd_limit();
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
    wait_for(&stop_signals);
    stop.cancel();
    let _ = server.join();
    let clean = runtime.shutdown_timeout(GRACE);
    eprintln!("echo: stopped; every connection finished in time: {clean}");
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

/// Blocks SIGINT and SIGTERM in this thread, and in the threads it starts from now on, so
/// that they stay pending until [`wait_for`] takes one; returns the set.
///
/// Plain `sigwait(2)`, not the `signal_hook` crate of `examples/graceful_echo.rs`: this file
/// is also compiled as a module of `weft-bench` (bench/src/cli/peer.rs), which has only `libc`.
fn block_stop_signals() -> libc::sigset_t {
    // SAFETY: a zeroed `sigset_t` is a valid value, which `sigemptyset` then initialises.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a live, initialised set; the old mask is not asked for (null).
    let blocked = unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut())
    };
    if blocked != 0 {
        fail(&format!(
            "cannot block SIGINT and SIGTERM: {}",
            io::Error::from_raw_os_error(blocked)
        ));
    }
    set
}

/// Waits until one of `set`'s (blocked) signals arrives.
fn wait_for(set: &libc::sigset_t) {
    let mut signal = 0;
    // SAFETY: `set` is initialised (`block_stop_signals`) and `signal` is a live `c_int`.
    let waited = unsafe { libc::sigwait(set, &mut signal) };
    if waited != 0 {
        fail(&format!(
            "cannot wait for a signal: {}",
            io::Error::from_raw_os_error(waited)
        ));
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
