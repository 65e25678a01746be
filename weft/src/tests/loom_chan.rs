//! Loom models of the channel core (chan/core.rs): handoff, close, timeout-vs-send,
//! `select!` registration and abort, and a cancellation racing a hand-off (invariant 8).
//! Capacities are 0 or 1 to keep the models small.

use std::time::Instant;

use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;

use crate::chan_core::{
    select, Chan, RecvArm, RecvOutcome, SelectArm, Selected, SendOutcome, TrySend,
};

fn park(_: Option<Instant>) -> bool {
    thread::park();
    false
}

/// A park that reports a cancellation once `cancelled` is set (sched/park.rs
/// `park_current_cancellable`): at once if it is set already, else when it wakes. The models
/// set the flag without a wake of their own: the cancel's wake is the park state's token
/// (modelled in `loom_park`), and loom cannot tell an `unpark` from the wake of a thread that
/// waits for a lock. What they check is the race of invariant 8: the cancel seen before or
/// after a peer's claim.
fn cancellable_park(cancelled: &AtomicBool) -> impl FnMut(Option<Instant>) -> bool + '_ {
    move |_| {
        if cancelled.load(Ordering::Acquire) {
            return true;
        }
        thread::park();
        cancelled.load(Ordering::Acquire)
    }
}

#[test]
fn loom_rendezvous_hands_value_over_once() {
    loom::model(|| {
        let chan = Arc::new(Chan::<u32>::new(0));
        let tx = chan.clone();
        let sender =
            thread::spawn(move || matches!(tx.send(7, None, &mut park), SendOutcome::Sent));
        let got = chan.recv(None, &mut park);
        assert!(matches!(got, RecvOutcome::Got(7)));
        assert!(sender.join().unwrap());
    });
}

#[test]
fn loom_close_wakes_blocked_receiver() {
    loom::model(|| {
        let chan = Arc::new(Chan::<u32>::new(0));
        let closer = chan.clone();
        let t = thread::spawn(move || closer.disconnect_senders());
        assert!(matches!(
            chan.recv(None, &mut park),
            RecvOutcome::Disconnected
        ));
        t.join().unwrap();
    });
}

#[test]
fn loom_close_gives_blocked_sender_its_value() {
    loom::model(|| {
        let chan = Arc::new(Chan::<u32>::new(0));
        let closer = chan.clone();
        let t = thread::spawn(move || closer.disconnect_receivers());
        assert!(matches!(
            chan.send(3, None, &mut park),
            SendOutcome::Disconnected(3)
        ));
        t.join().unwrap();
    });
}

/// A receiver whose deadline passes while a sender hands it a value: the value is delivered
/// or stays in the buffer, never lost nor duplicated.
#[test]
fn loom_recv_timeout_racing_send_loses_nothing() {
    loom::model(|| {
        let chan = Arc::new(Chan::<u32>::new(1));
        let rx = chan.clone();
        // An already-passed deadline: the receiver registers, then aborts at once.
        let receiver = thread::spawn(move || rx.recv(Some(Instant::now()), &mut park));
        let sent = matches!(chan.try_send(5), TrySend::Sent);
        assert!(sent);
        let got = match receiver.join().unwrap() {
            RecvOutcome::Got(v) => Some(v),
            RecvOutcome::Timeout => None,
            RecvOutcome::Disconnected | RecvOutcome::Cancelled => {
                panic!("neither closed nor cancelled")
            }
        };
        let left = match chan.try_recv() {
            crate::chan_core::TryRecv::Got(v) => Some(v),
            _ => None,
        };
        assert_eq!(got.is_some() as u32 + left.is_some() as u32, 1);
    });
}

/// A select over two rendezvous channels, racing a thread that tries to send on each and then
/// closes both: the select ends with exactly the value the sender saw accepted, or closed.
#[test]
fn loom_select_registration_takes_at_most_one_value() {
    loom::model(|| {
        let a = Arc::new(Chan::<u32>::new(0));
        let b = Arc::new(Chan::<u32>::new(0));
        let (a2, b2) = (a.clone(), b.clone());
        let sender = thread::spawn(move || {
            let sent_a = matches!(a2.try_send(1), TrySend::Sent);
            let sent_b = matches!(b2.try_send(2), TrySend::Sent);
            a2.disconnect_senders();
            b2.disconnect_senders();
            (sent_a, sent_b)
        });
        let mut arm_a = RecvArm::new(&a);
        let mut arm_b = RecvArm::new(&b);
        let picked = {
            let mut arms: [&mut dyn SelectArm; 2] = [&mut arm_a, &mut arm_b];
            select(&mut arms, None, false, &mut |_| 0, &mut park)
        };
        let picked = picked.expect("not cancelled");
        let (sent_a, sent_b) = sender.join().unwrap();
        assert!(!(sent_a && sent_b), "two values went to one select");
        match picked {
            Selected::Arm(0) => assert_eq!(arm_a.take().unwrap(), sent_a.then_some(1)),
            Selected::Arm(1) => assert_eq!(arm_b.take().unwrap(), sent_b.then_some(2)),
            other => panic!("unexpected {other:?}"),
        }
    });
}

