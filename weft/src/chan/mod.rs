//! Channels: Go's `chan` and `select`, parking tasks (or blocking plain threads).
//!
//! ```
//! let total = weft::run(|| {
//!     let (tx, rx) = weft::chan::bounded::<u64>(0); // a rendezvous, like `make(chan uint64)`
//!     for i in 0..10 {
//!         let tx = tx.clone();
//!         weft::spawn(move || tx.send(i).unwrap());
//!     }
//!     drop(tx); // the channel closes when the last sender is gone
//!     rx.iter().sum::<u64>()
//! });
//! assert_eq!(total, 45);
//! ```
//!
//! Owns: the public handles [`Sender`] and [`Receiver`] (each counts itself in the channel, so
//! the channel closes when the last one of either side is dropped), the error types, and the
//! support types of [`select!`](crate::select).
//!
//! Invariants:
//! 1. Closing is by counting, as in crossbeam-channel: when the last `Sender` drops, receivers
//!    drain the buffer and then get `Err`; when the last `Receiver` drops, the buffered values
//!    are dropped (nothing can receive them; a panicking `Drop` among them comes out of that
//!    drop and the rest are leaked) and every send gives its value back in the error. A value is never lost nor duplicated: it is in the buffer, in a
//!    blocked sender's entry, handed to exactly one receiver, or given back to its sender.
//! 2. Every blocking operation parks only the calling task (its worker runs others), or blocks
//!    the calling OS thread when called outside a task.
//!
//! # Coming from crossbeam-channel
//! weft's channels follow crossbeam-channel's API, so most code ports by changing the path
//! (`crossbeam_channel::` → `weft::chan::`, `select!` → `weft::select!`); in a task every
//! blocking call parks the task instead of its thread.
//!
//! | crossbeam-channel | weft | |
//! |---|---|---|
//! | `bounded`, `unbounded`, `Sender`, `Receiver`, `send`/`recv` (+ `try_`, `_timeout`, `_deadline`), `iter`, `try_iter`, `len`, `is_empty`, `is_full`, `capacity`, `same_channel`, the error types | the same | |
//! | `select!` with `recv`, `send`, `default`, `default(timeout)` | the same, and `after(timeout)` for the timeout | trailing commas accepted as in crossbeam |
//! | `select_biased!` | [`select_biased!`](crate::select_biased) | |
//! | `Select`, `SelectedOperation`, `ready`, `try_select`… | [`Select`], [`SelectedOperation`] | a selected send may wait (below) |
//! | `never()` | [`never()`](fn@never) | |
//! | `after`, `tick`, `at` | `weft::time::after`, `tick`, `at_instant` | value: the time received |
//! | dropping the last `Receiver` drops the buffered values | the same | |
//!
//! What differs, on purpose (Go's semantics, which weft follows where the two disagree):
//!
//! | | crossbeam-channel | weft (as Go) |
//! |---|---|---|
//! | a `send` arm's value | evaluated only if that arm runs | evaluated once, before the select (Go's `select`); dropped if another arm wins |
//! | `tick(Duration::ZERO)` | a ticker that is always ready | panics: "non-positive interval for tick" (Go's `NewTicker`) |
//! | a timer channel's value | the instant it was due | the time it was received (Go's `time.After`), never before it was due |
//! | a `Select` send operation | reserves the room: `SelectedOperation::send` never waits | sees the room: `send` waits only if another sender took it first (chan/dynamic.rs) |
//! | a rendezvous `send` | returns once a receiver took the value | the same (Go's unbuffered channel) |
//!
//! # Cancel safety
//! Cancellation (`Task::cancel`, a bound `Context`, shutdown) unwinds a blocked send, receive
//! or `select!` only if the operation did not complete; invariant 1 holds throughout:
//!
//! | operation | when the waiting task is cancelled |
//! |---|---|
//! | `recv`, `recv_timeout`, `recv_deadline`, `iter` | a value handed to it before the cancel is returned; else it unwinds and the channel's values stay for the other receivers |
//! | `send`, `send_timeout`, `send_deadline` | if a receiver took the value it returns `Ok`; else it unwinds and the value is dropped with the sender's frame (it never reached the channel) |
//! | `select!` (every arm kind) | the arm a peer completed before the cancel runs, with its value; else it unwinds and no arm took or gave anything |
//! | `try_send`, `try_recv` | never wait, never cancelled |
//!
//! Either way the cancellation is not lost: a task that completed its operation unwinds at
//! its next wait (sched/park.rs invariant 3). Checked by `tests/cancel_handoff.rs` (a
//! randomized stress over every hand-off kind), `tests/chan_drops.rs`, `tests/cancel.rs` and
//! the loom model `loom_chan::a_cancelled_receiver_keeps_or_leaves_the_value`.
//!
//! May call: `park` (reasons), `sched` (parks, cancellation), `stack` (waitq.rs: a compacted
//! entry's restore).
//! Called by: users, `time` (after, tick).
//!
//! Why Go's semantics, including a rendezvous `bounded(0)`: programs ported from Go rely on
//! `send` returning only once a receiver took the value. Why errors instead of Go's panic on a
//! send to a closed channel: in weft a channel closes when one side is gone, which is a normal
//! event for the other side, not a bug (crossbeam-channel made the same choice).
//! The core (one lock per channel, wait queues of entries, selectors) is in `core.rs`.

