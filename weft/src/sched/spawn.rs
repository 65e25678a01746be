//! Where a spawned task goes: the spawner of the calling code (its worker's deque, or a
//! runtime's injector), what the spawn takes (a stack size from the site's profile, a slot
//! where guards cost mappings), the placement of a new task on a less loaded worker, and the
//! runtime a plain thread entered (`Handle::enter`).
//!
//! Owns: the thread-local `ENTERED` (the runtimes a plain thread entered, oldest first).
//!
//! Invariants:
//! 1. A spawn aimed at a runtime goes to that runtime, from any thread or task; an unaimed one
//!    goes to the running task's runtime, else to the one the thread entered, else panics.
//! 2. A spawn during shutdown is cancelled at once, in the spawner's context: the task never
//!    started, so it can be dropped anywhere (sched/mod.rs invariant 1).
//! 3. `ENTERED` changes only on a plain thread: in a task, `weft::spawn` always spawns onto the
//!    task's own runtime (tasks share their worker's thread).
//!
//! May call: task/ (`Header::new`, the cell), the worker's deque and `Remote::place`, the
//! injector, `stack` (slots), the seam's trace events. Called by: `task` (`Builder::spawn`,
//! `weft::spawn`), runtime.rs (`Handle::spawn`, `Handle::enter`).
//!
//! Why a spawn stays on its worker's own deque unless another worker holds far fewer tasks:
//! short-lived tasks stay local and cheap, and a started task never moves, so lasting load
//! is balanced where tasks start (`less_loaded_worker`); why another worker is woken once
//! per burst, not per spawn: idle.rs, "Spawns".

use std::cell::RefCell;
use std::io;
use std::panic::Location;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::counters;
use super::queue::BALANCE_SLACK;
use super::runtime::{Handle, Remote};
use super::task::join::JoinHandle;
use super::task::{cell, Header, RunState, Task};
use super::worker::{current_header, current_worker, Worker};
use crate::observe::trace;
use crate::stack::{self, SizeClass, Slot};

thread_local! {
    /// The runtimes this plain thread entered with `Handle::enter`, oldest first; the last
    /// is the one it spawns onto.
    static ENTERED: RefCell<Vec<Handle>> = const { RefCell::new(Vec::new()) };
}

/// What `enter` recorded, for `exit`: the guard's place in the thread's stack of entered
/// runtimes.
pub(crate) struct EnterToken {
    depth: usize,
}

/// Makes `handle` the runtime a plain thread spawns onto (`Handle::enter`); `None` in a task,
/// where `weft::spawn` always spawns onto the task's own runtime and entering changes
/// nothing: tasks share their worker's thread, so a thread-local "entered" runtime set by one
/// task would leak to the others.
pub(crate) fn enter(handle: Handle) -> Option<EnterToken> {
    if current_header().is_some() {
        return None;
    }
    let depth = ENTERED.with(|entered| {
        let mut entered = entered.borrow_mut();
        entered.push(handle);
        entered.len()
    });
    Some(EnterToken { depth })
}

/// Undoes `enter`: the thread is left in the runtime it was in before that guard's `enter`.
///
/// # Panics
/// When a guard is dropped while guards entered after it are live (unless already
/// panicking); those are undone too, so the thread is never left in the wrong runtime, and
/// their own drops later do nothing.
pub(crate) fn exit(token: EnterToken) {
    let in_order = ENTERED.with(|entered| {
        let mut entered = entered.borrow_mut();
        // Shorter: an older guard dropped out of order undid this one already (and panicked).
        let in_order = entered.len() <= token.depth;
        entered.truncate(token.depth - 1);
        in_order
    });
    if !in_order && !std::thread::panicking() {
        panic!(
            "weft: EnterGuard values dropped out of order: guards from Handle::enter must be \
             dropped in the reverse order of their creation"
        );
    }
}

