//! With the `interpose` feature, a cancellation that reaches a task inside an interposed libc
//! call — a bound `Context`'s deadline or cancel, `JoinHandle::cancel` — fails the call with
//! an error instead of unwinding through its C caller (which aborted the process), and the
//! cancelled task's later interposed calls fail at once (interpose/mod.rs invariant 3):
//! `ETIMEDOUT` for a deadline, `ECANCELED` otherwise; a sleep returns early. The `bind`
//! whose context cut a call short returns the context's error.
#![cfg(feature = "interpose")]

mod common;

use std::io::{ErrorKind, Read};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::within;
use weft::context::{Context, ContextError};

const DEADLINE: Duration = Duration::from_millis(100);
/// How long a cut-short call may take past its deadline (a loaded CI machine).
const SLACK: Duration = Duration::from_secs(2);
const LIMIT: Duration = Duration::from_secs(30);

/// The switch is process-wide: one test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` in a task of a fresh two-worker runtime, bounded.
fn in_task<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    within(LIMIT, move || {
        let rt = weft::Runtime::builder().workers(2).build().unwrap();
        rt.block_on(move || weft::spawn(f).join().unwrap())
    })
}

/// A listener whose accept queue is full, so that a further `connect` waits for the
/// handshake (the kernel drops its SYN), and the connections that filled it.
fn full_listener() -> (TcpListener, Vec<TcpStream>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    // SAFETY: a live socket; `listen` again only changes its backlog.
    assert_eq!(unsafe { libc::listen(listener.as_raw_fd(), 0) }, 0);
    let addr = listener.local_addr().unwrap();
    let fillers = (0..3)
        .filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok())
        .collect();
    (listener, fillers)
}

/// The servers a test's calls wait on, kept open while it runs.
struct Peers {
    /// Accepts (in the kernel) and never sends: a read from it waits.
    quiet: SocketAddr,
    /// Its accept queue is full: a connect to it waits.
    blocked: SocketAddr,
    _listeners: (TcpListener, TcpListener, Vec<TcpStream>),
}

impl Peers {
    fn new() -> Peers {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let (full, fillers) = full_listener();
        Peers {
            quiet: listener.local_addr().unwrap(),
            blocked: full.local_addr().unwrap(),
            _listeners: (listener, full, fillers),
        }
    }
}

/// A `Context` deadline around each kind of call: the call fails with the deadline's errno,
/// the closure returns, `bind` gives `DeadlineExceeded`, near the deadline.
#[test]
fn a_context_deadline_inside_an_interposed_call_fails_it_and_ends_the_bind() {
    let _serial = serial();
    let peers = Peers::new();
    let (quiet, blocked) = (peers.quiet, peers.blocked);
    let results = in_task(move || {
        let mut results = Vec::new();
        let timed = |what: &'static str, f: Box<dyn FnOnce() -> String>| {
            let start = Instant::now();
            let outcome = Context::with_timeout(DEADLINE).bind(f);
            (what, outcome, start.elapsed())
        };
        results.push(timed(
            "sleep",
            Box::new(|| {
                std::thread::sleep(Duration::from_secs(3));
                "returned".into()
            }),
        ));
        results.push(timed(
            "read",
            Box::new(move || {
                let mut stream = TcpStream::connect(quiet).unwrap();
                let mut buf = [0u8; 16];
                match stream.read(&mut buf) {
                    Ok(n) => format!("read {n} bytes"),
                    Err(e) => format!("{:?} {:?}", e.kind(), e.raw_os_error()),
                }
            }),
        ));
        results.push(timed(
            "connect",
            Box::new(move || match TcpStream::connect(blocked) {
                Ok(_) => "connected".into(),
                Err(e) => format!("{:?} {:?}", e.kind(), e.raw_os_error()),
            }),
        ));
        results.push(timed(
            "getaddrinfo",
            Box::new(|| loop {
                // Each lookup parks while the blocking pool resolves it; the deadline finds
                // one parked or about to start, and either way it fails.
                if let Err(e) = "localhost:80".to_socket_addrs() {
                    return format!("{:?} {:?}", e.kind(), e.raw_os_error());
                }
            }),
        ));
        results
    });
    for (what, outcome, took) in results {
        println!("{what}: {outcome:?} after {took:?}");
        assert_eq!(outcome, Err(ContextError::DeadlineExceeded), "{what}");
        assert!(took < DEADLINE + SLACK, "{what}: took {took:?}");
    }
}

