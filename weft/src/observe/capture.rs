//! The capture of one worker's tasks for a dump: what a task records about itself when its
//! worker resumes it with its `Header::capture` set, and the worker's answer.
//!
//! Owns: [`Capture`] (one per answering worker, written by each captured task in turn, on the
//! worker's thread), [`WorkerDump`] (the answer, handed to each requester), and the
//! [`DumpRequest`] interface a requester implements, and the [`DumpTarget`] a runtime is to
//! a requester.
//!
//! Invariants:
//! 1. A capture is written only by the task the worker resumed with it, between that resume
//!    and the task's next suspend; the worker reads it only after (sched/dump.rs,
//!    "Capturing a parked task" step 2).
//! 2. A task records frames only while [`CAPTURE_RESERVE`] bytes of its stack remain free: the
//!    unwinder's frames must fit above the guard page, or the capture would overflow a task
//!    that parked with a nearly full stack.
//! 3. Raw stacks are instruction pointers only; they are interned per worker (a million tasks
//!    parked at one site share one entry) and symbolized later, off the worker.
//! 4. A task reuses a stack an earlier task of the same dump unwound (a `Layout`) only if its
//!    stack pointer is as deep below its stack's root and every return address of that stack
//!    sits in its own stack at the same offset: then it is suspended in the same functions at
//!    the same call sites, and unwinding it would find the same frames. x86-64 only, where a
//!    frame's return address is the word below its canonical frame address. A stack whose
//!    words do not all check out when it is first unwound is not remembered.
//!
//! May call: `backtrace` (unwinding only), a request's own `started` and `answer`. Called by:
//! sched/park.rs (`suspend`), sched/dump.rs (`answer_dump`), `debug` (making requests,
//! reading answers).
//!
//! Why resume the task rather than unwind its saved context from outside: corosensei keeps a
//! suspended coroutine's stack pointer private, and an unwinder started from a saved register
//! set would need a hand-built `_Unwind_Context`; a resume costs ≈2 ns and lets the ordinary
//! unwinder walk the task's frames on its own stack, the way a panic's backtrace does.

use std::collections::HashMap;
use std::panic::Location;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Instant;

use super::TaskView;
use crate::park::ParkReason;

/// The most frames kept of one task's stack (the innermost ones).
pub(crate) const MAX_FRAMES: usize = 48;

/// Free stack a task must have left for its capture to walk its frames (invariant 2): the
/// unwinder's state and frames take between 5 and 13 KiB in a debug build (a walk with 5 KiB
/// left overflowed, one with 12.8 KiB did not: `debug_dump.rs`, nearly full stack); slots
/// are at least 32 KiB, so a task parked with more than 12 KiB of a minimum stack in use is
/// shown without a backtrace.
pub(crate) const CAPTURE_RESERVE: usize = 16 * 1024;

/// What a parked task's parking frame holds for a dump: since when it waits, as the worker's
/// coarse clock read at the park (sched/worker.rs, `Worker::clock`, a [`clock_now`] word). A
/// park costs a load and a store for it. Why it waits is not stored at all: the `ParkReason`
/// is a constant at each park site, passed only to the cold path that answers a capture
/// (`record`), so it costs the park nothing.
pub(crate) struct ParkSite(u64);

impl ParkSite {
    /// `clock` is a [`clock_now`] word, as the worker keeps it.
    #[inline(always)]
    pub(crate) fn new(clock: u64) -> ParkSite {
        ParkSite(clock)
    }

    fn since(&self) -> Instant {
        let waited = clock_now().saturating_sub(self.0);
        let now = Instant::now();
        now.checked_sub(std::time::Duration::from_nanos(waited))
            .unwrap_or(now)
    }
}

/// The time now on the workers' coarse clock (read by a worker when it refreshes its own):
/// `CLOCK_MONOTONIC` in nanoseconds, the clock `Instant` reads. Read straight from libc:
/// through `Instant::elapsed` since an epoch the read and its 128-bit arithmetic cost ping-pong
/// 3.5 instructions per round trip (callgrind, a refresh every 61 task runs).
pub(crate) fn clock_now() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

/// One task's record, written by the task itself (invariant 1).
pub(crate) struct Capture {
    /// Bounds of the task's stack, from its worker: frames whose canonical frame address
    /// falls outside them are the worker's, not the task's.
    limit: usize,
    base: usize,
    reason: Option<ParkReason>,
    since: Option<Instant>,
    /// Bytes between the top of the task's stack and its stack pointer at the capture.
    in_use: usize,
    ips: [usize; MAX_FRAMES],
    len: usize,
    /// No frames recorded: too little stack left (invariant 2).
    no_room: bool,
    /// Stacks unwound so far in this dump, for the next tasks parked the same way
    /// (invariant 4).
    layouts: Vec<Layout>,
}

