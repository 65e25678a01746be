//! io_uring stream reads: a task's `read` completes in the kernel, without a `recv` of its own.
//!
//! Owns: each worker's [`Uring`] (made when the worker starts if the runtime has
//! `RuntimeBuilder::io_uring` on; a worker whose ring cannot be set up reads through epoll),
//! its provided-buffer ring and its table of reads in flight ([`Op`]). Each stream's inbox —
//! bytes an io_uring read received that no caller has taken yet — is sched/inbox.rs.
//!
//! A read (net/mod.rs `Source::read_into`) that would wait queues an `IORING_OP_RECV` with
//! `IOSQE_BUFFER_SELECT` on its worker's ring and parks; the kernel picks one of the ring's
//! provided buffers when the data arrives, and the worker wakes the task from the completion.
//! The task copies the bytes into the caller's buffer and gives the provided buffer back. The
//! queued reads go in with one `io_uring_enter` per poll of the worker (or before it sleeps):
//! a connection's round trip costs its `send` and a share of that enter, where through epoll
//! it costs a `recv`, a `send` and a share of an `epoll_wait`.
//!
//! The protocol (numbered as the code cites them):
//! 1. A read first takes what the stream's inbox holds, then, unless the `drained` hint says
//!    the socket is empty, tries `recv` itself; only then does it queue a recv here.
//! 2. The kernel writes into a provided buffer, never into the caller's memory: a parked task's
//!    stack (which compaction may take away, stack/compact.rs) is never a target of the kernel.
//! 3. At its deadline a read queues an `IORING_OP_ASYNC_CANCEL` for its recv, submitted at
//!    once (the recv takes its file before the caller may close the descriptor and the number
//!    be reused), and waits for the recv's end: `ECANCELED` (the read times out) or the bytes
//!    that beat the cancel (the read returns them). A *cancelled task* cannot park again: it
//!    cancels the recv the same way and polls the ring for its end (the kernel ends a recv
//!    waiting for data at once); bytes that beat the cancel are returned, and the
//!    cancellation unwinds at the next wait. Only a recv still in flight after that is left
//!    *orphaned*, counted in the stream's inbox: when it completes, its bytes (or its error)
//!    go to the inbox and the stream's readers are woken. Nothing received is lost.
//! 4. Order: bytes are taken in the order the kernel received them. A read that completes
//!    while the inbox holds bytes appends its own after them and takes from the inbox; a read
//!    waits while the stream has orphans in flight (the only reads that could still deliver
//!    older bytes), so a read after a cancelled one on another thread cannot overtake it.
//!
//! Invariants:
//! 1. Only the worker's thread touches its ring, its buffers and its op table: tasks run on
//!    their worker's thread for life (sched/mod.rs invariant 1), so a task's read queues,
//!    waits for and finishes its op on one thread (`IORING_SETUP_SINGLE_ISSUER`).
//! 2. An op's slot in the table is freed by whoever saw it last: the task that takes its
//!    completion, or the reap of an orphan. A `user_data` is the slot index + 1; 0 marks the
//!    cancels, whose completions need nothing.
//! 3. A provided buffer is in the ring, or named by exactly one completion not yet reaped.
//! 4. The buffers are unmapped only once no read can write into them: a worker's ring is
//!    closed after every read in flight was cancelled and has completed (`Uring`'s `Drop`;
//!    a completion is posted after its copy), and the buffers unmapped after that; if the
//!    kernel does not end them all within a second, the buffers are leaked instead.
//!
//! May call: `park`, `io` (the stream's readiness and inbox), `worker` (the current worker).
//! Called by: `net` (reads), `sched/worker.rs` (submit and reap at each poll, before a sleep).
//!
//! Why `COOP_TASKRUN`: a worker sleeps in epoll, not in `io_uring_enter`. With cooperative
//! task runs a completion's task work marks the worker's thread (no IPI) and ends its
//! `epoll_wait`, and runs at the next return from any of the thread's syscalls, which posts
//! the completion; the worker reaps at every poll and after every sleep. `DEFER_TASKRUN`
//! (which weft-bench's `uring` floor uses) runs that work only inside an `io_uring_enter`
//! that asks for events, and its eventfd did not end the sleeps reliably here: at 50 echo
//! connections, round trips stalled for 10–40 ms (1,756–2,402 round trips/s against ≈100K).
//! The ring's own descriptor is in the worker's epoll, for completions posted from the
//! kernel's io-wq threads.
//!
//! Why copy into the caller's buffer rather than read into it: the caller's buffer may be on
//! the task's stack, parked for as long as the connection is idle (protocol step 2), and an
//! idle connection then holds no buffer at all, as with `TcpStream::readable`.

