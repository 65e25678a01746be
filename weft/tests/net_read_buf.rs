//! `TcpStream::read_buf`: a safe read into a `Vec`'s spare capacity.

use std::io::Write;
use std::time::{Duration, Instant};

use weft::net::{TcpListener, TcpStream};

/// A connected pair on 127.0.0.1.
fn pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    (client, server)
}

#[test]
fn read_buf_appends_after_the_contents_and_grows_a_full_vec() {
    let result = weft::run(|| {
        let (client, server) = pair();
        (&client).write_all(b"hello").unwrap();
        let mut buf = Vec::with_capacity(64);
        buf.extend_from_slice(b"> ");
        let mut got = 0;
        while got < 5 {
            got += server.read_buf(&mut buf).unwrap();
        }
        assert_eq!(buf, b"> hello");
        assert_eq!(buf.capacity(), 64, "room was there: no reallocation");

        // A full Vec gets room first instead of reading 0 bytes (which would read as EOF).
        buf.shrink_to_fit();
        assert_eq!(buf.len(), buf.capacity());
        (&client).write_all(b"!").unwrap();
        assert_eq!(server.read_buf(&mut buf).unwrap(), 1);
        assert_eq!(buf, b"> hello!");

        drop(client);
        let len = buf.len();
        assert_eq!(server.read_buf(&mut buf).unwrap(), 0, "eof");
        buf.len() == len
    });
    assert!(result);
}

/// `readable` waits for data without taking it, returns at once when data or the peer's
/// close is already waiting, and honours the read timeout — in a task and on a plain thread.
fn readable_waits_then_leaves_the_data() {
    let (client, server) = pair();
    let writer = weft::spawn(move || {
        weft::time::sleep(Duration::from_millis(30));
        (&client).write_all(b"ping").unwrap();
        client
    });
    let start = Instant::now();
    server.readable().unwrap();
    assert!(
        start.elapsed() >= Duration::from_millis(25),
        "returned before the data"
    );
    // Nothing was taken, and asking again returns at once (the data is still there).
    server.readable().unwrap();
    let mut buf = Vec::with_capacity(16);
    assert_eq!(server.read_buf(&mut buf).unwrap(), 4);
    assert_eq!(buf, b"ping");

    // After a short read emptied the queue, the next call waits for the next event.
    server
        .set_read_timeout(Some(Duration::from_millis(40)))
        .unwrap();
    let start = Instant::now();
    let err = server.readable().unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::TimedOut, "{err}");
    assert!(start.elapsed() >= Duration::from_millis(35));
    server.set_read_timeout(None).unwrap();

    // The peer's close makes it readable (the read then returns 0).
    drop(writer.join().unwrap());
    server.readable().unwrap();
    buf.clear();
    assert_eq!(server.read_buf(&mut buf).unwrap(), 0, "eof");
}

#[test]
fn readable_waits_for_data_in_a_task() {
    weft::run(readable_waits_then_leaves_the_data);
}

#[test]
fn readable_waits_for_data_on_a_plain_thread() {
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    let _enter = rt.handle().enter();
    readable_waits_then_leaves_the_data();
}

#[test]
fn readable_after_close_fails_with_closed() {
    weft::run(|| {
        let (_client, server) = pair();
        let server = std::sync::Arc::new(server);
        let waiter = {
            let server = server.clone();
            weft::spawn(move || server.readable())
        };
        weft::time::sleep(Duration::from_millis(20));
        server.close();
        let err = waiter.join().unwrap().unwrap_err();
        assert!(weft::net::is_closed(&err), "{err:?}");
    });
}
