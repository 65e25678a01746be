//! I/O readiness: the bridge between the workers' pollers and the tasks waiting on sockets.
//!
//! Owns: each worker's [`Reactor`] (a slab of the sources registered with that worker's
//! poller, touched under its mutex by whoever registers, moves, deregisters or dispatches),
//! and each source's [`Readiness`]: two sequence numbers, and under a small mutex two waiter
//! lists plus the source's *memberships* — which workers' epoll instances it is in, with which
//! direction each one serves. Both are touched by the tasks doing I/O on the source, by the
//! dispatching workers, and by the source's owner when it drops.
//!
//! A source is registered lazily (`weft::net` waits only after a `WouldBlock`), edge-triggered,
//! in the epoll instance of the worker whose task is waiting on it *now*: each direction (read
//! with read hang-up, write) is served by exactly one membership once registered, and a source
//! is in at most two instances (one per direction). Each instance (sched/epoll.rs) is its
//! worker's poller: a sleeping worker waits in it ([`wait`]), a busy worker polls it
//! ([`poll_now`]). A key is a slab index plus a generation:
//!
//! ```text
//!   key (u64) = generation << 32 | index      slab[index] = (generation, Arc<Readiness>)
//! ```
//!
//! so an event for a membership removed meanwhile finds another generation (or nothing) and is
//! dropped: keys never dangle. A moved membership gets a new key in its new worker's slab.
//!
//! The wait protocol (numbered as the code cites them):
//! 1. The waiter loads the direction's sequence number (Acquire), then tries its operation.
//! 2. On `WouldBlock`, a task locks the readiness and compares the sequence number with step
//!    1's: if it moved, readiness arrived meanwhile: retry.
//! 3. Still under the lock, it makes sure its direction is served by its own worker (*serve*):
//!    if no membership serves it, or one on another worker (of this runtime or of another,
//!    perhaps dropped) that no other waiter of that direction parked on that worker relies on,
//!    the direction moves here: `EPOLL_CTL_DEL` (or `MOD`, if the old instance keeps the other
//!    direction) there, then `ADD` (or `MOD`) here. The other direction comes along unless a
//!    waiter of it is parked on its serving worker: a connection handed to another task keeps
//!    one membership, and a reader and a writer on two workers get one each.
//! 4. It pushes itself on the waiter list (with its worker), unlocks and parks (in a loop:
//!    spurious returns are allowed) until the sequence number moves or its deadline passes; on
//!    a deadline, or when the park unwinds (cancellation), it removes its own entry
//!    (invariant 4 says what else that does).
//! 5. A plain thread skips steps 2–4: it waits in `poll(2)` on the descriptor itself (through
//!    no worker, `net/sys.rs`), then retries; it never trusts the `drained` hint, which only
//!    a reactor clears.
//! 6. `dispatch`, for each event, locks the readiness, bumps the sequence number of each ready
//!    direction (Release, under the lock) and wakes every waiter of that direction, whichever
//!    worker (or runtime) it is parked on.
//!
//! Invariants:
//! 1. A sequence number only changes under its readiness mutex, so step 2's compare and step
//!    4's push are atomic with respect to step 6: no wakeup is lost. Edge-triggered epoll
//!    reports every transition to ready after the operation's `EAGAIN`, and `EPOLL_CTL_ADD` /
//!    `EPOLL_CTL_MOD` report a source that is already ready, so no readiness is lost either,
//!    not even across a move (an edge between the `DEL` there and the `ADD` here is still
//!    ready at the `ADD`, or was consumed).
//! 2. A membership is deleted from its poller before the descriptor is closed (`Source`'s
//!    `Drop` calls [`Readiness::deregister`] first), and its slab entry is removed in the same
//!    step, under the readiness lock; so is one that moves.
//! 3. While a waiter is parked on a direction, some membership serves that direction: a
//!    waiter pushes itself only after step 3 succeeded, under the same lock, and a membership
//!    loses a direction only in a move that hands it to another under that lock. A move that
//!    fails half-way wakes that direction's waiters (a sequence-number bump), so each retries
//!    and serves it itself or gets the error.
//! 4. While waiters are parked on a direction, the worker serving it is the worker of one of
//!    them: step 3 moves the direction unless a waiter parked on the serving worker relies on
//!    it (the other direction comes along only if none of its waiters is parked, since by this
//!    invariant one of them would be on its serving worker), and a waiter that gives up
//!    (deadline, cancellation) leaving only waiters on other workers wakes them to re-check,
//!    so that the first to wait again moves it. So a waiter is served by its own worker or by
//!    one whose waiter wants the same event.
//! 5. Lock order: a readiness, then a reactor's slab; never the other way (`poll_now` drops
//!    the slab lock before it wakes).
//!
//! May call: `park`, `sched` (the running task's home worker). Called by: `sched/worker.rs`
//! (dispatch, poll_now, has_sources), `net`.
//!
//! Why edge-triggered with sequence numbers rather than oneshot re-arming: a ping-pong
//! connection would otherwise pay an `epoll_ctl` per wait; here a source costs one `epoll_ctl`
//! while it stays on one worker, and a wait checks its membership with one pointer compare
//! under the lock it takes anyway. With `drained` (a short read emptied the queue), a
//! ping-pong read costs one `recv`, not a second one that returns `EAGAIN`; `read_closed` (from
//! `EPOLLRDHUP`) keeps that from missing an end of stream that arrived with the last data.
//!
//! Why the registration follows the waiter: it used to stay, for the source's life, in the
//! epoll of the first worker that waited, so a socket handed to a task on another worker was
//! served by a worker that might be busy in a task that never parks (data seen seconds late),
//! and one that had waited in a dropped runtime was served by nobody (parked forever). A
//! waiter's own worker is the one certain to poll for it as soon as it has nothing else to
//! do. Rejected: waking the waiters parked on the old membership so that they re-register —
//! a reader and a writer on two workers would then take the membership from each other
//! forever; keeping one membership for both directions — the same fight, or one of them
//! served by the other's worker. One runtime-wide poller (tokio, Go) would serve every waiter
//! from any idle worker, but a level-triggered instance shared by all pollers wakes every
//! sleeping worker per event. What remains: several tasks on different workers waiting on the
//! *same* direction of one socket (two acceptors on one listener) are served by one of their
//! workers; if that one is stuck in a task that never parks, the others wait for it.
//!
//! Why a slab with generations rather than a pointer in the event's key: a pointer would
//! dangle when a source is dropped while its event is in flight in a worker's batch.

