//! Each worker's poller: one Linux epoll instance holding the worker's I/O sources
//! (edge-triggered with `EPOLLRDHUP`, each for the directions this worker serves it in,
//! sched/io.rs) and an eventfd that other threads write to wake the worker ([`Epoll::notify`]).
//! A sleeping worker waits here with a timeout for its next timer; a busy one polls without
//! blocking.
//!
//! Owns: one epoll descriptor and one eventfd per worker.
//!
//! Invariants:
//! 1. The eventfd is in the instance edge-triggered under [`NOTIFY_KEY`], a key no source
//!    gets (io.rs keys), and is never read: each `write` is one more edge, reported once by
//!    the next wait (or poll) after it, which is the sticky notification the idle protocol
//!    needs (idle.rs: a notify between "about to sleep" and the wait ends that wait). Its
//!    counter would need 2^64 − 1 notifies to fill.
//! 2. A timed wait is one `epoll_pwait2` (nanosecond timeout, Linux ≥ 5.11). The kernel
//!    wakes it up to the thread's timer slack late (sched/runtime.rs `KERNEL_TIMER_SLACK`,
//!    10 µs, or the runtime's timer slack when that is less, or 0.1 % of the timeout when
//!    that is more), which batches the wakes of timers
//!    that fall close together; so a wait longer than [`LONG_WAIT`] asks for 0.1 % less and
//!    the worker, woken that little early, waits again for the rest with the short slack.
//!    Where `epoll_pwait2` is missing (ENOSYS) or refused (EPERM from a seccomp filter),
//!    `epoll_wait` with the timeout rounded up to a whole millisecond: timers are then up to
//!    a millisecond late.
//!
//! May call: libc. Called by: `sched/io.rs`.
//!
//! Why by hand rather than `polling::Poller`: its wait re-arms a timerfd and its notifier on
//! every call (`timerfd_settime` plus two `epoll_ctl`, then `epoll_wait` and a read), and a
//! worker that sleeps between timers a few microseconds apart spent a third of its CPU
//! there (a million sleepers waking over 4 s, perf); `polling` neither asks for nor reports
//! `EPOLLRDHUP`, and without it a short read cannot tell "queue empty" from "queue empty,
//! end of stream next" (io.rs `drained`). One instance, rather than the sources' instance
//! nested in the poller's, also spares a level of wakeups.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The key of the notify eventfd (invariant 1).
pub(crate) const NOTIFY_KEY: u64 = u64::MAX;

/// Waits longer than this ask for 0.1 % less (invariant 2): beyond it the kernel's slack
/// estimate (0.1 % of the timeout) exceeds any timer slack of 1 µs or more. The price is a
/// second, short wait after each long one.
const LONG_WAIT: Duration = Duration::from_millis(1);

/// Set once `epoll_pwait2` failed with ENOSYS or EPERM (invariant 2).
static NO_PWAIT2: AtomicBool = AtomicBool::new(false);

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
    /// Invariant 1.
    notifier: OwnedFd,
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
        // SAFETY: plain syscall.
        let notifier = cvt(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
        // SAFETY: `eventfd` just returned this descriptor; nothing else owns it.
        let notifier = unsafe { OwnedFd::from_raw_fd(notifier) };
        let mut event = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLET) as u32,
            u64: NOTIFY_KEY,
        };
        // SAFETY: both descriptors are open; `event` is a live epoll_event.
        cvt(unsafe {
            libc::epoll_ctl(
                fd.as_raw_fd(),
                libc::EPOLL_CTL_ADD,
                notifier.as_raw_fd(),
                &mut event,
            )
        })?;
        Ok(Epoll { fd, notifier })
    }

    /// The epoll instance's descriptor, owned by `self`.
    #[cfg(feature = "tokio")]
    pub(crate) fn raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }

    /// Wakes the worker's current or next wait (invariant 1); any thread.
    pub(crate) fn notify(&self) {
        let one: u64 = 1;
        // A raw system call, not libc's `write`: that may be the interposer's (interpose/mod.rs
        // invariant 2), and this is called from tasks.
        // SAFETY: writes 8 live bytes to our eventfd. It cannot fail while open (invariant
        // 1: the counter does not fill), and it is open while `self` lives.
        unsafe {
            libc::syscall(
                libc::SYS_write,
                self.notifier.as_raw_fd(),
                (&one as *const u64).cast::<libc::c_void>(),
                std::mem::size_of::<u64>(),
            )
        };
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

    /// Collects ready sources (and a notify, [`NOTIFY_KEY`]) into `buf` without blocking;
    /// returns the filled part.
    pub(crate) fn poll<'a>(
        &self,
        buf: &'a mut [std::mem::MaybeUninit<libc::epoll_event>],
    ) -> &'a [libc::epoll_event] {
        self.wait(buf, Some(Duration::ZERO))
    }

    /// Waits up to `timeout` (`None`: until an event) for ready sources or a notify, and
    /// collects them into `buf`; returns the filled part, empty at the timeout or on a
    /// signal. May return early by 0.1 % of a long timeout (invariant 2).
    pub(crate) fn wait<'a>(
        &self,
        buf: &'a mut [std::mem::MaybeUninit<libc::epoll_event>],
        timeout: Option<Duration>,
    ) -> &'a [libc::epoll_event] {
        let epfd = self.fd.as_raw_fd();
        let events = buf.as_mut_ptr().cast::<libc::epoll_event>();
        let max = buf.len().min(libc::c_int::MAX as usize) as libc::c_int;
        let n = match timeout {
            // SAFETY: `buf` is live and writable for `max` events.
            None => unsafe { libc::epoll_wait(epfd, events, max, -1) },
            // SAFETY: as above; timeout 0 never blocks.
            Some(Duration::ZERO) => unsafe { libc::epoll_wait(epfd, events, max, 0) },
            Some(t) => {
                let t = if t > LONG_WAIT { t - t / 1000 } else { t };
                let mut n = -1;
                if !NO_PWAIT2.load(Ordering::Relaxed) {
                    let ts = libc::timespec {
                        tv_sec: t.as_secs().min(libc::time_t::MAX as u64) as libc::time_t,
                        tv_nsec: t.subsec_nanos() as _,
                    };
                    // SAFETY: `buf` as above, `ts` a live timespec, no signal mask.
                    n = unsafe {
                        libc::syscall(
                            libc::SYS_epoll_pwait2,
                            epfd,
                            events,
                            max,
                            &ts as *const libc::timespec,
                            std::ptr::null::<libc::sigset_t>(),
                            0usize,
                        )
                    } as libc::c_int;
                    if n < 0 {
                        let e = io::Error::last_os_error().raw_os_error();
                        if matches!(e, Some(libc::ENOSYS) | Some(libc::EPERM)) {
                            NO_PWAIT2.store(true, Ordering::Relaxed);
                        }
                    }
                }
                if NO_PWAIT2.load(Ordering::Relaxed) {
                    let ms = t.as_nanos().div_ceil(1_000_000);
                    let ms = ms.min(libc::c_int::MAX as u128) as libc::c_int;
                    // SAFETY: as above.
                    n = unsafe { libc::epoll_wait(epfd, events, max, ms) };
                }
                n
            }
        };
        // EINTR or nothing: the caller looks again later.
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
