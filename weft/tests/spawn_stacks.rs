//! Where a spawned task's stack comes from: the worker that starts it takes one from its own
//! warm slots (sched/worker.rs, `Spawner::take_slot`), so a burst of short tasks reuses a few
//! stacks; a task that can get no stack then does not run, and its join says why.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

mod common;

/// The env var that makes this binary run `no_stack_child` for real.
const CHILD_ENV: &str = "WEFT_TEST_NO_STACK_CHILD";

/// The slot a task runs on, as the index of its 256 KiB window of address space.
fn current_slot() -> usize {
    let local = 0u8;
    std::hint::black_box(&local) as *const u8 as usize / (256 << 10)
}

#[test]
fn a_burst_of_short_tasks_reuses_a_few_warm_stacks() {
    if !weft::stack::guards_are_markers().unwrap_or(true) {
        return; // mprotect guards: each spawn takes its slot (README, "Supported targets")
    }
    const TASKS: usize = 2_000;
    let rt = weft::Runtime::builder()
        .workers(1)
        .stack_size(256 << 10)
        .build()
        .unwrap();
    let slots = Arc::new(Mutex::new(HashSet::new()));
    let seen = slots.clone();
    rt.block_on(move || {
        // One worker: every task is queued before the first one runs, so each would hold a
        // slot of its own if the spawn took it.
        let handles: Vec<_> = (0..TASKS)
            .map(|_| {
                let seen = seen.clone();
                weft::spawn(move || {
                    seen.lock().unwrap().insert(current_slot());
                })
            })
            .collect();
        for handle in handles {
            handle.join().unwrap();
        }
    });
    let distinct = slots.lock().unwrap().len();
    // A handful (not 1): the first stacks come in a batch, and under AddressSanitizer locals
    // may live on its own fake stacks. Taken at spawn, it was one per task.
    assert!(
        distinct <= 16,
        "{TASKS} short tasks, run one after the other, used {distinct} stacks"
    );
}

/// Run by `a_task_that_gets_no_stack_fails_its_join_with_the_reason` in a process of its own:
/// caps the address space, then spawns a task of a size class that has no region yet.
#[test]
fn no_stack_child() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let rt = weft::Runtime::builder().workers(1).build().unwrap();
    let outcome = rt.block_on(|| {
        // Spawned first, so the guard kind is known and the next spawn defers its slot.
        weft::spawn(|| ()).join().unwrap();
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let vm_kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmSize:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap();
        // Room for the heap to grow, none for a new 32 GiB region of stack slots. The hard
        // limit stays as it is (raising it needs a privilege).
        let mut old = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit fills the struct we pass.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut old) }, 0);
        let limit = libc::rlimit {
            rlim_cur: ((vm_kib << 10) + (1 << 30)).min(old.rlim_max),
            rlim_max: old.rlim_max,
        };
        // SAFETY: setrlimit with a valid struct has no memory-safety preconditions.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) }, 0);
        let handle = weft::task::Builder::new()
            .stack_size(4 << 20)
            .spawn(|| "ran")
            .expect("the spawn itself succeeds: the slot is taken at start");
        let outcome = handle.join();
        // Lift the cap again for the runtime's shutdown.
        // SAFETY: as above.
        unsafe { libc::setrlimit(libc::RLIMIT_AS, &old) };
        outcome.map_err(|payload| {
            payload
                .downcast_ref::<String>()
                .cloned()
                .unwrap_or_else(|| "a payload that is not a String".into())
        })
    });
    match outcome {
        Ok(v) => println!("RESULT ran: {v}"),
        Err(message) => println!("RESULT failed: {message}"),
    }
}

#[test]
fn a_task_that_gets_no_stack_fails_its_join_with_the_reason() {
    if !weft::stack::guards_are_markers().unwrap_or(true) {
        return;
    }
    let (result, stderr) = common::child_result("no_stack_child", CHILD_ENV);
    assert!(
        result.starts_with("failed: weft: cannot start task") && result.contains("no stack"),
        "{result}\n{stderr}"
    );
    assert!(
        stderr.contains("no stack"),
        "the reason is printed: {stderr}"
    );
}
