//! Channels: buffering, rendezvous, closing, timeouts, and use from plain threads.

use std::time::{Duration, Instant};

use weft::chan::{
    bounded, unbounded, RecvError, RecvTimeoutError, SendTimeoutError, TryRecvError, TrySendError,
};

fn rt(workers: usize) -> weft::Runtime {
    weft::Runtime::builder().workers(workers).build().unwrap()
}

#[test]
fn smoke_buffered_send_then_recv() {
    rt(1).block_on(|| {
        let (tx, rx) = bounded(2);
        tx.send(1).unwrap();
        tx.send(2).unwrap();
        assert_eq!(tx.try_send(3), Err(TrySendError::Full(3)));
        assert_eq!(rx.recv(), Ok(1));
        assert_eq!(rx.recv(), Ok(2));
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
        assert_eq!(tx.capacity(), Some(2));
    });
}

#[test]
fn rendezvous_send_returns_after_receiver_has_value() {
    rt(1).block_on(|| {
        let (tx, rx) = bounded::<u32>(0);
        assert_eq!(tx.try_send(1), Err(TrySendError::Full(1)));
        let receiver = weft::spawn(move || {
            weft::time::sleep(Duration::from_millis(20));
            rx.recv().unwrap()
        });
        let start = Instant::now();
        tx.send(5).unwrap();
        assert!(start.elapsed() >= Duration::from_millis(15));
        assert_eq!(receiver.join().unwrap(), 5);
    });
}

#[test]
fn unbounded_never_blocks() {
    rt(1).block_on(|| {
        let (tx, rx) = unbounded();
        for i in 0..10_000 {
            tx.send(i).unwrap();
        }
        assert_eq!(tx.capacity(), None);
        assert_eq!(rx.len(), 10_000);
        assert_eq!(rx.try_iter().sum::<i32>(), (0..10_000).sum());
    });
}

#[test]
fn receivers_drain_then_see_close_when_senders_drop() {
    rt(2).block_on(|| {
        let (tx, rx) = bounded(4);
        let tx2 = tx.clone();
        tx.send(1).unwrap();
        tx2.send(2).unwrap();
        drop(tx);
        drop(tx2);
        assert_eq!(rx.recv(), Ok(1));
        assert_eq!(rx.recv(), Ok(2));
        assert_eq!(rx.recv(), Err(RecvError));
        assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    });
}

#[test]
fn blocked_receiver_wakes_on_close() {
    rt(2).block_on(|| {
        let (tx, rx) = bounded::<u8>(0);
        let waiter = weft::spawn(move || rx.recv());
        weft::time::sleep(Duration::from_millis(10));
        drop(tx);
        assert_eq!(waiter.join().unwrap(), Err(RecvError));
    });
}

#[test]
fn send_gives_value_back_when_receivers_drop() {
    rt(2).block_on(|| {
        let (tx, rx) = bounded::<String>(0);
        let sender = weft::spawn(move || tx.send("kept".to_string()));
        weft::time::sleep(Duration::from_millis(10));
        drop(rx);
        let err = sender.join().unwrap().unwrap_err();
        assert_eq!(err.into_inner(), "kept");
    });
}

#[test]
fn recv_timeout_times_out_then_succeeds() {
    rt(1).block_on(|| {
        let (tx, rx) = bounded::<u8>(1);
        let start = Instant::now();
        assert_eq!(
            rx.recv_timeout(Duration::from_millis(20)),
            Err(RecvTimeoutError::Timeout)
        );
        assert!(start.elapsed() >= Duration::from_millis(20));
        tx.send(9).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_millis(20)), Ok(9));
        drop(tx);
        assert_eq!(
            rx.recv_timeout(Duration::from_millis(20)),
            Err(RecvTimeoutError::Disconnected)
        );
    });
}

#[test]
fn send_timeout_gives_value_back() {
    rt(1).block_on(|| {
        let (tx, rx) = bounded::<u8>(1);
        tx.send(1).unwrap();
        assert_eq!(
            tx.send_timeout(2, Duration::from_millis(10)),
            Err(SendTimeoutError::Timeout(2))
        );
        assert_eq!(rx.recv(), Ok(1));
        assert_eq!(tx.send_timeout(3, Duration::from_millis(10)), Ok(()));
    });
}

#[test]
fn full_sender_is_moved_into_buffer_by_receiver() {
    rt(1).block_on(|| {
        let (tx, rx) = bounded(1);
        tx.send(1).unwrap();
        let tx2 = tx.clone();
        let blocked = weft::spawn(move || tx2.send(2));
        weft::yield_now();
        assert_eq!(rx.recv(), Ok(1));
        blocked.join().unwrap().unwrap();
        assert_eq!(rx.try_recv(), Ok(2));
    });
}

#[test]
fn works_between_plain_threads_and_tasks() {
    let rt = rt(2);
    let (tx, rx) = bounded::<u64>(0);
    let (back_tx, back_rx) = bounded::<u64>(0);
    let thread = std::thread::spawn(move || {
        for v in rx.iter() {
            back_tx.send(v * 2).unwrap();
        }
    });
    let sum = rt.block_on(move || {
        let mut sum = 0;
        for i in 0..1000 {
            tx.send(i).unwrap();
            sum += back_rx.recv().unwrap();
        }
        sum
    });
    thread.join().unwrap();
    assert_eq!(sum, 999 * 1000);
}

#[test]
fn iter_ends_when_closed() {
    rt(2).block_on(|| {
        let (tx, rx) = bounded(3);
        let producer = weft::spawn(move || {
            for i in 0..100u32 {
                tx.send(i).unwrap();
            }
        });
        assert_eq!(rx.iter().count(), 100);
        producer.join().unwrap();
    });
}

#[test]
fn handles_are_clone_send_and_sync() {
    fn assert_traits<T: Clone + Send + Sync>() {}
    assert_traits::<weft::chan::Sender<String>>();
    assert_traits::<weft::chan::Receiver<String>>();
    fn assert_sync<T: Send + Sync>() {}
    assert_sync::<weft::sync::Mutex<Vec<u8>>>();
    assert_sync::<weft::sync::RwLock<Vec<u8>>>();
    assert_sync::<weft::sync::WaitGroup>();
    assert_sync::<weft::sync::Semaphore>();
    assert_sync::<weft::sync::Condvar>();
    assert_sync::<weft::sync::Barrier>();
    assert_sync::<weft::sync::Once>();
}
