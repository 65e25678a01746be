//! `weft::signal`: a task parks until a listed signal arrives; every subscription gets it; a
//! wait ends with its `Context`; uncatchable signals are refused; and a signal nobody listens
//! for any more has its default action again (checked in a child process). Each test uses a
//! signal of its own: the tests of this binary run at once in one process.

mod common;

use std::time::{Duration, Instant};

use weft::context::{Context, ContextError};
use weft::signal::{Signals, SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGWINCH};

const LIMIT: Duration = Duration::from_secs(20);

fn raise(signal: i32) {
    // SAFETY: raising a signal this process has a handler for (or wants the default of).
    assert_eq!(unsafe { libc::raise(signal) }, 0);
}

#[test]
fn a_task_parks_until_the_signal_arrives_and_every_subscription_gets_it() {
    let rt = weft::Runtime::builder().workers(2).build().unwrap();
    let first = Signals::new(&[SIGUSR1, SIGUSR2]).unwrap();
    let second = Signals::new(&[SIGUSR1]).unwrap();
    let waiter = rt.spawn(move || (first.recv(), second.recv()));
    std::thread::sleep(Duration::from_millis(20));
    assert!(!waiter.is_finished(), "returned before any signal");
    raise(SIGUSR1);
    let got = common::join_within(waiter, LIMIT).unwrap();
    assert_eq!(got, (SIGUSR1, SIGUSR1));
}

#[test]
fn ctrl_c_returns_at_the_next_sigint() {
    // Held for the whole test, so a SIGINT raised before `ctrl_c` subscribed is not fatal.
    let keep = Signals::new(&[SIGINT]).unwrap();
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    let waiter = rt.spawn(|| weft::signal::ctrl_c().unwrap());
    let deadline = Instant::now() + LIMIT;
    while !waiter.is_finished() {
        assert!(Instant::now() < deadline, "ctrl_c never returned");
        raise(SIGINT);
        std::thread::sleep(Duration::from_millis(5));
    }
    common::join_within(waiter, LIMIT).unwrap();
    assert_eq!(keep.try_recv(), Some(SIGINT));
}

#[test]
fn a_wait_in_select_and_a_wait_bound_to_a_context() {
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    let hup = Signals::new(&[SIGHUP]).unwrap();
    let (timed_out, selected) = rt.block_on(|| {
        let timed_out = Context::with_timeout(Duration::from_millis(20)).bind(|| hup.recv());
        raise(SIGHUP);
        let selected = weft::select! {
            recv(hup.receiver()) -> signal => signal.unwrap(),
            recv(weft::time::after(LIMIT)) -> _ => 0,
        };
        (timed_out, selected)
    });
    assert_eq!(timed_out, Err(ContextError::DeadlineExceeded));
    assert_eq!(selected, SIGHUP);
}

#[test]
fn a_plain_thread_may_wait_too() {
    let winch = Signals::new(&[SIGWINCH]).unwrap();
    raise(SIGWINCH);
    assert_eq!(winch.recv(), SIGWINCH);
}

#[test]
fn signals_that_cannot_be_waited_for_are_refused() {
    for bad in [&[][..], &[libc::SIGKILL], &[libc::SIGSEGV], &[0], &[1000]] {
        let err = Signals::new(bad).unwrap_err();
        assert_eq!(
            err.kind(),
            std::io::ErrorKind::InvalidInput,
            "{bad:?}: {err}"
        );
        assert!(err.to_string().starts_with("weft: signal: "), "{err}");
    }
}

#[test]
fn a_signal_no_one_listens_for_any_more_has_its_default_action() {
    if std::env::var_os("WEFT_SIGNAL_CHILD").is_some() {
        // The child: listen, stop listening, then SIGTERM must end it as it would without weft.
        drop(Signals::new(&[SIGTERM]).unwrap());
        raise(SIGTERM);
        std::thread::sleep(Duration::from_secs(10));
        std::process::exit(3); // not reached when the default action ran
    }
    use std::os::unix::process::ExitStatusExt;
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_signal_no_one_listens_for_any_more_has_its_default_action",
            "--test-threads=1",
        ])
        .env("WEFT_SIGNAL_CHILD", "1")
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.signal(), Some(SIGTERM), "{status}");
}
