//! With the `interpose` feature, std's sockets park the calling task on its worker's reactor
//! instead of blocking the worker, and keep std's semantics exactly.
#![cfg(feature = "interpose")]

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{assert_never_blocked, runtime_with_reports, within};

/// The switch is process-wide: the tests of this file run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn nonblocking_flag(fd: &impl AsRawFd) -> bool {
    // SAFETY: F_GETFL on an open descriptor.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    assert!(flags >= 0);
    flags & libc::O_NONBLOCK != 0
}

/// A listener on a loopback port, and a connection to it: the client and the server side.
fn connected() -> (TcpListener, TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    (listener, client, server)
}

/// `setsockopt(SOL_SOCKET, option, value)`, which must succeed.
fn set_option<T>(fd: &impl AsRawFd, option: libc::c_int, value: &T) {
    // SAFETY: `value` is live and of the size given.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "setsockopt: {}", std::io::Error::last_os_error());
}

#[test]
fn std_tcp_echo_on_one_worker_with_many_connections_never_blocks_it() {
    let _serial = serial();
    const CONNECTIONS: usize = 200;
    const ROUNDS: usize = 20;
    let (runtime, reports) = runtime_with_reports(1);
    let echoed = within(Duration::from_secs(60), move || {
        runtime.block_on(|| {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            weft::spawn(move || {
                for stream in listener.incoming() {
                    let mut stream = stream.unwrap();
                    weft::spawn(move || {
                        let mut buf = [0; 4096];
                        loop {
                            match stream.read(&mut buf) {
                                Ok(0) | Err(_) => return,
                                Ok(n) => stream.write_all(&buf[..n]).unwrap(),
                            }
                        }
                    });
                }
            });
            let clients: Vec<_> = (0..CONNECTIONS)
                .map(|c| {
                    weft::spawn(move || {
                        let mut stream = TcpStream::connect(addr).unwrap();
                        let mut rounds = 0;
                        for r in 0..ROUNDS {
                            let msg = format!("connection {c} round {r}\n");
                            stream.write_all(msg.as_bytes()).unwrap();
                            let mut back = vec![0; msg.len()];
                            stream.read_exact(&mut back).unwrap();
                            assert_eq!(back, msg.as_bytes());
                            rounds += 1;
                        }
                        rounds
                    })
                })
                .collect();
            clients
                .into_iter()
                .map(|c| c.join().unwrap())
                .sum::<usize>()
        })
    });
    assert_eq!(echoed, CONNECTIONS * ROUNDS);
    assert_never_blocked(&reports);
}

#[test]
fn a_descriptor_the_program_set_nonblocking_still_returns_would_block() {
    let _serial = serial();
    let (runtime, _reports) = runtime_with_reports(1);
    within(Duration::from_secs(10), move || {
        runtime.block_on(|| {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            listener.set_nonblocking(true).unwrap();
            assert_eq!(listener.accept().unwrap_err().kind(), ErrorKind::WouldBlock);
            assert!(nonblocking_flag(&listener));
            let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            client.set_nonblocking(true).unwrap();
            let mut buf = [0; 16];
            assert_eq!(
                client.read(&mut buf).unwrap_err().kind(),
                ErrorKind::WouldBlock
            );
            assert_eq!(
                client.peek(&mut buf).unwrap_err().kind(),
                ErrorKind::WouldBlock
            );
            // Back to blocking: a read now waits for the data.
            client.set_nonblocking(false).unwrap();
            let (mut server, _) = loop {
                match listener.accept() {
                    Ok(pair) => break pair,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => weft::yield_now(),
                    Err(e) => panic!("{e}"),
                }
            };
            weft::spawn(move || {
                weft::time::sleep(Duration::from_millis(50));
                server.write_all(b"late").unwrap();
            });
            assert_eq!(client.read(&mut buf).unwrap(), 4);
        })
    });
}

