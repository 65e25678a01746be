//! The compute pool: one OS thread per core for CPU-heavy closures, fed through a bounded
//! queue, so that a burst of computations neither stalls the workers (their tasks and timers
//! go on) nor makes a thread per job (as `spawn_blocking` does).
//!
//! Owns: the pool of each runtime — its queue's sending side (a weft channel), kept in the
//! runtime's compute slot (sched/pool_slot.rs) under its mutex, touched by submitters (to
//! clone it) and by the runtime's drop (to close it: it drops the sender); the pool threads
//! own the receiving side.
//!
//! Invariants:
//! 1. At most `threads` pool threads ever run, all started at the first job: the number of
//!    cores (`std::thread::available_parallelism`), whatever the load.
//! 2. At most `2 × threads` jobs wait in the queue; a submitter finds it full and parks
//!    (back-pressure: the caller is a task, its worker runs others meanwhile).
//! 3. After the slot is shut down (sched/pool_slot.rs) no job is queued: the sender it held
//!    is dropped, so the threads run the jobs already queued and exit.
//!
//! May call: `chan`, `sched` (the running task's runtime's slot). Called by: `task::compute`.
//! The runtime's drop closes the slot (sched/runtime.rs step 5) without naming this layer.
//!
//! Why a separate pool from `spawn_blocking`'s: a blocking call mostly waits, so the blocking
//! pool grows a thread per call in flight (up to `max_threads`), which is right for waiting
//! and wrong for computing: 200 CPU jobs made 204 threads that fought over the cores and
//! starved the workers' timers. Computation needs as many threads as cores, and a queue.
//! Why a weft channel as the queue: its `send` already parks a task when full and blocks a
//! plain thread's `recv` — the two halves of back-pressure — and its values are never lost
//! when a submitter is cancelled (chan/mod.rs invariant 1).

use std::io;
use std::thread;

use crate::chan::{self, Sender};
use crate::sched::{self, PoolSlot};

type Job = Box<dyn FnOnce() + Send>;

/// Queue slots per pool thread (invariant 2).
const QUEUE_PER_THREAD: usize = 2;

/// The queue of `slot`'s pool, its threads started with it at the first call (invariant 1).
fn sender(slot: &PoolSlot) -> io::Result<Sender<Job>> {
    let mut state = slot.lock();
    if state.closed {
        return Err(io::Error::other(
            "weft: compute: the runtime is shutting down",
        ));
    }
    if let Some(sender) = state
        .value
        .as_ref()
        .and_then(|v| v.downcast_ref::<Sender<Job>>())
    {
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
    state.value = Some(Box::new(sender.clone()));
    Ok(sender)
}

/// Runs `f` on the compute pool of the running task's runtime and parks until it is done;
/// on a plain thread, runs it right here.
pub(crate) fn run<F, T>(f: F) -> io::Result<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let Some(slot) = sched::current_compute_slot() else {
        return Ok(f());
    };
    let queue = sender(slot)?;
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
