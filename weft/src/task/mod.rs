//! Tasks: the header every task shares with its wakers, the public [`Task`] handle, spawning
//! ([`Builder`]) and joining ([`JoinHandle`]).
//!
//! Owns: `Header`. Which thread may touch which field:
//!
//! | field        | who                                                                  |
//! |--------------|----------------------------------------------------------------------|
//! | `id`, `name`, `spawn_site`, `class`, `vtable` | anyone (immutable)                     |
//! | `refs`       | anyone holding a reference ([`Task`], [`JoinHandle`], a parked task's park state) |
//! | `park`       | anyone, through the protocol in `park/state.rs`                      |
//! | `home`       | written once by the first worker to run the task, before the task runs; read by wakers only after they saw the task PARKED (invariant 2) |
//! | `run`        | the task's worker only (invariant 1)                                  |
//! | `interrupt`  | anyone sets bits (`Task::cancel`, a cancelled `Context`, shutdown); the task reads them at its parks and clears `SCOPE` |
//! | `yielder`, `unwinding`, `locals`, `stack`, `capture` | the task's worker and the task itself, on that worker's thread |
//!
//! Invariants:
//! 1. A task that has started runs on one OS thread for its whole life: its coroutine is
//!    created by the worker that first runs it, is resumed only by that worker, and is dropped
//!    only by it. Only `RunState::New` tasks — a `Send` closure and at most a slot of memory —
//!    are ever moved between threads (stolen). This is what makes thread-locals and `!Send`
//!    values on a task's stack sound (rust-lang/rust#136044: the compiler may keep a
//!    thread-local's address across a switch).
//! 2. `home` is set before the task first runs, and a task can only be PARKED after it ran;
//!    `ParkState::publish_parked` (Release) and `ParkState::unpark` (Acquire) order the write
//!    of `home` before any waker's read.
//! 3. While a task is `RunState::Started`, its worker's live list holds a reference to it,
//!    so the last reference to a header is never dropped while it still owns a coroutine
//!    (which would drop the coroutine on another thread).
//! 4. While a task is PARKED (park/state.rs), its park state owns one reference: the worker
//!    gives up its queue reference when `publish_parked` succeeds (`Task::into_parked`), and
//!    the one unpark that sees PARKED takes it back to queue the task (`Task::from_parked`).
//!    So a park and its wake touch no reference count.
//! 5. `refs` counts the references to the cell ([`Task`]s, the [`JoinHandle`], the parked
//!    reference of invariant 4); the drop that takes it to zero frees the cell (task/cell.rs),
//!    with `Arc`'s orderings.
//!
//! May call: `stack`, `park`, `sched` (to submit a spawned task). Called by: everything above.

mod alloc;
mod cell;
mod join;
pub(crate) mod local;

pub(crate) use alloc::trim_idle as trim_cells_idle;
pub use join::{JoinFuture, JoinHandle};
pub use local::LocalKey;

