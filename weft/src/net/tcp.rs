//! TCP: [`TcpListener`] and [`TcpStream`], std's API over a [`Source`].
//!
//! Owns: the two types; each owns one descriptor (a `try_clone` is a `dup`, with its own
//! registration).
//!
//! May call: `net` (Source, sys, resolve). Called by: users.

use std::fmt;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::net::{Shutdown, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::{Duration, Instant};

use super::resolve::{resolve, ToSocketAddrs};
use super::{sys, Source, Timeout};
use crate::park::ParkReason;
use crate::sched::io::Direction;

/// A TCP socket server, listening for connections; like `std::net::TcpListener`, but `accept`
/// parks the task.
///
/// ```
/// use std::io::{Read, Write};
/// weft::run(|| {
///     let listener = weft::net::TcpListener::bind("127.0.0.1:0").unwrap();
///     let addr = listener.local_addr().unwrap();
///     weft::spawn(move || {
///         for conn in listener.incoming() {
///             // One task per connection.
///             weft::spawn(move || conn.unwrap().write_all(b"hello"));
///         }
///     });
///     let mut reply = String::new();
///     let mut conn = weft::net::TcpStream::connect(addr).unwrap();
///     conn.read_to_string(&mut reply).unwrap();
///     assert_eq!(reply, "hello");
/// });
/// ```
pub struct TcpListener {
    source: Source<std::net::TcpListener>,
}

impl TcpListener {
    /// Binds to the first address of `addr` that works (SO_REUSEADDR, backlog up to
    /// `net.core.somaxconn`). Resolving a host name runs on the blocking pool.
    ///
    /// # Errors
    /// Resolution or bind failures; the last one if every address fails.
    pub fn bind<A: ToSocketAddrs>(addr: A) -> io::Result<TcpListener> {
        each_addr(addr, |addr| {
            let fd = sys::listen(addr)?;
            Ok(TcpListener {
                source: Source::new(std::net::TcpListener::from(fd)),
            })
        })
    }

    /// Takes over a std listener (switching it to non-blocking mode).
    ///
    /// # Errors
    /// If it cannot be switched to non-blocking mode.
    pub fn from_std(listener: std::net::TcpListener) -> io::Result<TcpListener> {
        listener.set_nonblocking(true)?;
        Ok(TcpListener {
            source: Source::new(listener),
        })
    }

    /// Waits for the next connection. Errors such as `EMFILE` (too many open files) come back
    /// to the caller, whose loop should back off and call again, as Go's `http.Server` does.
    ///
    /// # Errors
    /// Whatever `accept4(2)` reports.
    pub fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        let (fd, addr) =
            self.source
                .do_io(Direction::Read, ParkReason::SocketAccept, None, |l| {
                    sys::accept(l.as_raw_fd())
                })?;
        let stream = std::net::TcpStream::from(fd);
        Ok((TcpStream::from_nonblocking(stream), addr))
    }

    /// An iterator over accepted connections, like std's; it ends when the listener is
    /// closed ([`close`](Self::close)), so `for conn in listener.incoming()` stops then.
    pub fn incoming(&self) -> Incoming<'_> {
        Incoming { listener: self }
    }

    /// Closes the listener from anywhere, like Go's `ln.Close()`: an `accept` parked on it —
    /// in a task or a plain thread — returns an error for which
    /// [`net::is_closed`](super::is_closed) is true, and so does every later `accept`;
    /// [`incoming`](Self::incoming) ends. Share the listener (an `Arc`) with the accepting
    /// task to call it. The socket stops listening at once (`shutdown(2)`); its descriptor is
    /// closed when the listener is dropped. A second call does nothing. A
    /// [`try_clone`](Self::try_clone)d handle sees the socket shut down (its `accept` fails
    /// with the system's error) but not this handle's closed state.
    pub fn close(&self) {
        self.source.close();
    }

    /// The address it listens on.
    ///
    /// # Errors
    /// As `getsockname(2)`.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.source.get_ref().local_addr()
    }

    /// A new handle to the same listening socket (`dup`).
    ///
    /// # Errors
    /// As `dup(2)`.
    pub fn try_clone(&self) -> io::Result<TcpListener> {
        Ok(TcpListener {
            source: Source::new(self.source.get_ref().try_clone()?),
        })
    }

    /// Sets `IP_TTL`.
    ///
    /// # Errors
    /// As `setsockopt(2)`.
    pub fn set_ttl(&self, ttl: u32) -> io::Result<()> {
        self.source.get_ref().set_ttl(ttl)
    }

    /// Takes the pending `SO_ERROR`.
    ///
    /// # Errors
    /// As `getsockopt(2)`.
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.source.get_ref().take_error()
    }
}

