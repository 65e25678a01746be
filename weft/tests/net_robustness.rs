//! Sockets used outside the context they first waited in: plain threads after a short read,
//! a second runtime after the first is gone, a second worker while the first one computes,
//! a waiter left alone on another worker than the one serving the socket.
//!
//! Every test runs its body on a thread of its own and fails (rather than hangs) when the body
//! does not finish in time (the bugs these guard against spun or parked forever).

use std::io::{IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use weft::net::{TcpListener, TcpStream};

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

/// A std client that connects to `addr`, then writes each `(delay, bytes)` after its delay,
/// sends the time of its last write on `written` (if any), and holds the connection open until
/// the other end closes it.
fn paced_client(
    addr: std::net::SocketAddr,
    writes: Vec<(Duration, &'static [u8])>,
    written: Option<mpsc::Sender<Instant>>,
) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_nodelay(true).unwrap();
        for (delay, bytes) in writes {
            thread::sleep(delay);
            s.write_all(bytes).unwrap();
        }
        if let Some(written) = written {
            written.send(Instant::now()).unwrap();
        }
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
    })
}

/// Keeps the running task (and so its worker) busy for `d` without parking.
fn compute_without_parking(d: Duration) {
    let start = Instant::now();
    while start.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// Runs `serve` as a task of a new two-worker runtime with a listener that `paced_client`
/// connects to and writes `writes` on; `serve` returns when it saw the last write's data.
/// Returns how long after that write it saw it. Fails if it all takes over 10 s.
fn seen_after_last_write(
    what: &str,
    writes: Vec<(Duration, &'static [u8])>,
    serve: impl FnOnce(TcpListener) -> Instant + Send + 'static,
) -> Duration {
    let (written_tx, written_rx) = mpsc::channel::<Instant>();
    let seen = bounded(what, Duration::from_secs(10), move || {
        let rt = weft::Runtime::builder().workers(2).build().unwrap();
        rt.block_on(move || {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let client = paced_client(listener.local_addr().unwrap(), writes, Some(written_tx));
            let seen = serve(listener);
            client.join().unwrap();
            seen
        })
    });
    seen.saturating_duration_since(written_rx.recv().unwrap())
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
        None,
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

#[test]
fn plain_thread_writes_and_datagrams_block_until_ready() {
    // The other waits of a plain thread: a write that fills the send buffer waits for the peer
    // to drain it, a receive for a datagram sent later, with and without a timeout.
    bounded(
        "plain-thread writes and datagrams",
        Duration::from_secs(10),
        || {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            const TOTAL: usize = 8 << 20;
            let drain = thread::spawn(move || {
                let (mut s, _) = listener.accept().unwrap();
                thread::sleep(Duration::from_millis(100));
                let mut got = 0;
                let mut buf = vec![0; 64 * 1024];
                while got < TOTAL {
                    got += s.read(&mut buf).unwrap();
                }
            });
            let s = TcpStream::connect(addr).unwrap();
            let chunk = vec![1u8; 256 * 1024];
            for _ in 0..TOTAL / chunk.len() {
                (&s).write_all(&chunk).unwrap();
            }
            drain.join().unwrap();

            let a = weft::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let b = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let to = a.local_addr().unwrap();
            a.set_read_timeout(Some(Duration::from_millis(30))).unwrap();
            let mut buf = [0; 16];
            let err = a.recv_from(&mut buf).unwrap_err();
            assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
            a.set_read_timeout(None).unwrap();
            let sender = thread::spawn(move || {
                thread::sleep(Duration::from_millis(50));
                b.send_to(b"dgram", to).unwrap();
            });
            let (n, _) = a.recv_from(&mut buf).unwrap();
            assert_eq!(&buf[..n], b"dgram");
            sender.join().unwrap();
        },
    );
}

/// Accepts one connection on `listener` in a new one-worker runtime, which is dropped after;
/// the client connects `delay` after the start, so that the accept parks first (and registers
/// the listener with this runtime's poller). Returns the client's end.
fn accept_in_a_new_runtime(listener: &Arc<TcpListener>, delay: Duration) -> std::net::TcpStream {
    let addr = listener.local_addr().unwrap();
    let client = thread::spawn(move || {
        thread::sleep(delay);
        std::net::TcpStream::connect(addr).unwrap()
    });
    let listener = listener.clone();
    bounded(
        "accept in a new runtime",
        Duration::from_secs(5),
        move || {
            let rt = weft::Runtime::builder().workers(1).build().unwrap();
            rt.block_on(move || listener.accept().map(|_| ())).unwrap();
        },
    );
    client.join().unwrap()
}

#[test]
fn socket_that_waited_in_a_dropped_runtime_wakes_in_the_next_one() {
    let listener = Arc::new(TcpListener::bind("127.0.0.1:0").unwrap());
    let first = accept_in_a_new_runtime(&listener, Duration::from_millis(50));
    // The listener is still registered with the first runtime's worker, which nobody polls
    // any more: the second runtime's accept must still see its connection.
    let second = accept_in_a_new_runtime(&listener, Duration::from_millis(100));
    drop((first, second));
}

#[test]
fn stream_handed_to_another_worker_sees_data_while_the_first_worker_computes() {
    // The first write comes late enough that the first read has parked (and registered the
    // stream); the second once the hand-over is done and the first worker is busy computing.
    let writes = vec![
        (Duration::from_millis(50), &b"first"[..]),
        (Duration::from_millis(300), &b"second"[..]),
    ];
    let delay = seen_after_last_write("hand-over read", writes, |listener| {
        let first = weft::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0; 64];
            let n = s.read(&mut buf).unwrap();
            assert_eq!(&buf[..n], b"first");
            // Spawned from this worker, queued here; this task then never parks, so only the
            // other worker can take it (a steal): it runs elsewhere for sure.
            let reader = weft::spawn(move || {
                let mut buf = [0; 64];
                let n = s.read(&mut buf).unwrap();
                let seen = Instant::now();
                assert_eq!(&buf[..n], b"second");
                (thread::current().id(), seen)
            });
            compute_without_parking(Duration::from_millis(1500));
            (thread::current().id(), reader)
        });
        let (busy_thread, reader) = first.join().unwrap();
        let (reader_thread, seen) = reader.join().unwrap();
        assert_ne!(
            busy_thread, reader_thread,
            "the reader must run on the other worker for this test to mean anything"
        );
        seen
    });
    assert!(
        delay < Duration::from_millis(100),
        "the reader saw data {delay:?} after it arrived (the first worker was busy)"
    );
}

