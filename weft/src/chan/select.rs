//! `select!`: wait on several channel operations, run the first that completes.
//!
//! ```
//! use std::time::Duration;
//! weft::run(|| {
//!     let (tx, rx) = weft::chan::bounded::<i32>(1);
//!     let (_quit_tx, quit) = weft::chan::bounded::<()>(0);
//!     tx.send(7).unwrap();
//!     weft::select! {
//!         recv(rx) -> v => assert_eq!(v, Ok(7)),
//!         recv(quit) -> _ => unreachable!(),
//!         after(Duration::from_secs(1)) => unreachable!(),
//!     }
//! });
//! ```
//!
//! Owns: the random number source of the poll order (one per thread), and the glue between
//! the macro and the core's `select` loop (`core.rs`, invariant 5).
//!
//! Arms, as in crossbeam-channel's macro, with Go's semantics:
//! - `recv(rx) -> res => body`: `res: Result<T, RecvError>`; a closed channel is ready
//!   (`Err`), as Go's receive from a closed channel is.
//! - `send(tx, value) -> res => body`: `res: Result<(), SendError<T>>`; `value` is evaluated
//!   once, up front, and dropped if another arm wins.
//! - `after(duration) => body`: at most one; runs if nothing completed within `duration`.
//!   (`recv(weft::time::after(d))` works too, as in Go.)
//! - `default => body`: at most one; runs if nothing is ready now — at one instant: before it
//!   runs, every channel of the select is looked at again under all their locks at once
//!   (core.rs invariant 5), so it never runs while some arm was ready throughout.
//! - `default(duration) => body`: crossbeam-channel's spelling of `after(duration)`.
//!
//! Inside `recv(..)` and `send(..)` a trailing comma is accepted.
//! [`select_biased!`](crate::select_biased!) polls the arms in the order written instead of a
//! random one; for a set of channels known only at run time, use
//! [`Select`](crate::chan::Select).
//!
//! Arms are separated by commas; after a block body (`=> { ... }`) the comma is optional,
//! as in crossbeam-channel. A malformed arm is a compile error that names it.
//!
//! A [`Context`](crate::context::Context) is waited on like a channel:
//! `recv(ctx.done()) -> _ => ...` runs when the context is cancelled or its deadline passes.
//!
//! When several arms are ready, one is picked uniformly at random: the arms are polled in a
//! fresh random order, and of the ready ones the first in a uniform permutation is uniform.
//!
//! May call: `chan::core`, `park`. Called by: the `select!` expansion.

use std::cell::Cell;
use std::time::Instant;

use super::core::ArmSlot;
pub use super::core::{RecvArm, SelectArm, Selected, SendArm};
use super::{RecvError, SendError};

thread_local! {
    /// xorshift64* state of this thread; seeded from the thread-local's address and the clock.
    static RNG: Cell<u64> = const { Cell::new(0) };
}

fn next_random() -> u64 {
    RNG.with(|rng| {
        let mut x = rng.get();
        if x == 0 {
            let seed = rng as *const Cell<u64> as u64
                ^ std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64);
            x = seed | 1;
        }
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        rng.set(x);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    })
}

/// A random index below `n`: the next draw of the poll order (core's `select`).
fn pick_random(n: usize) -> usize {
    (((next_random() >> 32) * n as u64) >> 32) as usize
}

fn park(deadline: Option<Instant>) -> bool {
    super::park(deadline, crate::park::ParkReason::Select)
}

/// Runs a select over `arms`: the `select!` expansion calls this.
#[doc(hidden)]
#[allow(private_bounds)] // `ArmSlot` is sealed: `&mut dyn SelectArm`, or `Select`'s arms
pub fn run<A: ArmSlot>(
    arms: &mut [A],
    deadline: Option<Instant>,
    default: bool,
    biased: bool,
) -> Selected {
    // coop.rs invariant 2, also with a `default` arm: a loop over such a select that never
    // finds an arm ready must still let its worker's other tasks run.
    crate::sched::coop::spend();
    // Biased: every draw takes the first arm not placed yet, the order written.
    let pick: &mut dyn FnMut(usize) -> usize = if biased { &mut |_| 0 } else { &mut pick_random };
    loop {
        match super::core::select(arms, deadline, default, pick, &mut park) {
            Some(selected) => return selected,
            // Cancelled with no arm completed (core.rs invariant 8); returns only if the
            // cancellation was stale, and the select polls again.
            None => crate::sched::unwind_if_cancelled(),
        }
    }
}

impl<T> RecvArm<'_, T> {
    /// The arm's result, if it is the one selected.
    #[doc(hidden)]
    pub fn __take(&mut self) -> Option<Result<T, RecvError>> {
        self.take().map(|value| value.ok_or(RecvError))
    }
}

