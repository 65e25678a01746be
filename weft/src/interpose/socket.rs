//! The interposed socket calls: data transfer, `accept`, `connect` and `poll`.
//!
//! Owns: nothing; each function works on the caller's descriptor and buffers.
//!
//! Invariants (beyond interpose/mod.rs 1–4):
//! 1. A data call in a task tries once with `MSG_DONTWAIT` added. Only when that would block
//!    does it ask whether the program sees the descriptor as blocking (`user_blocking`); if
//!    not, `EAGAIN` goes back as the kernel returned it.
//! 2. A blocking stream send, and a receive with `MSG_WAITALL`, go on until every byte is done,
//!    as the kernel's blocking call does; if they then fail or time out, the bytes done so far
//!    are the result ("partial" as the kernel reports it).
//! 3. `read`/`write`/`readv`/`writev` act only on sockets: a first `ENOTSOCK` marks the
//!    descriptor `OTHER` (when the table has its entry) and the real call follows; `OTHER`
//!    descriptors pass straight through from then on.
//!
//! May call: `interpose` (mod.rs helpers), `real`, `fds`, `sched::coop`, `time`.
//! Called by: any code in the process calling these libc functions.

use std::time::{Duration, Instant};

use libc::{c_int, c_void, iovec, msghdr, nfds_t, pollfd, size_t, sockaddr, socklen_t, ssize_t};

use super::{active, deadline_after, errno, fail, fds, guard, real, retry_parked, set_errno};
use super::{socket_timeout, user_blocking};
use crate::sched::io::Direction;

/// Linux's limit on iovecs per call (`UIO_MAXIOV`).
const IOV_MAX: c_int = 1024;

/// Whether a data call on `fd` goes straight to libc: not in a task (mod.rs invariant 1), a
/// `weft::net` socket, or already non-blocking by its flags.
#[inline]
fn passes(fd: c_int, flags: c_int) -> bool {
    !active() || flags & libc::MSG_DONTWAIT != 0 || fds::kind(fd) == fds::WEFT
}

/// The body of a data call in a task: `op(done)` transfers the part from byte `done` on
/// without blocking. Parks while the program's blocking descriptor would block, until `all`
/// (invariant 2) or some bytes are done, the deadline of the direction's `SO_*TIMEO` passes,
/// or it fails.
fn transfer(
    fd: c_int,
    dir: Direction,
    len: usize,
    all: bool,
    mut op: impl FnMut(usize) -> isize,
) -> isize {
    guard(fail, || {
        crate::sched::coop::spend(); // sched/coop.rs invariant 2, as in `weft::net`
        let saved = errno();
        let r = op(0);
        if r < 0 && errno() != libc::EAGAIN {
            return r;
        }
        let partial = r > 0 && all && (r as usize) < len;
        if r >= 0 && !partial {
            set_errno(saved);
            return r;
        }
        if !user_blocking(fd) {
            set_errno(if r < 0 { libc::EAGAIN } else { saved });
            return r;
        }
        let option = match dir {
            Direction::Read => libc::SO_RCVTIMEO,
            Direction::Write => libc::SO_SNDTIMEO,
        };
        let deadline = deadline_after(socket_timeout(fd, option));
        let mut done = r.max(0) as usize;
        loop {
            let r = retry_parked(fd, dir, deadline, || op(done));
            if r < 0 {
                if done > 0 {
                    set_errno(saved);
                    return done as isize;
                }
                return r;
            }
            done += r as usize;
            // `r == 0` with bytes left is end of stream (a receive).
            if !all || done >= len || r == 0 {
                set_errno(saved);
                return done as isize;
            }
        }
    })
}

/// `buf` advanced by `done` bytes.
fn at<T>(buf: *const T, done: usize) -> *mut c_void {
    buf.cast::<u8>().wrapping_add(done).cast_mut().cast()
}

/// `iov` without its first `done` bytes.
///
/// # Safety
/// `iov` must point at `n` valid iovecs.
unsafe fn advanced(iov: *const iovec, n: usize, mut done: usize) -> Vec<iovec> {
    // SAFETY: the caller's contract.
    let iov = unsafe { std::slice::from_raw_parts(iov, n) };
    let mut out = Vec::with_capacity(n);
    for v in iov {
        if done >= v.iov_len {
            done -= v.iov_len;
            continue;
        }
        out.push(iovec {
            iov_base: at(v.iov_base, done),
            iov_len: v.iov_len - done,
        });
        done = 0;
    }
    out
}