impl fmt::Debug for TcpListener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpListener")
            .field("addr", &self.local_addr().ok())
            .field("fd", &self.as_raw_fd())
            .finish()
    }
}

impl AsFd for TcpListener {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.source.get_ref().as_fd()
    }
}

impl AsRawFd for TcpListener {
    fn as_raw_fd(&self) -> RawFd {
        self.source.get_ref().as_raw_fd()
    }
}

/// The iterator of [`TcpListener::incoming`]; returns `None` only once the listener is
/// closed.
#[derive(Debug)]
pub struct Incoming<'a> {
    listener: &'a TcpListener,
}

impl Iterator for Incoming<'_> {
    type Item = io::Result<TcpStream>;

    fn next(&mut self) -> Option<io::Result<TcpStream>> {
        match self.listener.accept() {
            Err(_) if self.listener.source.is_closed() => None,
            result => Some(result.map(|(stream, _)| stream)),
        }
    }
}

/// A TCP connection; like `std::net::TcpStream`, but `read`, `write` and `connect` park the
/// task. `Read` and `Write` are implemented for `&TcpStream` too, so one task may read while
/// another writes.
///
/// ```
/// use std::io::{BufRead, BufReader, Write};
/// use std::time::Duration;
/// weft::run(|| -> std::io::Result<()> {
///     let listener = weft::net::TcpListener::bind("127.0.0.1:0")?;
///     let addr = listener.local_addr()?;
///     weft::spawn(move || {
///         let (conn, _) = listener.accept().unwrap();
///         std::io::copy(&mut &conn, &mut &conn) // echo until the client closes
///     });
///     let stream = weft::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
///     (&stream).write_all(b"ping\n")?;
///     let mut line = String::new();
///     BufReader::new(&stream).read_line(&mut line)?;
///     assert_eq!(line, "ping\n");
///     Ok(())
/// })
/// .unwrap();
/// ```
pub struct TcpStream {
    source: Source<std::net::TcpStream>,
    read_timeout: Timeout,
    write_timeout: Timeout,
}

impl TcpStream {
    fn from_nonblocking(stream: std::net::TcpStream) -> TcpStream {
        TcpStream {
            source: Source::new(stream),
            read_timeout: Timeout::default(),
            write_timeout: Timeout::default(),
        }
    }

    /// Connects to the first address of `addr` that accepts. Resolving a host name runs on the
    /// blocking pool.
    ///
    /// # Errors
    /// Resolution or connect failures; the last one if every address fails.
    pub fn connect<A: ToSocketAddrs>(addr: A) -> io::Result<TcpStream> {
        each_addr(addr, |addr| TcpStream::connect_deadline(addr, None))
    }

