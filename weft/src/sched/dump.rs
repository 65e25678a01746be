//! Capturing a parked task for a dump (`weft::debug`): the worker's half (`answer_dump`) and
//! the task's (`answer_captures`). The capture buffer and the request are the seam's
//! (observe/capture.rs), so nothing here names `debug`.
//!
//! A task dump (`weft::debug`) needs each task's backtrace, which only the task's own stack
//! holds, and a started task never leaves its worker's thread (sched/task/mod.rs invariant 1). So a
//! dump request goes to every worker (`Remote::request_dump`, a flag and a notify, like a wake);
//! the worker answers it between tasks (`answer_dump`), where every task in its live list is
//! switched out, either parked or in a ready queue:
//! 1. The worker takes a snapshot of the task's park state (PARKED or not), sets the task's
//!    `Header::capture` to its capture buffer, resumes the coroutine, and clears it again.
//! 2. The task is inside `suspend` (a park or a yield): it sees the capture, records its
//!    instruction pointers, stack pointer and — for a park — the `ParkReason` (a constant of
//!    the park site, passed to this cold path only) and the park time its parking frame holds
//!    (observe/capture.rs `record`), and suspends again with the same `Suspend`.
//!    It does not return from `suspend`, so `ParkState::resumed`, the cancellation check and
//!    the caller's re-check never run: the wake is invisible to it.
//! 3. The worker does not call `publish_parked` after a capture: the park state was never
//!    touched, so a PARKED task is still PARKED (its parked reference, sched/task/mod.rs invariant 4,
//!    still held by the park state), and a task an `unpark` moved to NOTIFIED meanwhile — from
//!    another thread, since this one is busy — was queued by that `unpark` as usual and runs
//!    later with an ordinary resume.
//!
//! A task that blocks its thread while panicking ("Parking while panicking") holds its worker,
//! so the worker cannot answer: the dump reports that worker's running task from its `Remote`
//! without resuming anything, as it does for a task that computes without parking.
//!
//! Owns: nothing; the worker's capture buffer lives for one answer.
//!
//! Invariants: steps 1–3 above.
//!
//! May call: the seam (`record`, the requests' answers), `stack` (a restore before a
//! capture, and the requeue of a compacted stack after one). Called by: queue.rs (a request
//! found between tasks), park.rs (`suspend`, when the header asks for a capture), and
//! `debug` through the seam's `DumpTarget`, which the runtime's `Shared` is here.
//!
//! Why capture on the workers, and by resuming the task: debug/mod.rs and
//! observe/capture.rs say so (a started task's stack is touched on its own thread only).

use std::panic::Location;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;

use corosensei::CoroutineResult;

use super::runtime::Shared;
use super::task::{Header, RunState, Suspend};
use super::worker::Worker;
use crate::observe::capture::{self, DumpRequest, DumpTarget, ParkSite, RunningTask};
use crate::park::ParkReason;
use crate::stack;

/// "Capturing a parked task" step 2: records, then switches out again, as long as the worker
/// resumes this task for captures; returns at the first resume to run.
#[cold]
#[inline(never)]
pub(super) fn answer_captures(
    header: &Header,
    reason: Suspend,
    site: Option<(ParkReason, &ParkSite)>,
) {
    // SAFETY: as in `suspend`: the running task's yielder, at the root of this stack.
    let yielder = unsafe { &*header.yielder.get() };
    while let Some(capture) = header.capture() {
        capture::record(capture, site);
        // Through `switch_out`, so that the stack pointer the stack layer keeps is this
        // deeper one: what lies below the first switch's is live now (stack/compact.rs
        // invariant 1).
        stack::switch_out(yielder, reason, &header.stack);
    }
}

impl Worker {
    /// Answers the dump requests queued on this worker ("Capturing a parked task"): captures
    /// every live task, and sends the result to each requester.
    #[cold]
    #[inline(never)]
    pub(super) fn answer_dump(&self) {
        let requests = self.remote.take_dump_requests();
        if requests.is_empty() {
            return;
        }
        capture::answer_started(&requests);
        let unstarted = self.new_tasks.len() + self.remote.placed_len.load(Ordering::Relaxed);
        let mut builder = capture::WorkerDumpBuilder::new(unstarted);
        let mut capture = Box::new(capture::Capture::new());
        let live = self.live.borrow();
        for (index, task) in live.iter() {
            let header = task.header();
            // SAFETY: this worker is between tasks, so it alone touches the run state of its
            // started tasks (sched/task/mod.rs invariant 1), and `run_task` is not running.
            let state = unsafe { header.run_state() };
            let RunState::Started { coroutine, .. } = state else {
                continue;
            };
            // Step 1: a snapshot; an unpark from another thread may follow at once.
            let parked = header.park.is_parked();
            capture.prepare(header.yielder.get() as usize, header.class.bytes());
            stack::set_running(Some(
                header as *const Header as *const dyn stack::DescribeTask,
            ));
            // stack/compact.rs invariant 4: a compacted stack is restored before anything
            // runs on it, a capture included.
            header.stack.before_resume(header.class.bytes());
            header.set_capture(Some(NonNull::from(&mut *capture)));
            let result = coroutine.resume(());
            header.set_capture(None);
            stack::set_running(None);
            // Step 3: no `publish_parked`, no requeue: the park state is as the task left it.
            if !matches!(result, CoroutineResult::Yield(_)) {
                eprintln!(
                    "weft: worker {}: task {} did not answer a capture",
                    self.index, header.id
                );
                eprintln!("weft: fatal error: capture resumed a running task");
                std::process::abort();
            }
            if parked {
                // The capture restored a compacted stack: queue it to be shrunk again.
                self.stacks.borrow_mut().parked(&header.stack, index);
            }
            builder.push(header, parked, &capture);
        }
        drop(live);
        capture::answer(requests, builder.finish());
    }
}

/// A runtime as a dump asks it (observe/capture.rs): its workers' `Remote`s.
impl DumpTarget for Shared {
    fn workers(&self) -> usize {
        self.remotes.len()
    }

    fn injected(&self) -> usize {
        self.injector.len()
    }

    fn request_dump(&self, worker: usize, request: Box<dyn DumpRequest>) {
        self.remotes[worker].request_dump(request);
    }

    fn running_task(&self, worker: usize) -> Option<RunningTask> {
        let remote = &self.remotes[worker];
        let id = remote.running_id.load(Ordering::Relaxed);
        let site = remote.running_site.load(Ordering::Relaxed);
        if id == 0 || site.is_null() {
            return None;
        }
        // SAFETY: `running_site` only ever holds a `&'static Location` (runtime.rs).
        let site: &'static Location<'static> = unsafe { &*site };
        let name = remote
            .running_name
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        Some(RunningTask { id, name, site })
    }

    fn live_tasks(&self, worker: usize) -> usize {
        self.remotes[worker].live.load(Ordering::Relaxed)
    }
}
