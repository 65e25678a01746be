//! I/O readiness: the bridge between a worker's poller and the tasks waiting on sockets.
//!
//! Owns: each worker's [`Reactor`] (a slab of the sources registered with that worker's
//! poller, touched under its mutex by whoever registers, deregisters or dispatches), and each
//! source's [`Readiness`] (two sequence numbers and two waiter lists under a small mutex,
//! touched by the tasks and threads doing I/O on it and by the dispatching worker).
//!
//! A source is registered, edge-triggered for both directions, with the poller of the worker
//! whose task first has to wait on it (`weft::net` registers lazily, at the first
//! `WouldBlock`), and stays there until dropped. Its key is a slab index plus a generation:
//!
//! ```text
//!   key (usize) = generation << 32 | index      slab[index] = (generation, Arc<Readiness>)
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
//! in its life. Why a slab with generations rather than a pointer in the event's key: a pointer
//! would dangle when a source is dropped while its event is in flight in a worker's batch.

use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

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
    fn wake(&self, dir: Direction) {
        let d = dir as usize;
        let mut lists = self.lock();
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

/// Keys are `generation << 32 | index`; [`polling`]'s notify key (`usize::MAX`) is never one.
const INDEX_BITS: u32 = 32;
const INDEX_MASK: usize = (1 << INDEX_BITS) - 1;
const GENERATION_LIMIT: usize = (1 << 31) - 1;

/// The sources registered with one worker's poller.
#[derive(Default)]
pub(crate) struct Reactor {
    slab: Mutex<Slab>,
    /// Number of registered sources, read without the lock by `has_sources`.
    count: AtomicUsize,
}

#[derive(Default)]
struct Slab {
    entries: Vec<(usize, Option<Arc<Readiness>>)>,
    free: Vec<usize>,
}

impl Reactor {
    fn lock(&self) -> MutexGuard<'_, Slab> {
        self.slab.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn get(&self, key: usize) -> Option<Arc<Readiness>> {
        let slab = self.lock();
        let (generation, readiness) = slab.entries.get(key & INDEX_MASK)?;
        if *generation != key >> INDEX_BITS {
            return None;
        }
        readiness.clone()
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
            let index = match slab.free.pop() {
                Some(index) => index,
                None => {
                    slab.entries.push((0, None));
                    slab.entries.len() - 1
                }
            };
            let entry = &mut slab.entries[index];
            entry.0 = (entry.0 + 1) % GENERATION_LIMIT;
            entry.1 = Some(readiness);
            entry.0 << INDEX_BITS | index
        };
        // SAFETY: the caller keeps `fd` open until `deregister`, which deletes it from this
        // poller first (invariant 2).
        let added = unsafe {
            remote.poller.add_with_mode(
                std::os::fd::AsRawFd::as_raw_fd(&fd),
                polling::Event::all(key),
                polling::PollMode::Edge,
            )
        };
        if let Err(e) = added {
            let mut slab = reactor.lock();
            slab.entries[key & INDEX_MASK].1 = None;
            slab.free.push(key & INDEX_MASK);
            return Err(e);
        }
        reactor.count.fetch_add(1, Ordering::Relaxed);
        Ok(Registration { remote, key })
    }

    /// Deletes `fd` from the poller and frees its key; call before closing `fd`.
    pub(crate) fn deregister(&self, fd: BorrowedFd<'_>) {
        // An error means the fd was never added or the poller is gone: nothing to undo.
        let _ = self.remote.poller.delete(fd);
        let reactor = &self.remote.io;
        let mut slab = reactor.lock();
        let index = self.key & INDEX_MASK;
        slab.entries[index].1 = None;
        slab.free.push(index);
        reactor.count.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The home worker of the running task, to register a source with; `None` on a plain thread.
pub(crate) fn current_remote() -> Option<Arc<Remote>> {
    crate::sched::current_task()?.header.home().cloned()
}

/// Wakes the tasks waiting on the sources in `events`.
pub(crate) fn dispatch(remote: &Remote, events: &polling::Events) {
    for event in events.iter() {
        if event.key == usize::MAX {
            continue;
        }
        let Some(readiness) = remote.io.get(event.key) else {
            continue; // deregistered since: the key's generation moved on
        };
        // HUP and ERR set both flags (polling maps them to both directions).
        if event.readable {
            readiness.wake(Direction::Read);
        }
        if event.writable {
            readiness.wake(Direction::Write);
        }
    }
}

/// Whether `remote`'s poller has I/O sources registered.
pub(crate) fn has_sources(remote: &Remote) -> bool {
    remote.io.count.load(Ordering::Relaxed) > 0
}