    /// Connects to `addr`, giving up with `TimedOut` after `timeout`.
    ///
    /// # Errors
    /// A connect failure, or `TimedOut`; a zero timeout is `InvalidInput`, like std.
    pub fn connect_timeout(addr: &SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
        if timeout.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "cannot set a 0 duration timeout",
            ));
        }
        TcpStream::connect_deadline(addr, Instant::now().checked_add(timeout))
    }

    fn connect_deadline(addr: &SocketAddr, deadline: Option<Instant>) -> io::Result<TcpStream> {
        let fd = sys::socket(addr, libc::SOCK_STREAM)?;
        let done = sys::start_connect(fd.as_fd(), addr)?;
        let stream = TcpStream::from_nonblocking(std::net::TcpStream::from(fd));
        if !done {
            let timeout = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if timeout.is_some_and(|t| t.is_zero()) {
                return Err(super::timed_out());
            }
            stream.source.do_io(
                Direction::Write,
                ParkReason::SocketConnect,
                timeout,
                sys::take_connect_result,
            )?;
        }
        Ok(stream)
    }

    /// Takes over a std stream (switching it to non-blocking mode).
    ///
    /// # Errors
    /// If it cannot be switched to non-blocking mode.
    pub fn from_std(stream: std::net::TcpStream) -> io::Result<TcpStream> {
        stream.set_nonblocking(true)?;
        Ok(TcpStream::from_nonblocking(stream))
    }

    /// The remote address.
    ///
    /// # Errors
    /// `NotConnected`, or as `getpeername(2)`.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.source.get_ref().peer_addr()
    }

    /// The local address.
    ///
    /// # Errors
    /// As `getsockname(2)`.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.source.get_ref().local_addr()
    }

    /// Shuts down the read half, the write half (the peer reads end of file: a half-close),
    /// or both.
    ///
    /// # Errors
    /// As `shutdown(2)`.
    pub fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.source.get_ref().shutdown(how)
    }

    /// Closes the connection from anywhere, like Go's `conn.Close()`: a `read`, `write` or
    /// `peek` parked on this handle — in a task or a plain thread — returns an error for which
    /// [`net::is_closed`](super::is_closed) is true, and so does every later one on it. Share
    /// the stream (an `Arc`, `Read`/`Write` work on `&TcpStream`) to call it from another
    /// task. Both directions are shut down at once (`shutdown(2)`: the peer reads end of
    /// file), so a [`try_clone`](Self::try_clone)d handle's operations end too (with the
    /// system's result: end of file, `EPIPE`); the descriptor is closed when the stream is
    /// dropped. A second call does nothing.
    pub fn close(&self) {
        self.source.close();
    }

    /// A new handle to the same connection (`dup`), e.g. for a reader task and a writer task.
    /// Where the runtime reads through io_uring ([`RuntimeBuilder::io_uring`](
    /// crate::RuntimeBuilder::io_uring)), read through one of the handles only: bytes a
    /// cancelled read received wait in the inbox of the handle it read for.
    ///
    /// # Errors
    /// As `dup(2)`.
    pub fn try_clone(&self) -> io::Result<TcpStream> {
        let stream = TcpStream::from_nonblocking(self.source.get_ref().try_clone()?);
        stream.read_timeout.set(self.read_timeout.get())?;
        stream.write_timeout.set(self.write_timeout.get())?;
        Ok(stream)
    }

    /// Reads give up with `TimedOut` after `timeout`; `None` waits forever.
    ///
    /// # Errors
    /// `Some(Duration::ZERO)` is `InvalidInput`, like std.
    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.read_timeout.set(timeout)
    }

    /// Writes give up with `TimedOut` after `timeout`; `None` waits forever.
    ///
    /// # Errors
    /// `Some(Duration::ZERO)` is `InvalidInput`, like std.
    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        self.write_timeout.set(timeout)
    }

    /// The read timeout.
    ///
    /// # Errors
    /// Never; a `Result` like std's.
    pub fn read_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(self.read_timeout.get())
    }

    /// The write timeout.
    ///
    /// # Errors
    /// Never; a `Result` like std's.
    pub fn write_timeout(&self) -> io::Result<Option<Duration>> {
        Ok(self.write_timeout.get())
    }

    /// Sets `TCP_NODELAY` (no Nagle delay for small writes).
    ///
    /// # Errors
    /// As `setsockopt(2)`.
    pub fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        self.source.get_ref().set_nodelay(nodelay)
    }

    /// Whether `TCP_NODELAY` is set.
    ///
    /// # Errors
    /// As `getsockopt(2)`.
    pub fn nodelay(&self) -> io::Result<bool> {
        self.source.get_ref().nodelay()
    }

    /// Sets `IP_TTL`.
    ///
    /// # Errors
    /// As `setsockopt(2)`.
    pub fn set_ttl(&self, ttl: u32) -> io::Result<()> {
        self.source.get_ref().set_ttl(ttl)
    }

    /// Takes the pending `SO_ERROR`.
    ///
    /// # Errors
    /// As `getsockopt(2)`.
    pub fn take_error(&self) -> io::Result<Option<io::Error>> {
        self.source.get_ref().take_error()
    }

    /// Like `read`, into memory that need not be initialized (a `Vec`'s spare capacity): a
    /// buffer that is never zeroed costs only the pages the reads reach, not its whole size.
    /// That holds on the heap, not for a large array on a task's stack: Rust's stack probe
    /// touches every page of a frame bigger than a page when the function is entered (a
    /// 16 KiB array made an echo connection cost 21 KB instead of 8.8).
    /// Returns `n`; the first `n` elements of `buf` are then initialized.
    ///
    /// # Errors
    /// As `read`.
    pub fn read_uninit(&self, buf: &mut [MaybeUninit<u8>]) -> io::Result<usize> {
        self.source.do_read(self.read_timeout.get(), buf)
    }

    /// Reads into the spare capacity of `buf` and appends what arrived, like tokio's
    /// `read_buf`: the safe form of [`TcpStream::read_uninit`] for a `Vec` whose capacity
    /// is reserved but never zeroed, so only the pages the reads reach are ever touched. When
    /// `buf` has no spare capacity, 8 KiB (std's default buffer size) are reserved first, so `Ok(0)`
    /// always means the peer closed its side. Returns the number of bytes appended.
    ///
    /// ```no_run
    /// # fn demo(stream: weft::net::TcpStream) -> std::io::Result<()> {
    /// let mut buf = Vec::with_capacity(16 * 1024);
    /// while stream.read_buf(&mut buf)? > 0 {
    ///     // use buf, then buf.clear() to read into the same capacity again
    ///     buf.clear();
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As `read`; `buf` is unchanged then.
    pub fn read_buf(&self, buf: &mut Vec<u8>) -> io::Result<usize> {
        const RESERVE: usize = 8 * 1024;
        if buf.len() == buf.capacity() {
            buf.reserve(RESERVE);
        }
        let n = self.read_uninit(buf.spare_capacity_mut())?;
        // SAFETY: `read_uninit` initialized the first `n` bytes of the spare capacity (its
        // contract), which start at `buf.len()`; `n` is at most the spare capacity's length.
        unsafe { buf.set_len(buf.len() + n) };
        Ok(n)
    }

    /// Waits until a read would return without blocking — data has arrived, the peer closed
    /// its side, or the connection failed — and takes nothing from the socket; like tokio's
    /// `TcpStream::readable`. A connection task that waits here instead of in `read` holds
    /// no buffer while the connection is idle, so it can take one only when there is
    /// something to read: with compacted stacks an idle connection then costs its live stack
    /// bytes, its task and its socket, not a buffer page (see `examples/echo.rs`). Honours
    /// the read timeout (`TimedOut`). A wake may be spurious: the read that follows can still
    /// wait, as `read` does.
    ///
    /// ```no_run
    /// # use std::io::Write;
    /// # fn demo(mut stream: weft::net::TcpStream) -> std::io::Result<()> {
    /// loop {
    ///     stream.readable()?;
    ///     let mut buf = Vec::with_capacity(16 * 1024); // taken only once data is waiting
    ///     if stream.read_buf(&mut buf)? == 0 {
    ///         return Ok(()); // the peer closed
    ///     }
    ///     stream.write_all(&buf)?;
    /// }
    /// # }
    /// ```
    ///
    /// # Errors
    /// The socket's pending error (as `read` would return it), [`Closed`](crate::net::Closed)
    /// after [`TcpStream::close`], or `TimedOut`.
    pub fn readable(&self) -> io::Result<()> {
        self.source.wait_readable(self.read_timeout.get())
    }

    /// Reads without removing the data from the queue.
    ///
    /// # Errors
    /// As `recv(2)`, or `TimedOut`.
    pub fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(n) = self.source.peek_inbox(buf) {
            return Ok(n);
        }
        self.source.do_io(
            Direction::Read,
            ParkReason::SocketRead,
            self.read_timeout.get(),
            |s| s.peek(buf),
        )
    }
}

