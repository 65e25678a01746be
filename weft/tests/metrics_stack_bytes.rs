//! The committed stack bytes of `weft::metrics::snapshot` agree with what the kernel reports
//! for the stack regions, measured here two other ways: the `Rss` of their mappings in
//! `/proc/self/smaps`, and `mincore(2)` over the slots.
//!
//! One test in its own binary: nothing else allocates stacks meanwhile.

mod common;

use std::hint::black_box;
use std::time::{Duration, Instant};

use common::{use_stack, watchdog};

/// The `Rss` of every mapping that overlaps a region. The kernel may have merged a region
/// with a neighbouring anonymous mapping (a malloc arena): that mapping's few resident pages
/// count too, well within the 5 %.
fn smaps_rss_of(regions: &[(usize, usize)]) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut total = 0;
    let mut inside = false;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((a, b)) = first.split_once('-') {
            if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) {
                inside = regions.iter().any(|&(s, e)| a < e && b > s);
                continue;
            }
        }
        if let Some(rest) = line.strip_prefix("Rss:") {
            if inside {
                let kb: u64 = rest.split_whitespace().next().unwrap().parse().unwrap();
                total += kb * 1024;
            }
        }
    }
    total
}

fn mincore_bytes(start: usize, len: usize) -> u64 {
    let page = 4096;
    let mut vec = vec![0u8; len / page];
    // SAFETY: one byte per page of a range inside a mapping weft made; mincore writes only
    // `vec`.
    let rc = unsafe { libc::mincore(start as *mut libc::c_void, len, vec.as_mut_ptr()) };
    assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
    vec.iter().filter(|v| *v & 1 != 0).count() as u64 * page as u64
}

fn within_5_percent(a: u64, b: u64) -> bool {
    a.abs_diff(b) * 20 <= a.max(b)
}

#[test]
fn committed_stack_bytes_agree_with_smaps_within_5_percent() {
    let _done = watchdog(
        "committed_stack_bytes_agree_with_smaps_within_5_percent",
        120,
    );
    const TASKS: usize = 2000;
    // Never shrunk: on a loaded machine the tasks that parked first would be compacted
    // before the last one parks, and the count checked below is of stacks as touched.
    let rt = weft::Runtime::builder()
        .workers(2)
        .stack_size(64 << 10)
        .stack_policy(weft::stack::StackPolicy::never())
        .build()
        .unwrap();
    let (snapshot, by_smaps, by_mincore) = rt.block_on(|| {
        let (tx, rx) = weft::chan::bounded::<()>(0);
        let handles: Vec<_> = (0..TASKS)
            .map(|_| {
                let rx = rx.clone();
                weft::spawn(move || {
                    black_box(use_stack::<{ 16 << 10 }>());
                    rx.recv().unwrap();
                })
            })
            .collect();
        let start = Instant::now();
        while weft::metrics::snapshot().tasks_parked < TASKS as u64 {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "tasks never parked"
            );
            weft::time::sleep(Duration::from_millis(5));
        }
        let snapshot = weft::metrics::snapshot();
        let spans: Vec<(usize, usize)> = snapshot
            .stack_regions
            .iter()
            .map(|r| (r.start, r.start + r.len))
            .collect();
        let by_smaps = smaps_rss_of(&spans);

        let by_mincore: u64 = snapshot
            .stack_regions
            .iter()
            .map(|r| mincore_bytes(r.start, r.carved_bytes))
            .sum();
        for _ in 0..TASKS {
            tx.send(()).unwrap();
        }
        for h in handles {
            h.join().unwrap();
        }
        (snapshot, by_smaps, by_mincore)
    });
    let committed = snapshot.stack_committed_bytes;
    eprintln!(
        "committed {committed} B, smaps {by_smaps} B, mincore {by_mincore} B, {:.0} B per task",
        snapshot.stack_bytes_per_task()
    );
    // Each task touched at least its 16 KiB buffer.
    assert!(committed >= (TASKS as u64) * (16 << 10), "{snapshot:?}");
    assert!(
        within_5_percent(committed, by_smaps),
        "snapshot {committed} B, smaps {by_smaps} B"
    );
    assert!(
        within_5_percent(committed, by_mincore),
        "snapshot {committed} B, mincore {by_mincore} B"
    );
    assert!(snapshot.stack_slots_in_use >= TASKS as u64, "{snapshot:?}");
    assert!(
        snapshot
            .stack_regions
            .iter()
            .any(|r| r.slot_bytes == 64 << 10),
        "{snapshot:?}"
    );
}
