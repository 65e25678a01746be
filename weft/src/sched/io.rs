//! I/O readiness: the bridge between a worker's poller and the tasks waiting on sockets.
//!
//! Owns: each worker's [`Reactor`] (a slab of the sources registered with that worker's
//! poller, touched under its mutex by whoever registers, deregisters or dispatches), and each
//! source's [`Readiness`] (two sequence numbers and two waiter lists under a small mutex,
//! touched by the tasks and threads doing I/O on it and by the dispatching worker).
//!
//! A source is registered, edge-triggered for both directions and for read hang-up, in the
//! epoll instance of the worker whose task first has to wait on it (`weft::net` registers
//! lazily, at the first `WouldBlock`), and stays there until dropped. That instance
//! (sched/epoll.rs) sits, level-triggered, in the worker's `polling::Poller`, so a sleeping
//! worker wakes for I/O; a busy worker polls it directly ([`poll_now`]). A key is a slab index
//! plus a generation:
//!
//! ```text
//!   key (u64) = generation << 32 | index      slab[index] = (generation, Arc<Readiness>)
//! ```
//!
//! so an event for a source deregistered meanwhile finds another generation (or nothing) and is
//! dropped: keys never dangle.
//!
//! The wait protocol (numbered as the code cites them):
//! 1. The waiter loads the direction's sequence number (Acquire), then tries its operation.
//! 2. On `WouldBlock` it makes sure the source is registered, locks the readiness, and compares
//!    the sequence number with step 1's: if it moved, readiness arrived meanwhile: retry.
//! 3. Otherwise it pushes itself on the waiter list, unlocks and parks (in a loop: spurious
//!    returns are allowed), until the sequence number moves or its deadline passes; on a
//!    deadline it removes its own entry.
//! 4. `dispatch`, for each event, locks the readiness, bumps the sequence number of each ready
//!    direction (Release, under the lock) and wakes every waiter of that direction.
//!
//! Invariants:
//! 1. A sequence number only changes under its readiness mutex, so step 2's compare and step
//!    3's push are atomic with respect to step 4: no wakeup is lost. Edge-triggered epoll
//!    reports every transition to ready after the operation's `EAGAIN`, and `EPOLL_CTL_ADD`
//!    reports a source that is already ready, so no readiness is lost either.
//! 2. A source is deleted from its poller before its descriptor is closed (`Registration`'s
//!    owner drops it first), and its slab entry is removed in the same step.
//!
//! May call: `park`. Called by: `sched/worker.rs` (dispatch, has_sources), `net`.
//!
//! Why edge-triggered with sequence numbers rather than oneshot re-arming: a ping-pong
//! connection would otherwise pay an `epoll_ctl` per wait; here a source costs one `epoll_ctl`
//! in its life. With `drained` (a short read emptied the queue), a ping-pong read costs one
//! `recv`, not a second one that returns `EAGAIN`; `read_closed` (from `EPOLLRDHUP`) keeps
//! that from missing an end of stream that arrived with the last data. Why a slab with generations rather than a pointer in the event's key: a pointer
//! would dangle when a source is dropped while its event is in flight in a worker's batch.

use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use super::epoll::{Epoll, Ready};
use super::runtime::Remote;
use crate::park::{self, Waiter};

/// A direction of readiness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    Read,
    Write,
}

/// One registered source's readiness, shared by its owner and the reactor.
#[derive(Default)]
pub(crate) struct Readiness {
    /// Bumped at each readable (index 0) / writable (index 1) event; only under `state`
    /// (invariant 1).
    seq: [AtomicU64; 2],
    /// `seq + 1` at the start of the last read that came back short (the socket's queue was
    /// empty after it), 0 if none: while `seq` has not moved since, another read would only
    /// return `EAGAIN`, so a task skips it (tokio's `clear_readiness` after a short read).
    /// Only a reactor moves `seq`, so a plain thread, which waits in `poll(2)`, ignores this.
    drained: [AtomicU64; 2],
    /// The peer closed its write half (`EPOLLRDHUP`, or the connection failed): from then on a
    /// short read no longer means "wait", since end of stream may be next. Written under
    /// `state` before the `seq` bump that announces it.
    read_closed: AtomicBool,
    state: Mutex<WaitLists>,
}

#[derive(Default)]
struct WaitLists {
    next_token: u64,
    waiters: [Vec<(u64, Waiter)>; 2],
}

