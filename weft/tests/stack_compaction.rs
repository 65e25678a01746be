//! Parked tasks' stacks are reclaimed and compacted, and every access to them — by the task
//! after it wakes, by another thread, by the kernel in a syscall, by a forked child — sees
//! the right bytes (stack/compact.rs, "The contract").
//!
//! Tests that need compaction skip (with a note) where `weft::stack::mode()` is not
//! `Compact`; the fallback test forces reclaim-only in a child process.

use std::hint::black_box;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use weft::stack::{StackMode, StackPolicy};

/// Aborts the process if a test runs longer than `secs`: none of these may hang.
fn watchdog(name: &'static str, secs: u64) -> Arc<AtomicBool> {
    let done = Arc::new(AtomicBool::new(false));
    let flag = done.clone();
    std::thread::spawn(move || {
        let start = Instant::now();
        while !flag.load(Ordering::Relaxed) {
            if start.elapsed() > Duration::from_secs(secs) {
                eprintln!("{name}: still running after {secs} s");
                std::process::abort();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    done
}

fn eager_runtime(workers: usize) -> weft::Runtime {
    weft::Runtime::builder()
        .workers(workers)
        .stack_policy(StackPolicy::eager())
        .build()
        .unwrap()
}

fn compaction_available() -> bool {
    let mode = weft::stack::mode();
    if mode != StackMode::Compact {
        eprintln!("skipped: stack mode is {mode}");
        return false;
    }
    true
}

/// Whether the page holding `addr` is resident (mincore touches nothing).
fn resident(addr: usize) -> bool {
    let page = 4096;
    let mut v = 0u8;
    // SAFETY: mincore reads page tables only; the address is in a stack region we own.
    let rc = unsafe { libc::mincore((addr / page * page) as *mut libc::c_void, 1, &mut v) };
    assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
    v & 1 != 0
}

/// Waits until the page of `addr` has been released (the task is compacted).
fn wait_released(addr: usize) {
    let start = Instant::now();
    while resident(addr) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the parked task's stack was never compacted"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A task's local address, sent out to a helper thread.
struct Addr(usize);

#[test]
fn stress_locals_survive_parks_compactions_and_restores() {
    let done = watchdog("stress", 60);
    let rt = eager_runtime(2);
    if !compaction_available() {
        return;
    }
    let before = weft::stack::counters();
    let stop = Arc::new(AtomicBool::new(false));
    let checked = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..64u64)
        .map(|id| {
            let (stop, checked) = (stop.clone(), checked.clone());
            rt.spawn(move || {
                let mut rng = id.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                let mut next = move || {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    rng
                };
                // Locals of several sizes, held by reference across every park.
                let mut small = [0u64; 8];
                let mut big = [0u8; 20 << 10];
                let mut round = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let seed = next();
                    for (i, word) in small.iter_mut().enumerate() {
                        *word = seed.wrapping_add(i as u64);
                    }
                    let fill = (seed >> 8) as u8;
                    let span = (seed as usize) % big.len();
                    big[..span].fill(fill);
                    let refs = (&small, &big);
                    let sleep = Duration::from_micros(next() % 3000);
                    black_box(deep(next() % 4, sleep));
                    for (i, word) in refs.0.iter().enumerate() {
                        assert_eq!(
                            *word,
                            seed.wrapping_add(i as u64),
                            "task {id} round {round}"
                        );
                    }
                    assert!(
                        refs.1[..span].iter().all(|&b| b == fill),
                        "task {id} round {round}"
                    );
                    black_box(&mut big);
                    round += 1;
                    checked.fetch_add(1, Ordering::Relaxed);
                }
                round
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    stop.store(true, Ordering::Relaxed);
    let rounds: u64 = tasks.into_iter().map(|t| t.join().unwrap()).sum();
    let after = weft::stack::counters();
    assert!(rounds > 64, "only {rounds} rounds");
    assert!(
        after.compactions > before.compactions,
        "nothing was compacted: {after:?}"
    );
    assert!(
        after.restores > before.restores,
        "nothing restored: {after:?}"
    );
    done.store(true, Ordering::Relaxed);
}

/// Parks `depth` frames down, each with a local checked after the sleep.
#[inline(never)]
fn deep(depth: u64, sleep: Duration) -> u64 {
    let mut frame = [depth; 64];
    black_box(&mut frame);
    let below = if depth == 0 {
        weft::time::sleep(sleep);
        0
    } else {
        deep(depth - 1, sleep)
    };
    assert!(
        frame.iter().all(|&w| w == depth),
        "frame at depth {depth} changed"
    );
    below + black_box(&frame)[0]
}

#[test]
fn scoped_thread_write_into_a_compacted_local_is_seen_after_waking() {
    let done = watchdog("scoped write", 30);
    let rt = eager_runtime(2);
    if !compaction_available() {
        return;
    }
    let before = weft::stack::counters();
    let value = rt.block_on(|| {
        let local = AtomicU64::new(1);
        let woken = AtomicBool::new(false);
        let me = weft::task::current();
        std::thread::scope(|s| {
            let (local, woken, me) = (&local, &woken, &me);
            let addr = Addr(local as *const AtomicU64 as usize);
            s.spawn(move || {
                wait_released(addr.0);
                // A plain user-mode write into the released page: held until restored.
                local.store(42, Ordering::Release);
                woken.store(true, Ordering::Release);
                me.unpark();
            });
            while !woken.load(Ordering::Acquire) {
                weft::task::park();
            }
        });
        local.load(Ordering::Acquire)
    });
    assert_eq!(value, 42);
    let after = weft::stack::counters();
    assert!(after.fault_restores > before.fault_restores, "{after:?}");
    done.store(true, Ordering::Relaxed);
}

#[test]
fn pipe_read_into_a_compacted_local_lands_after_waking() {
    let done = watchdog("pipe read", 30);
    let rt = eager_runtime(2);
    if !compaction_available() {
        return;
    }
    let got = rt.block_on(|| {
        let mut buf = [0u8; 16];
        let woken = AtomicBool::new(false);
        let me = weft::task::current();
        let mut fds = [0; 2];
        // SAFETY: a fresh pipe.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let message = *b"kernel wrote it!";
        // SAFETY: writes 16 bytes from a local array into our pipe.
        let written = unsafe { libc::write(fds[1], message.as_ptr().cast(), 16) };
        assert_eq!(written, 16);
        let addr = Addr(buf.as_mut_ptr() as usize);
        std::thread::scope(|s| {
            let (woken, me) = (&woken, &me);
            s.spawn(move || {
                wait_released(addr.0);
                // A kernel-mode write into the released page: the syscall waits for the
                // fault thread instead of failing with EFAULT.
                // SAFETY: `buf` outlives the scope and nobody else touches it meanwhile.
                let n = unsafe { libc::read(fds[0], addr.0 as *mut libc::c_void, 16) };
                assert_eq!(n, 16, "read: {}", std::io::Error::last_os_error());
                woken.store(true, Ordering::Release);
                me.unpark();
            });
            while !woken.load(Ordering::Acquire) {
                weft::task::park();
            }
        });
        // SAFETY: our pipe's fds.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        black_box(&mut buf);
        buf
    });
    assert_eq!(&got, b"kernel wrote it!");
    done.store(true, Ordering::Relaxed);
}

#[test]
fn rendezvous_send_to_a_compacted_receiver_arrives() {
    let done = watchdog("rendezvous", 30);
    let rt = eager_runtime(2);
    if !compaction_available() {
        return;
    }
    let (tx, rx) = weft::chan::bounded::<[u64; 4]>(0);
    let local_addr = Arc::new(AtomicUsize::new(0));
    let published = local_addr.clone();
    let receiver = rt.spawn(move || {
        let marker = [7u64; 4];
        published.store(&marker as *const _ as usize, Ordering::Release);
        // The waiter this receive leaves on our stack is what the sender writes into.
        let value = rx.recv().unwrap();
        assert_eq!(black_box(marker), [7; 4]);
        value
    });
    // The sender is this plain thread, so the send's writes into the waiter fault if the
    // receiver is compacted. (Not a task that blocks on a std join: a worker blocked in a
    // futex never compacts the tasks parked on it, and this test would wait forever.)
    let addr = loop {
        match local_addr.load(Ordering::Acquire) {
            0 => std::thread::sleep(Duration::from_millis(1)),
            addr => break addr,
        }
    };
    wait_released(addr);
    tx.send([1, 2, 3, 4]).unwrap();
    let got = receiver.join().unwrap();
    assert_eq!(got, [1, 2, 3, 4]);
    done.store(true, Ordering::Relaxed);
}

#[test]
fn forked_child_reads_a_compacted_stack() {
    let done = watchdog("fork", 30);
    let rt = eager_runtime(2);
    if !compaction_available() {
        return;
    }
    let addr = Arc::new(AtomicUsize::new(0));
    let published = addr.clone();
    let release = Arc::new(AtomicBool::new(false));
    let released = release.clone();
    let task = rt.spawn(move || {
        let local = [0x5eed_u64; 32];
        published.store(&local as *const _ as usize, Ordering::Release);
        while !released.load(Ordering::Acquire) {
            weft::task::park_timeout(Duration::from_millis(50));
        }
        black_box(local)[0]
    });
    let start = Instant::now();
    let addr = loop {
        match addr.load(Ordering::Acquire) {
            0 => std::thread::sleep(Duration::from_millis(1)),
            addr => break addr,
        }
    };
    // Compacted once (it wakes every 50 ms, and is compacted again soon after each park).
    while resident(addr) && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_micros(200));
    }
    // SAFETY: the child only reads memory and exits; no allocation, no locks.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: `addr` points at the task's 32-word local, alive until `release`.
        let words = unsafe { std::slice::from_raw_parts(addr as *const u64, 32) };
        let ok = words.iter().all(|&w| w == 0x5eed);
        // SAFETY: leaves the child at once.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    assert!(pid > 0, "fork failed");
    let mut status = 0;
    // SAFETY: waits for our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child read wrong bytes (status {status:#x})"
    );
    release.store(true, Ordering::Release);
    assert_eq!(task.join().unwrap(), 0x5eed);
    done.store(true, Ordering::Relaxed);
}

/// Runs the one test `name` of this binary in a child process with `env`; returns its
/// status, stdout and stderr.
fn run_child(name: &str, env: &[(&str, &str)]) -> (std::process::Output, String, String) {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.args(["--exact", name, "--nocapture", "--test-threads=1"]);
    for (key, value) in env {
        command.env(key, value);
    }
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (output, stdout, stderr)
}

const FALLBACK_CHILD: &str = "WEFT_TEST_STACK_FALLBACK_CHILD";

/// Where compaction is not permitted (forced here with `WEFT_STACK_COMPACTION=off`), weft
/// reclaims the pages below parked tasks' stack pointers and compacts nothing.
#[test]
fn fallback_reclaims_without_compaction() {
    if std::env::var(FALLBACK_CHILD).is_ok() {
        fallback_child();
        return;
    }
    let (output, stdout, stderr) = run_child(
        "fallback_reclaims_without_compaction",
        &[(FALLBACK_CHILD, "1"), ("WEFT_STACK_COMPACTION", "off")],
    );
    assert!(output.status.success(), "child failed: {stdout}\n{stderr}");
    assert!(stdout.contains("fallback ok"), "{stdout}\n{stderr}");
}

fn fallback_child() {
    let done = watchdog("fallback", 30);
    let rt = eager_runtime(2);
    let mode = weft::stack::mode();
    assert!(matches!(mode, StackMode::Reclaim(_)), "mode {mode}");
    let gate = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..32u64)
        .map(|id| {
            let gate = gate.clone();
            rt.spawn(move || {
                black_box(touch_64k(id));
                let local = [id; 16];
                while !gate.load(Ordering::Acquire) {
                    weft::task::park_timeout(Duration::from_millis(20));
                }
                assert!(black_box(local).iter().all(|&w| w == id));
            })
        })
        .collect();
    let start = Instant::now();
    while weft::stack::counters().reclaimed_bytes < 32 * (48 << 10) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "nothing reclaimed: {:?}",
            weft::stack::counters()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    gate.store(true, Ordering::Release);
    for task in tasks {
        task.join().unwrap();
    }
    let counters = weft::stack::counters();
    assert_eq!(counters.compactions, 0, "{counters:?}");
    println!("fallback ok: {counters:?}");
    done.store(true, Ordering::Relaxed);
}

#[inline(never)]
fn touch_64k(seed: u64) -> u8 {
    touch::<{ 64 << 10 }>(seed)
}

fn touch<const BYTES: usize>(seed: u64) -> u8 {
    let mut buf = [0u8; BYTES];
    black_box(&mut buf);
    for i in (0..buf.len()).step_by(512) {
        buf[i] = (i as u64 ^ seed) as u8;
    }
    black_box(&buf)[777]
}

/// Writes by another thread that race with compactions and restores of the stack they write
/// into are never lost (stack/compact.rs invariant 3: write-protect before the copy).
#[test]
fn writes_racing_compaction_are_never_lost() {
    let done = watchdog("racing writes", 60);
    let rt = eager_runtime(2);
    if !compaction_available() {
        return;
    }
    let before = weft::stack::counters();
    let (sum, written) = rt.block_on(|| {
        let counters = [const { AtomicU64::new(0) }; 8];
        let finished = AtomicBool::new(false);
        let me = weft::task::current();
        let written = std::thread::scope(|s| {
            let (counters, finished, me) = (&counters, &finished, &me);
            let writer = s.spawn(move || {
                let start = Instant::now();
                let mut i = 0u64;
                while start.elapsed() < Duration::from_millis(1500) {
                    counters[(i % 8) as usize].fetch_add(1, Ordering::Relaxed);
                    i += 1;
                    if i.is_multiple_of(64) {
                        // Idle moments in which the worker compacts the parked task.
                        std::thread::sleep(Duration::from_micros(300));
                    }
                }
                finished.store(true, Ordering::Release);
                me.unpark();
                i
            });
            while !finished.load(Ordering::Acquire) {
                weft::task::park_timeout(Duration::from_millis(1));
            }
            writer.join().unwrap()
        });
        let sum: u64 = counters.iter().map(|c| c.load(Ordering::Relaxed)).sum();
        (sum, written)
    });
    assert_eq!(sum, written, "writes were lost");
    let after = weft::stack::counters();
    let compactions = after.compactions - before.compactions;
    assert!(
        compactions > 10,
        "only {compactions} compactions: {after:?}"
    );
    assert!(after.fault_restores > before.fault_restores, "{after:?}");
    done.store(true, Ordering::Relaxed);
}

const GUARD_CHILD: &str = "WEFT_TEST_STACK_GUARD_CHILD";

/// A compacted task's slot is guarded again before the task runs again (stack/compact.rs
/// invariants 4 and 8): reading the guard page of a restored, running task's slot must fault.
/// Checked in a child process, which the fault kills.
#[test]
fn restored_slot_has_its_guard_page_again() {
    if std::env::var(GUARD_CHILD).is_ok() {
        guard_child();
        return;
    }
    let Some((stdout, stderr)) =
        aborted_child("restored_slot_has_its_guard_page_again", GUARD_CHILD)
    else {
        return;
    };
    assert!(
        !stdout.contains("no guard"),
        "the guard page read did not fault: {stdout}"
    );
    assert!(stderr.contains("stack overflow"), "{stderr}");
}

/// Runs the test `name` in a child with `var` set; None if it skipped, else its stdout and
/// stderr once it is known to have aborted.
fn aborted_child(name: &str, var: &str) -> Option<(String, String)> {
    let (output, stdout, stderr) = run_child(name, &[(var, "1")]);
    if stdout.contains("skipped") {
        return None;
    }
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        output.status.signal(),
        Some(libc::SIGABRT),
        "the child did not abort: {stdout}\n{stderr}"
    );
    Some((stdout, stderr))
}

fn guard_child() {
    let _done = watchdog("guard child", 30);
    let rt = eager_runtime(2);
    if !compaction_available() {
        println!("skipped");
        return;
    }
    let running = Arc::new(AtomicBool::new(false));
    let resumed = running.clone();
    let local = wake_a_compacted_task(&rt, move |local| {
        resumed.store(true, Ordering::Release);
        // Running, never parked again: stays restored.
        loop {
            black_box(local);
            weft::task::yield_now();
        }
    });
    while !running.load(Ordering::Acquire) {
        std::thread::sleep(Duration::from_millis(1));
    }
    let guard = local & !((64 << 10) - 1);
    // SAFETY: deliberately reads the guard page; the process is expected to die here.
    let value = unsafe { std::ptr::read_volatile(guard as *const u8) };
    println!("guard page read returned {value}: no guard");
    // The task never parks again, so dropping the runtime would wait for it.
    std::process::exit(0);
}

#[test]
fn a_dump_of_compacted_tasks_restores_them_first_and_loses_nothing() {
    // A dump resumes each parked task for a moment to record its backtrace: a compacted
    // stack must be restored before that, and the deeper stack pointer of the capture's
    // switch must be the one the next compaction keeps.
    let done = watchdog("dump of compacted tasks", 60);
    let rt = eager_runtime(2);
    if !compaction_available() {
        return;
    }
    let (addr_tx, addr_rx) = std::sync::mpsc::channel::<Addr>();
    let go = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..16u64)
        .map(|i| {
            let (addr_tx, go) = (addr_tx.clone(), go.clone());
            rt.spawn(move || {
                let mut local = [0u64; 64];
                for (j, v) in local.iter_mut().enumerate() {
                    *v = i * 1000 + j as u64;
                }
                addr_tx
                    .send(Addr(black_box(&local) as *const _ as usize))
                    .unwrap();
                while !go.load(Ordering::Acquire) {
                    weft::task::park();
                }
                let local = black_box(&local);
                local
                    .iter()
                    .enumerate()
                    .all(|(j, &v)| v == i * 1000 + j as u64)
            })
        })
        .collect();
    let addrs: Vec<usize> = (0..16).map(|_| addr_rx.recv().unwrap().0).collect();
    for round in 0..3 {
        for &a in &addrs {
            wait_released(a);
        }
        let dump = weft::debug::dump();
        let parked = dump.count(weft::debug::TaskState::Parked);
        assert!(parked >= 16, "round {round}: {parked} parked in the dump");
    }
    go.store(true, Ordering::Release);
    for t in &tasks {
        t.task().unpark();
    }
    for t in tasks {
        assert!(
            t.join().unwrap(),
            "a compacted, dumped task lost its locals"
        );
    }
    done.store(true, Ordering::Relaxed);
}

const OVERFLOW_CHILD: &str = "WEFT_TEST_STACK_OVERFLOW_AFTER_RESTORE_CHILD";

/// A task whose stack was compacted and restored (its guard page then has no marker: the
/// registration guards it, stack/compact.rs invariant 8) and that then overflows is reported
/// like any overflow: the task's spawn site, its stack size, the fault address — so the
/// report ran on the task's own worker thread.
#[test]
fn a_restored_task_that_overflows_is_reported() {
    if std::env::var(OVERFLOW_CHILD).is_ok() {
        overflow_after_restore_child();
        return;
    }
    assert_overflow_reported("a_restored_task_that_overflows_is_reported", OVERFLOW_CHILD);
}

/// Runs the test `name` in a child with `var` set and checks that it aborted with the
/// overflow report of a 64 KiB task spawned in this file (unless the child skipped).
fn assert_overflow_reported(name: &str, var: &str) {
    let Some((_, stderr)) = aborted_child(name, var) else {
        return;
    };
    let line = stderr
        .lines()
        .find(|l| l.contains("stack overflow"))
        .unwrap_or_else(|| panic!("no overflow report in: {stderr}"));
    assert!(
        line.starts_with("weft: fatal error: stack overflow in task ")
            && line.contains("tests/stack_compaction.rs:")
            && line.contains("stack 64 KiB"),
        "{line}"
    );
}

/// Recurses with 1 KiB frames until the guard page stops it.
#[inline(never)]
fn recurse_forever(depth: u64) -> u64 {
    if black_box(depth) == u64::MAX {
        return 0;
    }
    let mut frame = [depth; 128];
    black_box(&mut frame);
    recurse_forever(depth + 1) + black_box(frame[0])
}

fn overflow_after_restore_child() {
    let _done = watchdog("overflow child", 30);
    let rt = eager_runtime(2);
    if !compaction_available() {
        println!("skipped");
        return;
    }
    wake_a_compacted_task(&rt, |local| {
        black_box(local);
        black_box(recurse_forever(0));
    });
    std::thread::sleep(Duration::from_secs(10));
    println!("the overflow did not abort the process");
}

/// Spawns a task with a 64 KiB stack that parks holding a local, waits until its stack is
/// compacted, wakes it and returns the local's address; the task then runs `after_wake`.
fn wake_a_compacted_task(
    rt: &weft::Runtime,
    after_wake: impl FnOnce(&[u64; 8]) + Send + 'static,
) -> usize {
    let addr = Arc::new(AtomicUsize::new(0));
    let woken = Arc::new(AtomicBool::new(false));
    let handle = Arc::new(std::sync::Mutex::new(None));
    let (published, wake, me) = (addr.clone(), woken.clone(), handle.clone());
    let _task = weft::task::Builder::new()
        .stack_size(64 << 10)
        .spawn_on(&rt.handle(), move || {
            let local = [3u64; 8];
            *me.lock().unwrap() = Some(weft::task::current());
            published.store(&local as *const _ as usize, Ordering::Release);
            while !wake.load(Ordering::Acquire) {
                weft::task::park();
            }
            after_wake(&local);
        })
        .unwrap();
    let local = loop {
        match addr.load(Ordering::Acquire) {
            0 => std::thread::sleep(Duration::from_millis(1)),
            a => break a,
        }
    };
    wait_released(local);
    woken.store(true, Ordering::Release);
    handle
        .lock()
        .unwrap()
        .clone()
        .expect("task handle")
        .unpark();
    local
}

const FRESH_OVERFLOW_CHILD: &str = "WEFT_TEST_STACK_FRESH_OVERFLOW_CHILD";
const FRESH_FORK_CHILD: &str = "WEFT_TEST_STACK_FRESH_FORK_CHILD";

/// Registers the 64 KiB slots' region (a task is compacted), then starts over a thousand
/// tasks that hold their slots, so that 64 KiB slots are carved from the registered region
/// without guard markers (stack/region.rs invariant 2), past the first page of its
/// compaction table (never compacted, so never touched), and runs `f` in a task on the next
/// slot carved.
fn run_on_a_slot_carved_after_registration(rt: &weft::Runtime, f: impl FnOnce() + Send + 'static) {
    wake_a_compacted_task(rt, |local| {
        black_box(local);
    });
    const SHORT: usize = 1100;
    let gate = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicUsize::new(0));
    let short: Vec<_> = (0..SHORT)
        .map(|_| {
            let (gate, started) = (gate.clone(), started.clone());
            weft::task::Builder::new()
                .stack_size(64 << 10)
                .spawn_on(&rt.handle(), move || {
                    started.fetch_add(1, Ordering::AcqRel);
                    // Yield, never park: every one holds its slot until all have started,
                    // and none is compacted.
                    while !gate.load(Ordering::Acquire) {
                        weft::task::yield_now();
                    }
                })
                .unwrap()
        })
        .collect();
    while started.load(Ordering::Acquire) < SHORT {
        std::thread::sleep(Duration::from_millis(1));
    }
    // Every slot carved so far is held: this one is carved now.
    weft::task::Builder::new()
        .stack_size(64 << 10)
        .spawn_on(&rt.handle(), f)
        .unwrap()
        .join()
        .unwrap();
    gate.store(true, Ordering::Release);
    for task in short {
        task.join().unwrap();
    }
}

