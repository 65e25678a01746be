//! The real libc functions behind the interposed ones, found once with `dlsym(RTLD_NEXT)`.
//!
//! Owns: one cached function address per interposed name (`slot::NAME`), written once (by the
//! ELF constructor at program start, or by the first call if something calls before it) and
//! read with a relaxed load on every call afterwards.
//!
//! Invariants:
//! 1. A slot holds 0 or the address `dlsym(RTLD_NEXT, NAME)` returned for its own name, which
//!    is libc's function of that name with the C signature written next to it below.
//! 2. Nothing here calls an interposed function: a missing symbol is reported with a raw
//!    `write(2)` system call, then `abort`.
//!
//! May call: libc (`dlsym`, `syscall`, `abort`). Called by: the interposers (`interpose/*`).
//!
//! Why `RTLD_NEXT` and not the system calls themselves: `getaddrinfo` is no system call, and
//! libc's wrappers do more than trap (cancellation points, `SO_*` fallbacks, vDSO clocks); the
//! program must get exactly what libc would have done.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The address of libc's `name` (NUL-terminated), cached in `slot` (invariant 1).
#[inline]
fn resolve(slot: &AtomicUsize, name: &'static str) -> usize {
    let p = slot.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    resolve_slow(slot, name)
}

#[cold]
fn resolve_slow(slot: &AtomicUsize, name: &'static str) -> usize {
    debug_assert!(name.ends_with('\0'));
    // SAFETY: `name` is NUL-terminated; RTLD_NEXT looks the name up in the objects loaded
    // after this one (libc), never in this executable.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) } as usize;
    if p == 0 {
        let msg = b"weft: interpose: libc has no such function: ";
        // SAFETY: raw writes of live buffers to stderr (invariant 2), then abort.
        unsafe {
            libc::syscall(libc::SYS_write, 2, msg.as_ptr(), msg.len());
            libc::syscall(libc::SYS_write, 2, name.as_ptr(), name.len() - 1);
            libc::syscall(libc::SYS_write, 2, b"\n".as_ptr(), 1);
            libc::abort();
        }
    }
    // Several threads may race here; they all store the same address.
    slot.store(p, Ordering::Relaxed);
    p
}

macro_rules! real_fns {
    ($($name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        /// The cached addresses, one per name (invariant 1).
        mod slot {
            $(
                #[allow(non_upper_case_globals)]
                pub(super) static $name: super::AtomicUsize = super::AtomicUsize::new(0);
            )*
        }

        $(
            /// libc's function of this name (invariant 1).
            ///
            /// # Safety
            /// As the C function.
            #[inline]
            pub(crate) unsafe fn $name($($arg: $ty),*) -> $ret {
                type F = unsafe extern "C" fn($($ty),*) -> $ret;
                let p = resolve(&slot::$name, concat!(stringify!($name), "\0"));
                // SAFETY: invariant 1: `p` is libc's function with exactly this signature.
                let f = unsafe { std::mem::transmute::<usize, F>(p) };
                // SAFETY: the caller's contract.
                unsafe { f($($arg),*) }
            }
        )*

        /// Resolves every name now, so that no later call runs `dlsym` (which is not
        /// async-signal-safe) on its first use.
        pub(super) fn resolve_all() {
            $(resolve(&slot::$name, concat!(stringify!($name), "\0"));)*
            resolve(&VARIADIC_FCNTL, "fcntl\0");
            resolve(&VARIADIC_IOCTL, "ioctl\0");
        }
    };
}

use libc::{addrinfo, c_char, clockid_t, ssize_t, timespec};
use libc::{c_int, c_uint, c_void, iovec, msghdr, nfds_t, pollfd, size_t, sockaddr, socklen_t};

real_fns! {
    read(fd: c_int, buf: *mut c_void, len: size_t) -> ssize_t;
    write(fd: c_int, buf: *const c_void, len: size_t) -> ssize_t;
    readv(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t;
    writev(fd: c_int, iov: *const iovec, n: c_int) -> ssize_t;
    recv(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t;
    send(fd: c_int, buf: *const c_void, len: size_t, flags: c_int) -> ssize_t;
    recvfrom(
        fd: c_int, buf: *mut c_void, len: size_t, flags: c_int, addr: *mut sockaddr,
        addrlen: *mut socklen_t
    ) -> ssize_t;
    sendto(
        fd: c_int, buf: *const c_void, len: size_t, flags: c_int, addr: *const sockaddr,
        addrlen: socklen_t
    ) -> ssize_t;
    recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t;
    sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t;
    accept4(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t, flags: c_int) -> c_int;
    connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int;
    poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int;
    nanosleep(req: *const timespec, rem: *mut timespec) -> c_int;
    clock_nanosleep(
        clock: clockid_t, flags: c_int, req: *const timespec, rem: *mut timespec
    ) -> c_int;
    usleep(usec: libc::useconds_t) -> c_int;
    sleep(secs: c_uint) -> c_uint;
    getaddrinfo(
        node: *const c_char, service: *const c_char, hints: *const addrinfo,
        res: *mut *mut addrinfo
    ) -> c_int;
    close(fd: c_int) -> c_int;
    socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int;
    socketpair(domain: c_int, ty: c_int, protocol: c_int, sv: *mut c_int) -> c_int;
    dup(fd: c_int) -> c_int;
    dup2(old: c_int, new: c_int) -> c_int;
    dup3(old: c_int, new: c_int, flags: c_int) -> c_int;
}

static VARIADIC_FCNTL: AtomicUsize = AtomicUsize::new(0);
static VARIADIC_IOCTL: AtomicUsize = AtomicUsize::new(0);

/// libc's `fcntl(fd, cmd, arg)`; every `fcntl` command takes an `int` or a pointer, or
/// nothing (then `arg` is ignored).
///
/// # Safety
/// As the C function.
pub(crate) unsafe fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    type F = unsafe extern "C" fn(c_int, c_int, ...) -> c_int;
    let p = resolve(&VARIADIC_FCNTL, "fcntl\0");
    // SAFETY: invariant 1: libc's variadic `fcntl`.
    let f = unsafe { std::mem::transmute::<usize, F>(p) };
    // SAFETY: the caller's contract.
    unsafe { f(fd, cmd, arg) }
}

/// libc's `ioctl(fd, request, arg)`.
///
/// # Safety
/// As the C function.
pub(crate) unsafe fn ioctl(fd: c_int, request: libc::c_ulong, arg: usize) -> c_int {
    type F = unsafe extern "C" fn(c_int, libc::c_ulong, ...) -> c_int;
    let p = resolve(&VARIADIC_IOCTL, "ioctl\0");
    // SAFETY: invariant 1: libc's variadic `ioctl`.
    let f = unsafe { std::mem::transmute::<usize, F>(p) };
    // SAFETY: the caller's contract.
    unsafe { f(fd, request, arg) }
}