impl Readiness {
    /// Step 1: the sequence number to compare with after a `WouldBlock`.
    pub(crate) fn seq(&self, dir: Direction) -> u64 {
        // Acquire: pairs with the Release bump in `wake`, so that the operation tried after
        // this load sees whatever the event announced.
        self.seq[dir as usize].load(Ordering::Acquire)
    }

    /// Records that an operation started at sequence number `seen` emptied the socket's queue.
    pub(crate) fn set_drained(&self, dir: Direction, seen: u64) {
        self.drained[dir as usize].store(seen.wrapping_add(1), Ordering::Relaxed);
    }

    /// Whether no event arrived since an operation started at `seen` emptied the queue: the
    /// next try would be a wasted `EAGAIN`. A hint: a stale answer costs one syscall or one
    /// trip through `wait`, which re-checks `seq` under the lock (invariant 1).
    pub(crate) fn is_drained(&self, dir: Direction, seen: u64) -> bool {
        // Relaxed: `seen` came from the Acquire load in `seq`, which pairs with the Release bump
        // that followed the `read_closed` store in `wake`.
        self.drained[dir as usize].load(Ordering::Relaxed) == seen.wrapping_add(1)
            && !self.read_closed.load(Ordering::Relaxed)
    }

    fn lock(&self) -> MutexGuard<'_, WaitLists> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Steps 2–3: parks the caller until the sequence number moves past `seen` or `deadline`
    /// passes. `Ok` means "retry the operation"; a passed deadline is `TimedOut`.
    pub(crate) fn wait(
        &self,
        dir: Direction,
        seen: u64,
        deadline: Option<Instant>,
    ) -> io::Result<()> {
        let d = dir as usize;
        let token = {
            let mut lists = self.lock();
            if self.seq[d].load(Ordering::Relaxed) != seen {
                return Ok(());
            }
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                return Err(timed_out());
            }
            let token = lists.next_token;
            lists.next_token += 1;
            lists.waiters[d].push((token, Waiter::current()));
            token
        };
        loop {
            match deadline {
                Some(deadline) => park::park_current_until(deadline),
                None => park::park_current(),
            }
            let mut lists = self.lock();
            if self.seq[d].load(Ordering::Relaxed) != seen {
                return Ok(());
            }
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                lists.waiters[d].retain(|(t, _)| *t != token);
                return Err(timed_out());
            }
        }
    }

    /// Step 4: readiness arrived in `dir`.
    fn wake(&self, dir: Direction, read_closed: bool) {
        let d = dir as usize;
        let mut lists = self.lock();
        if read_closed {
            self.read_closed.store(true, Ordering::Relaxed);
        }
        // Release: pairs with the Acquire load in `seq` (step 1).
        self.seq[d].fetch_add(1, Ordering::Release);
        // Waking under the lock keeps the list's capacity; waking never takes an I/O lock.
        for (_, waiter) in lists.waiters[d].drain(..) {
            waiter.wake();
        }
    }
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "weft: i/o operation timed out")
}

/// Keys are `generation << 32 | index`; [`polling`]'s notify key (`usize::MAX`) and
/// [`EPOLL_KEY`] are never one.
const INDEX_BITS: u32 = 32;
const INDEX_MASK: usize = (1 << INDEX_BITS) - 1;
const GENERATION_LIMIT: usize = (1 << 31) - 1;
/// The key of the reactor's own epoll instance in the worker's `polling::Poller`.
const EPOLL_KEY: usize = usize::MAX - 1;
/// Events collected per `epoll_wait`.
const BATCH: usize = 256;

