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
//! Owns: the listener and its tasks: one accepts, one per connection; the count of open
//! connections and the permit for a large body.
//!
//! Invariants:
//! 1. No worker is ever blocked by the endpoint: sockets are `weft::net` ones (the tasks park),
//!    and each response body — a snapshot reads `/proc`, a dump symbolizes — is made on the
//!    blocking pool (`spawn_blocking`).
//! 2. Nothing runs until a request arrives: with nothing scraping, the endpoint is one task
//!    parked in `accept`, which costs the scheduler nothing.
//! 3. One request per connection (`Connection: close`), headers at most [`MAX_REQUEST`] bytes.
//! 4. A client cannot hold the server's memory or tasks for long, read or not: at most
//!    [`EndpointLimits::max_connections`] connections have a task (the accept task answers
//!    the others `503` at once, without reading them); a request must arrive within
//!    [`EndpointLimits::request_timeout`]; each write gives up after
//!    [`EndpointLimits::write_timeout`] without progress and the whole response after
//!    [`EndpointLimits::response_deadline`] (plus a trace's recording), each through a
//!    [`Context`](crate::context::Context) bound around the connection's work, so every
//!    wait in it ends; and one large body (a task dump, a trace) exists at a time: the
//!    others wait for its permit within their deadline.
//!
//! Why bounded and not streamed: a dump is captured whole (every worker answers once), so
//! a streamed rendering would still hold the capture per client; one body at a time bounds
//! the memory by one dump, and a client that does not read gives the permit up at its
//! write timeout. (Seen before the limits: 40 clients asking for `debug=2` and never reading
//! held 40 tasks and their bodies for good, 23 → 376 MiB.)
//!
//! May call: `net`, `task` (spawn, spawn_blocking), `context`, `sync`, `metrics`, `debug`.
//! Called by: users.

use std::cell::Cell;
use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::context::Context;
use crate::net::{TcpListener, TcpStream, ToSocketAddrs};
use crate::sync::Semaphore;

/// The most bytes of request line and headers read from one connection (invariant 3).
pub const MAX_REQUEST: usize = 8 * 1024;

/// The longest `/debug/trace?seconds=N` records; longer requests are cut to it.
const MAX_TRACE_SECONDS: f64 = 60.0;

/// How long a refused connection's `503` may take to write: it is a few bytes into a fresh
/// socket's empty buffer, so this only bounds a broken peer.
const REFUSAL_TIMEOUT: Duration = Duration::from_millis(100);

/// How much a connection may hold of the server (invariant 4); [`serve_with`] takes them.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EndpointLimits {
    /// Connections served at once; the others are answered `503 Service Unavailable` at
    /// once. Default 16.
    pub max_connections: usize,
    /// How long a connection may take to send its whole request. Default 10 s.
    pub request_timeout: Duration,
    /// How long one write may wait for the client to read. Default 10 s.
    pub write_timeout: Duration,
    /// How long the whole response may take once the request arrived, waiting for the large
    /// body's permit and making the body included; a `/debug/trace` adds its recording time.
    /// Default 30 s.
    pub response_deadline: Duration,
}

impl Default for EndpointLimits {
    fn default() -> Self {
        EndpointLimits {
            max_connections: 16,
            request_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(10),
            response_deadline: Duration::from_secs(30),
        }
    }
}

/// What the accept task and the connection tasks share.
struct Endpoint {
    limits: EndpointLimits,
    /// Connections with a task now (invariant 4).
    connections: AtomicUsize,
    /// The one large body at a time (invariant 4).
    large_body: Semaphore,
}

/// A connection's place among `max_connections`, given back when its task ends (or when
/// its closure is dropped unrun).
struct ConnectionSlot(Arc<Endpoint>);

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

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
/// With the default [`EndpointLimits`].
///
/// # Errors
/// When `addr` cannot be bound.
///
/// # Panics
/// Outside a runtime (as [`crate::spawn`]).
pub fn serve<A: ToSocketAddrs>(addr: A) -> io::Result<DebugServer> {
    serve_with(addr, EndpointLimits::default())
}