use std::cell::{Cell, UnsafeCell};
use std::fmt;
use std::io;
use std::num::NonZeroU64;
use std::panic::Location;
use std::ptr::NonNull;
use std::sync::atomic::{self, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use corosensei::{Coroutine, Yielder};

use crate::park::state::{ParkState, Unpark};
use crate::park::Waiter;
use crate::sched::{self, Remote};
use crate::stack::{self, SizeClass, Slot};

/// Why a task was cancelled: the payload a cancelled task unwinds with, and the error payload
/// its [`JoinHandle::join`] returns.
///
/// `join` returns `std::thread::Result<T>`, so a cancelled task and a panicked one both come
/// back as `Err(payload)`; tell them apart by downcasting (or with [`is_cancelled`]):
///
/// ```
/// weft::run(|| {
///     let h = weft::spawn(|| weft::time::sleep(std::time::Duration::from_secs(60)));
///     h.cancel();
///     let payload = h.join().unwrap_err();
///     let why = payload.downcast_ref::<weft::task::Cancelled>().expect("cancelled, not a panic");
///     assert!(!why.by_shutdown());
///     assert!(weft::task::is_cancelled(&*payload));
/// });
/// ```
///
/// Code that catches unwinds (`catch_unwind`) may see this payload go by when its task is
/// cancelled: it must resume the unwind (`std::panic::resume_unwind`), or the task goes on
/// after its cancellation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cancelled {
    reason: CancelReason,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CancelReason {
    /// `Task::cancel` / `JoinHandle::cancel`.
    Requested,
    /// The runtime shut down (runtime.rs steps 2–3).
    Shutdown,
    /// Parked again while being cancelled at shutdown and never woken (worker.rs step 4).
    Leaked,
}

impl Cancelled {
    pub(crate) const REQUESTED: Cancelled = Cancelled {
        reason: CancelReason::Requested,
    };
    pub(crate) const SHUTDOWN: Cancelled = Cancelled {
        reason: CancelReason::Shutdown,
    };
    pub(crate) const LEAKED: Cancelled = Cancelled {
        reason: CancelReason::Leaked,
    };

    /// True if the task was cancelled by its runtime's shutdown rather than by
    /// [`Task::cancel`] or [`JoinHandle::cancel`].
    pub fn by_shutdown(&self) -> bool {
        self.reason != CancelReason::Requested
    }

    /// True if the task's stack was leaked at shutdown: it parked again while being
    /// cancelled and was never woken, so it never finished unwinding.
    pub fn leaked(&self) -> bool {
        self.reason == CancelReason::Leaked
    }
}

impl fmt::Display for Cancelled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.reason {
            CancelReason::Requested => "weft: task cancelled",
            CancelReason::Shutdown => "weft: task cancelled: its runtime shut down",
            CancelReason::Leaked => {
                "weft: task leaked: it parked while being cancelled at shutdown and was never \
                 woken"
            }
        })
    }
}

impl std::error::Error for Cancelled {}

/// True if `payload` — a join error, or an unwind caught with `catch_unwind` — says the task
/// was cancelled ([`Cancelled`], or a cancelled [`Context`](crate::context::Context) bound
/// with `bind`), not that it panicked.
pub fn is_cancelled(payload: &(dyn std::any::Any + Send)) -> bool {
    payload.is::<Cancelled>() || crate::context::is_scope_unwind(payload)
}

/// `Header::interrupt` bits. Set by anyone with a Release `fetch_or` before an unpark; read by
/// the task at its parks (sched/worker.rs `unwind_if_cancelled`).
pub(crate) mod interrupt {
    /// The runtime shuts down: unwind at the next park (runtime.rs step 3).
    pub(crate) const SHUTDOWN: u8 = 1;
    /// `Task::cancel`: unwind at the next park.
    pub(crate) const CANCEL: u8 = 2;
    /// A `Context` the task is bound to may have been cancelled: look at its scopes
    /// (context.rs). Cleared by the task when none is.
    pub(crate) const SCOPE: u8 = 4;
}

/// Why a task switched back to its worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Suspend {
    /// `yield_now`: run it again after the others.
    Yield,
    /// `park`: it waits for an `unpark`, for this reason. The reason is a constant of the
    /// park site, so carrying it costs the switch nothing; a trace shows it as how the run
    /// ended (debug/trace/mod.rs invariant 1).
    Park(crate::park::ParkReason),
}

/// The coroutine a started task runs in: resumed with `()`, suspends with a [`Suspend`], and
/// returns the joiner to wake once it has fully finished.
pub(crate) type TaskCoroutine = Coroutine<(), Suspend, Option<Waiter>, Slot>;

