//! `RuntimeBuilder::tokio_on_workers` at shutdown, alone in its process: it reads the
//! process's CPU time, which other tests would add to.

use std::time::{Duration, Instant};

/// A task whose unwinding at shutdown sleeps 300 ms: the worker waits for it in tokio's
/// reactor, not in a spin (it spun for the whole 300 ms once: its check before each of
/// tokio's sleeps counted the shutdown flag as work).
#[test]
fn a_shutdown_waiting_for_an_unwinding_task_sleeps() {
    struct SlowDrop;
    impl Drop for SlowDrop {
        fn drop(&mut self) {
            weft::time::sleep(Duration::from_millis(300));
        }
    }
    let rt = weft::Runtime::builder()
        .workers(1)
        .tokio_on_workers(true)
        .build()
        .unwrap();
    rt.block_on(|| {
        weft::tokio::block_on(async { tokio::task::yield_now().await });
        weft::spawn(|| {
            let _guard = SlowDrop;
            weft::time::sleep(Duration::from_secs(3600));
        });
        weft::time::sleep(Duration::from_millis(20));
    });
    let (cpu, start) = (weft_async_tests::process_cpu(), Instant::now());
    drop(rt);
    let (cpu, wall) = (weft_async_tests::process_cpu() - cpu, start.elapsed());
    assert!(wall >= Duration::from_millis(300), "{wall:?}");
    assert!(
        cpu < wall / 2,
        "the shutdown used {cpu:?} of CPU in {wall:?}"
    );
}