/// Where a spawn goes: the current worker's deque, or an entered runtime's injector.
pub(crate) enum Spawner<'a> {
    Worker(&'a Worker),
    Handle(&'a Handle),
}

impl Spawner<'_> {
    /// Whether the runtime is in the grace period of `Runtime::shutdown_timeout`, when new
    /// spawns are refused. (After it, during the cancellation, a spawn is cancelled at once
    /// instead, so a destructor that spawns does not fail.)
    pub(crate) fn refuses_spawns(&self) -> bool {
        let shared = match self {
            Spawner::Worker(w) => &w.shared,
            Spawner::Handle(h) => &h.shared,
        };
        shared.closing.load(Ordering::Relaxed) && !shared.shutdown.load(Ordering::Relaxed)
    }

    /// The stack size of a task spawned at `site` without one of its own: the runtime's
    /// stack profile's for that site if it has one (`RuntimeBuilder::stack_profile`), else
    /// the runtime's default.
    #[inline]
    pub(crate) fn class_for(&self, site: &'static Location<'static>) -> SizeClass {
        let shared = match self {
            Spawner::Worker(w) => &w.shared,
            Spawner::Handle(h) => &h.shared,
        };
        match &shared.site_classes {
            Some(sites) => sites.class_for(site).unwrap_or(shared.default_class),
            None => shared.default_class,
        }
    }

    /// The slot a new task of `class` takes at spawn: none where guards are page-table
    /// markers, for then the worker that starts the task takes one from its own warm slots
    /// (`Worker::start`). A burst of short tasks then cycles through a few warm stacks on
    /// the workers that run them; taken here, every task queued at once held its own slot,
    /// and a burst of 100K spawns touched tens of thousands of fresh or trimmed stacks (0.28
    /// page faults per spawn in the spawn benchmark). Where guards are `mprotect`ed pages
    /// each slot costs kernel mappings, and the spawn takes it, so that running out of
    /// them is the spawn's error (README, "Supported targets").
    pub(crate) fn take_slot(&self, class: SizeClass) -> std::io::Result<Option<Slot>> {
        if stack::guards_are_markers() == Some(true) {
            return Ok(None);
        }
        match self {
            Spawner::Worker(w) => w.slots.borrow_mut().take(class).map(Some),
            Spawner::Handle(_) => Slot::take(class).map(Some),
        }
    }

    pub(crate) fn submit(&self, task: Task) {
        match self {
            Spawner::Worker(w) => {
                if w.tracing.get() {
                    trace::spawned(task.header());
                }
                w.remote.counters.spawned();
                if w.shared.shutdown.load(Ordering::Relaxed) {
                    // A spawn during shutdown (a cancelled task's destructor) is cancelled
                    // at once, in the spawner's context: workers are stopping, and one that
                    // already left its loop would never run or cancel it.
                    cancel_unstarted(&task);
                    return;
                }
                if let Some(other) = w.less_loaded_worker() {
                    // sched/mod.rs invariant 1 holds: the task has not started. A worker
                    // that closed meanwhile (shutdown) hands it back: cancel it.
                    if let Err(task) = other.place(task) {
                        cancel_unstarted(&task);
                    }
                    return;
                }
                w.new_tasks.push(task);
                // Wake-ups for a burst: the first spawn of a resume, and every
                // WAKE_CHECK_EVERY-th after it, look for an idle worker to wake; the others
                // skip the fence and the look (a fence per spawn was 5 % of a spawn's time).
                // Nothing is stranded by the skip: this worker is awake and looks at its own
                // deque before it sleeps (sched/idle.rs, "Spawns"); at most the next
                // WAKE_CHECK_EVERY − 1 tasks wait for a thief that a later spawn, the
                // thieves' own spinning or the monitor brings.
                let spawns = w.spawns_this_resume.get();
                w.spawns_this_resume.set(spawns.wrapping_add(1));
                if spawns % WAKE_CHECK_EVERY == 0 {
                    w.shared.wake_idle_worker(Some(w.index));
                }
            }
            Spawner::Handle(h) => {
                if trace::on() {
                    trace::spawned(task.header());
                }
                counters::OFF_WORKER.spawned();
                h.submit(task);
            }
        }
    }
}

/// Within one resume of a task, one spawn in this many looks for an idle worker to wake
/// (`Spawner::submit`).
const WAKE_CHECK_EVERY: u32 = 16;