/// A receiver cancelled while a sender hands it a value over a rendezvous channel (core.rs
/// invariant 8): the receiver returns the value, or reports `Cancelled` with nothing handed
/// to it and the value still with the sender — never both, never neither.
#[test]
fn loom_a_cancelled_receiver_keeps_or_leaves_the_value() {
    loom::model(|| {
        let chan = Arc::new(Chan::<u32>::new(0));
        let cancelled = Arc::new(AtomicBool::new(false));
        let (rx, flag) = (chan.clone(), cancelled.clone());
        let receiver = thread::spawn(move || rx.recv(None, &mut cancellable_park(&flag)));
        let tx = chan.clone();
        let sender =
            thread::spawn(move || matches!(tx.send(7, None, &mut park), SendOutcome::Sent));
        cancelled.store(true, Ordering::Release);
        let got = match receiver.join().unwrap() {
            RecvOutcome::Got(v) => Some(v),
            RecvOutcome::Cancelled => None,
            _ => panic!("neither closed nor timed out"),
        };
        // Whatever the cancelled receiver did not take is still the sender's to hand over.
        let rest = match got {
            Some(_) => None,
            None => match chan.recv(None, &mut park) {
                RecvOutcome::Got(v) => Some(v),
                _ => panic!("the value was lost"),
            },
        };
        assert!(sender.join().unwrap());
        assert_eq!(got.or(rest), Some(7));
    });
}

/// The same for a blocked sender: cancelled, it either had its value taken (`Sent`) or gets
/// it back (`Cancelled`), and the receiver got it exactly when it was taken.
#[test]
fn loom_a_cancelled_sender_delivers_or_keeps_the_value() {
    loom::model(|| {
        let chan = Arc::new(Chan::<u32>::new(0));
        let cancelled = Arc::new(AtomicBool::new(false));
        let (tx, flag) = (chan.clone(), cancelled.clone());
        let sender = thread::spawn(move || tx.send(9, None, &mut cancellable_park(&flag)));
        cancelled.store(true, Ordering::Release);
        // After the cancel, under the channel lock: a sender queued before it is claimed (and
        // woken); one that queues after it sees the cancel at its park.
        let got = match chan.try_recv() {
            crate::chan_core::TryRecv::Got(v) => Some(v),
            _ => None,
        };
        let kept = match sender.join().unwrap() {
            SendOutcome::Sent => None,
            SendOutcome::Cancelled(v) => Some(v),
            _ => panic!("neither closed nor timed out"),
        };
        assert_eq!(got.is_some() as u32 + kept.is_some() as u32, 1);
    });
}

/// A `select!` cancelled while a sender hands a value to one of its arms: the select returns
/// that arm with the value, or `None` (cancelled) with every arm empty and the value still
/// the sender's.
#[test]
fn loom_a_cancelled_select_keeps_or_leaves_the_value() {
    loom::model(|| {
        let a = Arc::new(Chan::<u32>::new(0));
        let b = Arc::new(Chan::<u32>::new(0));
        let cancelled = Arc::new(AtomicBool::new(false));
        let (a2, b2, flag) = (a.clone(), b.clone(), cancelled.clone());
        let selector = thread::spawn(move || {
            let mut arm_a = RecvArm::new(&a2);
            let mut arm_b = RecvArm::new(&b2);
            let picked = {
                let mut arms: [&mut dyn SelectArm; 2] = [&mut arm_a, &mut arm_b];
                select(
                    &mut arms,
                    None,
                    false,
                    &mut |_| 0,
                    &mut cancellable_park(&flag),
                )
            };
            match picked {
                Some(Selected::Arm(0)) => arm_a.take().unwrap(),
                None => {
                    assert!(arm_a.take().is_none() && arm_b.take().is_none());
                    None
                }
                other => panic!("unexpected {other:?}"),
            }
        });
        let tx = a.clone();
        let sender =
            thread::spawn(move || matches!(tx.send(1, None, &mut park), SendOutcome::Sent));
        cancelled.store(true, Ordering::Release);
        let got = selector
            .join()
            .unwrap()
            .or_else(|| match a.recv(None, &mut park) {
                RecvOutcome::Got(v) => Some(v),
                _ => panic!("the value was lost"),
            });
        assert!(sender.join().unwrap());
        assert_eq!(got, Some(1));
    });
}

/// crossbeam's `linearizable_default` in one round (core.rs invariant 5): `r1` holds a value;
/// a peer fills `r2`, then empties `r1`, so one of them holds a value at every instant. A
/// `select!` with a `default` arm, polling `r2` before `r1` (the order that let the peer slip
/// between the two looks), must take an arm, never `default`.
#[test]
fn loom_select_default_is_linearizable() {
    loom::model(|| {
        let r1 = Arc::new(Chan::<u32>::new(1));
        let r2 = Arc::new(Chan::<u32>::new(1));
        assert!(matches!(r1.try_send(1), TrySend::Sent));
        let (p1, p2) = (r1.clone(), r2.clone());
        let peer = thread::spawn(move || {
            assert!(matches!(p2.try_send(2), TrySend::Sent));
            let _ = p1.try_recv();
        });
        let mut arm1 = RecvArm::new(&r1);
        let mut arm2 = RecvArm::new(&r2);
        let picked = {
            let mut arms: [&mut dyn SelectArm; 2] = [&mut arm1, &mut arm2];
            select(
                &mut arms,
                None,
                true,
                &mut |n| n - 1, // r2 first: the last arm is drawn first
                &mut park,
            )
        };
        peer.join().unwrap();
        assert!(
            matches!(picked, Some(Selected::Arm(_))),
            "default taken although an arm was ready throughout: {picked:?}"
        );
    });
}