pub(crate) mod core;
mod dynamic;
mod spin_lock;

pub use dynamic::{
    ReadyTimeoutError, Select, SelectTimeoutError, SelectedOperation, TryReadyError, TrySelectError,
};

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use self::core::{Chan, RecvOutcome, SendOutcome, TryRecv, TrySend};

/// Creates a channel that holds up to `cap` values; `bounded(0)` is a rendezvous channel
/// (Go's unbuffered `make(chan T)`): `send` returns once a receiver has the value.
///
/// ```
/// weft::run(|| {
///     let (tx, rx) = weft::chan::bounded(0); // a rendezvous, like Go's make(chan int)
///     weft::spawn(move || tx.send(42).unwrap());
///     assert_eq!(rx.recv(), Ok(42));
///     // Every sender dropped: `recv` reports the channel closed.
///     assert!(rx.recv().is_err());
/// });
/// ```
pub fn bounded<T>(cap: usize) -> (Sender<T>, Receiver<T>) {
    pair(Chan::new(cap))
}

/// Creates a channel with no capacity limit: `send` never blocks.
///
/// ```
/// let (tx, rx) = weft::chan::unbounded();
/// for i in 0..3 {
///     tx.send(i).unwrap(); // works on plain threads too
/// }
/// drop(tx);
/// assert_eq!(rx.iter().collect::<Vec<_>>(), [0, 1, 2]);
/// ```
pub fn unbounded<T>() -> (Sender<T>, Receiver<T>) {
    pair(Chan::new(usize::MAX))
}

fn pair<T>(chan: Chan<T>) -> (Sender<T>, Receiver<T>) {
    let chan = Arc::new(chan);
    (Sender { chan: chan.clone() }, Receiver { chan })
}

/// A receiver that never receives anything and never closes: an arm of a [`select!`](crate::select!) that is
/// switched off (crossbeam-channel's `never`), e.g. `recv(if on { &rx } else { &off })` with
/// `let off = weft::chan::never();`.
pub fn never<T>() -> Receiver<T> {
    // No `Sender` exists; the count stays at one so the channel never closes.
    Receiver {
        chan: Arc::new(Chan::new(0)),
    }
}

/// A receiver over a channel with no sender, fed by a timer (`time::after`, `time::tick`).
pub(crate) fn timer_receiver<T>(
    first: Instant,
    period: Option<Duration>,
    make: fn(Instant) -> T,
) -> Receiver<T> {
    let chan = Chan::with_timer(first, period, make);
    // No `Sender` exists; the count stays at one so the channel never closes from that side.
    Receiver {
        chan: Arc::new(chan),
    }
}

/// Parks the caller (task or thread) until woken or `deadline`, for `reason`; true if a
/// cancellation is pending, which the core answers by aborting its wait (core.rs invariant
/// 8). Always inlined into `park_send` and `park_recv`, as it was into the one caller it had
/// before reasons: an out-of-line call here cost the ping-pong path a call and its spills
/// (callgrind).
#[inline(always)]
fn park(deadline: Option<Instant>, reason: crate::park::ParkReason) -> bool {
    crate::sched::park_current_cancellable(deadline, reason)
}

