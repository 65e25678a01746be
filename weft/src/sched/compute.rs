//! The compute pool: one OS thread per core for CPU-heavy closures, fed through a bounded
//! queue, so that a burst of computations neither stalls the workers (their tasks and timers
//! go on) nor makes a thread per job (as `spawn_blocking` does).
//!
//! Owns: [`Pool`] — its queue's sending side (a weft channel) under a mutex, touched by
//! submitters (to clone it) and by the runtime's drop (to close it); the pool threads own
//! the receiving side.
//!
//! Invariants:
//! 1. At most `threads` pool threads ever run, all started at the first job: the number of
//!    cores (`std::thread::available_parallelism`), whatever the load.
//! 2. At most `2 × threads` jobs wait in the queue; a submitter finds it full and parks
//!    (back-pressure: the caller is a task, its worker runs others meanwhile).
//! 3. After `shut_down` no job is queued; the threads run the jobs already queued and exit.
//!
//! May call: `chan`, `park`. Called by: `task::compute`, `sched/runtime.rs` (shutdown).
//!
//! Why a separate pool from `spawn_blocking`'s: a blocking call mostly waits, so the blocking
//! pool grows a thread per call in flight (up to `max_threads`), which is right for waiting
//! and wrong for computing: 200 CPU jobs made 204 threads that fought over the cores and
//! starved the workers' timers. Computation needs as many threads as cores, and a queue.
//! Why a weft channel as the queue: its `send` already parks a task when full and blocks a
//! plain thread's `recv` — the two halves of back-pressure — and its values are never lost
//! when a submitter is cancelled (chan/mod.rs invariant 1).

use std::io;
use std::sync::{Mutex, MutexGuard};
use std::thread;

use crate::chan::{self, Sender};

type Job = Box<dyn FnOnce() + Send>;

/// Queue slots per pool thread (invariant 2).
const QUEUE_PER_THREAD: usize = 2;

pub(crate) struct Pool {
    /// `None` before the first job, or after `shut_down` (then `closed`).
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    sender: Option<Sender<Job>>,
    closed: bool,
}

impl Pool {
    pub(crate) fn new() -> Pool {
        Pool {
            queue: Mutex::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The queue, started with its threads at the first call (invariant 1).
    fn sender(&self) -> io::Result<Sender<Job>> {
        let mut queue = self.lock();
        if queue.closed {
            return Err(io::Error::other(
                "weft: compute: the runtime is shutting down",
            ));
        }
        if let Some(sender) = &queue.sender {
            return Ok(sender.clone());
        }
        let threads = thread::available_parallelism().map_or(1, |n| n.get());
        let (sender, receiver) = chan::bounded::<Job>(threads * QUEUE_PER_THREAD);
        for i in 0..threads {
            let receiver = receiver.clone();
            thread::Builder::new()
                .name(format!("weft-compute-{i}"))
                .spawn(move || {
                    for job in receiver.iter() {
                        // A job catches its closure's panic for its caller; what can panic
                        // here is the drop of a result whose caller was cancelled meanwhile.
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                    }
                })
                .map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("weft: compute: cannot start a pool thread: {e}"),
                    )
                })?;
        }
        queue.sender = Some(sender.clone());
        Ok(sender)
    }

    /// Runtime shutdown (invariant 3).
    pub(crate) fn shut_down(&self) {
        let mut queue = self.lock();
        queue.closed = true;
        let sender = queue.sender.take();
        drop(queue);
        drop(sender);
    }
}

/// Runs `f` on the compute pool of the running task's runtime and parks until it is done;
/// on a plain thread, runs it right here.
pub(crate) fn run<F, T>(f: F) -> io::Result<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let Some(pool) = super::worker::current_compute_pool() else {
        return Ok(f());
    };
    let queue = pool.sender()?;
    let (done, result) = chan::bounded(1);
    let job: Job = Box::new(move || {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        // The caller may have been cancelled: then the result is dropped here.
        let _ = done.send(outcome);
    });
    // Parks while the queue is full (invariant 2).
    queue
        .send(job)
        .map_err(|_| io::Error::other("weft: compute: the runtime is shutting down"))?;
    drop(queue);
    match result.recv() {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(payload)) => std::panic::resume_unwind(payload),
        Err(_) => Err(io::Error::other(
            "weft: compute: the job was dropped unrun: the runtime is shutting down",
        )),
    }
}