/// The total length of `n` iovecs.
///
/// # Safety
/// `iov` must point at `n` valid iovecs.
unsafe fn total(iov: *const iovec, n: usize) -> usize {
    // SAFETY: the caller's contract.
    let iov = unsafe { std::slice::from_raw_parts(iov, n) };
    iov.iter()
        .fold(0usize, |sum, v| sum.saturating_add(v.iov_len))
}

/// Invariant 3, for `read`/`write`/`readv`/`writev`: `on_socket()` (a [`transfer`]) in a task on
/// a descriptor not known to be something else; `real()` otherwise, and when `on_socket`
/// fails with `ENOTSOCK` (then the descriptor is marked `OTHER`).
fn socket_or(fd: c_int, on_socket: impl FnOnce() -> isize, real: impl FnOnce() -> isize) -> isize {
    if !active() || fds::kind(fd) >= fds::OTHER {
        return real();
    }
    let saved = errno();
    let r = on_socket();
    if r < 0 && errno() == libc::ENOTSOCK {
        fds::set_kind(fd, fds::OTHER);
        set_errno(saved);
        return real();
    }
    r
}

/// A message header for the iovecs `iov[..n]`, no address, no control data.
fn iov_msg(iov: *const iovec, n: usize) -> msghdr {
    // SAFETY: an all-zero msghdr is valid (no address, no control data).
    let mut msg: msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.cast_mut();
    msg.msg_iovlen = n as _;
    msg
}

/// # Safety
/// As `read(2)`.
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, len: size_t) -> ssize_t {
    socket_or(
        fd,
        || {
            transfer(fd, Direction::Read, len, false, |done| {
                // SAFETY: the caller's buffer, from byte `done`.
                unsafe { real::recv(fd, at(buf, done), len - done, libc::MSG_DONTWAIT) }
            })
        },
        // SAFETY: the caller's contract.
        || unsafe { real::read(fd, buf, len) },
    )
}

/// # Safety
/// As `write(2)`.
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, len: size_t) -> ssize_t {
    socket_or(
        fd,
        || {
            transfer(fd, Direction::Write, len, true, |done| {
                // SAFETY: the caller's buffer, from byte `done`.
                unsafe { real::send(fd, at(buf, done), len - done, libc::MSG_DONTWAIT) }
            })
        },
        // SAFETY: the caller's contract.
        || unsafe { real::write(fd, buf, len) },
    )
}

/// # Safety
/// As `readv(2)`.
#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    // SAFETY: the caller's contract.
    let real_readv = || unsafe { real::readv(fd, iov, n) };
    if !(0..=IOV_MAX).contains(&n) {
        return real_readv();
    }
    let on_socket = || {
        // SAFETY: the caller's contract: `iov` holds `n` iovecs.
        let len = unsafe { total(iov, n as usize) };
        transfer(fd, Direction::Read, len, false, |_| {
            let mut msg = iov_msg(iov, n as usize);
            // SAFETY: `msg` describes the caller's buffers.
            unsafe { real::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT) }
        })
    };
    socket_or(fd, on_socket, real_readv)
}

/// # Safety
/// As `writev(2)`.
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t {
    // SAFETY: the caller's contract.
    let real_writev = || unsafe { real::writev(fd, iov, n) };
    if !(0..=IOV_MAX).contains(&n) {
        return real_writev();
    }
    let on_socket = || {
        // SAFETY: the caller's contract: `iov` holds `n` iovecs.
        let len = unsafe { total(iov, n as usize) };
        transfer(fd, Direction::Write, len, true, |done| {
            if done == 0 {
                // SAFETY: `msg` describes the caller's buffers.
                return unsafe { real::sendmsg(fd, &iov_msg(iov, n as usize), libc::MSG_DONTWAIT) };
            }
            // The rest of a partial send (invariant 2).
            // SAFETY: `iov` holds `n` iovecs (the caller's contract).
            let rest = unsafe { advanced(iov, n as usize, done) };
            // SAFETY: `msg` describes the rest of the caller's buffers, alive for the call.
            unsafe { real::sendmsg(fd, &iov_msg(rest.as_ptr(), rest.len()), libc::MSG_DONTWAIT) }
        })
    };
    socket_or(fd, on_socket, real_writev)
}