/// [`park`] for a send (park/reason.rs invariant 1).
#[inline]
fn park_send(deadline: Option<Instant>) -> bool {
    park(deadline, crate::park::ParkReason::ChanSend)
}

/// [`park`] for a receive.
#[inline]
fn park_recv(deadline: Option<Instant>) -> bool {
    park(deadline, crate::park::ParkReason::ChanRecv)
}

/// A blocking send until `deadline`; a cancellation that found the value not taken unwinds
/// here, the value dropped with this frame (core.rs invariant 8).
#[inline(always)]
fn send_until<T>(chan: &Chan<T>, mut value: T, deadline: Option<Instant>) -> SendOutcome<T> {
    loop {
        match chan.send(value, deadline, &mut park_send) {
            SendOutcome::Cancelled(back) => {
                value = back;
                // Returns only if the cancellation was stale: send again.
                crate::sched::unwind_if_cancelled();
            }
            outcome => return outcome,
        }
    }
}

/// A blocking receive until `deadline`; a cancellation with nothing handed over unwinds here.
#[inline(always)]
fn recv_until<T>(chan: &Chan<T>, deadline: Option<Instant>) -> RecvOutcome<T> {
    loop {
        match chan.recv(deadline, &mut park_recv) {
            RecvOutcome::Cancelled => crate::sched::unwind_if_cancelled(),
            outcome => return outcome,
        }
    }
}

/// The sending side of a channel. Clone it for more senders.
pub struct Sender<T> {
    chan: Arc<Chan<T>>,
}

/// The receiving side of a channel. Clone it for more receivers; each value goes to one.
pub struct Receiver<T> {
    chan: Arc<Chan<T>>,
}

impl<T> Sender<T> {
    /// Sends `value`, parking while the channel is full (for a rendezvous channel: until a
    /// receiver takes it).
    ///
    /// # Errors
    /// When every receiver is gone; the error gives the value back.
    pub fn send(&self, value: T) -> Result<(), SendError<T>> {
        crate::sched::coop::spend();
        match send_until(&self.chan, value, None) {
            SendOutcome::Sent => Ok(()),
            SendOutcome::Disconnected(value)
            | SendOutcome::Timeout(value)
            | SendOutcome::Cancelled(value) => Err(SendError(value)),
        }
    }

    /// Sends `value` if that can be done without waiting.
    ///
    /// # Errors
    /// [`TrySendError::Full`] if it would wait, [`TrySendError::Disconnected`] if every receiver
    /// is gone; both give the value back.
    pub fn try_send(&self, value: T) -> Result<(), TrySendError<T>> {
        // A loop of `try_send` that never finds room must still let its worker's other tasks
        // run (sched/coop.rs invariant 2).
        crate::sched::coop::spend();
        match self.chan.try_send(value) {
            TrySend::Sent => Ok(()),
            TrySend::Full(value) => Err(TrySendError::Full(value)),
            TrySend::Disconnected(value) => Err(TrySendError::Disconnected(value)),
        }
    }

    /// Like [`send`](Self::send), waiting at most `timeout`.
    ///
    /// # Errors
    /// On timeout or disconnection; both give the value back.
    pub fn send_timeout(&self, value: T, timeout: Duration) -> Result<(), SendTimeoutError<T>> {
        match Instant::now().checked_add(timeout) {
            Some(deadline) => self.send_deadline(value, deadline),
            None => self
                .send(value)
                .map_err(|e| SendTimeoutError::Disconnected(e.0)),
        }
    }

    /// Like [`send`](Self::send), waiting until `deadline` at the latest.
    ///
    /// # Errors
    /// On timeout or disconnection; both give the value back.
    pub fn send_deadline(&self, value: T, deadline: Instant) -> Result<(), SendTimeoutError<T>> {
        crate::sched::coop::spend();
        match send_until(&self.chan, value, Some(deadline)) {
            SendOutcome::Sent => Ok(()),
            SendOutcome::Disconnected(value) => Err(SendTimeoutError::Disconnected(value)),
            SendOutcome::Timeout(value) | SendOutcome::Cancelled(value) => {
                Err(SendTimeoutError::Timeout(value))
            }
        }
    }