use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::epoll::{Epoll, Ready};
use super::inbox::{InboxState, Queued};
use super::park::{self, Waiter};
use super::runtime::Remote;

/// A direction of readiness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    Read,
    Write,
}

/// One source's readiness and memberships, shared by its owner and the reactors.
#[derive(Default)]
pub(crate) struct Readiness {
    /// Bumped at each readable (index 0) / writable (index 1) event; only under `state`
    /// (invariant 1).
    seq: [AtomicU64; 2],
    /// The read `seq + 1` at the start of the last read that came back short (the socket's
    /// queue was empty after it), 0 if none: while `seq` has not moved since, another read
    /// would only return `EAGAIN`, so a task skips it (tokio's `clear_readiness` after a short
    /// read). Only a reactor moves `seq`, so a plain thread ignores this (protocol step 5).
    /// Reads only: a short write says nothing of the next.
    drained: AtomicU64,
    /// The peer closed its write half (`EPOLLRDHUP`, or the connection failed): from then on a
    /// short read no longer means "wait", since end of stream may be next. Written under
    /// `state` before the `seq` bump that announces it.
    read_closed: AtomicBool,
    /// The lock-free half of the stream's io_uring inbox (sched/inbox.rs); its bytes are in
    /// `state`.
    inbox: InboxState,
    state: Mutex<WaitLists>,
}

#[derive(Default)]
struct WaitLists {
    next_token: u64,
    waiters: [Vec<Entry>; 2],
    /// The epoll instances the source is in; each serves one direction or both, and each
    /// direction is served by at most one (invariant 3), so two slots are enough.
    members: [Option<Member>; 2],
    /// The bytes of the stream's io_uring inbox, if it holds any (sched/inbox.rs).
    inbox: Option<Box<Queued>>,
}

/// A parked task: its token (to remove itself), its worker (protocol step 3), its waker.
struct Entry {
    token: u64,
    /// `Arc::as_ptr` of the worker's `Remote`, an identity only (never dereferenced); the
    /// parked task's header holds that `Remote`, so the address is not reused meanwhile.
    worker: usize,
    waiter: Waiter,
}

