//! `weft::debug::dump`: every state and park reason named, with the spawn site and a backtrace
//! line in the user function that waits; capturing is invisible to the tasks; SIGQUIT prints
//! the grouped dump in a subprocess.

mod common;

use std::io::{Read, Write};
use std::panic::Location;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weft::debug::{Dump, ParkReason, TaskState};

/// Spawns `f` on `rt` and returns the spawn site weft should report.
#[track_caller]
fn spawn_here(rt: &weft::Runtime, f: impl FnOnce() + Send + 'static) -> &'static Location<'static> {
    let _ = rt.spawn(f);
    Location::caller()
}

#[inline(never)]
fn wait_chan_recv(rx: weft::chan::Receiver<()>) {
    let _ = rx.recv();
}

#[inline(never)]
fn wait_chan_send(tx: weft::chan::Sender<u8>) {
    let _ = tx.send(1);
}

#[inline(never)]
fn wait_select(a: weft::chan::Receiver<()>, b: weft::chan::Receiver<()>) {
    weft::select! {
        recv(a) -> _v => (),
        recv(b) -> _v => (),
    }
}

#[inline(never)]
fn wait_socket_accept(listener: weft::net::TcpListener) {
    let _ = listener.accept();
}

#[inline(never)]
fn wait_socket_read(stream: weft::net::TcpStream) {
    let mut buf = [0u8; 16];
    let _ = (&stream).read(&mut buf);
}

#[inline(never)]
fn wait_socket_write(stream: weft::net::TcpStream) {
    let chunk = vec![0u8; 1 << 16];
    while (&stream).write_all(&chunk).is_ok() {}
}

#[inline(never)]
fn wait_socket_connect(addr: std::net::SocketAddr) {
    let _ = weft::net::TcpStream::connect_timeout(&addr, Duration::from_secs(30));
}

/// A listener whose accept queue is full, so that Linux drops the next SYN and a connect to
/// it waits (for the SYN's retransmission); with the connections that filled it.
fn full_listener() -> (
    std::os::fd::OwnedFd,
    std::net::SocketAddr,
    Vec<std::net::TcpStream>,
) {
    use std::os::fd::FromRawFd;
    // SAFETY: plain socket calls on a descriptor this function owns; `addr` outlives them.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let owned = std::os::fd::OwnedFd::from_raw_fd(fd);
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        assert_eq!(libc::bind(fd, (&raw const addr).cast(), len), 0);
        assert_eq!(libc::listen(fd, 0), 0);
        let mut len = len;
        assert_eq!(libc::getsockname(fd, (&raw mut addr).cast(), &mut len), 0);
        let port = u16::from_be(addr.sin_port);
        let addr = std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, port));
        let mut filled = Vec::new();
        for _ in 0..4 {
            match std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(300)) {
                Ok(stream) => filled.push(stream),
                Err(_) => break, // the queue is full: SYNs are dropped now
            }
        }
        (owned, addr, filled)
    }
}

#[inline(never)]
fn wait_datagram(socket: weft::net::UdpSocket) {
    let mut buf = [0u8; 16];
    let _ = socket.recv(&mut buf);
}

#[inline(never)]
fn wait_sleep() {
    weft::time::sleep(Duration::from_secs(3600));
}

#[inline(never)]
fn wait_join(rx: weft::chan::Receiver<()>) {
    let _ = weft::spawn(move || {
        let _ = rx.recv();
    })
    .join();
}

#[inline(never)]
fn wait_mutex(m: Arc<weft::sync::Mutex<()>>) {
    drop(m.lock());
}

#[inline(never)]
fn wait_rwlock_read(l: Arc<weft::sync::RwLock<()>>) {
    drop(l.read());
}

#[inline(never)]
fn wait_rwlock_write(l: Arc<weft::sync::RwLock<()>>) {
    drop(l.write());
}

