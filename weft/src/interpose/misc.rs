//! The interposed sleeps, `getaddrinfo`, and the descriptor calls that keep the table right
//! (`close`, `dup*`, `socket`, `socketpair`, `fcntl`, `ioctl(FIONBIO)`).
//!
//! Owns: nothing.
//!
//! Invariants:
//! 1. A sleep in a task parks on its worker's timers (`time::sleep`); a cancellation ends it
//!    early with success (interpose/mod.rs invariant 3), so std's `thread::sleep` loop
//!    returns instead of retrying; a cancelled task's sleeps return at once.
//! 2. `getaddrinfo` in a task runs on the blocking pool with owned copies of its arguments, so
//!    a lookup that outlives a cancelled caller reads and writes none of the caller's memory.
//! 3. `close`, `dup2` and `dup3` reset the entry of the number they end before the real call
//!    (fds.rs invariant 1), on every thread; `dup`, `dup2`, `dup3` and `F_DUPFD*` copy
//!    NB_UNDER to the duplicate, which shares the open file (fds.rs invariant 2).
//!
//! May call: `interpose` (mod.rs helpers), `real`, `fds`, `time`, `task` (spawn_blocking).
//! Called by: any code in the process calling these libc functions.

use std::ffi::{CStr, CString};
use std::time::Duration;

use libc::{addrinfo, c_char, c_int, c_uint, c_ulong, clockid_t, timespec};

use super::{active, errno, fds, guard, real, set_errno};