    /// The number of values in the buffer.
    pub fn len(&self) -> usize {
        self.chan.len()
    }

    /// True if the buffer holds no value.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The capacity given to [`bounded`]; `None` for [`unbounded`].
    pub fn capacity(&self) -> Option<usize> {
        Some(self.chan.capacity()).filter(|&c| c != usize::MAX)
    }

    /// True if the buffer is full: a `send` would wait. A rendezvous channel is always full
    /// (and empty), an unbounded one never.
    pub fn is_full(&self) -> bool {
        self.capacity().is_some_and(|cap| self.len() >= cap)
    }

    /// Whether `other` is a handle of the same channel.
    pub fn same_channel(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.chan, &other.chan)
    }

    #[doc(hidden)]
    pub fn __select_arm(&self, value: T) -> core::SendArm<'_, T> {
        core::SendArm::new(&self.chan, value)
    }
}

impl<T> Receiver<T> {
    /// Receives a value, parking while the channel is empty.
    ///
    /// # Errors
    /// When the channel is empty and every sender is gone.
    pub fn recv(&self) -> Result<T, RecvError> {
        crate::sched::coop::spend();
        match recv_until(&self.chan, None) {
            RecvOutcome::Got(value) => Ok(value),
            RecvOutcome::Disconnected | RecvOutcome::Timeout | RecvOutcome::Cancelled => {
                Err(RecvError)
            }
        }
    }

    /// Receives a value if one is ready.
    ///
    /// # Errors
    /// [`TryRecvError::Empty`] if it would wait, [`TryRecvError::Disconnected`] if the channel
    /// is empty and every sender is gone.
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        // As in `try_send`.
        crate::sched::coop::spend();
        match self.chan.try_recv() {
            TryRecv::Got(value) => Ok(value),
            TryRecv::Empty => Err(TryRecvError::Empty),
            TryRecv::Disconnected => Err(TryRecvError::Disconnected),
        }
    }

    /// Like [`recv`](Self::recv), waiting at most `timeout`.
    ///
    /// # Errors
    /// On timeout, or when the channel is empty and every sender is gone.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        match Instant::now().checked_add(timeout) {
            Some(deadline) => self.recv_deadline(deadline),
            None => self.recv().map_err(|_| RecvTimeoutError::Disconnected),
        }
    }

    /// Like [`recv`](Self::recv), waiting until `deadline` at the latest.
    ///
    /// # Errors
    /// On timeout, or when the channel is empty and every sender is gone.
    pub fn recv_deadline(&self, deadline: Instant) -> Result<T, RecvTimeoutError> {
        crate::sched::coop::spend();
        match recv_until(&self.chan, Some(deadline)) {
            RecvOutcome::Got(value) => Ok(value),
            RecvOutcome::Disconnected => Err(RecvTimeoutError::Disconnected),
            RecvOutcome::Timeout | RecvOutcome::Cancelled => Err(RecvTimeoutError::Timeout),
        }
    }

    /// A blocking iterator: yields values until the channel is closed and drained.
    pub fn iter(&self) -> Iter<'_, T> {
        Iter { rx: self }
    }

    /// A non-blocking iterator over the values ready now.
    pub fn try_iter(&self) -> TryIter<'_, T> {
        TryIter { rx: self }
    }

    /// The number of values in the buffer.
    pub fn len(&self) -> usize {
        self.chan.len()
    }

    /// True if the buffer holds no value.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The capacity given to [`bounded`]; `None` for [`unbounded`].
    pub fn capacity(&self) -> Option<usize> {
        Some(self.chan.capacity()).filter(|&c| c != usize::MAX)
    }

    /// True if the buffer is full: a `send` would wait. A rendezvous channel is always full
    /// (and empty), an unbounded one never.
    pub fn is_full(&self) -> bool {
        self.capacity().is_some_and(|cap| self.len() >= cap)
    }

    /// Whether `other` is a handle of the same channel.
    pub fn same_channel(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.chan, &other.chan)
    }

    #[doc(hidden)]
    pub fn __select_arm(&self) -> core::RecvArm<'_, T> {
        core::RecvArm::new(&self.chan)
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        // Relaxed: a new handle is made from a live one, so the count cannot reach zero
        // meanwhile (as `Arc::clone`).
        self.chan.senders.fetch_add(1, Ordering::Relaxed);
        Sender {
            chan: self.chan.clone(),
        }
    }
}

