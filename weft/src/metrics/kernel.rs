//! What the kernel says about this process's memory: `/proc/self/status` and
//! `/proc/self/smaps`, read for `weft::metrics`.
//!
//! Owns: nothing; parsing only.
//!
//! Why `smaps` for committed stack bytes, not `mincore`: the stack regions of a million default
//! tasks span 256 GiB of address space, 64M pages; `mincore` over it fills a 64 MB vector
//! and walks every page. `smaps` reports the resident bytes of each mapping from the page
//! tables the kernel has, in one read, and a region of slots is one mapping (guard markers do
//! not split it, stack/region.rs). A mapping that reaches outside the regions (the kernel
//! merged a region with a neighbouring anonymous mapping) counts its `Rss` less what `mincore`
//! finds in the small part outside (`resident_in`), so no byte outside the regions is counted.
//! Without `/proc` (a sandbox), `mincore` over the carved slots is the fallback.

use std::collections::HashMap;
use std::fs;

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
/// slots (module doc).
pub(crate) fn stack_resident_bytes(regions: &[(usize, usize)], carved: &[(usize, usize)]) -> u64 {
    if regions.is_empty() {
        return 0;
    }
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
    let Ok(smaps) = fs::read_to_string("/proc/self/smaps") else {
        return carved.iter().map(|&(s, e)| mincore_bytes(s, e)).sum();
    };
    resident_in(&smaps, regions, |start, end| {
        outside
            .get(&(start, end))
            .copied()
            .unwrap_or_else(|| mincore_bytes(start, end))
    })
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