#[inline(never)]
fn wait_condvar(m: Arc<weft::sync::Mutex<bool>>, c: Arc<weft::sync::Condvar>) {
    let guard = m.lock();
    drop(c.wait_while(guard, |done| !*done));
}

#[inline(never)]
fn wait_waitgroup(wg: Arc<weft::sync::WaitGroup>) {
    wg.wait();
}

#[inline(never)]
fn wait_semaphore(s: Arc<weft::sync::Semaphore>) {
    drop(s.acquire());
}

#[inline(never)]
fn wait_barrier(b: Arc<weft::sync::Barrier>) {
    b.wait();
}

#[inline(never)]
fn wait_once(o: Arc<weft::sync::Once>) {
    o.call_once(|| {});
}

#[inline(never)]
fn wait_park() {
    loop {
        weft::task::park();
    }
}

#[inline(never)]
fn wait_park_timeout() {
    weft::task::park_timeout(Duration::from_secs(3600));
}

#[inline(never)]
fn wait_blocking_pool(rx: std::sync::mpsc::Receiver<()>) {
    weft::task::spawn_blocking(move || {
        let _ = rx.recv_timeout(Duration::from_secs(30));
    });
}

#[inline(never)]
fn keep_yielding(stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        weft::yield_now();
    }
}

#[inline(never)]
fn keep_computing(stop: Arc<AtomicBool>, started: Arc<AtomicBool>) {
    started.store(true, Ordering::Relaxed);
    while !stop.load(Ordering::Relaxed) {
        std::hint::spin_loop();
    }
}

/// The task spawned at `site`, if the dump has it.
fn task_at<'a>(dump: &'a Dump, site: &Location<'_>) -> Option<&'a weft::debug::TaskDump> {
    dump.tasks.iter().find(|t| {
        t.spawn_site.file() == site.file()
            && t.spawn_site.line() == site.line()
            && t.spawn_site.column() == site.column()
    })
}

fn has_frame(dump: &Dump, task: &weft::debug::TaskDump, function: &str) -> bool {
    dump.backtrace_of(task)
        .is_some_and(|b| b.frames.iter().any(|f| f.function.contains(function)))
}

