//! Sockets whose blocking calls park the task, not the worker.
//!
//! [`TcpListener`], [`TcpStream`] and [`UdpSocket`] look like std's: `read`, `write`, `accept`
//! and `connect` block. In a weft task, blocking means parking: the task waits for readiness
//! from its worker's netpoller (`sched/io.rs`) while the worker runs other tasks. On a plain
//! OS thread they block the thread, like std sockets (the descriptor is non-blocking either
//! way; a plain thread waits in `poll(2)`).
//!
//! ```no_run
//! use std::io::{Read, Write};
//! weft::run(|| {
//!     let listener = weft::net::TcpListener::bind("127.0.0.1:7000").unwrap();
//!     for stream in listener.incoming() {
//!         let mut stream = stream.unwrap();
//!         weft::spawn(move || {
//!             let mut buf = [0; 16 * 1024];
//!             while let Ok(n @ 1..) = stream.read(&mut buf) {
//!                 if stream.write_all(&buf[..n]).is_err() {
//!                     break;
//!                 }
//!             }
//!         });
//!     }
//! });
//! ```
//!
//! Owns: `Source`, a non-blocking socket plus its readiness, which holds its (lazy)
//! registration with the poller of the worker whose task waits on it, moved when a task of
//! another worker or runtime waits (sched/io.rs protocol step 3).
//!
//! Invariants:
//! 1. Every socket held by a `Source` is in non-blocking mode.
//! 2. A `Source` deregisters its descriptor before closing it (sched/io.rs invariant 2): the
//!    `Drop` impl deregisters, then the socket field drops.
//! 3. Name resolution that needs the system resolver runs on the blocking pool
//!    (`task::spawn_blocking`), never on a worker (net/resolve.rs).
//! 4. Nothing in a `Source` belongs to one worker, runtime or thread: the registration moves
//!    with the waiter (sched/io.rs step 3), a plain thread waits in `poll(2)` and ignores the
//!    `drained` hint (step 5), and timeouts are deadlines on the monotonic clock.
//!
//! May call: `sched::io`, `park`, `task` (spawn_blocking). Called by: users.
//!
//! Closing from elsewhere: [`TcpListener::close`], [`TcpStream::close`] and
//! [`UdpSocket::close`] take `&self`, so a handle shared (an `Arc`) with the task blocked in
//! `accept`, `read` or `write` can stop it: the blocked call returns an error for which
//! [`is_closed`] is true (Go's `net.ErrClosed`), see `net/close.rs`.
//!
//! Timeouts: a read or write timeout that expires returns `ErrorKind::TimedOut` (std returns
//! `WouldBlock` on Unix for its `SO_RCVTIMEO`); the timeout is per handle, not shared with
//! clones as std's socket option is.

mod close;
mod resolve;
mod sys;
mod tcp;
mod udp;

pub use close::{is_closed, Closed};
pub use resolve::{lookup_host, ToSocketAddrs};
pub use tcp::{Incoming, TcpListener, TcpStream};
pub use udp::UdpSocket;

use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::park::ParkReason;
use crate::sched::io::{self as reactor, Direction, Readiness};

pub(crate) fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "weft: i/o operation timed out")
}

/// A non-blocking socket and the machinery to wait on it (module invariants 1–2).
pub(crate) struct Source<T: AsFd> {
    readiness: Arc<Readiness>,
    /// Set by `close` (net/close.rs invariant 1).
    closing: close::Closing,
    /// Declared last: dropped after `Drop::drop` deregistered it.
    io: T,
}

impl<T: AsFd> Source<T> {
    /// Wraps `io`, which must already be non-blocking (invariant 1).
    pub(crate) fn new(io: T) -> Source<T> {
        // interpose/mod.rs invariant 2: interposed calls on it pass straight through.
        #[cfg(feature = "interpose")]
        crate::interpose::mark_weft(io.as_fd().as_raw_fd());
        Source {
            readiness: Arc::default(),
            closing: close::Closing::default(),
            io,
        }
    }

    pub(crate) fn get_ref(&self) -> &T {
        &self.io
    }