/// [`serve`] with other limits on what clients may hold (module doc, invariant 4).
///
/// ```no_run
/// let mut limits = weft::debug::EndpointLimits::default();
/// limits.max_connections = 4;
/// weft::run(move || weft::debug::serve_with("127.0.0.1:6060", limits).map(|_| ()))
///     .unwrap();
/// ```
///
/// # Errors
/// When `addr` cannot be bound, or a limit is zero.
///
/// # Panics
/// Outside a runtime (as [`crate::spawn`]).
pub fn serve_with<A: ToSocketAddrs>(addr: A, limits: EndpointLimits) -> io::Result<DebugServer> {
    if limits.max_connections == 0
        || [
            limits.request_timeout,
            limits.write_timeout,
            limits.response_deadline,
        ]
        .contains(&Duration::ZERO)
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "debug endpoint: every limit must be above zero",
        ));
    }
    let listener = TcpListener::bind(addr)?;
    let addr = listener.local_addr()?;
    let stop = Arc::new(AtomicBool::new(false));
    let accept_stop = stop.clone();
    let endpoint = Arc::new(Endpoint {
        limits,
        connections: AtomicUsize::new(0),
        large_body: Semaphore::new(1),
    });
    crate::task::Builder::new()
        .name("weft-debug-accept")
        .spawn(move || accept_loop(listener, accept_stop, endpoint))?;
    Ok(DebugServer { addr, stop })
}

fn accept_loop(listener: TcpListener, stop: Arc<AtomicBool>, endpoint: Arc<Endpoint>) {
    loop {
        let accepted = listener.accept();
        if stop.load(Ordering::Relaxed) {
            return;
        }
        match accepted {
            Ok((stream, _)) => {
                // Invariant 4: the count only the accept task raises.
                if endpoint.connections.load(Ordering::Relaxed) >= endpoint.limits.max_connections {
                    refuse(stream);
                    continue;
                }
                endpoint.connections.fetch_add(1, Ordering::Relaxed);
                let slot = ConnectionSlot(endpoint.clone());
                let spawned =
                    crate::task::Builder::new()
                        .name("weft-debug-conn")
                        .spawn(move || {
                            let _ = handle(stream, &slot.0);
                        });
                if spawned.is_err() {
                    // Out of stacks: drop the connection (the stream and the slot went with
                    // the closure).
                    continue;
                }
            }
            // A failed accept (a reset connection, out of descriptors): try the next one
            // after a short pause, so that a persistent error does not spin.
            Err(_) => crate::time::sleep(Duration::from_millis(10)),
        }
    }
}

/// Answers a connection over the limit `503` without reading it (invariant 4).
fn refuse(stream: TcpStream) {
    unavailable(&stream, "too many connections, try again");
    let _ = stream.shutdown(std::net::Shutdown::Write);
}

/// A `503` saying `why`, its write bounded by [`REFUSAL_TIMEOUT`] (a few bytes that a
/// client's buffer takes at once unless it is broken or full).
fn unavailable(stream: &TcpStream, why: &str) {
    let _ = stream.set_write_timeout(Some(REFUSAL_TIMEOUT));
    let body = format!("weft: debug endpoint: {why}\n");
    let _ = respond(
        stream,
        "503 Service Unavailable",
        "text/plain",
        body.as_bytes(),
    );
}

/// Serves one request on `stream` (invariants 3 and 4).
fn handle(stream: TcpStream, endpoint: &Endpoint) -> io::Result<()> {
    let limits = &endpoint.limits;
    stream.set_write_timeout(Some(limits.write_timeout))?;
    let request = Context::with_timeout(limits.request_timeout)
        .bind(|| read_request(&stream))
        .map_err(|e| io::Error::new(io::ErrorKind::TimedOut, e))??;
    let Some(request) = request else {
        return Ok(());
    };
    let started = Instant::now();
    let responded = Cell::new(false);
    let outcome = Context::with_deadline(started + limits.response_deadline + request.recording)
        .bind(|| {
            let _permit = request.large.then(|| endpoint.large_body.acquire());
            respond_to(&stream, request, &responded)
        });
    match outcome {
        Ok(result) => result,
        // The deadline passed: say so if nothing was written yet (outside the context, whose
        // end would fail the write at once), bounded like a refusal.
        Err(e) => {
            if !responded.get() {
                unavailable(&stream, "the response took too long (busy)");
            }
            Err(io::Error::new(io::ErrorKind::TimedOut, e))
        }
    }
}