/// The source's place in one worker's epoll instance.
struct Member {
    remote: Arc<Remote>,
    key: usize,
    /// The directions it serves, indexed by `Direction as usize`.
    dirs: [bool; 2],
}

impl Member {
    fn serves(&self, d: usize) -> bool {
        self.dirs[d]
    }

    fn is_on(&self, worker: usize) -> bool {
        Arc::as_ptr(&self.remote) as usize == worker
    }
}

/// What a move took out of `members`: remotes to drop after the lock is released (a last
/// reference to a dropped runtime's worker closes its poller).
type Retired = [Option<Arc<Remote>>; 2];

impl WaitLists {
    /// The index of the member serving `d`, if any.
    fn serving(&self, d: usize) -> Option<usize> {
        self.members
            .iter()
            .position(|m| m.as_ref().is_some_and(|m| m.serves(d)))
    }

    /// The member serving `d`, if any.
    fn serving_member(&self, d: usize) -> Option<&Member> {
        self.members[self.serving(d)?].as_ref()
    }

    /// Whether a waiter of `d` is parked on `member`'s worker.
    fn has_waiter_on(&self, d: usize, member: &Member) -> bool {
        self.waiters[d]
            .iter()
            .any(|entry| member.is_on(entry.worker))
    }

    /// Whether the member serving `d` must stay where it is for `worker`'s sake: it is on
    /// `worker` already, or a waiter of `d` parked on its worker relies on it (invariant 4).
    fn keeps(&self, d: usize, worker: usize) -> bool {
        self.serving_member(d)
            .is_some_and(|m| m.is_on(worker) || self.has_waiter_on(d, m))
    }

    /// Protocol step 3: makes sure `d` is served by `home`'s epoll instance.
    ///
    /// # Safety
    /// `fd` must stay open until [`Readiness::deregister`] (invariant 2).
    unsafe fn serve(
        &mut self,
        readiness: &Arc<Readiness>,
        fd: BorrowedFd<'_>,
        d: usize,
        home: &Arc<Remote>,
        retired: &mut Retired,
    ) -> io::Result<()> {
        let here = Arc::as_ptr(home) as usize;
        // The hot path: a ping-pong connection waits on the worker it waited on last time.
        if self.keeps(d, here) {
            return Ok(());
        }
        let other = 1 - d;
        let moving = [
            d == 0 || !self.keeps(other, here),
            d == 1 || !self.keeps(other, here),
        ];
        // Take the moving directions off their members first, so that at most two exist.
        for (slot, retired) in self.members.iter_mut().zip(retired.iter_mut()) {
            let Some(member) = slot.as_mut() else {
                continue;
            };
            if member.is_on(here) {
                continue;
            }
            let before = member.dirs;
            member.dirs = [before[0] && !moving[0], before[1] && !moving[1]];
            if member.dirs == before {
                continue;
            }
            if member.dirs == [false, false] {
                let member = slot.take().expect("member");
                member.remote.io.remove(fd, member.key);
                *retired = Some(member.remote);
            } else {
                // An error would leave it reporting the moved direction too: spurious wakes.
                let _ = member
                    .remote
                    .io
                    .epoll
                    .modify(fd, member.key as u64, member.dirs);
            }
        }
        let added = match self
            .members
            .iter()
            .position(|m| m.as_ref().is_some_and(|m| m.is_on(here)))
        {
            Some(i) => {
                let member = self.members[i].as_mut().expect("member");
                let dirs = [member.dirs[0] || moving[0], member.dirs[1] || moving[1]];
                let modified = member.remote.io.epoll.modify(fd, member.key as u64, dirs);
                if modified.is_ok() {
                    member.dirs = dirs;
                }
                modified
            }
            None => {
                let free = self.members.iter().position(Option::is_none);
                let free = free.expect("weft: a source in more than two epoll instances");
                // SAFETY: the caller keeps `fd` open until `deregister` (invariant 2).
                let key = unsafe { home.io.insert(fd, readiness.clone(), moving) };
                key.map(|key| {
                    self.members[free] = Some(Member {
                        remote: home.clone(),
                        key,
                        dirs: moving,
                    });
                })
            }
        };
        if let Err(e) = added {
            // Invariant 3: whoever waits on a direction now served by nobody retries.
            for x in 0..2 {
                if self.serving(x).is_none() {
                    readiness.bump_locked(self, x, false);
                }
            }
            return Err(e);
        }
        Ok(())
    }
}

