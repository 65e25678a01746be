//! Faults: descriptor exhaustion on accept (the echo example, in a subprocess with a low
//! RLIMIT_NOFILE) and descriptor leaks over a 10K-connection run.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[allow(dead_code)]
#[path = "../examples/echo.rs"]
mod echo;

/// The fd-count test must not see the descriptors of the other test of this process.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

const CHILD_ENV: &str = "WEFT_TEST_ECHO_CHILD";
const FD_LIMIT: u64 = 40;

/// The subprocess half of `echo_backs_off_on_emfile_and_keeps_serving`.
#[test]
fn echo_child() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let limit = libc::rlimit {
        rlim_cur: FD_LIMIT,
        rlim_max: FD_LIMIT,
    };
    // SAFETY: a live rlimit; lowering a limit is always allowed.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) }, 0);
    echo::run("127.0.0.1:0");
}

/// Kills the child even when an assertion fails first.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn ping(stream: &mut std::net::TcpStream, byte: u8) -> std::io::Result<()> {
    stream.write_all(&[byte; 32])?;
    let mut back = [0; 32];
    stream.read_exact(&mut back)?;
    assert_eq!(back, [byte; 32]);
    Ok(())
}

#[test]
fn echo_backs_off_on_emfile_and_keeps_serving() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut child = KillOnDrop(
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "echo_child", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let child = &mut child.0;
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let addr = loop {
        let mut line = String::new();
        assert!(
            stdout.read_line(&mut line).unwrap() > 0,
            "child exited early"
        );
        // libtest may print "test echo_child ... " before it on the same line.
        if let Some(at) = line.find("echo: listening on ") {
            break line[at + "echo: listening on ".len()..].trim().to_string();
        }
    };
    // More connections than the child has descriptors: the kernel completes them all (the
    // backlog), the child accepts until EMFILE.
    let mut conns: Vec<_> = (0..2 * FD_LIMIT)
        .map(|_| {
            let s = std::net::TcpStream::connect(&addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            s
        })
        .collect();
    // The first ones are served.
    for s in conns.iter_mut().take(10) {
        ping(s, 1).unwrap();
    }
    // Free descriptors in the child by closing the early connections: the accept loop, backed
    // off, picks up the rest in order, each served once the one before it closed.
    let late = conns.split_off(FD_LIMIT as usize / 2);
    drop(conns);
    let start = Instant::now();
    for mut s in late {
        ping(&mut s, 2).unwrap();
    }
    assert!(start.elapsed() < Duration::from_secs(20));
    // Still alive, still accepting.
    let mut fresh = std::net::TcpStream::connect(&addr).unwrap();
    fresh
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    ping(&mut fresh, 3).unwrap();
    assert!(child.try_wait().unwrap().is_none(), "echo died");
    child.kill().unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    child.wait().unwrap();
    assert!(
        stderr.contains("echo: accept:") && stderr.contains("retrying in"),
        "no backoff message: {stderr}"
    );
}

/// Open descriptors, less the one-time pidfd the stack pool opens (lazily, at its first batch
/// release) to give pages back, and the io_uring and its eventfd each worker has when the
/// environment turns io_uring on (`WEFT_IO_URING=1`): those belong to the process or its
/// workers, not to any connection.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter(|entry| {
            let target = entry
                .as_ref()
                .ok()
                .and_then(|e| std::fs::read_link(e.path()).ok());
            !target.is_some_and(|t| {
                let t = t.to_string_lossy();
                t.contains("pidfd") || t.contains("io_uring") || t.contains("eventfd")
            })
        })
        .count()
}

#[test]
fn ten_thousand_connections_leak_no_descriptors() {
    const CONNS: usize = 10_000;
    const AT_ONCE: usize = 500;
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let (before, after) = rt.block_on(|| {
        let before = open_fds();
        let listener = weft::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = weft::spawn(move || {
            let mut conns = Vec::new();
            for _ in 0..CONNS {
                let (mut s, _) = listener.accept().unwrap();
                conns.push(weft::spawn(move || {
                    let mut buf = [0; 64];
                    while let Ok(n @ 1..) = s.read(&mut buf) {
                        if s.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                }));
            }
            for c in conns {
                c.join().unwrap();
            }
        });
        for batch in 0..CONNS / AT_ONCE {
            let clients: Vec<_> = (0..AT_ONCE)
                .map(|i| {
                    weft::spawn(move || {
                        let mut s = weft::net::TcpStream::connect(addr).unwrap();
                        let byte = (batch + i) as u8;
                        s.write_all(&[byte; 32]).unwrap();
                        let mut back = [0; 32];
                        s.read_exact(&mut back).unwrap();
                        assert_eq!(back, [byte; 32]);
                    })
                })
                .collect();
            for c in clients {
                c.join().unwrap();
            }
        }
        server.join().unwrap();
        (before, open_fds())
    });
    assert_eq!(before, after, "descriptors leaked");
}
