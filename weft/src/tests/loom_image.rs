//! stack/page_count.rs: of the threads that let go of a page of stack images — the thread
//! that carved it, moving on, and the threads that free its images — exactly one sees it
//! empty, and it sees every other thread's accesses to the page done; and a run of pages is
//! carved again only after every page of it has been released (arena.rs invariant 4).

use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;

use crate::page_count::PageCount;

/// The page: its count, and its bytes (loom tracks the accesses to them).
struct Page {
    count: PageCount,
    bytes: UnsafeCell<[u8; 2]>,
}

// SAFETY: every access to `bytes` is ordered by the count's protocol, which loom checks.
unsafe impl Sync for Page {}

#[test]
fn loom_image_page_is_released_once_after_every_user() {
    loom::model(|| {
        let page = Arc::new(Page {
            count: PageCount::default(),
            bytes: UnsafeCell::new([0; 2]),
        });
        // The carving thread holds the page and carves two images on it.
        page.count.take();
        page.count.take();
        page.count.take();
        page.bytes.with_mut(|b| unsafe { *b = [1, 2] });
        // Two restores read one image each and free it, while the carver moves on; whoever
        // empties the page releases it (a write of zeros, as MADV_DONTNEED), at once, on its
        // own thread: loom flags it if it can race with a read.
        let release = |page: &Page| page.bytes.with_mut(|b| unsafe { *b = [0; 2] });
        let readers: Vec<_> = (0..2)
            .map(|i| {
                let page = page.clone();
                thread::spawn(move || {
                    let byte = page.bytes.with(|b| unsafe { (*b)[i] });
                    assert_eq!(byte, i as u8 + 1);
                    let emptied = page.count.put();
                    if emptied {
                        release(&page);
                    }
                    emptied
                })
            })
            .collect();
        let mut emptied = usize::from(page.count.put());
        if emptied == 1 {
            release(&page);
        }
        for reader in readers {
            emptied += usize::from(reader.join().unwrap());
        }
        assert_eq!(emptied, 1);
    });
}

/// A run of two pages, one image on each (arena.rs invariant 4): each restore frees its image,
/// releases its page if it emptied it and only then puts the run's count; whoever brings the
/// run to zero recycles it and carves it again. Loom flags a release that could race with the
/// new carving, and the new bytes must be what is left.
#[test]
fn loom_image_run_is_recycled_only_after_its_pages_are_released() {
    loom::model(|| {
        struct Run {
            count: PageCount,
            pages: [Page; 2],
        }
        // SAFETY: as `Page`: every access is ordered by the counts' protocol, checked by loom.
        unsafe impl Sync for Run {}
        let run = Arc::new(Run {
            count: PageCount::default(),
            pages: [0, 1].map(|_| Page {
                count: PageCount::default(),
                bytes: UnsafeCell::new([0; 2]),
            }),
        });
        // The carver's hold on the run, then an image on each page (a count on its page and
        // one on the run).
        run.count.take();
        for (i, page) in run.pages.iter().enumerate() {
            run.count.take();
            page.count.take();
            page.bytes.with_mut(|b| unsafe { *b = [i as u8 + 1; 2] });
        }
        // Recycling carves the run again: new bytes on both pages.
        let recycle = |run: &Run| {
            for page in &run.pages {
                page.bytes.with_mut(|b| unsafe { *b = [9; 2] });
            }
        };
        let restores: Vec<_> = (0..2)
            .map(|i| {
                let run = run.clone();
                thread::spawn(move || {
                    let page = &run.pages[i];
                    assert_eq!(page.bytes.with(|b| unsafe { (*b)[0] }), i as u8 + 1);
                    if page.count.put() {
                        page.bytes.with_mut(|b| unsafe { *b = [0; 2] }); // the release
                    }
                    let recycled = run.count.put();
                    if recycled {
                        recycle(&run);
                    }
                    recycled
                })
            })
            .collect();
        // The carver moves on to another run: it lets go of this one.
        let mut recycled = usize::from(run.count.put());
        if recycled == 1 {
            recycle(&run);
        }
        for restore in restores {
            recycled += usize::from(restore.join().unwrap());
        }
        assert_eq!(recycled, 1);
        for page in &run.pages {
            assert_eq!(
                page.bytes.with(|b| unsafe { *b }),
                [9; 2],
                "a release after the recycling"
            );
        }
    });
}
