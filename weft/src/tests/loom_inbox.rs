//! sched/inbox.rs: a read that follows an orphaned one never overtakes the orphan's bytes
//! (invariant 2), and no byte pushed is lost.

use std::mem::MaybeUninit;

use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;

use crate::sched::inbox::{InboxState, Queued};

/// The inbox as a readiness holds it: the state word, and the bytes under a lock.
#[derive(Default)]
struct Inbox {
    state: InboxState,
    queue: Mutex<Option<Box<Queued>>>,
}

impl Inbox {
    fn push(&self, bytes: &[u8]) {
        let mut queue = self.queue.lock().unwrap();
        self.state.push(&mut queue, bytes.to_vec());
    }

    fn take(&self, buf: &mut [MaybeUninit<u8>]) -> Option<std::io::Result<usize>> {
        let mut queue = self.queue.lock().unwrap();
        self.state.take(&mut queue, buf)
    }
}

#[test]
fn loom_inbox_a_read_never_overtakes_an_orphan() {
    loom::model(|| {
        let inbox = Arc::new(Inbox::default());
        // The socket: newer bytes, readable at any time.
        let socket_has_new = Arc::new(AtomicBool::new(true));
        inbox.state.orphan_started();
        // The orphan's worker reaps it: its bytes go to the inbox, then the count drops.
        let reaper = {
            let inbox = inbox.clone();
            thread::spawn(move || {
                inbox.push(b"old");
                inbox.state.orphan_ended();
            })
        };
        // The next reader, on another thread: the count first, then the inbox, then the
        // socket (net/mod.rs `Source::do_read`).
        let mut got = Vec::new();
        while got.len() < 6 {
            if inbox.state.has_orphans() {
                thread::yield_now();
                continue;
            }
            let mut buf = [MaybeUninit::<u8>::uninit(); 8];
            if inbox.state.is_full() {
                if let Some(Ok(n)) = inbox.take(&mut buf) {
                    // SAFETY: `take` initialized the first `n` bytes.
                    got.extend(buf[..n].iter().map(|b| unsafe { b.assume_init() }));
                    continue;
                }
            }
            if socket_has_new.swap(false, Ordering::AcqRel) {
                got.extend_from_slice(b"new");
            }
        }
        assert_eq!(got, b"oldnew");
        reaper.join().unwrap();
    });
}

#[test]
fn loom_inbox_bytes_pushed_while_a_reader_takes_are_kept() {
    loom::model(|| {
        let inbox = Arc::new(Inbox::default());
        inbox.push(b"ab");
        let pusher = {
            let inbox = inbox.clone();
            thread::spawn(move || inbox.push(b"cd"))
        };
        let mut got = Vec::new();
        let mut buf = [MaybeUninit::<u8>::uninit(); 1];
        while got.len() < 4 {
            if !inbox.state.is_full() {
                thread::yield_now();
                continue;
            }
            if let Some(Ok(n)) = inbox.take(&mut buf) {
                // SAFETY: `take` initialized the first `n` bytes.
                got.extend(buf[..n].iter().map(|b| unsafe { b.assume_init() }));
            }
        }
        assert_eq!(got, b"abcd");
        pusher.join().unwrap();
    });
}