impl<T> SendArm<'_, T> {
    /// The arm's result, if it is the one selected.
    #[doc(hidden)]
    pub fn __take(&mut self) -> Option<Result<(), SendError<T>>> {
        self.take().map(|left| match left {
            None => Ok(()),
            Some(value) => Err(SendError(value)),
        })
    }
}

/// Waits on several channel operations and runs the arm of the one that completes first, like
/// Go's `select`. See [`chan::select`](crate::chan::select) for the arms.
///
/// ```
/// weft::run(|| {
///     let (tx, rx) = weft::chan::bounded::<u32>(0);
///     weft::spawn(move || tx.send(1).unwrap());
///     let got = weft::select! {
///         recv(rx) -> v => v.unwrap(),
///         after(std::time::Duration::from_secs(5)) => 0,
///     };
///     assert_eq!(got, 1);
/// });
/// ```
///
/// Misuse is a compile error that names the arm:
///
/// ```compile_fail
/// // error: weft::select!: malformed arm `recv(rx)`: expected `recv(rx) -> res => body`
/// let (_tx, rx) = weft::chan::bounded::<u32>(0);
/// weft::select! { recv(rx) => 0, default => 1 };
/// ```
///
/// ```compile_fail
/// // error: weft::select!: more than one `after` arm
/// use std::time::Duration;
/// weft::select! { after(Duration::ZERO) => 0, after(Duration::ZERO) => 1 };
/// ```
///
/// ```compile_fail
/// // error: weft::select!: unknown arm `recieve`: expected ...
/// let (_tx, rx) = weft::chan::bounded::<u32>(0);
/// weft::select! { recieve(rx) -> _ => 0 };
/// ```
#[macro_export]
macro_rules! select {
    ($($tokens:tt)*) => {
        $crate::__select!(
            @parse false
            [__weft_a0 __weft_a1 __weft_a2 __weft_a3 __weft_a4 __weft_a5 __weft_a6 __weft_a7
             __weft_a8 __weft_a9 __weft_a10 __weft_a11 __weft_a12 __weft_a13 __weft_a14
             __weft_a15 __weft_a16 __weft_a17 __weft_a18 __weft_a19 __weft_a20 __weft_a21
             __weft_a22 __weft_a23 __weft_a24 __weft_a25 __weft_a26 __weft_a27 __weft_a28
             __weft_a29 __weft_a30 __weft_a31]
            [] [] []
            $($tokens)*
        )
    };
}

