//! The unmodified `ureq` HTTP client in many weft tasks, fetching from the example HTTP
//! server (`examples/http.rs`) in the same runtime, against the same fetches written with
//! `weft::net` directly (issue 13's comparison). Needs the `interpose` feature:
//!
//! ```text
//! cargo run --release -p weft --features interpose --example ureq_fetch -- --rounds 3
//! ```
//!
//! Prints one line per run and a summary with medians, then one JSON line. The rounds
//! alternate the two clients (weft::net, ureq, weft::net, ureq, …) after one warm-up round of
//! each: the first ureq round after start pays glibc's first allocations of ureq's two
//! 128 KiB buffers per agent (every one an `mmap`, since none was freed yet) and the first
//! touch of that memory, which is not what the comparison is about.
//!
//! `--ureq-buffer BYTES` sizes ureq's input and output buffers (ureq's default: 128 KiB each,
//! allocated and zeroed per agent, so per task here; the weft::net client reads into 4 KiB).
//!
//! `--off` adds a run with the interposition switched off: the server then runs in a runtime
//! of its own (in the same runtime the blocked workers would starve it for good), and each
//! ureq call blocks its client worker, so only as many requests are in flight as there are
//! workers.

#[allow(dead_code)]
#[path = "http.rs"]
mod http;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// ureq's input and output buffer size for [`with_ureq`]; 0: ureq's default.
pub static UREQ_BUFFER: AtomicUsize = AtomicUsize::new(0);

/// Request `r` of task `task`: its path and the body the server must answer.
pub fn request(task: usize, r: usize) -> (String, String) {
    if r.is_multiple_of(2) {
        ("/".to_string(), "hello, world\n".to_string())
    } else {
        let kb = (task + r) % 64;
        (format!("/deep?kb={kb}"), format!("deep {kb}\n"))
    }
}

/// A client: fetches `requests` requests of `task` from `addr`; returns how many came back
/// right.
pub type Client = fn(SocketAddr, usize, usize, Option<Duration>) -> usize;

/// ureq's default agent, one per task (so one keep-alive connection per task). `timeout`:
/// ureq's global timeout; with one set, ureq resolves each request's address on a thread of
/// its own and waits for it on a std channel (a futex wait weft cannot interpose).
pub fn with_ureq(
    addr: SocketAddr,
    task: usize,
    requests: usize,
    timeout: Option<Duration>,
) -> usize {
    let mut config = ureq::Agent::config_builder().timeout_global(timeout);
    let buffer = UREQ_BUFFER.load(Ordering::Relaxed);
    if buffer > 0 {
        config = config.input_buffer_size(buffer).output_buffer_size(buffer);
    }
    let agent: ureq::Agent = config.build().into();
    (0..requests)
        .filter(|&r| {
            let (path, want) = request(task, r);
            let got = agent
                .get(&format!("http://{addr}{path}"))
                .call()
                .and_then(|mut response| response.body_mut().read_to_string());
            got.is_ok_and(|body| body == want)
        })
        .count()
}

/// The same fetches over `weft::net` directly, one keep-alive connection per task.
pub fn with_weft_net(addr: SocketAddr, task: usize, requests: usize, _: Option<Duration>) -> usize {
    let mut stream = weft::net::TcpStream::connect(addr).unwrap();
    stream.set_nodelay(true).unwrap();
    let mut buf = vec![0; 4096];
    (0..requests)
        .filter(|&r| {
            let (path, want) = request(task, r);
            let head = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n");
            stream.write_all(head.as_bytes()).unwrap();
            let mut filled = 0;
            loop {
                let mut headers = [httparse::EMPTY_HEADER; 16];
                let mut response = httparse::Response::new(&mut headers);
                if let httparse::Status::Complete(n) = response.parse(&buf[..filled]).unwrap() {
                    let len: usize = response
                        .headers
                        .iter()
                        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                        .map(|h| std::str::from_utf8(h.value).unwrap().parse().unwrap())
                        .unwrap();
                    while filled < n + len {
                        filled += stream.read(&mut buf[filled..]).unwrap();
                    }
                    return &buf[n..n + len] == want.as_bytes();
                }
                filled += stream.read(&mut buf[filled..]).unwrap();
            }
        })
        .count()
}

/// Runs `tasks` clients against a server listening at `addr`, inside the current runtime;
/// returns the wall time and the right responses.
pub fn fetch_in_tasks(
    addr: SocketAddr,
    client: Client,
    tasks: usize,
    requests: usize,
    timeout: Option<Duration>,
) -> (Duration, usize) {
    let start = Instant::now();
    let clients: Vec<_> = (0..tasks)
        .map(|task| weft::spawn(move || client(addr, task, requests, timeout)))
        .collect();
    let right = clients.into_iter().map(|c| c.join().unwrap()).sum();
    (start.elapsed(), right)
}