#[test]
fn so_rcvtimeo_times_out_with_would_block_and_the_worker_free() {
    let _serial = serial();
    let (runtime, reports) = runtime_with_reports(1);
    within(Duration::from_secs(10), move || {
        runtime.block_on(|| {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let _server = listener.accept().unwrap();
            client
                .set_read_timeout(Some(Duration::from_millis(300)))
                .unwrap();
            let start = Instant::now();
            let other = weft::spawn(move || start.elapsed());
            let err = client.read(&mut [0; 16]).unwrap_err();
            let waited = start.elapsed();
            // std on Unix: a socket timeout is `WouldBlock` (EAGAIN).
            assert_eq!(err.kind(), ErrorKind::WouldBlock, "{err}");
            assert!(waited >= Duration::from_millis(300), "{waited:?}");
            assert!(waited < Duration::from_secs(3), "{waited:?}");
            assert!(other.join().unwrap() < Duration::from_millis(150));
            // The listener's SO_RCVTIMEO bounds `accept` too.
            let tv = libc::timeval {
                tv_sec: 0,
                tv_usec: 200_000,
            };
            set_option(&listener, libc::SO_RCVTIMEO, &tv);
            let start = Instant::now();
            let err = listener.accept().unwrap_err();
            assert_eq!(err.kind(), ErrorKind::WouldBlock, "{err}");
            assert!(start.elapsed() >= Duration::from_millis(200));
        })
    });
    assert_never_blocked(&reports);
}

/// What a peer sees of EOF, a half-close and a reset, as a list of outcomes.
fn eof_half_close_and_reset() -> Vec<String> {
    let mut seen = Vec::new();
    let (listener, mut client, mut server) = connected();
    // Half-close: the client shuts its write half; the server reads EOF and may still write.
    client.write_all(b"last words").unwrap();
    client.shutdown(Shutdown::Write).unwrap();
    let mut got = Vec::new();
    server.read_to_end(&mut got).unwrap();
    seen.push(format!(
        "server read {:?} then eof",
        String::from_utf8_lossy(&got)
    ));
    seen.push(format!(
        "server read again: {:?}",
        server.read(&mut [0; 8]).map_err(|e| e.kind())
    ));
    server.write_all(b"reply after half-close").unwrap();
    let mut reply = [0; 22];
    client.read_exact(&mut reply).unwrap();
    seen.push(format!("client read {:?}", String::from_utf8_lossy(&reply)));
    // Full close: the client reads EOF.
    drop(server);
    seen.push(format!(
        "client read at close: {:?}",
        client.read(&mut [0; 8]).map_err(|e| e.kind())
    ));
    // Reset: linger 0 then close sends an RST; the peer's read fails.
    let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    set_option(&server, libc::SO_LINGER, &linger);
    drop(server);
    seen.push(format!(
        "read after reset: {:?}",
        client.read(&mut [0; 8]).map_err(|e| e.kind())
    ));
    seen.push(format!(
        "read after that: {:?}",
        client.read(&mut [0; 8]).map_err(|e| e.kind())
    ));
    // Refused: nothing listens on a port we just closed.
    let port = listener.local_addr().unwrap();
    drop(listener);
    seen.push(format!(
        "connect refused: {:?}",
        TcpStream::connect(port).map_err(|e| e.kind()).map(|_| ())
    ));
    seen
}

#[test]
fn eof_half_close_reset_and_refusal_match_a_plain_thread() {
    let _serial = serial();
    let on_thread = eof_half_close_and_reset();
    let (runtime, reports) = runtime_with_reports(1);
    let in_task = within(Duration::from_secs(10), move || {
        runtime.block_on(eof_half_close_and_reset)
    });
    assert_eq!(in_task, on_thread);
    assert!(on_thread[1].contains("Ok(0)"), "{on_thread:?}");
    assert!(on_thread[4].contains("ConnectionReset"), "{on_thread:?}");
    assert_never_blocked(&reports);
}

