//! Parking the caller: how anything that waits — a join, a lock, a channel — blocks the
//! caller, whether the caller is a task (only the task parks; its worker runs others) or a
//! plain OS thread (the thread blocks); and what runs on a task's own stack when it parks or
//! yields: the switch back to its worker, cancellation at a park ("Cancellation at a park",
//! `park_task`), a park while panicking ("Parking while panicking", `block_thread`), a park
//! with a deadline, and the wake of a thread a task blocks.
//!
//! Owns: `Waiter`, the thing a waiting party leaves behind to be woken by, and the parking
//! frame of a parked task (its `ParkSite` and, with a deadline, its `TimerEntry`). What a
//! parked task waits for ([`ParkReason`](crate::park::ParkReason)) and the state a park and
//! its unpark race on (`ParkState`) are the park protocol's, one layer down (park/).
//!
//! Invariants:
//! 1. A waiter is woken at most once per registration by the code that took it out of the
//!    waiting party's structure; waking costs one atomic swap when the task is not parked yet.
//! 2. Park may return spuriously: every caller parks in a loop that re-checks its condition.
//! 3. Cancellation (`Task::cancel`, shutdown, a bound `Context`) takes effect at a park,
//!    *before* it parks, never as it returns: a wait that completed while the caller was
//!    parked returns its result, and a wake by the cancellation alone makes the caller's
//!    loop park again, which unwinds ("Cancellation at a park"). A wait that
//!    hands values over (the channels) uses `park_current_cancellable`, which never
//!    unwinds: it aborts its wait under its own lock and unwinds only if no peer completed
//!    it, so no value handed to a cancelled waiter is dropped by its unwind.
//!
//! 4. A task parks only after it has fully switched out: its park state is published by its
//!    worker, off the task's stack (worker.rs `resume_task`, park/state.rs invariant 2).
//!
//! May call: the current worker (worker.rs), the switch (`stack::switch_out`), timers.rs (a
//! deadline's entry), dump.rs (a capture asked for at a resume), task/locals.rs (a bound
//! context's cancellation), runtime.rs (the worker's count of waits on futures). Called by:
//! `task` (join, park, yield), `sync`, `chan`, `time`, `net`, `context`, `interpose`,
//! `future`, and the reactor and blocking pool here.
//!
//! Why here and not in park/: only the worker can switch a task out, and a park reads the
//! worker's clock, timers and shutdown flag; park/ keeps the protocol a park and its unpark
//! race on, which names nothing above it and is model-checked as it is (src/tests/loom_*.rs).

use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::dump::answer_captures;
use super::runtime::Remote;
use super::task::{interrupt, locals, Cancelled, Header, Suspend, Task};
use super::timers::{Slack, TimerEntry};
use super::worker::{current_header, current_task, current_worker, Worker};
use crate::observe::capture::ParkSite;
use crate::park::ParkReason;
use crate::stack;

/// Whoever waits: a task, a plain OS thread, or a future (an awaited `JoinHandle`).
#[derive(Debug, Clone)]
pub(crate) enum Waiter {
    Task(Task),
    Thread(std::thread::Thread),
    /// Only where a wait is polled as a future (sched/task/join.rs); `Waiter::current` never
    /// makes one. Boxed so that a `Waiter` stays two words (it is in every task's join slot).
    Waker(Box<std::task::Waker>),
}

impl Waiter {
    /// The caller, as something that can be woken.
    pub(crate) fn current() -> Waiter {
        match current_task() {
            Some(task) => Waiter::Task(task),
            None => Waiter::Thread(std::thread::current()),
        }
    }

    /// Wakes it: `Task::unpark` or `Thread::unpark`.
    pub(crate) fn wake(self) {
        self.wake_by_ref();
    }

    /// Wakes it without giving up the handle.
    pub(crate) fn wake_by_ref(&self) {
        match self {
            Waiter::Task(task) => task.unpark(),
            Waiter::Thread(thread) => thread.unpark(),
            Waiter::Waker(waker) => waker.wake_by_ref(),
        }
    }
}

/// Parks the caller: the current task, or else the current thread (invariant 2). `reason`
/// is what a task dump shows while the task waits (park/reason.rs). A pending cancellation
/// unwinds the caller here, before it parks (invariant 3).
#[inline]
pub(crate) fn park_current(reason: ParkReason) {
    if !park_current_task(reason) {
        park_thread(None);
    }
}

