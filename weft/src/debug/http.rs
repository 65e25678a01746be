//! The debug endpoint: a small HTTP/1.1 server on `weft::net`, run by weft's own tasks.
//!
//! | path | what |
//! |---|---|
//! | `/metrics` | Prometheus text: the [`crate::metrics::snapshot`] plus per-worker scheduler counters |
//! | `/debug/tasks?debug=1` | the grouped task dump ([`super::Dump::grouped`]); `debug=2`: every task |
//! | `/debug/stacks` | the per-spawn-site stack profile ([`crate::metrics::stack_profile`]) |
//! | `/debug/vars` | one JSON object: what the page charts |
//! | `/debug/trace?seconds=N` | a scheduler trace of the next N seconds (default 1, at most 60), Chrome trace-event JSON ([`super::trace`]); 409 while another trace records |
//! | `/` | one self-contained HTML page (no external resources) charting `/debug/vars` live |
//!
//! Owns: the listener and its tasks: one accepts, one per connection.
//!
//! Invariants:
//! 1. No worker is ever blocked by the endpoint: sockets are `weft::net` ones (the tasks park),
//!    and each response body — a snapshot reads `/proc`, a dump symbolizes — is made on the
//!    blocking pool (`spawn_blocking`).
//! 2. Nothing runs until a request arrives: with nothing scraping, the endpoint is one task
//!    parked in `accept`, which costs the scheduler nothing.
//! 3. One request per connection (`Connection: close`), headers at most [`MAX_REQUEST`] bytes:
//!    a client cannot make the server hold more than that per connection.
//!
//! May call: `net`, `task` (spawn, spawn_blocking), `metrics`, `debug`. Called by: users.

use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::net::{TcpListener, TcpStream, ToSocketAddrs};

/// The most bytes of request line and headers read from one connection (invariant 3).
pub const MAX_REQUEST: usize = 8 * 1024;

/// The longest `/debug/trace?seconds=N` records; longer requests are cut to it.
const MAX_TRACE_SECONDS: f64 = 60.0;

/// How long a connection may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The page served at `/`.
const PAGE: &str = include_str!("page.html");

/// A running debug endpoint; see [`serve`].
#[derive(Debug)]
pub struct DebugServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl DebugServer {
    /// The address it listens on (useful after binding port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting connections; requests in flight finish. Dropping the handle instead
    /// leaves the server running until its runtime shuts down.
    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the accept with a connection of our own.
        let _ = std::net::TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
    }
}

/// Serves the debug endpoint on `addr` (module doc), from tasks of the current runtime.
///
/// ```no_run
/// weft::run(|| {
///     let server = weft::debug::serve("127.0.0.1:6060").unwrap();
///     println!("open http://{}/", server.local_addr());
///     // ... the program's own work ...
/// });
/// ```
///
/// # Errors
/// When `addr` cannot be bound.
///
/// # Panics
/// Outside a runtime (as [`crate::spawn`]).
pub fn serve<A: ToSocketAddrs>(addr: A) -> io::Result<DebugServer> {
    let listener = TcpListener::bind(addr)?;
    let addr = listener.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let accept_stop = stop.clone();
    crate::task::Builder::new()
        .name("weft-debug-accept")
        .spawn(move || accept_loop(listener, accept_stop))?;
    Ok(DebugServer { addr, stop })
}

fn accept_loop(listener: TcpListener, stop: Arc<AtomicBool>) {
    loop {
        let accepted = listener.accept();
        if stop.load(Ordering::Relaxed) {
            return;
        }
        match accepted {
            Ok((stream, _)) => {
                let spawned =
                    crate::task::Builder::new()
                        .name("weft-debug-conn")
                        .spawn(move || {
                            let _ = handle(stream);
                        });
                if spawned.is_err() {
                    // Out of stacks: drop the connection (the stream went with the closure).
                    continue;
                }
            }
            // A failed accept (a reset connection, out of descriptors): try the next one
            // after a short pause, so that a persistent error does not spin.
            Err(_) => crate::time::sleep(Duration::from_millis(10)),
        }
    }
}