impl Read for &TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.source.do_read(self.read_timeout.get(), as_uninit(buf))
    }

    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        // What an io_uring read left comes first (sched/uring.rs protocol step 4).
        if let Some(first) = bufs.iter_mut().find(|b| !b.is_empty()) {
            if let Some(result) = self.source.take_inbox(as_uninit(first)) {
                return result;
            }
        }
        self.source.do_io(
            Direction::Read,
            ParkReason::SocketRead,
            self.read_timeout.get(),
            |mut s| s.read_vectored(bufs),
        )
    }
}

impl Write for &TcpStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.source.do_io(
            Direction::Write,
            ParkReason::SocketWrite,
            self.write_timeout.get(),
            |mut s| s.write(buf),
        )
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.source.do_io(
            Direction::Write,
            ParkReason::SocketWrite,
            self.write_timeout.get(),
            |mut s| s.write_vectored(bufs),
        )
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Read for TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        (&*self).read(buf)
    }

    fn read_vectored(&mut self, bufs: &mut [IoSliceMut<'_>]) -> io::Result<usize> {
        (&*self).read_vectored(bufs)
    }
}

impl Write for TcpStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        (&*self).write(buf)
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        (&*self).write_vectored(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl fmt::Debug for TcpStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpStream")
            .field("addr", &self.local_addr().ok())
            .field("peer", &self.peer_addr().ok())
            .field("fd", &self.as_raw_fd())
            .finish()
    }
}

impl AsFd for TcpStream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.source.get_ref().as_fd()
    }
}

impl AsRawFd for TcpStream {
    fn as_raw_fd(&self) -> RawFd {
        self.source.get_ref().as_raw_fd()
    }
}

/// `buf` as a buffer a read may leave partly unwritten.
fn as_uninit(buf: &mut [u8]) -> &mut [MaybeUninit<u8>] {
    // SAFETY: same layout; what is written through the result is always initialized bytes
    // (reads copy bytes in), so `buf` stays initialized.
    unsafe { &mut *(buf as *mut [u8] as *mut [MaybeUninit<u8>]) }
}

/// Tries `f` on each resolved address; the last error if none works.
pub(super) fn each_addr<A: ToSocketAddrs, T>(
    addr: A,
    mut f: impl FnMut(&SocketAddr) -> io::Result<T>,
) -> io::Result<T> {
    let mut last = None;
    for addr in resolve(&addr)? {
        match f(&addr) {
            Ok(value) => return Ok(value),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "could not resolve to any addresses",
        )
    }))
}
