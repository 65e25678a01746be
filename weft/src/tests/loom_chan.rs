//! Loom models of the channel core (chan/core.rs): handoff, close, timeout-vs-send, and
//! `select!` registration and abort. Capacities are 0 or 1 to keep the models small.

use std::time::Instant;

use loom::sync::Arc;
use loom::thread;

use crate::chan_core::{
    select, Chan, RecvArm, RecvOutcome, SelectArm, Selected, SendOutcome, TrySend,
};

fn park(_: Option<Instant>) {
    thread::park();
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
            RecvOutcome::Disconnected => panic!("not closed"),
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
            select(&mut arms, None, false, &mut |_| {}, &mut park)
        };
        let (sent_a, sent_b) = sender.join().unwrap();
        assert!(!(sent_a && sent_b), "two values went to one select");
        match picked {
            Selected::Arm(0) => assert_eq!(arm_a.take().unwrap(), sent_a.then_some(1)),
            Selected::Arm(1) => assert_eq!(arm_b.take().unwrap(), sent_b.then_some(2)),
            other => panic!("unexpected {other:?}"),
        }
    });
}
