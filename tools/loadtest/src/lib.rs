//! weft-loadtest: a TCP echo load tester written on weft.
//!
//! It dials `conns` connections to an echo server in batches of `batch` every `gap_ms`
//! (one task per connection), keeps them all open, then — all at once ("burst"), or with each
//! ping delayed by a pseudo-random 0..`stagger_ms` — does `rounds` ping-pongs of `payload`
//! bytes on each. It reports dial and round-trip percentiles, throughput, and Little's law:
//! in-flight = throughput × mean RTT, next to the in-flight count it sampled every
//! millisecond. With `--hold-ms H` it then keeps every connection open and idle for H ms
//! before closing them, and with `--watch-pid PID` reads that process's (the server's) RSS and
//! page tables at the end of the hold: what the server holds per idle connection. The last
//! line it prints is JSON.
//!
//! Owns: [`Config`] (parsed from the command line), [`Report`] and the run itself.
//!
//! Bounds: every dial has a timeout (`dial_timeout_ms`), every read and write a 10 s timeout,
//! and the whole ping phase a deadline of `rounds` × 10 s; the address must be a loopback one.
//!
//! Why the descriptor setup in [`prepare_fds`]: Linux grows a process's fd table by doubling,
//! and in a multi-threaded process each doubling waits for an RCU grace period, so a client
//! that opens thousands of sockets grows the table once at start (shared/FACTS.md).

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weft::net::TcpStream;

/// Per read or write: a round trip that takes longer counts as failed.
const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// What to run.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub addr: SocketAddr,
    pub conns: usize,
    pub rounds: usize,
    pub batch: usize,
    pub gap_ms: u64,
    pub payload: usize,
    pub stagger_ms: u64,
    pub dial_timeout_ms: u64,
    /// How long every connection stays open and idle after its rounds, ms.
    pub hold_ms: u64,
    /// The process whose RSS and page tables are read at the end of the hold.
    pub watch_pid: Option<u32>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            addr: "127.0.0.1:7000".parse().expect("literal address"),
            conns: 2000,
            rounds: 5,
            batch: 64,
            gap_ms: 15,
            payload: 32,
            stagger_ms: 0,
            dial_timeout_ms: 10_000,
            hold_ms: 0,
            watch_pid: None,
        }
    }
}

pub const USAGE: &str = "usage: weft-loadtest --addr 127.0.0.1:PORT [--conns C] [--rounds R] \
[--batch 64] [--gap-ms 15] [--payload 32] [--stagger-ms 0] [--dial-timeout-ms 10000] \
[--hold-ms 0] [--watch-pid PID]";

/// Parses `--flag value` / `--flag=value` arguments (without the program name).
///
/// # Errors
/// An unknown flag, a missing or malformed value, or a non-loopback address.
pub fn parse_args<I: IntoIterator<Item = String>>(args: I) -> Result<Config, String> {
    let mut config = Config::default();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if arg == "-h" || arg == "--help" {
            return Err(USAGE.to_string());
        }
        let (flag, value) = match arg.split_once('=') {
            Some((flag, value)) => (flag.to_string(), value.to_string()),
            None => {
                let value = args
                    .next()
                    .ok_or_else(|| format!("loadtest: {arg} needs a value\n{USAGE}"))?;
                (arg, value)
            }
        };
        fn num<T: std::str::FromStr>(flag: &str, value: &str) -> Result<T, String> {
            value
                .parse()
                .map_err(|_| format!("loadtest: {flag}: {value:?} is not a number"))
        }
        match flag.as_str() {
            "--addr" => {
                config.addr = value
                    .parse()
                    .map_err(|_| format!("loadtest: --addr: {value:?} is not IP:PORT"))?
            }
            "--conns" => config.conns = num(&flag, &value)?,
            "--rounds" => config.rounds = num(&flag, &value)?,
            "--batch" => config.batch = num(&flag, &value)?,
            "--gap-ms" => config.gap_ms = num(&flag, &value)?,
            "--payload" => config.payload = num(&flag, &value)?,
            "--stagger-ms" => config.stagger_ms = num(&flag, &value)?,
            "--dial-timeout-ms" => config.dial_timeout_ms = num(&flag, &value)?,
            "--hold-ms" => config.hold_ms = num(&flag, &value)?,
            "--watch-pid" => config.watch_pid = Some(num(&flag, &value)?),
            _ => return Err(format!("loadtest: unknown flag {flag}\n{USAGE}")),
        }
    }
    if !config.addr.ip().is_loopback() {
        return Err(format!(
            "loadtest: --addr {} is not a loopback address; this tool only loads 127.0.0.1/::1",
            config.addr
        ));
    }
    if config.batch == 0 || config.payload == 0 || config.dial_timeout_ms == 0 {
        return Err("loadtest: --batch, --payload and --dial-timeout-ms must be positive".into());
    }
    Ok(config)
}

