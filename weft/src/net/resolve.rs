//! Name resolution that never stalls a worker.
//!
//! Owns: the sealed [`ToSocketAddrs`] trait. Addresses that are already numeric resolve in
//! place; a host name goes to `getaddrinfo(3)` (std's resolver) on the blocking pool while the
//! task parks (net/mod.rs invariant 3). On a plain thread, it resolves in place.
//!
//! May call: `task::spawn_blocking`. Called by: `net/tcp.rs`, `net/udp.rs`.
//!
//! Why a trait of our own rather than `std::net::ToSocketAddrs`: resolving on another thread
//! needs an owned, `Send` form of the address, and std's trait gives no way to get one from a
//! borrowed `&str` (tokio makes the same choice).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// What an address resolves to: numbers now, or a name to look up.
#[doc(hidden)]
#[derive(Debug)]
pub enum Resolved {
    Addrs(Vec<SocketAddr>),
    /// `host:port`, in a form `std::net::ToSocketAddrs for str` accepts.
    Lookup(String),
}

mod sealed {
    pub trait Sealed {}
}

/// Things that convert to socket addresses, like `std::net::ToSocketAddrs`, implemented for the
/// same types; host names are looked up without blocking a worker.
pub trait ToSocketAddrs: sealed::Sealed {
    #[doc(hidden)]
    fn to_resolved(&self) -> Resolved;
}

macro_rules! numeric {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl ToSocketAddrs for $t {
            fn to_resolved(&self) -> Resolved {
                Resolved::Addrs(vec![SocketAddr::from(*self)])
            }
        }
    )*};
}

numeric!(
    SocketAddr,
    SocketAddrV4,
    SocketAddrV6,
    (IpAddr, u16),
    (Ipv4Addr, u16),
    (Ipv6Addr, u16)
);

impl sealed::Sealed for str {}
impl ToSocketAddrs for str {
    fn to_resolved(&self) -> Resolved {
        match self.parse::<SocketAddr>() {
            Ok(addr) => Resolved::Addrs(vec![addr]),
            Err(_) => Resolved::Lookup(self.to_owned()),
        }
    }
}

impl sealed::Sealed for String {}
impl ToSocketAddrs for String {
    fn to_resolved(&self) -> Resolved {
        self.as_str().to_resolved()
    }
}

impl sealed::Sealed for (&str, u16) {}
impl ToSocketAddrs for (&str, u16) {
    fn to_resolved(&self) -> Resolved {
        match self.0.parse::<IpAddr>() {
            Ok(ip) => Resolved::Addrs(vec![SocketAddr::new(ip, self.1)]),
            Err(_) => Resolved::Lookup(format!("{}:{}", self.0, self.1)),
        }
    }
}

impl sealed::Sealed for (String, u16) {}
impl ToSocketAddrs for (String, u16) {
    fn to_resolved(&self) -> Resolved {
        (self.0.as_str(), self.1).to_resolved()
    }
}

impl sealed::Sealed for [SocketAddr] {}
impl ToSocketAddrs for [SocketAddr] {
    fn to_resolved(&self) -> Resolved {
        Resolved::Addrs(self.to_vec())
    }
}

impl<T: ToSocketAddrs + ?Sized> sealed::Sealed for &T {}
impl<T: ToSocketAddrs + ?Sized> ToSocketAddrs for &T {
    fn to_resolved(&self) -> Resolved {
        (**self).to_resolved()
    }
}

/// Resolves `addr`; a name lookup runs on the blocking pool when called from a task.
pub(crate) fn resolve<A: ToSocketAddrs + ?Sized>(addr: &A) -> io::Result<Vec<SocketAddr>> {
    match addr.to_resolved() {
        Resolved::Addrs(addrs) => Ok(addrs),
        Resolved::Lookup(name) => {
            let lookup = move || -> io::Result<Vec<SocketAddr>> {
                Ok(std::net::ToSocketAddrs::to_socket_addrs(name.as_str())?.collect())
            };
            if crate::task::try_current().is_some() {
                crate::task::try_spawn_blocking(lookup)?
            } else {
                lookup()
            }
        }
    }
}

/// Resolves `addr` like `TcpStream::connect` would, without stalling a worker: numeric
/// addresses at once, host names on the blocking pool.
///
/// # Errors
/// As `getaddrinfo(3)`, or when the blocking pool is out of threads.
pub fn lookup_host<A: ToSocketAddrs>(addr: A) -> io::Result<Vec<SocketAddr>> {
    resolve(&addr)
}
