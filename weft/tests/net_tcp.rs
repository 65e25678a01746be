//! TCP over the netpoller: echo, half-close, resets, timeouts, shared handles, plain threads.

use std::io::{Read, Write};
use std::net::Shutdown;
use std::time::{Duration, Instant};

use weft::net::{TcpListener, TcpStream, UdpSocket};

fn runtime(workers: usize) -> weft::Runtime {
    weft::Runtime::builder().workers(workers).build().unwrap()
}

#[test]
fn echo_round_trips_park_tasks_not_workers() {
    // One worker: the server, its connection tasks and the clients all share it, so any
    // blocking read would deadlock.
    let rt = runtime(1);
    rt.block_on(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        weft::spawn(move || {
            for stream in listener.incoming().take(16) {
                let mut stream = stream.unwrap();
                weft::spawn(move || {
                    let mut buf = [0; 1024];
                    loop {
                        match stream.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => stream.write_all(&buf[..n]).unwrap(),
                        }
                    }
                });
            }
        });
        let clients: Vec<_> = (0..16u8)
            .map(|i| {
                weft::spawn(move || {
                    let mut s = TcpStream::connect(addr).unwrap();
                    s.set_nodelay(true).unwrap();
                    for round in 0..50u8 {
                        let msg = [i, round, 7, 9];
                        s.write_all(&msg).unwrap();
                        let mut back = [0; 4];
                        s.read_exact(&mut back).unwrap();
                        assert_eq!(back, msg);
                    }
                })
            })
            .collect();
        for c in clients {
            c.join().unwrap();
        }
    });
}

#[test]
fn half_close_lets_the_peer_finish_writing() {
    let rt = runtime(2);
    rt.block_on(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = weft::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut all = Vec::new();
            s.read_to_end(&mut all).unwrap(); // ends at the client's half-close
            s.write_all(&all).unwrap();
            s.write_all(b"|done").unwrap();
        });
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"hello").unwrap();
        c.shutdown(Shutdown::Write).unwrap();
        let mut reply = String::new();
        c.read_to_string(&mut reply).unwrap();
        assert_eq!(reply, "hello|done");
        server.join().unwrap();
    });
}

#[test]
fn peer_reset_is_an_error_in_that_task_only() {
    let rt = runtime(2);
    rt.block_on(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let reader = weft::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0; 16];
            let mut result = s.read(&mut buf);
            while let Ok(n @ 1..) = result {
                let _ = n;
                result = s.read(&mut buf);
            }
            result
        });
        let bystander = weft::spawn(|| {
            weft::time::sleep(Duration::from_millis(30));
            42
        });
        let c = std::net::TcpStream::connect(addr).unwrap();
        // SO_LINGER 0: close sends RST.
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // SAFETY: valid socket, live option value of the given size.
        let r = unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&c),
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                &linger as *const _ as *const libc::c_void,
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            )
        };
        assert_eq!(r, 0);
        weft::time::sleep(Duration::from_millis(10));
        drop(c);
        let err = reader.join().unwrap().unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset, "{err}");
        assert_eq!(bystander.join().unwrap(), 42);
    });
}

#[test]
fn read_timeout_returns_timed_out() {
    let rt = runtime(1);
    rt.block_on(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let c = TcpStream::connect(addr).unwrap();
        let (_s, _) = listener.accept().unwrap();
        c.set_read_timeout(Some(Duration::from_millis(30))).unwrap();
        let start = Instant::now();
        let err = (&c).read(&mut [0; 8]).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        assert!(start.elapsed() >= Duration::from_millis(30));
        assert!(start.elapsed() < Duration::from_secs(2));
        assert!(c.set_read_timeout(Some(Duration::ZERO)).is_err());
    });
}

#[test]
fn connect_timeout_to_a_closed_port_fails_fast() {
    let rt = runtime(1);
    rt.block_on(|| {
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let err = TcpStream::connect_timeout(&port, Duration::from_secs(5)).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused, "{err}");
    });
}