/// Raises the soft RLIMIT_NOFILE to the hard limit and grows the fd table once to hold
/// `needed` descriptors; returns the soft limit now in force.
pub fn prepare_fds(needed: usize) -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a live rlimit for the kernel to fill in.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 1024;
    }
    if limit.rlim_cur < limit.rlim_max {
        limit.rlim_cur = limit.rlim_max;
        // SAFETY: as above; raising the soft limit up to the hard one is always allowed.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
        // SAFETY: as above.
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    }
    let soft = usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX);
    let high = needed.min(soft.saturating_sub(1)).min(1 << 22);
    if high > 64 {
        // SAFETY: dup2 of stderr onto an unused high descriptor, closed at once: the table
        // stays grown, nothing else changes.
        unsafe {
            if libc::dup2(2, high as libc::c_int) >= 0 {
                libc::close(high as libc::c_int);
            }
        }
    }
    soft
}

/// The `q` quantile (0..=1) of sorted `values`, nearest rank; 0 if empty.
pub fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// What a run measured; times in microseconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    pub conns_ok: usize,
    pub conns_failed: usize,
    pub dial_total_us: u64,
    pub dial_p50_us: u64,
    pub dial_p99_us: u64,
    pub ping_window_us: u64,
    pub rtt_count: usize,
    pub rtt_failed: usize,
    pub rtt_p50_us: u64,
    pub rtt_p99_us: u64,
    pub rtt_max_us: u64,
    pub rtt_mean_us: f64,
    pub round_trips_per_sec: f64,
    /// Little's law: throughput × mean RTT.
    pub little_in_flight: f64,
    /// The in-flight count sampled every millisecond over the ping window, averaged.
    pub sampled_in_flight: f64,
    /// The watched process's VmRSS and VmPTE at the end of the hold, bytes (0 without one).
    pub held_rss_bytes: u64,
    pub held_pte_bytes: u64,
    /// The watched process's CPU time (user + system) when the hold began, seconds (0
    /// without one): its CPU for the load, without what it does while the connections idle.
    pub watched_cpu_s: f64,
}

impl Report {
    /// Builds the summary from raw samples.
    pub fn from_samples(
        mut dials: Vec<u64>,
        conns_failed: usize,
        dial_total: Duration,
        mut rtts: Vec<u64>,
        rtt_failed: usize,
        window: Duration,
        sampled_in_flight: f64,
    ) -> Report {
        dials.sort_unstable();
        rtts.sort_unstable();
        let window_s = window.as_secs_f64();
        let mean = if rtts.is_empty() {
            0.0
        } else {
            rtts.iter().sum::<u64>() as f64 / rtts.len() as f64
        };
        let throughput = if window_s > 0.0 {
            rtts.len() as f64 / window_s
        } else {
            0.0
        };
        Report {
            conns_ok: dials.len(),
            conns_failed,
            dial_total_us: dial_total.as_micros() as u64,
            dial_p50_us: percentile(&dials, 0.50),
            dial_p99_us: percentile(&dials, 0.99),
            ping_window_us: window.as_micros() as u64,
            rtt_count: rtts.len(),
            rtt_failed,
            rtt_p50_us: percentile(&rtts, 0.50),
            rtt_p99_us: percentile(&rtts, 0.99),
            rtt_max_us: rtts.last().copied().unwrap_or(0),
            rtt_mean_us: mean,
            round_trips_per_sec: throughput,
            little_in_flight: throughput * mean / 1e6,
            sampled_in_flight,
            held_rss_bytes: 0,
            held_pte_bytes: 0,
            watched_cpu_s: 0.0,
        }
    }

