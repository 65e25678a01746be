//! The task core: the header every task shares with its worker, its wakers and its handles;
//! the [`Task`] handle; what a worker keeps of a task (its run state, why it switched out);
//! and how a task is made (`spawn`). Beside it: the task's one allocation (`cell.rs`), its
//! join slot and `JoinHandle` (`join.rs`), its task-local storage and bound contexts
//! (`locals.rs`). The public API over them is `task/`, which re-exports `Task`, `TaskId`,
//! `Cancelled` and `JoinHandle`.
//!
//! Owns: `Header`. Which thread may touch which field:
//!
//! | field        | who                                                                  |
//! |--------------|----------------------------------------------------------------------|
//! | `id`, `spawn_site`, `class`, `vtable`, `extras`' `name` | anyone (immutable)           |
//! | `extras`     | set once: at the spawn (a named task), or by the task's worker thread at the first use of `locals` or `capture`; read by anyone with Acquire |
//! | `refs`       | anyone holding a reference ([`Task`], a `JoinHandle`, a parked task's park state) |
//! | `park`       | anyone, through the protocol in `park/state.rs`                      |
//! | `home`       | written once by the first worker to run the task, before the task runs; read by wakers only after they saw the task PARKED (invariant 2) |
//! | `run`        | the task's worker only (invariant 1)                                  |
//! | `interrupt`  | anyone sets bits (`Task::cancel`, a cancelled `Context`, shutdown); the task reads them at its parks and clears `SCOPE` |
//! | `yielder`, `unwinding`, `stack`, `extras`' `locals` and `capture` | the task's worker and the task itself, on that worker's thread |
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
//! 5. `refs` counts the references to the cell ([`Task`]s, the `JoinHandle`, the parked
//!    reference of invariant 4); the drop that takes it to zero frees the cell (cell.rs), with
//!    `Arc`'s orderings.
//!
//! May call: `stack`, `park`, the worker (a wake queues the task on its home worker,
//! `queue.rs` `schedule_woken_by`; a spawn hands the task to a `Spawner`). Called by: the rest
//! of `sched`; `task` (spawning, and its re-exports for everything above).
//!
//! Why here and not in `task/`: a wake schedules the task on its worker, and the worker
//! resumes and finishes its tasks through their headers, so the two call each other; a
//! cycle inside one layer folder is that folder's own, where one between `task` and `sched`
//! tied both to everything either named (lib.rs, "Layers").

