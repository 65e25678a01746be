//! The `uring` echo peer: the floor, an echo server on io_uring with no runtime at all.
//!
//! Owns: `weft-bench peer echo-server --runtime uring` ([`serve`]) and the check the echo
//! experiment makes before it lists the peer ([`available`]).
//!
//! Not a runtime peer: there are no tasks, no scheduler and no wakers, only a completion
//! loop per thread. It is what a server that uses io_uring as well as it can costs on this
//! kernel, so that a proposed io_uring backend for weft can be sized against it before it
//! is built. One thread per CPU (or `--threads N`), each with:
//! - its own ring, set up `SINGLE_ISSUER | DEFER_TASKRUN` (completions are run only when
//!   the thread enters the kernel to wait: no interrupts, no task-work IPIs), falling back
//!   to a plain ring on kernels that refuse those flags;
//! - its own listener on the same address (`SO_REUSEPORT`: the kernel spreads connections
//!   over the threads), with one multishot accept that installs each connection as a direct
//!   descriptor (a slot of the ring's file table: no fget/fput per operation; no setsockopt
//!   either, so TCP_NODELAY is set on the listener, which accepted sockets inherit);
//! - a provided-buffer ring of `BUFFERS` buffers of `BUFFER` bytes, which every
//!   connection's one multishot recv draws from;
//! - one `io_uring_enter` per loop iteration (`submit_and_wait`): the SQEs queued while the
//!   last batch of completions was handled go in with the wait for the next batch.
//!
//! Per connection: TCP_NODELAY, like the other servers; what a recv delivered is sent back
//! from the provided buffer itself (no copy), one send at a time in arrival order, the rest
//! of a short send sent again; the buffer goes back to the ring when its bytes are all sent.
//! On EOF the connection sends what it still holds, then closes; on an error it drops it.
//!
//! Invariants:
//! 1. A connection's slot is closed only when no operation on it is in flight (no send, no
//!    armed recv): the slot cannot be reused by an accept while a completion for the old
//!    connection may still arrive. Connections are indexed by slot.
//! 2. A provided buffer is either in the ring or held by exactly one connection's queue.
//! 3. The buffer ring and the buffers outlive the ring (field order in `Worker`).
//!
//! May call: io-uring, socket2, libc. Called by: `peer.rs` (the server) and `echo.rs`
//! ([`available`]).
//!
//! On SIGTERM or SIGKILL it dies like the tokio and threads peers (default disposition).
//! Where io_uring cannot be set up (ENOSYS, EPERM: `kernel.io_uring_disabled`) it says so
//! and fails before it prints `echo: listening on`.
#![warn(clippy::undocumented_unsafe_blocks)]

use std::collections::VecDeque;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use io_uring::types::{Fd, Fixed, Timespec};
use io_uring::{cqueue, opcode, squeue, IoUring};

/// Bytes per provided buffer: a recv delivers at most this much; more arrives as more
/// completions, still in order. Small because the kernel takes buffers in ring order, so
/// every buffer gets touched: 8192 × 4 KiB per thread was 17–21 KB of RSS per connection at
/// C=2,000 (and its page faults), 1 KiB is 4–5 KB, the same CPU per round trip for 32-byte
/// pings.
const BUFFER: usize = 1024;
/// Provided buffers per thread: a connection holds one per message it has not yet echoed,
/// so this is about the connections a thread can have mid-echo at once; past it a recv ends
/// with ENOBUFS and is re-armed once buffers come back.
const BUFFERS: u16 = 8192;
/// Most direct descriptors per ring (the table is also capped by RLIMIT_NOFILE).
const MAX_SLOTS: u32 = 32768;
/// The provided-buffer group every recv draws from.
const GROUP: u16 = 0;
/// Submission queue entries; the completion queue gets [`CQ_ENTRIES`] (multishot ops post
/// many completions per submission).
const SQ_ENTRIES: u32 = 4096;
const CQ_ENTRIES: u32 = 32768;

/// What a completion is for: the low byte of its `user_data`; the slot (or the listener's
/// descriptor) is above it.
const OP_ACCEPT: u64 = 1;
const OP_RECV: u64 = 2;
const OP_SEND: u64 = 3;
/// The back-off timer of an accept that failed (EMFILE): re-arm when it fires.
const OP_ACCEPT_RETRY: u64 = 4;
/// Close and shutdown, whose completions (failures only) need nothing.
const OP_IGNORE: u64 = 5;

/// A connection's direct descriptor: its slot in the ring's file table.
type Slot = RawFd;

fn user_data(fd: RawFd, op: u64) -> u64 {
    ((fd as u32 as u64) << 8) | op
}