use std::cell::{Cell, RefCell};
use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::Arc;
use std::time::Instant;

use io_uring::types::Fd;
use io_uring::{cqueue, opcode, squeue, IoUring};

use super::buf_ring::BufRing;
use super::io::{Inbox, Readiness};
use super::park::{self, Waiter};
use super::runtime::Remote;
use super::worker::current_worker;
use crate::park::ParkReason;

/// Submission queue entries per ring (the completion queue gets twice as many).
const ENTRIES: u32 = 1024;
/// Bytes per provided buffer: one recv delivers at most this much (a read that filled it
/// tries a `recv` of its own for the rest).
pub(crate) const BUFFER: usize = 2048;
/// Provided buffers per worker. A buffer is held from the kernel's completion until the
/// worker's next reap, so this bounds the completions between two reaps; past it a recv ends
/// with `ENOBUFS` and its read waits through epoll instead. The kernel takes buffers in ring
/// order, so all of them are touched after a while: 512 KiB per worker.
const BUFFERS: u16 = 256;
/// The provided-buffer group of the ring.
const GROUP: u16 = 0;
/// Enters per [`Uring::poll`] at most, while completion work is left.
const POLL_ROUNDS: u32 = 8;
/// Polls a cancelled task makes for its recv's end before it orphans it.
const SETTLE_POLLS: u32 = 64;
/// Reaps between tries to queue a cancel the ring refused.
const CANCEL_TRIES: u32 = 8;

/// [`SETTLE_POLLS`], or none where the environment has `WEFT_URING_ORPHAN_CANCELLED=1`: the
/// orphan path, which the kernel's prompt cancel leaves untaken otherwise, under test
/// (tests/net_uring.rs).
fn settle_polls() -> u32 {
    static POLLS: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *POLLS.get_or_init(|| {
        match std::env::var_os("WEFT_URING_ORPHAN_CANCELLED").is_some_and(|v| v == "1") {
            true => 0,
            false => SETTLE_POLLS,
        }
    })
}

/// A worker's io_uring. Its `Drop` ends the reads in flight, then closes the ring, then
/// unmaps the buffers (invariant 4).
pub(crate) struct Uring {
    ring: ManuallyDrop<RefCell<IoUring>>,
    ops: RefCell<slab::Slab<Op>>,
    bufs: ManuallyDrop<BufRing>,
    /// Entries pushed to the submission queue since the last `io_uring_enter`.
    queued: Cell<u32>,
}

/// A read in flight (invariant 2).
enum Op {
    /// Its task waits for it; the descriptor it reads (open while the task waits: it borrows
    /// the stream), to queue the recv again when it found no free buffer.
    Waiting(Waiter, std::os::fd::RawFd),
    /// Completed; its task has not taken the result yet. The bytes were copied out of the
    /// provided buffer at the reap, which gave the buffer back at once: a buffer is then held
    /// only from the kernel's completion to the worker's next reap, not until the task runs.
    Done { res: i32, bytes: Vec<u8> },
    /// Its task gave it up (protocol step 3): what it receives goes to this stream's inbox.
    Orphan(Arc<Readiness>),
}

