//! The monitor tells what a stuck worker does, read from the kernel: computing, blocked in a
//! system call (named), or waiting on a futex; it names the task; and its reports go to the
//! runtime's hook.

use std::io::Read;
use std::sync::mpsc;
use std::time::Duration;

use weft::sched::{BlockedOn, MonitorReport, StuckActivity};

fn runtime(workers: usize) -> (weft::Runtime, mpsc::Receiver<MonitorReport>) {
    let (tx, rx) = mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let rt = weft::Runtime::builder()
        .workers(workers)
        .monitor_threshold(Some(Duration::from_millis(20)))
        .monitor_report(move |report| {
            let _ = tx.lock().unwrap().send(report.clone());
        })
        .build()
        .unwrap();
    (rt, rx)
}

/// `report` is of a task blocked in a system call that waits on `what`.
fn assert_waits_on(report: &MonitorReport, what: BlockedOn) {
    match report.activity {
        StuckActivity::Syscall { waits_on, .. } => assert_eq!(waits_on, what, "{report}"),
        _ => panic!("expected a system call: {report}"),
    }
}

fn next_report(rx: &mpsc::Receiver<MonitorReport>) -> MonitorReport {
    rx.recv_timeout(Duration::from_secs(5))
        .expect("no monitor report within 5 s")
}

#[test]
fn a_compute_loop_is_reported_as_computing_by_name() {
    let (rt, rx) = runtime(1);
    let line = line!() + 3;
    let h = weft::task::Builder::new()
        .name("number-cruncher")
        .spawn_on(&rt.handle(), || {
            let until = std::time::Instant::now() + Duration::from_millis(300);
            let mut x = 0u64;
            while std::time::Instant::now() < until {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
            x
        })
        .unwrap();
    let report = next_report(&rx);
    h.join().unwrap();
    assert_eq!(report.activity, StuckActivity::Computing, "{report}");
    assert_eq!(report.task_name.as_deref(), Some("number-cruncher"));
    assert_eq!(report.spawn_site.unwrap().line(), line, "{report}");
    let text = report.to_string();
    assert!(text.contains("\"number-cruncher\""), "{text}");
    assert!(
        text.contains("computing")
            && text.contains("yield_now")
            && text.contains("weft::task::compute"),
        "{text}"
    );
}

/// Computes until `until` without parking: the frame a report must name.
#[inline(never)]
fn crunch_numbers(until: std::time::Instant) -> u64 {
    let mut x = 0u64;
    while std::time::Instant::now() < until {
        for _ in 0..1000 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
    }
    x
}

#[test]
fn a_computing_task_s_report_shows_the_function_that_computes() {
    let (rt, rx) = runtime(1);
    let h = rt.spawn(|| crunch_numbers(std::time::Instant::now() + Duration::from_millis(300)));
    let report = next_report(&rx);
    h.join().unwrap();
    assert_eq!(report.activity, StuckActivity::Computing, "{report}");
    let backtrace = report
        .backtrace
        .as_ref()
        .unwrap_or_else(|| panic!("no backtrace: {report}"));
    assert!(
        backtrace
            .frames
            .iter()
            .any(|f| f.function.starts_with("monitor_reports::crunch_numbers")),
        "{report}"
    );
    let text = report.to_string();
    eprintln!("{text}");
    assert!(text.contains("where the task is"), "{text}");
    assert!(text.contains("monitor_reports::crunch_numbers"), "{text}");
}

#[test]
fn a_blocking_std_net_read_is_reported_with_its_system_call() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let writer = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        std::io::Write::write_all(&mut s, b"late").unwrap();
    });
    let (rt, rx) = runtime(1);
    let h = rt.spawn(move || {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        let mut buf = [0; 4];
        s.read_exact(&mut buf).unwrap();
        buf
    });
    let report = next_report(&rx);
    assert_eq!(h.join().unwrap(), *b"late");
    writer.join().unwrap();
    match &report.activity {
        StuckActivity::Syscall {
            name: Some(name), ..
        } => {
            assert!(["read", "recvfrom"].contains(name), "{report}")
        }
        other => panic!("expected a system call, got {other:?}: {report}"),
    }
    assert_waits_on(&report, BlockedOn::Socket);
    let text = report.to_string();
    assert!(text.contains("blocked in the kernel"), "{text}");
    // The fix for a sync crate's socket calls: the feature that makes them park.
    assert!(
        text.contains("weft::net") && text.contains("`interpose` cargo feature"),
        "{text}"
    );
}

#[test]
fn a_std_thread_sleep_is_reported_with_the_interpose_feature_as_the_fix() {
    let (rt, rx) = runtime(1);
    let h = rt.spawn(|| std::thread::sleep(Duration::from_millis(200)));
    let report = next_report(&rx);
    h.join().unwrap();
    assert_waits_on(&report, BlockedOn::Sleep);
    let text = report.to_string();
    assert!(
        text.contains("weft::time::sleep") && text.contains("`interpose` cargo feature"),
        "{text}"
    );
}

#[test]
fn a_std_mutex_contended_by_two_tasks_of_one_worker_is_reported_as_a_futex_wait() {
    // Task A holds a std Mutex across a sleep; task B, on the same and only worker, blocks on
    // it in the kernel, so A's timer can never fire: the worker is deadlocked, which is what
    // the report warns about. The runtime is leaked with its stuck worker.
    static SHARED: std::sync::Mutex<u32> = std::sync::Mutex::new(0);
    let (rt, rx) = runtime(1);
    rt.spawn(|| {
        let _guard = SHARED.lock().unwrap();
        weft::time::sleep(Duration::from_millis(100));
    });
    std::thread::sleep(Duration::from_millis(20));
    rt.spawn(|| {
        *SHARED.lock().unwrap() += 1;
    });
    let report = next_report(&rx);
    assert_eq!(report.activity, StuckActivity::Futex, "{report}");
    let text = report.to_string();
    assert!(
        text.contains("futex") && text.contains("weft::sync"),
        "{text}"
    );
    std::mem::forget(rt);
}

#[test]
fn short_blocking_socket_calls_are_caught_though_each_is_under_the_threshold() {
    // A sync client's round trips, each 2 ms (a tenth of the threshold): step 2 never fires,
    // yet the worker spends most of its time blocked in the kernel.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut byte = [0u8; 1];
        while s.read_exact(&mut byte).is_ok() {
            std::thread::sleep(Duration::from_millis(2));
            if std::io::Write::write_all(&mut s, &byte).is_err() {
                break;
            }
        }
    });
    let (rt, rx) = runtime(1);
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let client_done = done.clone();
    let client = rt.spawn(move || {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        let started = std::time::Instant::now();
        while !client_done.load(std::sync::atomic::Ordering::Relaxed)
            && started.elapsed() < Duration::from_secs(10)
        {
            std::io::Write::write_all(&mut s, b"x").unwrap();
            let mut byte = [0u8; 1];
            s.read_exact(&mut byte).unwrap();
            // Park now and then, so the task never runs past the threshold in one go.
            weft::yield_now();
        }
    });
    let report = next_report(&rx);
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    client.join().unwrap();
    server.join().unwrap();
    assert!(report.caught_blocking, "{report}");
    assert_waits_on(&report, BlockedOn::Socket);
    let text = report.to_string();
    eprintln!("{text}");
    assert!(
        text.contains("caught it in a blocking call") && text.contains("`interpose` cargo feature"),
        "{text}"
    );
}