/// Where a task is in its life (invariant 1).
pub(crate) enum RunState {
    /// Spawned, never run: may still be stolen by any worker. Its closure is in its cell.
    /// Its slot is taken by the worker that starts it, from that worker's own warm slots
    /// (`slot: None`), except where a guard costs kernel mappings: there the spawn takes it,
    /// so that running out of mappings is the spawn's error (`Spawner::take_slot`).
    New { slot: Option<Slot> },
    /// Running or suspended on its home worker; `live` is its index in that worker's live list.
    Started {
        coroutine: TaskCoroutine,
        live: usize,
    },
    /// Returned or cancelled; its slot went back to a pool.
    Done,
}

/// The part of a task shared by its worker, its wakers and its handles.
pub(crate) struct Header {
    /// References to the cell (invariant 5).
    refs: AtomicUsize,
    /// The typed operations of the cell this header heads (`cell::vtable`).
    vtable: &'static cell::CellVtable,
    pub(crate) id: TaskId,
    pub(crate) park: ParkState,
    pub(crate) name: Option<Arc<str>>,
    pub(crate) spawn_site: &'static Location<'static>,
    pub(crate) class: SizeClass,
    home: UnsafeCell<Option<Arc<Remote>>>,
    run: UnsafeCell<RunState>,
    pub(crate) yielder: Cell<*const Yielder<(), Suspend>>,
    /// Cancellation requests ([`interrupt`] bits): why the task must unwind at its next park.
    pub(crate) interrupt: AtomicU8,
    /// The task's task-locals and bound contexts (task/local.rs), allocated at first use;
    /// null until then. Never dropped with the header: the task drops it when it ends.
    pub(crate) locals: Cell<*mut local::TaskLocals>,
    /// Set by the task's worker around a resume that asks the task to record where it waits
    /// instead of running (sched/worker.rs, "Capturing a parked task").
    pub(crate) capture: Cell<Option<NonNull<crate::debug::Capture>>>,
    /// The task was unwinding when it last parked (sched/worker.rs, "Parking while
    /// panicking").
    pub(crate) unwinding: Cell<bool>,
    /// Its stack pointer and reclaim/compaction state while parked (stack/compact.rs).
    pub(crate) stack: stack::ParkedStack,
}

// SAFETY: the fields that are not Sync on their own are confined as the table in the module
// doc says: `run`, `yielder`, `unwinding`, `locals` and `capture` are touched only on the task's home worker thread
// (invariant 1), or, for `run` in state New, by whichever single worker popped the task from a
// queue; `home` is written once before it can be read elsewhere (invariant 2).
unsafe impl Sync for Header {}
// SAFETY: a Header moves between threads behind its task's references. Its `RunState::New` content
// is a slot of memory; a `Started` coroutine, which is not `Send`, is only ever dropped on its
// home thread (invariant 3). `locals` (which may hold `!Send` values) is made by the task on its
// home thread and dropped there when the task ends (task/local.rs invariant 3), or leaked with
// a leaked stack; it is never dropped with the header.
unsafe impl Send for Header {}

impl Header {
    /// The task's run state.
    ///
    /// # Safety
    /// Only the worker running or about to run this task may call this (invariant 1), and the
    /// reference must not outlive that use or overlap another one.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn run_state(&self) -> &mut RunState {
        // SAFETY: exclusive access is the caller's contract.
        unsafe { &mut *self.run.get() }
    }

    /// Records the worker the task will live on.
    ///
    /// # Safety
    /// Only the worker starting this task may call it, once, before the task first runs.
    pub(crate) unsafe fn set_home(&self, remote: Arc<Remote>) {
        // SAFETY: invariant 2: no one reads `home` before the task has run and parked.
        unsafe { *self.home.get() = Some(remote) };
    }

    /// The worker the task lives on; `None` before it started.
    pub(crate) fn home(&self) -> Option<&Arc<Remote>> {
        // SAFETY: invariant 2: callers (wakers) reach here only after seeing the task PARKED,
        // which happens-after `set_home`.
        unsafe { (*self.home.get()).as_ref() }
    }
}