/// # Safety
/// As `recv(2)`.
#[no_mangle]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t {
    if passes(fd, flags) {
        // SAFETY: the caller's contract.
        return unsafe { real::recv(fd, buf, len, flags) };
    }
    let all = flags & libc::MSG_WAITALL != 0;
    transfer(fd, Direction::Read, len, all, |done| {
        // SAFETY: the caller's buffer, from byte `done`.
        unsafe { real::recv(fd, at(buf, done), len - done, flags | libc::MSG_DONTWAIT) }
    })
}

/// # Safety
/// As `send(2)`.
#[no_mangle]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, len: size_t, flags: c_int) -> ssize_t {
    if passes(fd, flags) {
        // SAFETY: the caller's contract.
        return unsafe { real::send(fd, buf, len, flags) };
    }
    transfer(fd, Direction::Write, len, true, |done| {
        // SAFETY: the caller's buffer, from byte `done`.
        unsafe { real::send(fd, at(buf, done), len - done, flags | libc::MSG_DONTWAIT) }
    })
}

/// # Safety
/// As `recvfrom(2)`.
#[no_mangle]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> ssize_t {
    if passes(fd, flags) {
        // SAFETY: the caller's contract.
        return unsafe { real::recvfrom(fd, buf, len, flags, addr, addrlen) };
    }
    let all = flags & libc::MSG_WAITALL != 0;
    transfer(fd, Direction::Read, len, all, |done| {
        // SAFETY: the caller's buffers, from byte `done`.
        unsafe {
            real::recvfrom(
                fd,
                at(buf, done),
                len - done,
                flags | libc::MSG_DONTWAIT,
                addr,
                addrlen,
            )
        }
    })
}

/// # Safety
/// As `sendto(2)`.
#[no_mangle]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    len: size_t,
    flags: c_int,
    addr: *const sockaddr,
    addrlen: socklen_t,
) -> ssize_t {
    if passes(fd, flags) {
        // SAFETY: the caller's contract.
        return unsafe { real::sendto(fd, buf, len, flags, addr, addrlen) };
    }
    transfer(fd, Direction::Write, len, true, |done| {
        // SAFETY: the caller's buffers, from byte `done`.
        unsafe {
            real::sendto(
                fd,
                at(buf, done),
                len - done,
                flags | libc::MSG_DONTWAIT,
                addr,
                addrlen,
            )
        }
    })
}

/// # Safety
/// As `recvmsg(2)`.
#[no_mangle]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    if passes(fd, flags) || msg.is_null() {
        // SAFETY: the caller's contract.
        return unsafe { real::recvmsg(fd, msg, flags) };
    }
    // `MSG_WAITALL` is not continued here (the message header would have to be rebuilt):
    // a blocking `recvmsg` returns once some bytes arrived.
    transfer(fd, Direction::Read, usize::MAX, false, |_| {
        // SAFETY: the caller's message header.
        unsafe { real::recvmsg(fd, msg, flags | libc::MSG_DONTWAIT) }
    })
}

/// # Safety
/// As `sendmsg(2)`.
#[no_mangle]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    if passes(fd, flags) || msg.is_null() {
        // SAFETY: the caller's contract.
        return unsafe { real::sendmsg(fd, msg, flags) };
    }
    // SAFETY: the caller's contract: a valid message header.
    let header = unsafe { *msg };
    let n = header.msg_iovlen;
    if n > IOV_MAX as usize {
        // SAFETY: the caller's contract.
        return unsafe { real::sendmsg(fd, msg, flags) };
    }
    // SAFETY: the header's iovecs (the caller's contract).
    let len = unsafe { total(header.msg_iov, n) };
    transfer(fd, Direction::Write, len, true, |done| {
        if done == 0 {
            // SAFETY: the caller's message header.
            return unsafe { real::sendmsg(fd, msg, flags | libc::MSG_DONTWAIT) };
        }
        // The rest of a partial send: the control data went with its first part.
        // SAFETY: the header's iovecs (the caller's contract).
        let rest = unsafe { advanced(header.msg_iov, n, done) };
        let mut more = header;
        more.msg_iov = rest.as_ptr().cast_mut();
        more.msg_iovlen = rest.len() as _;
        more.msg_control = std::ptr::null_mut();
        more.msg_controllen = 0;
        // SAFETY: `more` describes the rest of the caller's buffers.
        unsafe { real::sendmsg(fd, &more, flags | libc::MSG_DONTWAIT) }
    })
}