#[test]
fn a_blocking_write_of_a_large_buffer_is_complete_like_the_kernels() {
    let _serial = serial();
    let (runtime, reports) = runtime_with_reports(1);
    within(Duration::from_secs(20), move || {
        runtime.block_on(|| {
            let (_listener, mut client, mut server) = connected();
            const LEN: usize = 16 << 20;
            let reader = weft::spawn(move || {
                let mut total = 0;
                let mut buf = vec![0; 64 << 10];
                loop {
                    match server.read(&mut buf).unwrap() {
                        0 => return total,
                        n => total += n,
                    }
                }
            });
            let big = vec![7u8; LEN];
            // One `write`: a blocking socket takes it whole (it parks while the buffer is
            // full), as the kernel's blocking send does.
            assert_eq!(client.write(&big).unwrap(), LEN);
            drop(client);
            assert_eq!(reader.join().unwrap(), LEN);
        })
    });
    assert_never_blocked(&reports);
}

#[test]
fn connect_timeout_and_name_lookup_work_in_tasks() {
    let _serial = serial();
    let (runtime, reports) = runtime_with_reports(1);
    within(Duration::from_secs(20), move || {
        runtime.block_on(|| {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let port = listener.local_addr().unwrap().port();
            // `getaddrinfo` for a name: on the blocking pool.
            let addrs: Vec<_> = ("localhost", port).to_socket_addrs().unwrap().collect();
            assert!(addrs.iter().any(|a| a.ip().is_loopback()), "{addrs:?}");
            let v4 = addrs.iter().find(|a| a.is_ipv4()).unwrap();
            // std's connect_timeout: a non-blocking connect, then `poll` on one descriptor.
            let stream = TcpStream::connect_timeout(v4, Duration::from_secs(5)).unwrap();
            assert!(!nonblocking_flag(&stream));
            let _ = listener.accept().unwrap();
            // An unknown name fails as it does on a thread.
            let err = "no-such-host.invalid:80".to_socket_addrs().unwrap_err();
            let on_thread = std::thread::spawn(|| {
                "no-such-host.invalid:80"
                    .to_socket_addrs()
                    .unwrap_err()
                    .to_string()
            })
            .join()
            .unwrap();
            assert_eq!(err.to_string(), on_thread);
        })
    });
    assert_never_blocked(&reports);
}

#[test]
fn files_and_pipes_pass_through() {
    let _serial = serial();
    let (runtime, _reports) = runtime_with_reports(1);
    within(Duration::from_secs(10), move || {
        runtime.block_on(|| {
            let path = std::env::temp_dir().join(format!("weft-interpose-{}", std::process::id()));
            std::fs::write(&path, b"file contents").unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), b"file contents");
            std::fs::remove_file(&path).unwrap();
            let mut fds = [0; 2];
            // SAFETY: a live array of two ints.
            assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
            // SAFETY: the pipe's ends, owned here from now on.
            let (mut rx, mut tx) = unsafe {
                use std::os::fd::FromRawFd;
                (
                    std::fs::File::from_raw_fd(fds[0]),
                    std::fs::File::from_raw_fd(fds[1]),
                )
            };
            tx.write_all(b"through a pipe").unwrap();
            drop(tx);
            let mut got = String::new();
            rx.read_to_string(&mut got).unwrap();
            assert_eq!(got, "through a pipe");
            // A pipe stays in the mode the program set: blocking.
            assert!(!nonblocking_flag(&rx));
        })
    });
}

