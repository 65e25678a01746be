//! Helpers for the tests of weft's async bridge against real clients and servers
//! (`tests/*.rs`): the 5 ms ticker that shows no worker is blocked, a hyper server on tokio,
//! and a throw-away PostgreSQL server started by the project's scripts.
//!
//! Owns: nothing shared; each test makes its own runtimes and servers.
//!
//! Why a crate of its own: reqwest, tokio-postgres, tonic and hyper are heavy to build, and
//! weft's own test builds should not pay for them; scripts/test.sh runs these tests.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};

/// The ticker's period.
pub const TICK: Duration = Duration::from_millis(5);
/// The most a tick may be late at the 99th percentile for the runtime to count as unblocked.
pub const ON_TIME_P99: Duration = Duration::from_millis(2);
/// How much later than on time a tick may be at p99 before the check fails (see
/// [`Lateness::check`]): the kernel's scheduling of a busy worker on a loaded machine, not a
/// blocked one.
pub const SCHEDULING_MARGIN: Duration = Duration::from_millis(5);

/// A task on a weft runtime that sleeps until every 5 ms mark (with precise timers) and
/// records how late it woke: if any worker is blocked (not parked) by an async call, the
/// ticks of that worker are late.
/// Beside it, a plain OS thread does the same with `std::thread::sleep`: how late the kernel
/// itself wakes a thread on this machine now (other processes, the test's own load).
pub struct Ticker {
    stop: Arc<AtomicBool>,
    task: weft::JoinHandle<Vec<Duration>>,
    control: std::thread::JoinHandle<Vec<Duration>>,
}

/// Sleeps until every [`TICK`] mark with `sleep_until` until `stop`; returns the lateness of
/// each wake.
fn tick_until(stop: &AtomicBool, sleep_until: impl Fn(Instant)) -> Vec<Duration> {
    let mut late = Vec::new();
    let mut next = Instant::now() + TICK;
    while !stop.load(Ordering::Relaxed) {
        sleep_until(next);
        let now = Instant::now();
        late.push(now.saturating_duration_since(next));
        next += TICK;
        while next <= now {
            next += TICK; // a tick missed entirely counts once, as Go's Ticker
        }
    }
    late
}

impl Ticker {
    /// Starts the ticker on `rt`, and its control thread.
    pub fn start(rt: &weft::Handle) -> Ticker {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        // Precise: the runtime's timer slack (1 ms by default) would add its own lateness to
        // what the ticker is there to see, a blocked worker.
        let task = rt.spawn(move || tick_until(&flag, weft::time::sleep_until_precise));
        let flag = stop.clone();
        let control = std::thread::spawn(move || {
            tick_until(&flag, |at| {
                std::thread::sleep(at.saturating_duration_since(Instant::now()))
            })
        });
        Ticker {
            stop,
            task,
            control,
        }
    }

    /// Stops the ticker and returns its lateness.
    pub fn stop(self) -> Lateness {
        self.stop.store(true, Ordering::Relaxed);
        let late = self.task.join().expect("the ticker task failed");
        let control = self.control.join().expect("the control thread failed");
        let mut lateness = Lateness::of(late);
        lateness.control_p99 = Lateness::of(control).p99;
        lateness
    }
}

/// How late a [`Ticker`] woke.
#[derive(Debug, Clone, Copy)]
pub struct Lateness {
    pub ticks: usize,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
    /// The control thread's p99: the kernel's own lateness waking a thread meanwhile.
    pub control_p99: Duration,
}

impl Lateness {
    fn of(mut late: Vec<Duration>) -> Lateness {
        late.sort_unstable();
        let at = |q: f64| late[((late.len() - 1) as f64 * q) as usize];
        Lateness {
            ticks: late.len(),
            p50: at(0.5),
            p99: at(0.99),
            max: *late.last().unwrap(),
            control_p99: Duration::ZERO,
        }
    }

