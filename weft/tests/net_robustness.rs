//! Sockets used outside the one context the netpoller expects: plain threads after a short
//! read.
//!
//! Every test runs its body on a thread of its own and fails (rather than hangs) when the body
//! does not finish in time (the bugs these guard against spun or parked forever).

use std::io::{IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use weft::net::TcpListener;

/// Runs `body` on its own thread; fails the test if it does not finish within `limit`.
fn bounded<T: Send + 'static>(
    what: &str,
    limit: Duration,
    body: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (done_tx, done_rx) = mpsc::channel();
    thread::spawn(move || {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body));
        let _ = done_tx.send(result);
    });
    match done_rx.recv_timeout(limit) {
        Ok(Ok(value)) => value,
        Ok(Err(payload)) => std::panic::resume_unwind(payload),
        Err(_) => panic!("{what}: did not finish within {limit:?}"),
    }
}

/// A std client that connects to `addr`, then writes each `(delay, bytes)` after its delay.
fn paced_client(
    addr: std::net::SocketAddr,
    writes: Vec<(Duration, &'static [u8])>,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_nodelay(true).unwrap();
        for (delay, bytes) in writes {
            thread::sleep(delay);
            s.write_all(bytes).unwrap();
        }
        // Hold the connection open until the reader is done with it.
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
    })
}

#[test]
fn plain_thread_read_after_a_short_read_waits_for_the_next_data() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let client = paced_client(
        addr,
        vec![
            (Duration::ZERO, b"hello"),
            (Duration::from_millis(100), b"world"),
            (Duration::from_millis(50), b"again"),
            (Duration::from_millis(50), b"peek!"),
            (Duration::from_millis(50), b"last"),
        ],
    );
    bounded("plain-thread reads", Duration::from_secs(5), move || {
        let (s, _) = listener.accept().unwrap();
        let mut buf = [0; 64];
        // Each read is short (64 > what arrived), so each leaves the "drained" hint behind:
        // the next read must still block until data comes, then return it.
        let n = (&s).read(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"hello");
        let n = (&s).read(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"world");
        let mut spare = [MaybeUninit::<u8>::uninit(); 64];
        let n = s.read_uninit(&mut spare).unwrap();
        // SAFETY: `read_uninit` initialized the first `n` bytes.
        let got: Vec<u8> = spare[..n]
            .iter()
            .map(|b| unsafe { b.assume_init() })
            .collect();
        assert_eq!(got, b"again");
        let n = s.peek(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"peek!");
        let n = (&s).read(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"peek!");
        let mut a = [0; 2];
        let mut b = [0; 62];
        let n = (&s)
            .read_vectored(&mut [IoSliceMut::new(&mut a), IoSliceMut::new(&mut b)])
            .unwrap();
        assert_eq!(n, 4);
        assert_eq!((&a, &b[..2]), (b"la", &b"st"[..]));
        // Nothing more comes: a timeout after a short read still times out, and in time.
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        let start = Instant::now();
        let err = (&s).read(&mut buf).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
        drop(s);
    });
    client.join().unwrap();
}
