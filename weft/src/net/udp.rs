//! UDP: [`UdpSocket`], std's API over a [`Source`].
//!
//! Owns: the type; one descriptor each (`try_clone` is a `dup`).
//!
//! May call: `net` (Source, resolve). Called by: users.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

use super::resolve::{resolve, ToSocketAddrs};
use super::tcp::each_addr;
use super::{Source, Timeout};
use crate::park::ParkReason;
use crate::sched::io::Direction;

/// A UDP socket; like `std::net::UdpSocket`, but `send` and `recv` park the task.
pub struct UdpSocket {
    source: Source<std::net::UdpSocket>,
    read_timeout: Timeout,
    write_timeout: Timeout,
}

impl UdpSocket {
    /// Binds to the first address of `addr` that works.
    ///
    /// # Errors
    /// Resolution or bind failures; the last one if every address fails.
    pub fn bind<A: ToSocketAddrs>(addr: A) -> io::Result<UdpSocket> {
        each_addr(addr, |addr| {
            UdpSocket::from_std(std::net::UdpSocket::bind(addr)?)
        })
    }

    /// Takes over a std socket (switching it to non-blocking mode).
    ///
    /// # Errors
    /// If it cannot be switched to non-blocking mode.
    pub fn from_std(socket: std::net::UdpSocket) -> io::Result<UdpSocket> {
        socket.set_nonblocking(true)?;
        Ok(UdpSocket {
            source: Source::new(socket),
            read_timeout: Timeout::default(),
            write_timeout: Timeout::default(),
        })
    }

    /// Closes the socket from anywhere, like Go's `conn.Close()`: a `send`, `recv`,
    /// `send_to` or `recv_from` parked on it returns an error for which
    /// [`net::is_closed`](super::is_closed) is true, and so does every later one. The
    /// descriptor is closed when the socket is dropped. A second call does nothing.
    pub fn close(&self) {
        self.source.close();
    }

    /// Sets the default destination and the only source datagrams are received from.
    ///
    /// # Errors
    /// Resolution or connect failures.
    pub fn connect<A: ToSocketAddrs>(&self, addr: A) -> io::Result<()> {
        each_addr(addr, |addr| self.source.get_ref().connect(addr))
    }

    /// Sends `buf` to `addr` (its first resolved address).
    ///
    /// # Errors
    /// As `sendto(2)`, or `TimedOut`.
    pub fn send_to<A: ToSocketAddrs>(&self, buf: &[u8], addr: A) -> io::Result<usize> {
        let addr = resolve(&addr)?.into_iter().next().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "no addresses to send data to")
        })?;
        self.source.do_io(
            Direction::Write,
            ParkReason::DatagramSend,
            self.write_timeout.get(),
            |s| s.send_to(buf, addr),
        )
    }

    /// Receives one datagram and its sender.
    ///
    /// # Errors
    /// As `recvfrom(2)`, or `TimedOut`.
    pub fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.source.do_io(
            Direction::Read,
            ParkReason::DatagramRecv,
            self.read_timeout.get(),
            |s| s.recv_from(buf),
        )
    }

    /// Sends to the connected peer.
    ///
    /// # Errors
    /// As `send(2)`, or `TimedOut`.
    pub fn send(&self, buf: &[u8]) -> io::Result<usize> {
        self.source.do_io(
            Direction::Write,
            ParkReason::DatagramSend,
            self.write_timeout.get(),
            |s| s.send(buf),
        )
    }

    /// Receives from the connected peer.
    ///
    /// # Errors
    /// As `recv(2)`, or `TimedOut`.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.source.do_io(
            Direction::Read,
            ParkReason::DatagramRecv,
            self.read_timeout.get(),
            |s| s.recv(buf),
        )
    }

    /// Receives one datagram without removing it from the queue.
    ///
    /// # Errors
    /// As `recvfrom(2)`, or `TimedOut`.
    pub fn peek_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.source.do_io(
            Direction::Read,
            ParkReason::DatagramRecv,
            self.read_timeout.get(),
            |s| s.peek_from(buf),
        )
    }

    /// The local address.
    ///
    /// # Errors
    /// As `getsockname(2)`.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.source.get_ref().local_addr()
    }

    /// The connected peer's address.
    ///
    /// # Errors
    /// `NotConnected`, or as `getpeername(2)`.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.source.get_ref().peer_addr()
    }

    /// A new handle to the same socket (`dup`).
    ///
    /// # Errors
    /// As `dup(2)`.
    pub fn try_clone(&self) -> io::Result<UdpSocket> {
        let socket = UdpSocket {
            source: Source::new(self.source.get_ref().try_clone()?),
            read_timeout: Timeout::default(),
            write_timeout: Timeout::default(),
        };
        socket.read_timeout.set(self.read_timeout.get())?;
        socket.write_timeout.set(self.write_timeout.get())?;
        Ok(socket)
    }

    /// Receives give up with `TimedOut` after `timeout`; `None` waits forever.
    ///
    /// # Errors
    /// `Some(Duration::ZERO)` is `InvalidInput`, like std.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.read_timeout.set(timeout)
    }

    /// Sends give up with `TimedOut` after `timeout`; `None` waits forever.
    ///
    /// # Errors
    /// `Some(Duration::ZERO)` is `InvalidInput`, like std.
    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.write_timeout.set(timeout)
    }

    /// Sets `SO_BROADCAST`.
    ///
    /// # Errors
    /// As `setsockopt(2)`.
    pub fn set_broadcast(&self, on: bool) -> io::Result<()> {
        self.source.get_ref().set_broadcast(on)
    }

    /// Takes the pending `SO_ERROR`.
    ///
    /// # Errors
    /// As `getsockopt(2)`.
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.source.get_ref().take_error()
    }
}

impl fmt::Debug for UdpSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UdpSocket")
            .field("addr", &self.local_addr().ok())
            .field("fd", &self.as_raw_fd())
            .finish()
    }
}

impl AsFd for UdpSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.source.get_ref().as_fd()
    }
}

impl AsRawFd for UdpSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.source.get_ref().as_raw_fd()
    }
}
