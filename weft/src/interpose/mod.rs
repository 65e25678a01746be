//! Interposed blocking libc calls: std's sockets, sleeps and name lookups park the task.
//!
//! With the `interpose` cargo feature, weft defines `read`, `write`, `recv`, `connect`,
//! `nanosleep`, `getaddrinfo`… (the full list is in the README, "Blocking code you did not
//! write") as `#[no_mangle]` functions. Symbols defined in the executable come before libc's,
//! so every call to them — from std (`TcpStream`, `thread::sleep`, `ToSocketAddrs`), from sync
//! crates, from C libraries linked in — lands here first. Inside a weft task, a call that
//! would block on a socket parks the task on its worker's reactor (`sched/io.rs`), a sleep
//! parks it on its worker's timers, and `getaddrinfo` runs on the blocking pool. Anywhere else
//! — a plain thread, the blocking pool, a worker between tasks — and on descriptors that are
//! not sockets (files, pipes, ttys), the call goes straight to libc's function
//! (`interpose/real.rs`).
//!
//! The program's view of a descriptor is kept: data calls (`recv`, `send`, `read` and `write`
//! on sockets…) get `MSG_DONTWAIT` for that one call instead of `O_NONBLOCK` on the open file,
//! so the blocking mode the program set is the one the kernel has, read with `fcntl(F_GETFL)`
//! only when a call would block. Only `accept` needs `O_NONBLOCK` underneath (there is no
//! per-call flag); the table (`interpose/fds.rs`) then remembers the mode the program believes
//! in, and the interposed `fcntl`/`ioctl(FIONBIO)` report it, a plain thread's `accept` on it
//! blocks as before. `SO_RCVTIMEO`/`SO_SNDTIMEO` become the park's deadline and end it with
//! `EAGAIN` (`EINPROGRESS` for `connect`), as the kernel does.
//!
//! Owns: `ENABLED`, the runtime switch; the table (`fds.rs`); the real functions (`real.rs`).
//!
//! Invariants:
//! 1. An interposer acts only if `active()`: a task is running on this thread and the switch
//!    is on. Otherwise it calls the real function with the same arguments and returns its
//!    result untouched (except `accept` on a descriptor with `O_NONBLOCK` underneath, which
//!    waits in the real `poll` first, fds.rs invariant 2).
//! 2. weft's own code never recurses into an interposer that acts: its reactor calls
//!    `epoll_*` (not interposed) and writes its notify eventfd with a raw `write` system
//!    call (sched/epoll.rs), parks only
//!    between tasks (not `active()`), and every `weft::net` descriptor is marked `WEFT` in the
//!    table, so calls on it pass through.
//! 3. A cancellation never unwinds into an interposer's C caller (an unwind cannot cross an
//!    `extern "C"` frame): every interposer that may wait runs under `guard`, which fails the
//!    call at once when the task is cancelled already, and catches the unwind of a park
//!    inside it. The call fails with `ETIMEDOUT` when a bound `Context`'s deadline passed,
//!    `ECANCELED` for `Task::cancel`, a `Context::cancel` or shutdown (a sleep returns early
//!    with success, so std's `thread::sleep` does not retry it). A cancelled task's every
//!    later interposed call that may wait fails the same way, at once, so a sync crate's
//!    retry loop ends instead of waiting again; the task unwinds at its next weft park. The
//!    `Context::bind` whose cancellation failed a call returns the context's error when its
//!    closure returns (context.rs `cut_short`). Any other unwind there is a weft bug and
//!    aborts.
//! 4. `errno` on return is the real call's (on failure) or what it was on entry (on success).
//!
//! May call: `sched::io`, `park`, `time`, `task` (spawn_blocking), libc. Called by: every
//! caller of those libc functions in the process.
//!
//! Why a cargo feature, off by default: it replaces libc functions for the whole process —
//! every thread, every crate, every C library in it — so it must be the program's choice, not
//! a library's that happens to depend on weft (cargo features are additive: a binary turns it
//! on once for everyone); a program that does not want it pays nothing, and one built with a
//! sanitizer or another interposer (libco-style, `LD_PRELOAD` tools) keeps full control. It
//! acts only inside weft tasks, so turning it on does not change what plain threads see.
//! [`set_enabled`] switches it off at run time (to measure, or to bisect a problem).
//!
//! Why `MSG_DONTWAIT` rather than making sockets non-blocking (libco's way): `O_NONBLOCK` is
//! a property of the open file, shared by every duplicate (`try_clone`, a forked child, a
//! descriptor passed to another process), so a plain thread would see `EAGAIN` where it
//! expects to block, and tracking it needs every `fcntl`, `ioctl` and `dup` interposed, and
//! still misses the other processes. Per-call flags change nothing outside the call.

