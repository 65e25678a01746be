//! sched/idle.rs: work pushed to a worker that is deciding to sleep is never stranded, and a
//! resting monitor is woken by the first worker to wake up.

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

/// The monitor's rest (sched/idle.rs `RestFlag`): a monitor that rests while a worker wakes
/// up is always woken. `recheck` adds the path of a rest that timed out and, with `resting`
/// still set, looks at the worker again before resting on.
fn monitor_rest_model(recheck: bool) {
    use crate::sched::RestFlag;
    loom::model(move || {
        let flags = Arc::new(SleepFlags::new());
        flags.prepare_sleep(); // the worker sleeps in its poller
        let rest = Arc::new(RestFlag::default());
        // The monitor's park: sticky, like `Thread::unpark` before `park`.
        let monitor_park = Arc::new(Notify::new());
        let worker = {
            let (flags, rest, monitor_park) = (flags.clone(), rest.clone(), monitor_park.clone());
            thread::spawn(move || {
                flags.end_sleep(); // woken for work
                if rest.worker_awake() {
                    monitor_park.notify();
                }
            })
        };
        let all_asleep = || flags.is_sleeping();
        if rest.try_rest(all_asleep) {
            let mut rechecked = !recheck;
            while rest.resting() {
                if !rechecked {
                    rechecked = true;
                    if !rest.still_all_asleep(all_asleep) {
                        break;
                    }
                }
                monitor_park.wait(); // a lost wake deadlocks here, which loom reports
            }
            rest.end_rest();
        }
        worker.join().unwrap();
    });
}

#[test]
fn loom_monitor_rest_is_ended_by_a_waking_worker() {
    monitor_rest_model(false);
}

#[test]
fn loom_monitor_rest_rechecked_after_a_timeout() {
    monitor_rest_model(true);
}
