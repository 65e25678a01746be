//! The stack-overflow handler: a task that touches its guard page is named, then the process
//! aborts — like Go's "fatal error: stack overflow", never silent corruption of a neighbour.
//!
//! Owns: the process's SIGSEGV/SIGBUS disposition while weft runs (chaining to the previous
//! one for faults that are not ours), each worker's alternate signal stack, and the
//! thread-local pointer to the running task's description.
//!
//! Invariants:
//! 1. The handler runs on an alternate stack (`SA_ONSTACK`): the faulting stack has no room.
//! 2. The report's first line — the task, its stack size, the fault address — is formatted
//!    into a fixed buffer and written with `write(2)` before anything else: no allocation, no
//!    lock, so it is never lost. Only then, best effort, comes the backtrace ("Why a
//!    backtrace in a signal handler" below).
//! 3. `RUNNING` points at a live description while its task runs on this thread, and is null
//!    otherwise (the worker sets and clears it around each resume).
//!
//! May call: `region.rs`, libc, the `symbolize` function `install_handler` was given. Called
//! by: `sched` (installs the handler with its symbolizer, makes alternate stacks, sets
//! `RUNNING`).
//!
//! Why our own handler: std's handler only knows thread stacks (it dies with a bare SIGSEGV on a
//! task's guard page), and corosensei installs none.
//!
//! Why a backtrace in a signal handler: the process aborts right after, and where the task
//! recursed is what its author needs. Unwinding (libgcc's `_Unwind_Backtrace`, through the
//! kernel's signal frame into the task's frames) and symbolizing (`install_handler`'s `symbolize`:
//! parses debug info, allocates) are not async-signal-safe: a lock the faulting thread held —
//! the allocator's, the loader's — would hang them. So the handler (a) writes the essential
//! line first, (b) arms `alarm(2)` with SIGALRM at its default action, so a hang ends the
//! process after [`BACKTRACE_TIME_LIMIT_S`] instead of never, (c) writes the raw instruction
//! pointers before symbolizing them, and (d) runs all this on a larger alternate stack
//! ([`ALT_STACK_SIZE`]), which the symbolizer's deep calls need.

use std::cell::Cell;
use std::fmt::{self, Write as _};
use std::sync::{Once, OnceLock};

use super::region;

/// What the handler prints about the task that overflowed.
pub(crate) trait DescribeTask {
    /// Writes `task 12 "name" (spawned at file:line:col` and no more; must not allocate.
    fn describe(&self, out: &mut dyn fmt::Write) -> fmt::Result;
}

thread_local! {
    /// The task running on this thread (invariant 3).
    static RUNNING: Cell<Option<*const dyn DescribeTask>> = const { Cell::new(None) };
}

/// Marks `task` as running on this thread until the returned guard drops.
pub(crate) fn set_running(task: Option<*const dyn DescribeTask>) {
    RUNNING.with(|r| r.set(task));
}

/// Bytes of each worker's alternate signal stack: room to format one line plus libc's needs,
/// and to unwind and symbolize the overflowing task's frames. Mapped lazily: only the pages
/// a handler touches are ever backed.
const ALT_STACK_SIZE: usize = 256 << 10;

/// Seconds the overflow report's backtrace may take before SIGALRM ends the process.
const BACKTRACE_TIME_LIMIT_S: u32 = 10;

/// The most frames the overflow report shows.
const MAX_REPORT_FRAMES: usize = 64;

/// The previous SIGSEGV and SIGBUS actions, for faults outside task guard pages.
static mut PREVIOUS_SEGV: std::mem::MaybeUninit<libc::sigaction> = std::mem::MaybeUninit::zeroed();
static mut PREVIOUS_BUS: std::mem::MaybeUninit<libc::sigaction> = std::mem::MaybeUninit::zeroed();

/// Turns the overflowing task's raw frames into text (`install_handler`'s argument).
pub(crate) type Symbolize = fn(&[usize]) -> String;

/// How the report symbolizes its frames: set by the first `install_handler`, before the
/// handler can run.
static SYMBOLIZE: OnceLock<Symbolize> = OnceLock::new();