/// A valid `timespec` as a duration; `None` for one the kernel would reject with `EINVAL`.
fn duration(ts: &timespec) -> Option<Duration> {
    if ts.tv_sec < 0 || !(0..1_000_000_000).contains(&ts.tv_nsec) {
        return None;
    }
    Some(Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

/// Invariant 1: parks the task for `d`.
fn sleep_parked(d: Duration) {
    let saved = errno();
    guard(|_| (), || crate::time::sleep(d));
    set_errno(saved);
}

/// # Safety
/// As `nanosleep(2)`.
#[no_mangle]
pub unsafe extern "C" fn nanosleep(req: *const timespec, rem: *mut timespec) -> c_int {
    // SAFETY: the caller's contract: `req` is null or a valid timespec.
    let d = unsafe { req.as_ref() }.and_then(duration);
    match d {
        Some(d) if active() && !d.is_zero() => {
            sleep_parked(d);
            0
        }
        // SAFETY: the caller's contract.
        _ => unsafe { real::nanosleep(req, rem) },
    }
}

/// # Safety
/// As `clock_nanosleep(2)`.
#[no_mangle]
pub unsafe extern "C" fn clock_nanosleep(
    clock: clockid_t,
    flags: c_int,
    req: *const timespec,
    rem: *mut timespec,
) -> c_int {
    let wall = matches!(
        clock,
        libc::CLOCK_REALTIME | libc::CLOCK_MONOTONIC | libc::CLOCK_BOOTTIME | libc::CLOCK_TAI
    );
    // SAFETY: the caller's contract: `req` is null or a valid timespec.
    let d = unsafe { req.as_ref() }.and_then(duration);
    let (Some(mut d), true, true) = (d, wall, active()) else {
        // SAFETY: the caller's contract.
        return unsafe { real::clock_nanosleep(clock, flags, req, rem) };
    };
    if flags & libc::TIMER_ABSTIME != 0 {
        let mut now = timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `now` is a live timespec.
        if unsafe { libc::clock_gettime(clock, &mut now) } != 0 {
            // SAFETY: the caller's contract.
            return unsafe { real::clock_nanosleep(clock, flags, req, rem) };
        }
        d = d.saturating_sub(duration(&now).unwrap_or_default());
    }
    if !d.is_zero() {
        sleep_parked(d);
    }
    0
}

/// # Safety
/// As `usleep(3)`.
#[no_mangle]
pub unsafe extern "C" fn usleep(usec: libc::useconds_t) -> c_int {
    if active() && usec > 0 {
        sleep_parked(Duration::from_micros(usec.into()));
        return 0;
    }
    // SAFETY: plain call.
    unsafe { real::usleep(usec) }
}

/// # Safety
/// As `sleep(3)`.
#[no_mangle]
pub unsafe extern "C" fn sleep(secs: c_uint) -> c_uint {
    if active() && secs > 0 {
        sleep_parked(Duration::from_secs(secs.into()));
        return 0;
    }
    // SAFETY: plain call.
    unsafe { real::sleep(secs) }
}

/// Invariant 2: a name lookup in a task runs on the blocking pool while the task parks.
/// Numeric hosts (`AI_NUMERICHOST`) resolve in place: they never block.
///
/// # Safety
/// As `getaddrinfo(3)`.
#[no_mangle]
pub unsafe extern "C" fn getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const addrinfo,
    res: *mut *mut addrinfo,
) -> c_int {
    // SAFETY: the caller's contract: `hints` is null or valid.
    let hint = unsafe { hints.as_ref() };
    if !active() || res.is_null() || hint.is_some_and(|h| h.ai_flags & libc::AI_NUMERICHOST != 0) {
        // SAFETY: the caller's contract.
        return unsafe { real::getaddrinfo(node, service, hints, res) };
    }
    // SAFETY: the caller's contract: each is null or a NUL-terminated string.
    let owned = |s: *const c_char| (!s.is_null()).then(|| unsafe { CStr::from_ptr(s) }.to_owned());
    let (node_c, service_c) = (owned(node), owned(service));
    let hint = hint.map(|h| (h.ai_flags, h.ai_family, h.ai_socktype, h.ai_protocol));
    let lookup = move || {
        // SAFETY: an all-zero addrinfo is a valid hints value ("no preference").
        let mut hints: addrinfo = unsafe { std::mem::zeroed() };
        if let Some((flags, family, socktype, protocol)) = hint {
            hints.ai_flags = flags;
            hints.ai_family = family;
            hints.ai_socktype = socktype;
            hints.ai_protocol = protocol;
        }
        let ptr = |s: &Option<CString>| s.as_ref().map_or(std::ptr::null(), |s| s.as_ptr());
        let mut out: *mut addrinfo = std::ptr::null_mut();
        // SAFETY: owned strings and hints, alive for the call; `out` is live.
        let r = unsafe {
            real::getaddrinfo(
                ptr(&node_c),
                ptr(&service_c),
                if hint.is_some() {
                    &hints
                } else {
                    std::ptr::null()
                },
                &mut out,
            )
        };
        (r, errno(), out as usize)
    };
    let saved = errno();
    match guard(Err, || Ok(crate::task::try_spawn_blocking(lookup))) {
        Ok(Ok((r, e, out))) => {
            if r == 0 {
                // SAFETY: the caller's contract: `res` is writable.
                unsafe { *res = out as *mut addrinfo };
                set_errno(saved);
            } else {
                set_errno(e);
            }
            r
        }
        // No thread for it: resolve here, blocking the worker, rather than fail.
        // SAFETY: the caller's contract.
        Ok(Err(_)) => unsafe { real::getaddrinfo(node, service, hints, res) },
        Err(e) => {
            set_errno(e);
            libc::EAI_SYSTEM
        }
    }
}

/// # Safety
/// As `close(2)`.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    fds::reset(fd);
    // SAFETY: the caller's contract.
    unsafe { real::close(fd) }
}

/// A new socket's number may have been closed behind libc's back: fds.rs invariant 1.
///
/// # Safety
/// As `socket(2)`.
#[no_mangle]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    // SAFETY: plain call.
    let r = unsafe { real::socket(domain, ty, protocol) };
    if r >= 0 {
        fds::reset(r);
    }
    r
}

