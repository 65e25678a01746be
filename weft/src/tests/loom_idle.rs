//! sched/idle.rs: work pushed to a worker that is deciding to sleep is never stranded.

use loom::sync::{Arc, Mutex, Notify};
use loom::thread;

use crate::sched::SleepFlags;

#[test]
fn loom_idle_no_lost_wakeup() {
    loom::model(|| {
        let flags = Arc::new(SleepFlags::new());
        let queue = Arc::new(Mutex::new(Vec::new()));
        // The poller: a sticky notification, like eventfd.
        let poller = Arc::new(Notify::new());
        let waker = {
            let (flags, queue, poller) = (flags.clone(), queue.clone(), poller.clone());
            thread::spawn(move || {
                queue.lock().unwrap().push(7);
                if flags.work_pushed() {
                    poller.notify();
                }
            })
        };
        // The worker loop, reduced to: drain, or sleep.
        loop {
            if flags.take_pushed() {
                if let Some(item) = queue.lock().unwrap().pop() {
                    assert_eq!(item, 7);
                    break;
                }
            }
            flags.prepare_sleep();
            if flags.pushed_pending() {
                flags.end_sleep();
                continue;
            }
            poller.wait(); // a lost wakeup deadlocks here, which loom reports
            flags.end_sleep();
        }
        waker.join().unwrap();
    });
}
