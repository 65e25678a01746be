//! `Runtime::shutdown_timeout`: work in flight gets the grace period to finish, new spawns
//! are refused with a clear error meanwhile, and what is left at the deadline is cancelled
//! (destructors run). Every wait is bounded.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{join_within, within};

const LIMIT: Duration = Duration::from_secs(10);

struct CountDrop(Arc<AtomicUsize>);

impl Drop for CountDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn shutdown_timeout_lets_work_in_flight_finish_and_cancels_the_rest_at_the_deadline() {
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let served = Arc::new(AtomicUsize::new(0));
    let dropped = Arc::new(AtomicUsize::new(0));
    let (_tx, rx) = weft::chan::bounded::<()>(0);
    // 200 requests in flight, each 20–60 ms of waiting, and 10 tasks that never end.
    let requests: Vec<_> = (0..200u64)
        .map(|i| {
            let served = served.clone();
            rt.spawn(move || {
                weft::time::sleep(Duration::from_millis(20 + i % 41));
                served.fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();
    let stuck: Vec<_> = (0..10)
        .map(|_| {
            let (rx, count) = (rx.clone(), CountDrop(dropped.clone()));
            rt.spawn(move || {
                let _count = count;
                let _ = rx.recv();
            })
        })
        .collect();
    let handle = rt.handle();
    let start = Instant::now();
    let grace = Duration::from_millis(300);
    let report = within(LIMIT, move || rt.shutdown_timeout(grace));
    let took = start.elapsed();
    println!("shutdown_timeout({grace:?}) with 10 stuck tasks returned after {took:?}: {report}");
    assert!(!report.finished_in_time(), "reported every task finished");
    assert_eq!(report.cancelled(), 10, "{report}");
    assert!(took >= grace, "returned before its deadline: {took:?}");
    assert!(
        took < grace + Duration::from_secs(2),
        "returned late: {took:?}"
    );
    assert_eq!(
        served.load(Ordering::SeqCst),
        200,
        "a request in flight was cut"
    );
    assert_eq!(dropped.load(Ordering::SeqCst), 10);
    for h in requests {
        join_within(h, LIMIT).unwrap();
    }
    for h in stuck {
        assert!(weft::task::is_cancelled(
            &*join_within(h, LIMIT).unwrap_err()
        ));
    }
    // The runtime is gone: a spawn through an old handle is cancelled at once.
    let late = weft::task::Builder::new().spawn_on(&handle, || 1).unwrap();
    assert!(join_within(late, LIMIT).is_err());
}

#[test]
fn shutdown_timeout_returns_as_soon_as_every_task_finished() {
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    for _ in 0..50 {
        rt.spawn(|| weft::time::sleep(Duration::from_millis(30)));
    }
    let start = Instant::now();
    let report = within(LIMIT, move || rt.shutdown_timeout(Duration::from_secs(5)));
    let took = start.elapsed();
    println!("shutdown_timeout(5 s) with 30 ms of work returned after {took:?}: {report}");
    assert!(report.finished_in_time(), "{report}");
    assert_eq!(report.cancelled(), 0);
    assert!(report.cancelled_tasks().is_empty());
    assert!(took >= Duration::from_millis(25), "did not wait: {took:?}");
    assert!(
        took < Duration::from_secs(2),
        "waited past the work: {took:?}"
    );
}

#[test]
fn spawns_are_refused_during_the_grace_period() {
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let handle = rt.handle();
    let (tx, rx) = std::sync::mpsc::channel();
    rt.spawn(move || {
        // Wait until the grace period has begun, then try to spawn.
        weft::time::sleep(Duration::from_millis(50));
        let from_task = weft::task::Builder::new().spawn(|| ()).map(drop);
        let _ = tx.send(from_task);
    });
    let shutdown = std::thread::spawn(move || rt.shutdown_timeout(Duration::from_secs(5)));
    std::thread::sleep(Duration::from_millis(20));
    let from_outside = weft::task::Builder::new()
        .spawn_on(&handle, || ())
        .map(drop);
    let from_task = rx.recv_timeout(LIMIT).unwrap();
    let report = shutdown.join().unwrap();
    assert!(
        report.finished_in_time(),
        "the grace period did not end: {report}"
    );
    for (what, result) in [("outside", from_outside), ("task", from_task)] {
        let err = result.expect_err(what);
        assert!(
            err.to_string()
                .contains("spawn refused: the runtime is shutting down"),
            "{what}: {err}"
        );
    }
}

#[test]
fn the_report_names_the_cancelled_tasks_and_their_spawn_sites() {
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let (_tx, rx) = weft::chan::bounded::<()>(0);
    let here = std::panic::Location::caller().file();
    // A named background loop nobody stopped, and two unnamed tasks stuck in a receive.
    weft::task::Builder::new()
        .name("stats ticker")
        .spawn_on(&rt.handle(), || loop {
            weft::time::sleep(Duration::from_millis(5));
        })
        .unwrap();
    for _ in 0..2 {
        let rx = rx.clone();
        rt.spawn(move || {
            let _ = rx.recv();
        });
    }
    let report = within(LIMIT, move || {
        rt.shutdown_timeout(Duration::from_millis(100))
    });
    println!("{report}");
    assert!(!report.finished_in_time());
    assert_eq!(report.cancelled(), 3, "{report}");
    assert_eq!(report.never_started(), 0, "{report}");
    let listed = report.cancelled_tasks();
    assert_eq!(listed.len(), 3, "{report}");
    assert!(
        listed.iter().all(|t| t.spawn_site.file() == here),
        "{report}"
    );
    let ticker = listed
        .iter()
        .find(|t| t.name.as_deref() == Some("stats ticker"))
        .unwrap_or_else(|| panic!("the ticker is not named: {report}"));
    assert_ne!(ticker.state, weft::debug::TaskState::Running, "{report}");
    let receivers = listed.iter().filter(|t| t.name.is_none()).count();
    assert_eq!(receivers, 2, "{report}");
    let text = report.to_string();
    assert!(
        text.starts_with("3 task(s) cancelled when the grace period of 100.0ms ended:"),
        "{text}"
    );
    assert!(text.contains(" \"stats ticker\" "), "{text}");
    assert!(
        text.contains(" parked [chan receive], spawned at "),
        "{text}"
    );
}

#[test]
fn the_report_lists_a_bounded_number_of_tasks_and_counts_them_all() {
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let (_tx, rx) = weft::chan::bounded::<()>(0);
    let stuck = weft::ShutdownReport::MAX_LISTED + 36;
    for _ in 0..stuck {
        let rx = rx.clone();
        rt.spawn(move || {
            let _ = rx.recv();
        });
    }
    let report = within(LIMIT, move || {
        rt.shutdown_timeout(Duration::from_millis(100))
    });
    assert_eq!(report.cancelled(), stuck, "{report}");
    assert_eq!(
        report.cancelled_tasks().len(),
        weft::ShutdownReport::MAX_LISTED
    );
    assert!(report.to_string().ends_with("\n  and 36 more"), "{report}");
}

#[test]
fn a_loop_bound_to_the_stopped_context_does_not_hold_the_grace_period() {
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let stop = weft::context::Context::new();
    let ticker = stop.clone();
    rt.spawn(move || {
        let _ = ticker.bind(|| loop {
            weft::time::sleep(Duration::from_millis(5));
        });
    });
    weft::time::sleep(Duration::from_millis(20));
    stop.cancel();
    let start = Instant::now();
    let report = within(LIMIT, move || rt.shutdown_timeout(Duration::from_secs(10)));
    assert!(report.finished_in_time(), "{report}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
}
