//! The compacted tasks' image bytes are counted (`weft::stack::counters().image_bytes`) and
//! reported by `weft::metrics` and its Prometheus text: at most the live bytes plus an 8-byte
//! header per image, less where the images of tasks parked at one place are stored as their
//! difference from a shared template (stack/template.rs), at least each task's own locals,
//! and nothing once every task has been restored and has finished.
//!
//! One test in its own process: the counters are process-wide, so no other test's tasks may
//! be compacted meanwhile. Skips (with a note) where `weft::stack::mode()` is not `Compact`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

const TASKS: u64 = 200;

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{what}: {:?}",
            weft::stack::counters()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn image_bytes_follow_compactions_and_restores() {
    let Some(rt) = common::eager_runtime(2) else {
        return;
    };
    let open = Arc::new(AtomicBool::new(false));
    let waiters = Arc::new(Mutex::new(Vec::new()));
    let handles: Vec<_> = (0..TASKS)
        .map(|i| {
            let (open, waiters) = (open.clone(), waiters.clone());
            rt.spawn(move || {
                let local = [i; 16];
                waiters.lock().unwrap().push(weft::task::current());
                while !open.load(Ordering::Acquire) {
                    weft::task::park();
                }
                std::hint::black_box(&local).iter().sum::<u64>()
            })
        })
        .collect();
    wait_for("the parked tasks were never all compacted", || {
        weft::stack::counters().compacted_tasks >= TASKS
    });

    let c = weft::stack::counters();
    if c.compacted_live_bytes / c.compacted_tasks <= 16 * 1024 {
        // The tasks park at one place: their images share a template, and each is smaller
        // than its live bytes.
        assert!(c.templates >= 1 && c.template_bytes > 0, "{c:?}");
        assert!(
            c.image_bytes < c.compacted_live_bytes,
            "the images of tasks parked at one place are not stored as differences: {c:?}"
        );
    } else {
        // Images longer than 16 KiB stay plain (stack/template.rs `TEMPLATE_LEN_MAX`).
        eprintln!("templates not checked: images longer than 16 KiB ({c:?})");
        assert!(c.image_bytes <= c.compacted_live_bytes + 8 * c.compacted_tasks);
    }
    let m = weft::metrics::snapshot();
    assert!(m.stack_image_bytes > 0, "{m:?}");
    assert_eq!(m.stack_template_bytes, c.template_bytes);
    // Each image holds at least the task's 128-byte local (16 words, each unlike the
    // template's but in the one task the template came from) and its header.
    assert!(
        m.image_bytes_per_task() >= 136.0 && m.image_bytes_per_task() < 64.0 * 1024.0,
        "{}",
        m.image_bytes_per_task()
    );
    let text = m.to_prometheus();
    for name in [
        "weft_stack_image_bytes ",
        "weft_stack_image_bytes_per_task ",
        "weft_stack_template_bytes ",
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(name)),
            "{name} missing:\n{text}"
        );
    }

    open.store(true, Ordering::Release);
    for task in waiters.lock().unwrap().drain(..) {
        task.unpark();
    }
    for (i, handle) in handles.into_iter().enumerate() {
        assert_eq!(handle.join().unwrap(), 16 * i as u64);
    }
    wait_for("images left after every task finished", || {
        let c = weft::stack::counters();
        c.compacted_tasks == 0 && c.image_bytes == 0 && c.compacted_live_bytes == 0
    });
    assert_eq!(weft::metrics::snapshot().image_bytes_per_task(), 0.0);
}