/// Set to `off`, io_uring counts as unavailable (the test of the skipped row, where the
/// kernel cannot be made to refuse io_uring_setup).
const TURN_OFF: &str = "WEFT_BENCH_URING";

/// Whether io_uring can be set up here, with the reason when not (the echo experiment
/// lists the `uring` peer as skipped with it).
pub fn available() -> Result<(), String> {
    turned_off()
        .and_then(|()| IoUring::new(8))
        .map(drop)
        .map_err(|e| setup_error(&e))
}

fn turned_off() -> io::Result<()> {
    match std::env::var(TURN_OFF) {
        Ok(v) if v == "off" => Err(io::Error::other(format!("turned off by {TURN_OFF}=off"))),
        _ => Ok(()),
    }
}

fn setup_error(e: &io::Error) -> String {
    let sysctl = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .map(|v| format!(", kernel.io_uring_disabled = {}", v.trim()))
        .unwrap_or_default();
    format!("io_uring unavailable: io_uring_setup: {e}{sysctl}")
}

/// Serves `addr` on `threads` threads (default: one per CPU) until killed; returns only if
/// it cannot start.
pub fn serve(addr: &str, threads: Option<usize>) -> Result<(), String> {
    weft_loadtest::prepare_fds(1 << 16);
    let want: SocketAddr = addr
        .parse()
        .map_err(|e| format!("echo: bad address {addr}: {e}"))?;
    let threads = threads
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
        .unwrap_or(1)
        .max(1);
    // The first listener picks the port (the address may say 0); the others share it.
    let first = listener(want).map_err(|e| format!("echo: cannot listen on {addr}: {e}"))?;
    let local = socket2::SockRef::from(&first)
        .local_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .ok_or("echo: listener has no address")?;
    let mut listeners = vec![first];
    for _ in 1..threads {
        listeners
            .push(listener(local).map_err(|e| format!("echo: cannot listen on {local}: {e}"))?);
    }
    // A ring belongs to the thread that sets it up (SINGLE_ISSUER, DEFER_TASKRUN): each
    // thread builds its own and reports before the address is printed.
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<&'static str, String>>();
    let mut handles = Vec::new();
    for l in listeners {
        let ready = ready_tx.clone();
        handles.push(std::thread::spawn(move || match Worker::new(l) {
            Ok(mut w) => {
                let _ = ready.send(Ok(w.setup));
                w.run()
            }
            Err(e) => {
                let _ = ready.send(Err(e.clone()));
                Err(e)
            }
        }));
    }
    drop(ready_tx);
    let mut setup = "";
    for _ in 0..threads {
        setup = ready_rx
            .recv()
            .map_err(|_| "echo: a worker ended before it was ready".to_string())?
            .map_err(|e| format!("echo: {e}"))?;
    }
    eprintln!("echo: uring: {threads} thread(s), rings set up {setup}");
    println!("echo: listening on {local}");
    let _ = io::stdout().flush();
    for h in handles {
        match h.join() {
            Ok(Err(e)) => return Err(format!("echo: {e}")),
            Err(_) => return Err("echo: a worker panicked".into()),
            Ok(Ok(())) => {}
        }
    }
    Ok(())
}

/// A listening socket on `addr` that others may share (`SO_REUSEPORT`).
fn listener(addr: SocketAddr) -> io::Result<OwnedFd> {
    use socket2::{Domain, Protocol, Socket, Type};
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    // Accepted sockets inherit TCP_NODELAY from the listener (they are direct descriptors,
    // which setsockopt(2) cannot name).
    s.set_tcp_nodelay(true)?;
    s.bind(&addr.into())?;
    // As weft's listener: the kernel clamps it to net.core.somaxconn.
    s.listen(libc::c_int::MAX)?;
    Ok(s.into())
}

/// A chunk of a provided buffer a connection has received and not yet sent back.
struct Chunk {
    bid: u16,
    /// Sent so far, and received, in bytes from the buffer's start.
    sent: u32,
    len: u32,
}

/// One connection's state (slot `fd` of [`Worker::conns`]).
#[derive(Default)]
struct Conn {
    /// Received, not yet sent; the front one is being sent when `sending`.
    queue: VecDeque<Chunk>,
    sending: bool,
    /// A multishot recv is armed (its last completion has not come).
    receiving: bool,
    /// The peer closed its side: send what is queued, then close.
    eof: bool,
    /// A recv or send failed: drop what is queued and close.
    failed: bool,
}