/// Parks the caller like [`park_current`] (until `deadline`, if any) while a future it polls
/// is pending (`future::block_on` and the tokio bridge). Meanwhile a task counts among its
/// worker's `futures_waiting`, so that the worker does not spin when it idles (worker.rs,
/// `idle`): such a wake comes from another thread's reactor, which needs the CPU a spin
/// would take.
pub(crate) fn park_current_on_future(deadline: Option<Instant>, reason: ParkReason) {
    /// Counts the wait while it lasts, an unwinding park included.
    struct Waiting<'a>(&'a Remote);
    impl Drop for Waiting<'_> {
        fn drop(&mut self) {
            let count = &self.0.futures_waiting;
            count.store(count.load(Ordering::Relaxed) - 1, Ordering::Relaxed);
        }
    }
    // The home of a running task: its worker's, for the task's whole life (sched/mod.rs
    // invariant 1), which the park's return or unwind is part of. Only that worker's thread
    // writes the count (its tasks run, park and unwind there), so a load and a store do, not
    // a locked read-modify-write on a line other threads read.
    let _waiting = current_header().and_then(Header::home).map(|home| {
        let count = &home.futures_waiting;
        count.store(count.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        Waiting(home)
    });
    match deadline {
        Some(deadline) => park_current_until(deadline, reason),
        None => park_current(reason),
    }
}

/// The running task's worker's count of waits on futures (`park_current_on_future`).
#[cfg(test)]
pub(crate) fn futures_waiting_here() -> usize {
    current_worker()
        .expect("in a task")
        .remote
        .futures_waiting
        .load(Ordering::Relaxed)
}

/// A plain thread's park: like a task's, it is where a cancelled `Context` the thread is
/// bound to unwinds it (locals.rs), before it parks (invariant 3).
#[cold]
fn park_thread(deadline: Option<std::time::Instant>) {
    super::task::locals::unwind_if_thread_scope_cancelled();
    park_thread_now(deadline);
}

fn park_thread_now(deadline: Option<std::time::Instant>) {
    // A worker's thread outside its tasks runs async code only: what its own tokio runtime
    // runs (sched/tokio_local.rs). Parking there would stop every task of the worker, the
    // one that would wake it perhaps among them.
    #[cfg(feature = "tokio")]
    if current_worker().is_some_and(Worker::drives_tokio) {
        panic!(
            "weft: a blocking wait in async code that a weft worker's tokio runtime runs \
             (RuntimeBuilder::tokio_on_workers): it would stop the worker's tasks; use the \
             async form (recv_async, send_async, a JoinHandle's .await) or \
             weft::tokio::spawn_future"
        );
    }
    match deadline {
        Some(deadline) => {
            std::thread::park_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
        }
        None => std::thread::park(),
    }
}

/// Parks the caller until woken or until `deadline` (invariant 2: callers re-check both their
/// condition and the clock).
pub(crate) fn park_current_until(deadline: std::time::Instant, reason: ParkReason) {
    if !park_current_task_until(deadline, reason) {
        park_thread(Some(deadline));
    }
}

/// Parks the caller (until `deadline`, if any) like [`park_current`], except that a pending
/// cancellation does not unwind: true means "a cancellation is pending" — returned at once
/// if it was pending before the park, or when it wakes the caller. The caller then ends its
/// wait under its own protocol (keeping a result that was handed over meanwhile) and, if the
/// wait did not complete, calls [`unwind_if_cancelled`] (invariant 3).
#[inline]
pub(crate) fn park_current_cancellable(
    deadline: Option<std::time::Instant>,
    reason: ParkReason,
) -> bool {
    if let Some(cancelled) = park_current_task_cancellable(deadline, reason) {
        return cancelled;
    }
    park_thread_cancellable(deadline)
}

#[cold]
fn park_thread_cancellable(deadline: Option<std::time::Instant>) -> bool {
    if super::task::locals::thread_scope_cancelled() {
        return true;
    }
    park_thread_now(deadline);
    super::task::locals::thread_scope_cancelled()
}

/// Unwinds the caller if a cancellation is pending (after a [`park_current_cancellable`]
/// that said so, once the wait is given up); returns if there is none after all (the
/// `Context` that asked was left meanwhile), and the caller retries its operation. On a
/// plain thread: its cancelled `Context`.
///
/// Called right after a cancellable park, whose `unwinding` flag it keeps: the thread's panic
/// state may be another task's by now (at shutdown, see `park_task`).
pub(crate) fn unwind_if_cancelled() {
    match current_header() {
        Some(header) => unwind_at_park(header),
        None => locals::unwind_if_thread_scope_cancelled(),
    }
}