/// The most layouts one worker remembers in one dump (a linear scan finds them).
const MAX_LAYOUTS: usize = 64;

/// A stack unwound once (invariant 4).
struct Layout {
    /// Root minus stack pointer, in the capturing frame.
    depth: usize,
    /// (offset below the root, return address found there).
    checks: Box<[(usize, usize)]>,
    ips: Box<[usize]>,
}

impl Layout {
    /// Whether the stack whose root is `root` holds the same return addresses.
    fn matches(&self, root: usize) -> bool {
        self.checks.iter().all(|&(offset, ip)| {
            // SAFETY: `offset` was measured on a stack suspended as deep as this one, at a
            // canonical frame address above the capturing frame: `root - offset` lies between
            // this task's stack pointer and its root, in frames of this task that are live
            // (suspended callers), so the word is mapped, initialised and aligned.
            let word = unsafe { (root.wrapping_sub(offset) as *const usize).read() };
            word == ip
        })
    }
}

impl Capture {
    pub(crate) fn new() -> Capture {
        Capture {
            limit: 0,
            base: 0,
            reason: None,
            since: None,
            in_use: 0,
            ips: [0; MAX_FRAMES],
            len: 0,
            no_room: false,
            layouts: Vec::new(),
        }
    }

    /// The worker, before resuming a task: `root` is the address of the task's yielder, which
    /// corosensei keeps at the root of the task's stack, and `size` the slot's size.
    pub(crate) fn prepare(&mut self, root: usize, size: usize) {
        // The coroutine's own entry frames sit just above the yielder.
        self.base = root.saturating_add(4096);
        self.limit = root.saturating_sub(size);
        self.reason = None;
        self.since = None;
        self.in_use = 0;
        self.len = 0;
        self.no_room = false;
    }
}

/// Records the running task's stack into `capture`: called by the task, on its own stack,
/// from `suspend` when a dump resumed it (sched/dump.rs, "Capturing a parked task" step 2).
#[cold]
#[inline(never)]
pub(crate) fn record(capture: NonNull<Capture>, site: Option<(ParkReason, &ParkSite)>) {
    // SAFETY: invariant 1: the worker handed this capture to this task alone, and does not
    // touch it until the task suspends again.
    let capture = unsafe { &mut *capture.as_ptr() };
    let here = 0u8;
    let sp = std::ptr::addr_of!(here) as usize;
    capture.in_use = capture.base.saturating_sub(4096).saturating_sub(sp);
    if let Some((reason, site)) = site {
        capture.reason = Some(reason);
        capture.since = Some(site.since());
    }
    if sp.saturating_sub(capture.limit) < CAPTURE_RESERVE {
        capture.no_room = true;
        return;
    }
    let root = capture.base - 4096;
    let depth = root.saturating_sub(sp);
    if cfg!(target_arch = "x86_64") {
        let known = capture
            .layouts
            .iter()
            .find(|l| l.depth == depth && l.matches(root));
        if let Some(layout) = known {
            capture.ips[..layout.ips.len()].copy_from_slice(&layout.ips);
            capture.len = layout.ips.len();
            return;
        }
    }
    let (limit, base) = (capture.limit, capture.base);
    let mut len = 0;
    let ips = &mut capture.ips;
    let mut cfas = [0usize; MAX_FRAMES];
    // SAFETY: `trace_unsynchronized` only asks that no other thread use the platform's
    // unwinder unsynchronised where it is not thread-safe (dbghelp on Windows); on Linux it is
    // libgcc's `_Unwind_Backtrace`, which is thread-safe. Invariant 2 leaves it room.
    unsafe {
        backtrace::trace_unsynchronized(|frame| {
            let cfa = frame.sp() as usize;
            if cfa != 0 && (cfa < limit || cfa > base) {
                return false; // left the task's stack: the worker's frames follow
            }
            if len == MAX_FRAMES {
                return false;
            }
            ips[len] = frame.ip() as usize;
            cfas[len] = cfa;
            len += 1;
            true
        });
    }
    capture.len = len;
    if cfg!(target_arch = "x86_64") && capture.layouts.len() < MAX_LAYOUTS {
        // libgcc reports each frame's ip as the return address found just below the CFA it
        // reports with it (the callee's). Only the words above this frame are checked: the
        // frames below are this capture's own code, the same for every task.
        let mut checks = Vec::new();
        let mut consistent = true;
        for k in 0..len {
            let slot = cfas[k].wrapping_sub(8);
            if cfas[k] == 0 || slot < sp || slot >= base {
                continue;
            }
            // SAFETY: `slot` lies between this frame's stack pointer and the stack's top,
            // in live frames of this task (the unwinder just walked them).
            let word = unsafe { (slot as *const usize).read() };
            if word != ips[k] {
                consistent = false;
                break;
            }
            checks.push((root.wrapping_sub(slot), word));
        }
        if consistent && !checks.is_empty() {
            capture.layouts.push(Layout {
                depth,
                checks: checks.into(),
                ips: capture.ips[..len].into(),
            });
        }
    }
}

