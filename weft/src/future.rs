//! Futures in tasks: [`block_on`] polls a future on the calling task's own stack and parks the
//! task while the future is pending; the future's `Waker` unparks it.
//!
//! ```
//! let n = weft::run(|| {
//!     let (tx, rx) = weft::chan::bounded::<u32>(1);
//!     weft::spawn(move || tx.send(7).unwrap());
//!     // Any future: here weft's own `recv_async`, awaited inside an async block.
//!     weft::future::block_on(async move { rx.recv_async().await.unwrap() * 6 })
//! });
//! assert_eq!(n, 42);
//! ```
//!
//! A future bound to tokio's reactor or timers (`tokio::net`, `tokio::time`, reqwest, sqlx,
//! tonic) needs a tokio runtime's context while it is polled: use `weft::tokio::block_on`
//! (cargo feature `tokio`). Polled here without one, tokio panics with "there is no reactor
//! running"; `block_on` catches that panic and panics again with a message that names
//! `weft::tokio::block_on` and the feature.
//!
//! Owns: `Signal`, what a `block_on`'s waker points at — the waiting party (a counted
//! [`Task`](crate::task::Task) reference, or a plain thread) and a `woken` flag — in an `Arc`
//! shared by every clone of the waker.
//!
//! Invariants:
//! 1. A waker never holds a borrowed task pointer: its `Arc<Signal>` holds a counted task
//!    reference (sched/task/mod.rs invariant 5), so waking it is sound from any thread, any number
//!    of times, before or after the park, and after `block_on` returned or the task ended
//!    (the unpark of a task that is not parked only leaves a token: park/state.rs).
//! 2. `woken` is cleared before each poll and set by every wake. `block_on` parks only while
//!    it is clear, so a wake that arrives during the poll, between the poll and the park, or
//!    while the task is parked in some other wait inside the poll (a nested `block_on`, a
//!    blocking call in async code, whose own park may have consumed the task's token) is
//!    never lost. A wake that finds `woken` already set skips the unpark: the task polls
//!    again anyway.
//! 3. The future lives in `block_on`'s frame, pinned there, and is dropped there: on return,
//!    on a timeout, or by the unwind of a cancellation. A started task never changes OS
//!    thread (sched/task/mod.rs invariant 1), so a `!Send` future is polled and dropped on the
//!    thread that made it, as on a plain thread.
//! 4. Cancellation (`JoinHandle::cancel`, a bound `Context`, shutdown) takes effect where any
//!    wait does (sched/park.rs invariant 3): at the park, before it parks. A task woken by the
//!    cancellation alone (`woken` still clear) parks again, which unwinds; a task whose
//!    future was woken polls it once more first, so a future that completed keeps its result.
//!
//! May call: `park` (reasons), `sched` (waiters and parking, the cooperative budget, and with
//! the `tokio` feature the tokio contexts its polls entered, left before parking:
//! sched/tokio_context.rs). Called by: users, `tokio`.
//!
//! Why a flag per `block_on` rather than the task's park token alone: the token is shared by
//! every wait of the task, and a nested wait inside the poll may take it — the outer wake
//! would then be lost and the outer `block_on` would park for good. Why an `Arc` per call
//! rather than a waker that borrows the task: a waker may outlive the call (a timer wheel or
//! a reactor keeps a clone), and a borrowed pointer would dangle once the task ended; the
//! `Arc` costs one allocation per `block_on` (tens of nanoseconds, against the microseconds
//! of whatever the future waits for).

use std::future::{Future, IntoFuture};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use crate::park::ParkReason;
use crate::sched::Waiter;

/// Polls `future` to completion on the calling task's stack, parking the task (only the task:
/// its worker runs others) while the future is pending, and returns its output. On a plain OS
/// thread it blocks the thread, like `futures::executor::block_on`.
///
/// The future may be `!Send` and borrow from the caller: a started task never changes OS
/// thread, so it is polled and dropped where it was made. A cancelled task (a
/// [`JoinHandle::cancel`](crate::JoinHandle::cancel), a bound
/// [`Context`](crate::context::Context), shutdown) drops the future and unwinds at the park,
/// like every wait; a future that was woken is polled once more first, so one that completed
/// returns its output. A panic in the future comes out of `block_on`.
///
/// ```
/// use std::rc::Rc;
/// let n = weft::run(|| {
///     let shared = Rc::new(20); // not Send: fine, the task stays on its thread
///     let h = weft::spawn(|| 22);
///     weft::future::block_on(async { *shared + h.await.unwrap() })
/// });
/// assert_eq!(n, 42);
/// ```
///
/// # Panics
/// With the future's panic. A future that needs a tokio runtime (tokio's "there is no reactor
/// running") panics with a message naming `weft::tokio::block_on` and weft's `tokio` feature.
#[track_caller]
pub fn block_on<F: IntoFuture>(future: F) -> F::Output {
    let future = pin!(future.into_future());
    match run(future, None, ParkReason::Future) {
        Some(output) => output,
        None => unreachable!("weft: block_on without a deadline timed out"),
    }
}

