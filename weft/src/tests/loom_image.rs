//! stack/page_count.rs: of the threads that let go of a page of stack images — the thread
//! that carved it, moving on, and the threads that free its images — exactly one sees it
//! empty, and it sees every other thread's accesses to the page done.

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
