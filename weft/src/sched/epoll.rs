//! The Linux epoll instance behind each worker's reactor (sched/io.rs): the sources live here,
//! edge-triggered with `EPOLLRDHUP`, each for the directions this worker serves it in, and this instance is itself registered (level-triggered)
//! in the worker's `polling::Poller`, so a sleeping worker wakes for I/O.
//!
//! Owns: one epoll descriptor per worker that has had a source.
//!
//! May call: libc. Called by: `sched/io.rs`.
//!
//! Why an instance of our own rather than adding sockets to the `polling::Poller` directly:
//! `polling` neither asks for nor reports `EPOLLRDHUP`, and without it a short read cannot tell
//! "queue empty" from "queue empty, end of stream next" (io.rs `drained`); and a busy worker's
//! non-blocking poll here is one `epoll_wait`, where `Poller::wait` also re-arms its timer
//! and notifier (four more syscalls).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// One readiness report.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ready {
    pub(crate) key: u64,
    pub(crate) readable: bool,
    pub(crate) writable: bool,
    /// The peer shut down its write half (or the connection is gone): reads end.
    pub(crate) read_closed: bool,
}

pub(crate) struct Epoll {
    fd: OwnedFd,
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

impl Epoll {
    pub(crate) fn new() -> io::Result<Epoll> {
        // SAFETY: plain syscall.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: `epoll_create1` just returned this descriptor; nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Epoll { fd })
    }

    pub(crate) fn as_fd(&self) -> BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }

    /// Adds `fd`, edge-triggered, for the directions in `dirs` (see [`mask`]).
    pub(crate) fn add(&self, fd: BorrowedFd<'_>, key: u64, dirs: [bool; 2]) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, key, dirs)
    }

    /// Changes the directions `fd` (added under `key`) is watched for. Like `add`, it reports
    /// a source that is ready already (edge-triggered, the change re-arms it).
    pub(crate) fn modify(&self, fd: BorrowedFd<'_>, key: u64, dirs: [bool; 2]) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, key, dirs)
    }

    fn ctl(
        &self,
        op: libc::c_int,
        fd: BorrowedFd<'_>,
        key: u64,
        dirs: [bool; 2],
    ) -> io::Result<()> {
        let mut event = libc::epoll_event {
            events: mask(dirs),
            u64: key,
        };
        // SAFETY: both descriptors are open; `event` is a live epoll_event.
        cvt(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd.as_raw_fd(), &mut event) })?;
        Ok(())
    }

    pub(crate) fn delete(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
        // SAFETY: both descriptors are open; DEL ignores the event argument.
        cvt(unsafe {
            libc::epoll_ctl(
                self.fd.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                fd.as_raw_fd(),
                std::ptr::null_mut(),
            )
        })?;
        Ok(())
    }

    /// Collects ready sources into `buf` without blocking; returns the filled part.
    pub(crate) fn poll<'a>(
        &self,
        buf: &'a mut [std::mem::MaybeUninit<libc::epoll_event>],
    ) -> &'a [libc::epoll_event] {
        // SAFETY: `buf` is live and writable for `buf.len()` events; timeout 0 never blocks.
        let n = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len().min(libc::c_int::MAX as usize) as libc::c_int,
                0,
            )
        };
        // EINTR or nothing: the caller polls again later.
        let n = n.max(0) as usize;
        // SAFETY: the kernel initialized the first `n` events.
        unsafe { std::slice::from_raw_parts(buf.as_ptr().cast(), n) }
    }
}

/// The edge-triggered event mask for `dirs` (read: data and read hang-up; write); hang-ups
/// and errors are always reported, and count for both directions.
fn mask(dirs: [bool; 2]) -> u32 {
    let mut events = libc::EPOLLET;
    if dirs[0] {
        events |= libc::EPOLLIN | libc::EPOLLRDHUP;
    }
    if dirs[1] {
        events |= libc::EPOLLOUT;
    }
    events as u32
}

impl From<&libc::epoll_event> for Ready {
    fn from(event: &libc::epoll_event) -> Ready {
        let flags = event.events as libc::c_int;
        let failed = flags & (libc::EPOLLHUP | libc::EPOLLERR) != 0;
        Ready {
            key: event.u64,
            readable: failed || flags & (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLPRI) != 0,
            writable: failed || flags & libc::EPOLLOUT != 0,
            read_closed: failed || flags & libc::EPOLLRDHUP != 0,
        }
    }
}
