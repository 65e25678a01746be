//! No value is lost or duplicated: drop-counted values through many senders, receivers,
//! timeouts, closes and `select!`, on tasks and plain threads. After every handle is gone,
//! every value was received exactly once, given back to its sender, or dropped inside the
//! channel: sent = received + dropped-in-channel, and created = sent + given back.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use weft::chan::{bounded, unbounded, Receiver, Sender};

/// Counts its drops; received or given-back values are forgotten after being counted, so a
/// drop means "dropped inside the channel".
struct Token {
    id: u64,
    drops: Arc<AtomicUsize>,
}

impl Drop for Token {
    fn drop(&mut self) {
        self.drops.fetch_add(1, Ordering::SeqCst);
    }
}

#[derive(Default)]
struct Tally {
    created: AtomicUsize,
    sent: AtomicUsize,
    given_back: AtomicUsize,
    received: AtomicUsize,
    seen: Mutex<HashSet<u64>>,
}

impl Tally {
    fn received(&self, t: Token) {
        assert!(
            self.seen.lock().unwrap().insert(t.id),
            "value {} received twice",
            t.id
        );
        self.received.fetch_add(1, Ordering::SeqCst);
        std::mem::forget(t);
    }
    fn given_back(&self, t: Token) {
        self.given_back.fetch_add(1, Ordering::SeqCst);
        std::mem::forget(t);
    }
}

