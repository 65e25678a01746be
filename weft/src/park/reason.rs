//! Why a task parked: the label a task dump shows for it (Go's `waitReason`).
//!
//! Owns: [`ParkReason`], one variant per kind of park site.
//!
//! Invariants:
//! 1. Every park site passes its own variant; a variant is never reused for another kind of
//!    wait (STYLE.md rule 5), so a dump grouped by reason tells the sites apart.
//! 2. The reason costs nothing, at the park or while the task waits: it is a constant
//!    argument of the park call (the park is inlined into each site), materialised only on
//!    the cold path that answers a dump's capture (sched/dump.rs, "Capturing a parked
//!    task") and in the `Suspend::Park` value the park switches out with, which a trace reads
//!    (debug/trace/mod.rs) and which costs the switch nothing (a different constant).
//!
//! May call: nothing. Called by: every park site (`chan`, `sync`, `time`, `net`, `task`), and
//! `debug`, which renders it (dumps) and records it (traces).
//!
//! Why an argument rather than a field of the task header written at every park: the ping-pong
//! path parks twice per round trip, and a store there is measurable; a constant costs nothing.

use std::fmt;

/// What a parked task waits for, as shown by [`crate::debug::dump`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
#[repr(u8)]
pub enum ParkReason {
    /// `Receiver::recv` and its timed forms, on a channel that is empty.
    ChanRecv,
    /// `Sender::send` and its timed forms, on a channel that is full.
    ChanSend,
    /// `select!` with no ready arm.
    Select,
    /// A stream read or peek that would block (`TcpStream`).
    SocketRead,
    /// A stream write that would block (`TcpStream`).
    SocketWrite,
    /// `TcpListener::accept` with no pending connection.
    SocketAccept,
    /// `TcpStream::connect` while the handshake is in flight.
    SocketConnect,
    /// A datagram receive that would block (`UdpSocket`).
    DatagramRecv,
    /// A datagram send that would block (`UdpSocket`).
    DatagramSend,
    /// `time::sleep` and `time::sleep_until`.
    Sleep,
    /// `JoinHandle::join`.
    Join,
    /// `sync::Mutex::lock`.
    Mutex,
    /// `sync::RwLock::read`.
    RwLockRead,
    /// `sync::RwLock::write`.
    RwLockWrite,
    /// `sync::Condvar::wait` and its timed forms.
    Condvar,
    /// `sync::WaitGroup::wait`.
    WaitGroup,
    /// `sync::Semaphore::acquire`.
    Semaphore,
    /// `sync::Barrier::wait`.
    Barrier,
    /// `sync::Once::call_once` while another caller runs the initialiser.
    Once,
    /// `task::park`.
    Park,
    /// `task::park_timeout`.
    ParkTimeout,
    /// `task::spawn_blocking`: the closure runs on the blocking pool.
    BlockingPool,
    /// An interposed libc call waiting for a descriptor to be readable (feature `interpose`).
    LibcRead,
    /// An interposed libc call waiting for a descriptor to be writable (feature `interpose`).
    LibcWrite,
    /// An interposed `poll` with no descriptor and no timeout (feature `interpose`).
    LibcPoll,
    /// `future::block_on`: a pending future.
    Future,
    /// `tokio::block_on`: a pending future polled in a tokio runtime's context (feature
    /// `tokio`).
    TokioFuture,
    /// `tokio::spawn_future`: a future running on a tokio runtime (feature `tokio`).
    TokioTask,
}

impl ParkReason {
    /// The label, lowercase like Go's (`chan receive`, `sync.Mutex.Lock`).
    pub fn as_str(self) -> &'static str {
        match self {
            ParkReason::ChanRecv => "chan receive",
            ParkReason::ChanSend => "chan send",
            ParkReason::Select => "select",
            ParkReason::SocketRead => "socket read",
            ParkReason::SocketWrite => "socket write",
            ParkReason::SocketAccept => "socket accept",
            ParkReason::SocketConnect => "socket connect",
            ParkReason::DatagramRecv => "datagram receive",
            ParkReason::DatagramSend => "datagram send",
            ParkReason::Sleep => "sleep",
            ParkReason::Join => "join",
            ParkReason::Mutex => "sync.Mutex.lock",
            ParkReason::RwLockRead => "sync.RwLock.read",
            ParkReason::RwLockWrite => "sync.RwLock.write",
            ParkReason::Condvar => "sync.Condvar.wait",
            ParkReason::WaitGroup => "sync.WaitGroup.wait",
            ParkReason::Semaphore => "sync.Semaphore.acquire",
            ParkReason::Barrier => "sync.Barrier.wait",
            ParkReason::Once => "sync.Once.call_once",
            ParkReason::Park => "park",
            ParkReason::ParkTimeout => "park_timeout",
            ParkReason::BlockingPool => "blocking pool",
            ParkReason::LibcRead => "libc read (interposed)",
            ParkReason::LibcWrite => "libc write (interposed)",
            ParkReason::LibcPoll => "libc poll (interposed)",
            ParkReason::Future => "future",
            ParkReason::TokioFuture => "tokio future",
            ParkReason::TokioTask => "tokio task",
        }
    }

    /// Every variant, in declaration order (for tests and documentation).
    pub const ALL: [ParkReason; 28] = [
        ParkReason::ChanRecv,
        ParkReason::ChanSend,
        ParkReason::Select,
        ParkReason::SocketRead,
        ParkReason::SocketWrite,
        ParkReason::SocketAccept,
        ParkReason::SocketConnect,
        ParkReason::DatagramRecv,
        ParkReason::DatagramSend,
        ParkReason::Sleep,
        ParkReason::Join,
        ParkReason::Mutex,
        ParkReason::RwLockRead,
        ParkReason::RwLockWrite,
        ParkReason::Condvar,
        ParkReason::WaitGroup,
        ParkReason::Semaphore,
        ParkReason::Barrier,
        ParkReason::Once,
        ParkReason::Park,
        ParkReason::ParkTimeout,
        ParkReason::BlockingPool,
        ParkReason::LibcRead,
        ParkReason::LibcWrite,
        ParkReason::LibcPoll,
        ParkReason::Future,
        ParkReason::TokioFuture,
        ParkReason::TokioTask,
    ];
}

impl fmt::Display for ParkReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::ParkReason;

    #[test]
    fn all_lists_every_reason_at_its_own_discriminant() {
        for (i, reason) in ParkReason::ALL.iter().enumerate() {
            assert_eq!(*reason as usize, i, "{reason}");
        }
    }

    #[test]
    fn every_reason_has_its_own_label() {
        let mut labels: Vec<_> = ParkReason::ALL.iter().map(|r| r.as_str()).collect();
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels.len(), ParkReason::ALL.len());
    }
}