/// Like [`block_on`], but gives up after `timeout`: the future is dropped (on the caller's
/// stack) and the result is `Err(Elapsed)`.
///
/// ```
/// use std::time::Duration;
/// weft::run(|| {
///     let forever = std::future::pending::<()>();
///     let r = weft::future::block_on_timeout(forever, Duration::from_millis(10));
///     assert!(r.is_err());
/// });
/// ```
///
/// # Errors
/// [`Elapsed`] when the future was still pending at the deadline.
///
/// # Panics
/// As [`block_on`].
#[track_caller]
pub fn block_on_timeout<F: IntoFuture>(future: F, timeout: Duration) -> Result<F::Output, Elapsed> {
    match Instant::now().checked_add(timeout) {
        Some(deadline) => block_on_deadline(future, deadline),
        None => Ok(block_on(future)),
    }
}

/// Like [`block_on_timeout`], waiting until `deadline` at the latest.
///
/// # Errors
/// [`Elapsed`] when the future was still pending at the deadline.
///
/// # Panics
/// As [`block_on`].
#[track_caller]
pub fn block_on_deadline<F: IntoFuture>(
    future: F,
    deadline: Instant,
) -> Result<F::Output, Elapsed> {
    let future = pin!(future.into_future());
    run(future, Some(deadline), ParkReason::Future).ok_or(Elapsed(()))
}

/// [`block_on_timeout`] gave up: the future was still pending at the deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed(());

impl std::fmt::Display for Elapsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("deadline has elapsed before the future completed")
    }
}

impl std::error::Error for Elapsed {}

/// What a `block_on`'s waker points at (module doc, "Owns").
struct Signal {
    /// The waiting task (a counted reference, invariant 1) or thread.
    waiter: Waiter,
    /// Set by every wake, cleared before each poll (invariant 2).
    woken: AtomicBool,
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // AcqRel: Release publishes what the waker did before waking (pairs with the
        // Acquire load in `run`); Acquire orders this after an earlier wake it sees.
        if !self.woken.swap(true, Ordering::AcqRel) {
            self.waiter.wake_by_ref();
        }
    }
}

/// The loop of every `block_on`: polls `future` until it is ready (`Some(output)`) or
/// `deadline` passes (`None`), parking for `reason` in between (invariants 2–4).
#[inline]
pub(crate) fn run<F: Future + ?Sized>(
    mut future: std::pin::Pin<&mut F>,
    deadline: Option<Instant>,
    reason: ParkReason,
) -> Option<F::Output> {
    let signal = Arc::new(Signal {
        waiter: Waiter::current(),
        woken: AtomicBool::new(false),
    });
    let waker = Waker::from(signal.clone());
    let mut cx = Context::from_waker(&waker);
    loop {
        // Invariant 2: cleared before the poll, so a wake during it is seen after it.
        signal.woken.store(false, Ordering::Relaxed);
        if let Poll::Ready(output) = poll_translating(future.as_mut(), &mut cx) {
            return Some(output);
        }
        // Acquire: pairs with the wake's AcqRel swap.
        if signal.woken.load(Ordering::Acquire) {
            // Woken during its own poll (a future that yields): poll again, but spend the
            // cooperative budget, so a future that always wakes itself lets its worker's
            // other tasks run now and then (sched/coop.rs invariant 2).
            crate::sched::coop::spend();
            continue;
        }
        loop {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return None;
            }
            park(deadline, reason);
            if signal.woken.load(Ordering::Acquire) {
                break;
            }
            // A stray token, or the cancellation alone: park again (invariant 4: that park
            // unwinds if a cancellation is pending).
        }
    }
}

