//! What the interposer knows about each descriptor number.
//!
//! Owns: the descriptor table, indexed by fd number: per entry a flags byte and the
//! descriptor's [`Readiness`] (its registration with the workers' reactors), created the
//! first time a task must wait on it. The first chunk (fds below [`CHUNK`]) is static; later
//! chunks are allocated on demand, never freed, up to 2^20 descriptors. Any thread may touch any
//! entry: flags with relaxed atomics (they are hints or mirror the program's own calls on
//! that fd), the readiness pointer only under the entry's stripe lock.
//!
//! ```text
//!   flags: bit 0-1 kind (UNKNOWN, OTHER, WEFT)   bit 2 NB_UNDER   bit 3 USER_NB
//! ```
//!
//! Invariants:
//! 1. An entry is reset (flags cleared, readiness deregistered from every reactor and
//!    dropped) before the real `close`, `dup2`, `dup3` or `close_range` ends its fd number's
//!    life, so a reused number never inherits stale state — provided the program closes
//!    descriptors through libc. A number that `socket`, `socketpair`, `accept` or `accept4`
//!    returns is reset too, before the caller sees it, in case its last life ended behind
//!    libc's back (a raw `close` system call; see the README).
//! 2. NB_UNDER is set only by the interposer, after it set `O_NONBLOCK` on the open file
//!    itself (a listening socket a task accepts on); USER_NB is then the mode the program
//!    believes it set, which the interposed `fcntl`/`ioctl(FIONBIO)` report and record.
//! 3. A readiness pointer is null or came from `Arc::into_raw` and owns one reference; it is
//!    read, replaced or taken only under its stripe lock.
//! 4. Nothing on the paths a signal handler may take (`kind`, `nb_user`, `reset` of an entry
//!    without readiness) allocates or locks.
//! 5. In a child made by `fork`, `reset` never touches a readiness (flags only): the epoll
//!    instances are shared with the parent, so a `close` or `dup2` between `fork` and `exec`
//!    would delete the parent's registrations, and a lock held by another parent thread at
//!    the fork is held forever in the child. [`forked`] is set by a `pthread_atfork` handler.
//!
//! May call: `sched::io` (`Readiness`). Called by: `interpose/*`, `net` (`mark_weft`).

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::os::fd::BorrowedFd;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use libc::c_int;

use crate::sched::io::Readiness;

/// Entries per chunk.
pub(crate) const CHUNK: usize = 4096;
/// Chunks in the table: descriptors at or above `CHUNK * CHUNKS` (1,048,576, the usual hard
/// `RLIMIT_NOFILE` maximum) have no entry: their calls act as for an unknown descriptor, and
/// none parks on readiness (they block in the real `poll`).
const CHUNKS: usize = 256;

/// Never seen, or a socket the program made: data calls get `MSG_DONTWAIT` and park.
pub(crate) const UNKNOWN: u8 = 0;
/// Not a socket (file, pipe, tty…): passed through.
pub(crate) const OTHER: u8 = 2;
/// A `weft::net` socket: already non-blocking and waited on by `weft::net`: passed through.
pub(crate) const WEFT: u8 = 3;
const KIND: u8 = 0b11;
const NB_UNDER: u8 = 0b100;
const USER_NB: u8 = 0b1000;

struct Entry {
    flags: AtomicU8,
    readiness: AtomicPtr<Readiness>,
}

impl Entry {
    const fn new() -> Entry {
        Entry {
            flags: AtomicU8::new(0),
            readiness: AtomicPtr::new(null_mut()),
        }
    }
}

struct Chunk([Entry; CHUNK]);

static FIRST: Chunk = Chunk([const { Entry::new() }; CHUNK]);
/// Chunk `i` holds fds `i * CHUNK..`; index 0 is unused (`FIRST`).
static CHUNK_PTRS: [AtomicPtr<Chunk>; CHUNKS] = [const { AtomicPtr::new(null_mut()) }; CHUNKS];
/// Invariant 3's locks, by `fd % STRIPES`.
const STRIPES: usize = 64;
static STRIPE_LOCKS: [Mutex<()>; STRIPES] = [const { Mutex::new(()) }; STRIPES];

/// The entry of `fd` if its chunk exists; never allocates (invariant 4).
#[inline]
fn entry(fd: c_int) -> Option<&'static Entry> {
    let fd = usize::try_from(fd).ok()?;
    if fd < CHUNK {
        return Some(&FIRST.0[fd]);
    }
    let chunk = CHUNK_PTRS.get(fd / CHUNK)?.load(Ordering::Acquire);
    // SAFETY: a published chunk is never freed (module doc), and Acquire pairs with the
    // Release publication in `entry_or_alloc`, so its zeroed entries are visible.
    let chunk = unsafe { chunk.as_ref()? };
    Some(&chunk.0[fd % CHUNK])
}

