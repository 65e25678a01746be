//! The blocking pool: OS threads that run the calls a task must not make on its worker
//! (`getaddrinfo`, file I/O, a C library that blocks), while the calling task parks.
//!
//! Owns: [`Pool`] — a job queue and thread counts under one mutex, touched by submitters and
//! pool threads; a pool thread takes jobs until it has idled for [`KEEP_ALIVE`].
//!
//! Invariants:
//! 1. `threads` never exceeds `max_threads` (the runtime's `max_threads` less its workers and
//!    monitor): a submit that would need one more thread fails with a clear error at once; it
//!    never waits for a thread to free up, so jobs that wait on each other cannot deadlock.
//! 2. A job is started only if `idle > 0` was counted for it or a thread was spawned for it.
//! 3. A pool thread counts itself idle before it wakes the caller of the job it finished, so
//!    a caller that submits again at once finds the thread free (it used to see the limit
//!    reached now and then, with its own job's thread still counted busy).
//!
//! May call: `park.rs`, the seam's trace events (observe/trace.rs: hand-offs and calls,
//! when a trace records). Called by: `task::spawn_blocking`, `net::resolve`,
//! `sched/runtime.rs`.
//!
//! Why per-runtime threads that come and go, not a fixed set: like Go (a blocked M is replaced
//! by a new one) the number of calls in flight is what needs the threads; an idle pool costs
//! nothing. Go's limit (`SetMaxThreads`, 10,000) ends the program; here it is an error to the
//! caller.

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

use super::park::{self, Waiter};
use crate::observe::trace;
use crate::park::ParkReason;

/// How long an idle pool thread waits for a job before it exits.
const KEEP_ALIVE: Duration = Duration::from_secs(10);

/// A job runs its call and returns the waiter to wake with the result: the pool wakes it only
/// after counting its thread idle again (invariant 3).
type Job = Box<dyn FnOnce() -> Option<Waiter> + Send>;

pub(crate) struct Pool {
    state: Mutex<State>,
    cond: Condvar,
    max_threads: usize,
    /// The runtime's `max_threads`, for the error message.
    runtime_max: usize,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Job>,
    threads: usize,
    idle: usize,
    shutdown: bool,
}

impl Pool {
    pub(crate) fn new(max_threads: usize, runtime_max: usize) -> Pool {
        Pool {
            state: Mutex::default(),
            cond: Condvar::new(),
            max_threads,
            runtime_max,
        }
    }

    /// Threads the pool has now, idle ones included (for `weft::metrics`).
    pub(crate) fn threads(&self) -> usize {
        self.lock().threads
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `job` on an idle thread or a new one (invariants 1–2).
    fn submit(self: &Arc<Self>, job: Job) -> io::Result<()> {
        let mut state = self.lock();
        if state.shutdown {
            return Err(io::Error::other(
                "weft: spawn_blocking: the runtime is shutting down",
            ));
        }
        if state.idle > state.queue.len() {
            state.queue.push_back(job);
            self.cond.notify_one();
            return Ok(());
        }
        if state.threads >= self.max_threads {
            return Err(io::Error::other(format!(
                "weft: spawn_blocking: the runtime reached its limit of {} OS threads \
                 ({} blocking calls in flight); raise RuntimeBuilder::max_threads or make fewer \
                 blocking calls at once",
                self.runtime_max, state.threads
            )));
        }
        state.threads += 1;
        state.queue.push_back(job);
        drop(state);
        let pool = self.clone();
        let spawned = thread::Builder::new()
            .name("weft-blocking".into())
            .spawn(move || pool.run());
        if let Err(e) = spawned {
            let mut state = self.lock();
            state.threads -= 1;
            state.queue.pop_back();
            return Err(io::Error::new(
                e.kind(),
                format!("weft: spawn_blocking: cannot start an OS thread: {e}"),
            ));
        }
        Ok(())
    }

    fn run(&self) {
        let mut state = self.lock();
        loop {
            if let Some(job) = state.queue.pop_front() {
                drop(state);
                // A job catches its closure's panic for its caller; what can still panic here
                // is the drop of a result whose caller was cancelled meanwhile. The hook has
                // reported it; the thread must live on to keep `threads` right.
                let waiter = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job))
                    .ok()
                    .flatten();
                state = self.lock();
                if let Some(waiter) = waiter {
                    // Invariant 3; a job submitted meanwhile is taken by the `continue`.
                    state.idle += 1;
                    drop(state);
                    waiter.wake();
                    state = self.lock();
                    state.idle -= 1;
                }
                continue;
            }
            if state.shutdown {
                break;
            }
            state.idle += 1;
            let (next, timeout) = self
                .cond
                .wait_timeout(state, KEEP_ALIVE)
                .unwrap_or_else(|e| e.into_inner());
            state = next;
            state.idle -= 1;
            if timeout.timed_out() && state.queue.is_empty() {
                break;
            }
        }
        state.threads -= 1;
    }

    /// Runtime shutdown: idle threads exit; running jobs finish on their own (not joined: a
    /// blocking call may never return).
    pub(crate) fn shut_down(&self) {
        self.lock().shutdown = true;
        self.cond.notify_all();
    }
}

/// The result slot a blocking job fills and its caller parks on.
struct Handoff<T> {
    result: Mutex<Option<thread::Result<T>>>,
    waiter: Waiter,
}

/// Runs `f` on the runtime's blocking pool while the calling task parks; on a plain thread, or
/// outside a runtime, runs `f` right here.
pub(crate) fn run<F, T>(f: F) -> io::Result<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let Some(pool) = super::worker::current_blocking_pool() else {
        return Ok(f());
    };
    let handoff = Arc::new(Handoff {
        result: Mutex::new(None),
        waiter: Waiter::current(),
    });
    let job_handoff = handoff.clone();
    if trace::on() {
        trace::handed_off();
    }
    pool.submit(Box::new(move || {
        let traced = if trace::on() {
            trace::blocking_call_started()
        } else {
            0
        };
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        if traced != 0 {
            let task = match &job_handoff.waiter {
                Waiter::Task(task) => task.header().id.as_u64(),
                Waiter::Thread(_) | Waiter::Waker(_) => 0,
            };
            trace::blocking_call_ended(task, traced);
        }
        *job_handoff.result.lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
        // Woken by the pool once this thread counts as idle (invariant 3).
        Some(job_handoff.waiter.clone())
    }))?;
    loop {
        let taken = handoff
            .result
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        match taken {
            Some(Ok(value)) => return Ok(value),
            Some(Err(payload)) => std::panic::resume_unwind(payload),
            // sched/park.rs invariant 2: re-check after every return.
            None => park::park_current(ParkReason::BlockingPool),
        }
    }
}
