//! What the kernel says about this process's memory, for `weft::metrics`:
//! `/proc/self/status`, and the resident pages of the stack regions.
//!
//! Owns: nothing; the reads and their parsing only.
//!
//! # How committed stack bytes are read
//! 1. `ioctl(PAGEMAP_SCAN)` on `/proc/self/pagemap` (Linux 6.7+) over the ranges carved into
//!    slots: the kernel walks only the page tables that exist and returns runs of present
//!    pages (zero-page mappings left out, as `Rss` leaves them out), and nothing outside the
//!    slots. Its cost is the walk: 1M parked default tasks have 64M page-table entries in
//!    their slots (every 2 MiB holds a touched page or a guard marker), 100 ms here.
//! 2. Else `/proc/self/smaps`: the `Rss` of each mapping, one read; a region of slots is one
//!    mapping (guard markers do not split it, stack/region.rs). It costs more — `smaps`
//!    accounts every present page, 119 ms for 1M parked default tasks here — and the kernel
//!    merges a region with a neighbouring anonymous mapping of the same flags (a glibc malloc
//!    arena is `MAP_NORESERVE` too: seen in every test run here), so a mapping that reaches
//!    outside the regions counts its `Rss` less what `mincore` finds in the small part outside
//!    (`resident_in`).
//! 3. Without `/proc` (a sandbox), `mincore` over the carved slots.
//!
//! Rejected: `mincore` first: the regions of a million default tasks span 256 GiB, 64M pages,
//! and `mincore` fills one byte per page of it, holes included.

use std::collections::HashMap;
use std::fs;
use std::mem::size_of;
use std::path::Path;

/// Fields of `/proc/self/status`, in bytes (0 when absent).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Status {
    pub(crate) rss: u64,
    pub(crate) pte: u64,
    pub(crate) hwm: u64,
}

pub(crate) fn status() -> Status {
    let text = fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Status {
        rss: field("VmRSS:") * 1024,
        pte: field("VmPTE:") * 1024,
        hwm: field("VmHWM:") * 1024,
    }
}

pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// Resident bytes of the stack regions `[start, end)`, of which the ranges in `carved` hold
/// slots (module doc). `between_walks` is called between two parts of the page-table walk,
/// each a fraction of a millisecond (the caller may yield there).
pub(crate) fn stack_resident_bytes(
    regions: &[(usize, usize)],
    carved: &[(usize, usize)],
    between_walks: &mut dyn FnMut(),
) -> u64 {
    if regions.is_empty() {
        return 0;
    }
    if let Some(bytes) = pagemap_present_bytes(carved, between_walks) {
        return bytes;
    }
    if !Path::new("/proc/self/smaps").exists() {
        return carved.iter().map(|&(s, e)| mincore_bytes(s, e)).sum();
    }
    stack_resident_bytes_by_smaps(regions)
}

/// Step 2 of the module doc.
fn stack_resident_bytes_by_smaps(regions: &[(usize, usize)]) -> u64 {
    // The parts of merged mappings outside the regions are measured before `smaps` is read
    // (from `maps`, which walks no page): pages that a neighbour (a malloc arena) touches in
    // between then make the figure a little high, never low.
    let mut outside = HashMap::new();
    if let Ok(maps) = fs::read_to_string("/proc/self/maps") {
        for range in maps.lines().filter_map(mapping_range) {
            for part in outside_parts(range, regions) {
                outside.insert(part, mincore_bytes(part.0, part.1));
            }
        }
    }
    let smaps = fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    resident_in(&smaps, regions, |start, end| {
        outside
            .get(&(start, end))
            .copied()
            .unwrap_or_else(|| mincore_bytes(start, end))
    })
}

/// `struct pm_scan_arg` of `linux/fs.h` (Linux 6.7).
#[repr(C)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// `struct page_region` of `linux/fs.h`: a run of pages `[start, end)` of one category set.
#[repr(C)]
#[derive(Clone, Copy)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

/// `_IOWR('f', 16, struct pm_scan_arg)`.
const PAGEMAP_SCAN: u64 = (3 << 30) | ((size_of::<PmScanArg>() as u64) << 16) | (0x66 << 8) | 16;
const PAGE_IS_PRESENT: u64 = 1 << 3;
const PAGE_IS_PFNZERO: u64 = 1 << 5;

