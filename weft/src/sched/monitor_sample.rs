//! Where a stuck worker's task is: the monitor's best-effort backtrace of a task that computes
//! without parking, taken by interrupting the worker's thread with [`SAMPLE_SIGNAL`].
//!
//! Owns: the process's handler for [`SAMPLE_SIGNAL`] and the one sample buffer, `BUFFER`.
//!
//! Invariants:
//! 1. The handler allocates nothing, takes no lock and calls only `gettid`: it copies the
//!    interrupted instruction pointer and a bounded slice of the interrupted stack into
//!    `BUFFER`, then returns; the monitor symbolizes outside it.
//! 2. `BUFFER` has one user at a time, named by `STATE`: IDLE (none) → CLAIMED (the monitor
//!    whose compare-exchange won; it writes `TARGET`) → REQUESTED → WRITING (the handler on
//!    the thread `TARGET` names, by compare-exchange) → DONE → the monitor reads, then IDLE.
//!    A monitor that gives up takes REQUESTED back to CLAIMED by compare-exchange, so a late
//!    handler finds nothing to write; if that fails the handler is writing, and it waits.
//! 3. Only a task's stack is copied, from the interrupted stack pointer up to its slot's top
//!    (at most [`COPY_WORDS`] words): the running task's frames, all mapped (stack/compact.rs
//!    invariant 4 restored them before it ran).
//!
//! May call: `stack` (slot bounds, the handler's pc), `debug` (symbolizing). Called by:
//! `monitor.rs`, for a worker whose task is computing.
//!
//! Why scan the copy for return addresses instead of unwinding the stuck thread: the monitor
//! must not walk another thread's live stack, and the unwinder (libgcc) is not
//! async-signal-safe, so neither may the handler run it. A word of the copy that points into
//! executable memory just after a call instruction is taken as a return address; this can
//! include stale ones from dead frames, so the report says the frames are found by scanning.
//! Only computing tasks are sampled: a signal would interrupt a blocking system call
//! (`SA_RESTART` restarts most, not all).

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicI32, AtomicU8, Ordering};
use std::sync::Once;
use std::time::{Duration, Instant};

use crate::observe::backtrace::{self, Backtrace};

/// The real-time signal the monitor sends a stuck worker (glibc keeps the first few below
/// `SIGRTMIN` for itself).
fn sample_signal() -> libc::c_int {
    libc::SIGRTMIN() + 7
}

/// Words of stack the handler copies (invariant 3): 32 KiB.
const COPY_WORDS: usize = 4096;
/// The most frames a report shows.
const MAX_FRAMES: usize = 32;
/// How long the monitor waits for the handler to run.
const WAIT: Duration = Duration::from_millis(100);

const IDLE: u8 = 0;
const CLAIMED: u8 = 1;
const REQUESTED: u8 = 2;
const WRITING: u8 = 3;
const DONE: u8 = 4;

static STATE: AtomicU8 = AtomicU8::new(IDLE);
static TARGET: AtomicI32 = AtomicI32::new(0);

struct Sample {
    pc: usize,
    len: usize,
    words: [usize; COPY_WORDS],
}

struct Buffer(UnsafeCell<Sample>);

// SAFETY: invariant 2: one user at a time, handed over through `STATE`.
unsafe impl Sync for Buffer {}

static BUFFER: Buffer = Buffer(UnsafeCell::new(Sample {
    pc: 0,
    len: 0,
    words: [0; COPY_WORDS],
}));

fn install() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // SAFETY: a zeroed sigaction is valid; we fill in the handler, flags and an empty mask.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = handle_sample as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sample_signal(), &action, std::ptr::null_mut());
        }
    });
}