#[test]
fn dump_names_every_state_reason_spawn_site_and_waiting_function() {
    common::within(Duration::from_secs(60), || {
        let rt = weft::Runtime::builder()
            .workers(2)
            .monitor_report(|_| {})
            .build()
            .unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let started = Arc::new(AtomicBool::new(false));
        // The computing task first, so it takes one worker; the rest start on the other.
        let computing = {
            let (stop, started) = (stop.clone(), started.clone());
            spawn_here(&rt, move || keep_computing(stop, started))
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !started.load(Ordering::Relaxed) {
            assert!(
                Instant::now() < deadline,
                "the computing task never started"
            );
            std::thread::sleep(Duration::from_millis(1));
        }

        let mut expected: Vec<(ParkReason, &'static Location<'static>, &str)> = Vec::new();
        let mut keep = Vec::<Box<dyn std::any::Any + Send>>::new();

        let (tx, rx) = weft::chan::bounded::<()>(0);
        keep.push(Box::new(tx));
        let site = spawn_here(&rt, move || wait_chan_recv(rx));
        expected.push((ParkReason::ChanRecv, site, "wait_chan_recv"));

        let (tx, rx) = weft::chan::bounded::<u8>(0);
        keep.push(Box::new(rx));
        let site = spawn_here(&rt, move || wait_chan_send(tx));
        expected.push((ParkReason::ChanSend, site, "wait_chan_send"));

        let (ta, ra) = weft::chan::bounded::<()>(0);
        let (tb, rb) = weft::chan::bounded::<()>(0);
        keep.push(Box::new((ta, tb)));
        let site = spawn_here(&rt, move || wait_select(ra, rb));
        expected.push((ParkReason::Select, site, "wait_select"));

        // Sockets: made in a task (weft::net is usable from plain threads too, but the
        // listeners and streams below must be weft's).
        let (sockets_tx, sockets_rx) = std::sync::mpsc::channel();
        rt.block_on(move || {
            let accept_only = weft::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let listener = weft::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            let reader = weft::net::TcpStream::connect(addr).unwrap();
            let (reader_peer, _) = listener.accept().unwrap();
            let writer = weft::net::TcpStream::connect(addr).unwrap();
            let (writer_peer, _) = listener.accept().unwrap();
            let udp = weft::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            sockets_tx
                .send((accept_only, reader, reader_peer, writer, writer_peer, udp))
                .unwrap();
        });
        let (accept_only, reader, reader_peer, writer, writer_peer, udp) =
            sockets_rx.recv().unwrap();
        keep.push(Box::new((reader_peer, writer_peer)));
        let site = spawn_here(&rt, move || wait_socket_accept(accept_only));
        expected.push((ParkReason::SocketAccept, site, "wait_socket_accept"));
        let site = spawn_here(&rt, move || wait_socket_read(reader));
        expected.push((ParkReason::SocketRead, site, "wait_socket_read"));
        let site = spawn_here(&rt, move || wait_socket_write(writer));
        expected.push((ParkReason::SocketWrite, site, "wait_socket_write"));
        let (full, full_addr, filled) = full_listener();
        keep.push(Box::new((full, filled)));
        let site = spawn_here(&rt, move || wait_socket_connect(full_addr));
        expected.push((ParkReason::SocketConnect, site, "wait_socket_connect"));
        let site = spawn_here(&rt, move || wait_datagram(udp));
        expected.push((ParkReason::DatagramRecv, site, "wait_datagram"));

        let site = spawn_here(&rt, wait_sleep);
        expected.push((ParkReason::Sleep, site, "wait_sleep"));

        let (tx, rx) = weft::chan::bounded::<()>(0);
        keep.push(Box::new(tx));
        let site = spawn_here(&rt, move || wait_join(rx));
        expected.push((ParkReason::Join, site, "wait_join"));

        // Locks held by the test thread (weft's locks work on plain threads too).
        let mutex = Arc::new(weft::sync::Mutex::new(()));
        let rwlock = Arc::new(weft::sync::RwLock::new(()));
        let (mutex_held, rwlock_held) = (mutex.clone(), rwlock.clone());
        let (hold_tx, hold_rx) = std::sync::mpsc::channel::<()>();
        let (held_tx, held_rx) = std::sync::mpsc::channel::<()>();
        let holder = std::thread::spawn(move || {
            let _m = mutex_held.lock();
            let _w = rwlock_held.write();
            held_tx.send(()).unwrap();
            let _ = hold_rx.recv();
        });
        held_rx.recv().unwrap();
        let site = spawn_here(&rt, {
            let m = mutex.clone();
            move || wait_mutex(m)
        });
        expected.push((ParkReason::Mutex, site, "wait_mutex"));
        let site = spawn_here(&rt, {
            let l = rwlock.clone();
            move || wait_rwlock_read(l)
        });
        expected.push((ParkReason::RwLockRead, site, "wait_rwlock_read"));
        let site = spawn_here(&rt, {
            let l = rwlock.clone();
            move || wait_rwlock_write(l)
        });
        expected.push((ParkReason::RwLockWrite, site, "wait_rwlock_write"));

        let cond_mutex = Arc::new(weft::sync::Mutex::new(false));
        let condvar = Arc::new(weft::sync::Condvar::new());
        let site = spawn_here(&rt, {
            let (m, c) = (cond_mutex.clone(), condvar.clone());
            move || wait_condvar(m, c)
        });
        expected.push((ParkReason::Condvar, site, "wait_condvar"));

        let wg = Arc::new(weft::sync::WaitGroup::new());
        wg.add(1);
        let site = spawn_here(&rt, {
            let wg = wg.clone();
            move || wait_waitgroup(wg)
        });
        expected.push((ParkReason::WaitGroup, site, "wait_waitgroup"));

        let semaphore = Arc::new(weft::sync::Semaphore::new(0));
        let site = spawn_here(&rt, {
            let s = semaphore.clone();
            move || wait_semaphore(s)
        });
        expected.push((ParkReason::Semaphore, site, "wait_semaphore"));

        let barrier = Arc::new(weft::sync::Barrier::new(2));
        let site = spawn_here(&rt, {
            let b = barrier.clone();
            move || wait_barrier(b)
        });
        expected.push((ParkReason::Barrier, site, "wait_barrier"));

        // A `Once` whose initialiser runs on a plain thread until released.
        let once = Arc::new(weft::sync::Once::new());
        let (init_tx, init_rx) = std::sync::mpsc::channel::<()>();
        let (in_init_tx, in_init_rx) = std::sync::mpsc::channel::<()>();
        let initialiser = std::thread::spawn({
            let once = once.clone();
            move || {
                once.call_once(|| {
                    in_init_tx.send(()).unwrap();
                    let _ = init_rx.recv();
                })
            }
        });
        in_init_rx.recv().unwrap();
        let site = spawn_here(&rt, {
            let o = once.clone();
            move || wait_once(o)
        });
        expected.push((ParkReason::Once, site, "wait_once"));

        let site = spawn_here(&rt, wait_park);
        expected.push((ParkReason::Park, site, "wait_park"));
        let site = spawn_here(&rt, wait_park_timeout);
        expected.push((ParkReason::ParkTimeout, site, "wait_park_timeout"));

        let (pool_tx, pool_rx) = std::sync::mpsc::channel::<()>();
        let site = spawn_here(&rt, move || wait_blocking_pool(pool_rx));
        expected.push((ParkReason::BlockingPool, site, "wait_blocking_pool"));

        let yielding = {
            let stop = stop.clone();
            spawn_here(&rt, move || keep_yielding(stop))
        };

        // Let every task reach its park, then dump; retry while some are still on their way.
        let mut dump = weft::debug::dump();
        for _ in 0..50 {
            let all_parked = expected.iter().all(|(reason, site, _)| {
                task_at(&dump, site)
                    .is_some_and(|t| t.state == TaskState::Parked && t.reason == Some(*reason))
            });
            if all_parked {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
            dump = weft::debug::dump();
        }
        let text = dump.full();
        for (reason, site, function) in &expected {
            let task = task_at(&dump, site)
                .unwrap_or_else(|| panic!("no task spawned at {site} in the dump:\n{text}"));
            assert_eq!(task.state, TaskState::Parked, "{function}:\n{text}");
            assert_eq!(task.reason, Some(*reason), "{function}:\n{text}");
            assert!(
                has_frame(&dump, task, function),
                "no frame in {function} for {reason}:\n{text}"
            );
            assert!(task.waited.is_some(), "{function}: no wait time");
            assert!(
                text.contains(&format!("parked [{reason}")),
                "the text does not name {reason}:\n{text}"
            );
        }
        let running = task_at(&dump, computing).expect("the computing task is missing");
        assert_eq!(running.state, TaskState::Running, "{text}");
        // At least this runtime's computing worker (another test's may be stuck too).
        assert!(!dump.stuck_workers.is_empty(), "{text}");
        let runnable = task_at(&dump, yielding).expect("the yielding task is missing");
        assert_eq!(runnable.state, TaskState::Runnable, "{text}");
        assert!(has_frame(&dump, runnable, "keep_yielding"), "{text}");
        let grouped = dump.grouped();
        if std::env::var_os("WEFT_TEST_PRINT_DUMP").is_some() {
            println!("{grouped}\n{text}");
        }
        assert!(grouped.contains("1 task(s): running"), "{grouped}");
        assert!(grouped.contains("1 task(s): runnable"), "{grouped}");
        assert!(
            grouped.contains("1 task(s): parked [chan receive]"),
            "{grouped}"
        );

        stop.store(true, Ordering::Relaxed);
        drop(hold_tx);
        holder.join().unwrap();
        drop(init_tx);
        initialiser.join().unwrap();
        drop(pool_tx);
        drop(keep);
        wg.done();
        drop(rt);
    });
}

#[test]
fn capturing_a_parked_task_is_invisible_to_it() {
    common::within(Duration::from_secs(60), || {
        let rt = weft::Runtime::builder().workers(2).build().unwrap();
        let returns = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let returns = returns.clone();
                rt.spawn(move || loop {
                    weft::task::park();
                    returns.fetch_add(1, Ordering::Relaxed);
                })
            })
            .collect();
        // A sleeper must wake at its deadline, not at a capture.
        let sleeper = rt.spawn(|| {
            let start = Instant::now();
            weft::time::sleep(Duration::from_millis(300));
            start.elapsed()
        });
        std::thread::sleep(Duration::from_millis(50));
        for _ in 0..10 {
            let dump = weft::debug::dump();
            assert!(dump.count(TaskState::Parked) >= 8, "{}", dump.grouped());
        }
        assert_eq!(
            returns.load(Ordering::Relaxed),
            0,
            "a capture returned from park"
        );
        let slept = common::join_within(sleeper, Duration::from_secs(10)).unwrap();
        assert!(slept >= Duration::from_millis(300), "woke early: {slept:?}");
        // An unpark after all those captures still wakes each task exactly once.
        for task in &tasks {
            task.task().unpark();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while returns.load(Ordering::Relaxed) < 8 {
            assert!(
                Instant::now() < deadline,
                "an unpark after a capture was lost"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(rt);
    });
}

#[test]
fn dump_from_a_task_shows_the_caller_running() {
    common::within(Duration::from_secs(60), || {
        let rt = weft::Runtime::builder().workers(1).build().unwrap();
        let (dump, id) = rt.block_on(|| {
            let id = weft::task::current().id().as_u64();
            (weft::debug::dump(), id)
        });
        let me = dump
            .tasks
            .iter()
            .find(|t| t.id == id)
            .expect("caller missing");
        assert_eq!(me.state, TaskState::Running, "{}", dump.full());
        assert!(
            has_frame(&dump, me, "dump_from_a_task_shows_the_caller_running"),
            "{}",
            dump.full()
        );
    });
}

/// The child side of the SIGQUIT tests: three tasks parked at one site, then wait for the
/// signal; with `WEFT_SIGQUIT=continue` it goes on and exits 0 by itself after a while.
fn sigquit_child() {
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let (_tx, rx) = weft::chan::bounded::<()>(0);
    for _ in 0..3 {
        let rx = rx.clone();
        rt.spawn(move || wait_chan_recv(rx));
    }
    std::thread::sleep(Duration::from_millis(100));
    println!("ready");
    std::io::stdout().flush().unwrap();
    if std::env::var("WEFT_SIGQUIT").as_deref() == Ok("continue") {
        std::thread::sleep(Duration::from_secs(3));
        println!("still running");
        std::process::exit(0);
    }
    std::thread::sleep(Duration::from_secs(20));
    eprintln!("SIGQUIT never came");
    std::process::exit(1);
}

/// Runs `test` of this binary as a SIGQUIT child (with `WEFT_SIGQUIT=mode` if given), sends
/// it SIGQUIT once it is ready, and returns its output.
fn sigquit_child_output(test: &str, mode: Option<&str>) -> std::process::Output {
    let exe = std::env::current_exe().unwrap();
    let mut command = std::process::Command::new(exe);
    command
        .args([test, "--exact", "--nocapture"])
        .env("WEFT_TEST_SIGQUIT_CHILD", "1")
        .env_remove("WEFT_SIGQUIT")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    if let Some(mode) = mode {
        command.env("WEFT_SIGQUIT", mode);
    }
    let mut child = command.spawn().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut buf = [0u8; 256];
        let mut told = false;
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 {
                break;
            }
            seen.extend_from_slice(&buf[..n]);
            if !told && String::from_utf8_lossy(&seen).contains("ready") {
                let _ = ready_tx.send(());
                told = true;
            }
        }
        seen
    });
    ready_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the child never got ready");
    // SAFETY: kill has no memory-safety preconditions; the pid is our child's.
    unsafe { libc::kill(child.id() as i32, libc::SIGQUIT) };
    let mut output =
        common::within(Duration::from_secs(30), move || child.wait_with_output()).unwrap();
    output.stdout = reader.join().unwrap();
    output
}