/// # Safety
/// As `accept(2)`.
#[no_mangle]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    // SAFETY: the caller's contract; `accept4` with no flags is `accept`.
    unsafe { accept4(fd, addr, len, 0) }
}

/// An `accept` that parks (in a task) or blocks in `poll` (on a plain thread, on a listener
/// the interposer made non-blocking underneath: fds.rs invariant 2).
///
/// # Safety
/// As `accept4(2)`.
#[no_mangle]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
) -> c_int {
    let op = || {
        // SAFETY: the caller's contract (every call of `op` below).
        let r = unsafe { real::accept4(fd, addr, len, flags) };
        if r >= 0 {
            fds::reset(r); // fds.rs invariant 1
        }
        r as isize
    };
    if !active() {
        if fds::nb_user(fd) == Some(false) {
            let deadline = deadline_after(socket_timeout(fd, libc::SO_RCVTIMEO));
            let saved = errno();
            let r = super::retry_polling(fd, Direction::Read, deadline, op);
            if r >= 0 {
                set_errno(saved);
            }
            return r as c_int;
        }
        return op() as c_int;
    }
    if fds::kind(fd) == fds::WEFT {
        return op() as c_int;
    }
    guard(fail, || {
        crate::sched::coop::spend();
        let saved = errno();
        let user_nonblocking = match fds::nb_user(fd) {
            Some(user_nonblocking) => user_nonblocking,
            None => {
                // SAFETY: F_GETFL takes no argument.
                let fl = unsafe { real::fcntl(fd, libc::F_GETFL, 0) };
                if fl < 0 || fl & libc::O_NONBLOCK != 0 || !fds::set_nb_under(fd, false) {
                    return op() as c_int;
                }
                // fds.rs invariant 2: recorded first, so a plain thread's accept on it
                // from now on waits in `poll`.
                // SAFETY: F_SETFL takes an int.
                unsafe { real::fcntl(fd, libc::F_SETFL, (fl | libc::O_NONBLOCK) as usize) };
                false
            }
        };
        if user_nonblocking {
            return op() as c_int;
        }
        let deadline = deadline_after(socket_timeout(fd, libc::SO_RCVTIMEO));
        let r = retry_parked(fd, Direction::Read, deadline, op);
        if r >= 0 {
            set_errno(saved);
        }
        r as c_int
    })
}

/// A `connect` on a blocking socket in a task: started non-blocking, then the task parks
/// until the socket is writable; `SO_SNDTIMEO` ends it with `EINPROGRESS`, as in the kernel.
///
/// # Safety
/// As `connect(2)`.
#[no_mangle]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    // SAFETY: the caller's contract, for every call below.
    let real_connect = || unsafe { real::connect(fd, addr, len) };
    if !active() || fds::kind(fd) == fds::WEFT {
        return real_connect();
    }
    guard(fail, || {
        crate::sched::coop::spend();
        let saved = errno();
        // SAFETY: F_GETFL takes no argument.
        let fl = unsafe { real::fcntl(fd, libc::F_GETFL, 0) };
        // The program's own non-blocking connect, or no descriptor at all.
        if fl < 0 || fl & libc::O_NONBLOCK != 0 {
            return real_connect();
        }
        // SAFETY: F_SETFL takes an int.
        if unsafe { real::fcntl(fd, libc::F_SETFL, (fl | libc::O_NONBLOCK) as usize) } < 0 {
            return real_connect();
        }
        let r = real_connect();
        let e = errno();
        // Back to the program's mode at once: the connection goes on without it.
        // SAFETY: F_SETFL takes an int.
        unsafe { real::fcntl(fd, libc::F_SETFL, fl as usize) };
        if r == 0 {
            set_errno(saved);
            return 0;
        }
        match e {
            libc::EINPROGRESS => {}
            // A full Unix-socket backlog: a blocking connect waits for room.
            libc::EAGAIN => return real_connect(),
            _ => return fail(e),
        }
        let deadline = deadline_after(socket_timeout(fd, libc::SO_SNDTIMEO));
        let r = retry_parked(fd, Direction::Write, deadline, || {
            poll_now(fd, libc::POLLOUT)
        });
        if r < 0 {
            let e = errno();
            return fail(if e == libc::EAGAIN {
                libc::EINPROGRESS
            } else {
                e
            });
        }
        let mut err: c_int = 0;
        let mut err_len = std::mem::size_of::<c_int>() as socklen_t;
        // SAFETY: `err` and `err_len` are live and describe a c_int.
        let r = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_ERROR,
                (&mut err as *mut c_int).cast(),
                &mut err_len,
            )
        };
        if r < 0 {
            return -1;
        }
        if err != 0 {
            return fail(err);
        }
        set_errno(saved);
        0
    })
}

