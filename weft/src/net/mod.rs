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
//! Reads through io_uring: with `RuntimeBuilder::io_uring` a stream read that would wait is a
//! recv on the worker's ring instead (sched/uring.rs); bytes such a read received and no
//! caller took yet wait in the stream's inbox, which every read of the stream looks at first.
//!
//! May call: `sched::io`, `sched::uring`, `park`, `task` (spawn_blocking). Called by: users.
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
use crate::sched::uring::{self, Recv};
use std::mem::MaybeUninit;

/// Whether this kernel lets the process set up an io_uring, which
/// [`RuntimeBuilder::io_uring`](crate::RuntimeBuilder::io_uring) reads through; the kernel's
/// refusal when not (`ENOSYS` before Linux 5.1, `EPERM` under `kernel.io_uring_disabled` or a
/// seccomp filter). A runtime asked for io_uring where this fails reads through epoll.
pub fn io_uring_available() -> io::Result<()> {
    crate::sched::uring::available()
}

pub(crate) fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "weft: i/o operation timed out")
}

/// What a wait through the worker's io_uring came to.
enum Ring<T> {
    /// The read's result.
    Done(io::Result<T>),
    /// Look again (at the inbox, at `close`'s flag); `waited`: with a syscall, not the hint.
    Again { waited: bool },
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

