//! Unix signals as something a task waits for: [`ctrl_c`], [`wait`] for any listed signal, or a
//! [`Signals`] subscription that receives each arrival, like Go's `signal.Notify` and tokio's
//! `signal::ctrl_c`.
//!
//! ```no_run
//! // A server's main: serve until SIGINT or SIGTERM, then stop gracefully.
//! let rt = weft::Runtime::new()?;
//! // ... rt.spawn(the accept loop) ...
//! let signal = weft::signal::wait(&[weft::signal::SIGINT, weft::signal::SIGTERM])?;
//! eprintln!("got signal {signal}, stopping");
//! println!("{}", rt.shutdown_timeout(std::time::Duration::from_secs(5)));
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! Owns: the process's one dispatcher thread (`weft-signal`, started at the first
//! subscription) with its `signal-hook` registration, and the table of subscriptions.
//!
//! Invariants:
//! 1. The signal handler does only what is async-signal-safe: `signal-hook` writes to a pipe,
//!    and the dispatcher thread reads it (as debug/signal.rs does for SIGQUIT).
//! 2. A subscription is in the table before its constructor returns, and the signal's handler
//!    is installed before that: a signal raised after [`Signals::new`] returned reaches it.
//! 3. The dispatcher never blocks on a subscriber: it hands each arrival over with a
//!    `try_send` into the subscription's channel ([`PENDING`] deep); an arrival that finds it
//!    full is dropped, as Go's `signal.Notify` drops what a full channel cannot take (a signal
//!    is a notice, not a count).
//! 4. A signal that arrives while no subscription lists it gets its default action (for
//!    SIGINT and SIGTERM: the process ends, killed by it), as Go restores after
//!    `signal.Stop`: subscribing changes what the signal does only while someone listens.
//!    SIGQUIT is the exception: weft's own handler prints the task dump (debug/signal.rs).
//!
//! May call: `chan`. Called by: users.
//!
//! Why a thread and a channel: a signal handler may not touch a task or a lock, so an arrival
//! has to leave the handler as a byte in a pipe; one plain thread reads it for the whole
//! process and wakes the waiting tasks through channels, which also lets a task wait for a
//! signal in a `select!` next to its other work.

use std::io;
use std::sync::{Mutex, OnceLock};

use crate::chan::{self, Receiver, Sender};

pub use libc::{SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGWINCH};

/// How many arrivals a subscription keeps until it receives them (invariant 3).
pub const PENDING: usize = 16;

/// The process's signal dispatcher (invariant 1).
struct Dispatcher {
    /// Adds a signal to the dispatcher thread's `signal-hook` registration.
    handle: signal_hook::iterator::Handle,
    /// Subscriptions: (id, signals, where to send an arrival).
    subscribers: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    next_id: u64,
    entries: Vec<(u64, Vec<libc::c_int>, Sender<libc::c_int>)>,
}

static DISPATCHER: OnceLock<io::Result<Dispatcher>> = OnceLock::new();

fn dispatcher() -> io::Result<&'static Dispatcher> {
    DISPATCHER
        .get_or_init(start)
        .as_ref()
        .map_err(|e| io::Error::new(e.kind(), e.to_string()))
}

fn start() -> io::Result<Dispatcher> {
    let mut signals = signal_hook::iterator::Signals::new::<[libc::c_int; 0], _>([])?;
    let handle = signals.handle();
    std::thread::Builder::new()
        .name("weft-signal".into())
        .spawn(move || {
            for signal in signals.forever() {
                deliver(signal);
            }
        })?;
    Ok(Dispatcher {
        handle,
        subscribers: Mutex::new(Table::default()),
    })
}

/// The dispatcher thread: hands `signal` to every subscription that lists it (invariant 3),
/// or gives it its default action when none does (invariant 4).
fn deliver(signal: libc::c_int) {
    let Some(Ok(dispatcher)) = DISPATCHER.get() else {
        return;
    };
    let table = dispatcher.lock();
    let mut listened = false;
    for (_, signals, tx) in &table.entries {
        if signals.contains(&signal) {
            listened = true;
            // Full: dropped (invariant 3); disconnected: the subscription is being dropped.
            let _ = tx.try_send(signal);
        }
    }
    drop(table);
    if !listened && signal != SIGQUIT {
        let _ = signal_hook::low_level::emulate_default_handler(signal);
    }
}