use std::cell::{Cell, UnsafeCell};
use std::fmt;
use std::num::NonZeroU64;
use std::panic::Location;
use std::ptr::NonNull;
use std::sync::atomic::{self, AtomicPtr, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use corosensei::{Coroutine, Yielder};

use super::park::Waiter;
use super::queue::WokenBy;
use super::runtime::Remote;
use crate::observe::capture::Capture;
use crate::observe::TaskView;
use crate::park::state::{ParkState, Unpark};
use crate::park::ParkReason;
use crate::stack::{self, SizeClass, Slot};
use locals::TaskLocals;

pub(crate) mod cell;
pub(crate) mod join;
pub(crate) mod locals;

/// Why a task was cancelled: the payload a cancelled task unwinds with, and the error payload
/// its [`JoinHandle::join`](crate::task::JoinHandle::join) returns.
///
/// `join` returns `std::thread::Result<T>`, so a cancelled task and a panicked one both come
/// back as `Err(payload)`; tell them apart by downcasting (or with
/// [`is_cancelled`](crate::task::is_cancelled)):
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
    /// [`Task::cancel`] or [`JoinHandle::cancel`](crate::task::JoinHandle::cancel).
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

/// `Header::interrupt` bits. Set by anyone with a Release `fetch_or` before an unpark; read by
/// the task at its parks (sched/park.rs `unwind_at_park`).
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
    /// ended (observe/trace.rs `Ended`).
    Park(ParkReason),
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

/// The typed operations of one task's cell (sched/task/cell.rs `Cell<F, T>`), reached from its
/// header: the core runs, cancels and frees a task through them without knowing its types.
pub(crate) struct CellVtable {
    /// Runs the closure on the current stack and completes the join slot; returns the joiner
    /// to wake once the task has fully switched out (cell.rs invariant 1: called once, by the
    /// starter).
    pub(crate) run: unsafe fn(NonNull<Header>) -> Option<Waiter>,
    /// Drops the closure of a task that never started and tells its joiner, with the given
    /// error payload (cell.rs invariant 1).
    pub(crate) cancel: unsafe fn(NonNull<Header>, Box<dyn std::any::Any + Send>),
    /// Tells the joiner of a started task whose frames are leaked at shutdown, never to run
    /// again, that it will not finish (cell.rs invariant 2: it never completes otherwise).
    pub(crate) abandon: unsafe fn(NonNull<Header>),
    /// Drops the cell and frees its memory (cell.rs invariant 3).
    pub(crate) free: unsafe fn(NonNull<Header>),
}

/// The part of a task shared by its worker, its wakers and its handles.
pub(crate) struct Header {
    /// References to the cell (invariant 5).
    refs: AtomicUsize,
    /// The typed operations of the cell this header heads (sched/task/cell.rs `vtable`).
    vtable: &'static CellVtable,
    pub(crate) id: TaskId,
    pub(crate) park: ParkState,
    /// What few tasks use ([`Extras`]), null until then; freed with the header.
    extras: AtomicPtr<Extras>,
    pub(crate) spawn_site: &'static Location<'static>,
    pub(crate) class: SizeClass,
    home: UnsafeCell<Option<Arc<Remote>>>,
    run: UnsafeCell<RunState>,
    pub(crate) yielder: Cell<*const Yielder<(), Suspend>>,
    /// Cancellation requests ([`interrupt`] bits): why the task must unwind at its next park.
    pub(crate) interrupt: AtomicU8,
    /// The task was unwinding when it last parked (sched/park.rs, "Parking while
    /// panicking").
    pub(crate) unwinding: Cell<bool>,
    /// Its stack pointer and reclaim/compaction state while parked (stack/compact.rs).
    pub(crate) stack: stack::ParkedStack,
}

// SAFETY: the fields that are not Sync on their own are confined as the table in the module
// doc says: `run`, `yielder`, `unwinding`, and `extras`' `locals` and `capture` are touched only on the task's home worker thread
// (invariant 1), or, for `run` in state New, by whichever single worker popped the task from a
// queue; `home` is written once before it can be read elsewhere (invariant 2).
unsafe impl Sync for Header {}
// SAFETY: a Header moves between threads behind its task's references. Its `RunState::New` content
// is a slot of memory; a `Started` coroutine, which is not `Send`, is only ever dropped on its
// home thread (invariant 3). `extras`' `locals` (which may hold `!Send` values) is made by the task on its
// home thread and dropped there when the task ends (task/local.rs invariant 3), or leaked with
// a leaked stack; it is never dropped with the header.
unsafe impl Send for Header {}

impl Header {
    /// The header of a new task whose cell's operations are `vtable`, with the two
    /// references a new cell starts with: one for the queue, one for the join handle.
    /// cell.rs `allocate` sets the vtable to its cell type's again, whatever was passed here.
    /// Inlined, so that the header is built in place, as the struct literal it replaced was.
    #[inline]
    pub(crate) fn new(
        vtable: &'static CellVtable,
        name: Option<Arc<str>>,
        spawn_site: &'static Location<'static>,
        class: SizeClass,
        slot: Option<Slot>,
    ) -> Header {
        Header {
            refs: AtomicUsize::new(2),
            vtable,
            id: TaskId::next(),
            park: ParkState::new(),
            extras: AtomicPtr::new(match name {
                None => std::ptr::null_mut(),
                Some(name) => Box::into_raw(Box::new(Extras::new(Some(name)))),
            }),
            spawn_site,
            class,
            home: UnsafeCell::new(None),
            run: UnsafeCell::new(RunState::New { slot }),
            yielder: Cell::new(std::ptr::null()),
            interrupt: AtomicU8::new(0),
            unwinding: Cell::new(false),
            stack: stack::ParkedStack::default(),
        }
    }

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

    /// The task's extras, if it has any.
    #[inline]
    fn extras(&self) -> Option<&Extras> {
        // Acquire: pairs with the Release that published them (`extras_or_make`), or with
        // the task's publication at its spawn.
        let extras = self.extras.load(Ordering::Acquire);
        // SAFETY: set once to a leaked Box, freed only with the header.
        unsafe { extras.as_ref() }
    }

    /// The task's extras, made now if it has none; only on the task's worker thread, which
    /// alone makes them after the spawn (the module doc's table).
    fn extras_or_make(&self) -> &Extras {
        if let Some(extras) = self.extras() {
            return extras;
        }
        let extras = Box::into_raw(Box::new(Extras::new(None)));
        // A CAS, not a store, though only this thread makes them: a second maker would
        // otherwise orphan the first's, which a reader may hold. Release: the new extras'
        // fields before their address, for `extras`' readers; Acquire on failure: the
        // winner's.
        match self.extras.compare_exchange(
            std::ptr::null_mut(),
            extras,
            Ordering::Release,
            Ordering::Acquire,
        ) {
            // SAFETY: just published; freed only with the header.
            Ok(_) => unsafe { &*extras },
            Err(made) => {
                // SAFETY: `extras` was never published; `made` was, and lives as the header.
                unsafe {
                    drop(Box::from_raw(extras));
                    &*made
                }
            }
        }
    }

    /// The name given at the spawn, if any.
    #[inline]
    pub(crate) fn name(&self) -> Option<&Arc<str>> {
        self.extras()?.name.as_ref()
    }

    /// The task's task-locals and bound contexts (locals.rs), allocated at first use; null
    /// until then. Never dropped with the header: the task drops them when it ends. Only on
    /// the task's worker thread.
    pub(crate) fn locals(&self) -> *mut TaskLocals {
        self.extras()
            .map_or(std::ptr::null_mut(), |extras| extras.locals.get())
    }

    /// Sets [`locals`](Self::locals); as it, only on the task's worker thread.
    pub(crate) fn set_locals(&self, locals: *mut TaskLocals) {
        if locals.is_null() && self.extras().is_none() {
            return;
        }
        self.extras_or_make().locals.set(locals);
    }

    /// The capture the task's worker asks for around a resume, that the task record where it
    /// waits instead of running (sched/dump.rs, "Capturing a parked task"); on every resume,
    /// so one load for a task with no extras.
    #[inline]
    pub(crate) fn capture(&self) -> Option<NonNull<Capture>> {
        self.extras()?.capture.get()
    }

    /// Sets [`capture`](Self::capture); by the task's worker only.
    pub(crate) fn set_capture(&self, capture: Option<NonNull<Capture>>) {
        if capture.is_none() && self.extras().is_none() {
            return;
        }
        self.extras_or_make().capture.set(capture);
    }

    /// The worker the task lives on; `None` before it started.
    pub(crate) fn home(&self) -> Option<&Arc<Remote>> {
        // SAFETY: invariant 2: callers (wakers) reach here only after seeing the task PARKED,
        // which happens-after `set_home`.
        unsafe { (*self.home.get()).as_ref() }
    }
}

impl Drop for Header {
    fn drop(&mut self) {
        let extras = *self.extras.get_mut();
        if !extras.is_null() {
            // SAFETY: made by `Box::into_raw` (`new`, `extras_or_make`); `&mut self`: no one
            // else holds the header, so no reference to them is left.
            drop(unsafe { Box::from_raw(extras) });
        }
    }
}

/// What few tasks use, behind one pointer of [`Header`] (24 bytes fewer in every task's
/// cell): its name (set at the spawn), its task-locals, a dump's capture.
struct Extras {
    name: Option<Arc<str>>,
    locals: Cell<*mut TaskLocals>,
    capture: Cell<Option<NonNull<Capture>>>,
}

impl Extras {
    fn new(name: Option<Arc<str>>) -> Extras {
        Extras {
            name,
            locals: Cell::new(std::ptr::null_mut()),
            capture: Cell::new(None),
        }
    }
}

impl stack::DescribeTask for Header {
    fn describe(&self, out: &mut dyn fmt::Write) -> fmt::Result {
        write!(out, "task {}", self.id.0)?;
        if let Some(name) = self.name() {
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

/// A task as the observers' reports name it (observe/mod.rs).
impl TaskView for Header {
    fn id(&self) -> u64 {
        self.id.as_u64()
    }

    fn name(&self) -> Option<&Arc<str>> {
        Header::name(self)
    }

    fn spawn_site(&self) -> &'static Location<'static> {
        self.spawn_site
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

    /// Runs the task's closure (sched/task/cell.rs invariant 1).
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

    /// The name given with [`Builder::name`](crate::task::Builder::name), if any.
    pub fn name(&self) -> Option<&str> {
        self.header().name().map(|name| &**name)
    }

    /// Where the task was spawned.
    pub fn spawn_site(&self) -> &'static Location<'static> {
        self.header().spawn_site
    }

    /// The size of the task's stack slot in bytes, guard page included.
    pub fn stack_size(&self) -> usize {
        self.header().class.bytes()
    }

    /// Makes the task's next (or current) [`park`](crate::task::park) return, like
    /// `std::thread::Thread::unpark`.
    /// The task is scheduled on the worker it lives on. Callable from any thread.
    pub fn unpark(&self) {
        // SAFETY: this handle keeps the task alive.
        unsafe { unpark_ptr(self.as_ptr()) }
    }

    /// Cancels the task, from any thread: a parked task is woken and unwinds at its park
    /// (its destructors run); a running one unwinds at its next park or yield; one that
    /// never started never runs (its closure is dropped). Its
    /// [`JoinHandle::join`](crate::task::JoinHandle::join) then
    /// returns `Err` with a [`Cancelled`] payload. A task that already finished is not
    /// affected; cancelling twice is the same as once.
    ///
    /// A task computing without parking is cancelled only when it next parks or yields:
    /// call [`yield_now`](crate::task::yield_now) in long loops. A task that is unwinding from a panic finishes that
    /// unwind first.
    ///
    /// Cancel safety (chan/mod.rs "Cancel safety", sched/park.rs invariant 3): a wait that
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

    /// Takes one of the two references a new cell is made with (`Header::new`).
    ///
    /// # Safety
    /// `ptr` must be a cell sched/task/cell.rs `allocate` just made, and each of its two references
    /// may be taken once.
    pub(crate) unsafe fn adopt(ptr: NonNull<Header>) -> Task {
        // The reference was counted by `Header::new`: the caller's contract.
        Task { header: ptr }
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
    unsafe { unpark_ptr_by(ptr, WokenBy::Task) }
}

/// [`unpark_ptr`], saying who wakes (queue.rs invariant 2).
///
/// # Safety
/// As `unpark_ptr`.
#[inline]
pub(in crate::sched) unsafe fn unpark_ptr_by(ptr: NonNull<Header>, by: WokenBy) {
    // SAFETY: the caller's contract.
    let header = unsafe { ptr.as_ref() };
    match header.park.unpark() {
        Unpark::Nothing => {}
        // SAFETY: this unpark saw PARKED, so it owns the parked reference (invariant 4).
        Unpark::Schedule => super::queue::schedule_woken_by(unsafe { Task::from_parked(ptr) }, by),
        Unpark::WakeThread => super::park::wake_blocked(header),
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