    /// Prints the figures and whether the ticker was on time: p99 ≤ [`ON_TIME_P99`], or, on
    /// a machine so busy that a plain thread's timer is itself late by more than 1 ms at p99
    /// (other processes, or the test's load filling the CPUs), that lateness plus 1 ms.
    ///
    /// Fails only past that bar plus [`SCHEDULING_MARGIN`]: with the database's backends on
    /// the same two CPUs, the kernel leaves a busy worker thread off the CPU for milliseconds
    /// more than a sleeping plain thread (the postgres test's ticker was 1.0–5.4 ms late at
    /// p99 over 16 runs, over its bar in 5, with a plain thread's timer 0.7–4.5 ms late),
    /// while a worker blocked by the async calls makes its ticks late by whole blocking calls
    /// for as long as the load runs.
    pub fn check(&self, what: &str) {
        println!(
            "{what}: 5 ms ticker, {} ticks, late p50 {:?} p99 {:?} max {:?}; a plain thread's \
             timer meanwhile: p99 {:?}",
            self.ticks, self.p50, self.p99, self.max, self.control_p99
        );
        assert!(
            self.ticks >= 10,
            "{what}: the ticker ticked only {} times",
            self.ticks
        );
        let busy = self.control_p99 > Duration::from_millis(1);
        let on_time = if busy {
            let bar = ON_TIME_P99.max(self.control_p99 + Duration::from_millis(1));
            println!(
                "{what}: the machine is busy (a plain thread's 5 ms timer was late by {:?} at \
                 p99): on time up to {bar:?}",
                self.control_p99
            );
            bar
        } else {
            ON_TIME_P99
        };
        if self.p99 > on_time {
            println!(
                "{what}: NOT ON TIME: the ticker was late by {:?} at p99 (on time up to \
                 {on_time:?}), within the scheduling margin",
                self.p99
            );
        }
        let limit = on_time + SCHEDULING_MARGIN;
        assert!(
            self.p99 <= limit,
            "{what}: the 5 ms ticker was late by {:?} at p99 (limit {limit:?}): a worker was \
             blocked",
            self.p99
        );
    }
}

/// Serves HTTP/1.1 on `listener` from tokio (the caller's runtime context), answering each
/// request with `handler`.
pub async fn serve_http<F, Fut>(listener: tokio::net::TcpListener, handler: F)
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let handler = handler.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let handler = handler.clone();
                async move { Ok::<_, Infallible>(handler(req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Held by each test that times a [`Ticker`]: the tests of one binary run in parallel
/// threads, and two loads at once would make each other's ticks late.
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// A tokio runtime for the servers of a test, apart from the weft runtime under test.
pub fn server_runtime(threads: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name("test-server")
        .enable_all()
        .build()
        .expect("cannot start the servers' tokio runtime")
}

/// A loopback port nothing listens on now.
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("cannot bind a port");
    listener.local_addr().unwrap().port()
}

/// The repository's `scripts/` folder.
pub fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts")
}

/// A throw-away PostgreSQL server on 127.0.0.1, started by `scripts/postgres-server.sh`
/// (installed by `scripts/install-postgres.sh`) and stopped when dropped.
pub struct Postgres {
    pub addr: SocketAddr,
    dir: PathBuf,
}

impl Postgres {
    /// Starts one; `Err` says why it cannot be had (the caller prints "skipped: ...").
    pub fn start() -> Result<Postgres, String> {
        let installed = std::process::Command::new(scripts().join("install-postgres.sh"))
            .output()
            .map_err(|e| format!("cannot run scripts/install-postgres.sh: {e}"))?;
        if !installed.status.success() {
            return Err(format!(
                "postgresql cannot be installed: {}",
                String::from_utf8_lossy(&installed.stderr).trim()
            ));
        }
        let dir = std::env::temp_dir().join(format!(
            "weft-postgres-{}-{}",
            std::process::id(),
            free_port()
        ));
        let port = free_port();
        let started = std::process::Command::new(scripts().join("postgres-server.sh"))
            .arg("start")
            .arg(&dir)
            .arg(port.to_string())
            .output()
            .map_err(|e| format!("cannot run scripts/postgres-server.sh: {e}"))?;
        let server = Postgres {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            dir,
        };
        if !started.status.success() {
            return Err(format!(
                "the postgresql server did not start: {}",
                String::from_utf8_lossy(&started.stderr).trim()
            ));
        }
        Ok(server)
    }

    /// Starts one, or prints "skipped: …" with the reason and gives `None` when it cannot be
    /// had.
    pub fn start_or_skip() -> Option<Postgres> {
        match Postgres::start() {
            Ok(server) => Some(server),
            Err(why) => {
                println!("skipped: {why}");
                None
            }
        }
    }

    /// The connection string for tokio-postgres.
    pub fn config(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=weft dbname=postgres",
            self.addr.port()
        )
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let _ = std::process::Command::new(scripts().join("postgres-server.sh"))
            .arg("stop")
            .arg(&self.dir)
            .output();
    }
}

/// CPU time this process has used so far (user + system, all threads).
pub fn process_cpu() -> Duration {
    // SAFETY: `getrusage` writes into the zeroed struct we pass and reads nothing else.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// Percentile `q` of `samples` (sorted in place).
pub fn percentile(samples: &mut [Duration], q: f64) -> Duration {
    samples.sort_unstable();
    samples[((samples.len() - 1) as f64 * q) as usize]
}