impl Dispatcher {
    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.subscribers.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A subscription to one or more signals: each arrival of one of them can be received once,
/// by [`recv`](Signals::recv) or in a `select!` on [`receiver`](Signals::receiver) (Go's
/// `signal.Notify` channel). While it lives, the signals it lists no longer have their default
/// action (SIGINT and SIGTERM no longer end the process); dropping it gives it back when no
/// other subscription lists them (Go's `signal.Stop`).
///
/// ```
/// use weft::signal::{Signals, SIGUSR1};
/// let signals = Signals::new(&[SIGUSR1])?;
/// // Raised after the subscription exists, so it cannot be missed.
/// unsafe { libc::raise(SIGUSR1) };
/// assert_eq!(weft::run(|| signals.recv()), SIGUSR1);
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// Works from tasks (the task parks; a bound [`Context`](crate::context::Context) or
/// [`JoinHandle::cancel`](crate::JoinHandle::cancel) ends the wait) and from plain threads
/// (the thread blocks). Up to [`PENDING`] arrivals wait for their receiver; more are dropped
/// until it takes some, as with Go.
#[derive(Debug)]
pub struct Signals {
    id: u64,
    rx: Receiver<libc::c_int>,
}

impl Signals {
    /// Subscribes to `signals` (`weft::signal::SIGTERM`, or any `libc::SIG*` number).
    /// SIGQUIT also keeps printing weft's task dump (and exiting) unless `WEFT_SIGQUIT` or
    /// [`RuntimeBuilder::sigquit`](crate::RuntimeBuilder::sigquit) says otherwise.
    ///
    /// # Errors
    /// An empty list; a signal that cannot be caught (SIGKILL, SIGSTOP) or whose handling
    /// would break the process (SIGSEGV, SIGBUS, SIGILL, SIGFPE: weft's stack-overflow report
    /// relies on them); an unknown number; or the dispatcher thread could not start.
    pub fn new(signals: &[libc::c_int]) -> io::Result<Signals> {
        if signals.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "weft: signal: no signal to wait for",
            ));
        }
        for &signal in signals {
            let forbidden = signal_hook::consts::FORBIDDEN.contains(&signal)
                || signal == libc::SIGBUS
                || !(1..=libc::SIGRTMAX()).contains(&signal);
            if forbidden {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("weft: signal: signal {signal} cannot be waited for"),
                ));
            }
        }
        let dispatcher = dispatcher()?;
        let (tx, rx) = chan::bounded(PENDING);
        let id = {
            let mut table = dispatcher.lock();
            table.next_id += 1;
            let id = table.next_id;
            table.entries.push((id, signals.to_vec(), tx));
            id
        };
        let subscription = Signals { id, rx };
        // Invariant 2: the handler is in place before `new` returns (registering one twice is
        // a no-op). On an error the subscription drops and leaves the table.
        for &signal in signals {
            dispatcher.handle.add_signal(signal)?;
        }
        Ok(subscription)
    }

    /// Waits for the next arrival of one of the signals and returns which one: parks the task
    /// (or blocks the thread) until then.
    ///
    /// # Panics
    /// In a task that is cancelled meanwhile, it unwinds like every weft wait.
    pub fn recv(&self) -> libc::c_int {
        self.rx
            .recv()
            .expect("weft: signal: the dispatcher dropped a subscription")
    }

    /// An arrival already there, if any, without waiting.
    pub fn try_recv(&self) -> Option<libc::c_int> {
        self.rx.try_recv().ok()
    }

    /// The channel arrivals come on, for a `select!` arm:
    ///
    /// ```
    /// use std::time::Duration;
    /// use weft::signal::{Signals, SIGHUP};
    /// let reload = Signals::new(&[SIGHUP])?;
    /// weft::run(|| {
    ///     let ticks = weft::time::tick(Duration::from_millis(5));
    ///     weft::select! {
    ///         recv(reload.receiver()) -> _ => println!("reloading"),
    ///         recv(ticks) -> _ => println!("tick"),
    ///     }
    /// });
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn receiver(&self) -> &Receiver<libc::c_int> {
        &self.rx
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        if let Ok(dispatcher) = dispatcher() {
            dispatcher
                .lock()
                .entries
                .retain(|(id, _, _)| *id != self.id);
        }
    }
}

/// Waits until one of `signals` arrives and returns it: the usual last line of a server's
/// `main`, before [`Runtime::shutdown_timeout`](crate::Runtime::shutdown_timeout). Arrivals
/// before the call are not seen: subscribe with [`Signals::new`] first when a signal may come
/// early.
///
/// # Errors
/// As [`Signals::new`].
pub fn wait(signals: &[libc::c_int]) -> io::Result<libc::c_int> {
    Ok(Signals::new(signals)?.recv())
}

/// Waits for SIGINT (Ctrl-C), like `tokio::signal::ctrl_c`.
///
/// # Errors
/// As [`Signals::new`].
pub fn ctrl_c() -> io::Result<()> {
    wait(&[SIGINT]).map(drop)
}