mod fds;
mod misc;
mod real;
mod socket;

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use libc::c_int;

use crate::sched::io::Direction;

pub(crate) use fds::mark_weft;

/// The run-time switch (invariant 1), on unless [`set_enabled`] turned it off.
static ENABLED: AtomicBool = AtomicBool::new(true);

/// Turns interposition on or off for the whole process (it starts on): while off, every
/// interposed call goes straight to libc, in tasks too. Calls already parked finish as they
/// started.
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether interposition is on ([`set_enabled`]).
pub fn is_enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Invariant 1: a task runs on this thread and the switch is on. Reads one thread-local
/// (const-initialized, no destructor) and one global: safe in a signal handler.
#[inline]
fn active() -> bool {
    crate::sched::current_task_ptr().is_some() && ENABLED.load(Ordering::Relaxed)
}

#[inline]
fn errno() -> c_int {
    // SAFETY: `__errno_location` returns this thread's errno, valid for its whole life.
    unsafe { *libc::__errno_location() }
}

#[inline]
fn set_errno(e: c_int) {
    // SAFETY: as in `errno`.
    unsafe { *libc::__errno_location() = e };
}

/// Fails a call with `e` (invariant 4): `-1` as the type the C function returns.
fn fail<T: From<i8>>(e: c_int) -> T {
    set_errno(e);
    T::from(-1)
}

/// Invariant 3: runs `f` (which may park), turning a cancellation into `cancelled(errno)`:
/// at once if the task is cancelled already (a cancelled task's calls fail without waiting),
/// or when a park inside `f` unwinds for one. The errno is `ETIMEDOUT` for a `Context`
/// deadline, `ECANCELED` for the rest.
fn guard<R>(cancelled: impl FnOnce(c_int) -> R, f: impl FnOnce() -> R) -> R {
    if let Some(why) = crate::sched::cancellation_as_error() {
        return cancelled(cancel_errno(why));
    }
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => match crate::sched::caught_cancellation(&*payload) {
            Some(why) => cancelled(cancel_errno(why)),
            None => {
                // The payload is dropped by the abort's exit, never here (its `Drop` could
                // unwind again).
                std::mem::forget(payload);
                let msg = b"weft: interpose: a panic inside an interposed libc call\n";
                // SAFETY: a raw write of a live buffer to stderr, then abort.
                unsafe {
                    libc::syscall(libc::SYS_write, 2, msg.as_ptr(), msg.len());
                    libc::abort();
                }
            }
        },
    }
}

/// The errno a call cut short by `why` fails with (invariant 3).
fn cancel_errno(why: crate::sched::Cancellation) -> c_int {
    match why {
        crate::sched::Cancellation::Context(crate::context::ContextError::DeadlineExceeded) => {
            libc::ETIMEDOUT
        }
        _ => libc::ECANCELED,
    }
}

/// Whether the program sees `fd` in blocking mode: the mode it set, with `O_NONBLOCK` the
/// interposer set underneath hidden (fds.rs invariant 2).
fn user_blocking(fd: c_int) -> bool {
    if let Some(user_nonblocking) = fds::nb_user(fd) {
        return !user_nonblocking;
    }
    // SAFETY: F_GETFL takes no argument.
    let flags = unsafe { real::fcntl(fd, libc::F_GETFL, 0) };
    flags >= 0 && flags & libc::O_NONBLOCK == 0
}

/// The socket's `SO_RCVTIMEO` or `SO_SNDTIMEO`; `None` when unset (or not a socket).
fn socket_timeout(fd: c_int, option: c_int) -> Option<Duration> {
    let mut tv = libc::timeval {
        tv_sec: 0,
        tv_usec: 0,
    };
    let mut len = std::mem::size_of::<libc::timeval>() as libc::socklen_t;
    // SAFETY: `tv` and `len` are live and describe a buffer of `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            option,
            (&mut tv as *mut libc::timeval).cast(),
            &mut len,
        )
    };
    if r < 0 || (tv.tv_sec <= 0 && tv.tv_usec <= 0) {
        return None;
    }
    Some(Duration::new(tv.tv_sec as u64, tv.tv_usec as u32 * 1000))
}

