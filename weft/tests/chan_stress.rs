//! Stress: thousands of tasks across all workers pass values through chains of channels; the
//! sink's checksum must be exact.

use weft::chan::{bounded, unbounded, Receiver, Sender};

#[test]
fn stress_chains_of_channels_keep_the_checksum() {
    const CHAINS: u64 = 60;
    const STAGES: u64 = 50; // 3,000 relay tasks
    const VALUES: u64 = 200;
    let rt = weft::Runtime::builder()
        .workers(2)
        .stack_size(64 * 1024)
        .build()
        .unwrap();
    let total = rt.block_on(|| {
        let (sink_tx, sink) = unbounded::<u64>();
        for chain in 0..CHAINS {
            let make = |stage: u64| -> (Sender<u64>, Receiver<u64>) {
                match (chain + stage) % 3 {
                    0 => bounded(0),
                    1 => bounded(1),
                    _ => bounded(8),
                }
            };
            let (first_tx, first_rx) = make(0);
            let mut rx = Some(first_rx);
            for stage in 1..=STAGES {
                let (tx, next_rx) = if stage == STAGES {
                    let (tx, rx) = (sink_tx.clone(), None);
                    (tx, rx)
                } else {
                    let (tx, rx) = make(stage);
                    (tx, Some(rx))
                };
                let input = rx.take().expect("a stage has an input");
                weft::spawn(move || {
                    for v in input.iter() {
                        tx.send(v + 1).unwrap();
                    }
                });
                rx = next_rx;
            }
            weft::spawn(move || {
                for v in 0..VALUES {
                    first_tx.send(chain * 1_000_000 + v).unwrap();
                }
            });
        }
        drop(sink_tx);
        sink.iter()
            .fold((0u64, 0u64), |(n, sum), v| (n + 1, sum + v))
    });
    let expected_sum: u64 = (0..CHAINS)
        .map(|c| (0..VALUES).map(|v| c * 1_000_000 + v + STAGES).sum::<u64>())
        .sum();
    assert_eq!(total, (CHAINS * VALUES, expected_sum));
}