fn rng(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

fn sender(
    tx: Sender<Token>,
    tally: Arc<Tally>,
    drops: Arc<AtomicUsize>,
    ids: Arc<AtomicU64>,
    mut seed: u64,
) {
    for _ in 0..300 {
        let t = Token {
            id: ids.fetch_add(1, Ordering::SeqCst),
            drops: drops.clone(),
        };
        tally.created.fetch_add(1, Ordering::SeqCst);
        let result = match rng(&mut seed) % 3 {
            0 => tx.send(t).map_err(|e| e.into_inner()),
            1 => tx.try_send(t).map_err(|e| e.into_inner()),
            _ => tx
                .send_timeout(t, Duration::from_micros(rng(&mut seed) % 300))
                .map_err(|e| e.into_inner()),
        };
        match result {
            Ok(()) => {
                tally.sent.fetch_add(1, Ordering::SeqCst);
            }
            Err(t) => tally.given_back(t),
        }
        if rng(&mut seed).is_multiple_of(16) {
            weft::yield_now();
        }
    }
}

fn receiver(
    rx: Receiver<Token>,
    other: Receiver<Token>,
    tally: Arc<Tally>,
    mut seed: u64,
    quits: bool,
) {
    // Receivers of some channels quit early, so those close on the receiving side with
    // values still buffered or senders still blocked.
    let quota = if quits {
        20 + rng(&mut seed) as usize % 40
    } else {
        usize::MAX
    };
    for _ in 0..quota {
        let got = match rng(&mut seed) % 4 {
            0 => rx.recv().ok(),
            1 => match rx.recv_timeout(Duration::from_micros(rng(&mut seed) % 300)) {
                Ok(t) => Some(t),
                Err(weft::chan::RecvTimeoutError::Timeout) => continue,
                Err(_) => None,
            },
            2 => match rx.try_recv() {
                Ok(t) => Some(t),
                Err(weft::chan::TryRecvError::Empty) => {
                    weft::yield_now();
                    continue;
                }
                Err(_) => None,
            },
            _ => weft::select! {
                recv(rx) -> t => t.ok(),
                recv(other) -> t => match t {
                    Ok(t) => Some(t),
                    Err(_) => continue, // the other channel closed; keep draining ours
                },
                after(Duration::from_micros(rng(&mut seed) % 300)) => continue,
            },
        };
        match got {
            Some(t) => tally.received(t),
            None => return, // closed and drained
        }
    }
}

fn run_once(workers: usize, seed: u64) {
    let rt = weft::Runtime::builder().workers(workers).build().unwrap();
    let tally = Arc::new(Tally::default());
    let drops = Arc::new(AtomicUsize::new(0));
    let ids = Arc::new(AtomicU64::new(0));
    {
        let (tally, drops, ids) = (tally.clone(), drops.clone(), ids.clone());
        rt.block_on(move || {
            let chans: Vec<(Sender<Token>, Receiver<Token>)> = vec![
                bounded(0),
                bounded(1),
                bounded(4),
                unbounded(),
                bounded(0),
                bounded(2),
            ];
            let mut handles = Vec::new();
            let mut threads = Vec::new();
            for (i, (tx, rx)) in chans.iter().enumerate() {
                let other = chans[(i + 1) % chans.len()].1.clone();
                for s in 0..3u64 {
                    let (tx, tally, drops, ids) =
                        (tx.clone(), tally.clone(), drops.clone(), ids.clone());
                    let seed = seed ^ (i as u64 * 131 + s * 7 + 1);
                    handles.push(weft::spawn(move || sender(tx, tally, drops, ids, seed)));
                }
                for r in 0..2u64 {
                    let (rx, other, tally) = (rx.clone(), other.clone(), tally.clone());
                    let seed = seed ^ (i as u64 * 977 + r * 13 + 5);
                    handles.push(weft::spawn(move || {
                        receiver(rx, other, tally, seed, i % 2 == 1)
                    }));
                }
                // One plain-thread receiver per channel too.
                let (rx, other, tally) = (rx.clone(), other.clone(), tally.clone());
                threads.push(std::thread::spawn(move || {
                    receiver(rx, other, tally, seed ^ 0xfeed, i % 2 == 1)
                }));
            }
            drop(chans);
            for h in handles {
                h.join().unwrap();
            }
            for t in threads {
                t.join().unwrap();
            }
        });
    }
    drop(rt);
    let created = tally.created.load(Ordering::SeqCst);
    let sent = tally.sent.load(Ordering::SeqCst);
    let back = tally.given_back.load(Ordering::SeqCst);
    let received = tally.received.load(Ordering::SeqCst);
    let dropped_in_channel = drops.load(Ordering::SeqCst);
    assert_eq!(created, sent + back, "created = sent + given back");
    assert_eq!(
        sent,
        received + dropped_in_channel,
        "sent = received + dropped in channel (seed {seed:#x})"
    );
    eprintln!("created {created} sent {sent} back {back} received {received} dropped {dropped_in_channel}");
    assert!(received > 0);
}

#[test]
fn stampede_no_value_lost_or_duplicated_one_worker() {
    for seed in 1..=3u64 {
        run_once(1, seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    }
}

#[test]
fn stampede_no_value_lost_or_duplicated_two_workers() {
    for seed in 1..=3u64 {
        run_once(2, seed.wrapping_mul(0xc2b2_ae3d_27d4_eb4f));
    }
}

#[test]
fn destructors_run_for_values_left_in_channel() {
    let drops = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = bounded(8);
    for id in 0..5 {
        tx.send(Token {
            id,
            drops: drops.clone(),
        })
        .unwrap();
    }
    // The last receiver's drop drops the buffered values: nothing can receive them.
    drop(rx);
    assert_eq!(drops.load(Ordering::SeqCst), 5);
    let back = tx
        .send(Token {
            id: 9,
            drops: drops.clone(),
        })
        .unwrap_err()
        .into_inner();
    drop(back);
    assert_eq!(drops.load(Ordering::SeqCst), 6);
    drop(tx);
    assert_eq!(drops.load(Ordering::SeqCst), 6);
}

#[test]
fn a_task_cancelled_while_blocked_leaves_no_entry_behind() {
    // Tasks blocked in send and recv on channels that outlive the runtime: shutdown unwinds
    // them through their wait, which must take their entries out of the queues (the entries
    // live in the unwound frames) and drop the value the sender held.
    let drops = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = bounded::<Token>(0);
    let (idle_tx, idle_rx) = bounded::<Token>(0);
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let sending = {
        let (tx, drops) = (tx.clone(), drops.clone());
        rt.spawn(move || {
            let _ = tx.send(Token { id: 1, drops });
        })
    };
    let receiving = {
        let idle_rx = idle_rx.clone();
        rt.spawn(move || {
            let _ = idle_rx.recv();
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    drop(rt);
    assert!(sending.join().is_err() && receiving.join().is_err());
    assert_eq!(
        drops.load(Ordering::SeqCst),
        1,
        "the blocked send's value is dropped"
    );
    // Nothing is queued any more: these would otherwise reach into the unwound frames.
    assert!(rx.try_recv().is_err());
    let token = Token {
        id: 2,
        drops: drops.clone(),
    };
    assert!(idle_tx.try_send(token).is_err());
    assert_eq!(drops.load(Ordering::SeqCst), 2);
    drop((tx, idle_rx));
}