/// A task on a slot that never had a guard marker (carved after its region was registered:
/// the registration is its guard) that overflows is reported like any overflow.
#[test]
fn a_task_on_an_unmarked_slot_that_overflows_is_reported() {
    if std::env::var(FRESH_OVERFLOW_CHILD).is_ok() {
        let _done = watchdog("fresh overflow child", 30);
        let rt = eager_runtime(2);
        if !compaction_available() {
            println!("skipped");
            return;
        }
        run_on_a_slot_carved_after_registration(&rt, || {
            black_box(recurse_forever(0));
        });
        std::thread::sleep(Duration::from_secs(10));
        println!("the overflow did not abort the process");
        return;
    }
    assert_overflow_reported(
        "a_task_on_an_unmarked_slot_that_overflows_is_reported",
        FRESH_OVERFLOW_CHILD,
    );
}

/// A forked child has no userfaultfd registration, so a slot that the registration guarded
/// in the parent gets a guard marker in the child (stack/compact.rs, "fork"): a task that
/// forks on such a slot, and whose child touches the slot's guard page, kills the child.
#[test]
fn a_forked_child_guards_slots_the_registration_guarded() {
    if std::env::var(FRESH_FORK_CHILD).is_ok() {
        let _done = watchdog("fresh fork child", 30);
        let rt = eager_runtime(2);
        if !compaction_available() {
            println!("skipped");
            return;
        }
        let status = Arc::new(AtomicU64::new(u64::MAX));
        let seen = status.clone();
        run_on_a_slot_carved_after_registration(&rt, move || {
            let local = 0u8;
            let guard = (&local as *const u8 as usize) & !((64 << 10) - 1);
            // SAFETY: the child only reads its guard page and exits; no allocation, no locks.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                // SAFETY: deliberately reads the guard page: the child should die here.
                let value = unsafe { std::ptr::read_volatile(guard as *const u8) };
                // SAFETY: leaves the child at once.
                unsafe { libc::_exit(i32::from(value) + 7) };
            }
            let mut raw = 0;
            // SAFETY: waits for our own child.
            unsafe { libc::waitpid(pid, &mut raw, 0) };
            seen.store(raw as u64, Ordering::Release);
        });
        let start = Instant::now();
        while status.load(Ordering::Acquire) == u64::MAX {
            assert!(start.elapsed() < Duration::from_secs(20), "no child status");
            std::thread::sleep(Duration::from_millis(1));
        }
        let raw = status.load(Ordering::Acquire) as i32;
        println!(
            "child: exited {} status {}, signalled {} signal {}",
            libc::WIFEXITED(raw),
            libc::WEXITSTATUS(raw),
            libc::WIFSIGNALED(raw),
            libc::WTERMSIG(raw)
        );
        std::process::exit(0);
    }
    let (output, stdout, stderr) = run_child(
        "a_forked_child_guards_slots_the_registration_guarded",
        &[(FRESH_FORK_CHILD, "1")],
    );
    if stdout.contains("skipped") {
        return;
    }
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("child: exited false") && stdout.contains("signalled true"),
        "the child read its guard page: {stdout}\n{stderr}"
    );
}