/// Installs the handler once per process. `symbolize` turns the overflowing task's frames
/// (innermost first; the first is the faulting instruction, the others return addresses)
/// into the text of the report's backtrace: the layers above give it (the stack layer names
/// none of them), and the first call's is kept.
pub(crate) fn install_handler(symbolize: Symbolize) {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let _ = SYMBOLIZE.set(symbolize);
        for (signal, previous) in [
            (libc::SIGSEGV, &raw mut PREVIOUS_SEGV),
            (libc::SIGBUS, &raw mut PREVIOUS_BUS),
        ] {
            // SAFETY: a zeroed sigaction is a valid value; we fill in the handler, flags and
            // an empty mask; `previous` is written once here, inside `call_once`, before the
            // handler can run, and only read afterwards.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = handle_fault as *const () as usize;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                libc::sigemptyset(&mut action.sa_mask);
                libc::sigaction(signal, &action, (*previous).as_mut_ptr());
            }
        }
    });
}

/// The handler (invariants 1 and 2).
extern "C" fn handle_fault(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    if let Some((_, slot_size)) = region::guard_page_of(addr) {
        let mut line = LineBuffer::new();
        let _ = write!(line, "weft: fatal error: stack overflow in ");
        let running = RUNNING.with(|r| r.get());
        match running {
            Some(task) => {
                // SAFETY: invariant 3: the pointer is live while its task runs on this thread,
                // and the fault happened while it ran.
                let task = unsafe { &*task };
                let _ = task.describe(&mut line);
            }
            None => {
                let _ = write!(line, "a task (spawned at an unknown site");
            }
        }
        let _ = writeln!(line, ", stack {} KiB); fault at {addr:#x}", slot_size >> 10);
        line.write_to_stderr();
        write_backtrace(context);
        // SAFETY: abort is async-signal-safe.
        unsafe { libc::abort() };
    }
    // Not ours: hand it on.
    let previous = if signal == libc::SIGSEGV {
        &raw const PREVIOUS_SEGV
    } else {
        &raw const PREVIOUS_BUS
    };
    // SAFETY: written once in `install_handler` before this handler was installed.
    let previous = unsafe { (*previous).assume_init_ref() };
    let handler = previous.sa_sigaction;
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        // Restore the default and return: the faulting instruction runs again and the
        // kernel ends the process with the signal, as it would have without weft.
        // SAFETY: resetting a disposition is async-signal-safe.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    } else if previous.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler was installed with SA_SIGINFO, so it has this type.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(handler) };
        f(signal, info, context);
    } else {
        // SAFETY: a handler installed without SA_SIGINFO takes only the signal number.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
        f(signal);
    }
}

/// The instruction and stack pointers of the interrupted context a signal handler got.
pub(crate) fn context_pc_sp(context: *mut libc::c_void) -> Option<(usize, usize)> {
    if context.is_null() {
        return None;
    }
    let context = context.cast::<libc::ucontext_t>();
    // SAFETY: the kernel passes a valid ucontext_t to SA_SIGINFO handlers; we read two fields.
    #[cfg(target_arch = "x86_64")]
    let (pc, sp) = unsafe {
        let gregs = &(*context).uc_mcontext.gregs;
        (gregs[libc::REG_RIP as usize], gregs[libc::REG_RSP as usize])
    };
    // SAFETY: as above.
    #[cfg(target_arch = "aarch64")]
    let (pc, sp) = unsafe { ((*context).uc_mcontext.pc, (*context).uc_mcontext.sp) };
    Some((pc as usize, sp as usize))
}