/// Bytes of present pages, not the zero page, in the page-aligned ranges, by
/// `ioctl(PAGEMAP_SCAN)`; `None` where the kernel has no such ioctl (before 6.7).
/// `between_walks` is called before each ioctl but the first.
pub(crate) fn pagemap_present_bytes(
    ranges: &[(usize, usize)],
    between_walks: &mut dyn FnMut(),
) -> Option<u64> {
    use std::os::fd::AsRawFd;
    let file = fs::File::open("/proc/self/pagemap").ok()?;
    let mut runs = vec![
        PageRegion {
            start: 0,
            end: 0,
            categories: 0
        };
        4096
    ];
    let mut total = 0;
    let mut first = true;
    for &(start, end) in ranges {
        let mut at = start as u64;
        while at < end as u64 {
            if !std::mem::take(&mut first) {
                between_walks();
            }
            let mut arg = PmScanArg {
                size: size_of::<PmScanArg>() as u64,
                flags: 0,
                start: at,
                end: end as u64,
                walk_end: 0,
                vec: runs.as_mut_ptr() as u64,
                vec_len: runs.len() as u64,
                max_pages: 0,
                category_inverted: PAGE_IS_PFNZERO,
                category_mask: PAGE_IS_PRESENT | PAGE_IS_PFNZERO,
                category_anyof_mask: 0,
                return_mask: PAGE_IS_PRESENT,
            };
            // SAFETY: `arg` is a live pm_scan_arg whose `vec` points at `runs.len()` page
            // regions for the kernel to fill; the scan only reads this process's page tables.
            let n = unsafe { libc::ioctl(file.as_raw_fd(), PAGEMAP_SCAN as _, &mut arg) };
            if n < 0 || arg.walk_end <= at {
                return None;
            }
            // Runs are counted up to `walk_end` only, where the next call starts: this
            // kernel (6.18) returned runs past the `walk_end` it reported.
            let walked = arg.walk_end;
            total += runs[..n as usize]
                .iter()
                .filter(|r| r.start < walked)
                .map(|r| r.end.min(walked) - r.start)
                .sum::<u64>();
            at = walked;
        }
    }
    Some(total)
}

/// The parts of the mapping `[start, end)` outside the regions, if it overlaps any (none for
/// a mapping inside them or away from them).
fn outside_parts((start, end): (usize, usize), regions: &[(usize, usize)]) -> Vec<(usize, usize)> {
    let mut overlapping: Vec<(usize, usize)> = regions
        .iter()
        .filter(|&&(s, e)| start < e && end > s)
        .map(|&(s, e)| (s.max(start), e.min(end)))
        .collect();
    let mut parts = Vec::new();
    if overlapping.is_empty() {
        return parts;
    }
    overlapping.sort_unstable();
    let mut at = start;
    for (s, e) in overlapping {
        if at < s {
            parts.push((at, s));
        }
        at = at.max(e);
    }
    if at < end {
        parts.push((at, end));
    }
    parts
}

/// The parsing half of [`stack_resident_bytes`], with `mincore` passed in.
///
/// A mapping inside the regions counts its `Rss`. One that reaches outside them (the kernel
/// merges a region with an adjacent anonymous mapping of the same flags: glibc's malloc
/// arenas are `MAP_NORESERVE` too, and one sat right above a region here) counts its `Rss`
/// less what `mincore` finds resident in its parts outside the regions, which are small (an
/// arena is at most 64 MiB): the slots themselves are never walked page by page.
fn resident_in(
    smaps: &str,
    regions: &[(usize, usize)],
    mincore: impl Fn(usize, usize) -> u64,
) -> u64 {
    let mut total = 0;
    let mut current: Option<(usize, usize)> = None;
    for line in smaps.lines() {
        if let Some((start, end)) = mapping_range(line) {
            current = Some((start, end));
            continue;
        }
        let Some((start, end)) = current else {
            continue;
        };
        let Some(rest) = line.strip_prefix("Rss:") else {
            continue;
        };
        current = None;
        if !regions.iter().any(|&(s, e)| start < e && end > s) {
            continue;
        }
        let rss = rest
            .split_whitespace()
            .next()
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024;
        let outside: u64 = outside_parts((start, end), regions)
            .into_iter()
            .map(|(s, e)| mincore(s, e))
            .sum();
        total += rss.saturating_sub(outside);
    }
    total
}

/// The address range of a mapping's header line (`start-end perms offset dev inode path`).
fn mapping_range(line: &str) -> Option<(usize, usize)> {
    let range = line.split_whitespace().next()?;
    let (start, end) = range.split_once('-')?;
    // Field lines ("Rss:   4 kB") have no '-' in their first word; header lines are hex.
    let start = usize::from_str_radix(start, 16).ok()?;
    let end = usize::from_str_radix(end, 16).ok()?;
    Some((start, end))
}