    /// The human-readable lines.
    pub fn text(&self) -> String {
        format!(
            "conns: ok {} failed {}\n\
             dial: total {:.1} ms, p50 {} us, p99 {} us\n\
             ping window: {:.1} ms\n\
             rtt: count {} (failed {}), p50 {} us, p99 {} us, max {} us, mean {:.1} us\n\
             round trips/s: {:.0}\n\
             little's law: throughput x mean rtt = {:.1} in flight; sampled {:.1}",
            self.conns_ok,
            self.conns_failed,
            self.dial_total_us as f64 / 1e3,
            self.dial_p50_us,
            self.dial_p99_us,
            self.ping_window_us as f64 / 1e3,
            self.rtt_count,
            self.rtt_failed,
            self.rtt_p50_us,
            self.rtt_p99_us,
            self.rtt_max_us,
            self.rtt_mean_us,
            self.round_trips_per_sec,
            self.little_in_flight,
            self.sampled_in_flight,
        )
    }

    /// One line of JSON.
    pub fn json(&self) -> String {
        format!(
            "{{\"conns_ok\":{},\"conns_failed\":{},\"dial_total_us\":{},\"dial_p50_us\":{},\
             \"dial_p99_us\":{},\"ping_window_us\":{},\"rtt_count\":{},\"rtt_failed\":{},\
             \"rtt_p50_us\":{},\"rtt_p99_us\":{},\"rtt_max_us\":{},\"rtt_mean_us\":{:.1},\
             \"round_trips_per_sec\":{:.0},\"little_in_flight\":{:.2},\
             \"sampled_in_flight\":{:.2},\"held_rss_bytes\":{},\"held_pte_bytes\":{},\"watched_cpu_s\":{:.6}}}",
            self.conns_ok,
            self.conns_failed,
            self.dial_total_us,
            self.dial_p50_us,
            self.dial_p99_us,
            self.ping_window_us,
            self.rtt_count,
            self.rtt_failed,
            self.rtt_p50_us,
            self.rtt_p99_us,
            self.rtt_max_us,
            self.rtt_mean_us,
            self.round_trips_per_sec,
            self.little_in_flight,
            self.sampled_in_flight,
            self.held_rss_bytes,
            self.held_pte_bytes,
            self.watched_cpu_s,
        )
    }
}

/// State the connection tasks share with the driver.
#[derive(Default)]
struct Shared {
    dialed: AtomicUsize,
    failed: AtomicUsize,
    start: AtomicBool,
    waiting: Mutex<Vec<weft::task::Task>>,
    /// Set when the hold ends; the connections wait for it in `held`.
    release: AtomicBool,
    held: Mutex<Vec<weft::task::Task>>,
    in_flight: InFlight,
    done: AtomicUsize,
    dials: Mutex<Vec<u64>>,
    rtts: Mutex<Vec<u64>>,
    rtt_failed: AtomicUsize,
    last_dial: Mutex<Option<Instant>>,
    last_done: Mutex<Option<Instant>>,
}

/// The number of pings in flight, as counters spread over cache lines: one shared counter
/// bumped twice per round trip by every connection bounced its cache line between the
/// client's workers at each ping, on the machine whose CPU the server under test shares.
#[derive(Default)]
struct InFlight([PaddedCounter; IN_FLIGHT_SHARDS]);

const IN_FLIGHT_SHARDS: usize = 16;

#[derive(Default)]
#[repr(align(128))]
struct PaddedCounter(AtomicU64);