/// A stream's io_uring inbox: the state word in its readiness, the bytes under its lock
/// (sched/inbox.rs).
#[derive(Clone, Copy)]
pub(crate) struct Inbox<'a> {
    readiness: &'a Readiness,
}

impl Inbox<'_> {
    /// Whether it holds nothing and no orphan is in flight: one load, no lock.
    #[inline]
    pub(crate) fn is_quiet(self) -> bool {
        self.readiness.inbox.is_quiet()
    }

    /// Whether it holds bytes or an error: one load, no lock.
    #[inline]
    pub(crate) fn is_full(self) -> bool {
        self.readiness.inbox.is_full()
    }

    /// Whether orphaned io_uring reads of the stream are in flight.
    #[inline]
    pub(crate) fn has_orphans(self) -> bool {
        self.readiness.inbox.has_orphans()
    }

    pub(crate) fn orphan_started(self) {
        self.readiness.inbox.orphan_started();
    }

    pub(crate) fn orphan_ended(self) {
        self.readiness.inbox.orphan_ended();
    }

    /// Appends `bytes` after what it holds.
    pub(crate) fn push_vec(self, bytes: Vec<u8>) {
        let mut lists = self.readiness.lock();
        self.readiness.inbox.push(&mut lists.inbox, bytes);
    }

    /// Appends a copy of `bytes` after what it holds.
    pub(crate) fn push(self, bytes: &[u8]) {
        if !bytes.is_empty() {
            self.push_vec(bytes.to_vec());
        }
    }

    /// Queues `errno` after the bytes it holds.
    pub(crate) fn push_error(self, errno: i32) {
        let mut lists = self.readiness.lock();
        self.readiness.inbox.push_error(&mut lists.inbox, errno);
    }

    /// Takes up to `buf.len()` bytes (then the error); `None` if it holds nothing.
    pub(crate) fn take(self, buf: &mut [std::mem::MaybeUninit<u8>]) -> Option<io::Result<usize>> {
        let mut lists = self.readiness.lock();
        self.readiness.inbox.take(&mut lists.inbox, buf)
    }

    /// Copies up to `buf.len()` bytes without taking them; `None` if it holds none.
    pub(crate) fn peek(self, buf: &mut [u8]) -> Option<usize> {
        let lists = self.readiness.lock();
        self.readiness.inbox.peek(&lists.inbox, buf)
    }
}

/// Removes a parked waiter's entry if its park unwinds (protocol step 4); forgotten on the
/// normal paths, where the entry is gone already.
struct EntryGuard<'a> {
    readiness: &'a Readiness,
    d: usize,
    token: u64,
}

impl Drop for EntryGuard<'_> {
    fn drop(&mut self) {
        let mut lists = self.readiness.lock();
        self.readiness.leave(&mut lists, self.d, self.token);
    }
}

impl Readiness {
    /// Step 1: the sequence number to compare with after a `WouldBlock`.
    pub(crate) fn seq(&self, dir: Direction) -> u64 {
        // Acquire: pairs with the Release bump in `bump_locked`, so that the operation tried
        // after this load sees whatever the event announced.
        self.seq[dir as usize].load(Ordering::Acquire)
    }

    /// Records that a read started at read sequence number `seen` emptied the socket's queue.
    pub(crate) fn set_drained(&self, seen: u64) {
        self.drained.store(seen.wrapping_add(1), Ordering::Relaxed);
    }

    /// Whether no event arrived since an operation started at `seen` emptied the queue: the
    /// next try would be a wasted `EAGAIN`. A hint, for tasks only (step 5): a stale answer
    /// costs one syscall or one trip through `wait`, which re-checks `seq` under the lock
    /// (invariant 1).
    pub(crate) fn is_drained(&self, seen: u64) -> bool {
        // Relaxed: `seen` came from the Acquire load in `seq`, which pairs with the Release bump
        // that followed the `read_closed` store in `bump_locked`.
        self.drained.load(Ordering::Relaxed) == seen.wrapping_add(1)
            && !self.read_closed.load(Ordering::Relaxed)
    }