/// Resident bytes of `[start, end)` by `mincore(2)`, in chunks so that the vector stays small.
pub(crate) fn mincore_bytes(start: usize, end: usize) -> u64 {
    const CHUNK_PAGES: usize = 1 << 16;
    let page = page_size();
    let mut vec = vec![0u8; CHUNK_PAGES];
    let mut addr = start;
    let mut resident = 0u64;
    while addr < end {
        let len = (end - addr).min(CHUNK_PAGES * page);
        // SAFETY: `vec` holds one byte per page of `[addr, addr + len)` (len ≤ CHUNK_PAGES
        // pages); mincore reads only the page tables of that range and writes only `vec`.
        let rc = unsafe { libc::mincore(addr as *mut libc::c_void, len, vec.as_mut_ptr()) };
        if rc == 0 {
            let pages = len.div_ceil(page);
            resident += vec[..pages].iter().filter(|v| *v & 1 != 0).count() as u64;
        }
        addr += len;
    }
    resident * page as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
00400000-00452000 r-xp 00000000 08:02 173521      /usr/bin/app
Size:                328 kB
Rss:                 200 kB
7f0000000000-7f0800000000 rw-p 00000000 00:00 0
Size:           33554432 kB
Rss:                1024 kB
7f0800000000-7f0800100000 rw-p 00000000 00:00 0
Size:               1024 kB
Rss:                  64 kB
";

    /// An anonymous mapping of `pages` pages, every `stride`-th page written, and one more
    /// page only read (the zero page, which is not committed memory).
    fn touched_mapping(pages: usize, stride: usize) -> (usize, usize, u64) {
        let page = page_size();
        let len = pages * page;
        // SAFETY: a fresh private anonymous mapping at an address of the kernel's choosing.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED);
        let base = ptr as usize;
        let mut written = 0;
        for i in (0..pages - 1).step_by(stride) {
            // SAFETY: inside the mapping made above, which this test owns.
            unsafe { ((base + i * page) as *mut u8).write_volatile(1) };
            written += page as u64;
        }
        // SAFETY: as above; a read maps the zero page.
        let _ = unsafe { ((base + (pages - 1) * page) as *const u8).read_volatile() };
        (base, base + len, written)
    }

    #[test]
    fn pagemap_scan_counts_written_pages_and_not_the_zero_page() {
        let (start, end, written) = touched_mapping(4096, 3);
        let Some(scanned) = pagemap_present_bytes(&[(start, end)], &mut || {}) else {
            eprintln!("no PAGEMAP_SCAN on this kernel: skipped");
            return;
        };
        assert_eq!(scanned, written);
        // smaps, the fallback, agrees (the mapping is ours alone: nothing merges with it
        // that is resident, or the outside part is subtracted).
        assert_eq!(stack_resident_bytes_by_smaps(&[(start, end)]), written);
        // SAFETY: the mapping made by `touched_mapping`, no longer used.
        unsafe { libc::munmap(start as *mut libc::c_void, end - start) };
    }

    #[test]
    fn a_long_pagemap_scan_calls_back_between_its_walks() {
        // 4,100 runs of one present page each: more than one scan's 4,096.
        let (start, end, written) = touched_mapping(8200, 2);
        let mut calls = 0;
        let Some(scanned) = pagemap_present_bytes(&[(start, end)], &mut || calls += 1) else {
            eprintln!("no PAGEMAP_SCAN on this kernel: skipped");
            return;
        };
        assert_eq!(scanned, written);
        assert!(calls >= 1, "no call between the walks");
        // SAFETY: the mapping made by `touched_mapping`, no longer used.
        unsafe { libc::munmap(start as *mut libc::c_void, end - start) };
    }

    #[test]
    fn smaps_counts_the_mappings_inside_the_regions_only() {
        let regions = [(0x7f00_0000_0000, 0x7f08_0000_0000)];
        let none = |_: usize, _: usize| panic!("no mincore for a mapping inside a region");
        assert_eq!(resident_in(SMAPS, &regions, none), 1024 * 1024);
    }

    #[test]
    fn a_mapping_reaching_outside_the_regions_counts_its_rss_less_the_outside_part() {
        // The region is the first big mapping less its first 1 MiB (as if merged with a
        // neighbour), and the following 1 MiB mapping is outside.
        let regions = [(0x7f00_0010_0000, 0x7f08_0000_0000)];
        let total = resident_in(SMAPS, &regions, |s, e| {
            assert_eq!((s, e), (0x7f00_0000_0000, 0x7f00_0010_0000));
            24 * 1024
        });
        assert_eq!(total, 1000 * 1024);
    }
}