/// One non-blocking `poll` of `fd` for `events`: 0 if ready, `EAGAIN` if not.
fn poll_now(fd: c_int, events: libc::c_short) -> isize {
    let mut p = pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    match unsafe { real::poll(&mut p, 1, 0) } {
        0 => fail(libc::EAGAIN),
        n if n > 0 => 0,
        n => n as isize,
    }
}

/// Shortest and longest naps between tries of a `poll` on several descriptors.
const POLL_NAP_MIN: Duration = Duration::from_micros(50);
const POLL_NAP_MAX: Duration = Duration::from_millis(5);

/// A `poll` that would wait, in a task: one descriptor waiting in one direction parks on its
/// readiness; several (or other events) are polled without blocking between naps of 50 µs
/// doubling up to 5 ms, so the worker stays free at the price of that latency.
///
/// # Safety
/// As `poll(2)`.
#[no_mangle]
pub unsafe extern "C" fn poll(fds_: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int {
    // SAFETY: the caller's contract, for every call below.
    let poll_once = || unsafe { real::poll(fds_, n, 0) };
    if !active() || timeout == 0 {
        // SAFETY: the caller's contract.
        return unsafe { real::poll(fds_, n, timeout) };
    }
    guard(fail, || {
        let saved = errno();
        let r = poll_once();
        if r != 0 {
            return r;
        }
        let deadline = if timeout < 0 {
            None
        } else {
            deadline_after(Some(Duration::from_millis(timeout as u64)))
        };
        if n == 0 {
            // `poll(NULL, 0, ms)`: a sleep.
            match deadline {
                Some(deadline) => crate::time::sleep_until(deadline),
                None => loop {
                    crate::sched::park_current(crate::park::ParkReason::LibcPoll);
                },
            }
            set_errno(saved);
            return 0;
        }
        if n == 1 {
            // SAFETY: the caller's contract: `fds_` holds one pollfd.
            let p = unsafe { *fds_ };
            const READ: libc::c_short = libc::POLLIN | libc::POLLRDNORM | libc::POLLRDHUP;
            const WRITE: libc::c_short = libc::POLLOUT | libc::POLLWRNORM;
            let dir = if p.events & !READ == 0 {
                Some(Direction::Read)
            } else if p.events & !WRITE == 0 {
                Some(Direction::Write)
            } else {
                None
            };
            if let Some(dir) = dir.filter(|_| p.fd >= 0 && fds::kind(p.fd) != fds::WEFT) {
                let r = retry_parked(p.fd, dir, deadline, || match poll_once() {
                    0 => fail(libc::EAGAIN),
                    n => n as isize,
                });
                if r < 0 && errno() == libc::EAGAIN {
                    set_errno(saved);
                    return 0;
                }
                if r >= 0 {
                    set_errno(saved);
                }
                return r as c_int;
            }
        }
        let mut nap = POLL_NAP_MIN;
        loop {
            let now = Instant::now();
            let wake = match deadline {
                Some(deadline) if deadline <= now => {
                    set_errno(saved);
                    return 0;
                }
                Some(deadline) => deadline.min(now + nap),
                None => now + nap,
            };
            crate::time::sleep_until(wake);
            let r = poll_once();
            if r != 0 {
                if r > 0 {
                    set_errno(saved);
                }
                return r;
            }
            nap = (nap * 2).min(POLL_NAP_MAX);
        }
    })
}
