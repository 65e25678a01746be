//! Stream reads through the workers' io_uring (`RuntimeBuilder::io_uring`, sched/uring.rs):
//! the bytes arrive whole and in order, through small and large messages, many connections
//! at once (more reads in flight than provided buffers), a read that times out or is
//! cancelled while its recv is in flight (the bytes it receives late wait for the next read,
//! on any thread), `close`, `readable`, `peek` and `read_vectored`. Each test skips, saying
//! why, where the kernel refuses io_uring.

mod common;

use std::io::{IoSliceMut, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::join_within;
use weft::net::{is_closed, TcpListener, TcpStream};

const LIMIT: Duration = Duration::from_secs(20);

/// A runtime that reads through io_uring, or `None` (said on stdout) where it cannot.
fn uring_runtime() -> Option<weft::Runtime> {
    if let Err(e) = weft::net::io_uring_available() {
        println!("skipped: io_uring unavailable here: {e}");
        return None;
    }
    Some(
        weft::Runtime::builder()
            .workers(2)
            .io_uring(true)
            .build()
            .unwrap(),
    )
}

/// Whether this process has an io_uring open: the reads above went through one.
fn has_io_uring() -> bool {
    std::fs::read_dir("/proc/self/fd").unwrap().any(|fd| {
        std::fs::read_link(fd.unwrap().path())
            .is_ok_and(|target| target.to_string_lossy().contains("io_uring"))
    })
}

/// A connected pair: the weft stream (accepted in a task) and the plain client.
fn pair(rt: &weft::Runtime) -> (TcpStream, std::net::TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = rt.spawn(move || listener.accept().unwrap().0);
    let client = std::net::TcpStream::connect(addr).unwrap();
    (join_within(accepted, LIMIT).unwrap(), client)
}

/// `n` connected pairs, each weft side handed to a task running `read(i, stream)`; the plain
/// clients and the tasks.
fn readers<T: Send + 'static>(
    rt: &weft::Runtime,
    n: usize,
    read: impl Fn(usize, TcpStream) -> T + Clone + Send + 'static,
) -> (Vec<std::net::TcpStream>, Vec<weft::JoinHandle<T>>) {
    (0..n)
        .map(|i| {
            let (stream, client) = pair(rt);
            let read = read.clone();
            (client, rt.spawn(move || read(i, stream)))
        })
        .unzip()
}

/// `n` bytes of a pattern that shows a lost, repeated or reordered byte.
fn pattern(seed: usize, n: usize) -> Vec<u8> {
    (0..n).map(|i| ((i * 7 + seed * 13) % 251) as u8).collect()
}

