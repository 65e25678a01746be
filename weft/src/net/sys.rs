//! The Linux socket calls `weft::net` needs beyond std: non-blocking socket creation, accept4,
//! non-blocking connect, `shutdown(2)` of any socket (a listener too), and a `poll(2)` wait
//! for plain threads.
//!
//! Owns: nothing; every function works on descriptors its caller owns.
//!
//! May call: libc. Called by: `net/tcp.rs`, `net/mod.rs`.

use std::io;
use std::mem;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Instant;

use crate::sched::io::Direction;

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A new non-blocking, close-on-exec socket of `addr`'s family.
pub(crate) fn socket(addr: &SocketAddr, ty: libc::c_int) -> io::Result<OwnedFd> {
    let domain = match addr {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    // SAFETY: plain syscall with constant arguments.
    let fd =
        cvt(unsafe { libc::socket(domain, ty | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) })?;
    // interpose/mod.rs invariant 2: its `connect` passes straight through.
    #[cfg(feature = "interpose")]
    crate::interpose::mark_weft(fd);
    // SAFETY: `socket` just returned this descriptor and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `addr` as a C socket address and its length.
fn sockaddr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data; all-zero is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is large and aligned enough for any sockaddr.
            let sin = unsafe { &mut *(&mut storage as *mut _ as *mut libc::sockaddr_in) };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr = libc::in_addr {
                s_addr: u32::from_ne_bytes(a.ip().octets()),
            };
            mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            // SAFETY: as above.
            let sin6 = unsafe { &mut *(&mut storage as *mut _ as *mut libc::sockaddr_in6) };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_addr = libc::in6_addr {
                s6_addr: a.ip().octets(),
            };
            sin6.sin6_flowinfo = a.flowinfo();
            sin6.sin6_scope_id = a.scope_id();
            mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

/// The Rust form of a C socket address filled in by the kernel.
fn from_sockaddr(storage: &libc::sockaddr_storage) -> io::Result<SocketAddr> {
    match storage.ss_family as libc::c_int {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let sin = unsafe { &*(storage as *const _ as *const libc::sockaddr_in) };
            Ok(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let sin6 = unsafe { &*(storage as *const _ as *const libc::sockaddr_in6) };
            Ok(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "weft: unsupported socket address family",
        )),
    }
}

/// A listening TCP socket on `addr` (SO_REUSEADDR, backlog up to `somaxconn`, like Go's).
pub(crate) fn listen(addr: &SocketAddr) -> io::Result<OwnedFd> {
    let fd = socket(addr, libc::SOCK_STREAM)?;
    let one: libc::c_int = 1;
    // SAFETY: `fd` is a valid socket; the option value is a live c_int of the given size.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            &one as *const _ as *const libc::c_void,
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })?;
    let (storage, len) = sockaddr(addr);
    // SAFETY: `storage` holds a valid socket address of length `len`.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &storage as *const _ as *const libc::sockaddr,
            len,
        )
    })?;
    // SAFETY: plain syscall on a valid socket; the kernel caps the backlog at somaxconn.
    cvt(unsafe { libc::listen(fd.as_raw_fd(), libc::c_int::MAX) })?;
    Ok(fd)
}

/// One `accept4`: a non-blocking, close-on-exec connection, or `WouldBlock`.
pub(crate) fn accept(listener: RawFd) -> io::Result<(OwnedFd, SocketAddr)> {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut storage: libc::sockaddr_storage = unsafe { mem::zeroed() };
    let mut len = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `storage` and `len` are live and describe a buffer of `len` bytes.
    let fd = cvt(unsafe {
        libc::accept4(
            listener,
            &mut storage as *mut _ as *mut libc::sockaddr,
            &mut len,
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    })?;
    // SAFETY: `accept4` just returned this descriptor and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    Ok((fd, from_sockaddr(&storage)?))
}

/// Starts a non-blocking connect: `Ok(true)` if it completed at once, `Ok(false)` if it is in
/// progress (wait for writability, then [`take_connect_result`]).
pub(crate) fn start_connect(fd: BorrowedFd<'_>, addr: &SocketAddr) -> io::Result<bool> {
    let (storage, len) = sockaddr(addr);
    // SAFETY: `storage` holds a valid socket address of length `len`.
    let r = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            &storage as *const _ as *const libc::sockaddr,
            len,
        )
    };
    if r == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EINPROGRESS) | Some(libc::EINTR) => Ok(false),
        _ => Err(e),
    }
}

/// After writability: the outcome of an in-progress connect, `WouldBlock` if still pending.
pub(crate) fn take_connect_result(stream: &std::net::TcpStream) -> io::Result<()> {
    if let Some(e) = stream.take_error()? {
        return Err(e);
    }
    match stream.peer_addr() {
        Ok(_) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
            Err(io::Error::from(io::ErrorKind::WouldBlock))
        }
        Err(e) => Err(e),
    }
}

/// `shutdown(fd, SHUT_RDWR)` on any socket, a listener included (std has it for streams only):
/// wakes every thread blocked in `poll(2)` or `accept` on it (net/close.rs).
pub(crate) fn shutdown_both(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: `fd` is borrowed, so open for the call; shutdown(2) touches no memory of ours.
    cvt(unsafe { libc::shutdown(fd.as_raw_fd(), libc::SHUT_RDWR) }).map(drop)
}

/// `recv(2)` into `buf` (not blocking: the socket is non-blocking, net/mod.rs invariant 1);
/// on `Ok(n)` the first `n` bytes of `buf` are initialized.
pub(crate) fn recv(fd: BorrowedFd<'_>, buf: &mut [std::mem::MaybeUninit<u8>]) -> io::Result<usize> {
    // SAFETY: `buf` is valid for writes of its length for the whole call; recv(2) only
    // writes, never reads, that memory.
    let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Whether a byte (or the peer's close) waits on the stream socket `fd`, without taking it
/// and without blocking: `Ok` when a read would return at once, `WouldBlock` when not, the
/// socket's pending error otherwise.
pub(crate) fn peek_byte(fd: BorrowedFd<'_>) -> io::Result<()> {
    let mut byte = 0u8;
    // SAFETY: one byte of a local, writable for the whole call.
    let n = unsafe {
        libc::recv(
            fd.as_raw_fd(),
            (&mut byte as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Blocks the calling OS thread until `fd` is ready in `dir` or `deadline` passes
/// (`TimedOut`): the plain-thread half of `Source::do_io`.
pub(crate) fn poll_fd(fd: RawFd, dir: Direction, deadline: Option<Instant>) -> io::Result<()> {
    let events = match dir {
        Direction::Read => libc::POLLIN,
        Direction::Write => libc::POLLOUT,
    };
    loop {
        let timeout = match deadline {
            None => -1,
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(super::timed_out());
                }
                // Round up so that we never wake before the deadline.
                left.as_micros()
                    .div_ceil(1000)
                    .min(libc::c_int::MAX as u128) as libc::c_int
            }
        };
        let mut pfd = libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        // SAFETY: one live pollfd.
        let r = unsafe { libc::poll(&mut pfd, 1, timeout) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if r > 0 {
            return Ok(());
        }
    }
}