/// The overflow report's backtrace, after its first line (module doc, "Why a backtrace in a
/// signal handler"): the frames from the faulting instruction outwards.
fn write_backtrace(context: *mut libc::c_void) {
    // SAFETY: sigaltstack with a null new stack only reads the current one (async-signal-safe).
    let room = unsafe {
        let mut current: libc::stack_t = std::mem::zeroed();
        libc::sigaltstack(std::ptr::null(), &mut current) == 0 && current.ss_size >= ALT_STACK_SIZE
    };
    if !room {
        // Not one of weft's alternate stacks (a thread that is no worker touched a guard
        // page): std's is a few KiB, and unwinding on it would overflow it.
        let message = "weft: (no backtrace: this thread's signal stack is too small)\n";
        // SAFETY: writes a static string; write(2) is async-signal-safe.
        unsafe { libc::write(2, message.as_ptr().cast(), message.len()) };
        return;
    }
    // SAFETY: resetting a disposition and arming the alarm are async-signal-safe.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(libc::SIGALRM, &action, std::ptr::null_mut());
        libc::alarm(BACKTRACE_TIME_LIMIT_S);
    }
    let pc = context_pc_sp(context).map(|(pc, _)| pc);
    let mut ips = [0usize; MAX_REPORT_FRAMES];
    let mut len = 0;
    let mut reached = false;
    // SAFETY: `trace_unsynchronized` asks that no other thread use the unwinder unsynchronised
    // where it is not thread-safe (dbghelp on Windows); libgcc's is thread-safe. The handler's
    // own frames and the signal trampoline come first: skipped until the faulting pc.
    unsafe {
        backtrace::trace_unsynchronized(|frame| {
            let ip = frame.ip() as usize;
            if !reached {
                reached = Some(ip) == pc;
                if !reached {
                    return true;
                }
            }
            ips[len] = ip;
            len += 1;
            len < MAX_REPORT_FRAMES
        });
    }
    if !reached {
        // The unwinder did not cross the signal frame: the faulting pc at least.
        let Some(pc) = pc else { return };
        ips[0] = pc;
        len = 1;
    }
    let mut line = LineBuffer::new();
    let _ = write!(line, "weft: the overflowing task's frames, raw:");
    for ip in &ips[..len] {
        if line.len + 20 > line.bytes.len() {
            let _ = writeln!(line);
            line.write_to_stderr();
            line = LineBuffer::new();
            let _ = write!(line, "weft:");
        }
        let _ = write!(line, " {ip:#x}");
    }
    let _ = writeln!(line);
    line.write_to_stderr();
    let Some(symbolize) = SYMBOLIZE.get() else {
        return;
    };
    let text = format!(
        "weft: where the task overflowed:\n{}",
        symbolize(&ips[..len])
    );
    // SAFETY: writes initialised bytes of our own string; write(2) is async-signal-safe.
    unsafe { libc::write(2, text.as_ptr().cast(), text.len()) };
}

/// A fixed buffer that `fmt::Write` can fill without allocating (invariant 2).
pub(crate) struct LineBuffer {
    bytes: [u8; 512],
    len: usize,
}

impl LineBuffer {
    pub(crate) fn new() -> Self {
        LineBuffer {
            bytes: [0; 512],
            len: 0,
        }
    }

    pub(crate) fn write_to_stderr(&self) {
        // SAFETY: writes initialised bytes of our own buffer; write(2) is async-signal-safe.
        unsafe { libc::write(2, self.bytes.as_ptr().cast(), self.len) };
    }
}

impl fmt::Write for LineBuffer {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let n = s.len().min(self.bytes.len() - self.len);
        self.bytes[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

/// An alternate signal stack for the current thread, replaced back on drop (invariant 1).
pub(crate) struct AltStack {
    mapping: *mut libc::c_void,
    previous: libc::stack_t,
}

impl AltStack {
    /// Maps a guarded alternate stack and makes it this thread's.
    pub(crate) fn install() -> AltStack {
        let page = region::page_size();
        let len = ALT_STACK_SIZE + page;
        // SAFETY: a fresh anonymous mapping; then we guard its lowest page and register the
        // rest with sigaltstack. `previous` receives the old setting.
        unsafe {
            let mapping = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert!(
                mapping != libc::MAP_FAILED,
                "weft: cannot map an alternate signal stack"
            );
            libc::mprotect(mapping, page, libc::PROT_NONE);
            let stack = libc::stack_t {
                ss_sp: mapping.cast::<u8>().add(page).cast(),
                ss_flags: 0,
                ss_size: ALT_STACK_SIZE,
            };
            let mut previous: libc::stack_t = std::mem::zeroed();
            libc::sigaltstack(&stack, &mut previous);
            AltStack { mapping, previous }
        }
    }
}

impl Drop for AltStack {
    fn drop(&mut self) {
        // SAFETY: restore the previous alternate stack (or none), then unmap ours, which no
        // signal handler can be using since this thread is running this code on its own stack.
        unsafe {
            let mut previous = self.previous;
            if previous.ss_flags & libc::SS_DISABLE != 0 || previous.ss_sp.is_null() {
                previous = libc::stack_t {
                    ss_sp: std::ptr::null_mut(),
                    ss_flags: libc::SS_DISABLE,
                    ss_size: 0,
                };
            }
            libc::sigaltstack(&previous, std::ptr::null_mut());
            libc::munmap(self.mapping, ALT_STACK_SIZE + region::page_size());
        }
    }
}
