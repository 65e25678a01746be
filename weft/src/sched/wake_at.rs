//! Wakes of futures due at an instant: one process-wide thread, started at the first use, that
//! wakes each `Waker` when its deadline passes — for futures whose wake is a time, not a peer
//! (a timer channel's `recv_async`, chan/async_ops.rs invariant 5).
//!
//! Owns: the thread (`weft-future-timer`) and its queue of wakes, earliest first, under one
//! mutex touched briefly by each `wake_at` and by the thread.
//!
//! Invariants:
//! 1. A waker is woken outside the lock (a wake runs the executor's code), at or after its
//!    deadline; one woken too early or twice is harmless: a woken future polls again and
//!    re-arms what it still waits for.
//!
//! May call: the wakers it was given. Called by: `chan` (timer channels awaited as futures).
//!
//! Why in the scheduler's layer rather than `future`: the channels' futures need it, and
//! the channels sit below `future` (lib.rs, "Layers"); it names nothing of weft.

use std::task::Waker;
use std::time::Instant;

/// Wakes `waker` at `deadline`, from one timer thread weft starts at the first use: for
/// futures whose wake is a time, not a peer (a timer channel's `recv_async`, chan/async_ops.rs
/// invariant 5). A wake that comes too early or twice is harmless: a woken future polls again
/// and re-arms what it still waits for.
pub(crate) fn wake_at(deadline: Instant, waker: Waker) {
    let timers = timer_thread();
    let mut queue = timers.queue.lock().unwrap_or_else(|e| e.into_inner());
    let first = queue.peek().is_none_or(|t| deadline < t.0 .0);
    queue.push(std::cmp::Reverse(TimerWake(deadline, waker)));
    drop(queue);
    if first {
        timers.changed.notify_one();
    }
}

/// A waker due at an instant (ordered by the instant alone).
struct TimerWake(Instant, Waker);

impl PartialEq for TimerWake {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl Eq for TimerWake {}

impl PartialOrd for TimerWake {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for TimerWake {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.cmp(&other.0)
    }
}

/// The wakes `wake_at` was asked for, earliest first, and the condition its thread sleeps on.
struct Timers {
    queue: std::sync::Mutex<std::collections::BinaryHeap<std::cmp::Reverse<TimerWake>>>,
    changed: std::sync::Condvar,
}

fn timer_thread() -> &'static Timers {
    static TIMERS: std::sync::OnceLock<&'static Timers> = std::sync::OnceLock::new();
    TIMERS.get_or_init(|| {
        let timers: &'static Timers = Box::leak(Box::new(Timers {
            queue: Default::default(),
            changed: std::sync::Condvar::new(),
        }));
        std::thread::Builder::new()
            .name("weft-future-timer".into())
            .spawn(move || fire_timers(timers))
            .expect("weft: cannot start the future timer thread");
        timers
    })
}

/// The timer thread: wakes each waker when it is due (outside the lock: a wake runs the
/// executor's code), and sleeps until the next one.
fn fire_timers(timers: &Timers) {
    let mut queue = timers.queue.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let now = Instant::now();
        let mut due = Vec::new();
        while queue.peek().is_some_and(|t| t.0 .0 <= now) {
            if let Some(std::cmp::Reverse(TimerWake(_, waker))) = queue.pop() {
                due.push(waker);
            }
        }
        if !due.is_empty() {
            drop(queue);
            due.into_iter().for_each(Waker::wake);
            queue = timers.queue.lock().unwrap_or_else(|e| e.into_inner());
            continue;
        }
        queue = match queue.peek().map(|t| t.0 .0) {
            Some(next) => {
                timers
                    .changed
                    .wait_timeout(queue, next.saturating_duration_since(now))
                    .unwrap_or_else(|e| e.into_inner())
                    .0
            }
            None => timers
                .changed
                .wait(queue)
                .unwrap_or_else(|e| e.into_inner()),
        };
    }
}
