//! `weft::context::Context`: one `cancel()` ends a whole tree of tasks, each blocked in a
//! different operation, with the context's error; deadlines end them by themselves; a plain
//! thread can be bound too; `select!` waits on `done()`.
//!
//! Timings are printed (an idle machine should show well under 1 ms per task) and asserted
//! only loosely, since CI machines are shared.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use common::join_within;
use weft::context::{Context, ContextError};
use weft::sync::{Condvar, Mutex, RwLock, Semaphore, WaitGroup};

const LIMIT: Duration = Duration::from_secs(10);
/// A loose bound on the time from `cancel()` to a task's unwind (printed figures are the
/// evidence; this only catches a wake that never comes).
const LOOSE: Duration = Duration::from_millis(100);

/// Records when it is dropped: the moment its task unwound.
struct Stamp {
    what: &'static str,
    log: Arc<StdMutex<Vec<(&'static str, Instant)>>>,
}

impl Drop for Stamp {
    fn drop(&mut self) {
        self.log.lock().unwrap().push((self.what, Instant::now()));
    }
}

type Log = Arc<StdMutex<Vec<(&'static str, Instant)>>>;

/// What a leaf of the tree blocks in.
fn block_in(what: &'static str, shared: &Shared) -> Box<dyn FnOnce() + Send> {
    match what {
        "recv" => {
            let rx = shared.rx.clone();
            Box::new(move || {
                let _ = rx.recv();
            })
        }
        "send" => {
            let tx = shared.tx0.clone();
            Box::new(move || {
                let _ = tx.send(1);
            })
        }
        "select" => {
            let rx = shared.rx.clone();
            Box::new(move || {
                weft::select! {
                    recv(rx) -> _ => {},
                    after(Duration::from_secs(3600)) => {},
                }
            })
        }
        "sleep" => Box::new(|| weft::time::sleep(Duration::from_secs(3600))),
        "mutex" => {
            let m = shared.mutex.clone();
            Box::new(move || drop(m.lock()))
        }
        "rwlock" => {
            let l = shared.rwlock.clone();
            Box::new(move || drop(l.write()))
        }
        "condvar" => {
            let p = shared.condvar.clone();
            Box::new(move || {
                let (lock, cond) = &*p;
                let mut g = lock.lock();
                loop {
                    g = cond.wait(g);
                }
            })
        }
        "waitgroup" => {
            let g = shared.group.clone();
            Box::new(move || g.wait())
        }
        "semaphore" => {
            let s = shared.sem.clone();
            Box::new(move || drop(s.acquire()))
        }
        "join" => {
            let rx = shared.rx.clone();
            // Joins an unbound task that waits for good (it is cancelled at shutdown).
            Box::new(move || {
                let _ = weft::spawn(move || {
                    let _ = rx.recv();
                })
                .join();
            })
        }
        _ => unreachable!(),
    }
}

#[derive(Clone)]
struct Shared {
    rx: weft::chan::Receiver<u32>,
    tx0: weft::chan::Sender<u32>,
    mutex: Arc<Mutex<()>>,
    rwlock: Arc<RwLock<()>>,
    condvar: Arc<(Mutex<()>, Condvar)>,
    group: Arc<WaitGroup>,
    sem: Arc<Semaphore>,
}

const OPS: [&str; 10] = [
    "recv",
    "send",
    "select",
    "sleep",
    "mutex",
    "rwlock",
    "condvar",
    "waitgroup",
    "semaphore",
    "join",
];

#[test]
fn one_cancel_ends_a_tree_of_tasks_blocked_in_different_operations() {
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let log: Log = Arc::default();
    let started = Arc::new(AtomicUsize::new(0));
    let root = Context::new();
    // Held by the test so the waits cannot end on their own.
    let (_tx, rx) = weft::chan::bounded::<u32>(0);
    let (tx0, _rx0) = weft::chan::bounded::<u32>(0);
    let shared = Shared {
        rx,
        tx0,
        mutex: Arc::new(Mutex::new(())),
        rwlock: Arc::new(RwLock::new(())),
        condvar: Arc::new((Mutex::new(()), Condvar::new())),
        group: Arc::new(WaitGroup::new()),
        sem: Arc::new(Semaphore::new(0)),
    };
    shared.group.add(1);
    let _mutex_held = shared.mutex.try_lock().unwrap();
    let _read_held = shared.rwlock.try_read().unwrap();

    // parent (bound to a child of root) → 10 children (one per operation, each bound to a
    // child context) → each child has a grandchild blocked in the next operation.
    let parent_ctx = root.child();
    let _entered = rt.handle().enter();
    let (l, s, sh) = (log.clone(), started.clone(), shared.clone());
    let parent = parent_ctx.clone().spawn(move || {
        let _stamp = Stamp {
            what: "parent",
            log: l.clone(),
        };
        let children: Vec<_> = OPS
            .iter()
            .enumerate()
            .map(|(i, &op)| {
                let ctx = parent_ctx.child();
                let (l, s, sh) = (l.clone(), s.clone(), sh.clone());
                ctx.clone().spawn(move || {
                    let _stamp = Stamp {
                        what: op,
                        log: l.clone(),
                    };
                    let grand_op = OPS[(i + 1) % OPS.len()];
                    let grand_block = block_in(grand_op, &sh);
                    let (gl, gs) = (l.clone(), s.clone());
                    let grandchild = ctx.child().spawn(move || {
                        let _stamp = Stamp {
                            what: grand_op,
                            log: gl,
                        };
                        gs.fetch_add(1, Ordering::SeqCst);
                        grand_block();
                    });
                    s.fetch_add(1, Ordering::SeqCst);
                    block_in(op, &sh)();
                    drop(grandchild);
                })
            })
            .collect();
        s.fetch_add(1, Ordering::SeqCst);
        // The parent blocks in joining its children.
        children
            .into_iter()
            .map(|c| c.join().unwrap())
            .collect::<Vec<_>>()
    });
    let start = Instant::now();
    while started.load(Ordering::SeqCst) < 1 + 2 * OPS.len() {
        assert!(start.elapsed() < LIMIT, "the tree never started");
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(50)); // every task reaches its park
    assert!(log.lock().unwrap().is_empty(), "a task ended early");

    let cancelled_at = Instant::now();
    root.cancel();
    let results = join_within(parent, LIMIT).unwrap();
    let joined = cancelled_at.elapsed();
    // The parent was cancelled too: its own bind returns the error (its children's results
    // are gone with it).
    assert_eq!(results.unwrap_err(), ContextError::Cancelled);
    let start = Instant::now();
    while log.lock().unwrap().len() < 1 + 2 * OPS.len() {
        assert!(start.elapsed() < LIMIT, "some tasks never unwound");
        std::thread::sleep(Duration::from_millis(1));
    }
    let log = log.lock().unwrap();
    let mut worst = Duration::ZERO;
    for (what, at) in log.iter() {
        let took = at.duration_since(cancelled_at);
        worst = worst.max(took);
        assert!(took < LOOSE, "{what}: unwound {took:?} after the cancel");
    }
    println!(
        "context tree: {} tasks unwound, the last {worst:?} after cancel(); parent joined in \
         {joined:?}",
        log.len()
    );
    drop(log);
    assert!(shared.sem.try_acquire().is_none());
}

#[test]
fn a_bound_wait_ends_with_the_context_error_not_its_own_timeout() {
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    rt.block_on(|| {
        let (_tx, rx) = weft::chan::bounded::<u32>(0);
        // The clock starts before the context's: its deadline is 20 ms after its making, so a
        // start read after it (a preemption between the two) measured under 20 ms once.
        let start = Instant::now();
        let ctx = Context::with_timeout(Duration::from_millis(20));
        // The operation's own timeout is longer: the context's deadline comes first.
        let r = ctx.bind(|| rx.recv_timeout(Duration::from_secs(3600)));
        let took = start.elapsed();
        println!("deadline 20 ms: the bound recv ended after {took:?}");
        assert_eq!(r, Err(ContextError::DeadlineExceeded));
        assert!(took >= Duration::from_millis(20) && took < Duration::from_millis(20) + LOOSE);

        // The operation's own timeout first: its own error, the context still active.
        let ctx = Context::with_timeout(Duration::from_secs(3600));
        let r = ctx.bind(|| rx.recv_timeout(Duration::from_millis(5)));
        assert_eq!(r, Ok(Err(weft::chan::RecvTimeoutError::Timeout)));
        assert_eq!(ctx.err(), None);

        // A bind on an ended context runs nothing.
        ctx.cancel();
        assert_eq!(
            ctx.bind(|| unreachable!()),
            Err::<(), _>(ContextError::Cancelled)
        );
    });
}

#[test]
fn a_child_ends_with_its_parent_but_not_the_reverse() {
    let parent = Context::new();
    let child = parent.child();
    let grandchild = child.child_with_timeout(Duration::from_secs(3600));
    child.cancel();
    assert_eq!(parent.err(), None);
    assert_eq!(grandchild.err(), Some(ContextError::Cancelled));
    let other = parent.child();
    parent.cancel();
    assert_eq!(other.err(), Some(ContextError::Cancelled));
    // A child made after its parent ended starts ended.
    assert_eq!(parent.child().err(), Some(ContextError::Cancelled));
    // A child's deadline is never later than its parent's.
    let p = Context::with_timeout(Duration::from_millis(10));
    assert_eq!(
        p.child_with_timeout(Duration::from_secs(10)).deadline(),
        p.deadline()
    );
}

#[test]
fn a_plain_thread_bound_to_a_context_is_woken_by_its_cancel() {
    let ctx = Context::new();
    let (_tx, rx) = weft::chan::bounded::<u32>(0);
    let c = ctx.clone();
    let thread = std::thread::spawn(move || {
        let a = c.bind(|| rx.recv());
        let b = c.bind(|| weft::time::sleep(Duration::from_secs(3600)));
        (a, b)
    });
    std::thread::sleep(Duration::from_millis(20));
    ctx.cancel();
    let (a, b) = common::within(LIMIT, move || thread.join().unwrap());
    assert_eq!(a, Err(ContextError::Cancelled));
    assert_eq!(b, Err(ContextError::Cancelled));
}

#[test]
fn select_waits_on_a_context_like_a_channel() {
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    rt.block_on(|| {
        let ctx = Context::new();
        let c = ctx.clone();
        weft::spawn(move || {
            weft::time::sleep(Duration::from_millis(5));
            c.cancel();
        });
        let (_tx, rx) = weft::chan::bounded::<u32>(0);
        let got = weft::select! {
            recv(rx) -> _ => "value",
            recv(ctx.done()) -> _ => "done",
            after(LIMIT) => "timeout",
        };
        assert_eq!(got, "done");
        assert_eq!(ctx.err(), Some(ContextError::Cancelled));
    });
}

#[test]
fn nested_binds_unwind_to_the_cancelled_one() {
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    rt.block_on(|| {
        let outer = Context::new();
        let inner = Context::new();
        let (_tx, rx) = weft::chan::bounded::<u32>(0);
        let i = inner.clone();
        weft::spawn(move || {
            weft::time::sleep(Duration::from_millis(5));
            i.cancel();
        });
        let r = outer.bind(|| {
            let r = inner.bind(|| rx.recv());
            assert_eq!(r, Err(ContextError::Cancelled));
            // Still bound to `outer`, which is active: a wait works as usual.
            weft::time::sleep(Duration::from_millis(1));
            7
        });
        assert_eq!(r, Ok(7));
    });
}

#[test]
fn a_context_ends_a_bound_accept_loop_and_its_connection_readers() {
    use std::io::Read;
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let listener = weft::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let ctx = Context::new();
    let readers = Arc::new(AtomicUsize::new(0));
    let _entered = rt.handle().enter();
    let (c, r) = (ctx.clone(), readers.clone());
    let server = ctx.spawn(move || loop {
        let (mut conn, _) = listener.accept().unwrap();
        let r = r.clone();
        c.child().spawn(move || {
            r.fetch_add(1, Ordering::SeqCst);
            let mut buf = [0u8; 64];
            while conn.read(&mut buf).unwrap() > 0 {}
        });
    });
    let clients: Vec<_> = (0..3)
        .map(|_| std::net::TcpStream::connect(addr).unwrap())
        .collect();
    let start = Instant::now();
    while readers.load(Ordering::SeqCst) < 3 {
        assert!(start.elapsed() < LIMIT, "the readers never started");
        std::thread::sleep(Duration::from_millis(1));
    }
    let at = Instant::now();
    ctx.cancel();
    assert_eq!(
        join_within(server, LIMIT).unwrap(),
        Err(ContextError::Cancelled)
    );
    println!("accept loop ended {:?} after cancel()", at.elapsed());
    drop(clients);
}