/// The provided-buffer ring: weft's own (its io_uring reads use the same file).
#[allow(dead_code)]
#[path = "../../../weft/src/sched/buf_ring.rs"]
mod buf_ring;
use buf_ring::BufRing;

/// What a worker's completions change: everything but the ring itself.
struct State {
    bufs: BufRing,
    listener: OwnedFd,
    /// Indexed by direct-descriptor slot (invariant 1).
    conns: Vec<Conn>,
    /// SQEs made while handling completions, submitted with the next wait.
    backlog: Vec<squeue::Entry>,
    /// Connections whose recv ended with ENOBUFS: re-armed after buffers come back.
    starved: Vec<Slot>,
    /// The accept back-off (read by the kernel when the timeout is submitted).
    backoff: Timespec,
}

/// One thread's ring and state. Field order: the ring drops before the buffers it uses.
struct Worker {
    ring: IoUring,
    state: State,
    /// The ring's set-up flags, for the start-up line.
    setup: &'static str,
}

impl Worker {
    fn new(listener: OwnedFd) -> Result<Worker, String> {
        turned_off().map_err(|e| setup_error(&e))?;
        let (ring, setup) = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_cqsize(CQ_ENTRIES)
            .build(SQ_ENTRIES)
            .map(|r| (r, "SINGLE_ISSUER | DEFER_TASKRUN"))
            .or_else(|_| {
                IoUring::builder()
                    .setup_cqsize(CQ_ENTRIES)
                    .build(SQ_ENTRIES)
                    .map(|r| (r, "without SINGLE_ISSUER | DEFER_TASKRUN (refused)"))
            })
            .map_err(|e| setup_error(&e))?;
        // The file table the multishot accept allocates direct descriptors in: every op on a
        // connection names its slot, which spares the fget/fput of a process fd per op.
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit fills in the struct on this stack.
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
        let slots = (limit.rlim_cur as u32).clamp(1024, MAX_SLOTS);
        ring.submitter()
            .register_files_sparse(slots)
            .map_err(|e| format!("cannot register a file table of {slots} slots: {e}"))?;
        let bufs = BufRing::new(&ring, GROUP, BUFFERS, BUFFER)
            .map_err(|e| format!("cannot register the provided-buffer ring: {e}"))?;
        let mut state = State {
            bufs,
            listener,
            conns: Vec::new(),
            backlog: Vec::with_capacity(1024),
            starved: Vec::new(),
            backoff: Timespec::new().nsec(5_000_000),
        };
        state.arm_accept();
        Ok(Worker { ring, state, setup })
    }

    /// The completion loop: forever, unless the ring itself fails.
    fn run(&mut self) -> Result<(), String> {
        loop {
            self.submit_backlog()?;
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY)) => {}
                Err(e) => return Err(format!("io_uring_enter: {e}")),
            }
            let state = &mut self.state;
            for cqe in self.ring.completion() {
                state.complete(cqe.user_data(), cqe.result(), cqe.flags());
            }
            state.bufs.publish();
            state.rearm_starved();
        }
    }

    /// Moves the backlog into the submission queue, entering the kernel early only when the
    /// queue fills.
    fn submit_backlog(&mut self) -> Result<(), String> {
        let (submitter, mut sq, _) = self.ring.split();
        for entry in self.state.backlog.drain(..) {
            // SAFETY: every entry's pointers (send buffers in the provided-buffer mapping,
            // the back-off timespec in `State`) stay valid until its completion: both live
            // as long as the ring (invariants 2 and 3), and a buffer is not given back
            // before its send completes.
            while unsafe { sq.push(&entry) }.is_err() {
                sq.sync();
                submitter
                    .submit()
                    .map_err(|e| format!("io_uring_enter: {e}"))?;
                sq.sync();
            }
        }
        sq.sync();
        Ok(())
    }
}

impl State {
    fn arm_accept(&mut self) {
        let fd = self.listener.as_raw_fd();
        self.backlog.push(
            opcode::AcceptMulti::new(Fd(fd))
                .allocate_file_index(true)
                .build()
                .user_data(user_data(fd, OP_ACCEPT)),
        );
    }

    fn arm_recv(&mut self, slot: Slot) {
        self.conns[slot as usize].receiving = true;
        self.backlog.push(
            opcode::RecvMulti::new(Fixed(slot as u32), GROUP)
                .build()
                .user_data(user_data(slot, OP_RECV)),
        );
    }

    fn complete(&mut self, data: u64, res: i32, flags: u32) {
        let slot = (data >> 8) as Slot;
        match data & 0xff {
            OP_ACCEPT => self.accepted(res, cqueue::more(flags)),
            OP_ACCEPT_RETRY => self.arm_accept(),
            OP_RECV => self.received(slot, res, flags),
            OP_SEND => self.sent(slot, res),
            _ => {}
        }
    }