#[test]
fn reader_and_writer_of_one_shared_stream_on_two_workers_both_finish() {
    // Both directions block now and then (the peer echoes in small steps), so the reader's and
    // the writer's waits move the registration's directions between the workers: neither may
    // lose a wakeup, and they must not take the registration from each other forever.
    const TOTAL: usize = 4 << 20;
    bounded("shared-stream echo", Duration::from_secs(30), || {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let peer = thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0; 4096];
            loop {
                match s.read(&mut buf).unwrap() {
                    0 => break,
                    n => s.write_all(&buf[..n]).unwrap(),
                }
            }
        });
        let rt = weft::Runtime::builder().workers(2).build().unwrap();
        rt.block_on(move || {
            let stream = Arc::new(TcpStream::connect(addr).unwrap());
            let reader_stream = stream.clone();
            let reader = weft::spawn(move || {
                let mut buf = vec![0u8; 16 * 1024];
                let mut got = 0;
                while got < TOTAL {
                    let n = (&*reader_stream).read(&mut buf).unwrap();
                    assert!(n > 0, "early end of stream after {got} bytes");
                    assert!(buf[..n].iter().all(|&b| b == 7));
                    got += n;
                }
                (got, thread::current().id())
            });
            // Busy for a moment without parking, so that the other worker takes the reader;
            // the writer then most likely starts here (a placement the test only hopes for:
            // it must pass whichever worker each task runs on).
            compute_without_parking(Duration::from_millis(20));
            let writer = weft::spawn(move || {
                let chunk = vec![7u8; 64 * 1024];
                let mut sent = 0;
                while sent < TOTAL {
                    (&*stream).write_all(&chunk).unwrap();
                    sent += chunk.len();
                }
                thread::current().id()
            });
            let writer_thread = writer.join().unwrap();
            let (got, reader_thread) = reader.join().unwrap();
            assert_eq!(got, TOTAL);
            if writer_thread == reader_thread {
                eprintln!("note: reader and writer ran on the same worker this time");
            }
        });
        peer.join().unwrap();
    });
}

#[test]
fn waiter_left_by_a_timed_out_one_is_served_by_its_own_worker() {
    // A waits with a timeout on worker X (the read registers there); B, on worker Y, waits on
    // the same handle without one, served by X since A is parked there. A times out and then
    // computes without parking: B must not be left to X's epoll, which nobody polls now.
    let writes = vec![(Duration::from_millis(300), &b"late"[..])];
    let delay = seen_after_last_write("read after a timed-out waiter", writes, |listener| {
        let stream = Arc::new(listener.accept().unwrap().0);
        let a = weft::spawn(move || {
            stream
                .set_read_timeout(Some(Duration::from_millis(100)))
                .unwrap();
            let b_stream = stream.clone();
            let (b_started, a_reading) = (
                Arc::new(AtomicBool::new(false)),
                Arc::new(AtomicBool::new(false)),
            );
            let (started, reading) = (b_started.clone(), a_reading.clone());
            // Queued here while this task does not park: the other worker takes it.
            let b = weft::spawn(move || {
                started.store(true, Ordering::Release);
                while !reading.load(Ordering::Acquire) {
                    weft::time::sleep(Duration::from_millis(1));
                }
                weft::time::sleep(Duration::from_millis(20));
                // A's read already took its timeout; this one waits for good.
                b_stream.set_read_timeout(None).unwrap();
                let mut buf = [0; 16];
                let n = (&*b_stream).read(&mut buf).unwrap();
                let seen = Instant::now();
                assert_eq!(&buf[..n], b"late");
                (thread::current().id(), seen)
            });
            // Not parking until B runs: then it runs on the other worker, however loaded
            // the machine is.
            let start = Instant::now();
            while !b_started.load(Ordering::Acquire) {
                assert!(start.elapsed() < Duration::from_secs(5), "B never started");
                std::hint::spin_loop();
            }
            compute_without_parking(Duration::from_millis(20));
            a_reading.store(true, Ordering::Release);
            let mut buf = [0; 16];
            let err = (&*stream).read(&mut buf).unwrap_err();
            assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
            compute_without_parking(Duration::from_millis(1000));
            (thread::current().id(), b)
        });
        let (a_thread, b) = a.join().unwrap();
        let (b_thread, seen) = b.join().unwrap();
        assert_ne!(a_thread, b_thread, "A and B must run on different workers");
        seen
    });
    assert!(
        delay < Duration::from_millis(100),
        "the reader saw data {delay:?} after it arrived (the other waiter's worker was busy)"
    );
}
