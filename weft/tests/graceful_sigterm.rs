//! The README's server (`examples/graceful_echo.rs`) shuts down on SIGTERM without losing a
//! request in flight: it stops accepting, every connection finishes the requests it has, and
//! the process exits cleanly once the clients close.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CONNECTIONS: usize = 1000;

/// `target/<profile>/examples/graceful_echo`, which `cargo test` builds with the tests (not
/// with `--test graceful_sigterm` alone: run `cargo build --example graceful_echo` first).
fn example() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples/graceful_echo")
}

/// The server process, killed if the test fails before it exits on its own.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn sigterm_with_1000_requests_in_flight_loses_none() {
    let path = example();
    if !path.exists() {
        eprintln!("skipped: {} is not built", path.display());
        return;
    }
    let mut child = KillOnDrop(
        Command::new(&path)
            .arg("127.0.0.1:0")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let child = &mut child.0;
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    let addr = line
        .strip_prefix("echo on ")
        .and_then(|rest| rest.split(|c: char| c == ';' || c.is_whitespace()).next())
        .unwrap_or_else(|| panic!("unexpected first line: {line}"))
        .to_string();
    // Every connection accepted (one round trip each), then a request in flight on each.
    let mut conns: Vec<_> = (0..CONNECTIONS)
        .map(|i| {
            let mut c = std::net::TcpStream::connect(&addr).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let hello = format!("hello {i:04}\n");
            c.write_all(hello.as_bytes()).unwrap();
            let mut back = vec![0; hello.len()];
            c.read_exact(&mut back).unwrap();
            c
        })
        .collect();
    for (i, c) in conns.iter_mut().enumerate() {
        c.write_all(format!("request {i:04}\n").as_bytes()).unwrap();
    }
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let mut answered = 0;
    for (i, c) in conns.iter_mut().enumerate() {
        let want = format!("request {i:04}\n");
        let mut back = vec![0; want.len()];
        if c.read_exact(&mut back).is_err() || back != want.as_bytes() {
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
    assert!(rest.contains("finished in time: true"), "{rest}");
}