#[cfg(feature = "interpose")]
/// A cancellation a call reports as an error instead of unwinding (`interpose`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cancellation {
    /// The task itself: `Task::cancel`, or its runtime shutting down.
    Task,
    /// A `Context` the task is bound to ended for this reason.
    Context(super::task::locals::ContextError),
}

/// Switches from the running task back to its worker; false if not in a task.
///
/// A yield while the thread is panicking does not switch (see "Parking while panicking").
#[inline]
pub(crate) fn suspend_current(reason: Suspend) -> bool {
    let Some(header) = current_header() else {
        return false;
    };
    if std::thread::panicking() && !shutting_down() {
        std::thread::yield_now();
    } else {
        // A yield is a cancellation point like a park: a loop that only yields still ends
        // at shutdown.
        header.unwinding.set(std::thread::panicking());
        unwind_at_park(header);
        suspend(header, reason, None);
        unwind_at_park(header);
    }
    true
}

/// Switches from the running task, whose header is `header`, back to its worker, until it is
/// resumed to run: the resumes of a dump in between do not return from here ("Capturing a
/// parked task" step 2). `site` is what a park waits on and since when; `None` for a yield.
#[inline]
pub(super) fn suspend(header: &Header, reason: Suspend, site: Option<(ParkReason, &ParkSite)>) {
    let yielder = header.yielder.get();
    // SAFETY: `header` is the running task's (callers got it from `current_header`), and its
    // yielder lives at the root of this task's stack, the stack we run on now.
    stack::switch_out(unsafe { &*yielder }, reason, &header.stack);
    // One load of a header line the park already touched, on every resume. Nothing else
    // lives across the switch for it: the cold path reloads the yielder from the header,
    // `site`'s clock is a slot of the parking frame, and its reason a constant of the park
    // site (park_task is inlined into each), materialised only on the cold path.
    if header.capture().is_some() {
        answer_captures(header, reason, site);
    }
}

/// Parks the running task (park/state.rs) for `reason`; false if not in a task. A pending
/// cancellation unwinds before the park ("Cancellation at a park").
#[inline]
pub(crate) fn park_current_task(reason: ParkReason) -> bool {
    let Some(worker) = current_worker() else {
        return false;
    };
    let Some(header) = worker.current.get() else {
        return false;
    };
    // SAFETY: as in `current_header`.
    let header = unsafe { header.as_ref() };
    park_task::<false>(worker, header, None, reason);
    true
}

/// Parks the running task like [`park_current_task`] (until `deadline`, if any), but a
/// pending cancellation does not unwind: the park returns at once, or as soon as the
/// cancellation arrives, with `Some(true)`. The caller gives its wait up first (an operation
/// that completed meanwhile keeps its result) and then unwinds with
/// [`unwind_if_cancelled`] ("Cancellation at a park"). `None` if not in a task.
#[inline]
pub(crate) fn park_current_task_cancellable(
    deadline: Option<Instant>,
    reason: ParkReason,
) -> Option<bool> {
    let worker = current_worker()?;
    let header = current_header()?;
    Some(match deadline {
        None => park_task::<true>(worker, header, None, reason),
        Some(deadline) => park_task_until::<true>(worker, header, deadline, reason),
    })
}

#[cfg(feature = "interpose")]
/// The running task's pending cancellation, for a call that reports it as an error instead
/// of unwinding (interpose/mod.rs invariant 3): the task's own (`Task::cancel`, shutdown), or
/// the outermost cancelled `Context` it is bound to, whose `bind` then returns its error
/// (context.rs `cut_short`). `None` outside a task.
pub(crate) fn cancellation_as_error() -> Option<super::park::Cancellation> {
    let header = current_header()?;
    // Acquire: pairs with the Release `fetch_or` of `Task::interrupt`.
    let bits = header.interrupt.load(Ordering::Acquire);
    if bits == 0 {
        return None;
    }
    if bits & (interrupt::SHUTDOWN | interrupt::CANCEL) != 0 {
        return Some(super::park::Cancellation::Task);
    }
    locals::cut_short(header).map(super::park::Cancellation::Context)
}

/// A cancellation's unwind caught by a call that reports it as an error instead
/// (interpose/mod.rs invariant 3); `None` if `payload` is no cancellation's (or outside a
/// task). A context's scope is marked cut short, as in [`cancellation_as_error`].
#[cfg(feature = "interpose")]
pub(crate) fn caught_cancellation(
    payload: &(dyn std::any::Any + Send),
) -> Option<super::park::Cancellation> {
    if payload.is::<Cancelled>() {
        return Some(super::park::Cancellation::Task);
    }
    let header = current_header()?;
    locals::caught_scope_unwind(header, payload).map(super::park::Cancellation::Context)
}