    fn lock(&self) -> MutexGuard<'_, WaitLists> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Steps 2–4: parks the running task until the sequence number moves past `seen` or
    /// `deadline` passes, first moving `dir`'s registration to the task's worker if needed.
    /// `Some(Ok)` means "retry the operation"; a passed deadline is `TimedOut`. `None` on a
    /// plain thread, which must wait on the descriptor itself (step 5).
    ///
    /// # Safety
    /// `fd` must be the source's descriptor, open until [`Readiness::deregister`] is called
    /// (invariant 2).
    pub(crate) unsafe fn wait(
        self: &Arc<Self>,
        fd: BorrowedFd<'_>,
        dir: Direction,
        seen: u64,
        deadline: Option<Instant>,
        reason: crate::park::ParkReason,
    ) -> Option<io::Result<()>> {
        let d = dir as usize;
        let mut retired = Retired::default();
        let pushed = with_home(|home| {
            let mut lists = self.lock();
            if self.seq[d].load(Ordering::Relaxed) != seen {
                return Ok(None);
            }
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return Err(timed_out());
            }
            // SAFETY: the caller's contract.
            unsafe { lists.serve(self, fd, d, home, &mut retired)? };
            let token = lists.next_token;
            lists.next_token += 1;
            // Room for one waiter at first, not Vec's four: a socket seldom has more, and
            // an idle connection keeps the list's memory for life.
            if lists.waiters[d].capacity() == 0 {
                lists.waiters[d].reserve_exact(1);
            }
            lists.waiters[d].push(Entry {
                token,
                worker: Arc::as_ptr(home) as usize,
                waiter: Waiter::current(),
            });
            Ok(Some(token))
        })?;
        drop(retired);
        let token = match pushed {
            Ok(Some(token)) => token,
            Ok(None) => return Some(Ok(())),
            Err(e) => return Some(Err(e)),
        };
        let guard = EntryGuard {
            readiness: self,
            d,
            token,
        };
        loop {
            match deadline {
                Some(deadline) => park::park_current_until(deadline, reason),
                None => park::park_current(reason),
            }
            let mut lists = self.lock();
            if self.seq[d].load(Ordering::Relaxed) != seen {
                // The bump drained the list, our entry with it (step 6).
                drop(lists);
                std::mem::forget(guard);
                return Some(Ok(()));
            }
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                self.leave(&mut lists, d, token);
                drop(lists);
                std::mem::forget(guard);
                return Some(Err(timed_out()));
            }
        }
    }

    /// Removes the entry `token` of a waiter that gives up (deadline, or an unwinding park);
    /// `lists` is this readiness's, locked. If the waiters left behind are all on other
    /// workers than the one serving `d`, they are woken to re-check, and the first to wait
    /// again moves `d` to its worker (invariant 4).
    fn leave(&self, lists: &mut WaitLists, d: usize, token: u64) {
        lists.waiters[d].retain(|entry| entry.token != token);
        if lists.waiters[d].is_empty() {
            return;
        }
        let served = lists
            .serving_member(d)
            .is_some_and(|m| lists.has_waiter_on(d, m));
        if !served {
            self.bump_locked(lists, d, false);
        }
    }

    /// Step 6: readiness arrived in `dir`.
    fn wake(&self, dir: Direction, read_closed: bool) {
        let mut lists = self.lock();
        self.bump_locked(&mut lists, dir as usize, read_closed);
    }

    /// The stream's io_uring inbox (sched/inbox.rs, sched/uring.rs).
    pub(crate) fn inbox(&self) -> Inbox<'_> {
        Inbox { readiness: self }
    }

    /// Wakes the readers: an orphaned io_uring read left bytes in the inbox or ended
    /// (sched/uring.rs protocol step 3).
    pub(crate) fn wake_readers(&self) {
        self.wake(Direction::Read, false);
    }

    /// Both directions, for a socket closed with `close` (net/close.rs): every waiter wakes,
    /// retries, and sees the closed flag.
    pub(crate) fn wake_all(&self) {
        let mut lists = self.lock();
        self.bump_locked(&mut lists, Direction::Read as usize, false);
        self.bump_locked(&mut lists, Direction::Write as usize, false);
    }

    /// Bumps `d`'s sequence number and wakes its waiters; `lists` is this readiness's, locked.
    fn bump_locked(&self, lists: &mut WaitLists, d: usize, read_closed: bool) {
        if read_closed {
            self.read_closed.store(true, Ordering::Relaxed);
        }
        // Release: pairs with the Acquire load in `seq` (step 1).
        self.seq[d].fetch_add(1, Ordering::Release);
        // Waking under the lock keeps the list's capacity; waking never takes an I/O lock.
        for entry in lists.waiters[d].drain(..) {
            entry.waiter.wake();
        }
    }

    /// Deletes the source from every epoll instance it is in and frees its keys; call before
    /// closing `fd` (invariant 2).
    pub(crate) fn deregister(&self, fd: BorrowedFd<'_>) {
        let mut retired = Retired::default();
        {
            let mut lists = self.lock();
            for (slot, retired) in lists.members.iter_mut().zip(retired.iter_mut()) {
                if let Some(member) = slot.take() {
                    member.remote.io.remove(fd, member.key);
                    *retired = Some(member.remote);
                }
            }
        }
        drop(retired);
    }
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "weft: i/o operation timed out")
}