/// One task as its worker saw it.
#[derive(Clone)]
pub(crate) struct RawTask {
    pub(crate) id: u64,
    pub(crate) name: Option<Arc<str>>,
    pub(crate) parked: bool,
    pub(crate) reason: Option<ParkReason>,
    pub(crate) since: Option<Instant>,
    pub(crate) spawn_site: &'static Location<'static>,
    pub(crate) in_use: usize,
    /// Index into the worker's `stacks`; `None` when the task had no room (invariant 2).
    pub(crate) stack: Option<u32>,
}

/// A worker's answer.
pub(crate) struct WorkerDump {
    /// Never-started tasks in its queues (they have no stack yet).
    pub(crate) unstarted: usize,
    pub(crate) tasks: Vec<RawTask>,
    /// Distinct raw stacks, innermost frame first (invariant 3).
    pub(crate) stacks: Vec<Box<[usize]>>,
    /// When the worker captured them.
    pub(crate) taken_at: Instant,
}

/// Builds a worker's answer, interning stacks as they come.
pub(crate) struct WorkerDumpBuilder {
    dump: WorkerDump,
    interned: HashMap<Box<[usize]>, u32>,
}

impl WorkerDumpBuilder {
    pub(crate) fn new(unstarted: usize) -> WorkerDumpBuilder {
        WorkerDumpBuilder {
            dump: WorkerDump {
                unstarted,
                tasks: Vec::new(),
                stacks: Vec::new(),
                taken_at: Instant::now(),
            },
            interned: HashMap::new(),
        }
    }

    /// Adds a task the worker just captured; `parked` is its park-state snapshot.
    pub(crate) fn push(&mut self, task: &dyn TaskView, parked: bool, capture: &Capture) {
        let stack = if capture.no_room {
            None
        } else {
            let ips = &capture.ips[..capture.len];
            Some(match self.interned.get(ips) {
                Some(&index) => index,
                None => {
                    let index = self.dump.stacks.len() as u32;
                    let ips: Box<[usize]> = ips.into();
                    self.dump.stacks.push(ips.clone());
                    self.interned.insert(ips, index);
                    index
                }
            })
        };
        self.dump.tasks.push(RawTask {
            id: task.id(),
            name: task.name().cloned(),
            parked,
            reason: capture.reason,
            since: capture.since,
            spawn_site: task.spawn_site(),
            in_use: capture.in_use,
            stack,
        });
    }

    pub(crate) fn finish(self) -> WorkerDump {
        self.dump
    }
}

/// A runtime, as a dump asks it (sched/dump.rs implements it for the runtime's shared state):
/// the seam names no type of the scheduler's.
pub(crate) trait DumpTarget: Send + Sync {
    /// Its workers, numbered from 0.
    fn workers(&self) -> usize;
    /// Never-started tasks in its injector (they have no stack yet).
    fn injected(&self) -> usize;
    /// Queues `request` on worker `worker`, which answers it between two of its tasks.
    fn request_dump(&self, worker: usize, request: Box<dyn DumpRequest>);
    /// What worker `worker` is running, as its monitor fields say (a moment stale): for a
    /// worker that did not answer.
    fn running_task(&self, worker: usize) -> Option<RunningTask>;
    /// Its live (started, unfinished) tasks.
    fn live_tasks(&self, worker: usize) -> usize;
}

/// A task a worker is running, as its monitor fields say.
pub(crate) struct RunningTask {
    pub(crate) id: u64,
    pub(crate) name: Option<Arc<str>>,
    pub(crate) site: &'static Location<'static>,
}

/// A dump request queued on one worker (`Remote::request_dump`): made by `debug`, answered by
/// the worker between two of its tasks (sched/dump.rs, "Capturing a parked task").
pub(crate) trait DumpRequest: Send {
    /// The worker took the request: it is not stuck in a task. Must not block.
    fn started(&self);
    /// The worker's tasks: one capture answers every request the worker took at once. Must
    /// not block.
    fn answer(self: Box<Self>, dump: Arc<WorkerDump>);
}

/// The worker, on taking `requests`: tells each requester it is answering.
pub(crate) fn answer_started(requests: &[Box<dyn DumpRequest>]) {
    for request in requests {
        request.started();
    }
}

/// The worker, done: sends its tasks to every requester.
pub(crate) fn answer(requests: Vec<Box<dyn DumpRequest>>, dump: WorkerDump) {
    let dump = Arc::new(dump);
    for request in requests {
        request.answer(dump.clone());
    }
}