/// "Cancellation at a park": what a park does with a cancellation request.
///
/// A cancelled task unwinds *before* it parks, never right after it resumes: a wait whose
/// operation completed while the task was parked — a channel value handed over, a lock or
/// permits granted, a joined task's result — returns that result, and the cancellation takes
/// effect at the task's next wait (every wait parks in a loop that re-checks its condition,
/// sched/park.rs invariant 2, so a wake by the cancel alone parks again and unwinds there).
/// A park that follows a hand-off protocol (`CANCELLABLE`, the channels) does not unwind at
/// all: it returns true, so that its caller aborts its wait under its own lock first and
/// unwinds only if no peer completed it — otherwise a value handed over between the caller's
/// last look and this park's unwind would be dropped by the unwind.
///
/// The one exception is shutdown: a task resumed while its runtime shuts down unwinds at
/// the resume, whatever its wait was handed (the runtime and its tasks are ending; a value
/// handed over at that moment is dropped with the task that held it).
#[inline(always)]
fn park_task<const CANCELLABLE: bool>(
    worker: &Worker,
    header: &Header,
    deadline: Option<Instant>,
    reason: ParkReason,
) -> bool {
    // Whether this task is unwinding, for the checks after it resumes: only now is the
    // thread's panic state surely its own ("Parking while panicking").
    let panicking = std::thread::panicking();
    header.unwinding.set(panicking);
    if CANCELLABLE {
        if cancel_pending(header) {
            return true;
        }
    } else {
        unwind_at_park(header);
    }
    if header.park.take_token() {
        return CANCELLABLE && cancel_pending(header);
    }
    if panicking && !shutting_down() {
        block_thread(header, deadline);
    } else {
        // Kept in this frame for a dump to read ("Capturing a parked task"); the clock is
        // the worker's coarse one (`Worker::clock`), not a clock read per park.
        let site = ParkSite::new(worker.clock.get());
        suspend(header, Suspend::Park(reason), Some((reason, &site)));
    }
    header.park.resumed();
    // At shutdown a resumed task unwinds at once, as the unwind it continues or starts is
    // decided by the `unwinding` flag taken at this park: a later park could not tell, since
    // another task of this worker may be switched out in the middle of its own unwind then,
    // which makes the thread look panicking ("Parking while panicking").
    unwind_if_shut_down(header);
    CANCELLABLE && cancel_pending(header)
}

/// The shutdown part of [`unwind_at_park`], for a task that just resumed.
#[inline]
fn unwind_if_shut_down(header: &Header) {
    if header.interrupt.load(Ordering::Relaxed) & interrupt::SHUTDOWN != 0
        && !header.unwinding.get()
    {
        interrupted(header);
    }
}

/// Whether a cancellation would unwind this task at a park now (`unwind_at_park`).
#[inline]
fn cancel_pending(header: &Header) -> bool {
    header.interrupt.load(Ordering::Relaxed) != 0 && !header.unwinding.get()
}

/// Whether the runtime of the current worker is shutting down.
fn shutting_down() -> bool {
    current_worker().is_some_and(|w| w.shared.shutdown.load(Ordering::Relaxed))
}

/// "Parking while panicking": the task does not switch out but parks its worker's OS thread
/// until its unpark (park/state.rs invariant 4) or its deadline.
///
/// Why: `std::thread::panicking()`, the poisoning of std locks and the panic hook's
/// re-entrancy guard are per OS thread. A task that switched out in the middle of an unwind
/// (a destructor that sends or sleeps) would leave them set for every task its worker ran
/// meanwhile: their std `MutexGuard`s were poisoned, a panic among them while the first task's
/// panic hook was parked aborted the process, and shutdown did not recognise them as
/// cancelled. So for as long as a task is panicking it keeps its thread, as a panicking std
/// thread does. The price: the worker's other tasks wait until the unwind ends, and a
/// destructor that waits, during an unwind, for another task of the same worker waits for
/// good (the monitor reports the worker as stuck) — until shutdown.
///
/// At shutdown every task is being cancelled, so an unwinding task switches out as usual and
/// the worker resumes only tasks that unwind too (a destructor may join a child task that is
/// itself cancelled): each such task's `unwinding` flag, taken when it parked, says whether it
/// continues an unwind or starts one (`unwind_at_park`). `Runtime::drop` unparks the
/// worker threads, so a task blocking one re-parks in that mode.
#[cold]
pub(super) fn block_thread(header: &Header, deadline: Option<Instant>) {
    if header.park.block_thread() {
        match deadline {
            Some(deadline) => {
                std::thread::park_timeout(deadline.saturating_duration_since(Instant::now()))
            }
            None => std::thread::park(),
        }
    }
}

