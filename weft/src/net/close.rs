//! Closing a socket from elsewhere: Go's `ln.Close()` / `conn.Close()` while another
//! goroutine is blocked in `Accept` or `Read`, which then returns `net.ErrClosed`.
//!
//! ```
//! use std::sync::Arc;
//! weft::run(|| {
//!     let listener = Arc::new(weft::net::TcpListener::bind("127.0.0.1:0").unwrap());
//!     let l = listener.clone();
//!     let server = weft::spawn(move || loop {
//!         match l.accept() {
//!             Ok((conn, _)) => drop(conn),
//!             Err(e) if weft::net::is_closed(&e) => return "closed",
//!             Err(e) => panic!("{e}"),
//!         }
//!     });
//!     weft::time::sleep(std::time::Duration::from_millis(5));
//!     listener.close(); // from another task: the parked accept returns the error
//!     assert_eq!(server.join().unwrap(), "closed");
//! });
//! ```
//!
//! Owns: [`Closed`], the error, and `Closing`, a socket's closed flag.
//!
//! Invariants:
//! 1. The flag is set once, by `close`, before the socket is shut down (`shutdown(2)`) and
//!    its parked waiters are woken; every operation checks it first, so an operation that
//!    starts after the flag is set, or is woken by the close, fails with [`Closed`].
//! 2. `close` never closes the descriptor: the owner's drop does, after deregistering it
//!    (net/mod.rs invariant 2). So no other thread can be using a reused descriptor number
//!    while a task still holds the closed socket.
//!
//! May call: `net::sys`, `sched::io` (to wake waiters). Called by: `net` (the sockets).
//!
//! Why a flag plus `shutdown(2)` and a wake, not `close(2)`: closing a descriptor another
//! thread is using is a race with descriptor reuse (the number may name a new socket before
//! that thread retries). `shutdown(2)` wakes a plain thread blocked in `poll(2)` on the
//! socket (it reports hang-up), and the readiness bump wakes parked tasks without waiting for
//! the kernel's event; the flag turns what either then sees into one clear error.

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

/// The error of an operation on a socket that was closed with `close` (Go's
/// `net.ErrClosed`): `io::ErrorKind::NotConnected` with this as its inner error. Test for it
/// with [`is_closed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed;

impl fmt::Display for Closed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("use of closed network connection")
    }
}

impl std::error::Error for Closed {}

/// True if `e` says its socket was closed with `close` ([`Closed`]), as Go's
/// `errors.Is(err, net.ErrClosed)`.
pub fn is_closed(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<Closed>())
}

pub(crate) fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::NotConnected, Closed)
}

/// A socket's closed flag (invariant 1).
#[derive(Debug, Default)]
pub(crate) struct Closing(AtomicBool);

impl Closing {
    /// Fails with [`Closed`] once the socket was closed.
    #[inline]
    pub(crate) fn check(&self) -> io::Result<()> {
        // Acquire: pairs with the Release swap in `close`.
        if self.0.load(Ordering::Acquire) {
            Err(closed())
        } else {
            Ok(())
        }
    }

    /// Sets the flag; true the first time.
    pub(crate) fn close(&self) -> bool {
        // Release: pairs with `check`; AcqRel so a second close sees the first.
        !self.0.swap(true, Ordering::AcqRel)
    }
}