/// What a read through the ring came to.
pub(crate) enum Recv<R> {
    /// Bytes arrived: what `consume` returned for them.
    Data(R),
    /// The peer closed its side (or `close` shut the socket down).
    Eof,
    /// The recv failed with this error.
    Failed(io::Error),
    /// The deadline passed first; the recv was cancelled and has ended (step 3).
    TimedOut,
    /// No provided buffer was free, or the ring could take no entry: wait through epoll.
    NoBuffers,
    /// A cancellation that was withdrawn ended the wait (the recv ended, or is orphaned):
    /// look again.
    Again,
}

/// Waits until no orphaned read of `inbox`'s stream is in flight (step 4): a task reaps its
/// own worker's completions and yields meanwhile (the orphan may be another worker's), a plain
/// thread sleeps briefly. Orphans are rare: the read of a task cancelled meanwhile. Returns
/// whether it waited: the inbox may hold their bytes now.
#[inline]
pub(crate) fn wait_for_orphans(inbox: Inbox<'_>) -> bool {
    if !inbox.has_orphans() {
        return false;
    }
    wait_out_orphans(inbox);
    true
}

#[cold]
#[inline(never)]
fn wait_out_orphans(inbox: Inbox<'_>) {
    while inbox.has_orphans() {
        match current_worker() {
            Some(worker) if worker.current.get().is_some() => {
                if let Some(uring) = worker.uring_if_started() {
                    uring.poll();
                }
                if inbox.has_orphans() {
                    super::park::suspend_current(super::Suspend::Yield);
                }
            }
            _ => std::thread::sleep(std::time::Duration::from_micros(50)),
        }
    }
}

impl Uring {
    /// A ring for the worker whose remote is `remote`, with its buffers, its descriptor in
    /// the worker's epoll.
    pub(super) fn new(remote: &Remote) -> io::Result<Uring> {
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_coop_taskrun()
            .setup_taskrun_flag()
            .build(ENTRIES)
            .or_else(|_| IoUring::builder().build(ENTRIES))?;
        let bufs = BufRing::new(&ring, GROUP, BUFFERS, BUFFER)?;
        // SAFETY: the ring's descriptor stays open as long as the ring; closing it (the ring's
        // drop) removes it from the epoll instance.
        let ring_fd = unsafe { BorrowedFd::borrow_raw(ring.as_raw_fd()) };
        remote.io.add_notifier(ring_fd)?;
        Ok(Uring {
            ring: ManuallyDrop::new(RefCell::new(ring)),
            ops: RefCell::new(slab::Slab::new()),
            bufs: ManuallyDrop::new(bufs),
            queued: Cell::new(0),
        })
    }

    /// Whether reads are in flight: the worker must not spin or sleep without a look at the
    /// ring (worker.rs `idle`).
    pub(super) fn busy(&self) -> bool {
        !self.ops.borrow().is_empty() || self.queued.get() > 0
    }

    /// Pushes `entry`, entering the kernel first if the queue is full; false if it still
    /// cannot be queued (the kernel refuses submissions while completions overflow: reaping
    /// lets it take them again).
    fn push(&self, entry: &squeue::Entry) -> bool {
        let mut ring = self.ring.borrow_mut();
        for _ in 0..2 {
            // SAFETY: every entry queued here points at nothing of the caller's: a recv names
            // a provided-buffer group, a cancel a user_data (protocol step 2).
            if unsafe { ring.submission().push(entry) }.is_ok() {
                self.queued.set(self.queued.get() + 1);
                return true;
            }
            if ring.submit().is_ok() {
                self.queued.set(0);
            }
        }
        false
    }

    /// Hands out the completions posted so far, then submits what was queued and runs the
    /// completion work the kernel holds for this thread (an `io_uring_enter` only when there
    /// is something for it), handing out what that posted; again while work is left, up to
    /// [`POLL_ROUNDS`] times.
    pub(crate) fn poll(&self) {
        // Completions may be waiting without an enter: posted by task work that ran at the
        // end of some other syscall of this thread, or by the kernel's io-wq threads.
        self.reap();
        for _ in 0..POLL_ROUNDS {
            if !(self.queued.get() > 0 || self.work_pending()) {
                return;
            }
            let ring = self.ring.borrow();
            // EBUSY: the completion queue is full; the reap below makes room, the entries
            // stay queued for the next poll. EINTR: the same.
            if ring.submit().is_ok() {
                self.queued.set(0);
            }
            drop(ring);
            self.reap();
        }
    }