/// Parks the caller for `reason` until woken or `deadline`. With the `tokio` feature, the
/// tokio contexts that the caller's own polls entered (a `block_on` nested in a future that
/// `weft::tokio::block_on` polls) are left for the park and entered again after it, so no
/// tokio `EnterGuard` is held across it.
#[inline]
fn park(deadline: Option<Instant>, reason: ParkReason) {
    #[cfg(feature = "tokio")]
    let _entered = crate::sched::tokio_context::Suspended::leave();
    crate::sched::park_current_on_future(deadline, reason);
}

/// Polls `future`, turning tokio's "no reactor running" panic into one that says what to do.
#[inline]
fn poll_translating<F: Future + ?Sized>(
    future: std::pin::Pin<&mut F>,
    cx: &mut Context<'_>,
) -> Poll<F::Output> {
    // The future is dropped by our caller's frame if this unwinds (invariant 3); the unwind
    // safety of its state is the same as without the catch, since the payload goes on.
    match catch_unwind(AssertUnwindSafe(|| future.poll(cx))) {
        Ok(poll) => poll,
        Err(payload) => match tokio_missing(&*payload) {
            Some(message) => panic!(
                "weft: a future that needs a tokio runtime was polled outside one (tokio said: \
                 \"{message}\"): poll it with `weft::tokio::block_on`, which enters a tokio \
                 runtime around each poll (weft's cargo feature `tokio`)"
            ),
            None => resume_unwind(payload),
        },
    }
}

/// tokio's panic message, if `payload` is its "no runtime here" panic.
fn tokio_missing(payload: &(dyn std::any::Any + Send)) -> Option<String> {
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())?;
    // tokio 1.x: "there is no reactor running, must be called from the context of a Tokio
    // 1.x runtime" (net, time) and "must be called from the context of a Tokio 1.x
    // runtime" (spawn).
    (message.contains("no reactor running") || message.contains("context of a Tokio"))
        .then_some(message)
}

#[cfg(test)]
mod tests {

    /// A task parked in `block_on` counts on its worker while it waits (the worker does not
    /// spin then: sched/park.rs `park_current_on_future`), and no longer once it is woken or
    /// cancelled (the unwinding park).
    #[test]
    fn a_wait_on_a_future_is_counted_while_it_lasts() {
        use crate::sched::futures_waiting_here;
        let rt = crate::Runtime::builder().workers(1).build().unwrap();
        rt.block_on(|| {
            assert_eq!(futures_waiting_here(), 0);
            let (tx, rx) = crate::chan::bounded::<u32>(1);
            let waiter = crate::spawn(move || block_on(rx.recv_async()));
            let (_keep, rx2) = crate::chan::bounded::<u32>(1);
            let cancelled = crate::spawn(move || block_on(rx2.recv_async()));
            for _ in 0..1000 {
                if futures_waiting_here() == 2 {
                    break;
                }
                crate::task::yield_now();
            }
            assert_eq!(futures_waiting_here(), 2);
            tx.send(7).unwrap();
            assert_eq!(waiter.join().unwrap(), Ok(7));
            assert_eq!(futures_waiting_here(), 1);
            cancelled.cancel();
            assert!(cancelled.join().is_err());
            assert_eq!(futures_waiting_here(), 0);
        });
    }
    use super::*;

    #[test]
    fn tokio_messages_are_recognised() {
        let reactor: Box<dyn std::any::Any + Send> = Box::new(
            "there is no reactor running, must be called from the context of a Tokio 1.x runtime",
        );
        assert!(tokio_missing(&*reactor).is_some());
        let spawn: Box<dyn std::any::Any + Send> = Box::new(String::from(
            "must be called from the context of a Tokio 1.x runtime",
        ));
        assert!(tokio_missing(&*spawn).is_some());
        let other: Box<dyn std::any::Any + Send> = Box::new("boom");
        assert!(tokio_missing(&*other).is_none());
    }

    #[test]
    fn a_plain_thread_blocks_until_woken_from_another_thread() {
        let (tx, rx) = std::sync::mpsc::channel::<Waker>();
        let waker_thread = std::thread::spawn(move || {
            let waker = rx.recv().unwrap();
            std::thread::sleep(Duration::from_millis(20));
            waker.wake();
        });
        let mut polls = 0;
        let mut tx = Some(tx);
        block_on(std::future::poll_fn(|cx| {
            polls += 1;
            match tx.take() {
                Some(tx) => {
                    tx.send(cx.waker().clone()).unwrap();
                    Poll::Pending
                }
                None => Poll::Ready(()),
            }
        }));
        assert_eq!(polls, 2);
        waker_thread.join().unwrap();
    }
}