#[test]
fn an_echo_through_io_uring_returns_every_byte_in_order() {
    let Some(rt) = uring_runtime() else { return };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let conns = 200;
    let server = rt.spawn(move || {
        for _ in 0..conns {
            let (mut stream, _) = listener.accept().unwrap();
            weft::spawn(move || {
                let mut buf = vec![0; 16 * 1024];
                loop {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => stream.write_all(&buf[..n]).unwrap(),
                    }
                }
            });
        }
    });
    // Small messages (one provided buffer), one a buffer long, and large ones (the rest
    // read by the task's own recv, or queued in the inbox).
    let sizes = [1usize, 32, 2047, 2048, 2049, 5000, 64 * 1024];
    let clients: Vec<_> = (0..conns)
        .map(|c| {
            std::thread::spawn(move || {
                let mut s = std::net::TcpStream::connect(addr).unwrap();
                s.set_read_timeout(Some(LIMIT)).unwrap();
                for (i, &size) in sizes.iter().enumerate() {
                    if c % 4 != 0 && size > 5000 {
                        continue;
                    }
                    let sent = pattern(c * 31 + i, size);
                    let writer = {
                        let mut s = s.try_clone().unwrap();
                        let sent = sent.clone();
                        std::thread::spawn(move || s.write_all(&sent).unwrap())
                    };
                    let mut back = vec![0; size];
                    s.read_exact(&mut back).unwrap();
                    writer.join().unwrap();
                    assert!(
                        back == sent,
                        "connection {c}: {size} bytes came back changed"
                    );
                }
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    join_within(server, LIMIT).unwrap();
    assert!(has_io_uring(), "the reads did not go through an io_uring");
}

#[test]
fn a_lone_connection_is_not_left_waiting_for_its_completions() {
    // One connection, sequential round trips: each completion must end the worker's sleep
    // at once. A worker that slept on a posted completion waited for some other event (10–40
    // ms a round trip, or for good); 1,000 round trips take ≈0.1 s here.
    let Some(rt) = uring_runtime() else { return };
    let (mut stream, mut client) = pair(&rt);
    let rounds = 1000;
    let task = rt.spawn(move || {
        let mut buf = [0; 64];
        for _ in 0..rounds {
            stream.readable().unwrap();
            let n = stream.read(&mut buf).unwrap();
            stream.write_all(&buf[..n]).unwrap();
        }
    });
    client.set_read_timeout(Some(LIMIT)).unwrap();
    let start = std::time::Instant::now();
    let mut back = [0; 8];
    for i in 0..rounds {
        client.write_all(&(i as u64).to_le_bytes()).unwrap();
        client.read_exact(&mut back).unwrap();
        assert_eq!(u64::from_le_bytes(back), i as u64);
    }
    join_within(task, LIMIT).unwrap();
    let took = start.elapsed();
    println!("{rounds} round trips in {took:?}");
    assert!(
        took < Duration::from_secs(10),
        "round trips stalled: {took:?}"
    );
}

#[test]
fn many_connections_at_once_outnumber_the_provided_buffers() {
    let Some(rt) = uring_runtime() else { return };
    common::prepare_descriptors();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let conns = 1000;
    let total = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let t = total.clone();
    let server = rt.spawn(move || {
        let mut tasks = Vec::new();
        for _ in 0..conns {
            let (stream, _) = listener.accept().unwrap();
            let t = t.clone();
            tasks.push(weft::spawn(move || {
                let mut got = Vec::new();
                loop {
                    stream.readable().unwrap();
                    let mut buf = Vec::with_capacity(4096);
                    match stream.read_buf(&mut buf) {
                        Ok(0) => break,
                        Ok(_) => got.extend_from_slice(&buf),
                        Err(e) => panic!("read: {e}"),
                    }
                }
                t.fetch_add(got.len(), Ordering::SeqCst);
                got
            }));
        }
        tasks
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect::<Vec<_>>()
    });
    let mut clients: Vec<_> = (0..conns)
        .map(|_| std::net::TcpStream::connect(addr).unwrap())
        .collect();
    // Every connection's task waits in `readable` (a recv in flight); then all send at once.
    std::thread::sleep(Duration::from_millis(200));
    for round in 0..3 {
        for (c, s) in clients.iter_mut().enumerate() {
            s.write_all(&pattern(c + round, 100)).unwrap();
        }
    }
    drop(clients);
    let got = join_within(server, LIMIT).unwrap();
    let mut by_pattern: Vec<Vec<u8>> = (0..conns)
        .map(|c| (0..3).flat_map(|r| pattern(c + r, 100)).collect())
        .collect();
    // Accept order is not connect order: each stream's bytes must be one client's, whole.
    let mut unmatched = 0;
    for bytes in got {
        match by_pattern.iter().position(|p| *p == bytes) {
            Some(i) => {
                by_pattern.swap_remove(i);
            }
            None => unmatched += 1,
        }
    }
    assert_eq!(unmatched, 0, "streams whose bytes were lost or reordered");
    assert_eq!(total.load(Ordering::SeqCst), conns * 300);
}

#[test]
fn bytes_that_arrive_after_a_read_timed_out_wait_for_the_next_read() {
    let Some(rt) = uring_runtime() else { return };
    let (stream, mut client) = pair(&rt);
    stream
        .set_read_timeout(Some(Duration::from_millis(2)))
        .unwrap();
    let stream = Arc::new(stream);
    let reader = stream.clone();
    let rounds: usize = 300;
    // The client sends each message around the reader's 2 ms timeout, so some arrive while
    // a recv is in flight, some just after it was given up (an orphan), some before.
    let sender = std::thread::spawn(move || {
        for i in 0..rounds {
            std::thread::sleep(Duration::from_micros(1000 + (i as u64 % 7) * 300));
            client.write_all(&pattern(i, 10)).unwrap();
        }
        client
    });
    let task = rt.spawn(move || {
        let mut got = Vec::new();
        let mut timeouts = 0;
        while got.len() < rounds * 10 {
            let mut buf = [0; 64];
            match (&*reader).read(&mut buf) {
                Ok(0) => panic!("end of stream"),
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => timeouts += 1,
                Err(e) => panic!("read: {e}"),
            }
        }
        (got, timeouts)
    });
    let (got, timeouts) = join_within(task, LIMIT).unwrap();
    let _client = sender.join().unwrap();
    println!("{timeouts} reads timed out");
    let sent: Vec<u8> = (0..rounds).flat_map(|i| pattern(i, 10)).collect();
    assert!(
        got == sent,
        "bytes lost or reordered across timed-out reads"
    );
    assert!(timeouts > 0, "no read timed out: the test did not test");
}

/// The cancel scenario: a reader parked in `read` is cancelled as bytes arrive (either
/// first); what it did not return is read by the next reader, here on a plain thread.
fn cancelled_readers_lose_nothing(rt: &weft::Runtime, rounds: usize) {
    for round in 0..rounds {
        let (stream, mut client) = pair(rt);
        let stream = Arc::new(stream);
        let reader = stream.clone();
        let parked = Arc::new(AtomicBool::new(false));
        let p = parked.clone();
        // A read that completed before the cancellation keeps its bytes (a cancellation takes
        // effect at the next wait): the task hands them back.
        let handle = rt.spawn(move || {
            p.store(true, Ordering::SeqCst);
            let mut buf = [0; 64];
            let n = (&*reader).read(&mut buf).unwrap();
            buf[..n].to_vec()
        });
        while !parked.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_micros(100));
        }
        std::thread::sleep(Duration::from_millis(2));
        // Bytes and the cancellation race: some rounds the recv completes first.
        let message = pattern(round, 20);
        if round % 2 == 0 {
            client.write_all(&message).unwrap();
            handle.cancel();
        } else {
            handle.cancel();
            client.write_all(&message).unwrap();
        }
        let mut got = join_within(handle, LIMIT).unwrap_or_default();
        stream.set_read_timeout(Some(LIMIT)).unwrap();
        // A peek shows what the next read returns: the rest of the message, even while the
        // cancelled recv still has it in flight.
        if got.len() < message.len() {
            let mut peeked = [0; 64];
            let n = stream.peek(&mut peeked).unwrap();
            assert!(n > 0, "round {round}: peek saw the end of the stream");
            let n = n.min(message.len() - got.len());
            assert_eq!(
                peeked[..n],
                message[got.len()..got.len() + n],
                "round {round}: peek"
            );
        }
        // The next read, on this plain thread, gets the rest of the message.
        let mut rest = vec![0; message.len() - got.len()];
        (&*stream).read_exact(&mut rest).unwrap();
        got.extend_from_slice(&rest);
        assert_eq!(got, message, "round {round}");
    }
}

#[test]
fn a_cancelled_reader_loses_nothing_for_the_next_reader_on_a_plain_thread() {
    let Some(rt) = uring_runtime() else { return };
    cancelled_readers_lose_nothing(&rt, 20);
}

/// The child of the test below: with `WEFT_URING_ORPHAN_CANCELLED=1` a cancelled task leaves
/// its recv in flight (orphaned) instead of polling for its end, so what the recv receives
/// must reach the next reader through the stream's inbox.
#[test]
fn orphans_child() {
    if std::env::var_os(ORPHANS).is_none() {
        return;
    }
    let Some(rt) = uring_runtime() else {
        println!("RESULT skipped");
        return;
    };
    cancelled_readers_lose_nothing(&rt, 40);
    println!("RESULT ok");
}

const ORPHANS: &str = "WEFT_URING_ORPHAN_CANCELLED";

#[test]
fn a_cancelled_readers_orphaned_recv_loses_nothing() {
    let (result, _) = common::child_result("orphans_child", ORPHANS);
    assert!(result == "ok" || result == "skipped", "{result}");
}

#[test]
fn a_runtime_dropped_with_reads_in_flight_ends_them() {
    let Some(rt) = uring_runtime() else { return };
    let (clients, tasks) = readers(&rt, 50, |_, stream| {
        let mut buf = [0; 64];
        let _ = (&stream).read(&mut buf);
    });
    std::thread::sleep(Duration::from_millis(50));
    let start = std::time::Instant::now();
    drop(rt);
    println!("dropped in {:?}", start.elapsed());
    for task in tasks {
        assert!(task.join().is_err(), "a reader was not cancelled");
    }
    // The clients see their connections closed: nothing of the readers is left.
    for mut client in clients {
        client.set_read_timeout(Some(LIMIT)).unwrap();
        let mut byte = [0; 1];
        assert_eq!(client.read(&mut byte).unwrap_or(0), 0);
    }
}

#[test]
fn closing_a_stream_ends_a_read_in_flight() {
    let Some(rt) = uring_runtime() else { return };
    let (stream, _client) = pair(&rt);
    let stream = Arc::new(stream);
    let reader = stream.clone();
    let task = rt.spawn(move || {
        let mut buf = [0; 64];
        (&*reader).read(&mut buf)
    });
    std::thread::sleep(Duration::from_millis(50));
    stream.close();
    let err = join_within(task, LIMIT).unwrap().unwrap_err();
    assert!(is_closed(&err), "{err}");
}

#[test]
fn readable_peek_and_read_vectored_see_the_bytes_a_ring_read_received() {
    let Some(rt) = uring_runtime() else { return };
    let (stream, mut client) = pair(&rt);
    let task = rt.spawn(move || {
        // `readable` waits through the ring: the bytes wait in the stream's inbox.
        stream.readable().unwrap();
        let mut peeked = [0; 3];
        assert_eq!(stream.peek(&mut peeked).unwrap(), 3);
        let (mut a, mut b) = ([0; 2], [0; 16]);
        let mut bufs = [IoSliceMut::new(&mut a), IoSliceMut::new(&mut b)];
        let n = (&stream).read_vectored(&mut bufs).unwrap();
        let mut rest = Vec::new();
        let mut buf = [0; 64];
        let m = (&stream).read(&mut buf).unwrap();
        rest.extend_from_slice(&buf[..m]);
        (peeked, n, a, rest)
    });
    std::thread::sleep(Duration::from_millis(30));
    client.write_all(b"hello").unwrap();
    let (peeked, n, a, rest) = join_within(task, LIMIT).unwrap();
    assert_eq!(&peeked, b"hel");
    assert!((1..=2).contains(&n), "read_vectored took {n}");
    let mut all = a[..n].to_vec();
    all.extend_from_slice(&rest);
    assert_eq!(all, b"hello");
}

#[test]
fn readers_whose_stacks_were_compacted_meanwhile_get_their_bytes() {
    // Parked past the compaction age (200 ms), each reader's stack, its buffer with it, is
    // compacted; the ring writes only into its own buffers, and the copy into the reader's
    // buffer happens once the task runs again, its stack restored.
    let Some(rt) = uring_runtime() else { return };
    let (mut clients, tasks) = readers(&rt, 100, |i, stream| {
        let mut buf = [0u8; 256];
        let n = (&stream).read(&mut buf).unwrap();
        assert_eq!(&buf[..n], &pattern(i, n)[..], "reader {i}");
        n
    });
    std::thread::sleep(Duration::from_millis(500));
    let compacted = weft::metrics::snapshot().tasks_compacted;
    println!("{compacted} tasks compacted");
    for (i, client) in clients.iter_mut().enumerate() {
        client.write_all(&pattern(i, 100)).unwrap();
    }
    for task in tasks {
        assert!(join_within(task, LIMIT).unwrap() > 0);
    }
}

#[test]
fn the_end_of_stream_reaches_a_reader_in_flight() {
    let Some(rt) = uring_runtime() else { return };
    let (stream, mut client) = pair(&rt);
    let task = rt.spawn(move || {
        let mut got = Vec::new();
        (&stream).read_to_end(&mut got).unwrap();
        got
    });
    std::thread::sleep(Duration::from_millis(20));
    client.write_all(b"last words").unwrap();
    drop(client);
    assert_eq!(join_within(task, LIMIT).unwrap(), b"last words");
}

#[test]
fn a_runtime_without_io_uring_reads_through_epoll_the_same() {
    // The default (the environment aside): no ring is made; the same echo works.
    let rt = weft::Runtime::builder()
        .workers(2)
        .io_uring(false)
        .build()
        .unwrap();
    let (mut stream, mut client) = pair(&rt);
    let task = rt.spawn(move || {
        let mut buf = [0; 64];
        let n = stream.read(&mut buf).unwrap();
        stream.write_all(&buf[..n]).unwrap();
    });
    client.write_all(b"ping").unwrap();
    let mut back = [0; 4];
    client.read_exact(&mut back).unwrap();
    join_within(task, LIMIT).unwrap();
    assert_eq!(&back, b"ping");
}