/// The `/proc/self/pagemap` entry of the page holding `addr` (bit 63 present, bit 62 swapped).
fn pagemap_entry(addr: usize) -> Option<u64> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open("/proc/self/pagemap").ok()?;
    let mut entry = [0u8; 8];
    file.read_exact_at(&mut entry, (addr / 4096 * 8) as u64)
        .ok()?;
    Some(u64::from_ne_bytes(entry))
}

/// Memory pressure swaps a parked task's stack page out before the task is compacted: the
/// compaction must copy the swapped page (its pte is not empty, though `mincore` calls it
/// not resident), not take it for a never-touched one that reads as zeros (it did: every
/// word lost). Reached only where swap is on and a swapped page leaves the swap cache at
/// once (zswap or zram: `swapon` a file and `echo Y > /sys/module/zswap/parameters/enabled`);
/// elsewhere it says so and checks only that the stack survived.
#[test]
fn a_stack_page_swapped_out_before_compaction_keeps_its_bytes() {
    const PAGEOUT: i32 = 21; // MADV_PAGEOUT
    let done = watchdog("swapped stack", 30);
    let compact_after = Duration::from_millis(300);
    let rt = weft::Runtime::builder()
        .workers(1)
        .stack_policy(StackPolicy::after(compact_after, compact_after))
        .build()
        .unwrap();
    if !compaction_available() {
        return;
    }
    // Off the task's stack, so that the helper thread touches nothing of it but the pageout.
    let woken = Arc::new(AtomicBool::new(false));
    const NOT_SWAPPED: usize = 1;
    const IN_SWAP_CACHE: usize = 2;
    const SWAPPED_OUT: usize = 3;
    let swapped = Arc::new(AtomicUsize::new(0));
    let (addr_tx, addr_rx) = std::sync::mpsc::channel::<(usize, usize)>();
    let (flag, verdict) = (woken.clone(), swapped.clone());
    let task = rt.spawn(move || {
        let mut pattern = [0u64; 768]; // 6 KiB: two or three pages
        for (i, word) in pattern.iter_mut().enumerate() {
            *word = 0x5eed_0000_0000_0000 | i as u64;
        }
        let pattern = black_box(pattern);
        let me = weft::task::current();
        let start = pattern.as_ptr() as usize;
        // SAFETY: no arguments.
        let cpu = unsafe { libc::sched_getcpu() };
        addr_tx
            .send((start, start + size_of_val(&pattern)))
            .unwrap();
        let helper = std::thread::spawn(move || {
            let (start, end) = addr_rx.recv().unwrap();
            // A page faulted in a moment ago waits in its CPU's batch before it joins the
            // LRU lists, where no pageout finds it; a pageout drains its own CPU's batch.
            if cpu >= 0 {
                // SAFETY: a zeroed set with one CPU added, for this thread.
                unsafe {
                    let mut set: libc::cpu_set_t = std::mem::zeroed();
                    libc::CPU_SET(cpu as usize, &mut set);
                    libc::sched_setaffinity(0, size_of_val(&set), &set);
                }
            }
            // The task parks right after sending; the compaction comes 300 ms later.
            std::thread::sleep(Duration::from_millis(50));
            let first = start / 4096 * 4096;
            // SAFETY: a hint about pages of this process; their contents are kept.
            let rc = unsafe { libc::madvise(first as *mut libc::c_void, end - first, PAGEOUT) };
            let pages = || (first..end).step_by(4096);
            let all_swapped =
                rc == 0 && pages().all(|p| pagemap_entry(p).is_some_and(|e| e & (1 << 62) != 0));
            let verdict_now = match (all_swapped, pages().any(resident)) {
                (true, false) => SWAPPED_OUT,
                (true, true) => IN_SWAP_CACHE,
                (false, _) => NOT_SWAPPED,
            };
            verdict.store(verdict_now, Ordering::Release);
            let before = weft::stack::counters().compactions;
            let start = Instant::now();
            while weft::stack::counters().compactions == before
                && start.elapsed() < Duration::from_secs(5)
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            flag.store(true, Ordering::Release);
            me.unpark();
        });
        while !woken.load(Ordering::Acquire) {
            weft::task::park();
        }
        helper.join().unwrap();
        let pattern = black_box(pattern);
        pattern
            .iter()
            .enumerate()
            .filter(|&(i, &word)| word != 0x5eed_0000_0000_0000 | i as u64)
            .count()
    });
    let wrong_words = task.join().unwrap();
    match swapped.load(Ordering::Acquire) {
        SWAPPED_OUT => {}
        IN_SWAP_CACHE => eprintln!(
            "not reached: the page stayed in the swap cache (a swap device without zswap), \
             where mincore still calls it resident"
        ),
        _ => eprintln!("skipped: MADV_PAGEOUT swapped nothing out (no swap here)"),
    }
    assert_eq!(wrong_words, 0, "words of the swapped-out stack lost");
    done.store(true, Ordering::Relaxed);
}