/// The sources registered with one worker's poller.
pub(crate) struct Reactor {
    slab: Mutex<Slab>,
    /// Number of registered sources, read without the lock by `has_sources`.
    count: AtomicUsize,
    /// The epoll instance the sources are in (sched/epoll.rs), itself in the worker's poller.
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
    /// A reactor whose epoll instance is added to `poller`, the worker's.
    ///
    /// # Safety
    /// The reactor must not outlive `poller` (in `Remote`, `poller` is declared, so dropped,
    /// before the reactor): the epoll descriptor stays open while it is added.
    pub(crate) unsafe fn new(poller: &polling::Poller) -> io::Result<Reactor> {
        let epoll = Epoll::new()?;
        // SAFETY: the caller's contract: the poller goes first.
        unsafe {
            poller.add_with_mode(
                std::os::fd::AsRawFd::as_raw_fd(&epoll.as_fd()),
                polling::Event::readable(EPOLL_KEY),
                polling::PollMode::Level,
            )?;
        }
        Ok(Reactor {
            slab: Mutex::default(),
            count: AtomicUsize::new(0),
            epoll,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Slab> {
        self.slab.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Slab {
    /// The readiness of the source registered under `key`, if it still is.
    fn get(&self, key: usize) -> Option<&Arc<Readiness>> {
        let (generation, readiness) = self.entries.get(key & INDEX_MASK)?;
        (*generation == key >> INDEX_BITS).then_some(readiness)
    }
}

/// A source's registration with one worker's poller; deregisters on [`Registration::deregister`].
pub(crate) struct Registration {
    remote: Arc<Remote>,
    key: usize,
}

impl Registration {
    /// Registers `fd` edge-triggered for both directions with `remote`'s poller.
    ///
    /// # Safety
    /// `fd` must stay open until [`Registration::deregister`] is called on the result
    /// (invariant 2).
    pub(crate) unsafe fn register(
        remote: Arc<Remote>,
        fd: BorrowedFd<'_>,
        readiness: Arc<Readiness>,
    ) -> io::Result<Registration> {
        let reactor = &remote.io;
        let key = {
            let mut slab = reactor.lock();
            slab.generation = (slab.generation + 1) % GENERATION_LIMIT;
            let generation = slab.generation;
            let index = slab.entries.insert((generation, readiness));
            assert!(
                index <= INDEX_MASK,
                "weft: more than 2^32 sources on one worker"
            );
            generation << INDEX_BITS | index
        };
        // The caller keeps `fd` open until `deregister`, which deletes it from the epoll
        // instance first (invariant 2).
        let added = reactor.epoll.add(fd, key as u64);
        if let Err(e) = added {
            let mut slab = reactor.lock();
            slab.entries.remove(key & INDEX_MASK);
            return Err(e);
        }
        reactor.count.fetch_add(1, Ordering::Relaxed);
        Ok(Registration { remote, key })
    }

    /// Deletes `fd` from the poller and frees its key; call before closing `fd`.
    pub(crate) fn deregister(&self, fd: BorrowedFd<'_>) {
        let reactor = &self.remote.io;
        // An error means the fd was never added: nothing to undo.
        let _ = reactor.epoll.delete(fd);
        let mut slab = reactor.lock();
        slab.entries.remove(self.key & INDEX_MASK);
        reactor.count.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Whether a task is running on this thread (plain threads poll the descriptor themselves and
/// ignore `drained`).
pub(crate) fn in_task() -> bool {
    crate::sched::current_task_ptr().is_some()
}

/// The home worker of the running task, to register a source with; `None` on a plain thread.
pub(crate) fn current_remote() -> Option<Arc<Remote>> {
    crate::sched::current_task()?.header().home().cloned()
}

/// Wakes the tasks waiting on the sources in `events` (a batch of the worker's poller).
pub(crate) fn dispatch(remote: &Remote, events: &polling::Events) {
    if events.iter().any(|event| event.key == EPOLL_KEY) {
        poll_now(remote);
    }
}

/// Collects and dispatches ready sources without blocking: a busy worker's poll (one
/// `epoll_wait`), and the second half of a sleeping worker's wake-up.
pub(crate) fn poll_now(remote: &Remote) {
    let epoll = &remote.io.epoll;
    let mut buf = [std::mem::MaybeUninit::<libc::epoll_event>::uninit(); BATCH];
    // Uninitialized, not zeroed: a busy worker calls this often, mostly for a few events.
    let mut woken = [const { std::mem::MaybeUninit::<(Arc<Readiness>, Ready)>::uninit() }; BATCH];
    loop {
        let ready = epoll.poll(&mut buf);
        // One slab lock per batch, not per event; the wakes happen after it, since a wake may
        // drop the last reference to a task, whose result may own a source whose drop
        // deregisters (and takes the slab lock).
        let slab = remote.io.lock();
        let mut n = 0;
        for event in ready {
            let ready = Ready::from(event);
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
        if ready.len() < BATCH {
            return;
        }
    }
}

/// Whether `remote`'s poller has I/O sources registered.
pub(crate) fn has_sources(remote: &Remote) -> bool {
    remote.io.count.load(Ordering::Relaxed) > 0
}