impl stack::DescribeTask for Header {
    fn describe(&self, out: &mut dyn fmt::Write) -> fmt::Result {
        write!(out, "task {}", self.id.0)?;
        if let Some(name) = &self.name {
            write!(out, " \"{name}\"")?;
        }
        write!(
            out,
            " (spawned at {}:{}:{}",
            self.spawn_site.file(),
            self.spawn_site.line(),
            self.spawn_site.column()
        )
    }
}

/// A task's unique identifier, like `std::thread::ThreadId`; never reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId(NonZeroU64);

impl TaskId {
    /// The identifier as a number (task ids start at 1).
    pub fn as_u64(self) -> u64 {
        self.0.get()
    }

    fn next() -> TaskId {
        use std::sync::atomic::{AtomicU64, Ordering};
        /// Ids are handed to threads in blocks so spawning does not contend on one counter.
        const BLOCK: u64 = 1024;
        static NEXT_BLOCK: AtomicU64 = AtomicU64::new(1);
        thread_local! {
            static RANGE: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
        }
        RANGE.with(|range| {
            let (mut next, mut end) = range.get();
            if next == end {
                next = NEXT_BLOCK.fetch_add(BLOCK, Ordering::Relaxed);
                end = next + BLOCK;
            }
            range.set((next + 1, end));
            TaskId(NonZeroU64::new(next).expect("task ids start at 1"))
        })
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A handle to a task, like `std::thread::Thread`: its identity, and `unpark`.
pub struct Task {
    /// One counted reference to the task's cell (invariant 5).
    header: NonNull<Header>,
}

// SAFETY: a `Task` is a counted reference to a `Header`, which is `Send + Sync`; the count is
// atomic.
unsafe impl Send for Task {}
// SAFETY: as above.
unsafe impl Sync for Task {}

impl Task {
    /// The task's header.
    #[inline]
    pub(crate) fn header(&self) -> &Header {
        // SAFETY: this handle's reference keeps the cell alive (invariant 5).
        unsafe { self.header.as_ref() }
    }

    /// Runs the task's closure (task/cell.rs invariant 1).
    pub(crate) fn run(&self) -> Option<Waiter> {
        // SAFETY: the vtable is the one of the cell this header heads; the caller is the
        // worker starting the task (cell.rs invariant 1).
        unsafe { (self.header().vtable.run)(self.header) }
    }

    /// Drops the closure of a task that never started (shutdown) and tells its joiner.
    pub(crate) fn drop_unstarted(&self) {
        self.drop_unstarted_with(Box::new(Cancelled::SHUTDOWN));
    }

    /// Drops the closure of a task that never started and tells its joiner: `join` returns
    /// `why` as the error payload (a [`Cancelled`], or why the task could get no stack).
    pub(crate) fn drop_unstarted_with(&self, why: Box<dyn std::any::Any + Send>) {
        // SAFETY: as in `run`; the caller popped the never-started task from a queue.
        unsafe { (self.header().vtable.cancel)(self.header, why) }
    }

    /// Tells the joiner of a started task leaked at shutdown that it will never finish.
    pub(crate) fn abandon(&self) {
        // SAFETY: as in `run`; the caller is the task's worker and forgot its coroutine.
        unsafe { (self.header().vtable.abandon)(self.header) }
    }

    /// The raw header pointer, for a worker's "current task" (it keeps the task alive
    /// meanwhile) and for waiters that hold it while the task is blocked.
    #[inline]
    pub(crate) fn as_ptr(&self) -> NonNull<Header> {
        self.header
    }

    /// A new handle from a raw header pointer.
    ///
    /// # Safety
    /// `ptr` must come from [`Task::as_ptr`] of a task that is still alive.
    pub(crate) unsafe fn clone_from_ptr(ptr: NonNull<Header>) -> Task {
        // SAFETY: the caller's contract; cloning the borrowed handle takes the new reference.
        let borrowed = unsafe { Task::borrow_ptr(ptr) };
        Task::clone(&borrowed)
    }

    /// A handle to the task behind `ptr` that owns no reference, so it is never dropped.
    ///
    /// # Safety
    /// `ptr` must come from [`Task::as_ptr`] of a task that stays alive while the handle is
    /// used.
    pub(crate) unsafe fn borrow_ptr(ptr: NonNull<Header>) -> std::mem::ManuallyDrop<Task> {
        std::mem::ManuallyDrop::new(Task { header: ptr })
    }

    /// The task's unique id.
    pub fn id(&self) -> TaskId {
        self.header().id
    }

    /// The name given with [`Builder::name`], if any.
    pub fn name(&self) -> Option<&str> {
        self.header().name.as_deref()
    }

    /// Where the task was spawned.
    pub fn spawn_site(&self) -> &'static Location<'static> {
        self.header().spawn_site
    }

    /// The size of the task's stack slot in bytes, guard page included.
    pub fn stack_size(&self) -> usize {
        self.header().class.bytes()
    }

    /// Makes the task's next (or current) [`park`] return, like `std::thread::Thread::unpark`.
    /// The task is scheduled on the worker it lives on. Callable from any thread.
    pub fn unpark(&self) {
        // SAFETY: this handle keeps the task alive.
        unsafe { unpark_ptr(self.as_ptr()) }
    }

    /// Cancels the task, from any thread: a parked task is woken and unwinds at its park
    /// (its destructors run); a running one unwinds at its next park or yield; one that
    /// never started never runs (its closure is dropped). Its [`JoinHandle::join`] then
    /// returns `Err` with a [`Cancelled`] payload. A task that already finished is not
    /// affected; cancelling twice is the same as once.
    ///
    /// A task computing without parking is cancelled only when it next parks or yields:
    /// call [`yield_now`] in long loops. A task that is unwinding from a panic finishes that
    /// unwind first.
    ///
    /// Cancel safety (chan/mod.rs "Cancel safety", park/mod.rs invariant 3): a wait that
    /// completed before the cancel took effect — a value handed to a receiver, a send a
    /// receiver took, a lock or permits granted, a joined task's result — returns its result,
    /// and the task unwinds at its next wait; a wait that did not complete unwinds with
    /// nothing taken from anyone. Inside an interposed libc call (feature `interpose`) the
    /// call fails with `ECANCELED` instead, and so does every later interposed call of the
    /// task that may wait, until the task parks in weft and unwinds.
    pub fn cancel(&self) {
        self.interrupt(interrupt::CANCEL);
    }

    /// Sets `bits` in the task's interrupt word and wakes it to look at them.
    pub(crate) fn interrupt(&self, bits: u8) {
        // Release: pairs with the task's Acquire load in `unwind_if_cancelled`'s slow path,
        // so what the canceller did before (a context's state) is visible to the task.
        self.header().interrupt.fetch_or(bits, Ordering::Release);
        self.unpark();
    }

    /// The worker, after `publish_parked` succeeded: hands this queue reference to the park
    /// state (invariant 4).
    pub(crate) fn into_parked(self) {
        std::mem::forget(self);
    }

    /// Takes back the reference a PARKED task's park state owns (invariant 4).
    ///
    /// # Safety
    /// Only the unpark that saw PARKED (`ParkState::unpark` returned true) may call this, once,
    /// with a pointer to that task.
    #[inline]
    pub(crate) unsafe fn from_parked(ptr: NonNull<Header>) -> Task {
        // The reference was forgotten by `into_parked`: the caller's contract.
        Task { header: ptr }
    }

    pub(crate) fn ptr_eq(&self, other: &Task) -> bool {
        self.header == other.header
    }
}

/// Delivers an unpark to the task behind `ptr`: schedules it if it was parked, or wakes its
/// OS thread if it blocks it (park/state.rs invariants 3 and 4).
///
/// # Safety
/// `ptr` must point at the header of a task that stays alive for the call.
#[inline]
pub(crate) unsafe fn unpark_ptr(ptr: NonNull<Header>) {
    // SAFETY: the caller's contract.
    let header = unsafe { ptr.as_ref() };
    match header.park.unpark() {
        Unpark::Nothing => {}
        // SAFETY: this unpark saw PARKED, so it owns the parked reference (invariant 4).
        Unpark::Schedule => sched::schedule_woken(unsafe { Task::from_parked(ptr) }),
        Unpark::WakeThread => sched::wake_blocked(header),
    }
}

impl Clone for Task {
    fn clone(&self) -> Task {
        // Relaxed, as `Arc::clone`: a new reference is made from an existing one, which keeps
        // the cell alive meanwhile.
        let old = self.header().refs.fetch_add(1, Ordering::Relaxed);
        if old > isize::MAX as usize {
            std::process::abort(); // 2^63 leaked handles: abort, as `Arc` does
        }
        Task {
            header: self.header,
        }
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        // Release, then Acquire on the last drop, as `Arc`: every use of the cell through any
        // reference happens before it is freed.
        if self.header().refs.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        atomic::fence(Ordering::Acquire);
        // SAFETY: the last reference is gone (invariant 5, cell.rs invariant 3).
        unsafe { (self.header().vtable.free)(self.header) };
    }
}

impl fmt::Debug for Task {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Task")
            .field("id", &self.id())
            .field("name", &self.name())
            .field("spawn_site", &self.spawn_site())
            .finish()
    }
}

/// The task this code runs in.
///
/// # Panics
/// Outside a task (on a plain OS thread, or a worker between tasks): use [`try_current`].
pub fn current() -> Task {
    try_current().expect("weft::task::current() called outside a weft task")
}

/// The task this code runs in, or `None` on a plain OS thread.
pub fn try_current() -> Option<Task> {
    sched::current_task()
}

/// Blocks the current task until its [`Task::unpark`] is called, like `std::thread::park`.
///
/// Only the task parks: its worker runs other tasks meanwhile. As with std, a wakeup may be
/// spurious: call it in a loop that checks a condition. On a plain OS thread this is
/// `std::thread::park`.
pub fn park() {
    crate::park::park_current(crate::park::ParkReason::Park);
}

/// Like [`park`], but returns after `timeout` at the latest, like
/// `std::thread::park_timeout`.
pub fn park_timeout(timeout: std::time::Duration) {
    match std::time::Instant::now().checked_add(timeout) {
        Some(deadline) => {
            crate::park::park_current_until(deadline, crate::park::ParkReason::ParkTimeout)
        }
        None => crate::park::park_current(crate::park::ParkReason::ParkTimeout),
    }
}

/// Lets the worker run other ready tasks before this one continues. On a plain OS thread this
/// is `std::thread::yield_now`.
pub fn yield_now() {
    if !sched::suspend_current(Suspend::Yield) {
        std::thread::yield_now();
    }
}

/// Task factory, like `std::thread::Builder`: a name and a stack size for one spawn.
///
/// ```
/// weft::run(|| {
///     let handle = weft::task::Builder::new()
///         .name("resolver") // shown in dumps, monitor reports and shutdown reports
///         .stack_size(1 << 20) // a deep task: 1 MiB
///         .spawn(|| weft::task::current().name().map(str::to_owned))
///         .unwrap();
///     assert_eq!(handle.join().unwrap().as_deref(), Some("resolver"));
/// });
/// ```
#[derive(Debug, Default, Clone)]
pub struct Builder {
    name: Option<String>,
    stack_size: Option<usize>,
}

impl Builder {
    /// A builder with the runtime's defaults.
    pub fn new() -> Builder {
        Builder::default()
    }