/// Serves one request on `stream` (invariant 3).
fn handle(stream: TcpStream) -> io::Result<()> {
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    let mut request = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        if request.len() >= MAX_REQUEST {
            return respond(
                &stream,
                "431 Request Header Fields Too Large",
                "text/plain",
                b"",
            );
        }
        let n = (&stream).read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        request.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&request);
    let mut parts = head.lines().next().unwrap_or("").split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if method != "GET" && method != "HEAD" {
        return respond(
            &stream,
            "405 Method Not Allowed",
            "text/plain",
            b"GET only\n",
        );
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let route = route(path, query);
    let Some((content_type, make)) = route else {
        return respond(&stream, "404 Not Found", "text/plain", b"not found\n");
    };
    // Invariant 1: the body is made off the worker.
    let body = match crate::task::try_spawn_blocking(make) {
        Ok(Ok(body)) => body,
        // `/debug/trace` while another trace records.
        Ok(Err(e)) if e.kind() == io::ErrorKind::AlreadyExists => {
            let text = format!("{e}\n");
            return respond(&stream, "409 Conflict", "text/plain", text.as_bytes());
        }
        Ok(Err(e)) | Err(e) => {
            let text = format!("weft: debug endpoint: {e}\n");
            return respond(
                &stream,
                "503 Service Unavailable",
                "text/plain",
                text.as_bytes(),
            );
        }
    };
    let body = if method == "HEAD" { Vec::new() } else { body };
    respond(&stream, "200 OK", content_type, &body)
}

type Make = Box<dyn FnOnce() -> io::Result<Vec<u8>> + Send>;

/// The content type and body maker for a path, if it is one of ours.
fn route(path: &str, query: &str) -> Option<(&'static str, Make)> {
    let text = "text/plain; charset=utf-8";
    Some(match path {
        "/" => (
            "text/html; charset=utf-8",
            Box::new(|| Ok(PAGE.as_bytes().to_vec())),
        ),
        "/metrics" => (
            "text/plain; version=0.0.4; charset=utf-8",
            Box::new(|| Ok(prometheus().into_bytes())),
        ),
        "/debug/tasks" => {
            let full = query.split('&').any(|kv| kv == "debug=2");
            (
                text,
                Box::new(move || {
                    let dump = super::dump();
                    Ok(if full { dump.full() } else { dump.grouped() }.into_bytes())
                }),
            )
        }
        "/debug/stacks" => (
            text,
            Box::new(|| {
                Ok(crate::metrics::stack_profile()
                    .to_file_format()
                    .into_bytes())
            }),
        ),
        "/debug/vars" => ("application/json", Box::new(|| Ok(vars().into_bytes()))),
        "/debug/trace" => {
            let seconds = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("seconds="))
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|s| s.is_finite() && *s > 0.0)
                .unwrap_or(1.0)
                .min(MAX_TRACE_SECONDS);
            let duration = Duration::from_secs_f64(seconds);
            (
                "application/json",
                Box::new(move || super::trace::trace_json(duration)),
            )
        }
        _ => return None,
    })
}

fn respond(stream: &TcpStream, status: &str, content_type: &str, body: &[u8]) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Cache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let mut out = stream;
    out.write_all(head.as_bytes())?;
    out.write_all(body)?;
    out.flush()
}

/// One worker's scheduler counters, for `/metrics` and `/debug/vars`.
struct WorkerFigures {
    runtime: usize,
    worker: usize,
    spawns: u64,
    parks: u64,
    wakes: u64,
    steals: u64,
    busy: Duration,
}

fn worker_figures() -> (Vec<WorkerFigures>, Vec<(usize, u64)>) {
    let mut workers = Vec::new();
    let mut warnings = Vec::new();
    for (r, shared) in super::live_runtimes().iter().enumerate() {
        warnings.push((r, shared.monitor_warnings.load(Ordering::Relaxed)));
        for remote in &shared.remotes {
            let totals = remote.counters.totals();
            workers.push(WorkerFigures {
                runtime: r,
                worker: remote.index,
                spawns: totals.spawns,
                parks: totals.parks,
                wakes: totals.wakes,
                steals: remote.activity.steals(),
                busy: remote.activity.busy(),
            });
        }
    }
    (workers, warnings)
}