#[test]
fn one_task_reads_while_another_writes_a_shared_stream() {
    let rt = runtime(2);
    rt.block_on(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let echo = weft::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0; 4096];
            loop {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => s.write_all(&buf[..n]).unwrap(),
                }
            }
        });
        let stream = std::sync::Arc::new(TcpStream::connect(addr).unwrap());
        let clone = stream.try_clone().unwrap();
        const TOTAL: usize = 1 << 20;
        let writer_stream = stream.clone();
        let writer = weft::spawn(move || {
            let chunk = [5u8; 8192];
            let mut sent = 0;
            while sent < TOTAL {
                (&*writer_stream).write_all(&chunk).unwrap();
                sent += chunk.len();
            }
            writer_stream.shutdown(Shutdown::Write).unwrap();
        });
        let reader = weft::spawn(move || {
            let mut got = 0;
            let mut buf = [0; 8192];
            loop {
                match (&clone).read(&mut buf).unwrap() {
                    0 => break,
                    n => {
                        assert!(buf[..n].iter().all(|&b| b == 5));
                        got += n;
                    }
                }
            }
            got
        });
        writer.join().unwrap();
        assert_eq!(reader.join().unwrap(), TOTAL);
        echo.join().unwrap();
    });
}

#[test]
fn sockets_block_like_std_on_plain_threads() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, peer) = listener.accept().unwrap();
        assert_eq!(peer, s.peer_addr().unwrap());
        let mut buf = [0; 5];
        s.read_exact(&mut buf).unwrap();
        s.write_all(&buf).unwrap();
    });
    std::thread::sleep(Duration::from_millis(20));
    let mut c = TcpStream::connect(("localhost", addr.port())).unwrap();
    c.write_all(b"plain").unwrap();
    let mut buf = [0; 5];
    c.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"plain");
    server.join().unwrap();
}

#[test]
fn host_names_resolve_in_a_task() {
    let rt = runtime(1);
    rt.block_on(|| {
        let listener = TcpListener::bind("localhost:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let addrs = weft::net::lookup_host(("localhost", port)).unwrap();
        assert!(addrs.iter().any(|a| a.ip().is_loopback()));
        let c = TcpStream::connect(format!("localhost:{port}")).unwrap();
        assert!(c.peer_addr().unwrap().ip().is_loopback());
    });
}

#[test]
fn udp_datagrams_round_trip() {
    let rt = runtime(1);
    rt.block_on(|| {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        let a_addr = a.local_addr().unwrap();
        let b_addr = b.local_addr().unwrap();
        let echo = weft::spawn(move || {
            let mut buf = [0; 64];
            for _ in 0..10 {
                let (n, from) = b.recv_from(&mut buf).unwrap();
                b.send_to(&buf[..n], from).unwrap();
            }
        });
        a.connect(b_addr).unwrap();
        for i in 0..10u8 {
            a.send(&[i; 3]).unwrap();
            let mut buf = [0; 64];
            let n = a.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &[i; 3]);
        }
        echo.join().unwrap();
        a.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        let err = a.recv(&mut [0; 8]).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        let _ = a_addr;
    });
}

#[test]
fn read_uninit_fills_spare_capacity() {
    let rt = runtime(1);
    rt.block_on(|| {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let writer = weft::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            s.write_all(b"uninit ok").unwrap();
        });
        let c = TcpStream::connect(addr).unwrap();
        let mut buf: Vec<u8> = Vec::with_capacity(16 * 1024);
        let mut got = Vec::new();
        loop {
            let n = c.read_uninit(buf.spare_capacity_mut()).unwrap();
            if n == 0 {
                break;
            }
            // SAFETY: `read_uninit` initialized the first `n` bytes.
            unsafe { buf.set_len(n) };
            got.extend_from_slice(&buf);
            buf.clear();
        }
        assert_eq!(got, b"uninit ok");
        writer.join().unwrap();
    });
}