    /// Names the task: shown in the stack-overflow report and by [`Task::name`].
    pub fn name(mut self, name: impl Into<String>) -> Builder {
        self.name = Some(name.into());
        self
    }

    /// The task's stack size in bytes, guard page included; rounded up to a power of two of at
    /// least 32 KiB (see `weft::stack`). Default: the runtime's, 256 KiB unless set.
    pub fn stack_size(mut self, bytes: usize) -> Builder {
        self.stack_size = Some(bytes);
        self
    }

    /// Spawns `f` as a new task on the current runtime and returns its handle.
    ///
    /// # Errors
    /// An invalid stack size; on kernels without `MADV_GUARD_INSTALL`, also when no stack can
    /// be had: exhausted address space or the `vm.max_map_count` limit (the error names it).
    /// Elsewhere the task takes its stack when it starts, from its worker's warm slots (so a
    /// burst of short tasks reuses a few stacks instead of touching fresh ones); if none can
    /// be had then, the task does not run, its `join` returns an error that says why, and
    /// the reason is printed on stderr.
    /// When the runtime is in the grace period of [`crate::Runtime::shutdown_timeout`]: new
    /// tasks are refused then (the error says so).
    ///
    /// # Panics
    /// Outside a runtime: in a task, in [`crate::Runtime::block_on`], or under
    /// [`crate::Handle::enter`].
    #[track_caller]
    pub fn spawn<F, T>(self, f: F) -> io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.spawn_at(None, Location::caller(), f)
    }

