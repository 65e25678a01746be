//! [`Select`]: a select over a set of operations known only at run time — a fan-in over a
//! `Vec<Receiver<T>>`, a set that grows and shrinks — as crossbeam-channel's `Select` (and
//! Go's `reflect.Select`).
//!
//! ```
//! use weft::chan::Select;
//! weft::run(|| {
//!     let channels: Vec<_> = (0..100).map(|_| weft::chan::bounded::<usize>(1)).collect();
//!     channels[42].0.send(42).unwrap();
//!     let mut sel = Select::new();
//!     for (_, rx) in &channels {
//!         sel.recv(rx);
//!     }
//!     let oper = sel.select();
//!     let i = oper.index();
//!     assert_eq!(oper.recv(&channels[i].1), Ok(42));
//! });
//! ```
//!
//! Owns: the operations added to a `Select` — each one arm of the core's select loop
//! (chan/arms.rs), kept from call to call so a select builds no list of its own — and the
//! received value a [`SelectedOperation`] carries.
//!
//! Semantics, against crossbeam-channel's:
//! - A selected **receive** is complete when `select` returns (the value was taken, exactly
//!   as by `select!`); [`SelectedOperation::recv`] hands it over and never waits.
//! - A selected **send** means the channel was ready for a send (a receiver waiting, room in
//!   the buffer, or closed); [`SelectedOperation::send`] sends, and waits only if a competing
//!   sender took that room in between (crossbeam reserves it; weft hands values over through
//!   the waiting parties' entries, so a send with no value yet cannot hold one).
//! - `ready` and its variants wait for readiness and take nothing (core.rs invariant 9).
//! - Dropping a `SelectedOperation` without completing it panics, as in crossbeam; the value
//!   a selected receive took is dropped with it.
//!
//! Costs: registering and polling are O(n) in the operations; each poll takes each channel's
//! lock once, as `select!` does. Arms past 64 use heap scratch lists.
//!
//! May call: `chan::core`, `park`, `sched::coop`. Called by: users.

use std::marker::PhantomData;
use std::time::{Duration, Instant};

use super::core::{ArmSlot, ProbeArm, RecvArm, SelectArm, Selected};
use super::{Receiver, RecvError, SendError, Sender};

/// One operation of a [`Select`], type-erased; lent to the select loop as the arm of its
/// current mode ([`set_probe`](Self::set_probe)).
trait Operation<'a>: 'a {
    /// The arm for the next select: a readiness wait (`probe`, as for `ready`) or the full
    /// operation.
    fn set_probe(&mut self, probe: bool);
    /// The arm of the current mode.
    fn arm(&mut self) -> &mut dyn SelectArm;
    /// After the select picked this operation as a full one: its outcome, erased.
    fn outcome(&mut self) -> Outcome;
    /// The channel's address, to check what the caller completes an operation with.
    fn chan_addr(&self) -> usize;
}

/// A receive operation: the arm that takes the value, and the probe for `ready`.
struct RecvOp<'a, T> {
    take: RecvArm<'a, T>,
    probe: ProbeArm<'a, T>,
    probing: bool,
}

impl<'a, T: 'a> Operation<'a> for RecvOp<'a, T> {
    fn set_probe(&mut self, probe: bool) {
        self.probing = probe;
    }

    fn arm(&mut self) -> &mut dyn SelectArm {
        if self.probing {
            &mut self.probe
        } else {
            &mut self.take
        }
    }

    fn outcome(&mut self) -> Outcome {
        let result: Result<T, RecvError> = self
            .take
            .take()
            .expect("weft: a selected receive has its outcome")
            .ok_or(RecvError);
        Outcome::received(result)
    }

    fn chan_addr(&self) -> usize {
        self.take.chan_addr()
    }
}

/// A send operation: a probe of the sending side (module doc).
struct SendOp<'a, T> {
    probe: ProbeArm<'a, T>,
}