impl InFlight {
    fn add(&self, conn: usize, delta: i64) {
        let counter = &self.0[conn % IN_FLIGHT_SHARDS].0;
        counter.fetch_add(delta as u64, Ordering::Relaxed);
    }

    /// The sum of the shards: a sample, not a snapshot (they are read one after another).
    fn sample(&self) -> u64 {
        self.0
            .iter()
            .map(|c| c.0.load(Ordering::Relaxed))
            .fold(0u64, u64::wrapping_add)
    }
}

/// The longest a run may take: the dial phase (every gap, plus a dial timeout), then every
/// round at its I/O timeout, plus slack. The binary exits with an error past it.
pub fn time_limit(config: &Config) -> Duration {
    let batches = config.conns.div_ceil(config.batch.max(1)) as u64;
    Duration::from_millis(batches * config.gap_ms + config.dial_timeout_ms)
        + IO_TIMEOUT * (config.rounds as u32 + 1)
        + Duration::from_millis(config.stagger_ms * config.rounds as u64)
        + Duration::from_millis(config.hold_ms)
        + Duration::from_secs(5)
}

/// What the `weft-loadtest` binary does with its configuration: grows the descriptor table
/// ([`prepare_fds`]), starts a watchdog that exits the process with status 3 once the run
/// outlives [`time_limit`], and runs the load on a new weft runtime whose tasks get
/// `stack_size`-byte stacks.
///
/// # Errors
/// When the runtime cannot start.
pub fn run_bounded(config: Config, stack_size: usize) -> Result<Report, String> {
    prepare_fds(config.conns + 256);
    // A run must end: past every timeout the load can take, give up with an error.
    let limit = time_limit(&config);
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        eprintln!("loadtest: the run did not end within {limit:?}; giving up");
        std::process::exit(3);
    });
    let runtime = weft::Runtime::builder()
        .stack_size(stack_size)
        .build()
        .map_err(|e| format!("loadtest: cannot start the runtime: {e}"))?;
    Ok(runtime.block_on(move || run(&config)))
}

/// A cheap deterministic hash for the stagger delays.
fn jitter(conn: usize, round: usize, max_ms: u64) -> Duration {
    if max_ms == 0 {
        return Duration::ZERO;
    }
    let mut x = (conn as u64) << 32 ^ round as u64 ^ 0x9e37_79b9_7f4a_7c15;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    Duration::from_micros(x % (max_ms * 1000))
}

/// Runs one load test; call from a weft task.
pub fn run(config: &Config) -> Report {
    let shared = Arc::new(Shared::default());
    let dial_start = Instant::now();
    let mut handles = Vec::with_capacity(config.conns);
    let mut spawned = 0;
    while spawned < config.conns {
        let n = config.batch.min(config.conns - spawned);
        for i in spawned..spawned + n {
            let shared = shared.clone();
            let config = config.clone();
            handles.push(weft::spawn(move || connection(i, &config, &shared)));
        }
        spawned += n;
        if spawned < config.conns {
            weft::time::sleep(Duration::from_millis(config.gap_ms));
        }
    }
    // Wait for every dial to end, then start the pings at once.
    while shared.dialed.load(Ordering::Acquire) + shared.failed.load(Ordering::Acquire)
        < config.conns
    {
        weft::time::sleep(Duration::from_millis(1));
    }
    let dial_total = shared
        .last_dial
        .lock()
        .unwrap()
        .map_or(Duration::ZERO, |t| t.duration_since(dial_start));
    let ping_start = Instant::now();
    // Release: pairs with the Acquire load in `connection`; the unparks below wake them.
    shared.start.store(true, Ordering::Release);
    for task in shared.waiting.lock().unwrap().drain(..) {
        task.unpark();
    }
    // Sample the in-flight count every millisecond until every connection is done.
    let ok = shared.dialed.load(Ordering::Acquire);
    let deadline = ping_start + IO_TIMEOUT * (config.rounds as u32 + 1);
    let (mut samples, mut sum) = (0u64, 0u64);
    while shared.done.load(Ordering::Acquire) < ok && Instant::now() < deadline {
        sum += shared.in_flight.sample();
        samples += 1;
        weft::time::sleep(Duration::from_millis(1));
    }
    let held = hold(config, &shared);
    for handle in handles {
        let _ = handle.join();
    }
    // The window ends at the last pong (or now, if a connection never finished).
    let window = shared
        .last_done
        .lock()
        .unwrap()
        .map_or_else(|| ping_start.elapsed(), |t| t.duration_since(ping_start));
    let sampled = if samples == 0 {
        0.0
    } else {
        sum as f64 / samples as f64
    };
    let dials = std::mem::take(&mut *shared.dials.lock().unwrap());
    let rtts = std::mem::take(&mut *shared.rtts.lock().unwrap());
    let mut report = Report::from_samples(
        dials,
        shared.failed.load(Ordering::Relaxed),
        dial_total,
        rtts,
        shared.rtt_failed.load(Ordering::Relaxed),
        window,
        sampled,
    );
    (
        report.watched_cpu_s,
        report.held_rss_bytes,
        report.held_pte_bytes,
    ) = held;
    report
}