    /// Like [`Builder::spawn`], but onto the runtime behind `handle`, whatever runtime (if
    /// any) the caller runs in; the default stack size is that runtime's.
    ///
    /// # Errors
    /// As [`Builder::spawn`].
    #[track_caller]
    pub fn spawn_on<F, T>(self, handle: &crate::Handle, f: F) -> io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.spawn_at(Some(handle), Location::caller(), f)
    }

    fn spawn_at<F, T>(
        self,
        target: Option<&crate::Handle>,
        spawn_site: &'static Location<'static>,
        f: F,
    ) -> io::Result<JoinHandle<T>>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        // A spawn completes without parking: a loop of spawns spends the cooperative budget
        // like a loop of sends (sched/coop.rs), so it lets its worker's other tasks run.
        sched::coop::spend();
        sched::with_spawner(spawn_site, target, |spawner| {
            if spawner.refuses_spawns() {
                return Err(io::Error::other(
                    "weft: spawn refused: the runtime is shutting down (Runtime::shutdown_timeout)",
                ));
            }
            let class = match self.stack_size {
                Some(bytes) => SizeClass::for_size(bytes)?,
                None => spawner.class_for(spawn_site),
            };
            let slot = spawner.take_slot(class)?;
            let header = Header {
                // One for the queue, one for the join handle.
                refs: AtomicUsize::new(2),
                vtable: cell::vtable::<F, T>(),
                id: TaskId::next(),
                park: ParkState::new(),
                name: self.name.map(Arc::from),
                spawn_site,
                class,
                home: UnsafeCell::new(None),
                run: UnsafeCell::new(RunState::New { slot }),
                yielder: Cell::new(std::ptr::null()),
                interrupt: AtomicU8::new(0),
                locals: Cell::new(std::ptr::null_mut()),
                capture: Cell::new(None),
                unwinding: Cell::new(false),
                stack: stack::ParkedStack::default(),
            };
            let header = cell::allocate(header, f);
            // `allocate` made the cell with two references, one for each handle.
            spawner.submit(Task { header });
            Ok(JoinHandle::new(Task { header }))
        })
    }
}