    /// Whether the kernel holds completion work for this thread (`IORING_SQ_TASKRUN`) or
    /// completions that overflowed the queue: a worker polls again rather than sleep on
    /// those (worker.rs `idle`).
    pub(crate) fn work_pending(&self) -> bool {
        let mut ring = self.ring.borrow_mut();
        let sq = ring.submission();
        sq.taskrun() || sq.cq_overflow()
    }

    /// Hands out the completions: a waiting task's is stored and the task woken, an
    /// orphan's bytes go to its stream's inbox (protocol step 3).
    fn reap(&self) {
        let mut woken: Vec<Waiter> = Vec::new();
        let mut orphans: Vec<(Arc<Readiness>, i32, u32)> = Vec::new();
        let mut starved: Vec<(usize, std::os::fd::RawFd)> = Vec::new();
        {
            let mut ring = self.ring.borrow_mut();
            let mut ops = self.ops.borrow_mut();
            for cqe in ring.completion() {
                let Some(id) = (cqe.user_data() as usize).checked_sub(1) else {
                    continue;
                };
                let (res, flags) = (cqe.result(), cqe.flags());
                let Some(op) = ops.get_mut(id) else {
                    continue;
                };
                match *op {
                    Op::Waiting(_, fd) if res == -libc::ENOBUFS => {
                        // Buffers come back in this reap: queued again, the task still waits.
                        starved.push((id, fd));
                    }
                    Op::Waiting(..) => {
                        let bytes = match cqueue::buffer_select(flags) {
                            Some(bid) if res > 0 => {
                                let bytes = self.bufs.bytes(bid, res as usize).to_vec();
                                self.bufs.give(bid);
                                bytes
                            }
                            _ => Vec::new(),
                        };
                        if let Op::Waiting(waiter, _) =
                            std::mem::replace(op, Op::Done { res, bytes })
                        {
                            woken.push(waiter);
                        }
                    }
                    Op::Orphan(_) => {
                        if let Op::Orphan(readiness) = ops.remove(id) {
                            orphans.push((readiness, res, flags));
                        }
                    }
                    Op::Done { .. } => unreachable!("weft: two completions for one io_uring read"),
                }
            }
        }
        for (readiness, res, flags) in orphans {
            let inbox = readiness.inbox();
            if res > 0 {
                if let Some(bid) = cqueue::buffer_select(flags) {
                    inbox.push(self.bufs.bytes(bid, res as usize));
                    self.bufs.give(bid);
                }
            } else if res < 0 && !matches!(-res, libc::ECANCELED | libc::ENOBUFS | libc::EINTR) {
                inbox.push_error(-res);
            }
            inbox.orphan_ended();
            // Readers waiting through epoll, or for the orphans, look again.
            readiness.wake_readers();
        }
        self.bufs.publish();
        for (id, fd) in starved {
            if !self.push(&recv_entry(fd, id)) {
                // No room even after a submit: the task looks again and waits through epoll.
                let done = Op::Done {
                    res: -libc::ENOBUFS,
                    bytes: Vec::new(),
                };
                if let Op::Waiting(waiter, _) =
                    std::mem::replace(&mut self.ops.borrow_mut()[id], done)
                {
                    woken.push(waiter);
                }
            }
        }
        for waiter in woken {
            waiter.wake();
        }
    }

    /// Queues a recv of `fd` into a provided buffer for the running task; its op's slot.
    fn start_recv(&self, fd: BorrowedFd<'_>) -> Option<usize> {
        let fd = fd.as_raw_fd();
        let id = self
            .ops
            .borrow_mut()
            .insert(Op::Waiting(Waiter::current(), fd));
        if self.push(&recv_entry(fd, id)) {
            Some(id)
        } else {
            self.ops.borrow_mut().remove(id);
            None
        }
    }