impl<'a, T: 'a> Operation<'a> for SendOp<'a, T> {
    fn set_probe(&mut self, _probe: bool) {}

    fn arm(&mut self) -> &mut dyn SelectArm {
        &mut self.probe
    }

    fn outcome(&mut self) -> Outcome {
        self.probe.take();
        Outcome::Send
    }

    fn chan_addr(&self) -> usize {
        self.probe.chan_addr()
    }
}

/// What a selected operation left for its [`SelectedOperation`].
enum Outcome {
    /// A send: the caller sends.
    Send,
    /// A receive's `Result<T, RecvError>`, boxed and erased; `drop` frees it.
    Received {
        value: *mut (),
        drop: unsafe fn(*mut ()),
    },
}

impl Outcome {
    fn received<T>(result: Result<T, RecvError>) -> Outcome {
        /// # Safety
        /// `value` came from `Box::into_raw` of a `Result<T, RecvError>`, not freed since.
        unsafe fn drop_boxed<T>(value: *mut ()) {
            // SAFETY: the caller's contract.
            drop(unsafe { Box::from_raw(value.cast::<Result<T, RecvError>>()) });
        }
        Outcome::Received {
            value: Box::into_raw(Box::new(result)).cast(),
            drop: drop_boxed::<T>,
        }
    }
}

/// The set of operations of a run-time select. Add operations with [`recv`](Self::recv) and
/// [`send`](Self::send) (each returns its index), then wait with [`select`](Self::select)
/// and friends, as often as needed.
pub struct Select<'a> {
    /// The live operations, in the order added.
    ops: Vec<Box<dyn Operation<'a>>>,
    /// The index each of `ops` was given (indices of removed operations are not reused).
    ids: Vec<usize>,
    next_id: usize,
    biased: bool,
}

/// The operation a [`Select`] picked; complete it with [`recv`](Self::recv) or
/// [`send`](Self::send) on the channel whose index [`index`](Self::index) gives.
#[must_use = "a selected operation must be completed with `recv` or `send`"]
pub struct SelectedOperation<'a> {
    index: usize,
    chan_addr: usize,
    outcome: Option<Outcome>,
    _channels: PhantomData<&'a ()>,
}

/// [`Select::try_select`] found no operation ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrySelectError;

/// [`Select::select_timeout`] timed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SelectTimeoutError;

/// [`Select::try_ready`] found no operation ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TryReadyError;

/// [`Select::ready_timeout`] timed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadyTimeoutError;

macro_rules! error_display {
    ($($ty:ident => $text:literal),*) => {$(
        impl std::fmt::Display for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str($text)
            }
        }
        impl std::error::Error for $ty {}
    )*};
}

error_display!(
    TrySelectError => "all operations in the selection would block",
    SelectTimeoutError => "timed out waiting on select",
    TryReadyError => "all operations in the selection would block",
    ReadyTimeoutError => "timed out waiting on ready"
);

/// How long a wait may block.
#[derive(Clone, Copy)]
enum Wait {
    Now,
    Until(Option<Instant>),
}

impl Wait {
    fn after(timeout: Duration) -> Wait {
        Wait::Until(Instant::now().checked_add(timeout))
    }
}

impl<'a> ArmSlot for Box<dyn Operation<'a>> {
    #[inline]
    fn arm(&mut self) -> &mut dyn SelectArm {
        Operation::arm(&mut **self)
    }
}