/// A request read whole: what to answer, and what it costs.
struct Request {
    head_only: bool,
    status: Result<(&'static str, Make), (&'static str, &'static [u8])>,
    /// A large body (a dump, a trace): one at a time (invariant 4).
    large: bool,
    /// How long making the body records for (a trace), added to the response deadline.
    recording: Duration,
}

/// Reads the request line and headers; `None` if the client closed first.
fn read_request(stream: &TcpStream) -> io::Result<Option<Request>> {
    let mut request = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        if request.len() >= MAX_REQUEST {
            return Ok(Some(Request::error(
                "431 Request Header Fields Too Large",
                b"",
            )));
        }
        let mut reader = stream;
        let n = reader.read(&mut buf)?;
        if n == 0 {
            return Ok(None);
        }
        request.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&request);
    let mut parts = head.lines().next().unwrap_or("").split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if method != "GET" && method != "HEAD" {
        return Ok(Some(Request::error(
            "405 Method Not Allowed",
            b"GET only\n",
        )));
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    Ok(Some(match route(path, query) {
        Some(route) => Request {
            head_only: method == "HEAD",
            large: route.large,
            recording: route.recording,
            status: Ok((route.content_type, route.make)),
        },
        None => Request::error("404 Not Found", b"not found\n"),
    }))
}

impl Request {
    fn error(status: &'static str, body: &'static [u8]) -> Request {
        Request {
            head_only: false,
            status: Err((status, body)),
            large: false,
            recording: Duration::ZERO,
        }
    }
}

/// Makes the request's body and writes the response; `responded` is set once the first
/// byte goes out.
fn respond_to(stream: &TcpStream, request: Request, responded: &Cell<bool>) -> io::Result<()> {
    let respond = |status: &str, content_type: &str, body: &[u8]| {
        responded.set(true);
        respond(stream, status, content_type, body)
    };
    let (content_type, make) = match request.status {
        Ok(route) => route,
        Err((status, body)) => return respond(status, "text/plain", body),
    };
    // Invariant 1: the body is made off the worker.
    let body = match crate::task::try_spawn_blocking(make) {
        Ok(Ok(body)) => body,
        // `/debug/trace` while another trace records.
        Ok(Err(e)) if e.kind() == io::ErrorKind::AlreadyExists => {
            let text = format!("{e}\n");
            return respond("409 Conflict", "text/plain", text.as_bytes());
        }
        Ok(Err(e)) | Err(e) => {
            let text = format!("weft: debug endpoint: {e}\n");
            return respond("503 Service Unavailable", "text/plain", text.as_bytes());
        }
    };
    let body = if request.head_only { Vec::new() } else { body };
    respond("200 OK", content_type, &body)
}

type Make = Box<dyn FnOnce() -> io::Result<Vec<u8>> + Send>;

/// How to answer one of our paths.
struct Route {
    content_type: &'static str,
    make: Make,
    /// One large body at a time (invariant 4).
    large: bool,
    /// How long `make` records (a trace).
    recording: Duration,
}

impl Route {
    fn small(content_type: &'static str, make: Make) -> Route {
        Route {
            content_type,
            make,
            large: false,
            recording: Duration::ZERO,
        }
    }
}

/// How to answer `path`, if it is one of ours.
fn route(path: &str, query: &str) -> Option<Route> {
    let text = "text/plain; charset=utf-8";
    Some(match path {
        "/" => Route::small(
            "text/html; charset=utf-8",
            Box::new(|| Ok(PAGE.as_bytes().to_vec())),
        ),
        "/metrics" => Route::small(
            "text/plain; version=0.0.4; charset=utf-8",
            Box::new(|| Ok(prometheus().into_bytes())),
        ),
        "/debug/tasks" => {
            let full = query.split('&').any(|kv| kv == "debug=2");
            Route {
                large: true,
                ..Route::small(
                    text,
                    Box::new(move || {
                        let dump = super::dump();
                        Ok(if full { dump.full() } else { dump.grouped() }.into_bytes())
                    }),
                )
            }
        }
        "/debug/stacks" => Route::small(
            text,
            Box::new(|| {
                Ok(crate::metrics::stack_profile()
                    .to_file_format()
                    .into_bytes())
            }),
        ),
        "/debug/vars" => Route::small("application/json", Box::new(|| Ok(vars().into_bytes()))),
        "/debug/trace" => {
            let seconds = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("seconds="))
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|s| s.is_finite() && *s > 0.0)
                .unwrap_or(1.0)
                .min(MAX_TRACE_SECONDS);
            let duration = Duration::from_secs_f64(seconds);
            Route {
                large: true,
                recording: duration,
                ..Route::small(
                    "application/json",
                    Box::new(move || super::trace::trace_json(duration)),
                )
            }
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
         \"stack_bytes_per_task\":{:.1},\"compacted\":{},\"stack_image_bytes\":{},\
         \"image_bytes_per_task\":{:.1},\"stack_template_bytes\":{},\"rss_bytes\":{},\"monitor_warnings\":{},\"workers\":[",
        now.as_millis(),
        s.tasks,
        s.tasks_running,
        s.tasks_runnable,
        s.tasks_parked,
        s.spawns,
        s.workers,
        s.stack_committed_bytes,
        s.stack_bytes_per_task(),
        s.tasks_compacted,
        s.stack_image_bytes,
        s.image_bytes_per_task(),
        s.stack_template_bytes,
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
