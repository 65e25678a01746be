//! An io_uring provided-buffer ring: `count` buffers of `size` bytes, which recvs with
//! `IOSQE_BUFFER_SELECT` on `group` take from, in ring order.
//!
//! Owns: the ring's entries and the buffers, two anonymous mappings (page-aligned, as the
//! kernel requires), and the tail it publishes.
//!
//! Invariants:
//! 1. A buffer is in the ring (between the kernel's head and the published tail) or held by
//!    exactly one completion's owner, who gives it back once.
//! 2. The io_uring it is registered with drops before it (its owner's field order), and only
//!    that ring's issuing thread touches it.
//!
//! Self-contained (io-uring, libc and std only): weft-bench's `uring` echo floor builds this
//! same file (`#[path]`), so the runtime's reads and the floor share one implementation.
//!
//! May call: io-uring, libc. Called by: `sched/uring.rs`; weft-bench's `cli/uring_echo.rs`.

use std::cell::Cell;
use std::io;
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::types::BufRingEntry;
use io_uring::IoUring;

pub(crate) struct BufRing {
    entries: *mut BufRingEntry,
    data: *mut u8,
    /// Our tail, published to the kernel by [`BufRing::publish`].
    tail: Cell<u16>,
    count: u16,
    size: usize,
}

impl BufRing {
    /// Maps `count` (a power of two) buffers of `size` bytes, registers them with `ring` as
    /// `group`, and gives the kernel them all.
    pub(crate) fn new(ring: &IoUring, group: u16, count: u16, size: usize) -> io::Result<BufRing> {
        assert!(
            count.is_power_of_two(),
            "a buffer ring's size is a power of two"
        );
        let ring_bytes = count as usize * std::mem::size_of::<BufRingEntry>();
        let entries = map(ring_bytes)?.cast::<BufRingEntry>();
        let data = match map(count as usize * size) {
            Ok(d) => d,
            Err(e) => {
                // SAFETY: mapped just above with this length, not used after this.
                unsafe { libc::munmap(entries.cast(), ring_bytes) };
                return Err(e);
            }
        };
        let bufs = BufRing {
            entries,
            data,
            tail: Cell::new(0),
            count,
            size,
        };
        // SAFETY: the ring memory is page-aligned, `count` entries (a power of two), zeroed
        // (tail 0), and outlives the registration (invariant 2).
        unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(entries as u64, count, group, 0)?;
        }
        for bid in 0..count {
            bufs.give(bid);
        }
        bufs.publish();
        Ok(bufs)
    }

    /// Where buffer `bid`'s bytes from `from` start.
    pub(crate) fn at(&self, bid: u16, from: usize) -> *const u8 {
        assert!(
            bid < self.count && from <= self.size,
            "a provided buffer out of range"
        );
        // SAFETY: in range (checked), inside the data mapping.
        unsafe { self.data.add(bid as usize * self.size + from) }
    }

    /// Buffer `bid`'s first `len` bytes, as a completion delivered them.
    pub(crate) fn bytes(&self, bid: u16, len: usize) -> &[u8] {
        assert!(len <= self.size, "a completion longer than its buffer");
        // SAFETY: `at` checked `bid`; `len` fits the buffer; the kernel wrote those bytes and
        // no longer owns the buffer until `give` (invariant 1).
        unsafe { std::slice::from_raw_parts(self.at(bid, 0), len) }
    }

    /// Puts buffer `bid` back in the ring, seen by the kernel at the next `publish`.
    pub(crate) fn give(&self, bid: u16) {
        let tail = self.tail.get();
        let slot = (tail & (self.count - 1)) as usize;
        // SAFETY: `slot` < count, inside the ring mapping; the kernel reads only entries
        // between its head and the published tail, and this one is past the published tail.
        // The setters write addr, len and bid, never the field entry 0 shares with the tail.
        let entry = unsafe { &mut *self.entries.add(slot) };
        entry.set_addr(self.at(bid, 0) as u64);
        entry.set_len(self.size as u32);
        entry.set_bid(bid);
        self.tail.set(tail.wrapping_add(1));
    }

    /// Publishes the tail: the buffers given since the last publish become the kernel's.
    pub(crate) fn publish(&self) {
        // SAFETY: the tail is a u16 in entry 0 (initialized, 2-aligned), which the kernel
        // reads with acquire semantics: a release store pairs with it.
        let tail = unsafe { &*BufRingEntry::tail(self.entries).cast::<AtomicU16>() };
        tail.store(self.tail.get(), Ordering::Release);
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        let ring_bytes = self.count as usize * std::mem::size_of::<BufRingEntry>();
        // SAFETY: both ranges were mapped by `new` with these lengths; the ring that used them
        // is gone (invariant 2).
        unsafe {
            libc::munmap(self.entries.cast(), ring_bytes);
            libc::munmap(self.data.cast(), self.count as usize * self.size);
        }
    }
}

/// A fresh anonymous read-write mapping of `len` bytes.
fn map(len: usize) -> io::Result<*mut u8> {
    // SAFETY: an anonymous private mapping of a fresh range; the result is checked.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p.cast())
}