/// Calls `f` with the spawner of `target`, or of the current runtime when `target` is `None`:
/// the running task's runtime, else the one this plain thread entered.
///
/// A spawn aimed at a runtime (`Runtime::spawn`, `Handle::spawn`, `block_on`) goes to that
/// runtime even from a task of another one: to its injector, with its stack size.
///
/// # Panics
/// Outside a runtime, when `target` is `None`.
pub(crate) fn with_spawner<R>(
    site: &'static Location<'static>,
    target: Option<&Handle>,
    f: impl FnOnce(&Spawner<'_>) -> R,
) -> R {
    if let Some(worker) = current_worker() {
        if target.is_none_or(|h| Arc::ptr_eq(&h.shared, &worker.shared)) {
            return f(&Spawner::Worker(worker));
        }
    }
    if let Some(handle) = target {
        return f(&Spawner::Handle(handle));
    }
    let handle = ENTERED.with(|entered| entered.borrow().last().cloned());
    match handle {
        Some(handle) => f(&Spawner::Handle(&handle)),
        None => panic!(
            "weft: spawn called outside a weft runtime at {site}: call it from a task, from \
             Runtime::block_on or Runtime::spawn, or on a thread that holds Handle::enter"
        ),
    }
}

/// Drops the closure of a task that never started and tells its joiner; a no-op for a task
/// that did start. The caller holds `task` exclusively: it popped it from a queue.
pub(crate) fn cancel_unstarted(task: &Task) {
    // SAFETY: sched/task/mod.rs invariant 1: a never-started task is in one queue at a time, and the
    // caller took it out.
    let state = unsafe { task.header().run_state() };
    if let RunState::New { .. } = state {
        *state = RunState::Done;
        counters::OFF_WORKER.cancelled_unstarted();
        task.drop_unstarted();
    }
}

impl Worker {
    /// Another worker with [`BALANCE_SLACK`] fewer live tasks than this one, if the one this
    /// spawn looks at (a different one each time) is such.
    ///
    /// Why: a started task never changes worker, so a worker that starts most of a server's
    /// long-lived connections keeps their load for good while another idles (measured on the
    /// echo server: 64 against 18 CPU ticks). Stealing only balances momentary load; placing
    /// new tasks by the number already living on each worker balances the lasting kind. Go
    /// needs no such rule because its scheduler moves goroutines at any time.
    fn less_loaded_worker(&self) -> Option<&Arc<Remote>> {
        let mine = self.remote.live.load(Ordering::Relaxed);
        if mine < BALANCE_SLACK {
            return None;
        }
        let other = self.another_worker()?;
        (other.live.load(Ordering::Relaxed) + BALANCE_SLACK < mine).then_some(other)
    }
}

/// Spawns `f` as a new task named `name`, with a stack of `stack_size` bytes (else its site's
/// or its runtime's size), onto the runtime behind `target`, or else the current one
/// ([`with_spawner`]): the work of `task::Builder::spawn`, `weft::spawn` and
/// `Handle::spawn`.
///
/// # Errors
/// As `task::Builder::spawn`.
#[inline]
pub(crate) fn spawn<F, T>(
    target: Option<&Handle>,
    name: Option<String>,
    stack_size: Option<usize>,
    spawn_site: &'static Location<'static>,
    f: F,
) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    // A spawn completes without parking: a loop of spawns spends the cooperative budget
    // like a loop of sends (sched/coop.rs), so it lets its worker's other tasks run.
    super::coop::spend();
    with_spawner(spawn_site, target, |spawner| {
        if spawner.refuses_spawns() {
            return Err(io::Error::other(
                "weft: spawn refused: the runtime is shutting down (Runtime::shutdown_timeout)",
            ));
        }
        let class = match stack_size {
            Some(bytes) => SizeClass::for_size(bytes)?,
            None => spawner.class_for(spawn_site),
        };
        let slot = spawner.take_slot(class)?;
        let name = name.map(Arc::from);
        let header = cell::allocate(
            |vtable| Header::new(vtable, name, spawn_site, class, slot),
            f,
        );
        // SAFETY: `allocate` made the cell with two references (`Header::new`): one for the
        // queue, one for the join handle, each taken once here.
        let (queued, joiner) = unsafe { (Task::adopt(header), Task::adopt(header)) };
        spawner.submit(queued);
        // SAFETY: `joiner` is the handle's reference to a cell `allocate` made for `f`, whose
        // result type is `T`.
        Ok(unsafe { JoinHandle::new(joiner) })
    })
}