/// The `/metrics` body: the snapshot, then the scheduler's per-worker counters.
pub(crate) fn prometheus() -> String {
    let mut out = crate::metrics::snapshot().to_prometheus();
    let (workers, warnings) = worker_figures();
    type Series = (&'static str, &'static str, fn(&WorkerFigures) -> String);
    let series: [Series; 5] = [
        (
            "weft_worker_spawns_total",
            "Tasks spawned by code running on the worker.",
            |w| w.spawns.to_string(),
        ),
        (
            "weft_worker_parks_total",
            "Parks the worker published.",
            |w| w.parks.to_string(),
        ),
        (
            "weft_worker_wakes_total",
            "Parked tasks woken by code running on the worker.",
            |w| w.wakes.to_string(),
        ),
        (
            "weft_worker_steals_total",
            "Never-started tasks the worker took from other workers.",
            |w| w.steals.to_string(),
        ),
        (
            "weft_worker_busy_seconds_total",
            "Time the worker spent outside its idle spin and sleep.",
            |w| format!("{:.6}", w.busy.as_secs_f64()),
        ),
    ];
    for (name, help, value) in series {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for w in &workers {
            let _ = writeln!(
                out,
                "{name}{{runtime=\"{}\",worker=\"{}\"}} {}",
                w.runtime,
                w.worker,
                value(w)
            );
        }
    }
    let name = "weft_monitor_warnings_total";
    let _ = writeln!(
        out,
        "# HELP {name} Times the monitor found a worker stuck in one task.\n# TYPE {name} counter"
    );
    for (r, n) in warnings {
        let _ = writeln!(out, "{name}{{runtime=\"{r}\"}} {n}");
    }
    out
}

/// `s` as a JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The `/debug/vars` body, charted by the page.
pub(crate) fn vars() -> String {
    let s = crate::metrics::snapshot();
    let (workers, warnings) = worker_figures();
    let profile = crate::metrics::stack_profile();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let mut out = String::new();
    let _ = write!(
        out,
        "{{\"time_ms\":{},\"tasks\":{},\"running\":{},\"runnable\":{},\"parked\":{},\
         \"spawns\":{},\"workers_count\":{},\"stack_committed_bytes\":{},\
         \"stack_bytes_per_task\":{:.1},\"rss_bytes\":{},\"monitor_warnings\":{},\"workers\":[",
        now.as_millis(),
        s.tasks,
        s.tasks_running,
        s.tasks_runnable,
        s.tasks_parked,
        s.spawns,
        s.workers,
        s.stack_committed_bytes,
        s.stack_bytes_per_task(),
        s.rss_bytes,
        warnings.iter().map(|(_, n)| n).sum::<u64>(),
    );
    for (i, w) in workers.iter().enumerate() {
        let _ = write!(
            out,
            "{}{{\"name\":\"{}/{}\",\"busy_seconds\":{:.6},\"parks\":{},\"wakes\":{},\
             \"steals\":{}}}",
            if i == 0 { "" } else { "," },
            w.runtime,
            w.worker,
            w.busy.as_secs_f64(),
            w.parks,
            w.wakes,
            w.steals
        );
    }
    out.push_str("],\"sites\":[");
    let mut sites: Vec<_> = profile.sites.iter().collect();
    sites.sort_by_key(|s| std::cmp::Reverse(s.max_bytes));
    for (i, site) in sites.iter().take(12).enumerate() {
        let _ = write!(
            out,
            "{}{{\"site\":{},\"tasks\":{},\"p50_bytes\":{},\"p99_bytes\":{},\"max_bytes\":{},\
             \"configured_bytes\":{}}}",
            if i == 0 { "" } else { "," },
            json_string(&site.site.to_string()),
            site.tasks,
            site.p50_bytes,
            site.p99_bytes,
            site.max_bytes,
            site.configured_bytes
        );
    }
    out.push_str("]}");
    out
}

#[cfg(test)]
mod tests {
    use super::json_string;

    #[test]
    fn json_strings_escape_quotes_backslashes_and_controls() {
        assert_eq!(json_string("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
    }
}