/// Keys are `generation << 32 | index`; the notify key (`u64::MAX`, sched/epoll.rs) is never
/// one.
const INDEX_BITS: u32 = 32;
const INDEX_MASK: usize = (1 << INDEX_BITS) - 1;
const GENERATION_LIMIT: usize = (1 << 31) - 1;
/// Events collected per `epoll_wait`.
const BATCH: usize = 256;

/// The sources registered with one worker's poller.
pub(crate) struct Reactor {
    slab: Mutex<Slab>,
    /// Number of registered sources, read without the lock by `has_sources`.
    count: AtomicUsize,
    /// The worker's poller (sched/epoll.rs): the sources' epoll instance and its notifier.
    epoll: Epoll,
}

/// The registered sources, each with the generation its key carries. `slab::Slab` chains its
/// free entries through the vacant ones, so deregistering allocates nothing (a growing side
/// vector of free indices stalls its owner at each doubling; see the live list in
/// sched/worker.rs).
#[derive(Default)]
struct Slab {
    entries: slab::Slab<(usize, Arc<Readiness>)>,
    /// The generation the next registration gets.
    generation: usize,
}

impl Reactor {
    /// A reactor with a fresh poller.
    pub(crate) fn new() -> io::Result<Reactor> {
        Ok(Reactor {
            slab: Mutex::default(),
            count: AtomicUsize::new(0),
            epoll: Epoll::new()?,
        })
    }

    /// Wakes the worker's current or next [`wait`]; any thread.
    pub(crate) fn notify(&self) {
        self.epoll.notify();
    }

    /// The worker's poller, for a tokio reactor to watch (sched/tokio_local.rs).
    #[cfg(feature = "tokio")]
    pub(crate) fn poller_fd(&self) -> std::os::fd::RawFd {
        self.epoll.raw_fd()
    }

    /// Adds `fd` (a timer, an io_uring) to the worker's poller as a notify: its readiness
    /// ends a wait and wakes no task (sched/tokio_local.rs, sched/uring.rs). Closing `fd`
    /// removes it.
    pub(crate) fn add_notifier(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
        self.epoll.add(fd, super::epoll::NOTIFY_KEY, [true, false])
    }

