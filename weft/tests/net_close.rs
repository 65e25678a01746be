//! Closing sockets from another task or thread (Go's `ln.Close()` / `conn.Close()`): the
//! parked `accept`, `read` or `write` wakes with an error `weft::net::is_closed` recognises,
//! later calls fail the same way, and an `incoming()` loop ends. No `unsafe` anywhere.

mod common;

use std::io::{Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{join_within, within};
use weft::net::{is_closed, TcpListener, TcpStream, UdpSocket};

const LIMIT: Duration = Duration::from_secs(10);

fn rt() -> weft::Runtime {
    weft::Runtime::builder().workers(2).build().unwrap()
}

#[test]
fn a_listener_closed_from_another_task_ends_its_accept_loop() {
    let rt = rt();
    let listener = Arc::new(TcpListener::bind("127.0.0.1:0").unwrap());
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let (l, a) = (listener.clone(), accepted.clone());
    let server = rt.spawn(move || {
        for conn in l.incoming() {
            drop(conn.unwrap());
            a.fetch_add(1, Ordering::SeqCst);
        }
        // The loop ended: `incoming` returned None; `accept` now says why.
        l.accept().unwrap_err()
    });
    for _ in 0..3 {
        drop(std::net::TcpStream::connect(addr).unwrap());
    }
    let start = Instant::now();
    while accepted.load(Ordering::SeqCst) < 3 {
        assert!(start.elapsed() < LIMIT, "connections were not accepted");
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(20)); // parked in accept again
    let closer = listener.clone();
    let at = Instant::now();
    rt.spawn(move || closer.close());
    let err = join_within(server, LIMIT).unwrap();
    println!("accept loop ended {:?} after close()", at.elapsed());
    assert!(is_closed(&err), "{err}");
    assert_eq!(err.to_string(), "use of closed network connection");
    assert!(is_closed(&listener.accept().unwrap_err()));
    listener.close(); // twice is fine
}

#[test]
fn closing_a_stream_wakes_its_parked_reader_and_writer() {
    let rt = rt();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let _peer = std::net::TcpStream::connect(addr).unwrap(); // never reads nor writes
    let (conn, _) = listener.accept().unwrap();
    let conn = Arc::new(conn);
    let (r, w) = (conn.clone(), conn.clone());
    let reader = rt.spawn(move || {
        let mut buf = [0u8; 64];
        (&*r).read(&mut buf)
    });
    let writer = rt.spawn(move || {
        let chunk = vec![0u8; 64 * 1024];
        loop {
            if let Err(e) = (&*w).write(&chunk) {
                return e;
            }
        }
    });
    std::thread::sleep(Duration::from_millis(50)); // both parked (the writer filled the buffers)
    assert!(
        !reader.is_finished() && !writer.is_finished(),
        "did not block"
    );
    let closer = conn.clone();
    rt.spawn(move || closer.close());
    let read_err = join_within(reader, LIMIT).unwrap().unwrap_err();
    let write_err = join_within(writer, LIMIT).unwrap();
    assert!(is_closed(&read_err), "read: {read_err}");
    assert!(is_closed(&write_err), "write: {write_err}");
    assert!(is_closed(&(&*conn).write(b"x").unwrap_err()));
}

#[test]
fn a_plain_thread_blocked_in_accept_or_read_is_woken_by_close() {
    let listener = Arc::new(TcpListener::bind("127.0.0.1:0").unwrap());
    let l = listener.clone();
    let acceptor = std::thread::spawn(move || l.accept().map(drop));
    // A connection whose peer (held here) never writes: the read blocks its thread.
    let peer_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let stream = Arc::new(TcpStream::connect(peer_listener.local_addr().unwrap()).unwrap());
    let (_peer, _) = peer_listener.accept().unwrap();
    let s = stream.clone();
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 8];
        (&*s).read(&mut buf)
    });
    std::thread::sleep(Duration::from_millis(30));
    assert!(
        !acceptor.is_finished() && !reader.is_finished(),
        "did not block"
    );
    listener.close();
    stream.close();
    let accept_err = within(LIMIT, move || acceptor.join().unwrap()).unwrap_err();
    let read_err = within(LIMIT, move || reader.join().unwrap()).unwrap_err();
    assert!(is_closed(&accept_err), "accept: {accept_err}");
    assert!(is_closed(&read_err), "read: {read_err}");
}

#[test]
fn closing_a_udp_socket_wakes_its_parked_receiver() {
    let rt = rt();
    let socket = Arc::new(UdpSocket::bind("127.0.0.1:0").unwrap());
    let s = socket.clone();
    let receiver = rt.spawn(move || {
        let mut buf = [0u8; 64];
        s.recv_from(&mut buf).map(drop)
    });
    std::thread::sleep(Duration::from_millis(20));
    socket.close();
    let err = join_within(receiver, LIMIT).unwrap().unwrap_err();
    assert!(is_closed(&err), "{err}");
}