impl<T> Clone for Receiver<T> {
    fn clone(&self) -> Self {
        // Relaxed: as for `Sender::clone`.
        self.chan.receivers.fetch_add(1, Ordering::Relaxed);
        Receiver {
            chan: self.chan.clone(),
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        // AcqRel: the last dropper must see every other handle's use before closing (as in
        // `Arc::drop`); the close itself is ordered by the channel lock.
        if self.chan.senders.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.chan.disconnect_senders();
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        // AcqRel: as in `Sender::drop`.
        if self.chan.receivers.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.chan.disconnect_receivers();
        }
    }
}

// A channel's state is behind its lock, and every operation leaves it consistent at each
// step (core.rs invariants): a panic in the middle of user code holding a handle cannot
// leave it half-changed, as for std's `mpsc` handles.
impl<T> std::panic::UnwindSafe for Sender<T> {}
impl<T> std::panic::RefUnwindSafe for Sender<T> {}
impl<T> std::panic::UnwindSafe for Receiver<T> {}
impl<T> std::panic::RefUnwindSafe for Receiver<T> {}

impl<T> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sender").finish_non_exhaustive()
    }
}

impl<T> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Receiver").finish_non_exhaustive()
    }
}

/// Blocking iterator over a [`Receiver`]; ends when the channel is closed and drained.
#[derive(Debug)]
pub struct Iter<'a, T> {
    rx: &'a Receiver<T>,
}

impl<T> Iterator for Iter<'_, T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        self.rx.recv().ok()
    }
}

/// Non-blocking iterator over a [`Receiver`]'s ready values.
#[derive(Debug)]
pub struct TryIter<'a, T> {
    rx: &'a Receiver<T>,
}

impl<T> Iterator for TryIter<'_, T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        self.rx.try_recv().ok()
    }
}

/// Owning blocking iterator over a [`Receiver`].
#[derive(Debug)]
pub struct IntoIter<T> {
    rx: Receiver<T>,
}

impl<T> Iterator for IntoIter<T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        self.rx.recv().ok()
    }
}

impl<T> IntoIterator for Receiver<T> {
    type Item = T;
    type IntoIter = IntoIter<T>;
    fn into_iter(self) -> IntoIter<T> {
        IntoIter { rx: self }
    }
}

impl<'a, T> IntoIterator for &'a Receiver<T> {
    type Item = T;
    type IntoIter = Iter<'a, T>;
    fn into_iter(self) -> Iter<'a, T> {
        self.iter()
    }
}

impl<T> Sender<T> {
    /// Sends `value` from async code: a future that completes once the value is in the
    /// channel (for a rendezvous channel: once a receiver took it), without blocking the
    /// executor's thread. Tasks and async code share the channel: a blocked `recv` in a task
    /// takes the value as from any sender.
    ///
    /// Dropping the future before it completed drops the value if no receiver took it (as a
    /// cancelled blocking `send` does); once it completed, the value was delivered.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let (tx, rx) = weft::chan::bounded::<u32>(0);
    /// let consumer = rt.spawn(move || rx.iter().sum::<u32>()); // a task, blocking calls
    /// weft::future::block_on(async move {
    ///     for i in 1..=3 {
    ///         tx.send_async(i).await.unwrap(); // async code, awaiting each hand-off
    ///     }
    /// });
    /// assert_eq!(consumer.join().unwrap(), 6);
    /// ```
    ///
    /// # Errors
    /// The future gives [`SendError`] with the value back when every receiver is gone.
    pub fn send_async(&self, value: T) -> SendFuture<'_, T> {
        SendFuture {
            tx: self,
            wait: core::SendWait::new(value),
        }
    }
}