/// The deadline `timeout` from now; `None` for none (or beyond the clock's range).
fn deadline_after(timeout: Option<Duration>) -> Option<Instant> {
    timeout.and_then(|t| Instant::now().checked_add(t))
}

/// Runs `op`, a non-blocking attempt that returns the C result with `errno` set, until it does
/// not fail with `EAGAIN`, parking the task on `fd`'s readiness in `dir` between tries
/// (sched/io.rs protocol steps 1–4); at `deadline` it fails with `EAGAIN`, as the kernel's
/// `SO_RCVTIMEO` does. For a descriptor the reactor cannot watch it blocks in the real
/// `poll` instead (the worker with it).
fn retry_parked(
    fd: c_int,
    dir: Direction,
    deadline: Option<Instant>,
    mut op: impl FnMut() -> isize,
) -> isize {
    let Some(readiness) = fds::readiness(fd) else {
        return retry_polling(fd, dir, deadline, op);
    };
    loop {
        let seen = readiness.seq(dir);
        let r = op();
        if r >= 0 {
            return r;
        }
        match errno() {
            libc::EAGAIN => {}
            libc::EINTR => continue,
            _ => return r,
        }
        let reason = match dir {
            Direction::Read => crate::park::ParkReason::LibcRead,
            Direction::Write => crate::park::ParkReason::LibcWrite,
        };
        // SAFETY: the program is inside a call on `fd`, so it is open, and it stays open
        // until the interposed `close` deregisters it first (fds.rs invariant 1).
        let waited =
            unsafe { readiness.wait(BorrowedFd::borrow_raw(fd), dir, seen, deadline, reason) };
        match waited {
            Some(Ok(())) => {}
            Some(Err(e)) if e.kind() == std::io::ErrorKind::TimedOut => return fail(libc::EAGAIN),
            // The reactor refused the descriptor (or this is no task after all).
            _ => return retry_polling(fd, dir, deadline, op),
        }
    }
}

/// [`retry_parked`] by blocking in the real `poll`: the fallback for descriptors the reactor
/// cannot watch.
fn retry_polling(
    fd: c_int,
    dir: Direction,
    deadline: Option<Instant>,
    mut op: impl FnMut() -> isize,
) -> isize {
    let events = match dir {
        Direction::Read => libc::POLLIN,
        Direction::Write => libc::POLLOUT,
    };
    loop {
        let r = op();
        if r >= 0 || errno() != libc::EAGAIN {
            return r;
        }
        let timeout = match deadline {
            None => -1,
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return fail(libc::EAGAIN);
                }
                left.as_micros().div_ceil(1000).min(c_int::MAX as u128) as c_int
            }
        };
        let mut pfd = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        // SAFETY: one live pollfd.
        let r = unsafe { real::poll(&mut pfd, 1, timeout) };
        if r < 0 && errno() != libc::EINTR {
            return r as isize;
        }
    }
}

/// Keeps the interposers linked in: `Runtime::build` reads this, so the object that defines
/// them is part of every program that starts a runtime, whichever objects the linker pulls.
#[used]
static KEEP: [unsafe extern "C" fn(c_int) -> c_int; 2] = [misc::close, misc::dup];

/// Called by `Runtime::build`: see [`KEEP`]; resolves the real functions if the ELF
/// constructor has not run yet.
pub(crate) fn init() {
    std::hint::black_box(&KEEP);
    real::resolve_all();
}

/// Resolves every real function before `main` (real.rs `resolve_all`).
#[used]
#[link_section = ".init_array"]
static CONSTRUCTOR: extern "C" fn() = constructor;

extern "C" fn constructor() {
    real::resolve_all();
    // SAFETY: registers a handler that only stores to an atomic (fds.rs invariant 5).
    unsafe { libc::pthread_atfork(None, None, Some(fds::forked)) };
}

#[cfg(not(all(
    target_os = "linux",
    target_env = "gnu",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
compile_error!("weft's `interpose` feature supports Linux with glibc on x86_64 and aarch64 only");