    /// The completion of op `id`, freeing its slot, if it came.
    fn take_done(&self, id: usize) -> Option<(i32, Vec<u8>)> {
        let mut ops = self.ops.borrow_mut();
        match ops.get(id) {
            Some(Op::Done { .. }) => match ops.remove(id) {
                Op::Done { res, bytes } => Some((res, bytes)),
                _ => unreachable!(),
            },
            _ => None,
        }
    }

    /// Asks the kernel to end op `id` (its completion then comes with `ECANCELED`, or with
    /// the bytes that beat the cancel), submitting at once: the recv has taken its file
    /// before the caller can close the descriptor and the number be reused.
    ///
    /// A cancel the ring refuses (its completion queue overflowing) is retried after a reap,
    /// a few times; false if it still could not be queued (the caller tries again later).
    fn cancel(&self, id: usize) -> bool {
        let cancel = opcode::AsyncCancel::new(id as u64 + 1).build().user_data(0);
        let mut queued = self.push(&cancel);
        for _ in 0..CANCEL_TRIES {
            if queued {
                break;
            }
            self.reap();
            queued = self.push(&cancel);
        }
        let ring = self.ring.borrow();
        if ring.submit().is_ok() {
            self.queued.set(0);
        }
        queued
    }

    /// Cancels op `id` and polls the ring (no park) until its completion comes, for up to
    /// [`SETTLE_POLLS`] polls; the completion, or `None` if it is still in flight (the caller
    /// orphans it). A recv waiting for data ends at the cancel, within the first poll.
    fn settle(&self, id: usize) -> Option<(i32, Vec<u8>)> {
        // Refused, the cancel is queued again by the orphaning, if it comes to that.
        let _ = self.cancel(id);
        for _ in 0..settle_polls() {
            self.poll();
            if let Some(done) = self.take_done(id) {
                return Some(done);
            }
            std::thread::yield_now();
        }
        None
    }

    /// Protocol step 3: op `id`, not completed, is given up by its cancelled task.
    fn orphan(&self, id: usize, readiness: &Arc<Readiness>) {
        readiness.inbox().orphan_started();
        self.ops.borrow_mut()[id] = Op::Orphan(readiness.clone());
        // Refused even so, the orphan ends with its recv: at the next bytes or the peer's
        // close (a connection dropped meanwhile stays open in the kernel until then).
        let _ = self.cancel(id);
    }

    /// What completion `res` with `bytes` means, `consume` called on the bytes.
    fn finish<R>(&self, res: i32, bytes: Vec<u8>, consume: impl FnOnce(Vec<u8>) -> R) -> Recv<R> {
        if res > 0 {
            Recv::Data(consume(bytes))
        } else if res == 0 {
            Recv::Eof
        } else if -res == libc::ENOBUFS {
            Recv::NoBuffers
        } else {
            Recv::Failed(io::Error::from_raw_os_error(-res))
        }
    }
}

/// A recv of `fd` into a provided buffer, for op `id`.
fn recv_entry(fd: std::os::fd::RawFd, id: usize) -> squeue::Entry {
    opcode::Recv::new(Fd(fd), std::ptr::null_mut(), BUFFER as u32)
        .buf_group(GROUP)
        .build()
        .flags(squeue::Flags::BUFFER_SELECT)
        .user_data(id as u64 + 1)
}

