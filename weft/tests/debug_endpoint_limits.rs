//! The debug endpoint bounds what clients can hold (debug/http.rs invariant 4): clients that
//! ask for a large dump and never read, or never finish their request, lose their connection
//! task within the limits; connections beyond the cap are answered `503` at once; one large
//! body exists at a time.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use weft::debug::EndpointLimits;

/// The tests of this file count connection tasks in a dump of the whole process: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The endpoint's connection tasks alive now, from a task dump.
fn connection_tasks() -> usize {
    weft::debug::dump()
        .tasks
        .iter()
        .filter(|t| t.name.as_deref() == Some("weft-debug-conn"))
        .count()
}

fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

/// A client with a small receive buffer, so that a large body fills it and the server's
/// writes wait.
fn stubborn_client(addr: SocketAddr, path: &str) -> TcpStream {
    let socket = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    let small: libc::c_int = 4096;
    // SAFETY: a valid socket and a pointer to a c_int of the size given.
    unsafe {
        use std::os::fd::AsRawFd;
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&small as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
    // A refused connection may be closed before the request arrives: the write then fails.
    let _ = write!(&socket, "GET {path} HTTP/1.1\r\nHost: test\r\n\r\n");
    socket
}

fn limits() -> EndpointLimits {
    let mut limits = EndpointLimits::default();
    limits.max_connections = 4;
    limits.request_timeout = Duration::from_millis(500);
    limits.write_timeout = Duration::from_millis(300);
    limits.response_deadline = Duration::from_secs(2);
    limits
}

#[test]
fn clients_that_never_read_a_large_dump_lose_their_connections() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    common::within(Duration::from_secs(60), || {
        let rt = weft::Runtime::builder().workers(2).build().unwrap();
        // Enough parked tasks that a full dump is megabytes, far beyond the socket buffers.
        let (tx, rx) = weft::chan::bounded::<()>(0);
        for _ in 0..20_000 {
            let rx = rx.clone();
            rt.spawn(move || rx.recv().ok());
        }
        let server = rt.block_on(|| weft::debug::serve_with("127.0.0.1:0", limits()).unwrap());
        let addr = server.local_addr();
        let clients: Vec<TcpStream> = (0..40)
            .map(|_| stubborn_client(addr, "/debug/tasks?debug=2"))
            .collect();
        std::thread::sleep(Duration::from_millis(200));
        let peak = connection_tasks();
        assert!(peak <= 4, "{peak} connection tasks, the cap is 4");
        // Every connection task is gone within the response deadline, although no client
        // read a byte: the first one's writes timed out, the others' waits for the large
        // body's permit hit their deadline.
        assert!(
            wait_until(Duration::from_secs(10), || connection_tasks() == 0),
            "{} connection tasks still alive",
            connection_tasks()
        );
        // The clients over the cap were answered 503 at once, without being read.
        let mut refused = 0;
        for mut client in clients {
            client
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let mut head = [0u8; 32];
            if let Ok(n) = client.read(&mut head) {
                if head[..n].starts_with(b"HTTP/1.1 503") {
                    refused += 1;
                }
            }
        }
        assert!(refused >= 36, "only {refused} of 40 clients were refused");
        // The endpoint still answers.
        let (status, body) = common::http_get(addr, "/debug/tasks?debug=1");
        assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
        drop(tx);
        server.stop();
        drop(rt);
    });
}

#[test]
fn a_request_that_never_ends_is_dropped_at_the_request_timeout() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    common::within(Duration::from_secs(60), || {
        let rt = weft::Runtime::builder().workers(1).build().unwrap();
        let server = rt.block_on(|| weft::debug::serve_with("127.0.0.1:0", limits()).unwrap());
        let addr = server.local_addr();
        // A header trickled a byte every 50 ms: each read succeeds, the request never ends.
        let mut slow = TcpStream::connect(addr).unwrap();
        let started = Instant::now();
        let mut closed = false;
        for byte in b"GET / HTTP/1.1\r\nX-Slow: "
            .iter()
            .chain([b'a'; 200].iter())
        {
            if slow.write_all(&[*byte]).is_err() {
                closed = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
            if connection_tasks() == 0 {
                closed = true;
                break;
            }
        }
        assert!(closed, "a trickled request held its connection for 11 s");
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "dropped only after {:?}",
            started.elapsed()
        );
        let (status, _) = common::http_get(addr, "/");
        assert_eq!(status, "HTTP/1.1 200 OK");
        server.stop();
        drop(rt);
    });
}

#[test]
fn zero_limits_are_refused() {
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    let mut limits = limits();
    limits.max_connections = 0;
    let err = rt
        .block_on(move || weft::debug::serve_with("127.0.0.1:0", limits))
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
}