#[test]
fn a_listener_a_task_accepted_on_still_blocks_on_a_plain_thread() {
    let _serial = serial();
    let (runtime, _reports) = runtime_with_reports(1);
    let listener = Arc::new(TcpListener::bind("127.0.0.1:0").unwrap());
    let addr = listener.local_addr().unwrap();
    let in_task = listener.clone();
    within(Duration::from_secs(10), move || {
        runtime.block_on(move || {
            let connector = weft::spawn(move || TcpStream::connect(addr).unwrap());
            let _ = in_task.accept().unwrap();
            drop(connector.join().unwrap());
        })
    });
    // The task's accept made it non-blocking underneath; the program still sees blocking.
    assert!(!nonblocking_flag(&*listener));
    let connector = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        TcpStream::connect(addr).unwrap()
    });
    let start = Instant::now();
    let (accepted, _) = listener.accept().unwrap();
    assert!(
        start.elapsed() >= Duration::from_millis(150),
        "accept did not block"
    );
    drop((accepted, connector.join().unwrap()));
    // And the program's own switch to non-blocking shows, and works.
    listener.set_nonblocking(true).unwrap();
    assert!(nonblocking_flag(&*listener));
    assert_eq!(listener.accept().unwrap_err().kind(), ErrorKind::WouldBlock);
    listener.set_nonblocking(false).unwrap();
    assert!(!nonblocking_flag(&*listener));
    // A duplicate shares the open file, and so the hidden flag.
    let clone = listener.try_clone().unwrap();
    assert!(!nonblocking_flag(&clone));
}

#[test]
fn nothing_is_interposed_on_a_plain_thread() {
    let _serial = serial();
    // A blocking read on a plain thread blocks that thread (no runtime is involved), and the
    // descriptor's mode is never touched.
    let (listener, mut client, mut server) = connected();
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        server.write_all(b"x").unwrap();
    });
    let start = Instant::now();
    assert_eq!(client.read(&mut [0; 4]).unwrap(), 1);
    assert!(start.elapsed() >= Duration::from_millis(80));
    writer.join().unwrap();
    assert!(!nonblocking_flag(&client));
    assert!(!nonblocking_flag(&listener));
    let start = Instant::now();
    std::thread::sleep(Duration::from_millis(100));
    assert!(start.elapsed() >= Duration::from_millis(100));
}

#[test]
fn switched_off_a_std_read_blocks_the_worker() {
    let _serial = serial();
    let (runtime, _reports) = runtime_with_reports(1);
    weft::interpose::set_enabled(false);
    let ran_at = within(Duration::from_secs(10), move || {
        runtime.block_on(|| {
            let (_listener, mut client, mut server) = connected();
            let start = Instant::now();
            let other = weft::spawn(move || start.elapsed());
            let writer = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(300));
                server.write_all(b"x").unwrap();
            });
            client.read_exact(&mut [0; 1]).unwrap();
            writer.join().unwrap();
            other.join().unwrap()
        })
    });
    weft::interpose::set_enabled(true);
    assert!(
        ran_at >= Duration::from_millis(250),
        "the other task ran at {ran_at:?}"
    );
}

#[test]
fn a_std_socket_a_task_waited_on_can_become_a_weft_net_socket() {
    let _serial = serial();
    let (runtime, reports) = runtime_with_reports(1);
    within(Duration::from_secs(10), move || {
        runtime.block_on(|| {
            let (_listener, mut client, mut server) = connected();
            let writer = weft::spawn(move || {
                for word in [&b"one"[..], b"two"] {
                    weft::time::sleep(Duration::from_millis(50));
                    server.write_all(word).unwrap();
                }
                server
            });
            // A std read that parks (its descriptor gets a registration)…
            let mut buf = [0; 3];
            client.read_exact(&mut buf).unwrap();
            assert_eq!(&buf, b"one");
            // …then weft::net takes it over and registers it itself.
            let client = weft::net::TcpStream::from_std(client).unwrap();
            (&client).read_exact(&mut buf).unwrap();
            assert_eq!(&buf, b"two");
            drop(writer.join().unwrap());
        })
    });
    assert_never_blocked(&reports);
}