/// The entry of `fd`, allocating its chunk if needed;  `None` past the table.
fn entry_or_alloc(fd: c_int) -> Option<&'static Entry> {
    if let Some(entry) = entry(fd) {
        return Some(entry);
    }
    let index = usize::try_from(fd).ok()? / CHUNK;
    let slot = CHUNK_PTRS.get(index)?;
    let layout = Layout::new::<Chunk>();
    // SAFETY: `Chunk` has a non-zero size; all-zero bytes are valid atomics (0, null).
    let fresh = unsafe { alloc_zeroed(layout) }.cast::<Chunk>();
    if fresh.is_null() {
        return None;
    }
    // Release: pairs with the Acquire load in `entry`.
    if let Err(_winner) =
        slot.compare_exchange(null_mut(), fresh, Ordering::Release, Ordering::Acquire)
    {
        // SAFETY: `fresh` was allocated just above with `layout` and never shared.
        unsafe { dealloc(fresh.cast(), layout) };
    }
    entry(fd)
}

/// What `fd` is known to be (a hint: `UNKNOWN` if never seen, or past the table).
#[inline]
pub(crate) fn kind(fd: c_int) -> u8 {
    entry(fd).map_or(UNKNOWN, |e| e.flags.load(Ordering::Relaxed) & KIND)
}

/// Records what `fd` is, if its chunk exists (invariant 4: never allocates).
#[inline]
pub(crate) fn set_kind(fd: c_int, kind: u8) {
    if let Some(e) = entry(fd) {
        let _ = e
            .flags
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |f| {
                Some(f & !KIND | kind)
            });
    }
}

/// Marks `fd` as a `weft::net` socket: every interposed call on it passes through. A socket
/// a task waited on before `weft::net` took it over (`from_std`) leaves its old registration
/// first, or `weft::net`'s own would find the descriptor already in the reactor.
pub(crate) fn mark_weft(fd: c_int) {
    reset(fd);
    if let Some(e) = entry_or_alloc(fd) {
        e.flags.store(WEFT, Ordering::Relaxed);
    }
}

/// `Some(user_nonblocking)` if the interposer set `O_NONBLOCK` underneath (invariant 2).
#[inline]
pub(crate) fn nb_user(fd: c_int) -> Option<bool> {
    let flags = entry(fd)?.flags.load(Ordering::Relaxed);
    (flags & NB_UNDER != 0).then_some(flags & USER_NB != 0)
}

/// Records that the interposer set `O_NONBLOCK` on `fd` while the program believes it is in
/// mode `user_nonblocking` (invariant 2); false if `fd` has no entry.
pub(crate) fn set_nb_under(fd: c_int, user_nonblocking: bool) -> bool {
    let Some(e) = entry_or_alloc(fd) else {
        return false;
    };
    let bits = NB_UNDER | if user_nonblocking { USER_NB } else { 0 };
    let _ = e
        .flags
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |f| {
            Some(f & KIND | bits)
        });
    true
}

/// Records the mode the program set on a descriptor with NB_UNDER.
pub(crate) fn set_user_nb(fd: c_int, user_nonblocking: bool) {
    if let Some(e) = entry(fd) {
        let _ = e
            .flags
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |f| {
                Some(if user_nonblocking {
                    f | USER_NB
                } else {
                    f & !USER_NB
                })
            });
    }
}

/// A duplicate `to` of `from` shares its open file, so it inherits NB_UNDER and USER_NB.
pub(crate) fn copy_nb(from: c_int, to: c_int) {
    if let Some(user_nonblocking) = nb_user(from) {
        set_nb_under(to, user_nonblocking);
    }
}

/// Set in a child process made by `fork` (invariant 5).
static FORKED: AtomicBool = AtomicBool::new(false);

/// Invariant 5: called in the child after a `fork`, by the `pthread_atfork` handler.
pub(crate) extern "C" fn forked() {
    FORKED.store(true, Ordering::Relaxed);
}

/// Invariant 1: forgets everything about `fd`, which is still open; call right before the
/// real call that closes (or replaces) it.
pub(crate) fn reset(fd: c_int) {
    let Some(e) = entry(fd) else {
        return;
    };
    e.flags.store(0, Ordering::Relaxed);
    if e.readiness.load(Ordering::Relaxed).is_null() || FORKED.load(Ordering::Relaxed) {
        return;
    }
    let taken = {
        let _guard = stripe(fd);
        e.readiness.swap(null_mut(), Ordering::Relaxed)
    };
    if !taken.is_null() {
        // SAFETY: invariant 3: the pointer owned one reference, now ours.
        let readiness = unsafe { Arc::from_raw(taken) };
        // SAFETY: the caller calls this before the fd is closed, so it is open.
        readiness.deregister(unsafe { BorrowedFd::borrow_raw(fd) });
    }
}

/// `fd`'s readiness, created on first use;  `None` past the table.
pub(crate) fn readiness(fd: c_int) -> Option<Arc<Readiness>> {
    let e = entry_or_alloc(fd)?;
    let _guard = stripe(fd);
    let mut p = e.readiness.load(Ordering::Relaxed);
    if p.is_null() {
        p = Arc::into_raw(Arc::new(Readiness::default())).cast_mut();
        e.readiness.store(p, Ordering::Relaxed);
    }
    // SAFETY: invariant 3: `p` owns a reference and cannot be taken while we hold the
    // stripe lock, so the count is at least 1 while we add ours.
    unsafe {
        Arc::increment_strong_count(p);
        Some(Arc::from_raw(p))
    }
}

fn stripe(fd: c_int) -> std::sync::MutexGuard<'static, ()> {
    STRIPE_LOCKS[fd as usize % STRIPES]
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}