impl<T> Receiver<T> {
    /// Receives from async code: a future that completes with the next value, without
    /// blocking the executor's thread.
    ///
    /// Cancel safe: dropping the future before it completed takes nothing from the channel
    /// (it waited only for a value to be ready, chan/async_ops.rs invariant 2), so it may be
    /// a branch of a `select!` that loses.
    ///
    /// ```
    /// let rt = weft::Runtime::new().unwrap();
    /// let (tx, rx) = weft::chan::unbounded::<&str>();
    /// rt.spawn(move || tx.send("from a task").unwrap());
    /// let got = weft::future::block_on(async move { rx.recv_async().await });
    /// assert_eq!(got, Ok("from a task"));
    /// ```
    ///
    /// # Errors
    /// The future gives [`RecvError`] when the channel is empty and every sender is gone.
    pub fn recv_async(&self) -> RecvFuture<'_, T> {
        RecvFuture {
            rx: self,
            wait: core::RecvWait::new(),
        }
    }

    /// The values of the channel as a stream (with the `futures` feature, a
    /// `futures_core::Stream`): [`RecvStream::recv`] gives each value, `None` once the channel
    /// is closed and drained. Cancel safe, as [`recv_async`](Self::recv_async).
    pub fn into_stream(self) -> RecvStream<T> {
        RecvStream {
            rx: self,
            wait: core::RecvWait::new(),
        }
    }
}

/// The future of [`Sender::send_async`].
#[must_use = "futures do nothing unless awaited"]
pub struct SendFuture<'a, T> {
    tx: &'a Sender<T>,
    wait: core::SendWait<T>,
}

impl<T> std::future::Future for SendFuture<'_, T> {
    type Output = Result<(), SendError<T>>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let this = &mut *self;
        this.wait.poll_send(&this.tx.chan, cx).map_err(SendError)
    }
}

impl<T> Drop for SendFuture<'_, T> {
    fn drop(&mut self) {
        self.wait.release(&self.tx.chan);
    }
}

impl<T> fmt::Debug for SendFuture<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SendFuture").finish_non_exhaustive()
    }
}

/// The future of [`Receiver::recv_async`].
#[must_use = "futures do nothing unless awaited"]
pub struct RecvFuture<'a, T> {
    rx: &'a Receiver<T>,
    wait: core::RecvWait<T>,
}

impl<T> std::future::Future for RecvFuture<'_, T> {
    type Output = Result<T, RecvError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let this = &mut *self;
        this.wait
            .poll_recv(&this.rx.chan, cx)
            .map(|v| v.ok_or(RecvError))
    }
}

impl<T> Drop for RecvFuture<'_, T> {
    fn drop(&mut self) {
        self.wait.release(&self.rx.chan);
    }
}

impl<T> fmt::Debug for RecvFuture<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecvFuture").finish_non_exhaustive()
    }
}

/// A [`Receiver`] as a stream of its values ([`Receiver::into_stream`]); with weft's
/// `futures` feature it implements `futures_core::Stream`.
///
/// ```
/// let (tx, rx) = weft::chan::unbounded::<u32>();
/// for i in 0..3 {
///     tx.send(i).unwrap();
/// }
/// drop(tx);
/// let mut values = rx.into_stream();
/// let sum = weft::future::block_on(async move {
///     let mut sum = 0;
///     while let Some(v) = values.recv().await {
///         sum += v;
///     }
///     sum
/// });
/// assert_eq!(sum, 3);
/// ```
pub struct RecvStream<T> {
    rx: Receiver<T>,
    wait: core::RecvWait<T>,
}

impl<T> RecvStream<T> {
    /// The next value: `None` once the channel is closed and drained.
    pub fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<T>> {
        let this = &mut *self;
        this.wait.poll_recv(&this.rx.chan, cx)
    }

    /// A future of the next value ([`poll_next`](Self::poll_next)); `StreamExt::next` with
    /// the `futures` feature and the `futures` crate.
    pub fn recv(&mut self) -> impl std::future::Future<Output = Option<T>> + '_ {
        std::future::poll_fn(move |cx| std::pin::Pin::new(&mut *self).poll_next(cx))
    }

    /// The receiver back.
    pub fn into_inner(mut self) -> Receiver<T> {
        self.wait.release(&self.rx.chan);
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never used nor dropped again; the receiver is moved out once, and
        // the wait (released above, so it holds nothing) is forgotten.
        unsafe { std::ptr::read(&this.rx) }
    }
}