/// Parks the running task until unparked or until `deadline`; false if not in a task.
pub(crate) fn park_current_task_until(deadline: Instant, reason: ParkReason) -> bool {
    let Some(worker) = current_worker() else {
        return false;
    };
    let Some(header) = current_header() else {
        return false;
    };
    park_task_until::<false>(worker, header, deadline, reason);
    true
}

/// Parks the caller until woken or until `deadline`, which may pass by up to `slack`
/// (sched/timers.rs invariant 2) before the wake; true if the caller's timer fired, so that
/// `deadline` has surely passed and the caller need not read the clock to know it (a sleep:
/// time/mod.rs). False after any other wake (invariant 2), and on a plain thread. `now`, if
/// the caller read the clock, measures the wait (the slack of a short one).
pub(crate) fn park_current_until_timer(
    deadline: Instant,
    reason: ParkReason,
    slack: Slack,
    now: Option<Instant>,
) -> bool {
    let (Some(worker), Some(header)) = (current_worker(), current_header()) else {
        park_thread(Some(deadline));
        return false;
    };
    if std::thread::panicking() && !shutting_down() {
        park_task::<false>(worker, header, Some(deadline), reason);
        return false;
    }
    // SAFETY: the current task's header, parked just below in this frame, which closes the
    // entry after the park (or drops it if the park unwinds).
    let entry = unsafe { TimerEntry::new(worker, NonNull::from(header), deadline, slack, now) };
    park_task::<false>(worker, header, None, reason);
    entry.close()
}

/// [`park_task`] until `deadline` at the latest.
///
/// The deadline is an entry in the home worker's timers, removed again when the task
/// returns (so a wait that ends early leaves nothing behind).
#[inline]
fn park_task_until<const CANCELLABLE: bool>(
    worker: &Worker,
    header: &Header,
    deadline: Instant,
    reason: ParkReason,
) -> bool {
    if std::thread::panicking() && !shutting_down() {
        // The task keeps its thread ("Parking while panicking"): no timer entry, the thread's
        // own park times out.
        return park_task::<CANCELLABLE>(worker, header, Some(deadline), reason);
    }
    // Removed when the park returns or unwinds (a cancelled sleeper must not keep its task
    // alive until the deadline, sched/timers.rs invariant 1).
    // SAFETY: `header` is the current task's (the callers pass `current_header()`), parked
    // just below in this frame, which drops the entry when the park returns or unwinds.
    let _entry = unsafe {
        TimerEntry::new(
            worker,
            NonNull::from(header),
            deadline,
            Slack::Runtime,
            None,
        )
    };
    park_task::<CANCELLABLE>(worker, header, None, reason)
}

/// A cancelled task unwinds at its park (unless it is already unwinding): cancelled by
/// shutdown, by `Task::cancel`, or by a `Context` it is bound to (sched/task/mod.rs `interrupt`).
/// With no request pending this is one plain load.
#[inline]
fn unwind_at_park(header: &Header) {
    if header.interrupt.load(Ordering::Relaxed) != 0 && !header.unwinding.get() {
        interrupted(header);
    }
}

#[cold]
fn interrupted(header: &Header) {
    // Acquire: pairs with the Release `fetch_or` of `Task::interrupt`.
    let bits = header.interrupt.load(Ordering::Acquire);
    if bits & interrupt::SHUTDOWN != 0 {
        std::panic::resume_unwind(Box::new(Cancelled::SHUTDOWN));
    }
    if bits & interrupt::CANCEL != 0 {
        std::panic::resume_unwind(Box::new(Cancelled::REQUESTED));
    }
    locals::unwind_if_scope_cancelled(header);
}

/// Wakes the OS thread of a task that blocks it (park/state.rs invariant 4).
#[cold]
pub(crate) fn wake_blocked(header: &Header) {
    let home = header
        .home()
        .expect("weft: a task blocked its thread before it started");
    home.thread
        .get()
        .expect("weft: a worker's thread is recorded before its tasks run")
        .unpark();
}
