//! The unmodified sync `redis` crate in 10,000 weft tasks against a real `redis-server` on a
//! loopback port (installed by `scripts/install-redis.sh`; skipped, saying why, where it
//! cannot be had): with the `interpose` feature its blocking std socket calls park.
#![cfg(feature = "interpose")]

mod common;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{assert_never_blocked, runtime_with_reports, within};
use redis::Commands;

const TASKS: usize = 10_000;
/// Connections open at once (each task opens its own).
const IN_FLIGHT: usize = 1000;

/// A `redis-server` of our own, killed on drop.
struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `redis-server` on a free loopback port; `Err` says why it cannot.
fn start_server() -> Result<Server, String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/install-redis.sh");
    let installed = Command::new("bash")
        .arg(script)
        .stderr(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {script}: {e}"))?;
    if !installed.status.success() {
        return Err("redis-server could not be installed (scripts/install-redis.sh)".into());
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free port: {e}"))?
        .port();
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--maxclients", "20000"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start redis-server: {e}"))?;
    let server = Server { child, port };
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return Err("redis-server did not listen within 10 s".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(server)
}

/// Lets this process open a few thousand sockets.
fn raise_fd_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a live rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

#[test]
fn unmodified_sync_redis_in_10000_tasks_sets_and_gets_every_key() {
    let server = match start_server() {
        Ok(server) => server,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    raise_fd_limit();
    let url = format!("redis://127.0.0.1:{}/", server.port);
    let (runtime, reports) = runtime_with_reports(2);
    let (elapsed, right) = within(Duration::from_secs(120), move || {
        runtime.block_on(move || {
            let client = redis::Client::open(url).unwrap();
            let gate = Arc::new(weft::sync::Semaphore::new(IN_FLIGHT));
            let start = Instant::now();
            let tasks: Vec<_> = (0..TASKS)
                .map(|i| {
                    let (client, gate) = (client.clone(), gate.clone());
                    weft::spawn(move || {
                        let _permit = gate.acquire();
                        let mut con = client.get_connection().unwrap();
                        let (key, value) = (format!("weft:key:{i}"), format!("value {i}"));
                        let () = con.set(&key, &value).unwrap();
                        let got: String = con.get(&key).unwrap();
                        got == value
                    })
                })
                .collect();
            let right = tasks
                .into_iter()
                .map(|t| t.join().unwrap())
                .filter(|ok| *ok)
                .count();
            (start.elapsed(), right)
        })
    });
    let ops = 2.0 * TASKS as f64 / elapsed.as_secs_f64();
    assert_eq!(right, TASKS, "wrong or failed values");
    // Like redis-benchmark -c 1000: 1,000 tasks on one connection each, 50 SET+GET apiece.
    let url = format!("redis://127.0.0.1:{}/", server.port);
    let (runtime, more_reports) = runtime_with_reports(2);
    let (kept, kept_right) = within(Duration::from_secs(120), move || {
        runtime.block_on(move || {
            let client = redis::Client::open(url).unwrap();
            let start = Instant::now();
            let tasks: Vec<_> = (0..IN_FLIGHT)
                .map(|i| {
                    let client = client.clone();
                    weft::spawn(move || {
                        let mut con = client.get_connection().unwrap();
                        (0..50)
                            .filter(|r| {
                                let key = format!("weft:conn:{i}:{r}");
                                let () = con.set(&key, r).unwrap();
                                con.get::<_, usize>(&key).unwrap() == *r
                            })
                            .count()
                    })
                })
                .collect();
            let right: usize = tasks.into_iter().map(|t| t.join().unwrap()).sum();
            (start.elapsed(), right)
        })
    });
    let kept_ops = 2.0 * kept_right as f64 / kept.as_secs_f64();
    eprintln!(
        "redis: {TASKS} tasks (each: connect, SET, GET), {IN_FLIGHT} at once, 2 workers: \
         {elapsed:?}, {ops:.0} SET+GET/s; {IN_FLIGHT} tasks x 50 SET+GET on their own \
         connections: {kept:?}, {kept_ops:.0} requests/s"
    );
    // The server's own load generator against the same server, same run, for scale.
    let benchmark = Command::new("redis-benchmark")
        .args(["-p", &server.port.to_string(), "-c", "1000", "-n", "100000"])
        .args(["-t", "set,get", "-q"])
        .output();
    match benchmark {
        Ok(out) => {
            let out = String::from_utf8_lossy(&out.stdout).replace('\r', "\n");
            for line in out.lines().filter(|l| l.contains("requests per second")) {
                eprintln!("redis-benchmark -c 1000 -n 100000: {}", line.trim());
            }
        }
        Err(e) => eprintln!("redis-benchmark could not run: {e}"),
    }
    assert_eq!(kept_right, IN_FLIGHT * 50, "wrong or failed values");
    assert_never_blocked(&reports);
    assert_never_blocked(&more_reports);
}
