//! The servers shut down on SIGTERM without losing a request in flight: the README's
//! (`examples/graceful_echo.rs`), the echo example and the HTTP example each stop accepting,
//! every connection finishes the requests it has, and the process exits cleanly once the
//! clients close.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const CONNECTIONS: usize = 1000;
/// A test that runs longer than this is stuck: its watchdog kills the server and aborts.
const WATCHDOG: Duration = Duration::from_secs(120);

/// The tests run one at a time: each holds 1,000 connections to a server of its own.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `target/<profile>/examples/<name>`, which `cargo test` builds with the tests (not with
/// `--test graceful_sigterm` alone: run `cargo build --examples` first).
fn example(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join(name)
}

/// The server process, killed if the test fails before it exits on its own.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Kills `pid` and aborts the test process unless dropped within [`WATCHDOG`].
struct Watchdog(#[allow(dead_code)] mpsc::Sender<()>);

impl Watchdog {
    fn start(name: &'static str, pid: u32) -> Watchdog {
        let (tx, rx) = mpsc::channel::<()>();
        std::thread::spawn(move || {
            if rx.recv_timeout(WATCHDOG) == Err(mpsc::RecvTimeoutError::Timeout) {
                eprintln!("watchdog: the {name} SIGTERM test ran past {WATCHDOG:?}");
                // SAFETY: kill(2) on our own child's pid, which it still holds (not reaped:
                // the test waits on it after dropping the watchdog).
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
                std::process::abort();
            }
        });
        Watchdog(tx)
    }
}

/// What the server speaks and how it announces itself.
#[derive(Clone, Copy)]
enum Server {
    /// `examples/graceful_echo.rs`: "echo on ADDR" on stderr.
    GracefulEcho,
    /// `examples/echo.rs`: "echo: listening on ADDR" on stdout.
    Echo,
    /// `examples/http.rs`: "http: listening on ADDR" on stdout.
    Http,
}

impl Server {
    fn name(self) -> &'static str {
        match self {
            Server::GracefulEcho => "graceful_echo",
            Server::Echo => "echo",
            Server::Http => "http",
        }
    }

    fn announcement(self) -> &'static str {
        match self {
            Server::GracefulEcho => "echo on ",
            Server::Echo => "echo: listening on ",
            Server::Http => "http: listening on ",
        }
    }

    /// Request `n` of connection `i`.
    fn request(self, i: usize, n: usize) -> Vec<u8> {
        match self {
            Server::GracefulEcho | Server::Echo => format!("request {i:04}.{n}\n").into_bytes(),
            Server::Http => b"GET / HTTP/1.1\r\nHost: test\r\n\r\n".to_vec(),
        }
    }

    /// Reads the answer to `request(i, n)`; whether it came, whole and right.
    fn answered(self, c: &mut std::net::TcpStream, i: usize, n: usize) -> bool {
        match self {
            Server::GracefulEcho | Server::Echo => {
                let want = self.request(i, n);
                let mut back = vec![0; want.len()];
                c.read_exact(&mut back).is_ok() && back == want
            }
            Server::Http => {
                // One response outstanding: it ends with its body.
                let mut got = Vec::new();
                let mut chunk = [0; 512];
                while !got.ends_with(b"\r\n\r\nhello, world\n") {
                    match c.read(&mut chunk) {
                        Ok(0) | Err(_) => return false,
                        Ok(k) => got.extend_from_slice(&chunk[..k]),
                    }
                }
                got.starts_with(b"HTTP/1.1 200 OK\r\n")
            }
        }
    }
}

/// Starts `server`, opens [`CONNECTIONS`] connections (one round trip each, so every one is
/// accepted), sends a request on each, sends SIGTERM, and checks that every request is
/// answered and the server exits 0 saying every connection finished in time.
fn sigterm_with_requests_in_flight_loses_none(server: Server) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let path = example(server.name());
    if !path.exists() {
        eprintln!("skipped: {} is not built", path.display());
        return;
    }
    let mut child = KillOnDrop(
        Command::new(&path)
            .arg("127.0.0.1:0")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let _watchdog = Watchdog::start(server.name(), child.0.id());
    let child = &mut child.0;
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    match server {
        Server::GracefulEcho => stderr.read_line(&mut line).unwrap(),
        Server::Echo | Server::Http => stdout.read_line(&mut line).unwrap(),
    };
    let addr = line
        .strip_prefix(server.announcement())
        .and_then(|rest| rest.split(|c: char| c == ';' || c.is_whitespace()).next())
        .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
        .to_string();
    let mut conns: Vec<_> = (0..CONNECTIONS)
        .map(|i| {
            let mut c = std::net::TcpStream::connect(&addr).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            c.write_all(&server.request(i, 0)).unwrap();
            assert!(server.answered(&mut c, i, 0), "no first answer on {i}");
            c
        })
        .collect();
    for (i, c) in conns.iter_mut().enumerate() {
        c.write_all(&server.request(i, 1)).unwrap();
    }
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let mut answered = 0;
    for (i, c) in conns.iter_mut().enumerate() {
        if !server.answered(c, i, 1) {
            break; // lost: no need to wait out every other read's timeout
        }
        answered += 1;
    }
    drop(conns);
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("the server did not exit after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut rest = String::new();
    let _ = stderr.read_to_string(&mut rest);
    assert_eq!(
        answered, CONNECTIONS,
        "requests lost at SIGTERM; stderr: {rest}"
    );
    assert!(status.success(), "{status}; stderr: {rest}");
    assert!(rest.contains("stopped; every task finished in"), "{rest}");
    // Besides the runtime's own diagnostics (a loaded machine can make the monitor report a
    // connection task descheduled by the kernel as computing), one line.
    let own: Vec<_> = rest.lines().filter(|l| !l.starts_with("weft: ")).collect();
    assert_eq!(own.len(), 1, "one line at shutdown: {rest}");
}

#[test]
fn sigterm_with_1000_requests_in_flight_loses_none() {
    sigterm_with_requests_in_flight_loses_none(Server::GracefulEcho);
}

#[test]
fn the_echo_example_answers_1000_requests_in_flight_at_sigterm_and_exits_0() {
    sigterm_with_requests_in_flight_loses_none(Server::Echo);
}

#[test]
fn the_http_example_answers_1000_requests_in_flight_at_sigterm_and_exits_0() {
    sigterm_with_requests_in_flight_loses_none(Server::Http);
}