/// Spawns `f` as a new task on the current runtime, like `std::thread::spawn`.
///
/// The closure must be `Send`: a task that has not started may be stolen by any worker. Once
/// started, it stays on its worker's thread, so it may hold `!Send` values across parks:
///
/// ```
/// let n = weft::run(|| {
///     weft::spawn(|| {
///         let shared = std::rc::Rc::new(5); // not Send, held across a yield
///         weft::yield_now();
///         *shared
///     })
///     .join()
///     .unwrap()
/// });
/// assert_eq!(n, 5);
/// ```
///
/// ```compile_fail
/// let shared = std::rc::Rc::new(5);
/// weft::run(move || weft::spawn(move || *shared).join().unwrap());
/// ```
///
/// # Panics
/// Outside a runtime (see [`Builder::spawn`]), or when no stack can be had.
#[track_caller]
pub fn spawn<F, T>(f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    match Builder::new().spawn(f) {
        Ok(handle) => handle,
        Err(e) => panic!("weft: failed to spawn task: {e}"),
    }
}

/// Runs `f` on the runtime's pool of blocking threads while the calling task parks, and
/// returns its result: the way to make a call that blocks its OS thread (`getaddrinfo`, file
/// I/O, a blocking C library) without stalling the worker. For computation use [`compute`]:
/// the blocking pool starts a thread for every call in flight, which suits calls that wait,
/// not ones that keep a core busy. A panic in `f`
/// resumes in the caller. On a plain OS thread, `f` runs right there.
///
/// Usable until the runtime's shutdown has finished, so the destructors of tasks cancelled at
/// shutdown may call it too.
///
/// ```
/// let size = weft::run(|| {
///     // A file read cannot park: it runs on a pool thread while this task parks.
///     weft::task::spawn_blocking(|| std::fs::metadata(".").map(|m| m.len()))
/// });
/// assert!(size.is_ok());
/// ```
///
/// # Panics
/// With `f`'s panic, or when the runtime is out of OS threads
/// ([`crate::RuntimeBuilder::max_threads`]) or cannot start one; [`try_spawn_blocking`]
/// returns those as errors.
#[track_caller]
pub fn spawn_blocking<F, T>(f: F) -> T
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    match try_spawn_blocking(f) {
        Ok(value) => value,
        Err(e) => panic!("{e}"),
    }
}