#[test]
fn vectored_udp_waitall_and_multi_descriptor_poll_park_and_keep_their_results() {
    let _serial = serial();
    let (runtime, reports) = runtime_with_reports(1);
    within(Duration::from_secs(20), move || {
        runtime.block_on(|| {
            let (listener, mut client, mut server) = connected();
            // writev/readv (std's vectored I/O): the read parks until the data arrives.
            let writer = weft::spawn(move || {
                weft::time::sleep(Duration::from_millis(50));
                let parts = [
                    std::io::IoSlice::new(b"vec"),
                    std::io::IoSlice::new(b"tored"),
                ];
                assert_eq!(server.write_vectored(&parts).unwrap(), 8);
                // MSG_WAITALL below: two pieces 50 ms apart make one receive.
                server.write_all(b"wait").unwrap();
                weft::time::sleep(Duration::from_millis(50));
                server.write_all(b"all!").unwrap();
                server
            });
            let (mut a, mut b) = ([0; 3], [0; 5]);
            let mut bufs = [
                std::io::IoSliceMut::new(&mut a),
                std::io::IoSliceMut::new(&mut b),
            ];
            assert_eq!(client.read_vectored(&mut bufs).unwrap(), 8);
            assert_eq!((&a, &b), (b"vec", b"tored"));
            let mut all = [0; 8];
            // SAFETY: a live buffer of the length given.
            let n = unsafe {
                libc::recv(
                    client.as_raw_fd(),
                    all.as_mut_ptr().cast(),
                    all.len(),
                    libc::MSG_WAITALL,
                )
            };
            assert_eq!(n, 8);
            assert_eq!(&all, b"waitall!");
            let _server = writer.join().unwrap();

            // UDP: recv_from parks until a datagram comes, and returns it whole.
            let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            let to = rx.local_addr().unwrap();
            let from = tx.local_addr().unwrap();
            let sender = weft::spawn(move || {
                weft::time::sleep(Duration::from_millis(50));
                tx.send_to(b"datagram", to).unwrap();
                tx
            });
            let mut buf = [0; 64];
            let (n, peer) = rx.recv_from(&mut buf).unwrap();
            assert_eq!((&buf[..n], peer), (&b"datagram"[..], from));
            drop(sender.join().unwrap());

            // poll on two descriptors: the task naps between tries, the worker stays free.
            let (mut left, _) = (
                TcpStream::connect(listener.local_addr().unwrap()).unwrap(),
                0,
            );
            let (mut left_peer, _) = listener.accept().unwrap();
            let right = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (_right_peer, _) = listener.accept().unwrap();
            let start = Instant::now();
            let other = weft::spawn(move || {
                let ran_at = start.elapsed();
                weft::time::sleep(Duration::from_millis(100));
                left_peer.write_all(b"!").unwrap();
                (ran_at, left_peer)
            });
            let mut fds = [
                libc::pollfd {
                    fd: left.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: right.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: two live pollfds.
            let ready = unsafe { libc::poll(fds.as_mut_ptr(), 2, 5000) };
            assert_eq!(ready, 1);
            assert_ne!(fds[0].revents & libc::POLLIN, 0);
            assert_eq!(fds[1].revents, 0);
            let (ran_at, _left_peer) = other.join().unwrap();
            assert!(
                ran_at < Duration::from_millis(50),
                "poll blocked the worker"
            );
            assert_eq!(left.read(&mut [0; 1]).unwrap(), 1);
            // …and one that times out returns 0 after its timeout.
            let start = Instant::now();
            // SAFETY: two live pollfds.
            assert_eq!(unsafe { libc::poll(fds.as_mut_ptr(), 2, 100) }, 0);
            assert!(start.elapsed() >= Duration::from_millis(100));
        })
    });
    assert_never_blocked(&reports);
}

#[test]
fn a_socket_number_closed_behind_libcs_back_is_fresh_for_the_next_socket() {
    let _serial = serial();
    let (runtime, reports) = runtime_with_reports(1);
    within(Duration::from_secs(20), move || {
        runtime.block_on(|| {
            // Read that parks once, so that the descriptor gets a registration…
            let (listener, mut client, mut server) = connected();
            let writer = weft::spawn(move || {
                weft::time::sleep(Duration::from_millis(30));
                server.write_all(b"a").unwrap();
                server
            });
            client.read_exact(&mut [0; 1]).unwrap();
            let _server = writer.join().unwrap();
            // …closed by a raw system call, which the interposed `close` never sees.
            let fd = std::os::fd::IntoRawFd::into_raw_fd(client);
            // SAFETY: `fd` is ours (taken out of the stream) and closed once.
            unsafe { libc::syscall(libc::SYS_close, fd) };
            // The next socket most likely gets the same number; a read on it must park and
            // wake as usual.
            let mut again = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
            let (mut server, _) = listener.accept().unwrap();
            if again.as_raw_fd() != fd {
                eprintln!("(the new socket got another number: nothing to check)");
                return;
            }
            let writer = weft::spawn(move || {
                weft::time::sleep(Duration::from_millis(30));
                server.write_all(b"b").unwrap();
                server
            });
            again
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let mut buf = [0; 1];
            again
                .read_exact(&mut buf)
                .expect("the read was never woken");
            assert_eq!(&buf, b"b");
            drop(writer.join().unwrap());
        })
    });
    assert_never_blocked(&reports);
}

#[test]
fn shutdown_cancels_tasks_parked_in_interposed_calls_without_aborting() {
    let _serial = serial();
    let (runtime, _reports) = runtime_with_reports(1);
    let (_listener, client, _server) = connected();
    let reader = runtime.spawn(move || {
        let mut client = client;
        // Nothing ever arrives: parked until the shutdown, which fails the call.
        let r = client.read(&mut [0; 8]);
        r.map_err(|e| e.raw_os_error())
    });
    let sleeper = runtime.spawn(|| {
        let start = Instant::now();
        std::thread::sleep(Duration::from_secs(60));
        start.elapsed()
    });
    std::thread::sleep(Duration::from_millis(100));
    let start = Instant::now();
    within(Duration::from_secs(10), move || drop(runtime));
    assert!(start.elapsed() < Duration::from_secs(5));
    // The shutdown's unwind cannot cross the C frame: the read fails with ECANCELED and the
    // sleep returns early; both tasks then end normally.
    assert_eq!(reader.join().unwrap(), Err(Some(libc::ECANCELED)));
    assert!(sleeper.join().unwrap() < Duration::from_secs(5));
}

#[test]
fn a_forked_childs_close_leaves_the_parents_registrations_alone() {
    let _serial = serial();
    let (runtime, reports) = runtime_with_reports(1);
    within(Duration::from_secs(20), move || {
        runtime.block_on(|| {
            let (_listener, mut client, server) = connected();
            let server = Arc::new(Mutex::new(server));
            let send = |server: &Arc<Mutex<TcpStream>>, byte: &'static [u8]| {
                let server = server.clone();
                weft::spawn(move || {
                    weft::time::sleep(Duration::from_millis(30));
                    server.lock().unwrap().write_all(byte).unwrap();
                })
            };
            let writer = send(&server, b"a");
            client.read_exact(&mut [0; 1]).unwrap(); // parks: the socket is registered
            writer.join().unwrap();
            // A child that closes its copy of the socket, as a fork-then-exec child may.
            let fd = client.as_raw_fd();
            // SAFETY: the child only calls close and _exit, both async-signal-safe.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                // SAFETY: see above.
                unsafe {
                    libc::close(fd);
                    libc::_exit(0);
                }
            }
            assert!(pid > 0);
            let mut status = 0;
            // SAFETY: our own child.
            assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
            // The parent's registration must still be there: this read wakes.
            client
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            let writer = send(&server, b"b");
            let mut buf = [0; 1];
            client
                .read_exact(&mut buf)
                .expect("the read was never woken");
            assert_eq!(&buf, b"b");
            writer.join().unwrap();
        })
    });
    assert_never_blocked(&reports);
}