    /// Runs `op` until it does not return `WouldBlock`, waiting for `dir` readiness between
    /// tries; gives up with `TimedOut` after `timeout` (sched/io.rs protocol steps 1–3).
    pub(crate) fn do_io<R>(
        &self,
        dir: Direction,
        reason: ParkReason,
        timeout: Option<Duration>,
        mut op: impl FnMut(&T) -> io::Result<R>,
    ) -> io::Result<R> {
        crate::sched::coop::spend(); // sched/coop.rs invariant 2
        let mut deadline: Option<Instant> = None;
        loop {
            self.closing.check()?;
            let seen = self.readiness.seq(dir);
            match op(&self.io) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                result => return result,
            }
            if deadline.is_none() {
                deadline = timeout.and_then(|t| Instant::now().checked_add(t));
            }
            self.wait(dir, seen, deadline, reason)?;
        }
    }

    /// [`Source::do_io`] for stream reads of up to `len` bytes, without the `EAGAIN` read
    /// after a short one: a read that returns `0 < n < len` emptied the receive queue, so the
    /// next read waits for readiness first (sched/io.rs `drained`).
    pub(crate) fn do_read(
        &self,
        timeout: Option<Duration>,
        len: usize,
        mut op: impl FnMut(&T) -> io::Result<usize>,
    ) -> io::Result<usize> {
        crate::sched::coop::spend(); // sched/coop.rs invariant 2
        let dir = Direction::Read;
        let reason = ParkReason::SocketRead;
        let mut deadline: Option<Instant> = None;
        // After a wait, always try: on a plain thread the wait was `poll(2)`, and nothing
        // clears the hint there (sched/io.rs step 5).
        let mut waited = false;
        loop {
            self.closing.check()?;
            let seen = self.readiness.seq(dir);
            let skip = !waited && self.readiness.is_drained(dir, seen) && reactor::in_task();
            if !skip {
                match op(&self.io) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Ok(n) if n > 0 && n < len => {
                        self.readiness.set_drained(dir, seen);
                        return Ok(n);
                    }
                    result => return result,
                }
            }
            if deadline.is_none() {
                deadline = timeout.and_then(|t| Instant::now().checked_add(t));
            }
            self.wait(dir, seen, deadline, reason)?;
            waited = true;
        }
    }

    /// Waits until a stream read would not block — data, the peer's close or an error is
    /// waiting — holding no buffer. With the `drained` hint set (the last read emptied the
    /// queue) a task waits for the next event without a syscall, as [`Source::do_read`] would;
    /// otherwise one byte is peeked (`MSG_PEEK`: nothing is consumed). A wake that turns out
    /// spurious only makes the next read wait again, with its buffer.
    pub(crate) fn wait_readable(&self, timeout: Option<Duration>) -> io::Result<()> {
        let dir = Direction::Read;
        let mut deadline: Option<Instant> = None;
        loop {
            self.closing.check()?;
            let seen = self.readiness.seq(dir);
            if !(self.readiness.is_drained(dir, seen) && reactor::in_task()) {
                match sys::peek_byte(self.io.as_fd()) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    result => return result,
                }
            }
            if deadline.is_none() {
                deadline = timeout.and_then(|t| Instant::now().checked_add(t));
            }
            self.wait(dir, seen, deadline, ParkReason::SocketRead)?;
            // `close` wakes waiters (and its shutdown makes the socket readable): say so.
            return self.closing.check();
        }
    }

    /// Closes the socket for every user of this handle (net/close.rs): operations fail with
    /// [`Closed`] from now on, and those waiting — parked tasks, plain threads in `poll(2)` —
    /// wake and fail with it. The descriptor stays open until the handle drops (invariant 2
    /// of close.rs). A second call does nothing.
    pub(crate) fn close(&self) {
        if !self.closing.close() {
            return;
        }
        // Not connected (a listener, a stream never connected or already shut down) is
        // fine: the flag and the wake below are what the waiters see.
        let _ = sys::shutdown_both(self.io.as_fd());
        self.readiness.wake_all();
    }

    /// Whether `close` was called.
    pub(crate) fn is_closed(&self) -> bool {
        self.closing.check().is_err()
    }

    /// Waits for `dir` readiness: a task parks (sched/io.rs steps 2–4), a plain thread blocks
    /// in `poll(2)` on the descriptor (step 5).
    fn wait(
        &self,
        dir: Direction,
        seen: u64,
        deadline: Option<Instant>,
        reason: ParkReason,
    ) -> io::Result<()> {
        // SAFETY: `io` is the source's descriptor, and `Drop` deregisters before `io` (and so
        // the descriptor) is dropped (invariant 2).
        let parked = unsafe {
            self.readiness
                .wait(self.io.as_fd(), dir, seen, deadline, reason)
        };
        match parked {
            Some(result) => result,
            None => sys::poll_fd(self.io.as_fd().as_raw_fd(), dir, deadline),
        }
    }
}