#[test]
fn sigquit_prints_the_grouped_dump_and_exits() {
    if std::env::var_os("WEFT_TEST_SIGQUIT_CHILD").is_some() {
        sigquit_child();
        return;
    }
    let output = sigquit_child_output("sigquit_prints_the_grouped_dump_and_exits", None);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "stderr:\n{stderr}");
    assert!(stderr.contains("SIGQUIT: quit"), "{stderr}");
    assert!(
        stderr.contains("3 task(s): parked [chan receive], spawned at"),
        "{stderr}"
    );
    assert!(stderr.contains("wait_chan_recv"), "{stderr}");
}

#[test]
fn weft_sigquit_continue_prints_the_dump_and_keeps_running() {
    if std::env::var_os("WEFT_TEST_SIGQUIT_CHILD").is_some() {
        sigquit_child();
        return;
    }
    let output = sigquit_child_output(
        "weft_sigquit_continue_prints_the_dump_and_keeps_running",
        Some("continue"),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "stderr:\n{stderr}");
    assert!(
        stderr.contains("3 task(s): parked [chan receive]"),
        "{stderr}"
    );
    assert!(stdout.contains("still running"), "{stdout}");
}

/// Parks with `N` bytes of this task's stack in use.
#[inline(never)]
fn park_deep<const N: usize>(rx: &weft::chan::Receiver<()>) {
    let mut buf = [7u8; N];
    std::hint::black_box(&mut buf);
    let _ = rx.recv();
    std::hint::black_box(&buf);
}