    fn accepted(&mut self, res: i32, more: bool) {
        if res >= 0 {
            // A direct descriptor: a slot of the ring's file table, not a process descriptor.
            let slot = res;
            if self.conns.len() <= slot as usize {
                self.conns.resize_with(slot as usize + 1, Conn::default);
            }
            self.conns[slot as usize] = Conn::default();
            self.arm_recv(slot);
        }
        if !more {
            if res >= 0 {
                self.arm_accept();
            } else {
                // Out of slots (ENFILE) or memory: try again in 5 ms, not in a busy loop.
                self.backlog.push(
                    opcode::Timeout::new(&self.backoff)
                        .build()
                        .user_data(user_data(0, OP_ACCEPT_RETRY)),
                );
            }
        }
    }

    fn received(&mut self, slot: Slot, res: i32, flags: u32) {
        let more = cqueue::more(flags);
        let conn = &mut self.conns[slot as usize];
        if !more {
            conn.receiving = false;
        }
        if res > 0 {
            let bid = cqueue::buffer_select(flags).expect("a recv with data names its buffer");
            if conn.failed {
                self.bufs.give(bid);
            } else {
                conn.queue.push_back(Chunk {
                    bid,
                    sent: 0,
                    len: res as u32,
                });
                if !conn.sending {
                    self.send_front(slot);
                }
                if !more {
                    self.arm_recv(slot);
                }
            }
        } else if res == -libc::ENOBUFS && !conn.failed {
            self.starved.push(slot);
        } else if res == 0 {
            conn.eof = true;
            self.maybe_close(slot);
        } else if res < 0 {
            self.fail(slot);
        }
    }

    fn sent(&mut self, slot: Slot, res: i32) {
        let conn = &mut self.conns[slot as usize];
        conn.sending = false;
        if res <= 0 || conn.failed {
            self.fail(slot);
            return;
        }
        let front = conn.queue.front_mut().expect("a send has its chunk");
        front.sent += res as u32;
        if front.sent == front.len {
            let bid = front.bid;
            conn.queue.pop_front();
            self.bufs.give(bid);
        }
        if conn.queue.is_empty() {
            self.maybe_close(slot);
        } else {
            self.send_front(slot);
        }
    }

    /// Sends the rest of the front chunk (one send in flight per connection, so the
    /// echo keeps the order it received in).
    fn send_front(&mut self, slot: Slot) {
        let conn = &mut self.conns[slot as usize];
        let front = conn.queue.front().expect("something to send");
        conn.sending = true;
        let at = self.bufs.at(front.bid, front.sent as usize);
        self.backlog.push(
            opcode::Send::new(Fixed(slot as u32), at, front.len - front.sent)
                .flags(libc::MSG_NOSIGNAL)
                .build()
                .user_data(user_data(slot, OP_SEND)),
        );
    }

    /// A recv or send failed: give back what is queued, stop the recv, close when idle.
    fn fail(&mut self, slot: Slot) {
        let conn = &mut self.conns[slot as usize];
        let first = !conn.failed;
        conn.failed = true;
        if !conn.sending {
            for c in conn.queue.drain(..) {
                self.bufs.give(c.bid);
            }
        }
        if first && conn.receiving {
            // The armed recv holds the socket open; shutting it down makes it end.
            self.backlog.push(
                opcode::Shutdown::new(Fixed(slot as u32), libc::SHUT_RDWR)
                    .build()
                    .flags(squeue::Flags::SKIP_SUCCESS)
                    .user_data(user_data(slot, OP_IGNORE)),
            );
        }
        self.maybe_close(slot);
    }

    /// Closes `slot` once nothing on it is in flight and nothing is left to send
    /// (invariant 1).
    fn maybe_close(&mut self, slot: Slot) {
        let conn = &self.conns[slot as usize];
        let done = conn.failed || (conn.eof && conn.queue.is_empty());
        if done && !conn.sending && !conn.receiving {
            self.conns[slot as usize] = Conn::default();
            self.backlog.push(
                opcode::Close::new(Fixed(slot as u32))
                    .build()
                    .flags(squeue::Flags::SKIP_SUCCESS)
                    .user_data(user_data(slot, OP_IGNORE)),
            );
        }
    }

    fn rearm_starved(&mut self) {
        for slot in std::mem::take(&mut self.starved) {
            let conn = &self.conns[slot as usize];
            if !conn.failed && !conn.eof && !conn.receiving {
                self.arm_recv(slot);
            }
        }
    }
}