impl<T: AsFd> Drop for Source<T> {
    fn drop(&mut self) {
        self.readiness.deregister(self.io.as_fd());
    }
}

/// A per-handle timeout in nanoseconds; 0 means none.
#[derive(Default)]
pub(crate) struct Timeout(AtomicU64);

impl Timeout {
    pub(crate) fn get(&self) -> Option<Duration> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            nanos => Some(Duration::from_nanos(nanos)),
        }
    }

    /// std's rules: `Some(0)` is an error.
    pub(crate) fn set(&self, timeout: Option<Duration>) -> io::Result<()> {
        let nanos = match timeout {
            None => 0,
            Some(d) if d.is_zero() => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "cannot set a 0 duration timeout",
                ))
            }
            Some(d) => d.as_nanos().clamp(1, u64::MAX as u128) as u64,
        };
        self.0.store(nanos, Ordering::Relaxed);
        Ok(())
    }
}

/// Grows this process's descriptor table now to hold at least `n` descriptors (up to the
/// soft `RLIMIT_NOFILE`, see [`raise_fd_limit`]), so that opening thousands of sockets later
/// does not stall.
///
/// Linux grows the table by doubling as it fills, and in a multi-threaded process each
/// doubling waits for an RCU grace period inside the `socket(2)` or `accept(2)` that needed
/// it: milliseconds on a VM, on a worker thread, and the monitor rightly reports that worker
/// as blocked in the kernel. A server that expects many connections calls this once at
/// start, as Go's runtime cannot; the table costs about 8 bytes of kernel memory per entry.
///
/// # Errors
/// As `getrlimit(2)`, `eventfd(2)` and `fcntl(2)`.
pub fn reserve_descriptors(n: usize) -> io::Result<()> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a live rlimit for the kernel to fill in.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let wanted = (n as u64).min(limit.rlim_cur);
    if wanted == 0 {
        return Ok(());
    }
    // The table grows to the power of two that holds the highest number in use: a
    // descriptor numbered `wanted - 1`, opened and closed at once, grows it that far.
    let high = libc::c_int::try_from(wanted - 1).unwrap_or(libc::c_int::MAX);
    // SAFETY: a new descriptor of our own, closed below.
    let probe = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    if probe < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: duplicates our own eventfd onto the lowest free number ≥ `high`; both copies
    // are closed here and nothing else sees them.
    unsafe {
        let copy = libc::fcntl(probe, libc::F_DUPFD_CLOEXEC, high);
        let result = if copy < 0 {
            Err(io::Error::last_os_error())
        } else {
            libc::close(copy);
            Ok(())
        };
        libc::close(probe);
        result
    }
}

/// Raises this process's soft limit on open descriptors (`RLIMIT_NOFILE`) to its hard limit
/// and returns the new soft limit: a server holds one descriptor per connection, and the
/// usual soft limit is 1024. Go does this at startup; weft leaves it to the program.
///
/// # Errors
/// As `getrlimit(2)` and `setrlimit(2)`.
pub fn raise_fd_limit() -> io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a live rlimit for the kernel to fill in.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if limit.rlim_cur < limit.rlim_max {
        limit.rlim_cur = limit.rlim_max;
        // SAFETY: as above; raising the soft limit up to the hard one is always allowed.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(limit.rlim_cur)
}

#[cfg(test)]
mod tests {
    /// The descriptor table's size, as `/proc/self/status` reports it.
    fn fd_table_size() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("FDSize:")).unwrap();
        line["FDSize:".len()..].trim().parse().unwrap()
    }

    #[test]
    fn reserve_descriptors_grows_the_table_at_once() {
        let soft = super::raise_fd_limit().unwrap();
        let wanted = 8192.min(soft);
        super::reserve_descriptors(wanted as usize).unwrap();
        let size = fd_table_size();
        assert!(size >= wanted, "FDSize {size} after reserving {wanted}");
        // Within the limit: asking for more than the soft limit is not an error.
        super::reserve_descriptors(soft as usize + 1).unwrap();
    }
}
