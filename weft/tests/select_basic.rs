//! `select!`: readiness, fairness, timeouts, default, send arms and closed channels.

use std::time::{Duration, Instant};

use weft::chan::{bounded, RecvError};

fn rt(workers: usize) -> weft::Runtime {
    weft::Runtime::builder().workers(workers).build().unwrap()
}

#[test]
fn ready_arm_runs() {
    rt(1).block_on(|| {
        let (tx, rx) = bounded::<i32>(1);
        let (_tx2, rx2) = bounded::<i32>(1);
        tx.send(3).unwrap();
        let got = weft::select! {
            recv(rx) -> v => v.unwrap(),
            recv(rx2) -> _ => -1,
        };
        assert_eq!(got, 3);
    });
}

#[test]
fn default_runs_when_nothing_ready() {
    rt(1).block_on(|| {
        let (_tx, rx) = bounded::<i32>(0);
        let got = weft::select! {
            recv(rx) -> _ => 1,
            default => 2,
        };
        assert_eq!(got, 2);
    });
}

#[test]
fn after_fires_when_nothing_completes() {
    rt(1).block_on(|| {
        let (_tx, rx) = bounded::<i32>(0);
        let start = Instant::now();
        let got = weft::select! {
            recv(rx) -> _ => 1,
            after(Duration::from_millis(20)) => 2,
        };
        assert_eq!(got, 2);
        assert!(start.elapsed() >= Duration::from_millis(20));
    });
}

#[test]
fn time_after_channel_as_arm() {
    rt(1).block_on(|| {
        let (_tx, rx) = bounded::<i32>(0);
        let got = weft::select! {
            recv(rx) -> _ => 1,
            recv(weft::time::after(Duration::from_millis(10))) -> t => {
                assert!(t.is_ok());
                2
            }
        };
        assert_eq!(got, 2);
    });
}

#[test]
fn blocked_select_wakes_on_send() {
    rt(2).block_on(|| {
        let (tx1, rx1) = bounded::<i32>(0);
        let (tx2, rx2) = bounded::<i32>(0);
        let sender = weft::spawn(move || {
            weft::time::sleep(Duration::from_millis(5));
            tx2.send(22).unwrap();
            drop(tx1);
        });
        let got = weft::select! {
            recv(rx1) -> v => v.map(|_| 1),
            recv(rx2) -> v => v,
        };
        assert_eq!(got, Ok(22));
        sender.join().unwrap();
    });
}

#[test]
fn send_arm_hands_value_to_receiver() {
    rt(2).block_on(|| {
        let (tx, rx) = bounded::<String>(0);
        let receiver = weft::spawn(move || rx.recv().unwrap());
        let res = weft::select! {
            send(tx, "hi".to_string()) -> r => r,
            after(Duration::from_secs(5)) => panic!("timed out"),
        };
        assert!(res.is_ok());
        assert_eq!(receiver.join().unwrap(), "hi");
    });
}

#[test]
fn closed_channel_arm_is_ready() {
    rt(1).block_on(|| {
        let (tx, rx) = bounded::<i32>(0);
        drop(tx);
        let got = weft::select! {
            recv(rx) -> v => v,
            after(Duration::from_secs(5)) => Ok(0),
        };
        assert_eq!(got, Err(RecvError));
    });
}

#[test]
fn ready_arms_are_picked_uniformly() {
    rt(1).block_on(|| {
        let (tx_a, rx_a) = bounded::<()>(1);
        let (tx_b, rx_b) = bounded::<()>(1);
        let (tx_c, rx_c) = bounded::<()>(1);
        let mut counts = [0u32; 3];
        for _ in 0..3000 {
            let _ = tx_a.try_send(());
            let _ = tx_b.try_send(());
            let _ = tx_c.try_send(());
            let i = weft::select! {
                recv(rx_a) -> _ => 0,
                recv(rx_b) -> _ => 1,
                recv(rx_c) -> _ => 2,
            };
            counts[i] += 1;
        }
        for c in counts {
            assert!((800..1200).contains(&c), "{counts:?}");
        }
    });
}

#[test]
fn select_with_send_and_recv_on_same_channel_does_not_match_itself() {
    rt(1).block_on(|| {
        let (tx, rx) = bounded::<i32>(0);
        let got = weft::select! {
            send(tx, 1) -> _ => "sent",
            recv(rx) -> _ => "received",
            after(Duration::from_millis(20)) => "timeout",
        };
        assert_eq!(got, "timeout");
    });
}

#[test]
fn select_from_plain_thread() {
    let (tx, rx) = bounded::<i32>(0);
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(5));
        tx.send(4).unwrap();
    });
    let got = weft::select! {
        recv(rx) -> v => v.unwrap(),
        after(Duration::from_secs(5)) => 0,
    };
    assert_eq!(got, 4);
    t.join().unwrap();
}

#[test]
fn tick_fires_repeatedly() {
    rt(1).block_on(|| {
        let ticks = weft::time::tick(Duration::from_millis(5));
        let start = Instant::now();
        for _ in 0..4 {
            ticks.recv().unwrap();
        }
        assert!(start.elapsed() >= Duration::from_millis(20));
    });
}

/// crossbeam-channel's `select!` takes a comma after a block body; so does weft's, for every
/// kind of arm, with and without the comma, mixed with expression bodies.
#[test]
fn select_accepts_a_comma_after_a_block_arm() {
    let (tx, rx) = bounded::<i32>(1);
    let (tx2, _rx2) = bounded::<i32>(0);
    tx.send(1).unwrap();
    let got;
    weft::select! {
        recv(rx) -> v => {
            got = v.unwrap();
        },
        send(tx2, 5) -> _ => {
            unreachable!();
        },
        after(Duration::from_secs(5)) => {
            unreachable!();
        },
    }
    assert_eq!(got, 1);
    let r = weft::select! {
        recv(rx) -> _ => { 1 }
        default => { 2 },
    };
    assert_eq!(r, 2);
    let r = weft::select! {
        recv(rx) -> _ => 1,
        default => { 3 }
    };
    assert_eq!(r, 3);
}