/// [`select!`] with a bias: when several arms are ready, the first of them in the order
/// written runs (crossbeam-channel's `select_biased!`), instead of one picked at random.
/// Use it for priorities (a quit channel before the work queue); it can starve later arms.
///
/// ```
/// let (tx, rx) = weft::chan::bounded::<u32>(1);
/// let (quit_tx, quit) = weft::chan::bounded::<()>(1);
/// tx.send(1).unwrap();
/// quit_tx.send(()).unwrap();
/// let first = weft::select_biased! {
///     recv(quit) -> _ => "quit",
///     recv(rx) -> _ => "work",
/// };
/// assert_eq!(first, "quit");
/// ```
#[macro_export]
macro_rules! select_biased {
    ($($tokens:tt)*) => {
        $crate::__select!(
            @parse true
            [__weft_a0 __weft_a1 __weft_a2 __weft_a3 __weft_a4 __weft_a5 __weft_a6 __weft_a7
             __weft_a8 __weft_a9 __weft_a10 __weft_a11 __weft_a12 __weft_a13 __weft_a14
             __weft_a15 __weft_a16 __weft_a17 __weft_a18 __weft_a19 __weft_a20 __weft_a21
             __weft_a22 __weft_a23 __weft_a24 __weft_a25 __weft_a26 __weft_a27 __weft_a28
             __weft_a29 __weft_a30 __weft_a31]
            [] [] []
            $($tokens)*
        )
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __select {
    // ---- parsing: arms become (kind ident (args..) (pattern) {body}) ----
    // A block body takes an optional comma after it, as in crossbeam-channel; the comma and
    // no-comma cases are separate rules (`$(,)? $($rest:tt)*` is ambiguous to the parser).
    (@parse $bias:tt [$id:ident $($ids:ident)*] [$($ops:tt)*] $after:tt $default:tt
        recv($rx:expr $(,)?) -> $res:pat => $body:block, $($rest:tt)*) => {
        $crate::__select!(@parse $bias [$($ids)*] [$($ops)* (recv $id ($rx) ($res) $body)]
            $after $default $($rest)*)
    };
    (@parse $bias:tt [$id:ident $($ids:ident)*] [$($ops:tt)*] $after:tt $default:tt
        recv($rx:expr $(,)?) -> $res:pat => $body:block $($rest:tt)*) => {
        $crate::__select!(@parse $bias [$($ids)*] [$($ops)* (recv $id ($rx) ($res) $body)]
            $after $default $($rest)*)
    };
    (@parse $bias:tt [$id:ident $($ids:ident)*] [$($ops:tt)*] $after:tt $default:tt
        recv($rx:expr $(,)?) -> $res:pat => $body:expr $(, $($rest:tt)*)?) => {
        $crate::__select!(@parse $bias [$($ids)*] [$($ops)* (recv $id ($rx) ($res) { $body })]
            $after $default $($($rest)*)?)
    };
    (@parse $bias:tt [$id:ident $($ids:ident)*] [$($ops:tt)*] $after:tt $default:tt
        send($tx:expr, $value:expr $(,)?) -> $res:pat => $body:block, $($rest:tt)*) => {
        $crate::__select!(@parse $bias [$($ids)*] [$($ops)* (send $id ($tx, $value) ($res) $body)]
            $after $default $($rest)*)
    };
    (@parse $bias:tt [$id:ident $($ids:ident)*] [$($ops:tt)*] $after:tt $default:tt
        send($tx:expr, $value:expr $(,)?) -> $res:pat => $body:block $($rest:tt)*) => {
        $crate::__select!(@parse $bias [$($ids)*] [$($ops)* (send $id ($tx, $value) ($res) $body)]
            $after $default $($rest)*)
    };
    (@parse $bias:tt [$id:ident $($ids:ident)*] [$($ops:tt)*] $after:tt $default:tt
        send($tx:expr, $value:expr $(,)?) -> $res:pat => $body:expr $(, $($rest:tt)*)?) => {
        $crate::__select!(@parse $bias [$($ids)*] [$($ops)* (send $id ($tx, $value) ($res) { $body })]
            $after $default $($($rest)*)?)
    };
    (@parse $bias:tt $ids:tt $ops:tt [] $default:tt
        after($d:expr) => $body:block, $($rest:tt)*) => {
        $crate::__select!(@parse $bias $ids $ops [($d) $body] $default $($rest)*)
    };
    (@parse $bias:tt $ids:tt $ops:tt [] $default:tt
        after($d:expr) => $body:block $($rest:tt)*) => {
        $crate::__select!(@parse $bias $ids $ops [($d) $body] $default $($rest)*)
    };
    (@parse $bias:tt $ids:tt $ops:tt [] $default:tt
        after($d:expr) => $body:expr $(, $($rest:tt)*)?) => {
        $crate::__select!(@parse $bias $ids $ops [($d) { $body }] $default $($($rest)*)?)
    };
    (@parse $bias:tt $ids:tt $ops:tt $after:tt []
        default $(())? => $body:block, $($rest:tt)*) => {
        $crate::__select!(@parse $bias $ids $ops $after [{ $body }] $($rest)*)
    };
    (@parse $bias:tt $ids:tt $ops:tt $after:tt []
        default $(())? => $body:block $($rest:tt)*) => {
        $crate::__select!(@parse $bias $ids $ops $after [{ $body }] $($rest)*)
    };
    (@parse $bias:tt $ids:tt $ops:tt $after:tt []
        default $(())? => $body:expr $(, $($rest:tt)*)?) => {
        $crate::__select!(@parse $bias $ids $ops $after [{ $body }] $($($rest)*)?)
    };
    // crossbeam-channel's spelling of a timeout, `default(duration)`, is an `after` arm.
    (@parse $bias:tt $ids:tt $ops:tt [] $default:tt
        default($d:expr) => $body:block, $($rest:tt)*) => {
        $crate::__select!(@parse $bias $ids $ops [($d) $body] $default $($rest)*)
    };
    (@parse $bias:tt $ids:tt $ops:tt [] $default:tt
        default($d:expr) => $body:block $($rest:tt)*) => {
        $crate::__select!(@parse $bias $ids $ops [($d) $body] $default $($rest)*)
    };
    (@parse $bias:tt $ids:tt $ops:tt [] $default:tt
        default($d:expr) => $body:expr $(, $($rest:tt)*)?) => {
        $crate::__select!(@parse $bias $ids $ops [($d) { $body }] $default $($($rest)*)?)
    };
    (@parse $bias:tt $ids:tt $ops:tt $after:tt $default:tt) => {
        $crate::__select!(@emit $bias $ops $after $default)
    };
    // ---- misuse: say which arm is wrong ----
    (@parse $bias:tt [] $ops:tt $after:tt $default:tt $kind:ident $($rest:tt)*) => {
        ::core::compile_error!(::core::concat!(
            "weft::select!: too many arms at `", ::core::stringify!($kind),
            "`: at most 32 `recv` and `send` arms"
        ))
    };
    (@parse $bias:tt $ids:tt $ops:tt [$($a:tt)+] $default:tt after $($rest:tt)*) => {
        ::core::compile_error!("weft::select!: more than one `after` arm")
    };
    (@parse $bias:tt $ids:tt $ops:tt [$($a:tt)+] $default:tt default($($d:tt)+) $($rest:tt)*) => {
        ::core::compile_error!(
            "weft::select!: more than one `after` arm (`default(duration)` is one)"
        )
    };
    (@parse $bias:tt $ids:tt $ops:tt $after:tt [$($d:tt)+] default $($rest:tt)*) => {
        ::core::compile_error!("weft::select!: more than one `default` arm")
    };
    (@parse $bias:tt $ids:tt $ops:tt $after:tt $default:tt recv($($args:tt)*) $($rest:tt)*) => {
        ::core::compile_error!(::core::concat!(
            "weft::select!: malformed arm `recv(", ::core::stringify!($($args)*),
            ")`: expected `recv(rx) -> res => body`"
        ))
    };
    (@parse $bias:tt $ids:tt $ops:tt $after:tt $default:tt send($($args:tt)*) $($rest:tt)*) => {
        ::core::compile_error!(::core::concat!(
            "weft::select!: malformed arm `send(", ::core::stringify!($($args)*),
            ")`: expected `send(tx, value) -> res => body`"
        ))
    };
    (@parse $bias:tt $ids:tt $ops:tt $after:tt $default:tt after($($args:tt)*) $($rest:tt)*) => {
        ::core::compile_error!(::core::concat!(
            "weft::select!: malformed arm `after(", ::core::stringify!($($args)*),
            ")`: expected `after(duration) => body`"
        ))
    };
    (@parse $bias:tt $ids:tt $ops:tt $after:tt $default:tt default $($rest:tt)*) => {
        ::core::compile_error!(
            "weft::select!: malformed arm `default`: expected `default => body`"
        )
    };
    (@parse $bias:tt $ids:tt $ops:tt $after:tt $default:tt $kind:ident $($rest:tt)*) => {
        ::core::compile_error!(::core::concat!(
            "weft::select!: unknown arm `", ::core::stringify!($kind),
            "`: expected `recv(rx) -> res => body`, `send(tx, value) -> res => body`, \
             one `after(duration) => body` or one `default => body`"
        ))
    };
    (@parse $bias:tt $ids:tt $ops:tt $after:tt $default:tt $($rest:tt)+) => {
        ::core::compile_error!(::core::concat!(
            "weft::select!: expected an arm — `recv(rx) -> res => body`, \
             `send(tx, value) -> res => body`, one `after(duration) => body` or one \
             `default => body` — at `", ::core::stringify!($($rest)+), "`"
        ))
    };

    // ---- expansion ----
    (@emit $bias:tt [$(($kind:ident $id:ident $args:tt $res:tt $body:tt))*] [$($after:tt)*] [$($default:tt)*]) => {{
        $( $crate::__select!(@bind $kind $id $args); )*
        let __weft_deadline: ::core::option::Option<::std::time::Instant> =
            $crate::__select!(@deadline $($after)*);
        let __weft_outcome = $crate::chan::select::run(
            &mut [$( &mut $id as &mut dyn $crate::chan::select::SelectArm ),*],
            __weft_deadline,
            $crate::__select!(@has_default $($default)*),
            $bias,
        );
        $crate::__select!(@dispatch __weft_outcome [$(($id $res $body))*] [$($after)*] [$($default)*])
    }};
    (@bind recv $id:ident ($rx:expr)) => {
        let $id = &$rx;
        #[allow(unused_mut)]
        let mut $id = $id.__select_arm();
    };
    (@bind send $id:ident ($tx:expr, $value:expr)) => {
        let $id = &$tx;
        #[allow(unused_mut)]
        let mut $id = $id.__select_arm($value);
    };
    (@deadline) => { ::core::option::Option::None };
    (@deadline ($d:expr) $body:tt) => {
        ::std::time::Instant::now().checked_add($d)
    };
    (@has_default) => { false };
    (@has_default $body:tt) => { true };
    (@dispatch $o:ident [($id:ident ($res:pat) $body:tt) $($rest:tt)*] $after:tt $default:tt) => {
        match $id.__take() {
            ::core::option::Option::Some($res) => $body,
            ::core::option::Option::None => {
                $crate::__select!(@dispatch $o [$($rest)*] $after $default)
            }
        }
    };
    (@dispatch $o:ident [] [$($d:tt $abody:tt)?] [$($dbody:tt)?]) => {
        match $o {
            $( $crate::chan::select::Selected::Timeout => $abody, )?
            $( $crate::chan::select::Selected::Default => $dbody, )?
            _ => ::core::unreachable!("weft: select! picked an arm it does not have"),
        }
    };
}