impl Drop for Uring {
    fn drop(&mut self) {
        let ring = self.ring.get_mut();
        let ops = self.ops.get_mut();
        // A `Done` op's recv has ended; the others' have not.
        let mut in_flight = 0usize;
        // Completions of reads: each ends one in flight (the cancels' carry user_data 0).
        let ended =
            |ring: &mut IoUring| ring.completion().filter(|cqe| cqe.user_data() != 0).count();
        for (id, _) in ops.iter().filter(|(_, op)| !matches!(op, Op::Done { .. })) {
            in_flight += 1;
            let cancel = opcode::AsyncCancel::new(id as u64 + 1).build().user_data(0);
            // SAFETY: a cancel names a user_data, no memory of ours.
            while unsafe { ring.submission().push(&cancel) }.is_err() {
                // A full queue: submit it, and reap, since an overflowing completion queue
                // makes the kernel refuse submissions.
                let _ = ring.submit();
                in_flight = in_flight.saturating_sub(ended(ring));
            }
        }
        let tick = io_uring::types::Timespec::new().nsec(10_000_000);
        let args = io_uring::types::SubmitArgs::new().timespec(&tick);
        for _ in 0..100 {
            if in_flight == 0 {
                break;
            }
            let _ = ring.submitter().submit_with_args(1, &args);
            in_flight = in_flight.saturating_sub(ended(ring));
        }
        ops.clear();
        // SAFETY: dropped once, here; neither field is used after this.
        unsafe { ManuallyDrop::drop(&mut self.ring) };
        if in_flight == 0 {
            // SAFETY: as above; no read can write into the buffers now (invariant 4).
            unsafe { ManuallyDrop::drop(&mut self.bufs) };
        }
    }
}

/// Reads `fd` through the running task's worker's ring, parking until bytes arrive or
/// `deadline` passes (protocol steps 2–3); `consume` sees the bytes. `None` where reads do not
/// go through io_uring: on a plain thread, on a runtime without `io_uring`, on a worker whose
/// ring could not be set up.
pub(crate) fn recv<R>(
    fd: BorrowedFd<'_>,
    readiness: &Arc<Readiness>,
    deadline: Option<Instant>,
    consume: impl FnOnce(Vec<u8>) -> R,
) -> Option<Recv<R>> {
    let worker = current_worker()?;
    worker.current.get()?;
    let uring = worker.uring()?;
    let Some(id) = uring.start_recv(fd) else {
        return Some(Recv::NoBuffers);
    };
    let mut cancelling = false;
    let (res, bytes) = loop {
        if let Some(done) = uring.take_done(id) {
            break done;
        }
        // At the deadline the recv is cancelled and its end awaited here (the cancel ends it
        // at the worker's next poll; bytes that beat it are returned), so a timed-out read
        // leaves nothing in flight: a later read on another worker waits for nobody.
        // A cancel the ring refused leaves `cancelling` false: the park below, its deadline
        // past, returns at once, and the cancel is tried again.
        if !cancelling && deadline.is_some_and(|d| Instant::now() >= d) {
            cancelling = uring.cancel(id);
        }
        let wait = if cancelling { None } else { deadline };
        let cancelled = park::park_current_cancellable(wait, ParkReason::SocketRead);
        if let Some(done) = uring.take_done(id) {
            // Completed meanwhile: the result is kept, a cancellation takes effect at the
            // next wait ("Cancellation at a park").
            break done;
        }
        if cancelled {
            // The task cannot park again, but the kernel ends a cancelled recv at once: the
            // cancel goes in and the recv's end is reaped here, without a park.
            match uring.settle(id) {
                Some((res, _)) if res == -libc::ECANCELED => {
                    park::unwind_if_cancelled();
                    return Some(Recv::Again);
                }
                // Bytes (or an error) beat the cancel: the read returns them, and the
                // cancellation takes effect at the next wait.
                Some(done) => break done,
                None => {
                    uring.orphan(id, readiness);
                    park::unwind_if_cancelled();
                    return Some(Recv::Again);
                }
            }
        }
    };
    Some(match uring.finish(res, bytes, consume) {
        Recv::Failed(e) if cancelling && e.raw_os_error() == Some(libc::ECANCELED) => {
            Recv::TimedOut
        }
        done => done,
    })
}

/// Whether an io_uring can be set up here; the kernel's refusal when not.
pub(crate) fn available() -> io::Result<()> {
    IoUring::new(8).map(drop)
}