/// The handler (invariant 1).
extern "C" fn handle_sample(
    _signal: libc::c_int,
    _info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    // SAFETY: gettid has no preconditions and is async-signal-safe.
    let tid = unsafe { libc::gettid() };
    if STATE.load(Ordering::Acquire) != REQUESTED || TARGET.load(Ordering::Relaxed) != tid {
        return;
    }
    // Acquire: pairs with the monitor's Release store of REQUESTED (TARGET is written first).
    if STATE
        .compare_exchange(REQUESTED, WRITING, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    // SAFETY: invariant 2: WRITING makes this handler the buffer's only user.
    let sample = unsafe { &mut *BUFFER.0.get() };
    let (pc, sp) = crate::stack::context_pc_sp(context).unwrap_or((0, 0));
    sample.pc = pc;
    sample.len = 0;
    // `slot_of` reads the region table's atomics only: async-signal-safe.
    if sp != 0 {
        if let Some((start, size)) = crate::stack::slot_of(sp) {
            let from = sp & !7;
            let words = ((start + size).saturating_sub(from) / 8).min(COPY_WORDS);
            // SAFETY: invariant 3: `[sp, slot top)` is the running task's live stack; the
            // buffer holds `words` words. Uninstrumented: ASan would flag the frames' redzones.
            unsafe {
                crate::stack::copy_stack_bytes(sample.words.as_mut_ptr().cast(), from, words * 8)
            };
            sample.len = words;
        }
    }
    // Release: pairs with the monitor's Acquire load of DONE.
    STATE.store(DONE, Ordering::Release);
}

/// Interrupts the worker thread `tid` and returns the task's frames, unsymbolized: the
/// interrupted instruction, then return addresses found on its stack. `None` if another
/// sample is in progress or the thread did not answer in time. Cheap next to [`symbolize`],
/// which the monitor calls only for a report it makes.
pub(crate) fn sample(tid: i32) -> Option<Vec<usize>> {
    install();
    STATE
        .compare_exchange(IDLE, CLAIMED, Ordering::Acquire, Ordering::Relaxed)
        .ok()?;
    TARGET.store(tid, Ordering::Relaxed);
    // Release: pairs with the handler's Acquire load (it must see TARGET).
    STATE.store(REQUESTED, Ordering::Release);
    // SAFETY: tgkill to a thread of this process; a stale tid gets ESRCH, harmless.
    unsafe { libc::syscall(libc::SYS_tgkill, libc::getpid(), tid, sample_signal()) };
    let give_up = Instant::now() + WAIT;
    loop {
        // Acquire: pairs with the handler's Release store of DONE.
        if STATE.load(Ordering::Acquire) == DONE {
            break;
        }
        if Instant::now() >= give_up
            && STATE
                .compare_exchange(REQUESTED, CLAIMED, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            STATE.store(IDLE, Ordering::Release);
            return None;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let (pc, words) = {
        // SAFETY: invariant 2: DONE hands the buffer to this monitor until it stores IDLE.
        let sample = unsafe { &*BUFFER.0.get() };
        (sample.pc, sample.words[..sample.len].to_vec())
    };
    STATE.store(IDLE, Ordering::Release);
    let executable = executable_ranges();
    let mut ips = vec![pc];
    for &word in &words {
        if ips.len() == MAX_FRAMES {
            break;
        }
        if executable
            .iter()
            .any(|&(lo, hi)| word >= lo + 8 && word < hi)
            && after_call(word)
        {
            ips.push(word);
        }
    }
    Some(ips)
}

/// Names the frames of a [`sample`]: the first time in a process, seconds of CPU and tens of
/// megabytes, parsing the binary's debug info.
pub(crate) fn symbolize(ips: &[usize]) -> Backtrace {
    let backtrace = backtrace::report_backtrace(ips, true);
    // A running program keeps nothing of it: the symbolizer's caches hold the parsed debug
    // info (≈40 MB for weft's own release binaries with debuginfo, measured as the echo
    // server's RSS after one report), which a process that only wanted one warning should
    // not carry for the rest of its life.
    backtrace::release_symbolizer();
    backtrace
}

/// Executable mappings of this process, from `/proc/self/maps`.
fn executable_ranges() -> Vec<(usize, usize)> {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return Vec::new();
    };
    maps.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let range = fields.next()?;
            let perms = fields.next()?;
            if !perms.contains('x') {
                return None;
            }
            let (lo, hi) = range.split_once('-')?;
            Some((
                usize::from_str_radix(lo, 16).ok()?,
                usize::from_str_radix(hi, 16).ok()?,
            ))
        })
        .collect()
}

/// Whether the bytes before `addr` end with a call instruction (x86-64: `call rel32`, or an
/// indirect `call` through a register or memory); always true elsewhere. Read with
/// `process_vm_readv`, which fails instead of faulting if the code was unmapped meanwhile.
fn after_call(addr: usize) -> bool {
    if !cfg!(target_arch = "x86_64") {
        return true;
    }
    let mut bytes = [0u8; 8];
    let local = libc::iovec {
        iov_base: bytes.as_mut_ptr().cast(),
        iov_len: 8,
    };
    let remote = libc::iovec {
        iov_base: (addr - 8) as *mut libc::c_void,
        iov_len: 8,
    };
    // SAFETY: reads 8 bytes of this process into our own buffer; faults become errors.
    let read = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if read != 8 {
        return false;
    }
    // bytes[8 - n] is the first byte of an n-byte instruction ending at `addr`.
    let indirect = |n: usize| bytes[8 - n] == 0xff && (bytes[9 - n] >> 3) & 7 == 2;
    bytes[3] == 0xe8 || indirect(2) || indirect(3) || indirect(6) || indirect(7)
}