    fn lock(&self) -> MutexGuard<'_, Slab> {
        self.slab.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds `fd` to this worker's epoll instance for the directions in `dirs`, with a fresh
    /// key that leads to `readiness`; returns the key.
    ///
    /// # Safety
    /// `fd` must stay open until [`Reactor::remove`] is called with the key (invariant 2).
    unsafe fn insert(
        &self,
        fd: BorrowedFd<'_>,
        readiness: Arc<Readiness>,
        dirs: [bool; 2],
    ) -> io::Result<usize> {
        let key = {
            let mut slab = self.lock();
            slab.generation = (slab.generation + 1) % GENERATION_LIMIT;
            let generation = slab.generation;
            let index = slab.entries.insert((generation, readiness));
            assert!(
                index <= INDEX_MASK,
                "weft: more than 2^32 sources on one worker"
            );
            generation << INDEX_BITS | index
        };
        if let Err(e) = self.epoll.add(fd, key as u64, dirs) {
            // Dropped after the slab lock: the entry holds an `Arc<Readiness>`.
            let entry = self.lock().entries.remove(key & INDEX_MASK);
            drop(entry);
            return Err(e);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        Ok(key)
    }

    /// Deletes `fd` (added under `key`) from the epoll instance and frees the key.
    fn remove(&self, fd: BorrowedFd<'_>, key: usize) {
        // An error means the fd is not in the instance: nothing to undo there.
        let _ = self.epoll.delete(fd);
        let entry = self.lock().entries.remove(key & INDEX_MASK);
        drop(entry);
        self.count.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Slab {
    /// The readiness of the source registered under `key`, if it still is.
    fn get(&self, key: usize) -> Option<&Arc<Readiness>> {
        let (generation, readiness) = self.entries.get(key & INDEX_MASK)?;
        (*generation == key >> INDEX_BITS).then_some(readiness)
    }
}

/// Whether a task is running on this thread (protocol step 5: plain threads poll the
/// descriptor and ignore `drained`).
pub(crate) fn in_task() -> bool {
    crate::sched::current_task_ptr().is_some()
}

/// Calls `f` with the home worker of the running task, without touching a reference count;
/// `None` on a plain thread.
fn with_home<R>(f: impl FnOnce(&Arc<Remote>) -> R) -> Option<R> {
    let header = crate::sched::current_task_ptr()?;
    // SAFETY: the running task's header lives for the whole resume (its worker holds the
    // `Task`, sched/worker.rs), and `f` runs inside this resume: nothing here parks.
    let header = unsafe { header.as_ref() };
    header.home().map(f)
}

/// A sleeping worker's wait: up to `timeout` (`None`: until woken) for I/O or a notify,
/// waking the tasks whose I/O became ready; returns whether an event (not the timeout) ended
/// it. May end early by 0.1 % of a long timeout (sched/epoll.rs invariant 2).
pub(crate) fn wait(remote: &Remote, timeout: Option<Duration>) -> bool {
    let mut buf = [std::mem::MaybeUninit::<libc::epoll_event>::uninit(); BATCH];
    let ready = remote.io.epoll.wait(&mut buf, timeout);
    let (woke, full) = (!ready.is_empty(), ready.len() == BATCH);
    dispatch(remote, ready);
    if full {
        poll_now(remote);
    }
    woke
}

/// Collects and dispatches ready sources without blocking: a busy worker's poll (one
/// `epoll_wait`), and the rest of a sleeping worker's wake-up when its batch was full.
pub(crate) fn poll_now(remote: &Remote) {
    let mut buf = [std::mem::MaybeUninit::<libc::epoll_event>::uninit(); BATCH];
    loop {
        let ready = remote.io.epoll.poll(&mut buf);
        let full = ready.len() == BATCH;
        dispatch(remote, ready);
        if !full {
            return;
        }
    }
}

/// Wakes the tasks waiting on the sources in `ready`, one batch of the worker's poller; a
/// notify (sched/epoll.rs invariant 1) needs nothing more: the wait it ended was the point.
fn dispatch(remote: &Remote, ready: &[libc::epoll_event]) {
    // Uninitialized, not zeroed: a busy worker calls this often, mostly for a few events.
    let mut woken = [const { std::mem::MaybeUninit::<(Arc<Readiness>, Ready)>::uninit() }; BATCH];
    // One slab lock per batch, not per event; the wakes happen after it, since a wake may
    // drop the last reference to a task, whose result may own a source whose drop
    // deregisters (and takes the slab lock).
    let slab = remote.io.lock();
    let mut n = 0;
    for event in ready.iter().take(BATCH) {
        let ready = Ready::from(event);
        if ready.key == super::epoll::NOTIFY_KEY {
            continue;
        }
        // Deregistered since: the key's generation moved on.
        if let Some(readiness) = slab.get(ready.key as usize) {
            woken[n].write((readiness.clone(), ready));
            n += 1;
        }
    }
    drop(slab);
    for slot in &woken[..n] {
        // SAFETY: the first `n` slots were written just above, and each is read once.
        // (A panicking wake leaks the rest: references, not memory safety.)
        let (readiness, ready) = unsafe { slot.assume_init_read() };
        if ready.readable {
            readiness.wake(Direction::Read, ready.read_closed);
        }
        if ready.writable {
            readiness.wake(Direction::Write, false);
        }
    }
}

/// Whether `remote`'s poller has I/O sources registered.
pub(crate) fn has_sources(remote: &Remote) -> bool {
    remote.io.count.load(Ordering::Relaxed) > 0
}