impl<'a> Select<'a> {
    /// An empty set; when several operations are ready, one is picked at random.
    pub fn new() -> Select<'a> {
        Select {
            ops: Vec::new(),
            ids: Vec::new(),
            next_id: 0,
            biased: false,
        }
    }

    /// An empty set that, when several operations are ready, picks the one added first
    /// (`select_biased!`).
    pub fn new_biased() -> Select<'a> {
        Select {
            biased: true,
            ..Select::new()
        }
    }

    /// Adds a receive on `rx`; returns its index.
    pub fn recv<T: 'a>(&mut self, rx: &'a Receiver<T>) -> usize {
        self.push(Box::new(RecvOp {
            take: RecvArm::new(&rx.chan),
            probe: ProbeArm::new(&rx.chan, false),
            probing: false,
        }))
    }

    /// Adds a send on `tx`; returns its index (module doc: what a selected send means).
    pub fn send<T: 'a>(&mut self, tx: &'a Sender<T>) -> usize {
        self.push(Box::new(SendOp {
            probe: ProbeArm::new(&tx.chan, true),
        }))
    }

    fn push(&mut self, op: Box<dyn Operation<'a>>) -> usize {
        let id = self.next_id;
        self.next_id += 1;
        self.ops.push(op);
        self.ids.push(id);
        id
    }

    /// Removes the operation with index `index`; the indices of the others stay.
    ///
    /// # Panics
    /// If there is no operation with that index (never added, or removed already).
    pub fn remove(&mut self, index: usize) {
        let at = self.ids.iter().position(|&id| id == index);
        let at = at.unwrap_or_else(|| panic!("no operation with index {index} in this Select"));
        self.ops.remove(at);
        self.ids.remove(at);
    }

    /// Picks a ready operation and completes it (a receive), or `Err` if none is ready.
    ///
    /// # Errors
    /// When no operation is ready now.
    pub fn try_select(&mut self) -> Result<SelectedOperation<'a>, TrySelectError> {
        self.run(false, Wait::Now)
            .map(|i| self.selected(i))
            .ok_or(TrySelectError)
    }

    /// Waits until an operation is ready and picks it (a receive is completed then).
    ///
    /// # Panics
    /// If the set is empty: nothing could ever be selected.
    pub fn select(&mut self) -> SelectedOperation<'a> {
        let i = self
            .run(false, Wait::Until(None))
            .expect("a wait with no deadline ends with an operation");
        self.selected(i)
    }

    /// [`select`](Self::select), waiting at most `timeout`.
    ///
    /// # Errors
    /// When no operation was ready within `timeout`.
    pub fn select_timeout(
        &mut self,
        timeout: Duration,
    ) -> Result<SelectedOperation<'a>, SelectTimeoutError> {
        self.run(false, Wait::after(timeout))
            .map(|i| self.selected(i))
            .ok_or(SelectTimeoutError)
    }

    /// [`select`](Self::select), waiting until `deadline` at the latest.
    ///
    /// # Errors
    /// When no operation was ready by `deadline`.
    pub fn select_deadline(
        &mut self,
        deadline: Instant,
    ) -> Result<SelectedOperation<'a>, SelectTimeoutError> {
        self.run(false, Wait::Until(Some(deadline)))
            .map(|i| self.selected(i))
            .ok_or(SelectTimeoutError)
    }

    /// The index of an operation that is ready now, taking nothing.
    ///
    /// # Errors
    /// When none is.
    pub fn try_ready(&mut self) -> Result<usize, TryReadyError> {
        self.run(true, Wait::Now)
            .map(|at| self.ids[at])
            .ok_or(TryReadyError)
    }

    /// Waits until an operation is ready and returns its index, taking nothing: by the time
    /// the caller acts on it another party may have taken it (a `try_recv` tells).
    ///
    /// # Panics
    /// If the set is empty.
    pub fn ready(&mut self) -> usize {
        let at = self
            .run(true, Wait::Until(None))
            .expect("a wait with no deadline ends with an operation");
        self.ids[at]
    }

    /// [`ready`](Self::ready), waiting at most `timeout`.
    ///
    /// # Errors
    /// When no operation was ready within `timeout`.
    pub fn ready_timeout(&mut self, timeout: Duration) -> Result<usize, ReadyTimeoutError> {
        self.run(true, Wait::after(timeout))
            .map(|at| self.ids[at])
            .ok_or(ReadyTimeoutError)
    }

    /// [`ready`](Self::ready), waiting until `deadline` at the latest.
    ///
    /// # Errors
    /// When no operation was ready by `deadline`.
    pub fn ready_deadline(&mut self, deadline: Instant) -> Result<usize, ReadyTimeoutError> {
        self.run(true, Wait::Until(Some(deadline)))
            .map(|at| self.ids[at])
            .ok_or(ReadyTimeoutError)
    }

    /// The select loop over the live operations (`probe`: readiness only); the position in
    /// `ops` of the one picked.
    fn run(&mut self, probe: bool, wait: Wait) -> Option<usize> {
        for op in &mut self.ops {
            op.set_probe(probe);
        }
        assert!(
            !self.ops.is_empty() || !matches!(wait, Wait::Until(None)),
            "weft: Select with no operations would wait for ever"
        );
        let (deadline, default) = match wait {
            Wait::Now => (None, true),
            Wait::Until(deadline) => (deadline, false),
        };
        match super::select::run(&mut self.ops, deadline, default, self.biased) {
            Selected::Arm(k) => Some(k),
            Selected::Timeout | Selected::Default => None,
        }
    }

    /// The `SelectedOperation` of `ops[at]`, which the select loop picked.
    fn selected(&mut self, at: usize) -> SelectedOperation<'a> {
        let op = &mut self.ops[at];
        SelectedOperation {
            index: self.ids[at],
            chan_addr: op.chan_addr(),
            outcome: Some(op.outcome()),
            _channels: PhantomData,
        }
    }
}