    /// A stream read into `buf` (sched/uring.rs protocol step 1): what the stream's io_uring
    /// inbox holds comes first; then a `recv`, unless the last read came back short (it
    /// emptied the receive queue: another would only return `EAGAIN`, sched/io.rs
    /// `drained`); then a wait — through the worker's io_uring where the runtime reads
    /// through it (the bytes come with the wake), else for readiness, and a `recv` after it.
    pub(crate) fn do_read(
        &self,
        timeout: Option<Duration>,
        buf: &mut [MaybeUninit<u8>],
    ) -> io::Result<usize> {
        crate::sched::coop::spend(); // sched/coop.rs invariant 2
        let len = buf.len();
        let dir = Direction::Read;
        let inbox = self.readiness.inbox();
        let mut deadline: Option<Instant> = None;
        // After a wait, always try: on a plain thread the wait was `poll(2)`, and nothing
        // clears the hint there (sched/io.rs step 5).
        let mut waited = false;
        loop {
            self.closing.check()?;
            if !inbox.is_quiet() {
                // Orphans first: once none is in flight, the inbox holds all they received
                // (sched/uring.rs protocol step 4).
                if uring::wait_for_orphans(inbox) {
                    continue;
                }
                if let Some(result) = inbox.take(buf) {
                    return result;
                }
            }
            let seen = self.readiness.seq(dir);
            let skip = !waited && self.readiness.is_drained(seen) && reactor::in_task();
            if !skip {
                match sys::recv(self.io.as_fd(), buf) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Ok(n) if n > 0 && n < len => {
                        self.readiness.set_drained(seen);
                        return Ok(n);
                    }
                    result => return result,
                }
            }
            if deadline.is_none() {
                deadline = timeout.and_then(|t| Instant::now().checked_add(t));
            }
            match self.read_through_ring(buf, seen, deadline) {
                Some(Ring::Done(result)) => return result,
                Some(Ring::Again { waited: w }) => waited |= w,
                None => {
                    self.wait(dir, seen, deadline, ParkReason::SocketRead)?;
                    waited = true;
                }
            }
        }
    }

    /// `do_read`'s wait through the running task's worker's io_uring (sched/uring.rs), the
    /// bytes copied into `buf`; `None` where reads do not go through one, or no buffer was
    /// free: wait for readiness instead. Out of line, like the other ring paths here, so that
    /// a read through epoll keeps the frame it had: a parked task's stack is what an idle
    /// connection costs.
    #[inline(never)]
    fn read_through_ring(
        &self,
        buf: &mut [MaybeUninit<u8>],
        seen: u64,
        deadline: Option<Instant>,
    ) -> Option<Ring<usize>> {
        let len = buf.len();
        let inbox = self.readiness.inbox();
        let fd = self.io.as_fd();
        let received = uring::recv(fd, &self.readiness, deadline, |bytes| {
            // Step 4: bytes an orphan left arrived first.
            if inbox.is_full() {
                inbox.push_vec(bytes);
                return None;
            }
            let n = bytes.len().min(len);
            // SAFETY: `n` fits both; the provided buffer and `buf` do not overlap.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.as_mut_ptr().cast(), n) };
            inbox.push(&bytes[n..]);
            Some((n, bytes.len()))
        })?;
        Some(match received {
            Recv::Data(Some((n, got))) => {
                if got < uring::BUFFER {
                    self.readiness.set_drained(seen);
                    return Some(Ring::Done(Ok(n)));
                }
                // The provided buffer was filled: more may wait in the socket.
                let more = match sys::recv(fd, &mut buf[n..]) {
                    Ok(m) if n < len => m,
                    _ => 0,
                };
                if n + more < len {
                    self.readiness.set_drained(seen);
                }
                Ring::Done(Ok(n + more))
            }
            Recv::Data(None) | Recv::Again => Ring::Again { waited: false },
            // Looked at once more, after `close`'s flag, with a `recv` that says so.
            Recv::Eof => Ring::Again { waited: true },
            Recv::Failed(e) => Ring::Done(Err(e)),
            Recv::TimedOut => Ring::Done(Err(timed_out())),
            Recv::NoBuffers => return None,
        })
    }

    /// `wait_readable`'s wait through the worker's io_uring: the bytes go to the stream's
    /// inbox. `None` as for [`Source::read_through_ring`].
    #[inline(never)]
    fn wait_through_ring(&self, seen: u64, deadline: Option<Instant>) -> Option<Ring<()>> {
        let inbox = self.readiness.inbox();
        let received = uring::recv(self.io.as_fd(), &self.readiness, deadline, |bytes| {
            let short = bytes.len() < uring::BUFFER;
            inbox.push_vec(bytes);
            short
        })?;
        Some(match received {
            Recv::Data(short) => {
                if short {
                    self.readiness.set_drained(seen);
                }
                Ring::Done(Ok(()))
            }
            Recv::Again => Ring::Again { waited: false },
            Recv::Eof => Ring::Done(self.closing.check()),
            Recv::Failed(e) => Ring::Done(Err(e)),
            Recv::TimedOut => Ring::Done(Err(timed_out())),
            Recv::NoBuffers => return None,
        })
    }

    /// Waits until a stream read would not block — data, the peer's close or an error is
    /// waiting — holding no buffer. With the `drained` hint set (the last read emptied the
    /// queue) a task waits for the next event without a syscall, as [`Source::do_read`] would;
    /// otherwise one byte is peeked (`MSG_PEEK`: nothing is consumed). A wake that turns out
    /// spurious only makes the next read wait again, with its buffer. Through an io_uring, the
    /// bytes come with the wake and wait in the stream's inbox for the read.
    pub(crate) fn wait_readable(&self, timeout: Option<Duration>) -> io::Result<()> {
        let dir = Direction::Read;
        let inbox = self.readiness.inbox();
        let mut deadline: Option<Instant> = None;
        loop {
            self.closing.check()?;
            if !inbox.is_quiet() {
                if uring::wait_for_orphans(inbox) {
                    continue;
                }
                if inbox.is_full() {
                    return Ok(());
                }
            }
            let seen = self.readiness.seq(dir);
            if !(self.readiness.is_drained(seen) && reactor::in_task()) {
                match sys::peek_byte(self.io.as_fd()) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    result => return result,
                }
            }
            if deadline.is_none() {
                deadline = timeout.and_then(|t| Instant::now().checked_add(t));
            }
            match self.wait_through_ring(seen, deadline) {
                Some(Ring::Done(result)) => return result,
                Some(Ring::Again { .. }) => continue,
                None => {
                    self.wait(dir, seen, deadline, ParkReason::SocketRead)?;
                    // `close` wakes waiters (and its shutdown makes the socket readable): say so.
                    return self.closing.check();
                }
            }
        }
    }

    /// The bytes an io_uring read left in the stream's inbox, taken into `buf` (a read that
    /// must see them before the socket's: `read_vectored`); `None` if it holds none.
    pub(crate) fn take_inbox(&self, buf: &mut [MaybeUninit<u8>]) -> Option<io::Result<usize>> {
        self.settled_inbox()?.take(buf)
    }

    /// The bytes an io_uring read left in the stream's inbox, copied into `buf` without
    /// taking them (`peek`: the next read returns them first); `None` if it holds none.
    pub(crate) fn peek_inbox(&self, buf: &mut [u8]) -> Option<usize> {
        self.settled_inbox()?.peek(buf)
    }

    /// The stream's inbox once no orphaned read of it is in flight (those could still bring
    /// bytes older than the socket's, protocol step 4), if it holds something then.
    fn settled_inbox(&self) -> Option<reactor::Inbox<'_>> {
        let inbox = self.readiness.inbox();
        if inbox.is_quiet() {
            return None;
        }
        uring::wait_for_orphans(inbox);
        inbox.is_full().then_some(inbox)
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