impl<T> Drop for RecvStream<T> {
    fn drop(&mut self) {
        self.wait.release(&self.rx.chan);
    }
}

#[cfg(feature = "futures")]
impl<T> futures_core::Stream for RecvStream<T> {
    type Item = T;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<T>> {
        RecvStream::poll_next(self, cx)
    }
}

impl<T> fmt::Debug for RecvStream<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecvStream").finish_non_exhaustive()
    }
}

/// [`Sender::send`] failed: every receiver is gone. Holds the value back.
#[derive(PartialEq, Eq, Clone, Copy)]
pub struct SendError<T>(pub T);

/// [`Sender::try_send`] failed.
#[derive(PartialEq, Eq, Clone, Copy)]
pub enum TrySendError<T> {
    /// The channel is full (a rendezvous channel: no receiver is waiting).
    Full(T),
    /// Every receiver is gone.
    Disconnected(T),
}

/// [`Sender::send_timeout`] failed.
#[derive(PartialEq, Eq, Clone, Copy)]
pub enum SendTimeoutError<T> {
    /// The deadline passed while the channel stayed full.
    Timeout(T),
    /// Every receiver is gone.
    Disconnected(T),
}

/// [`Receiver::recv`] failed: the channel is empty and every sender is gone.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub struct RecvError;

/// [`Receiver::try_recv`] failed.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum TryRecvError {
    /// No value is ready.
    Empty,
    /// The channel is empty and every sender is gone.
    Disconnected,
}

/// [`Receiver::recv_timeout`] failed.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum RecvTimeoutError {
    /// The deadline passed while the channel stayed empty.
    Timeout,
    /// The channel is empty and every sender is gone.
    Disconnected,
}

impl<T> SendError<T> {
    /// The value that was not sent.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> TrySendError<T> {
    /// The value that was not sent.
    pub fn into_inner(self) -> T {
        match self {
            TrySendError::Full(v) | TrySendError::Disconnected(v) => v,
        }
    }
}

impl<T> SendTimeoutError<T> {
    /// The value that was not sent.
    pub fn into_inner(self) -> T {
        match self {
            SendTimeoutError::Timeout(v) | SendTimeoutError::Disconnected(v) => v,
        }
    }
}

impl<T> fmt::Debug for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SendError(..)")
    }
}

impl<T> fmt::Debug for TrySendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrySendError::Full(_) => f.write_str("Full(..)"),
            TrySendError::Disconnected(_) => f.write_str("Disconnected(..)"),
        }
    }
}

impl<T> fmt::Debug for SendTimeoutError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendTimeoutError::Timeout(_) => f.write_str("Timeout(..)"),
            SendTimeoutError::Disconnected(_) => f.write_str("Disconnected(..)"),
        }
    }
}

impl<T> fmt::Display for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("sending on a closed channel")
    }
}

impl<T> fmt::Display for TrySendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrySendError::Full(_) => f.write_str("sending on a full channel"),
            TrySendError::Disconnected(_) => f.write_str("sending on a closed channel"),
        }
    }
}

impl<T> fmt::Display for SendTimeoutError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendTimeoutError::Timeout(_) => f.write_str("timed out sending on a full channel"),
            SendTimeoutError::Disconnected(_) => f.write_str("sending on a closed channel"),
        }
    }
}

impl fmt::Display for RecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("receiving on an empty and closed channel")
    }
}

impl fmt::Display for TryRecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TryRecvError::Empty => f.write_str("receiving on an empty channel"),
            TryRecvError::Disconnected => f.write_str("receiving on an empty and closed channel"),
        }
    }
}

impl fmt::Display for RecvTimeoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecvTimeoutError::Timeout => f.write_str("timed out receiving on an empty channel"),
            RecvTimeoutError::Disconnected => {
                f.write_str("receiving on an empty and closed channel")
            }
        }
    }
}

impl<T> std::error::Error for SendError<T> {}
impl<T> std::error::Error for TrySendError<T> {}
impl<T> std::error::Error for SendTimeoutError<T> {}
impl std::error::Error for RecvError {}
impl std::error::Error for TryRecvError {}
impl std::error::Error for RecvTimeoutError {}

pub mod select;