/// The deep task's stack and how much of it `park_deep` fills, leaving less than the capture's
/// 16 KiB reserve but room for the park path's frames. ASan's frames of that path are larger
/// (its redzones): 32 KiB overflows there, so that build gives it a stack twice as large.
#[cfg(not(feature = "asan"))]
const DEEP_STACK: usize = 32 * 1024;
#[cfg(not(feature = "asan"))]
const DEEP_USE: usize = 22_000;
#[cfg(feature = "asan")]
const DEEP_STACK: usize = 64 * 1024;
#[cfg(feature = "asan")]
const DEEP_USE: usize = 46_000;

#[test]
fn a_task_parked_with_a_nearly_full_stack_is_dumped_without_walking_it() {
    common::within(Duration::from_secs(60), || {
        let rt = weft::Runtime::builder().workers(1).build().unwrap();
        let (tx, rx) = weft::chan::bounded::<()>(0);
        let deep = weft::task::Builder::new()
            .stack_size(DEEP_STACK)
            .spawn_on(&rt.handle(), move || park_deep::<DEEP_USE>(&rx))
            .unwrap();
        let id = deep.id().as_u64();
        let mut found = None;
        for _ in 0..100 {
            let dump = weft::debug::dump();
            if let Some(task) = dump.tasks.iter().find(|t| t.id == id) {
                if task.state == TaskState::Parked {
                    found = Some((task.clone(), dump.full()));
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let (task, text) = found.expect("the deep task never parked");
        assert!(task.stack_in_use.unwrap() >= DEEP_USE, "{text}");
        assert_eq!(task.backtrace, None, "walked a nearly full stack:\n{text}");
        assert!(text.contains("too little stack left"), "{text}");
        // And it is none the worse for the capture.
        tx.send(()).unwrap();
        common::join_within(deep, Duration::from_secs(10)).unwrap();
        drop(rt);
    });
}

/// A backtrace starts where the task waits and ends at its closure: weft's park, capture and
/// switch frames are trimmed from the top, and the frames that run a task's closure from the
/// bottom (observe/backtrace.rs invariant 1: the trimming names weft's module paths).
#[test]
fn a_backtrace_starts_where_the_task_waits_and_ends_at_its_closure() {
    common::within(Duration::from_secs(60), || {
        let rt = weft::Runtime::builder()
            .workers(1)
            .monitor_report(|_| {})
            .build()
            .unwrap();
        let (tx, rx) = weft::chan::bounded::<()>(0);
        let site = spawn_here(&rt, move || wait_chan_recv(rx));
        let deadline = Instant::now() + Duration::from_secs(20);
        // Other tests' runtimes share the process: this task is the one spawned at `site`.
        let (dump, task) = loop {
            let dump = weft::debug::dump();
            let task = task_at(&dump, site)
                .filter(|t| t.reason == Some(ParkReason::ChanRecv))
                .cloned();
            if let Some(task) = task {
                break (dump, task);
            }
            assert!(Instant::now() < deadline, "the receiver never parked");
            std::thread::sleep(Duration::from_millis(5));
        };
        let frames = &dump.backtrace_of(&task).expect("a backtrace").frames;
        let text = dump.full();
        // The receive's own frames, then the function that called it. The first may be the
        // `FnMut` shim of the fn item `park_recv` (`<weft::chan::park_recv as FnMut<..>>`),
        // which ASan builds keep out of line.
        let first = &frames.first().expect("frames").function;
        assert!(
            first.trim_start_matches('<').starts_with("weft::chan::")
                || first.contains("wait_chan_recv"),
            "the backtrace starts in weft's park path: {first}\n{text}"
        );
        assert!(
            frames.iter().any(|f| f.function.contains("wait_chan_recv")),
            "{text}"
        );
        assert!(
            !frames
                .iter()
                .any(|f| f.function.contains("weft::sched::task::cell")
                    || f.function.starts_with("corosensei::")),
            "the backtrace goes below the task's closure:\n{text}"
        );
        drop(tx);
    });
}

#[test]
fn the_grouped_dump_names_the_tasks_of_each_group() {
    common::within(Duration::from_secs(60), || {
        let rt = weft::Runtime::builder().workers(1).build().unwrap();
        let (tx, rx) = weft::chan::bounded::<()>(0);
        let named = |name: String| weft::task::Builder::new().name(name);
        let rx1 = rx.clone();
        let stats = named("stats-42".into())
            .spawn_on(&rt.handle(), move || wait_chan_recv(rx1))
            .unwrap();
        let conns: Vec<_> = (0..5)
            .map(|i| {
                let rx = rx.clone();
                named(format!("conn-42-{i}"))
                    .spawn_on(&rt.handle(), move || wait_chan_recv(rx))
                    .unwrap()
            })
            .collect();
        let mut grouped = String::new();
        for _ in 0..100 {
            grouped = weft::debug::dump().grouped();
            if grouped.contains("5 task(s) \"conn-42-") {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            grouped.contains("1 task(s) \"stats-42\": parked [chan receive], spawned at"),
            "{grouped}"
        );
        let line = grouped
            .lines()
            .find(|l| l.starts_with("5 task(s) \"conn-42-"))
            .unwrap_or_else(|| panic!("no group of the five conn tasks:\n{grouped}"));
        // Three names shown, the other two counted: one line, however many tasks.
        assert_eq!(line.matches("\"conn-42-").count(), 3, "{line}");
        assert!(
            line.contains(" and 2 more named: parked [chan receive]"),
            "{line}"
        );
        drop(tx);
        drop(rx);
        for h in conns.into_iter().chain([stats]) {
            common::join_within(h, Duration::from_secs(10)).unwrap();
        }
        drop(rt);
    });
}