/// Starts the example server in the current runtime; returns its address.
pub fn start_server() -> SocketAddr {
    let listener = weft::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    weft::spawn(move || http::serve(listener));
    addr
}

struct Args {
    tasks: usize,
    requests: usize,
    rounds: usize,
    workers: usize,
    off: bool,
    ureq_buffer: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        tasks: 1000,
        requests: 10,
        rounds: 3,
        workers: 2,
        off: false,
        ureq_buffer: 0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut number = |name: &str| -> Result<usize, String> {
            it.next()
                .and_then(|v| v.parse().ok())
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("{name} needs a positive number"))
        };
        match flag.as_str() {
            "--tasks" => args.tasks = number("--tasks")?,
            "--requests" => args.requests = number("--requests")?,
            "--rounds" => args.rounds = number("--rounds")?,
            "--workers" => args.workers = number("--workers")?,
            "--ureq-buffer" => args.ureq_buffer = number("--ureq-buffer")?,
            "--off" => args.off = true,
            "-h" | "--help" => {
                return Err("usage: ureq_fetch [--tasks N] [--requests N] [--rounds N] \
                            [--workers N] [--ureq-buffer BYTES] [--off]"
                    .into())
            }
            other => return Err(format!("unknown argument {other:?} (try --help)")),
        }
    }
    Ok(args)
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("ureq_fetch: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = weft::net::raise_fd_limit() {
        eprintln!("ureq_fetch: cannot raise the descriptor limit: {e}");
    }
    // Before the workers start: growing the table mid-run held a worker in `accept4` for
    // over 10 ms (a monitor report).
    if let Err(e) = weft::net::reserve_descriptors(2 * args.tasks + 64) {
        eprintln!("ureq_fetch: cannot grow the descriptor table: {e}");
    }
    let total = args.tasks * args.requests;
    UREQ_BUFFER.store(args.ureq_buffer, Ordering::Relaxed);
    let runtime = weft::Runtime::builder()
        .workers(args.workers)
        .build()
        .expect("runtime");
    let (tasks, requests, rounds) = (args.tasks, args.requests, args.rounds);
    let (net, ureq) = runtime.block_on(move || {
        let addr = start_server();
        let mut times = [Vec::new(), Vec::new()];
        for round in 0..=rounds {
            for (i, (name, client)) in [
                ("weft::net", with_weft_net as Client),
                ("ureq", with_ureq as Client),
            ]
            .into_iter()
            .enumerate()
            {
                let (elapsed, right) = fetch_in_tasks(addr, client, tasks, requests, None);
                let label = if round == 0 { "warm-up" } else { "round" };
                println!(
                    "{label} {round}: {name:<9} {:>8.1} ms  {right}/{total} right",
                    elapsed.as_secs_f64() * 1e3
                );
                if right != total {
                    eprintln!("ureq_fetch: {name}: {} wrong or failed", total - right);
                    std::process::exit(1);
                }
                if round > 0 {
                    times[i].push(elapsed.as_secs_f64());
                }
            }
        }
        let [net, ureq] = times;
        (net, ureq)
    });
    let ratios: Vec<f64> = net.iter().zip(&ureq).map(|(n, u)| u / n).collect();
    let (net_ms, ureq_ms, ratio) = (median(&net) * 1e3, median(&ureq) * 1e3, median(&ratios));
    let buffers = match args.ureq_buffer {
        0 => "ureq's default buffers".to_string(),
        n => format!("ureq buffers of {n} B"),
    };
    println!(
        "{tasks} tasks x {requests} requests on {} workers, medians of {rounds}, {buffers}: \
         weft::net {net_ms:.1} ms, ureq interposed {ureq_ms:.1} ms: ureq/weft::net x{ratio:.2}",
        args.workers
    );
    let mut off_json = String::from("null");
    if args.off {
        // The server in a runtime of its own, so the client workers' blocking cannot stop it.
        let server = weft::Runtime::builder()
            .workers(args.workers)
            .build()
            .expect("server runtime");
        let addr = server.block_on(start_server);
        weft::interpose::set_enabled(false);
        let (elapsed, right) =
            runtime.block_on(move || fetch_in_tasks(addr, with_ureq, tasks, requests, None));
        weft::interpose::set_enabled(true);
        let off_ms = elapsed.as_secs_f64() * 1e3;
        println!(
            "interposition off (server in its own runtime): ureq {off_ms:.1} ms, \
             {right}/{total} right: x{:.2} of weft::net",
            off_ms / net_ms
        );
        off_json = format!("{off_ms:.1}");
    }
    println!(
        "{{\"tasks\":{tasks},\"requests\":{requests},\"workers\":{},\"rounds\":{rounds},\
         \"weft_net_ms\":{net_ms:.1},\"ureq_ms\":{ureq_ms:.1},\"ratio\":{ratio:.3},\
         \"ureq_off_ms\":{off_json},\"ureq_buffer\":{}}}",
        args.workers, args.ureq_buffer
    );
}