const NO_MEMORY_CHILD: &str = "WEFT_TEST_NO_MEMORY_CGROUP";

/// A memory cgroup (v1) for one test, removed on drop; `None` (with the reason) where this
/// process cannot make one (not root, no v1 memory controller).
struct MemoryCgroup(std::path::PathBuf);

impl MemoryCgroup {
    fn new(limit: u64) -> Result<MemoryCgroup, String> {
        let root = std::path::Path::new("/sys/fs/cgroup/memory");
        if !root.join("memory.limit_in_bytes").exists() {
            return Err("no cgroup v1 memory controller at /sys/fs/cgroup/memory".into());
        }
        let dir = root.join(format!("weft-test-{}", std::process::id()));
        std::fs::create_dir(&dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
        let group = MemoryCgroup(dir);
        group.set("memory.limit_in_bytes", limit)?;
        // With its OOM killer off, a charge the cgroup cannot make fails with ENOMEM in a
        // system call (UFFDIO_COPY) instead of killing the process.
        group.set("memory.oom_control", 1)?;
        Ok(group)
    }

    fn set(&self, file: &str, value: u64) -> Result<(), String> {
        std::fs::write(self.0.join(file), value.to_string())
            .map_err(|e| format!("cannot write {file}: {e}"))
    }
}

/// The number in the cgroup file `dir/file`.
fn cgroup_number(dir: &std::path::Path, file: &str) -> u64 {
    let text = std::fs::read_to_string(dir.join(file)).unwrap();
    text.trim().parse().unwrap()
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// A compacted task woken while its memory cgroup is full waits for memory to be restored
/// and then finds its stack intact. Before, the restore gave up on `UFFDIO_COPY`'s ENOMEM,
/// the slot was marked restored with its page missing, and once memory came back the fault
/// thread filled that page with zeros: the task jumped to address 0 (seen with 40,000 tasks,
/// a local program; without the memory coming back, the fault thread spun instead).
#[test]
fn a_restore_in_a_full_memory_cgroup_waits_for_memory() {
    if let Ok(procs) = std::env::var(NO_MEMORY_CHILD) {
        no_memory_child(&procs);
        return;
    }
    let _rt = eager_runtime(1); // the stack mode is settled by the first runtime
    if !compaction_available() {
        return;
    }
    let limit = 128 << 20;
    let group = match MemoryCgroup::new(limit) {
        Ok(group) => group,
        Err(reason) => {
            eprintln!("skipped: {reason}");
            return;
        }
    };
    let procs = group.0.join("cgroup.procs");
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_restore_in_a_full_memory_cgroup_waits_for_memory",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(NO_MEMORY_CHILD, &procs)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Memory comes back once the cgroup has refused charges for a while (weft's line saying
    // that it waits cannot be read here: writing it into the pipe needs memory too).
    let failures = || cgroup_number(&group.0, "memory.failcnt");
    let mut child = child;
    let child_stdout = child.stdout.take().unwrap();
    let (woken_tx, woken_rx) = std::sync::mpsc::channel::<()>();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut text = String::new();
        for line in std::io::BufReader::new(child_stdout)
            .lines()
            .map_while(Result::ok)
        {
            if line.contains("waking the compacted tasks") {
                let _ = woken_tx.send(());
            }
            text.push_str(&line);
            text.push('\n');
        }
        text
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let woken = woken_rx.recv_timeout(Duration::from_secs(30)).is_ok();
    let before = failures();
    let running = |child: &mut std::process::Child| child.try_wait().unwrap().is_none();
    while woken && failures() == before && Instant::now() < deadline && running(&mut child) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let refused = woken && failures() > before;
    std::thread::sleep(Duration::from_millis(300));
    group.set("memory.limit_in_bytes", 4 * limit).unwrap();
    let output = child.wait_with_output().unwrap();
    let stdout = reader.join().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "child failed: {stdout}\n{stderr}");
    assert!(stdout.contains("wrong stacks: 0 of"), "{stdout}\n{stderr}");
    if refused {
        eprintln!(
            "{}",
            stdout
                .lines()
                .filter(|l| l.contains("usage"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    } else {
        eprintln!("not reached: the cgroup never ran short of memory\n{stdout}\n{stderr}");
    }
}

fn no_memory_child(procs: &str) {
    let done = watchdog("no memory", 60);
    std::fs::write(procs, std::process::id().to_string()).expect("join the memory cgroup");
    let cgroup = std::path::Path::new(procs).parent().unwrap().to_owned();
    let read = |file: &str| cgroup_number(&cgroup, file);
    let rt = eager_runtime(1);
    // Each was 16 KiB deep when compacted, so its restore fills 16 KiB (compact.rs invariant
    // 4) from an image of a page or less: 80 MB in all.
    const TASKS: u64 = 5_000;
    let go = Arc::new(AtomicBool::new(false));
    let parked = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..TASKS)
        .map(|id| {
            let (go, parked) = (go.clone(), parked.clone());
            rt.spawn(move || {
                black_box(touch::<{ 16 << 10 }>(id));
                let local = [id; 32];
                parked.fetch_add(1, Ordering::Relaxed);
                while !go.load(Ordering::Acquire) {
                    weft::task::park();
                }
                black_box(local).iter().all(|&w| w == id)
            })
        })
        .collect();
    let start = Instant::now();
    while parked.load(Ordering::Relaxed) < TASKS as usize
        || weft::stack::counters().compacted_tasks < TASKS
    {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "never all compacted"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // Fill the cgroup with anonymous memory up to 8 MiB below its limit (the page cache it
    // also holds, this binary's, gives way).
    let limit = read("memory.limit_in_bytes");
    let anonymous = || -> u64 {
        let stat = std::fs::read_to_string(cgroup.join("memory.stat")).unwrap();
        stat.lines()
            .find_map(|l| l.strip_prefix("rss "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    };
    let mut hog: Vec<Vec<u8>> = Vec::new();
    while anonymous() + (8 << 20) < limit {
        hog.push(vec![1u8; 4 << 20]);
    }
    // Written while the cgroup still has room for the pipe's page.
    println!(
        "\nwaking the compacted tasks; usage {} MiB, failcnt {}",
        read("memory.usage_in_bytes") >> 20,
        read("memory.failcnt")
    );
    std::io::Write::flush(&mut std::io::stdout()).unwrap();
    go.store(true, Ordering::Release);
    for task in &tasks {
        task.task().unpark();
    }
    let wrong = tasks
        .into_iter()
        .map(|task| task.join().unwrap())
        .filter(|&intact| !intact)
        .count();
    black_box(hog);
    println!(
        "wrong stacks: {wrong} of {TASKS}; usage {} MiB of {} MiB, failcnt {}",
        read("memory.usage_in_bytes") >> 20,
        limit >> 20,
        read("memory.failcnt")
    );
    done.store(true, Ordering::Relaxed);
}