/// A field of a process's `/proc/PID/status` in bytes (`field` without its colon, e.g.
/// `VmRSS`); 0 if it cannot be read.
pub fn process_status_bytes(pid: u32, field: &str) -> f64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| rest.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kb| kb * 1024.0)
}

/// A process's CPU time so far (user + system), seconds, from `/proc/PID/stat`; 0 if it
/// cannot be read.
pub fn process_cpu_seconds(pid: u32) -> f64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at ") ".
    let rest = text.rsplit(") ").next().unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after the name.
    (ticks(11) + ticks(12)) / hz.max(1.0)
}

/// Keeps the connections open and idle for `hold_ms`, reads the watched process's CPU time
/// before and its memory after, then lets them close. Every connection that finished its
/// rounds waits in `held`.
fn hold(config: &Config, shared: &Shared) -> (f64, u64, u64) {
    let mut memory = (0.0, 0, 0);
    if config.hold_ms > 0 {
        let cpu = config.watch_pid.map_or(0.0, process_cpu_seconds);
        weft::time::sleep(Duration::from_millis(config.hold_ms));
        if let Some(pid) = config.watch_pid {
            let field = |name: &str| process_status_bytes(pid, name) as u64;
            memory = (cpu, field("VmRSS"), field("VmPTE"));
        }
    }
    // Release: pairs with the Acquire load in `connection`; the unparks below wake them.
    shared.release.store(true, Ordering::Release);
    for task in shared.held.lock().unwrap().drain(..) {
        task.unpark();
    }
    memory
}