/// Like [`spawn_blocking`], but running out of OS threads is an error, not a panic.
///
/// # Errors
/// When the runtime reached its `max_threads` or cannot start a thread.
pub fn try_spawn_blocking<F, T>(f: F) -> io::Result<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    sched::blocking::run(f)
}

/// Runs the CPU-heavy `f` on the runtime's compute pool — one thread per core, fed by a
/// bounded queue — while the calling task parks, and returns its result. A panic in `f`
/// resumes in the caller. On a plain OS thread, `f` runs right there.
///
/// Which to use:
/// - a short computation (microseconds): call it in the task;
/// - a long one (hashing a file's bytes, compressing, an image filter): `compute`, so the
///   worker goes on running other tasks and their timers, and a burst of jobs shares the
///   cores instead of each getting a thread;
/// - a call that *waits* (a blocking syscall or C library, `getaddrinfo`, file I/O):
///   [`spawn_blocking`], whose threads are many because they mostly sleep.
///
/// Back-pressure: when every pool thread is busy and the queue (two jobs per thread) is
/// full, the caller parks until a slot frees up. A caller cancelled while it waits for the
/// result does not stop the job (a thread cannot be interrupted mid-computation); its
/// result is dropped on the pool thread.
///
/// ```
/// let sum = weft::run(|| {
///     let jobs: Vec<_> = (0..8u64)
///         .map(|i| weft::spawn(move || weft::task::compute(move || (0..100_000 * i).sum::<u64>())))
///         .collect();
///     jobs.into_iter().map(|j| j.join().unwrap()).sum::<u64>()
/// });
/// assert!(sum > 0);
/// ```
///
/// # Panics
/// With `f`'s panic, or when the runtime is shutting down or cannot start its pool threads;
/// [`try_compute`] returns those as errors.
#[track_caller]
pub fn compute<F, T>(f: F) -> T
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    match try_compute(f) {
        Ok(value) => value,
        Err(e) => panic!("{e}"),
    }
}

/// Like [`compute`], but a pool that cannot take the job is an error, not a panic.
///
/// # Errors
/// When the runtime is shutting down, or a pool thread cannot be started.
pub fn try_compute<F, T>(f: F) -> io::Result<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    sched::compute::run(f)
}