/// As [`socket`], for both ends.
///
/// # Safety
/// As `socketpair(2)`.
#[no_mangle]
pub unsafe extern "C" fn socketpair(
    domain: c_int,
    ty: c_int,
    protocol: c_int,
    sv: *mut c_int,
) -> c_int {
    // SAFETY: the caller's contract: `sv` points at two ints.
    let r = unsafe { real::socketpair(domain, ty, protocol, sv) };
    if r == 0 {
        // SAFETY: as above; the call filled both.
        unsafe {
            fds::reset(*sv);
            fds::reset(*sv.add(1));
        }
    }
    r
}

/// # Safety
/// As `dup(2)`.
#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    // SAFETY: the caller's contract.
    let r = unsafe { real::dup(fd) };
    if r >= 0 {
        fds::reset(r);
        fds::copy_nb(fd, r);
    }
    r
}

/// Invariant 3 for `dup2`/`dup3` onto `new`: resets it first, restoring its NB_UNDER if the
/// call fails (then `new` is unchanged).
fn replacing(old: c_int, new: c_int, call: impl FnOnce() -> c_int) -> c_int {
    if old == new {
        return call();
    }
    let before = fds::nb_user(new);
    fds::reset(new);
    let r = call();
    if r >= 0 {
        fds::copy_nb(old, new);
    } else if let Some(user_nonblocking) = before {
        fds::set_nb_under(new, user_nonblocking);
    }
    r
}

/// # Safety
/// As `dup2(2)`.
#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    // SAFETY: the caller's contract.
    replacing(old, new, || unsafe { real::dup2(old, new) })
}

/// # Safety
/// As `dup3(2)`.
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    // SAFETY: the caller's contract.
    replacing(old, new, || unsafe { real::dup3(old, new, flags) })
}

/// `fcntl` that shows the program its own `O_NONBLOCK` on a descriptor the interposer made
/// non-blocking underneath (fds.rs invariant 2), and keeps the table right across `F_DUPFD`.
///
/// Declared with a fixed third argument: on the supported targets (x86-64 and AArch64
/// Linux) a variadic caller passes it in the same register, and every command takes an
/// `int`, a pointer or nothing.
///
/// # Safety
/// As `fcntl(2)`.
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    // SAFETY: the caller's contract.
    let real_fcntl = |arg| unsafe { real::fcntl(fd, cmd, arg) };
    match cmd {
        libc::F_GETFL => {
            let r = real_fcntl(arg);
            match fds::nb_user(fd) {
                Some(user_nonblocking) if r >= 0 => {
                    r & !libc::O_NONBLOCK
                        | if user_nonblocking {
                            libc::O_NONBLOCK
                        } else {
                            0
                        }
                }
                _ => r,
            }
        }
        libc::F_SETFL if fds::nb_user(fd).is_some() => {
            let wanted = arg as c_int;
            let r = real_fcntl((wanted | libc::O_NONBLOCK) as usize);
            if r >= 0 {
                fds::set_user_nb(fd, wanted & libc::O_NONBLOCK != 0);
            }
            r
        }
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            let r = real_fcntl(arg);
            if r >= 0 {
                fds::reset(r);
                fds::copy_nb(fd, r);
            }
            r
        }
        _ => real_fcntl(arg),
    }
}

/// glibc's large-file name for `fcntl` (the same call on 64-bit targets).
///
/// # Safety
/// As `fcntl(2)`.
#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { fcntl(fd, cmd, arg) }
}

/// `ioctl` that records `FIONBIO` on a descriptor the interposer made non-blocking underneath
/// (fds.rs invariant 2) instead of changing it. Fixed third argument: see [`fcntl`].
///
/// # Safety
/// As `ioctl(2)`.
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: usize) -> c_int {
    if request == libc::FIONBIO && arg != 0 && fds::nb_user(fd).is_some() {
        // SAFETY: the caller's contract: FIONBIO's argument points at an int.
        let on = unsafe { *(arg as *const c_int) } != 0;
        fds::set_user_nb(fd, on);
        return 0;
    }
    // SAFETY: the caller's contract.
    unsafe { real::ioctl(fd, request, arg) }
}