/// One connection: dial, wait for the start, ping `rounds` times.
fn connection(index: usize, config: &Config, shared: &Shared) {
    let t0 = Instant::now();
    let dialed =
        TcpStream::connect_timeout(&config.addr, Duration::from_millis(config.dial_timeout_ms));
    let mut stream = match dialed {
        Ok(stream) => stream,
        Err(e) => {
            if shared.failed.fetch_add(1, Ordering::AcqRel) < 3 {
                eprintln!("loadtest: dial {}: {e}", config.addr);
            }
            return;
        }
    };
    let dial_us = t0.elapsed().as_micros() as u64;
    let _ = stream.set_nodelay(true);
    let _ = stream.set_read_timeout(Some(IO_TIMEOUT));
    let _ = stream.set_write_timeout(Some(IO_TIMEOUT));
    shared.dials.lock().unwrap().push(dial_us);
    {
        let mut last = shared.last_dial.lock().unwrap();
        let now = Instant::now();
        if last.is_none_or(|t| t < now) {
            *last = Some(now);
        }
    }
    shared.waiting.lock().unwrap().push(weft::task::current());
    // AcqRel: the driver's Acquire load of `dialed` sees our registration in `waiting`.
    shared.dialed.fetch_add(1, Ordering::AcqRel);
    // Acquire: pairs with the driver's Release store of `start`.
    while !shared.start.load(Ordering::Acquire) {
        weft::task::park();
    }
    let ping = vec![0xa5u8; config.payload];
    // Twice the payload: the echo then comes back as a short read, which tells weft the
    // socket is drained, so the next round's read waits for readiness without first trying a
    // `recv` that can only fail with EAGAIN (the server's 16 KiB reads do the same).
    let mut pong = vec![0u8; 2 * config.payload];
    let mut rtts = Vec::with_capacity(config.rounds);
    let mut failed = 0;
    for round in 0..config.rounds {
        let delay = jitter(index, round, config.stagger_ms);
        if !delay.is_zero() {
            weft::time::sleep(delay);
        }
        let t = Instant::now();
        shared.in_flight.add(index, 1);
        let ok = stream.write_all(&ping).is_ok() && read_echo(&mut stream, &mut pong, ping.len());
        shared.in_flight.add(index, -1);
        if !ok || pong[..ping.len()] != ping[..] {
            failed += config.rounds - round;
            break;
        }
        rtts.push(t.elapsed().as_micros() as u64);
    }
    shared.rtts.lock().unwrap().extend_from_slice(&rtts);
    shared.rtt_failed.fetch_add(failed, Ordering::Relaxed);
    {
        let mut last = shared.last_done.lock().unwrap();
        let now = Instant::now();
        if last.is_none_or(|t| t < now) {
            *last = Some(now);
        }
    }
    if config.hold_ms > 0 {
        shared.held.lock().unwrap().push(weft::task::current());
    }
    // Release: pairs with the driver's Acquire load of `done`; our place in `held` is
    // taken before the driver can see us done.
    shared.done.fetch_add(1, Ordering::Release);
    // Acquire: pairs with the driver's Release store of `release`.
    while config.hold_ms > 0 && !shared.release.load(Ordering::Acquire) {
        weft::task::park();
    }
}

/// Reads until `len` bytes of echo are in `buf` (which is longer); false on an error, a
/// timeout, an early end of stream or more bytes than were sent.
fn read_echo(stream: &mut TcpStream, buf: &mut [u8], len: usize) -> bool {
    let mut got = 0;
    while got < len {
        match stream.read(&mut buf[got..]) {
            Ok(0) | Err(_) => return false,
            Ok(n) => got += n,
        }
    }
    got == len
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn flags_parse_with_and_without_equals() {
        let c = parse_args(args(
            "--addr 127.0.0.1:9 --conns=10 --rounds 2 --stagger-ms 2",
        ))
        .unwrap();
        assert_eq!(c.addr, "127.0.0.1:9".parse().unwrap());
        assert_eq!((c.conns, c.rounds, c.stagger_ms, c.batch), (10, 2, 2, 64));
    }

    #[test]
    fn non_loopback_addresses_are_refused() {
        assert!(parse_args(args("--addr 10.0.0.1:80")).is_err());
        assert!(parse_args(args("--bogus 1")).is_err());
        assert!(parse_args(args("--conns")).is_err());
    }

    #[test]
    fn percentile_is_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.5), 50);
        assert_eq!(percentile(&v, 0.99), 99);
        assert_eq!(percentile(&v, 1.0), 100);
        assert_eq!(percentile(&[], 0.5), 0);
    }

    #[test]
    fn littles_law_is_throughput_times_mean() {
        let r = Report::from_samples(
            vec![5, 1],
            0,
            Duration::from_millis(3),
            vec![100, 300],
            0,
            Duration::from_millis(1),
            0.4,
        );
        assert_eq!(r.round_trips_per_sec, 2000.0);
        assert_eq!(r.rtt_mean_us, 200.0);
        assert!((r.little_in_flight - 0.4).abs() < 1e-9);
        assert!(r.json().ends_with('}'));
    }

    #[test]
    fn jitter_stays_below_the_stagger() {
        for i in 0..100 {
            assert!(jitter(i, i % 5, 2) < Duration::from_millis(2));
        }
        assert_eq!(jitter(1, 1, 0), Duration::ZERO);
    }
}
