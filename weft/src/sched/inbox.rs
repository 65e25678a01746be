//! A stream's inbox: bytes an io_uring read received that no caller has taken yet
//! (sched/uring.rs protocol steps 3–4).
//!
//! Owns: [`InboxState`], one word in the stream's `Readiness` (a "holds something" bit and
//! the count of the stream's orphaned reads in flight), and the bytes' type [`Queued`], kept
//! under the readiness's lock (sched/io.rs). Touched by the stream's readers (any thread) and
//! by the worker that reaps an orphan. The word sits in padding the readiness had, and the
//! bytes behind one pointer under a lock it had: a stream that never reads through io_uring
//! costs not a byte more.
//!
//! Invariants:
//! 1. The `FULL` bit is set while the queue holds bytes or an error, and changes only under
//!    the lock the queue is kept under; so a reader that finds it clear skips the lock and
//!    misses nothing pushed before its load.
//! 2. An orphan's bytes are pushed (the bit set) before its count drops (Release), on the
//!    same word: a reader that finds the count at zero (Acquire) and then looks at the bit
//!    finds them. Readers look at the count first, then the inbox (loom: `loom_inbox`).
//!
//! May call: the loom facade. Called by: `sched/io.rs` (`Inbox`), `sched/uring.rs`, `net`.

use std::io;
use std::mem::MaybeUninit;

use crate::loom::sync::atomic::{AtomicU32, Ordering};

/// The queue holds bytes or an error.
const FULL: u32 = 1 << 31;

/// The lock-free half of a stream's inbox (invariants 1–2).
#[derive(Default)]
pub(crate) struct InboxState(AtomicU32);

/// What the inbox holds, under the readiness's lock.
#[derive(Default)]
pub(crate) struct Queued {
    bytes: Vec<u8>,
    /// Where the bytes not taken yet start.
    start: usize,
    /// An error a read received after the bytes: returned once they are taken.
    error: Option<i32>,
}

impl InboxState {
    /// Whether the queue holds nothing and no orphan is in flight: the one load every read
    /// makes; the rest only when it is false.
    #[inline]
    pub(crate) fn is_quiet(&self) -> bool {
        self.0.load(Ordering::Acquire) == 0
    }

    /// Whether the queue holds something; the lock only when set.
    #[inline]
    pub(crate) fn is_full(&self) -> bool {
        self.0.load(Ordering::Acquire) & FULL != 0
    }

    /// Whether orphaned reads of this stream are in flight.
    #[inline]
    pub(crate) fn has_orphans(&self) -> bool {
        self.0.load(Ordering::Acquire) & !FULL != 0
    }

    /// A read of this stream was orphaned (sched/uring.rs step 3).
    pub(crate) fn orphan_started(&self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }

    /// An orphan ended, after its bytes (if any) were pushed (invariant 2).
    pub(crate) fn orphan_ended(&self) {
        self.0.fetch_sub(1, Ordering::Release);
    }

    /// Appends `bytes` to `queue` (after what it holds: step 4), kept as they are when it is
    /// empty. The caller holds the queue's lock (invariant 1).
    pub(crate) fn push(&self, queue: &mut Option<Box<Queued>>, bytes: Vec<u8>) {
        if bytes.is_empty() {
            return;
        }
        let queued = queue.get_or_insert_with(Box::default);
        if queued.start == queued.bytes.len() {
            queued.bytes = bytes;
            queued.start = 0;
        } else {
            queued.bytes.extend_from_slice(&bytes);
        }
        self.0.fetch_or(FULL, Ordering::Release);
    }

    /// Queues `errno`, returned once the bytes before it are taken; the lock held.
    pub(crate) fn push_error(&self, queue: &mut Option<Box<Queued>>, errno: i32) {
        queue
            .get_or_insert_with(Box::default)
            .error
            .get_or_insert(errno);
        self.0.fetch_or(FULL, Ordering::Release);
    }

    /// Moves up to `buf.len()` bytes of `queue` into `buf`; then the error, once the bytes
    /// are gone. `None` if it holds nothing. The lock held.
    pub(crate) fn take(
        &self,
        queue: &mut Option<Box<Queued>>,
        buf: &mut [MaybeUninit<u8>],
    ) -> Option<io::Result<usize>> {
        let queued = queue.as_mut()?;
        let waiting = &queued.bytes[queued.start..];
        let result = if !waiting.is_empty() {
            let n = buf.len().min(waiting.len());
            // SAFETY: `n` fits both; the queue's bytes and `buf` do not overlap.
            unsafe { std::ptr::copy_nonoverlapping(waiting.as_ptr(), buf.as_mut_ptr().cast(), n) };
            queued.start += n;
            Ok(n)
        } else if let Some(errno) = queued.error.take() {
            Err(io::Error::from_raw_os_error(errno))
        } else {
            return None;
        };
        if queued.start == queued.bytes.len() && queued.error.is_none() {
            *queue = None;
            self.0.fetch_and(!FULL, Ordering::Release);
        }
        Some(result)
    }

    /// Copies up to `buf.len()` bytes of `queue` into `buf` without taking them (`peek`);
    /// `None` if it holds no bytes. The lock held.
    pub(crate) fn peek(&self, queue: &Option<Box<Queued>>, buf: &mut [u8]) -> Option<usize> {
        let queued = queue.as_ref()?;
        let waiting = &queued.bytes[queued.start..];
        if waiting.is_empty() {
            return None;
        }
        let n = buf.len().min(waiting.len());
        buf[..n].copy_from_slice(&waiting[..n]);
        Some(n)
    }
}
