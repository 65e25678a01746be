//! The count of one page of stack images (`arena.rs` invariant 1): images on the page plus a
//! thread's hold. Apart so that loom can check it (`src/tests/loom_image.rs`): whoever brings
//! the count to zero — exactly one thread — may release the page, and only once every other
//! user is done with it.
//!
//! May call: `crate::loom`. Called by: `arena.rs`.

use crate::loom::sync::atomic::{AtomicU32, Ordering};

/// One page's count.
#[derive(Default)]
pub(crate) struct PageCount(AtomicU32);

impl PageCount {
    /// One more user: an image carved on the page, or the hold of the thread carving it.
    /// Only a thread that holds the page, or has an image on it, adds (arena.rs invariant 2),
    /// so the count is not zero here.
    pub(crate) fn take(&self) {
        // Relaxed: the carving thread's writes reach others through the image's publication
        // (compact.rs invariant 3d), not through this count.
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// One user less; true for the one call that leaves the page without users, which may
    /// then release it.
    pub(crate) fn put(&self) -> bool {
        // AcqRel: every earlier user's accesses to the page happen before the release that
        // follows the last `put` (as `Arc`'s last drop).
        self.0.fetch_sub(1, Ordering::AcqRel) == 1
    }
}
