//! A tokio runtime on each weft worker (feature `tokio`, `RuntimeBuilder::tokio_on_workers`):
//! a current-thread runtime the worker drives itself, so that the futures its tasks poll
//! through `weft::tokio::block_on` are woken on the worker's own thread.
//!
//! Owns: `LocalTokio`, a worker's runtime and the registration of the worker's poller
//! (sched/epoll.rs) in that runtime's reactor.
//!
//! Invariants:
//! 1. Only the worker's thread drives the runtime (`Runtime::block_on`), and only between
//!    tasks: when it sleeps ([`LocalTokio::wait`], instead of its own `epoll_wait`) and while
//!    busy at its look every `INJECTOR_INTERVAL` picks, at most once per [`TURN_INTERVAL`]
//!    ([`LocalTokio::turn`]), so what tokio runs there (wakers, the tasks futures spawn:
//!    connection tasks) never runs inside a weft task.
//! 2. A sleep in tokio's reactor ends for everything that ends the worker's own sleep: the
//!    worker's poller is registered in it, so a socket of weft's, a notify from another
//!    thread (idle.rs step 2) and, through `on_thread_park`, work queued on the worker by
//!    tokio's own callbacks (a woken task) all end it; its timeout is the worker's next
//!    deadline.
//! 3. The runtime is dropped on its worker's thread after the worker's tasks have ended
//!    (worker.rs, `shut_down`), before the poller it registered closes.
//!
//! May call: tokio, the worker's poller and queues (through `current_worker`). Called by:
//! worker.rs (`idle`, the busy look, `shut_down`), `weft::tokio` (the handle, through
//! `current_tokio_handle`).
//!
//! Why: with one tokio runtime of its own threads, every wake of a bridged future crosses
//! threads — tokio's reactor thread fires the waker and wakes the weft worker (a futex or
//! eventfd write, and a sleeping vCPU's wake-up, ≈35–40 µs in this VM) — where a tokio task
//! is woken on the thread that polled the event. Here the worker polls the events itself.
//! The price: what a runtime's I/O resources are bound to is the worker that created them; a
//! task on another worker using them (a shared connection pool) is woken across threads, and
//! waits while that worker runs a task that never parks (the monitor reports such a worker).

use std::cell::Cell;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use ::tokio::io::unix::AsyncFd;
use ::tokio::io::Interest;
use ::tokio::runtime::{Handle, Runtime};

use super::runtime::Remote;
use super::worker::current_worker;

/// How often a busy worker gives its runtime a turn, at most, in nanoseconds of the worker's
/// clock. A turn (an `epoll_wait` and tokio's timer processing, 1–2 µs) at every look, every
/// 61 picks, made a rendezvous ping-pong on a worker that had used the bridge once 10–12 %
/// slower (142 → 157 ns a round trip); this bounds what a busy worker adds to the wake of a
/// future bound to it instead.
pub(super) const TURN_INTERVAL: u64 = 100_000;

/// A worker's poller, borrowed: the worker's `Remote` owns and closes it (invariant 3).
struct PollerFd(RawFd);

impl AsRawFd for PollerFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// A worker's tokio runtime (module doc).
pub(super) struct LocalTokio {
    /// The worker's poller in the runtime's reactor (invariant 2). Dropped before the
    /// runtime (field order), which deregisters it.
    poller: AsyncFd<PollerFd>,
    runtime: Runtime,
    /// A timer in the worker's poller that ends a sleep at its deadline, to the nanosecond
    /// as the worker's own `epoll_pwait2` would (tokio's timers tick in milliseconds, which
    /// would make a precise sleep of weft's up to a millisecond late).
    timer: OwnedFd,
    /// `timer` is set to go off.
    armed: Cell<bool>,
    /// The worker's clock at the last busy turn.
    turned_at: Cell<u64>,
}

impl LocalTokio {
    pub(super) fn new(remote: &Remote) -> io::Result<LocalTokio> {
        // SAFETY: plain syscall.
        let timer = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if timer < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `timerfd_create` just returned this descriptor; nothing else owns it.
        let timer = unsafe { OwnedFd::from_raw_fd(timer) };
        remote.io.add_notifier(timer.as_fd())?;
        let runtime = ::tokio::runtime::Builder::new_current_thread()
            .enable_all()
            // Invariant 2: work queued on this worker by tokio's callbacks (a waker of a
            // task of the worker, a spawn from a tokio task) ends the sleep the runtime is
            // about to take. Only that: other threads' pushes notify by themselves, and
            // `has_work`'s wider look (its shutdown flag among them) would turn the 10 ms
            // waits of `shut_down` into a spin.
            .on_thread_park(|| {
                if let Some(worker) = current_worker() {
                    if worker.has_local_work() {
                        worker.remote.notify();
                    }
                }
            })
            .build()?;
        let poller = {
            let _entered = runtime.enter();
            // Deprecated in newer tokio for its unchecked descriptor, for
            // `register_with_interest` (unsafe, tokio ≥ 1.52); the descriptor outlives the
            // registration here (invariant 3), as that function's contract asks.
            #[allow(deprecated)]
            AsyncFd::with_interest(PollerFd(remote.io.poller_fd()), Interest::READABLE)?
        };
        Ok(LocalTokio {
            poller,
            runtime,
            timer,
            armed: Cell::new(false),
            turned_at: Cell::new(0),
        })
    }

    pub(super) fn handle(&self) -> &Handle {
        self.runtime.handle()
    }

    /// Sleeps in the runtime's reactor until the worker's poller is ready (I/O, a notify) or
    /// `timeout` passes, running the runtime's tasks meanwhile; then collects the poller's
    /// events as `io::wait` does. Returns whether it ended before the timeout.
    pub(super) fn wait(&self, remote: &Remote, timeout: Option<Duration>) -> bool {
        let deadline = timeout.map(|t| Instant::now() + t);
        match timeout {
            // Not zero, which would disarm it.
            Some(timeout) => self.arm(timeout.max(Duration::from_nanos(1))),
            None if self.armed.get() => self.arm(Duration::ZERO),
            None => {}
        }
        self.runtime.block_on(async {
            match self.poller.readable().await {
                Ok(mut guard) => guard.clear_ready(),
                Err(e) => panic!("weft: the worker's poller failed in tokio's reactor: {e}"),
            }
        });
        super::io::poll_now(remote);
        deadline.is_none_or(|deadline| Instant::now() < deadline)
    }

    /// Sets the timer to go off after `after`; `Duration::ZERO` disarms it.
    fn arm(&self, after: Duration) {
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: after.as_secs().min(libc::time_t::MAX as u64) as libc::time_t,
                tv_nsec: after.subsec_nanos() as _,
            },
        };
        // SAFETY: `timer` is an open timerfd; `spec` is live; no old value asked for.
        let r = unsafe {
            libc::timerfd_settime(self.timer.as_raw_fd(), 0, &spec, std::ptr::null_mut())
        };
        debug_assert_eq!(r, 0, "timerfd_settime: {}", io::Error::last_os_error());
        self.armed.set(after != Duration::ZERO);
    }

    /// Runs what the runtime has ready and polls its reactor without blocking, unless the
    /// last such turn was less than [`TURN_INTERVAL`] before `clock` (the worker's clock): a
    /// busy worker's look (invariant 1).
    pub(super) fn turn(&self, clock: u64) {
        if clock.wrapping_sub(self.turned_at.get()) < TURN_INTERVAL {
            return;
        }
        self.turned_at.set(clock);
        self.runtime.block_on(::tokio::task::yield_now());
    }
}
