//! A fixed array of write-once pointers: the table of stack-image templates
//! (`template.rs`). Apart so that loom can check it (`src/tests/loom_template.rs`): of the
//! threads that race to fill one entry exactly one wins, the others keep their values, and a
//! reader that finds an entry set sees every byte its writer wrote before publishing it.
//!
//! An entry is never cleared or freed while the table lives (the process's table is a static),
//! so a reference handed out lives as long as the table: no reference counts, no epochs, and
//! the fault thread reads an entry with one Acquire load, no lock.
//!
//! May call: `crate::loom`. Called by: `template.rs`.

use crate::loom::sync::atomic::{AtomicPtr, Ordering};

/// `n` write-once entries, each empty or pointing at a `T` the table owns.
pub(crate) struct WriteOnce<T> {
    entries: Box<[AtomicPtr<T>]>,
}

impl<T> WriteOnce<T> {
    pub(crate) fn new(n: usize) -> WriteOnce<T> {
        WriteOnce {
            entries: (0..n)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
        }
    }

    /// The value at `index`, if it has been set.
    pub(crate) fn get(&self, index: usize) -> Option<&T> {
        // Acquire: pairs with the Release of the `publish` that set it; the value's bytes,
        // written before, are seen.
        let value = self.entries[index].load(Ordering::Acquire);
        // SAFETY: a set entry points at a leaked `Box<T>`, never freed before the table.
        unsafe { value.as_ref() }
    }

    /// Sets `index` to `value` if it is empty: `Ok` with the value now in the table, or
    /// `Err` with `value` given back and the one another thread set first.
    pub(crate) fn publish(&self, index: usize, value: Box<T>) -> Result<&T, (Box<T>, &T)> {
        let new = Box::into_raw(value);
        match self.entries[index].compare_exchange(
            std::ptr::null_mut(),
            new,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            // SAFETY: published, so owned by the table until it drops.
            Ok(_) => Ok(unsafe { &*new }),
            // SAFETY: `new` was never published, so it is still ours; `old` is set, as `get`.
            Err(old) => Err(unsafe { (Box::from_raw(new), &*old) }),
        }
    }
}

impl<T> Drop for WriteOnce<T> {
    fn drop(&mut self) {
        for entry in self.entries.iter_mut() {
            let value = entry.load(Ordering::Relaxed);
            if !value.is_null() {
                // SAFETY: set by `publish` from a `Box`; `&mut self`: no reference is left.
                drop(unsafe { Box::from_raw(value) });
            }
        }
    }
}

// SAFETY: the table hands out `&T` to any thread and takes `Box<T>` from any thread.
unsafe impl<T: Send + Sync> Sync for WriteOnce<T> {}
// SAFETY: as above.
unsafe impl<T: Send + Sync> Send for WriteOnce<T> {}