/// The error each interposed call saw, the same code run with the deadline's context error
/// checked: a read cut short by a deadline is `TimedOut`, by a cancel `ECANCELED`.
#[test]
fn the_cut_short_calls_errno_says_deadline_or_cancel() {
    let _serial = serial();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (deadline, cancel) = in_task(move || {
        let seen = |ctx: &Context, cancel_after: Option<Duration>| {
            let mut stream = TcpStream::connect(addr).unwrap();
            if let Some(after) = cancel_after {
                let ctx = ctx.clone();
                weft::spawn(move || {
                    weft::time::sleep(after);
                    ctx.cancel();
                });
            }
            let mut seen = None;
            let outcome = ctx.bind(|| {
                let mut buf = [0u8; 16];
                seen = stream
                    .read(&mut buf)
                    .err()
                    .map(|e| (e.kind() == ErrorKind::TimedOut, e.raw_os_error()));
            });
            (outcome, seen)
        };
        (
            seen(&Context::with_timeout(DEADLINE), None),
            seen(&Context::new(), Some(DEADLINE)),
        )
    });
    assert_eq!(
        deadline,
        (
            Err(ContextError::DeadlineExceeded),
            Some((true, Some(libc::ETIMEDOUT)))
        )
    );
    assert_eq!(
        cancel,
        (
            Err(ContextError::Cancelled),
            Some((false, Some(libc::ECANCELED)))
        )
    );
}

/// `JoinHandle::cancel` of a task inside an interposed sleep: the sleep returns early, and
/// every later interposed call that may wait — sleep, connect, read, getaddrinfo — fails at
/// once (`ECANCELED`) or returns at once (a sleep) instead of waiting again, so a sync
/// crate's retry loop ends; the task's next weft park unwinds it.
#[test]
fn after_join_handle_cancel_every_interposed_call_fails_at_once() {
    let _serial = serial();
    let peers = Peers::new();
    let (quiet, blocked) = (peers.quiet, peers.blocked);
    let (seen, cancelled) = within(LIMIT, move || {
        let rt = weft::Runtime::builder().workers(2).build().unwrap();
        rt.block_on(move || {
            // What each call did and how long it took, sent as it happens.
            let (tx, rx) = weft::chan::unbounded::<(&'static str, Option<i32>, Duration)>();
            let task = weft::spawn(move || {
                let timed = |what, f: &mut dyn FnMut() -> Option<i32>| {
                    let start = Instant::now();
                    let errno = f();
                    let _ = tx.send((what, errno, start.elapsed()));
                };
                let mut quiet_stream = TcpStream::connect(quiet).unwrap();
                timed("sleep", &mut || {
                    std::thread::sleep(Duration::from_secs(5));
                    None
                });
                timed("second sleep", &mut || {
                    std::thread::sleep(Duration::from_secs(5));
                    None
                });
                timed("read", &mut || {
                    let mut buf = [0u8; 16];
                    quiet_stream
                        .read(&mut buf)
                        .err()
                        .and_then(|e| e.raw_os_error())
                });
                timed("connect", &mut || {
                    TcpStream::connect(blocked)
                        .err()
                        .and_then(|e| e.raw_os_error())
                });
                timed("getaddrinfo", &mut || {
                    "localhost:80"
                        .to_socket_addrs()
                        .err()
                        .and_then(|e| e.raw_os_error())
                });
                weft::time::sleep(Duration::from_secs(5));
                let _ = tx.send(("after the weft park", None, Duration::ZERO));
            });
            weft::time::sleep(Duration::from_millis(50));
            task.cancel();
            let cancelled = match task.join_timeout(Duration::from_secs(10)) {
                Ok(Err(payload)) => weft::task::is_cancelled(&*payload),
                _ => false,
            };
            (rx.try_iter().collect::<Vec<_>>(), cancelled)
        })
    });
    println!("{seen:#?}");
    let names: Vec<_> = seen.iter().map(|(what, ..)| *what).collect();
    assert_eq!(
        names,
        ["sleep", "second sleep", "read", "connect", "getaddrinfo"],
        "the task did not run on to its weft park, or went past it"
    );
    for (what, errno, took) in &seen {
        assert!(*took < SLACK, "{what} waited {took:?}");
        if what.ends_with("sleep") {
            assert_eq!(*errno, None, "{what}");
        } else {
            assert_eq!(*errno, Some(libc::ECANCELED), "{what}");
        }
    }
    assert!(cancelled, "the join did not report the cancel");
}