impl Default for Select<'_> {
    fn default() -> Self {
        Select::new()
    }
}

impl std::fmt::Debug for Select<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Select")
            .field("operations", &self.ops.len())
            .field("biased", &self.biased)
            .finish()
    }
}

impl<'a> SelectedOperation<'a> {
    /// The index [`Select::recv`] or [`Select::send`] gave the operation.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Completes a selected receive: its value, or `Err` if the channel was closed.
    ///
    /// # Panics
    /// If `rx` is not the receiver of the selected operation, or it is a send.
    pub fn recv<T>(mut self, rx: &Receiver<T>) -> Result<T, RecvError> {
        assert!(
            self.is_on(std::ptr::from_ref(&*rx.chan) as usize),
            "passed a receiver that wasn't selected"
        );
        match self.outcome.take() {
            Some(Outcome::Received { value, .. }) => {
                // SAFETY: the channel is `rx`'s (checked above), whose values are `T`s, so the
                // box `Outcome::received` made holds a `Result<T, RecvError>`.
                *unsafe { Box::from_raw(value.cast::<Result<T, RecvError>>()) }
            }
            _ => panic!("the selected operation is a send, not a receive"),
        }
    }

    /// Completes a selected send of `value` (module doc: it waits only if another sender
    /// took the room first).
    ///
    /// # Errors
    /// When every receiver is gone; the error gives the value back.
    ///
    /// # Panics
    /// If `tx` is not the sender of the selected operation, or it is a receive.
    pub fn send<T>(mut self, tx: &Sender<T>, value: T) -> Result<(), SendError<T>> {
        assert!(
            self.is_on(std::ptr::from_ref(&*tx.chan) as usize),
            "passed a sender that wasn't selected"
        );
        match self.outcome.take() {
            Some(Outcome::Send) => tx.send(value),
            _ => panic!("the selected operation is a receive, not a send"),
        }
    }

    fn is_on(&self, chan_addr: usize) -> bool {
        self.chan_addr == chan_addr
    }
}

impl Drop for SelectedOperation<'_> {
    fn drop(&mut self) {
        let Some(outcome) = self.outcome.take() else {
            return;
        };
        if let Outcome::Received { value, drop } = outcome {
            // SAFETY: made by `Outcome::received` with this `drop`, not freed: the outcome
            // was never taken.
            unsafe { drop(value) };
        }
        if !std::thread::panicking() {
            panic!("dropped `SelectedOperation` without completing the operation");
        }
    }
}

impl std::fmt::Debug for SelectedOperation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SelectedOperation")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}
